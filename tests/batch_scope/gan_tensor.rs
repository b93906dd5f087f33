//! Exact-byte tests of `#[batch_scope]` on a real GAN training loop (generator and
//! discriminator MLPs, both updated with Adam), shared with `examples/gan_bench.rs`.

#[macro_use]
#[path = "../../examples/common/gan.rs"]
mod gan;

use gan::{real_batch, train_leaky, train_plain, train_scoped, Gan, GanConfig, Result};
use vramguard::tensor::PeakBoundRecorder;
use vramguard::{memory, scope, Device, Tensor};

// A strict copy of the loop: sustained growth would panic.
gan_loop!(train_strict, gan::backward_step, #[vramguard::batch_scope(label = "gan-strict", strict, warn_after = 3)]);

const F32: u64 = 4;

fn round(bytes: u64) -> u64 {
    bytes.div_ceil(512) * 512
}

/// A GAN after one warm-up step (optimizer state exists; `backward_step` left no gradients).
fn warm_gan(config: GanConfig, device: &Device) -> Result<Gan> {
    let mut gan = Gan::new(config, 7, device)?;
    train_plain(&mut gan, 1, 0, device)?;
    Ok(gan)
}

#[test]
fn the_naive_loop_is_reported_with_the_leaked_bytes() -> Result<()> {
    let config = GanConfig::tiny();
    let device = Device::isolated_host();
    let mut gan = warm_gan(config, &device)?;
    let mut history = Vec::new();
    scope::reset("gan-leaky");
    train_leaky(&mut gan, 1, 1, &device, &mut history)?;
    let first = scope::last_report("gan-leaky").expect("a report");
    train_leaky(&mut gan, 9, 2, &device, &mut history)?;
    let last = scope::last_report("gan-leaky").expect("a report");

    // Each iteration keeps fake and real ([batch, data]) and the two scalar losses.
    let per_iteration = 2 * round((config.batch * config.data) as u64 * F32) + 2 * round(F32);
    assert_eq!(last.iterations, 10);
    assert_eq!(last.live_bytes - first.live_bytes, 9 * per_iteration);
    assert!(last.growth_streak >= 9, "growth is detected: {last}");
    // Only those four: `backward_step` frees the gradients inside the iteration.
    assert_eq!(last.escaped_count, 4);
    drop(history);
    Ok(())
}

#[test]
fn the_fixed_loop_has_flat_live_memory_for_50_iterations() -> Result<()> {
    let device = Device::isolated_host();
    let mut gan = warm_gan(GanConfig::tiny(), &device)?;
    let mut allocated_at_iteration_end = Vec::new();
    for step in 1..=50 {
        train_strict(&mut gan, 1, step, &device)?;
        allocated_at_iteration_end.push(memory::stats(&device).allocated_bytes);
    }
    assert!(
        allocated_at_iteration_end
            .iter()
            .all(|&b| b == allocated_at_iteration_end[0]),
        "live memory must be flat: {allocated_at_iteration_end:?}"
    );
    let report = scope::last_report("gan-strict").expect("a report");
    assert_eq!(report.growth_streak, 0);
    Ok(())
}

#[test]
fn the_scoped_loop_computes_the_same_losses_with_a_lower_peak() -> Result<()> {
    // Activations larger than the parameters, so that dropping them early shows.
    let config = GanConfig {
        batch: 256,
        noise: 4,
        hidden: 16,
        data: 12,
    };
    let (plain_dev, scoped_dev) = (Device::isolated_host(), Device::isolated_host());
    let (mut plain_gan, mut scoped_gan) = (
        warm_gan(config, &plain_dev)?,
        warm_gan(config, &scoped_dev)?,
    );

    let peak = |device: &Device,
                f: &mut dyn FnMut() -> Result<Vec<(f32, f32)>>|
     -> Result<(u64, Vec<(f32, f32)>)> {
        let before = memory::stats(device).allocated_bytes;
        memory::reset_peak_stats(device);
        let losses = f()?;
        Ok((memory::stats(device).peak_allocated_bytes - before, losses))
    };
    let (plain_peak, plain_losses) = peak(&plain_dev, &mut || {
        train_plain(&mut plain_gan, 5, 1, &plain_dev)
    })?;
    let (scoped_peak, scoped_losses) = peak(&scoped_dev, &mut || {
        train_scoped(&mut scoped_gan, 5, 1, &scoped_dev)
    })?;

    assert_eq!(plain_losses.len(), 5);
    for (a, b) in plain_losses.iter().zip(&scoped_losses) {
        assert_eq!(
            (a.0.to_bits(), a.1.to_bits()),
            (b.0.to_bits(), b.1.to_bits())
        );
    }
    // The scoped loop reaches the liveness lower bound of the plain loop's op sequence (every
    // buffer freed right after its last use, gradients included) exactly.
    let bound_dev = Device::isolated_host();
    let mut bound_gan = warm_gan(config, &bound_dev)?;
    let recorder = PeakBoundRecorder::start();
    train_plain(&mut bound_gan, 5, 1, &bound_dev)?;
    assert_eq!(scoped_peak, recorder.finish().peak_bytes);
    // Both loops peak in the discriminator's backward pass, in its second branch (real data):
    // the graph holds every activation it still needs whatever the locals do, and the first
    // branch (fakes) has finished, freeing the saved `d_fake` — but the plain loop's local
    // still holds it. The plain loop also still holds `zeros` and `d_loss_fake`, which the
    // scoped loop dropped after their last use: two [batch, 1] buffers and a scalar.
    let column = round((config.batch as u64) * F32);
    assert_eq!(
        plain_peak - scoped_peak,
        2 * column + round(F32),
        "plain {plain_peak}, scoped {scoped_peak}"
    );
    Ok(())
}
