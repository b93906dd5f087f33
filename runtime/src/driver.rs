//! The CUDA driver context and its errors: loading the driver (probed first, since cudarc
//! panics when libcuda is missing), opening a GPU's primary context ([`ContextError`]), making
//! a context current for a call (`CurrentContext`) and naming the driver's errors.
//!
//! Every CUDA path of the runtime goes through here: the allocator's backend
//! (`alloc::cuda_backend`), `device::CudaBuffer`, the tensor kernels and the driver's memory
//! pool (`driver_pool`). It is the lowest layer with `diagnostics` and imports nothing
//! else of the crate.
//!
//! The context rule: a context is made current with `cuCtxPushCurrent` and the caller's made
//! current again with `cuCtxPopCurrent` (`CurrentContext`), never with cudarc's
//! `bind_to_thread`, which would first report (and clear) an error cudarc recorded on the
//! context earlier, so an unrelated failure would abort the call and be lost.

use crate::diagnostics::{warn, WarningOutput};
use cudarc::driver::{result, sys, CudaContext, DriverError};
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// A GPU whose context cannot be opened (what `vramguard::DeviceError` says for the driver).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ContextError {
    /// The CUDA driver library is not installed.
    #[error("no CUDA driver found (libcuda.so): install the NVIDIA driver or use Device::Host")]
    NoDriver,
    /// The driver sees no GPU with this ordinal.
    #[error("no CUDA device {ordinal}: the driver sees {count} device(s); pick an ordinal below {count} or use Device::Host")]
    NoDevice {
        /// Ordinal asked for.
        ordinal: usize,
        /// Devices the driver reports.
        count: usize,
    },
    /// A driver call failed.
    #[error("CUDA driver call {op} failed: {message}")]
    Driver {
        /// The driver function.
        op: &'static str,
        /// The driver's error name.
        message: String,
    },
}

/// Whether the CUDA driver library (libcuda) can be loaded.
pub fn driver_present() -> bool {
    // SAFETY: only tries to `dlopen` the library by its usual names; no driver call is made.
    unsafe { sys::is_culib_present() }
}

/// [`ContextError::Driver`] for driver call `op`.
pub(crate) fn driver_error(op: &'static str, e: DriverError) -> ContextError {
    ContextError::Driver {
        op,
        message: error_name(e),
    }
}

/// Loads the driver (probed first: cudarc panics without it), `cuInit`, checks the ordinal,
/// retains GPU `ordinal`'s primary context and binds it to this thread.
pub(crate) fn open_context(ordinal: usize) -> Result<Arc<CudaContext>, ContextError> {
    if !driver_present() {
        return Err(ContextError::NoDriver);
    }
    match result::init() {
        Ok(()) => {}
        Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => {
            return Err(ContextError::NoDevice { ordinal, count: 0 })
        }
        Err(e) => return Err(driver_error("cuInit", e)),
    }
    let count = result::device::get_count().map_err(|e| driver_error("cuDeviceGetCount", e))?;
    if ordinal >= count.max(0) as usize {
        return Err(ContextError::NoDevice {
            ordinal,
            count: count.max(0) as usize,
        });
    }
    CudaContext::new(ordinal).map_err(|e| driver_error("cuDevicePrimaryCtxRetain", e))
}

/// The driver's name of `e` (`CUDA_ERROR_OUT_OF_MEMORY`), or its number when the driver has
/// none.
pub(crate) fn error_name(e: DriverError) -> String {
    e.error_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0))
}

/// A driver call that failed: what was being done and the driver's error name. Each caller
/// turns it into its own error (the allocator's `BackendFailure` has the same two fields and
/// the same text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallFailure {
    /// What was being done (the driver function and what for).
    pub(crate) op: String,
    /// The driver's error name.
    pub(crate) error: String,
}

impl fmt::Display for CallFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed with {}", self.op, self.error)
    }
}

/// A context made current on this thread by `cuCtxPushCurrent`, popped on drop, which makes the
/// caller's context current again. Unlike cudarc's `bind_to_thread` it neither reads nor clears
/// the error cudarc recorded on the context earlier (a failed free in a `Drop`), so that error
/// is reported to whoever checks it, not to an unrelated allocator call.
pub(crate) struct CurrentContext {
    ordinal: usize,
    /// A context stack entry belongs to the thread that pushed it.
    _thread_bound: PhantomData<*const ()>,
}

impl CurrentContext {
    /// Pushes `context` (of GPU `ordinal`) for the duration of `op`.
    pub(crate) fn push(
        context: &CudaContext,
        ordinal: usize,
        op: &str,
    ) -> Result<CurrentContext, CallFailure> {
        // SAFETY: the context is the device's primary context, retained by `context` for as
        // long as it lives, which outlives this guard at every call site.
        unsafe { sys::cuCtxPushCurrent_v2(context.cu_ctx()) }
            .result()
            .map_err(|e| CallFailure {
                op: format!("cuCtxPushCurrent for {op}"),
                error: error_name(e),
            })?;
        Ok(CurrentContext {
            ordinal,
            _thread_bound: PhantomData,
        })
    }
}

impl Drop for CurrentContext {
    fn drop(&mut self) {
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: pops the entry this guard pushed on this thread (the guard is not `Send`, and
        // guards are dropped in the reverse order of their creation).
        if let Err(e) = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) }.result() {
            warn(
                WarningOutput::Auto,
                &format!(
                    "cuda:{}: cuCtxPopCurrent failed: {}",
                    self.ordinal,
                    error_name(e)
                ),
            );
        }
    }
}
