//! Shape bucketing ("keep shapes uniform") and warm-up ("run a max-size batch first"): after
//! `memory::warmup` the variable-length loop makes no backend calls; without it (and without
//! bucketing) the pool keeps growing as new shapes arrive.
//!
//! The first three tests shape a pool of fixed segments (`expandable_segments:false`, PyTorch's
//! default, for which that advice is given); the last one shows what the warm-up
//! does under this crate's default, expandable segments.

use vramguard_alloc::{AllocatorConfig, HostBackend, PoolKind};
use vramguard_memory::memory::{self, SequenceBuckets};
use vramguard_memory::Device;

const MIB: u64 = 1 << 20;
const BATCH: usize = 4;
const D: usize = 256;
const HEADS: usize = 4;
const FFN: usize = 4 * D;
const LAYERS: usize = 2;
const F32: usize = 4;

/// An unbounded host device with fixed segments.
fn fixed_device() -> Device {
    Device::host_pool(
        HostBackend::new(),
        AllocatorConfig::default().with_expandable_segments(false),
    )
    .unwrap()
}

/// Sequence lengths of the loop's batches: varied, none longer than 500.
const LENGTHS: [usize; 16] = [
    37, 412, 90, 500, 233, 18, 301, 129, 64, 450, 77, 256, 199, 480, 12, 350,
];

/// One encoder forward pass as drop-at-last-use code allocates it.
fn forward(device: &Device, t: usize) -> Result<(), memory::OutOfMemory> {
    let alloc = |elems: usize| device.allocate(elems * F32);
    let mut x = alloc(BATCH * t * D)?;
    for _ in 0..LAYERS {
        let qkv = alloc(BATCH * t * 3 * D)?;
        let scores = alloc(BATCH * HEADS * t * t)?;
        let probs = alloc(BATCH * HEADS * t * t)?;
        drop(scores);
        let ctx = alloc(BATCH * t * D)?;
        drop((probs, qkv));
        let h = alloc(BATCH * t * FFN)?;
        drop(ctx);
        let out = alloc(BATCH * t * D)?;
        drop(h);
        x = out;
    }
    drop(x);
    Ok(())
}

/// Runs every length of [`LENGTHS`], bucketed, three times; asserts that no backend call
/// (segment or page map/unmap) was made, and returns the statistics afterwards.
fn bucketed_loop_without_backend_calls(
    device: &Device,
    buckets: &SequenceBuckets,
) -> memory::MemoryStats {
    let before = memory::stats(device);
    for _ in 0..3 {
        for &len in &LENGTHS {
            forward(device, buckets.bucket_for(len).unwrap()).unwrap();
        }
    }
    let after = memory::stats(device);
    assert_eq!(
        after.backend_allocs, before.backend_allocs,
        "nothing allocated"
    );
    assert_eq!(
        after.backend_frees, before.backend_frees,
        "nothing returned"
    );
    after
}

#[test]
fn after_warming_up_every_bucket_the_bucketed_loop_makes_no_backend_calls() {
    let device = fixed_device();
    let buckets = SequenceBuckets::new(&[64, 128, 256, 512]).unwrap();
    let shaped = memory::warmup(&device, || {
        buckets
            .bounds()
            .iter()
            .rev()
            .try_for_each(|&t| forward(&device, t))
    });
    assert_eq!(shaped.output, Ok(()));
    let before = memory::stats(&device);
    assert_eq!(shaped.reserved_bytes, before.reserved_bytes);
    assert_eq!(shaped.added_bytes, before.reserved_bytes);
    assert_eq!(shaped.backend_allocs, before.backend_allocs);
    assert_eq!(shaped.backend_frees, 0);
    assert_eq!(shaped.reserved_bytes, 56 * MIB);
    let after = bucketed_loop_without_backend_calls(&device, &buckets);
    assert_eq!(after.reserved_bytes, before.reserved_bytes);
    assert_eq!(after.peak_reserved_bytes, before.reserved_bytes);
    assert_eq!(after.allocated_bytes, 0);
    assert_eq!(after.num_ooms, 0);
    device.allocator().check_invariants().unwrap();
}

#[test]
fn a_max_size_warmup_shapes_the_large_pool_but_small_batches_still_need_small_segments() {
    let device = fixed_device();
    let shaped = memory::warmup(&device, || forward(&device, 512));
    assert_eq!(shaped.output, Ok(()));
    assert_eq!(shaped.reserved_bytes, 52 * MIB);
    assert_eq!(shaped.backend_allocs, 3);
    let small_segments = |d: &Device| {
        memory::snapshot(d)
            .segments
            .iter()
            .filter(|s| s.pool == PoolKind::Small)
            .count()
    };
    assert_eq!(
        small_segments(&device),
        0,
        "the max-size batch has no tensor under 1 MiB"
    );
    for &len in &LENGTHS {
        forward(&device, len).unwrap();
    }
    let after = memory::stats(&device);
    // Only the short batches' small tensors needed new segments: two 2 MiB small-pool ones.
    assert_eq!(after.backend_allocs - shaped.backend_allocs, 2);
    assert_eq!(small_segments(&device), 2);
    assert_eq!(after.reserved_bytes, 56 * MIB);
    assert_eq!(after.backend_frees, 0);
}

#[test]
fn without_a_warmup_the_loop_itself_reserves_as_new_shapes_arrive() {
    let device = fixed_device();
    let mut calls = Vec::new();
    for _ in 0..3 {
        let before = memory::stats(&device).backend_allocs;
        for &len in &LENGTHS {
            forward(&device, len).unwrap();
        }
        calls.push(memory::stats(&device).backend_allocs - before);
    }
    // Every backend call happens inside the first pass of the loop, and the pool ends larger
    // than the bucketed, warmed-up one.
    assert_eq!(calls, vec![6, 0, 0]);
    let s = memory::stats(&device);
    assert_eq!(s.reserved_bytes, 64 * MIB);
    assert_eq!(s.peak_reserved_bytes, 64 * MIB);
}

#[cfg(unix)]
#[test]
fn under_the_default_expandable_segments_a_second_warmup_pass_shapes_the_pool() {
    let device = Device::isolated_host();
    assert!(device.allocator().uses_expandable_segments());
    let buckets = SequenceBuckets::new(&[64, 128, 256, 512]).unwrap();
    let every_bucket = || {
        buckets
            .bounds()
            .iter()
            .rev()
            .try_for_each(|&t| forward(&device, t))
    };
    let once = memory::warmup(&device, every_bucket);
    assert_eq!(once.output, Ok(()));
    // 42 MiB of mapped pages for the 512 batch: layer 1 packs x (2 MiB), qkv (6), scores (16)
    // and probs (16) from 0 to 40 MiB; its output, the next x, lands at 2 MiB (best fit), so in
    // layer 2 qkv starts at 4 MiB, scores at 10 and probs at 26, ending at 42. Plus two 2 MiB
    // small-pool segments for the 64 and 128 buckets' tensors of 1 MiB or less.
    assert_eq!(once.reserved_bytes, 46 * MIB);
    let large_pool = memory::snapshot(&device)
        .segments
        .iter()
        .filter(|s| s.pool == PoolKind::Large)
        .map(|s| (s.size, s.expandable))
        .collect::<Vec<_>>();
    assert_eq!(large_pool, vec![(42 * MIB, true)]);
    // A 512 batch placed by best fit in the mapped range after the shorter buckets (not laid
    // out as the range grows, as during the first pass) needs one more granule; a second pass
    // of the warm-up takes it, so the loop does not.
    let twice = memory::warmup(&device, every_bucket);
    assert_eq!(twice.output, Ok(()));
    assert_eq!(
        (twice.added_bytes, twice.backend_allocs, twice.backend_frees),
        (2 * MIB, 1, 0)
    );
    let after = bucketed_loop_without_backend_calls(&device, &buckets);
    assert_eq!(after.reserved_bytes, 48 * MIB);
    assert_eq!(after.peak_reserved_bytes, 48 * MIB);
    device.allocator().check_invariants().unwrap();
}
