//! CUDA backend. Without a driver `Device::cuda(0)` must return the typed error (cudarc alone
//! would panic) and `library_present(CudaLibrary::Driver)` be false (true on the fake); with a GPU, an alloc/free/stats round trip and a `CudaBuffer` copy through
//! cudarc. Set `VRAMGUARD_REQUIRE_GPU=1` (scripts/gpu-check.sh does) to fail instead of skip.
//! With a GPU, the default `expandable_segments:auto` must pick expandable segments (virtual
//! memory management plus a passing self-test) and the pages it maps must hold what is written.

use vramguard_alloc::driver::{library_present, CudaLibrary};
use vramguard_alloc::ContextError;
use vramguard_alloc::{AllocatorConfig, ExpandableSegments};
use vramguard_memory::device::CudaBuffer;
use vramguard_memory::device::DeviceError;
use vramguard_memory::{memory, Device};

fn require_gpu() -> bool {
    std::env::var("VRAMGUARD_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

fn skip(why: &str) {
    assert!(!require_gpu(), "VRAMGUARD_REQUIRE_GPU=1 but {why}");
    eprintln!("skipping the GPU part: {why}");
}

#[test]
fn cuda_device_is_a_typed_error_without_a_driver_and_round_trips_with_one() {
    let device = match Device::cuda(0) {
        Err(DeviceError::Context(ContextError::NoDriver)) => {
            assert!(!library_present(CudaLibrary::Driver));
            let msg = DeviceError::Context(ContextError::NoDriver).to_string();
            assert!(
                msg.contains("libcuda") && msg.contains("Device::Host"),
                "{msg}"
            );
            // Asking again gives the same answer, still without a panic.
            assert!(matches!(
                Device::cuda(1),
                Err(DeviceError::Context(ContextError::NoDriver))
            ));
            assert!(matches!(
                Device::cuda_with_config(0, AllocatorConfig::default()),
                Err(DeviceError::Context(ContextError::NoDriver))
            ));
            return skip("no CUDA driver (libcuda.so) on this machine");
        }
        Err(e @ DeviceError::Context(ContextError::NoDevice { .. })) => {
            return skip(&e.to_string())
        }
        // A driver library that cannot start (a stub libcuda, no usable GPU in a container).
        Err(e @ DeviceError::Context(ContextError::Driver { op: "cuInit", .. })) => {
            return skip(&e.to_string())
        }
        Err(e) => panic!("unexpected error opening cuda:0: {e}"),
        Ok(d) => d,
    };
    assert!(device.is_cuda() && !device.is_host());
    assert_eq!(Device::cuda(0).unwrap(), device, "one allocator per GPU");
    let capacity = device.allocator().backend().capacity().unwrap();
    assert!(capacity > 0);

    let allocator = device.allocator();
    let before = memory::stats(&device);
    {
        let a = device.allocate(1000).unwrap();
        assert_eq!(a.size(), 1024);
        assert!(a.host_ptr().is_none());
        assert_eq!(a.addr() % 256, 0);
        let b = device.allocate(5 << 20).unwrap();
        let s = memory::stats(&device);
        assert_eq!(s.allocated_bytes, before.allocated_bytes + 1024 + (5 << 20));
        drop((a, b));
    }
    let s = memory::stats(&device);
    assert_eq!(s.allocated_bytes, before.allocated_bytes);
    allocator.check_invariants().unwrap();

    // A CudaBuffer through cudarc: copy in, copy out.
    let context = device.cuda_context().unwrap().clone();
    let stream = context.default_stream();
    let values: Vec<f32> = (0..4096).map(|i| i as f32).collect();
    let mut buf = CudaBuffer::<f32>::new(&device, values.len()).unwrap();
    stream.memcpy_htod(&values, &mut buf).unwrap();
    let back: Vec<f32> = stream.clone_dtoh(&buf).unwrap();
    assert_eq!(back, values);
    drop(buf);

    // An impossible request fails with the typed error and leaves the allocator intact.
    let err = device.allocate(capacity * 2).unwrap_err();
    assert!(err.to_string().contains("cuda:0"), "{err}");
    memory::empty_cache(&device);
    let s = memory::stats(&device);
    assert_eq!(s.allocated_bytes, before.allocated_bytes);
    if !allocator.uses_expandable_segments() {
        // One free per fixed segment (an expandable segment maps in many steps and unmaps
        // whole free tails, so its counts need not pair up).
        assert_eq!(s.backend_allocs - s.backend_frees, s.segments);
    }
}

#[test]
fn library_present_says_whether_the_driver_can_be_called() {
    let driver = library_present(CudaLibrary::Driver);
    // The probe unloads what it loaded: asking again gives the same answer.
    assert_eq!(library_present(CudaLibrary::Driver), driver);
    if !driver {
        // What `Device::cuda` answers without a driver (cudarc alone would panic).
        assert!(matches!(
            Device::cuda(0),
            Err(DeviceError::Context(ContextError::NoDriver))
        ));
        return skip(
            "no CUDA driver (libcuda.so) on this machine: library_present(Driver) is false",
        );
    }
    assert!(
        !matches!(
            Device::cuda(0),
            Err(DeviceError::Context(ContextError::NoDriver))
        ),
        "library_present(Driver) is true, so Device::cuda must find the driver"
    );
    if require_gpu() {
        // On a GPU (scripts/gpu-check.sh links PyTorch's cuBLAS) and on the fake (linked as
        // libcublas.so by scripts/fake-cuda.sh), cuBLAS is there too: the matmul tests use it.
        assert!(library_present(CudaLibrary::Cublas));
    }
}

/// Opens `cuda:0` with its own allocator built from `config`, or says why the test skips.
fn own_gpu_allocator(config: AllocatorConfig) -> Option<Device> {
    match Device::cuda_with_config(0, config) {
        Ok(d) => Some(d),
        Err(DeviceError::Context(ContextError::NoDriver)) => {
            skip("no CUDA driver (libcuda.so) on this machine");
            None
        }
        Err(e @ DeviceError::Context(ContextError::NoDevice { .. })) => {
            skip(&e.to_string());
            None
        }
        // A driver library that cannot start (a stub libcuda, no usable GPU in a container).
        Err(e @ DeviceError::Context(ContextError::Driver { op: "cuInit", .. })) => {
            skip(&e.to_string());
            None
        }
        Err(e) => panic!("unexpected error opening cuda:0: {e}"),
    }
}

#[test]
fn auto_on_a_gpu_picks_expandable_segments_and_its_pages_read_back_what_was_written() {
    let Some(device) = own_gpu_allocator(AllocatorConfig::default()) else {
        return;
    };
    let allocator = device.allocator();
    assert_eq!(
        allocator.config().expandable_segments,
        ExpandableSegments::Auto
    );
    assert!(
        allocator.uses_expandable_segments(),
        "auto chose fixed segments on this GPU: {:?}",
        allocator.fixed_segments_reason()
    );
    assert!(memory::snapshot(&device).expandable_segments);
    let granularity = {
        use vramguard_alloc::Backend;
        allocator.backend().virtual_memory().unwrap().granularity() as u64
    };
    // Large-pool requests (over 1 MiB) of odd sizes: each is carved from the mapped range, the
    // second and third growing it at its end.
    let sizes: [usize; 3] = [5 << 20, (37 << 20) + 123 * 4, (3 << 20) + 512];
    let blocks: Vec<_> = sizes.iter().map(|&s| device.allocate(s).unwrap()).collect();
    let s = memory::stats(&device);
    let rounded: u64 = blocks.iter().map(|b| b.size() as u64).sum();
    assert_eq!(s.allocated_bytes, rounded);
    assert_eq!(s.reserved_bytes, rounded.next_multiple_of(granularity));
    let snap = memory::snapshot(&device);
    assert_eq!(snap.segments.len(), 1);
    assert!(snap.segments[0].expandable);
    // A different pattern per block, written and read back with synchronous driver copies.
    let patterns: Vec<Vec<u32>> = blocks
        .iter()
        .enumerate()
        .map(|(k, b)| {
            (0..b.requested_bytes() / 4)
                .map(|i| (i as u32).wrapping_mul(2_654_435_761) ^ (k as u32 + 1))
                .collect()
        })
        .collect();
    for (b, p) in blocks.iter().zip(&patterns) {
        // SAFETY: `b` holds at least `p.len() * 4` bytes of device memory owned by this test.
        unsafe { cudarc::driver::result::memcpy_htod_sync(b.addr(), p) }.unwrap();
    }
    for (b, p) in blocks.iter().zip(&patterns) {
        let mut back = vec![0u32; p.len()];
        // SAFETY: as above; the copy is synchronous.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut back, b.addr()) }.unwrap();
        assert!(back == *p, "block {:#x} did not read back", b.addr());
    }
    // A CudaBuffer in the expandable segment, through cudarc's own copies.
    let stream = device.cuda_context().unwrap().default_stream();
    let values: Vec<f32> = (0..(3 << 18)).map(|i| (i % 1013) as f32 - 7.5).collect();
    let mut buf = CudaBuffer::<f32>::new(&device, values.len()).unwrap();
    stream.memcpy_htod(&values, &mut buf).unwrap();
    assert_eq!(stream.clone_dtoh(&buf).unwrap(), values);
    drop((blocks, buf));
    allocator.check_invariants().unwrap();
    // Everything returns to the GPU.
    let reserved = memory::stats(&device).reserved_bytes;
    assert_eq!(memory::empty_cache(&device), reserved);
    let s = memory::stats(&device);
    assert_eq!((s.reserved_bytes, s.segments, s.allocated_bytes), (0, 0, 0));
}

#[test]
fn explicit_off_on_a_gpu_gives_fixed_segments() {
    let config = AllocatorConfig::default().with_expandable_segments(false);
    let Some(device) = own_gpu_allocator(config) else {
        return;
    };
    assert!(!device.allocator().uses_expandable_segments());
    let a = device.allocate(5 << 20).unwrap();
    // PyTorch's rule: a 20 MiB segment for a large request under 10 MiB.
    assert_eq!(memory::stats(&device).reserved_bytes, 20 << 20);
    drop(a);
    assert_eq!(memory::empty_cache(&device), 20 << 20);
}

#[test]
fn expandable_segments_on_the_gpu_map_and_unmap_pages() {
    let config = AllocatorConfig::default().with_expandable_segments(true);
    let device = match Device::cuda_with_config(0, config) {
        Ok(d) => d,
        Err(DeviceError::Context(ContextError::NoDriver)) => {
            return skip("no CUDA driver (libcuda.so) on this machine")
        }
        Err(e @ DeviceError::Context(ContextError::NoDevice { .. })) => {
            return skip(&e.to_string())
        }
        // A driver library that cannot start (a stub libcuda, no usable GPU in a container).
        Err(e @ DeviceError::Context(ContextError::Driver { op: "cuInit", .. })) => {
            return skip(&e.to_string())
        }
        Err(DeviceError::Config(e)) => {
            // The GPU lacks virtual memory management: a typed error, not a crash.
            assert!(e.to_string().contains("expandable_segments"), "{e}");
            return skip(&format!("no virtual memory management on this GPU: {e}"));
        }
        Err(e) => panic!("unexpected error opening cuda:0: {e}"),
    };
    let allocator = device.allocator();
    let granularity = {
        use vramguard_alloc::Backend;
        allocator.backend().virtual_memory().unwrap().granularity() as u64
    };
    let a = device.allocate(5 << 20).unwrap();
    let s = memory::stats(&device);
    assert_eq!(s.reserved_bytes, (5u64 << 20).next_multiple_of(granularity));
    assert_eq!(s.segments, 1);
    let b = device.allocate(30 << 20).unwrap();
    // The pages are usable: copy through them.
    let values: Vec<f32> = (0..(30 << 18)).map(|i| (i % 977) as f32).collect();
    let mut back = vec![0f32; values.len()];
    // SAFETY: `b` holds 30 MiB of device memory owned by this test; the copies are synchronous.
    unsafe {
        cudarc::driver::result::memcpy_htod_sync(b.addr(), &values).unwrap();
        cudarc::driver::result::memcpy_dtoh_sync(&mut back, b.addr()).unwrap();
    }
    assert_eq!(back, values);
    let snap = memory::snapshot(&device);
    assert_eq!(snap.segments.len(), 1);
    assert!(snap.segments[0].expandable);
    drop((a, b));
    allocator.check_invariants().unwrap();
    let reserved = memory::stats(&device).reserved_bytes;
    assert_eq!(memory::empty_cache(&device), reserved);
    let s = memory::stats(&device);
    assert_eq!((s.reserved_bytes, s.segments), (0, 0));
}

#[test]
fn cuda_buffer_needs_a_cuda_device() {
    let err = CudaBuffer::<f32>::new(&Device::isolated_host(), 16).unwrap_err();
    assert!(err.to_string().contains("Device::cuda"), "{err}");
}

#[test]
fn a_new_cuda_buffer_is_zeroed_even_when_its_block_comes_from_the_cache() {
    let device = match Device::cuda_with_config(0, AllocatorConfig::default()) {
        Ok(d) => d,
        Err(DeviceError::Context(ContextError::NoDriver)) => {
            return skip("no CUDA driver (libcuda.so) on this machine")
        }
        Err(e @ DeviceError::Context(ContextError::NoDevice { .. })) => {
            return skip(&e.to_string())
        }
        // A driver library that cannot start (a stub libcuda, no usable GPU in a container).
        Err(e @ DeviceError::Context(ContextError::Driver { op: "cuInit", .. })) => {
            return skip(&e.to_string())
        }
        Err(e) => panic!("unexpected error opening cuda:0: {e}"),
    };
    let stream = device.cuda_context().unwrap().default_stream();
    let mut dirty = CudaBuffer::<u8>::new(&device, 4096).unwrap();
    let addr = dirty.allocation().addr();
    stream.memcpy_htod(&[0xAB_u8; 4096], &mut dirty).unwrap();
    drop(dirty);
    // Same size, own allocator: the cache hands the same block back, old bytes and all.
    let fresh = CudaBuffer::<u8>::new(&device, 4096).unwrap();
    assert_eq!(fresh.allocation().addr(), addr);
    let back: Vec<u8> = stream.clone_dtoh(&fresh).unwrap();
    assert!(
        back.iter().all(|&b| b == 0),
        "stale bytes in a new CudaBuffer"
    );
    // `uninit` skips the memset (the caller writes before reading).
    drop(fresh);
    // SAFETY: written in full before it is read.
    let mut raw = unsafe { CudaBuffer::<f32>::uninit(&device, 1024) }.unwrap();
    stream.memcpy_htod(&[1.5f32; 1024], &mut raw).unwrap();
    assert_eq!(stream.clone_dtoh(&raw).unwrap(), vec![1.5f32; 1024]);
}
