//! # vramguard
//!
//! GPU memory discipline made automatic for people who write model code.
//!
//! - [`inference`]: runs a function with grad recording disabled and drops each local right
//!   after its last use (in Rust, shadowing frees nothing).
//! - [`batch_scope`]: per-iteration scopes for training and evaluation loops, with leak and
//!   growth reports.
//! - Lints at compile time for the mistakes that waste memory, suppressible with [`allow`].
//! - A caching allocator with statistics, snapshots and OOM messages that say what went wrong:
//!   see [`memory`].
#![warn(missing_docs)]

pub use vramguard_macros::{allow, batch_scope, inference};
pub use vramguard_runtime::device::DeviceError;
pub use vramguard_runtime::grad::{
    enable_grad, is_grad_enabled, no_grad, no_grad_future, EnableGradGuard, NoGradGuard,
    WithGradMode,
};
pub use vramguard_runtime::tensor::{DType, Rhs, Tensor, TensorError};
pub use vramguard_runtime::{alloc, device, grad, nn, scope, tensor, Device};

/// Memory tools per device: statistics, peaks, cache release, preallocation, snapshots, traces.
pub mod memory {
    pub use vramguard_runtime::memory::*;
}

/// Items used by code the macros generate. Not public API: no stability guarantees.
#[doc(hidden)]
pub mod __private {
    pub use vramguard_runtime::grad::{no_grad_future, NoGradGuard};
    pub use vramguard_runtime::scope::{BatchScope, BatchScopeGuard, ScopeOptions};

    /// Ends the life of a value. Generic so that releasing a reference or a `Copy` value does
    /// not trip rustc's `dropping_references` / `dropping_copy_types` lints in user code.
    #[inline(always)]
    pub fn release<T>(value: T) {
        drop(value);
    }
}
