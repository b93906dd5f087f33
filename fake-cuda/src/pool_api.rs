//! Added with the fake CUPTI (issue #39):
//!
//! - `cuMemAllocFromPoolAsync`, the stream-ordered allocation from an explicit pool, which the
//!   observer sees as callback id 611. The fake has one pool, the device's default one
//!   (`cuDeviceGetDefaultMemPool`), so this is `cuMemAllocAsync` with its pool checked.
//! - [`Driver::run_pending_frees`]: a chunk whose free is still queued on the allocating
//!   stream is reused in stream order, as the driver does; the work queued before the free
//!   runs first, so that it is checked against the allocation it was queued for (candle's
//!   loop — allocate, fill, free, allocate again on one stream — faulted falsely: a queued
//!   memset of the old owner's size was checked against the new owner's smaller one).

use crate::api::exports;
use crate::driver_api::{DevicePtr, Handle};
use crate::errors::{self, Fail};
use crate::pool::ChunkState;
use crate::state::{driver, Driver, Region, POOL};

impl Driver {
    /// Before an allocation of `need` bytes on `stream` may reuse a chunk whose free is queued
    /// on that stream: runs the stream's queued work, the free included, so that the chunk is
    /// cached (and the old owner's work done) when it is handed out again.
    pub fn run_pending_frees(&mut self, stream: u64, need: usize) -> Result<(), Fail> {
        let pending = self.regions.values().any(|r| {
            matches!(r, Region::Chunk(c) if c.len >= need && c.state == ChunkState::FreePending { stream })
        });
        if pending {
            let tail = self.tail(stream);
            self.run_to(tail)?;
        }
        Ok(())
    }
}

exports! {
    unknown = errors::UNKNOWN;

    /// Stream-ordered allocation from `pool` (the default pool, the only one).
    fn cuMemAllocFromPoolAsync(dptr: *mut DevicePtr, bytes: usize, pool: Handle, stream: Handle) {
        let mut d = driver()?;
        d.in_context()?;
        if !d.config.pools {
            return Err(Fail::loud(errors::NOT_SUPPORTED, "memory pools are off (FAKE_CUDA_POOLS=0)"));
        }
        if pool as u64 != POOL {
            return Err(Fail::loud(errors::INVALID_HANDLE, format!("{:#x} is not a memory pool", pool as u64)));
        }
        let s = d.stream(stream as u64)?;
        if dptr.is_null() {
            return Err(Fail::loud(errors::INVALID_VALUE, "a null output pointer"));
        }
        let addr = d.pool_alloc(bytes, s)?;
        // SAFETY: non-null; the caller passes a valid out-pointer (the driver's contract).
        unsafe { dptr.write(addr) };
        Ok(())
    }
}
