//! The Rust call site of an allocation the observer sees, when asked for
//! ([`super::ObserverOptions::call_sites`]): the innermost frame of the allocating thread's
//! stack that is the program's own code — not the standard library, not a crate from the
//! registry (candle, cudarc, burn, tch), not vramguard's runtime, not a C library (no source
//! file), not the driver's or CUPTI's own frames (told by the shared object they are in, which
//! matters where the driver has Rust sources: the fake driver of the tests).
//!
//! Walking the stack costs a few microseconds per allocation (the frames' return addresses
//! only); symbolising it (reading debug info) happens once per distinct stack, whose site is
//! then cached. A binary built without line tables has no sites to show.

use crate::alloc::AllocOrigin;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard};

/// Frames looked at, innermost first: the callback's own, the driver's and CUPTI's, the
/// library's, then the program's.
const MAX_FRAMES: usize = 64;

/// A resolved site: file, line, column.
type Site = (&'static str, u32, u32);

static SITES: Mutex<Option<HashMap<Vec<usize>, Option<Site>>>> = Mutex::new(None);
/// Load addresses of the driver's and CUPTI's shared objects.
static LIBRARIES: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static FILES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The call site of the allocation being made on this thread by `api`.
pub(crate) fn capture(api: &'static str) -> Option<AllocOrigin> {
    let mut stack = Vec::with_capacity(MAX_FRAMES);
    backtrace::trace(|frame| {
        stack.push(frame.ip() as usize);
        stack.len() < MAX_FRAMES
    });
    let cached = lock(&SITES)
        .get_or_insert_with(HashMap::new)
        .get(&stack)
        .copied();
    let site = match cached {
        Some(site) => site,
        None => {
            // Resolved without the cache's lock held: symbolising may take milliseconds.
            let site = resolve(&stack);
            lock(&SITES)
                .get_or_insert_with(HashMap::new)
                .insert(stack, site);
            site
        }
    }?;
    Some(AllocOrigin {
        file: site.0,
        line: site.1,
        column: site.2,
        op: api,
        shape: None,
    })
}

/// Notes the shared objects of the driver and of CUPTI (loaded by now): their frames are
/// never a call site.
pub(crate) fn note_libraries() {
    let mut bases = Vec::new();
    // SAFETY: both libraries are loaded (the driver was initialised, CUPTI probed); looking a
    // symbol up only reads their tables.
    unsafe {
        let driver = cudarc::driver::sys::culib().get::<*const c_void>(b"cuInit");
        let cupti = cudarc::cupti::sys::culib().get::<*const c_void>(b"cuptiSubscribe");
        for symbol in [driver, cupti].into_iter().flatten() {
            bases.extend(object_of(*symbol as usize));
        }
    }
    *lock(&LIBRARIES) = bases;
}

/// The load address of the shared object that holds `address`.
#[cfg(unix)]
fn object_of(address: usize) -> Option<usize> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: `dladdr` only reads the loader's tables and writes `info`.
    let found = unsafe { libc::dladdr(address as *const c_void, &mut info) };
    (found != 0).then_some(info.dli_fbase as usize)
}

#[cfg(not(unix))]
fn object_of(_address: usize) -> Option<usize> {
    None
}

/// The innermost frame of `stack` that is the program's own code.
fn resolve(stack: &[usize]) -> Option<Site> {
    let libraries = lock(&LIBRARIES).clone();
    for &ip in stack {
        if object_of(ip).is_some_and(|base| libraries.contains(&base)) {
            continue;
        }
        let mut found = None;
        backtrace::resolve(ip as *mut c_void, |symbol| {
            if found.is_some() {
                return;
            }
            let (Some(file), Some(line)) = (symbol.filename(), symbol.lineno()) else {
                return;
            };
            let file = file.to_string_lossy();
            if is_program_code(&file) {
                found = Some((intern(&file), line, symbol.colno().unwrap_or(0)));
            }
        });
        if found.is_some() {
            return found;
        }
    }
    None
}

/// Whether a source file is the program's own: not the standard library, not a dependency
/// from a registry or git, not this crate's sources.
fn is_program_code(file: &str) -> bool {
    let runtime_sources = concat!(env!("CARGO_MANIFEST_DIR"), "/src/");
    let foreign = [
        "/.cargo/registry/",
        "/.cargo/git/",
        "/rustc/",
        "/library/std/",
        "/library/core/",
        "/library/alloc/",
    ];
    !file.starts_with(runtime_sources) && !foreign.iter().any(|f| file.contains(f))
}

/// A file name kept for the process's life (one copy per distinct file).
fn intern(file: &str) -> &'static str {
    let mut files = lock(&FILES);
    let files = files.get_or_insert_with(HashSet::new);
    if let Some(kept) = files.get(file) {
        return kept;
    }
    let kept: &'static str = Box::leak(file.to_owned().into_boxed_str());
    files.insert(kept);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_site_is_the_first_frame_of_the_programs_own_code() {
        assert!(!is_program_code(
            "/root/.cargo/registry/src/index.crates.io-1/candle-core-0.11.1/src/tensor.rs"
        ));
        assert!(!is_program_code(
            "/rustc/abc/library/core/src/ops/function.rs"
        ));
        assert!(!is_program_code(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/observer/callback.rs"
        )));
        assert!(is_program_code("/home/me/model/src/main.rs"));
        assert!(is_program_code(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/cuda_observer.rs"
        )));
    }
}
