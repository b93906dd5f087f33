//! The caching allocator on a real GPU (`scripts/gpu-check.sh run` runs these on the lent
//! machine; elsewhere each test prints `skipped: <reason>` and passes):
//!
//! - growing to 1, 10 and 40 GiB, dropping, `empty_cache`: the driver's free memory
//!   (`cuMemGetInfo`) returns to its baseline, also after dropping a device built with its own
//!   config;
//! - out of memory gives the typed cause and the allocator keeps working;
//! - 8 threads allocating and freeing, then the invariant check;
//! - patterns written and read back around a shrink and a regrowth at the same address
//!   (expandable segments);
//! - a kernel still writing on another stream while its block is freed and reallocated:
//!   corruption without `record_stream`, none with it, and none for a `CudaBuffer` whose
//!   pointer was taken for that stream (it records the stream itself);
//! - allocator calls neither consume an error cudarc recorded on the context nor leave their
//!   context current.
//!
//! Each device here has an allocator of its own (`Device::cuda_with_config`), so statistics
//! are exact. Figures go to `VRAMGUARD_GPU_FIGURES` when set.

use crate::gpu;

use cudarc::driver::DevicePtrMut;
use cudarc::driver::{result, sys, DriverError};
use gpu::{context, driver_free, exclusive, figure, fill, own_device, read, skip, Kernels};
use vramguard_alloc::cuda_backend::stream_id;
use vramguard_alloc::{AllocatorConfig, OomCause};
use vramguard_memory::device::CudaBuffer;
use vramguard_memory::memory;

const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;
/// How far the driver's free memory may stay from its baseline after everything was returned:
/// driver bookkeeping (page tables of mapped ranges) is not the allocator's to return.
const BASELINE_SLACK: usize = 16 * MIB;

#[test]
fn cuda_grow_drop_and_empty_cache_return_the_drivers_free_memory() {
    const TEST: &str = "cuda_grow_drop_and_empty_cache_return_the_drivers_free_memory";
    let _gpu = exclusive();
    let Some(device) = own_device(TEST, AllocatorConfig::default()) else {
        return;
    };
    let ctx = context(&device);
    let baseline = driver_free(&ctx);
    println!(
        "{TEST}: {} free before; expandable segments: {}",
        vramguard_alloc::human_bytes(baseline as u64),
        device.allocator().uses_expandable_segments()
    );
    let chunk = 256 * MIB;
    for gib in [1usize, 10, 40] {
        let bytes = gib * GIB;
        if bytes > baseline / 10 * 9 {
            println!("{TEST}: {gib} GiB skipped: the GPU has {baseline} bytes free");
            continue;
        }
        let blocks: Vec<_> = (0..bytes / chunk)
            .map(|_| device.allocate(chunk).unwrap())
            .collect();
        let grown = memory::stats(&device);
        assert_eq!(grown.allocated_bytes, bytes as u64);
        assert!(grown.reserved_bytes >= bytes as u64);
        let during = driver_free(&ctx);
        assert!(
            baseline - during >= bytes,
            "the driver sees {} bytes taken for {bytes} allocated",
            baseline - during
        );
        drop(blocks);
        assert_eq!(memory::stats(&device).allocated_bytes, 0);
        let released = memory::empty_cache(&device);
        assert_eq!(released, grown.reserved_bytes);
        assert_eq!(memory::stats(&device).reserved_bytes, 0);
        device.allocator().check_invariants().unwrap();
        let after = driver_free(&ctx);
        figure(
            TEST,
            &format!("driver_free_delta_after_{gib}gib"),
            baseline as f64 - after as f64,
            "bytes",
        );
        assert!(
            baseline.abs_diff(after) <= BASELINE_SLACK,
            "after {gib} GiB: {after} bytes free, baseline {baseline}"
        );
    }

    // A second device with its own config (fixed segments), dropped while it holds cached
    // segments: its allocator returns them.
    let own = own_device(
        TEST,
        AllocatorConfig::default().with_expandable_segments(false),
    )
    .expect("the GPU opened above");
    let blocks: Vec<_> = (0..4).map(|_| own.allocate(chunk).unwrap()).collect();
    assert_eq!(memory::stats(&own).reserved_bytes, 4 * chunk as u64);
    drop(blocks);
    assert_eq!(memory::stats(&own).reserved_bytes, 4 * chunk as u64);
    drop(own);
    let after = driver_free(&ctx);
    figure(
        TEST,
        "driver_free_delta_after_dropping_a_device",
        baseline as f64 - after as f64,
        "bytes",
    );
    assert!(
        baseline.abs_diff(after) <= BASELINE_SLACK,
        "after dropping a device: {after} bytes free, baseline {baseline}"
    );
}

#[test]
fn cuda_out_of_memory_is_typed_and_the_allocator_keeps_working() {
    const TEST: &str = "cuda_out_of_memory_is_typed_and_the_allocator_keeps_working";
    let _gpu = exclusive();
    let limited = AllocatorConfig::default().with_memory_limit(GIB as u64);
    let Some(device) = own_device(TEST, limited) else {
        return;
    };
    let held = device.allocate(768 * MIB).unwrap();
    let e = device.allocate(512 * MIB).unwrap_err();
    assert_eq!(e.cause, OomCause::LimitReached, "{e}");
    assert!(e.to_string().contains("memory limit"), "{e}");
    let small = device.allocate(128 * MIB).unwrap();
    drop((held, small));
    device.allocator().check_invariants().unwrap();

    // More than the GPU holds: the device is full, and no driver failure is reported.
    let Some(device) = own_device(TEST, AllocatorConfig::default()) else {
        return;
    };
    let capacity = device.allocator().backend().capacity().unwrap();
    let e = device.allocate(capacity + GIB).unwrap_err();
    assert_eq!(e.cause, OomCause::DeviceFull, "{e}");
    assert_eq!(e.context.backend_error, None);
    println!("{TEST}: {e}");
    let s = memory::stats(&device);
    assert_eq!(s.num_ooms, 1);
    let b = device.allocate(64 * MIB).unwrap();
    assert_eq!(memory::stats(&device).allocated_bytes, 64 * MIB as u64);
    drop(b);
    device.allocator().check_invariants().unwrap();
}

#[test]
fn cuda_eight_threads_allocate_and_free_then_the_invariants_hold() {
    const TEST: &str = "cuda_eight_threads_allocate_and_free_then_the_invariants_hold";
    let _gpu = exclusive();
    let Some(device) = own_device(TEST, AllocatorConfig::default()) else {
        return;
    };
    const OPS: usize = 2000;
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let device = device.clone();
            s.spawn(move || {
                let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                let mut live = Vec::new();
                for _ in 0..OPS {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    if live.len() >= 16 || (state & 3 == 0 && !live.is_empty()) {
                        live.swap_remove((state >> 8) as usize % live.len());
                    } else {
                        // 512 B to 64 MiB, both pools.
                        let bytes = 512usize << ((state >> 16) % 18);
                        live.push(device.allocate(bytes).unwrap());
                    }
                }
            });
        }
    });
    device.allocator().check_invariants().unwrap();
    let s = memory::stats(&device);
    assert_eq!(s.allocated_bytes, 0);
    assert_eq!(s.num_allocs, s.num_frees);
    figure(
        TEST,
        "reserved_after_8_threads",
        s.reserved_bytes as f64,
        "bytes",
    );
    memory::empty_cache(&device);
    assert_eq!(memory::stats(&device).reserved_bytes, 0);
}

#[test]
fn cuda_patterns_survive_a_shrink_and_a_regrowth_at_the_same_address() {
    const TEST: &str = "cuda_patterns_survive_a_shrink_and_a_regrowth_at_the_same_address";
    let _gpu = exclusive();
    let Some(device) = own_device(TEST, AllocatorConfig::default()) else {
        return;
    };
    if !device.allocator().uses_expandable_segments() {
        let why = device
            .allocator()
            .fixed_segments_reason()
            .unwrap_or("unknown");
        skip(TEST, &format!("no expandable segments on this GPU ({why})"));
        return;
    }
    let ctx = context(&device);
    let words = |bytes: usize| bytes / 4;
    let keep = device.allocate(64 * MIB).unwrap();
    fill(&ctx, keep.addr(), words(64 * MIB), 0x1234_5678);
    let tail = device.allocate(256 * MIB).unwrap();
    let tail_addr = tail.addr();
    fill(&ctx, tail_addr, words(256 * MIB), 0xdead_beef);
    drop(tail);
    let released = memory::empty_cache(&device);
    assert!(released >= 256 * MIB as u64, "released {released}");
    assert!(read(&ctx, keep.addr(), words(64 * MIB))
        .iter()
        .all(|&w| w == 0x1234_5678));

    let regrown = device.allocate(256 * MIB).unwrap();
    assert_eq!(regrown.addr(), tail_addr, "regrown at the same address");
    fill(&ctx, regrown.addr(), words(256 * MIB), 0x0bad_f00d);
    assert!(read(&ctx, regrown.addr(), words(256 * MIB))
        .iter()
        .all(|&w| w == 0x0bad_f00d));
    assert!(read(&ctx, keep.addr(), words(64 * MIB))
        .iter()
        .all(|&w| w == 0x1234_5678));
    drop((keep, regrown));
    device.allocator().check_invariants().unwrap();
}

#[test]
fn cuda_a_block_written_by_another_stream_is_reused_safely_only_with_record_stream() {
    const TEST: &str =
        "cuda_a_block_written_by_another_stream_is_reused_safely_only_with_record_stream";
    let _gpu = exclusive();
    let Some(probe) = own_device(TEST, AllocatorConfig::default()) else {
        return;
    };
    let ctx = context(&probe);
    drop(probe);
    let kernels = Kernels::load(&ctx);
    let side = ctx.new_stream().unwrap();
    const BYTES: usize = MIB;
    const WORDS: usize = BYTES / 4;
    // About 0.2 s at GPU clocks: long enough for the host to reallocate and overwrite first.
    const SPINS: u64 = 400_000_000;
    for record in [false, true] {
        let device = own_device(TEST, AllocatorConfig::default()).unwrap();
        let x = device.allocate(BYTES).unwrap();
        let x_addr = x.addr();
        fill(&ctx, x_addr, WORDS, 0);
        kernels.slow_fill(&side, x_addr, WORDS as u32, 0xbad0_0bad, SPINS);
        if record {
            x.record_stream(stream_id(&side));
        }
        drop(x);
        let y = device.allocate(BYTES).unwrap();
        if record {
            assert_ne!(
                y.addr(),
                x_addr,
                "handed out while the side stream writes it"
            );
        } else {
            assert_eq!(
                y.addr(),
                x_addr,
                "reused at once in the default stream's order"
            );
        }
        fill(&ctx, y.addr(), WORDS, 0x600d_600d);
        side.synchronize().unwrap();
        let words = read(&ctx, y.addr(), WORDS);
        let corrupted = words.iter().filter(|&&w| w != 0x600d_600d).count();
        figure(
            TEST,
            if record {
                "corrupted_words_with_record_stream"
            } else {
                "corrupted_words_without_record_stream"
            },
            corrupted as f64,
            "count",
        );
        if record {
            assert_eq!(
                corrupted, 0,
                "record_stream must keep the block out of the pool"
            );
        } else {
            assert!(
                corrupted > 0,
                "the side stream's late writes should land in the reused block"
            );
        }
        drop(y);
        device.allocator().check_invariants().unwrap();
        memory::empty_cache(&device);
        assert_eq!(device.allocator().pending_frees(), 0);
    }
}

#[test]
fn cuda_a_buffer_a_side_stream_writes_is_not_reused_before_that_write_ran() {
    const TEST: &str = "cuda_a_buffer_a_side_stream_writes_is_not_reused_before_that_write_ran";
    let _gpu = exclusive();
    let Some(device) = own_device(TEST, AllocatorConfig::default()) else {
        return;
    };
    let ctx = context(&device);
    let kernels = Kernels::load(&ctx);
    let side = ctx.new_stream().unwrap();
    let default = ctx.default_stream();
    const WORDS: usize = MIB / 4;
    // About 0.2 s at GPU clocks: long enough for the host to reallocate and overwrite first.
    const SPINS: u64 = 400_000_000;
    let mut x = CudaBuffer::<u32>::new(&device, WORDS).unwrap();
    // The pointer taken for a launch on the side stream: the buffer records that stream, so its
    // block must wait for the side stream's work once it is dropped.
    let (ptr, _record) = x.device_ptr_mut(&side);
    kernels.slow_fill(&side, ptr, WORDS as u32, 0xbad0_0bad, SPINS);
    drop(_record);
    drop(x);
    let y = CudaBuffer::<u32>::new(&device, WORDS).unwrap();
    side.synchronize().unwrap();
    let words = default.clone_dtoh(&y).unwrap();
    let corrupted = words.iter().filter(|&&w| w != 0).count();
    figure(TEST, "corrupted_words", corrupted as f64, "count");
    assert_eq!(
        corrupted, 0,
        "the side stream's late write landed in a buffer allocated after the drop"
    );
    drop(y);
    device.allocator().check_invariants().unwrap();
}

#[test]
fn cuda_allocator_calls_keep_cudarcs_recorded_error_and_the_callers_context() {
    const TEST: &str = "cuda_allocator_calls_keep_cudarcs_recorded_error_and_the_callers_context";
    let _gpu = exclusive();
    let Some(device) = own_device(
        TEST,
        AllocatorConfig::default().with_expandable_segments(false),
    ) else {
        return;
    };
    let ctx = context(&device);
    // An error cudarc recorded earlier (as a failed free in a Drop does).
    let recorded = sys::CUresult::CUDA_ERROR_INVALID_VALUE;
    ctx.record_err::<()>(Err(DriverError(recorded)));
    // No context current on this thread: the allocator's calls push and pop theirs.
    // SAFETY: unbinding any context from this thread.
    unsafe { result::ctx::set_current(std::ptr::null_mut()) }.unwrap();
    let b = device.allocate(64 * MIB).unwrap();
    drop(b);
    assert_eq!(memory::empty_cache(&device), 64 * MIB as u64);
    assert_eq!(memory::stats(&device).backend_frees, 1);
    assert_eq!(
        result::ctx::get_current().unwrap(),
        None,
        "the caller's (no) context is back"
    );
    assert_eq!(
        ctx.check_err(),
        Err(DriverError(recorded)),
        "the recorded error is still there"
    );
}
