//! Runtime of [vramguard](https://docs.rs/vramguard): the caching allocator and its backends,
//! grad mode, tensors with autograd, and batch scopes.
//!
//! Users depend on the `vramguard` facade crate; this crate is its implementation.
#![warn(missing_docs)]

pub mod alloc;
pub mod device;
mod diagnostics;
#[cfg(feature = "cuda")]
pub mod driver;
#[cfg(feature = "cuda")]
pub mod driver_pool;
pub mod grad;
pub mod heap;
pub mod memory;
pub mod nn;
pub mod scope;
pub mod tensor;

pub use device::Device;
pub use grad::{enable_grad, is_grad_enabled, no_grad, EnableGradGuard, NoGradGuard};
pub use tensor::{DType, Tensor, TensorError};
