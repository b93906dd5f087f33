//! The allocator's rules as a device shows them (these tests name `Device`, `Allocation` or
//! `Workspace`, which sit above the allocator's crate; the rest are `vramguard-alloc`'s own unit
//! tests).

use crate::alloc::*;
use crate::device::Device;
use crate::memory::Workspace;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex as StdMutex;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

// From the allocator's cache_tools tests: through a device.
#[test]
fn workspace_hands_out_non_overlapping_views() {
    let device = Device::isolated_host();
    let mut ws = Workspace::new(&device, 10 * KIB).unwrap();
    assert_eq!(device.allocator().stats().allocated_bytes, 10 * KIB as u64);
    {
        let mut v = ws.view(4 * KIB).unwrap();
        assert_eq!(v.len(), 4 * KIB);
        v.as_f32_mut().unwrap().fill(1.5);
    }
    let [mut a, mut b] = ws.views([3 * KIB, 5000]).unwrap();
    assert!(a.addr() + a.len() as u64 <= b.addr());
    assert_eq!(b.addr() % 256, 0);
    assert_eq!(a.as_f32_mut().unwrap()[0], 1.5);
    b.as_bytes_mut().unwrap().fill(7);
    let err = ws.view(10 * KIB + 1).unwrap_err();
    assert!(err.to_string().contains("largest size"), "{err}");
    assert!(ws.views([6 * KIB, 5 * KIB]).is_err());
    // Views never allocate.
    let s = device.allocator().stats();
    assert_eq!((s.num_allocs, s.allocated_bytes), (1, 10 * KIB as u64));
    drop(ws);
    assert_eq!(device.allocator().stats().allocated_bytes, 0);
}

// From the allocator's expandable tests: through a device.
#[test]
fn auto_uses_expandable_segments_on_the_host_backend() {
    let by_new = CachingAllocator::new(HostBackend::new());
    let by_config =
        CachingAllocator::with_config(HostBackend::new(), AllocatorConfig::default()).unwrap();
    let bounded = Device::host_with_capacity(64 * MIB);
    let isolated = Device::isolated_host();
    for a in [&by_new, &by_config] {
        assert_eq!(a.config().expandable_segments, ExpandableSegments::Auto);
        assert!(a.uses_expandable_segments());
        assert_eq!(a.segment_mode(), SegmentMode::Expandable);
        assert_eq!(a.fixed_segments_reason(), None);
    }
    for d in [&bounded, &isolated] {
        assert!(d.allocator().uses_expandable_segments());
    }
    // A 5 MiB request maps 6 MiB (whole 2 MiB granules) instead of taking a 20 MiB segment.
    let b = by_new.allocate(5 * MIB).unwrap();
    let s = by_new.stats();
    assert_eq!(
        (s.reserved_bytes, s.segments, s.backend_allocs),
        (6 * MIB as u64, 1, 1)
    );
    let snap = by_new.snapshot();
    assert!(snap.expandable_segments && snap.segments[0].expandable);
    let json: serde_json::Value = serde_json::from_str(&snap.to_json()).unwrap();
    assert_eq!(json["expandable_segments"], true);
    by_new.free(b);
    // Requests up to 1 MiB still come from 2 MiB small-pool segments.
    let small = by_new.allocate(1000).unwrap();
    assert_eq!(by_new.stats().reserved_bytes, 8 * MIB as u64);
    by_new.free(small);
    by_new.check_invariants().unwrap();
}

// From the allocator's out_of_memory tests: through a device.
#[test]
fn pressure_handlers_run_after_the_cache_and_can_free_memory() {
    let device = Device::host_with_capacity(40 * MIB);
    let kv_cache: Arc<StdMutex<Vec<crate::device::Allocation>>> = Arc::default();
    for _ in 0..2 {
        let a = device.allocate(16 * MIB).unwrap();
        kv_cache.lock().unwrap().push(a);
    }
    let calls = Arc::new(AtomicU64::new(0));
    let (cache, seen) = (Arc::clone(&kv_cache), Arc::clone(&calls));
    let id = device.allocator().add_pressure_handler(move |needed| {
        seen.fetch_add(1, Ordering::SeqCst);
        assert_eq!(needed, 20 * MIB);
        match cache.lock().unwrap().pop() {
            Some(a) => {
                let freed = a.size();
                drop(a);
                freed
            }
            None => 0,
        }
    });
    let got = device.allocate(20 * MIB).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(kv_cache.lock().unwrap().len(), 1);
    let s = device.allocator().stats();
    assert_eq!(s.allocated_bytes, 36 * MIB as u64);
    assert_eq!(s.num_ooms, 0);
    drop(got);
    assert!(device.allocator().remove_pressure_handler(id));
    assert!(!device.allocator().remove_pressure_handler(id));
    kv_cache.lock().unwrap().clear();
}

// From the allocator's out_of_memory tests: through a device.
#[test]
fn a_handler_that_allocates_does_not_recurse() {
    let device = Device::host_with_capacity(8 * MIB);
    let inner = device.clone();
    let calls = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&calls);
    device.allocator().add_pressure_handler(move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
        // Fails: no handler runs for it.
        assert!(inner.allocate(64 * MIB).is_err());
        0
    });
    assert!(device.allocate(32 * MIB).is_err());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(device.allocator().stats().num_ooms, 2);
}

// From the allocator's ownership tests: through a device.
#[test]
fn public_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<DeviceAllocator>();
    send_sync::<Device>();
    send_sync::<crate::device::Allocation>();
    send_sync::<Workspace>();
    send_sync::<OutOfMemory>();
}

// From the allocator's ownership tests: through a device.
#[test]
fn a_host_pool_over_device_memory_gives_no_host_pointers() {
    // `Device::HostPool` is public: it may wrap any backend. Memory the CPU cannot address must
    // never come out as a host pointer (Workspace would zero it, tensors would slice it).
    struct Remote(AtomicU64);
    // SAFETY: hands out disjoint address ranges and claims no host access.
    unsafe impl Backend for Remote {
        fn name(&self) -> String {
            "remote".into()
        }
        fn capacity(&self) -> Option<usize> {
            None
        }
        fn host_addressable(&self) -> bool {
            false
        }
        fn alloc_segment(&self, bytes: usize) -> Result<u64, BackendError> {
            Ok(self.0.fetch_add(bytes as u64, Ordering::SeqCst))
        }
        unsafe fn free_segment(&self, _addr: u64, _bytes: usize) -> Result<(), BackendError> {
            Ok(())
        }
    }
    let backend: Box<dyn Backend> = Box::new(Remote(AtomicU64::new(1 << 40)));
    let device = Device::HostPool(Arc::new(CachingAllocator::new(backend)));
    assert!(!device.is_host());
    let a = device.allocate(1000).unwrap();
    assert!(a.host_ptr().is_none());
    drop(a);
    let mut ws = Workspace::new(&device, 4096).unwrap();
    assert!(ws.view(4096).unwrap().as_bytes_mut().is_none());
    assert!(Device::host().is_host() && Device::isolated_host().is_host());
}

// From the allocator's ownership tests: through a device.
/// An allocation holds no reference to its device of its own: the allocator keeps one to
/// itself while any of its allocations lives. Dropping every handle first leaves it alive
/// (its allocations still read their device, and a handle cloned from one works); the last
/// allocation's drop lets it go, in whatever order they are dropped.
#[test]
fn allocations_keep_their_device_alive_and_the_last_one_lets_it_go() {
    for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0]] {
        let device = Device::isolated_host();
        let weak = Arc::downgrade(device.allocator());
        let mut held: Vec<Option<crate::device::Allocation>> = [1000, 3 << 20, 700]
            .into_iter()
            .map(|bytes| Some(device.allocate(bytes).expect("allocation")))
            .collect();
        assert_eq!(
            Arc::strong_count(device.allocator()),
            2,
            "one handle, one kept"
        );
        drop(device);
        for (n, &i) in order.iter().enumerate() {
            let a = held[i].take().expect("not dropped yet");
            // The device read through the allocation is the live allocator.
            assert!(Arc::ptr_eq(
                a.device().allocator(),
                &weak.upgrade().expect("alive")
            ));
            let again = a.device().clone();
            let b = again
                .allocate(4096)
                .expect("allocation through a cloned handle");
            drop((a, b));
            drop(again);
            let left = order.len() - n - 1;
            assert_eq!(
                weak.upgrade().is_some(),
                left > 0,
                "{left} allocations left"
            );
        }
        assert_eq!(weak.strong_count(), 0);
    }
}

// From the allocator's ownership tests: through a device.
/// The allocator's reference to itself comes and goes with its allocations: none while
/// nothing is allocated, so a device with no allocations is dropped with its last handle.
#[test]
fn a_device_without_allocations_is_dropped_with_its_last_handle() {
    let device = Device::isolated_host();
    let weak = Arc::downgrade(device.allocator());
    for bytes in [512, 1 << 20, 8 << 20] {
        drop(device.allocate(bytes).expect("allocation"));
        assert_eq!(Arc::strong_count(device.allocator()), 1);
    }
    drop(device);
    assert!(weak.upgrade().is_none());
}

// From the allocator's ownership tests: through a device.
/// Threads allocate and free on one device while every handle to it is dropped early: the
/// last allocation freed, on whichever thread, lets the allocator go, exactly once, and no
/// allocation reads a freed allocator before that (each checks its device on the way).
#[test]
fn the_last_allocation_on_any_thread_lets_the_device_go() {
    for round in 0..20 {
        let device = Device::isolated_host();
        let weak = Arc::downgrade(device.allocator());
        let per_thread: Vec<Vec<crate::device::Allocation>> = (0..4)
            .map(|t| {
                (0..8)
                    .map(|i| {
                        device
                            .allocate(512 + 4096 * (t * 8 + i))
                            .expect("allocation")
                    })
                    .collect()
            })
            .collect();
        drop(device);
        std::thread::scope(|s| {
            for (t, mut held) in per_thread.into_iter().enumerate() {
                s.spawn(move || {
                    for i in 0..held.len() {
                        let a = held.swap_remove((i * 7 + t + round) % held.len());
                        let more = a.device().allocate(1 << 20).expect("allocation");
                        assert!(a.device() == more.device());
                        drop((more, a));
                    }
                });
            }
        });
        assert!(
            weak.upgrade().is_none(),
            "round {round}: the allocator outlived its blocks"
        );
    }
}

// From the allocator's rounding tests: through a device.
#[test]
fn requests_near_usize_max_are_typed_errors_with_every_setting() {
    let split = AllocatorConfig::default()
        .with_max_split_size(32 * MIB)
        .with_roundup_power2_divisions(4);
    let configs = [
        AllocatorConfig::default(),
        split.clone(),
        split.with_expandable_segments(true),
    ];
    let huge = [
        usize::MAX,
        usize::MAX - 511,
        usize::MAX / 2 + 1,
        1 << 48,
        (1 << 48) - 512,
        1 << 47,
    ];
    for config in configs {
        let device = Device::host_pool(HostBackend::with_capacity(256 * MIB), config).unwrap();
        let a = device.allocator();
        // A large cached free block, so the OOM report looks at the large pool's blocks.
        drop(device.allocate(40 * MIB).unwrap());
        let keep = device.allocate(1000).unwrap();
        let mut ooms = 0;
        for bytes in huge {
            let e = device.allocate(bytes).unwrap_err();
            assert_eq!(e.requested, bytes);
            assert!(!e.to_string().is_empty());
            let e = a.reserve(bytes).unwrap_err();
            assert_eq!(e.requested, bytes);
            ooms += 2;
        }
        let s = a.stats();
        assert_eq!(s.num_ooms, ooms);
        assert_eq!(s.allocated_bytes, 1024);
        a.check_invariants().unwrap();
        // Intact: a request that fits succeeds.
        let b = device.allocate(8 * MIB).unwrap();
        assert_eq!(a.stats().allocated_bytes, 1024 + 8 * MIB as u64);
        drop((b, keep));
    }
}

// Compiled with and without the `cuda` feature (CI runs it in both): the same variants exist
// in every build, and an error that wraps another says what the wrapped one says.
#[test]
fn device_errors_have_the_same_variants_in_every_build_and_wrap_the_driver_s_text() {
    use crate::device::DeviceError;
    let wrapped = [
        ContextError::NoDriver,
        ContextError::NoDevice {
            ordinal: 3,
            count: 1,
        },
        ContextError::Driver {
            op: "cuInit",
            message: "CUDA_ERROR_UNKNOWN".into(),
        },
    ];
    for context in wrapped {
        let text = context.to_string();
        let device = DeviceError::from(context);
        assert!(matches!(device, DeviceError::Context(_)));
        assert_eq!(device.to_string(), text);
    }
    let setup = SetupError::ExpandableUnsupported {
        device: "cuda:0".into(),
    };
    let text = setup.to_string();
    let device = DeviceError::from(setup);
    assert!(matches!(device, DeviceError::Config(_)));
    assert_eq!(device.to_string(), text);
    let disabled = DeviceError::CudaFeatureDisabled { ordinal: 2 }.to_string();
    assert!(
        disabled.starts_with("no CUDA device 2: vramguard was built without its `cuda` feature"),
        "{disabled}"
    );
    assert_eq!(
        ContextError::NoDriver.to_string(),
        "no CUDA driver found (libcuda.so): install the NVIDIA driver or use Device::Host"
    );
}
