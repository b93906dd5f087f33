//! The synthetic trace `alloc_bench` replays: a BERT-base-sized encoder's forward pass as
//! allocations and frees, over variable (batch, sequence length) steps; its replay on a device
//! (each step one batch-scope iteration), the smallest capacity it runs in, and its export for
//! `scripts/torch-compare.py`.

#![allow(dead_code)] // Not every program takes every part.

use std::time::Instant;
use vramguard::alloc::{AllocatorConfig, HostBackend};
use vramguard::memory::OutOfMemory;
use vramguard::scope::BatchScope;
use vramguard::{memory, Device};

/// xorshift64*: deterministic, no dependency.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One step of the synthetic trace: (batch, sequence length).
pub fn trace_steps(steps: usize) -> Vec<(usize, usize)> {
    let mut rng = Rng(0x7a11_0c47_0bad_cafe);
    (0..steps)
        .map(|_| {
            let b = [1, 2, 4, 8][(rng.next() % 4) as usize];
            let t = 16 + (rng.next() % 497) as usize;
            (b, t)
        })
        .collect()
}

pub const LAYERS: usize = 12;
pub const D: usize = 768;
pub const HEADS: usize = 12;
pub const FFN: usize = 4 * D;
pub const F32: usize = 4;

/// Runs one forward pass of the trace's model as allocations.
pub fn forward(device: &Device, b: usize, t: usize) -> Result<(), OutOfMemory> {
    forward_with(|bytes| device.allocate(bytes), b, t)
}

/// One forward pass as allocations from `allocate` (bytes in, a block out; dropping the block
/// frees it): the device's, or the trace exporter's recorder.
pub fn forward_with<B>(
    allocate: impl Fn(usize) -> Result<B, OutOfMemory>,
    b: usize,
    t: usize,
) -> Result<(), OutOfMemory> {
    let alloc = |elems: usize| allocate(elems * F32);
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
pub fn forward_unbounded(device: &Device, b: usize, t: usize) {
    if let Err(e) = forward(device, b, t) {
        eprintln!("trace allocation failed: {e}");
        std::process::exit(1)
    }
}

/// The smallest capacity, in 2 MiB steps from `from` up to `to`, of a host device on which the
/// whole trace runs with `config` (out-of-memory path included: cached segments are released
/// and requests retried when the device refuses). `None` if none up to `to` does.
pub fn min_capacity(
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
            let runs = steps.iter().all(|&(b, t)| {
                let _iteration = BatchScope::enter("alloc_bench trace");
                forward(&device, b, t).is_ok()
            });
            if runs {
                return Some(capacity);
            }
        }
        capacity += STEP;
    }
    None
}

/// Whether every step runs on `device` (a fresh bounded one), each in a batch scope.
pub fn runs_on(device: &Device, steps: &[(usize, usize)]) -> bool {
    let ok = steps.iter().all(|&(b, t)| {
        let _iteration = BatchScope::enter("alloc_bench trace (probe)");
        forward(device, b, t).is_ok()
    });
    memory::empty_cache(device);
    ok
}

pub struct TraceResult {
    pub ratio: f64,
    pub steady_calls: u64,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    /// Wall time of the replay over its alloc+free pairs.
    pub pair_ns: f64,
}

pub fn replay(device: &Device, steps: &[(usize, usize)], warmup: bool) -> TraceResult {
    memory::empty_cache(device);
    memory::reset_peak_stats(device);
    if warmup {
        let (b, t) = steps
            .iter()
            .fold((0, 0), |m, &(b, t)| (m.0.max(b), m.1.max(t)));
        forward_unbounded(device, b, t);
    }
    // Each step is one iteration of a batch scope, as `#[batch_scope]` makes it.
    let step = |b: usize, t: usize| {
        let _iteration = BatchScope::enter("alloc_bench trace");
        forward_unbounded(device, b, t);
    };
    let half = steps.len() / 2;
    let start = memory::stats(device);
    let clock = Instant::now();
    for &(b, t) in &steps[..half] {
        step(b, t);
    }
    let mid = memory::stats(device);
    for &(b, t) in &steps[half..] {
        step(b, t);
    }
    let elapsed = clock.elapsed().as_nanos() as f64;
    let end = memory::stats(device);
    TraceResult {
        ratio: end.peak_reserved_bytes as f64 / end.peak_allocated_bytes as f64,
        steady_calls: (end.backend_allocs - mid.backend_allocs)
            + (end.backend_frees - mid.backend_frees),
        peak_allocated: end.peak_allocated_bytes,
        peak_reserved: end.peak_reserved_bytes,
        pair_ns: elapsed / (end.num_allocs - start.num_allocs).max(1) as f64,
    }
}

/// A block of the trace exporter: its number, and the log its free goes to.
pub struct Recorded<'a> {
    id: i64,
    log: &'a std::cell::RefCell<Vec<i64>>,
}

impl Drop for Recorded<'_> {
    fn drop(&mut self) {
        self.log.borrow_mut().push(-(self.id + 1));
    }
}

/// Writes the trace's allocations and frees, in order, as JSON for scripts/torch-compare.py:
/// `events` holds a positive number of bytes for an allocation (numbered 0, 1, ... in order),
/// `-(i + 1)` for the free of allocation `i`, and 0 at the end of each step.
pub fn export_trace(path: &str, steps: &[(usize, usize)]) -> std::io::Result<()> {
    let log = std::cell::RefCell::new(Vec::new());
    let next = std::cell::Cell::new(0i64);
    for &(b, t) in steps {
        let recorded = forward_with(
            |bytes| {
                let id = next.get();
                next.set(id + 1);
                log.borrow_mut().push(bytes as i64);
                Ok::<_, OutOfMemory>(Recorded { id, log: &log })
            },
            b,
            t,
        );
        if let Err(e) = recorded {
            return Err(std::io::Error::other(e.to_string()));
        }
        log.borrow_mut().push(0);
    }
    let events = log.into_inner();
    let (mut live, mut peak) = (0i64, 0i64);
    let mut sizes = Vec::new();
    for &e in &events {
        if e > 0 {
            sizes.push(e);
            live += e;
            peak = peak.max(live);
        } else if e < 0 {
            live -= sizes[(-e - 1) as usize];
        }
    }
    let join = |v: &mut dyn Iterator<Item = String>| v.collect::<Vec<_>>().join(",");
    let text = format!(
        "{{\"format\":\"vramguard-alloc-trace\",\"version\":1,\
         \"source\":\"examples/alloc_bench.rs: the replayed trace\",\
         \"model\":{{\"layers\":{LAYERS},\"hidden\":{D},\"heads\":{HEADS},\"ffn\":{FFN},\"dtype\":\"f32\"}},\
         \"steps\":{},\"allocs\":{},\"peak_live_bytes\":{peak},\"shapes\":[{}],\"events\":[{}]}}\n",
        steps.len(),
        sizes.len(),
        join(&mut steps.iter().map(|(b, t)| format!("[{b},{t}]"))),
        join(&mut events.iter().map(|e| e.to_string())),
    );
    std::fs::write(path, text)
}
