//! `inference` benchmark: what `#[inference]` saves on a BERT-style encoder written in plain,
//! idiomatic style (see `examples/common/bert.rs`).
//!
//! What is measured changed once, for issue #21's second round (in place at last use): the
//! encoder's layers now take their input by value (`self.layer(layer, hidden_states, …)`)
//! instead of borrowing it (`&hidden_states`), in every variant, so that the input may die at
//! its last use inside the layer. The liveness bound is recorded from that same by-value code;
//! it counts each tensor's last use, not who owns it, so it is the borrowed code's bound too.
//! The figures before the change are in `docs/perf-notes.md` ("In place at last use: the
//! encoder's input borrowed, then by value").
//!
//! Peaks are exact allocator statistics above the bytes live before the forward pass (weights
//! and inputs excluded), so they are activation memory:
//! - `peak_bytes_grad`: grad on, no attribute (the graph keeps activations alive);
//! - `peak_bytes_nograd`: `#[inference(drops = false)]`, the no-grad guard alone;
//! - `peak_bytes_inference`: `#[inference(inplace = false)]`, guard plus drops at last use;
//! - `peak_bytes_liveness_bound`: the same ops if every tensor died at its last use;
//! - `peak_bytes_inference_inplace`: `#[inference]`, which also runs an op whose receiver dies
//!   there in the receiver's buffer (`gelu`, `broadcast_add`, `softmax` in this encoder), so it
//!   goes below the liveness bound of the out-of-place code (`inplace_over_liveness_bound`).
//!
//! `max_batch_*` is the largest batch whose forward pass fits a host device of `--budget-mib`
//! capacity, weights included, by doubling then bisection (`max_batch_bisection_runs_*` forward
//! passes). `max_batch_finder_runs_*` are the forward passes the library's `memory::max_batch`
//! took on the same device, and `max_batch_finder_exact` is 1 when it found the bisection's
//! answer for both variants. `time_ratio_inference_over_nograd` is the median run time with
//! the attribute over the guard alone, interleaved in one run (`time_ratio_inplace_over_nograd`
//! the same for the in-place form); `max_batch_inference_inplace` the largest batch of the
//! in-place form by the same bisection.
//!
//! Flags: `--layers N` (12), `--seq N` (128), `--batch N` (8), `--budget-mib N` (768),
//! `--reps N` (5), `--quick` (2 layers, seq 64, batch 2, budget 256 MiB, 3 reps), plus the
//! shared `--json` and `--write`.
//!
//! `--device cuda[:N]`: the same figures on a GPU, in device bytes (report `inference_cuda`;
//! the budget is the GPU allocator's memory limit). Without a usable GPU it says so in one line
//! and exits 0.

#[path = "common/bert.rs"]
mod bert;
#[path = "common/bisection.rs"]
mod bisection;
#[path = "common/device_arg.rs"]
mod device_arg;
#[path = "common/devices.rs"]
mod devices;
#[path = "common/measure.rs"]
mod measure;
#[path = "../benches/support/report.rs"]
mod report;

use bert::{Batch, BertConfig};
use device_arg::{synchronize, DeviceArg};
use measure::{
    activation_peak, find_max_batch, liveness_bound, load, max_batch_bisection, mib, Variant,
};
use report::{Args, Report, Unit};
use std::time::Instant;
use vramguard::memory;

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("inference_bench failed: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let quick = args.quick;
    let layers = args.value("layers").unwrap_or(if quick { 2 } else { 12 });
    let seq = args.value("seq").unwrap_or(if quick { 64 } else { 128 });
    let batch_size = args.value("batch").unwrap_or(if quick { 2 } else { 8 });
    let budget_mib: usize = args
        .value("budget-mib")
        .unwrap_or(if quick { 256 } else { 768 });
    let reps: usize = args
        .value::<usize>("reps")
        .unwrap_or(if quick { 3 } else { 5 })
        .max(1);
    let config = BertConfig::base().with_layers(layers);

    eprintln!("BERT-style encoder: {layers} layers, hidden 768, 12 heads, FFN 3072, batch {batch_size}, seq {seq}");
    let device = match DeviceArg::parse(args.value("device"))? {
        DeviceArg::Host => devices::isolated_host()?,
        DeviceArg::Cuda(d) => d,
        DeviceArg::Unavailable(why) => {
            println!("{why}");
            return Ok(());
        }
    };
    let on_gpu = device.is_cuda();
    let backend = if on_gpu {
        format!("{device:?} through the CUDA backend (device bytes)")
    } else {
        "host backend".to_string()
    };
    let weights = load(config, &device)?;
    let weight_bytes = memory::stats(&device).allocated_bytes;
    let batch = Batch::synthetic(batch_size, seq, config.vocab, &device)?;

    eprintln!("measuring peaks ...");
    let peak_grad = activation_peak(Variant::Grad, &weights, &batch, &device)?;
    let peak_nograd = activation_peak(Variant::GuardOnly, &weights, &batch, &device)?;
    let peak_inference = activation_peak(Variant::Inference, &weights, &batch, &device)?;
    let peak_inplace = activation_peak(Variant::InferenceInPlace, &weights, &batch, &device)?;
    let bound = liveness_bound(&weights, &batch)?;

    // The transform must not change results: compare outputs bit for bit.
    let reference =
        vramguard::no_grad(|| measure::forward(Variant::Grad, &weights, &batch))?.to_vec()?;
    let transformed = measure::forward(Variant::Inference, &weights, &batch)?.to_vec()?;
    let identical = reference.len() == transformed.len()
        && reference
            .iter()
            .zip(&transformed)
            .all(|(a, b)| a.to_bits() == b.to_bits());
    let in_place = measure::forward(Variant::InferenceInPlace, &weights, &batch)?.to_vec()?;
    let identical_inplace = reference.len() == in_place.len()
        && reference
            .iter()
            .zip(&in_place)
            .all(|(a, b)| a.to_bits() == b.to_bits());

    eprintln!("timing {reps} interleaved forward passes of each variant ...");
    let (mut t_nograd, mut t_inference, mut t_inplace) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        for (variant, times) in [
            (Variant::GuardOnly, &mut t_nograd),
            (Variant::Inference, &mut t_inference),
            (Variant::InferenceInPlace, &mut t_inplace),
        ] {
            let start = Instant::now();
            let out = measure::forward(variant, &weights, &batch)?;
            synchronize(&device)?;
            times.push(start.elapsed().as_secs_f64());
            drop(out);
        }
    }
    let median_nograd = median(&mut t_nograd);
    let time_ratio = median(&mut t_inference) / median_nograd;
    let time_ratio_inplace = median(&mut t_inplace) / median_nograd;
    drop((weights, batch, device));

    eprintln!(
        "searching the largest batch in a {budget_mib} MiB budget (finder, then bisection) ..."
    );
    let budget = device_arg::budget_device(args.value("device"), on_gpu, budget_mib)?;
    let weights = load(config, &budget)?;
    let budget_bytes = (budget_mib << 20) as u64;
    let found_grad = find_max_batch(Variant::Grad, &weights, seq, &budget, budget_bytes, 4096)?;
    let found_inference = find_max_batch(
        Variant::Inference,
        &weights,
        seq,
        &budget,
        budget_bytes,
        4096,
    )?;
    eprintln!("  finder, grad on: {found_grad}");
    eprintln!("  finder, #[inference]: {found_inference}");
    let (max_grad, bisection_runs_grad) =
        max_batch_bisection(Variant::Grad, &weights, seq, &budget, 4096)?;
    let (max_inference, bisection_runs_inference) =
        max_batch_bisection(Variant::Inference, &weights, seq, &budget, 4096)?;
    let finder_exact = found_grad.batch == max_grad && found_inference.batch == max_inference;
    let (max_inplace, _) =
        max_batch_bisection(Variant::InferenceInPlace, &weights, seq, &budget, 4096)?;

    let mut r = Report::new(if on_gpu {
        "inference_cuda"
    } else {
        "inference"
    });
    if on_gpu {
        r.cargo_args("--example inference_bench");
    }
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    r.metric("peak_bytes_grad", peak_grad as f64, Unit::Bytes);
    r.metric("peak_bytes_nograd", peak_nograd as f64, Unit::Bytes);
    r.metric("peak_bytes_inference", peak_inference as f64, Unit::Bytes);
    r.metric("peak_bytes_liveness_bound", bound as f64, Unit::Bytes);
    r.metric_with_target(
        "inference_over_grad",
        ratio(peak_inference, peak_grad),
        Unit::Ratio,
        "≤ 0.5",
        ratio(peak_inference, peak_grad) <= 0.5,
    );
    r.metric_with_target(
        "inference_over_nograd",
        ratio(peak_inference, peak_nograd),
        Unit::Ratio,
        "≤ 0.7",
        ratio(peak_inference, peak_nograd) <= 0.7,
    );
    r.metric_with_target(
        "inference_over_liveness_bound",
        ratio(peak_inference, bound),
        Unit::Ratio,
        "≤ 1.15",
        ratio(peak_inference, bound) <= 1.15,
    );
    r.metric(
        "peak_bytes_inference_inplace",
        peak_inplace as f64,
        Unit::Bytes,
    );
    r.metric_with_target(
        "inplace_over_liveness_bound",
        ratio(peak_inplace, bound),
        Unit::Ratio,
        "≤ 0.75",
        ratio(peak_inplace, bound) <= 0.75,
    );
    r.metric("max_batch_grad", max_grad as f64, Unit::Batch);
    r.metric("max_batch_inference", max_inference as f64, Unit::Batch);
    r.metric(
        "max_batch_inference_inplace",
        max_inplace as f64,
        Unit::Batch,
    );
    r.metric_with_target(
        "max_batch_inference_over_grad",
        max_inference as f64 / max_grad.max(1) as f64,
        Unit::Ratio,
        "≥ 2",
        max_inference >= 2 * max_grad,
    );
    r.metric_with_target(
        "max_batch_finder_runs_grad",
        found_grad.run_count() as f64,
        Unit::Count,
        "≤ 4",
        found_grad.run_count() <= 4,
    );
    r.metric_with_target(
        "max_batch_finder_runs_inference",
        found_inference.run_count() as f64,
        Unit::Count,
        "≤ 4",
        found_inference.run_count() <= 4,
    );
    r.metric(
        "max_batch_bisection_runs_grad",
        bisection_runs_grad as f64,
        Unit::Count,
    );
    r.metric(
        "max_batch_bisection_runs_inference",
        bisection_runs_inference as f64,
        Unit::Count,
    );
    r.metric_with_target(
        "max_batch_finder_exact",
        f64::from(u8::from(finder_exact)),
        Unit::Count,
        "1",
        finder_exact,
    );
    r.metric_with_target(
        "time_ratio_inference_over_nograd",
        time_ratio,
        Unit::Ratio,
        "≤ 1.02",
        time_ratio <= 1.02,
    );
    r.metric_with_target(
        "time_ratio_inplace_over_nograd",
        time_ratio_inplace,
        Unit::Ratio,
        "≤ 1.02",
        time_ratio_inplace <= 1.02,
    );
    r.metric("weight_bytes", weight_bytes as f64, Unit::Bytes);
    r.metric(
        "outputs_bit_identical",
        f64::from(u8::from(identical)),
        Unit::Count,
    );
    r.metric(
        "outputs_bit_identical_inplace",
        f64::from(u8::from(identical_inplace)),
        Unit::Count,
    );
    r.note(&format!(
        "BERT-style encoder ({layers} layers, hidden 768, 12 heads, FFN 3072), batch {batch_size}, sequence {seq}, {backend}. \
         Peaks: allocator statistics above the weights ({:.1} MiB) and inputs. Max batch: {} of {budget_mib} MiB, weights included, \
         doubling then bisection; `max_batch_finder_*`: the library's `memory::max_batch` on the same device (two measured peaks, \
         a prediction, confirmations), `exact` = 1 when it found the bisection's answer for both variants. Times: median of {reps} interleaved forward passes. `outputs_bit_identical` = 1 when the \
         #[inference(inplace = false)] output equals the plain no-grad output bit for bit (`_inplace`: the #[inference] output). \
         The in-place rows: `#[inference]`, which runs `gelu`, `broadcast_add` and `softmax` on a dying local in its buffer; the \
         liveness bound is that of the out-of-place code. The encoder's layers take their input by value (since #21's second round; \
         they borrowed it before), in every variant and in the code the bound is recorded from.",
        mib(weight_bytes),
        if on_gpu { "a GPU allocator limited" } else { "host device" }
    ));
    r.finish(args);
    if !identical || !identical_inplace {
        return Err("an #[inference] output differs from the plain output".into());
    }
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
