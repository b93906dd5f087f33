//! The stream of `examples/fragmentation.rs`, with exact bytes: variable-length batches that
//! each keep a summary fail with fragmentation on a 32 MiB device while more than enough memory
//! is free, and every remedy makes the same stream succeed.

use vramguard_runtime::alloc::{AllocatorConfig, HostBackend, OomCause};
use vramguard_runtime::device::Allocation;
use vramguard_runtime::memory::{self, MemoryStats, OutOfMemory, SequenceBuckets, Workspace};
use vramguard_runtime::Device;

const MIB: usize = 1 << 20;
const CAPACITY: usize = 32 * MIB;
const BYTES_PER_TOKEN: usize = 4 * 1024 * 4;
const SUMMARY: usize = 4 * 96 * 1024 * 4;
const LENGTHS: [usize; 9] = [336, 75, 487, 369, 286, 64, 459, 356, 445];
const BUCKETS: [usize; 4] = [128, 256, 384, 512];

#[derive(Clone, Copy, PartialEq)]
enum Remedy {
    None,
    Coalescing,
    Bucketing,
    Preallocation,
    Expandable,
}

/// Runs the stream; returns the batches done, the failure if any, the statistics after the
/// stream (summaries alive) and what `empty_cache` released once everything was dropped.
fn run(remedy: Remedy) -> (usize, Option<OutOfMemory>, MemoryStats, u64) {
    let config = AllocatorConfig::default().with_expandable_segments(remedy == Remedy::Expandable);
    let device = Device::host_pool(HostBackend::with_capacity(CAPACITY), config).unwrap();
    let buckets = SequenceBuckets::new(&BUCKETS).unwrap();
    let mut workspace = (remedy == Remedy::Preallocation)
        // Sized for the longest batch (487 tokens).
        .then(|| Workspace::new(&device, 487 * BYTES_PER_TOKEN).unwrap());
    let mut summaries: Vec<Allocation> = Vec::new();
    let mut done = 0;
    let mut failure = None;
    for &len in &LENGTHS {
        let tokens = match remedy {
            Remedy::Bucketing => buckets.bucket_for(len).unwrap(),
            _ => len,
        };
        let mut batch = || -> Result<Allocation, OutOfMemory> {
            let activation = match workspace.as_mut() {
                Some(ws) => {
                    assert_eq!(
                        ws.view(tokens * BYTES_PER_TOKEN).unwrap().len(),
                        tokens * BYTES_PER_TOKEN
                    );
                    None
                }
                None => Some(device.allocate(tokens * BYTES_PER_TOKEN)?),
            };
            let summary = device.allocate(SUMMARY)?;
            drop(activation);
            Ok(summary)
        };
        match batch() {
            Ok(summary) if remedy == Remedy::Coalescing => drop(summary),
            Ok(summary) => summaries.push(summary),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
        done += 1;
    }
    let stats = memory::stats(&device);
    drop(summaries);
    drop(workspace);
    let released = memory::empty_cache(&device);
    device.allocator().check_invariants().unwrap();
    (done, failure, stats, released)
}

#[test]
fn the_naive_stream_fails_with_fragmentation_while_memory_is_free() {
    let (done, failure, s, released) = run(Remedy::None);
    assert_eq!(done, 8);
    let e = failure.expect("the last batch fails");
    assert_eq!(e.cause, OomCause::Fragmentation);
    assert_eq!(e.rounded, 445 * BYTES_PER_TOKEN);
    assert_eq!(e.cached_free, 15_908_864);
    assert_eq!(e.largest_free_block, 6_045_696);
    assert_eq!(e.device_free, (CAPACITY - 28_491_776) as u64);
    // 20.0 MiB free in total for a 7.0 MiB request.
    assert!(e.cached_free + e.device_free > 2 * e.rounded as u64);
    assert!(
        e.to_string()
            .contains("fragmentation: 15.2 MiB cached free"),
        "{e}"
    );
    assert_eq!(
        (s.allocated_bytes, s.reserved_bytes),
        (12_582_912, 28_491_776)
    );
    assert_eq!(s.num_ooms, 1);
    assert_eq!(released, 28_491_776);
}

#[test]
fn coalescing_bucketing_preallocation_and_expandable_segments_each_make_it_succeed() {
    // (remedy, allocated and reserved after the stream, empty_cache afterwards)
    let expected = [
        (Remedy::Coalescing, 0, 23_068_672, 23_068_672),
        (Remedy::Bucketing, 14_155_776, 29_360_128, 29_360_128),
        (Remedy::Preallocation, 22_134_784, 22_544_384, 22_544_384),
    ];
    for (remedy, allocated, reserved, released) in expected {
        let (done, failure, s, r) = run(remedy);
        assert!(failure.is_none());
        assert_eq!(done, LENGTHS.len());
        assert_eq!(
            (s.allocated_bytes, s.reserved_bytes, r),
            (allocated, reserved, released)
        );
        assert_eq!(s.num_ooms, 0);
    }
    if cfg!(unix) {
        let (done, failure, s, r) = run(Remedy::Expandable);
        assert!(failure.is_none());
        assert_eq!(done, LENGTHS.len());
        assert_eq!(
            (s.allocated_bytes, s.reserved_bytes, r),
            (14_155_776, 33_554_432, 33_554_432)
        );
    }
}
