//! CUDA backend: segments from the driver (`cuMemAlloc`/`cuMemFree`) through cudarc, loaded at
//! run time, and [`CudaBuffer`], a typed buffer usable with cudarc's kernel launches.
//!
//! The driver library is probed with `is_culib_present()` before any driver call: cudarc panics
//! when it is missing, this module returns [`DeviceError::NoDriver`] instead.
//!
//! Segment calls are synchronous (`cuMemAlloc`/`cuMemFree` are not stream-ordered), and the
//! caching allocator does not track which stream last used a block. [`CudaBuffer`]'s
//! `device_ptr`/`device_ptr_mut` therefore hand cudarc a `SyncOnDrop::Sync` guard: the stream is
//! synchronised once the launch that uses the pointer has been queued, so a block freed to the
//! cache is never reused while a kernel may still touch it.

use super::{Backend, BackendError};
use crate::device::{Allocation, Device, DeviceError};
use cudarc::driver::{result, sys, CudaContext, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice};
use cudarc::driver::{DriverError, SyncOnDrop};
use std::marker::PhantomData;
use std::sync::Arc;

/// Whether the CUDA driver library (libcuda) can be loaded.
pub fn driver_present() -> bool {
    // SAFETY: only tries to `dlopen` the library by its usual names; no driver call is made.
    unsafe { sys::is_culib_present() }
}

fn driver_error(op: &'static str, e: DriverError) -> DeviceError {
    let name = e
        .error_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    DeviceError::Driver { op, message: name }
}

/// Device memory of one GPU, taken from the driver segment by segment.
#[derive(Debug)]
pub struct CudaBackend {
    ordinal: usize,
    context: Arc<CudaContext>,
    capacity: usize,
}

impl CudaBackend {
    /// Opens GPU `ordinal`: loads the driver, `cuInit`, retains the primary context and binds it
    /// to this thread, and reads the capacity with `cuMemGetInfo`.
    pub fn new(ordinal: usize) -> Result<CudaBackend, DeviceError> {
        if !driver_present() {
            return Err(DeviceError::NoDriver);
        }
        match result::init() {
            Ok(()) => {}
            Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => {
                return Err(DeviceError::NoDevice { ordinal, count: 0 })
            }
            Err(e) => return Err(driver_error("cuInit", e)),
        }
        let count = result::device::get_count().map_err(|e| driver_error("cuDeviceGetCount", e))?;
        if ordinal >= count.max(0) as usize {
            return Err(DeviceError::NoDevice {
                ordinal,
                count: count.max(0) as usize,
            });
        }
        // Retains the primary context and binds it to this thread.
        let context =
            CudaContext::new(ordinal).map_err(|e| driver_error("cuDevicePrimaryCtxRetain", e))?;
        let (_free, total) = result::mem_get_info().map_err(|e| driver_error("cuMemGetInfo", e))?;
        Ok(CudaBackend {
            ordinal,
            context,
            capacity: total,
        })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The cudarc context (the device's primary context).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> String {
        format!("cuda:{}", self.ordinal)
    }
    fn capacity(&self) -> Option<usize> {
        Some(self.capacity)
    }
    fn host_addressable(&self) -> bool {
        false
    }
    fn alignment(&self) -> usize {
        // cuMemAlloc guarantees at least 256 bytes.
        256
    }
    fn alloc_segment(&self, bytes: usize) -> Result<u64, BackendError> {
        self.context
            .bind_to_thread()
            .map_err(|e| BackendError::Driver(format!("binding the context: {e}")))?;
        // SAFETY: the device's context is current on this thread; the memory is only handed out
        // as addresses.
        match unsafe { result::malloc_sync(bytes) } {
            Ok(ptr) => Ok(ptr),
            Err(DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY)) => {
                Err(BackendError::OutOfMemory { requested: bytes })
            }
            Err(e) => Err(BackendError::Driver(format!("cuMemAlloc({bytes}): {e}"))),
        }
    }
    unsafe fn free_segment(&self, addr: u64, _bytes: usize) {
        if let Err(e) = self.context.bind_to_thread() {
            tracing::warn!(
                "cuda:{}: cannot bind context to free a segment: {e}",
                self.ordinal
            );
            return;
        }
        // SAFETY: the caller guarantees `addr` came from `alloc_segment` and is unused.
        if let Err(e) = unsafe { result::free_sync(addr) } {
            tracing::warn!("cuda:{}: cuMemFree failed: {e}", self.ordinal);
        }
    }
}

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
    OutOfMemory(#[from] super::OutOfMemory),
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

impl<T> CudaBuffer<T> {
    /// Allocates `len` uninitialised values on `device`, used on the device's default stream.
    pub fn new(device: &Device, len: usize) -> Result<CudaBuffer<T>, CudaBufferError> {
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
