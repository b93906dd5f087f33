//! CUDA backend: segments from the driver (`cuMemAlloc`/`cuMemFree`) through cudarc, loaded at
//! run time, and the error of opening a CUDA device ([`DeviceError`]). The typed buffer for
//! cudarc's kernel launches is `crate::device::CudaBuffer`.
//!
//! With expandable segments (the default `expandable_segments:auto`, or `true`) the backend maps
//! memory into a reserved address range through the driver's virtual memory management
//! (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`, `cuMemSetAccess`; `cuMemUnmap` +
//! `cuMemRelease` to give pages back), one handle per granule (2 MiB or the device's minimum
//! granularity if larger), on GPUs that report
//! `CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED`. Before an allocator uses them, a
//! self-test ([`VirtualMemory::self_test`]) reserves two granules, maps them, writes a pattern
//! into each with `cuMemsetD32`, reads it back with `cuMemcpyDtoH`, and unmaps and releases
//! them; under `auto` any failure (or a GPU without the attribute) means fixed segments
//! (`cuMemAlloc`), with a warning naming the failed step.
//!
//! The driver library is probed with `is_culib_present()` before any driver call: cudarc panics
//! when it is missing, this module returns [`DeviceError::NoDriver`] instead.
//!
//! Segment calls are synchronous (`cuMemAlloc`/`cuMemFree` are not stream-ordered).

use super::{Backend, BackendError, SetupError, VirtualMemory};
use cudarc::driver::{result, sys, CudaContext, DriverError};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A device that cannot be opened.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeviceError {
    /// The CUDA driver library is not installed.
    #[error("no CUDA driver found (libcuda.so): install the NVIDIA driver or use Device::Host")]
    NoDriver,
    /// The driver sees no GPU with this ordinal.
    #[error("no CUDA device {ordinal}: the driver sees {count} device(s); pick an ordinal below {count} or use Device::Host")]
    NoDevice {
        /// Ordinal asked for.
        ordinal: usize,
        /// Devices the driver reports.
        count: usize,
    },
    /// A driver call failed.
    #[error("CUDA driver call {op} failed: {message}")]
    Driver {
        /// The driver function.
        op: &'static str,
        /// The driver's error name.
        message: String,
    },
    /// The allocator settings cannot be used on this device.
    #[error(transparent)]
    Config(#[from] SetupError),
}

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
    /// Mapping granularity, when the GPU supports virtual memory management.
    vmm_granularity: Option<usize>,
    /// Physical allocation handle of each mapped granule, by address.
    mapped: Mutex<BTreeMap<u64, sys::CUmemGenericAllocationHandle>>,
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
            vmm_granularity: vmm_granularity(context.cu_device()),
            context,
            capacity: total,
            mapped: Mutex::new(BTreeMap::new()),
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

impl CudaBackend {
    fn bind(&self) -> Result<(), BackendError> {
        self.context
            .bind_to_thread()
            .map_err(|e| BackendError::Driver(format!("binding the context: {e}")))
    }

    /// Unmaps and releases the granules starting at `addrs` (all mapped by this backend).
    /// Every granule is attempted; returns the first failure (also logged).
    fn unmap_granules(&self, addrs: &[u64], granularity: usize) -> Result<(), String> {
        let mut mapped = self.mapped.lock().unwrap_or_else(|e| e.into_inner());
        let mut first = Ok(());
        for addr in addrs {
            let Some(handle) = mapped.remove(addr) else {
                continue;
            };
            // SAFETY: `addr` is a mapped granule of this backend that nothing uses; its handle is
            // released once, after the unmap.
            let steps = unsafe {
                [
                    ("cuMemUnmap", sys::cuMemUnmap(*addr, granularity).result()),
                    ("cuMemRelease", sys::cuMemRelease(handle).result()),
                ]
            };
            for (op, r) in steps {
                if let Err(e) = r {
                    tracing::warn!("cuda:{}: {op} failed: {e}", self.ordinal);
                    if first.is_ok() {
                        first = Err(format!("{op}: {e}"));
                    }
                }
            }
        }
        first
    }

    /// Writes a different 32-bit pattern into each of the two granules at `addr` with the
    /// driver's memset, copies both back to the host and compares every word.
    fn check_pattern(&self, addr: u64, granularity: usize) -> Result<(), BackendError> {
        const PATTERNS: [u32; 2] = [0xa5c3_0f96, 0x5a3c_f069];
        let words = granularity / 4;
        let fail = |op: &str, e: DriverError| BackendError::Driver(format!("{op}: {e}"));
        for (i, &pattern) in PATTERNS.iter().enumerate() {
            let at = addr + (i * granularity) as u64;
            // SAFETY: `[at, at + granularity)` is mapped read-write by the caller and used by
            // nothing else; the context is current (bound by `reserve_range`).
            unsafe { sys::cuMemsetD32_v2(at, pattern, words) }
                .result()
                .map_err(|e| fail("cuMemsetD32", e))?;
        }
        // SAFETY: plain synchronisation of the current context.
        unsafe { sys::cuCtxSynchronize() }
            .result()
            .map_err(|e| fail("cuCtxSynchronize after cuMemsetD32", e))?;
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
        .map_err(|e| fail("cuMemcpyDtoH", e))?;
        for (i, (chunk, &pattern)) in host.chunks(words).zip(PATTERNS.iter()).enumerate() {
            if let Some(at) = chunk.iter().position(|&w| w != pattern) {
                return Err(BackendError::Driver(format!(
                    "read back {:#010x} at byte {} of mapped granule {i}, wrote {pattern:#010x}",
                    chunk[at],
                    at * 4
                )));
            }
        }
        Ok(())
    }
}

// SAFETY: ranges come from `cuMemAddressReserve` and pages from `cuMemCreate`/`cuMemMap`, owned
// by this backend until unmapped; the backend is not host-addressable.
unsafe impl VirtualMemory for CudaBackend {
    fn granularity(&self) -> usize {
        self.vmm_granularity.unwrap_or(2 << 20)
    }
    fn reserve_range(&self, bytes: usize) -> Result<u64, BackendError> {
        self.bind()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: valid out-pointer; reserving address space touches no memory.
        unsafe { sys::cuMemAddressReserve(&mut ptr, bytes, self.granularity(), 0, 0) }
            .result()
            .map_err(|e| BackendError::Driver(format!("cuMemAddressReserve({bytes}): {e}")))?;
        Ok(ptr)
    }
    unsafe fn release_range(&self, addr: u64, bytes: usize) {
        if self.bind().is_err() {
            return;
        }
        // SAFETY: the caller passes a reserved range with nothing mapped.
        if let Err(e) = unsafe { sys::cuMemAddressFree(addr, bytes) }.result() {
            tracing::warn!("cuda:{}: cuMemAddressFree failed: {e}", self.ordinal);
        }
    }
    unsafe fn map(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        self.bind()?;
        let g = self.granularity();
        let prop = allocation_prop(self.context.cu_device());
        let access = sys::CUmemAccessDesc {
            location: prop.location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        let mut done: Vec<u64> = Vec::new();
        for at in (addr..addr + bytes as u64).step_by(g) {
            let mut handle: sys::CUmemGenericAllocationHandle = 0;
            // SAFETY: valid out-pointer and property struct; `at` is an unmapped granule of a
            // range this backend reserved (the caller's contract).
            let step = unsafe {
                sys::cuMemCreate(&mut handle, g, &prop, 0)
                    .result()
                    .and_then(|()| {
                        sys::cuMemMap(at, g, 0, handle, 0)
                            .result()
                            .inspect_err(|_| {
                                let _ = sys::cuMemRelease(handle);
                            })
                    })
            };
            let step = step.and_then(|()| {
                self.mapped
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(at, handle);
                done.push(at);
                // SAFETY: `at` was just mapped.
                unsafe { sys::cuMemSetAccess(at, g, &access, 1) }.result()
            });
            if let Err(e) = step {
                // Already failing: the unmap's own failures are logged.
                let _ = self.unmap_granules(&done, g);
                return Err(match e {
                    DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY) => {
                        BackendError::OutOfMemory { requested: bytes }
                    }
                    e => BackendError::Driver(format!("mapping {bytes} bytes: {e}")),
                });
            }
        }
        Ok(())
    }
    unsafe fn unmap(&self, addr: u64, bytes: usize) {
        if self.bind().is_err() {
            return;
        }
        // Kernels queued on any stream may still use the pages: let them finish first.
        if let Err(e) = result::ctx::synchronize() {
            tracing::warn!(
                "cuda:{}: synchronize before unmap failed: {e}",
                self.ordinal
            );
        }
        let g = self.granularity();
        let addrs: Vec<u64> = (addr..addr + bytes as u64).step_by(g).collect();
        // Failures are logged; the pages are not used again either way.
        let _ = self.unmap_granules(&addrs, g);
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
            let addrs = [addr, addr + g as u64];
            // The memset and copy were synchronised above; nothing else uses these pages.
            let unmapped = self.unmap_granules(&addrs, g).map_err(BackendError::Driver);
            pattern.and(unmapped)
        });
        // SAFETY: the range is ours and nothing is mapped in it anymore (unmapped above, or
        // `map` undid its partial work when it failed).
        let released = unsafe { sys::cuMemAddressFree(addr, bytes) }
            .result()
            .map_err(|e| BackendError::Driver(format!("cuMemAddressFree: {e}")));
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
    fn virtual_memory(&self) -> Option<&dyn VirtualMemory> {
        self.vmm_granularity.map(|_| self as &dyn VirtualMemory)
    }
    fn free_memory(&self) -> Option<usize> {
        // The driver's view: memory held by other contexts and processes is not free.
        self.context.bind_to_thread().ok()?;
        result::mem_get_info().ok().map(|(free, _total)| free)
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
