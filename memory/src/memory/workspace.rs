//! `Workspace`: one buffer preallocated at the largest size a loop needs, handed out as views
//! of any size up to it (preallocate and slice, as `cache[:b, :t, :]` of one buffer does in
//! PyTorch), so variable shapes never fragment
//! the pool.

use crate::alloc::OutOfMemory;
use crate::device::{Allocation, Device};
use std::marker::PhantomData;

/// Alignment of every view's start.
pub const VIEW_ALIGN: usize = 256;

/// A buffer allocated once and reused for every batch.
///
/// Views borrow the workspace mutably, so two views can never alias: take one with
/// [`Workspace::view`], or several non-overlapping ones at once with [`Workspace::views`].
#[derive(Debug)]
pub struct Workspace {
    allocation: Allocation,
    capacity: usize,
}

/// A view of a workspace request that does not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkspaceError {
    /// The views need more bytes than the workspace holds.
    #[error("workspace views need {needed} bytes but the workspace holds {capacity}: create it with the largest size the loop needs (run one max-size batch to find it)")]
    TooLarge {
        /// Bytes the views need (with alignment padding).
        needed: usize,
        /// Workspace size.
        capacity: usize,
    },
}

impl Workspace {
    /// Allocates `bytes` bytes on `device` once. On host devices the memory is zeroed.
    pub fn new(device: &Device, bytes: usize) -> Result<Workspace, OutOfMemory> {
        let allocation = device.allocate(bytes)?;
        if let Some(ptr) = allocation.host_ptr() {
            // SAFETY: the allocation holds at least `bytes` writable host bytes and nothing else
            // refers to it yet.
            unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
        }
        Ok(Workspace {
            allocation,
            capacity: bytes,
        })
    }

    /// Usable bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The underlying allocation.
    pub fn allocation(&self) -> &Allocation {
        &self.allocation
    }

    /// A view of the first `bytes` bytes.
    pub fn view(&mut self, bytes: usize) -> Result<WorkspaceView<'_>, WorkspaceError> {
        let [v] = self.views([bytes])?;
        Ok(v)
    }

    /// `N` non-overlapping views of the given sizes, each starting on a 256-byte boundary.
    pub fn views<const N: usize>(
        &mut self,
        sizes: [usize; N],
    ) -> Result<[WorkspaceView<'_>; N], WorkspaceError> {
        let mut offsets = [0usize; N];
        let mut at = 0usize;
        for (i, &s) in sizes.iter().enumerate() {
            offsets[i] = at;
            at = at
                .checked_add(s)
                .and_then(|end| end.checked_next_multiple_of(VIEW_ALIGN))
                .ok_or(WorkspaceError::TooLarge {
                    needed: usize::MAX,
                    capacity: self.capacity,
                })?;
        }
        let needed = offsets.last().map_or(0, |&o| o + sizes[N - 1]);
        if needed > self.capacity {
            return Err(WorkspaceError::TooLarge {
                needed,
                capacity: self.capacity,
            });
        }
        let base = self.allocation.addr();
        let host = self.allocation.host_ptr().is_some();
        Ok(std::array::from_fn(|i| WorkspaceView {
            addr: base + offsets[i] as u64,
            len: sizes[i],
            host,
            _workspace: PhantomData,
        }))
    }
}

/// Part of a workspace, borrowed from it mutably.
#[derive(Debug)]
pub struct WorkspaceView<'a> {
    addr: u64,
    len: usize,
    host: bool,
    _workspace: PhantomData<&'a mut Workspace>,
}

impl WorkspaceView<'_> {
    /// Device address of the first byte.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Bytes in the view.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The bytes, on a host device.
    pub fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        // SAFETY: on a host device `addr..addr+len` lies inside the workspace's live,
        // initialised (zeroed at creation) allocation; the view borrows the workspace mutably
        // and views never overlap, so this is the only reference to these bytes.
        self.host
            .then(|| unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) })
    }
    /// The view as `len / 4` f32 values, on a host device.
    pub fn as_f32_mut(&mut self) -> Option<&mut [f32]> {
        // SAFETY: as in `as_bytes_mut`; the start is 256-byte aligned, and every bit pattern is
        // a valid f32.
        self.host
            .then(|| unsafe { std::slice::from_raw_parts_mut(self.addr as *mut f32, self.len / 4) })
    }
}
