//! What the fake gained for vramguard's GPU observer (issue #39), checked by calling its
//! exported functions directly (the library linked as a crate, as `rules.rs` does): its CUPTI
//! callback API (one subscriber, callbacks per id, entry and exit with the call's parameters,
//! its result and a correlation slot), `cuMemAllocFromPoolAsync`, the in-stream reuse of a
//! pool chunk whose free is still queued, and the driver's injection hook
//! (`CUDA_INJECTION64_PATH`), through which `cargo vramguard measure --device cuda` attaches
//! the observer.

use std::ffi::{c_void, CStr};
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard};
use vramguard_fake_cuda::cupti::*;
use vramguard_fake_cuda::driver_api::*;
use vramguard_fake_cuda::errors::{self, name_or_number, CuResult};
use vramguard_fake_cuda::execution_api::*;
use vramguard_fake_cuda::pool_api::cuMemAllocFromPoolAsync;

#[track_caller]
fn ok(code: CuResult) {
    assert_eq!(code, errors::SUCCESS, "got {}", name_or_number(code));
}

/// The primary context current for one test (the tests share the process's fake device and
/// its one CUPTI subscriber: one at a time).
struct Ctx {
    _serial: MutexGuard<'static, ()>,
}

fn serial() -> Ctx {
    crate::set_up_process();
    let guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY (all calls in this file): the exported functions with valid out-pointers and the
    // handles they returned.
    unsafe {
        ok(cuInit(0));
        let mut ctx = null_mut();
        ok(cuDevicePrimaryCtxRetain(&mut ctx, 0));
        ok(cuCtxPushCurrent_v2(ctx));
    }
    Ctx { _serial: guard }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: pops what `serial` pushed; releases its retain.
        unsafe {
            let mut popped = null_mut();
            cuCtxPopCurrent_v2(&mut popped);
            cuDevicePrimaryCtxRelease_v2(0);
        }
    }
}

/// One callback as the subscriber saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    domain: u32,
    cbid: u32,
    site: u32,
    name: String,
    /// `bytesize` of `cuMemAllocAsync_params` (entry) or the address it wrote (exit).
    value: u64,
    result: u32,
    correlation_id: u32,
    /// The correlation slot's value when the callback ran (entry writes its id there).
    slot: u64,
    has_context: bool,
}

static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());

/// Records every callback; reads `cuMemAllocAsync`'s parameters with CUPTI's layout
/// (`dptr: *mut CUdeviceptr, bytesize: size_t, hStream: CUstream`).
unsafe extern "C" fn record(_: *mut c_void, domain: u32, cbid: u32, data: *const c_void) {
    // SAFETY: the fake passes a `CUpti_CallbackData` valid for the call.
    let data = unsafe { &*data.cast::<CallbackData>() };
    // SAFETY: the name is a NUL-terminated static string.
    let name = unsafe { CStr::from_ptr(data.function_name) }
        .to_string_lossy()
        .into_owned();
    let value = if name == "cuMemAllocAsync" {
        // SAFETY: the parameters of cuMemAllocAsync: a pointer to the address, then the size.
        let params = data
            .function_params
            .cast::<(*mut u64, usize, *mut c_void)>();
        unsafe {
            if data.callback_site == API_ENTER {
                (*params).1 as u64
            } else {
                *(*params).0
            }
        }
    } else {
        0
    };
    // SAFETY: CUPTI's slot for this call, and the return value, valid at exit.
    let (slot, result) = unsafe {
        let slot = *data.correlation_data;
        if data.callback_site == API_ENTER {
            *data.correlation_data = u64::from(data.correlation_id) + 1000;
        }
        let result = if data.callback_site == API_EXIT {
            *data.function_return_value.cast::<u32>()
        } else {
            0
        };
        (slot, result)
    };
    SEEN.lock().unwrap().push(Seen {
        domain,
        cbid,
        site: data.callback_site,
        name,
        value,
        result,
        correlation_id: data.correlation_id,
        slot,
        has_context: !data.context.is_null(),
    });
}

unsafe extern "C" fn nothing(_: *mut c_void, _: u32, _: u32, _: *const c_void) {}

#[test]
fn the_subscriber_sees_enabled_calls_at_entry_and_exit_with_their_parameters_and_result() {
    let _ctx = serial();
    SEEN.lock().unwrap().clear();
    let mut subscriber = null_mut();
    // SAFETY: see `serial`.
    unsafe {
        ok_cupti(cuptiSubscribe(&mut subscriber, Some(record), null_mut()));
        // The second subscriber is refused, as by CUPTI before 13.2.
        let mut second = null_mut();
        assert_eq!(
            cuptiSubscribe(&mut second, Some(nothing), null_mut()),
            MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
        );
        ok_cupti(cuptiEnableCallback(1, subscriber, DOMAIN_DRIVER, 598)); // cuMemAllocAsync
        ok_cupti(cuptiEnableCallback(1, subscriber, DOMAIN_DRIVER, 600)); // cuMemFreeAsync
        let mut enabled = 0;
        ok_cupti(cuptiGetCallbackState(
            &mut enabled,
            subscriber,
            DOMAIN_DRIVER,
            598,
        ));
        assert_eq!(enabled, 1);

        let mut stream = null_mut();
        ok(cuStreamCreate(&mut stream, 1));
        let mut addr = 0u64;
        ok(cuMemAllocAsync(&mut addr, 3000, stream));
        ok(cuMemFreeAsync(addr, stream));
        // Refused for lack of memory: the exit callback sees the code.
        let mut huge = 0u64;
        assert_eq!(
            cuMemAllocAsync(&mut huge, 1 << 50, stream),
            errors::OUT_OF_MEMORY
        );
        ok(cuStreamSynchronize(stream)); // not enabled: not seen
        ok(cuStreamDestroy_v2(stream));
        ok_cupti(cuptiUnsubscribe(subscriber));
        let mut after = 0u64;
        let mut stream = null_mut();
        ok(cuStreamCreate(&mut stream, 1));
        ok(cuMemAllocAsync(&mut after, 3000, stream)); // unsubscribed: not seen
        ok(cuMemFreeAsync(after, stream));
        ok(cuStreamSynchronize(stream));
        ok(cuStreamDestroy_v2(stream));
        let mut name = std::ptr::null();
        ok_cupti(cuptiGetCallbackName(DOMAIN_DRIVER, 611, &mut name));
        assert_eq!(CStr::from_ptr(name), c"cuMemAllocFromPoolAsync");

        let seen = SEEN.lock().unwrap().clone();
        let calls: Vec<(&str, u32, u64, u32)> = seen
            .iter()
            .map(|s| (s.name.as_str(), s.site, s.value, s.result))
            .collect();
        assert_eq!(
            calls,
            [
                ("cuMemAllocAsync", API_ENTER, 3000, 0),
                ("cuMemAllocAsync", API_EXIT, addr, 0),
                ("cuMemFreeAsync", API_ENTER, 0, 0),
                ("cuMemFreeAsync", API_EXIT, 0, 0),
                ("cuMemAllocAsync", API_ENTER, 1 << 50, 0),
                ("cuMemAllocAsync", API_EXIT, 0, errors::OUT_OF_MEMORY),
            ]
        );
        for pair in seen.chunks(2) {
            let (enter, exit) = (&pair[0], &pair[1]);
            assert_eq!(enter.correlation_id, exit.correlation_id, "{pair:?}");
            assert_eq!(enter.slot, 0, "a fresh slot at entry");
            assert_eq!(
                exit.slot,
                u64::from(enter.correlation_id) + 1000,
                "the slot kept"
            );
            assert!(enter.domain == DOMAIN_DRIVER && enter.has_context);
        }
        assert_ne!(seen[0].correlation_id, seen[2].correlation_id);
        assert_eq!((seen[0].cbid, seen[2].cbid), (598, 600));
    }
}

/// A queued memset of an old owner's size runs before the chunk, reused on its stream while
/// its free is queued, belongs to a smaller new owner (it faulted falsely before).
#[test]
fn a_chunk_reused_on_its_stream_runs_the_old_owners_queued_work_first() {
    let _ctx = serial();
    // SAFETY: see `serial`.
    unsafe {
        let mut stream = null_mut();
        ok(cuStreamCreate(&mut stream, 1));
        let mut old = 0u64;
        ok(cuMemAllocAsync(&mut old, 12288, stream));
        ok(cuMemsetD8Async(old, 7, 12288, stream));
        ok(cuMemFreeAsync(old, stream));
        let mut new = 0u64;
        ok(cuMemAllocAsync(&mut new, 10240, stream));
        assert_eq!(new, old, "the chunk is reused in stream order");
        ok(cuMemsetD8Async(new, 9, 10240, stream));
        ok(cuStreamSynchronize(stream));
        let mut host = vec![0u8; 10240];
        ok(cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), new, 10240));
        assert!(host.iter().all(|&b| b == 9));
        ok(cuMemFreeAsync(new, stream));
        ok(cuStreamSynchronize(stream));
        ok(cuStreamDestroy_v2(stream));
    }
}

#[test]
fn alloc_from_the_default_pool_is_alloc_async_and_another_pool_is_refused() {
    let _ctx = serial();
    // SAFETY: see `serial`.
    unsafe {
        let mut pool = null_mut();
        ok(cuDeviceGetDefaultMemPool(&mut pool, 0));
        let mut addr = 0u64;
        ok(cuMemAllocFromPoolAsync(&mut addr, 4096, pool, null_mut()));
        assert_ne!(addr, 0);
        ok(cuMemFreeAsync(addr, null_mut()));
        let mut other = 0u64;
        assert_eq!(
            cuMemAllocFromPoolAsync(&mut other, 4096, 0x1234usize as Handle, null_mut()),
            errors::INVALID_HANDLE
        );
        ok(cuCtxSynchronize());
    }
}

#[test]
fn the_injection_library_is_loaded_and_called_once_at_the_first_cuinit() {
    use vramguard_fake_cuda::injection::{inject, Injection};
    let _ctx = serial(); // its cuInit (or an earlier test's) was the process's first
    let path = std::ffi::CString::new(env!("FAKE_CUDA_TEST_INJECTION")).unwrap();
    // SAFETY: see `serial`; the library is already loaded (RTLD_NOLOAD), by the fake.
    let calls = unsafe {
        ok(cuInit(0));
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(
            !handle.is_null(),
            "the fake did not load CUDA_INJECTION64_PATH"
        );
        let calls = libc::dlsym(handle, c"fake_cuda_test_injection_calls".as_ptr());
        assert!(!calls.is_null());
        let calls: extern "C" fn() -> i32 = std::mem::transmute(calls);
        calls
    };
    assert_eq!(
        calls(),
        1,
        "InitializeInjection once, at the first cuInit only"
    );
    let kernels = std::ffi::CString::new(env!("FAKE_CUDA_TEST_KERNELS")).unwrap();
    // SAFETY: the tests' own libraries (no entry point in the kernels' one).
    unsafe {
        // A path that does not load and a library without the entry point are ignored.
        assert!(matches!(
            inject(c"/nonexistent/libinjection.so"),
            Injection::NotLoaded(_)
        ));
        assert_eq!(inject(&kernels), Injection::NoEntryPoint);
        // Called directly, the entry point runs again (the once is cuInit's).
        assert_eq!(inject(&path), Injection::Called(1));
    }
    assert_eq!(calls(), 2);
}

#[track_caller]
fn ok_cupti(code: CuptiResult) {
    assert_eq!(code, SUCCESS, "CUPTI returned {code}");
}
