//! Records of single heap allocations, kept only while something asks for them: the batch
//! scope active on the allocating thread (its books: what each iteration allocated and what
//! escaped it), the trace ring, and — for allocations of [`LARGE`] bytes or more — a soft
//! memory limit (its report lists the largest live ones).
//!
//! Every lock here is taken in [`CallMode::Internal`], so allocations made while one is held pass
//! straight through, and locks are never nested.

use super::tracking::{current, mode, CallMode, ModeGuard, LIMIT};
use crate::alloc::{RingEvent, Trace, TraceEventKind, TraceLabel, TraceRing};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// Allocations this large are recorded while a memory limit is set, so that its report can
/// say what holds the memory.
pub(super) const LARGE: usize = 64 << 10;

/// One iteration of one batch scope (its tracker's id and the iteration number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScopeIteration {
    scope: u64,
    iteration: u64,
}

/// What is known of one live allocation.
#[derive(Debug)]
pub(super) struct Record {
    size: usize,
    scope: Option<ScopeIteration>,
    label: Option<TraceLabel>,
}

const SHARDS: usize = 32;
static RECORDS: [Mutex<BTreeMap<usize, Record>>; SHARDS] =
    [const { Mutex::new(BTreeMap::new()) }; SHARDS];
/// Records alive: frees skip the lookup while there are none.
static RECORDED: AtomicUsize = AtomicUsize::new(0);
static TRACING: AtomicBool = AtomicBool::new(false);
static TRACE: Mutex<Option<TraceRing>> = Mutex::new(None);
static BOOKS: Mutex<BTreeMap<u64, ScopeBook>> = Mutex::new(BTreeMap::new());
static EPOCH: OnceLock<Instant> = OnceLock::new();

thread_local! {
    /// The batch-scope iteration this thread's allocations belong to.
    static ATTRIBUTION: Cell<Option<ScopeIteration>> = const { Cell::new(None) };
}

/// The heap side of one batch scope (one tracker), over all its iterations.
#[derive(Debug, Default)]
struct ScopeBook {
    live_bytes: u64,
    live_count: u64,
    /// Highest `live_bytes` since the current iteration began.
    peak_live_bytes: u64,
    allocated_bytes: u64,
    allocated_count: u64,
    /// (count, bytes) alive per iteration.
    alive_by_iteration: BTreeMap<u64, (u64, u64)>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The sections below finish their updates without panicking: a poisoned lock still holds
    // consistent books.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn shard_of(addr: usize) -> &'static Mutex<BTreeMap<usize, Record>> {
    &RECORDS[((addr >> 4) ^ (addr >> 12)) % SHARDS]
}

fn attribution() -> Option<ScopeIteration> {
    ATTRIBUTION.try_with(Cell::get).ok().flatten()
}

/// Records a new allocation when something asks for it (called after `inner` returned it).
#[inline]
pub(super) fn after_alloc(addr: usize, size: usize) {
    if mode() != CallMode::User {
        return;
    }
    let scope = attribution();
    let tracing = TRACING.load(Relaxed);
    let for_limit = size >= LARGE && LIMIT.load(Relaxed) != u64::MAX;
    if scope.is_none() && !tracing && !for_limit {
        return;
    }
    record_alloc(addr, size, scope, tracing, scope.is_some() || for_limit);
}

#[cold]
fn record_alloc(
    addr: usize,
    size: usize,
    scope: Option<ScopeIteration>,
    tracing: bool,
    keep: bool,
) {
    let _internal = ModeGuard::enter(CallMode::Internal);
    let label = crate::alloc::trace::thread_label();
    if tracing {
        push_event(TraceEventKind::Alloc, addr, size, label.clone());
    }
    if !keep {
        return;
    }
    if let Some(scope) = scope {
        book_alloc(scope, size);
    }
    let record = Record { size, scope, label };
    let stale = lock(shard_of(addr)).insert(addr, record);
    match stale {
        None => {
            RECORDED.fetch_add(1, Relaxed);
        }
        // Only reachable if a recorded block was freed without its record being removed,
        // which the modes rule out; keep the books right all the same.
        Some(stale) => book_free_of(&stale),
    }
}

/// Removes the record of a block about to be freed (before `inner` gets it back).
#[inline]
pub(super) fn before_free(addr: usize, size: usize) {
    let tracing = TRACING.load(Relaxed);
    if !tracing && RECORDED.load(Relaxed) == 0 {
        return;
    }
    if mode() == CallMode::Internal {
        return;
    }
    record_free(addr, size, tracing);
}

#[cold]
fn record_free(addr: usize, size: usize, tracing: bool) {
    let _internal = ModeGuard::enter(CallMode::Internal);
    account_free(addr, size, remove(addr), tracing);
}

/// The books and the trace for a freed block whose record (if any) is already out of the map.
fn account_free(addr: usize, size: usize, record: Option<Record>, tracing: bool) {
    if let Some(record) = &record {
        book_free_of(record);
    }
    if tracing {
        push_event(
            TraceEventKind::Free,
            addr,
            size,
            crate::alloc::trace::thread_label(),
        );
    }
}

fn remove(addr: usize) -> Option<Record> {
    if RECORDED.load(Relaxed) == 0 {
        return None;
    }
    let removed = lock(shard_of(addr)).remove(&addr);
    if removed.is_some() {
        RECORDED.fetch_sub(1, Relaxed);
    }
    removed
}

/// Takes a block's record out before a `realloc` (put back by [`restore`] if it fails).
pub(super) fn take(addr: usize) -> Option<Record> {
    if mode() == CallMode::Internal {
        return None;
    }
    let _internal = ModeGuard::enter(CallMode::Internal);
    remove(addr)
}

/// Puts back a record that [`take`] removed, when the `realloc` failed.
pub(super) fn restore(addr: usize, record: Option<Record>) {
    if let Some(record) = record {
        let _internal = ModeGuard::enter(CallMode::Internal);
        lock(shard_of(addr)).insert(addr, record);
        RECORDED.fetch_add(1, Relaxed);
    }
}

/// Accounts the free of a block whose record [`take`] removed, after a `realloc` moved it.
pub(super) fn finish_take(addr: usize, size: usize, record: Option<Record>) {
    if mode() == CallMode::Internal {
        return;
    }
    let tracing = TRACING.load(Relaxed);
    if record.is_none() && !tracing {
        return;
    }
    let _internal = ModeGuard::enter(CallMode::Internal);
    account_free(addr, size, record, tracing);
}

fn book_alloc(scope: ScopeIteration, size: usize) {
    let size = size as u64;
    let mut books = lock(&BOOKS);
    let book = books.entry(scope.scope).or_default();
    book.live_bytes += size;
    book.live_count += 1;
    book.peak_live_bytes = book.peak_live_bytes.max(book.live_bytes);
    book.allocated_bytes += size;
    book.allocated_count += 1;
    let alive = book.alive_by_iteration.entry(scope.iteration).or_default();
    alive.0 += 1;
    alive.1 += size;
}

fn book_free_of(record: &Record) {
    let Some(scope) = record.scope else {
        return;
    };
    let size = record.size as u64;
    let mut books = lock(&BOOKS);
    let Some(book) = books.get_mut(&scope.scope) else {
        return;
    };
    book.live_bytes -= size;
    book.live_count -= 1;
    if let Some(alive) = book.alive_by_iteration.get_mut(&scope.iteration) {
        alive.0 -= 1;
        alive.1 -= size;
        if alive.0 == 0 {
            book.alive_by_iteration.remove(&scope.iteration);
        }
    }
}

/// Where a scope iteration's heap figures start (see [`begin_iteration`]).
#[derive(Debug)]
pub(crate) struct IterationStart {
    scope: ScopeIteration,
    /// The thread's attribution before the iteration (an enclosing scope's), restored at its end.
    previous: Option<ScopeIteration>,
    allocated_bytes: u64,
    allocated_count: u64,
    previous_peak: u64,
}

/// What one scope iteration did on the heap; byte counts are the layouts' sizes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct IterationFigures {
    pub(crate) allocated_bytes: u64,
    pub(crate) allocated_count: u64,
    pub(crate) peak_live_bytes: u64,
    pub(crate) escaped_bytes: u64,
    pub(crate) escaped_count: u64,
    /// Escapes by their innermost tag (`None`: no tag inside the scope), unordered.
    pub(crate) escaped_by_tag: Vec<(Option<Arc<str>>, u64, u64)>,
    pub(crate) live_bytes: u64,
    pub(crate) live_count: u64,
    /// Earlier iterations that still have heap allocations alive.
    pub(crate) older_iterations_alive: Vec<u64>,
}

/// Starts attributing this thread's heap allocations to iteration `iteration` of scope `scope`
/// (`None` when the tracking allocator is not tracking).
pub(crate) fn begin_iteration(scope: u64, iteration: u64) -> Option<IterationStart> {
    if !super::tracking::is_on() {
        return None;
    }
    let _internal = ModeGuard::enter(CallMode::Internal);
    let mut books = lock(&BOOKS);
    let book = books.entry(scope).or_default();
    let scope = ScopeIteration { scope, iteration };
    let start = IterationStart {
        scope,
        previous: attribution(),
        allocated_bytes: book.allocated_bytes,
        allocated_count: book.allocated_count,
        previous_peak: book.peak_live_bytes,
    };
    book.peak_live_bytes = book.live_bytes;
    drop(books);
    let _ = ATTRIBUTION.try_with(|a| a.set(Some(scope)));
    Some(start)
}

/// Ends the iteration [`begin_iteration`] started and returns its figures.
pub(crate) fn end_iteration(start: IterationStart) -> IterationFigures {
    let _ = ATTRIBUTION.try_with(|a| a.set(start.previous));
    let _internal = ModeGuard::enter(CallMode::Internal);
    let ScopeIteration { scope, iteration } = start.scope;
    let mut figures = {
        let mut books = lock(&BOOKS);
        let book = books.entry(scope).or_default();
        let (escaped_count, escaped_bytes) = book
            .alive_by_iteration
            .get(&iteration)
            .copied()
            .unwrap_or((0, 0));
        let figures = IterationFigures {
            allocated_bytes: book.allocated_bytes - start.allocated_bytes,
            allocated_count: book.allocated_count - start.allocated_count,
            peak_live_bytes: book.peak_live_bytes,
            escaped_bytes,
            escaped_count,
            escaped_by_tag: Vec::new(),
            live_bytes: book.live_bytes,
            live_count: book.live_count,
            older_iterations_alive: book
                .alive_by_iteration
                .range(..iteration)
                .map(|(older, _)| *older)
                .collect(),
        };
        // A nested iteration of the same scope hands the peak back to the outer one.
        book.peak_live_bytes = start.previous_peak.max(book.peak_live_bytes);
        figures
    };
    if figures.escaped_count > 0 {
        figures.escaped_by_tag = escapes_by_tag(start.scope);
    }
    figures
}

fn escapes_by_tag(scope: ScopeIteration) -> Vec<(Option<Arc<str>>, u64, u64)> {
    let mut groups: HashMap<Option<Arc<str>>, (u64, u64)> = HashMap::new();
    for shard in &RECORDS {
        for record in lock(shard).values() {
            if record.scope == Some(scope) {
                let tag = record.label.as_ref().and_then(TraceLabel::tag_name);
                let group = groups.entry(tag).or_default();
                group.0 += 1;
                group.1 += record.size as u64;
            }
        }
    }
    groups
        .into_iter()
        .map(|(tag, (count, bytes))| (tag, count, bytes))
        .collect()
}

/// The `count` largest recorded live allocations, largest first: (bytes, label).
pub(super) fn largest_live(count: usize) -> Vec<(u64, Option<TraceLabel>)> {
    let _internal = ModeGuard::enter(CallMode::Internal);
    let mut largest: Vec<(u64, Option<TraceLabel>)> = Vec::new();
    for shard in &RECORDS {
        for record in lock(shard).values() {
            largest.push((record.size as u64, record.label.clone()));
        }
        largest.sort_by_key(|entry| std::cmp::Reverse(entry.0));
        largest.truncate(count);
    }
    largest
}

/// Keeps the last `capacity` heap events from now on (0 stops and forgets them).
pub(super) fn start_trace(capacity: usize) {
    let _internal = ModeGuard::enter(CallMode::Internal);
    EPOCH.get_or_init(Instant::now);
    *lock(&TRACE) = (capacity > 0).then(|| TraceRing::new(capacity));
    TRACING.store(capacity > 0, Relaxed);
}

/// A copy of the heap trace, oldest event first.
pub(super) fn trace() -> Trace {
    let _internal = ModeGuard::enter(CallMode::Internal);
    match lock(&TRACE).as_ref() {
        Some(ring) => ring.to_trace(None),
        None => TraceRing::new(0).to_trace(None),
    }
}

/// Adds an event to the trace (a no-op when it does not record).
pub(super) fn push_event(
    kind: TraceEventKind,
    addr: usize,
    size: usize,
    label: Option<TraceLabel>,
) {
    let time_ns = EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64;
    let live = current();
    let event = RingEvent::without_origin(kind, addr as u64, size as u64, time_ns, live);
    if let Some(ring) = lock(&TRACE).as_mut() {
        ring.push(event, label);
    }
}

/// Whether the trace records.
pub(super) fn tracing() -> bool {
    TRACING.load(Relaxed)
}
