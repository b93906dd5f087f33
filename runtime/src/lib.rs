//! Runtime of [vramguard](https://docs.rs/vramguard): the caching allocator and its backends,
//! grad mode, tensors with autograd, and batch scopes.
//!
//! Users depend on the `vramguard` facade crate; this crate is its implementation.
//!
//! # Layers
//!
//! Each module imports only from the ones before it (the workspace test `tests/layout/layers.rs` checks
//! it, the layers inside `tensor` too, and that this table is its list):
//!
//! | layer | owns |
//! | --- | --- |
//! | `diagnostics` | warnings and errors a user must see, and where they go (`WarningOutput`) |
//! | `driver` | the CUDA driver context and its errors (with the `cuda` feature) |
//! | [`alloc`] | the caching allocator, its backends, the trace and the thread's trace label |
//! | `accounting` | the one interface batch scopes account memory through ([`scope::ScopeAccounting`]), and the books of its sources |
//! | [`heap`] | the tracking global allocator and the heap's figures; a source of accounting |
//! | [`device`] | devices and allocations; the devices' source of accounting |
//! | [`grad`] | grad mode |
//! | [`scope`] | batch scopes over every source of accounting, and tags |
//! | `observer` | every library's GPU allocations, seen through CUPTI (with the `cupti` feature); a source of accounting |
//! | [`tensor`] | tensors, their backends and autograd |
//! | [`nn`] | layers, optimizers, safetensors |
//! | [`memory`] | per-device tools and the largest-batch search (devices and heap) |
//! | `driver_pool` | the CUDA driver's memory pool, for candle (with the `cuda` feature); a source of accounting |
#![warn(missing_docs)]

mod accounting;
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
#[cfg(feature = "cupti")]
pub mod observer;
pub mod scope;
pub mod tensor;

pub use device::Device;
pub use grad::{enable_grad, is_grad_enabled, no_grad, EnableGradGuard, NoGradGuard};
pub use tensor::{DType, Tensor, TensorError};
