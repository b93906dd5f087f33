//! Garbage collection (`garbage_collection_threshold`): which cached segments go, and when.

use super::*;

#[test]
fn garbage_collection_frees_blocks_older_than_the_average_once_the_threshold_is_crossed() {
    let cfg = fixed_config()
        .with_memory_limit(100 * MIB as u64)
        .with_garbage_collection_threshold(0.5);
    let a = alloc(None, cfg);
    let hot = a.allocate(30 * MIB).unwrap();
    let hot_addr = hot.addr;
    let old: Vec<Block> = (0..2).map(|_| a.allocate(12 * MIB).unwrap()).collect();
    let old_addrs: Vec<u64> = old.iter().map(|b| b.addr).collect();
    let young = a.allocate(12 * MIB).unwrap();
    // 66 MiB reserved, above the 50 MiB threshold, but nothing is free: nothing collected.
    assert_eq!(a.stats().reserved_bytes, 66 * MIB as u64);
    assert_eq!(a.stats().backend_frees, 0);
    a.free(hot);
    for b in old {
        a.free(b);
    }
    // Four large lookups served by the hot segment age the two old ones.
    for _ in 0..4 {
        let b = a.allocate(20 * MIB).unwrap();
        assert_eq!(b.addr, hot_addr);
        a.free(b);
    }
    a.free(young);
    // A 40 MiB request misses the cache. Ages in large-pool lookups: old 5 and 5, hot 1,
    // young 1; average 3: the two old segments go (24 MiB, the excess was 16 MiB), the hot
    // and the young one stay although the young one was freed last.
    let big = a.allocate(40 * MIB).unwrap();
    let s = a.stats();
    assert_eq!(s.backend_frees, 2);
    assert_eq!(s.reserved_bytes, (30 + 12 + 40) * MIB as u64);
    let segments: Vec<u64> = a.snapshot().segments.iter().map(|g| g.addr).collect();
    assert!(segments.contains(&hot_addr));
    assert!(old_addrs.iter().all(|o| !segments.contains(o)));
    a.free(big);
    check(&a);

    // Below the threshold nothing is collected, however old.
    let a = alloc(
        None,
        fixed_config()
            .with_memory_limit(100 * MIB as u64)
            .with_garbage_collection_threshold(0.5),
    );
    let b = a.allocate(12 * MIB).unwrap();
    a.free(b);
    let c = a.allocate(30 * MIB).unwrap();
    assert_eq!(a.stats().backend_frees, 0);
    a.free(c);
}

#[test]
fn garbage_collection_threshold_uses_the_capacity_without_a_limit() {
    let cfg = fixed_config().with_garbage_collection_threshold(0.5);
    let a = alloc(Some(64 * MIB), cfg);
    let x = a.allocate(12 * MIB).unwrap();
    let w = a.allocate(24 * MIB).unwrap();
    a.free(x);
    // 36 MiB reserved is above half the 64 MiB capacity: the next miss collects the idle
    // 12 MiB segment before reserving another.
    let y = a.allocate(14 * MIB).unwrap();
    let s = a.stats();
    assert_eq!(
        (s.reserved_bytes, s.backend_frees, s.alloc_retries),
        ((24 + 14) * MIB as u64, 1, 0)
    );
    a.free(y);
    a.free(w);
}

#[cfg(unix)]
#[test]
fn garbage_collection_leaves_the_expandable_segment_to_its_own_path() {
    // The expandable segment is mapped pages, not a backend segment: the garbage collector
    // must never hand it to `free_segment` (on the host that was `dealloc` of an mmap range).
    let cfg = AllocatorConfig::default()
        .with_expandable_segments(true)
        .with_garbage_collection_threshold(0.5);
    let a = alloc(Some(64 * MIB), cfg);
    let x = a.allocate(32 * MIB).unwrap();
    a.free(x);
    assert_eq!(a.stats().reserved_bytes, 32 * MIB as u64);
    // A small-pool segment would take reserved to 34 MiB > 32 MiB: the collector runs.
    let y = a.allocate(1000).unwrap();
    let s = a.stats();
    assert_eq!((s.reserved_bytes, s.segments), (34 * MIB as u64, 2));
    check(&a);
    // The expandable segment still works: its pages serve a large request again.
    let z = a.allocate(30 * MIB).unwrap();
    assert_eq!(a.stats().reserved_bytes, 34 * MIB as u64);
    a.free(z);
    a.free(y);
    assert_eq!(a.empty_cache(), 34 * MIB as u64);
    check(&a);
}
