//! The caching allocator of [vramguard](https://docs.rs/vramguard) and the memory backends it
//! draws segments from, with its statistics, event trace, snapshots, timeline and
//! out-of-memory text.
//!
//! This crate knows nothing of devices as a user names them, of the other sources of memory,
//! of scopes or of tensors (`vramguard-memory` and `vramguard-tensor` build on it). Users depend
//! on the `vramguard` facade, which re-exports what is public here under one path each.
//!
//!
//! The rules follow PyTorch's CUDA caching allocator (`CUDACachingAllocator.cpp`):
//!
//! - **Rounding**: requests are rounded up to 512 bytes ([`ROUND`]); with
//!   `roundup_power2_divisions: N` (N ≥ 2; 0 and 1 are off) sizes above `512·N` are rounded up
//!   to one of `N` equal steps between consecutive powers of two, per size interval with the
//!   list form `[256:1,512:2,>:8]`. The rounded size is what [`Block::size`] and
//!   `Allocation::size()` report.
//! - **Pools**: rounded sizes up to 1 MiB ([`SMALL_SIZE`]) come from the small pool, carved from
//!   2 MiB segments ([`SMALL_SEGMENT`]); larger ones from the large pool, whose segments are
//!   20 MiB ([`LARGE_SEGMENT`]) for requests under 10 MiB and the request rounded up to 2 MiB
//!   otherwise. When the preferred segment does not fit (device capacity or memory limit), a
//!   segment of exactly the rounded size is tried before anything else fails.
//! - **Best fit** by (size, address) among the pool's free blocks; the block is **split** when
//!   the remainder is worth keeping (≥ 512 B in the small pool, > 1 MiB in the large pool), the
//!   remainder staying cached as a free block. A block that is not split is handed out whole,
//!   and counts whole in [`MemoryStats::allocated_bytes`] and `active_bytes`, as in PyTorch;
//!   `requested_bytes` holds the requests.
//! - **Coalescing**: a freed block merges with free neighbours of the same segment. A freed
//!   block whose only free neighbour follows it has the merge deferred until the pool's next
//!   request, which takes the merged block in place when best fit would (`state/deferred.rs`): the
//!   state every path sees is the eager merge's, without the node churn of a merge and a split
//!   per alloc+free pair.
//! - **Max split size** (`max_split_size_mb`, more than 20 MiB as PyTorch requires): blocks of
//!   at least that size are never split;
//!   requests below it never take them, requests above it take them only when less than 20 MiB
//!   larger than the request. Blocks of the expandable segment are exempt.
//! - **Garbage-collection threshold** (PyTorch's `garbage_collect_cached_blocks`): when a
//!   request misses the cache while reserved memory exceeds `threshold × limit` (the device
//!   capacity when no limit is set), the large pool's fully free fixed segments at least as old
//!   as the average (age: the pool's free-block lookups since the block became free) are
//!   returned, pass after pass, until the excess is reclaimed.
//! - **Expandable segments** (on by default wherever the backend can map pages —
//!   [`Backend::virtual_memory`]: the host backend on Unix, CUDA on GPUs with virtual memory
//!   management that pass a self-test; see [`ExpandableSegments`]): the large pool is one
//!   reserved address range; when no free block fits, pages are mapped at its end (extending a
//!   free tail block, so a large request needs only the missing bytes), and only `empty_cache`
//!   or the out-of-memory path unmap memory: every whole granule of every free block, as
//!   PyTorch does (a plain free never unmaps, so a steady loop makes no backend calls). An
//!   unmapped hole is mapped again when a request fits it with its free neighbours; the range is
//!   twice the larger of the limit and the capacity, since holes keep their address space. Map
//!   and unmap calls count as `backend_allocs`/`backend_frees`. When the range is used up, a
//!   plain segment serves the request; when that does not fit either, the error names the
//!   range ([`OomCause::AddressRangeUsedUp`]). The small pool always uses fixed 2 MiB segments.
//!   [`CachingAllocator::uses_expandable_segments`] tells what an allocator runs with;
//!   `expandable_segments:false` gives PyTorch's default, fixed segments, where each segment is
//!   a backend allocation of its own and the segment rules above (20 MiB segments, exact ones
//!   above 10 MiB) apply to the large pool too.
//! - **Out of memory**: when the backend (or the memory limit) refuses a segment, every fully free
//!   cached segment is returned and the segment is asked for again (`alloc_retries`); then the
//!   registered pressure handlers run (without the allocator's lock) and the request is tried
//!   once more; then [`OutOfMemory`] tells whether the limit was reached or the free memory is
//!   fragmented (the cached free bytes of the request's own pool, plus what the device —
//!   [`Backend::free_memory`] — and the limit still allow, would hold the request, but no single
//!   block does), and which setting helps. The allocator is intact after an OOM. (PyTorch runs
//!   its free-memory callbacks before a new segment; here pressure handlers — a KV cache that
//!   evicts — run only once the cache was released, so a plain cache miss never evicts.)
//! - **Iteration planning** (`iteration_planning`, on by default; expandable segments): under
//!   `#[batch_scope]` each iteration's large-pool requests are recorded, and an iteration that
//!   repeats a recorded one's events is laid out as an offline planner would, from the recorded
//!   lifetimes (see `plan.rs`).
//! - **Statistics**: [`MemoryStats`], and PyTorch's per-pool statistics ([`DetailedStats`],
//!   [`CachingAllocator::memory_summary`]).
//!
//! One lock per allocator guards its state (`state_lock.rs`: released by a plain store, its
//! waiters spin, yield, then sleep); segment calls into the backend happen under it, pressure
//! handlers never do.
//!
//! ## Layout
//!
//! | file | owns |
//! | --- | --- |
//! | `allocator.rs` | [`CachingAllocator`]: its API, and `malloc`, the one chain of fallbacks every request goes through |
//! | `policy.rs` | the rules above as pure functions over sizes |
//! | `state/` | [`CachingAllocator`]'s state under its lock, the only code that touches it: blocks and segments (best fit, split, coalesce), the free sets (`free_set.rs`), deferred merges (`deferred.rs`), the expandable segment (`expandable.rs`), fixed segments and garbage collection (`segments.rs`), frees pending on other streams (`pending.rs`), planned placement (`planned.rs`), trace events (`events.rs`), statistics, snapshots and the invariant check (`readers.rs`) |
//! | `state_lock.rs` | the lock around the state |
//! | `plan.rs` | iteration planning: batch-scope iterations laid out from the previous one |
//! | `pressure.rs` | pressure handlers |
//! | `oom.rs` | [`OutOfMemory`] and its text |
//! | `stats.rs` | [`MemoryStats`], PyTorch's per-pool statistics, and the counters behind them |
//! | `config.rs` | [`AllocatorConfig`] and `VRAMGUARD_ALLOC_CONF` |
//! | `backend/` | the [`Backend`] and [`VirtualMemory`] contracts (`mod.rs`); the host backend (`host.rs`) and the CUDA one (`cuda.rs`; the context itself is `crate::driver`'s); page mapping with one physical allocation per granule, driver-neutral (`granules.rs`); which streams wait for which before a buffer is used, `CudaBuffer`'s rule (`stream_order.rs`) |
//! | `trace/` | the event trace, its labels and snapshots (`mod.rs`); where each allocation was made: [`AllocOrigin`], the tensor ops' frames, interned call sites (`origin.rs`); the events' timestamps, the CPU's time-stamp counter where the kernel keeps time with it (`event_clock.rs`); lifetimes rebuilt from the trace and the HTML page that draws them (`timeline.rs`, `html.rs`, `timeline.js`, `timeline.css`); the snapshot and trace as PyTorch's snapshot pickle (`memory_viz.rs`, `pickle.rs`); the thread's label handed to a GPU observer the CUDA driver injected, another copy of vramguard (`label_bridge.rs`) |
//! | `tests/` | the unit tests, one file per rule |

#![warn(missing_docs)]

mod allocator;
mod backend;
mod config;
mod context_error;
pub mod diagnostics;
#[cfg(feature = "cuda")]
pub mod driver;
mod oom;
mod plan;
mod policy;
mod pressure;
mod state;
mod state_lock;
mod stats;
pub mod trace;

pub use allocator::{Block, CachingAllocator, DeviceAllocator};
#[cfg(feature = "cuda")]
pub use backend::cuda as cuda_backend;
#[cfg(feature = "cuda")]
pub use backend::stream_order;
pub use backend::{
    Backend, BackendError, BackendFailure, EventId, HostBackend, StreamId, VirtualMemory,
    HOST_ALIGN, HOST_MAP_GRANULARITY,
};
pub use config::{check_env_once, env_config, report_env_error_once};
pub use config::{
    parse_bytes, AllocatorConfig, ConfigError, ExpandableSegments, MemoryLimit, RoundupInterval,
    SetupError, DEFAULT_TRACE_CAPACITY, ENV_VAR, KNOWN_KEYS,
};
pub use context_error::ContextError;
pub use oom::{
    human_bytes, ConfigSource, LiveAllocation, OomCause, OomContext, OutOfMemory, SegmentMode,
    OOM_LARGEST_LIVE,
};
pub use plan::IterationId;
pub use policy::{
    round_size, LARGE_SEGMENT, MIN_LARGE_ALLOC, ROUND, ROUND_LARGE, SMALL_SEGMENT, SMALL_SIZE,
};
pub use pressure::PressureHandlerId;
pub use state::expandable::DEFAULT_EXPANDABLE_RANGE;
pub use state::KeepAlive;
pub use stats::{DetailedStats, MemoryStats, PoolStats, Stat};
pub use trace::{enter_op, RequestOrigin, RingEvent, TraceRing};
// The observer's snapshot, in memory_viz's format.
#[cfg(feature = "cupti")]
pub use trace::snapshot_pickle;
pub use trace::{
    html_report, AllocOrigin, BlockSnapshot, LabelFrame, MemorySnapshot, PoolKind, SegmentSnapshot,
    Trace, TraceEvent, TraceEventKind, TraceLabel,
};

#[cfg(test)]
mod tests;
