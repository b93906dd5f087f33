//! [`TrackingAllocator`]: the `GlobalAlloc` wrapper, and the process-wide counters it keeps.
//!
//! The hot path is counting only: one shared atomic for the live bytes (so the peak is exact),
//! a conditional `fetch_max` for the peak, and the call counts in per-thread shards. Records
//! of single allocations (for batch scopes, the trace and the limit's report) are `records.rs`'s
//! and are made only while something asks for them.

use super::{census, records};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};

/// A global allocator that accounts the process's heap for vramguard: statistics
/// ([`crate::heap::stats`]), `#[batch_scope]` reports, the trace and its HTML timeline, a soft
/// `memory_limit`, and [`crate::memory::MaxBatchSearch::run_on_heap`] — for tensors of any library that allocates
/// through Rust's allocator (candle's and burn's CPU tensors, ndarray).
///
/// One line in the binary (or test) that wants it:
///
/// ```
/// #[global_allocator]
/// static ALLOC: vramguard_memory::heap::TrackingAllocator = vramguard_memory::heap::TrackingAllocator::system();
/// # fn main() {
/// let buffer = vec![0f32; 1024];
/// assert!(vramguard_memory::heap::stats().allocated_bytes >= 4096);
/// # drop(buffer);
/// # }
/// ```
///
/// It wraps any other `GlobalAlloc` with [`TrackingAllocator::new`]. Every call is passed to
/// the wrapped allocator; what it adds per call is counting (a few atomic operations, none of
/// them a lock), plus a record of the allocation while a batch scope is active on the thread,
/// while the trace records, or (for allocations of 64 KiB and more) while a memory limit is
/// set. `heap_tracking:false` in `VRAMGUARD_ALLOC_CONF` makes it a plain pass-through.
#[derive(Debug, Default, Clone, Copy)]
pub struct TrackingAllocator<A = System> {
    inner: A,
}

impl TrackingAllocator<System> {
    /// Tracks the system allocator (`std::alloc::System`).
    pub const fn system() -> Self {
        Self { inner: System }
    }
}

impl<A> TrackingAllocator<A> {
    /// Tracks `inner` (e.g. another crate's global allocator).
    pub const fn new(inner: A) -> Self {
        Self { inner }
    }
}

/// Tracking has not started: no allocation has passed through yet.
const UNINIT: u8 = 0;
/// The first allocation is reading `VRAMGUARD_ALLOC_CONF`.
const LOADING: u8 = 1;
/// Tracking.
const ON: u8 = 2;
/// `heap_tracking:false`: a plain pass-through.
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// Live bytes (sum of the layouts' sizes), every thread.
static CURRENT: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);
/// Soft limit on [`CURRENT`] (`u64::MAX`: none).
pub(super) static LIMIT: AtomicU64 = AtomicU64::new(u64::MAX);
static OOMS: AtomicU64 = AtomicU64::new(0);

/// Call-count shards: the first `SHARDS - 1` threads to allocate own one each (counted with a
/// plain load and store, no read-modify-write); later threads share the last one.
const SHARDS: usize = 64;
const SHARED: usize = SHARDS - 1;

/// Call counts of one thread (or of the threads that share the last shard), on its own cache
/// line.
#[repr(align(128))]
struct Shard {
    allocs: AtomicU64,
    frees: AtomicU64,
}

impl Shard {
    #[inline]
    fn bump(counter: &AtomicU64, owned: bool) {
        if owned {
            // Only this thread writes an owned shard: no other write can be lost.
            counter.store(counter.load(Relaxed) + 1, Relaxed);
        } else {
            counter.fetch_add(1, Relaxed);
        }
    }
}

static COUNTS: [Shard; SHARDS] = [const {
    Shard {
        allocs: AtomicU64::new(0),
        frees: AtomicU64::new(0),
    }
}; SHARDS];
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// What the current thread's heap calls are, for the records (counting is the same for all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CallMode {
    /// The user's code: recorded when something asks for records.
    User,
    /// vramguard's own scope bookkeeping: counted, never recorded (frees are still looked up).
    Bookkeeping,
    /// Inside the tracking allocator's own locked sections: counted, nothing else.
    Internal,
    /// The peak census's own tables (`census.rs`): while a census exists, passed straight
    /// through, neither counted nor recorded.
    Uncounted,
}

thread_local! {
    static MODE: Cell<CallMode> = const { Cell::new(CallMode::User) };
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's mode (`Internal` while its thread-locals are gone: pass through).
#[inline]
pub(super) fn mode() -> CallMode {
    MODE.try_with(Cell::get).unwrap_or(CallMode::Internal)
}

/// Sets this thread's mode until dropped (restores the previous one).
pub(super) struct ModeGuard(CallMode);

impl ModeGuard {
    #[inline]
    pub(super) fn enter(mode: CallMode) -> Self {
        Self(
            MODE.try_with(|m| m.replace(mode))
                .unwrap_or(CallMode::Internal),
        )
    }
}

impl Drop for ModeGuard {
    #[inline]
    fn drop(&mut self) {
        let _ = MODE.try_with(|m| m.set(self.0));
    }
}

/// This thread's shard, and whether it owns it.
#[inline]
fn shard() -> (&'static Shard, bool) {
    let index = SHARD
        .try_with(|s| {
            let mut index = s.get();
            if index == usize::MAX {
                index = NEXT_SHARD.fetch_add(1, Relaxed).min(SHARED);
                s.set(index);
            }
            index
        })
        .unwrap_or(SHARED);
    (&COUNTS[index], index != SHARED)
}

#[inline]
fn count_alloc() {
    let (shard, owned) = shard();
    Shard::bump(&shard.allocs, owned);
}

#[inline]
fn count_free() {
    let (shard, owned) = shard();
    Shard::bump(&shard.frees, owned);
}

/// Whether the tracking allocator is the global allocator and tracking (it has seen an
/// allocation, and `heap_tracking:false` is not set).
pub(super) fn is_on() -> bool {
    STATE.load(Relaxed) == ON
}

/// Reads the settings at the first allocation; later calls return the state at once.
#[inline]
fn state() -> u8 {
    let state = STATE.load(Relaxed);
    if state != UNINIT {
        return state;
    }
    start()
}

#[cold]
fn start() -> u8 {
    if STATE
        .compare_exchange(UNINIT, LOADING, Relaxed, Relaxed)
        .is_err()
    {
        return STATE.load(Relaxed);
    }
    // Reading the environment allocates: those calls are counted and nothing else.
    let _internal = ModeGuard::enter(CallMode::Internal);
    let settings = super::limit::read_settings();
    STATE.store(if settings.tracking { ON } else { OFF }, Relaxed);
    super::exit_report::install(settings.tracking);
    if settings.tracking {
        if let Some(limit) = settings.limit {
            LIMIT.store(limit, Relaxed);
        }
        if settings.trace_capacity > 0 {
            records::start_trace(settings.trace_capacity);
        }
    }
    STATE.load(Relaxed)
}

/// Adds `size` live bytes; `false` when the soft limit refuses them (nothing counted then).
#[inline]
fn add_bytes(size: usize) -> bool {
    let size = size as u64;
    let now = CURRENT.fetch_add(size, Relaxed) + size;
    if now > LIMIT.load(Relaxed) && mode() == CallMode::User {
        CURRENT.fetch_sub(size, Relaxed);
        OOMS.fetch_add(1, Relaxed);
        super::limit::report_limit(size, now - size);
        return false;
    }
    if now > PEAK.load(Relaxed) {
        PEAK.fetch_max(now, Relaxed);
    }
    true
}

#[inline]
fn remove_bytes(size: usize) {
    CURRENT.fetch_sub(size as u64, Relaxed);
}

/// The counters now: (live bytes, peak, allocations, frees, refusals by the limit).
pub(super) fn counters() -> (u64, u64, u64, u64, u64) {
    let (allocs, frees) = COUNTS.iter().fold((0, 0), |(a, f), s| {
        (a + s.allocs.load(Relaxed), f + s.frees.load(Relaxed))
    });
    (
        CURRENT.load(Relaxed),
        PEAK.load(Relaxed),
        allocs,
        frees,
        OOMS.load(Relaxed),
    )
}

/// Live bytes now.
pub(super) fn current() -> u64 {
    CURRENT.load(Relaxed)
}

/// Starts a new peak window at the live bytes now.
pub(super) fn reset_peak() {
    PEAK.store(CURRENT.load(Relaxed), Relaxed);
}

// SAFETY: every call is forwarded to `inner` with the caller's arguments unchanged, and every
// pointer returned is `inner`'s (or null, which `GlobalAlloc` allows: the soft limit refuses an
// allocation by returning null before asking `inner`). The bookkeeping around the calls never
// touches the memory itself; it runs in `CallMode::Internal` wherever it holds a lock, so its own
// allocations pass straight through and cannot re-enter a held lock.
unsafe impl<A: GlobalAlloc> GlobalAlloc for TrackingAllocator<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if state() == OFF || census::passes_through() {
            // SAFETY: the caller's contract for `alloc`, passed on.
            return unsafe { self.inner.alloc(layout) };
        }
        if !add_bytes(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        let ptr = unsafe { self.inner.alloc(layout) };
        after_alloc(ptr, layout.size());
        ptr
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if state() == OFF || census::passes_through() {
            // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
            return unsafe { self.inner.alloc_zeroed(layout) };
        }
        if !add_bytes(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        let ptr = unsafe { self.inner.alloc_zeroed(layout) };
        after_alloc(ptr, layout.size());
        ptr
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if STATE.load(Relaxed) != OFF && !census::passes_through() {
            // Before the memory is returned: once it is, another thread may be handed the same
            // address, and its record must not be the one removed here.
            if census::recording() {
                census::record_free(ptr as usize);
            }
            records::before_free(ptr as usize, layout.size());
            remove_bytes(layout.size());
            count_free();
        }
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if state() == OFF || census::passes_through() {
            // SAFETY: the caller's contract for `realloc`, passed on.
            return unsafe { self.inner.realloc(ptr, layout, new_size) };
        }
        // The live bytes change by the difference (whether `inner` moves the block or not);
        // for the records, the old block is freed and the new one allocated (it belongs to the
        // scope iteration that grew it). Everything is undone if `inner` fails.
        let old_size = layout.size();
        let growth = new_size.saturating_sub(old_size);
        if growth > 0 && !add_bytes(growth) {
            return std::ptr::null_mut();
        }
        let old_record = records::take(ptr as usize);
        // SAFETY: the caller's contract for `realloc`, passed on.
        let new = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if new.is_null() {
            remove_bytes(growth);
            records::restore(ptr as usize, old_record);
            return new;
        }
        remove_bytes(old_size.saturating_sub(new_size));
        count_alloc();
        count_free();
        if census::recording() {
            census::record_free(ptr as usize);
            census::record_alloc(new as usize, new_size);
        }
        records::finish_take(ptr as usize, old_size, old_record);
        records::after_alloc(new as usize, new_size);
        new
    }
}

#[inline]
fn after_alloc(ptr: *mut u8, size: usize) {
    if ptr.is_null() {
        remove_bytes(size);
        return;
    }
    count_alloc();
    if census::recording() {
        census::record_alloc(ptr as usize, size);
    }
    records::after_alloc(ptr as usize, size);
}
