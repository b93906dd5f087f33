//! `cuMemAllocFromPoolAsync`, added with the fake CUPTI (issue #39): the stream-ordered
//! allocation from an explicit pool, which the observer sees as callback id 611. The fake has
//! one pool, the device's default one (`cuDeviceGetDefaultMemPool`), so this is
//! `cuMemAllocAsync` with its pool checked.

use crate::api::exports;
use crate::driver_api::{DevicePtr, Handle};
use crate::errors::{self, Fail};
use crate::state::{driver, POOL};

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
