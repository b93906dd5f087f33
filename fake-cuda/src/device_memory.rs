//! The device's physical memory and the address space its memory is mapped at.
//!
//! Physical memory is one sparse memfd the size of the device (`FAKE_CUDA_MEMORY`), handed out
//! in extents of whole 2 MiB granules ([`Physical`]); an extent's pages take host memory only
//! once touched, and go back (a punched hole) when the extent is freed. Device addresses are
//! host addresses, so that the kernels' host builds dereference them: an extent is mapped
//! (`MAP_SHARED`) into address space reserved with `PROT_NONE` and `MAP_NORESERVE`. Address
//! space is never given back: a freed or unmapped range returns to an inaccessible
//! reservation, so a later touch faults and the address is never handed out again.

use crate::config::GRANULE;
use std::collections::BTreeMap;
use std::io;

/// Whole granules of the device memory file: `[offset, offset + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Byte offset in the device memory file.
    pub offset: usize,
    /// Bytes, a multiple of [`GRANULE`].
    pub len: usize,
}

/// The device's physical memory: a memfd and its free extents.
#[derive(Debug)]
pub struct Physical {
    fd: libc::c_int,
    total: usize,
    /// Free extents by offset (coalesced).
    free: BTreeMap<usize, usize>,
    used: usize,
}

/// `bytes` rounded up to whole granules (at least one).
pub fn granules(bytes: usize) -> usize {
    bytes.max(1).div_ceil(GRANULE) * GRANULE
}

impl Physical {
    /// A device of `total` bytes (a multiple of [`GRANULE`]).
    pub fn new(total: usize) -> io::Result<Physical> {
        // SAFETY: a NUL-terminated name; the flags are valid.
        let fd =
            unsafe { libc::memfd_create(c"fake-cuda-device-memory".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is the memfd just created; growing it allocates nothing (sparse).
        if unsafe { libc::ftruncate(fd, total as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Physical {
            fd,
            total,
            free: BTreeMap::from([(0, total)]),
            used: 0,
        })
    }

    /// Device memory in bytes.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes in extents handed out.
    pub fn used(&self) -> usize {
        self.used
    }

    /// An extent of `bytes` rounded up to whole granules, or `None` when no free extent is
    /// that large (nothing changes then).
    pub fn alloc(&mut self, bytes: usize) -> Option<Extent> {
        let len = granules(bytes);
        let (&offset, &free) = self.free.iter().find(|(_, &l)| l >= len)?;
        self.free.remove(&offset);
        if free > len {
            self.free.insert(offset + len, free - len);
        }
        self.used += len;
        Some(Extent { offset, len })
    }

    /// Returns `extent` (unmapped everywhere) to the free list and its pages to the host.
    pub fn free(&mut self, extent: Extent) {
        // SAFETY: punches a hole in our own memfd over an extent nothing maps anymore.
        unsafe {
            libc::fallocate(
                self.fd,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                extent.offset as libc::off_t,
                extent.len as libc::off_t,
            );
        }
        self.used -= extent.len;
        let (mut offset, mut len) = (extent.offset, extent.len);
        if let Some((&before, &before_len)) = self.free.range(..offset).next_back() {
            if before + before_len == offset {
                self.free.remove(&before);
                offset = before;
                len += before_len;
            }
        }
        if let Some(&after_len) = self.free.get(&(offset + len)) {
            self.free.remove(&(offset + len));
            len += after_len;
        }
        self.free.insert(offset, len);
    }

    /// Maps `len` bytes of the device memory file from `file_offset` at `addr` (inside a
    /// reservation), with protection `prot`.
    ///
    /// # Safety
    /// `[addr, addr + len)` is reserved address space of the fake's that holds nothing else.
    pub unsafe fn map_at(
        &self,
        addr: u64,
        len: usize,
        file_offset: usize,
        prot: i32,
    ) -> io::Result<()> {
        // SAFETY: per the contract, replacing the reservation's pages harms nothing.
        let at = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                len,
                prot,
                libc::MAP_SHARED | libc::MAP_FIXED,
                self.fd,
                file_offset as libc::off_t,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Reserves `len` bytes of address space aligned to `align` (a power of two), inaccessible and
/// committing no memory. The alignment slack stays reserved too.
pub fn reserve(len: usize, align: usize) -> io::Result<u64> {
    let align = align.max(4096);
    let span = len
        .checked_add(align)
        .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
    // SAFETY: an anonymous inaccessible mapping at an address of the kernel's choice.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if at == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok((at as u64).next_multiple_of(align as u64))
}

/// Makes `[addr, addr + len)` an inaccessible reservation again, dropping whatever was mapped
/// there (its pages stay in the device memory file until the extent is freed).
///
/// # Safety
/// The range is the fake's own address space.
pub unsafe fn unmap_to_reservation(addr: u64, len: usize) -> io::Result<()> {
    // SAFETY: per the contract.
    let at = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if at == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the protection of `[addr, addr + len)`.
///
/// # Safety
/// The range is the fake's own mapped address space.
pub unsafe fn protect(addr: u64, len: usize, prot: i32) -> io::Result<()> {
    // SAFETY: per the contract.
    if unsafe { libc::mprotect(addr as *mut libc::c_void, len, prot) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_are_whole_granules_and_coalesce_when_freed() {
        let mut p = Physical::new(8 * GRANULE).unwrap();
        let a = p.alloc(1).unwrap();
        let b = p.alloc(GRANULE + 1).unwrap();
        let c = p.alloc(3 * GRANULE).unwrap();
        assert_eq!((a.len, b.len, c.len), (GRANULE, 2 * GRANULE, 3 * GRANULE));
        assert_eq!(p.used(), 6 * GRANULE);
        assert_eq!(p.alloc(3 * GRANULE), None, "only two granules are left");
        assert_eq!(p.used(), 6 * GRANULE, "a refused request changes nothing");
        p.free(b);
        p.free(a);
        assert_eq!(
            p.alloc(3 * GRANULE).map(|e| e.offset),
            Some(0),
            "a and b merged"
        );
        p.free(c);
        assert_eq!(p.used(), 3 * GRANULE);
    }

    #[test]
    fn mapped_pages_are_shared_with_the_file_and_faultless_only_while_accessible() {
        let p = Physical::new(4 * GRANULE).unwrap();
        let at = reserve(2 * GRANULE, GRANULE).unwrap();
        assert_eq!(at % GRANULE as u64, 0);
        // SAFETY: our reservation; the test only writes to it while mapped read-write.
        unsafe {
            p.map_at(at, GRANULE, GRANULE, libc::PROT_READ | libc::PROT_WRITE)
                .unwrap();
            *(at as *mut u32) = 0xfeed;
            // The same file pages mapped a second time read what was written.
            p.map_at(at + GRANULE as u64, GRANULE, GRANULE, libc::PROT_READ)
                .unwrap();
            assert_eq!(*((at + GRANULE as u64) as *const u32), 0xfeed);
            unmap_to_reservation(at, 2 * GRANULE).unwrap();
        }
    }
}
