//! The CUDA driver's memory pool, for code whose tensors are not vramguard's (candle's CUDA
//! tensors come from `cuMemAllocAsync` on the device's default pool, through cudarc).
//!
//! Out of the box that pool has a release threshold of 0: at every synchronisation the driver
//! hands the cached memory back, so the next batch allocates it again; and nothing reports its
//! use. [`DriverPool::take_over`] fixes both for one device:
//!
//! - it sets the release threshold (by default to "keep everything cached",
//!   [`KEEP_ALL_CACHED`]; [`DriverPool::set_release_threshold`] changes it);
//! - [`DriverPool::stats`] reads the pool's figures (`cuMemPoolGetAttribute`: bytes used and
//!   reserved, current and high-water) into [`MemoryStats`], the type `memory::stats` returns;
//! - [`DriverPool::reset_peak_stats`] resets the high-water marks;
//! - [`DriverPool::empty_cache`] waits for the device and trims the pool to what is in use
//!   (`cuMemPoolTrimTo`), returning the bytes released;
//! - and it makes the batch scopes of the calling thread account with the pool's figures
//!   (see [`crate::scope`]: `#[batch_scope]` then reports candle tensors' growth); other
//!   threads opt in with [`DriverPool::account_scopes_on_this_thread`].
//!
//! Without a driver every function returns [`DeviceError::Context`] with
//! [`ContextError::NoDriver`] (never a panic).

use crate::accounting::{IterationFigures, IterationStart, ScopeAccounting, ScopeIteration};
use crate::alloc::{ContextError, MemoryStats};
use crate::device::DeviceError;
use crate::driver::{error_name, open_context, CurrentContext};
use cudarc::driver::{result, sys, CudaContext};
use std::sync::Arc;

/// Release threshold that keeps every freed byte cached in the pool (until
/// [`DriverPool::empty_cache`]).
pub const KEEP_ALL_CACHED: u64 = u64::MAX;

/// The default memory pool of one GPU, taken over: see the [module documentation](self).
/// Cheap to clone; every clone is the same pool.
#[derive(Clone)]
pub struct DriverPool {
    inner: Arc<Inner>,
}

struct Inner {
    ordinal: usize,
    context: Arc<CudaContext>,
    pool: sys::CUmemoryPool,
}

// SAFETY: a `CUmemoryPool` is a driver handle usable from any thread (the driver API is
// thread-safe); the default pool lives as long as the device, which `context` keeps retained.
unsafe impl Send for Inner {}
// SAFETY: as above; every call through the handle is a thread-safe driver call.
unsafe impl Sync for Inner {}

impl std::fmt::Debug for DriverPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverPool")
            .field("ordinal", &self.inner.ordinal)
            .finish_non_exhaustive()
    }
}

fn driver(op: &'static str) -> impl Fn(DriverError) -> DeviceError {
    move |e| {
        DeviceError::Context(ContextError::Driver {
            op,
            message: error_name(e),
        })
    }
}

use cudarc::driver::DriverError;

impl DriverPool {
    /// Takes over the default memory pool of GPU `ordinal`: sets its release threshold to
    /// [`KEEP_ALL_CACHED`] and makes this thread's batch scopes account with its figures.
    pub fn take_over(ordinal: usize) -> Result<DriverPool, DeviceError> {
        let pool = Self::open(ordinal)?;
        pool.set_release_threshold(KEEP_ALL_CACHED)?;
        pool.account_scopes_on_this_thread();
        Ok(pool)
    }

    /// The default memory pool of GPU `ordinal`, left as it is (no threshold, no accounting).
    pub fn open(ordinal: usize) -> Result<DriverPool, DeviceError> {
        let context = open_context(ordinal)?;
        let _current = current(&context, ordinal)?;
        // SAFETY: the device handle comes from the context just opened.
        let pool = unsafe { result::device::get_default_mem_pool(context.cu_device()) }
            .map_err(driver("cuDeviceGetDefaultMemPool"))?;
        Ok(DriverPool {
            inner: Arc::new(Inner {
                ordinal,
                context,
                pool,
            }),
        })
    }

    /// The GPU ordinal.
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// Sets how many bytes the pool keeps cached at a synchronisation (the driver's default
    /// is 0: everything freed goes back to the device).
    pub fn set_release_threshold(&self, bytes: u64) -> Result<(), DeviceError> {
        let mut value = bytes;
        self.set(
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut value,
            "cuMemPoolSetAttribute(RELEASE_THRESHOLD)",
        )
    }

    /// The pool's release threshold.
    pub fn release_threshold(&self) -> Result<u64, DeviceError> {
        self.get(
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            "cuMemPoolGetAttribute(RELEASE_THRESHOLD)",
        )
    }

    /// The pool's figures as [`MemoryStats`]: `allocated_bytes`/`active_bytes` are the bytes
    /// in use (`USED_MEM_CURRENT`), `reserved_bytes` the bytes the pool holds from the device
    /// (`RESERVED_MEM_CURRENT`), the peaks their high-water marks, `cached_free_bytes` and
    /// `fragmentation` follow from them. The driver does not report block or call counts:
    /// those fields are 0.
    pub fn stats(&self) -> Result<MemoryStats, DeviceError> {
        use sys::CUmemPool_attribute as A;
        let used = self.get(
            A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
            "cuMemPoolGetAttribute(USED_MEM_CURRENT)",
        )?;
        let used_high = self.get(
            A::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
            "cuMemPoolGetAttribute(USED_MEM_HIGH)",
        )?;
        let reserved = self.get(
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
            "cuMemPoolGetAttribute(RESERVED_MEM_CURRENT)",
        )?;
        let reserved_high = self.get(
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
            "cuMemPoolGetAttribute(RESERVED_MEM_HIGH)",
        )?;
        Ok(pool_stats(used, used_high, reserved, reserved_high))
    }

    /// Resets the high-water marks of used and reserved bytes to their current values.
    pub fn reset_peak_stats(&self) -> Result<(), DeviceError> {
        use sys::CUmemPool_attribute as A;
        // The driver accepts only 0, which resets the mark to the current value.
        self.set(
            A::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
            &mut 0u64,
            "cuMemPoolSetAttribute(USED_MEM_HIGH)",
        )?;
        self.set(
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
            &mut 0u64,
            "cuMemPoolSetAttribute(RESERVED_MEM_HIGH)",
        )
    }

    /// Waits for the device, then returns every cached byte not in use to the device
    /// (`cuMemPoolTrimTo(pool, 0)`). Returns the bytes released. Frees nothing in use.
    pub fn empty_cache(&self) -> Result<u64, DeviceError> {
        let before = self.stats()?.reserved_bytes;
        {
            let _current = current(&self.inner.context, self.inner.ordinal)?;
            // Memory freed by work still queued is released only once that work ran.
            result::ctx::synchronize().map_err(driver("cuCtxSynchronize"))?;
            // SAFETY: the pool handle is the device's default pool, alive with the context.
            unsafe { result::mem_pool::trim_to(self.inner.pool, 0) }
                .map_err(driver("cuMemPoolTrimTo"))?;
        }
        let after = self.stats()?.reserved_bytes;
        Ok(before.saturating_sub(after))
    }

    /// Makes the batch scopes entered on this thread account with this pool's figures (see
    /// [`crate::scope`]); `crate::scope::account_with(None)` undoes it.
    pub fn account_scopes_on_this_thread(&self) {
        crate::scope::account_with(Some(Arc::new(self.clone())));
    }

    fn get(&self, attr: sys::CUmemPool_attribute, op: &'static str) -> Result<u64, DeviceError> {
        let _current = current(&self.inner.context, self.inner.ordinal)?;
        let mut value = 0u64;
        // SAFETY: every attribute read here is a `cuuint64_t`; `value` is one.
        unsafe {
            result::mem_pool::get_attribute(self.inner.pool, attr, (&mut value as *mut u64).cast())
        }
        .map_err(driver(op))?;
        Ok(value)
    }

    fn set(
        &self,
        attr: sys::CUmemPool_attribute,
        value: &mut u64,
        op: &'static str,
    ) -> Result<(), DeviceError> {
        let _current = current(&self.inner.context, self.inner.ordinal)?;
        // SAFETY: every attribute written here is a `cuuint64_t`; `value` is one.
        unsafe {
            result::mem_pool::set_attribute(self.inner.pool, attr, (value as *mut u64).cast())
        }
        .map_err(driver(op))
    }
}

fn current(context: &CudaContext, ordinal: usize) -> Result<CurrentContext, DeviceError> {
    CurrentContext::push(context, ordinal, "the driver's memory pool").map_err(|e| {
        DeviceError::Context(ContextError::Driver {
            op: "cuCtxPushCurrent",
            message: e.to_string(),
        })
    })
}

/// [`MemoryStats`] from a pool's used and reserved bytes, current and high-water.
pub(crate) fn pool_stats(
    used: u64,
    used_high: u64,
    reserved: u64,
    reserved_high: u64,
) -> MemoryStats {
    MemoryStats {
        allocated_bytes: used,
        peak_allocated_bytes: used_high,
        reserved_bytes: reserved,
        peak_reserved_bytes: reserved_high,
        active_bytes: used,
        peak_active_bytes: used_high,
        cached_free_bytes: reserved.saturating_sub(used),
        fragmentation: if reserved == 0 {
            0.0
        } else {
            1.0 - used as f64 / reserved as f64
        },
        ..MemoryStats::default()
    }
}

impl DriverPool {
    /// Bytes in use in the pool now (`None` when the driver cannot say).
    fn used_bytes(&self) -> Option<u64> {
        self.get(
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
            "cuMemPoolGetAttribute(USED_MEM_CURRENT)",
        )
        .ok()
    }

    /// The most bytes in use since the peak was last reset.
    fn peak_used_bytes(&self) -> Option<u64> {
        self.get(
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
            "cuMemPoolGetAttribute(USED_MEM_HIGH)",
        )
        .ok()
    }
}

/// The pool as a source of batch-scope accounting, covering everything in it: each iteration
/// starts a new peak window of the pool, and its figures are the pool's
/// ([`IterationFigures::whole_pool`]).
impl ScopeAccounting for DriverPool {
    fn begin_iteration(&self, iteration: ScopeIteration) -> Option<IterationStart> {
        let _ = self.set(
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
            &mut 0u64,
            "cuMemPoolSetAttribute(USED_MEM_HIGH)",
        );
        let used_bytes = self.used_bytes()?;
        Some(IterationStart {
            used_bytes,
            ..IterationStart::new(iteration)
        })
    }

    fn end_iteration(&self, start: &IterationStart) -> Option<IterationFigures> {
        let (used, peak) = (self.used_bytes()?, self.peak_used_bytes()?);
        Some(IterationFigures::whole_pool(start.used_bytes, used, peak))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_figures_map_onto_memory_stats() {
        let s = pool_stats(3 << 20, 5 << 20, 8 << 20, 9 << 20);
        assert_eq!(
            (
                s.allocated_bytes,
                s.peak_allocated_bytes,
                s.reserved_bytes,
                s.peak_reserved_bytes
            ),
            (3 << 20, 5 << 20, 8 << 20, 9 << 20)
        );
        assert_eq!((s.active_bytes, s.cached_free_bytes), (3 << 20, 5 << 20));
        assert_eq!(s.fragmentation, 1.0 - 3.0 / 8.0);
        assert_eq!(s.backend_allocs, 0);
        assert_eq!(pool_stats(0, 0, 0, 0).fragmentation, 0.0);
    }

    #[test]
    fn a_pool_that_cannot_be_opened_is_a_typed_error_with_or_without_a_driver() {
        if crate::driver::library_present(crate::driver::CudaLibrary::Driver) {
            // No machine has 1000 GPUs: the driver's answer is a typed error, not a panic.
            assert!(matches!(
                DriverPool::open(1000),
                Err(DeviceError::Context(ContextError::NoDevice {
                    ordinal: 1000,
                    ..
                }))
            ));
            assert!(matches!(
                DriverPool::take_over(1000),
                Err(DeviceError::Context(ContextError::NoDevice {
                    ordinal: 1000,
                    ..
                }))
            ));
            return;
        }
        assert!(matches!(
            DriverPool::take_over(0),
            Err(DeviceError::Context(ContextError::NoDriver))
        ));
        assert!(matches!(
            DriverPool::open(1),
            Err(DeviceError::Context(ContextError::NoDriver))
        ));
    }
}
