//! The process's heap, accounted for any library: [`TrackingAllocator`] as the global
//! allocator, and the same tools vramguard gives its own devices — [`stats`] and
//! [`reset_peak_stats`], `#[batch_scope]` reports, the trace ([`record_trace`]) and its HTML
//! timeline ([`html_report`]), a soft memory limit ([`set_memory_limit`], or `memory_limit` in
//! `VRAMGUARD_ALLOC_CONF`) whose crossing prints what holds the memory, and the largest-batch
//! search ([`crate::memory::MaxBatchSearch::run_on_heap`], above this layer; the facade's
//! `vramguard::heap::max_batch`).
//!
//! candle's and burn's CPU tensors, ndarray's arrays and every other Rust value live on the
//! heap, so with one line in the binary —
//! `#[global_allocator] static ALLOC: vramguard::TrackingAllocator = vramguard::TrackingAllocator::system();`
//! — their memory is seen. (Memory that does not pass through Rust's allocator is not: a GPU
//! library's device memory, or libtorch's, which allocates in C++.) vramguard's own host
//! devices map their memory directly and are not counted twice; their figures stay in
//! [`crate::memory`].
//!
//! Figures are byte counts of the layouts asked for (what `Vec::with_capacity` and `Box` ask),
//! over every thread of the process. Batch scopes see the allocations made on their own thread
//! while they are the innermost scope, wherever those are freed.
//!
//! # Layout
//!
//! | file | owns |
//! | --- | --- |
//! | `tracking.rs` | [`TrackingAllocator`], the counters, the thread's mode |
//! | `records.rs` | records of single allocations: the heap as a source of batch-scope accounting (`HeapAccounting`), the trace, the limit's list |
//! | `limit.rs` | the settings from `VRAMGUARD_ALLOC_CONF`, the report of a refused allocation |
//! | `exit_report.rs` | the report written at exit (`VRAMGUARD_HEAP_REPORT`), for tools such as `cargo vramguard measure` |
//! | `census.rs` | what was live at the peak, by label (`VRAMGUARD_HEAP_CENSUS`), for that report |

mod census;
mod exit_report;
mod limit;
mod records;
mod tracking;

#[cfg(feature = "cupti")]
pub(crate) use exit_report::{census_report, register as register_at_exit, CensusReport};
pub use exit_report::{CENSUS_ENV, REPORT_ENV};
pub(crate) use records::HeapAccounting;
pub use tracking::TrackingAllocator;
use tracking::{CallMode, ModeGuard};

use crate::alloc::{MemorySnapshot, MemoryStats, Trace};
use std::sync::atomic::Ordering::Relaxed;

/// The heap's statistics: `allocated_bytes` (live bytes now, every thread),
/// `peak_allocated_bytes` (since the start or [`reset_peak_stats`]), `num_allocs`, `num_frees`
/// (calls; a `realloc` counts as one of each) and `num_ooms` (allocations the soft limit
/// refused). The heap caches nothing of its own, so the reserved and active figures equal the
/// allocated ones; the rest is 0. All 0 when the tracking allocator is not the global allocator
/// (see [`is_tracking`]).
pub fn stats() -> MemoryStats {
    if !is_tracking() {
        return MemoryStats::default();
    }
    let (live, peak, allocs, frees, ooms) = tracking::counters();
    MemoryStats {
        allocated_bytes: live,
        peak_allocated_bytes: peak,
        reserved_bytes: live,
        peak_reserved_bytes: peak,
        active_bytes: live,
        peak_active_bytes: peak,
        requested_bytes: live,
        num_allocs: allocs,
        num_frees: frees,
        num_ooms: ooms,
        ..MemoryStats::default()
    }
}

/// Starts a new peak window: the peak becomes the live bytes now.
pub fn reset_peak_stats() {
    tracking::reset_peak();
}

/// Whether [`TrackingAllocator`] is this process's global allocator and tracks (it has served
/// an allocation, and `heap_tracking:false` is not set).
pub fn is_tracking() -> bool {
    tracking::is_on()
}

/// Sets the soft limit on live heap bytes (`None`: no limit), replacing `memory_limit` from
/// `VRAMGUARD_ALLOC_CONF`. An allocation that would cross it prints what holds the memory on
/// stderr and fails (Rust then aborts, as on any allocation failure, unless the caller asked
/// with `try_reserve`). While a limit is set, allocations of 64 KiB and more are recorded, so
/// the report can list them.
pub fn set_memory_limit(limit: Option<u64>) {
    tracking::LIMIT.store(limit.unwrap_or(u64::MAX), Relaxed);
}

/// The soft limit on live heap bytes, if one is set.
pub fn memory_limit() -> Option<u64> {
    let limit = tracking::LIMIT.load(Relaxed);
    (limit != u64::MAX).then_some(limit)
}

/// Records the last `events` heap allocations and frees from now on, each with the thread's
/// label (batch-scope iteration and tags); 0 stops recording and forgets the events.
/// `trace_capacity` in `VRAMGUARD_ALLOC_CONF` starts it with the process. Every allocation is
/// then recorded, so a program runs markedly slower while recording.
pub fn record_trace(events: usize) {
    records::start_trace(events);
}

/// A copy of the heap's trace, oldest event first (empty when it does not record).
pub fn trace() -> Trace {
    records::trace()
}

/// The heap's statistics in the snapshot form the timeline takes (`device` is `"heap"`; the
/// heap has no segments).
pub fn snapshot() -> MemorySnapshot {
    let _internal = ModeGuard::enter(CallMode::Internal);
    MemorySnapshot {
        device: "heap".to_string(),
        expandable_segments: false,
        stats: stats(),
        segments: Vec::new(),
    }
}

/// The self-contained HTML timeline of the heap's trace (see
/// [`crate::alloc::html_report`]): live bytes over time, each allocation's lifetime, batch-scope
/// iterations and tags as coloured bands. Start recording with [`record_trace`] first.
pub fn html_report(title: &str) -> String {
    crate::alloc::html_report(title, &trace(), &snapshot())
}

/// Marks vramguard's own scope bookkeeping on this thread until dropped: its allocations are
/// counted but never attributed to a batch-scope iteration or traced.
pub(crate) struct Bookkeeping(#[allow(dead_code)] ModeGuard);

impl Bookkeeping {
    /// Enters bookkeeping (no effect inside the tracking allocator's own sections).
    pub(crate) fn enter() -> Self {
        let mode = match tracking::mode() {
            CallMode::Internal => CallMode::Internal,
            _ => CallMode::Bookkeeping,
        };
        Self(ModeGuard::enter(mode))
    }
}
