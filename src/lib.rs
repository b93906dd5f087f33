//! # vramguard
//!
//! GPU memory discipline made automatic for people who write model code.
//!
//! - [`inference`]: runs a function with grad recording disabled and drops each local right
//!   after its last use (in Rust, shadowing frees nothing); an op on a tensor that dies there
//!   writes into its buffer.
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
//! // The same code: grad off, each `x` freed right after its last use, every op out of place.
//! #[vramguard::inference(inplace = false)]
//! fn out_of_place(x: &Tensor) -> Result<Tensor, TensorError> {
//!     let x = x.exp()?;
//!     let x = x.tanh()?;
//!     let x = x.sigmoid()?;
//!     Ok(x)
//! }
//!
//! // The attribute as is: also, an op on a local that dies there writes into its buffer.
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
//! assert_eq!(peak(out_of_place)?, 2 * mib); // only an op's input and output
//! assert_eq!(peak(guarded)?, mib); // `exp`'s output carries `tanh` and `sigmoid`
//! # Ok(()) }
//! ```
//!
//! # Other libraries' tensors
//!
//! `#[inference]` and `#[batch_scope]` free a local at its last use when its type is
//! [`DropAtLastUse`]: vramguard's [`Tensor`], and with the features `candle`, `burn`, `burn-021`,
//! `ndarray` and `tch` those libraries' tensors. With [`TrackingAllocator`] as the global
//! allocator, the rest of the toolkit sees every tensor that lives on Rust's heap ([`heap`]).
//! What applies to which library (each "yes" names the test or example that shows it):
//!
//! | | vramguard `Tensor` | candle (CPU) | candle (CUDA) | burn (`burn-ndarray`) | burn (CUDA) | ndarray | tch (CPU) | tch (CUDA) |
//! | --- | --- | --- | --- | --- | --- | --- | --- | --- |
//! | frees at last use | yes: `tests/inference/memory.rs` | yes: `tests/drop_at_last_use/table.rs`, `candle_inference` | yes: the same tensor type | yes: `tests/drop_at_last_use/table.rs`, `burn_inference` | yes: the same tensor type | yes: `tests/drop_at_last_use/table.rs` | yes: `tests/drop_at_last_use/table.rs` | yes: the same tensor type |
//! | in place at last use | yes: `tests/inference/inplace.rs` | no: a tensor shares its storage with views and clones, and candle does not say whether a handle is the only one | as CPU | burn does it by itself (an op on a tensor whose handle is the only one reuses its buffer) | as CPU | `mapv` of an owned array: `tests/inference/inplace.rs` (feature `ndarray`) | no: libtorch's storage is shared with views and autograd, not visible from Rust | as CPU |
//! | no-grad | yes: `tensor/tests/tensor/grad.rs` | no switch in candle: plain weights (notice: `tests/drop_at_last_use/notices.rs`) | as CPU | no switch in burn: `model.valid()` | as CPU | nothing to record | yes: tch's guard, `tests/drop_at_last_use/table.rs` | as CPU |
//! | `#[batch_scope]` accounting | yes: `memory/tests/scope/accounting.rs` | yes: `tests/heap/scopes.rs` | yes, per allocation through the observer: `tests/cuda_observer_scope.rs` (escapes exact to the byte, by tag); through the driver's pool (totals): `tensor/tests/cuda/pool.rs` | yes: `burn_inference` | as statistics | yes: `tests/heap/scopes.rs` | no: libtorch's memory is C++'s | as statistics |
//! | statistics | yes: `memory::stats` | yes: `heap::stats`, `tests/heap/stats.rs` | yes, per tensor: `observer::Observer::stats` (feature `cupti`), `memory/tests/cuda_observer.rs` on the fake driver | yes: `heap::stats` | yes, per page, through the observer: untested, burn-cuda 0.22 does not build here (cubecl-cuda links LLVM 23 through llvm-sys 231, which neither Debian nor crates.io provides) | yes: `heap::stats` | no (as above) | yes, per segment, through the observer: untested end to end, the parameters of `cudaMalloc`/`cudaFree` read in `observer::calls`'s unit tests; no CUDA libtorch here, and the fake has no CUDA runtime |
//! | timeline | yes: `memory::html_report` | yes: `heap::html_report`, `tests/heap/stats.rs` | yes: `Observer::html_report`, `Observer::dump_snapshot` (memory_viz), `memory/tests/cuda_observer.rs` | yes: `heap::html_report` | as statistics | yes: `heap::html_report` | no | as statistics |
//! | OOM text | yes: `OutOfMemory` | yes: heap limit, `tests/heap_process.rs` | yes, printed before candle's own error: `memory/tests/cuda_observer.rs` | yes: heap limit | as statistics | yes: heap limit | no | as statistics |
//! | `VRAMGUARD_ALLOC_CONF` | yes | yes: `memory_limit`, `trace_capacity`, `heap_tracking` | yes: `memory_limit` (a soft cap: the OOM text at each crossing), `trace_capacity` (the log): `memory/tests/cuda_observer.rs` | yes | as statistics | yes | no | as statistics |
//! | largest batch | yes: `memory::max_batch`, `inference_bench` | yes: `heap::max_batch`, `candle_inference` | yes: `MaxBatchSearch::run_on_observer`, `memory/tests/cuda_observer.rs` | yes: `heap::max_batch`, `burn_inference` | as statistics | yes: `heap::max_batch` | no | as statistics |
//!
//! The three CUDA columns' memory tools come from the GPU observer (feature `cupti`,
//! `vramguard::observer`): every allocation and free any library makes through the CUDA driver
//! or runtime, seen through CUPTI's callbacks. What one observed allocation is depends on the
//! library: candle allocates each **tensor** (`cuMemAllocAsync` through cudarc), so its figures
//! are tensors'; burn's cubecl allocates **pages** and places tensors inside them itself, so
//! its figures are pages in use; libtorch's caching allocator allocates **segments**
//! (`cudaMalloc`, or `cuMemCreate` with expandable segments) and carves its tensors from them,
//! so its figures are its reserved memory. burn's wgpu backend allocates through wgpu, which
//! the observer does not see. candle (CUDA) builds with vramguard: candle 0.11 asks cudarc for
//! `dynamic-linking`, vramguard for `fallback-dynamic-loading` (the CUDA libraries loaded at run
//! time unless another crate of the build asks for a linking mode), so cudarc's linking mode is
//! candle's and the program links the CUDA libraries; `scripts/linking-check.sh` builds a crate
//! with both and runs it on the fake driver. The observer's tests still make candle's calls
//! through cudarc: candle-core's `cuda` feature compiles candle-kernels with nvcc, which CI does
//! not have.
#![warn(missing_docs)]

mod drop_at_last_use;
mod last_use;
mod library_grad;
mod notices;

pub use drop_at_last_use::DropAtLastUse;
pub use vramguard_macros::{allow, batch_scope, inference, DropAtLastUse};
pub use vramguard_memory::device::{Device, DeviceError};
pub use vramguard_memory::grad::{
    enable_grad, is_grad_enabled, no_grad, no_grad_future, EnableGradGuard, NoGradGuard,
    WithGradMode,
};
pub use vramguard_memory::heap::TrackingAllocator;
pub use vramguard_memory::scope;
#[cfg(feature = "tensor")]
pub use vramguard_tensor::nn;
#[cfg(feature = "tensor")]
pub use vramguard_tensor::tensor::{DType, Rhs, Tensor, TensorError};

/// The process's heap, for tensors of any library (candle's and burn's CPU tensors, ndarray's
/// arrays): statistics, batch-scope reports, the trace and its timeline, a soft memory limit
/// and the largest-batch finder, once [`TrackingAllocator`] is the global allocator.
pub mod heap {
    pub use vramguard_memory::heap::{
        html_report, is_tracking, memory_limit, record_trace, reset_peak_stats, set_memory_limit,
        snapshot, stats, trace, CENSUS_ENV, REPORT_ENV,
    };
    use vramguard_memory::memory::{MaxBatch, MaxBatchError, MaxBatchSearch};

    /// The largest batch size whose run keeps the heap's peak within `budget_bytes` (every live
    /// byte of the process, weights included), found in few runs of `run` — the same search as
    /// [`crate::memory::max_batch`] on a device, with the heap's exact peak. Any error from
    /// `run` ends the search ([`MaxBatchError::Run`]): the heap has no out-of-memory error to
    /// recover from. [`MaxBatchSearch::run_on_heap`] sets a limit or a progress callback.
    pub fn max_batch<T, E>(
        budget_bytes: u64,
        run: impl FnMut(usize) -> Result<T, E>,
    ) -> Result<MaxBatch, MaxBatchError<E>> {
        MaxBatchSearch::new(budget_bytes).run_on_heap(run)
    }
}

/// Memory tools per device: statistics, peaks, cache release, preallocation, snapshots, traces.
pub mod memory {
    pub use vramguard_memory::memory::*;
}

/// The caching allocator's settings (`VRAMGUARD_ALLOC_CONF`), its backends, and the allocator
/// itself for custom backends. Per-device tools are in [`crate::memory`].
pub mod alloc {
    pub use vramguard_alloc::{
        parse_bytes, AllocOrigin, AllocatorConfig, Backend, BackendError, BackendFailure, Block,
        BlockSnapshot, CachingAllocator, ConfigError, DeviceAllocator, EventId, ExpandableSegments,
        HostBackend, IterationId, LabelFrame, MemoryLimit, PoolKind, RoundupInterval,
        SegmentSnapshot, SetupError, StreamId, TraceEvent, TraceEventKind, TraceLabel,
        VirtualMemory, DEFAULT_EXPANDABLE_RANGE, ENV_VAR,
    };

    /// The allocator's CUDA backend (driver API through cudarc: loaded at run time, or linked
    /// when another crate of the build, such as candle's `cuda` feature, asks cudarc for
    /// `dynamic-linking`), and whether a CUDA library is there
    /// ([`library_present`](cuda_backend::library_present)). Only with the `cuda` feature (on by
    /// default).
    #[cfg(feature = "cuda")]
    pub mod cuda_backend {
        pub use vramguard_alloc::cuda_backend::{stream_id, CudaBackend};
        pub use vramguard_alloc::driver::{library_present, CudaLibrary};
    }
}

/// The CUDA driver's own memory pool for code whose tensors are not vramguard's (candle's):
/// release threshold, statistics, peaks, trimming, and batch-scope accounting. Only with the
/// `cuda` feature (on by default).
#[cfg(feature = "cuda")]
pub mod driver_pool {
    pub use vramguard_memory::driver_pool::{DriverPool, KEEP_ALL_CACHED};
}

/// The observer of every GPU allocation in the process, whichever library makes it (candle per
/// tensor, burn's cubecl per page, libtorch per segment): statistics, the allocation log, the
/// timeline and memory_viz snapshot, the out-of-memory report, a soft memory limit, and the
/// largest batch (`memory::MaxBatchSearch::run_on_observer`), and the report written at exit
/// for `cargo vramguard measure --device cuda` ([`observer::report_at_exit`]). Only with the
/// `cupti` feature.
#[cfg(feature = "cupti")]
pub mod observer {
    pub use vramguard_memory::observer::{
        report_at_exit, set_label_source, ObservedAllocation, ObservedEvent, Observer,
        ObserverError, ObserverOptions, GPU_REPORT_ENV, REPORT_LOG_CAPACITY,
    };
}

/// Allocations, GPU buffers, and why a GPU's context cannot be opened ([`crate::Device`] and
/// [`crate::DeviceError`] are at the crate root). The GPU items (`CudaBuffer`,
/// `CudaBufferError`, `CudaDevice`) exist only with the `cuda` feature (on by default); without
/// it [`crate::Device::cuda`] returns [`DeviceError::CudaFeatureDisabled`](crate::DeviceError).
/// [`DeviceError`] and [`ContextError`](device::ContextError) have the same
/// variants in every build.
pub mod device {
    pub use vramguard_alloc::ContextError;
    pub use vramguard_memory::device::Allocation;
    #[cfg(feature = "cuda")]
    pub use vramguard_memory::device::{CudaBuffer, CudaBufferError, CudaDevice};
}

/// Grad mode beyond the guards at the crate root.
pub mod grad {
    pub use vramguard_memory::grad::{set_grad_enabled, GradModeGuard};
}

/// Tensor items beyond [`crate::Tensor`] and its companions at the crate root (feature
/// `tensor`, on by default).
#[cfg(feature = "tensor")]
pub mod tensor {
    pub use vramguard_tensor::tensor::{rng, PeakBound, PeakBoundRecorder, Result, Storage};
}

/// Items used by code the macros generate. Not public API: no stability guarantees.
#[doc(hidden)]
pub mod __private {
    pub use vramguard_memory::grad::no_grad_future;
    pub use vramguard_memory::scope::{BatchScope, BatchScopeGuard, ScopeOptions, WarningOutput};

    pub use crate::drop_at_last_use::{CopyAtLastUse, DroppableAtLastUse, KeepToScopeEnd, Probe};
    #[cfg(feature = "ndarray")]
    pub use crate::last_use::MapvAtLastUse;
    pub use crate::last_use::{Dying, PlainAtLastUse};
    pub use crate::library_grad::{
        inference_guard, library_no_grad, with_library_no_grad, InferenceGuard, LibraryNoGrad,
    };
    #[cfg(feature = "tensor")]
    pub use vramguard_tensor::tensor::TensorAtLastUse;

    // The two functions below are what a compile error caused by the rewrite points into:
    // rustc quotes their signature line ("consider changing this parameter type in function
    // …"), so that line says which escape hatch keeps the value alive. Keep each on one line.

    /// Ends the life of a value. Generic so that dropping a reference or a `Copy` value does
    /// not trip rustc's `dropping_references` / `dropping_copy_types` lints in user code.
    #[inline]
    #[rustfmt::skip]
    pub fn drop_at_last_use<T>(value: T) { // #[vramguard::inference]/#[batch_scope] dropped this value after its last use; to keep it alive: `#[inference(keep(name))]`, or `#[keep]` on its `let`
        drop(value);
    }

    /// Moves a value into the statement of its last use (identity).
    #[inline]
    #[rustfmt::skip]
    pub fn last_use<T>(value: T) -> T { // #[vramguard::inference]/#[batch_scope] moved this value into its last use; to keep it alive: `#[inference(keep(name))]`, or `#[keep]` on its `let`
        value
    }
}
