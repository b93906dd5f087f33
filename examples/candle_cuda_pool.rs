//! candle on a GPU with the driver's memory pool taken over (`vramguard::driver_pool::DriverPool`):
//! candle's CUDA tensors come from `cuMemAllocAsync` on the device's default pool, which by
//! default hands its cache back at every synchronisation and reports nothing. Taken over, the
//! pool keeps its cache, `stats` reads its figures into `memory::MemoryStats`, and
//! `#[batch_scope]` accounts candle's tensors with them: the leaky loop below (each
//! iteration's output pushed into a `Vec`) is reported as growth, the clean one is not.
//!
//! ```sh
//! cargo run --release --features candle-cuda --example candle_cuda_pool
//! ```
//!
//! candle's CUDA backend (`candle-cuda`, candle-core's `cuda` feature) builds candle-kernels
//! with nvcc. Built with `--features candle` only, or run without a GPU, the program says so
//! in one line and exits 0.

use candle_core::{DType, Device, Tensor};
use vramguard::driver_pool::DriverPool;
use vramguard::memory::MemoryStats;

const MIB: f64 = (1 << 20) as f64;

fn main() {
    let device = match Device::new_cuda(0) {
        Ok(d) => d,
        Err(e) => {
            println!(
                "candle_cuda_pool: candle has no CUDA device here ({e}); nothing to show \
                 (needs a GPU and `--features candle-cuda`)"
            );
            return;
        }
    };
    if let Err(e) = run(&device) {
        eprintln!("candle_cuda_pool: {e}");
        std::process::exit(1);
    }
}

fn run(device: &Device) -> Result<(), Box<dyn std::error::Error>> {
    // Before the take-over: the driver's default threshold (0) returns the cache at a sync.
    let pool = DriverPool::open(0)?;
    let threshold = pool.release_threshold()?;
    let untouched = after_one_batch(device, &pool)?;
    println!(
        "release threshold {threshold}: after a batch and a sync the pool holds {:.1} MiB",
        untouched.reserved_bytes as f64 / MIB
    );

    let pool = DriverPool::take_over(0)?;
    pool.empty_cache()?;
    let kept = after_one_batch(device, &pool)?;
    println!(
        "taken over (threshold {}): after the same batch the pool keeps {:.1} MiB cached \
         (peak in use {:.1} MiB)",
        pool.release_threshold()?,
        kept.reserved_bytes as f64 / MIB,
        kept.peak_allocated_bytes as f64 / MIB
    );

    let mut history = Vec::new();
    clean_loop(device, 6)?;
    let clean = vramguard::scope::last_report("candle-clean").ok_or("no report")?;
    leaky_loop(device, 6, &mut history)?;
    let leaky = vramguard::scope::last_report("candle-leaky").ok_or("no report")?;
    println!(
        "\n| loop  | live at end | escaped last iteration | peak in iteration | growth streak |"
    );
    println!(
        "|-------|-------------|------------------------|-------------------|---------------|"
    );
    for (name, r) in [("clean", &clean), ("leaky", &leaky)] {
        println!(
            "| {name} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {} |",
            r.live_bytes as f64 / MIB,
            r.escaped_bytes as f64 / MIB,
            r.peak_live_bytes as f64 / MIB,
            r.growth_streak
        );
    }
    drop(history);
    println!(
        "\nempty_cache released {:.1} MiB",
        pool.empty_cache()? as f64 / MIB
    );
    Ok(())
}

/// One batch of work (a 1024×1024 matmul chain, 4 MiB per tensor), its tensors dropped, the
/// device synchronised.
fn after_one_batch(
    device: &Device,
    pool: &DriverPool,
) -> Result<MemoryStats, Box<dyn std::error::Error>> {
    pool.reset_peak_stats()?;
    {
        let out = batch(device, 0)?;
        drop(out);
    }
    device.synchronize()?;
    Ok(pool.stats()?)
}

fn batch(device: &Device, seed: usize) -> candle_core::Result<Tensor> {
    let x = Tensor::ones((1024, 1024), DType::F32, device)?.affine(1.0, seed as f64)?;
    let h = x.matmul(&x)?.relu()?;
    h.matmul(&x)
}

#[vramguard::batch_scope(label = "candle-clean")]
fn clean_loop(device: &Device, steps: usize) -> candle_core::Result<()> {
    for step in 0..steps {
        let out = batch(device, step)?;
        device.synchronize()?;
        drop(out);
    }
    Ok(())
}

#[vramguard::batch_scope(label = "candle-leaky")]
#[vramguard::allow(accumulates_across_iterations)]
fn leaky_loop(device: &Device, steps: usize, history: &mut Vec<Tensor>) -> candle_core::Result<()> {
    for step in 0..steps {
        let out = batch(device, step)?;
        device.synchronize()?;
        history.push(out);
    }
    Ok(())
}
