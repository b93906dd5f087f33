//! Tensor benchmark: a BERT-base-shaped encoder layer forward and a 1024³ matmul, against the
//! GEMM crate called directly in the same run.
//!
//! `cargo run --release --example tensor_bench [-- --json] [--quick] [--write]`

// The shared file is owned elsewhere; leave its formatting to its owner.
#[path = "common/devices.rs"]
mod devices;
#[path = "../benches/support/report.rs"]
mod report;

use report::{Args, Report, Unit};
use std::time::Instant;
use vramguard::memory::{reset_peak_stats, stats};
use vramguard::nn::{EncoderLayer, Module};
use vramguard::{no_grad, Tensor};

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let device = devices::isolated_host()?;
    let mut report = Report::new("tensor");

    // ----- 1024³ matmul: ours vs matrixmultiply::sgemm on the same input buffers -----
    let n = 1024;
    let reps = if args.quick { 3 } else { 15 };
    let a = Tensor::randn(&[n, n], 0.0, 1.0, 1, &device)?;
    let b = Tensor::randn(&[n, n], 0.0, 1.0, 2, &device)?;
    let mut direct_out = vec![0.0f32; n * n];
    let (mut ours, mut direct) = (Vec::new(), Vec::new());
    let _ = no_grad(|| a.matmul(&b))?; // warm-up
    for _ in 0..reps {
        // Interleaved, so both sides see the same machine state.
        let start = Instant::now();
        let c = no_grad(|| a.matmul(&b))?;
        ours.push(start.elapsed().as_secs_f64());
        drop(c);
        let start = Instant::now();
        a.with_host_slice(|ad| {
            b.with_host_slice(|bd| {
                // SAFETY: ad and bd hold n×n row-major f32s; direct_out holds n×n and does not
                // alias them.
                unsafe {
                    matrixmultiply::sgemm(
                        n,
                        n,
                        n,
                        1.0,
                        ad.as_ptr(),
                        n as isize,
                        1,
                        bd.as_ptr(),
                        n as isize,
                        1,
                        0.0,
                        direct_out.as_mut_ptr(),
                        n as isize,
                        1,
                    )
                }
            })
        })??;
        direct.push(start.elapsed().as_secs_f64());
    }
    let (ours, direct) = (median(ours), median(direct));
    let gflops = 2.0 * (n as f64).powi(3) / ours / 1e9;
    let ratio = ours / direct;

    // ----- BERT-base encoder layer forward under no_grad -----
    let (batch, seq, hidden, heads, ffn) = if args.quick {
        (2, 128, 768, 12, 3072)
    } else {
        (8, 128, 768, 12, 3072)
    };
    let layer = EncoderLayer::new(hidden, heads, ffn, 3, &device)?;
    let x = Tensor::randn(&[batch, seq, hidden], 0.0, 1.0, 4, &device)?;
    let _ = no_grad(|| layer.forward(&x))?; // warm-up
    let base = stats(&device).allocated_bytes;
    reset_peak_stats(&device);
    let layer_reps = if args.quick { 1 } else { 5 };
    let mut times = Vec::new();
    for _ in 0..layer_reps {
        let start = Instant::now();
        let y = no_grad(|| layer.forward(&x))?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        drop(y);
    }
    let layer_ms = median(times);
    let peak_no_grad = stats(&device).peak_allocated_bytes - base;
    reset_peak_stats(&device);
    let y = layer.forward(&x)?;
    let held_with_grad = stats(&device).allocated_bytes - base;
    let peak_with_grad = stats(&device).peak_allocated_bytes - base;
    drop(y);

    report.metric("encoder_layer_ms", layer_ms, Unit::Ms);
    report.metric("matmul_gflops", gflops, Unit::Gflops);
    report.metric_with_target(
        "matmul_over_gemm",
        ratio,
        Unit::Ratio,
        "≤ 1.2",
        ratio <= 1.2,
    );
    report.metric("matmul_ms", ours * 1e3, Unit::Ms);
    report.metric("gemm_direct_ms", direct * 1e3, Unit::Ms);
    report.metric(
        "encoder_layer_peak_no_grad_bytes",
        peak_no_grad as f64,
        Unit::Bytes,
    );
    report.metric(
        "encoder_layer_peak_grad_bytes",
        peak_with_grad as f64,
        Unit::Bytes,
    );
    report.metric(
        "encoder_layer_held_by_graph_bytes",
        held_with_grad as f64,
        Unit::Bytes,
    );
    report.note(&format!(
        "Encoder layer: BERT-base shape (hidden {hidden}, {heads} heads, FFN {ffn}), batch {batch}, \
         sequence {seq}, post-norm, GELU; median of {layer_reps} forwards under no_grad, host \
         backend, single-threaded matrixmultiply. Matmul: {n}³ f32, median of {reps} interleaved \
         runs; `matmul_over_gemm` = our `Tensor::matmul` (allocation included) / \
         `matrixmultiply::sgemm` called directly on the same input buffers. Peak bytes are \
         allocator statistics above the weights and input; `held_by_graph` is what a grad-on \
         forward leaves allocated (output + saved activations)."
    ));
    report.finish(&args);
    Ok(())
}
