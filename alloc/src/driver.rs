//! The CUDA driver context and its errors: whether a CUDA library is there
//! ([`library_present`]; the driver is probed before any driver call, since cudarc panics when
//! libcuda is missing), opening a GPU's primary context ([`ContextError`], defined in every build), making a context
//! current for a call (`CurrentContext`) and naming the driver's errors.
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
use crate::ContextError;
use cudarc::driver::{result, sys, CudaContext, DriverError};
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// A CUDA library the CUDA backend calls through cudarc, for [`library_present`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CudaLibrary {
    /// The driver API (`libcuda.so`; `nvcuda.dll` on Windows): every device, context and
    /// allocation call.
    Driver,
    /// NVRTC, the runtime compiler (`libnvrtc.so`): the tensor kernels are compiled with it.
    Nvrtc,
    /// cuBLAS (`libcublas.so`): the CUDA backend's matrix products.
    Cublas,
    /// CUPTI (`libcupti.so`): the GPU observer's callbacks (feature `cupti`).
    Cupti,
}

impl CudaLibrary {
    /// The names cudarc gives the library (before its candidate file names are formed).
    fn names(self) -> &'static [&'static str] {
        match self {
            CudaLibrary::Driver => &["cuda", "nvcuda"],
            CudaLibrary::Nvrtc => &["nvrtc"],
            CudaLibrary::Cublas => &["cublas"],
            CudaLibrary::Cupti => &["cupti"],
        }
    }

    /// A function every version of the library exports, looked up in the running process.
    fn key_symbol(self) -> &'static str {
        match self {
            CudaLibrary::Driver => "cuInit",
            CudaLibrary::Nvrtc => "nvrtcVersion",
            CudaLibrary::Cublas => "cublasCreate_v2",
            CudaLibrary::Cupti => "cuptiSubscribe",
        }
    }
}

/// The CUDA version whose file names are tried: the workspace's cudarc feature `cuda-12080`.
const CUDA_MAJOR: u32 = 12;
/// See [`CUDA_MAJOR`].
const CUDA_MINOR: u32 = 8;

/// The file names cudarc tries, in its order, when it loads library `name` at run time: its
/// `get_lib_name_candidates` (cudarc 0.19.10) for CUDA 12.8, entry for entry (two repeat for
/// CUDA 12), written out once here since cudarc has it only in its `dynamic-loading` mode.
fn candidate_file_names(name: &str) -> Vec<String> {
    use std::env::consts::{DLL_PREFIX as PRE, DLL_SUFFIX as SUF};
    let width = if cfg!(target_pointer_width = "32") {
        "32"
    } else {
        "64"
    };
    let (major, minor) = (CUDA_MAJOR, CUDA_MINOR);
    vec![
        format!("{PRE}{name}{SUF}"),
        format!("{PRE}{name}{width}{SUF}"),
        format!("{PRE}{name}{width}_{major}{SUF}"),
        format!("{PRE}{name}{width}_{major}{minor}{SUF}"),
        format!("{PRE}{name}{width}_{major}{minor}_0{SUF}"),
        format!("{PRE}{name}{width}_{major}0_{minor}{SUF}"),
        format!("{PRE}{name}{width}_10{SUF}"),
        format!("{PRE}{name}{width}_11{SUF}"),
        format!("{PRE}{name}{width}_12{SUF}"),
        format!("{PRE}{name}{width}_{major}0_0{SUF}"),
        format!("{PRE}{name}{width}_9{SUF}"),
        format!("{PRE}{name}{SUF}.{major}"),
        format!("{PRE}{name}{SUF}.12"),
        format!("{PRE}{name}{SUF}.11"),
        format!("{PRE}{name}{SUF}.10"),
        format!("{PRE}{name}{SUF}.9"),
        format!("{PRE}{name}{SUF}.1"),
    ]
}

/// Whether `library` can be called: linked into the running process already (cudarc's
/// `dynamic-linking`, as candle's `cuda` feature asks for: the binary links it, so it is there
/// or the program would not have started), or loadable by one of the file names cudarc tries
/// (its default `dynamic-loading`: the dynamic loader's paths, `LD_LIBRARY_PATH` and the
/// system's library folders). Makes no call into the library.
///
/// Under `dynamic-loading` cudarc panics at its first call when the library cannot be loaded,
/// so the CUDA backend asks this first: `Device::cuda` without a driver is
/// [`ContextError::NoDriver`], never a panic.
pub fn library_present(library: CudaLibrary) -> bool {
    linked_into_process(library.key_symbol())
        || library.names().iter().any(|name| {
            candidate_file_names(name).iter().any(|file| {
                // SAFETY: loads the library as cudarc would (`dlopen` by file name, its
                // initialisers are NVIDIA's, or the fake driver's in tests) and unloads it when
                // the handle drops; no function of it is called.
                unsafe { libloading::Library::new(file) }.is_ok()
            })
        })
}

/// Whether `symbol` resolves in the running process: the program and the libraries it links or
/// loaded into the global scope.
#[cfg(unix)]
fn linked_into_process(symbol: &str) -> bool {
    let this = libloading::os::unix::Library::this();
    // SAFETY: only the symbol's address is read (as a pointer-sized value, never called or
    // dereferenced); `this` is the program's own handle, valid for the process.
    unsafe { this.get::<*const std::ffi::c_void>(symbol.as_bytes()) }.is_ok()
}

/// Windows: the program's own module has no CUDA functions (DLLs are separate modules), so only
/// loading by name answers.
#[cfg(not(unix))]
fn linked_into_process(_symbol: &str) -> bool {
    false
}

/// [`ContextError::Driver`] for driver call `op`.
#[doc(hidden)]
pub fn driver_error(op: &'static str, e: DriverError) -> ContextError {
    ContextError::Driver {
        op,
        message: error_name(e),
    }
}

/// Loads the driver (probed first: cudarc panics without it), `cuInit`, checks the ordinal,
/// retains GPU `ordinal`'s primary context and binds it to this thread.
#[doc(hidden)]
pub fn open_context(ordinal: usize) -> Result<Arc<CudaContext>, ContextError> {
    if !library_present(CudaLibrary::Driver) {
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
#[doc(hidden)]
pub fn error_name(e: DriverError) -> String {
    e.error_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0))
}

/// A driver call that failed: what was being done and the driver's error name. Each caller
/// turns it into its own error (the allocator's `BackendFailure` has the same two fields and
/// the same text).
#[derive(Debug, Clone, PartialEq, Eq)]
#[doc(hidden)]
pub struct CallFailure {
    /// What was being done (the driver function and what for).
    #[doc(hidden)]
    pub op: String,
    /// The driver's error name.
    #[doc(hidden)]
    pub error: String,
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
#[doc(hidden)]
pub struct CurrentContext {
    ordinal: usize,
    /// A context stack entry belongs to the thread that pushed it.
    _thread_bound: PhantomData<*const ()>,
}

impl CurrentContext {
    /// Pushes `context` (of GPU `ordinal`) for the duration of `op`.
    #[doc(hidden)]
    pub fn push(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_candidates_are_cudarcs_for_cuda_12_8() {
        let names = candidate_file_names("cuda");
        assert_eq!(names.len(), 17);
        assert_eq!(
            &names[..4],
            [
                "libcuda.so",
                "libcuda64.so",
                "libcuda64_12.so",
                "libcuda64_128.so"
            ]
        );
        assert_eq!(names[5], "libcuda64_120_8.so");
        assert_eq!(&names[11..13], ["libcuda.so.12", "libcuda.so.12"]);
        assert_eq!(names[16], "libcuda.so.1");
        assert_eq!(CudaLibrary::Driver.names(), ["cuda", "nvcuda"]);
    }

    #[test]
    fn a_symbol_is_found_in_the_process_only_when_something_linked_exports_it() {
        // The C library is linked into every test binary; no library exports this name.
        assert!(linked_into_process("malloc"));
        assert!(!linked_into_process("vramguard_no_such_symbol"));
    }

    #[test]
    fn the_driver_is_present_exactly_when_a_context_finds_it() {
        // Without CUDA (the workspace's tests off the fake) both say no driver; with one,
        // `open_context` goes on to `cuInit` and fails on the ordinal instead.
        let present = library_present(CudaLibrary::Driver);
        let opened = open_context(usize::MAX);
        assert_eq!(present, !matches!(opened, Err(ContextError::NoDriver)));
    }
}
