//! [`CudaBuffer`]: `len` values of `T` in device memory from the caching allocator, usable
//! wherever cudarc takes a device pointer (kernel launches, cuBLAS). It owns an [`Allocation`]
//! and the stream it is used on; the memory itself is the allocator's.
//!
//! A buffer belongs to a stream (the device's default stream, or the one given to
//! [`CudaBuffer::new_on`]); its block returns to that stream's pool when the buffer drops and
//! is reused in that stream's order, so launches on its own stream need no synchronisation.
//! When cudarc asks for the pointer for another stream (`device_ptr(&other)`), that stream
//! first waits for the buffer's stream (so it sees the buffer's contents), and the buffer
//! records it ([`CudaBuffer::record_stream`]): a block freed while that stream may still use it
//! stays out of the pool until an event on that stream completes. The pointer itself is only
//! handed out with the borrow of the buffer that keeps it valid.

use super::{Allocation, Device};
use crate::alloc::cuda::{stream_id, CurrentContext};
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
        buffer.zeroed()
    }

    /// Allocates `len` zeroed values on `device` for use on `stream` (a stream of the device's
    /// context): the block comes from, and returns to, that stream's pool.
    pub fn new_on(
        device: &Device,
        len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<CudaBuffer<T>, CudaBufferError> {
        // SAFETY: zeroed below before it is returned, a valid `T` by `ValidAsZeroBits`.
        let buffer = unsafe { Self::uninit_on(device, len, stream) }?;
        buffer.zeroed()
    }

    fn zeroed(self) -> Result<CudaBuffer<T>, CudaBufferError> {
        let buffer = self;
        let len = buffer.len;
        // Cannot overflow: `uninit` checked it.
        let bytes = len * std::mem::size_of::<T>();
        let driver = |op| {
            move |e: DriverError| CudaBufferError::Driver {
                op,
                message: crate::alloc::cuda::error_name(e),
            }
        };
        let stream = &buffer.stream;
        // Pushed, not bound: binding would report (and clear) an unrelated error cudarc
        // recorded on the context earlier.
        let _current = CurrentContext::push(
            stream.context(),
            stream.context().ordinal(),
            "zeroing a CudaBuffer",
        )
        .map_err(|e| CudaBufferError::Driver {
            op: "cuCtxPushCurrent",
            message: e.to_string(),
        })?;
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
        let stream = context.default_stream();
        // SAFETY: forwarded contract.
        unsafe { Self::uninit_on(device, len, &stream) }
    }

    /// Allocates `len` values on `device` for use on `stream`, without initialising them.
    ///
    /// # Safety
    /// As [`CudaBuffer::uninit`].
    pub unsafe fn uninit_on(
        device: &Device,
        len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<CudaBuffer<T>, CudaBufferError> {
        if device.cuda_context().is_none() {
            return Err(CudaBufferError::NotCuda(format!("{device:?}")));
        }
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(CudaBufferError::TooLarge(len))?;
        let allocation = device.allocate_on(bytes, stream_id(stream))?;
        Ok(CudaBuffer {
            allocation,
            len,
            stream: Arc::clone(stream),
            _values: PhantomData,
        })
    }

    /// The allocation behind the buffer.
    pub fn allocation(&self) -> &Allocation {
        &self.allocation
    }

    /// Records that work queued on `stream` uses this buffer (PyTorch's `record_stream`): once
    /// the buffer is dropped, its block is not reused until that work is done. `device_ptr`
    /// does this for the stream cudarc passes it; call it yourself when the pointer reaches
    /// another stream some other way.
    pub fn record_stream(&self, stream: &CudaStream) {
        self.allocation.record_stream(stream_id(stream));
    }

    /// Prepares a launch on `stream`: nothing for the buffer's own stream; for another, that
    /// stream waits for the buffer's stream and is recorded as a user of the block. When the
    /// wait cannot be queued, the buffer's stream is synchronised when cudarc drops the guard.
    fn use_on<'a>(&'a self, stream: &'a CudaStream) -> SyncOnDrop<'a> {
        if *stream == *self.stream {
            return SyncOnDrop::Sync(None);
        }
        self.record_stream(stream);
        match stream.join(&self.stream) {
            Ok(()) => SyncOnDrop::Sync(None),
            Err(e) => {
                tracing::warn!("CudaBuffer: stream wait failed ({e}); synchronising instead");
                // The launch must not read before the buffer's stream wrote: wait now.
                let _ = self.stream.synchronize();
                SyncOnDrop::sync_stream(stream)
            }
        }
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
        (self.allocation.addr(), self.use_on(stream))
    }
}

impl<T> DevicePtrMut<T> for CudaBuffer<T> {
    fn device_ptr_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.allocation.addr(), self.use_on(stream))
    }
}
