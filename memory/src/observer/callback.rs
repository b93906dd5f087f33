//! The CUPTI callback: called on the allocating thread at entry and exit of every subscribed
//! driver and runtime call, it turns the call into the books' records, counters and log, and
//! prints the report of a refused allocation or a crossed limit.
//!
//! - A free takes its record out of the books at **entry**, before the driver can hand the
//!   address to another thread, and keeps it in the call's CUPTI correlation slot; at exit it
//!   is counted as freed, or put back if the free failed. An allocation is recorded at
//!   **exit**, once its address is known.
//! - A runtime call (`cudaMalloc`) is the record; the driver calls the runtime makes for it on
//!   the same thread are not counted again.
//! - Nothing unwinds into CUPTI (a panic is caught and dropped), a callback inside a callback
//!   (the report's own driver calls) does nothing, and the observer's own heap allocations are
//!   bookkeeping, never a batch scope's.

use super::books::books;
use super::calls::{decode, subscribed, MemoryCall, Subscribed, RUNTIME_DOMAIN};
use super::report::{MemoryReport, ReportedRequest, Trigger};
use super::{call_sites, ObservedAllocation};
use crate::accounting::ScopeIteration;
use crate::alloc::trace::thread_label;
use crate::alloc::TraceEventKind;
use cudarc::cupti::sys::{CUpti_ApiCallbackSite, CUpti_CallbackData, CUpti_CallbackDomain};
use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};

/// `CUDA_ERROR_OUT_OF_MEMORY`, and the runtime's `cudaErrorMemoryAllocation`: both 2.
const OUT_OF_MEMORY: u32 = 2;

/// Whether allocations record their Rust call site.
pub(crate) static CALL_SITES: AtomicBool = AtomicBool::new(false);

/// Incremented at every start: a thread's count of open runtime calls from before it is
/// stale (their exits may never be seen).
pub(crate) static GENERATION: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// Set while this thread runs the callback.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// Runtime calls open on this thread, and the start they were counted under.
    static RUNTIME_CALLS: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
    /// The last context seen on this thread and its device.
    static DEVICE: Cell<(usize, u32)> = const { Cell::new((0, 0)) };
    /// This thread's id, read once.
    static THREAD: Cell<u64> = const { Cell::new(0) };
    /// Records of frees between their entry and exit on this thread, each with the token its
    /// call's correlation slot holds (innermost last).
    static FREEING: RefCell<Vec<(u64, ObservedAllocation)>> = const { RefCell::new(Vec::new()) };
    /// The last token handed out on this thread.
    static TOKEN: Cell<u64> = const { Cell::new(0) };
    /// The batch-scope iteration this thread's allocations are attributed to.
    static ATTRIBUTION: Cell<Option<ScopeIteration>> = const { Cell::new(None) };
}

/// The batch-scope iteration this thread's allocations are attributed to.
pub(crate) fn attribution() -> Option<ScopeIteration> {
    ATTRIBUTION.try_with(Cell::get).ok().flatten()
}

/// Attributes this thread's allocations to `iteration` from now on.
pub(crate) fn attribute(iteration: Option<ScopeIteration>) {
    let _ = ATTRIBUTION.try_with(|a| a.set(iteration));
}

/// The callback given to `cuptiSubscribe`.
///
/// # Safety
/// CUPTI's contract: `data` is a `CUpti_CallbackData` for the API domains, valid for the call.
pub(crate) unsafe extern "C" fn callback(
    _userdata: *mut c_void,
    domain: CUpti_CallbackDomain,
    cbid: u32,
    data: *const c_void,
) {
    let domain = domain as u32;
    // SAFETY: passed on from CUPTI's contract.
    let _ = catch_unwind(AssertUnwindSafe(|| unsafe {
        handle(domain, cbid, data.cast())
    }));
}

/// Marks this thread as inside the callback until dropped; `None` when it already is.
struct Inside;

impl Inside {
    fn enter() -> Option<Inside> {
        INSIDE
            .try_with(|inside| !inside.replace(true))
            .ok()
            .and_then(|entered| entered.then_some(Inside))
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|inside| inside.set(false));
    }
}

/// Counts a runtime call in (`true`) or out on this thread; returns whether a runtime call is
/// open around a driver call.
fn runtime_calls(change: Option<bool>) -> bool {
    let generation = GENERATION.load(Relaxed);
    RUNTIME_CALLS
        .try_with(|calls| {
            let (mut open, counted) = calls.get();
            if counted != generation {
                open = 0;
            }
            match change {
                Some(true) => open += 1,
                Some(false) => open = open.saturating_sub(1),
                None => {}
            }
            calls.set((open, generation));
            open > 0
        })
        .unwrap_or(false)
}

/// # Safety
/// As [`callback`].
unsafe fn handle(domain: u32, cbid: u32, data: *const CUpti_CallbackData) {
    let Some(api) = subscribed(domain, cbid) else {
        return;
    };
    if data.is_null() {
        return;
    }
    // SAFETY: CUPTI's contract (the caller's).
    let data = unsafe { &*data };
    let exit = data.callbackSite == CUpti_ApiCallbackSite::CUPTI_API_EXIT;
    if domain == RUNTIME_DOMAIN {
        runtime_calls(Some(!exit));
    } else if runtime_calls(None) {
        // A driver call the runtime makes for a runtime call that is itself the record.
        return;
    }
    let Some(_inside) = Inside::enter() else {
        return;
    };
    let _bookkeeping = crate::heap::Bookkeeping::enter();
    // SAFETY: `functionParams` is the callback's parameter struct (CUPTI's contract).
    let Some(call) = (unsafe { decode(domain, cbid, data.functionParams) }) else {
        return;
    };
    if exit {
        // SAFETY: as above; at exit the out-parameters and the return value are written.
        unsafe { on_exit(api, call, data) }
    } else {
        on_enter(call, data);
    }
}

/// The record of a free, taken out of the books at entry, waits for the exit on this thread
/// ([`FREEING`]), under a token the call's correlation slot (a `u64` CUPTI keeps for the
/// call) holds.
fn on_enter(call: MemoryCall, data: &CUpti_CallbackData) {
    let (key, physical) = match call {
        MemoryCall::Free { address, .. } => (address, false),
        MemoryCall::ReleasePhysical { handle } => (handle, true),
        _ => return,
    };
    if data.correlationData.is_null() {
        // No slot: the record is taken at exit instead.
        return;
    }
    let token = match books().take(key, physical) {
        Some(record) => {
            let token = TOKEN
                .try_with(|t| {
                    t.set(t.get() + 1);
                    t.get()
                })
                .unwrap_or(0);
            let kept = FREEING.try_with(|f| f.borrow_mut().push((token, record)));
            if kept.is_ok() {
                token
            } else {
                0
            }
        }
        None => 0,
    };
    // SAFETY: CUPTI's slot for this call, valid until its exit callback.
    unsafe { *data.correlationData = token };
}

/// The record [`on_enter`] kept for this call (or, without a slot, taken now).
fn stashed(key: u64, physical: bool, data: &CUpti_CallbackData) -> Option<ObservedAllocation> {
    if data.correlationData.is_null() {
        return books().take(key, physical);
    }
    // SAFETY: CUPTI's slot for this call, written at its entry.
    let token = std::mem::take(unsafe { &mut *data.correlationData });
    if token == 0 {
        return None;
    }
    FREEING
        .try_with(|f| {
            let mut freeing = f.borrow_mut();
            let at = freeing.iter().rposition(|(t, _)| *t == token)?;
            Some(freeing.swap_remove(at).1)
        })
        .ok()
        .flatten()
}

/// # Safety
/// As [`handle`], at the call's exit.
unsafe fn on_exit(api: &Subscribed, call: MemoryCall, data: &CUpti_CallbackData) {
    let result = if data.functionReturnValue.is_null() {
        None
    } else {
        // SAFETY: at exit CUPTI points it at the call's `CUresult` (or `cudaError_t`), a
        // 32-bit code either way.
        Some(unsafe { *data.functionReturnValue.cast::<u32>() })
    };
    let books = books();
    match call {
        MemoryCall::Free { address, .. } => free(address, false, result, data),
        MemoryCall::ReleasePhysical { handle } => free(handle, true, result, data),
        MemoryCall::Map {
            address,
            offset,
            handle,
        } if result == Some(0) => books.mapped(handle, address.saturating_sub(offset)),
        MemoryCall::Map { .. } => {}
        MemoryCall::Alloc { out, bytes, stream } => {
            // SAFETY: the call's out-parameter, written when it succeeded.
            let address = (result == Some(0) && !out.is_null()).then(|| unsafe { *out });
            allocated(api, address, bytes, stream, false, result, data);
        }
        MemoryCall::CreatePhysical { out, bytes } => {
            // SAFETY: as above: the handle.
            let handle = (result == Some(0) && !out.is_null()).then(|| unsafe { *out });
            allocated(api, handle, bytes, 0, true, result, data);
        }
        MemoryCall::AllocPitch { out, pitch, height } => {
            let written = result == Some(0) && !out.is_null() && !pitch.is_null();
            // SAFETY: as above: the address and the pitch.
            let done = written.then(|| unsafe { (*out, *pitch as u64 * height) });
            let bytes = done.map_or(0, |d| d.1);
            allocated(api, done.map(|d| d.0), bytes, 0, false, result, data);
        }
    }
}

fn free(key: u64, physical: bool, result: Option<u32>, data: &CUpti_CallbackData) {
    let books = books();
    let Some(record) = stashed(key, physical, data) else {
        return;
    };
    if result == Some(0) {
        let live = books.account_free(&record);
        books.log(TraceEventKind::Free, &record, live);
    } else {
        books.restore(key, record, physical);
    }
}

/// Records a successful allocation (`key`: its address, or its handle when `physical`), or
/// reports one the driver refused for lack of memory.
fn allocated(
    api: &Subscribed,
    key: Option<u64>,
    bytes: u64,
    stream: u64,
    physical: bool,
    result: Option<u32>,
    data: &CUpti_CallbackData,
) {
    let books = books();
    let device = device_of(data.context);
    let record = || ObservedAllocation {
        device,
        address: if physical { 0 } else { key.unwrap_or(0) },
        bytes,
        stream,
        thread: thread_id(),
        api: api.name,
        label: thread_label().or_else(super::exit_report::program_label),
        origin: if CALL_SITES.load(Relaxed) {
            call_sites::capture(api.name)
        } else {
            None
        },
        id: books.next_id(),
        scope: attribution(),
    };
    match (result, key) {
        (Some(0), Some(key)) => {
            let record = record();
            let limit = books.limit(device);
            // Kept only when the log or a crossed limit needs it after `add` took the record.
            let copy = (books.logging() || limit.is_some()).then(|| record.clone());
            let (before, after) = books.add(key, record, physical);
            if let Some(record) = copy {
                books.log(TraceEventKind::Alloc, &record, after);
                if let Some(limit) = limit.filter(|&l| before <= l && after > l) {
                    let request = request_of(record);
                    MemoryReport::gather(Trigger::LimitCrossed { limit }, request).print();
                }
            }
        }
        (Some(OUT_OF_MEMORY), _) => {
            books.count_oom(device);
            let record = record();
            books.log(TraceEventKind::Oom, &record, books.live_bytes(device));
            MemoryReport::gather(Trigger::OutOfMemory, request_of(record)).print();
        }
        _ => {}
    }
}

fn request_of(record: ObservedAllocation) -> ReportedRequest {
    ReportedRequest {
        device: record.device,
        api: record.api,
        bytes: record.bytes,
        thread: record.thread,
        label: record.label,
        origin: record.origin,
    }
}

/// The device of `context` (CUPTI's id for it), cached per thread for the last context.
fn device_of(context: cudarc::driver::sys::CUcontext) -> u32 {
    let key = context as usize;
    if let Ok((cached, device)) = DEVICE.try_with(Cell::get) {
        if cached == key && key != 0 {
            return device;
        }
    }
    let mut device = 0u32;
    // SAFETY: a context CUPTI handed to the callback; `device` is valid for the write.
    if unsafe { cudarc::cupti::result::get_device_id(context, &mut device) }.is_err() {
        return 0;
    }
    let _ = DEVICE.try_with(|d| d.set((key, device)));
    device
}

/// The calling thread's id: the kernel's thread id on Linux (what profilers and `top -H` show),
/// a process-unique number elsewhere.
fn thread_id() -> u64 {
    THREAD
        .try_with(|t| {
            if t.get() == 0 {
                t.set(os_thread_id());
            }
            t.get()
        })
        .unwrap_or(0)
}

#[cfg(target_os = "linux")]
fn os_thread_id() -> u64 {
    // SAFETY: `gettid` has no preconditions.
    (unsafe { libc::gettid() }) as u64
}

#[cfg(not(target_os = "linux"))]
fn os_thread_id() -> u64 {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Relaxed)
}
