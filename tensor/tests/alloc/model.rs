//! Property test: random sequences of alloc / free / empty_cache / reserve on a bounded host
//! device, checked against a simple reference model after every step.
//!
//! Checked: no two live blocks overlap, every live block lies inside one segment, the blocks
//! tile their segments, the statistics equal the model's (allocated, requested, live blocks,
//! their peaks, allocs, frees, OOMs), reserved stays within the capacity, and after freeing
//! everything and `empty_cache()` reserved is 0 and every segment went back to the backend. The
//! hot path's compact forms are on throughout (they have no switch): free sets kept as sorted
//! vectors while small, origins interned per call site (each live block's origin checked in every snapshot),
//! statistics kept per pool with the total added up when read, allocations that hold no
//! reference to their device (the allocator keeps one while any lives), and deferred merges (a
//! freed block's merge with its free neighbour waits for the pool's next request, which takes
//! the merged block in place; the statistics, snapshots and the invariant check read the
//! deferred state as it is, without performing the merge, so the next step still finds it). Configurations:
//! defaults (expandable segments on the host backend), fixed segments (alone, with a max split
//! size, with a limit + GC threshold), explicit expandable segments (alone, with a limit and a
//! max split size, and with a GC threshold).

use crate::refusal;

use proptest::prelude::*;
use std::collections::HashMap;
use vramguard_alloc::{round_size, AllocatorConfig, HostBackend, OomCause, OutOfMemory, PoolKind};
use vramguard_memory::device::Allocation;
use vramguard_memory::{memory, Device};

const MIB: usize = 1 << 20;
const CAPACITY: usize = 96 * MIB;

#[derive(Debug, Clone)]
enum Op {
    Alloc(usize),
    Free(usize),
    EmptyCache,
    Reserve(usize),
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 1usize..=64 * 1024,
        3 => 64 * 1024..=MIB,
        3 => MIB + 1..=8 * MIB,
        1 => 8 * MIB..=40 * MIB,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => size().prop_map(Op::Alloc),
        8 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::EmptyCache),
        1 => (MIB..=24 * MIB).prop_map(Op::Reserve),
    ]
}

fn config() -> impl Strategy<Value = AllocatorConfig> {
    let fixed = AllocatorConfig::default().with_expandable_segments(false);
    prop_oneof![
        Just(AllocatorConfig::default()),
        Just(fixed.clone()),
        Just(fixed.clone().with_max_split_size(24 * MIB)),
        Just(
            fixed
                .with_memory_limit(64 * MIB as u64)
                .with_garbage_collection_threshold(0.6)
        ),
        Just(AllocatorConfig::default().with_expandable_segments(true)),
        Just(
            AllocatorConfig::default()
                .with_expandable_segments(true)
                .with_memory_limit(48 * MIB as u64)
                .with_max_split_size(24 * MIB)
        ),
        Just(
            AllocatorConfig::default()
                .with_expandable_segments(true)
                .with_garbage_collection_threshold(0.5)
        ),
    ]
}

#[derive(Default)]
struct Model {
    live: HashMap<u64, (usize, usize)>,
    allocs: u64,
    frees: u64,
    ooms: u64,
    /// The highest allocated bytes and live blocks so far.
    peak_allocated: u64,
    peak_live: u64,
}

impl Model {
    fn allocated(&self) -> u64 {
        self.live.values().map(|&(r, _)| r as u64).sum()
    }
    fn requested(&self) -> u64 {
        self.live.values().map(|&(_, q)| q as u64).sum()
    }
}

/// The size of the block at `addr` in the allocator's snapshot.
fn block_size(device: &Device, addr: u64) -> usize {
    memory::snapshot(device)
        .segments
        .iter()
        .flat_map(|g| g.blocks.iter())
        .find(|b| b.addr == addr && b.allocated)
        .map_or(0, |b| b.size as usize)
}

/// `Ok` when a request of `n` bytes really cannot be served by this allocator now (after its
/// out-of-memory path ran): no free block of the request's pool may take it (PyTorch's max
/// split rule included), and the room left under the capacity and the limit is smaller than the
/// least the allocator must reserve for it (the request's block size in a fixed segment, or the
/// part the free tail of the expandable segment lacks, rounded to 2 MiB pages).
fn really_could_not_fit(device: &Device, n: usize, e: &OutOfMemory) -> Result<(), String> {
    let allocator = device.allocator();
    let rounded = round_size(n) as u64;
    let pool = refusal::pool_of(rounded);
    let max_split = allocator.config().max_split_size.map(|m| m as u64);
    let snap = memory::snapshot(device);
    let tail_free = refusal::no_free_block_fits(&snap, pool, rounded, max_split)?;
    let bound = allocator
        .memory_limit()
        .unwrap_or(CAPACITY as u64)
        .min(CAPACITY as u64);
    let room = bound.saturating_sub(memory::stats(device).reserved_bytes);
    let least = if pool == PoolKind::Large && allocator.uses_expandable_segments() {
        (rounded - tail_free.min(rounded))
            .next_multiple_of(2 * MIB as u64)
            .min(rounded)
    } else {
        rounded
    };
    if e.cause == OomCause::AddressRangeUsedUp {
        return refusal::range_really_used_up(
            &snap,
            allocator.expandable_range(),
            least,
            rounded,
            room,
        );
    }
    if room >= least {
        return Err(format!(
            "{room} bytes left under the bound, {least} needed ({:?}; the device said {} free; \
             segments {:?})",
            e.cause,
            e.device_free,
            snap.segments
                .iter()
                .map(|g| (g.addr, g.size, g.expandable))
                .collect::<Vec<_>>()
        ));
    }
    Ok(())
}

fn check(device: &Device, model: &Model, live: &[Allocation]) {
    device.allocator().check_invariants().unwrap();
    let s = memory::stats(device);
    assert_eq!(s.allocated_bytes, model.allocated());
    assert_eq!(s.requested_bytes, model.requested());
    assert_eq!(s.active_blocks, model.live.len() as u64);
    assert_eq!(
        (s.peak_allocated_bytes, s.peak_active_blocks),
        (model.peak_allocated, model.peak_live)
    );
    assert_eq!(
        (s.num_allocs, s.num_frees, s.num_ooms),
        (model.allocs, model.frees, model.ooms)
    );
    assert!(s.reserved_bytes <= CAPACITY as u64);
    assert!(s.active_bytes >= s.allocated_bytes);
    assert_eq!(s.cached_free_bytes, s.reserved_bytes - s.active_bytes);
    if !device.allocator().uses_expandable_segments() {
        // With expandable segments, page maps and unmaps count as backend calls too.
        assert_eq!(s.segments, s.backend_allocs - s.backend_frees);
    }

    let snap = memory::snapshot(device);
    assert_eq!(
        snap.segments.iter().map(|g| g.size).sum::<u64>(),
        s.reserved_bytes
    );
    let mut spans: Vec<(u64, u64)> = live.iter().map(|a| (a.addr(), a.size() as u64)).collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "live blocks overlap: {w:?}");
    }
    for a in live {
        let (addr, size) = (a.addr(), a.size() as u64);
        let seg = snap
            .segments
            .iter()
            .find(|g| g.addr <= addr && addr + size <= g.addr + g.size)
            .unwrap_or_else(|| panic!("block {addr:#x} lies in no segment"));
        assert!(seg
            .blocks
            .iter()
            .any(|b| b.addr == addr && b.allocated && b.size >= size));
    }
    // Origins are kept interned (one id per call site) and rebuilt for the snapshot: every live
    // block reads back as this test's `device.allocate` call, every free block as none.
    for b in snap.segments.iter().flat_map(|g| &g.blocks) {
        match &b.origin {
            Some(o) => assert!(
                b.allocated && o.file.ends_with("alloc/model.rs") && o.op == "allocate",
                "block {:#x}: origin {o}",
                b.addr
            ),
            None => assert!(!b.allocated, "live block {:#x} without origin", b.addr),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn allocator_matches_the_reference_model(
        cfg in config(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let device = Device::host_pool(HostBackend::with_capacity(CAPACITY), cfg).unwrap();
        let mut model = Model::default();
        let mut live: Vec<Allocation> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc(n) => match device.allocate(n) {
                    Ok(a) => {
                        prop_assert_eq!(a.size(), round_size(n));
                        prop_assert_eq!(a.requested_bytes(), n);
                        prop_assert_eq!(a.addr() % 64, 0);
                        // Allocated bytes count the block, as PyTorch does: the request
                        // rounded, or a whole block that was not split.
                        let block = block_size(&device, a.addr());
                        prop_assert!(block >= round_size(n));
                        model.live.insert(a.addr(), (block, n));
                        model.allocs += 1;
                        model.peak_allocated = model.peak_allocated.max(model.allocated());
                        model.peak_live = model.peak_live.max(model.live.len() as u64);
                        live.push(a);
                    }
                    Err(e) => {
                        model.ooms += 1;
                        prop_assert_eq!(e.allocated, model.allocated());
                        // The model judges the refusal itself: no usable free block, and no
                        // room under the capacity (or limit) for the smallest segment that
                        // would hold the request.
                        if let Err(why) = really_could_not_fit(&device, n, &e) {
                            prop_assert!(false, "spurious out-of-memory for {} bytes: {}", n, why);
                        }
                        if e.cause == OomCause::Fragmentation {
                            // Enough free memory in total (cached, plus what the device can
                            // still provide), but no block of the request's size.
                            prop_assert!(e.cached_free > 0);
                            prop_assert!(
                                e.cached_free + e.device_free >= round_size(n) as u64
                            );
                            prop_assert!(e.largest_free_block < round_size(n) as u64);
                        }
                    }
                },
                Op::Free(i) if !live.is_empty() => {
                    let a = live.swap_remove(i % live.len());
                    model.live.remove(&a.addr());
                    model.frees += 1;
                    drop(a);
                }
                Op::Free(_) => {}
                Op::EmptyCache => {
                    let before = memory::stats(&device).reserved_bytes;
                    let released = memory::empty_cache(&device);
                    let after = memory::stats(&device);
                    prop_assert_eq!(after.reserved_bytes, before - released);
                    // Only segments holding a live block remain.
                    let snap = memory::snapshot(&device);
                    prop_assert!(snap.segments.iter().all(|g| g.blocks.iter().any(|b| b.allocated)));
                }
                Op::Reserve(n) => {
                    if let Err(e) = memory::reserve(&device, n) {
                        model.ooms += 1;
                        prop_assert_eq!(e.allocated, model.allocated());
                    }
                }
            }
            check(&device, &model, &live);
        }
        drop(live);
        model.live.clear();
        memory::empty_cache(&device);
        let s = memory::stats(&device);
        prop_assert_eq!(s.reserved_bytes, 0);
        prop_assert_eq!(s.allocated_bytes, 0);
        prop_assert_eq!(s.active_bytes, 0);
        prop_assert_eq!(s.segments, 0);
        // Every segment and mapped page is back on the device.
        prop_assert_eq!(
            device.allocator().backend().free_memory(),
            Some(CAPACITY)
        );
        if !device.allocator().uses_expandable_segments() {
            prop_assert_eq!(s.backend_allocs, s.backend_frees);
        }
        prop_assert_eq!(s.num_allocs, s.num_frees);
    }
}

/// The model's checks (the invariant check, the statistics, the snapshot) read a deferred merge
/// without performing it: a pair loop checked after every call, as the property test checks,
/// still takes the cached pair's shortcut, at every allocation once its segments have grown to
/// the loop's largest request (from the third round on).
#[test]
fn the_checks_leave_the_cached_pair_shortcut_on() {
    let device = Device::host_pool(
        HostBackend::with_capacity(CAPACITY),
        AllocatorConfig::default(),
    )
    .unwrap();
    let resident = device.allocate(4 * MIB).unwrap();
    let mut model = Model::default();
    model.live.insert(
        resident.addr(),
        (block_size(&device, resident.addr()), 4 * MIB),
    );
    model.allocs = 1;
    model.peak_allocated = model.allocated();
    model.peak_live = 1;
    let mut live = vec![resident];
    let mut reuses_before = 0;
    let sizes = [3 * MIB, 700 * 1024, 2 * MIB + 5, 512, 100_000, 5 * MIB];
    for round in 0..4 {
        for &n in &sizes {
            let a = device.allocate(n).unwrap();
            model
                .live
                .insert(a.addr(), (block_size(&device, a.addr()), n));
            model.allocs += 1;
            model.peak_allocated = model.peak_allocated.max(model.allocated());
            model.peak_live = model.peak_live.max(model.live.len() as u64);
            live.push(a);
            check(&device, &model, &live);
            let a = live.pop().unwrap();
            model.live.remove(&a.addr());
            model.frees += 1;
            drop(a);
            check(&device, &model, &live);
        }
        let reuses = device.allocator().deferred_reuses();
        let taken = reuses - reuses_before;
        assert!(taken > 0, "round {round}: no shortcut");
        if round >= 2 {
            assert_eq!(taken, sizes.len() as u64, "round {round}");
        }
        reuses_before = reuses;
    }
}
