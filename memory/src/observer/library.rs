//! Finding `libcupti` and holding CUPTI's callback API: the subscription, the enabled
//! callbacks, and the errors of each step.
//!
//! cudarc opens `libcupti.so` by its usual names (the dynamic loader's paths:
//! `LD_LIBRARY_PATH`, the system's library folders) and panics without it, so its presence is
//! probed first (`crate::driver::library_present`). The CUDA toolkit keeps CUPTI apart, in `extras/CUPTI/lib64`, which is rarely
//! on those paths: that folder under `CUDA_HOME` (or `CUDA_PATH`) is tried too, by loading the
//! library from it before cudarc asks for it by name.

use super::calls::SUBSCRIBED;
use super::ObserverError;
use crate::driver::{library_present, CudaLibrary};
use cudarc::cupti::{result, sys};
use std::path::PathBuf;

/// The subscriber handle, while the observer holds CUPTI.
pub(crate) struct Subscription(sys::CUpti_SubscriberHandle);

// SAFETY: a CUPTI subscriber handle is an opaque value usable from any thread (CUPTI's API is
// thread-safe); it is only passed back to CUPTI.
unsafe impl Send for Subscription {}

/// Where `libcupti` was looked for, for the error that says it is missing.
fn searched() -> String {
    let mut places =
        vec!["libcupti.so on LD_LIBRARY_PATH and the system's library paths".to_string()];
    for dir in toolkit_dirs() {
        places.push(dir.display().to_string());
    }
    places.join(", ")
}

/// `extras/CUPTI/lib64` under `CUDA_HOME` and `CUDA_PATH`, where set.
fn toolkit_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for root in ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
    {
        if root.is_empty() {
            continue;
        }
        let dir = PathBuf::from(root).join("extras/CUPTI/lib64");
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// Whether cudarc can open `libcupti`, after loading it from the toolkit's folder if the
/// loader's paths do not have it.
pub(crate) fn cupti_present() -> Result<(), ObserverError> {
    if library_present(CudaLibrary::Cupti) {
        return Ok(());
    }
    for dir in toolkit_dirs() {
        if preload_from(&dir) {
            // The library loaded from the folder answers to its soname.
            if library_present(CudaLibrary::Cupti) {
                return Ok(());
            }
        }
    }
    Err(ObserverError::NoCupti {
        searched: searched(),
    })
}

/// Loads the first `libcupti.so*` of `dir` for the process (never unloaded), so that cudarc's
/// later `dlopen` by soname finds it.
#[cfg(unix)]
fn preload_from(dir: &std::path::Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut candidates: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libcupti.so"))
        })
        .collect();
    candidates.sort();
    candidates.into_iter().any(|path| {
        let Ok(path) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
            return false;
        };
        // SAFETY: loads a shared library by path; its initialisers are NVIDIA's (the library
        // the program asked to be observed with), and the handle is kept for the process.
        !unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) }.is_null()
    })
}

#[cfg(not(unix))]
fn preload_from(_dir: &std::path::Path) -> bool {
    false
}

/// CUPTI's name of a result code.
fn name(code: sys::CUptiResult) -> String {
    format!("{code:?}")
}

/// Subscribes the observer's callback and enables its callbacks; undone on failure.
pub(crate) fn subscribe() -> Result<Subscription, ObserverError> {
    let mut handle: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: `handle` is valid for the write; the callback is `extern "C"`, never unwinds,
    // and ignores its user data.
    let subscribed = unsafe {
        result::subscribe(
            &mut handle,
            Some(super::callback::callback),
            std::ptr::null_mut(),
        )
    };
    match subscribed {
        Ok(()) => {}
        Err(e) if e.0 == sys::CUptiResult::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => {
            return Err(ObserverError::SubscriberTaken)
        }
        Err(e) => {
            return Err(ObserverError::Cupti {
                op: "cuptiSubscribe",
                code: name(e.0),
            })
        }
    }
    let subscription = Subscription(handle);
    for s in SUBSCRIBED {
        // SAFETY: the subscriber just created; the domain values are CUPTI's (`calls.rs`).
        let domain = if s.domain == super::calls::DRIVER_DOMAIN {
            sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API
        } else {
            sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API
        };
        // SAFETY: as above.
        if let Err(e) = unsafe { result::enable_callback(1, handle, domain, s.cbid) } {
            subscription.end();
            return Err(ObserverError::Cupti {
                op: "cuptiEnableCallback",
                code: name(e.0),
            });
        }
    }
    Ok(subscription)
}

impl Subscription {
    /// Unsubscribes: no callback from now on.
    pub(crate) fn end(self) {
        // SAFETY: the handle `cuptiSubscribe` returned, unsubscribed once (this consumes it).
        if let Err(e) = unsafe { result::unsubscribe(self.0) } {
            crate::diagnostics::warn(
                crate::diagnostics::WarningOutput::Auto,
                &format!("the observer's cuptiUnsubscribe failed with {}", name(e.0)),
            );
        }
    }
}
