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
//!
//! ```
//! use vramguard::{memory, Device, Tensor, TensorError};
//!
//! // Written the usual way: every `x` stays alive until the function returns.
//! fn plain(x: &Tensor) -> Result<Tensor, TensorError> {
//!     let x = x.exp()?;
//!     let x = x.tanh()?;
//!     let x = x.sigmoid()?;
//!     Ok(x)
//! }
//!
//! // The same code: grad off, each `x` freed right after its last use.
//! #[vramguard::inference]
//! fn guarded(x: &Tensor) -> Result<Tensor, TensorError> {
//!     let x = x.exp()?;
//!     let x = x.tanh()?;
//!     let x = x.sigmoid()?;
//!     Ok(x)
//! }
//!
//! # fn main() -> Result<(), TensorError> {
//! let device = Device::isolated_host(); // its own allocator: exact statistics
//! let input = Tensor::ones(&[1024, 256], &device)?; // 1 MiB
//! let mib = 1 << 20;
//! let peak = |f: fn(&Tensor) -> Result<Tensor, TensorError>| -> Result<u64, TensorError> {
//!     let before = memory::stats(&device).allocated_bytes;
//!     memory::reset_peak_stats(&device);
//!     let out = vramguard::no_grad(|| f(&input))?;
//!     drop(out);
//!     Ok(memory::stats(&device).peak_allocated_bytes - before)
//! };
//! assert_eq!(peak(plain)?, 3 * mib); // all three intermediates at once
//! assert_eq!(peak(guarded)?, 2 * mib); // only an op's input and output
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod library_grad;
mod release;

pub use release::Release;
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

    pub use crate::library_grad::{library_no_grad, LibraryNoGrad};
    pub use crate::release::{KeepToScopeEnd, Probe, ReleaseAtLastUse};

    /// Ends the life of a value. Generic so that releasing a reference or a `Copy` value does
    /// not trip rustc's `dropping_references` / `dropping_copy_types` lints in user code.
    #[inline(always)]
    pub fn release<T>(value: T) {
        drop(value);
    }
}
