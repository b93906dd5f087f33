//! Statistics: peaks and resets, PyTorch's per-pool statistics and its summary table.

use super::*;

#[test]
fn statistics_track_peaks_and_reset() {
    let a = fixed();
    let x = a.allocate(3 * MIB).unwrap();
    let y = a.allocate(5 * MIB).unwrap();
    a.free(x);
    let s = a.stats();
    assert_eq!(s.peak_allocated_bytes, 8 * MIB as u64);
    assert_eq!(s.allocated_bytes, 5 * MIB as u64);
    assert_eq!((s.active_blocks, s.peak_active_blocks), (1, 2));
    assert_eq!(s.cached_free_bytes, 15 * MIB as u64);
    assert_eq!(s.largest_free_block, 12 * MIB as u64);
    assert!((s.fragmentation - 0.75).abs() < 1e-12);
    assert_eq!((s.num_allocs, s.num_frees, s.segments), (2, 1, 1));
    a.reset_peak_stats();
    let s = a.stats();
    assert_eq!(s.peak_allocated_bytes, 5 * MIB as u64);
    assert_eq!(s.peak_active_blocks, 1);
    assert_eq!(s.peak_reserved_bytes, 20 * MIB as u64);
    a.free(y);
    a.empty_cache();
    a.reset_peak_stats();
    assert_eq!(a.stats().peak_reserved_bytes, 0);
    assert_eq!(a.stats().fragmentation, 0.0);
}

#[test]
fn detailed_statistics_follow_pytorch_per_pool_and_in_total() {
    let a = alloc(None, fixed_config().with_max_split_size(32 * MIB));
    let s1 = a.allocate(1000).unwrap();
    let l1 = a.allocate(5 * MIB).unwrap();
    let l2 = a.allocate(40 * MIB).unwrap();
    let d = a.detailed_stats();
    // Small: one 2 MiB segment, a 1 KiB block, the rest an inactive split block.
    assert_eq!(d.small_pool.reserved_bytes.current, 2 * MIB as u64);
    assert_eq!(d.small_pool.allocated_bytes.current, 1024);
    assert_eq!(d.small_pool.requested_bytes.current, 1000);
    assert_eq!(
        d.small_pool.inactive_split_bytes.current,
        2 * MIB as u64 - 1024
    );
    assert_eq!(d.small_pool.inactive_split.current, 1);
    // Large: a 20 MiB segment split for 5 MiB, and a 40 MiB oversize segment taken whole.
    assert_eq!(d.large_pool.reserved_bytes.current, 60 * MIB as u64);
    assert_eq!(d.large_pool.allocated_bytes.current, 45 * MIB as u64);
    assert_eq!(d.large_pool.inactive_split_bytes.current, 15 * MIB as u64);
    assert_eq!(d.large_pool.segment.current, 2);
    assert_eq!(d.oversize_allocations.current, 1);
    assert_eq!(d.oversize_segments.current, 1);
    assert_eq!(d.all.allocation.current, 3);
    assert_eq!(d.all.reserved_bytes.current, 62 * MIB as u64);
    a.free(l2);
    a.free(l1);
    let d = a.detailed_stats();
    assert_eq!(d.large_pool.allocated_bytes.current, 0);
    assert_eq!(d.large_pool.allocated_bytes.peak, 45 * MIB as u64);
    assert_eq!(d.large_pool.allocated_bytes.allocated, 45 * MIB as u64);
    assert_eq!(d.large_pool.allocated_bytes.freed, 45 * MIB as u64);
    // The 5 MiB block merged back: its segment is whole again, not split.
    assert_eq!(d.large_pool.inactive_split_bytes.current, 0);
    assert_eq!(d.oversize_allocations.current, 0);
    let map = d.to_map();
    assert_eq!(map["allocated_bytes.all.peak"], 45 * MIB as u64 + 1024);
    assert_eq!(map["reserved_bytes.small_pool.current"], 2 * MIB as u64);
    assert_eq!(
        map["inactive_split_bytes.small_pool.current"],
        2 * MIB as u64 - 1024
    );
    assert_eq!(map["allocation.large_pool.allocated"], 2);
    assert_eq!(map["num_alloc_retries"], 0);
    assert_eq!(map["num_ooms"], 0);
    assert_eq!(map["oversize_segments.peak"], 1);
    // Accumulated counts go back to 0; current values and peaks stay.
    a.reset_accumulated_stats();
    let d = a.detailed_stats();
    assert_eq!(d.all.allocated_bytes.allocated, 0);
    assert_eq!(d.all.allocated_bytes.freed, 0);
    assert_eq!(d.all.allocated_bytes.current, 1024);
    assert_eq!(d.all.allocated_bytes.peak, 45 * MIB as u64 + 1024);
    a.reset_peak_stats();
    assert_eq!(a.detailed_stats().all.allocated_bytes.peak, 1024);
    a.free(s1);
    check(&a);
}

#[test]
fn memory_summary_is_pytorchs_table() {
    let a = alloc(None, fixed_config());
    let s = a.allocate(1000).unwrap();
    let l = a.allocate(5 * MIB).unwrap();
    a.free(l);
    let text = a.memory_summary();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.iter().all(|l| l.chars().count() == 77), "{text}");
    assert!(
        lines[1].contains("vramguard memory summary, device host"),
        "{text}"
    );
    assert!(lines[3].contains("OOMs: 0") && lines[3].contains("allocation retries: 0"));
    assert_eq!(
        lines[5],
        "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |"
    );
    // Each column takes its unit from the "all" row's value (PyTorch's `_format_size`: the
    // next unit once that value reaches 768 of the current one), so the pool rows line up.
    assert_eq!(
        lines[7],
        "| Allocated memory      |   1024 B   |   5121 KiB |   5121 KiB |   5120 KiB |"
    );
    assert_eq!(
        lines[8],
        "|       from large pool |      0 B   |   5120 KiB |   5120 KiB |   5120 KiB |"
    );
    assert_eq!(
        lines[9],
        "|       from small pool |   1024 B   |      1 KiB |      1 KiB |      0 KiB |"
    );
    assert!(
        text.contains(
            "| Reserved memory       |  22528 KiB |  22528 KiB |  22528 KiB |      0 B   |"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "| Allocations           |       1    |       2    |       2    |       1    |"
        ),
        "{text}"
    );
    assert_eq!(memory_summary_keys(&a), 4 * 9 * 3 + 4 * 2 + 4);
    a.free(s);
}

fn memory_summary_keys(a: &CachingAllocator<HostBackend>) -> usize {
    a.detailed_stats().to_map().len()
}
