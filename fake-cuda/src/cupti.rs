//! A fake CUPTI callback API (issue #39): the `cupti*` functions vramguard's observer calls,
//! exported from this same library, which `scripts/fake-cuda.sh` also links as `libcupti.so`.
//! Loaded under both names the library is one object (the dynamic loader recognises the file),
//! so the subscriber is called straight from the fake driver's calls ([`crate::api`]'s seam).
//!
//! It owns the subscriber and its enabled callbacks, and the translation of a driver call into
//! what a CUPTI subscriber receives: `(userdata, CUPTI_CB_DOMAIN_DRIVER_API, cbid,
//! &CUpti_CallbackData)` on entry and on exit, with the real layouts — `CUpti_CallbackData`
//! ([`CallbackData`]) and, as `functionParams`, the call's `NAME_params` struct (the fake's
//! [`crate::api`] lays them out as CUPTI does). The callback ids are those of CUDA 12.8's
//! `cupti_driver_cbid.h`. The unit tests check layouts and ids against cudarc's bindings,
//! which are generated from NVIDIA's headers.
//!
//! As CUPTI before 13.2, it takes one subscriber: a second `cuptiSubscribe` (in the program,
//! a profiler such as Nsight Systems that got there first) fails with
//! `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED` until the first unsubscribes.
//!
//! What it does not model: the runtime API domain (there is no fake `libcudart`; its callbacks
//! can be enabled and are never called), the resource, synchronisation, NVTX and state
//! domains, activities and the event and metric APIs; `symbolName` is always null.

use crate::api::{self, CallSite, Phase};
use crate::state::{current_context, CONTEXT};
use std::cell::Cell;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::RwLock;

/// `CUptiResult`.
pub type CuptiResult = u32;

/// Success.
pub const SUCCESS: CuptiResult = 0;
/// A bad argument.
pub const INVALID_PARAMETER: CuptiResult = 1;
/// A context that is not the fake's.
pub const INVALID_CONTEXT: CuptiResult = 3;
/// Another subscriber holds the callback API.
pub const MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: CuptiResult = 39;

/// `CUPTI_CB_DOMAIN_DRIVER_API`.
pub const DOMAIN_DRIVER: u32 = 1;
/// `CUPTI_CB_DOMAIN_RUNTIME_API`.
pub const DOMAIN_RUNTIME: u32 = 2;
/// `CUPTI_API_ENTER`.
pub const API_ENTER: u32 = 0;
/// `CUPTI_API_EXIT`.
pub const API_EXIT: u32 = 1;

/// `CUpti_CallbackData`: what a callback of the API domains receives.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CallbackData {
    /// `CUPTI_API_ENTER` or `CUPTI_API_EXIT`.
    pub callback_site: u32,
    /// The function's name.
    pub function_name: *const c_char,
    /// Its parameters: the `NAME_params` struct.
    pub function_params: *const c_void,
    /// Where its return value is (valid on exit).
    pub function_return_value: *mut c_void,
    /// The kernel's name for launches (always null here).
    pub symbol_name: *const c_char,
    /// The current context (null for none).
    pub context: *mut c_void,
    /// The context's unique id.
    pub context_uid: u32,
    /// A slot of the subscriber's, the same at entry and exit of one call.
    pub correlation_data: *mut u64,
    /// The call's correlation id, the same at entry and exit.
    pub correlation_id: u32,
}

/// `CUpti_CallbackFunc`.
pub type CallbackFunc = Option<
    unsafe extern "C" fn(userdata: *mut c_void, domain: u32, cbid: u32, data: *const c_void),
>;

/// The subscriber.
#[derive(Clone, Copy)]
struct Subscriber {
    callback: unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void),
    userdata: usize,
}

static SUBSCRIBER: RwLock<Option<Subscriber>> = RwLock::new(None);

/// The subscriber handle handed out (a non-null value of no meaning).
const HANDLE: usize = 0xc0b7_1000;

/// Callback ids are below this.
const MAX_CBID: usize = 1024;

/// Enabled callbacks of the driver and runtime domains, one bit per callback id.
static ENABLED: [[AtomicU64; MAX_CBID / 64]; 2] =
    [const { [const { AtomicU64::new(0) }; MAX_CBID / 64] }; 2];

static NEXT_CORRELATION: AtomicU32 = AtomicU32::new(1);

/// Nested calls a thread may be inside (a callback that calls the driver) with their own
/// correlation slots.
const MAX_DEPTH: usize = 16;

/// One open call that was dispatched on entry.
#[derive(Clone, Copy)]
struct OpenCall {
    /// Its parameters' address: tells the call's exit from a nested call's.
    params: usize,
    correlation_id: u32,
}

thread_local! {
    /// The calls dispatched on entry and not yet on exit, innermost last.
    static OPEN: [Cell<OpenCall>; MAX_DEPTH] =
        const { [const { Cell::new(OpenCall { params: 0, correlation_id: 0 }) }; MAX_DEPTH] };
    /// Each open call's correlation data, the subscriber's between entry and exit.
    static DATA: [Cell<u64>; MAX_DEPTH] = const { [const { Cell::new(0) }; MAX_DEPTH] };
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// The driver functions the fake exports and their ids in `CUpti_driver_api_trace_cbid`
/// (CUDA 12.8).
pub const DRIVER_CBIDS: &[(&CStr, u32)] = &[
    (c"cuInit", 1),
    (c"cuDriverGetVersion", 2),
    (c"cuDeviceGet", 3),
    (c"cuDeviceGetCount", 4),
    (c"cuDeviceGetName", 5),
    (c"cuDeviceGetAttribute", 9),
    (c"cuCtxGetDevice", 16),
    (c"cuCtxSynchronize", 17),
    (c"cuModuleLoad", 18),
    (c"cuModuleLoadData", 19),
    (c"cuModuleUnload", 22),
    (c"cuModuleGetFunction", 23),
    (c"cuMemFreeHost", 38),
    (c"cuMemHostAlloc", 39),
    (c"cuFuncGetAttribute", 85),
    (c"cuEventCreate", 118),
    (c"cuEventRecord", 119),
    (c"cuEventQuery", 120),
    (c"cuEventSynchronize", 121),
    (c"cuEventElapsedTime", 123),
    (c"cuStreamCreate", 124),
    (c"cuStreamQuery", 125),
    (c"cuStreamSynchronize", 126),
    (c"cuMemsetD8Async", 216),
    (c"cuMemsetD32Async", 220),
    (c"cuMemGetInfo_v2", 242),
    (c"cuMemAlloc_v2", 243),
    (c"cuMemFree_v2", 245),
    (c"cuMemsetD8_v2", 249),
    (c"cuMemsetD32_v2", 251),
    (c"cuDeviceTotalMem_v2", 259),
    (c"cuMemcpyHtoD_v2", 276),
    (c"cuMemcpyHtoDAsync_v2", 277),
    (c"cuMemcpyDtoH_v2", 278),
    (c"cuMemcpyDtoHAsync_v2", 279),
    (c"cuMemcpyDtoD_v2", 280),
    (c"cuMemcpyDtoDAsync_v2", 281),
    (c"cuMemAllocHost_v2", 294),
    (c"cuStreamWaitEvent", 295),
    (c"cuCtxSetCurrent", 303),
    (c"cuCtxGetCurrent", 304),
    (c"cuLaunchKernel", 307),
    (c"cuMemcpyPeerAsync", 319),
    (c"cuCtxDestroy_v2", 322),
    (c"cuCtxPushCurrent_v2", 323),
    (c"cuCtxPopCurrent_v2", 324),
    (c"cuEventDestroy_v2", 325),
    (c"cuStreamDestroy_v2", 326),
    (c"cuStreamCreateWithPriority", 367),
    (c"cuGetErrorString", 372),
    (c"cuGetErrorName", 373),
    (c"cuDevicePrimaryCtxRetain", 386),
    (c"cuDevicePrimaryCtxGetState", 392),
    (c"cuDeviceGetUuid", 482),
    (c"cuLaunchHostFunc", 527),
    (c"cuDevicePrimaryCtxRelease_v2", 544),
    (c"cuMemAddressReserve", 547),
    (c"cuMemAddressFree", 548),
    (c"cuMemCreate", 549),
    (c"cuMemRelease", 550),
    (c"cuMemMap", 551),
    (c"cuMemUnmap", 552),
    (c"cuMemSetAccess", 553),
    (c"cuMemGetAllocationGranularity", 556),
    (c"cuMemAllocAsync", 598),
    (c"cuMemFreeAsync", 600),
    (c"cuMemPoolTrimTo", 602),
    (c"cuMemPoolSetAttribute", 603),
    (c"cuMemPoolGetAttribute", 604),
    (c"cuDeviceGetDefaultMemPool", 606),
    (c"cuDeviceGetMemPool", 610),
    (c"cuMemAllocFromPoolAsync", 611),
    (c"cuDeviceGetUuid_v2", 647),
    (c"cuEventElapsedTime_v2", 780),
];

/// The callback id and the NUL-terminated name of driver function `name` (`None` for the
/// fake cuBLAS's functions, which CUPTI does not see either).
fn driver_cbid(name: &str) -> Option<(u32, &'static CStr)> {
    DRIVER_CBIDS
        .iter()
        .find(|(n, _)| n.to_bytes() == name.as_bytes())
        .map(|&(n, id)| (id, n))
}

/// Slots of [`NAMES_SEEN`].
const NAME_SLOTS: usize = 128;

/// What [`driver_cbid`] said of a name: the callback id and the name, if it has one.
type Known = Option<(u32, &'static CStr)>;

thread_local! {
    /// [`driver_cbid`] of the names this thread dispatched, by the address of the exported
    /// function's `&'static str` name (one per function): a direct-mapped cache, so that a call
    /// costs a comparison rather than a search of the table (the observer's benchmark measures
    /// its callback through this dispatch).
    static NAMES_SEEN: [Cell<(usize, Known)>; NAME_SLOTS] =
        const { [const { Cell::new((0, None)) }; NAME_SLOTS] };
}

/// [`driver_cbid`] through this thread's cache.
fn cached_cbid(name: &'static str) -> Known {
    let key = name.as_ptr() as usize;
    let slot = (key >> 3) % NAME_SLOTS;
    NAMES_SEEN
        .try_with(|seen| {
            let (cached, found) = seen[slot].get();
            if cached == key {
                return found;
            }
            let found = driver_cbid(name);
            seen[slot].set((key, found));
            found
        })
        .unwrap_or_else(|_| driver_cbid(name))
}

fn enabled(domain: u32, cbid: u32) -> bool {
    let (Some(bits), true) = (
        ENABLED.get(domain.wrapping_sub(1) as usize),
        (cbid as usize) < MAX_CBID,
    ) else {
        return false;
    };
    bits[cbid as usize / 64].load(Relaxed) & (1 << (cbid % 64)) != 0
}

fn set_enabled(domain: u32, cbid: u32, on: bool) {
    let bits = &ENABLED[domain as usize - 1];
    let bit = 1u64 << (cbid % 64);
    if on {
        bits[cbid as usize / 64].fetch_or(bit, Relaxed);
    } else {
        bits[cbid as usize / 64].fetch_and(!bit, Relaxed);
    }
}

fn current_subscriber() -> Option<Subscriber> {
    *SUBSCRIBER.read().unwrap_or_else(|e| e.into_inner())
}

/// The observer installed in [`crate::api`] while a subscriber is: calls it for each enabled
/// driver function on entry, and on exit for each call it was called for on entry. The
/// subscriber is copied out first, so no lock is held while it runs (it may call the driver,
/// which comes back here).
fn dispatch(site: &CallSite) {
    let Some((cbid, name)) = cached_cbid(site.name) else {
        return;
    };
    let (callback_site, mut result) = match site.phase {
        Phase::Enter => (API_ENTER, 0u32),
        Phase::Exit { result } => (API_EXIT, result),
    };
    let open = if callback_site == API_ENTER {
        if !enabled(DOMAIN_DRIVER, cbid) {
            return;
        }
        open_call(site.params as usize)
    } else {
        innermost_call(site.params as usize)
    };
    let Some((at, correlation_id)) = open else {
        return;
    };
    if let Some(subscriber) = current_subscriber() {
        let context = current_context();
        let correlation_data = DATA
            .try_with(|d| d[at].as_ptr())
            .unwrap_or(std::ptr::null_mut());
        let data = CallbackData {
            callback_site,
            function_name: name.as_ptr(),
            function_params: site.params,
            function_return_value: (&mut result as *mut u32).cast(),
            symbol_name: std::ptr::null(),
            context: context as *mut c_void,
            context_uid: u32::from(context != 0),
            correlation_data,
            correlation_id,
        };
        // SAFETY: the subscriber's callback with its own userdata, and a `CUpti_CallbackData`
        // that lives for the call; the parameters it points to live for the driver call around
        // this, the correlation slot for the thread.
        unsafe {
            (subscriber.callback)(
                subscriber.userdata as *mut c_void,
                DOMAIN_DRIVER,
                cbid,
                (&data as *const CallbackData).cast(),
            )
        };
    }
    if callback_site == API_EXIT {
        let _ = DEPTH.try_with(|d| d.set(at));
    }
}

/// Opens a call on this thread's stack: its slot and a new correlation id (`None` past
/// [`MAX_DEPTH`] nested calls).
fn open_call(params: usize) -> Option<(usize, u32)> {
    let depth = DEPTH.try_with(Cell::get).ok()?;
    if depth >= MAX_DEPTH {
        return None;
    }
    let correlation_id = NEXT_CORRELATION.fetch_add(1, Relaxed);
    OPEN.try_with(|o| {
        o[depth].set(OpenCall {
            params,
            correlation_id,
        })
    })
    .ok()?;
    DATA.try_with(|d| d[depth].set(0)).ok()?;
    DEPTH.try_with(|d| d.set(depth + 1)).ok()?;
    Some((depth, correlation_id))
}

/// The innermost open call, when it is the call whose parameters are at `params` (a call not
/// dispatched on entry is not dispatched on exit either).
fn innermost_call(params: usize) -> Option<(usize, u32)> {
    let at = DEPTH.try_with(Cell::get).ok()?.checked_sub(1)?;
    let open = OPEN.try_with(|o| o[at].get()).ok()?;
    (open.params == params).then_some((at, open.correlation_id))
}

/// Writes `value` through an out-parameter, refusing a null one.
fn out<T>(ptr: *mut T, value: T) -> CuptiResult {
    if ptr.is_null() {
        return INVALID_PARAMETER;
    }
    // SAFETY: non-null; the caller passes a valid out-pointer (CUPTI's contract).
    unsafe { ptr.write(value) };
    SUCCESS
}

/// Subscribes `callback`: only one subscriber at a time.
///
/// # Safety
/// `subscriber` valid for a write; `callback` callable with `userdata` from any thread.
#[no_mangle]
pub unsafe extern "C" fn cuptiSubscribe(
    subscriber: *mut *mut c_void,
    callback: CallbackFunc,
    userdata: *mut c_void,
) -> CuptiResult {
    let Some(callback) = callback else {
        return INVALID_PARAMETER;
    };
    if subscriber.is_null() {
        return INVALID_PARAMETER;
    }
    let mut current = SUBSCRIBER.write().unwrap_or_else(|e| e.into_inner());
    if current.is_some() {
        return MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    for domain in &ENABLED {
        for word in domain {
            word.store(0, Relaxed);
        }
    }
    *current = Some(Subscriber {
        callback,
        userdata: userdata as usize,
    });
    api::set_observer(Some(dispatch));
    out(subscriber, HANDLE as *mut c_void)
}

/// Removes the subscriber: no callback from now on.
///
/// # Safety
/// None beyond CUPTI's: a handle from [`cuptiSubscribe`].
#[no_mangle]
pub unsafe extern "C" fn cuptiUnsubscribe(subscriber: *mut c_void) -> CuptiResult {
    let mut current = SUBSCRIBER.write().unwrap_or_else(|e| e.into_inner());
    if subscriber as usize != HANDLE || current.is_none() {
        return INVALID_PARAMETER;
    }
    *current = None;
    api::set_observer(None);
    SUCCESS
}

fn check_subscriber(subscriber: *mut c_void, domain: u32) -> CuptiResult {
    if subscriber as usize != HANDLE || current_subscriber().is_none() {
        return INVALID_PARAMETER;
    }
    if domain != DOMAIN_DRIVER && domain != DOMAIN_RUNTIME {
        return INVALID_PARAMETER;
    }
    SUCCESS
}

/// Turns one callback on (`enable` 1) or off (0).
///
/// # Safety
/// None beyond CUPTI's.
#[no_mangle]
pub unsafe extern "C" fn cuptiEnableCallback(
    enable: u32,
    subscriber: *mut c_void,
    domain: u32,
    cbid: u32,
) -> CuptiResult {
    match check_subscriber(subscriber, domain) {
        SUCCESS if (cbid as usize) < MAX_CBID => {
            set_enabled(domain, cbid, enable != 0);
            SUCCESS
        }
        SUCCESS => INVALID_PARAMETER,
        error => error,
    }
}

/// Turns every callback of a domain on or off.
///
/// # Safety
/// None beyond CUPTI's.
#[no_mangle]
pub unsafe extern "C" fn cuptiEnableDomain(
    enable: u32,
    subscriber: *mut c_void,
    domain: u32,
) -> CuptiResult {
    match check_subscriber(subscriber, domain) {
        SUCCESS => {
            for word in &ENABLED[domain as usize - 1] {
                word.store(if enable != 0 { u64::MAX } else { 0 }, Relaxed);
            }
            SUCCESS
        }
        error => error,
    }
}

/// Whether one callback is on.
///
/// # Safety
/// `enable` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuptiGetCallbackState(
    enable: *mut u32,
    subscriber: *mut c_void,
    domain: u32,
    cbid: u32,
) -> CuptiResult {
    match check_subscriber(subscriber, domain) {
        SUCCESS => out(enable, u32::from(enabled(domain, cbid))),
        error => error,
    }
}

/// The device of a context: the fake's one context is device 0.
///
/// # Safety
/// `device` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuptiGetDeviceId(context: *mut c_void, device: *mut u32) -> CuptiResult {
    if context as u64 != CONTEXT {
        return INVALID_CONTEXT;
    }
    out(device, 0)
}

/// The name of a driver callback id.
///
/// # Safety
/// `name` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuptiGetCallbackName(
    domain: u32,
    cbid: u32,
    name: *mut *const c_char,
) -> CuptiResult {
    match DRIVER_CBIDS.iter().find(|(_, id)| *id == cbid) {
        Some((n, _)) if domain == DOMAIN_DRIVER => out(name, n.as_ptr()),
        _ => INVALID_PARAMETER,
    }
}

/// The name of a result code.
///
/// # Safety
/// `text` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuptiGetResultString(
    result: CuptiResult,
    text: *mut *const c_char,
) -> CuptiResult {
    let name: &CStr = match result {
        SUCCESS => c"CUPTI_SUCCESS",
        INVALID_PARAMETER => c"CUPTI_ERROR_INVALID_PARAMETER",
        INVALID_CONTEXT => c"CUPTI_ERROR_INVALID_CONTEXT",
        MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => c"CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED",
        _ => c"CUPTI_ERROR_UNKNOWN",
    };
    out(text, name.as_ptr())
}

/// No error is ever left pending.
#[no_mangle]
pub extern "C" fn cuptiGetLastError() -> CuptiResult {
    SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::cupti::sys;
    use std::mem::{offset_of, size_of};

    #[test]
    fn callback_data_has_cuptis_layout() {
        type Real = sys::CUpti_CallbackData;
        assert_eq!(size_of::<CallbackData>(), size_of::<Real>());
        assert_eq!(
            offset_of!(CallbackData, callback_site),
            offset_of!(Real, callbackSite)
        );
        assert_eq!(
            offset_of!(CallbackData, function_name),
            offset_of!(Real, functionName)
        );
        assert_eq!(
            offset_of!(CallbackData, function_params),
            offset_of!(Real, functionParams)
        );
        assert_eq!(
            offset_of!(CallbackData, function_return_value),
            offset_of!(Real, functionReturnValue)
        );
        assert_eq!(
            offset_of!(CallbackData, symbol_name),
            offset_of!(Real, symbolName)
        );
        assert_eq!(offset_of!(CallbackData, context), offset_of!(Real, context));
        assert_eq!(
            offset_of!(CallbackData, context_uid),
            offset_of!(Real, contextUid)
        );
        assert_eq!(
            offset_of!(CallbackData, correlation_data),
            offset_of!(Real, correlationData)
        );
        assert_eq!(
            offset_of!(CallbackData, correlation_id),
            offset_of!(Real, correlationId)
        );
        assert_eq!(
            sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API as u32,
            DOMAIN_DRIVER
        );
        assert_eq!(
            sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API as u32,
            DOMAIN_RUNTIME
        );
        assert_eq!(
            sys::CUpti_ApiCallbackSite::CUPTI_API_ENTER as u32,
            API_ENTER
        );
        assert_eq!(sys::CUpti_ApiCallbackSite::CUPTI_API_EXIT as u32, API_EXIT);
        assert_eq!(
            sys::CUptiResult::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED as u32,
            MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
        );
    }

    /// The parameter structs of the memory functions the observer reads have the layout of
    /// CUPTI's `NAME_params`, field by field.
    #[test]
    fn memory_parameter_structs_have_cuptis_layout() {
        use crate::driver_api::params as fake;
        macro_rules! same_layout {
            ($fake:ty, $real:ty, $(($f:ident, $r:ident)),*) => {
                assert_eq!(size_of::<$fake>(), size_of::<$real>(), stringify!($fake));
                $(assert_eq!(offset_of!($fake, $f), offset_of!($real, $r), stringify!($fake.$f));)*
            };
        }
        same_layout!(
            fake::cuMemAlloc_v2,
            sys::cuMemAlloc_v2_params,
            (dptr, dptr),
            (bytes, bytesize)
        );
        same_layout!(fake::cuMemFree_v2, sys::cuMemFree_v2_params, (dptr, dptr));
        same_layout!(
            fake::cuMemAllocAsync,
            sys::cuMemAllocAsync_params,
            (dptr, dptr),
            (bytes, bytesize),
            (stream, hStream)
        );
        same_layout!(
            fake::cuMemFreeAsync,
            sys::cuMemFreeAsync_params,
            (dptr, dptr),
            (stream, hStream)
        );
        same_layout!(
            crate::pool_api::params::cuMemAllocFromPoolAsync,
            sys::cuMemAllocFromPoolAsync_params,
            (dptr, dptr),
            (bytes, bytesize),
            (pool, pool),
            (stream, hStream)
        );
        same_layout!(
            fake::cuMemCreate,
            sys::cuMemCreate_params,
            (handle, handle),
            (size, size),
            (prop, prop),
            (flags, flags)
        );
        same_layout!(
            fake::cuMemRelease,
            sys::cuMemRelease_params,
            (handle, handle)
        );
        same_layout!(
            fake::cuMemMap,
            sys::cuMemMap_params,
            (ptr, ptr),
            (size, size),
            (offset, offset),
            (handle, handle),
            (flags, flags)
        );
    }

    /// Every id of the table is the one in cudarc's `CUpti_driver_api_trace_cbid` (CUDA 12.8).
    #[test]
    fn callback_ids_are_cuptis() {
        use sys::CUpti_driver_api_trace_cbid as C;
        let real = [
            (c"cuInit", C::CUPTI_DRIVER_TRACE_CBID_cuInit),
            (
                c"cuDriverGetVersion",
                C::CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion,
            ),
            (c"cuDeviceGet", C::CUPTI_DRIVER_TRACE_CBID_cuDeviceGet),
            (
                c"cuDeviceGetCount",
                C::CUPTI_DRIVER_TRACE_CBID_cuDeviceGetCount,
            ),
            (
                c"cuDeviceGetName",
                C::CUPTI_DRIVER_TRACE_CBID_cuDeviceGetName,
            ),
            (
                c"cuDeviceGetAttribute",
                C::CUPTI_DRIVER_TRACE_CBID_cuDeviceGetAttribute,
            ),
            (c"cuCtxGetDevice", C::CUPTI_DRIVER_TRACE_CBID_cuCtxGetDevice),
            (
                c"cuCtxSynchronize",
                C::CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,
            ),
            (c"cuModuleLoad", C::CUPTI_DRIVER_TRACE_CBID_cuModuleLoad),
            (
                c"cuModuleLoadData",
                C::CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData,
            ),
            (c"cuModuleUnload", C::CUPTI_DRIVER_TRACE_CBID_cuModuleUnload),
            (
                c"cuModuleGetFunction",
                C::CUPTI_DRIVER_TRACE_CBID_cuModuleGetFunction,
            ),
            (c"cuMemFreeHost", C::CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost),
            (c"cuMemHostAlloc", C::CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc),
            (
                c"cuFuncGetAttribute",
                C::CUPTI_DRIVER_TRACE_CBID_cuFuncGetAttribute,
            ),
            (c"cuEventCreate", C::CUPTI_DRIVER_TRACE_CBID_cuEventCreate),
            (c"cuEventRecord", C::CUPTI_DRIVER_TRACE_CBID_cuEventRecord),
            (c"cuEventQuery", C::CUPTI_DRIVER_TRACE_CBID_cuEventQuery),
            (
                c"cuEventSynchronize",
                C::CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
            ),
            (
                c"cuEventElapsedTime",
                C::CUPTI_DRIVER_TRACE_CBID_cuEventElapsedTime,
            ),
            (c"cuStreamCreate", C::CUPTI_DRIVER_TRACE_CBID_cuStreamCreate),
            (c"cuStreamQuery", C::CUPTI_DRIVER_TRACE_CBID_cuStreamQuery),
            (
                c"cuStreamSynchronize",
                C::CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,
            ),
            (
                c"cuMemsetD8Async",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async,
            ),
            (
                c"cuMemsetD32Async",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async,
            ),
            (
                c"cuMemGetInfo_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemGetInfo_v2,
            ),
            (c"cuMemAlloc_v2", C::CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2),
            (c"cuMemFree_v2", C::CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2),
            (c"cuMemsetD8_v2", C::CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2),
            (c"cuMemsetD32_v2", C::CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2),
            (
                c"cuDeviceTotalMem_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuDeviceTotalMem_v2,
            ),
            (
                c"cuMemcpyHtoD_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2,
            ),
            (
                c"cuMemcpyHtoDAsync_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,
            ),
            (
                c"cuMemcpyDtoH_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,
            ),
            (
                c"cuMemcpyDtoHAsync_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2,
            ),
            (
                c"cuMemcpyDtoD_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2,
            ),
            (
                c"cuMemcpyDtoDAsync_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2,
            ),
            (
                c"cuMemAllocHost_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2,
            ),
            (
                c"cuStreamWaitEvent",
                C::CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent,
            ),
            (
                c"cuCtxSetCurrent",
                C::CUPTI_DRIVER_TRACE_CBID_cuCtxSetCurrent,
            ),
            (
                c"cuCtxGetCurrent",
                C::CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent,
            ),
            (c"cuLaunchKernel", C::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel),
            (
                c"cuMemcpyPeerAsync",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync,
            ),
            (
                c"cuCtxDestroy_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2,
            ),
            (
                c"cuCtxPushCurrent_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuCtxPushCurrent_v2,
            ),
            (
                c"cuCtxPopCurrent_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuCtxPopCurrent_v2,
            ),
            (
                c"cuEventDestroy_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuEventDestroy_v2,
            ),
            (
                c"cuStreamDestroy_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy_v2,
            ),
            (
                c"cuStreamCreateWithPriority",
                C::CUPTI_DRIVER_TRACE_CBID_cuStreamCreateWithPriority,
            ),
            (
                c"cuGetErrorString",
                C::CUPTI_DRIVER_TRACE_CBID_cuGetErrorString,
            ),
            (c"cuGetErrorName", C::CUPTI_DRIVER_TRACE_CBID_cuGetErrorName),
            (
                c"cuDevicePrimaryCtxRetain",
                C::CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRetain,
            ),
            (
                c"cuDevicePrimaryCtxGetState",
                C::CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxGetState,
            ),
            (
                c"cuDeviceGetUuid",
                C::CUPTI_DRIVER_TRACE_CBID_cuDeviceGetUuid,
            ),
            (
                c"cuLaunchHostFunc",
                C::CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc,
            ),
            (
                c"cuDevicePrimaryCtxRelease_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRelease_v2,
            ),
            (
                c"cuMemAddressReserve",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve,
            ),
            (
                c"cuMemAddressFree",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree,
            ),
            (c"cuMemCreate", C::CUPTI_DRIVER_TRACE_CBID_cuMemCreate),
            (c"cuMemRelease", C::CUPTI_DRIVER_TRACE_CBID_cuMemRelease),
            (c"cuMemMap", C::CUPTI_DRIVER_TRACE_CBID_cuMemMap),
            (c"cuMemUnmap", C::CUPTI_DRIVER_TRACE_CBID_cuMemUnmap),
            (c"cuMemSetAccess", C::CUPTI_DRIVER_TRACE_CBID_cuMemSetAccess),
            (
                c"cuMemGetAllocationGranularity",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemGetAllocationGranularity,
            ),
            (
                c"cuMemAllocAsync",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
            ),
            (c"cuMemFreeAsync", C::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync),
            (
                c"cuMemPoolTrimTo",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemPoolTrimTo,
            ),
            (
                c"cuMemPoolSetAttribute",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemPoolSetAttribute,
            ),
            (
                c"cuMemPoolGetAttribute",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemPoolGetAttribute,
            ),
            (
                c"cuDeviceGetDefaultMemPool",
                C::CUPTI_DRIVER_TRACE_CBID_cuDeviceGetDefaultMemPool,
            ),
            (
                c"cuDeviceGetMemPool",
                C::CUPTI_DRIVER_TRACE_CBID_cuDeviceGetMemPool,
            ),
            (
                c"cuMemAllocFromPoolAsync",
                C::CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
            ),
            (
                c"cuDeviceGetUuid_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuDeviceGetUuid_v2,
            ),
            (
                c"cuEventElapsedTime_v2",
                C::CUPTI_DRIVER_TRACE_CBID_cuEventElapsedTime_v2,
            ),
        ];
        assert_eq!(real.len(), DRIVER_CBIDS.len());
        for ((name, id), (real_name, real_id)) in DRIVER_CBIDS.iter().zip(real) {
            assert_eq!((name, *id), (&real_name, real_id as u32));
        }
    }

    /// Every function the fake's driver, execution and pool modules export has an id (CUPTI sees every
    /// driver call), and no name appears twice.
    #[test]
    fn every_exported_driver_function_has_a_callback_id() {
        let sources = [
            include_str!("driver_api.rs"),
            include_str!("execution_api.rs"),
            include_str!("pool_api.rs"),
        ];
        let mut exported = Vec::new();
        for source in sources {
            for line in source.lines() {
                let line = line.trim_start();
                if let Some(rest) = line.strip_prefix("fn cu") {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    exported.push(format!("cu{name}"));
                }
            }
        }
        assert!(exported.len() > 60, "{exported:?}");
        for name in &exported {
            assert!(driver_cbid(name).is_some(), "{name} has no callback id");
        }
        let mut names: Vec<&[u8]> = DRIVER_CBIDS.iter().map(|(n, _)| n.to_bytes()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DRIVER_CBIDS.len());
    }
}
