//! What `vramguard::TrackingAllocator` costs per heap allocation: an alloc+free pair through it
//! against the same pair through `std::alloc::System`, side by side in one run (interleaved
//! blocks, medians), on one thread and on two, and with its records on (inside a batch scope;
//! with the trace recording).
//!
//! ```sh
//! cargo run --release --example heap_bench
//! cargo run --release --example heap_bench -- --json
//! ```
//!
//! Sizes are 256 request sizes drawn log-uniformly between 16 B and 64 KiB (fixed seed): the
//! small allocations of ordinary Rust code and of tensor metadata; a large tensor's buffer costs
//! the system allocator far more than the tracking adds. The allocators are called directly
//! (`GlobalAlloc::alloc` / `dealloc`); this program's own global allocator is the default one.
//! Flags: `--quick`, and the shared `--json` and `--write` (updates the `heap` section of
//! BENCHMARKS.md).

#[path = "../benches/support/report.rs"]
mod report;

use report::{Args, Report, Unit};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::time::Instant;
use vramguard::scope::BatchScope;
use vramguard::{heap, TrackingAllocator};

static TRACKING: TrackingAllocator = TrackingAllocator::system();

fn sizes() -> Vec<Layout> {
    // xorshift, fixed seed: the same sizes every run.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let (lo, hi) = ((16f64).ln(), ((64u64 << 10) as f64).ln());
    (0..256)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let u = (state >> 11) as f64 / (1u64 << 53) as f64;
            let size = (lo + (hi - lo) * u).exp() as usize;
            Layout::from_size_align(size, 16).expect("valid layout")
        })
        .collect()
}

/// ns per alloc+free pair of `allocator` over `layouts`, one figure per round.
fn rounds(allocator: &dyn GlobalAlloc, layouts: &[Layout], rounds: usize) -> Vec<f64> {
    let pass = || {
        for l in layouts {
            // SAFETY: non-zero sizes; each block is freed right away with its own layout.
            unsafe {
                let p = allocator.alloc(*l);
                assert!(!p.is_null(), "out of memory in the benchmark");
                allocator.dealloc(black_box(p), *l);
            }
        }
    };
    pass();
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            pass();
            t.elapsed().as_nanos() as f64 / layouts.len() as f64
        })
        .collect()
}

fn two_threads(allocator: &(dyn GlobalAlloc + Sync), layouts: &[Layout], n: usize) -> Vec<f64> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| s.spawn(move || rounds(allocator, layouts, n)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("benchmark thread"))
            .collect()
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args = Args::parse();
    let n = if args.quick { 20 } else { 200 };
    let layouts = sizes();
    // The tracking allocator reads its settings at its first call.
    drop(rounds(&TRACKING, &layouts, 1));
    assert!(
        heap::is_tracking(),
        "heap_tracking:false is set: nothing to measure"
    );

    let (mut system, mut tracking, mut scoped, mut traced) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut system_2, mut tracking_2) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        system.extend(rounds(&System, &layouts, n / 4));
        tracking.extend(rounds(&TRACKING, &layouts, n / 4));
        {
            let _iteration = BatchScope::enter("heap_bench");
            scoped.extend(rounds(&TRACKING, &layouts, n / 4));
        }
        heap::record_trace(4096);
        traced.extend(rounds(&TRACKING, &layouts, n / 4));
        heap::record_trace(0);
        system_2.extend(two_threads(&System, &layouts, n / 4));
        tracking_2.extend(two_threads(&TRACKING, &layouts, n / 4));
    }
    let (system, tracking) = (median(system), median(tracking));
    let (scoped, traced) = (median(scoped), median(traced));
    let (system_2, tracking_2) = (median(system_2), median(tracking_2));

    let mut report = Report::new("heap");
    report.metric("system_pair_ns", system, Unit::Ns);
    report.metric("tracking_pair_ns", tracking, Unit::Ns);
    report.metric("tracking_over_system", tracking / system, Unit::Ratio);
    report.metric("system_pair_ns_2threads", system_2, Unit::Ns);
    report.metric("tracking_pair_ns_2threads", tracking_2, Unit::Ns);
    report.metric(
        "tracking_over_system_2threads",
        tracking_2 / system_2,
        Unit::Ratio,
    );
    report.metric("tracking_pair_ns_in_batch_scope", scoped, Unit::Ns);
    report.metric("tracking_pair_ns_recording", traced, Unit::Ns);
    report.note(&format!(
        "Alloc+free pairs over 256 sizes from 16 B to 64 KiB, medians of {n} rounds per variant, \
         interleaved in 4 blocks; `TrackingAllocator::system()` and `System` called directly. \
         In a batch scope every allocation is recorded (a sharded map and the scope's books); \
         recording keeps a 4096-event trace."
    ));
    report.finish(&args);
}
