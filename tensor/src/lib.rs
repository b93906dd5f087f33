//! vramguard's own tensors: storage from the caching allocator, host and CUDA backends, autograd
//! with in-place checks, layers, optimizers and safetensors. They show vramguard's techniques end
//! to end (no-grad, drop at last use, in-place at last use, a shaped pool); no candle, burn,
//! ndarray or tch user needs them, and the `vramguard` facade compiles them only with its
//! `tensor` feature (on by default).
//!
//! Users depend on the `vramguard` facade, which re-exports what is public here under one path
//! each.
//!
//! # Layers
//!
//! Both build on `vramguard-memory` (devices, grad mode) and `vramguard-alloc`:
//!
//! | layer | owns |
//! | --- | --- |
//! | [`tensor`] | tensors, their backends and autograd |
//! | [`nn`] | layers, optimizers, safetensors |
#![warn(missing_docs)]

pub mod nn;
pub mod tensor;

// The crates below under the names these modules use for their parts.
use vramguard_alloc as alloc;
#[cfg(feature = "cuda")]
use vramguard_alloc::diagnostics;
#[cfg(feature = "cuda")]
use vramguard_alloc::driver;
use vramguard_memory::{device, grad, Device};

pub use tensor::{DType, Tensor, TensorError};
