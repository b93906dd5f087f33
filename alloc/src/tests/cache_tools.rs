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
