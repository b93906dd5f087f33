//! Optimizers: update parameters in place, under no-grad, from their accumulated gradients.

use crate::grad::NoGradGuard;
use crate::tensor::{Result, Tensor, TensorError};

/// Checks that a parameter can be updated element by element in its storage.
fn check_param(op: &'static str, p: &Tensor) -> Result<()> {
    if !p.is_contiguous() {
        return Err(TensorError::InvalidArgument {
            op,
            shape: p.dims().to_vec(),
            message: "parameters must be contiguous; call contiguous() when creating them".into(),
        });
    }
    Ok(())
}

/// Plain stochastic gradient descent with optional momentum: `p -= lr * (g + momentum * buf)`.
#[derive(Debug)]
pub struct Sgd {
    params: Vec<Tensor>,
    /// Learning rate.
    pub lr: f32,
    /// Momentum factor (0 for none).
    pub momentum: f32,
    velocity: Vec<Option<Tensor>>,
}

impl Sgd {
    /// SGD over `params` with learning rate `lr` and no momentum.
    pub fn new(params: Vec<Tensor>, lr: f32) -> Sgd {
        Sgd::with_momentum(params, lr, 0.0)
    }

    /// SGD with momentum.
    pub fn with_momentum(params: Vec<Tensor>, lr: f32, momentum: f32) -> Sgd {
        let velocity = params.iter().map(|_| None).collect();
        Sgd {
            params,
            lr,
            momentum,
            velocity,
        }
    }

    /// Applies one update from the current gradients (parameters without one are skipped).
    pub fn step(&mut self) -> Result<()> {
        let _no_grad = NoGradGuard::new();
        for (p, vel) in self.params.iter().zip(self.velocity.iter_mut()) {
            let Some(g) = p.grad() else { continue };
            check_param("Sgd::step", p)?;
            if self.momentum == 0.0 {
                p.sub_(&g.mul_scalar(self.lr)?)?;
            } else {
                let v = match vel {
                    Some(v) => {
                        v.mul_(self.momentum)?;
                        v.add_(&g)?;
                        v.clone()
                    }
                    None => {
                        let v = g.copy()?;
                        *vel = Some(v.clone());
                        v
                    }
                };
                p.sub_(&v.mul_scalar(self.lr)?)?;
            }
        }
        Ok(())
    }

    /// Drops every parameter's gradient.
    pub fn zero_grad(&self) {
        for p in &self.params {
            p.zero_grad();
        }
    }

    /// Backward from `loss` into these parameters only, one [`Sgd::step`], then the gradients
    /// are dropped: see [`Adam::backward_step`].
    pub fn backward_step(&mut self, loss: &Tensor) -> Result<()> {
        loss.backward_for(&self.params)?;
        self.step()?;
        self.zero_grad();
        Ok(())
    }
}

/// Adam (Kingma & Ba), with bias correction. Moment buffers come from the allocator, created
/// on the first step of each parameter.
#[derive(Debug)]
pub struct Adam {
    params: Vec<Tensor>,
    /// Learning rate.
    pub lr: f32,
    /// Decay of the first moment.
    pub beta1: f32,
    /// Decay of the second moment.
    pub beta2: f32,
    /// Added to the denominator.
    pub eps: f32,
    moments: Vec<Option<(Tensor, Tensor)>>,
    step_count: u32,
}

impl Adam {
    /// Adam over `params` with learning rate `lr` and the usual defaults (0.9, 0.999, 1e-8).
    pub fn new(params: Vec<Tensor>, lr: f32) -> Adam {
        let moments = params.iter().map(|_| None).collect();
        Adam {
            params,
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            moments,
            step_count: 0,
        }
    }

    /// Applies one update from the current gradients (parameters without one are skipped).
    pub fn step(&mut self) -> Result<()> {
        let _no_grad = NoGradGuard::new();
        self.step_count += 1;
        let t = self.step_count as i32;
        let (b1, b2, eps) = (self.beta1, self.beta2, self.eps);
        let c1 = 1.0 - b1.powi(t);
        let c2 = 1.0 - b2.powi(t);
        let lr = self.lr;
        for (p, slot) in self.params.iter().zip(self.moments.iter_mut()) {
            let Some(g) = p.grad() else { continue };
            check_param("Adam::step", p)?;
            let g = g.contiguous()?;
            let (m, v) = match slot {
                Some(mv) => mv.clone(),
                None => {
                    let mv = (p.zeros_like()?, p.zeros_like()?);
                    *slot = Some(mv.clone());
                    mv
                }
            };
            // One fused pass over parameter, gradient and both moments (four distinct storages),
            // on the parameter's device.
            let hyper = crate::tensor::AdamStep {
                lr,
                beta1: b1,
                beta2: b2,
                eps,
                bias1: c1,
                bias2: c2,
            };
            crate::tensor::adam_step([p, &g, &m, &v], &hyper)?;
            for s in [p.storage(), m.storage(), v.storage()] {
                s.bump_version("Adam::step");
            }
        }
        Ok(())
    }

    /// Drops every parameter's gradient.
    pub fn zero_grad(&self) {
        for p in &self.params {
            p.zero_grad();
        }
    }

    /// Backward from `loss` into these parameters only ([`Tensor::backward_for`]), one
    /// [`Adam::step`], then the gradients are dropped — the form that holds gradients for the
    /// shortest time, like candle's `backward_step` or burn's optimizers consuming the
    /// gradients they are given.
    ///
    /// Against `zero_grad(); loss.backward()?; step()?`, this frees each gradient as soon as the
    /// update has used it instead of keeping it until the next `zero_grad`, and computes no
    /// gradients for parameters other optimizers own (a GAN's generator step does not fill the
    /// discriminator's). Gradients already accumulated in the parameters (from earlier
    /// `backward` calls) are added to and used. If `step` fails, the gradients are kept.
    pub fn backward_step(&mut self, loss: &Tensor) -> Result<()> {
        loss.backward_for(&self.params)?;
        self.step()?;
        self.zero_grad();
        Ok(())
    }
}
