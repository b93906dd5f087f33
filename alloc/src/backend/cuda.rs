//! CUDA backend: segments from the driver (`cuMemAlloc`/`cuMemFree`) through cudarc, loaded at
//! run time. Opening the GPU's context and its errors ([`ContextError`]) are `crate::driver`'s;
//! the typed buffer for cudarc's kernel launches is `crate::device::CudaBuffer`.
//!
//! With expandable segments (the default `expandable_segments:auto`, or `true`) the backend maps
//! memory into a reserved address range through the driver's virtual memory management
//! (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`, `cuMemSetAccess`; `cuMemUnmap` +
//! `cuMemRelease` to give pages back), one handle per granule (2 MiB or the device's minimum
//! granularity if larger) and one `cuMemSetAccess` per mapped range (the bookkeeping and the
//! order of calls are `granules.rs`'s), on GPUs that report
//! `CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED`. Before an allocator uses them, a
//! self-test ([`VirtualMemory::self_test`]) reserves two granules, maps them, writes a pattern
//! into each with `cuMemsetD32`, reads it back with `cuMemcpyDtoH`, and unmaps and releases
//! them; under `auto` any failure (or a GPU without the attribute) means fixed segments
//! (`cuMemAlloc`), with a warning naming the failed step.
//!
//! The driver library is probed with `crate::driver::library_present` before any driver call:
//! cudarc panics when it is missing, [`CudaBackend::new`] returns [`ContextError::NoDriver`]
//! instead.
//!
//! Segment calls are synchronous (`cuMemAlloc`/`cuMemFree` are not stream-ordered). Every call
//! makes the device's context current with `cuCtxPushCurrent` and restores the caller's with
//! `cuCtxPopCurrent` (`crate::driver`'s `CurrentContext`): cudarc's `bind_to_thread` would first report (and
//! clear) an error cudarc recorded on the context earlier, so an unrelated failure would abort
//! the call and be lost. Failures carry the driver's error name ([`BackendFailure`]). Events
//! for stream-safe reuse are `cuEventRecord`ed on the streams that used a freed block.

use super::granules::{CallError, GranuleMap, PageDriver};
use super::{Backend, BackendError, BackendFailure, EventId, StreamId, VirtualMemory};
use crate::diagnostics::WarningOutput;
use crate::driver::{driver_error, error_name, open_context, CurrentContext};
use crate::ContextError;
use cudarc::driver::{result, sys, CudaContext, DriverError};
use std::sync::Arc;

/// The allocator's name for a cudarc stream: its `CUstream` handle (the default stream is
/// [`StreamId::DEFAULT`]).
pub fn stream_id(stream: &cudarc::driver::CudaStream) -> StreamId {
    StreamId(stream.cu_stream() as usize as u64)
}

/// Device memory of one GPU, taken from the driver segment by segment.
#[derive(Debug)]
pub struct CudaBackend {
    ordinal: usize,
    context: Arc<CudaContext>,
    capacity: usize,
    /// Mapping granularity, when the GPU supports virtual memory management.
    vmm_granularity: Option<usize>,
    /// Physical allocation handle of each mapped granule, by address.
    pages: GranuleMap<sys::CUmemGenericAllocationHandle>,
}

fn allocation_prop(device: sys::CUdevice) -> sys::CUmemAllocationProp {
    // SAFETY: a plain C struct for which all-zero bytes are valid (null pointer, zero flags).
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = sys::CUmemAllocationHandleType(0);
    prop.location = sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: device,
    };
    prop
}

/// The mapping granularity of `device`, if it supports virtual memory management.
fn vmm_granularity(device: sys::CUdevice) -> Option<usize> {
    // SAFETY: `device` came from `cuDeviceGet`.
    let supported = unsafe {
        result::device::get_attribute(
            device,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED,
        )
    };
    if supported.ok()? == 0 {
        return None;
    }
    let prop = allocation_prop(device);
    let mut minimum = 0usize;
    // SAFETY: valid out-pointer and property struct.
    unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut minimum,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    }
    .result()
    .ok()?;
    if minimum == 0 {
        return None;
    }
    Some((2usize << 20).next_multiple_of(minimum))
}

impl CudaBackend {
    /// Opens GPU `ordinal`: loads the driver, `cuInit`, retains the primary context and binds it
    /// to this thread, and reads the capacity with `cuMemGetInfo`.
    pub fn new(ordinal: usize) -> Result<CudaBackend, ContextError> {
        let context = open_context(ordinal)?;
        // The driver has run cuInit: an injected GPU observer may take this copy's labels.
        #[cfg(unix)]
        crate::trace::offer_label_source();
        let (_free, total) = result::mem_get_info().map_err(|e| driver_error("cuMemGetInfo", e))?;
        let vmm_granularity = vmm_granularity(context.cu_device());
        Ok(CudaBackend {
            ordinal,
            vmm_granularity,
            context,
            capacity: total,
            pages: GranuleMap::new(vmm_granularity.unwrap_or(2 << 20)),
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

/// The failure of driver call `op`, with the driver's error name (`CUDA_ERROR_ILLEGAL_ADDRESS`).
fn call_failure(op: impl Into<String>, e: DriverError) -> BackendFailure {
    BackendFailure {
        op: op.into(),
        error: error_name(e),
    }
}

fn call_error(op: impl Into<String>, e: DriverError) -> BackendError {
    BackendError::Driver(call_failure(op, e))
}

impl CudaBackend {
    /// Makes the device's context current for `op`, until the guard drops.
    fn current(&self, op: &str) -> Result<CurrentContext, BackendError> {
        CurrentContext::push(&self.context, self.ordinal, op).map_err(|f| {
            BackendError::Driver(BackendFailure {
                op: f.op,
                error: f.error,
            })
        })
    }

    /// Writes a distinct 32-bit pattern into each of the two granules at `addr` with the
    /// driver's memset, copies both back to the host and compares every word.
    fn check_pattern(&self, addr: u64, granularity: usize) -> Result<(), BackendError> {
        const PATTERNS: [u32; 2] = [0xa5c3_0f96, 0x5a3c_f069];
        let words = granularity / 4;
        let _current = self.current("the virtual memory self-test")?;
        for (i, &pattern) in PATTERNS.iter().enumerate() {
            let at = addr + (i * granularity) as u64;
            // SAFETY: `[at, at + granularity)` is mapped read-write by the caller and used by
            // nothing else; the context is current.
            unsafe { sys::cuMemsetD32_v2(at, pattern, words) }
                .result()
                .map_err(|e| call_error("cuMemsetD32", e))?;
        }
        // SAFETY: plain synchronisation of the current context.
        unsafe { sys::cuCtxSynchronize() }
            .result()
            .map_err(|e| call_error("cuCtxSynchronize after cuMemsetD32", e))?;
        let mut host = vec![0u32; 2 * words];
        // SAFETY: `host` holds exactly `2 * granularity` bytes, the size of the mapped range.
        unsafe {
            sys::cuMemcpyDtoH_v2(
                host.as_mut_ptr().cast::<std::ffi::c_void>(),
                addr,
                2 * granularity,
            )
        }
        .result()
        .map_err(|e| call_error("cuMemcpyDtoH", e))?;
        for (i, (chunk, &pattern)) in host.chunks(words).zip(PATTERNS.iter()).enumerate() {
            if let Some(at) = chunk.iter().position(|&w| w != pattern) {
                return Err(BackendError::driver(
                    format!("reading back mapped granule {i}"),
                    format!(
                        "read {:#010x} at byte {}, wrote {pattern:#010x}",
                        chunk[at],
                        at * 4
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The driver calls of [`GranuleMap`] on one GPU; the caller makes its context current.
struct VmmDriver {
    prop: sys::CUmemAllocationProp,
}

impl CudaBackend {
    fn driver(&self) -> VmmDriver {
        VmmDriver {
            prop: allocation_prop(self.context.cu_device()),
        }
    }
}

fn vmm_error(op: &'static str) -> impl Fn(DriverError) -> CallError {
    move |e| CallError {
        op,
        out_of_memory: e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
        error: error_name(e),
    }
}

// SAFETY: each call is the driver function it names, on the current context.
unsafe impl PageDriver for VmmDriver {
    type Handle = sys::CUmemGenericAllocationHandle;
    fn create(&self, bytes: usize) -> Result<Self::Handle, CallError> {
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: valid out-pointer and property struct.
        unsafe { sys::cuMemCreate(&mut handle, bytes, &self.prop, 0) }
            .result()
            .map_err(vmm_error("cuMemCreate"))?;
        Ok(handle)
    }
    unsafe fn map(&self, addr: u64, bytes: usize, handle: Self::Handle) -> Result<(), CallError> {
        // SAFETY: the caller passes an unmapped part of a reserved range.
        unsafe { sys::cuMemMap(addr, bytes, 0, handle, 0) }
            .result()
            .map_err(vmm_error("cuMemMap"))
    }
    unsafe fn set_access(&self, addr: u64, bytes: usize) -> Result<(), CallError> {
        let access = sys::CUmemAccessDesc {
            location: self.prop.location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the caller passes a fully mapped range.
        unsafe { sys::cuMemSetAccess(addr, bytes, &access, 1) }
            .result()
            .map_err(vmm_error("cuMemSetAccess"))
    }
    unsafe fn unmap(&self, addr: u64, bytes: usize) -> Result<(), CallError> {
        // SAFETY: the caller passes one mapped allocation nothing uses.
        unsafe { sys::cuMemUnmap(addr, bytes) }
            .result()
            .map_err(vmm_error("cuMemUnmap"))
    }
    unsafe fn release(&self, handle: Self::Handle) -> Result<(), CallError> {
        // SAFETY: the caller releases each handle once.
        unsafe { sys::cuMemRelease(handle) }
            .result()
            .map_err(vmm_error("cuMemRelease"))
    }
}

// SAFETY: ranges come from `cuMemAddressReserve` and pages from `cuMemCreate`/`cuMemMap`, owned
// by this backend until unmapped; the backend is not host-addressable.
unsafe impl VirtualMemory for CudaBackend {
    fn granularity(&self) -> usize {
        self.vmm_granularity.unwrap_or(2 << 20)
    }
    fn reserve_range(&self, bytes: usize) -> Result<u64, BackendError> {
        let _current = self.current("cuMemAddressReserve")?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: valid out-pointer; reserving address space touches no memory.
        unsafe { sys::cuMemAddressReserve(&mut ptr, bytes, self.granularity(), 0, 0) }
            .result()
            .map_err(|e| call_error(format!("cuMemAddressReserve({bytes})"), e))?;
        Ok(ptr)
    }
    unsafe fn release_range(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        let _current = self.current("cuMemAddressFree")?;
        // SAFETY: the caller passes a reserved range with nothing mapped.
        unsafe { sys::cuMemAddressFree(addr, bytes) }
            .result()
            .map_err(|e| call_error(format!("cuMemAddressFree({addr:#x}, {bytes})"), e))
    }
    unsafe fn map(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        let _current = self.current("mapping pages")?;
        // SAFETY: forwarded contract; the context is current.
        unsafe { self.pages.map(&self.driver(), &self.name(), addr, bytes) }
    }
    unsafe fn unmap(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        let _current = self.current("unmapping pages")?;
        // Kernels queued on any stream may still use the pages: let them finish first. A
        // failure here (an earlier kernel's error) leaves every page mapped.
        result::ctx::synchronize().map_err(|e| {
            call_error(
                format!("cuCtxSynchronize before unmapping {bytes} bytes"),
                e,
            )
        })?;
        // SAFETY: forwarded contract; the context is current.
        unsafe { self.pages.unmap(&self.driver(), &self.name(), addr, bytes) }
    }
    /// Reserves two granules, maps them, writes a pattern into each with `cuMemsetD32`, reads
    /// both back with `cuMemcpyDtoH`, unmaps and releases them. `Err` names the failed step.
    fn self_test(&self) -> Result<(), BackendError> {
        let g = self.granularity();
        let bytes = 2 * g;
        let addr = self.reserve_range(bytes)?;
        // SAFETY: `[addr, addr + bytes)` was just reserved and nothing is mapped in it.
        let checked = unsafe { self.map(addr, bytes) }.and_then(|()| {
            let pattern = self.check_pattern(addr, g);
            // The memset and copy were synchronised above; nothing else uses these pages.
            let _current = self.current("the virtual memory self-test")?;
            let unmapped = self
                .pages
                .unmap_granules(&self.driver(), &self.name(), &[addr, addr + g as u64])
                .map_err(|(_, f)| BackendError::Driver(f));
            pattern.and(unmapped)
        });
        // SAFETY: the range is ours and nothing is mapped in it anymore (unmapped above, or
        // `map` undid its partial work when it failed).
        let released = unsafe { self.release_range(addr, bytes) };
        checked.and(released)
    }
}

// SAFETY: segments come from `cuMemAlloc` (disjoint, at least 256-byte aligned) and go back in
// `free_segment`; the backend is not host-addressable.
unsafe impl Backend for CudaBackend {
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
        let _current = self.current("cuMemAlloc")?;
        // SAFETY: the device's context is current on this thread; the memory is only handed out
        // as addresses.
        match unsafe { result::malloc_sync(bytes) } {
            Ok(ptr) => Ok(ptr),
            Err(DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY)) => {
                Err(BackendError::OutOfMemory { requested: bytes })
            }
            Err(e) => Err(call_error(format!("cuMemAlloc({bytes})"), e)),
        }
    }
    fn virtual_memory(&self) -> Option<&dyn VirtualMemory> {
        self.vmm_granularity.map(|_| self as &dyn VirtualMemory)
    }
    fn free_memory(&self) -> Option<usize> {
        // The driver's view: memory held by other contexts and processes is not free.
        let _current = self.current("cuMemGetInfo").ok()?;
        result::mem_get_info().ok().map(|(free, _total)| free)
    }
    unsafe fn free_segment(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        let _current = self.current("cuMemFree")?;
        // SAFETY: the caller guarantees `addr` came from `alloc_segment` and is unused.
        unsafe { result::free_sync(addr) }
            .map_err(|e| call_error(format!("cuMemFree({addr:#x}, {bytes} bytes)"), e))
    }
    fn record_event(&self, stream: StreamId) -> Result<Option<EventId>, BackendError> {
        let _current = self.current("recording a stream event")?;
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(|e| call_error("cuEventCreate", e))?;
        // SAFETY: `event` was just created in the current context; the stream handle is one the
        // caller uses on this device (`StreamId` holds the `CUstream`).
        let recorded = unsafe { result::event::record(event, stream.0 as usize as sys::CUstream) };
        if let Err(e) = recorded {
            // SAFETY: created above, never recorded, destroyed once.
            let _ = unsafe { result::event::destroy(event) };
            return Err(call_error(
                format!("cuEventRecord on stream {:#x}", stream.0),
                e,
            ));
        }
        Ok(Some(EventId(event as usize as u64)))
    }
    fn query_event(&self, event: EventId) -> Result<bool, BackendError> {
        let _current = self.current("cuEventQuery")?;
        // SAFETY: the event came from `record_event` and was not destroyed yet.
        match unsafe { result::event::query(event.0 as usize as sys::CUevent) } {
            Ok(()) => Ok(true),
            Err(DriverError(sys::CUresult::CUDA_ERROR_NOT_READY)) => Ok(false),
            Err(e) => Err(call_error("cuEventQuery", e)),
        }
    }
    fn synchronize_event(&self, event: EventId) -> Result<(), BackendError> {
        let _current = self.current("cuEventSynchronize")?;
        // SAFETY: the event came from `record_event` and was not destroyed yet.
        unsafe { result::event::synchronize(event.0 as usize as sys::CUevent) }
            .map_err(|e| call_error("cuEventSynchronize", e))
    }
    fn destroy_event(&self, event: EventId) {
        let Ok(_current) = self.current("cuEventDestroy") else {
            return;
        };
        // SAFETY: the event came from `record_event` and is destroyed once.
        if let Err(e) = unsafe { result::event::destroy(event.0 as usize as sys::CUevent) } {
            crate::diagnostics::warn(
                WarningOutput::Auto,
                &format!(
                    "cuda:{}: cuEventDestroy failed: {}",
                    self.ordinal,
                    error_name(e)
                ),
            );
        }
    }
}
