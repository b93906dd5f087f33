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
//! ## Where the figures come from
//!
//! A scope reads memory through one interface, [`ScopeAccounting`], that each source of memory
//! implements (`crate::accounting`): the iteration begins and ends on every source, and the
//! report adds their figures up.
//!
//! - vramguard's devices: every block allocated on the thread while the iteration is its
//!   innermost scope.
//! - The heap, with [`crate::heap::TrackingAllocator`] as the global allocator: every heap
//!   allocation made on the thread while the iteration is its innermost scope, exactly as a
//!   block of vramguard's allocator (candle's and burn's CPU tensors, ndarray's arrays, any
//!   `Vec`). Peaks are summed too: the sum of the device's and the heap's peaks, an upper bound
//!   of their joint peak when both are used. vramguard's own bookkeeping (scope state, labels,
//!   reports) is never counted as the scope's.
//! - A pool outside vramguard's allocator that the thread's scopes account with
//!   ([`account_with`]): candle's CUDA tensors come from the driver's memory pool, which
//!   vramguard's allocator never sees (`vramguard::driver_pool`'s
//!   `DriverPool::account_scopes_on_this_thread` takes it over and accounts with it). Each
//!   iteration starts a new peak window of the pool, and its report takes `live_bytes` (the
//!   pool's bytes in use at the end), `escaped_bytes` (what that grew by during the iteration),
//!   `peak_live_bytes` (the pool's peak during the iteration) and `allocated_bytes` (the peak
//!   above the start: a lower bound) from the pool ([`IterationFigures::whole_pool`]), so growth
//!   across iterations is detected as for vramguard's own tensors. The pool's figures cover
//!   everything on the device, not just the scope's allocations; counts and tags come from the
//!   other sources.
//!
//! Adding a source of memory (an observer of every driver allocation, say) means implementing
//! [`ScopeAccounting`] once: the scope, its report and its growth detection follow.

pub use crate::accounting::{
    Coverage, IterationFigures, IterationStart, ScopeAccounting, ScopeIteration, TagFigures,
};
use crate::alloc::trace::{push_label, restore_label};
use crate::alloc::{IterationId, TraceLabel};
use crate::device::DeviceAccounting;
pub use crate::diagnostics::WarningOutput;
use crate::heap::{self, HeapAccounting};
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
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
        let (number, previous_iteration) = tracker.begin_iteration();
        let iteration = ScopeIteration {
            scope: tracker.id,
            iteration: number,
        };
        let starts = Starts {
            device: DeviceAccounting.begin_iteration(iteration),
            pool: external_source().and_then(|source| {
                let start = source.begin_iteration(iteration)?;
                Some((source, start))
            }),
            heap: None,
        };
        STACK.with(|stack| stack.borrow_mut().push(Arc::clone(&tracker)));
        let previous_label = push_label(Arc::clone(&tracker.label), Some(number));
        let starts = Starts {
            heap: HeapAccounting.begin_iteration(iteration),
            ..starts
        };
        BatchScopeGuard {
            tracker,
            iteration,
            previous_iteration,
            starts,
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
    iteration: ScopeIteration,
    /// The iteration of the same scope this one is nested in (0: none).
    previous_iteration: u64,
    /// Where each source's figures started.
    starts: Starts,
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
            .field("iteration", &self.iteration.iteration)
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
        // The heap's iteration ends first, before this thread's bookkeeping starts.
        let heap = (self.starts.heap.take()).and_then(|s| HeapAccounting.end_iteration(&s));
        let _bookkeeping = heap::Bookkeeping::enter();
        STACK.with(|stack| {
            let mut stack = stack.borrow_mut();
            // Guards are normally dropped innermost first; search in case one was moved.
            if let Some(pos) = stack.iter().rposition(|t| Arc::ptr_eq(t, &self.tracker)) {
                stack.remove(pos);
            }
        });
        restore_label(self.previous_label.take());
        let device = (self.starts.device.take()).and_then(|s| DeviceAccounting.end_iteration(&s));
        let pool = (self.starts.pool.take()).and_then(|(source, s)| source.end_iteration(&s));
        let mut report = self.tracker.end_iteration(
            self.iteration.iteration,
            self.previous_iteration,
            [device, heap, pool],
        );
        let scope = self.tracker.id;
        // The allocators plan the scope's next iteration from this one.
        let id = IterationId {
            scope,
            iteration: self.iteration.iteration,
        };
        for allocator in DeviceAccounting.take_touched(scope) {
            allocator.end_iteration(id);
        }
        if let Some(every) = self.options.empty_cache_every {
            if report.iterations.is_multiple_of(u64::from(every)) {
                let devices = DeviceAccounting.take_devices(scope, true);
                let released = devices.iter().map(|a| a.empty_cache()).sum();
                report.cache_released_bytes = Some(released);
            }
        } else {
            // Without a cache policy, keep no device alive.
            DeviceAccounting.take_devices(scope, false);
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
        if growing && report.growth_streak.is_multiple_of(threshold) {
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
    if let Some(tracker) = TRACKERS.with(|trackers| trackers.borrow_mut().remove(label)) {
        DeviceAccounting.forget(tracker.id);
    }
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

/// One scope label on one thread: its iterations and whether its live memory keeps growing.
/// The figures themselves come from the sources of accounting.
pub(crate) struct ScopeTracker {
    label: Arc<str>,
    /// Unique in the process: the sources keep their books by it.
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

#[derive(Debug, Default)]
struct TrackerState {
    /// Iterations begun; the current one's number when inside one.
    iterations: u64,
    /// The iteration running now (an inner one when iterations of the label nest).
    current_iteration: u64,
    /// Live bytes at the end of the previous iteration, and the high mark since the last fall.
    last_live_at_end: Option<u64>,
    high_mark: u64,
    growth_streak: u32,
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

/// Where each source's figures started for one iteration.
struct Starts {
    device: Option<IterationStart>,
    heap: Option<IterationStart>,
    /// The pool the thread accounts with ([`account_with`]), when one is set and readable.
    pool: Option<(Arc<dyn ScopeAccounting>, IterationStart)>,
}

/// Makes the batch scopes entered on this thread account with `source` as well as with
/// vramguard's devices and the heap (`None`: with those alone again); returns the previous one.
/// Meant for a pool outside vramguard whose figures cover everything in it (the CUDA driver's
/// pool candle allocates from: `vramguard::driver_pool`), whose bytes then replace the devices'
/// and the heap's in the reports ([`Coverage::WholePool`]).
pub fn account_with(source: Option<Arc<dyn ScopeAccounting>>) -> Option<Arc<dyn ScopeAccounting>> {
    EXTERNAL.with(|e| std::mem::replace(&mut *e.borrow_mut(), source))
}

fn external_source() -> Option<Arc<dyn ScopeAccounting>> {
    EXTERNAL.try_with(|e| e.borrow().clone()).ok().flatten()
}

/// The figures of every source added up (see [`Coverage`]): bytes and counts of the attributed
/// sources summed, a whole pool's bytes in place of their bytes, escapes grouped by tag, and
/// the earlier iterations still alive in any source.
#[derive(Debug, Default)]
struct Combined {
    allocated_bytes: u64,
    allocated_count: u64,
    peak_live_bytes: u64,
    escaped_bytes: u64,
    escaped_count: u64,
    escaped_by_tag: Vec<TagFigures>,
    live_bytes: u64,
    live_count: u64,
    older_iterations_alive: u64,
}

fn combine(sources: [Option<IterationFigures>; 3]) -> Combined {
    let mut total = Combined::default();
    let mut pool: Option<IterationFigures> = None;
    let mut older: Vec<u64> = Vec::new();
    for figures in sources.into_iter().flatten() {
        match figures.coverage {
            Coverage::Attributed => {
                total.allocated_bytes += figures.allocated_bytes;
                total.allocated_count += figures.allocated_count;
                total.peak_live_bytes += figures.peak_live_bytes;
                total.escaped_bytes += figures.escaped_bytes;
                total.escaped_count += figures.escaped_count;
                total.escaped_by_tag.extend(figures.escaped_by_tag);
                total.live_bytes += figures.live_bytes;
                total.live_count += figures.live_count;
                older.extend(figures.older_iterations_alive);
            }
            Coverage::WholePool => {
                let pool = pool.get_or_insert_with(IterationFigures::default);
                pool.allocated_bytes += figures.allocated_bytes;
                pool.peak_live_bytes += figures.peak_live_bytes;
                pool.escaped_bytes += figures.escaped_bytes;
                pool.live_bytes += figures.live_bytes;
            }
        }
    }
    older.sort_unstable();
    older.dedup();
    total.older_iterations_alive = older.len() as u64;
    if let Some(pool) = pool {
        total.allocated_bytes = pool.allocated_bytes;
        total.peak_live_bytes = pool.peak_live_bytes;
        total.escaped_bytes = pool.escaped_bytes;
        total.live_bytes = pool.live_bytes;
    }
    total
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

    /// A new iteration: its number, and that of the iteration it is nested in (0: none).
    fn begin_iteration(&self) -> (u64, u64) {
        let mut state = self.state();
        state.iterations += 1;
        let started = (state.iterations, state.current_iteration);
        state.current_iteration = state.iterations;
        started
    }

    /// Ends iteration `iteration` (nested in `previous_iteration`) with what the sources saw
    /// of it (devices, heap, pool), and counts its growth.
    fn end_iteration(
        &self,
        iteration: u64,
        previous_iteration: u64,
        sources: [Option<IterationFigures>; 3],
    ) -> ScopeReport {
        let figures = combine(sources);
        let escaped_by_tag = if figures.escaped_count > 0 {
            group_escapes(&figures.escaped_by_tag, &self.label)
        } else {
            Vec::new()
        };
        let mut state = self.state();
        let live_bytes = figures.live_bytes;
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
        state.current_iteration = previous_iteration;
        ScopeReport {
            label: self.label.to_string(),
            iterations: iteration,
            allocated_bytes: figures.allocated_bytes,
            allocated_count: figures.allocated_count,
            peak_live_bytes: figures.peak_live_bytes,
            escaped_bytes: figures.escaped_bytes,
            escaped_count: figures.escaped_count,
            escaped_by_tag,
            live_bytes,
            live_count: figures.live_count,
            older_iterations_alive: figures.older_iterations_alive,
            growth_streak: state.growth_streak,
            cache_released_bytes: None,
        }
    }
}

/// The escapes of every source grouped by tag (no tag: the scope's label), largest first.
fn group_escapes(escapes: &[TagFigures], label: &Arc<str>) -> Vec<EscapeGroup> {
    let mut groups: HashMap<&str, (u64, u64)> = HashMap::new();
    for escape in escapes {
        let group = groups
            .entry(escape.tag.as_deref().unwrap_or(label))
            .or_default();
        group.0 += escape.count;
        group.1 += escape.bytes;
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

thread_local! {
    /// Active scopes of this thread, innermost last.
    static STACK: RefCell<Vec<Arc<ScopeTracker>>> = const { RefCell::new(Vec::new()) };
    /// Trackers of this thread by label; they outlive iterations to see later frees.
    static TRACKERS: RefCell<HashMap<Arc<str>, Arc<ScopeTracker>>> = RefCell::new(HashMap::new());
    /// The source this thread's scopes also account with ([`account_with`]).
    static EXTERNAL: RefCell<Option<Arc<dyn ScopeAccounting>>> = const { RefCell::new(None) };
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
