//! A small GAN on synthetic data, trained the way a Rust user would write it: generator and
//! discriminator MLPs, a least-squares GAN loss, Adam for both, one `let` per step.
//!
//! The training loop is stamped out by [`gan_loop!`] without an attribute and under
//! `#[batch_scope]`, each with the update this crate recommends ([`Adam::backward_step`]) and
//! with PyTorch's classic `zero_grad`/`backward`/`step`; and once more by hand in the naive form that keeps every iteration's
//! `fake`, `real`, `d_loss` and `g_loss` in a history (the GAN that runs out of memory at epoch
//! 200). Shared by `examples/gan_bench.rs` and `tests/batch_scope/gan_tensor.rs`.

#![allow(dead_code)] // Each program uses a different subset.

use vramguard::nn::{Adam, Linear, Module, Parameters};
use vramguard::{Device, Tensor, TensorError};

pub type Result<T> = std::result::Result<T, TensorError>;

/// Sizes of the GAN.
#[derive(Debug, Clone, Copy)]
pub struct GanConfig {
    pub batch: usize,
    pub noise: usize,
    pub hidden: usize,
    pub data: usize,
}

impl GanConfig {
    /// MNIST-shaped: 784 features, hidden 512, noise 64, batch 64.
    pub fn mnist_like() -> GanConfig {
        GanConfig {
            batch: 64,
            noise: 64,
            hidden: 512,
            data: 784,
        }
    }

    /// A small one for tests.
    pub fn tiny() -> GanConfig {
        GanConfig {
            batch: 8,
            noise: 4,
            hidden: 16,
            data: 12,
        }
    }
}

/// Generator: noise → hidden → hidden → data, ReLU, tanh output.
pub struct Generator {
    pub l1: Linear,
    pub l2: Linear,
    pub l3: Linear,
}

impl Generator {
    pub fn forward(&self, z: &Tensor) -> Result<Tensor> {
        let h = self.l1.forward(z)?;
        let h = h.relu()?;
        let h = self.l2.forward(&h)?;
        let h = h.relu()?;
        let x = self.l3.forward(&h)?;
        x.tanh()
    }
}

/// Discriminator: data → hidden → hidden → 1, ReLU, sigmoid output.
pub struct Discriminator {
    pub l1: Linear,
    pub l2: Linear,
    pub l3: Linear,
}

impl Discriminator {
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.l1.forward(x)?;
        let h = h.relu()?;
        let h = self.l2.forward(&h)?;
        let h = h.relu()?;
        let y = self.l3.forward(&h)?;
        y.sigmoid()
    }
}

/// Both networks and their optimizers.
pub struct Gan {
    pub config: GanConfig,
    pub generator: Generator,
    pub discriminator: Discriminator,
    pub opt_g: Adam,
    pub opt_d: Adam,
}

impl Gan {
    pub fn new(config: GanConfig, seed: u64, device: &Device) -> Result<Gan> {
        let GanConfig {
            noise,
            hidden,
            data,
            ..
        } = config;
        let generator = Generator {
            l1: Linear::new(noise, hidden, true, seed, device)?,
            l2: Linear::new(hidden, hidden, true, seed + 1, device)?,
            l3: Linear::new(hidden, data, true, seed + 2, device)?,
        };
        let discriminator = Discriminator {
            l1: Linear::new(data, hidden, true, seed + 3, device)?,
            l2: Linear::new(hidden, hidden, true, seed + 4, device)?,
            l3: Linear::new(hidden, 1, true, seed + 5, device)?,
        };
        let g_params: Vec<Tensor> = [&generator.l1, &generator.l2, &generator.l3]
            .iter()
            .flat_map(|l| l.parameters())
            .collect();
        let d_params: Vec<Tensor> = [&discriminator.l1, &discriminator.l2, &discriminator.l3]
            .iter()
            .flat_map(|l| l.parameters())
            .collect();
        Ok(Gan {
            config,
            generator,
            discriminator,
            opt_g: Adam::new(g_params, 2e-4),
            opt_d: Adam::new(d_params, 2e-4),
        })
    }
}

/// The "real" data: a fixed smooth pattern plus seeded noise, in [-1, 1].
pub fn real_batch(config: GanConfig, step: usize, device: &Device) -> Result<Tensor> {
    let noise = Tensor::randn(
        &[config.batch, config.data],
        0.0,
        0.1,
        10_000 + step as u64,
        device,
    )?;
    let pattern: Vec<f32> = (0..config.data)
        .map(|i| (i as f32 * 0.05).sin() * 0.8)
        .collect();
    let pattern = Tensor::from_slice(&pattern, &[1, config.data], device)?;
    noise.broadcast_add(&pattern)
}

/// The update a loop makes from a loss: [`Adam::backward_step`], the form this crate
/// recommends (gradients only for this optimizer's parameters, dropped right after the update).
pub fn backward_step(opt: &mut Adam, loss: &Tensor) -> Result<()> {
    opt.backward_step(loss)
}

/// The update in PyTorch's classic form: `zero_grad`, `backward`, `step`. Gradients stay in the
/// parameters until the next `zero_grad`, and `backward` fills every leaf's, so the generator
/// step also computes (and keeps) the discriminator's.
pub fn zero_grad_backward_step(opt: &mut Adam, loss: &Tensor) -> Result<()> {
    opt.zero_grad();
    loss.backward()?;
    opt.step()
}

/// Stamps out `fn $name(gan, steps, first_step, device) -> Result<Vec<(f32, f32)>>` with the
/// given update (`backward_step` or `zero_grad_backward_step`) and attributes: the plain
/// training loop.
macro_rules! gan_loop {
    ($name:ident, $update:path $(, #[$attr:meta])*) => {
        $(#[$attr])*
        pub fn $name(gan: &mut Gan, steps: usize, first_step: usize, device: &Device) -> Result<Vec<(f32, f32)>> {
            let config = gan.config;
            let mut losses = Vec::with_capacity(steps);
            for step in first_step..first_step + steps {
                let real = real_batch(config, step, device)?;
                let z = Tensor::randn(&[config.batch, config.noise], 0.0, 1.0, step as u64, device)?;
                let fake = gan.generator.forward(&z)?;

                // Discriminator: real → 1, fake → 0.
                let d_real = gan.discriminator.forward(&real)?;
                let d_fake = gan.discriminator.forward(&fake.detach())?;
                let ones = Tensor::ones(&[config.batch, 1], device)?;
                let zeros = Tensor::zeros(&[config.batch, 1], device)?;
                let d_loss_real = d_real.mse_loss(&ones)?;
                let d_loss_fake = d_fake.mse_loss(&zeros)?;
                let d_loss = (d_loss_real + &d_loss_fake)?;
                $update(&mut gan.opt_d, &d_loss)?;

                // Generator: make the discriminator call the fakes real.
                let g_out = gan.discriminator.forward(&fake)?;
                let g_loss = g_out.mse_loss(&ones)?;
                $update(&mut gan.opt_g, &g_loss)?;

                losses.push((d_loss.to_scalar()?, g_loss.to_scalar()?));
            }
            Ok(losses)
        }
    };
}

gan_loop!(train_plain, backward_step);
gan_loop!(train_scoped, backward_step, #[vramguard::batch_scope(label = "gan")]);
gan_loop!(train_plain_zero_grad, zero_grad_backward_step);
gan_loop!(
    train_scoped_zero_grad,
    zero_grad_backward_step,
    #[vramguard::batch_scope(label = "gan-zero-grad")]
);

/// A `fake`, `real`, `d_loss`, `g_loss` kept from one iteration.
pub type HistoryEntry = (Tensor, Tensor, Tensor, Tensor);

/// The naive loop: the same step, but each iteration's tensors are pushed into `history`.
#[vramguard::batch_scope(label = "gan-leaky")]
#[vramguard::allow(accumulates_across_iterations)]
pub fn train_leaky(
    gan: &mut Gan,
    steps: usize,
    first_step: usize,
    device: &Device,
    history: &mut Vec<HistoryEntry>,
) -> Result<()> {
    let config = gan.config;
    for step in first_step..first_step + steps {
        let real = real_batch(config, step, device)?;
        let z = Tensor::randn(&[config.batch, config.noise], 0.0, 1.0, step as u64, device)?;
        let fake = gan.generator.forward(&z)?;
        let d_real = gan.discriminator.forward(&real)?;
        let d_fake = gan.discriminator.forward(&fake.detach())?;
        let ones = Tensor::ones(&[config.batch, 1], device)?;
        let zeros = Tensor::zeros(&[config.batch, 1], device)?;
        let d_loss_real = d_real.mse_loss(&ones)?;
        let d_loss_fake = d_fake.mse_loss(&zeros)?;
        let d_loss = (d_loss_real + &d_loss_fake)?;
        gan.opt_d.backward_step(&d_loss)?;
        let g_out = gan.discriminator.forward(&fake)?;
        let g_loss = g_out.mse_loss(&ones)?;
        gan.opt_g.backward_step(&g_loss)?;
        history.push((fake, real, d_loss, g_loss));
    }
    Ok(())
}
