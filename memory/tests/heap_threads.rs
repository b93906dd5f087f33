//! The tracking allocator under the load of `alloc/scale.rs` (issue #22): 8 threads × 100,000
//! heap calls (alloc, dealloc, realloc of random sizes and alignments), then 64 threads, past
//! the 63 per-thread counter shards (later threads share one). While every thread is parked at
//! a barrier, the heap's statistics must equal the sums the threads kept, byte for byte and call
//! for call: live bytes, allocations, frees (a realloc counts one of each).
//!
//! A binary without the test harness (`harness = false`): the global allocator counts every
//! thread of the process, and libtest's own threads would allocate while the figures are read.

#[path = "../../tensor/tests/alloc/faulty.rs"]
mod faulty;

use faulty::Rng;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use vramguard_memory::heap::{self, TrackingAllocator};

#[global_allocator]
static GLOBAL: TrackingAllocator = TrackingAllocator::system();

/// Blocks a thread holds at most (its list is allocated once, before the counting starts).
const SLOTS: usize = 256;
const ALIGNS: [usize; 5] = [1, 8, 16, 64, 4096];

/// What the threads report: allocations, frees, live bytes.
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static FREES: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicU64 = AtomicU64::new(0);

/// Random heap calls; parks at the barriers the main thread reads the figures at.
fn worker(seed: u64, ops: usize, barrier: &Barrier) {
    let mut rng = Rng::new(seed);
    let mut slots: Vec<(*mut u8, Layout)> = Vec::with_capacity(SLOTS);
    let (mut allocs, mut frees, mut live) = (0u64, 0u64, 0u64);
    barrier.wait(); // the main thread reads the figures before
    barrier.wait(); // go
    for _ in 0..ops {
        let choice = rng.below(10);
        if slots.is_empty() || (choice < 5 && slots.len() < SLOTS) {
            let size = rng.range(1, 8192);
            let align = ALIGNS[rng.below(ALIGNS.len())];
            let Ok(layout) = Layout::from_size_align(size, align) else {
                continue;
            };
            // SAFETY: the layout's size is not zero.
            let ptr = unsafe { GLOBAL.alloc(layout) };
            assert!(!ptr.is_null(), "{layout:?} refused without a limit");
            // SAFETY: `ptr` holds `size` ≥ 1 bytes.
            unsafe { ptr.write(seed as u8) };
            slots.push((ptr, layout));
            allocs += 1;
            live += size as u64;
        } else if choice < 8 {
            let (ptr, layout) = slots.swap_remove(rng.below(slots.len()));
            // SAFETY: allocated above with this layout and not freed since.
            unsafe { GLOBAL.dealloc(ptr, layout) };
            frees += 1;
            live -= layout.size() as u64;
        } else {
            let i = rng.below(slots.len());
            let (ptr, layout) = slots[i];
            let size = rng.range(1, 16384);
            // SAFETY: `ptr` is live with `layout`; the new size is not zero and, rounded to the
            // alignment, far below `isize::MAX`.
            let grown = unsafe { GLOBAL.realloc(ptr, layout, size) };
            assert!(
                !grown.is_null(),
                "realloc to {size} refused without a limit"
            );
            // SAFETY: `grown` holds `size` ≥ 1 bytes and kept the first byte.
            assert_eq!(
                unsafe { grown.read() },
                seed as u8,
                "realloc lost the contents"
            );
            let Ok(new) = Layout::from_size_align(size, layout.align()) else {
                unreachable!("the alignment is a power of two and the size small");
            };
            slots[i] = (grown, new);
            allocs += 1;
            frees += 1;
            live = live + size as u64 - layout.size() as u64;
        }
    }
    ALLOCS.fetch_add(allocs, Ordering::SeqCst);
    FREES.fetch_add(frees, Ordering::SeqCst);
    LIVE.fetch_add(live, Ordering::SeqCst);
    barrier.wait(); // the main thread reads the figures with every block held
    barrier.wait(); // free everything
    let held = slots.len() as u64;
    for (ptr, layout) in slots.drain(..) {
        // SAFETY: allocated above with this layout and not freed since.
        unsafe { GLOBAL.dealloc(ptr, layout) };
    }
    FREES.fetch_add(held, Ordering::SeqCst);
    barrier.wait(); // the main thread reads the figures after
    barrier.wait(); // exit
}

/// One round of `threads` × `ops` calls; returns the calls made. The figures are read while
/// every worker is parked at a barrier; the workers are joined (so a thread's exit, which frees
/// its thread-locals, falls in no later round).
fn round(threads: usize, ops: usize, seed: u64) -> u64 {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || worker(seed.wrapping_add(t as u64), ops, &barrier))
        })
        .collect();
    let calls = {
        barrier.wait();
        let before = heap::stats();
        let (allocs0, frees0) = (ALLOCS.load(Ordering::SeqCst), FREES.load(Ordering::SeqCst));
        barrier.wait();
        barrier.wait();
        let during = heap::stats();
        let (allocs, frees, live) = (
            ALLOCS.load(Ordering::SeqCst) - allocs0,
            FREES.load(Ordering::SeqCst) - frees0,
            LIVE.swap(0, Ordering::SeqCst),
        );
        assert_eq!(
            (during.allocated_bytes, during.num_allocs, during.num_frees),
            (
                before.allocated_bytes + live,
                before.num_allocs + allocs,
                before.num_frees + frees
            ),
            "live bytes, allocations, frees with {threads} threads"
        );
        assert_eq!(during.num_allocs, before.num_allocs + allocs, "allocations");
        assert_eq!(during.num_frees, before.num_frees + frees, "frees");
        assert!(during.peak_allocated_bytes >= during.allocated_bytes);
        barrier.wait();
        barrier.wait();
        let after = heap::stats();
        let frees_all = FREES.load(Ordering::SeqCst) - frees0;
        assert_eq!(
            after.allocated_bytes, before.allocated_bytes,
            "bytes left live"
        );
        assert_eq!(after.num_frees, before.num_frees + frees_all, "frees");
        assert_eq!(after.num_allocs, before.num_allocs + allocs);
        barrier.wait();
        allocs + frees_all
    };
    for w in workers {
        if let Err(panic) = w.join() {
            std::panic::resume_unwind(panic);
        }
    }
    calls
}

fn main() {
    assert!(heap::is_tracking());
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let eight = round(8, 100_000, seed);
    // 64 more threads: the later ones share the last counter shard.
    let many = round(64, 10_000, seed ^ 0x64);
    println!(
        "tracking allocator: seed {seed}; 8 threads x 100,000 operations ({eight} counted \
         calls), then 64 threads x 10,000 ({many}): exact"
    );
}
