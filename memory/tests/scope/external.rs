//! Batch scopes that account with a pool outside vramguard, whose figures cover everything in
//! it (the CUDA driver's pool that candle allocates from, `vramguard::driver_pool::DriverPool`):
//! here a fake pool whose figures the test sets, standing in for tensors vramguard's allocator
//! never sees, implementing the one interface every source of accounting implements.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use vramguard_memory::scope::{
    account_with, BatchScope, IterationFigures, IterationStart, ScopeAccounting, ScopeIteration,
    ScopeOptions,
};
use vramguard_memory::Device;

/// A pool whose bytes in use the test moves; it keeps its high-water mark like the driver's.
#[derive(Default)]
struct FakePool {
    used: AtomicU64,
    peak: AtomicU64,
    resets: AtomicU64,
}

impl FakePool {
    fn alloc(&self, bytes: u64) {
        let used = self.used.fetch_add(bytes, Ordering::SeqCst) + bytes;
        self.peak.fetch_max(used, Ordering::SeqCst);
    }
    fn free(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::SeqCst);
    }
}

/// As the driver's pool does: each iteration starts a new peak window.
impl ScopeAccounting for FakePool {
    fn begin_iteration(&self, iteration: ScopeIteration) -> Option<IterationStart> {
        self.resets.fetch_add(1, Ordering::SeqCst);
        let used_bytes = self.used.load(Ordering::SeqCst);
        self.peak.store(used_bytes, Ordering::SeqCst);
        Some(IterationStart {
            used_bytes,
            ..IterationStart::new(iteration)
        })
    }
    fn end_iteration(&self, start: &IterationStart) -> Option<IterationFigures> {
        let (used, peak) = (
            self.used.load(Ordering::SeqCst),
            self.peak.load(Ordering::SeqCst),
        );
        Some(IterationFigures::whole_pool(start.used_bytes, used, peak))
    }
}

const MIB: u64 = 1 << 20;

#[test]
fn scopes_account_with_the_pools_figures_once_a_pool_is_taken_over() {
    let pool = Arc::new(FakePool::default());
    pool.alloc(100 * MIB); // weights, before the loop
    assert!(account_with(Some(pool.clone())).is_none());
    let options = ScopeOptions::new().warn_after_growing(3);
    let mut history = Vec::new();
    let mut reports = Vec::new();
    for i in 0..5u64 {
        let guard = BatchScope::enter_with("candle_loop", options.clone());
        // Activations: 40 MiB at the peak, freed by the end of the iteration.
        pool.alloc(30 * MIB);
        pool.alloc(10 * MIB);
        pool.free(40 * MIB);
        // The leak: one 2 MiB output kept per iteration (`history.push(out)`).
        pool.alloc(2 * MIB);
        history.push(i);
        reports.push(guard.exit());
    }
    assert_eq!(
        pool.resets.load(Ordering::SeqCst),
        5,
        "one peak window per iteration"
    );
    for (i, r) in reports.iter().enumerate() {
        let start = 100 * MIB + 2 * MIB * i as u64;
        assert_eq!(r.live_bytes, start + 2 * MIB);
        assert_eq!(r.escaped_bytes, 2 * MIB);
        assert_eq!(r.peak_live_bytes, start + 40 * MIB);
        assert_eq!(r.allocated_bytes, 40 * MIB);
        assert_eq!((r.allocated_count, r.escaped_count), (0, 0));
    }
    // Live memory grew at the end of every iteration after the first: detected as with
    // vramguard's own tensors.
    assert_eq!(reports[4].growth_streak, 4);

    // Back to vramguard's own accounting: the pool is no longer read.
    assert!(account_with(None).is_some());
    let device = Device::isolated_host();
    let guard = BatchScope::enter("own_loop");
    let kept = device.allocate(MIB as usize).unwrap();
    pool.alloc(50 * MIB);
    let r = guard.exit();
    assert_eq!((r.escaped_bytes, r.escaped_count), (MIB, 1));
    assert_eq!(r.live_bytes, MIB);
    assert_eq!(pool.resets.load(Ordering::SeqCst), 5);
    drop(kept);
}

#[test]
fn a_pool_that_cannot_be_read_leaves_vramguards_own_figures() {
    struct Broken;
    impl ScopeAccounting for Broken {
        fn begin_iteration(&self, _: ScopeIteration) -> Option<IterationStart> {
            None
        }
        fn end_iteration(&self, _: &IterationStart) -> Option<IterationFigures> {
            None
        }
    }
    account_with(Some(Arc::new(Broken)));
    let device = Device::isolated_host();
    let guard = BatchScope::enter("broken_pool");
    let kept = device.allocate(3 << 20).unwrap();
    let r = guard.exit();
    account_with(None);
    assert_eq!((r.escaped_bytes, r.live_bytes), (3 << 20, 3 << 20));
    drop(kept);
}
