//! [`CudaBuffer`]: `len` values of `T` in device memory from the caching allocator, usable
//! wherever cudarc takes a device pointer (kernel launches, cuBLAS). It owns an [`Allocation`]
//! and the stream it is used on; the memory itself is the allocator's.
//!
//! The caching allocator does not track which stream last used a block, so `device_ptr` and
//! `device_ptr_mut` hand cudarc a `SyncOnDrop::Sync` guard: the stream is synchronised once the
//! launch that uses the pointer has been queued, and a block freed to the cache is never reused
//! while a kernel may still touch it.

use super::{Allocation, Device};
use cudarc::driver::{result, sys, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice};
use cudarc::driver::{DriverError, SyncOnDrop, ValidAsZeroBits};
use std::marker::PhantomData;
use std::sync::Arc;

/// Why a [`CudaBuffer`] could not be made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaBufferError {
    /// The device is not a CUDA device.
    #[error("CudaBuffer needs a CUDA device (Device::cuda), got {0}")]
    NotCuda(String),
    /// `len * size_of::<T>()` overflows.
    #[error("a buffer of {0} elements does not fit in the address space")]
    TooLarge(usize),
    /// The allocator refused.
    #[error(transparent)]
    OutOfMemory(#[from] crate::alloc::OutOfMemory),
    /// Zeroing the new buffer failed.
    #[error("CUDA driver call {op} failed while zeroing a CudaBuffer: {message}")]
    Driver {
        /// The driver function.
        op: &'static str,
        /// The driver's error.
        message: String,
    },
}

/// `len` values of `T` in device memory from the caching allocator, usable wherever cudarc takes
/// a [`DevicePtr`]/[`DevicePtrMut`] (kernel launches, cuBLAS).
#[derive(Debug)]
pub struct CudaBuffer<T> {
    allocation: Allocation,
    len: usize,
    stream: Arc<CudaStream>,
    _values: PhantomData<T>,
}

impl<T: ValidAsZeroBits> CudaBuffer<T> {
    /// Allocates `len` zeroed values on `device`, used on the device's default stream.
    ///
    /// The block may come from the cache with a previous tensor's bytes in it, and cudarc's
    /// safe copies (`memcpy_dtov`, `clone_dtoh`) read the buffer as `T`s, so it is zeroed
    /// first, and the zeroing waited for (cudarc's own `alloc_zeros` zeroes too).
    /// [`CudaBuffer::uninit`] skips that.
    pub fn new(device: &Device, len: usize) -> Result<CudaBuffer<T>, CudaBufferError> {
        // SAFETY: the bytes are all zero before the buffer is returned, a valid `T` by
        // `ValidAsZeroBits`.
        let buffer = unsafe { Self::uninit(device, len) }?;
        // Cannot overflow: `uninit` checked it.
        let bytes = len * std::mem::size_of::<T>();
        let driver = |op| {
            move |e: DriverError| CudaBufferError::Driver {
                op,
                message: e.to_string(),
            }
        };
        let stream = &buffer.stream;
        stream
            .context()
            .bind_to_thread()
            .map_err(driver("cuCtxSetCurrent"))?;
        // SAFETY: the context is current on this thread and the range is the buffer's own
        // allocation (at least `bytes` long), which nothing else uses yet.
        unsafe { result::memset_d8_async(buffer.allocation.addr(), 0, bytes, stream.cu_stream()) }
            .map_err(driver("cuMemsetD8Async"))?;
        // Finished before the buffer is handed out, so work queued later on any stream (cudarc's
        // own streams do not wait for the default one) sees the zeros.
        stream
            .synchronize()
            .map_err(driver("cuStreamSynchronize"))?;
        Ok(buffer)
    }
}

impl<T> CudaBuffer<T> {
    /// Allocates `len` values on `device` without initialising them, used on the device's
    /// default stream.
    ///
    /// # Safety
    /// The memory holds whatever the cache's previous user left there: every value must be
    /// written (e.g. by `memcpy_htod` or a kernel) before it is read as a `T`.
    pub unsafe fn uninit(device: &Device, len: usize) -> Result<CudaBuffer<T>, CudaBufferError> {
        let Some(context) = device.cuda_context() else {
            return Err(CudaBufferError::NotCuda(format!("{device:?}")));
        };
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(CudaBufferError::TooLarge(len))?;
        let allocation = device.allocate(bytes)?;
        Ok(CudaBuffer {
            allocation,
            len,
            stream: context.default_stream(),
            _values: PhantomData,
        })
    }

    /// The allocation behind the buffer.
    pub fn allocation(&self) -> &Allocation {
        &self.allocation
    }
}

impl<T> DeviceSlice<T> for CudaBuffer<T> {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl<T> DevicePtr<T> for CudaBuffer<T> {
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.allocation.addr(), SyncOnDrop::sync_stream(stream))
    }
}

impl<T> DevicePtrMut<T> for CudaBuffer<T> {
    fn device_ptr_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.allocation.addr(), SyncOnDrop::sync_stream(stream))
    }
}
