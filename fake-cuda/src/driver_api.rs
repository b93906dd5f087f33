//! The exported driver functions of the device, its context and its memory (allocation, virtual
//! memory, copies, memsets), each a small body over [`Driver`]; streams, events and launches are
//! in `execution_api`. What each enforces is in the crate documentation; the state and
//! the rules themselves live in `state`, `streams`, `pool` and `kernels`.

use crate::api::exports;
use crate::config::GRANULE;
use crate::device_memory::{self, granules};
use crate::errors::{self, CallResult, CuResult, Fail};
use crate::kernels;
use crate::state::{
    current_context, driver, Driver, Granule, PhysicalHandle, Region, CONTEXT, CONTEXT_STACK, POOL,
};
use crate::streams::Work;
use std::ffi::{c_char, c_int, c_uint, c_void};

/// `CUdeviceptr`.
pub type DevicePtr = u64;
/// An opaque handle (`CUcontext`, `CUstream`, `CUevent`, `CUmodule`, `CUfunction`,
/// `CUmemoryPool`).
pub type Handle = *mut c_void;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemLocation {
    /// `CUmemLocationType` (1: device).
    pub kind: c_uint,
    /// The device ordinal.
    pub id: c_int,
}

/// `CUmemAllocationProp`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemAllocationProp {
    /// `CUmemAllocationType` (1: pinned).
    pub kind: c_uint,
    /// `CUmemAllocationHandleType` (0: none).
    pub requested_handle_types: c_uint,
    /// Where.
    pub location: MemLocation,
    /// Windows only.
    pub win32_handle_meta_data: *mut c_void,
    /// compressionType, gpuDirectRDMACapable, usage, reserved.
    pub alloc_flags: [u8; 8],
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemAccessDesc {
    /// Where.
    pub location: MemLocation,
    /// `CUmemAccess_flags` (0: none, 1: read, 3: read-write).
    pub flags: c_uint,
}

/// Writes `value` through an out-parameter, refusing a null one.
pub(crate) fn out<T>(ptr: *mut T, value: T) -> CallResult {
    if ptr.is_null() {
        return Err(Fail::loud(errors::INVALID_VALUE, "a null output pointer"));
    }
    // SAFETY: non-null; the caller passes a valid out-pointer (the driver's contract).
    unsafe { ptr.write(value) };
    Ok(())
}

pub(crate) fn invalid(message: impl Into<String>) -> Fail {
    Fail::loud(errors::INVALID_VALUE, message)
}

fn os_error(what: &str, e: std::io::Error) -> Fail {
    Fail::loud(errors::UNKNOWN, format!("{what}: {e}"))
}

/// The stream handle of a call, checked (the null stream needs the current context, which the
/// caller has checked).
pub(crate) fn stream_of(d: &Driver, handle: Handle) -> Result<u64, Fail> {
    d.stream(handle as u64)
}

fn check_device(dev: c_int) -> CallResult {
    if dev == 0 {
        Ok(())
    } else {
        Err(Fail::loud(
            errors::INVALID_DEVICE,
            format!("no device {dev} (the fake has device 0)"),
        ))
    }
}

fn check_location(location: &MemLocation) -> CallResult {
    if location.kind != 1 || location.id != 0 {
        return Err(invalid(format!(
            "memory location (type {}, id {}) is not device 0",
            location.kind, location.id
        )));
    }
    Ok(())
}

fn check_prop(prop: *const MemAllocationProp) -> CallResult {
    if prop.is_null() {
        return Err(invalid("a null CUmemAllocationProp"));
    }
    // SAFETY: non-null, the caller's property struct.
    let prop = unsafe { &*prop };
    if prop.kind != 1 {
        return Err(invalid(format!(
            "allocation type {} is not CU_MEM_ALLOCATION_TYPE_PINNED",
            prop.kind
        )));
    }
    if prop.requested_handle_types != 0 {
        return Err(Fail::loud(
            errors::NOT_SUPPORTED,
            "shareable handle types are not modelled",
        ));
    }
    check_location(&prop.location)
}

fn whole_granules(what: &str, values: &[(&str, u64)]) -> CallResult {
    for (name, v) in values {
        if v % GRANULE as u64 != 0 {
            return Err(invalid(format!(
                "{what}: {name} = {v:#x} is not a multiple of the granularity ({GRANULE} bytes)"
            )));
        }
    }
    Ok(())
}

/// Device memory of `len` bytes from `addr` checked as a call's argument.
fn device_range(d: &Driver, addr: u64, len: usize) -> CallResult {
    d.check_argument(addr, len)
}

/// A synchronous transfer: waits as the legacy null stream does, then runs `work` at once.
fn sync_transfer(d: &mut Driver, call: &'static str, work: Work) -> CallResult {
    d.run_legacy()?;
    d.enqueue(0, call, Vec::new(), work)?;
    let tail = d.tail(0);
    d.run_to(tail)
}

fn pinned(d: &Driver, addr: u64, len: usize) -> bool {
    d.host_allocs
        .range(..=addr)
        .next_back()
        .is_some_and(|(&start, &size)| addr + len as u64 <= start + size as u64)
}

/// Device attributes (`CUdevice_attribute`): an H100-like device; 0 for the others.
fn attribute(d: &Driver, attrib: c_int) -> c_int {
    match attrib {
        1 => 1024,                        // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,                    // MAX_BLOCK_DIM_X, _Y
        4 => 64,                          // MAX_BLOCK_DIM_Z
        5 => i32::MAX,                    // MAX_GRID_DIM_X
        6 | 7 => 65535,                   // MAX_GRID_DIM_Y, _Z
        8 => 48 << 10,                    // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 64 << 10,                    // TOTAL_CONSTANT_MEMORY
        10 => 32,                         // WARP_SIZE
        12 => 65536,                      // MAX_REGISTERS_PER_BLOCK
        13 => 1_755_000,                  // CLOCK_RATE (kHz)
        16 => 132,                        // MULTIPROCESSOR_COUNT
        19 | 31 | 41 => 1, // CAN_MAP_HOST_MEMORY, CONCURRENT_KERNELS, UNIFIED_ADDRESSING
        39 => 2048,        // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 2,           // ASYNC_ENGINE_COUNT
        75 => 9,           // COMPUTE_CAPABILITY_MAJOR
        76 => 0,           // COMPUTE_CAPABILITY_MINOR
        97 => 227 << 10,   // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        102 => i32::from(d.config.vmm), // VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED
        115 => i32::from(d.config.pools), // MEMORY_POOLS_SUPPORTED
        _ => 0,
    }
}

exports! {
    unknown = errors::UNKNOWN;

    /// Initialises the driver (flags must be 0) and installs the kernel fault handler; the
    /// first time, loads the library `CUDA_INJECTION64_PATH` names, after the lock is released
    /// (`injection`).
    fn cuInit(flags: c_uint) {
        if flags != 0 {
            return Err(invalid(format!("cuInit flags must be 0, got {flags}")));
        }
        let mut d = driver()?;
        let first = !d.initialized;
        if first {
            d.initialized = true;
            kernels::install_fault_handler();
            crate::report::register();
        }
        drop(d);
        if first {
            crate::injection::at_first_init();
        }
        Ok(())
    }

    /// CUDA 12.8.
    fn cuDriverGetVersion(version: *mut c_int) {
        out(version, 12080)
    }

    /// Always one device.
    fn cuDeviceGetCount(count: *mut c_int) {
        driver()?.initialized()?;
        out(count, 1)
    }

    /// Device 0 only.
    fn cuDeviceGet(device: *mut c_int, ordinal: c_int) {
        driver()?.initialized()?;
        check_device(ordinal)?;
        out(device, 0)
    }

    /// The device's name.
    fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) {
        let d = driver()?;
        d.initialized()?;
        check_device(dev)?;
        let text = format!("vramguard fake CUDA device ({} GiB of host memory)", d.physical.total() >> 30);
        if name.is_null() || len <= 0 {
            return Err(invalid("a null or empty name buffer"));
        }
        let bytes = text.as_bytes();
        let n = bytes.len().min(len as usize - 1);
        // SAFETY: the caller's buffer holds `len` bytes; `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name.cast::<u8>(), n);
            *name.add(n) = 0;
        }
        Ok(())
    }

    /// The attributes the fake knows (its `attribute` function); others are 0.
    fn cuDeviceGetAttribute(value: *mut c_int, attrib: c_int, dev: c_int) {
        let d = driver()?;
        d.initialized()?;
        check_device(dev)?;
        out(value, attribute(&d, attrib))
    }

    /// `FAKE_CUDA_MEMORY`.
    fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) {
        let d = driver()?;
        d.initialized()?;
        check_device(dev)?;
        out(bytes, d.physical.total())
    }

    /// A fixed UUID.
    fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: c_int) {
        driver()?.initialized()?;
        check_device(dev)?;
        out(uuid, *b"vramguard-fake-0")
    }

    /// A fixed UUID.
    fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: c_int) {
        driver()?.initialized()?;
        check_device(dev)?;
        out(uuid, *b"vramguard-fake-0")
    }

    /// The name of a result code.
    fn cuGetErrorName(error: CuResult, text: *mut *const c_char) {
        match errors::name(error) {
            Some(n) => out(text, n.as_ptr()),
            None => Err(Fail::quiet(errors::INVALID_VALUE)),
        }
    }

    /// The name again (the fake has no longer descriptions).
    fn cuGetErrorString(error: CuResult, text: *mut *const c_char) {
        match errors::name(error) {
            Some(n) => out(text, n.as_ptr()),
            None => Err(Fail::quiet(errors::INVALID_VALUE)),
        }
    }

    /// Retains the primary context.
    fn cuDevicePrimaryCtxRetain(ctx: *mut Handle, dev: c_int) {
        let mut d = driver()?;
        d.initialized()?;
        check_device(dev)?;
        out(ctx, CONTEXT as Handle)?;
        d.context.retained += 1;
        Ok(())
    }

    /// Releases the primary context; the last release resets it (its sticky error goes).
    fn cuDevicePrimaryCtxRelease_v2(dev: c_int) {
        let mut d = driver()?;
        d.initialized()?;
        check_device(dev)?;
        if d.context.retained == 0 {
            return Err(Fail::loud(errors::INVALID_CONTEXT, "the primary context is not retained"));
        }
        d.context.retained -= 1;
        if d.context.retained == 0 {
            d.context.sticky = None;
        }
        Ok(())
    }

    /// Whether the primary context is active.
    fn cuDevicePrimaryCtxGetState(dev: c_int, flags: *mut c_uint, active: *mut c_int) {
        let d = driver()?;
        d.initialized()?;
        check_device(dev)?;
        out(flags, 0)?;
        out(active, i32::from(d.context.retained > 0))
    }

    /// The context current on this thread (null for none).
    fn cuCtxGetCurrent(ctx: *mut Handle) {
        driver()?.initialized()?;
        out(ctx, current_context() as Handle)
    }

    /// Replaces the top of this thread's context stack (null pops it).
    fn cuCtxSetCurrent(ctx: Handle) {
        driver()?.initialized()?;
        let ctx = ctx as u64;
        if ctx != 0 && ctx != CONTEXT {
            return Err(Fail::loud(errors::INVALID_CONTEXT, format!("{ctx:#x} is not a context")));
        }
        CONTEXT_STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.pop();
            if ctx != 0 {
                s.push(ctx);
            }
        });
        Ok(())
    }

    /// Refused: the fake has only the primary context, which `cuDevicePrimaryCtxRelease`
    /// releases (as the driver, which destroys no primary context here). Exported because a
    /// program that links the driver (cudarc's `dynamic-linking`, scripts/linking-check.sh)
    /// references it: cudarc destroys the contexts it created itself with it.
    fn cuCtxDestroy_v2(ctx: Handle) {
        driver()?.initialized()?;
        let ctx = ctx as u64;
        Err(Fail::loud(
            errors::INVALID_CONTEXT,
            format!("{ctx:#x} is not a context the fake created (it has only the primary context)"),
        ))
    }

    /// Pushes a context on this thread's stack.
    fn cuCtxPushCurrent_v2(ctx: Handle) {
        let d = driver()?;
        d.initialized()?;
        let ctx = ctx as u64;
        if ctx != CONTEXT {
            return Err(Fail::loud(errors::INVALID_CONTEXT, format!("{ctx:#x} is not a context")));
        }
        if d.context.retained == 0 {
            return Err(Fail::loud(errors::INVALID_CONTEXT, "the primary context was released"));
        }
        CONTEXT_STACK.with(|s| s.borrow_mut().push(ctx));
        Ok(())
    }

    /// Pops this thread's current context.
    fn cuCtxPopCurrent_v2(ctx: *mut Handle) {
        driver()?.initialized()?;
        let popped = CONTEXT_STACK.with(|s| s.borrow_mut().pop());
        match popped {
            Some(c) => {
                if !ctx.is_null() {
                    out(ctx, c as Handle)?;
                }
                Ok(())
            }
            None => Err(Fail::loud(errors::INVALID_CONTEXT, "cuCtxPopCurrent with no context current")),
        }
    }

    /// The device of the current context.
    fn cuCtxGetDevice(device: *mut c_int) {
        driver()?.in_context()?;
        out(device, 0)
    }

    /// Runs everything queued in the context.
    fn cuCtxSynchronize() {
        let mut d = driver()?;
        d.in_context()?;
        d.run_all()?;
        d.synchronized();
        Ok(())
    }

    /// Free and total device memory.
    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) {
        let d = driver()?;
        d.in_context()?;
        out(free, d.physical.total() - d.physical.used())?;
        out(total, d.physical.total())
    }

    /// Device memory of whole granules at a fresh address, never handed out again.
    fn cuMemAlloc_v2(dptr: *mut DevicePtr, bytes: usize) {
        let mut d = driver()?;
        d.in_context()?;
        if bytes == 0 {
            return Err(invalid("cuMemAlloc of 0 bytes"));
        }
        if dptr.is_null() {
            return Err(invalid("a null output pointer"));
        }
        let len = granules(bytes);
        let extent = d.physical.alloc(len).ok_or(Fail::quiet(errors::OUT_OF_MEMORY))?;
        let addr = match d.reserve_address_space(len, GRANULE) {
            Ok(a) => a,
            Err(e) => {
                d.physical.free(extent);
                return Err(e);
            }
        };
        // SAFETY: `addr` was just reserved for this allocation.
        if let Err(e) = unsafe { d.physical.map_at(addr, len, extent.offset, libc::PROT_READ | libc::PROT_WRITE) } {
            d.physical.free(extent);
            return Err(os_error("mmap", e));
        }
        d.regions.insert(addr, Region::Alloc { len: bytes, extent: Some(extent) });
        out(dptr, addr)
    }

    /// Frees a `cuMemAlloc` allocation: waits for the context's work first (as `cudaFree`
    /// does), then makes the range inaccessible forever.
    fn cuMemFree_v2(dptr: DevicePtr) {
        let mut d = driver()?;
        d.in_context()?;
        let extent = match d.regions.get(&dptr) {
            Some(Region::Alloc { extent: Some(e), .. }) => *e,
            Some(Region::Alloc { extent: None, .. }) => {
                return Err(invalid(format!("{dptr:#x} was already freed (cuMemFree twice)")))
            }
            _ => return Err(invalid(format!("{dptr:#x} is not an allocation of cuMemAlloc"))),
        };
        d.run_all()?;
        // SAFETY: the allocation's own range, inaccessible from now on.
        unsafe { device_memory::unmap_to_reservation(dptr, extent.len) }.map_err(|e| os_error("mmap", e))?;
        d.physical.free(extent);
        if let Some(Region::Alloc { extent, .. }) = d.regions.get_mut(&dptr) {
            *extent = None;
        }
        Ok(())
    }

    /// Stream-ordered allocation from the default pool.
    fn cuMemAllocAsync(dptr: *mut DevicePtr, bytes: usize, stream: Handle) {
        let mut d = driver()?;
        d.in_context()?;
        if !d.config.pools {
            return Err(Fail::loud(errors::NOT_SUPPORTED, "memory pools are off (FAKE_CUDA_POOLS=0)"));
        }
        let s = stream_of(&d, stream)?;
        if dptr.is_null() {
            return Err(invalid("a null output pointer"));
        }
        let addr = d.pool_alloc(bytes, s)?;
        out(dptr, addr)
    }

    /// Stream-ordered free to the default pool.
    fn cuMemFreeAsync(dptr: DevicePtr, stream: Handle) {
        let mut d = driver()?;
        d.in_context()?;
        let s = stream_of(&d, stream)?;
        let generation = d.pool_free_call(dptr, s)?;
        d.enqueue(s, "cuMemFreeAsync", Vec::new(), Work::FreeChunk { addr: dptr, generation })
    }

    /// The device's default pool.
    fn cuDeviceGetDefaultMemPool(pool: *mut Handle, dev: c_int) {
        driver()?.initialized()?;
        check_device(dev)?;
        out(pool, POOL as Handle)
    }

    /// The device's current pool (the default one).
    fn cuDeviceGetMemPool(pool: *mut Handle, dev: c_int) {
        driver()?.initialized()?;
        check_device(dev)?;
        out(pool, POOL as Handle)
    }

    /// Reads a pool attribute.
    fn cuMemPoolGetAttribute(pool: Handle, attr: c_uint, value: *mut c_void) {
        let d = driver()?;
        d.initialized()?;
        if pool as u64 != POOL {
            return Err(Fail::loud(errors::INVALID_HANDLE, format!("{:#x} is not a memory pool", pool as u64)));
        }
        let p = &d.pool;
        match attr {
            1..=3 => out(value.cast::<c_int>(), p.reuse[attr as usize - 1]),
            4 => out(value.cast::<u64>(), p.threshold),
            5 => out(value.cast::<u64>(), p.reserved),
            6 => out(value.cast::<u64>(), p.reserved_high),
            7 => out(value.cast::<u64>(), p.used),
            8 => out(value.cast::<u64>(), p.used_high),
            _ => Err(invalid(format!("pool attribute {attr} is not modelled"))),
        }
    }

    /// Sets a pool attribute: the release threshold, the reuse flags, or a high-water mark
    /// (only to 0, which resets it to the current value).
    fn cuMemPoolSetAttribute(pool: Handle, attr: c_uint, value: *mut c_void) {
        let mut d = driver()?;
        d.initialized()?;
        if pool as u64 != POOL {
            return Err(Fail::loud(errors::INVALID_HANDLE, format!("{:#x} is not a memory pool", pool as u64)));
        }
        if value.is_null() {
            return Err(invalid("a null value"));
        }
        // SAFETY: non-null; attributes 1-3 are ints, the others cuuint64_t (the driver's contract).
        let (int, wide) = unsafe { (*value.cast::<c_int>(), *value.cast::<u64>()) };
        let p = &mut d.pool;
        match attr {
            1..=3 => p.reuse[attr as usize - 1] = int,
            4 => p.threshold = wide,
            6 | 8 if wide != 0 => {
                return Err(invalid(format!("a high-water mark (attribute {attr}) can only be reset, to 0; got {wide}")))
            }
            6 => p.reserved_high = p.reserved,
            8 => p.used_high = p.used,
            5 | 7 => return Err(invalid(format!("pool attribute {attr} is read-only"))),
            _ => return Err(invalid(format!("pool attribute {attr} is not modelled"))),
        }
        Ok(())
    }

    /// Releases cached pool memory until at most `keep` bytes are reserved.
    fn cuMemPoolTrimTo(pool: Handle, keep: usize) {
        let mut d = driver()?;
        d.initialized()?;
        if pool as u64 != POOL {
            return Err(Fail::loud(errors::INVALID_HANDLE, format!("{:#x} is not a memory pool", pool as u64)));
        }
        d.pool_release(keep as u64);
        Ok(())
    }

    /// Page-locked host memory (ordinary host memory here; async copies through it are
    /// deferred as on a GPU).
    fn cuMemHostAlloc(pp: *mut *mut c_void, bytes: usize, flags: c_uint) {
        let mut d = driver()?;
        d.in_context()?;
        let _ = flags;
        let len = bytes.max(1).next_multiple_of(4096);
        // SAFETY: anonymous read-write host memory.
        let at = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        if at == libc::MAP_FAILED {
            return Err(Fail::quiet(errors::OUT_OF_MEMORY));
        }
        d.host_allocs.insert(at as u64, len);
        out(pp, at)
    }

    /// As `cuMemHostAlloc` without flags.
    fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytes: usize) {
        // SAFETY: forwarded arguments.
        match unsafe { cuMemHostAlloc(pp, bytes, 0) } {
            errors::SUCCESS => Ok(()),
            code => Err(Fail::quiet(code)),
        }
    }

    /// Frees page-locked host memory.
    fn cuMemFreeHost(p: *mut c_void) {
        let mut d = driver()?;
        d.initialized()?;
        let Some(len) = d.host_allocs.remove(&(p as u64)) else {
            return Err(invalid(format!("{:#x} is not page-locked memory of cuMemHostAlloc", p as u64)));
        };
        d.run_all()?;
        // SAFETY: our own mapping, handed back by its owner.
        unsafe { libc::munmap(p, len) };
        Ok(())
    }

    /// 2 MiB, for device 0's pinned memory.
    fn cuMemGetAllocationGranularity(granularity: *mut usize, prop: *const MemAllocationProp, option: c_uint) {
        driver()?.initialized()?;
        check_prop(prop)?;
        if option > 1 {
            return Err(invalid(format!("granularity option {option}")));
        }
        out(granularity, GRANULE)
    }

    /// Reserves address space: whole granules, inaccessible until mapped.
    fn cuMemAddressReserve(ptr: *mut DevicePtr, size: usize, alignment: usize, addr: DevicePtr, flags: u64) {
        let mut d = driver()?;
        d.initialized()?;
        whole_granules("cuMemAddressReserve", &[("size", size as u64)])?;
        if size == 0 {
            return Err(invalid("a reservation of 0 bytes"));
        }
        if alignment != 0 && (!alignment.is_power_of_two() || alignment % GRANULE != 0) {
            return Err(invalid(format!("alignment {alignment} is not a power-of-two multiple of the granularity")));
        }
        if flags != 0 {
            return Err(invalid(format!("flags {flags} (must be 0)")));
        }
        let _ = addr; // a hint the driver may ignore
        let at = d.reserve_address_space(size, alignment.max(GRANULE))?;
        d.regions.insert(at, Region::Reserved { len: size, freed: false, granules: Default::default() });
        out(ptr, at)
    }

    /// Frees a whole reservation with nothing mapped in it.
    fn cuMemAddressFree(ptr: DevicePtr, size: usize) {
        let mut d = driver()?;
        d.initialized()?;
        match d.regions.get_mut(&ptr) {
            Some(Region::Reserved { len, freed: freed @ false, granules }) => {
                if *len != size {
                    return Err(invalid(format!("the reservation at {ptr:#x} is {len} bytes, not {size}")));
                }
                if let Some(g) = granules.keys().next() {
                    return Err(invalid(format!("the reservation at {ptr:#x} still has the granule at {g:#x} mapped")));
                }
                *freed = true;
                Ok(())
            }
            Some(Region::Reserved { .. }) => Err(invalid(format!("the reservation at {ptr:#x} was already freed"))),
            _ => Err(invalid(format!("{ptr:#x} is not the start of a reservation"))),
        }
    }

    /// Creates a physical allocation of whole granules.
    fn cuMemCreate(handle: *mut u64, size: usize, prop: *const MemAllocationProp, flags: u64) {
        let mut d = driver()?;
        d.initialized()?;
        check_prop(prop)?;
        whole_granules("cuMemCreate", &[("size", size as u64)])?;
        if size == 0 || flags != 0 {
            return Err(invalid(format!("size {size}, flags {flags} (size > 0, flags 0)")));
        }
        if handle.is_null() {
            return Err(invalid("a null output pointer"));
        }
        let extent = d.physical.alloc(size).ok_or(Fail::quiet(errors::OUT_OF_MEMORY))?;
        let h = d.new_handle();
        d.handles.insert(h, PhysicalHandle { extent, mapped_granules: 0, released: false });
        out(handle, h)
    }

    /// Releases a physical allocation: its pages go once it is mapped nowhere.
    fn cuMemRelease(handle: u64) {
        let mut d = driver()?;
        d.initialized()?;
        match d.handles.get_mut(&handle) {
            Some(h) if !h.released => h.released = true,
            _ => return Err(invalid(format!("{handle:#x} is not a live allocation handle"))),
        }
        d.settle_handle(handle);
        Ok(())
    }

    /// Maps a physical allocation into unmapped granules of a reservation, without access.
    fn cuMemMap(ptr: DevicePtr, size: usize, offset: usize, handle: u64, flags: u64) {
        let mut d = driver()?;
        d.initialized()?;
        whole_granules("cuMemMap", &[("ptr", ptr), ("size", size as u64), ("offset", offset as u64)])?;
        if size == 0 || flags != 0 {
            return Err(invalid(format!("size {size}, flags {flags} (size > 0, flags 0)")));
        }
        let extent = match d.handles.get(&handle) {
            Some(h) if !h.released => h.extent,
            _ => return Err(invalid(format!("{handle:#x} is not a live allocation handle"))),
        };
        if offset + size > extent.len {
            return Err(invalid(format!("offset {offset} + size {size} exceed the allocation's {} bytes", extent.len)));
        }
        let Some((start, Region::Reserved { len, freed: false, granules })) = d.region_at(ptr) else {
            return Err(invalid(format!("{ptr:#x} is not in a reserved address range")));
        };
        if ptr + size as u64 > start + *len as u64 {
            return Err(invalid(format!("{size} bytes at {ptr:#x} run past the reservation at {start:#x}")));
        }
        if let Some(g) = granules.range(ptr..ptr + size as u64).next() {
            return Err(Fail::loud(errors::INVALID_VALUE, format!("the granule at {:#x} is already mapped", g.0)));
        }
        // SAFETY: unmapped granules of our reservation.
        unsafe { d.physical.map_at(ptr, size, extent.offset + offset, libc::PROT_NONE) }.map_err(|e| os_error("mmap", e))?;
        if let Some(Region::Reserved { granules, .. }) = d.regions.get_mut(&start) {
            for at in (ptr..ptr + size as u64).step_by(GRANULE) {
                granules.insert(at, Granule { handle, mapping: (ptr, size), prot: libc::PROT_NONE });
            }
        }
        d.handles.get_mut(&handle).expect("checked").mapped_granules += size / GRANULE;
        Ok(())
    }

    /// Sets the device's access to mapped granules (read-write, read, or none).
    fn cuMemSetAccess(ptr: DevicePtr, size: usize, desc: *const MemAccessDesc, count: usize) {
        let mut d = driver()?;
        d.initialized()?;
        whole_granules("cuMemSetAccess", &[("ptr", ptr), ("size", size as u64)])?;
        if desc.is_null() || count == 0 {
            return Err(invalid("no access descriptor"));
        }
        // SAFETY: the caller passes `count` descriptors.
        let descs = unsafe { std::slice::from_raw_parts(desc, count) };
        let mut prot = libc::PROT_NONE;
        for desc in descs {
            check_location(&desc.location)?;
            prot = match desc.flags {
                0 => libc::PROT_NONE,
                1 => libc::PROT_READ,
                3 => libc::PROT_READ | libc::PROT_WRITE,
                f => return Err(invalid(format!("access flags {f}"))),
            };
        }
        let Some((start, Region::Reserved { freed: false, granules, .. })) = d.region_at(ptr) else {
            return Err(invalid(format!("{ptr:#x} is not in a reserved address range")));
        };
        for at in (ptr..ptr + size as u64).step_by(GRANULE) {
            if !granules.contains_key(&at) {
                return Err(invalid(format!("the granule at {at:#x} is not mapped")));
            }
        }
        // SAFETY: mapped granules of our reservation.
        unsafe { device_memory::protect(ptr, size, prot) }.map_err(|e| os_error("mprotect", e))?;
        if let Some(Region::Reserved { granules, .. }) = d.regions.get_mut(&start) {
            for g in granules.range_mut(ptr..ptr + size as u64) {
                g.1.prot = prot;
            }
        }
        Ok(())
    }

    /// Unmaps whole mappings: the granules become inaccessible at once, whatever work is still
    /// queued (`cuMemUnmap` is not stream-ordered; queued work that touches them faults).
    fn cuMemUnmap(ptr: DevicePtr, size: usize) {
        let mut d = driver()?;
        d.initialized()?;
        whole_granules("cuMemUnmap", &[("ptr", ptr), ("size", size as u64)])?;
        let end = ptr + size as u64;
        let Some((start, Region::Reserved { freed: false, granules, .. })) = d.region_at(ptr) else {
            return Err(invalid(format!("{ptr:#x} is not in a reserved address range")));
        };
        let mut handles = Vec::new();
        for at in (ptr..end).step_by(GRANULE) {
            let Some(g) = granules.get(&at) else {
                return Err(invalid(format!("the granule at {at:#x} is not mapped")));
            };
            let (m, len) = g.mapping;
            if m < ptr || m + len as u64 > end {
                return Err(invalid(format!(
                    "{size} bytes at {ptr:#x} cover part of the mapping of {len} bytes at {m:#x} \
                     (mappings are unmapped whole)"
                )));
            }
            handles.push(g.handle);
        }
        // SAFETY: granules of our reservation.
        unsafe { device_memory::unmap_to_reservation(ptr, size) }.map_err(|e| os_error("mmap", e))?;
        if let Some(Region::Reserved { granules, .. }) = d.regions.get_mut(&start) {
            let keys: Vec<u64> = granules.range(ptr..end).map(|(&k, _)| k).collect();
            for k in keys {
                granules.remove(&k);
            }
        }
        for h in handles {
            if let Some(handle) = d.handles.get_mut(&h) {
                handle.mapped_granules -= 1;
            }
            d.settle_handle(h);
        }
        Ok(())
    }

    /// Copies host memory to the device, after the legacy stream's work.
    fn cuMemcpyHtoD_v2(dst: DevicePtr, src: *const c_void, bytes: usize) {
        let mut d = driver()?;
        d.in_context()?;
        device_range(&d, dst, bytes)?;
        // SAFETY: the caller's source holds `bytes` bytes.
        let data = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), bytes) }.to_vec();
        sync_transfer(&mut d, "cuMemcpyHtoD", Work::Write { dst, bytes: data })
    }

    /// Copies device memory to the host, after the legacy stream's work.
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: DevicePtr, bytes: usize) {
        let mut d = driver()?;
        d.in_context()?;
        device_range(&d, src, bytes)?;
        sync_transfer(&mut d, "cuMemcpyDtoH", Work::ReadToHost { dst: dst as u64, src, len: bytes })
    }

    /// Copies device memory, after the legacy stream's work.
    fn cuMemcpyDtoD_v2(dst: DevicePtr, src: DevicePtr, bytes: usize) {
        let mut d = driver()?;
        d.in_context()?;
        device_range(&d, dst, bytes)?;
        device_range(&d, src, bytes)?;
        sync_transfer(&mut d, "cuMemcpyDtoD", Work::Copy { dst, src, len: bytes })
    }

    /// Queues a copy to the device: pageable source bytes are taken now, page-locked ones
    /// when the copy runs.
    fn cuMemcpyHtoDAsync_v2(dst: DevicePtr, src: *const c_void, bytes: usize, stream: Handle) {
        let mut d = driver()?;
        d.in_context()?;
        let s = stream_of(&d, stream)?;
        device_range(&d, dst, bytes)?;
        let work = if pinned(&d, src as u64, bytes) {
            Work::WriteFromHost { dst, src: src as u64, len: bytes }
        } else {
            // SAFETY: the caller's source holds `bytes` bytes.
            Work::Write { dst, bytes: unsafe { std::slice::from_raw_parts(src.cast::<u8>(), bytes) }.to_vec() }
        };
        d.enqueue(s, "cuMemcpyHtoDAsync", Vec::new(), work)
    }

    /// Queues a copy to the host: into pageable memory it completes before returning (as the
    /// driver does), into page-locked memory when the stream gets to it.
    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: DevicePtr, bytes: usize, stream: Handle) {
        let mut d = driver()?;
        d.in_context()?;
        let s = stream_of(&d, stream)?;
        device_range(&d, src, bytes)?;
        d.enqueue(s, "cuMemcpyDtoHAsync", Vec::new(), Work::ReadToHost { dst: dst as u64, src, len: bytes })?;
        if !pinned(&d, dst as u64, bytes) {
            let tail = d.tail(s);
            d.run_to(tail)?;
        }
        Ok(())
    }

    /// Queues a device-to-device copy.
    fn cuMemcpyDtoDAsync_v2(dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Handle) {
        let mut d = driver()?;
        d.in_context()?;
        let s = stream_of(&d, stream)?;
        device_range(&d, dst, bytes)?;
        device_range(&d, src, bytes)?;
        d.enqueue(s, "cuMemcpyDtoDAsync", Vec::new(), Work::Copy { dst, src, len: bytes })
    }

    /// Queues a copy between contexts (one device, one context here: a device copy).
    fn cuMemcpyPeerAsync(dst: DevicePtr, dst_ctx: Handle, src: DevicePtr, src_ctx: Handle, bytes: usize, stream: Handle) {
        let mut d = driver()?;
        d.in_context()?;
        if dst_ctx as u64 != CONTEXT || src_ctx as u64 != CONTEXT {
            return Err(Fail::loud(errors::INVALID_CONTEXT, "a peer copy between unknown contexts"));
        }
        let s = stream_of(&d, stream)?;
        device_range(&d, dst, bytes)?;
        device_range(&d, src, bytes)?;
        d.enqueue(s, "cuMemcpyPeerAsync", Vec::new(), Work::Copy { dst, src, len: bytes })
    }

    /// Sets bytes, after the legacy stream's work.
    fn cuMemsetD8_v2(dst: DevicePtr, value: u8, count: usize) {
        let mut d = driver()?;
        d.in_context()?;
        device_range(&d, dst, count)?;
        sync_transfer(&mut d, "cuMemsetD8", Work::Set { dst, value: u32::from(value), width: 1, count })
    }

    /// Queues a byte memset.
    fn cuMemsetD8Async(dst: DevicePtr, value: u8, count: usize, stream: Handle) {
        let mut d = driver()?;
        d.in_context()?;
        let s = stream_of(&d, stream)?;
        device_range(&d, dst, count)?;
        d.enqueue(s, "cuMemsetD8Async", Vec::new(), Work::Set { dst, value: u32::from(value), width: 1, count })
    }

    /// Sets 32-bit words (4-byte aligned), after the legacy stream's work.
    fn cuMemsetD32_v2(dst: DevicePtr, value: c_uint, count: usize) {
        let mut d = driver()?;
        d.in_context()?;
        if dst % 4 != 0 {
            return Err(invalid(format!("{dst:#x} is not 4-byte aligned")));
        }
        device_range(&d, dst, count * 4)?;
        sync_transfer(&mut d, "cuMemsetD32", Work::Set { dst, value, width: 4, count })
    }

    /// Queues a 32-bit memset.
    fn cuMemsetD32Async(dst: DevicePtr, value: c_uint, count: usize, stream: Handle) {
        let mut d = driver()?;
        d.in_context()?;
        let s = stream_of(&d, stream)?;
        if dst % 4 != 0 {
            return Err(invalid(format!("{dst:#x} is not 4-byte aligned")));
        }
        device_range(&d, dst, count * 4)?;
        d.enqueue(s, "cuMemsetD32Async", Vec::new(), Work::Set { dst, value, width: 4, count })
    }
}
