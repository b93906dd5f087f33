//! The backend traits: where segments come from ([`Backend`]) and, for backends that can map
//! pages into reserved address space, the interface expandable segments use ([`VirtualMemory`]).
//!
//! This module owns the contracts only; the host and CUDA implementations live in `host.rs` and
//! `cuda.rs`, and nothing here knows about blocks, pools or policy.

#[cfg(feature = "cuda")]
pub mod cuda;
// GPU-neutral page bookkeeping and stream ordering, used only by the CUDA backend (tested on the
// host either way).
#[cfg(any(test, feature = "cuda"))]
mod granules;
mod host;
#[cfg(any(test, feature = "cuda"))]
pub mod stream_order;

pub use host::{HostBackend, HOST_ALIGN, HOST_MAP_GRANULARITY};

/// A source of device memory segments (host memory, CUDA driver allocations, ...).
///
/// The caching allocator asks for whole segments and carves blocks out of them itself, so a
/// backend only needs these calls. Backends that can reserve address space and map physical
/// pages into it (CUDA VMM, `mmap`) may also offer [`Backend::virtual_memory`], the interface
/// expandable segments use (and, by default, are used wherever it is offered).
///
/// # Safety
/// The allocator hands the segments out as memory that nothing else uses, and devices hand
/// host pointers to them to safe code (`Workspace` views, tensor storage) when
/// [`Backend::host_addressable`] is true. An implementation must therefore guarantee that every
/// segment from [`Backend::alloc_segment`] is `bytes` bytes that no other live segment overlaps
/// and nothing else uses until [`Backend::free_segment`], aligned to [`Backend::alignment`], and,
/// when `host_addressable` is true, readable and writable by the CPU at that address.
pub unsafe trait Backend: Send + Sync + 'static {
    /// Short name used in messages ("host", "cuda:0").
    fn name(&self) -> String;
    /// Total bytes the device can hold, if bounded.
    fn capacity(&self) -> Option<usize>;
    /// Whether addresses returned by this backend may be dereferenced by the CPU.
    fn host_addressable(&self) -> bool;
    /// Alignment of every segment address, in bytes (a power of two, at least 64).
    fn alignment(&self) -> usize {
        256
    }
    /// Allocates one segment of `bytes` bytes and returns its address.
    fn alloc_segment(&self, bytes: usize) -> Result<u64, BackendError>;
    /// Returns a segment obtained from [`Backend::alloc_segment`].
    ///
    /// `Err` means the segment is still held (the allocator keeps it in its books, cached, and
    /// reports the failure); `Ok` that it is gone.
    ///
    /// # Safety
    /// `addr` and `bytes` must describe a live segment of this backend that nothing uses anymore.
    unsafe fn free_segment(&self, addr: u64, bytes: usize) -> Result<(), BackendError>;
    /// Page-mapping operations, for backends that support them (`None`: plain segments only).
    fn virtual_memory(&self) -> Option<&dyn VirtualMemory> {
        None
    }
    /// Bytes the device could still provide right now, if known (`None`: unbounded or
    /// unknown). Only the out-of-memory path asks, to tell fragmentation from a full device.
    fn free_memory(&self) -> Option<usize> {
        None
    }
    /// Marks the point reached so far by the work queued on `stream`, for a block freed while
    /// that stream may still use it (see `Allocation::record_stream`). `None`: that work is
    /// already complete (the default: backends whose work is synchronous, like the host).
    fn record_event(&self, stream: StreamId) -> Result<Option<EventId>, BackendError> {
        let _ = stream;
        Ok(None)
    }
    /// Whether the work before `event` is complete, without waiting.
    fn query_event(&self, event: EventId) -> Result<bool, BackendError> {
        let _ = event;
        Ok(true)
    }
    /// Waits until the work before `event` is complete.
    fn synchronize_event(&self, event: EventId) -> Result<(), BackendError> {
        let _ = event;
        Ok(())
    }
    /// Releases an event from [`Backend::record_event`] (after it completed or failed).
    fn destroy_event(&self, event: EventId) {
        let _ = event;
    }
}

/// A stream of work on a device, as the allocator knows it: blocks are pooled per stream and
/// reused freely in that stream's order. For CUDA the value is the `CUstream` handle
/// ([`StreamId::DEFAULT`], 0, is the context's default stream); host work is synchronous and
/// runs on [`StreamId::DEFAULT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u64);

impl StreamId {
    /// The device's default stream (CUDA's null stream; all host work).
    pub const DEFAULT: StreamId = StreamId(0);
}

/// An event a backend recorded on a stream ([`Backend::record_event`]); for CUDA the `CUevent`
/// handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventId(pub u64);

/// Reserve-then-map memory management (CUDA `cuMemAddressReserve`/`cuMemCreate`/`cuMemMap`,
/// host `mmap(PROT_NONE)` + `mprotect`/`madvise`).
///
/// Expandable segments use it: the large pool's reserved range has its pages mapped as the
/// pool grows and its free tail unmapped by `empty_cache`. [`HostBackend`] implements it on Unix,
/// [`CudaBackend`](super::cuda_backend::CudaBackend) on GPUs with virtual memory management.
///
/// # Safety
/// As for [`Backend`]: a range from [`VirtualMemory::reserve_range`] overlaps nothing else,
/// and after [`VirtualMemory::map`] succeeds its pages are memory nothing else uses (readable
/// and writable by the CPU when the backend is host-addressable) until they are unmapped.
pub unsafe trait VirtualMemory: Send + Sync {
    /// Mapping granularity in bytes; every size and offset passed below is a multiple of it.
    fn granularity(&self) -> usize;
    /// Reserves `bytes` of address space without backing memory.
    fn reserve_range(&self, bytes: usize) -> Result<u64, BackendError>;
    /// Releases a range from [`VirtualMemory::reserve_range`].
    ///
    /// # Safety
    /// Nothing in the range may be mapped or in use.
    unsafe fn release_range(&self, addr: u64, bytes: usize) -> Result<(), BackendError>;
    /// Backs `[addr, addr + bytes)` of a reserved range with memory.
    ///
    /// # Safety
    /// The range must lie inside one reserved range and be unmapped.
    unsafe fn map(&self, addr: u64, bytes: usize) -> Result<(), BackendError>;
    /// Returns the memory backing `[addr, addr + bytes)` to the device.
    ///
    /// `Err` means the whole range is still mapped (an implementation that fails midway maps
    /// back what it had unmapped, or says in the error that it could not); the allocator keeps
    /// it in its books and reports the failure.
    ///
    /// # Safety
    /// The range must be mapped and nothing may use it anymore.
    unsafe fn unmap(&self, addr: u64, bytes: usize) -> Result<(), BackendError>;
    /// Checks, once, when an allocator with expandable segments is created, that mapped pages
    /// really hold what is written to them (e.g. reserve a small range, map it, write a pattern,
    /// read it back, unmap, release). `Err` carries the failing step: under
    /// [`ExpandableSegments::Auto`](super::ExpandableSegments::Auto) the allocator then uses fixed segments, under
    /// [`ExpandableSegments::On`](super::ExpandableSegments::On) its creation fails. The default trusts the mapping.
    fn self_test(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

/// Failure reported by a backend.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BackendError {
    /// The device has no room for the segment.
    #[error("the device cannot provide {requested} more bytes")]
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
    },
    /// Any other failure of a backend call: not a shortage of memory.
    #[error(transparent)]
    Driver(#[from] BackendFailure),
}

impl BackendError {
    /// A failure of `op` with the driver's (or operating system's) error `error`.
    pub fn driver(op: impl Into<String>, error: impl Into<String>) -> BackendError {
        BackendError::Driver(BackendFailure {
            op: op.into(),
            error: error.into(),
        })
    }
}

/// A backend call that failed for a reason other than a shortage of memory: what was being
/// done and the error the driver gave, by name (`CUDA_ERROR_ILLEGAL_ADDRESS`), so an error
/// left by an earlier kernel is not mistaken for a full device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, thiserror::Error)]
#[error("{op} failed with {error}")]
pub struct BackendFailure {
    /// What was being done (the driver function and its arguments).
    pub op: String,
    /// The driver's error name (CUDA), or the operating system's error (host).
    pub error: String,
}

// SAFETY: forwards to a `Backend`, which upholds the contract.
unsafe impl Backend for Box<dyn Backend> {
    fn name(&self) -> String {
        (**self).name()
    }
    fn capacity(&self) -> Option<usize> {
        (**self).capacity()
    }
    fn host_addressable(&self) -> bool {
        (**self).host_addressable()
    }
    fn alignment(&self) -> usize {
        (**self).alignment()
    }
    fn alloc_segment(&self, bytes: usize) -> Result<u64, BackendError> {
        (**self).alloc_segment(bytes)
    }
    unsafe fn free_segment(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        // SAFETY: forwarded contract.
        unsafe { (**self).free_segment(addr, bytes) }
    }
    fn virtual_memory(&self) -> Option<&dyn VirtualMemory> {
        (**self).virtual_memory()
    }
    fn free_memory(&self) -> Option<usize> {
        (**self).free_memory()
    }
    fn record_event(&self, stream: StreamId) -> Result<Option<EventId>, BackendError> {
        (**self).record_event(stream)
    }
    fn query_event(&self, event: EventId) -> Result<bool, BackendError> {
        (**self).query_event(event)
    }
    fn synchronize_event(&self, event: EventId) -> Result<(), BackendError> {
        (**self).synchronize_event(event)
    }
    fn destroy_event(&self, event: EventId) {
        (**self).destroy_event(event)
    }
}
