//! The driver's injection hook: at the first successful `cuInit` of the process, a library
//! named by `CUDA_INJECTION64_PATH` is loaded and its `int InitializeInjection(void)` called
//! once, as NVIDIA's driver does for its tools (Nsight, CUPTI-based tracers; vramguard's
//! `cargo vramguard measure --device cuda` attaches the GPU observer this way).
//!
//! What NVIDIA documents of it is little: the variable, the entry point's name, and (in the
//! CUPTI samples) that it returns 1 when it succeeded. The fake does what tools report the
//! driver doing: an empty variable is no injection; a path that does not load, or a library
//! without `InitializeInjection`, is ignored without a word (`FAKE_CUDA_LOG=1` prints why); the
//! entry point's return value changes nothing. It is called after `cuInit` has marked the
//! driver initialised and released the fake's lock, so the library may call the driver and
//! CUPTI (`cuptiSubscribe`, a nested `cuInit`, which returns at once).

use std::ffi::{c_int, CStr, CString};

/// The variable the driver reads at `cuInit`.
pub const INJECTION_ENV: &str = "CUDA_INJECTION64_PATH";

/// What loading an injection library did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injection {
    /// `InitializeInjection` was called and returned this.
    Called(c_int),
    /// The library did not load (`dlerror`'s text).
    NotLoaded(String),
    /// The library has no `InitializeInjection`.
    NoEntryPoint,
}

/// Loads `path` (`RTLD_NOW | RTLD_LOCAL`, never unloaded) and calls its `InitializeInjection`.
///
/// # Safety
/// Runs the library's initialisers and its entry point: `path` must name a library whose
/// `InitializeInjection`, if it has one, is `int InitializeInjection(void)` and sound to call.
pub unsafe fn inject(path: &CStr) -> Injection {
    // SAFETY: `path` is a NUL-terminated string; loading runs the library's initialisers, which
    // the caller vouches for.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: `dlerror` returns null or a NUL-terminated string valid until the next dl call.
        let error = unsafe { libc::dlerror() };
        let text = if error.is_null() {
            "unknown error".to_string()
        } else {
            // SAFETY: non-null, NUL-terminated (above).
            unsafe { CStr::from_ptr(error) }
                .to_string_lossy()
                .into_owned()
        };
        return Injection::NotLoaded(text);
    }
    // SAFETY: a handle `dlopen` just returned; the name is NUL-terminated.
    let entry = unsafe { libc::dlsym(handle, c"InitializeInjection".as_ptr()) };
    if entry.is_null() {
        return Injection::NoEntryPoint;
    }
    // SAFETY: the driver's contract for the symbol: `int InitializeInjection(void)`, C ABI.
    let initialize: extern "C" fn() -> c_int = unsafe { std::mem::transmute(entry) };
    Injection::Called(initialize())
}

/// At the first successful `cuInit`, with no lock of the fake held: loads the library that
/// [`INJECTION_ENV`] names, if any (see the module documentation).
pub(crate) fn at_first_init() {
    let Some(path) = std::env::var_os(INJECTION_ENV).filter(|p| !p.is_empty()) else {
        return;
    };
    let Ok(path) = CString::new(std::os::unix::ffi::OsStringExt::into_vec(path)) else {
        return;
    };
    // SAFETY: naming the library in CUDA_INJECTION64_PATH asks for exactly this, as it does of
    // the driver.
    let outcome = unsafe { inject(&path) };
    if crate::state::config().log {
        eprintln!(
            "fake cuda: cuInit: {INJECTION_ENV}={}: {outcome:?}",
            path.to_string_lossy()
        );
    }
}
