//! The stream of `examples/fragmentation.rs`, with exact bytes: variable-length batches that
//! each keep a summary fail with fragmentation on a 32 MiB device while more than enough memory
//! is free, and every remedy makes the same stream succeed.
//!
//! The scenario itself is the one `examples/fragmentation.rs` prints, shared with it.

#[path = "../examples/common/fragmentation_stream.rs"]
mod stream;

use stream::{device_for, Remedy, BYTES_PER_TOKEN, CAPACITY, LENGTHS};
use vramguard::memory::{MemoryStats, OomCause, OutOfMemory};

/// Runs the stream; returns the batches done, the failure if any, the statistics after the
/// stream (summaries alive) and what `empty_cache` released once everything was dropped.
fn run(remedy: Remedy) -> (usize, Option<OutOfMemory>, MemoryStats, u64) {
    let device = device_for(remedy, false).expect("a bounded host device");
    // The naive pool and the remedies against fragmentation are fixed segments, configured explicitly
    // (the crate's default is expandable segments on the host backend).
    assert_eq!(
        device.allocator().uses_expandable_segments(),
        cfg!(unix) && remedy == Remedy::Expandable
    );
    let outcome = stream::run(&device, remedy, false).expect("the scenario runs");
    device
        .allocator()
        .check_invariants()
        .expect("allocator invariants hold after the stream");
    (
        outcome.batches_done,
        outcome.error,
        outcome.stats,
        outcome.released,
    )
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
    // (remedy, allocated and reserved after the stream, empty_cache afterwards). Allocated
    // bytes are block sizes, as PyTorch counts them: a block whose remainder was too small to
    // split off counts whole (bucketing: 2 MiB more than the rounded requests, 14_155_776;
    // preallocation: the preallocated segment's last 400 KiB, 22_134_784 requested).
    let expected = [
        (Remedy::Coalescing, 0, 23_068_672, 23_068_672),
        (Remedy::Bucketing, 16_252_928, 29_360_128, 29_360_128),
        (Remedy::Preallocation, 22_544_384, 22_544_384, 22_544_384),
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
