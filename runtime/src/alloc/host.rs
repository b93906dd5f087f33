//! Host backend: aligned host memory, optionally bounded to behave as a device of N bytes.

use super::{Backend, BackendError};
use std::alloc::Layout;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Alignment of host segments; matches what CUDA guarantees for device allocations.
pub const HOST_ALIGN: usize = 256;

/// Host memory as a device.
#[derive(Debug, Default)]
pub struct HostBackend {
    capacity: Option<usize>,
    in_use: AtomicUsize,
}

impl HostBackend {
    /// Unbounded host memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Host memory that refuses to hold more than `capacity` bytes at once.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            capacity: Some(capacity),
            in_use: AtomicUsize::new(0),
        }
    }
}

impl Backend for HostBackend {
    fn name(&self) -> String {
        "host".to_string()
    }
    fn capacity(&self) -> Option<usize> {
        self.capacity
    }
    fn host_addressable(&self) -> bool {
        true
    }
    fn alloc_segment(&self, bytes: usize) -> Result<u64, BackendError> {
        let oom = BackendError::OutOfMemory { requested: bytes };
        if let Some(cap) = self.capacity {
            let reserved = self.in_use.fetch_add(bytes, Ordering::SeqCst);
            if reserved + bytes > cap {
                self.in_use.fetch_sub(bytes, Ordering::SeqCst);
                return Err(oom);
            }
        }
        let layout = Layout::from_size_align(bytes.max(1), HOST_ALIGN).map_err(|_| oom)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            if self.capacity.is_some() {
                self.in_use.fetch_sub(bytes, Ordering::SeqCst);
            }
            return Err(BackendError::OutOfMemory { requested: bytes });
        }
        Ok(ptr as u64)
    }
    unsafe fn free_segment(&self, addr: u64, bytes: usize) {
        if self.capacity.is_some() {
            self.in_use.fetch_sub(bytes, Ordering::SeqCst);
        }
        if let Ok(layout) = Layout::from_size_align(bytes.max(1), HOST_ALIGN) {
            // SAFETY: the caller guarantees `addr` came from `alloc_segment(bytes)`, which used
            // this same layout.
            unsafe { std::alloc::dealloc(addr as *mut u8, layout) };
        }
    }
}
