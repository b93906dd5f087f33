//! The rules the fake driver enforces, each checked by calling its exported functions directly
//! (the library linked as a crate): what a real driver would refuse, the fake refuses with the
//! same code, and what breaks on a GPU (touching memory without access, reuse without a wait)
//! breaks here too, deterministically.
//!
//! The tests share one fake device, so they run one at a time (`serial`), each with the primary
//! context retained and pushed for its duration and released at the end (which clears a sticky
//! error, as a primary context reset does). The settings that are read once per process
//! (failure injection, strict leaks, eager execution) are checked in a child process.

use std::ffi::{c_void, CString};
use std::process::Command;
use std::ptr::null_mut;
use std::sync::MutexGuard;
use vramguard_fake_cuda::blas::*;
use vramguard_fake_cuda::driver_api::*;
use vramguard_fake_cuda::errors::{self, name_or_number, CuResult};
use vramguard_fake_cuda::execution_api::*;

const G: usize = 2 << 20;

#[track_caller]
fn ok(code: CuResult) {
    assert_eq!(code, errors::SUCCESS, "got {}", name_or_number(code));
}

#[track_caller]
fn fails(code: CuResult, expected: CuResult) {
    assert_eq!(
        code,
        expected,
        "got {}, expected {}",
        name_or_number(code),
        name_or_number(expected)
    );
}

/// The primary context retained and current for one test; released (and popped) on drop.
struct Ctx {
    _serial: MutexGuard<'static, ()>,
}

fn serial() -> Ctx {
    crate::set_up_process();
    let guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY (all calls in this file): the driver functions with valid out-pointers and the
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

fn alloc(bytes: usize) -> u64 {
    let mut p = 0;
    // SAFETY: a valid out-pointer.
    ok(unsafe { cuMemAlloc_v2(&mut p, bytes) });
    p
}

fn write_u32(addr: u64, values: &[u32]) -> CuResult {
    // SAFETY: the source is the slice; the fake checks the device side.
    unsafe { cuMemcpyHtoD_v2(addr, values.as_ptr().cast(), values.len() * 4) }
}

fn read_u32(addr: u64, n: usize) -> (CuResult, Vec<u32>) {
    let mut out = vec![0u32; n];
    // SAFETY: the destination is the vector; the fake checks the device side.
    let code = unsafe { cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), addr, n * 4) };
    (code, out)
}

fn free_bytes() -> usize {
    let (mut free, mut total) = (0, 0);
    // SAFETY: valid out-pointers.
    ok(unsafe { cuMemGetInfo_v2(&mut free, &mut total) });
    free
}

fn prop() -> MemAllocationProp {
    MemAllocationProp {
        kind: 1,
        requested_handle_types: 0,
        location: MemLocation { kind: 1, id: 0 },
        win32_handle_meta_data: null_mut(),
        alloc_flags: [0; 8],
    }
}

fn read_write() -> MemAccessDesc {
    MemAccessDesc {
        location: MemLocation { kind: 1, id: 0 },
        flags: 3,
    }
}

fn stream(flags: u32) -> Handle {
    let mut s = null_mut();
    // SAFETY: a valid out-pointer.
    ok(unsafe { cuStreamCreate(&mut s, flags) });
    s
}

const NON_BLOCKING: u32 = 1;

const PTX: &str = r#"
.version 7.0
.target sm_52
.address_size 64
.visible .entry fill(.param .u64 fill_p, .param .u32 fill_n, .param .u32 fill_value) { ret; }
.visible .entry add_signed(.param .u64 add_p, .param .s16 add_delta) { ret; }
.visible .entry scaled_copy(.param .align 8 .b8 scaled_copy_param_0[48]) { ret; }
.visible .entry no_host_build(.param .u64 p) { ret; }
"#;

fn function(name: &str) -> Handle {
    let image = CString::new(PTX).unwrap();
    let (mut module, mut f) = (null_mut(), null_mut());
    let name = CString::new(name).unwrap();
    // SAFETY: NUL-terminated PTX and name, valid out-pointers.
    unsafe {
        ok(cuModuleLoadData(&mut module, image.as_ptr().cast()));
        ok(cuModuleGetFunction(&mut f, module, name.as_ptr()));
    }
    f
}

fn launch(
    f: Handle,
    blocks: u32,
    threads: u32,
    stream: Handle,
    params: &mut [*mut c_void],
) -> CuResult {
    // SAFETY: one pointer per parameter of the kernel, each to a value of its size.
    unsafe {
        cuLaunchKernel(
            f,
            blocks,
            1,
            1,
            threads,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            null_mut(),
        )
    }
}

fn fill(stream: Handle, p: u64, n: u32, value: u32) -> CuResult {
    let f = function("fill");
    let (mut p, mut n, mut value) = (p, n, value);
    let mut params: [*mut c_void; 3] = [
        (&mut p as *mut u64).cast(),
        (&mut n as *mut u32).cast(),
        (&mut value as *mut u32).cast(),
    ];
    launch(f, n.div_ceil(64), 64, stream, &mut params)
}

#[test]
fn a_call_without_a_current_context_fails_as_the_driver_does() {
    let _ctx = serial();
    let p = alloc(4096);
    std::thread::spawn(move || {
        let mut q = 0;
        // SAFETY: valid out-pointers; this thread has no context current.
        unsafe {
            fails(cuMemAlloc_v2(&mut q, 4096), errors::INVALID_CONTEXT);
            fails(cuMemFree_v2(p), errors::INVALID_CONTEXT);
            fails(cuCtxSynchronize(), errors::INVALID_CONTEXT);
            let mut cur = 1 as Handle;
            ok(cuCtxGetCurrent(&mut cur));
            assert!(cur.is_null());
            fails(cuCtxPopCurrent_v2(null_mut()), errors::INVALID_CONTEXT);
            // Made current by set, the calls work; popped, they fail again.
            let mut ctx = null_mut();
            ok(cuDevicePrimaryCtxRetain(&mut ctx, 0));
            ok(cuCtxSetCurrent(ctx));
            ok(cuMemAlloc_v2(&mut q, 4096));
            ok(cuMemFree_v2(q));
            ok(cuCtxSetCurrent(null_mut()));
            fails(cuMemAlloc_v2(&mut q, 4096), errors::INVALID_CONTEXT);
            ok(cuDevicePrimaryCtxRelease_v2(0));
        }
    })
    .join()
    .unwrap();
    // SAFETY: the allocation made above.
    ok(unsafe { cuMemFree_v2(p) });
}

#[test]
fn virtual_memory_calls_refuse_sizes_and_offsets_off_the_granularity() {
    let _ctx = serial();
    let p = prop();
    // SAFETY (the block): valid out-pointers, property and access structs.
    unsafe {
        let mut g = 0;
        ok(cuMemGetAllocationGranularity(&mut g, &p, 0));
        assert_eq!(g, G);
        let (mut h, mut va) = (0, 0);
        fails(cuMemCreate(&mut h, G + 4096, &p, 0), errors::INVALID_VALUE);
        fails(
            cuMemAddressReserve(&mut va, 3 * G / 2, 0, 0, 0),
            errors::INVALID_VALUE,
        );
        ok(cuMemAddressReserve(&mut va, 4 * G, 0, 0, 0));
        assert_eq!(va % G as u64, 0);
        ok(cuMemCreate(&mut h, 2 * G, &p, 0));
        fails(cuMemMap(va + 4096, G, 0, h, 0), errors::INVALID_VALUE);
        fails(cuMemMap(va, G, 4096, h, 0), errors::INVALID_VALUE);
        fails(cuMemMap(va, 3 * G, 0, h, 0), errors::INVALID_VALUE);
        ok(cuMemMap(va, 2 * G, 0, h, 0));
        fails(cuMemMap(va + G as u64, G, 0, h, 0), errors::INVALID_VALUE);
        let rw = read_write();
        fails(cuMemSetAccess(va, 3 * G, &rw, 1), errors::INVALID_VALUE);
        fails(cuMemSetAccess(va, G / 2, &rw, 1), errors::INVALID_VALUE);
        ok(cuMemSetAccess(va, 2 * G, &rw, 1));
        // A mapping is unmapped whole; the reservation is freed whole, once empty.
        fails(cuMemUnmap(va, G), errors::INVALID_VALUE);
        fails(cuMemAddressFree(va, 4 * G), errors::INVALID_VALUE);
        ok(cuMemUnmap(va, 2 * G));
        fails(cuMemUnmap(va, 2 * G), errors::INVALID_VALUE);
        ok(cuMemRelease(h));
        fails(cuMemRelease(h), errors::INVALID_VALUE);
        fails(cuMemAddressFree(va, 2 * G), errors::INVALID_VALUE);
        ok(cuMemAddressFree(va, 4 * G));
    }
}

#[test]
fn mapped_memory_is_inaccessible_until_set_access_and_after_unmap() {
    let p = prop();
    let (mut h, mut va) = (0, 0);
    {
        let _ctx = serial();
        // SAFETY: valid out-pointers and property struct.
        unsafe {
            ok(cuMemAddressReserve(&mut va, 2 * G, 0, 0, 0));
            ok(cuMemCreate(&mut h, 2 * G, &p, 0));
            ok(cuMemMap(va, 2 * G, 0, h, 0));
        }
        // Mapped, no access yet: the copy faults, and the error sticks to the context.
        fails(write_u32(va, &[1, 2, 3]), errors::ILLEGAL_ADDRESS);
        fails(write_u32(va, &[1]), errors::ILLEGAL_ADDRESS);
        let mut q = 0;
        // SAFETY: a valid out-pointer.
        fails(
            unsafe { cuMemAlloc_v2(&mut q, 4096) },
            errors::ILLEGAL_ADDRESS,
        );
    }
    // Released by every retain: the context is reset, its sticky error gone.
    let _ctx = serial();
    let rw = read_write();
    // SAFETY: the mapped range above.
    ok(unsafe { cuMemSetAccess(va, 2 * G, &rw, 1) });
    ok(write_u32(va + G as u64 - 4, &[7, 8]));
    assert_eq!(
        read_u32(va + G as u64 - 4, 2),
        (errors::SUCCESS, vec![7, 8])
    );
    // SAFETY: the mapping made above, unmapped and released once.
    unsafe {
        ok(cuMemUnmap(va, 2 * G));
        ok(cuMemRelease(h));
    }
    // Still a reservation, no longer mapped: the copy faults.
    fails(read_u32(va, 1).0, errors::ILLEGAL_ADDRESS);
    drop(_ctx);
    let _ctx = serial();
    // SAFETY: the reservation above, now empty.
    ok(unsafe { cuMemAddressFree(va, 2 * G) });
    fails(read_u32(va, 1).0, errors::INVALID_VALUE);
}

#[test]
fn freed_memory_is_refused_and_its_address_is_never_handed_out_again() {
    let _ctx = serial();
    let p = alloc(3 * G);
    ok(write_u32(p + 3 * G as u64 - 4, &[5]));
    fails(
        write_u32(p + 3 * G as u64 - 4, &[5, 6]),
        errors::INVALID_VALUE,
    );
    // SAFETY: the allocation above, freed once.
    ok(unsafe { cuMemFree_v2(p) });
    // SAFETY: the same pointer again.
    fails(unsafe { cuMemFree_v2(p) }, errors::INVALID_VALUE);
    fails(write_u32(p, &[1]), errors::INVALID_VALUE);
    fails(read_u32(p, 1).0, errors::INVALID_VALUE);
    let again: Vec<u64> = (0..8).map(|_| alloc(3 * G)).collect();
    assert!(!again.contains(&p), "a freed address was handed out again");
    for q in again {
        // SAFETY: allocations made above.
        ok(unsafe { cuMemFree_v2(q) });
    }
}

#[test]
fn a_kernel_touching_memory_it_may_not_faults_and_the_error_sticks() {
    {
        let _ctx = serial();
        let p = alloc(4096);
        // SAFETY: the allocation above.
        ok(unsafe { cuMemFree_v2(p) });
        // Launching is fine (the driver does not read the kernel's pointers); running faults.
        ok(fill(null_mut(), p, 16, 0));
        // SAFETY: plain synchronisation.
        fails(unsafe { cuCtxSynchronize() }, errors::ILLEGAL_ADDRESS);
        let mut q = 0;
        // SAFETY: a valid out-pointer.
        fails(
            unsafe { cuMemAlloc_v2(&mut q, 4096) },
            errors::ILLEGAL_ADDRESS,
        );
        let mut module = null_mut();
        // SAFETY: NUL-terminated PTX, a valid out-pointer.
        fails(
            unsafe { cuModuleLoadData(&mut module, CString::new(PTX).unwrap().as_ptr().cast()) },
            errors::ILLEGAL_ADDRESS,
        );
    }
    let _ctx = serial();
    let q = alloc(4096);
    ok(fill(null_mut(), q, 16, 100));
    assert_eq!(read_u32(q, 3), (errors::SUCCESS, vec![100, 101, 102]));
    // SAFETY: the allocation above.
    ok(unsafe { cuMemFree_v2(q) });
}

#[test]
fn kernel_parameters_are_marshalled_per_the_ptx_signature() {
    let _ctx = serial();
    let p = alloc(4096);
    ok(fill(null_mut(), p, 300, 7));
    let (code, words) = read_u32(p, 301);
    ok(code);
    assert_eq!(words[0], 7);
    assert_eq!(words[299], 7 + 299);
    assert_eq!(words[300], 0, "thread 300 is past n");

    // A signed 16-bit parameter, sign-extended.
    let counter = alloc(8);
    let start = 1000i64;
    // SAFETY: 8 bytes from the local.
    ok(unsafe { cuMemcpyHtoD_v2(counter, (&start as *const i64).cast(), 8) });
    let (mut at, mut delta) = (counter, -3i16);
    let mut params: [*mut c_void; 2] = [
        (&mut at as *mut u64).cast(),
        (&mut delta as *mut i16).cast(),
    ];
    ok(launch(
        function("add_signed"),
        1,
        1,
        null_mut(),
        &mut params,
    ));
    let mut back = 0i64;
    // SAFETY: 8 bytes into the local.
    ok(unsafe { cuMemcpyDtoH_v2((&mut back as *mut i64).cast(), counter, 8) });
    assert_eq!(back, 997);

    // A struct of 48 bytes by value.
    #[repr(C)]
    struct Args {
        src: u64,
        dst: u64,
        n: u64,
        scale: f32,
        pad: [f32; 5],
    }
    let (src, dst) = (alloc(1024), alloc(1024));
    let values: Vec<f32> = (0..100).map(|i| i as f32).collect();
    // SAFETY: 400 bytes from the vector.
    ok(unsafe { cuMemcpyHtoD_v2(src, values.as_ptr().cast(), 400) });
    let mut args = Args {
        src,
        dst,
        n: 100,
        scale: 0.5,
        pad: [0.0; 5],
    };
    let mut params: [*mut c_void; 1] = [(&mut args as *mut Args).cast()];
    ok(launch(
        function("scaled_copy"),
        2,
        64,
        null_mut(),
        &mut params,
    ));
    let mut out = vec![0f32; 100];
    // SAFETY: 400 bytes into the vector.
    ok(unsafe { cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), dst, 400) });
    assert_eq!(out[99], 49.5);

    // A kernel without a host build is not found; a multi-dimensional grid is refused.
    let image = CString::new(PTX).unwrap();
    let (mut module, mut f) = (null_mut(), null_mut());
    // SAFETY: NUL-terminated PTX and name, valid out-pointers.
    unsafe {
        ok(cuModuleLoadData(&mut module, image.as_ptr().cast()));
        fails(
            cuModuleGetFunction(&mut f, module, c"no_host_build".as_ptr()),
            errors::NOT_FOUND,
        );
        fails(
            cuModuleGetFunction(&mut f, module, c"not_in_the_ptx".as_ptr()),
            errors::NOT_FOUND,
        );
        ok(cuModuleUnload(module));
        let fill_fn = function("fill");
        let (mut p2, mut n, mut v) = (p, 1u32, 1u32);
        let mut params: [*mut c_void; 3] = [
            (&mut p2 as *mut u64).cast(),
            (&mut n as *mut u32).cast(),
            (&mut v as *mut u32).cast(),
        ];
        fails(
            cuLaunchKernel(
                fill_fn,
                1,
                2,
                1,
                1,
                1,
                1,
                0,
                null_mut(),
                params.as_mut_ptr(),
                null_mut(),
            ),
            errors::NOT_SUPPORTED,
        );
        for q in [p, counter, src, dst] {
            ok(cuMemFree_v2(q));
        }
    }
}

#[test]
fn queued_work_runs_only_when_waited_for_and_in_stream_order() {
    let _ctx = serial();
    let (a, b) = (stream(NON_BLOCKING), stream(NON_BLOCKING));
    let p = alloc(4096);
    ok(write_u32(p, &[1]));
    ok(fill(a, p, 1, 50));
    // Nothing waited for the work on `a`: a synchronous read (null stream) sees the old value.
    assert_eq!(read_u32(p, 1), (errors::SUCCESS, vec![1]));
    let mut e = null_mut();
    // SAFETY (the block): handles created above, valid out-pointers.
    unsafe {
        ok(cuEventCreate(&mut e, 2));
        ok(cuEventRecord(e, a));
        fails(cuEventQuery(e), errors::NOT_READY);
        // `b` waits for `e`: when `b` runs, `a`'s fill has run first, then `b`'s.
        ok(cuStreamWaitEvent(b, e, 0));
        ok(fill(b, p, 1, 60));
        ok(cuStreamSynchronize(b));
        ok(cuEventQuery(e));
    }
    assert_eq!(read_u32(p, 1), (errors::SUCCESS, vec![60]));
    // In order on one stream: the last write wins.
    ok(fill(a, p, 1, 70));
    ok(fill(a, p, 1, 80));
    // SAFETY: the stream above.
    ok(unsafe { cuStreamSynchronize(a) });
    assert_eq!(read_u32(p, 1), (errors::SUCCESS, vec![80]));
    // Polling makes progress: an event queried often enough completes without a wait.
    ok(fill(a, p, 1, 90));
    // SAFETY: handles created above.
    unsafe {
        ok(cuEventRecord(e, a));
        let polls = (0..1000).position(|_| cuEventQuery(e) == errors::SUCCESS);
        assert_eq!(polls, Some(99), "the 100th query ran the fill");
        ok(cuEventDestroy_v2(e));
        ok(cuStreamDestroy_v2(a));
        ok(cuStreamDestroy_v2(b));
        fails(cuStreamSynchronize(a), errors::INVALID_HANDLE);
        ok(cuMemFree_v2(p));
    }
}

#[test]
fn the_legacy_null_stream_waits_for_blocking_streams_but_not_non_blocking_ones() {
    let _ctx = serial();
    let (blocking, non_blocking) = (stream(0), stream(NON_BLOCKING));
    let p = alloc(4096);
    ok(write_u32(p, &[0, 0]));
    ok(fill(blocking, p, 1, 11));
    ok(fill(non_blocking, p + 4, 1, 22));
    // The synchronous copy is on the null stream: after the blocking stream's work only.
    assert_eq!(read_u32(p, 2), (errors::SUCCESS, vec![11, 0]));
    // Work queued on a blocking stream waits for the null stream's work before it.
    // SAFETY (the block): handles created above.
    unsafe {
        ok(cuMemsetD32Async(p, 5, 1, null_mut()));
        ok(fill(blocking, p + 4, 1, 33));
        ok(cuStreamSynchronize(blocking));
        assert_eq!(read_u32(p, 1), (errors::SUCCESS, vec![5]));
        ok(cuCtxSynchronize());
        ok(cuStreamDestroy_v2(blocking));
        ok(cuStreamDestroy_v2(non_blocking));
        ok(cuMemFree_v2(p));
    }
}

#[test]
fn the_pool_reports_used_and_reserved_and_releases_above_its_threshold() {
    let _ctx = serial();
    let mut pool = null_mut();
    // SAFETY (the block): the default pool; attribute values of the documented types.
    unsafe {
        ok(cuDeviceGetDefaultMemPool(&mut pool, 0));
        let get = |attr: u32| {
            let mut v = 0u64;
            ok(cuMemPoolGetAttribute(
                pool,
                attr,
                (&mut v as *mut u64).cast(),
            ));
            v
        };
        let set = |attr: u32, v: u64| {
            let mut v = v;
            cuMemPoolSetAttribute(pool, attr, (&mut v as *mut u64).cast())
        };
        const THRESHOLD: u32 = 4;
        const RESERVED: u32 = 5;
        const RESERVED_HIGH: u32 = 6;
        const USED: u32 = 7;
        const USED_HIGH: u32 = 8;
        ok(cuMemPoolTrimTo(pool, 0));
        ok(set(USED_HIGH, 0));
        ok(set(RESERVED_HIGH, 0));
        assert_eq!((get(THRESHOLD), get(USED), get(RESERVED)), (0, 0, 0));
        let s = stream(NON_BLOCKING);
        let mut p = 0;
        ok(cuMemAllocAsync(&mut p, 3 << 20, s));
        assert_eq!((get(USED), get(RESERVED)), (4 << 20, 4 << 20));
        ok(cuMemFreeAsync(p, s));
        fails(cuMemFreeAsync(p, s), errors::INVALID_VALUE);
        // Freed in stream order: used until the free ran.
        assert_eq!(get(USED), 4 << 20);
        ok(cuStreamSynchronize(s));
        // Threshold 0: everything freed went back at the synchronisation.
        assert_eq!((get(USED), get(RESERVED)), (0, 0));
        assert_eq!((get(USED_HIGH), get(RESERVED_HIGH)), (4 << 20, 4 << 20));
        fails(set(USED_HIGH, 5), errors::INVALID_VALUE);
        ok(set(USED_HIGH, 0));
        assert_eq!(get(USED_HIGH), 0);

        // Everything kept: freed memory stays reserved until trimmed, and is reused.
        ok(set(THRESHOLD, u64::MAX));
        ok(cuMemAllocAsync(&mut p, 3 << 20, s));
        ok(cuMemFreeAsync(p, s));
        ok(cuStreamSynchronize(s));
        assert_eq!((get(USED), get(RESERVED)), (0, 4 << 20));
        // Freed and cached: touching it is refused.
        fails(cuMemsetD8Async(p, 0, 16, s), errors::INVALID_VALUE);
        let mut q = 0;
        ok(cuMemAllocAsync(&mut q, 1 << 20, s));
        assert_eq!(q, p, "the cached chunk is reused");
        assert_eq!(get(RESERVED), 4 << 20);
        ok(cuMemFreeAsync(q, s));
        // Reused on the freeing stream before the free ran (stream order makes it safe).
        let mut r = 0;
        ok(cuMemAllocAsync(&mut r, 1 << 20, s));
        assert_eq!(r, q);
        ok(cuMemFreeAsync(r, s));
        ok(cuStreamSynchronize(s));
        ok(cuMemPoolTrimTo(pool, 0));
        assert_eq!(get(RESERVED), 0);
        ok(set(THRESHOLD, 0));
        ok(cuStreamDestroy_v2(s));
    }
}

#[test]
fn an_oversize_request_is_out_of_memory_and_changes_nothing() {
    let _ctx = serial();
    let before = free_bytes();
    let mut p = 0;
    let p_prop = prop();
    // SAFETY: valid out-pointers and property.
    unsafe {
        fails(cuMemAlloc_v2(&mut p, before + G), errors::OUT_OF_MEMORY);
        let mut h = 0;
        fails(
            cuMemCreate(&mut h, before + G, &p_prop, 0),
            errors::OUT_OF_MEMORY,
        );
        fails(
            cuMemAllocAsync(&mut p, before + G, null_mut()),
            errors::OUT_OF_MEMORY,
        );
    }
    assert_eq!(free_bytes(), before);
    let q = alloc(before);
    assert_eq!(free_bytes(), 0);
    // SAFETY: the allocation above.
    ok(unsafe { cuMemFree_v2(q) });
    assert_eq!(free_bytes(), before);
}

#[test]
fn unmapping_pages_that_queued_work_uses_faults_when_it_runs() {
    let p = prop();
    {
        let _ctx = serial();
        let s = stream(NON_BLOCKING);
        let (mut h, mut va) = (0, 0);
        let rw = read_write();
        // SAFETY: valid out-pointers, property and access structs.
        unsafe {
            ok(cuMemAddressReserve(&mut va, G, 0, 0, 0));
            ok(cuMemCreate(&mut h, G, &p, 0));
            ok(cuMemMap(va, G, 0, h, 0));
            ok(cuMemSetAccess(va, G, &rw, 1));
        }
        ok(fill(s, va, 16, 1));
        // cuMemUnmap is not stream-ordered: the queued fill runs after it, and faults.
        // SAFETY: the mapping above.
        unsafe {
            ok(cuMemUnmap(va, G));
            ok(cuMemRelease(h));
            fails(cuStreamSynchronize(s), errors::ILLEGAL_ADDRESS);
            ok(cuStreamDestroy_v2(s));
            ok(cuMemAddressFree(va, G));
        }
    }
}

#[test]
fn cublas_gemm_queues_on_its_stream_and_checks_its_operands() {
    let _ctx = serial();
    let s = stream(NON_BLOCKING);
    // Column-major 2×3 · 3×2.
    let a: [f32; 6] = [1.0, 4.0, 2.0, 5.0, 3.0, 6.0];
    let b: [f32; 6] = [7.0, 9.0, 11.0, 8.0, 10.0, 12.0];
    let (da, db, dc) = (alloc(24), alloc(24), alloc(16));
    let mut handle = null_mut();
    // SAFETY: device buffers of the sizes the GEMM reads and writes; host alpha and beta.
    unsafe {
        ok(cuMemcpyHtoD_v2(da, a.as_ptr().cast(), 24));
        ok(cuMemcpyHtoD_v2(db, b.as_ptr().cast(), 24));
        ok(cublasCreate_v2(&mut handle));
        ok(cublasSetStream_v2(handle, s));
        let (alpha, beta) = (1.0f32, 0.0f32);
        ok(cublasSgemm_v2(
            handle, 0, 0, 2, 2, 3, &alpha, da as _, 2, db as _, 3, &beta, dc as _, 2,
        ));
        let mut c = [0f32; 4];
        ok(cuMemcpyDtoH_v2(c.as_mut_ptr().cast(), dc, 16));
        assert_eq!(c, [0.0; 4], "queued on a non-blocking stream, not run yet");
        ok(cuStreamSynchronize(s));
        ok(cuMemcpyDtoH_v2(c.as_mut_ptr().cast(), dc, 16));
        assert_eq!(c, [58.0, 139.0, 64.0, 154.0]);
        // C too small for m = 3: refused at the call.
        assert_eq!(
            cublasSgemm_v2(
                handle, 0, 0, 3, 2, 2, &alpha, da as _, 3, db as _, 3, &beta, dc as _, 3
            ),
            7
        );
        ok(cublasDestroy_v2(handle));
        for p in [da, db, dc] {
            ok(cuMemFree_v2(p));
        }
        ok(cuStreamDestroy_v2(s));
    }
}

/// Runs the ignored test `name` of this binary in a child process with `env`; its stderr and
/// exit status.
fn child(name: &str, env: &[(&str, &str)]) -> (String, Option<i32>) {
    let name = format!("rules::{name}");
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().copied())
        .env("FAKE_CUDA_MEMORY", "1GiB")
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code(),
    )
}

#[test]
#[ignore = "run by every_call_can_be_failed_by_name, in a child process"]
fn child_with_injected_failures() {
    let _ctx = serial();
    let mut p = 0;
    // SAFETY: valid out-pointers.
    unsafe {
        ok(cuMemAlloc_v2(&mut p, 4096));
        fails(cuMemAlloc_v2(&mut p, 4096), errors::INVALID_VALUE);
        ok(cuMemAlloc_v2(&mut p, 4096));
        let mut s = null_mut();
        fails(cuStreamCreate(&mut s, 0), errors::OUT_OF_MEMORY);
        fails(cuStreamCreate(&mut s, 0), errors::OUT_OF_MEMORY);
    }
}

#[test]
fn every_call_can_be_failed_by_name() {
    let (stderr, status) = child(
        "child_with_injected_failures",
        &[(
            "FAKE_CUDA_FAIL",
            "cuMemAlloc:2:CUDA_ERROR_INVALID_VALUE,cuStreamCreate:1+",
        )],
    );
    assert_eq!(status, Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "fake cuda: cuMemAlloc_v2: failed by FAKE_CUDA_FAIL with CUDA_ERROR_INVALID_VALUE"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("3 injected failures"), "{stderr}");
}

#[test]
#[ignore = "run by leaks_are_reported_at_exit_and_strict_mode_fails_the_process, in a child process"]
fn child_that_leaks() {
    let _ctx = serial();
    alloc(4096);
    stream(0);
}

#[test]
fn leaks_are_reported_at_exit_and_strict_mode_fails_the_process() {
    let (stderr, status) = child("child_that_leaks", &[]);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(
        stderr.contains("fake cuda: at exit: 1 allocations (2097152 bytes)")
            && stderr.contains(" 1 streams,"),
        "{stderr}"
    );
    let (stderr, status) = child("child_that_leaks", &[("FAKE_CUDA_STRICT", "1")]);
    assert_eq!(status, Some(3), "{stderr}");
    assert!(
        stderr.contains("FAKE_CUDA_STRICT=1 and the process leaked"),
        "{stderr}"
    );
}

#[test]
#[ignore = "run by eager_mode_runs_work_as_it_is_queued, in a child process"]
fn child_eager() {
    let _ctx = serial();
    let s = stream(NON_BLOCKING);
    let p = alloc(4096);
    ok(fill(s, p, 1, 42));
    assert_eq!(
        read_u32(p, 1),
        (errors::SUCCESS, vec![42]),
        "ran as it was queued"
    );
    // SAFETY: handles created above.
    unsafe {
        ok(cuStreamDestroy_v2(s));
        ok(cuMemFree_v2(p));
    }
}

#[test]
fn eager_mode_runs_work_as_it_is_queued() {
    let (stderr, status) = child("child_eager", &[("FAKE_CUDA_EAGER", "1")]);
    assert_eq!(status, Some(0), "{stderr}");
}
