//! Measurements shared by the BERT programs: activation peaks above the bytes live before a
//! forward pass, the liveness lower bound, and the largest batch that fits a memory budget.

#![allow(dead_code)] // Each program uses a different subset.

use super::bert::{self, Batch, BertConfig, BertWeights, Result};
use vramguard::tensor::LivenessRecorder;
use vramguard::{memory, Device, Tensor, TensorError};

/// Which forward pass to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// No attribute, grad recording on (the caller's default).
    Grad,
    /// `#[inference(drops = false)]`: the no-grad guard only.
    GuardOnly,
    /// `#[inference]`: guard and drops at last use.
    Inference,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Grad => "grad on, no attribute",
            Variant::GuardOnly => "no-grad guard only",
            Variant::Inference => "#[inference]",
        }
    }
}

/// Runs one forward pass of `variant`.
pub fn forward(variant: Variant, weights: &BertWeights, batch: &Batch) -> Result<Tensor> {
    match variant {
        Variant::Grad => bert::plain::Bert(weights).forward(batch),
        Variant::GuardOnly => bert::guard_only::Bert(weights).forward(batch),
        Variant::Inference => bert::inference::Bert(weights).forward(batch),
    }
}

/// Peak allocated bytes of `run` above the bytes allocated before it (exact, from the
/// allocator's statistics), and its output.
pub fn peak_above_baseline<T>(
    device: &Device,
    run: impl FnOnce() -> Result<T>,
) -> Result<(u64, T)> {
    let before = memory::stats(device).allocated_bytes;
    memory::reset_peak_stats(device);
    let out = run()?;
    Ok((memory::stats(device).peak_allocated_bytes - before, out))
}

/// Activation peak of one forward pass of `variant`.
pub fn activation_peak(
    variant: Variant,
    weights: &BertWeights,
    batch: &Batch,
    device: &Device,
) -> Result<u64> {
    let (peak, output) = peak_above_baseline(device, || forward(variant, weights, batch))?;
    drop(output);
    Ok(peak)
}

/// The peak if every tensor of the forward pass died at its last use (same ops, no grad).
pub fn liveness_bound(weights: &BertWeights, batch: &Batch) -> Result<u64> {
    let _no_grad = vramguard::NoGradGuard::new();
    let recorder = LivenessRecorder::start();
    let output = bert::plain::Bert(weights).forward(batch)?;
    let bound = recorder.finish();
    drop(output);
    Ok(bound.peak_bytes)
}

/// Whether a forward pass of `variant` at `batch_size` fits on `device` (whose capacity is the
/// budget, weights included). Out-of-memory is the only failure that means "does not fit".
pub fn fits(
    variant: Variant,
    weights: &BertWeights,
    batch_size: usize,
    seq: usize,
    device: &Device,
) -> Result<bool> {
    memory::empty_cache(device);
    let batch = match Batch::synthetic(batch_size, seq, weights.config.vocab, device) {
        Ok(b) => b,
        Err(TensorError::OutOfMemory(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    let fitted = match forward(variant, weights, &batch) {
        Ok(_) => true,
        Err(TensorError::OutOfMemory(_)) => false,
        Err(e) => return Err(e),
    };
    drop(batch);
    memory::empty_cache(device);
    Ok(fitted)
}

/// The largest batch size whose forward pass fits (doubling, then bisection), with progress
/// printed to stderr. Returns 0 when even one sequence does not fit.
pub fn max_batch(
    variant: Variant,
    weights: &BertWeights,
    seq: usize,
    device: &Device,
    cap: usize,
) -> Result<usize> {
    let probe = |b: usize| -> Result<bool> {
        let ok = fits(variant, weights, b, seq, device)?;
        eprintln!(
            "  [{}] batch {b:>4}: {}",
            variant.name(),
            if ok { "fits" } else { "out of memory" }
        );
        Ok(ok)
    };
    let (mut good, mut bad) = (0usize, None::<usize>);
    let mut b = 1;
    while b <= cap {
        if probe(b)? {
            good = b;
            b *= 2;
        } else {
            bad = Some(b);
            break;
        }
    }
    let Some(mut bad) = bad else { return Ok(good) };
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if probe(mid)? {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Ok(good)
}

/// Loads weights for `config` onto `device`.
pub fn load(config: BertConfig, device: &Device) -> Result<BertWeights> {
    BertWeights::new(config, 42, true, device)
}

/// MiB, for tables.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
