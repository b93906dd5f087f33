//! Every source of memory [vramguard](https://docs.rs/vramguard) accounts, and what is written
//! once over them: vramguard's devices (each with its caching allocator), the process's heap
//! (the tracking global allocator), the CUDA driver's pool and the GPU observer; grad mode,
//! batch scopes, the per-device memory tools and the largest-batch search.
//!
//! This crate knows nothing of tensors: vramguard's own (`vramguard-tensor`) build on it, and a
//! user of candle, burn, ndarray or tch compiles this crate without them. Users depend on the
//! `vramguard` facade, which re-exports what is public here under one path each.
//!
//! # Layers
//!
//! Each module imports only from the ones before it (the allocator, `vramguard-alloc`, is below
//! them all):
//!
//! | layer | owns |
//! | --- | --- |
//! | `accounting` | the one interface batch scopes account memory through ([`scope::ScopeAccounting`]), and the books of its sources |
//! | [`heap`] | the tracking global allocator and the heap's figures; a source of accounting |
//! | [`device`] | devices and allocations; the devices' source of accounting |
//! | [`grad`] | grad mode |
//! | [`scope`] | batch scopes over every source of accounting, and tags |
//! | `observer` | every library's GPU allocations, seen through CUPTI (with the `cupti` feature); a source of accounting |
//! | [`memory`] | per-device tools and the largest-batch search (devices, heap and observer) |
//! | `driver_pool` | the CUDA driver's memory pool, for candle (with the `cuda` feature); a source of accounting |
#![warn(missing_docs)]

mod accounting;
pub mod device;
#[cfg(feature = "cuda")]
pub mod driver_pool;
pub mod grad;
pub mod heap;
pub mod memory;
#[cfg(feature = "cupti")]
pub mod observer;
pub mod scope;

// The allocator's crate under the names these modules use for its parts.
use vramguard_alloc as alloc;
use vramguard_alloc::diagnostics;
#[cfg(feature = "cuda")]
use vramguard_alloc::driver;

pub use device::Device;
pub use grad::{enable_grad, is_grad_enabled, no_grad, EnableGradGuard, NoGradGuard};
