//! The thread's label handed to a GPU observer the CUDA driver injected
//! (`cargo vramguard measure --device cuda`): that observer lives in another copy of vramguard
//! (the injection library's), whose thread labels the program never sets. When
//! `CUDA_INJECTION64_PATH` names a library the driver has loaded and that library exports
//! `vramguard_gpu_report_label_source`, this copy hands it [`render_thread_label`] once, and
//! the injected observer labels each allocation with this copy's label (`scope::tag`,
//! `#[batch_scope]` iterations), as its text. Looked for when a label is pushed and after the
//! CUDA backend's `cuInit`, until found (or until the library turns out not to export it).

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::OnceLock;

/// The function an injection library exports to receive [`render_thread_label`].
const REGISTER_SYMBOL: &CStr = c"vramguard_gpu_report_label_source";

/// Writes the calling thread's label (UTF-8) into a buffer of the given length, truncated to
/// fit; returns the label's whole length in bytes (0: no label).
type LabelSource = extern "C" fn(*mut u8, usize) -> usize;

/// Whether the search is over (handed over, or the library does not take it).
static DONE: AtomicBool = AtomicBool::new(false);

/// `CUDA_INJECTION64_PATH`, read once.
fn injection_path() -> Option<&'static CStr> {
    static PATH: OnceLock<Option<CString>> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = std::env::var_os("CUDA_INJECTION64_PATH").filter(|p| !p.is_empty())?;
        CString::new(std::os::unix::ffi::OsStringExt::into_vec(path)).ok()
    })
    .as_deref()
}

/// Hands `render_thread_label` to the injection library, if the driver has loaded one that
/// takes it. Cheap once done, and without the variable.
#[doc(hidden)]
pub fn offer_label_source() {
    if DONE.load(Relaxed) {
        return;
    }
    let Some(path) = injection_path() else {
        DONE.store(true, Relaxed);
        return;
    };
    // SAFETY: `RTLD_NOLOAD` only finds a library already loaded (by the driver, at `cuInit`):
    // nothing is loaded or initialised here.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return; // not loaded yet: the program has not called cuInit
    }
    // SAFETY: a handle `dlopen` returned; the name is NUL-terminated.
    let symbol = unsafe { libc::dlsym(handle, REGISTER_SYMBOL.as_ptr()) };
    if !symbol.is_null() {
        // SAFETY: the injection library `cargo vramguard measure` generates defines the symbol
        // as `extern "C" fn(LabelSource)`, from the same vramguard source as this copy.
        let register: extern "C" fn(LabelSource) = unsafe { std::mem::transmute(symbol) };
        register(render_thread_label);
    }
    DONE.store(true, Relaxed);
    // SAFETY: drops the reference `dlopen` took; the driver's own keeps the library loaded.
    unsafe { libc::dlclose(handle) };
}

/// A [`LabelSource`]: this copy's label of the calling thread.
extern "C" fn render_thread_label(buf: *mut u8, len: usize) -> usize {
    let text = std::panic::catch_unwind(|| super::thread_label().map(|l| l.to_string()));
    let Ok(Some(text)) = text else {
        return 0;
    };
    if !buf.is_null() {
        let n = text.len().min(len);
        // SAFETY: the caller passes a buffer of `len` writable bytes; `n <= len`, and `text`
        // holds at least `n` bytes.
        unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), buf, n) };
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_source_writes_the_threads_label_truncated_to_the_buffer() {
        let previous = super::super::push_label(Arc::from("forward"), None);
        let mut buf = [0u8; 4];
        assert_eq!(render_thread_label(buf.as_mut_ptr(), buf.len()), 7);
        assert_eq!(&buf, b"forw");
        super::super::restore_label(previous);
        assert_eq!(render_thread_label(buf.as_mut_ptr(), buf.len()), 0);
    }
}
