//! Caching allocator benchmark (`bench` = `alloc`).
//!
//! ```sh
//! cargo run --release --example alloc_bench [-- --json] [--quick] [--write] [--device cuda]
//!                                             [--html timeline.html]
//! ```
//!
//! `--html PATH` also writes the allocator's HTML page (timeline by step, segment map) for the
//! first 40 steps of the trace.
//!
//! Metrics:
//!
//! - `cached_pair_ns`: median ns per `Device::allocate` + drop pair served from the cache, over
//!   rounds of 256 sizes drawn log-uniformly from 512 B to 4 MiB (the cache is warmed with one
//!   pass first); `system_pair_ns`: the same sizes through the system allocator
//!   (`std::alloc::alloc`/`dealloc`, 256-byte alignment), in the same run. Target: cached ≤ 2×
//!   system. With `--device cuda` there is also `driver_pair_ns` (`cuMemAlloc`+`cuMemFree`).
//! - `cached_pair_ns_2threads`: the same loop on two threads sharing one allocator (ns per pair
//!   as each thread sees it, median over rounds and threads).
//! - `trace_peak_reserved_over_allocated` and `trace_backend_calls_steady`: replay of a
//!   synthetic variable-length transformer inference trace on a fresh allocator with default
//!   settings — peak reserved / peak allocated over the whole trace (target ≤ 1.15), and backend
//!   segment calls (allocs + frees) in the second half of the trace (target 0). The same trace
//!   is also replayed after a warm-up (one max-size batch first, the article's advice), with
//!   `expandable_segments:true`, and (host only) with `max_split_size_mb:64`, as extra rows.
//! - `trace_min_capacity_over_allocated` (host only; `_expandable` too): the smallest capacity,
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

#[path = "../benches/support/report.rs"]
mod report;

use report::{Args, Report, Unit};
use std::hint::black_box;
use std::time::Instant;
use vramguard::alloc::{AllocatorConfig, HostBackend};
use vramguard::memory::OutOfMemory;
use vramguard::{memory, Device};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

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

fn system_rounds(sizes: &[usize], rounds: usize) -> Vec<f64> {
    let layouts: Vec<std::alloc::Layout> = sizes
        .iter()
        .map(|&s| std::alloc::Layout::from_size_align(s, 256).expect("valid layout"))
        .collect();
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

/// One step of the synthetic trace: (batch, sequence length).
fn trace_steps(steps: usize) -> Vec<(usize, usize)> {
    let mut rng = Rng(0x7a11_0c47_0bad_cafe);
    (0..steps)
        .map(|_| {
            let b = [1, 2, 4, 8][(rng.next() % 4) as usize];
            let t = 16 + (rng.next() % 497) as usize;
            (b, t)
        })
        .collect()
}

const LAYERS: usize = 12;
const D: usize = 768;
const HEADS: usize = 12;
const FFN: usize = 4 * D;
const F32: usize = 4;

/// Runs one forward pass of the trace's model as allocations.
fn forward(device: &Device, b: usize, t: usize) -> Result<(), OutOfMemory> {
    let alloc = |elems: usize| device.allocate(elems * F32);
    let mut x = alloc(b * t * D)?;
    for _ in 0..LAYERS {
        let qkv = alloc(b * t * 3 * D)?;
        let scores = alloc(b * HEADS * t * t)?;
        let probs = alloc(b * HEADS * t * t)?;
        drop(scores);
        let ctx = alloc(b * t * D)?;
        drop((probs, qkv));
        let proj = alloc(b * t * D)?;
        drop(ctx);
        let x1 = alloc(b * t * D)?;
        drop((proj, x));
        let h = alloc(b * t * FFN)?;
        let g = alloc(b * t * FFN)?;
        drop(h);
        let out = alloc(b * t * D)?;
        drop(g);
        x = alloc(b * t * D)?;
        drop((out, x1));
    }
    let pooled = alloc(b * D)?;
    drop(x);
    drop(pooled);
    Ok(())
}

/// The trace on an unbounded device: every allocation must succeed.
fn forward_unbounded(device: &Device, b: usize, t: usize) {
    if let Err(e) = forward(device, b, t) {
        eprintln!("trace allocation failed: {e}");
        std::process::exit(1)
    }
}

/// The smallest capacity, in 2 MiB steps from `from` up to `to`, of a host device on which the
/// whole trace runs with `config` (out-of-memory path included: cached segments are released
/// and requests retried when the device refuses). `None` if none up to `to` does.
fn min_capacity(
    steps: &[(usize, usize)],
    config: &AllocatorConfig,
    from: u64,
    to: u64,
) -> Option<u64> {
    const STEP: u64 = 2 << 20;
    let mut capacity = from.next_multiple_of(STEP);
    while capacity <= to {
        let device = Device::host_pool(
            HostBackend::with_capacity(capacity as usize),
            config.clone(),
        );
        if let Ok(device) = device {
            if steps.iter().all(|&(b, t)| forward(&device, b, t).is_ok()) {
                return Some(capacity);
            }
        }
        capacity += STEP;
    }
    None
}

struct TraceResult {
    ratio: f64,
    steady_calls: u64,
    peak_allocated: u64,
    peak_reserved: u64,
}

fn replay(device: &Device, steps: &[(usize, usize)], warmup: bool) -> TraceResult {
    memory::empty_cache(device);
    memory::reset_peak_stats(device);
    if warmup {
        let (b, t) = steps
            .iter()
            .fold((0, 0), |m, &(b, t)| (m.0.max(b), m.1.max(t)));
        forward_unbounded(device, b, t);
    }
    let half = steps.len() / 2;
    for &(b, t) in &steps[..half] {
        forward_unbounded(device, b, t);
    }
    let mid = memory::stats(device);
    for &(b, t) in &steps[half..] {
        forward_unbounded(device, b, t);
    }
    let end = memory::stats(device);
    TraceResult {
        ratio: end.peak_reserved_bytes as f64 / end.peak_allocated_bytes as f64,
        steady_calls: (end.backend_allocs - mid.backend_allocs)
            + (end.backend_frees - mid.backend_frees),
        peak_allocated: end.peak_allocated_bytes,
        peak_reserved: end.peak_reserved_bytes,
    }
}

fn new_device(cuda: bool, config: AllocatorConfig) -> Device {
    if cuda {
        // The process-wide GPU device (configured by VRAMGUARD_ALLOC_CONF); replays start from
        // an emptied cache and reset peaks.
        return Device::cuda(0).unwrap_or_else(|e| {
            eprintln!("--device cuda: {e}");
            std::process::exit(2)
        });
    }
    Device::host_with_config(config).unwrap_or_else(|e| {
        eprintln!("allocator config: {e}");
        std::process::exit(2)
    })
}

fn main() {
    let args = Args::parse();
    let cuda = args.value::<String>("device").is_some_and(|d| d == "cuda");
    let rounds = if args.quick { 40 } else { 400 };
    let steps = trace_steps(if args.quick { 100 } else { 400 });
    let sizes = mixed_sizes();
    let mut report = Report::new("alloc");

    // Same run, side by side: cached pairs and system pairs, interleaved in blocks.
    let device = new_device(cuda, AllocatorConfig::default());
    let (mut cached, mut system) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        cached.extend(cached_rounds(&device, &sizes, rounds / 4));
        system.extend(system_rounds(&sizes, rounds / 4));
    }
    let (cached, system) = (median(cached), median(system));
    report.metric_with_target(
        "cached_pair_ns",
        cached,
        Unit::Ns,
        "≤ 2 × system_pair_ns",
        cached <= 2.0 * system,
    );
    report.metric("system_pair_ns", system, Unit::Ns);

    let traced = if cuda {
        None
    } else {
        let d = new_device(false, AllocatorConfig::default().with_trace_capacity(4096));
        Some(median(cached_rounds(&d, &sizes, rounds)))
    };
    if let Some(t) = traced {
        report.metric("cached_pair_ns_trace_on", t, Unit::Ns);
    }

    let two = {
        let per_thread: Vec<Vec<f64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let (device, sizes) = (device.clone(), &sizes);
                    s.spawn(move || cached_rounds(&device, sizes, rounds))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("benchmark thread"))
                .collect()
        });
        median(per_thread.concat())
    };
    report.metric("cached_pair_ns_2threads", two, Unit::Ns);

    if cuda {
        let ns = driver_pair_ns(&sizes, rounds);
        report.metric("driver_pair_ns", ns, Unit::Ns);
    }

    let base = replay(&new_device(cuda, AllocatorConfig::default()), &steps, false);
    report.metric_with_target(
        "trace_peak_reserved_over_allocated",
        base.ratio,
        Unit::Ratio,
        "≤ 1.15",
        base.ratio <= 1.15,
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

    let warm = replay(&new_device(cuda, AllocatorConfig::default()), &steps, true);
    report.metric(
        "trace_peak_reserved_over_allocated_warmup",
        warm.ratio,
        Unit::Ratio,
    );
    report.metric(
        "trace_backend_calls_steady_warmup",
        warm.steady_calls as f64,
        Unit::Count,
    );
    let expandable_config = AllocatorConfig::default().with_expandable_segments(true);
    let expandable_device = if cuda {
        Device::cuda_with_config(0, expandable_config).map_err(|e| e.to_string())
    } else {
        Device::host_with_config(expandable_config).map_err(|e| e.to_string())
    };
    match expandable_device {
        Ok(d) => {
            let expandable = replay(&d, &steps, false);
            report.metric(
                "trace_peak_reserved_over_allocated_expandable",
                expandable.ratio,
                Unit::Ratio,
            );
            report.metric(
                "trace_backend_calls_steady_expandable",
                expandable.steady_calls as f64,
                Unit::Count,
            );
        }
        Err(e) => report.note(&format!("Expandable segments unavailable: {e}")),
    }
    if !cuda {
        let split = replay(
            &new_device(
                false,
                AllocatorConfig::default().with_max_split_size(64 << 20),
            ),
            &steps,
            false,
        );
        report.metric(
            "trace_peak_reserved_over_allocated_max_split_64mb",
            split.ratio,
            Unit::Ratio,
        );
        report.metric(
            "trace_backend_calls_steady_max_split_64mb",
            split.steady_calls as f64,
            Unit::Count,
        );
        // What the trace needs when memory is scarce: the smallest bounded device it runs on.
        for (name, config) in [
            (
                "trace_min_capacity_over_allocated",
                AllocatorConfig::default(),
            ),
            (
                "trace_min_capacity_over_allocated_expandable",
                AllocatorConfig::default().with_expandable_segments(true),
            ),
        ] {
            match min_capacity(&steps, &config, base.peak_allocated, base.peak_reserved) {
                Some(c) => report.metric(name, c as f64 / base.peak_allocated as f64, Unit::Ratio),
                None => report.note(&format!("{name}: no capacity up to the unbounded peak")),
            }
        }
    }

    if let Some(path) = args.value::<String>("html") {
        write_html(&path, cuda, &steps);
    }

    report.note(&format!(
        "Device: {}. Pairs: {} rounds of 256 sizes log-uniform in 512 B–4 MiB, median ns per \
         alloc+free pair with default settings (event trace off; `cached_pair_ns_trace_on`: a \
         4096-event trace recording every alloc and free; `_2threads` is bimodal between runs \
         on this 2-core machine, about 90 ns or 500–580 ns with the same build, most likely \
         depending on whether both threads get a core at once and contend for the allocator's \
         lock). Trace: {} steps of a BERT-base-shaped \
         encoder, batch ∈ {{1,2,4,8}}, length 16–512, drop-at-last-use; ratios and counts from \
         the allocator's statistics. `_warmup`: one max-size batch first; `_expandable`: \
         `expandable_segments:true`; `_max_split_64mb`: `max_split_size_mb:64`; \
         `min_capacity`: smallest bounded host device (2 MiB steps) the trace runs on. \
         Why the default misses ≤ 1.15 (host, full run, from a snapshot at the reserved peak): \
         the peak is step 20, the first 8 × 509 batch, where scores and probs (94.9 MiB each) \
         need new 96 MiB segments while the pool still caches 168 MiB of fully free segments \
         sized for earlier, shorter batches (76, 32 and 3 × 20 MiB) that cannot serve them, and \
         the live qkv (35.8 MiB) and x (11.9 MiB) sit in a 76 and an 18 MiB segment left by \
         earlier shapes. The rules are PyTorch's (20 MiB segments under 10 MiB, exact 2 MiB-rounded \
         ones above, cache released only when the device refuses), so an unbounded device never \
         releases. Tried and not adopted: releasing fully free large segments before growing \
         gives 1.280 with 0 steady calls (not ≤ 1.15: what remains is placement without \
         lookahead), but adds backend frees outside the out-of-memory path (synchronising on \
         CUDA) and, with `max_split_size_mb:64`, 872 steady calls. Under pressure the default \
         needs 1.22 × the peak allocated bytes (`min_capacity`). The warm-up row is 1.313 because \
         the max-size batch itself needs a third 96 MiB segment (x drifts into the qkv segment \
         between layers) and short batches later add small-pool segments; bucketing lengths to \
         64/128/256/512 with a warm-up of all 16 (batch, bucket) shapes makes every backend \
         call happen in the warm-up but still reserves 340 MiB (1.417 × the padded peak). \
         Only expandable segments get below 1.15 on this trace.",
        if cuda { "cuda:0" } else { "host" },
        rounds,
        steps.len()
    ));
    report.finish(&args);
}

/// Replays the first 40 steps with the trace on, each step labelled, and writes the HTML page.
fn write_html(path: &str, cuda: bool, steps: &[(usize, usize)]) {
    let device = new_device(cuda, AllocatorConfig::default());
    memory::empty_cache(&device);
    memory::record_trace(&device, 1 << 16);
    for (i, &(b, t)) in steps.iter().take(40).enumerate() {
        let _label = vramguard::alloc::TraceLabelGuard::new(&format!("step {i}: batch {b} × {t}"));
        forward_unbounded(&device, b, t);
    }
    let page = memory::html_report(&device, "alloc_bench: synthetic transformer trace");
    memory::record_trace(&device, 0);
    match std::fs::write(path, page) {
        Ok(()) => eprintln!("wrote {path}"),
        Err(e) => eprintln!("could not write {path}: {e}"),
    }
}

/// `cuMemAlloc` + `cuMemFree` per pair, through the CUDA backend directly.
fn driver_pair_ns(sizes: &[usize], rounds: usize) -> f64 {
    use vramguard::alloc::cuda::CudaBackend;
    use vramguard::alloc::Backend;
    let backend = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("--device cuda: {e}");
            std::process::exit(2)
        }
    };
    let rounds = rounds.clamp(1, 20);
    let per_round: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for &s in sizes {
                let addr = backend.alloc_segment(s).expect("cuMemAlloc");
                // SAFETY: just allocated with this size, never used.
                unsafe { backend.free_segment(addr, s) };
            }
            t.elapsed().as_nanos() as f64 / sizes.len() as f64
        })
        .collect();
    median(per_round)
}
