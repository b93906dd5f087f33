//! [`CudaBuffer`]: `len` values of `T` in device memory from the caching allocator, usable
//! wherever cudarc takes a device pointer (kernel launches, cuBLAS). It owns an [`Allocation`]
//! and the stream it is used on; the memory itself is the allocator's.
//!
//! A buffer belongs to a stream (the device's default stream, or the one given to
//! [`CudaBuffer::new_on`]); its block returns to that stream's pool when the buffer drops and
//! is reused in that stream's order, so launches on its own stream need no synchronisation.
//! Launches on several streams are ordered both ways, as cudarc's `CudaSlice` orders them: a
//! launch that reads waits for the last write, on whichever stream it was queued (the buffer's
//! own stream waits for another stream's write just as another stream waits for the own
//! stream's), and one that writes waits for the reads since (`alloc/backend/stream_order.rs` holds the
//! rule). A wait is an event recorded on the earlier stream and waited for by the later one. A
//! stream other than the buffer's own is recorded ([`CudaBuffer::record_stream`]): a block freed
//! while that stream may still use it stays out of the pool until an event on that stream
//! completes. The pointer itself is only handed out with the borrow of the buffer that keeps
//! it valid.
//!
//! Every driver call here makes the context current with `cuCtxPushCurrent` (see
//! `driver.rs`), never with cudarc's `bind_to_thread`, which would replace the caller's
//! context and report (and clear) an error recorded on the context earlier.

use super::{Allocation, Device};
use crate::alloc::cuda_backend::stream_id;
use crate::alloc::stream_order::{Access, StreamOrder};
use crate::alloc::StreamId;
use crate::diagnostics::WarningOutput;
use crate::driver::{error_name, CurrentContext};
use cudarc::driver::{result, sys, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice};
use cudarc::driver::{DriverError, SyncOnDrop, ValidAsZeroBits};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

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
    /// The streams that wrote and read the buffer last.
    order: Mutex<StreamOrder>,
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
                message: error_name(e),
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
        // own streams do not wait for the default one) sees the zeros. The raw call, under the
        // pushed context: cudarc's `synchronize` would bind the context instead.
        // SAFETY: the stream belongs to the current context.
        unsafe { result::stream::synchronize(stream.cu_stream()) }
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
            order: Mutex::new(StreamOrder::new(stream_id(stream))),
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

    /// Prepares a launch on `stream` that reads or writes the buffer: `stream` waits for the
    /// streams the ordering rule names, and a stream other than the buffer's own is recorded as
    /// a user of the block. When a wait cannot be queued, the earlier stream is synchronised
    /// instead (and the failure reported on stderr).
    fn use_on(&self, stream: &CudaStream, access: Access) -> SyncOnDrop<'static> {
        let this = stream_id(stream);
        let waits = self
            .order
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .access(this, access);
        if this != stream_id(&self.stream) {
            self.record_stream(stream);
        }
        for on in waits {
            if let Err(e) = queue_wait(stream, on) {
                crate::diagnostics::warn(
                    WarningOutput::Auto,
                    &format!(
                        "CudaBuffer: making stream {this:?} wait for stream {on:?} failed ({e}); \
                         synchronising stream {on:?} instead"
                    ),
                );
                if let Err(e) = synchronize(stream, on) {
                    crate::diagnostics::error(&format!(
                        "CudaBuffer: synchronising stream {on:?} failed too ({e}): the launch \
                         on stream {this:?} may see the buffer before that stream's work is done"
                    ));
                }
            }
        }
        SyncOnDrop::Sync(None)
    }
}

/// Queues on `waiter` a wait for the work queued so far on stream `on` (of the same context):
/// an event recorded on `on`, waited for by `waiter`, then destroyed (the driver keeps it until
/// the wait is done).
fn queue_wait(waiter: &CudaStream, on: StreamId) -> Result<(), String> {
    let context = waiter.context();
    let _current = CurrentContext::push(context, context.ordinal(), "ordering streams")
        .map_err(|e| e.to_string())?;
    let name =
        |op: &'static str| move |e: DriverError| format!("{op} failed with {}", error_name(e));
    let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
        .map_err(name("cuEventCreate"))?;
    // SAFETY: the event was just created in the current context and `on` is a stream of it
    // (a `CUstream` the buffer saw); the event is destroyed once, after the wait is queued.
    let queued = unsafe {
        result::event::record(event, on.0 as usize as sys::CUstream)
            .map_err(name("cuEventRecord"))
            .and_then(|()| {
                result::stream::wait_event(
                    waiter.cu_stream(),
                    event,
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
                .map_err(name("cuStreamWaitEvent"))
            })
    };
    // SAFETY: created above; destroying a recorded event the driver still waits on is allowed
    // (its resources go once the wait completes).
    let destroyed = unsafe { result::event::destroy(event) }.map_err(name("cuEventDestroy"));
    queued.and(destroyed)
}

/// Waits on the host for the work queued on stream `on` (of `stream`'s context).
fn synchronize(stream: &CudaStream, on: StreamId) -> Result<(), String> {
    let context = stream.context();
    let _current = CurrentContext::push(context, context.ordinal(), "synchronising a stream")
        .map_err(|e| e.to_string())?;
    // SAFETY: `on` is a stream of the current context.
    unsafe { result::stream::synchronize(on.0 as usize as sys::CUstream) }
        .map_err(|e| format!("cuStreamSynchronize failed with {}", error_name(e)))
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
        (self.allocation.addr(), self.use_on(stream, Access::Read))
    }
}

impl<T> DevicePtrMut<T> for CudaBuffer<T> {
    fn device_ptr_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.allocation.addr(), self.use_on(stream, Access::Write))
    }
}
