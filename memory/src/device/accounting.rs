//! vramguard's devices as a source of batch-scope accounting ([`DeviceAccounting`]): every block
//! a device hands out on a thread while an iteration of a batch scope is that thread's innermost
//! one is attributed to the iteration, with the thread's tag, and its free is seen wherever it
//! happens (the allocation keeps its scope's books, [`ScopeLedger`]). The books themselves are
//! `crate::accounting`'s; the scope above reads them through
//! `ScopeAccounting` like any other source's.
//!
//! Also kept per scope, for the scope's policies rather than its figures: the allocators an
//! iteration allocated from (told when it ends, for planning) and those allocated from since
//! the cache policy last ran.

use crate::accounting::{
    IterationFigures, IterationStart, ScopeAccounting, ScopeBook, ScopeIteration, TagFigures,
};
use crate::alloc::DeviceAllocator;
use crate::heap;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// Key of a live allocation: its allocator (by address) and its block id, which is unique
/// within one allocator only.
type AllocKey = (usize, u64);

#[derive(Debug)]
struct LiveAlloc {
    bytes: u64,
    iteration: u64,
    tag: Option<Arc<str>>,
}

/// The devices' books of one scope.
#[derive(Debug, Default)]
struct DeviceBooks {
    book: ScopeBook,
    live: HashMap<AllocKey, LiveAlloc>,
    /// Allocators of the devices allocated on since the cache policy last ran, by address.
    devices: HashMap<usize, Arc<DeviceAllocator>>,
    /// Allocators allocated on in the current iteration (told when it ends: planning).
    touched: HashMap<usize, Arc<DeviceAllocator>>,
}

/// The devices' books of one batch scope, shared by the allocations made in it: they are freed
/// on any thread.
#[derive(Debug)]
pub(crate) struct ScopeLedger {
    scope: u64,
    books: Mutex<DeviceBooks>,
}

/// Every scope's ledger, by scope id.
static LEDGERS: Mutex<BTreeMap<u64, Arc<ScopeLedger>>> = Mutex::new(BTreeMap::new());

thread_local! {
    /// The ledger and iteration this thread's device allocations are attributed to.
    static ATTRIBUTION: RefCell<Option<(Arc<ScopeLedger>, u64)>> = const { RefCell::new(None) };
    /// Whether [`ATTRIBUTION`] holds one: read first, so an allocation outside any scope does
    /// not borrow the cell.
    static ATTRIBUTED: Cell<bool> = const { Cell::new(false) };
}

/// Locks a mutex, recovering from poisoning: every critical section here finishes its updates
/// without panicking, so the books stay consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The ledger of scope `scope`, created on first use.
fn ledger_of(scope: u64) -> Arc<ScopeLedger> {
    let _bookkeeping = heap::Bookkeeping::enter();
    Arc::clone(lock(&LEDGERS).entry(scope).or_insert_with(|| {
        Arc::new(ScopeLedger {
            scope,
            books: Mutex::default(),
        })
    }))
}

fn attribute(to: Option<(Arc<ScopeLedger>, u64)>) {
    let attributed = to.is_some();
    // `try_with`: scopes may end while thread-locals are being destroyed.
    let _ = ATTRIBUTION.try_with(|slot| *slot.borrow_mut() = to);
    let _ = ATTRIBUTED.try_with(|flag| flag.set(attributed));
}

/// The ledger and iteration the allocations made on this thread now are attributed to.
#[inline]
pub(crate) fn attribution() -> Option<(Arc<ScopeLedger>, u64)> {
    if !ATTRIBUTED.try_with(Cell::get).unwrap_or(false) {
        return None;
    }
    ATTRIBUTION
        .try_with(|slot| slot.borrow().clone())
        .ok()
        .flatten()
}

impl ScopeLedger {
    /// The scope's id.
    pub(crate) fn scope(&self) -> u64 {
        self.scope
    }

    /// The books, locked; what is allocated meanwhile is bookkeeping, never a scope's.
    fn books(&self) -> (MutexGuard<'_, DeviceBooks>, heap::Bookkeeping) {
        let bookkeeping = heap::Bookkeeping::enter();
        (lock(&self.books), bookkeeping)
    }

    /// Block `id` of `bytes` bytes was handed out by `allocator` in iteration `iteration`, on
    /// this thread (whose tag it keeps).
    pub(crate) fn on_alloc(
        &self,
        allocator: &Arc<DeviceAllocator>,
        id: u64,
        bytes: usize,
        iteration: u64,
    ) {
        let tag = crate::alloc::trace::thread_label().and_then(|label| label.tag_name());
        let key = allocator_key(allocator);
        let bytes = bytes as u64;
        let (mut books, _bookkeeping) = self.books();
        books.live.insert(
            (key, id),
            LiveAlloc {
                bytes,
                iteration,
                tag,
            },
        );
        books.book.on_alloc(iteration, bytes);
        books
            .devices
            .entry(key)
            .or_insert_with(|| Arc::clone(allocator));
        books
            .touched
            .entry(key)
            .or_insert_with(|| Arc::clone(allocator));
    }

    /// Block `id` of `allocator`, told by [`ScopeLedger::on_alloc`], is freed (on any thread).
    pub(crate) fn on_free(&self, allocator: &Arc<DeviceAllocator>, id: u64) {
        let (mut books, _bookkeeping) = self.books();
        if let Some(alloc) = books.live.remove(&(allocator_key(allocator), id)) {
            books.book.on_free(alloc.iteration, alloc.bytes);
        }
    }
}

fn allocator_key(allocator: &Arc<DeviceAllocator>) -> usize {
    Arc::as_ptr(allocator) as usize
}

/// vramguard's devices as a source of batch-scope accounting (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DeviceAccounting;

impl DeviceAccounting {
    /// The allocators scope `scope` allocated from in the iteration that just ended (planning
    /// is told of its end), forgotten here.
    pub(crate) fn take_touched(&self, scope: u64) -> Vec<Arc<DeviceAllocator>> {
        let ledger = ledger_of(scope);
        let (mut books, _bookkeeping) = ledger.books();
        books.touched.drain().map(|(_, a)| a).collect()
    }

    /// The allocators scope `scope` allocated from since the cache policy last ran, forgotten
    /// here (`keep: false` forgets them without returning them: no device is kept alive for a
    /// policy that does not run).
    pub(crate) fn take_devices(&self, scope: u64, keep: bool) -> Vec<Arc<DeviceAllocator>> {
        let ledger = ledger_of(scope);
        let (mut books, _bookkeeping) = ledger.books();
        if keep {
            books.devices.drain().map(|(_, a)| a).collect()
        } else {
            books.devices.clear();
            Vec::new()
        }
    }

    /// Forgets scope `scope`'s books (its allocations still alive keep them, and their frees
    /// are still counted there).
    pub(crate) fn forget(&self, scope: u64) {
        let _bookkeeping = heap::Bookkeeping::enter();
        lock(&LEDGERS).remove(&scope);
    }
}

impl ScopeAccounting for DeviceAccounting {
    fn begin_iteration(&self, iteration: ScopeIteration) -> Option<IterationStart> {
        let previous = attribution().map(|(ledger, iteration)| ScopeIteration {
            scope: ledger.scope,
            iteration,
        });
        let ledger = ledger_of(iteration.scope);
        let start = ledger.books().0.book.begin(iteration, previous);
        attribute(Some((ledger, iteration.iteration)));
        Some(start)
    }

    fn end_iteration(&self, start: &IterationStart) -> Option<IterationFigures> {
        attribute(
            start
                .previous
                .map(|previous| (ledger_of(previous.scope), previous.iteration)),
        );
        let ledger = ledger_of(start.iteration.scope);
        let (mut books, _bookkeeping) = ledger.books();
        let mut figures = books.book.end(start);
        if figures.escaped_count > 0 {
            let mut by_tag: HashMap<Option<Arc<str>>, (u64, u64)> = HashMap::new();
            let iteration = start.iteration.iteration;
            for alloc in books.live.values().filter(|a| a.iteration == iteration) {
                let group = by_tag.entry(alloc.tag.clone()).or_default();
                group.0 += 1;
                group.1 += alloc.bytes;
            }
            figures.escaped_by_tag = by_tag
                .into_iter()
                .map(|(tag, (count, bytes))| TagFigures { tag, count, bytes })
                .collect();
        }
        Some(figures)
    }
}
