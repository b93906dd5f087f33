//! The observer's books: every live allocation it saw (by address; `cuMemCreate`'s by handle),
//! each device's counters, and the event log. It owns the figures only; the callback
//! (`callback.rs`) writes them and the `Observer` handle reads them.
//!
//! Counters are atomics (live bytes by one `fetch_add`, so the peak is exact under any
//! interleaving). Records sit in sharded maps and the log in a ring, each behind a mutex that
//! only the observer takes, never while it calls the driver, a user callback or anything that
//! could wait for another thread: see the module documentation of `observer` for why that
//! keeps a callback from waiting for a lock its own thread holds.

use super::ObservedAllocation;
use crate::accounting::{IterationFigures, IterationStart, ScopeBook, ScopeIteration, TagFigures};
use crate::alloc::{MemoryStats, Trace, TraceEvent, TraceEventKind, TraceLabel};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Devices with books of their own; an allocation on a higher ordinal is recorded under the
/// last one.
pub(crate) const MAX_DEVICES: usize = 64;

/// Shards of the live records, by address.
const SHARDS: usize = 32;

/// One device's counters.
#[derive(Default)]
struct DeviceBook {
    live: AtomicU64,
    peak: AtomicU64,
    live_count: AtomicU64,
    peak_count: AtomicU64,
    allocs: AtomicU64,
    frees: AtomicU64,
    ooms: AtomicU64,
    /// The soft limit on live bytes (`u64::MAX`: none).
    limit: AtomicU64,
}

/// Live bytes and allocations of one label.
pub(crate) type LabelTotal = (Option<TraceLabel>, u64, u64);

/// One allocation, free or failed request as the log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ObservedEvent {
    /// `Alloc`, `Free` or `Oom` (a request the driver refused for lack of memory).
    pub kind: TraceEventKind,
    /// Nanoseconds since the observer started.
    pub time_ns: u64,
    /// The allocation made or freed, or the request refused (address 0).
    pub allocation: ObservedAllocation,
    /// The device's observed live bytes after the event.
    pub live_bytes: u64,
}

/// The log: the last `capacity` events.
#[derive(Default)]
struct EventLog {
    capacity: usize,
    events: VecDeque<ObservedEvent>,
    dropped: u64,
}

/// Hashes a device address or handle (one `u64`) with a multiplication: the keys are already
/// spread, and SipHash's resistance to chosen keys buys nothing against the driver.
#[derive(Default, Clone, Copy)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, key: u64) {
        self.0 = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
}

/// Records by address (or handle).
type RecordMap = HashMap<u64, ObservedAllocation, BuildHasherDefault<AddressHasher>>;

pub(crate) struct Books {
    live: [Mutex<RecordMap>; SHARDS],
    /// `cuMemCreate`'s physical allocations, by handle.
    physical: Mutex<RecordMap>,
    devices: [DeviceBook; MAX_DEVICES],
    log: Mutex<EventLog>,
    logging: AtomicBool,
    /// The books of each batch scope (by its id) whose iterations allocated (see
    /// `accounting.rs`).
    scopes: Mutex<HashMap<u64, ScopeBook>>,
    /// The monotonic clock when the observer started.
    epoch_ns: AtomicU64,
    next_id: AtomicU64,
}

/// Locks a mutex, recovering from poisoning: every section below finishes its updates
/// without panicking, so a poisoned lock still holds consistent books.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The process's books.
pub(crate) fn books() -> &'static Books {
    static BOOKS: OnceLock<Books> = OnceLock::new();
    BOOKS.get_or_init(|| Books {
        live: std::array::from_fn(|_| Mutex::new(RecordMap::default())),
        physical: Mutex::new(RecordMap::default()),
        devices: std::array::from_fn(|_| DeviceBook {
            limit: AtomicU64::new(u64::MAX),
            ..DeviceBook::default()
        }),
        log: Mutex::new(EventLog::default()),
        logging: AtomicBool::new(false),
        scopes: Mutex::new(HashMap::new()),
        epoch_ns: AtomicU64::new(crate::alloc::trace::monotonic_ns()),
        next_id: AtomicU64::new(1),
    })
}

fn shard(address: u64) -> usize {
    ((address >> 9) ^ (address >> 21)) as usize % SHARDS
}

/// The book index of device `ordinal`.
pub(crate) fn device_index(ordinal: u32) -> usize {
    (ordinal as usize).min(MAX_DEVICES - 1)
}

impl Books {
    /// Forgets everything (the observer starts over): records, counters, the log. Limits
    /// stay.
    pub(crate) fn reset(&self) {
        for shard in &self.live {
            lock(shard).clear();
        }
        lock(&self.physical).clear();
        lock(&self.scopes).clear();
        for d in &self.devices {
            for counter in [
                &d.live,
                &d.peak,
                &d.live_count,
                &d.peak_count,
                &d.allocs,
                &d.frees,
                &d.ooms,
            ] {
                counter.store(0, Relaxed);
            }
        }
        let mut log = lock(&self.log);
        log.events.clear();
        log.dropped = 0;
        drop(log);
        self.epoch_ns
            .store(crate::alloc::trace::monotonic_ns(), Relaxed);
    }

    /// Nanoseconds since the observer started.
    pub(crate) fn now_ns(&self) -> u64 {
        crate::alloc::trace::monotonic_ns().saturating_sub(self.epoch_ns.load(Relaxed))
    }

    /// A new allocation id.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Relaxed)
    }

    /// Counts `record` as live on its device and keeps it (by handle when `physical`, else by
    /// address); returns the device's live bytes before and after.
    pub(crate) fn add(&self, key: u64, record: ObservedAllocation, physical: bool) -> (u64, u64) {
        let bytes = record.bytes;
        let d = &self.devices[device_index(record.device)];
        let before = d.live.fetch_add(bytes, Relaxed);
        let after = before + bytes;
        d.peak.fetch_max(after, Relaxed);
        let count = d.live_count.fetch_add(1, Relaxed) + 1;
        d.peak_count.fetch_max(count, Relaxed);
        d.allocs.fetch_add(1, Relaxed);
        if let Some(scope) = record.scope {
            lock(&self.scopes)
                .entry(scope.scope)
                .or_default()
                .on_alloc(scope.iteration, bytes);
        }
        let stale = if physical {
            lock(&self.physical).insert(key, record)
        } else {
            lock(&self.live[shard(key)]).insert(key, record)
        };
        // An address handed out again before its free was seen (freed by a call the observer
        // does not follow, e.g. before it started): the old record is gone from the device.
        if let Some(stale) = stale {
            self.account_free(&stale);
        }
        (before, after)
    }

    /// Takes the record of the allocation at `key` out of the books' map (not yet out of the
    /// counters: see [`Books::account_free`]).
    pub(crate) fn take(&self, key: u64, physical: bool) -> Option<ObservedAllocation> {
        if physical {
            lock(&self.physical).remove(&key)
        } else {
            lock(&self.live[shard(key)]).remove(&key)
        }
    }

    /// Puts back a record [`Books::take`] took, when the free failed.
    pub(crate) fn restore(&self, key: u64, record: ObservedAllocation, physical: bool) {
        if physical {
            lock(&self.physical).insert(key, record);
        } else {
            lock(&self.live[shard(key)]).insert(key, record);
        }
    }

    /// Counts the free of `record`; returns the device's live bytes after it.
    pub(crate) fn account_free(&self, record: &ObservedAllocation) -> u64 {
        if let Some(scope) = record.scope {
            if let Some(book) = lock(&self.scopes).get_mut(&scope.scope) {
                book.on_free(scope.iteration, record.bytes);
            }
        }
        let d = &self.devices[device_index(record.device)];
        d.live_count.fetch_sub(1, Relaxed);
        d.frees.fetch_add(1, Relaxed);
        d.live.fetch_sub(record.bytes, Relaxed) - record.bytes
    }

    /// Sets the address of physical allocation `handle` at its first mapping.
    pub(crate) fn mapped(&self, handle: u64, address: u64) {
        if let Some(record) = lock(&self.physical).get_mut(&handle) {
            if record.address == 0 {
                record.address = address;
            }
        }
    }

    /// Counts a request the driver refused for lack of memory.
    pub(crate) fn count_oom(&self, device: u32) {
        self.devices[device_index(device)]
            .ooms
            .fetch_add(1, Relaxed);
    }

    /// The device's live bytes now.
    pub(crate) fn live_bytes(&self, device: u32) -> u64 {
        self.devices[device_index(device)].live.load(Relaxed)
    }

    /// The soft limit of `device` (`None`: no limit).
    pub(crate) fn limit(&self, device: u32) -> Option<u64> {
        let limit = self.devices[device_index(device)].limit.load(Relaxed);
        (limit != u64::MAX).then_some(limit)
    }

    pub(crate) fn set_limit(&self, device: u32, limit: Option<u64>) {
        self.devices[device_index(device)]
            .limit
            .store(limit.unwrap_or(u64::MAX), Relaxed);
    }

    /// The device's figures: live bytes and their peak, calls, refused requests. The observer
    /// sees allocations, not caches: reserved and active bytes equal the allocated ones.
    pub(crate) fn stats(&self, device: u32) -> MemoryStats {
        let d = &self.devices[device_index(device)];
        let (live, peak) = (d.live.load(Relaxed), d.peak.load(Relaxed));
        MemoryStats {
            allocated_bytes: live,
            peak_allocated_bytes: peak,
            reserved_bytes: live,
            peak_reserved_bytes: peak,
            active_bytes: live,
            peak_active_bytes: peak,
            active_blocks: d.live_count.load(Relaxed),
            peak_active_blocks: d.peak_count.load(Relaxed),
            requested_bytes: live,
            num_allocs: d.allocs.load(Relaxed),
            num_frees: d.frees.load(Relaxed),
            num_ooms: d.ooms.load(Relaxed),
            ..MemoryStats::default()
        }
    }

    /// Starts a new peak window of `device` at its live figures now.
    pub(crate) fn reset_peak(&self, device: u32) {
        let d = &self.devices[device_index(device)];
        d.peak.store(d.live.load(Relaxed), Relaxed);
        d.peak_count.store(d.live_count.load(Relaxed), Relaxed);
    }

    /// Every live allocation of `device`, largest first (then oldest first).
    pub(crate) fn live(&self, device: u32) -> Vec<ObservedAllocation> {
        let index = device_index(device);
        let mut all: Vec<ObservedAllocation> = Vec::new();
        let mine = |r: &&ObservedAllocation| device_index(r.device) == index;
        for shard in &self.live {
            all.extend(lock(shard).values().filter(mine).cloned());
        }
        all.extend(lock(&self.physical).values().filter(mine).cloned());
        all.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.id.cmp(&b.id)));
        all
    }

    /// The `count` largest live allocations of `device`, and the live bytes and allocations
    /// per label (largest first), in one pass.
    pub(crate) fn largest(
        &self,
        device: u32,
        count: usize,
    ) -> (Vec<ObservedAllocation>, Vec<LabelTotal>) {
        let index = device_index(device);
        let mut largest: Vec<ObservedAllocation> = Vec::new();
        let mut by_label: HashMap<Option<TraceLabel>, (u64, u64)> = HashMap::new();
        let mut visit = |map: &RecordMap| {
            for r in map.values().filter(|r| device_index(r.device) == index) {
                let entry = by_label.entry(r.label.clone()).or_default();
                entry.0 += r.bytes;
                entry.1 += 1;
                largest.push(r.clone());
            }
            largest.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.id.cmp(&b.id)));
            largest.truncate(count);
        };
        for shard in &self.live {
            visit(&lock(shard));
        }
        visit(&lock(&self.physical));
        let mut labels: Vec<LabelTotal> = by_label
            .into_iter()
            .map(|(label, (bytes, n))| (label, bytes, n))
            .collect();
        labels.sort_by(|a, b| {
            b.1.cmp(&a.1).then_with(|| {
                a.0.as_ref()
                    .map(|l| l.to_string())
                    .cmp(&b.0.as_ref().map(|l| l.to_string()))
            })
        });
        (largest, labels)
    }

    /// Iteration `iteration` of a batch scope begins (after `previous` on this thread).
    pub(crate) fn begin_iteration(
        &self,
        iteration: ScopeIteration,
        previous: Option<ScopeIteration>,
    ) -> IterationStart {
        lock(&self.scopes)
            .entry(iteration.scope)
            .or_default()
            .begin(iteration, previous)
    }

    /// The iteration `start` began ends: its figures, the escapes by tag included.
    pub(crate) fn end_iteration(&self, start: &IterationStart) -> IterationFigures {
        let mut figures = lock(&self.scopes)
            .entry(start.iteration.scope)
            .or_default()
            .end(start);
        if figures.escaped_count > 0 {
            figures.escaped_by_tag = self.escapes_by_tag(start.iteration);
        }
        figures
    }

    /// The live allocations of `iteration`, by their innermost tag.
    fn escapes_by_tag(&self, iteration: ScopeIteration) -> Vec<TagFigures> {
        let mut groups: HashMap<Option<std::sync::Arc<str>>, (u64, u64)> = HashMap::new();
        let mut visit = |map: &RecordMap| {
            for r in map.values().filter(|r| r.scope == Some(iteration)) {
                let tag = r.label.as_ref().and_then(TraceLabel::tag_name);
                let group = groups.entry(tag).or_default();
                group.0 += 1;
                group.1 += r.bytes;
            }
        };
        for shard in &self.live {
            visit(&lock(shard));
        }
        visit(&lock(&self.physical));
        groups
            .into_iter()
            .map(|(tag, (count, bytes))| TagFigures { tag, count, bytes })
            .collect()
    }

    /// Keeps the last `capacity` events from now on (0: none, and forgets them).
    pub(crate) fn set_log_capacity(&self, capacity: usize) {
        let mut log = lock(&self.log);
        log.capacity = capacity;
        log.events.clear();
        log.dropped = 0;
        self.logging.store(capacity > 0, Relaxed);
    }

    /// Whether the log keeps events.
    pub(crate) fn logging(&self) -> bool {
        self.logging.load(Relaxed)
    }

    /// Adds an event to the log (when it keeps events).
    pub(crate) fn log(
        &self,
        kind: TraceEventKind,
        allocation: &ObservedAllocation,
        live_bytes: u64,
    ) {
        if !self.logging() {
            return;
        }
        let event = ObservedEvent {
            kind,
            time_ns: self.now_ns(),
            allocation: allocation.clone(),
            live_bytes,
        };
        let mut log = lock(&self.log);
        if log.capacity == 0 {
            return;
        }
        if log.events.len() == log.capacity {
            log.events.pop_front();
            log.dropped += 1;
        }
        log.events.push_back(event);
    }

    /// The logged events, oldest first, and how many the ring dropped before them.
    pub(crate) fn events(&self) -> (Vec<ObservedEvent>, u64, usize) {
        let log = lock(&self.log);
        (
            log.events.iter().cloned().collect(),
            log.dropped,
            log.capacity,
        )
    }

    /// The log of `device` as the allocator's [`Trace`] (what the timeline page and the
    /// memory_viz snapshot read): each event with its address, size, label, call site, and the
    /// device's live bytes after it as both allocated and reserved bytes.
    pub(crate) fn trace(&self, device: u32) -> Trace {
        let index = device_index(device);
        let (events, dropped, capacity) = self.events();
        Trace {
            capacity,
            dropped,
            events: events
                .into_iter()
                .filter(|e| device_index(e.allocation.device) == index)
                .map(|e| TraceEvent {
                    kind: e.kind,
                    addr: e.allocation.address,
                    size: e.allocation.bytes,
                    time_ns: e.time_ns,
                    label: e.allocation.label,
                    origin: e.allocation.origin,
                    allocated_bytes: e.live_bytes,
                    reserved_bytes: e.live_bytes,
                })
                .collect(),
        }
    }
}
