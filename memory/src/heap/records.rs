//! Records of single heap allocations, kept only while something asks for them: the batch
//! scope active on the allocating thread (its books: what each iteration allocated and what
//! escaped it), the trace ring, and — for allocations of [`LARGE`] bytes or more — a soft
//! memory limit (its report lists the largest live ones).
//!
//! Every lock here is taken in [`CallMode::Internal`], so allocations made while one is held pass
//! straight through, and locks are never nested.

use super::tracking::{current, mode, CallMode, ModeGuard, LIMIT};
use crate::accounting::{
    IterationFigures, IterationStart, ScopeAccounting, ScopeBook, ScopeIteration, TagFigures,
};
use crate::alloc::{RingEvent, Trace, TraceEventKind, TraceLabel, TraceRing};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// Allocations this large are recorded while a memory limit is set, so that its report can
/// say what holds the memory.
pub(super) const LARGE: usize = 64 << 10;

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
    lock(&BOOKS)
        .entry(scope.scope)
        .or_default()
        .on_alloc(scope.iteration, size as u64);
}

fn book_free_of(record: &Record) {
    let Some(scope) = record.scope else {
        return;
    };
    if let Some(book) = lock(&BOOKS).get_mut(&scope.scope) {
        book.on_free(scope.iteration, record.size as u64);
    }
}

/// The heap as a source of batch-scope accounting: the allocations made on the scope's thread
/// while an iteration is its innermost scope, each recorded with its iteration (and its tag)
/// until it is freed, on any thread. Sees nothing while the tracking allocator does not track.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HeapAccounting;

impl ScopeAccounting for HeapAccounting {
    /// Starts attributing this thread's heap allocations to `iteration` (`None` when the
    /// tracking allocator is not tracking).
    fn begin_iteration(&self, iteration: ScopeIteration) -> Option<IterationStart> {
        if !super::tracking::is_on() {
            return None;
        }
        let _internal = ModeGuard::enter(CallMode::Internal);
        let start = lock(&BOOKS)
            .entry(iteration.scope)
            .or_default()
            .begin(iteration, attribution());
        let _ = ATTRIBUTION.try_with(|a| a.set(Some(iteration)));
        Some(start)
    }

    /// Ends the iteration `start` began: the thread's allocations belong to the one before
    /// again.
    fn end_iteration(&self, start: &IterationStart) -> Option<IterationFigures> {
        let _ = ATTRIBUTION.try_with(|a| a.set(start.previous));
        let _internal = ModeGuard::enter(CallMode::Internal);
        let mut figures = lock(&BOOKS)
            .entry(start.iteration.scope)
            .or_default()
            .end(start);
        if figures.escaped_count > 0 {
            figures.escaped_by_tag = escapes_by_tag(start.iteration);
        }
        Some(figures)
    }
}

fn escapes_by_tag(scope: ScopeIteration) -> Vec<TagFigures> {
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
        .map(|(tag, (count, bytes))| TagFigures { tag, count, bytes })
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
