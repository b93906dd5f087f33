//! Tensor benchmark: a BERT-base-shaped encoder layer forward and a 1024³ matmul, against the
//! GEMM crate called directly in the same run.
//!
//! `cargo run --release --example tensor_bench [-- --json] [--quick] [--write] [--device cuda[:N]]`
//!
//! With `--device cuda` (report `tensor_cuda`): the same encoder layer on the GPU in device
//! bytes, and a 4096³ matmul through `Tensor::matmul` against cuBLAS called directly (cudarc's
//! `CudaBlas` on buffers of its own) in the same run: `cuda_matmul_op_over_cublas`. Without a
//! usable GPU it says so in one line and exits 0.

// The shared file is owned elsewhere; leave its formatting to its owner.
#[path = "common/device_arg.rs"]
mod device_arg;
#[path = "common/devices.rs"]
mod devices;
#[path = "../benches/support/report.rs"]
mod report;

use device_arg::{synchronize, DeviceArg};
use report::{Args, Report, Unit};
use std::time::Instant;
use vramguard::memory::{reset_peak_stats, stats};
use vramguard::nn::{EncoderLayer, Module};
use vramguard::{no_grad, Device, Tensor};

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    match DeviceArg::parse(args.value("device"))? {
        DeviceArg::Host => host(&args),
        DeviceArg::Cuda(device) => cuda(&args, &device),
        DeviceArg::Unavailable(why) => {
            println!("{why}");
            Ok(())
        }
    }
}

fn host(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
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
    report.finish(args);
    Ok(())
}

/// Encoder-layer peaks and times on the GPU (device bytes, kernels waited for), as on the host:
/// `(median ms, peak no-grad, peak with grad, held by the graph)`.
fn encoder_layer(
    args: &Args,
    device: &Device,
) -> Result<(f64, u64, u64, u64), Box<dyn std::error::Error>> {
    let (batch, seq, hidden, heads, ffn) = if args.quick {
        (2, 128, 768, 12, 3072)
    } else {
        (8, 128, 768, 12, 3072)
    };
    let layer = EncoderLayer::new(hidden, heads, ffn, 3, device)?;
    let x = Tensor::randn(&[batch, seq, hidden], 0.0, 1.0, 4, device)?;
    let _ = no_grad(|| layer.forward(&x))?; // warm-up (compiles the kernels once)
    synchronize(device)?;
    let base = stats(device).allocated_bytes;
    reset_peak_stats(device);
    let mut times = Vec::new();
    for _ in 0..if args.quick { 3 } else { 10 } {
        let start = Instant::now();
        let y = no_grad(|| layer.forward(&x))?;
        synchronize(device)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        drop(y);
    }
    let peak_no_grad = stats(device).peak_allocated_bytes - base;
    reset_peak_stats(device);
    let y = layer.forward(&x)?;
    let held = stats(device).allocated_bytes - base;
    let peak_grad = stats(device).peak_allocated_bytes - base;
    drop(y);
    Ok((median(times), peak_no_grad, peak_grad, held))
}

fn cuda(args: &Args, device: &Device) -> Result<(), Box<dyn std::error::Error>> {
    use cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N;
    use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
    use vramguard::alloc::cuda_backend::{library_present, CudaLibrary};
    let mut report = Report::new("tensor_cuda");
    report.cargo_args("--example tensor_bench");
    let context = device.cuda_context().ok_or("not a CUDA device")?;
    let stream = context.default_stream();
    // Probed first: cudarc panics otherwise.
    if !library_present(CudaLibrary::Cublas) {
        let why = "cuBLAS (libcublas.so or libcublas.so.12) cannot be loaded here";
        // A GPU run that must measure (scripts/gpu-check.sh) fails instead of passing empty.
        if std::env::var("VRAMGUARD_REQUIRE_GPU").is_ok_and(|v| v == "1") {
            return Err(format!("VRAMGUARD_REQUIRE_GPU=1 but {why}; nothing measured").into());
        }
        println!("--device cuda: {why}; nothing measured");
        return Ok(());
    }

    // ----- n³ matmul: Tensor::matmul vs cuBLAS on cudarc's own buffers, interleaved -----
    let n: usize = if args.quick { 2048 } else { 4096 };
    let reps = if args.quick { 5 } else { 20 };
    let a = Tensor::randn(&[n, n], 0.0, 1.0, 1, device)?;
    let b = Tensor::randn(&[n, n], 0.0, 1.0, 2, device)?;
    let blas = CudaBlas::new(stream.clone())?;
    let a_direct = stream.clone_htod(&a.to_vec()?)?;
    let b_direct = stream.clone_htod(&b.to_vec()?)?;
    let mut c_direct = stream.alloc_zeros::<f32>(n * n)?;
    let side = i32::try_from(n)?;
    // Row-major C = A·B as column-major Cᵀ = Bᵀ·Aᵀ, the same call the tensor op makes.
    let cfg = GemmConfig {
        transa: CUBLAS_OP_N,
        transb: CUBLAS_OP_N,
        m: side,
        n: side,
        k: side,
        alpha: 1.0f32,
        lda: side,
        ldb: side,
        beta: 0.0f32,
        ldc: side,
    };
    let direct_gemm =
        |c: &mut cudarc::driver::CudaSlice<f32>| -> Result<(), Box<dyn std::error::Error>> {
            // SAFETY: the three buffers hold n×n f32s each and c aliases neither input.
            unsafe { blas.gemm(cfg, &b_direct, &a_direct, c) }?;
            stream.synchronize()?;
            Ok(())
        };
    let _ = no_grad(|| a.matmul(&b))?; // warm-up, both sides
    direct_gemm(&mut c_direct)?;
    let (mut ours, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let start = Instant::now();
        let c = no_grad(|| a.matmul(&b))?;
        synchronize(device)?;
        ours.push(start.elapsed().as_secs_f64());
        drop(c);
        let start = Instant::now();
        direct_gemm(&mut c_direct)?;
        direct.push(start.elapsed().as_secs_f64());
    }
    let (ours, direct) = (median(ours), median(direct));
    let ratio = ours / direct;
    let (layer_ms, peak_no_grad, peak_grad, held) = encoder_layer(args, device)?;

    report.metric("encoder_layer_ms", layer_ms, Unit::Ms);
    report.metric(
        "matmul_gflops",
        2.0 * (n as f64).powi(3) / ours / 1e9,
        Unit::Gflops,
    );
    report.metric_with_target(
        "cuda_matmul_op_over_cublas",
        ratio,
        Unit::Ratio,
        "≤ 1.05",
        ratio <= 1.05,
    );
    report.metric("matmul_ms", ours * 1e3, Unit::Ms);
    report.metric("cublas_direct_ms", direct * 1e3, Unit::Ms);
    report.metric(
        "encoder_layer_peak_no_grad_bytes",
        peak_no_grad as f64,
        Unit::Bytes,
    );
    report.metric(
        "encoder_layer_peak_grad_bytes",
        peak_grad as f64,
        Unit::Bytes,
    );
    report.metric(
        "encoder_layer_held_by_graph_bytes",
        held as f64,
        Unit::Bytes,
    );
    report.note(&format!(
        "{device:?} through the CUDA backend (NVRTC kernels, cuBLAS), times waited for on the \
         device's stream. Matmul: {n}³ f32, median of {reps} interleaved runs; \
         `cuda_matmul_op_over_cublas` = `Tensor::matmul` (allocation from the caching allocator \
         included) / cublasSgemm called directly through cudarc on buffers of its own. Encoder \
         layer: BERT-base shape as on the host; peaks are device bytes from the allocator's \
         statistics above the weights and input."
    ));
    report.finish(args);
    Ok(())
}
