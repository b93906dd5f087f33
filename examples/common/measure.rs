//! Measurements shared by the BERT programs: activation peaks above the bytes live before a
//! forward pass, the liveness lower bound, and the largest batch that fits a memory budget
//! (the library's finder, and doubling-then-bisection as the reference it is checked against).

#![allow(dead_code)] // Each program uses a different subset.

use super::bert::{self, Batch, BertConfig, BertWeights, Result};
use vramguard::tensor::PeakBoundRecorder;
use vramguard::{memory, Device, Tensor, TensorError};

/// Which forward pass to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// No attribute, grad recording on (the caller's default).
    Grad,
    /// `#[inference(drops = false)]`: the no-grad guard only.
    GuardOnly,
    /// `#[inference(inplace = false)]`: guard and drops at last use, every op out of place.
    Inference,
    /// `#[inference]`: guard, drops at last use, ops on a dying local in place.
    InferenceInPlace,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Grad => "grad on, no attribute",
            Variant::GuardOnly => "no-grad guard only",
            Variant::Inference => "#[inference(inplace = false)]",
            Variant::InferenceInPlace => "#[inference]",
        }
    }
}

/// Runs one forward pass of `variant`.
pub fn forward(variant: Variant, weights: &BertWeights, batch: &Batch) -> Result<Tensor> {
    match variant {
        Variant::Grad => bert::plain::Bert(weights).forward(batch),
        Variant::GuardOnly => bert::guard_only::Bert(weights).forward(batch),
        Variant::Inference => bert::inference::Bert(weights).forward(batch),
        Variant::InferenceInPlace => bert::inference_inplace::Bert(weights).forward(batch),
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
    let recorder = PeakBoundRecorder::start();
    let output = bert::plain::Bert(weights).forward(batch)?;
    let bound = recorder.finish();
    drop(output);
    Ok(bound.peak_bytes)
}

/// One forward pass of `variant` at `batch_size` on `device`, inputs included: what a
/// max-batch search runs. Out-of-memory comes back as `TensorError::OutOfMemory`.
pub fn run_batch(
    variant: Variant,
    weights: &BertWeights,
    batch_size: usize,
    seq: usize,
    device: &Device,
) -> Result<()> {
    let batch = Batch::synthetic(batch_size, seq, weights.config.vocab, device)?;
    drop(forward(variant, weights, &batch)?);
    Ok(())
}

/// The largest batch size whose forward pass fits in `budget` bytes of `device` (weights
/// included), from the library's finder (`memory::MaxBatchSearch`: two measured peaks, a
/// prediction, two confirmations), with one progress line per run on stderr.
pub fn find_max_batch(
    variant: Variant,
    weights: &BertWeights,
    seq: usize,
    device: &Device,
    budget: u64,
    cap: usize,
) -> std::result::Result<memory::MaxBatch, memory::MaxBatchError<TensorError>> {
    memory::MaxBatchSearch::new(budget)
        .limit(cap)
        .on_run(|run| eprintln!("  [{}] finder: {run}", variant.name()))
        .run(device, |b| run_batch(variant, weights, b, seq, device))
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
    let fitted = match run_batch(variant, weights, batch_size, seq, device) {
        Ok(()) => true,
        Err(TensorError::OutOfMemory(_)) => false,
        Err(e) => return Err(e),
    };
    memory::empty_cache(device);
    Ok(fitted)
}

/// The largest batch size whose forward pass fits, by doubling then bisection (the reference
/// the finder is checked against), with progress printed to stderr; returns it with the
/// number of forward passes it took. 0 when even one sequence does not fit.
pub fn max_batch_bisection(
    variant: Variant,
    weights: &BertWeights,
    seq: usize,
    device: &Device,
    cap: usize,
) -> Result<(usize, usize)> {
    let probe = |b: usize| -> Result<bool> {
        let ok = fits(variant, weights, b, seq, device)?;
        eprintln!(
            "  [{}] bisection: batch {b:>4}: {}",
            variant.name(),
            if ok { "fits" } else { "out of memory" }
        );
        Ok(ok)
    };
    crate::bisection::bisection(cap, probe)
}

/// Loads weights for `config` onto `device`.
pub fn load(config: BertConfig, device: &Device) -> Result<BertWeights> {
    BertWeights::new(config, 42, true, device)
}

/// MiB, for tables.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
