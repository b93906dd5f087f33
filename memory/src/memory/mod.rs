//! Per-device memory tools: statistics, peaks, cache release, preallocation, snapshots and the
//! event trace. Every function takes the [`Device`] whose allocator it asks.
//!
//! Against fragmentation (variable-length batches that leave holes of every size), the
//! usual remedies: [`SequenceBuckets`] (pad lengths to a few fixed ones), [`warmup`] (shape
//! the pool with the largest batch before the loop), [`Workspace`] and [`reserve`]
//! (preallocate), [`empty_cache`] between phases, and expandable segments — on by default
//! wherever the backend can map pages (the host backend on Unix, GPUs with virtual memory
//! management; [`uses_expandable_segments`] tells), `expandable_segments:false`
//! ([`AllocatorConfig::with_expandable_segments`](crate::alloc::AllocatorConfig::with_expandable_segments))
//! for PyTorch's fixed segments.
//! `examples/fragmentation.rs` shows each one.
//!
//! Configuration comes from `VRAMGUARD_ALLOC_CONF` for the process-wide devices
//! ([`Device::Host`], [`Device::cuda`]) and from [`AllocatorConfig`](crate::alloc::AllocatorConfig) for devices made with
//! [`Device::host_with_config`]. A bad `VRAMGUARD_ALLOC_CONF` never panics and is never
//! silent: [`Device::cuda`] returns it as [`crate::device::DeviceError::Config`], naming the key;
//! the host device, whose API cannot return it, prints it once on stderr (or to a `tracing`
//! subscriber, if one is installed), uses the defaults, and [`config_error`] returns it.
//! Programs that build their own devices honour the variable with
//! [`AllocatorConfig::from_env`](crate::alloc::AllocatorConfig::from_env).
//!
//! ```
//! use vramguard_alloc::{AllocatorConfig, HostBackend, OomCause};
//! use vramguard_memory::{memory, Device};
//!
//! // A host device that behaves like a 64 MiB GPU.
//! let config = AllocatorConfig::parse("max_split_size_mb:32,garbage_collection_threshold:0.8")?;
//! let device = Device::host_pool(HostBackend::with_capacity(64 << 20), config)?;
//! let a = device.allocate(1000).expect("fits");
//! let s = memory::stats(&device);
//! assert_eq!(s.allocated_bytes, 1024); // rounded to 512 bytes
//! assert_eq!(s.reserved_bytes, 2 << 20); // one small-pool segment
//! drop(a);
//! assert_eq!(memory::empty_cache(&device), 2 << 20);
//!
//! let err = device.allocate(100 << 20).unwrap_err();
//! assert_eq!(err.cause, OomCause::DeviceFull);
//! println!("{err}"); // says what happened and what helps
//! println!("{}", memory::snapshot(&device).to_json());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod bucket;
mod max_batch;
mod workspace;

use crate::alloc::SetupError;
pub use crate::alloc::{
    ConfigSource, DetailedStats, LiveAllocation, MemorySnapshot, MemoryStats, OomCause, OomContext,
    OutOfMemory, PoolStats, PressureHandlerId, SegmentMode, Stat, Trace,
};
use crate::Device;
pub use bucket::{BucketError, SequenceBuckets};
pub use max_batch::{
    max_batch, BatchRun, MaxBatch, MaxBatchError, MaxBatchSearch, MaybeOutOfMemory, RunOutcome,
    RunReason,
};
pub use workspace::{Workspace, WorkspaceError, WorkspaceView};

/// Current statistics of `device`'s allocator.
pub fn stats(device: &Device) -> MemoryStats {
    device.allocator().stats()
}

/// PyTorch's statistics of `device` (`torch.cuda.memory_stats()`); `.to_map()` gives them under
/// PyTorch's keys.
pub fn detailed_stats(device: &Device) -> DetailedStats {
    device.allocator().detailed_stats()
}

/// The text table of `torch.cuda.memory_summary()` for `device`.
pub fn memory_summary(device: &Device) -> String {
    device.allocator().memory_summary()
}

/// Resets the accumulated counts of `device` (totals allocated and freed, retries, OOMs, backend
/// calls) to 0, as `torch.cuda.reset_accumulated_memory_stats()`.
pub fn reset_accumulated_stats(device: &Device) {
    device.allocator().reset_accumulated_stats()
}

/// Resets peak statistics of `device` to the current values.
pub fn reset_peak_stats(device: &Device) {
    device.allocator().reset_peak_stats()
}

/// Returns cached, unused segments of `device` to the backend; returns the bytes released.
///
/// This frees nothing that is still referenced: drop the values first.
pub fn empty_cache(device: &Device) -> u64 {
    device.allocator().empty_cache()
}

/// Preallocates `bytes` on `device` as one cached segment, so that later large requests are
/// carved from it without backend calls; returns the bytes reserved.
pub fn reserve(device: &Device, bytes: usize) -> Result<u64, OutOfMemory> {
    device.allocator().reserve(bytes)
}

/// The segments and blocks of `device`'s allocator, with its statistics (`to_json()` exports it).
pub fn snapshot(device: &Device) -> MemorySnapshot {
    device.allocator().snapshot()
}

/// Whether `device`'s allocator runs with expandable segments (what the default
/// `expandable_segments:auto` chose); [`crate::alloc::CachingAllocator::fixed_segments_reason`]
/// says why not.
pub fn uses_expandable_segments(device: &Device) -> bool {
    device.allocator().uses_expandable_segments()
}

/// Records the last `events` allocator events of `device` from now on (0 stops recording):
/// allocs and frees with where each block was made ([`crate::alloc::AllocOrigin`]: the
/// caller's line, the op, the shape), segment maps and unmaps, out-of-memory errors, each with
/// the thread's label ([`crate::alloc::TraceLabel`]: batch-scope iteration and tags). Recording
/// is off by default; `trace_capacity` in `VRAMGUARD_ALLOC_CONF` turns it on at start. Origins
/// of live blocks are kept whether or not the trace records (the out-of-memory error lists
/// them). Recording costs every alloc and free two clock reads and an event: BENCHMARKS.md's
/// `alloc` section gives the pair's time with and without it (`cached_pair_ns_recording`
/// beside `cached_pair_ns`).
pub fn record_trace(device: &Device, events: usize) {
    device.allocator().set_trace_capacity(events)
}

/// The recent allocator events of `device` (`to_json()` exports them).
pub fn trace(device: &Device) -> Trace {
    device.allocator().trace()
}

/// A self-contained HTML page for `device` (no network): every allocation's lifetime over time
/// from the trace, with its source line, op and shape on hover; allocated and reserved bytes;
/// labels as bands; OOM and segment map/unmap markers; the segment map after any event (a
/// slider); the fragmentation figures with their definitions. Record first
/// ([`record_trace`]), then write the page to a file and open it in a browser.
pub fn html_report(device: &Device, title: &str) -> String {
    crate::alloc::html_report(title, &trace(device), &snapshot(device))
}

/// Writes the segments, blocks and event trace of `device` to `path` in PyTorch's snapshot
/// format: the pickle `torch.cuda.memory._dump_snapshot` writes, so the file can be dropped on
/// <https://pytorch.org/memory_viz> or read with `torch.cuda._memory_viz`.
///
/// Blocks and events carry where each allocation was made as their stack frame (file, line,
/// and the op with the tensor's shape as the frame's name); events carry their label (batch
/// scope iteration, tags) as `user_metadata`. The trace holds what [`record_trace`] (or
/// `trace_capacity`) recorded: start recording before the code to look at. Host devices are
/// device 0, GPUs their ordinal; there are no streams (stream 0) and no private pools.
///
/// ```
/// use vramguard_memory::{memory, Device};
///
/// let device = Device::isolated_host();
/// memory::record_trace(&device, 10_000);
/// let x = device.allocate(64 * 1024 * 4)?;
/// let path = std::env::temp_dir().join(format!("vramguard-doc-{}.pickle", std::process::id()));
/// memory::dump_snapshot(&device, &path)?;
/// assert!(std::fs::metadata(&path)?.len() > 0);
/// # std::fs::remove_file(&path)?;
/// # drop(x);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn dump_snapshot(device: &Device, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
    let index = match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(d) => u32::try_from(d.ordinal()).unwrap_or(u32::MAX),
        Device::Host | Device::HostPool(_) => 0,
    };
    std::fs::write(path, device.allocator().memory_viz_pickle(index))
}

/// Registers a callback that frees memory when `device` runs out (see
/// [`crate::alloc::CachingAllocator::add_pressure_handler`]).
pub fn add_pressure_handler(
    device: &Device,
    handler: impl Fn(usize) -> usize + Send + Sync + 'static,
) -> PressureHandlerId {
    device.allocator().add_pressure_handler(handler)
}

/// The error that made the process-wide host device ignore `VRAMGUARD_ALLOC_CONF`, if any
/// (`Device::cuda` returns it instead).
pub fn config_error() -> Option<SetupError> {
    crate::device::config_error()
}

/// What [`warmup`] did to the pool: the closure's output and the backend work it caused.
#[derive(Debug, Clone, PartialEq)]
pub struct Warmup<R> {
    /// What the closure returned.
    pub output: R,
    /// Bytes reserved after the warm-up: the pool the loop will run in.
    pub reserved_bytes: u64,
    /// Bytes the warm-up added to the reservation (0 if it only reused cached segments).
    pub added_bytes: u64,
    /// Segments (or, with expandable segments, mappings) the warm-up obtained from the backend.
    pub backend_allocs: u64,
    /// Segments (or unmappings) the warm-up returned to the backend.
    pub backend_frees: u64,
}

/// Runs `run` once (typically one forward pass with the largest batch and the longest
/// sequence the loop will see) so the pool is shaped before the loop starts; returns what it
/// reserved.
///
/// The tensors it allocates are freed when they die, but their segments stay cached, so the
/// loop that follows is served from them: a loop whose batches are no larger than the warm-up's
/// makes no backend calls (check `stats(&device).backend_allocs`). This is the warm-up remedy
/// against fragmentation: run a max-size dummy batch before the loop. Notes:
///
/// - Call [`empty_cache`] first if an earlier phase left segments of other shapes cached: the
///   warm-up reuses whatever is cached.
/// - Small batches put their tensors into the small pool (requests ≤ 1 MiB), which a max-size
///   batch may not touch; with [`SequenceBuckets`], warm up every bucket, largest first, so
///   each shape the loop can produce has been seen once.
/// - With expandable segments (the default where the backend maps pages) the first pass lays
///   its tensors out as the mapped range grows, and a later batch of the same shape, placed by
///   best fit into the range, may need a granule more: run the shapes twice (see
///   `tensor/tests/alloc/warmup.rs`). With fixed segments one pass shapes the pool.
/// - The closure may do anything the loop does (including its own error handling: its output is
///   returned as is).
///
/// ```
/// use vramguard_memory::{memory, Device};
///
/// let device = Device::isolated_host();
/// // Every tensor of these batches is above 1 MiB (large pool; see the notes above).
/// let forward = |tokens: usize| {
///     let hidden = device.allocate(tokens * 3072 * 4)?;
///     let out = device.allocate(tokens * 768 * 4)?;
///     drop(hidden);
///     Ok::<_, memory::OutOfMemory>(out)
/// };
/// let shaped = memory::warmup(&device, || forward(4 * 512).map(drop));
/// assert!(shaped.output.is_ok());
/// let before = memory::stats(&device);
/// for tokens in [400, 2048, 700, 1500] {
///     drop(forward(tokens)?);
/// }
/// assert_eq!(memory::stats(&device).backend_allocs, before.backend_allocs);
/// assert_eq!(memory::stats(&device).reserved_bytes, shaped.reserved_bytes);
/// # Ok::<(), memory::OutOfMemory>(())
/// ```
pub fn warmup<R>(device: &Device, run: impl FnOnce() -> R) -> Warmup<R> {
    let before = stats(device);
    let output = run();
    let after = stats(device);
    Warmup {
        output,
        reserved_bytes: after.reserved_bytes,
        added_bytes: after.reserved_bytes.saturating_sub(before.reserved_bytes),
        backend_allocs: after.backend_allocs - before.backend_allocs,
        backend_frees: after.backend_frees - before.backend_frees,
    }
}

#[cfg(test)]
mod html_tests;
