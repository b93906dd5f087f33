//! Host backend: aligned host memory, optionally bounded to behave as a device of N bytes.
//!
//! On Unix it also maps pages into reserved address space (`mmap(PROT_NONE)`, then `mprotect`
//! to commit and `madvise(MADV_DONTNEED)` + `mprotect(PROT_NONE)` to give pages back), which is
//! what expandable segments use.

use super::{Backend, BackendError, VirtualMemory};
use std::alloc::{GlobalAlloc, Layout, System};
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

impl HostBackend {
    /// Counts `bytes` against the capacity, or refuses them.
    fn charge(&self, bytes: usize) -> Result<(), BackendError> {
        if let Some(cap) = self.capacity {
            let reserved = self.in_use.fetch_add(bytes, Ordering::SeqCst);
            if reserved.saturating_add(bytes) > cap {
                self.in_use.fetch_sub(bytes, Ordering::SeqCst);
                return Err(BackendError::OutOfMemory { requested: bytes });
            }
        }
        Ok(())
    }

    fn uncharge(&self, bytes: usize) {
        if self.capacity.is_some() {
            self.in_use.fetch_sub(bytes, Ordering::SeqCst);
        }
    }

    /// Bytes currently held (segments plus mapped pages), when the capacity is bounded.
    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::SeqCst)
    }
}

/// Mapping granularity of the host backend: 2 MiB, as CUDA's VMM granularity on most GPUs.
pub const HOST_MAP_GRANULARITY: usize = 2 << 20;

// SAFETY: ranges come from `mmap` of fresh anonymous memory; mapped pages are made readable
// and writable by `mprotect`, and only this backend touches their protection.
#[cfg(unix)]
unsafe impl VirtualMemory for HostBackend {
    fn granularity(&self) -> usize {
        HOST_MAP_GRANULARITY
    }
    fn reserve_range(&self, bytes: usize) -> Result<u64, BackendError> {
        // SAFETY: an anonymous private PROT_NONE mapping at an address the kernel picks touches
        // no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(BackendError::driver(
                format!("mmap of {bytes} bytes of address space"),
                std::io::Error::last_os_error().to_string(),
            ));
        }
        Ok(p as u64)
    }
    unsafe fn release_range(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        // SAFETY: the caller passes a range from `reserve_range` that nothing uses.
        if unsafe { libc::munmap(addr as *mut libc::c_void, bytes) } != 0 {
            return Err(BackendError::driver(
                format!("munmap of {bytes} bytes at {addr:#x}"),
                std::io::Error::last_os_error().to_string(),
            ));
        }
        Ok(())
    }
    unsafe fn map(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        self.charge(bytes)?;
        // SAFETY: the caller passes an unmapped part of a reserved range.
        let rc = unsafe {
            libc::mprotect(
                addr as *mut libc::c_void,
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            self.uncharge(bytes);
            let err = std::io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::ENOMEM) => BackendError::OutOfMemory { requested: bytes },
                _ => BackendError::driver(
                    format!("mprotect of {bytes} bytes at {addr:#x}"),
                    err.to_string(),
                ),
            });
        }
        Ok(())
    }
    unsafe fn unmap(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        // SAFETY: the caller passes a mapped range nothing uses anymore: its pages may be
        // dropped and the range made inaccessible again.
        let failed = unsafe {
            libc::madvise(addr as *mut libc::c_void, bytes, libc::MADV_DONTNEED) != 0
                || libc::mprotect(addr as *mut libc::c_void, bytes, libc::PROT_NONE) != 0
        };
        if failed {
            return Err(BackendError::driver(
                format!("madvise/mprotect(PROT_NONE) of {bytes} bytes at {addr:#x}"),
                std::io::Error::last_os_error().to_string(),
            ));
        }
        self.uncharge(bytes);
        Ok(())
    }
}

// SAFETY: segments come from the global allocator (disjoint, `HOST_ALIGN`-aligned, host
// memory) and go back to it only in `free_segment`.
unsafe impl Backend for HostBackend {
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
        let layout = Layout::from_size_align(bytes.max(1), HOST_ALIGN).map_err(|_| oom.clone())?;
        self.charge(bytes)?;
        // `System`, not the global allocator: with `heap::TrackingAllocator` installed, the
        // device's memory is counted by the device alone, not a second time as heap.
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { System.alloc(layout) };
        if ptr.is_null() {
            self.uncharge(bytes);
            return Err(oom);
        }
        Ok(ptr as u64)
    }
    fn free_memory(&self) -> Option<usize> {
        self.capacity.map(|c| c.saturating_sub(self.in_use()))
    }
    #[cfg(unix)]
    fn virtual_memory(&self) -> Option<&dyn VirtualMemory> {
        Some(self)
    }
    unsafe fn free_segment(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        let layout = Layout::from_size_align(bytes.max(1), HOST_ALIGN).map_err(|e| {
            BackendError::driver(format!("freeing {bytes} bytes at {addr:#x}"), e.to_string())
        })?;
        self.uncharge(bytes);
        // SAFETY: the caller guarantees `addr` came from `alloc_segment(bytes)`, which used
        // this same layout.
        unsafe { System.dealloc(addr as *mut u8, layout) };
        Ok(())
    }
}
