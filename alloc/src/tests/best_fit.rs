//! Best fit, splitting and coalescing: which free block serves a request, when it is split, how freed blocks merge (deferred merges included), and the max split size.

use super::*;

#[test]
fn best_fit_picks_the_smallest_block_that_fits_then_the_lowest_address() {
    let a = fixed();
    // One 20 MiB large segment cut into: 3 | x | 2 | x | 4 | x | 2 | rest
    let sizes = [3, 1, 2, 1, 4, 1, 2, 1];
    let blocks: Vec<Block> = sizes
        .iter()
        .map(|&m| a.allocate(m * MIB + 512).unwrap())
        .collect();
    assert_eq!(a.stats().backend_allocs, 1);
    let addrs: Vec<u64> = blocks.iter().map(|b| b.addr).collect();
    let mut keep = Vec::new();
    for (i, b) in blocks.into_iter().enumerate() {
        if i % 2 == 0 {
            a.free(b);
        } else {
            keep.push(b);
        }
    }
    // Free: 3 MiB at [0], 2 MiB at [2], 4 MiB at [4], 2 MiB at [6], and the segment's tail.
    let b = a.allocate(2 * MIB).unwrap();
    assert_eq!(b.addr, addrs[2], "the lower of the two 2 MiB holes");
    let c = a.allocate(2 * MIB).unwrap();
    assert_eq!(c.addr, addrs[6]);
    let d = a.allocate(3 * MIB).unwrap();
    assert_eq!(d.addr, addrs[0]);
    assert_eq!(a.stats().backend_allocs, 1);
    check(&a);
    for x in [b, c, d].into_iter().chain(keep) {
        a.free(x);
    }
    check(&a);
    assert_eq!(a.snapshot().segments[0].blocks.len(), 1);
}

#[test]
fn splits_only_when_the_remainder_is_worth_keeping() {
    let a = fixed();
    // Small pool: any remainder of at least 512 bytes stays cached.
    let s = a.allocate(1000).unwrap();
    let snap = a.snapshot();
    let blocks = &snap.segments[0].blocks;
    assert_eq!(blocks.len(), 2);
    assert_eq!((blocks[0].size, blocks[0].allocated), (1024, true));
    assert_eq!(
        (blocks[1].size, blocks[1].allocated),
        (2 * MIB as u64 - 1024, false)
    );
    a.free(s);

    // Large pool: a remainder of 1 MiB or less is not split off.
    let x = a.allocate(19 * MIB + 512 * KIB).unwrap();
    let st = a.stats();
    assert_eq!(st.requested_bytes, (19 * MIB + 512 * KIB) as u64);
    assert_eq!(
        st.allocated_bytes,
        20 * MIB as u64,
        "the whole 20 MiB block"
    );
    assert_eq!(st.active_bytes, 20 * MIB as u64);
    a.free(x);
    // A remainder over 1 MiB is split off and reused.
    let y = a.allocate(18 * MIB).unwrap();
    let st = a.stats();
    assert_eq!(st.active_bytes, 18 * MIB as u64);
    assert_eq!(st.cached_free_bytes, 2 * MIB as u64 + 2 * MIB as u64);
    a.free(y);
    check(&a);
}

#[test]
fn freeing_coalesces_with_free_neighbours_in_any_order() {
    for order in [
        [0, 1, 2],
        [0, 2, 1],
        [2, 1, 0],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
    ] {
        let a = fixed();
        let mut blocks: Vec<Option<Block>> =
            (0..3).map(|_| Some(a.allocate(4 * MIB).unwrap())).collect();
        for i in order {
            a.free(blocks[i].take().unwrap());
            check(&a);
        }
        let snap = a.snapshot();
        assert_eq!(snap.segments.len(), 1);
        assert_eq!(snap.segments[0].blocks.len(), 1, "order {order:?}");
        assert_eq!(a.stats().largest_free_block, 20 * MIB as u64);
        // The coalesced segment serves a request as large as itself without a backend call.
        let whole = a.allocate(20 * MIB).unwrap();
        assert_eq!(a.stats().backend_allocs, 1);
        a.free(whole);
    }
}

#[test]
fn max_split_size_keeps_large_blocks_whole() {
    let a = alloc(None, fixed_config().with_max_split_size(30 * MIB));
    a.reserve(60 * MIB).unwrap();
    // A request below the max split size does not take the oversize block.
    let small = a.allocate(5 * MIB).unwrap();
    let s = a.stats();
    assert_eq!(s.backend_allocs, 2);
    assert_eq!(s.reserved_bytes, 80 * MIB as u64);
    // A request above it, within 20 MiB of the block, takes the block whole (not split).
    let big = a.allocate(45 * MIB).unwrap();
    let s = a.stats();
    assert_eq!(s.backend_allocs, 2);
    assert_eq!(s.requested_bytes, 50 * MIB as u64);
    assert_eq!(
        s.allocated_bytes,
        65 * MIB as u64,
        "the 60 MiB block counts whole"
    );
    assert_eq!(s.active_bytes, 65 * MIB as u64);
    a.free(big);
    // A request more than 20 MiB smaller than the oversize block does not take it.
    let mid = a.allocate(32 * MIB).unwrap();
    let s = a.stats();
    assert_eq!(s.backend_allocs, 3);
    assert_eq!(s.active_bytes, 37 * MIB as u64);
    for b in [small, mid] {
        a.free(b);
    }
    check(&a);

    // Below the max split size, segments stay splittable: a 20.5 MiB request would get a
    // 22 MiB segment, at least the 21 MiB max split size, so it gets exactly its size.
    let a = alloc(None, fixed_config().with_max_split_size(21 * MIB));
    let b = a.allocate(20 * MIB + 512 * KIB).unwrap();
    assert_eq!(a.stats().reserved_bytes, (20 * MIB + 512 * KIB) as u64);
    a.free(b);
}

#[test]
fn max_split_size_must_exceed_20_mib_as_in_pytorch() {
    for text in [
        "max_split_size_mb:1",
        "max_split_size_mb:19",
        "max_split_size_mb:20",
    ] {
        let e = AllocatorConfig::parse(text).unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadValue { key, .. } if key == "max_split_size_mb"),
            "{text}: {e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("greater than 20") && msg.contains("20 MiB"),
            "{msg}"
        );
    }
    let ok = AllocatorConfig::parse("max_split_size_mb:21").unwrap();
    assert_eq!(ok.max_split_size, Some(21 * MIB));
    // The builder follows the same rule, checked when the allocator is created.
    let e = CachingAllocator::with_config(
        HostBackend::new(),
        AllocatorConfig::default().with_max_split_size(20 * MIB),
    )
    .unwrap_err();
    assert!(
        matches!(e, SetupError::Config(ConfigError::BadValue { .. })),
        "{e:?}"
    );
}

#[cfg(unix)]
#[test]
fn expandable_segment_blocks_are_exempt_from_max_split_size() {
    let cfg = AllocatorConfig::default()
        .with_expandable_segments(true)
        .with_max_split_size(22 * MIB);
    let a = alloc(Some(64 * MIB), cfg);
    // 21 MiB maps a 22 MiB tail, at the max split size: still served, and split (x's block is
    // 21 MiB, the 1 MiB remainder stays the free tail).
    let x = a.allocate(21 * MIB).unwrap();
    // The 1 MiB free tail grows by 40 MiB: y takes 40 MiB of it, 1 MiB stays free.
    let y = a.allocate(40 * MIB).unwrap();
    assert_eq!(a.stats().reserved_bytes, 62 * MIB as u64);
    a.free(y);
    // The free 41 MiB tail is larger than the max split size, yet serves a small request.
    let z = a.allocate(2 * MIB).unwrap();
    assert_eq!(a.stats().active_bytes, 21 * MIB as u64 + 2 * MIB as u64);
    assert_eq!(a.stats().num_ooms, 0);
    a.free(x);
    a.free(z);
    check(&a);
}

/// A snapshot's segments with addresses as offsets into their segment (two host backends
/// place segments at different addresses), in a canonical order, origins left out (the two
/// allocators are called from different columns).
type CanonicalSegment = (bool, bool, u64, Vec<(u64, u64, bool, u64, u64)>);
fn canonical(snapshot: &MemorySnapshot) -> Vec<CanonicalSegment> {
    let mut segments: Vec<_> = snapshot
        .segments
        .iter()
        .map(|s| {
            let blocks = s
                .blocks
                .iter()
                .map(|b| (b.addr - s.addr, b.size, b.allocated, b.requested, b.id))
                .collect();
            (s.pool == PoolKind::Small, s.expandable, s.size, blocks)
        })
        .collect();
    segments.sort();
    segments
}

/// Block `addr`'s offset into its segment and that segment's size.
fn placed(snapshot: &MemorySnapshot, addr: u64) -> (u64, u64) {
    let s = snapshot
        .segments
        .iter()
        .find(|s| (s.addr..s.addr + s.size).contains(&addr))
        .expect("a live block lies in a segment");
    (addr - s.addr, s.size)
}

/// The allocator with deferred merges against the same allocator merging at every free (as
/// before merges were deferred), on one random sequence of allocations and frees with the pair
/// loop's pattern among them: after every call, the same blocks at the same places, the same
/// snapshot, the same statistics (peaks and accumulated counts included), the same
/// out-of-memory errors; and the shortcut was taken.
#[test]
fn deferred_merges_leave_what_eager_merges_leave() {
    for config in [
        AllocatorConfig::default(),
        fixed_config(),
        fixed_config().with_max_split_size(24 * MIB),
        AllocatorConfig::default().with_garbage_collection_threshold(0.5),
        fixed_config()
            .with_memory_limit(40 * MIB as u64)
            .with_garbage_collection_threshold(0.5),
    ] {
        let (lazy, eager) = (
            alloc(Some(96 * MIB), config.clone()),
            alloc(Some(96 * MIB), config.clone()),
        );
        eager.merge_eagerly();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut held_lazy, mut held_eager) = (Vec::new(), Vec::new());
        for step in 0..6000 {
            let roll = next() % 100;
            let size = match next() % 4 {
                0 => 1 + (next() % (64 * KIB as u64)) as usize,
                1 => 1 + (next() % MIB as u64) as usize,
                2 => MIB + (next() % (7 * MIB as u64)) as usize,
                _ => 512 * ((next() % 8) as usize + 1),
            };
            if roll < 45 || held_lazy.is_empty() {
                // Half of the allocations are freed at once: the pair loop's pattern.
                match (lazy.allocate(size), eager.allocate(size)) {
                    (Ok(l), Ok(e)) => {
                        assert_eq!(
                            (placed(&lazy.snapshot(), l.addr), l.size, l.id),
                            (placed(&eager.snapshot(), e.addr), e.size, e.id),
                            "step {step}"
                        );
                        if roll % 2 == 0 {
                            lazy.free(l);
                            eager.free(e);
                        } else {
                            held_lazy.push(l);
                            held_eager.push(e);
                        }
                    }
                    (Err(l), Err(e)) => assert_eq!(
                        (l.cause, l.reserved, l.cached_free, l.largest_free_block),
                        (e.cause, e.reserved, e.cached_free, e.largest_free_block),
                        "step {step}"
                    ),
                    (l, e) => panic!("step {step}: {:?} against {:?}", l.is_ok(), e.is_ok()),
                }
            } else if roll < 98 {
                let at = (next() % held_lazy.len() as u64) as usize;
                lazy.free(held_lazy.swap_remove(at));
                eager.free(held_eager.swap_remove(at));
            } else {
                assert_eq!(lazy.empty_cache(), eager.empty_cache(), "step {step}");
            }
            assert_eq!(lazy.detailed_stats(), eager.detailed_stats(), "step {step}");
            assert_eq!(lazy.stats(), eager.stats(), "step {step}");
            assert_eq!(
                canonical(&lazy.snapshot()),
                canonical(&eager.snapshot()),
                "step {step}"
            );
            lazy.check_invariants().unwrap();
            eager.check_invariants().unwrap();
        }
        let reuses = lazy.deferred_reuses();
        assert_eq!(eager.deferred_reuses(), 0);
        if config.max_split_size.is_none() {
            assert!(reuses > 100, "the shortcut was taken {reuses} times");
        } else {
            assert_eq!(reuses, 0, "no shortcut under a max split size");
        }
    }
}
