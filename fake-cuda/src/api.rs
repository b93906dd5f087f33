//! The one door of every exported function: [`call`] runs a driver (or cuBLAS) function's body
//! knowing its name and its parameters, so that
//!
//! - `FAKE_CUDA_FAIL` can fail any call by name before it does anything;
//! - a breach of the rules is printed (`fake cuda: NAME: what was wrong`) and its code returned;
//! - a panic in the fake becomes `CUDA_ERROR_UNKNOWN` instead of unwinding into C;
//! - `FAKE_CUDA_LOG=1` prints every call and its result;
//! - an [`Observer`] sees every call on entry and on exit with a pointer to its parameters, laid
//!   out as CUPTI's `NAME_params` structs (the parameters in order, `#[repr(C)]`): the seam for
//!   a fake CUPTI exported from this same library (issue #39).
//!
//! The `exports!` macro defines each exported function, its parameter struct (in the calling
//! module's `params`) and its passage through [`call`].

use crate::errors::{self, CallResult, CuResult};
use crate::state::config;
use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, RwLock};

/// Which side of a call an observer sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before the body runs.
    Enter,
    /// After it returned `result`.
    Exit {
        /// The status returned.
        result: CuResult,
    },
}

/// One exported call, as an observer sees it.
#[derive(Debug, Clone, Copy)]
pub struct CallSite {
    /// The exported name (`cuMemAlloc_v2`).
    pub name: &'static str,
    /// The parameters, as `params::NAME` (CUPTI's `NAME_params` layout).
    pub params: *const c_void,
    /// Entry or exit.
    pub phase: Phase,
}

/// A function told of every call (a fake CUPTI's dispatcher). It must not call back into the
/// driver's exported functions on the same thread (they would wait for the lock).
pub type Observer = fn(&CallSite);

static OBSERVER: RwLock<Option<Observer>> = RwLock::new(None);

/// Installs (or, with `None`, removes) the observer of every call.
pub fn set_observer(observer: Option<Observer>) {
    *OBSERVER.write().unwrap_or_else(|e| e.into_inner()) = observer;
}

fn observe(site: CallSite) {
    let observer = *OBSERVER.read().unwrap_or_else(|e| e.into_inner());
    if let Some(observer) = observer {
        observer(&site);
    }
}

static CALLS: Mutex<Option<HashMap<&'static str, u64>>> = Mutex::new(None);
static INJECTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Calls failed by `FAKE_CUDA_FAIL` so far.
pub fn injected_failures() -> u64 {
    INJECTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// The error `FAKE_CUDA_FAIL` injects into this call of `name`, if any.
fn injected(name: &'static str) -> Option<CuResult> {
    let rules = &config().failures;
    if rules.is_empty() {
        return None;
    }
    let mut calls = CALLS.lock().unwrap_or_else(|e| e.into_inner());
    let count = calls
        .get_or_insert_with(HashMap::new)
        .entry(name)
        .or_insert(0);
    *count += 1;
    let rule = rules.iter().find(|r| r.matches(name, *count))?;
    let allocates = ["Alloc", "Create", "Reserve"]
        .iter()
        .any(|w| name.contains(w));
    Some(rule.error.unwrap_or(if allocates {
        errors::OUT_OF_MEMORY
    } else {
        errors::UNKNOWN
    }))
}

/// Runs the body of exported function `name` (parameters at `params`): see the module
/// documentation. `unknown` is the code of an internal failure (`CUDA_ERROR_UNKNOWN`, or
/// cuBLAS's internal error).
pub fn call(
    name: &'static str,
    params: *const c_void,
    unknown: CuResult,
    body: impl FnOnce() -> CallResult,
) -> CuResult {
    observe(CallSite {
        name,
        params,
        phase: Phase::Enter,
    });
    let result = if let Some(code) = injected(name) {
        eprintln!(
            "fake cuda: {name}: failed by FAKE_CUDA_FAIL with {}",
            errors::name_or_number(code)
        );
        INJECTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        code
    } else {
        match catch_unwind(AssertUnwindSafe(body)) {
            Ok(Ok(())) => errors::SUCCESS,
            Ok(Err(fail)) => {
                if let Some(message) = fail.message {
                    eprintln!("fake cuda: {name}: {message}");
                }
                fail.code
            }
            Err(panic) => {
                let text = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                eprintln!("fake cuda: {name}: internal error of the fake: {text}");
                unknown
            }
        }
    };
    if config().log {
        eprintln!(
            "fake cuda: call {name} -> {}",
            errors::name_or_number(result)
        );
    }
    observe(CallSite {
        name,
        params,
        phase: Phase::Exit { result },
    });
    result
}

/// Defines exported functions: for each `fn NAME(args) -> STATUS { body }` (the body a
/// [`CallResult`]), the parameter struct `params::NAME` and the `#[no_mangle] extern "C"`
/// function that passes through [`call`].
macro_rules! exports {
    (unknown = $unknown:expr; $( $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block )*) => {
        /// The parameters of each exported function, in order: CUPTI's `NAME_params`.
        #[allow(non_camel_case_types, dead_code)]
        pub mod params {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[doc = concat!("The parameters of `", stringify!($name), "`.")]
                #[repr(C)]
                #[derive(Clone, Copy)]
                pub struct $name { $(#[doc = stringify!($arg)] pub $arg: $ty),* }
            )*
        }
        $(
            $(#[$doc])*
            ///
            /// # Safety
            /// As the CUDA function of the same name: pointers valid for what it reads and writes.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::errors::CuResult {
                let site = params::$name { $($arg),* };
                $crate::api::call(stringify!($name), (&site as *const params::$name).cast(), $unknown, move || {
                    #[allow(unused_variables)]
                    let params::$name { $($arg),* } = site;
                    $body
                })
            }
        )*
    };
}
pub(crate) use exports;
