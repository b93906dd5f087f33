//! `#[batch_scope]` run and compared: the same loops with and without the attribute
//! (`equivalence`), and GAN training loops with and without kept intermediates (`gan` on
//! counted values, `gan_tensor` on vramguard's tensors).

mod equivalence;
mod gan;
mod gan_tensor;
mod support;
