//! Batch scopes: per-iteration accounting of allocations (runtime half of `#[batch_scope]`).
//!
//! A loop body enters a scope with [`BatchScope::enter`] at the top of each iteration; the
//! returned [`BatchScopeGuard`] ends the iteration when dropped (end of body, `continue`,
//! `break`, `?`, `return` or a panic). While the guard is the innermost scope of its thread,
//! every allocation made on that thread is attributed to the scope's label, and its free is
//! seen whenever and wherever it happens. The iteration is also the innermost frame of the
//! thread's label (`train #3`), with [`tag`]s inside it (`train #3 / generator`): the one label
//! that the allocator's trace records and the timeline draws.
//!
//! On exit, the scope builds a [`ScopeReport`]:
//! - what the iteration allocated (bytes and count, and the peak of its own live bytes);
//! - what **escaped**: the iteration's allocations that are still alive when it ends
//!   (count, bytes, grouped by [`tag`]);
//! - the **live** memory of the label: allocations of any earlier iteration still alive;
//! - the **growth streak**: how many times live memory at iteration end reached a new high
//!   since it last fell (see [`ScopeReport::growth_streak`]).
//!
//! ## What counts as a leak
//!
//! Escapes are normal: carried loop state (`h = step(h)`, an optimizer state created lazily on
//! the first iteration, a running metric) is allocated in one iteration and used by the next.
//! Such state is replaced, so live memory stays flat. A leak (`history.push(fake)`) makes live
//! memory grow at the end of iteration after iteration. So escapes are **reported** (in the
//! report and at `trace` level), and only **sustained growth** is a problem: after
//! [`ScopeOptions::warn_after_growing`] growing iterations the scope warns — on stderr, or
//! through `tracing` when a subscriber is installed ([`ScopeOptions::warnings`] chooses) — and
//! in [`ScopeOptions::strict`] mode it panics with the report (unless the thread is
//! already panicking). Live memory that grows and then falls back (a sawtooth, e.g. gradient
//! accumulation every k steps) resets the streak; iterations with flat live memory neither
//! count nor reset, so a leak every other iteration is caught too.
//!
//! Reports are queryable with [`last_report`]. Labels are per thread: two threads running the
//! same loop keep separate iteration counts and live sets.
//!
//! ## Tensors that are not vramguard's
//!
//! With [`crate::heap::TrackingAllocator`] as the global allocator, every heap allocation
//! made on the thread while an iteration is its innermost scope is that iteration's, exactly
//! as a block of vramguard's allocator is (candle's and burn's CPU tensors, ndarray's arrays,
//! any `Vec`): the report's figures are the sum of both. (Peaks are summed too: the sum of the
//! device's and the heap's peaks, an upper bound of their joint peak when both are used.)
//! vramguard's own bookkeeping (scope state, labels, reports) is never counted as the scope's.
//!
//! Memory of other libraries (candle's CUDA tensors come from the driver's memory pool) never
//! passes through vramguard's allocator, so the scope would see nothing. A thread can instead
//! account its scopes with the figures of such a pool ([`account_with`]; `vramguard::driver_pool`'s
//! `DriverPool::account_scopes_on_this_thread` does it when a device's pool is taken over):
//! each iteration then starts a new peak window of the pool, and its report takes
//! `live_bytes` (the pool's bytes in use at the end), `escaped_bytes` (what that grew by during
//! the iteration), `peak_live_bytes` (the pool's peak during the iteration) and
//! `allocated_bytes` (the peak above the start: a lower bound) from the pool, so growth across
//! iterations is detected as for vramguard's own tensors. Counts and tags are not known there
//! and stay 0. The pool's figures cover everything on the device, not just the scope's
//! allocations.

use crate::alloc::trace::{push_label, restore_label, thread_label};
use crate::alloc::{DeviceAllocator, IterationId, TraceLabel};
use crate::device::AllocationObserver;
pub use crate::diagnostics::WarningOutput;
use crate::heap;
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Growing iterations before a warning (and, in strict mode, a panic) by default.
pub const DEFAULT_WARN_AFTER_GROWING: u32 = 8;

/// Most escape tags listed in one report; the rest are folded into the last entry.
const MAX_TAGS_IN_REPORT: usize = 16;

/// How a batch scope reacts and what it does to the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeOptions {
    /// Panic with the report when live memory grows for `warn_after_growing` iterations
    /// (meant for tests). Never panics while the thread is already panicking.
    pub strict: bool,
    /// Growing iterations (see [`ScopeReport::growth_streak`]) before the scope warns; `0`
    /// disables the warning and the strict failure.
    pub warn_after_growing: u32,
    /// Every `n` iterations, after the iteration's values are dropped, release the cache
    /// (`empty_cache`) of each device the scope allocated on since the last call. `None`: never.
    pub empty_cache_every: Option<u32>,
    /// Where the growth warning goes (`#[batch_scope(warnings = "tracing")]`).
    pub warnings: WarningOutput,
}

impl Default for ScopeOptions {
    fn default() -> Self {
        Self {
            strict: false,
            warn_after_growing: DEFAULT_WARN_AFTER_GROWING,
            empty_cache_every: None,
            warnings: WarningOutput::Auto,
        }
    }
}

impl ScopeOptions {
    /// The defaults: not strict, warn after [`DEFAULT_WARN_AFTER_GROWING`] growing
    /// iterations, no cache policy.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets [`ScopeOptions::strict`].
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }
    /// Sets [`ScopeOptions::warn_after_growing`].
    pub fn warn_after_growing(mut self, iterations: u32) -> Self {
        self.warn_after_growing = iterations;
        self
    }
    /// Sets [`ScopeOptions::warnings`].
    pub fn warnings(mut self, output: WarningOutput) -> Self {
        self.warnings = output;
        self
    }
    /// Sets [`ScopeOptions::empty_cache_every`]; `0` means never.
    pub fn empty_cache_every(mut self, iterations: u32) -> Self {
        self.empty_cache_every = (iterations > 0).then_some(iterations);
        self
    }
}

/// Escaped allocations that share a tag (see [`tag`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EscapeGroup {
    /// The innermost [`tag`] active when the allocations were made, or the scope label.
    pub tag: String,
    /// Allocations still alive.
    pub count: u64,
    /// Their bytes (block sizes).
    pub bytes: u64,
}

/// What one iteration of a batch scope did. Byte counts are block sizes from the allocator.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ScopeReport {
    /// The scope label.
    pub label: String,
    /// Iterations of this label on this thread so far, this one included (1-based).
    pub iterations: u64,
    /// Bytes allocated during the iteration (while this scope was innermost).
    pub allocated_bytes: u64,
    /// Allocations made during the iteration.
    pub allocated_count: u64,
    /// Highest bytes of the label alive at once during the iteration, earlier iterations'
    /// survivors included.
    pub peak_live_bytes: u64,
    /// Bytes of the iteration's allocations still alive at its end.
    pub escaped_bytes: u64,
    /// The iteration's allocations still alive at its end.
    pub escaped_count: u64,
    /// The escapes grouped by tag, largest first.
    pub escaped_by_tag: Vec<EscapeGroup>,
    /// Bytes of the label still alive at the end of the iteration, from any iteration.
    pub live_bytes: u64,
    /// Allocations of the label still alive at the end of the iteration.
    pub live_count: u64,
    /// Iterations before this one that still have allocations alive.
    pub older_iterations_alive: u64,
    /// Iterations whose end set a new high of [`ScopeReport::live_bytes`] since live bytes
    /// last fell (the first iteration is the baseline and never counts).
    pub growth_streak: u32,
    /// Bytes returned to the devices by the cache policy at this exit, if it ran.
    pub cache_released_bytes: Option<u64>,
}

impl ScopeReport {
    /// Whether anything allocated in this iteration is still alive.
    pub fn has_escapes(&self) -> bool {
        self.escaped_count > 0
    }
}

impl fmt::Display for ScopeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "batch scope `{}` iteration {}: allocated {} B in {} allocations; {} B in {} \
             allocations escaped the iteration; {} B of the scope alive ({} allocations, {} \
             earlier iterations); live memory grew at the end of {} iterations in a row",
            self.label,
            self.iterations,
            self.allocated_bytes,
            self.allocated_count,
            self.escaped_bytes,
            self.escaped_count,
            self.live_bytes,
            self.live_count,
            self.older_iterations_alive,
            self.growth_streak,
        )?;
        for group in &self.escaped_by_tag {
            write!(
                f,
                "\n  escaped from `{}`: {} B in {} allocations",
                group.tag, group.bytes, group.count
            )?;
        }
        Ok(())
    }
}

/// Runtime entry point of batch scopes.
#[derive(Debug)]
pub struct BatchScope;

impl BatchScope {
    /// Enters one iteration of the scope `label` with the default options.
    pub fn enter(label: impl Into<Cow<'static, str>>) -> BatchScopeGuard {
        Self::enter_with(label, ScopeOptions::default())
    }

    /// Enters one iteration of the scope `label`.
    pub fn enter_with(
        label: impl Into<Cow<'static, str>>,
        options: ScopeOptions,
    ) -> BatchScopeGuard {
        let _bookkeeping = heap::Bookkeeping::enter();
        crate::alloc::check_env_once();
        let label = label.into();
        let tracker = tracker_for(&label);
        let mut snapshot = tracker.begin_iteration();
        if let Some(figures) = external_figures() {
            figures.reset_peak();
            snapshot.external_used = figures.used_bytes();
        }
        STACK.with(|stack| {
            let mut stack = stack.borrow_mut();
            stack.push(Arc::clone(&tracker));
            observe_innermost(&stack);
        });
        let previous_label = push_label(Arc::clone(&tracker.label), Some(snapshot.iteration));
        let heap = heap::begin_iteration(tracker.id, snapshot.iteration);
        BatchScopeGuard {
            tracker,
            snapshot,
            heap,
            previous_label,
            options,
            finished: false,
            _not_send: PhantomData,
        }
    }
}

/// One iteration of a batch scope; ends the iteration and reports when dropped.
///
/// Not `Send`: the scope belongs to the thread that entered it.
#[must_use = "the iteration ends as soon as the guard is dropped"]
pub struct BatchScopeGuard {
    tracker: Arc<ScopeTracker>,
    snapshot: IterationStart,
    /// Where the iteration's heap figures start, when the tracking allocator tracks.
    heap: Option<heap::IterationStart>,
    /// This thread's label before the iteration (restored when it ends).
    previous_label: Option<TraceLabel>,
    options: ScopeOptions,
    finished: bool,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for BatchScopeGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchScopeGuard")
            .field("label", &self.tracker.label)
            .field("iteration", &self.snapshot.iteration)
            .finish()
    }
}

impl BatchScopeGuard {
    /// The scope label.
    pub fn label(&self) -> &str {
        &self.tracker.label
    }

    /// Ends the iteration now and returns its report (dropping the guard does the same).
    ///
    /// # Panics
    /// In strict mode, when live memory has grown for too long (see [`ScopeOptions`]).
    pub fn exit(mut self) -> ScopeReport {
        self.finish()
    }

    fn finish(&mut self) -> ScopeReport {
        self.finished = true;
        let heap = self.heap.take().map(heap::end_iteration);
        let _bookkeeping = heap::Bookkeeping::enter();
        STACK.with(|stack| {
            let mut stack = stack.borrow_mut();
            // Guards are normally dropped innermost first; search in case one was moved.
            if let Some(pos) = stack.iter().rposition(|t| Arc::ptr_eq(t, &self.tracker)) {
                stack.remove(pos);
            }
            observe_innermost(&stack);
        });
        restore_label(self.previous_label.take());
        let (mut report, devices) =
            self.tracker
                .end_iteration(&self.snapshot, &self.options, heap.as_ref());
        // The allocators plan the scope's next iteration from this one.
        let touched: Vec<Arc<DeviceAllocator>> = self
            .tracker
            .state()
            .touched
            .drain()
            .map(|(_, a)| a)
            .collect();
        let id = IterationId {
            scope: Arc::as_ptr(&self.tracker) as u64,
            iteration: self.snapshot.iteration,
        };
        for allocator in touched {
            allocator.end_iteration(id);
        }
        if let Some(every) = self.options.empty_cache_every {
            if report.iterations % u64::from(every) == 0 {
                let released = devices.iter().map(|a| a.empty_cache()).sum();
                report.cache_released_bytes = Some(released);
            }
        }
        tracing::trace!(target: "vramguard::scope", "{report}");
        if report.escaped_count > 0 {
            tracing::debug!(
                target: "vramguard::scope",
                label = %report.label,
                iteration = report.iterations,
                escaped_bytes = report.escaped_bytes,
                escaped_count = report.escaped_count,
                "values allocated in the iteration outlived it"
            );
        }
        let threshold = self.options.warn_after_growing;
        let growing = threshold > 0 && report.growth_streak >= threshold;
        if growing && report.growth_streak % threshold == 0 {
            crate::diagnostics::warn(
                self.options.warnings,
                &format!(
                    "live memory keeps growing across iterations: something computed in the loop \
                     is kept (a history Vec, a running total with its graph); {report}"
                ),
            );
        }
        store_report(&report);
        if growing && self.options.strict && !std::thread::panicking() {
            panic!(
                "vramguard strict batch scope: live memory grew at the end of {} iterations in a \
                 row. Find what keeps values of each iteration alive (a collection outside the \
                 loop, a running total that keeps its graph) or raise `warn_after_growing`.\n{report}",
                report.growth_streak
            );
        }
        report
    }
}

impl Drop for BatchScopeGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.finish();
        }
    }
}

/// The last report of scope `label` (from any thread), if an iteration of it has ended.
pub fn last_report(label: &str) -> Option<ScopeReport> {
    lock(reports()).get(label).cloned()
}

/// Forgets the reports and the per-thread state of `label` on this thread, e.g. between
/// two runs of a loop that should not be compared. Allocations still alive keep being
/// accounted to the old state, not to the new one.
pub fn reset(label: &str) {
    lock(reports()).remove(label);
    TRACKERS.with(|trackers| trackers.borrow_mut().remove(label));
}

/// The label of the innermost batch scope of this thread, if any.
pub fn current_label() -> Option<String> {
    STACK.with(|stack| stack.borrow().last().map(|t| t.label.to_string()))
}

/// Labels the allocations made on this thread until the guard is dropped: the one labelling
/// system of vramguard. A tag is a frame of the thread's label, as each iteration of a batch
/// scope is (`train #3 / generator`); the label is recorded with every allocator event of the
/// trace ([`crate::memory::record_trace`], [`crate::alloc::TraceLabel`]) and drawn in the
/// timeline, and escape reports group escaped allocations by their innermost tag (e.g.
/// `"generator"`, `"history"`).
pub fn tag(name: impl Into<Cow<'static, str>>) -> TagGuard {
    let _bookkeeping = heap::Bookkeeping::enter();
    let name: Arc<str> = Arc::from(name.into().as_ref());
    TagGuard {
        previous: push_label(name, None),
        _not_send: PhantomData,
    }
}

/// Active [`tag`]; the previous label is restored when it is dropped.
#[must_use = "the tag is removed as soon as the guard is dropped"]
pub struct TagGuard {
    previous: Option<TraceLabel>,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for TagGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TagGuard").finish_non_exhaustive()
    }
}

impl Drop for TagGuard {
    fn drop(&mut self) {
        let _bookkeeping = heap::Bookkeeping::enter();
        restore_label(self.previous.take());
    }
}

/// Accounting of one scope label on one thread; the allocator reports allocations made while
/// it is the innermost scope of the current thread, and their frees (from any thread).
pub(crate) struct ScopeTracker {
    label: Arc<str>,
    /// Unique in the process (the heap's books are kept by it).
    id: u64,
    state: Mutex<TrackerState>,
}

impl fmt::Debug for ScopeTracker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopeTracker")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

/// Key of a live allocation: the allocator (0 when unknown) and the block id, which is unique
/// within one allocator only.
type AllocKey = (usize, u64);

#[derive(Debug)]
struct LiveAlloc {
    bytes: u64,
    iteration: u64,
    tag: Option<Arc<str>>,
}

#[derive(Debug, Default)]
struct TrackerState {
    /// Iterations begun; the current one's number when inside one.
    iterations: u64,
    /// The iteration new allocations belong to.
    current_iteration: u64,
    live: HashMap<AllocKey, LiveAlloc>,
    live_bytes: u64,
    /// (count, bytes) alive per iteration, for escapes and older survivors.
    alive_by_iteration: BTreeMap<u64, (u64, u64)>,
    total_allocated_bytes: u64,
    total_allocated_count: u64,
    peak_live_bytes: u64,
    /// Live bytes at the end of the previous iteration, and the high mark since the last fall.
    last_live_at_end: Option<u64>,
    high_mark: u64,
    growth_streak: u32,
    /// Allocators of the devices allocated on since the cache policy last ran, by address.
    devices: HashMap<usize, Arc<DeviceAllocator>>,
    /// Allocators allocated on in the current iteration, told when it ends (planning).
    touched: HashMap<usize, Arc<DeviceAllocator>>,
}

/// [`ScopeTracker::state`]: the lock, then (dropped after it) the bookkeeping mark.
struct TrackerStateGuard<'a> {
    state: MutexGuard<'a, TrackerState>,
    #[allow(dead_code)] // Held for its drop.
    bookkeeping: heap::Bookkeeping,
}

impl std::ops::Deref for TrackerStateGuard<'_> {
    type Target = TrackerState;
    fn deref(&self) -> &TrackerState {
        &self.state
    }
}

impl std::ops::DerefMut for TrackerStateGuard<'_> {
    fn deref_mut(&mut self) -> &mut TrackerState {
        &mut self.state
    }
}

#[derive(Debug, Clone, Copy)]
struct IterationStart {
    iteration: u64,
    previous_iteration: u64,
    allocated_bytes: u64,
    allocated_count: u64,
    previous_peak: u64,
    /// The external pool's bytes in use when the iteration began, when the thread accounts
    /// with one ([`account_with`]).
    external_used: Option<u64>,
}

/// A memory pool outside vramguard's allocator whose figures a thread's batch scopes account
/// with ([`account_with`]): the CUDA driver's pool that candle allocates from, or a fake one
/// in tests.
pub trait ExternalFigures: Send + Sync {
    /// Bytes in use now (`None` when they cannot be read; the iteration then falls back to
    /// vramguard's own accounting).
    fn used_bytes(&self) -> Option<u64>;
    /// The highest bytes in use since the last [`ExternalFigures::reset_peak`].
    fn peak_used_bytes(&self) -> Option<u64>;
    /// Starts a new peak window at the bytes in use now.
    fn reset_peak(&self);
}

/// Makes the batch scopes entered on this thread account with `figures` (`None`: with
/// vramguard's own allocations again). Returns the previous source.
pub fn account_with(figures: Option<Arc<dyn ExternalFigures>>) -> Option<Arc<dyn ExternalFigures>> {
    EXTERNAL.with(|e| std::mem::replace(&mut *e.borrow_mut(), figures))
}

fn external_figures() -> Option<Arc<dyn ExternalFigures>> {
    EXTERNAL.try_with(|e| e.borrow().clone()).ok().flatten()
}

impl ScopeTracker {
    fn new(label: Arc<str>) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Self {
            label,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(TrackerState::default()),
        }
    }

    /// The state, locked; what is allocated meanwhile is bookkeeping, never the scope's own.
    fn state(&self) -> TrackerStateGuard<'_> {
        TrackerStateGuard {
            bookkeeping: heap::Bookkeeping::enter(),
            state: lock(&self.state),
        }
    }

    fn record_alloc(&self, key: AllocKey, bytes: usize, allocator: Option<&Arc<DeviceAllocator>>) {
        let tag = thread_label().and_then(|label| label.tag_name());
        let bytes = bytes as u64;
        let mut state = self.state();
        let iteration = state.current_iteration;
        state.live.insert(
            key,
            LiveAlloc {
                bytes,
                iteration,
                tag,
            },
        );
        state.live_bytes += bytes;
        state.peak_live_bytes = state.peak_live_bytes.max(state.live_bytes);
        state.total_allocated_bytes += bytes;
        state.total_allocated_count += 1;
        let alive = state.alive_by_iteration.entry(iteration).or_default();
        alive.0 += 1;
        alive.1 += bytes;
        if let Some(allocator) = allocator {
            state
                .devices
                .entry(key.0)
                .or_insert_with(|| Arc::clone(allocator));
            state
                .touched
                .entry(key.0)
                .or_insert_with(|| Arc::clone(allocator));
        }
    }

    fn record_free(&self, key: AllocKey) {
        let mut state = self.state();
        let Some(alloc) = state.live.remove(&key) else {
            return;
        };
        state.live_bytes -= alloc.bytes;
        if let Some(alive) = state.alive_by_iteration.get_mut(&alloc.iteration) {
            alive.0 -= 1;
            alive.1 -= alloc.bytes;
            if alive.0 == 0 {
                state.alive_by_iteration.remove(&alloc.iteration);
            }
        }
    }

    fn begin_iteration(&self) -> IterationStart {
        let mut state = self.state();
        state.iterations += 1;
        let start = IterationStart {
            iteration: state.iterations,
            previous_iteration: state.current_iteration,
            allocated_bytes: state.total_allocated_bytes,
            allocated_count: state.total_allocated_count,
            previous_peak: state.peak_live_bytes,
            external_used: None,
        };
        state.current_iteration = state.iterations;
        state.peak_live_bytes = state.live_bytes;
        start
    }

    fn end_iteration(
        &self,
        start: &IterationStart,
        options: &ScopeOptions,
        heap: Option<&heap::IterationFigures>,
    ) -> (ScopeReport, Vec<Arc<DeviceAllocator>>) {
        // The external pool's figures at the end: (used at start, used now, peak).
        let external = start.external_used.and_then(|at_start| {
            let figures = external_figures()?;
            Some((at_start, figures.used_bytes()?, figures.peak_used_bytes()?))
        });
        let heap_figures = heap.cloned().unwrap_or_default();
        let mut state = self.state();
        let iteration = start.iteration;
        let (escaped_count, escaped_bytes) = state
            .alive_by_iteration
            .get(&iteration)
            .copied()
            .unwrap_or((0, 0));
        let escaped_by_tag = if escaped_count + heap_figures.escaped_count > 0 {
            group_escapes(
                &state.live,
                iteration,
                &self.label,
                &heap_figures.escaped_by_tag,
            )
        } else {
            Vec::new()
        };
        let older_iterations_alive = {
            let mut older: Vec<u64> = state
                .alive_by_iteration
                .range(..iteration)
                .map(|(older, _)| *older)
                .collect();
            older.extend(&heap_figures.older_iterations_alive);
            older.sort_unstable();
            older.dedup();
            older.len() as u64
        };
        let live_bytes = match external {
            Some((_, used, _)) => used,
            None => state.live_bytes + heap_figures.live_bytes,
        };
        match state.last_live_at_end {
            None => state.high_mark = live_bytes,
            Some(_) if live_bytes > state.high_mark => {
                state.high_mark = live_bytes;
                state.growth_streak = state.growth_streak.saturating_add(1);
            }
            Some(_) if live_bytes < state.high_mark => {
                state.high_mark = live_bytes;
                state.growth_streak = 0;
            }
            Some(_) => {}
        }
        state.last_live_at_end = Some(live_bytes);
        let peak_live_bytes = state.peak_live_bytes;
        // A nested iteration of the same label hands the peak and the iteration back.
        state.peak_live_bytes = start.previous_peak.max(peak_live_bytes);
        state.current_iteration = start.previous_iteration;
        let mut report = ScopeReport {
            label: self.label.to_string(),
            iterations: iteration,
            allocated_bytes: state.total_allocated_bytes - start.allocated_bytes
                + heap_figures.allocated_bytes,
            allocated_count: state.total_allocated_count - start.allocated_count
                + heap_figures.allocated_count,
            peak_live_bytes: peak_live_bytes + heap_figures.peak_live_bytes,
            escaped_bytes: escaped_bytes + heap_figures.escaped_bytes,
            escaped_count: escaped_count + heap_figures.escaped_count,
            escaped_by_tag,
            live_bytes,
            live_count: state.live.len() as u64 + heap_figures.live_count,
            older_iterations_alive,
            growth_streak: state.growth_streak,
            cache_released_bytes: None,
        };
        if let Some((at_start, used, peak)) = external {
            let peak = peak.max(used).max(at_start);
            report.allocated_bytes = peak - at_start;
            report.peak_live_bytes = peak;
            report.escaped_bytes = used.saturating_sub(at_start);
        }
        let devices = match options.empty_cache_every {
            Some(every) if iteration.is_multiple_of(u64::from(every)) => {
                state.devices.drain().map(|(_, d)| d).collect()
            }
            Some(_) => Vec::new(),
            // Without a cache policy, keep no device alive.
            None => {
                state.devices.clear();
                Vec::new()
            }
        };
        (report, devices)
    }
}

/// `Device` tells the innermost scope of the allocating thread (see [`observe_innermost`]).
impl AllocationObserver for ScopeTracker {
    fn iteration(&self) -> IterationId {
        IterationId {
            scope: self as *const Self as u64,
            iteration: self.state().current_iteration,
        }
    }

    /// Keyed by the allocator too: block ids of different allocators may collide, and the cache
    /// policy needs the allocator.
    fn on_alloc(&self, allocator: &Arc<DeviceAllocator>, id: u64, bytes: usize) {
        self.record_alloc((allocator_key(allocator), id), bytes, Some(allocator));
    }

    fn on_free(&self, allocator: &Arc<DeviceAllocator>, id: u64) {
        self.record_free((allocator_key(allocator), id));
    }
}

/// Makes the innermost scope of `stack` (this thread's) the observer of the thread's
/// allocations, or none when no scope is active.
fn observe_innermost(stack: &[Arc<ScopeTracker>]) {
    let innermost = stack
        .last()
        .map(|t| Arc::clone(t) as Arc<dyn AllocationObserver>);
    crate::device::observe_allocations(innermost);
}

fn group_escapes(
    live: &HashMap<AllocKey, LiveAlloc>,
    iteration: u64,
    label: &Arc<str>,
    heap_escapes: &[(Option<Arc<str>>, u64, u64)],
) -> Vec<EscapeGroup> {
    let mut groups: HashMap<&str, (u64, u64)> = HashMap::new();
    for alloc in live.values().filter(|a| a.iteration == iteration) {
        let tag = alloc.tag.as_deref().unwrap_or(label);
        let group = groups.entry(tag).or_default();
        group.0 += 1;
        group.1 += alloc.bytes;
    }
    for (tag, count, bytes) in heap_escapes {
        let group = groups.entry(tag.as_deref().unwrap_or(label)).or_default();
        group.0 += count;
        group.1 += bytes;
    }
    let mut groups: Vec<EscapeGroup> = groups
        .into_iter()
        .map(|(tag, (count, bytes))| EscapeGroup {
            tag: tag.to_string(),
            count,
            bytes,
        })
        .collect();
    groups.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.tag.cmp(&b.tag)));
    if groups.len() > MAX_TAGS_IN_REPORT {
        let rest = groups.split_off(MAX_TAGS_IN_REPORT - 1);
        groups.push(EscapeGroup {
            tag: format!("({} more tags)", rest.len()),
            count: rest.iter().map(|g| g.count).sum(),
            bytes: rest.iter().map(|g| g.bytes).sum(),
        });
    }
    groups
}

fn allocator_key(allocator: &Arc<DeviceAllocator>) -> usize {
    Arc::as_ptr(allocator) as usize
}

thread_local! {
    /// Active scopes of this thread, innermost last.
    static STACK: RefCell<Vec<Arc<ScopeTracker>>> = const { RefCell::new(Vec::new()) };
    /// Trackers of this thread by label; they outlive iterations to see later frees.
    static TRACKERS: RefCell<HashMap<Arc<str>, Arc<ScopeTracker>>> = RefCell::new(HashMap::new());
    /// The external pool this thread's scopes account with ([`account_with`]).
    static EXTERNAL: RefCell<Option<Arc<dyn ExternalFigures>>> = const { RefCell::new(None) };
}

fn tracker_for(label: &str) -> Arc<ScopeTracker> {
    TRACKERS.with(|trackers| {
        let mut trackers = trackers.borrow_mut();
        if let Some(tracker) = trackers.get(label) {
            return Arc::clone(tracker);
        }
        let label: Arc<str> = Arc::from(label);
        let tracker = Arc::new(ScopeTracker::new(Arc::clone(&label)));
        trackers.insert(label, Arc::clone(&tracker));
        tracker
    })
}

fn reports() -> &'static Mutex<HashMap<String, ScopeReport>> {
    static REPORTS: OnceLock<Mutex<HashMap<String, ScopeReport>>> = OnceLock::new();
    REPORTS.get_or_init(Default::default)
}

fn store_report(report: &ScopeReport) {
    let mut reports = lock(reports());
    match reports.get_mut(report.label.as_str()) {
        Some(slot) => slot.clone_from(report),
        None => {
            reports.insert(report.label.clone(), report.clone());
        }
    }
}

/// Locks a mutex, recovering from poisoning: the accounting stays consistent because every
/// critical section finishes its updates without panicking.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
