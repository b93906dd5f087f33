//! The peak census: which allocations were live at the moment the heap reached its peak,
//! grouped by the label they were made under (a tag, a batch-scope iteration) and their size,
//! for the exit
//! report ([`super::exit_report`]) and so for `cargo vramguard measure`. Off unless
//! `VRAMGUARD_HEAP_CENSUS` asks for it; owns nothing of the counters themselves.
//!
//! Exact without copying the live set at every new peak: each allocation gets a sequence
//! number. When the live bytes pass the peak, the peak's sequence number is noted and the
//! tally of "freed since the peak" is emptied. A later free of an allocation made at or before
//! the peak adds it to that tally. At exit, what was live at the peak is that tally plus the
//! allocations still live whose number is at most the peak's. Every event is taken under one
//! lock, so the census's live bytes follow one order of events; in a single-threaded program
//! its peak is the counters' peak to the byte.
//!
//! The census's own tables live on the heap too. They are allocated and freed only in
//! [`CallMode::Uncounted`], which the tracking allocator passes straight through while a census
//! exists: the census neither counts nor records itself, so a run with it has the same figures
//! as a run without.

use super::tracking::{mode, CallMode, ModeGuard};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

/// No census: the tracking allocator ignores this module.
const OFF: u8 = 0;
/// Recording every allocation and free.
const RECORDING: u8 = 1;
/// Closed at exit: nothing more is recorded, but memory allocated uncounted is still freed
/// uncounted.
const CLOSED: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(OFF);
static CENSUS: Mutex<Option<Census>> = Mutex::new(None);

/// The group of allocations made in vramguard's own bookkeeping (scope books, the trace).
pub(super) const BOOKKEEPING: &str = "(vramguard bookkeeping)";
/// The group of the user's allocations made under no tag and no batch scope.
pub(super) const NO_LABEL: &str = "(no label)";

/// One live allocation.
#[derive(Debug, Clone, Copy)]
struct Live {
    size: u64,
    seq: u64,
    group: u32,
}

/// Allocations of one label and one size: how many, and their bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tally {
    pub(super) count: u64,
    pub(super) bytes: u64,
}

impl Tally {
    fn add(&mut self, size: u64) {
        self.count += 1;
        self.bytes += size;
    }
}

#[derive(Debug, Default)]
struct Census {
    live: HashMap<usize, Live>,
    /// Group names, indexed by group id, and the id of each name.
    names: Vec<String>,
    ids: HashMap<String, u32>,
    seq: u64,
    live_bytes: u64,
    peak_bytes: u64,
    /// The sequence number of the allocation that reached the peak.
    peak_seq: u64,
    /// Allocations live at the peak and freed since, by group id and size.
    freed_since_peak: HashMap<(u32, u64), Tally>,
}

/// What was live at the peak, by label and size, most bytes first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PeakCensus {
    /// The census's own peak of live bytes (the sum of the groups' bytes).
    pub(super) peak_bytes: u64,
    /// (label, size, tally), most bytes first.
    pub(super) groups: Vec<(String, u64, Tally)>,
}

fn lock() -> MutexGuard<'static, Option<Census>> {
    // Every update finishes without panicking: a poisoned lock still holds a consistent census.
    CENSUS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the census (called once, from the tracking allocator's start).
pub(super) fn start() {
    let _uncounted = ModeGuard::enter(CallMode::Uncounted);
    *lock() = Some(Census::default());
    STATE.store(RECORDING, Relaxed);
}

/// Whether the tracking allocator must pass this thread's calls straight through: a census
/// exists and the thread is in its [`CallMode::Uncounted`] sections.
#[inline]
pub(super) fn passes_through() -> bool {
    STATE.load(Relaxed) != OFF && mode() == CallMode::Uncounted
}

/// Whether allocations and frees are recorded.
#[inline]
pub(super) fn recording() -> bool {
    STATE.load(Relaxed) == RECORDING
}

/// The group name of an allocation made now on this thread in `mode`.
fn group_name(mode: CallMode, out: &mut String) {
    match mode {
        CallMode::User => match crate::alloc::trace::thread_label() {
            Some(label) => {
                let _ = write!(out, "{label}");
            }
            None => out.push_str(NO_LABEL),
        },
        _ => out.push_str(BOOKKEEPING),
    }
}

/// Records an allocation of `size` bytes at `addr` (called after the wrapped allocator
/// returned it, when [`recording`]).
#[cold]
pub(super) fn record_alloc(addr: usize, size: usize) {
    let made_in = mode();
    // Declared first, dropped last: every table and string below is allocated and freed
    // uncounted.
    let _uncounted = ModeGuard::enter(CallMode::Uncounted);
    let mut name = String::new();
    group_name(made_in, &mut name);
    let mut guard = lock();
    let Some(census) = guard.as_mut() else {
        return;
    };
    let group = match census.ids.get(&name) {
        Some(&id) => id,
        None => {
            let id = u32::try_from(census.names.len()).unwrap_or(u32::MAX);
            census.names.push(name.clone());
            census.ids.insert(name, id);
            id
        }
    };
    census.seq += 1;
    let size = size as u64;
    census.live.insert(
        addr,
        Live {
            size,
            seq: census.seq,
            group,
        },
    );
    census.live_bytes += size;
    if census.live_bytes > census.peak_bytes {
        census.peak_bytes = census.live_bytes;
        census.peak_seq = census.seq;
        census.freed_since_peak.clear();
    }
}

/// Records the free of the allocation at `addr` (when [`recording`]).
#[cold]
pub(super) fn record_free(addr: usize) {
    let _uncounted = ModeGuard::enter(CallMode::Uncounted);
    let mut guard = lock();
    let Some(census) = guard.as_mut() else {
        return;
    };
    // An allocation made before the census started is not known: it is not counted either.
    let Some(live) = census.live.remove(&addr) else {
        return;
    };
    census.live_bytes -= live.size;
    if live.seq <= census.peak_seq {
        census
            .freed_since_peak
            .entry((live.group, live.size))
            .or_default()
            .add(live.size);
    }
}

/// Stops recording and returns what was live at the peak (`None` without a census). Call it in
/// a [`CallMode::Uncounted`] section and drop the result there: it is allocated uncounted. The
/// census's tables are kept, never freed.
pub(super) fn finish() -> Option<PeakCensus> {
    if STATE
        .compare_exchange(RECORDING, CLOSED, Relaxed, Relaxed)
        .is_err()
    {
        return None;
    }
    let guard = lock();
    let census = guard.as_ref()?;
    let mut by_group = census.freed_since_peak.clone();
    for live in census.live.values().filter(|l| l.seq <= census.peak_seq) {
        by_group
            .entry((live.group, live.size))
            .or_default()
            .add(live.size);
    }
    let mut groups: Vec<(String, u64, Tally)> = by_group
        .into_iter()
        .map(|((id, size), tally)| {
            let name = census
                .names
                .get(id as usize)
                .cloned()
                .unwrap_or_else(|| NO_LABEL.to_string());
            (name, size, tally)
        })
        .collect();
    groups.sort_by(|a, b| {
        (b.2.bytes, b.1)
            .cmp(&(a.2.bytes, a.1))
            .then_with(|| a.0.cmp(&b.0))
    });
    let result = PeakCensus {
        peak_bytes: census.peak_bytes,
        groups,
    };
    Some(result)
}
