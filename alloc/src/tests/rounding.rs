//! Rounding and pools: request sizes rounded (512 bytes, power-of-two divisions), the small and large pools and their segment sizes, sizes that overflow.

use super::*;

#[test]
fn rounds_to_512_bytes() {
    assert_eq!(round_size(0), 512);
    assert_eq!(round_size(1), 512);
    assert_eq!(round_size(512), 512);
    assert_eq!(round_size(513), 1024);
    let a = fixed();
    let b = a.allocate(1000).unwrap();
    assert_eq!((b.size, b.requested), (1024, 1000));
    let s = a.stats();
    assert_eq!(s.allocated_bytes, 1024);
    assert_eq!(s.requested_bytes, 1000);
    a.free(b);
    check(&a);
}

#[test]
fn rounds_to_power_of_two_divisions() {
    let a = alloc(
        None,
        AllocatorConfig::default().with_roundup_power2_divisions(4),
    );
    // Below 512 * 4 bytes: plain rounding.
    assert_eq!(a.rounded_size(1500), Some(1536));
    // 1.3 MiB lies between 1 and 2 MiB: steps of 256 KiB, so 1.5 MiB.
    assert_eq!(a.rounded_size(1_363_149), Some(1536 * KIB));
    assert_eq!(a.rounded_size(4 * MIB), Some(4 * MIB));
    assert_eq!(a.rounded_size(4 * MIB + 1), Some(5 * MIB));
    let b = a.allocate(1_363_149).unwrap();
    assert_eq!(a.stats().allocated_bytes, 1536 * KIB as u64);
    a.free(b);
}

#[test]
fn roundup_power2_divisions_1_is_off_and_intervals_are_accepted() {
    let plain = alloc(None, AllocatorConfig::default());
    let one = alloc(
        None,
        AllocatorConfig::parse("roundup_power2_divisions:1").unwrap(),
    );
    for bytes in [1000, 3 * MIB + 1, 5 * MIB + 3, 300 * MIB + 7] {
        assert_eq!(
            one.rounded_size(bytes),
            plain.rounded_size(bytes),
            "{bytes}"
        );
    }
    // Up to 256 MiB: off (1); up to 512 MiB: 2 steps; above: 8 steps.
    let cfg = AllocatorConfig::parse("roundup_power2_divisions:[256:1,512:2,>:8],round_up_x:1");
    assert!(
        matches!(cfg, Err(ConfigError::UnknownKey { .. })),
        "the list is one value"
    );
    let cfg = AllocatorConfig::parse("roundup_power2_divisions:[256:1,512:2,>:8]").unwrap();
    assert_eq!(cfg.roundup_power2_intervals.len(), 3);
    let a = alloc(None, cfg);
    assert_eq!(a.rounded_size(200 * MIB + 1), Some(200 * MIB + 512));
    // 300 MiB + 1 lies in (256, 512] MiB: two steps of 128 MiB above 256 MiB.
    assert_eq!(a.rounded_size(300 * MIB + 1), Some(384 * MIB));
    // 600 MiB lies above 512 MiB: eight steps of 64 MiB above 512 MiB.
    assert_eq!(a.rounded_size(600 * MIB), Some(640 * MIB));
    for bad in [
        "roundup_power2_divisions:[256:3]",
        "roundup_power2_divisions:[300:2]",
        "roundup_power2_divisions:[512:2,256:1]",
        "roundup_power2_divisions:[>:2,256:1]",
        "roundup_power2_divisions:[256:1",
    ] {
        let e = AllocatorConfig::parse(bad).unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadValue { key, .. } if key == "roundup_power2_divisions"),
            "{bad}: {e:?}"
        );
    }
}

#[test]
fn small_and_large_pools_use_their_segment_sizes() {
    let a = fixed();
    let small = a.allocate(MIB).unwrap();
    let snap = a.snapshot();
    assert_eq!(snap.segments.len(), 1);
    assert_eq!(snap.segments[0].pool, PoolKind::Small);
    assert_eq!(snap.segments[0].size, SMALL_SEGMENT as u64);

    // The exact-size 12 MiB segment first, so the 1 MiB request cannot be carved from it.
    let big = a.allocate(11 * MIB + 1).unwrap();
    let large = a.allocate(MIB + 1).unwrap();
    let snap = a.snapshot();
    let mut sizes: Vec<(PoolKind, u64)> = snap.segments.iter().map(|s| (s.pool, s.size)).collect();
    sizes.sort_by_key(|x| x.1);
    assert_eq!(
        sizes,
        vec![
            (PoolKind::Small, 2 * MIB as u64),
            (PoolKind::Large, 12 * MIB as u64),
            (PoolKind::Large, 20 * MIB as u64)
        ]
    );
    let s = a.stats();
    assert_eq!(s.reserved_bytes, 34 * MIB as u64);
    // Block sizes, as PyTorch counts them: the 11 MiB + 512 request holds its whole 12 MiB
    // segment (a remainder of 1 MiB or less is not split off).
    assert_eq!(s.allocated_bytes, (MIB + (MIB + 512) + 12 * MIB) as u64);
    assert_eq!(s.requested_bytes, (MIB + (MIB + 1) + (11 * MIB + 1)) as u64);
    assert_eq!(s.backend_allocs, 3);
    // A second small request is carved from the same small segment.
    let small2 = a.allocate(4 * KIB).unwrap();
    assert_eq!(a.stats().backend_allocs, 3);
    assert_eq!(small2.addr, small.addr + MIB as u64);
    for b in [small, small2, large, big] {
        a.free(b);
    }
    check(&a);
}
