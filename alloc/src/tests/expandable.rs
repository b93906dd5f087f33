//! Expandable segments: growing at the tail, unmapping on release, holes mapped again, and when the allocator chooses them (`auto`, the self-test, `false`).

use super::*;

#[cfg(unix)]
#[test]
fn expandable_segment_grows_at_its_tail_and_shrinks_on_empty_cache() {
    let cfg = AllocatorConfig::default().with_expandable_segments(true);
    let a = alloc(Some(64 * MIB), cfg);
    let x = a.allocate(5 * MIB).unwrap();
    let s = a.stats();
    // 5 MiB rounded up to the 2 MiB granularity, not a 20 MiB segment.
    assert_eq!(
        (s.reserved_bytes, s.segments, s.backend_allocs),
        (6 * MIB as u64, 1, 1)
    );
    // In the expandable segment any remainder is split off: x's block is exactly 5 MiB and the
    // 1 MiB left over is the free tail, which y's mapping extends by one 2 MiB granule.
    assert_eq!(a.stats().active_bytes, 5 * MIB as u64);
    assert_eq!(a.stats().largest_free_block, MIB as u64);
    let y = a.allocate(3 * MIB).unwrap();
    assert_eq!(y.addr, x.addr + 5 * MIB as u64);
    let s = a.stats();
    assert_eq!((s.reserved_bytes, s.backend_allocs), (8 * MIB as u64, 2));
    let snap = a.snapshot();
    assert_eq!(snap.segments.len(), 1);
    assert!(snap.segments[0].expandable);
    // Memory is usable.
    // SAFETY: the block holds 3 MiB of mapped host memory owned by this test.
    unsafe { std::ptr::write_bytes(y.addr as *mut u8, 0xab, 3 * MIB) };
    let x_addr = x.addr;
    a.free(x);
    check(&a);
    // The freed head serves what fits in it; a larger request maps pages at the end.
    let v = a.allocate(5 * MIB).unwrap();
    assert_eq!(v.addr, x_addr);
    a.free(v);
    let z = a.allocate(12 * MIB).unwrap();
    assert_eq!(z.addr, y.addr + 3 * MIB as u64);
    assert_eq!(a.stats().reserved_bytes, 20 * MIB as u64);
    a.free(z);
    check(&a);
    // A free tail grows by only the missing bytes.
    let t = a.allocate(16 * MIB).unwrap();
    assert_eq!(t.addr, y.addr + 3 * MIB as u64);
    assert_eq!(a.stats().reserved_bytes, 24 * MIB as u64);
    a.free(t);
    // A plain free unmaps nothing: the 16 MiB tail stays mapped (cached) until empty_cache.
    assert_eq!(a.stats().reserved_bytes, 24 * MIB as u64);
    assert_eq!(a.stats().backend_frees, 0);
    // empty_cache unmaps every whole free granule, as PyTorch: the 16 MiB tail and the first
    // two granules of the free 5 MiB head (its last 1 MiB shares a granule with y and stays).
    assert_eq!(a.empty_cache(), 20 * MIB as u64);
    assert_eq!(a.stats().reserved_bytes, 4 * MIB as u64);
    assert_eq!(a.backend().in_use(), 4 * MIB);
    check(&a);
    a.free(y);
    assert_eq!(a.empty_cache(), 4 * MIB as u64);
    let s = a.stats();
    assert_eq!((s.reserved_bytes, s.segments), (0, 0));
    assert_eq!(a.backend().in_use(), 0);
    check(&a);
    // Growing again after it was emptied.
    let w = a.allocate(40 * MIB).unwrap();
    assert_eq!(a.stats().reserved_bytes, 40 * MIB as u64);
    a.free(w);
}

#[cfg(unix)]
#[test]
fn expandable_segment_serves_the_large_request_that_fragmentation_refuses() {
    // Holes between live blocks cannot serve 8 MiB, but the segment can grow at its end: no
    // contiguous hole among segments is needed, only free pages on the device.
    let cfg = AllocatorConfig::default().with_expandable_segments(true);
    let a = alloc(Some(40 * MIB), cfg);
    let mut blocks: Vec<Option<Block>> =
        (0..8).map(|_| Some(a.allocate(4 * MIB).unwrap())).collect();
    for i in [1, 3, 5] {
        a.free(blocks[i].take().unwrap());
    }
    // 32 MiB mapped, 20 MiB live, 12 MiB in 4 MiB holes: 8 MiB more pages fit the device.
    let big = a.allocate(8 * MIB).unwrap();
    assert_eq!(a.stats().reserved_bytes, 40 * MIB as u64);
    assert_eq!(a.stats().num_ooms, 0);
    a.free(big);
    for b in blocks.into_iter().flatten() {
        a.free(b);
    }
    check(&a);
}

#[cfg(unix)]
#[test]
fn expandable_release_unmaps_every_whole_free_granule_and_holes_are_mapped_again() {
    assert_eq!(HOST_MAP_GRANULARITY, 2 * MIB);
    let a = alloc(
        Some(64 * MIB),
        AllocatorConfig::default().with_expandable_segments(true),
    );
    let x = a.allocate(6 * MIB).unwrap();
    let y = a.allocate(2 * MIB).unwrap();
    let z = a.allocate(6 * MIB).unwrap();
    let w = a.allocate(2 * MIB).unwrap();
    let base = x.addr;
    a.free(x);
    a.free(z);
    assert_eq!(a.stats().reserved_bytes, 16 * MIB as u64);
    // Not only the tail: both free 6 MiB blocks between live ones go back.
    assert_eq!(a.empty_cache(), 12 * MIB as u64);
    let s = a.stats();
    assert_eq!(s.reserved_bytes, 4 * MIB as u64);
    assert_eq!(s.backend_frees, 2);
    assert_eq!(a.backend().in_use(), 4 * MIB);
    // The snapshot shows the mapped runs: y's and w's granules.
    let runs: Vec<(u64, u64)> = a
        .snapshot()
        .segments
        .iter()
        .map(|g| (g.addr - base, g.size))
        .collect();
    assert_eq!(
        runs,
        vec![
            (6 * MIB as u64, 2 * MIB as u64),
            (14 * MIB as u64, 2 * MIB as u64)
        ]
    );
    check(&a);
    // A request that fits a hole maps only the granules it needs there, not at the end.
    let v = a.allocate(3 * MIB).unwrap();
    assert_eq!(v.addr, base);
    let s = a.stats();
    assert_eq!(s.reserved_bytes, 8 * MIB as u64);
    // Four mappings as x, y, z and w were allocated, one for v.
    assert_eq!(s.backend_allocs, 5);
    // The free MiB after v is cached and shares the segment: an inactive split block.
    assert_eq!(
        a.detailed_stats().large_pool.inactive_split_bytes.current,
        MIB as u64
    );
    check(&a);
    for b in [v, y, w] {
        a.free(b);
    }
    assert_eq!(a.empty_cache(), 8 * MIB as u64);
    let s = a.stats();
    assert_eq!((s.reserved_bytes, s.segments), (0, 0));
    assert_eq!(a.backend().in_use(), 0);
    check(&a);
}

/// Host memory without page mapping (`virtual_memory()` is `None`), like a GPU without
/// virtual memory management.
struct Plain(HostBackend);
// SAFETY: forwards to the host backend.
unsafe impl Backend for Plain {
    fn name(&self) -> String {
        "plain".into()
    }
    fn capacity(&self) -> Option<usize> {
        self.0.capacity()
    }
    fn host_addressable(&self) -> bool {
        true
    }
    fn alloc_segment(&self, bytes: usize) -> Result<u64, BackendError> {
        self.0.alloc_segment(bytes)
    }
    unsafe fn free_segment(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        // SAFETY: forwarded contract.
        unsafe { self.0.free_segment(addr, bytes) }
    }
}

#[test]
fn expandable_segments_need_a_backend_that_maps_pages() {
    let e = CachingAllocator::with_config(
        Plain(HostBackend::new()),
        AllocatorConfig::default().with_expandable_segments(true),
    )
    .unwrap_err();
    assert!(
        matches!(&e, SetupError::ExpandableUnsupported { .. })
            && e.to_string().contains("`expandable_segments:true`"),
        "{e}"
    );
    // The message says how to get a working allocator.
    let msg = e.to_string();
    assert!(
        msg.contains("`expandable_segments:false`") && msg.contains("`auto`"),
        "{msg}"
    );
}

#[test]
fn auto_uses_fixed_segments_on_a_backend_that_cannot_map_pages() {
    for a in [
        CachingAllocator::new(Plain(HostBackend::new())),
        CachingAllocator::with_config(Plain(HostBackend::new()), AllocatorConfig::default())
            .unwrap(),
    ] {
        assert!(!a.uses_expandable_segments());
        assert_eq!(a.segment_mode(), SegmentMode::FixedUnavailable);
        let reason = a.fixed_segments_reason().unwrap();
        assert!(reason.contains("plain cannot map pages"), "{reason}");
        // PyTorch's segment rules: a 5 MiB request gets a 20 MiB segment.
        let b = a.allocate(5 * MIB).unwrap();
        let s = a.stats();
        assert_eq!(
            (s.reserved_bytes, s.segments, s.backend_allocs),
            (20 * MIB as u64, 1, 1)
        );
        let snap = a.snapshot();
        assert!(!snap.expandable_segments && !snap.segments[0].expandable);
        a.free(b);
        a.check_invariants().unwrap();
    }
    // A fragmentation error on such a device does not suggest expandable segments.
    let a = CachingAllocator::new(Plain(HostBackend::with_capacity(40 * MIB)));
    let mut blocks: Vec<Option<Block>> = (0..10)
        .map(|_| Some(a.allocate(4 * MIB).unwrap()))
        .collect();
    for i in [1, 3, 6, 8] {
        a.free(blocks[i].take().unwrap());
    }
    let err = a.allocate(12 * MIB).unwrap_err();
    assert_eq!(
        (err.cause, err.segments),
        (OomCause::Fragmentation, SegmentMode::FixedUnavailable)
    );
    let msg = err.to_string();
    assert!(!msg.contains("expandable_segments:true"), "{msg}");
    assert!(
        msg.contains("cannot use expandable segments") && msg.contains("Workspace"),
        "{msg}"
    );
    for b in blocks.into_iter().flatten() {
        a.free(b);
    }
}

#[cfg(unix)]
#[test]
fn explicit_off_gives_fixed_segments() {
    let a = alloc(
        None,
        AllocatorConfig::default().with_expandable_segments(false),
    );
    assert!(!a.uses_expandable_segments());
    assert_eq!(a.segment_mode(), SegmentMode::FixedByConfig);
    let reason = a.fixed_segments_reason().unwrap();
    assert!(reason.contains("`expandable_segments:false`"), "{reason}");
    let b = a.allocate(5 * MIB).unwrap();
    assert_eq!(a.stats().reserved_bytes, 20 * MIB as u64);
    assert!(!a.snapshot().expandable_segments);
    a.free(b);
    // `Off` parsed from the environment's form is the same.
    let parsed = AllocatorConfig::parse("expandable_segments:false").unwrap();
    assert!(!alloc(None, parsed).uses_expandable_segments());
}

/// Host memory whose page mapping works but whose self-test reports `failure` (`None`: passes),
/// counting the self-tests run.
#[cfg(unix)]
struct SelfTested {
    host: HostBackend,
    failure: Option<&'static str>,
    runs: AtomicU64,
}

#[cfg(unix)]
impl SelfTested {
    fn new(failure: Option<&'static str>) -> Self {
        SelfTested {
            host: HostBackend::new(),
            failure,
            runs: AtomicU64::new(0),
        }
    }
}

// SAFETY: forwards to the host backend's page mapping.
#[cfg(unix)]
unsafe impl VirtualMemory for SelfTested {
    fn granularity(&self) -> usize {
        self.host.granularity()
    }
    fn reserve_range(&self, bytes: usize) -> Result<u64, BackendError> {
        self.host.reserve_range(bytes)
    }
    unsafe fn release_range(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        // SAFETY: forwarded contract.
        unsafe { self.host.release_range(addr, bytes) }
    }
    unsafe fn map(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        // SAFETY: forwarded contract.
        unsafe { self.host.map(addr, bytes) }
    }
    unsafe fn unmap(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        // SAFETY: forwarded contract.
        unsafe { self.host.unmap(addr, bytes) }
    }
    fn self_test(&self) -> Result<(), BackendError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        match self.failure {
            Some(f) => Err(BackendError::driver("self-test", f)),
            None => Ok(()),
        }
    }
}

// SAFETY: forwards to the host backend.
#[cfg(unix)]
unsafe impl Backend for SelfTested {
    fn name(&self) -> String {
        "gpu-like".into()
    }
    fn capacity(&self) -> Option<usize> {
        None
    }
    fn host_addressable(&self) -> bool {
        true
    }
    fn alloc_segment(&self, bytes: usize) -> Result<u64, BackendError> {
        self.host.alloc_segment(bytes)
    }
    unsafe fn free_segment(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        // SAFETY: forwarded contract.
        unsafe { self.host.free_segment(addr, bytes) }
    }
    fn virtual_memory(&self) -> Option<&dyn VirtualMemory> {
        Some(self)
    }
}

#[cfg(unix)]
#[test]
fn the_self_test_runs_once_at_creation_and_its_failure_means_fixed_segments_under_auto() {
    // Passes: expandable segments, tested once.
    let ok = CachingAllocator::new(SelfTested::new(None));
    assert!(ok.uses_expandable_segments());
    assert_eq!(ok.backend().runs.load(Ordering::SeqCst), 1);
    let b = ok.allocate(5 * MIB).unwrap();
    assert_eq!(ok.backend().runs.load(Ordering::SeqCst), 1);
    ok.free(b);
    // Off: not even tested.
    let off = CachingAllocator::with_config(SelfTested::new(None), fixed_config()).unwrap();
    assert_eq!(off.backend().runs.load(Ordering::SeqCst), 0);

    // Fails under Auto: fixed segments, and the reason is kept.
    const FAILURE: &str = "cuMemsetD32: CUDA_ERROR_NOT_SUPPORTED (simulated)";
    let auto = CachingAllocator::new(SelfTested::new(Some(FAILURE)));
    assert!(!auto.uses_expandable_segments());
    assert_eq!(auto.segment_mode(), SegmentMode::FixedUnavailable);
    let reason = auto.fixed_segments_reason().unwrap();
    assert!(
        reason.contains("self-test of gpu-like failed") && reason.contains(FAILURE),
        "{reason}"
    );
    let b = auto.allocate(5 * MIB).unwrap();
    assert_eq!(auto.stats().reserved_bytes, 20 * MIB as u64);
    auto.free(b);
    auto.check_invariants().unwrap();

    // Fails under On: a typed error naming the failure and the setting that avoids it.
    let e = CachingAllocator::with_config(
        SelfTested::new(Some(FAILURE)),
        AllocatorConfig::default().with_expandable_segments(true),
    )
    .unwrap_err();
    assert_eq!(
        e,
        SetupError::ExpandableSelfTestFailed {
            device: "gpu-like".into(),
            reason: format!("self-test failed with {FAILURE}"),
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains(FAILURE) && msg.contains("`expandable_segments:false`"),
        "{msg}"
    );
}
