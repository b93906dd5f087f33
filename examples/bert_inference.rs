//! The main example: BERT-style encoder inference with and without `#[inference]`
//! (no-grad for inference and freeing at last use, with exact numbers).
//!
//! ```sh
//! cargo run --release --example bert_inference
//! cargo run --release --example bert_inference -- --layers 12 --batch 8 --seq 128 --budget-mib 1024 --html timeline.html
//! cargo run --release --example bert_inference -- --save-weights bert.safetensors
//! cargo run --release --example bert_inference -- --weights bert.safetensors
//! ```
//!
//! It loads one set of weights and runs the same forward pass (written in plain candle style,
//! see `examples/common/bert.rs`) four ways: grad on without the attribute, under the no-grad
//! guard alone, under `#[inference(inplace = false)]` (every op out of place) and under
//! `#[inference]` (ops on a local at its last use in its buffer: `gelu`, `broadcast_add`,
//! `softmax`). Peaks are exact allocator statistics above the bytes live before the pass. Then
//! it finds the largest batch that fits a fixed memory budget, weights included, with grad on
//! and with both forms of the attribute, with
//! `memory::max_batch`'s search (two measured peaks, a prediction, two confirmations).
//! `--html FILE` writes the allocator's timeline of the four passes as one HTML page.
//! `--device cuda[:N]` runs it all on a GPU (peaks in device bytes; the budget is the GPU
//! allocator's memory limit); without a usable GPU it says so in one line and exits 0.
//! `--weights FILE` loads the weights from a safetensors file (names as in Hugging Face's BERT
//! checkpoints, `encoder.layer.0.attention.self.query.weight`, ...; the shapes must match
//! `--layers`), instead of the seeded random ones; `--save-weights FILE` writes them.

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

use bert::{Batch, BertConfig, BertWeights};
use device_arg::DeviceArg;
use measure::{activation_peak, find_max_batch, liveness_bound, load, mib, Variant};
use report::Args;
use vramguard::nn::Parameters;
use vramguard::{memory, Device};

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let layers: usize = args.value("layers").unwrap_or(4);
    let batch_size: usize = args.value("batch").unwrap_or(8);
    let seq: usize = args.value("seq").unwrap_or(128);
    let budget_mib: usize = args.value("budget-mib").unwrap_or(384);
    let html: Option<String> = args.value("html");
    let weights_file: Option<String> = args.value("weights");
    if layers == 0 || batch_size == 0 || seq == 0 || seq > 512 {
        return Err("--layers, --batch and --seq must be at least 1, and --seq at most 512".into());
    }

    let config = BertConfig::base().with_layers(layers);
    let (device, backend) = match DeviceArg::parse(args.value("device"))? {
        DeviceArg::Host => (devices::isolated_host()?, "host backend".to_string()),
        DeviceArg::Cuda(d) => {
            let name = format!("{d:?} through the CUDA backend, device bytes");
            (d, name)
        }
        DeviceArg::Unavailable(why) => {
            println!("{why}");
            return Ok(());
        }
    };
    if html.is_some() {
        memory::record_trace(&device, 200_000);
    }
    let weights = weights_on(config, &device, weights_file.as_deref())?;
    if let Some(path) = args.value::<String>("save-weights") {
        weights.save_safetensors(&path)?;
        println!("weights saved to {path}");
    }
    let weight_bytes = memory::stats(&device).allocated_bytes;
    let batch = Batch::synthetic(batch_size, seq, config.vocab, &device)?;

    println!(
        "BERT-style encoder: {layers} layers, hidden 768, 12 heads, FFN 3072; weights {:.1} MiB",
        mib(weight_bytes)
    );
    if let Some(path) = &weights_file {
        println!("weights loaded from {path}");
    }
    println!("batch {batch_size} × sequence {seq}, {backend}\n");
    println!("activation peak (exact allocator bytes above weights and inputs)");
    let mut peaks = Vec::new();
    for variant in [
        Variant::Grad,
        Variant::GuardOnly,
        Variant::Inference,
        Variant::InferenceInPlace,
    ] {
        let _label = vramguard::scope::tag(variant.name());
        peaks.push((
            variant,
            activation_peak(variant, &weights, &batch, &device)?,
        ));
    }
    let grad_peak = peaks[0].1;
    for (variant, peak) in &peaks {
        println!(
            "  {:<30} {:>10.2} MiB  {:>5.2}×",
            variant.name(),
            mib(*peak),
            *peak as f64 / grad_peak as f64
        );
    }
    let bound = liveness_bound(&weights, &batch)?;
    println!(
        "  {:<30} {:>10.2} MiB  {:>5.2}×",
        "liveness lower bound",
        mib(bound),
        bound as f64 / grad_peak as f64
    );

    let plain =
        vramguard::no_grad(|| measure::forward(Variant::Grad, &weights, &batch))?.to_vec()?;
    let mut identical = true;
    for variant in [Variant::Inference, Variant::InferenceInPlace] {
        let transformed = measure::forward(variant, &weights, &batch)?.to_vec()?;
        let same = plain.len() == transformed.len()
            && plain
                .iter()
                .zip(&transformed)
                .all(|(a, b)| a.to_bits() == b.to_bits());
        println!(
            "  outputs of {} and the plain forward are bit-identical: {}",
            variant.name(),
            if same { "yes" } else { "NO" }
        );
        identical &= same;
    }

    if let Some(path) = &html {
        std::fs::write(
            path,
            memory::html_report(
                &device,
                "bert_inference: grad on, guard only, #[inference] out of place and in place",
            ),
        )?;
        println!("  memory timeline written to {path}");
    }
    let device_is_cuda = device.is_cuda();
    drop((weights, batch, device));

    println!("\nlargest batch in a {budget_mib} MiB budget (weights included; progress on stderr)");
    let budget = device_arg::budget_device(args.value("device"), device_is_cuda, budget_mib)?;
    let weights = weights_on(config, &budget, weights_file.as_deref())?;
    let budget_bytes = (budget_mib << 20) as u64;
    let grad = find_max_batch(Variant::Grad, &weights, seq, &budget, budget_bytes, 1024)?;
    let inference = find_max_batch(
        Variant::Inference,
        &weights,
        seq,
        &budget,
        budget_bytes,
        1024,
    )?;
    let in_place = find_max_batch(
        Variant::InferenceInPlace,
        &weights,
        seq,
        &budget,
        budget_bytes,
        1024,
    )?;
    println!("  {:<30} {grad}", Variant::Grad.name());
    for (variant, found) in [
        (Variant::Inference, inference),
        (Variant::InferenceInPlace, in_place),
    ] {
        println!(
            "  {:<30} {found}: {:.1}× grad on",
            variant.name(),
            found.batch as f64 / grad.batch.max(1) as f64
        );
    }
    if !identical {
        return Err("an #[inference] output differs from the plain output".into());
    }
    Ok(())
}

/// The seeded weights for `config` on `device`, overwritten from `file` when given.
fn weights_on(
    config: BertConfig,
    device: &Device,
    file: Option<&str>,
) -> Result<BertWeights, Box<dyn std::error::Error>> {
    let weights = load(config, device)?;
    if let Some(path) = file {
        let loaded = weights.load_safetensors(path)?;
        if !loaded.unused.is_empty() {
            eprintln!(
                "note: {path} holds {} tensors this model does not use: {}",
                loaded.unused.len(),
                loaded.unused.join(", ")
            );
        }
    }
    Ok(weights)
}
