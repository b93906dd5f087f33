//! Iteration planning: a loop under batch scopes is laid out from the recording of its previous
//! iteration (offline planning made online). Byte counts come from the allocator's statistics.

use vramguard_alloc::{AllocatorConfig, HostBackend};
use vramguard_memory::scope::BatchScope;
use vramguard_memory::{memory, Device};

const D: usize = 768;
const HEADS: usize = 12;
const F32: usize = 4;

/// One encoder forward pass of `layers` layers at batch `b`, length `t`, each tensor dropped
/// right after its last use (the shape of the trace `examples/alloc_bench.rs` replays).
fn forward(device: &Device, b: usize, t: usize, layers: usize) {
    let alloc = |elems: usize| device.allocate(elems * F32).unwrap();
    let mut x = alloc(b * t * D);
    for _ in 0..layers {
        let qkv = alloc(b * t * 3 * D);
        let scores = alloc(b * HEADS * t * t);
        let probs = alloc(b * HEADS * t * t);
        drop(scores);
        let ctx = alloc(b * t * D);
        drop((probs, qkv));
        let proj = alloc(b * t * D);
        drop(ctx);
        let x1 = alloc(b * t * D);
        drop((proj, x));
        let h = alloc(b * t * 4 * D);
        let g = alloc(b * t * 4 * D);
        drop(h);
        let out = alloc(b * t * D);
        drop(g);
        x = alloc(b * t * D);
        drop((out, x1));
    }
}

/// Runs the steps, each one iteration of a batch scope; returns (peak reserved, peak allocated).
fn run(device: &Device, label: &str, steps: &[(usize, usize)]) -> (u64, u64) {
    for &(b, t) in steps {
        let _iteration = BatchScope::enter(label.to_string());
        forward(device, b, t, 4);
    }
    let s = memory::stats(device);
    (s.peak_reserved_bytes, s.peak_allocated_bytes)
}

const STEPS: [(usize, usize); 4] = [(2, 128), (8, 200), (8, 480), (4, 300)];

#[cfg(unix)]
#[test]
fn a_planned_loop_reserves_its_peak_and_an_unplanned_one_more() {
    let planned = Device::isolated_host();
    let (reserved, allocated) = run(&planned, "planned loop", &STEPS);
    let unplanned =
        Device::host_with_config(AllocatorConfig::default().with_iteration_planning(false))
            .unwrap();
    let (reserved_unplanned, allocated_unplanned) = run(&unplanned, "unplanned loop", &STEPS);
    // The same requests: the same peak of live bytes.
    assert_eq!(allocated, allocated_unplanned);
    assert_eq!(allocated, 224_133_120);
    // Best fit leaves holes where the previous layer's blocks were when a long-lived x is
    // placed (28.3 MiB more than the peak of live bytes); the plan lays the iteration out as
    // an offline planner would: within 2 MiB pages of the peak (the first iteration of the
    // 8 × 480 shape follows the 8 × 200 one's recording).
    assert_eq!(reserved_unplanned, 253_755_392);
    assert_eq!(reserved, 228_589_568);
    let (served, left) = planned.allocator().planning_counts();
    assert!(served > 0);
    assert_eq!(left, 0);
    assert_eq!(unplanned.allocator().planning_counts(), (0, 0));
    planned.allocator().check_invariants().unwrap();
}

#[cfg(unix)]
#[test]
fn a_planned_loop_makes_no_backend_calls_once_shaped() {
    let device = Device::isolated_host();
    run(&device, "steady loop", &STEPS);
    let before = memory::stats(&device);
    run(
        &device,
        "steady loop",
        &[(8, 480), (2, 128), (4, 300), (8, 200)],
    );
    let after = memory::stats(&device);
    assert_eq!(after.backend_allocs, before.backend_allocs);
    assert_eq!(after.backend_frees, before.backend_frees);
    assert_eq!(after.peak_reserved_bytes, before.peak_reserved_bytes);
}

#[cfg(unix)]
#[test]
fn an_iteration_that_leaves_the_recorded_path_is_served_by_best_fit() {
    let device = Device::host_pool(
        HostBackend::with_capacity(1 << 30),
        AllocatorConfig::default(),
    )
    .unwrap();
    run(&device, "changing loop", &[(8, 200)]);
    // Another code path: fewer layers, then an extra request the recording does not have.
    {
        let _iteration = BatchScope::enter("changing loop");
        forward(&device, 8, 200, 2);
        let extra = device.allocate(7 << 20).unwrap();
        drop(extra);
    }
    device.allocator().check_invariants().unwrap();
    assert_eq!(memory::stats(&device).allocated_bytes, 0);
    // Outside any scope nothing is planned.
    let (served, _) = device.allocator().planning_counts();
    forward(&device, 8, 200, 4);
    assert_eq!(device.allocator().planning_counts().0, served);
}

#[test]
fn iteration_planning_is_a_setting() {
    assert!(AllocatorConfig::default().iteration_planning);
    let off = AllocatorConfig::parse("iteration_planning:false").unwrap();
    assert!(!off.iteration_planning);
    assert!(AllocatorConfig::parse("iteration_planning:maybe").is_err());
}
