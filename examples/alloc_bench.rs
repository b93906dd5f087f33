//! Caching allocator benchmark (`bench` = `alloc`).
//!
//! ```sh
//! cargo run --release --example alloc_bench [-- --json] [--quick] [--write] [--device cuda]
//!                                             [--html timeline.html]
//! ```
//!
//! `--html PATH` also writes the allocator's HTML page (timeline by step, segment map) for the
//! first 40 steps of the trace. `--export-trace PATH` only writes the trace (every allocation's
//! size and every free, in order, as JSON; `--quick` for the 100-step one) and exits: what
//! `scripts/torch-compare.py` replays through PyTorch's caching allocator.
//! `--count-pairs cached|recording|system [--rounds N]` only runs the pair loops, for
//! `scripts/alloc-callgrind.sh` (instructions per pair under callgrind). `--pair-footprint`
//! only prints, for block sizes up to each of a few bounds, how many of the pair loop's 256
//! requests ask for one and what one block of each distinct size adds up to: what a per-thread
//! cache of freed blocks limited to those sizes would have to hold for all of them to be served
//! from it (`docs/perf-notes.md`, #24). `--pair-floor [--rounds N]` only prints, beside the system
//! pair in interleaved rounds, what an exact shared path pays per pair before any work: two
//! uncontended lock/unlock pairs and the device reference's clone and drop (`docs/perf-notes.md`,
//! #24).
//!
//! Metrics:
//!
//! Every device uses the default settings unless a row says otherwise: expandable segments
//! wherever the backend maps pages (the host backend on Unix; a GPU with virtual memory
//! management whose self-test passes), fixed segments elsewhere; `expandable_segments_in_use`
//! says which the default device got. Rows ending in `_fixed_segments` run with
//! `expandable_segments:false`, PyTorch's default and this crate's before.
//!
//! - `cached_pair_ns`: median ns per `Device::allocate` + drop pair served from the cache, over
//!   rounds of 256 sizes drawn log-uniformly from 512 B to 4 MiB (the cache is warmed with one
//!   pass first); `system_pair_ns`: the same sizes through the system allocator
//!   (`std::alloc::alloc`/`dealloc`, 256-byte alignment), in the same run. Target (#24): cached
//!   ≤ system. `cached_pair_ns_fixed_segments`: the same pairs with fixed segments, interleaved
//!   in the same blocks. `cached_pair_ns_recording`: the same pairs, interleaved in the same
//!   blocks, on a device recording its trace (every alloc and free an event with its origin —
//!   source line, op — and label; target ≤ 1.5 × `cached_pair_ns`). With `--device cuda` (GPU 0;
//!   without a GPU the program prints one
//!   line and exits 0), three more, measured side by side in interleaved blocks of one run on
//!   the same sizes: `cuda_cached_pair_ns` (this allocator on the GPU, `cached_pair_ns` of
//!   that run), `cuda_async_pool_pair_ns` (`cuMemAllocAsync` + `cuMemFreeAsync` on the
//!   default stream, from the driver's default pool with its release threshold raised so it
//!   keeps its cache: what candle's CUDA tensors use) and `cuda_raw_pair_ns` (`cuMemAlloc` +
//!   `cuMemFree`), each ns per pair as the host sees it (stream-ordered calls only enqueue;
//!   the stream is synchronised between rounds, outside the timing).
//! - `pair_loop_peak_reserved_bytes`: the default device's peak reserved bytes over its pair
//!   loop (the warm-up pass and the rounds); `pair_loop_block_bytes`: one block of each distinct
//!   size the loop asks for, added up — what a per-thread cache of freed blocks by size would
//!   have to hold for every pair to be served from it.
//! - `cached_pair_ns_2threads`: the same loop on two threads sharing one allocator (ns per pair
//!   as each thread sees it, median over rounds and threads; target ≤ 1.2 × `cached_pair_ns`);
//!   `_fixed_segments` too.
//! - `trace_peak_reserved_over_allocated` and `trace_backend_calls_steady`: replay of a
//!   synthetic variable-length transformer inference trace on a fresh allocator with default
//!   settings, each step one iteration of a batch scope (as `#[batch_scope]` makes it, so the
//!   allocator plans each iteration from a recorded one) — peak reserved / peak allocated over
//!   the whole trace (target ≤ 1.05), and backend calls (segment allocs + frees, page maps +
//!   unmaps) in the second half of the trace (target 0). `_unplanned`: the same with
//!   `iteration_planning:false`. `trace_requests_planned` / `trace_requests_left_plan`: the
//!   large-pool requests a plan placed, and those of planned iterations that fell back to best
//!   fit. `trace_pair_ns`: the replay's wall time over its alloc+free pairs (the figure
//!   `scripts/torch-compare.py` sets beside PyTorch's). `_fixed_segments`: the same with fixed segments. With fixed segments the trace
//!   is also replayed after a warm-up (one max-size batch first, the warm-up remedy,
//!   `_warmup_fixed_segments`) and (host only) with `max_split_size_mb:64`
//!   (`_max_split_64mb_fixed_segments`).
//! - `trace_backend_calls_limited` (host only; `_unplanned` too): the steady backend calls of the
//!   same replay on a bounded host device of `trace_limited_capacity_bytes`, the smallest on
//!   which the planned trace runs (below what caching every shape takes, so frees must give
//!   memory back: the out-of-memory path unmaps free granules and maps them again).
//! - `trace_min_capacity_over_allocated` (host only; `_fixed_segments` too): the smallest capacity,
//!   in 2 MiB steps from the peak allocated bytes up, of a bounded host device on which the
//!   whole trace runs (the out-of-memory path releasing the cache included), over the peak
//!   allocated bytes: what the trace needs when memory is scarce, where an unbounded device
//!   simply keeps its cache.
//!
//! The trace generator: a BERT-base-shaped encoder (12 layers, d = 768, 12 heads, FFN 3072,
//! f32). Each of 400 steps (100 with `--quick`) draws a batch size from {1, 2, 4, 8} and a
//! sequence length uniformly from 16 to 512 with a fixed-seed xorshift generator, then runs the
//! forward pass as drop-at-last-use code allocates it: embeddings `b·t·d`; per layer the fused
//! QKV projection `b·t·3d`, attention scores `b·h·t·t` and probabilities (same size), context
//! `b·t·d`, output projection `b·t·d`, residual + layer norm `b·t·d`, FFN hidden `b·t·4d`, GELU
//! `b·t·4d`, FFN output `b·t·d`, residual + layer norm `b·t·d`; each tensor is freed right after
//! its last use (so at most a few are live at once), and the step's pooled output `b·d` is kept
//! until the end of the step.

#[path = "common/alloc_trace.rs"]
mod alloc_trace;
#[path = "common/devices.rs"]
mod devices;
#[path = "../benches/support/report.rs"]
mod report;

use alloc_trace::{
    export_trace, forward_unbounded, min_capacity, replay, runs_on, trace_steps, Rng,
};
use report::{Args, Report, Unit};
use std::hint::black_box;
use std::time::Instant;
use vramguard::alloc::{AllocatorConfig, HostBackend};
use vramguard::device::Allocation;
use vramguard::{memory, Device};

/// 256 sizes, log-uniform in [512 B, 4 MiB].
fn mixed_sizes() -> Vec<usize> {
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let (lo, hi) = ((512f64).ln(), ((4u64 << 20) as f64).ln());
    (0..256)
        .map(|_| (lo + (hi - lo) * rng.uniform()).exp() as usize)
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The cached pairs on two threads sharing `device`: ns per pair as each thread sees it, median
/// over rounds and threads.
fn two_threads(device: &Device, sizes: &[usize], rounds: usize) -> f64 {
    let per_thread: Vec<Vec<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| s.spawn(move || cached_rounds(device, sizes, rounds)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread"))
            .collect()
    });
    median(per_thread.concat())
}

/// Bytes of the block each pair loop's device holds through its pairs, as a model holds its
/// weights while it allocates activations: the pairs measure reuse on a device in use.
/// `cached_pair_ns_empty_device` runs the same pairs on a device that holds nothing else.
const RESIDENT_BYTES: usize = 4 << 20;

/// The block a pair loop's device holds through its pairs ([`RESIDENT_BYTES`]).
fn resident(device: &Device) -> Allocation {
    device
        .allocate(RESIDENT_BYTES)
        .expect("the resident block of a pair loop")
}

/// ns per pair for each round of `sizes`.
fn cached_rounds(device: &Device, sizes: &[usize], rounds: usize) -> Vec<f64> {
    for &s in sizes {
        drop(black_box(device.allocate(s)));
    }
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for &s in sizes {
                let a = device.allocate(black_box(s)).expect("benchmark allocation");
                drop(black_box(a));
            }
            t.elapsed().as_nanos() as f64 / sizes.len() as f64
        })
        .collect()
}

/// The system allocator's layout for each of `sizes`: 256-byte aligned, as device blocks are.
fn system_layouts(sizes: &[usize]) -> Vec<std::alloc::Layout> {
    sizes
        .iter()
        .map(|&s| std::alloc::Layout::from_size_align(s, 256).expect("valid layout"))
        .collect()
}

fn system_rounds(sizes: &[usize], rounds: usize) -> Vec<f64> {
    let layouts = system_layouts(sizes);
    let pass = || {
        for l in &layouts {
            // SAFETY: non-zero size; freed with the same layout right away.
            unsafe {
                let p = std::alloc::alloc(*l);
                assert!(!p.is_null(), "system allocator out of memory");
                std::alloc::dealloc(black_box(p), *l);
            }
        }
    };
    pass();
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            pass();
            t.elapsed().as_nanos() as f64 / sizes.len() as f64
        })
        .collect()
}

/// A device with `config`: on the host a fresh allocator; with `--device cuda` the process-wide
/// GPU device (configured by VRAMGUARD_ALLOC_CONF, which gpu-check unsets) for the default
/// settings, and an allocator of its own on GPU 0 for any other. Replays start from an emptied
/// cache and reset peaks.
fn new_device(cuda: bool, config: AllocatorConfig) -> Device {
    let shared = cuda && config == base_config();
    device_with(cuda, config, shared)
}

/// A device with `config` and an allocator of its own, on the host or on GPU 0 (unlike
/// [`new_device`], never the process-wide GPU device).
fn own_device(cuda: bool, config: AllocatorConfig) -> Device {
    device_with(cuda, config, false)
}

fn device_with(cuda: bool, config: AllocatorConfig, process_wide: bool) -> Device {
    let device = match (cuda, process_wide) {
        (true, true) => Device::cuda(0).map_err(|e| e.to_string()),
        (true, false) => Device::cuda_with_config(0, config).map_err(|e| e.to_string()),
        (false, _) => Device::host_with_config(config).map_err(|e| e.to_string()),
    };
    device.unwrap_or_else(|e| {
        eprintln!("device: {e}");
        std::process::exit(2)
    })
}

/// Bytes in a MiB, for the note's figures.
const MIB: f64 = (1u64 << 20) as f64;

/// Events the recording device's trace keeps.
const RECORDED_EVENTS: usize = 4096;

/// The settings of `VRAMGUARD_ALLOC_CONF` (the defaults when it is unset): every device of this
/// program starts from them, each row's own settings on top. A bad value stops the program with
/// the error naming the key.
fn base_config() -> AllocatorConfig {
    devices::env_config().unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2)
    })
}

fn fixed_segments() -> AllocatorConfig {
    base_config().with_expandable_segments(false)
}

/// The pair loops alone, for `scripts/alloc-callgrind.sh`: `--count-pairs MODE --rounds N`
/// warms up (outside the counted function), then runs N rounds of the 256 sizes in one
/// `#[inline(never)]` function per mode, whose instructions callgrind counts
/// (`--toggle-collect`). MODE: `cached` (default settings, the device holding its resident
/// block), `recording` (the trace on, as `cached_pair_ns_recording`), `empty` (as `cached` on a
/// device holding nothing else, as `cached_pair_ns_empty_device`), `system` (the system
/// allocator).
fn count_pairs(mode: &str, rounds: usize) {
    let sizes = mixed_sizes();
    match mode {
        "cached" | "recording" | "empty" => {
            let config = if mode == "recording" {
                base_config().with_trace_capacity(RECORDED_EVENTS)
            } else {
                base_config()
            };
            let device = new_device(false, config);
            let weights = (mode != "empty").then(|| resident(&device));
            let _label = vramguard::scope::tag("recorded pairs");
            for &s in &sizes {
                drop(black_box(device.allocate(s)));
            }
            counted_cached_pairs(&device, &sizes, rounds);
            drop(weights);
        }
        "system" => {
            let layouts = system_layouts(&sizes);
            counted_system_pairs(&layouts, 1);
            counted_system_pairs(&layouts, rounds);
        }
        other => {
            eprintln!("--count-pairs {other}: expected cached, recording, empty or system");
            std::process::exit(2);
        }
    }
    println!("pairs {}", rounds * sizes.len());
}

/// `--pair-footprint`: for block sizes up to each bound, the pair loop's requests of such a
/// size, their distinct block sizes, and those sizes added up (one cached block of each).
fn pair_footprint() {
    let device = new_device(false, base_config());
    let blocks: Vec<usize> = mixed_sizes()
        .iter()
        .map(|&s| device.allocator().rounded_size(s).unwrap_or(usize::MAX))
        .collect();
    println!(
        "block sizes up to | requests (of {}) | distinct sizes | bytes of one block each",
        blocks.len()
    );
    for bound in [
        4usize << 10,
        16 << 10,
        64 << 10,
        256 << 10,
        1 << 20,
        4 << 20,
    ] {
        let requests: Vec<usize> = blocks.iter().copied().filter(|&b| b <= bound).collect();
        let distinct = distinct_sizes(&requests);
        println!(
            "{} KiB | {} | {} | {} ({:.2} MiB)",
            bound >> 10,
            requests.len(),
            distinct.len(),
            distinct.iter().sum::<usize>(),
            distinct.iter().sum::<usize>() as f64 / (1u64 << 20) as f64
        );
    }
}

/// `--pair-floor [--rounds N]`: what any exact shared path pays per pair before doing any work,
/// beside the system pair, in interleaved rounds of one run. A pair observed exactly by every
/// thread (statistics and peaks exact at every observation point) takes a shared lock at the
/// allocation and again at the free, and the allocation holds a reference to its device (an
/// `Arc` clone and drop); `lock_arc_floor_pair_ns` is those operations alone, on an
/// uncontended `Mutex` and `Arc`, with no allocator work between them. Prints the median ns per
/// pair of each and their ratio.
fn pair_floor(rounds: usize) {
    let sizes = mixed_sizes();
    let layouts = system_layouts(&sizes);
    let state = std::sync::Mutex::new(0u64);
    let device = std::sync::Arc::new(0u64);
    let floor_round = || {
        let t = Instant::now();
        for &s in &sizes {
            // The allocation: the lock, the bookkeeping's one write, the device reference.
            *state.lock().unwrap_or_else(|e| e.into_inner()) += black_box(s) as u64;
            let held = black_box(std::sync::Arc::clone(&device));
            // The free: the lock again, then the reference dropped.
            *state.lock().unwrap_or_else(|e| e.into_inner()) -= s as u64;
            drop(held);
        }
        t.elapsed().as_nanos() as f64 / sizes.len() as f64
    };
    let system_round = || {
        let t = Instant::now();
        counted_system_pairs(&layouts, 1);
        t.elapsed().as_nanos() as f64 / layouts.len() as f64
    };
    floor_round();
    system_round();
    let (mut floor, mut system) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        floor.push(floor_round());
        system.push(system_round());
    }
    let (floor, system) = (median(floor), median(system));
    println!("rounds of {} pairs: {rounds}, interleaved", sizes.len());
    println!("system_pair_ns {system:.2}");
    println!("lock_arc_floor_pair_ns {floor:.2}");
    println!("lock_arc_floor / system {:.2}", floor / system);
}

/// The distinct values of `blocks`, ascending.
fn distinct_sizes(blocks: &[usize]) -> Vec<usize> {
    let mut distinct = blocks.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    distinct
}

#[inline(never)]
fn counted_cached_pairs(device: &Device, sizes: &[usize], rounds: usize) {
    for _ in 0..rounds {
        for &s in sizes {
            let a = device.allocate(black_box(s)).expect("benchmark allocation");
            drop(black_box(a));
        }
    }
}

#[inline(never)]
fn counted_system_pairs(layouts: &[std::alloc::Layout], rounds: usize) {
    for _ in 0..rounds {
        for l in layouts {
            // SAFETY: non-zero size; freed with the same layout right away.
            unsafe {
                let p = std::alloc::alloc(*l);
                assert!(!p.is_null(), "system allocator out of memory");
                std::alloc::dealloc(black_box(p), *l);
            }
        }
    }
}

fn main() {
    let args = Args::parse();
    if let Some(mode) = args.value::<String>("count-pairs") {
        count_pairs(&mode, args.value("rounds").unwrap_or(20));
        return;
    }
    if args.rest.iter().any(|a| a == "--pair-floor") {
        pair_floor(args.value("rounds").unwrap_or(400));
        return;
    }
    if args.rest.iter().any(|a| a == "--pair-footprint") {
        pair_footprint();
        return;
    }
    if let Some(path) = args.value::<String>("export-trace") {
        let steps = trace_steps(if args.quick { 100 } else { 400 });
        if let Err(e) = export_trace(&path, &steps) {
            eprintln!("alloc_bench --export-trace {path}: {e}");
            std::process::exit(1);
        }
        println!("wrote the trace of {} steps to {path}", steps.len());
        return;
    }
    let cuda = args.value::<String>("device").is_some_and(|d| d == "cuda");
    if cuda {
        if let Err(e) = Device::cuda(0) {
            println!("alloc_bench --device cuda: no GPU to measure ({e}); nothing measured");
            return;
        }
    }
    let rounds = if args.quick { 40 } else { 400 };
    let steps = trace_steps(if args.quick { 100 } else { 400 });
    let sizes = mixed_sizes();
    // GPU runs report under their own name, so `--write` never replaces the host's figures.
    let mut report = Report::new(if cuda { "alloc_cuda" } else { "alloc" });
    if cuda {
        report.cargo_args("--example alloc_bench");
    }

    // Same run, side by side: cached pairs and system pairs, interleaved in blocks.
    // Fixed segments too, interleaved in the same blocks, to see what expandable segments cost.
    // And the same pairs recorded: every alloc and free an event of a 4096-event trace, with
    // its origin (source line, op) and label.
    // Each device but `empty_device` holds a resident block through its pairs.
    let device = new_device(cuda, base_config());
    let fixed_device = new_device(cuda, fixed_segments());
    let recording_device = new_device(cuda, base_config().with_trace_capacity(RECORDED_EVENTS));
    // Its own allocator even on a GPU, where `device` is the process-wide one and holds a
    // resident block.
    let empty_device = own_device(cuda, base_config());
    let weights = resident(&device);
    let resident_blocks = (resident(&fixed_device), resident(&recording_device));
    let (mut cached, mut system, mut fixed, mut recording, mut empty) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut async_pool, mut raw) = (Vec::new(), Vec::new());
    let driver = cuda.then(|| GpuDriver::new(&device));
    for _ in 0..4 {
        cached.extend(cached_rounds(&device, &sizes, rounds / 4));
        system.extend(system_rounds(&sizes, rounds / 4));
        fixed.extend(cached_rounds(&fixed_device, &sizes, rounds / 4));
        empty.extend(cached_rounds(&empty_device, &sizes, rounds / 4));
        let _label = vramguard::scope::tag("recorded pairs");
        recording.extend(cached_rounds(&recording_device, &sizes, rounds / 4));
        if let Some(driver) = &driver {
            async_pool.extend(driver.async_pool_rounds(&sizes, rounds / 4));
            // cuMemAlloc is slow: fewer rounds, still in the same blocks.
            raw.extend(driver.raw_rounds(&sizes, (rounds / 80).max(1)));
        }
    }
    let recorded = memory::trace(&recording_device);
    assert!(
        recorded.events.len() == RECORDED_EVENTS
            && recorded
                .events
                .iter()
                .all(|e| e.origin.is_some() && e.label.is_some()),
        "the recording device recorded every pair with its origin and label"
    );
    drop((resident_blocks, fixed_device, recording_device));
    // What the default device reserved for its pair loop (the device without a resident
    // block), beside what a per-thread cache would hold to serve every pair (one block of each
    // distinct size).
    let pair_loop_peak_reserved = memory::stats(&empty_device).peak_reserved_bytes;
    drop(empty_device);
    let pair_loop_blocks: Vec<usize> = sizes
        .iter()
        .map(|&s| device.allocator().rounded_size(s).unwrap_or(usize::MAX))
        .collect();
    let pair_loop_block_bytes: usize = distinct_sizes(&pair_loop_blocks).iter().sum();
    let (cached, system, fixed, recording, empty) = (
        median(cached),
        median(system),
        median(fixed),
        median(recording),
        median(empty),
    );
    if cuda {
        let (async_pool, raw) = (median(async_pool), median(raw));
        report.metric_with_target(
            "cuda_cached_pair_ns",
            cached,
            Unit::Ns,
            "< cuda_async_pool_pair_ns",
            cached < async_pool,
        );
        report.metric("cuda_async_pool_pair_ns", async_pool, Unit::Ns);
        report.metric_with_target(
            "cuda_raw_pair_ns",
            raw,
            Unit::Ns,
            "≫ cuda_cached_pair_ns (≥ 10×)",
            raw >= 10.0 * cached,
        );
    }
    report.metric_with_target(
        "cached_pair_ns",
        cached,
        Unit::Ns,
        "≤ system_pair_ns",
        cached <= system,
    );
    report.metric_with_target(
        "cached_pair_ns_recording",
        recording,
        Unit::Ns,
        "≤ 1.5 × cached_pair_ns",
        recording <= 1.5 * cached,
    );
    report.metric("system_pair_ns", system, Unit::Ns);
    report.metric("cached_pair_ns_fixed_segments", fixed, Unit::Ns);
    report.metric("cached_pair_ns_empty_device", empty, Unit::Ns);
    report.metric(
        "pair_loop_peak_reserved_bytes",
        pair_loop_peak_reserved as f64,
        Unit::Bytes,
    );
    report.metric(
        "pair_loop_block_bytes",
        pair_loop_block_bytes as f64,
        Unit::Bytes,
    );

    let two = two_threads(&device, &sizes, rounds);
    // On a GPU `device` is the process-wide device, which the trace replay below uses again: its
    // resident block must not count in the replay's peaks (the host's replay device is fresh).
    drop(weights);
    report.metric_with_target(
        "cached_pair_ns_2threads",
        two,
        Unit::Ns,
        "≤ 1.2 × cached_pair_ns",
        two <= 1.2 * cached,
    );
    let fixed_device = new_device(cuda, fixed_segments());
    let fixed_weights = resident(&fixed_device);
    let two_fixed = two_threads(&fixed_device, &sizes, rounds);
    drop((fixed_weights, fixed_device));
    report.metric(
        "cached_pair_ns_2threads_fixed_segments",
        two_fixed,
        Unit::Ns,
    );

    let default_device = new_device(cuda, base_config());
    let expandable_in_use = memory::uses_expandable_segments(&default_device);
    report.metric(
        "expandable_segments_in_use",
        if expandable_in_use { 1.0 } else { 0.0 },
        Unit::Count,
    );
    if let Some(reason) = default_device.allocator().fixed_segments_reason() {
        report.note(&format!(
            "The default device uses fixed segments: {reason}."
        ));
    }
    let base = replay(&default_device, &steps, false);
    let (planned, left_plan) = default_device.allocator().planning_counts();
    report.metric("trace_requests_planned", planned as f64, Unit::Count);
    report.metric("trace_requests_left_plan", left_plan as f64, Unit::Count);
    drop(default_device);
    report.metric_with_target(
        "trace_peak_reserved_over_allocated",
        base.ratio,
        Unit::Ratio,
        "≤ 1.05",
        base.ratio <= 1.05,
    );
    report.metric_with_target(
        "trace_backend_calls_steady",
        base.steady_calls as f64,
        Unit::Count,
        "= 0",
        base.steady_calls == 0,
    );
    report.metric(
        "trace_peak_allocated_bytes",
        base.peak_allocated as f64,
        Unit::Bytes,
    );
    report.metric(
        "trace_peak_reserved_bytes",
        base.peak_reserved as f64,
        Unit::Bytes,
    );
    report.metric("trace_pair_ns", base.pair_ns, Unit::Ns);

    let unplanned = replay(
        &new_device(cuda, base_config().with_iteration_planning(false)),
        &steps,
        false,
    );
    report.metric(
        "trace_peak_reserved_over_allocated_unplanned",
        unplanned.ratio,
        Unit::Ratio,
    );
    report.metric(
        "trace_backend_calls_steady_unplanned",
        unplanned.steady_calls as f64,
        Unit::Count,
    );
    report.metric(
        "trace_peak_reserved_bytes_unplanned",
        unplanned.peak_reserved as f64,
        Unit::Bytes,
    );
    report.metric("trace_pair_ns_unplanned", unplanned.pair_ns, Unit::Ns);

    let fixed = replay(&new_device(cuda, fixed_segments()), &steps, false);
    report.metric(
        "trace_peak_reserved_over_allocated_fixed_segments",
        fixed.ratio,
        Unit::Ratio,
    );
    report.metric(
        "trace_backend_calls_steady_fixed_segments",
        fixed.steady_calls as f64,
        Unit::Count,
    );
    report.metric(
        "trace_peak_reserved_bytes_fixed_segments",
        fixed.peak_reserved as f64,
        Unit::Bytes,
    );
    report.metric("trace_pair_ns_fixed_segments", fixed.pair_ns, Unit::Ns);
    let warm = replay(&new_device(cuda, fixed_segments()), &steps, true);
    report.metric(
        "trace_peak_reserved_over_allocated_warmup_fixed_segments",
        warm.ratio,
        Unit::Ratio,
    );
    report.metric(
        "trace_backend_calls_steady_warmup_fixed_segments",
        warm.steady_calls as f64,
        Unit::Count,
    );
    if !cuda {
        let split = replay(
            &new_device(false, fixed_segments().with_max_split_size(64 << 20)),
            &steps,
            false,
        );
        report.metric(
            "trace_peak_reserved_over_allocated_max_split_64mb_fixed_segments",
            split.ratio,
            Unit::Ratio,
        );
        report.metric(
            "trace_backend_calls_steady_max_split_64mb_fixed_segments",
            split.steady_calls as f64,
            Unit::Count,
        );
        // What the trace needs when memory is scarce: the smallest bounded device it runs on.
        let mut limited_capacity = None;
        for (name, config) in [
            ("trace_min_capacity_over_allocated", base_config()),
            (
                "trace_min_capacity_over_allocated_fixed_segments",
                fixed_segments(),
            ),
        ] {
            let most = base.peak_reserved.max(fixed.peak_reserved);
            match min_capacity(&steps, &config, base.peak_allocated, most) {
                Some(c) => {
                    report.metric(name, c as f64 / base.peak_allocated as f64, Unit::Ratio);
                    if config == base_config() {
                        limited_capacity = Some(c);
                    }
                }
                None => report.note(&format!("{name}: no capacity up to the unbounded peak")),
            }
        }
        // The same trace where frees must give memory back: the smallest device it runs on
        // (below what caching every shape takes), so the out-of-memory path unmaps free
        // granules and maps them again.
        if let Some(c) = limited_capacity {
            for (name, config) in [
                ("trace_backend_calls_limited", base_config()),
                (
                    "trace_backend_calls_limited_unplanned",
                    base_config().with_iteration_planning(false),
                ),
            ] {
                match Device::host_pool(HostBackend::with_capacity(c as usize), config) {
                    Ok(device) if runs_on(&device, &steps) => {
                        let limited = replay(&device, &steps, false);
                        report.metric(name, limited.steady_calls as f64, Unit::Count);
                    }
                    _ => report.note(&format!("{name}: the trace does not run on {c} bytes")),
                }
            }
            report.metric("trace_limited_capacity_bytes", c as f64, Unit::Bytes);
        }
    }

    if let Some(path) = args.value::<String>("html") {
        write_html(&path, cuda, &steps);
    }

    report.note(&format!(
        "Device: {}. Default settings: {} segments. Pairs: {} rounds of 256 sizes log-uniform in \
         512 B–4 MiB, median ns per alloc+free pair with default settings, on a device holding a \
         resident 4 MiB block through its pairs, as a model holds its weights while it \
         allocates activations (event trace off; `cached_pair_ns_empty_device`: the same pairs, \
         interleaved with them, on a device holding nothing else, where the allocator takes and \
         drops its reference to itself at every pair; `cached_pair_ns_recording`: the same \
         pairs, interleaved with them, on a device whose \
         4096-event trace records every alloc and free with its origin — source line and op — \
         and its label; \
         `_fixed_segments`: the same pairs with `expandable_segments:false`, interleaved with \
         the default ones: the expandable segment costs a pair nothing, since a pair is served \
         from cached blocks either way and a free never unmaps; `_2threads` swings from run to \
         run with the same build on a machine shared with other work, depending on whether both \
         threads get a core at once and contend for the allocator's lock, and so do the system \
         pair's times, the ratio to them much less). \
         `pair_loop_peak_reserved_bytes`: what the empty device reserved for its pair loop \
         (warm-up and rounds); `pair_loop_block_bytes`: one block of each distinct size the loop \
         asks for, added up — what a per-thread cache of freed blocks by size (#24's proposal) \
         would hold for every pair to be served from it. Trace: {} steps \
         of a BERT-base-shaped encoder, batch ∈ {{1,2,4,8}}, length 16–512, drop-at-last-use, \
         each step one iteration of a batch scope (as `#[batch_scope]` makes it); ratios and \
         counts from the allocator's statistics; backend calls include page maps and unmaps. \
         Headline rows: default settings, so iteration planning is on: each iteration is laid \
         out from the recording of a previous one with the same events (greedy by size over \
         the recorded lifetimes, live blocks as obstacles, sizes learned as the iteration goes; \
         `trace_requests_planned`/`_left_plan` count the large-pool requests placed by a plan \
         and those of planned iterations that fell back to best fit). Peak: {:.1} MiB reserved \
         (small-pool segments and 2 MiB page rounding included) for {:.1} MiB allocated: \
         {:.3}. `_unplanned`: `iteration_planning:false`, best fit as before, which places \
         without lookahead: {:.3}. Steady calls are 0 with and without \
         planning: pages are mapped only when no free block fits and unmapped only by \
         empty_cache or the out-of-memory path, never by a free. `trace_backend_calls_limited`: \
         the same replay on a host device of `trace_limited_capacity_bytes` (the smallest, in \
         2 MiB steps, the planned trace runs on: below what caching every shape takes), where \
         the out-of-memory path must unmap free granules and map them again; `_unplanned`: the \
         same with best fit. `_fixed_segments`: `expandable_segments:false` (PyTorch's \
         default; planning needs the expandable segment); `_warmup`: one max-size batch first; \
         `_max_split_64mb`: `max_split_size_mb:64`; `min_capacity`: smallest bounded host \
         device (2 MiB steps) the trace runs on. Why fixed segments miss: the attention scores \
         and probabilities of a longer batch need new segments while the pool still caches fully \
         free segments sized for earlier, shorter batches, and PyTorch's rules never release on \
         an unbounded device; after the warm-up the max-size batch itself needs more segments \
         of its size.",
        if cuda { "cuda:0" } else { "host" },
        if expandable_in_use {
            "expandable"
        } else {
            "fixed"
        },
        rounds,
        steps.len(),
        base.peak_reserved as f64 / MIB,
        base.peak_allocated as f64 / MIB,
        base.ratio,
        unplanned.ratio
    ));
    report.finish(&args);
}

/// Replays the first 40 steps with the trace on, each step labelled, and writes the HTML page.
fn write_html(path: &str, cuda: bool, steps: &[(usize, usize)]) {
    let device = new_device(cuda, base_config());
    memory::empty_cache(&device);
    memory::record_trace(&device, 1 << 16);
    for (i, &(b, t)) in steps.iter().take(40).enumerate() {
        let _label = vramguard::scope::tag(format!("step {i}: batch {b} × {t}"));
        forward_unbounded(&device, b, t);
    }
    let page = memory::html_report(&device, "alloc_bench: synthetic transformer trace");
    memory::record_trace(&device, 0);
    match std::fs::write(path, page) {
        Ok(()) => eprintln!("wrote {path}"),
        Err(e) => eprintln!("could not write {path}: {e}"),
    }
}

/// The driver's own allocation paths on the GPU of the benchmark's device.
struct GpuDriver {
    context: std::sync::Arc<cudarc::driver::CudaContext>,
}

impl GpuDriver {
    /// Raises the release threshold of the default pool, so `cuMemAllocAsync` is measured
    /// with its cache kept (as vramguard's).
    fn new(device: &Device) -> GpuDriver {
        let context = device.cuda_context().expect("a CUDA device").clone();
        let pool = vramguard::driver_pool::DriverPool::open(0).expect("the default memory pool");
        pool.set_release_threshold(vramguard::driver_pool::KEEP_ALL_CACHED)
            .expect("setting the pool's release threshold");
        GpuDriver { context }
    }

    /// `cuMemAllocAsync` + `cuMemFreeAsync` on the default stream: ns per pair, per round.
    fn async_pool_rounds(&self, sizes: &[usize], rounds: usize) -> Vec<f64> {
        use cudarc::driver::result;
        self.context.bind_to_thread().expect("binding the context");
        let stream = std::ptr::null_mut();
        (0..rounds)
            .map(|_| {
                let t = Instant::now();
                for &s in sizes {
                    // SAFETY: the context is current; the memory is freed at once, never used.
                    unsafe {
                        let ptr =
                            result::malloc_async(stream, black_box(s)).expect("cuMemAllocAsync");
                        result::free_async(ptr, stream).expect("cuMemFreeAsync");
                    }
                }
                let ns = t.elapsed().as_nanos() as f64 / sizes.len() as f64;
                self.context.synchronize().expect("synchronising");
                ns
            })
            .collect()
    }

    /// `cuMemAlloc` + `cuMemFree`: ns per pair, per round.
    fn raw_rounds(&self, sizes: &[usize], rounds: usize) -> Vec<f64> {
        use cudarc::driver::result;
        self.context.bind_to_thread().expect("binding the context");
        (0..rounds)
            .map(|_| {
                let t = Instant::now();
                for &s in sizes {
                    // SAFETY: the context is current; the memory is freed at once, never used.
                    unsafe {
                        let ptr = result::malloc_sync(black_box(s)).expect("cuMemAlloc");
                        result::free_sync(ptr).expect("cuMemFree");
                    }
                }
                t.elapsed().as_nanos() as f64 / sizes.len() as f64
            })
            .collect()
    }
}
