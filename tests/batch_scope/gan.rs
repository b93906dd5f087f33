//! Exact-byte tests on a GAN-shaped training loop (generator and discriminator MLPs, both
//! updated), written against Vec-based fake tensors whose bytes live in an isolated device.
//! The lead ports them to the real `Tensor` after the merge.

use crate::support::T;
use vramguard::scope;
use vramguard::{batch_scope, memory, Device};

const BATCH: usize = 16;
const NOISE: usize = 8;
const HIDDEN: usize = 32;
const DATA: usize = 16;
const LR: f32 = 0.01;

struct Gan {
    wg1: T,
    wg2: T,
    wd1: T,
    wd2: T,
}

impl Gan {
    fn new(dev: &Device) -> Gan {
        Gan {
            wg1: T::seeded(dev, NOISE, HIDDEN, 1),
            wg2: T::seeded(dev, HIDDEN, DATA, 2),
            wd1: T::seeded(dev, DATA, HIDDEN, 3),
            wd2: T::seeded(dev, HIDDEN, 1, 4),
        }
    }
}

// The GAN step is written out in the loop body, not behind a macro invocation inside it, so
// that the drop-at-last-use engine sees its locals (a whole function stamped out by
// `macro_rules!` is fine: the attribute sees the expanded function).

/// The naive loop: keeps every iteration's tensors in a history.
#[batch_scope(label = "gan-leaky")]
#[vramguard::allow(accumulates_across_iterations)]
fn train_leaky(dev: &Device, gan: &mut Gan, steps: usize, history: &mut Vec<(T, T, T, T)>) {
    for step in 0..steps {
        let z = T::seeded(dev, BATCH, NOISE, 1000 + step as u64);
        let real = T::seeded(dev, BATCH, DATA, 2000 + step as u64);
        let g_h = z.matmul(&gan.wg1).relu();
        let fake = g_h.matmul(&gan.wg2).tanh();
        // Discriminator step.
        let d_real_h = real.matmul(&gan.wd1).relu();
        let d_real = d_real_h.matmul(&gan.wd2).sigmoid();
        let d_fake_h = fake.matmul(&gan.wd1).relu();
        let d_fake = d_fake_h.matmul(&gan.wd2).sigmoid();
        let d_loss = T::from_vec(
            dev,
            1,
            1,
            vec![d_real.mse(1.0).item() + d_fake.mse(0.0).item()],
        );
        let gd1 = real.t_matmul(&d_real_h);
        let gd2 = d_real_h.t_matmul(&d_real);
        gan.wd1.sgd_step(&gd1, LR);
        gan.wd2.sgd_step(&gd2, LR);
        // Generator step.
        let s_h = fake.matmul(&gan.wd1).relu();
        let s_out = s_h.matmul(&gan.wd2).sigmoid();
        let g_loss = s_out.mse(1.0);
        let gg1 = z.t_matmul(&g_h);
        let gg2 = g_h.t_matmul(&fake);
        gan.wg1.sgd_step(&gg1, LR);
        gan.wg2.sgd_step(&gg2, LR);
        history.push((fake, real, d_loss, g_loss));
    }
}

/// Stamps out the training loop with the given attributes. It returns the losses and the
/// allocated bytes at the start of each step (host scalars only: nothing escapes).
macro_rules! gan_loop {
    ($name:ident $(, #[$attr:meta])*) => {
        $(#[$attr])*
        fn $name(dev: &Device, gan: &mut Gan, steps: usize) -> (Vec<f32>, Vec<u64>) {
            let mut losses = Vec::new();
            let mut allocated_at_start = Vec::new();
            for step in 0..steps {
                allocated_at_start.push(memory::stats(dev).allocated_bytes);
                let z = T::seeded(dev, BATCH, NOISE, 1000 + step as u64);
                let real = T::seeded(dev, BATCH, DATA, 2000 + step as u64);
                let g_h = z.matmul(&gan.wg1).relu();
                let fake = g_h.matmul(&gan.wg2).tanh();
                // Discriminator step.
                let d_real_h = real.matmul(&gan.wd1).relu();
                let d_real = d_real_h.matmul(&gan.wd2).sigmoid();
                let d_fake_h = fake.matmul(&gan.wd1).relu();
                let d_fake = d_fake_h.matmul(&gan.wd2).sigmoid();
                let d_loss = T::from_vec(
                    dev,
                    1,
                    1,
                    vec![d_real.mse(1.0).item() + d_fake.mse(0.0).item()],
                );
                let gd1 = real.t_matmul(&d_real_h);
                let gd2 = d_real_h.t_matmul(&d_real);
                gan.wd1.sgd_step(&gd1, LR);
                gan.wd2.sgd_step(&gd2, LR);
                // Generator step.
                let s_h = fake.matmul(&gan.wd1).relu();
                let s_out = s_h.matmul(&gan.wd2).sigmoid();
                let g_loss = s_out.mse(1.0);
                let gg1 = z.t_matmul(&g_h);
                let gg2 = g_h.t_matmul(&fake);
                gan.wg1.sgd_step(&gg1, LR);
                gan.wg2.sgd_step(&gg2, LR);
                losses.push(d_loss.item() + g_loss.item());
            }
            (losses, allocated_at_start)
        }
    };
}

// The fixed loop, strict: growth would fail the test.
gan_loop!(train_fixed, #[batch_scope(label = "gan-fixed", strict, warn_after = 3)]);
// The same loop without the attribute.
gan_loop!(train_plain);

fn params_bytes(gan: &Gan) -> u64 {
    gan.wg1.bytes() + gan.wg2.bytes() + gan.wd1.bytes() + gan.wd2.bytes()
}

#[test]
fn the_naive_gan_loop_is_reported_with_the_leaked_bytes() {
    let dev = Device::isolated_host();
    let mut gan = Gan::new(&dev);
    let mut history = Vec::new();
    train_leaky(&dev, &mut gan, 10, &mut history);

    let per_iteration: u64 =
        history[0].0.bytes() + history[0].1.bytes() + history[0].2.bytes() + history[0].3.bytes();
    let report = scope::last_report("gan-leaky").expect("report");
    assert_eq!(report.iterations, 10);
    assert_eq!(report.escaped_count, 4, "fake, real, d_loss, g_loss");
    assert_eq!(report.escaped_bytes, per_iteration);
    assert_eq!(report.live_bytes, 10 * per_iteration);
    assert_eq!(report.older_iterations_alive, 9);
    assert_eq!(report.growth_streak, 9);
    assert_eq!(
        memory::stats(&dev).allocated_bytes,
        params_bytes(&gan) + 10 * per_iteration,
        "the scope saw exactly what the history holds"
    );
}

#[test]
fn the_fixed_gan_loop_has_flat_live_memory_for_50_iterations() {
    let dev = Device::isolated_host();
    let mut gan = Gan::new(&dev);
    let (losses, allocated_at_start) = train_fixed(&dev, &mut gan, 50);
    assert_eq!(losses.len(), 50);
    let params = params_bytes(&gan);
    assert!(
        allocated_at_start.iter().all(|&bytes| bytes == params),
        "allocated bytes at every iteration start equal the parameters: {allocated_at_start:?}"
    );
    let report = scope::last_report("gan-fixed").expect("report");
    assert_eq!(report.iterations, 50);
    assert_eq!(report.escaped_count, 0);
    assert_eq!(report.live_bytes, 0);
    assert_eq!(report.growth_streak, 0);
    assert_eq!(memory::stats(&dev).allocated_bytes, params);

    let mut plain_gan = Gan::new(&dev);
    let (plain, _) = train_plain(&dev, &mut plain_gan, 50);
    assert_eq!(
        losses.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        plain.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        "bit-identical losses with and without the attribute"
    );
}

#[test]
fn the_fixed_gan_loop_peaks_lower_with_the_attribute() {
    let plain_dev = Device::isolated_host();
    let mut gan = Gan::new(&plain_dev);
    memory::reset_peak_stats(&plain_dev);
    let base = memory::stats(&plain_dev).allocated_bytes;
    train_plain(&plain_dev, &mut gan, 3);
    let plain_peak = memory::stats(&plain_dev).peak_allocated_bytes - base;

    let scoped_dev = Device::isolated_host();
    let mut gan = Gan::new(&scoped_dev);
    memory::reset_peak_stats(&scoped_dev);
    let base = memory::stats(&scoped_dev).allocated_bytes;
    train_fixed(&scoped_dev, &mut gan, 3);
    let scoped_peak = memory::stats(&scoped_dev).peak_allocated_bytes - base;
    assert!(
        scoped_peak < plain_peak,
        "peak above parameters: {scoped_peak} B with #[batch_scope], {plain_peak} B without"
    );
}
