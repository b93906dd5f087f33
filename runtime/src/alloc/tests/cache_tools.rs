//! The explicit tools: `empty_cache`, `reserve`, and the `Workspace` of views.

use super::*;

#[test]
fn empty_cache_returns_free_segments_only() {
    let a = fixed();
    let live = a.allocate(4 * KIB).unwrap();
    let gone = a.allocate(4 * MIB).unwrap();
    a.free(gone);
    assert_eq!(a.empty_cache(), 20 * MIB as u64);
    let s = a.stats();
    assert_eq!(
        (s.reserved_bytes, s.allocated_bytes),
        (2 * MIB as u64, 4 * KIB as u64)
    );
    assert_eq!(a.empty_cache(), 0);
    a.free(live);
    assert_eq!(a.empty_cache(), 2 * MIB as u64);
    assert_eq!(a.stats().reserved_bytes, 0);
    check(&a);
}

#[test]
fn reserve_preallocates_a_segment_large_requests_are_carved_from() {
    let a = fixed();
    assert_eq!(a.reserve(64 * MIB).unwrap(), 64 * MIB as u64);
    let blocks: Vec<Block> = [3, 17, 30]
        .iter()
        .map(|&m| a.allocate(m * MIB).unwrap())
        .collect();
    let s = a.stats();
    assert_eq!((s.backend_allocs, s.reserved_bytes), (1, 64 * MIB as u64));
    for b in blocks {
        a.free(b);
    }
    check(&a);
    let small = alloc(Some(8 * MIB), fixed_config());
    let err = small.reserve(16 * MIB).unwrap_err();
    assert_eq!(err.cause, OomCause::DeviceFull);

    let pre = alloc(None, fixed_config().with_preallocate(24 * MIB));
    assert_eq!(pre.stats().reserved_bytes, 24 * MIB as u64);
    let e = CachingAllocator::with_config(
        HostBackend::with_capacity(MIB),
        fixed_config().with_preallocate(2 * MIB),
    )
    .unwrap_err();
    assert!(matches!(e, SetupError::PreallocateFailed { bytes, .. } if bytes == 2 * MIB));
}

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
