//! The caching allocator and the memory backends it draws segments from.
//!
//! The rules follow PyTorch's CUDA caching allocator (`CUDACachingAllocator.cpp`):
//!
//! - **Rounding**: requests are rounded up to 512 bytes ([`ROUND`]); with
//!   `roundup_power2_divisions: N` sizes above `512·N` are rounded up to one of `N` equal steps
//!   between consecutive powers of two. The rounded size is what [`Block::size`],
//!   `Allocation::size()` and [`MemoryStats::allocated_bytes`] report.
//! - **Pools**: rounded sizes up to 1 MiB ([`SMALL_SIZE`]) come from the small pool, carved from
//!   2 MiB segments ([`SMALL_SEGMENT`]); larger ones from the large pool, whose segments are
//!   20 MiB ([`LARGE_SEGMENT`]) for requests under 10 MiB and the request rounded up to 2 MiB
//!   otherwise. When the preferred segment does not fit (device capacity or memory limit), a
//!   segment of exactly the rounded size is tried before anything else fails.
//! - **Best fit** by (size, address) among the pool's free blocks; the block is **split** when
//!   the remainder is worth keeping (≥ 512 B in the small pool, > 1 MiB in the large pool), the
//!   remainder staying cached as a free block. A block that is not split is handed out whole;
//!   its extra bytes count in `active_bytes`, not in `allocated_bytes`.
//! - **Coalescing**: a freed block merges with free neighbours of the same segment.
//! - **Max split size** (`max_split_size_mb`): blocks of at least that size are never split;
//!   requests below it never take them, requests above it take them only when less than 20 MiB
//!   larger than the request. Blocks of the expandable segment are exempt.
//! - **Garbage-collection threshold**: before a new segment would take reserved memory above
//!   `threshold × limit` (the device capacity when no limit is set), fully free cached segments
//!   are returned, least recently used first.
//! - **Expandable segments** (on by default wherever the backend can map pages —
//!   [`Backend::virtual_memory`]: the host backend on Unix, CUDA on GPUs with virtual memory
//!   management that pass a self-test; see [`ExpandableSegments`]): the large pool is one
//!   reserved address range; when no free block fits, pages are mapped at its end (extending a
//!   free tail block, so a large request needs only the missing bytes), and only `empty_cache`
//!   or the out-of-memory path unmap the free tail, in whole granules (a plain free never
//!   does, so a steady loop makes no backend calls). Map and unmap calls count as
//!   `backend_allocs`/`backend_frees`. When the range is used up, plain segments serve the
//!   request. The small pool always uses fixed 2 MiB segments.
//!   [`CachingAllocator::uses_expandable_segments`] tells what an allocator runs with;
//!   `expandable_segments:false` gives PyTorch's default, fixed segments, where each segment is
//!   a backend allocation of its own and the segment rules above (20 MiB segments, exact ones
//!   above 10 MiB) apply to the large pool too.
//! - **Out of memory**: when the backend (or the memory limit) refuses a segment, every fully free
//!   cached segment is returned and the segment is asked for again (`alloc_retries`); then the
//!   registered pressure handlers run (without the allocator's lock) and the request is tried
//!   once more; then [`OutOfMemory`] tells whether the limit was reached or the free memory is
//!   fragmented (the cached free bytes, plus what the device — [`Backend::free_memory`] — and
//!   the limit still allow, would hold the request, but no single block does), and which
//!   setting helps. The allocator is intact after an OOM.
//!
//! One mutex per allocator guards its state; segment calls into the backend happen under it,
//! pressure handlers never do.

mod bucket;
mod config;
pub mod cuda;
mod host;
mod html;
mod trace;
mod workspace;

pub use bucket::{BucketError, SequenceBuckets};
pub use config::{
    parse_bytes, AllocatorConfig, ConfigError, ExpandableSegments, MemoryLimit,
    DEFAULT_TRACE_CAPACITY, ENV_VAR, KNOWN_KEYS,
};
pub use host::{HostBackend, HOST_ALIGN, HOST_MAP_GRANULARITY};
pub use html::html_report;
pub use trace::{
    set_trace_label, trace_label, BlockSnapshot, MemorySnapshot, PoolKind, SegmentSnapshot, Trace,
    TraceEvent, TraceEventKind, TraceLabelGuard,
};
pub use workspace::{Workspace, WorkspaceError, WorkspaceView};

use std::cell::Cell;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;
use trace::TraceRing;

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
    /// # Safety
    /// `addr` and `bytes` must describe a live segment of this backend that nothing uses anymore.
    unsafe fn free_segment(&self, addr: u64, bytes: usize);
    /// Page-mapping operations, for backends that support them (`None`: plain segments only).
    fn virtual_memory(&self) -> Option<&dyn VirtualMemory> {
        None
    }
    /// Bytes the device could still provide right now, if known (`None`: unbounded or
    /// unknown). Only the out-of-memory path asks, to tell fragmentation from a full device.
    fn free_memory(&self) -> Option<usize> {
        None
    }
}

/// Reserve-then-map memory management (CUDA `cuMemAddressReserve`/`cuMemCreate`/`cuMemMap`,
/// host `mmap(PROT_NONE)` + `mprotect`/`madvise`).
///
/// Expandable segments use it: the large pool's reserved range has its pages mapped as the
/// pool grows and its free tail unmapped by `empty_cache`. [`HostBackend`] implements it on Unix,
/// [`cuda::CudaBackend`] on GPUs with virtual memory management.
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
    unsafe fn release_range(&self, addr: u64, bytes: usize);
    /// Backs `[addr, addr + bytes)` of a reserved range with memory.
    ///
    /// # Safety
    /// The range must lie inside one reserved range and be unmapped.
    unsafe fn map(&self, addr: u64, bytes: usize) -> Result<(), BackendError>;
    /// Returns the memory backing `[addr, addr + bytes)` to the device.
    ///
    /// # Safety
    /// The range must be mapped and nothing may use it anymore.
    unsafe fn unmap(&self, addr: u64, bytes: usize);
    /// Checks, once, when an allocator with expandable segments is created, that mapped pages
    /// really hold what is written to them (e.g. reserve a small range, map it, write a pattern,
    /// read it back, unmap, release). `Err` carries the failing step: under
    /// [`ExpandableSegments::Auto`] the allocator then uses fixed segments, under
    /// [`ExpandableSegments::On`] its creation fails. The default trusts the mapping.
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
    /// Any other driver failure.
    #[error("backend failure: {0}")]
    Driver(String),
}

/// Why an allocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum OomCause {
    /// Enough bytes are cached free, but no free block is large enough.
    Fragmentation,
    /// The configured memory limit would be exceeded.
    LimitReached,
    /// The device itself has no room left.
    DeviceFull,
}

/// The allocation failed after every remedy was tried (releasing cached segments, pressure
/// handlers). Its message says why and which setting helps.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OutOfMemory {
    /// Device name.
    pub device: String,
    /// Bytes requested.
    pub requested: usize,
    /// The request rounded to a block size.
    pub rounded: usize,
    /// Device capacity, if known.
    pub capacity: Option<u64>,
    /// Configured memory limit, if any.
    pub limit: Option<u64>,
    /// Bytes allocated (live blocks) at the failure.
    pub allocated: u64,
    /// Bytes reserved from the backend at the failure.
    pub reserved: u64,
    /// Reserved bytes in free cached blocks.
    pub cached_free: u64,
    /// The largest cached free block this request could use (same pool — requests up to 1 MiB
    /// and larger ones are served from separate pools — and allowed by `max_split_size`).
    pub largest_free_block: u64,
    /// Bytes that could still be reserved beyond `reserved`: what the device has free, capped
    /// by the memory limit (0 when neither is known: an unbounded backend without a limit).
    pub device_free: u64,
    /// Why it failed.
    pub cause: OomCause,
    /// The allocator's kind of large-pool segments (so the advice for fragmentation suggests
    /// expandable segments only where they are off by choice).
    pub segments: SegmentMode,
}

/// Which segments an allocator's large pool uses, and, for fixed ones, why
/// ([`CachingAllocator::segment_mode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentMode {
    /// One expandable segment (the default wherever the backend can map pages).
    Expandable,
    /// Fixed segments because `expandable_segments:false` is set.
    FixedByConfig,
    /// Fixed segments because the backend cannot provide expandable ones: no page mapping,
    /// or (under `auto`) a failed self-test or address-space reservation
    /// ([`CachingAllocator::fixed_segments_reason`] says which).
    FixedUnavailable,
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "out of memory on {}: cannot allocate {} ({} bytes); ",
            self.device,
            human_bytes(self.rounded as u64),
            self.requested
        )?;
        match self.cause {
            OomCause::Fragmentation => {
                write!(
                    f,
                    "fragmentation: {} cached free",
                    human_bytes(self.cached_free)
                )?;
                if self.device_free > 0 {
                    write!(
                        f,
                        " (plus {} the device can still provide)",
                        human_bytes(self.device_free)
                    )?;
                }
                write!(
                    f,
                    ", but the largest free block is {}",
                    human_bytes(self.largest_free_block)
                )?
            }
            OomCause::LimitReached => write!(
                f,
                "memory limit reached: {} reserved of a {} limit",
                human_bytes(self.reserved),
                human_bytes(self.limit.unwrap_or(0))
            )?,
            OomCause::DeviceFull => write!(f, "the device is full")?,
        }
        write!(
            f,
            " (allocated {}, reserved {}, cached free {}, largest free block {}",
            human_bytes(self.allocated),
            human_bytes(self.reserved),
            human_bytes(self.cached_free),
            human_bytes(self.largest_free_block)
        )?;
        if let Some(c) = self.capacity {
            write!(f, ", capacity {}", human_bytes(c))?;
        }
        if let Some(l) = self.limit {
            write!(f, ", limit {}", human_bytes(l))?;
        }
        if self.device_free > 0 {
            write!(f, ", device free {}", human_bytes(self.device_free))?;
        }
        f.write_str("). ")?;
        match self.cause {
            OomCause::Fragmentation if self.segments == SegmentMode::Expandable => f.write_str(
                "Free memory is split into holes between live blocks (expandable segments are \
                 already on: they grow and return only the free end of the mapped range, and \
                 cannot move live blocks): preallocate the largest buffer once (a Workspace, \
                 memory::reserve, `preallocate`), allocate long-lived buffers before \
                 short-lived ones, bucket variable shapes, or call memory::empty_cache between \
                 phases.",
            ),
            OomCause::Fragmentation if self.segments == SegmentMode::FixedByConfig => f.write_str(
                "Free memory is split into pieces: set `expandable_segments:true` in \
                 VRAMGUARD_ALLOC_CONF (or `auto`, the default; this allocator has fixed \
                 segments because `expandable_segments:false` is set), preallocate the largest \
                 buffer once (a Workspace, memory::reserve, `preallocate`), bucket variable \
                 shapes, set `max_split_size_mb` so large blocks stay whole, or call \
                 memory::empty_cache between phases.",
            ),
            OomCause::Fragmentation => f.write_str(
                "Free memory is split into pieces (and this device cannot use expandable \
                 segments: see the allocator's fixed_segments_reason): preallocate the largest \
                 buffer once (a Workspace, memory::reserve, `preallocate`), bucket variable \
                 shapes, set `max_split_size_mb` so large blocks stay whole, or call \
                 memory::empty_cache between phases.",
            ),
            OomCause::LimitReached => f.write_str(
                "Drop tensors that are no longer needed, lower the batch size, or raise \
                 `memory_limit`/`memory_fraction` in VRAMGUARD_ALLOC_CONF.",
            ),
            OomCause::DeviceFull => f.write_str(
                "Drop tensors that are no longer needed (the cache was already released), \
                 lower the batch size, or free memory held by other processes.",
            ),
        }
    }
}

impl std::error::Error for OutOfMemory {}

/// `1.5 GiB`, `12.0 MiB`, `512 B`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, unit) in UNITS {
        if bytes >= unit {
            return format!("{:.1} {name}", bytes as f64 / unit as f64);
        }
    }
    format!("{bytes} B")
}

/// Allocator statistics: exact byte counts. Peaks are since creation or the last
/// [`CachingAllocator::reset_peak_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct MemoryStats {
    /// Bytes in live allocations, each counted at its rounded size (512-byte granularity).
    pub allocated_bytes: u64,
    /// Highest `allocated_bytes`.
    pub peak_allocated_bytes: u64,
    /// Bytes held from the backend (sum of segment sizes).
    pub reserved_bytes: u64,
    /// Highest `reserved_bytes`.
    pub peak_reserved_bytes: u64,
    /// Bytes of the blocks holding live allocations (≥ `allocated_bytes`: a block that was not
    /// split is counted whole).
    pub active_bytes: u64,
    /// Highest `active_bytes`.
    pub peak_active_bytes: u64,
    /// Live allocations.
    pub active_blocks: u64,
    /// Highest `active_blocks`.
    pub peak_active_blocks: u64,
    /// Sum of the bytes asked for by live allocations (before rounding).
    pub requested_bytes: u64,
    /// Reserved bytes in free cached blocks (`reserved_bytes - active_bytes`).
    pub cached_free_bytes: u64,
    /// The largest free cached block.
    pub largest_free_block: u64,
    /// `1 - allocated / reserved` (0 when nothing is reserved).
    pub fragmentation: f64,
    /// Segments held.
    pub segments: u64,
    /// Segments obtained from the backend.
    pub backend_allocs: u64,
    /// Segments returned to the backend.
    pub backend_frees: u64,
    /// Times the cache was released and a segment request retried after the backend refused.
    pub alloc_retries: u64,
    /// Allocations that failed with out-of-memory.
    pub num_ooms: u64,
    /// Allocations served.
    pub num_allocs: u64,
    /// Allocations returned.
    pub num_frees: u64,
}

/// Block size granularity.
pub const ROUND: usize = 512;
/// Largest rounded size served by the small pool.
pub const SMALL_SIZE: usize = 1 << 20;
/// Segment size of the small pool.
pub const SMALL_SEGMENT: usize = 2 << 20;
/// Segment size of the large pool for requests under [`MIN_LARGE_ALLOC`].
pub const LARGE_SEGMENT: usize = 20 << 20;
/// Requests at least this large get a segment of their own size (rounded to [`ROUND_LARGE`]).
pub const MIN_LARGE_ALLOC: usize = 10 << 20;
/// Rounding of large segments.
pub const ROUND_LARGE: usize = 2 << 20;

/// Rounds a request up to the allocator's block granularity (512 bytes).
pub fn round_size(bytes: usize) -> usize {
    bytes.max(1).div_ceil(ROUND).saturating_mul(ROUND)
}

/// `round_size` with PyTorch's `roundup_power2_divisions`.
fn round_with_divisions(bytes: usize, divisions: usize) -> Option<usize> {
    let bytes = bytes.max(1);
    if divisions == 0 || bytes <= ROUND * divisions {
        return bytes.div_ceil(ROUND).checked_mul(ROUND);
    }
    if bytes.is_power_of_two() {
        return Some(bytes);
    }
    let floor = 1usize << (usize::BITS - 1 - bytes.leading_zeros());
    let step = floor / divisions;
    bytes.div_ceil(step).checked_mul(step)
}

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Node {
    addr: u64,
    size: usize,
    /// Rounded request while allocated.
    rounded: usize,
    requested: usize,
    id: u64,
    seg: u32,
    prev: u32,
    next: u32,
    pool: PoolKind,
    allocated: bool,
    /// Tick of the last free, for LRU release.
    freed_at: u64,
}

#[derive(Debug, Clone)]
struct Segment {
    addr: u64,
    size: usize,
    pool: PoolKind,
    head: u32,
    /// Last block (the one that grows or shrinks in an expandable segment).
    tail: u32,
    live: bool,
    expandable: bool,
}

/// The large pool's expandable segment: a reserved address range whose mapped prefix is a
/// segment that grows (map at the end) and shrinks (unmap a free tail).
#[derive(Debug, Clone, Copy)]
struct Expandable {
    addr: u64,
    virt: usize,
    granularity: usize,
    /// Index of the segment while anything is mapped.
    seg: Option<u32>,
}

/// Address space reserved for an expandable segment when neither a limit nor a capacity bounds
/// it (only address space: pages are mapped as the pool grows).
pub const DEFAULT_EXPANDABLE_RANGE: usize = 64 << 30;

/// Free blocks of one pool ordered by (size, address), each key packed into one `u128`
/// (48-bit size, 48-bit address, 32-bit slot) so the B-tree compares single integers.
#[derive(Default)]
struct FreeSet(BTreeSet<u128>);

/// Sizes and addresses must fit in 48 bits (256 TiB) for the packed keys.
const ADDR_LIMIT: u64 = 1 << 48;

impl FreeSet {
    #[inline]
    fn key(size: usize, addr: u64, slot: u32) -> u128 {
        ((size as u128) << 80) | ((addr as u128) << 32) | slot as u128
    }
    #[inline]
    fn unpack(k: u128) -> (usize, u64, u32) {
        (
            (k >> 80) as usize,
            ((k >> 32) as u64) & (ADDR_LIMIT - 1),
            k as u32,
        )
    }
    #[inline]
    fn insert(&mut self, size: usize, addr: u64, slot: u32) {
        self.0.insert(Self::key(size, addr, slot));
    }
    #[inline]
    fn remove(&mut self, size: usize, addr: u64, slot: u32) -> bool {
        self.0.remove(&Self::key(size, addr, slot))
    }
    fn contains(&self, size: usize, addr: u64, slot: u32) -> bool {
        self.0.contains(&Self::key(size, addr, slot))
    }
    /// The smallest block of at least `size` bytes (lowest address among equals).
    #[inline]
    fn best_fit(&self, size: usize) -> Option<(usize, u64, u32)> {
        self.0
            .range(Self::key(size, 0, 0)..)
            .next()
            .map(|&k| Self::unpack(k))
    }
    fn largest(&self) -> usize {
        self.0.last().map_or(0, |&k| Self::unpack(k).0)
    }
    /// Blocks from the largest down.
    fn descending(&self) -> impl Iterator<Item = (usize, u64, u32)> + '_ {
        self.0.iter().rev().map(|&k| Self::unpack(k))
    }
    /// Blocks of at least `size` bytes, smallest first.
    fn fitting(&self, size: usize) -> impl Iterator<Item = (usize, u64, u32)> + '_ {
        self.0
            .range(Self::key(size, 0, 0)..)
            .map(|&k| Self::unpack(k))
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

struct State {
    nodes: Vec<Node>,
    spare_nodes: Vec<u32>,
    segs: Vec<Segment>,
    spare_segs: Vec<u32>,
    small_free: FreeSet,
    large_free: FreeSet,
    stats: MemoryStats,
    next_id: u64,
    tick: u64,
    trace: TraceRing,
    expandable: Option<Expandable>,
}

type PressureHandler = Arc<dyn Fn(usize) -> usize + Send + Sync>;

/// Identifies a registered pressure handler, for [`CachingAllocator::remove_pressure_handler`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PressureHandlerId(u64);

thread_local! {
    /// Set while this thread runs pressure handlers, so a handler that allocates does not
    /// recurse into the handlers.
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// Caching allocator over a backend: see the module documentation for its rules.
pub struct CachingAllocator<B: Backend + ?Sized> {
    /// Identity stamped on every block handed out (see [`Block`]).
    id: u64,
    config: AllocatorConfig,
    limit: Option<u64>,
    state: Mutex<State>,
    handlers: RwLock<Vec<(PressureHandlerId, PressureHandler)>>,
    next_handler: AtomicU64,
    start: Instant,
    name: String,
    /// The large pool's segments.
    segment_mode: SegmentMode,
    /// Why the large pool uses fixed segments (`None`: it has an expandable segment).
    fixed_segments_reason: Option<String>,
    backend: B,
}

/// The allocator type a [`crate::Device`] holds.
pub type DeviceAllocator = CachingAllocator<Box<dyn Backend>>;

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
    unsafe fn free_segment(&self, addr: u64, bytes: usize) {
        // SAFETY: forwarded contract.
        unsafe { (**self).free_segment(addr, bytes) }
    }
    fn virtual_memory(&self) -> Option<&dyn VirtualMemory> {
        (**self).virtual_memory()
    }
    fn free_memory(&self) -> Option<usize> {
        (**self).free_memory()
    }
}

/// Why an expandable segment could not be set up (see [`CachingAllocator::with_config`]).
enum ExpandableUnavailable {
    /// The backend cannot map pages.
    NoVirtualMemory,
    /// [`VirtualMemory::self_test`] failed.
    SelfTest(String),
    /// The address range could not be reserved.
    Reserve { bytes: usize, message: String },
}

/// Reserves the expandable segment's address range: `limit` bytes, else the device capacity,
/// else [`DEFAULT_EXPANDABLE_RANGE`], after the backend's self-test.
fn setup_expandable<B: Backend + ?Sized>(
    backend: &B,
    limit: Option<u64>,
) -> Result<Expandable, ExpandableUnavailable> {
    let vm = backend
        .virtual_memory()
        .ok_or(ExpandableUnavailable::NoVirtualMemory)?;
    vm.self_test()
        .map_err(|e| ExpandableUnavailable::SelfTest(e.to_string()))?;
    let granularity = vm.granularity();
    let wanted = limit
        .map(|l| usize::try_from(l).unwrap_or(usize::MAX))
        .or(backend.capacity())
        .unwrap_or(DEFAULT_EXPANDABLE_RANGE);
    let virt = wanted
        .checked_next_multiple_of(granularity)
        .ok_or_else(|| ExpandableUnavailable::Reserve {
            bytes: wanted,
            message: "the size overflows the address space".into(),
        })?;
    let addr = vm
        .reserve_range(virt)
        .map_err(|e| ExpandableUnavailable::Reserve {
            bytes: virt,
            message: e.to_string(),
        })?;
    if addr.saturating_add(virt as u64) >= ADDR_LIMIT {
        // SAFETY: just reserved, nothing mapped.
        unsafe { vm.release_range(addr, virt) };
        return Err(ExpandableUnavailable::Reserve {
            bytes: virt,
            message: "the range lies above 2^48".into(),
        });
    }
    Ok(Expandable {
        addr,
        virt,
        granularity,
        seg: None,
    })
}

/// What [`resolve_expandable`] chose: the expandable segment, or fixed segments and why.
struct Resolved {
    expandable: Option<Expandable>,
    mode: SegmentMode,
    reason: Option<String>,
}

/// Resolves `mode` on `backend`: the expandable segment, or why there is none. Only
/// [`ExpandableSegments::On`] turns a failure into an error; `Auto` falls back to fixed
/// segments (with a warning when the backend offered page mapping but it did not work).
fn resolve_expandable<B: Backend + ?Sized>(
    mode: ExpandableSegments,
    backend: &B,
    limit: Option<u64>,
    name: &str,
) -> Result<Resolved, ConfigError> {
    if mode == ExpandableSegments::Off {
        return Ok(Resolved {
            expandable: None,
            mode: SegmentMode::FixedByConfig,
            reason: Some("`expandable_segments:false` is set".to_string()),
        });
    }
    let unavailable = match setup_expandable(backend, limit) {
        Ok(e) => {
            return Ok(Resolved {
                expandable: Some(e),
                mode: SegmentMode::Expandable,
                reason: None,
            })
        }
        Err(u) => u,
    };
    if mode == ExpandableSegments::On {
        return Err(match unavailable {
            ExpandableUnavailable::NoVirtualMemory => ConfigError::Unsupported {
                key: "expandable_segments".to_string(),
                reason: "this backend cannot map pages into reserved address space (the host \
                         backend on Unix and CUDA on GPUs with virtual memory management can); \
                         set `expandable_segments:false`, or `auto` to use them only where \
                         available",
            },
            ExpandableUnavailable::SelfTest(reason) => ConfigError::ExpandableSelfTestFailed {
                device: name.to_string(),
                reason,
            },
            ExpandableUnavailable::Reserve { bytes, message } => {
                ConfigError::ReserveFailed { bytes, message }
            }
        });
    }
    let reason = match unavailable {
        // Silently: fixed segments are simply what such a backend has.
        ExpandableUnavailable::NoVirtualMemory => {
            format!("{name} cannot map pages into reserved address space")
        }
        ExpandableUnavailable::SelfTest(reason) => {
            let reason = format!("the virtual memory self-test of {name} failed: {reason}");
            tracing::warn!("{reason}; using fixed segments");
            reason
        }
        ExpandableUnavailable::Reserve { bytes, message } => {
            let reason = format!(
                "{name} could not reserve {bytes} bytes of address space for expandable \
                 segments: {message}"
            );
            tracing::warn!("{reason}; using fixed segments (set `memory_limit` to reserve less)");
            reason
        }
    };
    Ok(Resolved {
        expandable: None,
        mode: SegmentMode::FixedUnavailable,
        reason: Some(reason),
    })
}

/// A block handed out by the allocator (no RAII; see [`crate::device::Allocation`]).
#[derive(Debug)]
pub struct Block {
    /// Device address.
    pub addr: u64,
    /// Block size: the request rounded to the allocator's granularity.
    pub size: usize,
    /// Size requested.
    pub requested: usize,
    /// Unique id, never reused within one allocator.
    pub id: u64,
    slot: u32,
    /// The allocator that handed the block out ([`CachingAllocator::free`] refuses others).
    owner: u64,
}

/// Source of [`CachingAllocator`] identities, so a block is only ever freed to its own.
static NEXT_ALLOCATOR_ID: AtomicU64 = AtomicU64::new(1);

impl State {
    fn new(trace_capacity: usize) -> Self {
        State {
            nodes: Vec::new(),
            spare_nodes: Vec::new(),
            segs: Vec::new(),
            spare_segs: Vec::new(),
            small_free: FreeSet::default(),
            large_free: FreeSet::default(),
            stats: MemoryStats::default(),
            next_id: 1,
            tick: 0,
            trace: TraceRing::new(trace_capacity),
            expandable: None,
        }
    }

    fn free_set(&mut self, pool: PoolKind) -> &mut FreeSet {
        match pool {
            PoolKind::Small => &mut self.small_free,
            PoolKind::Large => &mut self.large_free,
        }
    }

    fn pool_free(&self, pool: PoolKind) -> &FreeSet {
        match pool {
            PoolKind::Small => &self.small_free,
            PoolKind::Large => &self.large_free,
        }
    }

    fn new_node(&mut self, node: Node) -> u32 {
        match self.spare_nodes.pop() {
            Some(slot) => {
                self.nodes[slot as usize] = node;
                slot
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    fn largest_free(&self) -> u64 {
        self.small_free.largest().max(self.large_free.largest()) as u64
    }

    fn snapshot_stats(&self) -> MemoryStats {
        let mut s = self.stats;
        s.cached_free_bytes = s.reserved_bytes - s.active_bytes;
        s.largest_free_block = self.largest_free();
        s.fragmentation = if s.reserved_bytes == 0 {
            0.0
        } else {
            1.0 - s.allocated_bytes as f64 / s.reserved_bytes as f64
        };
        s
    }

    /// Best-fit free block for `size` in `pool` under the max-split rules, split if worth it.
    /// Returns the node slot, now sized for the request (not yet marked allocated).
    fn take_free(&mut self, pool: PoolKind, size: usize, max_split: Option<usize>) -> Option<u32> {
        let (bsize, baddr, slot) = match max_split {
            None => self.free_set(pool).best_fit(size)?,
            // The smallest block that fits and that the max-split rules allow.
            Some(ms) => self
                .pool_free(pool)
                .fitting(size)
                .find(|&(b, _, slot)| self.split_rules_allow(ms, size, b, slot))?,
        };
        let expandable = self.segs[self.nodes[slot as usize].seg as usize].expandable;
        self.free_set(pool).remove(bsize, baddr, slot);
        let remaining = bsize - size;
        let split = match pool {
            PoolKind::Small => remaining >= ROUND,
            // In the expandable segment any remainder is kept apart: it merges with the free
            // tail (which the next mapping extends) or with its neighbours when they are freed,
            // where in a fixed segment a remainder of 1 MiB or less could serve no large request.
            PoolKind::Large if expandable => remaining >= ROUND,
            PoolKind::Large => remaining > SMALL_SIZE && max_split.is_none_or(|ms| size < ms),
        };
        if split {
            let (seg, next) = {
                let n = &self.nodes[slot as usize];
                (n.seg, n.next)
            };
            let tick = self.tick;
            let rest = self.new_node(Node {
                addr: baddr + size as u64,
                size: remaining,
                rounded: 0,
                requested: 0,
                id: 0,
                seg,
                prev: slot,
                next,
                pool,
                allocated: false,
                freed_at: tick,
            });
            if next != NIL {
                self.nodes[next as usize].prev = rest;
            } else {
                self.segs[seg as usize].tail = rest;
            }
            let n = &mut self.nodes[slot as usize];
            n.next = rest;
            n.size = size;
            self.free_set(pool)
                .insert(remaining, baddr + size as u64, rest);
        }
        Some(slot)
    }

    /// Whether a request of `size` may take free block (`block`, `slot`) under max split size
    /// `ms`: blocks of at least `ms` serve only requests of at least `ms`, and only when less
    /// than 20 MiB larger. Blocks of the expandable segment are exempt: its tail grows to fit.
    fn split_rules_allow(&self, ms: usize, size: usize, block: usize, slot: u32) -> bool {
        if self.segs[self.nodes[slot as usize].seg as usize].expandable {
            return true;
        }
        if size < ms {
            block < ms
        } else {
            // Saturating: an out-of-memory report may ask about a request near `usize::MAX`.
            block < size.saturating_add(LARGE_SEGMENT)
        }
    }

    /// Returns every fully free segment chosen by `pick` to the backend; returns bytes released.
    fn release_segments<B: Backend + ?Sized>(
        &mut self,
        backend: &B,
        start: Instant,
        mut want: impl FnMut(&Segment) -> bool,
    ) -> u64 {
        let mut released = self.shrink_expandable(backend, start);
        for i in 0..self.segs.len() {
            let seg = &self.segs[i];
            if !seg.live || seg.expandable {
                continue;
            }
            let head = &self.nodes[seg.head as usize];
            if head.allocated || head.next != NIL || !want(seg) {
                continue;
            }
            released += self.release_segment(backend, start, i as u32);
        }
        released
    }

    /// Unmaps the free tail of the expandable segment (whole granules); returns bytes released.
    fn shrink_expandable<B: Backend + ?Sized>(&mut self, backend: &B, start: Instant) -> u64 {
        let (Some(e), Some(vm)) = (self.expandable, backend.virtual_memory()) else {
            return 0;
        };
        let Some(si) = e.seg else { return 0 };
        let seg = self.segs[si as usize].clone();
        let tail = seg.tail;
        let (taddr, tsize, tprev, tfree) = {
            let t = &self.nodes[tail as usize];
            (t.addr, t.size, t.prev, !t.allocated)
        };
        let end = seg.addr + seg.size as u64;
        let cut = (taddr - e.addr).next_multiple_of(e.granularity as u64) + e.addr;
        if !tfree || cut >= end {
            return 0;
        }
        let bytes = (end - cut) as usize;
        // SAFETY: `[cut, end)` is mapped (inside the segment) and lies in a free block, so
        // nothing handed out uses it.
        unsafe { vm.unmap(cut, bytes) };
        self.free_set(seg.pool).remove(tsize, taddr, tail);
        let keep = (cut - taddr) as usize;
        if keep > 0 {
            self.nodes[tail as usize].size = keep;
            self.free_set(seg.pool).insert(keep, taddr, tail);
        } else if tprev != NIL {
            self.nodes[tprev as usize].next = NIL;
            self.segs[si as usize].tail = tprev;
            self.spare_nodes.push(tail);
        } else {
            // Nothing mapped anymore: the segment goes, the address range stays reserved.
            self.spare_nodes.push(tail);
            self.segs[si as usize].live = false;
            self.spare_segs.push(si);
            self.stats.segments -= 1;
            if let Some(x) = self.expandable.as_mut() {
                x.seg = None;
            }
        }
        self.segs[si as usize].size -= bytes;
        self.stats.reserved_bytes -= bytes as u64;
        self.stats.backend_frees += 1;
        self.record(start, TraceEventKind::SegmentFree, cut, bytes as u64);
        bytes as u64
    }

    fn release_segment<B: Backend + ?Sized>(&mut self, backend: &B, start: Instant, i: u32) -> u64 {
        let seg = self.segs[i as usize].clone();
        self.free_set(seg.pool).remove(seg.size, seg.addr, seg.head);
        self.spare_nodes.push(seg.head);
        self.segs[i as usize].live = false;
        self.spare_segs.push(i);
        // SAFETY: the segment came from `alloc_segment(seg.size)` and its only block is free,
        // so nothing handed out by this allocator points into it.
        unsafe { backend.free_segment(seg.addr, seg.size) };
        self.stats.reserved_bytes -= seg.size as u64;
        self.stats.segments -= 1;
        self.stats.backend_frees += 1;
        self.record(
            start,
            TraceEventKind::SegmentFree,
            seg.addr,
            seg.size as u64,
        );
        seg.size as u64
    }

    #[inline]
    fn record(&mut self, start: Instant, kind: TraceEventKind, addr: u64, size: u64) {
        if self.trace.enabled() {
            let event = TraceEvent {
                kind,
                addr,
                size,
                time_ns: start.elapsed().as_nanos() as u64,
                label: trace_label(),
                allocated_bytes: self.stats.allocated_bytes,
                reserved_bytes: self.stats.reserved_bytes,
            };
            self.trace.push(event);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The state is kept consistent at every unlock point, so a panic elsewhere does not
    // invalidate it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<B: Backend> CachingAllocator<B> {
    /// Creates an allocator with the default settings drawing from `backend` (expandable
    /// segments where the backend can map pages, fixed segments otherwise).
    pub fn new(backend: B) -> Self {
        let name = backend.name();
        // `Auto` never fails: every reason it cannot use expandable segments is a fallback.
        let resolved = match resolve_expandable(ExpandableSegments::Auto, &backend, None, &name) {
            Ok(r) => r,
            Err(e) => Resolved {
                expandable: None,
                mode: SegmentMode::FixedUnavailable,
                reason: Some(e.to_string()),
            },
        };
        Self::build(backend, AllocatorConfig::default(), None, name, resolved)
    }

    /// Creates an allocator with `config`; reserves `config.preallocate` bytes at once.
    ///
    /// Fails on a setting that cannot be used: an invalid value, `memory_fraction` on a device
    /// of unknown capacity, `expandable_segments:true` on a backend that cannot map pages or
    /// whose self-test fails ([`ConfigError::ExpandableSelfTestFailed`]), or a failed
    /// preallocation. Under the default `expandable_segments:auto` those expandable-segment
    /// failures fall back to fixed segments instead ([`Self::fixed_segments_reason`]).
    pub fn with_config(backend: B, config: AllocatorConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let name = backend.name();
        let limit = config.limit_bytes(backend.capacity(), &name)?;
        let preallocate = config.preallocate;
        let resolved = resolve_expandable(config.expandable_segments, &backend, limit, &name)?;
        let this = Self::build(backend, config, limit, name, resolved);
        if preallocate > 0 {
            this.reserve(preallocate)
                .map_err(|e| ConfigError::PreallocateFailed {
                    bytes: preallocate,
                    message: e.to_string(),
                })?;
        }
        Ok(this)
    }

    fn build(
        backend: B,
        config: AllocatorConfig,
        limit: Option<u64>,
        name: String,
        resolved: Resolved,
    ) -> Self {
        let mut state = State::new(config.trace_capacity);
        state.expandable = resolved.expandable;
        Self {
            id: NEXT_ALLOCATOR_ID.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(state),
            config,
            limit,
            handlers: RwLock::new(Vec::new()),
            next_handler: AtomicU64::new(1),
            start: Instant::now(),
            name,
            segment_mode: resolved.mode,
            fixed_segments_reason: resolved.reason,
            backend,
        }
    }

    /// Whether the large pool has an expandable segment (what [`ExpandableSegments::Auto`]
    /// chose, or `On`); `false`: fixed segments only.
    pub fn uses_expandable_segments(&self) -> bool {
        self.segment_mode == SegmentMode::Expandable
    }

    /// Which segments the large pool uses, and for fixed ones whether by configuration or
    /// because expandable segments are unavailable.
    pub fn segment_mode(&self) -> SegmentMode {
        self.segment_mode
    }

    /// Why this allocator uses fixed segments (`None` when it uses expandable segments):
    /// `expandable_segments:false`, a backend that cannot map pages, or — under `auto` — a
    /// failed self-test or address-space reservation (those also log a warning).
    pub fn fixed_segments_reason(&self) -> Option<&str> {
        self.fixed_segments_reason.as_deref()
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The settings this allocator runs with.
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    /// The memory limit in bytes, if one is configured.
    pub fn memory_limit(&self) -> Option<u64> {
        self.limit
    }

    /// The block size a request of `bytes` bytes gets (`None` if it overflows).
    pub fn rounded_size(&self, bytes: usize) -> Option<usize> {
        round_with_divisions(bytes, self.config.roundup_power2_divisions)
    }

    fn segment_size(&self, pool: PoolKind, size: usize) -> usize {
        let preferred = match pool {
            PoolKind::Small => SMALL_SEGMENT,
            PoolKind::Large if size < MIN_LARGE_ALLOC => LARGE_SEGMENT,
            PoolKind::Large => size.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE),
        };
        match self.config.max_split_size {
            // A request below the max split size must get a segment it may be split from.
            Some(ms) if size < ms && preferred >= ms => size,
            _ => preferred,
        }
    }

    /// Allocates a block of at least `bytes` bytes.
    pub fn allocate(&self, bytes: usize) -> Result<Block, OutOfMemory> {
        let size = self
            .rounded_size(bytes)
            .filter(|&s| (s as u64) < ADDR_LIMIT)
            .ok_or_else(|| {
                let mut st = lock(&self.state);
                self.fail(&mut st, bytes, usize::MAX)
            })?;
        let pool = if size <= SMALL_SIZE {
            PoolKind::Small
        } else {
            PoolKind::Large
        };
        let max_split = self.config.max_split_size;
        let mut st = lock(&self.state);
        if let Some(slot) = st.take_free(pool, size, max_split) {
            return Ok(self.hand_out(&mut st, slot, size, bytes));
        }
        if self.grow(&mut st, pool, size) {
            if let Some(slot) = st.take_free(pool, size, max_split) {
                return Ok(self.hand_out(&mut st, slot, size, bytes));
            }
        }
        if !IN_HANDLER.with(Cell::get) {
            drop(st);
            let freed = self.run_pressure_handlers(size);
            st = lock(&self.state);
            if freed > 0 {
                if let Some(slot) = st.take_free(pool, size, max_split) {
                    return Ok(self.hand_out(&mut st, slot, size, bytes));
                }
                if self.grow(&mut st, pool, size) {
                    if let Some(slot) = st.take_free(pool, size, max_split) {
                        return Ok(self.hand_out(&mut st, slot, size, bytes));
                    }
                }
            }
        }
        Err(self.fail(&mut st, bytes, size))
    }

    fn hand_out(&self, st: &mut State, slot: u32, size: usize, requested: usize) -> Block {
        let id = st.next_id;
        st.next_id += 1;
        let n = &mut st.nodes[slot as usize];
        n.allocated = true;
        n.rounded = size;
        n.requested = requested;
        n.id = id;
        let (addr, block_size) = (n.addr, n.size);
        let s = &mut st.stats;
        s.allocated_bytes += size as u64;
        s.peak_allocated_bytes = s.peak_allocated_bytes.max(s.allocated_bytes);
        s.active_bytes += block_size as u64;
        s.peak_active_bytes = s.peak_active_bytes.max(s.active_bytes);
        s.active_blocks += 1;
        s.peak_active_blocks = s.peak_active_blocks.max(s.active_blocks);
        s.requested_bytes += requested as u64;
        s.num_allocs += 1;
        st.record(self.start, TraceEventKind::Alloc, addr, size as u64);
        Block {
            addr,
            size,
            requested,
            id,
            slot,
            owner: self.id,
        }
    }

    fn fail(&self, st: &mut State, requested: usize, rounded: usize) -> OutOfMemory {
        st.stats.num_ooms += 1;
        st.record(self.start, TraceEventKind::Oom, 0, rounded as u64);
        let s = st.snapshot_stats();
        let usable = self.largest_usable(st, rounded);
        // What could still be reserved: the device's free memory, capped by the limit.
        let under_limit = self.limit.map(|l| l.saturating_sub(s.reserved_bytes));
        let device_free = match (self.backend.free_memory().map(|b| b as u64), under_limit) {
            (Some(d), Some(l)) => d.min(l),
            (d, l) => d.or(l).unwrap_or(0),
        };
        // Fragmentation: the free memory would hold the request, but not in one piece — it is
        // cached in blocks that are too small, or split between such blocks and the device.
        let cause = if s.cached_free_bytes >= rounded as u64
            || (s.cached_free_bytes > 0 && s.cached_free_bytes + device_free >= rounded as u64)
        {
            OomCause::Fragmentation
        } else if self
            .limit
            .is_some_and(|l| s.reserved_bytes.saturating_add(rounded as u64) > l)
        {
            OomCause::LimitReached
        } else {
            OomCause::DeviceFull
        };
        OutOfMemory {
            device: self.name.clone(),
            requested,
            rounded,
            capacity: self.backend.capacity().map(|c| c as u64),
            limit: self.limit,
            allocated: s.allocated_bytes,
            reserved: s.reserved_bytes,
            cached_free: s.cached_free_bytes,
            largest_free_block: usable,
            device_free,
            cause,
            segments: self.segment_mode,
        }
    }

    /// The largest free block a request of `size` bytes may use: same pool, allowed by the
    /// max-split rules.
    fn largest_usable(&self, st: &State, size: usize) -> u64 {
        let set = if size <= SMALL_SIZE {
            &st.small_free
        } else {
            &st.large_free
        };
        set.descending()
            .find(|&(b, _, slot)| {
                self.config
                    .max_split_size
                    .is_none_or(|ms| st.split_rules_allow(ms, size, b, slot))
            })
            .map_or(0, |(b, _, _)| b as u64)
    }

    /// Gets a new segment for a `size` request into `pool`'s free set: garbage collection,
    /// the preferred then the exact segment size, then release of the cache and a retry.
    fn grow(&self, st: &mut State, pool: PoolKind, size: usize) -> bool {
        let preferred = self.segment_size(pool, size);
        let bound = self
            .limit
            .or_else(|| self.backend.capacity().map(|c| c as u64));
        if let (Some(t), Some(bound)) = (self.config.garbage_collection_threshold, bound) {
            self.collect_garbage(st, preferred, (bound as f64 * t) as u64);
        }
        if pool == PoolKind::Large && st.expandable.is_some() {
            for attempt in 0..2 {
                if self.expand(st, size) {
                    return true;
                }
                if attempt == 0 {
                    if st.release_segments(&self.backend, self.start, |_| true) == 0 {
                        break;
                    }
                    st.stats.alloc_retries += 1;
                }
            }
            // The address range is used up (or the device is full): plain segments below.
        }
        for attempt in 0..2 {
            if self.new_segment(st, pool, preferred)
                || (preferred != size && self.new_segment(st, pool, size))
            {
                return true;
            }
            if attempt == 0 {
                if st.release_segments(&self.backend, self.start, |_| true) == 0 {
                    return false;
                }
                st.stats.alloc_retries += 1;
            }
        }
        false
    }

    /// Releases fully free segments, least recently freed first, until a new segment of
    /// `incoming` bytes keeps reserved memory under `threshold`.
    fn collect_garbage(&self, st: &mut State, incoming: usize, threshold: u64) {
        if st.stats.reserved_bytes + incoming as u64 <= threshold {
            return;
        }
        let mut idle: Vec<(u64, u32)> = st
            .segs
            .iter()
            .enumerate()
            // The expandable segment is mapped pages, not a backend segment: only its free tail
            // can go, by `shrink_expandable`.
            .filter(|(_, s)| s.live && !s.expandable)
            .filter_map(|(i, s)| {
                let h = &st.nodes[s.head as usize];
                (!h.allocated && h.next == NIL).then_some((h.freed_at, i as u32))
            })
            .collect();
        idle.sort_unstable();
        for (_, i) in idle {
            if st.stats.reserved_bytes + incoming as u64 <= threshold {
                break;
            }
            st.release_segment(&self.backend, self.start, i);
        }
    }

    /// Maps enough pages at the end of the expandable segment for a free block of `size` bytes
    /// there (the free tail grows; no new hole is needed).
    fn expand(&self, st: &mut State, size: usize) -> bool {
        let (Some(e), Some(vm)) = (st.expandable, self.backend.virtual_memory()) else {
            return false;
        };
        let (mapped, tail_free) = match e.seg {
            Some(si) => {
                let seg = &st.segs[si as usize];
                let t = &st.nodes[seg.tail as usize];
                (seg.size, if t.allocated { 0 } else { t.size })
            }
            None => (0, 0),
        };
        let need = size
            .saturating_sub(tail_free)
            .next_multiple_of(e.granularity);
        if need == 0 {
            // The free tail already fits the request.
            return true;
        }
        if mapped + need > e.virt
            || self
                .limit
                .is_some_and(|l| st.stats.reserved_bytes + need as u64 > l)
        {
            return false;
        }
        let at = e.addr + mapped as u64;
        // SAFETY: `[at, at + need)` lies in the reserved range past the mapped prefix.
        if let Err(err) = unsafe { vm.map(at, need) } {
            if let BackendError::Driver(msg) = err {
                tracing::warn!(device = %self.name, "mapping pages failed: {msg}");
            }
            return false;
        }
        let tick = st.tick;
        match e.seg {
            None => {
                let si = match st.spare_segs.pop() {
                    Some(i) => i,
                    None => {
                        st.segs.push(Segment {
                            addr: 0,
                            size: 0,
                            pool: PoolKind::Large,
                            head: NIL,
                            tail: NIL,
                            live: false,
                            expandable: true,
                        });
                        (st.segs.len() - 1) as u32
                    }
                };
                let head = st.new_node(Node {
                    addr: at,
                    size: need,
                    rounded: 0,
                    requested: 0,
                    id: 0,
                    seg: si,
                    prev: NIL,
                    next: NIL,
                    pool: PoolKind::Large,
                    allocated: false,
                    freed_at: tick,
                });
                st.segs[si as usize] = Segment {
                    addr: at,
                    size: need,
                    pool: PoolKind::Large,
                    head,
                    tail: head,
                    live: true,
                    expandable: true,
                };
                st.free_set(PoolKind::Large).insert(need, at, head);
                st.stats.segments += 1;
                if let Some(x) = st.expandable.as_mut() {
                    x.seg = Some(si);
                }
            }
            Some(si) => {
                let tail = st.segs[si as usize].tail;
                let (taddr, tsize, tfree) = {
                    let t = &st.nodes[tail as usize];
                    (t.addr, t.size, !t.allocated)
                };
                if tfree {
                    st.free_set(PoolKind::Large).remove(tsize, taddr, tail);
                    st.nodes[tail as usize].size += need;
                    st.free_set(PoolKind::Large)
                        .insert(tsize + need, taddr, tail);
                } else {
                    let node = st.new_node(Node {
                        addr: at,
                        size: need,
                        rounded: 0,
                        requested: 0,
                        id: 0,
                        seg: si,
                        prev: tail,
                        next: NIL,
                        pool: PoolKind::Large,
                        allocated: false,
                        freed_at: tick,
                    });
                    st.nodes[tail as usize].next = node;
                    st.segs[si as usize].tail = node;
                    st.free_set(PoolKind::Large).insert(need, at, node);
                }
                st.segs[si as usize].size += need;
            }
        }
        let s = &mut st.stats;
        s.reserved_bytes += need as u64;
        s.peak_reserved_bytes = s.peak_reserved_bytes.max(s.reserved_bytes);
        s.backend_allocs += 1;
        st.record(self.start, TraceEventKind::SegmentAlloc, at, need as u64);
        true
    }

    fn new_segment(&self, st: &mut State, pool: PoolKind, bytes: usize) -> bool {
        if self
            .limit
            .is_some_and(|l| st.stats.reserved_bytes + bytes as u64 > l)
        {
            return false;
        }
        let addr = match self.backend.alloc_segment(bytes) {
            Ok(addr) if addr.saturating_add(bytes as u64) < ADDR_LIMIT => addr,
            Ok(addr) => {
                tracing::warn!(device = %self.name, "segment at {addr:#x} lies above 2^48; not usable");
                // SAFETY: just obtained from the backend with this size and never handed out.
                unsafe { self.backend.free_segment(addr, bytes) };
                return false;
            }
            Err(BackendError::OutOfMemory { .. }) => return false,
            Err(e) => {
                tracing::warn!(device = %self.name, "segment allocation failed: {e}");
                return false;
            }
        };
        let seg_index = match st.spare_segs.pop() {
            Some(i) => i,
            None => {
                st.segs.push(Segment {
                    addr: 0,
                    size: 0,
                    pool,
                    head: NIL,
                    tail: NIL,
                    live: false,
                    expandable: false,
                });
                (st.segs.len() - 1) as u32
            }
        };
        let tick = st.tick;
        let head = st.new_node(Node {
            addr,
            size: bytes,
            rounded: 0,
            requested: 0,
            id: 0,
            seg: seg_index,
            prev: NIL,
            next: NIL,
            pool,
            allocated: false,
            freed_at: tick,
        });
        st.segs[seg_index as usize] = Segment {
            addr,
            size: bytes,
            pool,
            head,
            tail: head,
            live: true,
            expandable: false,
        };
        st.free_set(pool).insert(bytes, addr, head);
        let s = &mut st.stats;
        s.reserved_bytes += bytes as u64;
        s.peak_reserved_bytes = s.peak_reserved_bytes.max(s.reserved_bytes);
        s.segments += 1;
        s.backend_allocs += 1;
        st.record(self.start, TraceEventKind::SegmentAlloc, addr, bytes as u64);
        true
    }

    fn run_pressure_handlers(&self, size: usize) -> usize {
        let handlers: Vec<PressureHandler> = self
            .handlers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, h)| Arc::clone(h))
            .collect();
        if handlers.is_empty() {
            return 0;
        }
        IN_HANDLER.with(|f| f.set(true));
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                IN_HANDLER.with(|f| f.set(false));
            }
        }
        let _reset = Reset;
        let mut freed = 0usize;
        for h in handlers {
            freed = freed.saturating_add(h(size));
        }
        freed
    }

    /// Returns a block to the cache, merging it with free neighbours.
    ///
    /// A block handed out by another allocator (another device, or one already dropped) is
    /// refused with a logged error and left alone: freeing it here would mark a live block of
    /// this allocator free and hand its memory out twice.
    pub fn free(&self, block: Block) {
        let mut st = lock(&self.state);
        let mut slot = block.slot;
        let owned = block.owner == self.id
            && st.nodes.get(slot as usize).is_some_and(|n| {
                n.allocated && n.addr == block.addr && n.id == block.id && n.rounded == block.size
            });
        if !owned {
            tracing::error!(
                device = %self.name,
                "refused to free block {:#x} ({} bytes): another allocator handed it out",
                block.addr,
                block.size
            );
            return;
        }
        st.tick += 1;
        let tick = st.tick;
        let (pool, node_size) = {
            let n = &mut st.nodes[slot as usize];
            n.allocated = false;
            n.freed_at = tick;
            (n.pool, n.size)
        };
        let s = &mut st.stats;
        s.allocated_bytes -= block.size as u64;
        s.active_bytes -= node_size as u64;
        s.active_blocks -= 1;
        s.requested_bytes -= block.requested as u64;
        s.num_frees += 1;
        st.record(
            self.start,
            TraceEventKind::Free,
            block.addr,
            block.size as u64,
        );

        let prev = st.nodes[slot as usize].prev;
        if prev != NIL && !st.nodes[prev as usize].allocated {
            let (psize, paddr) = (st.nodes[prev as usize].size, st.nodes[prev as usize].addr);
            st.free_set(pool).remove(psize, paddr, prev);
            self.absorb_next(&mut st, prev);
            slot = prev;
        }
        let next = st.nodes[slot as usize].next;
        if next != NIL && !st.nodes[next as usize].allocated {
            let (nsize, naddr) = (st.nodes[next as usize].size, st.nodes[next as usize].addr);
            st.free_set(pool).remove(nsize, naddr, next);
            self.absorb_next(&mut st, slot);
        }
        let n = &mut st.nodes[slot as usize];
        n.freed_at = tick;
        let (size, addr) = (n.size, n.addr);
        st.free_set(pool).insert(size, addr, slot);
    }

    /// Merges the block after `slot` into `slot` (both in the same segment).
    fn absorb_next(&self, st: &mut State, slot: u32) {
        let next = st.nodes[slot as usize].next;
        let (nsize, nnext) = (st.nodes[next as usize].size, st.nodes[next as usize].next);
        let n = &mut st.nodes[slot as usize];
        n.size += nsize;
        n.next = nnext;
        let seg = n.seg;
        if nnext != NIL {
            st.nodes[nnext as usize].prev = slot;
        } else {
            st.segs[seg as usize].tail = slot;
        }
        st.spare_nodes.push(next);
    }

    /// Current statistics.
    pub fn stats(&self) -> MemoryStats {
        lock(&self.state).snapshot_stats()
    }

    /// Resets peaks to the current values.
    pub fn reset_peak_stats(&self) {
        let mut st = lock(&self.state);
        let s = &mut st.stats;
        s.peak_allocated_bytes = s.allocated_bytes;
        s.peak_reserved_bytes = s.reserved_bytes;
        s.peak_active_bytes = s.active_bytes;
        s.peak_active_blocks = s.active_blocks;
    }

    /// Returns every cached, fully free segment to the backend; returns the bytes released.
    /// Frees nothing that is still allocated.
    pub fn empty_cache(&self) -> u64 {
        let mut st = lock(&self.state);
        st.release_segments(&self.backend, self.start, |_| true)
    }

    /// Preallocates one large-pool segment of `bytes` (rounded to 512) and keeps it cached, so
    /// later requests above 1 MiB are carved from it without backend calls. Returns the bytes
    /// reserved. It is a fixed segment even when the allocator has an expandable one (whose
    /// pages are mapped only as the pool grows), so it stays reserved until released. With `max_split_size` set, a segment at least that large serves only requests
    /// close to its size (it is not split). The segment is cache like any other: `empty_cache`
    /// releases it while it is unused, and so does the out-of-memory path when a request needs
    /// a segment of another shape.
    pub fn reserve(&self, bytes: usize) -> Result<u64, OutOfMemory> {
        let size = round_size(bytes);
        let mut st = lock(&self.state);
        if size as u64 >= ADDR_LIMIT {
            return Err(self.fail(&mut st, bytes, size));
        }
        for attempt in 0..2 {
            if self.new_segment(&mut st, PoolKind::Large, size) {
                return Ok(size as u64);
            }
            if attempt == 0 {
                if st.release_segments(&self.backend, self.start, |_| true) == 0 {
                    break;
                }
                st.stats.alloc_retries += 1;
            }
        }
        Err(self.fail(&mut st, bytes, size))
    }

    /// Registers a callback run when a request cannot be served even after the cache was
    /// released. It gets the rounded request size and returns the bytes it freed (e.g. a KV
    /// cache that evicts entries); the request is retried once if any handler freed something.
    /// Handlers run without the allocator's lock, so they may free (and allocate) memory; a
    /// handler's own allocations do not run the handlers again. A handler that holds
    /// allocations or a clone of the device keeps this allocator alive: remove it with
    /// [`CachingAllocator::remove_pressure_handler`] when it is no longer needed.
    pub fn add_pressure_handler(
        &self,
        handler: impl Fn(usize) -> usize + Send + Sync + 'static,
    ) -> PressureHandlerId {
        let id = PressureHandlerId(self.next_handler.fetch_add(1, Ordering::Relaxed));
        self.handlers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, Arc::new(handler)));
        id
    }

    /// Unregisters a pressure handler; returns whether it was registered.
    pub fn remove_pressure_handler(&self, id: PressureHandlerId) -> bool {
        let mut hs = self.handlers.write().unwrap_or_else(|e| e.into_inner());
        let before = hs.len();
        hs.retain(|(h, _)| *h != id);
        hs.len() != before
    }

    /// The segments and blocks, by address, with the statistics.
    pub fn snapshot(&self) -> MemorySnapshot {
        let st = lock(&self.state);
        let mut segments: Vec<SegmentSnapshot> = st
            .segs
            .iter()
            .filter(|s| s.live)
            .map(|s| {
                let mut blocks = Vec::new();
                let mut at = s.head;
                while at != NIL {
                    let n = &st.nodes[at as usize];
                    blocks.push(BlockSnapshot {
                        addr: n.addr,
                        size: n.size as u64,
                        allocated: n.allocated,
                        requested: if n.allocated { n.requested as u64 } else { 0 },
                        id: if n.allocated { n.id } else { 0 },
                    });
                    at = n.next;
                }
                SegmentSnapshot {
                    addr: s.addr,
                    size: s.size as u64,
                    pool: s.pool,
                    expandable: s.expandable,
                    blocks,
                }
            })
            .collect();
        segments.sort_by_key(|s| s.addr);
        MemorySnapshot {
            device: self.name.clone(),
            expandable_segments: self.uses_expandable_segments(),
            stats: st.snapshot_stats(),
            segments,
        }
    }

    /// A copy of the event trace ring.
    pub fn trace(&self) -> Trace {
        lock(&self.state).trace.to_trace()
    }

    /// Starts recording the last `events` allocator events (0 stops recording); replaces the
    /// ring, so earlier events are dropped.
    pub fn set_trace_capacity(&self, events: usize) {
        lock(&self.state).trace = TraceRing::new(events);
    }

    /// Empties the event trace ring.
    pub fn clear_trace(&self) {
        lock(&self.state).trace.clear();
    }

    /// Verifies the allocator's internal consistency: blocks tile their segments exactly, no
    /// two free blocks are adjacent (coalescing is complete), the free sets hold exactly the
    /// free blocks, and the statistics equal sums over the blocks. For tests and debugging.
    pub fn check_invariants(&self) -> Result<(), String> {
        let st = lock(&self.state);
        let (mut reserved, mut active, mut allocated, mut blocks, mut free_count) =
            (0u64, 0u64, 0u64, 0u64, 0usize);
        let mut segments = 0u64;
        for (i, s) in st.segs.iter().enumerate().filter(|(_, s)| s.live) {
            segments += 1;
            reserved += s.size as u64;
            let mut at = s.head;
            let mut addr = s.addr;
            let mut prev = NIL;
            let mut prev_free = false;
            while at != NIL {
                let n = &st.nodes[at as usize];
                if n.addr != addr || n.seg != i as u32 || n.prev != prev || n.pool != s.pool {
                    return Err(format!(
                        "segment {:#x}: block {:#x} out of place",
                        s.addr, n.addr
                    ));
                }
                if n.allocated {
                    active += n.size as u64;
                    allocated += n.rounded as u64;
                    blocks += 1;
                    if n.rounded > n.size {
                        return Err(format!("block {:#x} smaller than its request", n.addr));
                    }
                } else {
                    if prev_free {
                        return Err(format!("free block {:#x} not coalesced", n.addr));
                    }
                    free_count += 1;
                    let set = match s.pool {
                        PoolKind::Small => &st.small_free,
                        PoolKind::Large => &st.large_free,
                    };
                    if !set.contains(n.size, n.addr, at) {
                        return Err(format!("free block {:#x} missing from its pool", n.addr));
                    }
                }
                prev_free = !n.allocated;
                addr += n.size as u64;
                prev = at;
                at = n.next;
            }
            if addr != s.addr + s.size as u64 {
                return Err(format!("blocks of segment {:#x} do not tile it", s.addr));
            }
            if prev != s.tail {
                return Err(format!("segment {:#x}: wrong tail block", s.addr));
            }
        }
        let s = &st.stats;
        if free_count != st.small_free.len() + st.large_free.len() {
            return Err("free sets hold blocks that are not free".into());
        }
        if (reserved, active, allocated, blocks, segments)
            != (
                s.reserved_bytes,
                s.active_bytes,
                s.allocated_bytes,
                s.active_blocks,
                s.segments,
            )
        {
            return Err(format!(
                "statistics disagree with the blocks: reserved {reserved}/{}, active {active}/{}, \
                 allocated {allocated}/{}, blocks {blocks}/{}, segments {segments}/{}",
                s.reserved_bytes, s.active_bytes, s.allocated_bytes, s.active_blocks, s.segments
            ));
        }
        Ok(())
    }
}

impl<B: Backend + ?Sized> Drop for CachingAllocator<B> {
    fn drop(&mut self) {
        // An `Allocation` keeps its device (and so this allocator) alive, so no block handed out
        // through a device can be live here; raw `Block`s are plain data, and dereferencing
        // their addresses was the caller's unsafe business.
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if let (Some(e), Some(vm)) = (st.expandable, self.backend.virtual_memory()) {
            if let Some(si) = e.seg {
                let seg = &st.segs[si as usize];
                // SAFETY: the mapped prefix of the range, unused from now on (see above).
                unsafe { vm.unmap(seg.addr, seg.size) };
            }
            // SAFETY: reserved by this allocator, nothing mapped anymore.
            unsafe { vm.release_range(e.addr, e.virt) };
        }
        for seg in st.segs.iter().filter(|s| s.live && !s.expandable) {
            // SAFETY: the segment came from this backend with this size and the allocator is
            // going away, so it will never hand out a block of it again (see above).
            unsafe { self.backend.free_segment(seg.addr, seg.size) };
        }
    }
}

impl<B: Backend + ?Sized> fmt::Debug for CachingAllocator<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingAllocator")
            .field("device", &self.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
