//! The caching allocator and the memory backends it draws segments from.
//!
//! INTERIM: this file holds the API contract only, with a non-caching implementation so that
//! code written against it runs. The allocator issue replaces the internals; names and
//! signatures below are the contract other modules rely on.

mod host;

pub use host::HostBackend;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A source of device memory segments (host memory, CUDA driver allocations, ...).
pub trait Backend: Send + Sync + 'static {
    /// Short name used in messages ("host", "cuda:0").
    fn name(&self) -> String;
    /// Total bytes the device can hold, if bounded.
    fn capacity(&self) -> Option<usize>;
    /// Whether addresses returned by this backend may be dereferenced by the CPU.
    fn host_addressable(&self) -> bool;
    /// Allocates one segment of `bytes` bytes and returns its address.
    fn alloc_segment(&self, bytes: usize) -> Result<u64, BackendError>;
    /// Returns a segment obtained from [`Backend::alloc_segment`].
    ///
    /// # Safety
    /// `addr` and `bytes` must describe a live segment of this backend that nothing uses anymore.
    unsafe fn free_segment(&self, addr: u64, bytes: usize);
}

/// Failure reported by a backend.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The device has no room for the segment.
    #[error("the device cannot provide {requested} more bytes")]
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
    },
    /// Any other driver failure.
    #[error("backend failure: {0}")]
    Driver(String),
}

/// The allocation failed after every remedy was tried.
#[derive(Debug, Clone, thiserror::Error)]
#[error("out of memory on {device}: tried to allocate {requested} bytes")]
pub struct OutOfMemory {
    /// Device name.
    pub device: String,
    /// Bytes requested.
    pub requested: usize,
}

/// Allocator statistics: exact byte counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryStats {
    /// Bytes in live blocks (rounded block sizes).
    pub allocated_bytes: u64,
    /// Highest `allocated_bytes` since the last peak reset.
    pub peak_allocated_bytes: u64,
    /// Bytes held from the backend.
    pub reserved_bytes: u64,
    /// Highest `reserved_bytes` since the last peak reset.
    pub peak_reserved_bytes: u64,
    /// Segments obtained from the backend.
    pub backend_allocs: u64,
    /// Segments returned to the backend.
    pub backend_frees: u64,
    /// Allocations that failed with out-of-memory.
    pub num_ooms: u64,
}

/// Caching allocator over a backend. INTERIM: passes every request to the backend.
pub struct CachingAllocator<B: Backend + ?Sized> {
    stats: Mutex<MemoryStats>,
    next_id: AtomicU64,
    backend: B,
}

/// The allocator type a [`crate::Device`] holds.
pub type DeviceAllocator = CachingAllocator<Box<dyn Backend>>;

impl Backend for Box<dyn Backend> {
    fn name(&self) -> String {
        (**self).name()
    }
    fn capacity(&self) -> Option<usize> {
        (**self).capacity()
    }
    fn host_addressable(&self) -> bool {
        (**self).host_addressable()
    }
    fn alloc_segment(&self, bytes: usize) -> Result<u64, BackendError> {
        (**self).alloc_segment(bytes)
    }
    unsafe fn free_segment(&self, addr: u64, bytes: usize) {
        // SAFETY: forwarded contract.
        unsafe { (**self).free_segment(addr, bytes) }
    }
}

/// Granularity of block sizes.
pub const ROUND: usize = 512;

/// Rounds a request up to the allocator's block granularity.
pub fn round_size(bytes: usize) -> usize {
    bytes.max(1).div_ceil(ROUND) * ROUND
}

impl<B: Backend> CachingAllocator<B> {
    /// Creates an allocator drawing from `backend`.
    pub fn new(backend: B) -> Self {
        Self {
            stats: Mutex::new(MemoryStats::default()),
            next_id: AtomicU64::new(1),
            backend,
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Allocates a block of at least `bytes` bytes.
    pub fn allocate(self: &Arc<Self>, bytes: usize) -> Result<Block, OutOfMemory> {
        let size = round_size(bytes);
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        match self.backend.alloc_segment(size) {
            Ok(addr) => {
                stats.allocated_bytes += size as u64;
                stats.reserved_bytes += size as u64;
                stats.backend_allocs += 1;
                stats.peak_allocated_bytes = stats.peak_allocated_bytes.max(stats.allocated_bytes);
                stats.peak_reserved_bytes = stats.peak_reserved_bytes.max(stats.reserved_bytes);
                Ok(Block {
                    addr,
                    size,
                    requested: bytes,
                    id: self.next_id.fetch_add(1, Ordering::Relaxed),
                })
            }
            Err(_) => {
                stats.num_ooms += 1;
                Err(OutOfMemory {
                    device: self.backend.name(),
                    requested: bytes,
                })
            }
        }
    }

    /// Returns a block to the allocator.
    pub fn free(&self, block: Block) {
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the block came from `allocate`, which made it one whole segment.
        unsafe { self.backend.free_segment(block.addr, block.size) };
        stats.allocated_bytes -= block.size as u64;
        stats.reserved_bytes -= block.size as u64;
        stats.backend_frees += 1;
    }

    /// Current statistics.
    pub fn stats(&self) -> MemoryStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resets peaks to the current values.
    pub fn reset_peak_stats(&self) {
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        s.peak_allocated_bytes = s.allocated_bytes;
        s.peak_reserved_bytes = s.reserved_bytes;
    }

    /// Releases cached free segments; returns the bytes released.
    pub fn empty_cache(&self) -> u64 {
        0
    }
}

/// A block handed out by the allocator (no RAII; see [`crate::device::Allocation`]).
#[derive(Debug)]
pub struct Block {
    /// Device address.
    pub addr: u64,
    /// Block size (rounded).
    pub size: usize,
    /// Size requested.
    pub requested: usize,
    /// Unique id, never reused within one allocator.
    pub id: u64,
}
