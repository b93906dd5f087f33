//! The search against brute force, on host devices of fixed capacity (out-of-memory decides) and
//! on unbounded ones with a budget (the peak reserved bytes decide), with closures whose bytes
//! are exactly affine in the batch and ones that are not.

use super::*;
use crate::alloc::{AllocatorConfig, HostBackend};
use crate::device::Allocation;

const MIB: usize = 1 << 20;

/// A run that holds one block per entry of `sizes(batch)` at once.
fn holding(device: &Device, sizes: &[usize]) -> Result<Vec<Allocation>, OutOfMemory> {
    sizes.iter().map(|&bytes| device.allocate(bytes)).collect()
}

/// The largest batch that fits, by running every batch from 1 up (fitting is monotone), with
/// the same start state and the same rule as the search.
fn brute_force(device: &Device, budget: u64, sizes: impl Fn(usize) -> Vec<usize>) -> usize {
    for batch in 1.. {
        empty_cache(device);
        reset_peak_stats(device);
        let fits =
            holding(device, &sizes(batch)).is_ok() && stats(device).peak_reserved_bytes <= budget;
        if !fits {
            return batch - 1;
        }
    }
    unreachable!("the loop returns at the first batch that does not fit")
}

fn search(
    device: &Device,
    budget: u64,
    sizes: impl Fn(usize) -> Vec<usize>,
) -> Result<MaxBatch, MaxBatchError<OutOfMemory>> {
    MaxBatchSearch::new(budget)
        .on_run(|_| {})
        .run(device, |batch| holding(device, &sizes(batch)))
}

fn bounded(capacity: usize) -> Device {
    Device::host_with_capacity(capacity)
}

fn fixed_segments(capacity: usize) -> Device {
    let config = AllocatorConfig::default().with_expandable_segments(false);
    Device::host_pool(HostBackend::with_capacity(capacity), config).expect("valid config")
}

#[test]
fn exactly_affine_peaks_are_found_in_four_runs_equal_to_brute_force() {
    // (fixed bytes, bytes per batch item, capacity): blocks of whole 2 MiB pages, so the
    // reserved bytes are the allocated bytes and the peak is exactly affine.
    let cases = [
        (10 * MIB, 2 * MIB, 256 * MIB),
        (12 * MIB, 6 * MIB, 256 * MIB),
        (20 * MIB, 14 * MIB, 512 * MIB),
        (64 * MIB, 2 * MIB, 96 * MIB),
        (16 * MIB, 40 * MIB, 200 * MIB),
    ];
    for (fixed, per_item, capacity) in cases {
        for device in [bounded(capacity), fixed_segments(capacity)] {
            let sizes = |b: usize| vec![fixed + per_item * b];
            let budget = capacity as u64;
            let found = search(&device, budget, sizes).expect("no other errors");
            let expected = (capacity - fixed) / per_item;
            assert_eq!(brute_force(&device, budget, sizes), expected);
            assert_eq!(
                found.batch, expected,
                "{fixed} + {per_item}·b in {capacity}: {found}"
            );
            assert!(found.run_count() <= 4, "{found}: {:#?}", found.runs);
            assert!(found.prediction_held(), "{found}");
            assert_eq!(found.first_prediction, Some(expected));
            assert_eq!(memory_left(&device), 0, "the search releases its cache");
        }
    }
}

fn memory_left(device: &Device) -> u64 {
    stats(device).reserved_bytes
}

#[test]
fn a_budget_below_the_capacity_is_compared_with_the_peak_reserved_bytes() {
    let device = Device::isolated_host();
    let held = device.allocate(30 * MIB).expect("weights fit");
    let budget = 100 * MIB as u64;
    let sizes = |b: usize| vec![4 * MIB * b, 2 * MIB * b];
    let found = search(&device, budget, sizes).expect("no other errors");
    assert_eq!(found.batch, brute_force(&device, budget, sizes));
    assert_eq!(found.batch, 11, "30 MiB + 6 MiB per item within 100 MiB");
    assert!(found.run_count() <= 4, "{found}");
    let over = found
        .runs
        .iter()
        .find(|r| !r.fits())
        .expect("one run did not fit");
    assert_eq!(over.outcome, RunOutcome::OverBudget);
    assert!(over.peak_reserved_bytes > budget);
    drop(held);
}

#[test]
fn rounded_byte_counts_give_the_exact_answer() {
    // Request sizes that are no multiple of anything the allocator rounds to (512-byte blocks,
    // 2 MiB pages), in several blocks: affine in the request, not in the reserved bytes.
    for (capacity, per_item) in [
        (128 * MIB, 300_001),
        (200 * MIB, 1_234_567),
        (64 * MIB, 77_777),
    ] {
        for device in [bounded(capacity), fixed_segments(capacity)] {
            let sizes = |b: usize| vec![1_000_003 + per_item * b, 12_345 + 3 * per_item * b, 999];
            let budget = capacity as u64;
            let found = search(&device, budget, sizes).expect("no other errors");
            let expected = brute_force(&device, budget, sizes);
            assert_eq!(found.batch, expected, "{found}: {:#?}", found.runs);
            if found.run_count() > 4 {
                assert!(!found.prediction_held(), "{found}");
            }
            assert_eq!(
                found
                    .runs
                    .iter()
                    .filter(|r| r.batch == expected && r.fits())
                    .count(),
                1,
                "the answer was run and fitted: {found}"
            );
        }
    }
}

#[test]
fn a_peak_that_is_not_affine_is_still_exact_with_more_runs_and_says_so() {
    // Quadratic in the batch (attention over a sequence that grows with it): the line through
    // batches 1 and 2 predicts far too much.
    let device = bounded(256 * MIB);
    let sizes = |b: usize| vec![2 * MIB * (5 + b + b * b / 4)];
    let found = search(&device, 256 * MIB as u64, sizes).expect("no other errors");
    assert_eq!(
        found.batch, 20,
        "5 + 20 + 100 = 125 pages fit in 128, 136 do not"
    );
    assert_eq!(found.batch, brute_force(&device, 256 * MIB as u64, sizes));
    assert_eq!(found.first_prediction, Some(62), "2 + (128 - 8) / 2 pages");
    assert!(!found.prediction_held());
    assert!(found.run_count() > 4);
    assert!(found.runs.iter().any(|r| r.reason == RunReason::Bisect));
    assert!(found.to_string().contains("not affine"), "{found}");
    // Doubling steps, then bisection: logarithmic in the prediction's error, not linear.
    assert!(found.run_count() <= 16, "{found}: {:#?}", found.runs);
}

#[test]
fn a_first_batch_that_does_not_fit_gives_zero_after_one_run() {
    let device = bounded(32 * MIB);
    let found = search(&device, 32 * MIB as u64, |b| vec![40 * MIB * b]).expect("no errors");
    assert_eq!(found.batch, 0);
    assert_eq!(found.run_count(), 1);
    assert_eq!(found.runs[0].outcome, RunOutcome::OutOfMemory);
    assert_eq!(found.first_prediction, None);
}

#[test]
fn a_second_batch_that_does_not_fit_gives_one() {
    let device = bounded(64 * MIB);
    let found = search(&device, 64 * MIB as u64, |b| vec![40 * MIB * b]).expect("no errors");
    assert_eq!(found.batch, 1);
    assert_eq!(found.run_count(), 2);
}

#[test]
fn the_limit_is_never_exceeded_and_reported_when_it_fits() {
    let device = bounded(256 * MIB);
    let found = MaxBatchSearch::new(256 * MIB as u64)
        .limit(7)
        .on_run(|_| {})
        .run(&device, |b| holding(&device, &[2 * MIB * b]))
        .expect("no errors");
    assert_eq!(found.batch, 7);
    assert!(found.reached_limit);
    assert!(found.runs.iter().all(|r| r.batch <= 7));
    assert!(found.run_count() <= 3, "1, 2, then the limit: {found}");
}

#[test]
fn a_peak_that_does_not_grow_is_an_error_without_a_limit() {
    let device = bounded(256 * MIB);
    let err = search(&device, 256 * MIB as u64, |_| vec![4 * MIB]).unwrap_err();
    assert!(
        matches!(err, MaxBatchError::PeakDoesNotGrow { allocated_bytes } if allocated_bytes == 4 * MIB as u64),
        "{err}"
    );
    assert!(err.to_string().contains("MaxBatchSearch::limit"));
}

#[test]
fn progress_sees_every_run_in_order() {
    let device = bounded(128 * MIB);
    let mut seen = Vec::new();
    let found = MaxBatchSearch::new(128 * MIB as u64)
        .on_run(|r| seen.push(r.batch))
        .run(&device, |b| holding(&device, &[8 * MIB * b]))
        .expect("no errors");
    assert_eq!(seen, found.runs.iter().map(|r| r.batch).collect::<Vec<_>>());
    assert_eq!(&seen[..2], &[1, 2]);
    let line = found.runs[0].to_string();
    assert!(line.contains("batch") && line.contains("measure") && line.contains("fits"));
}

#[test]
fn a_peak_led_by_a_scratch_buffer_at_small_batches_is_refitted_across_the_answer() {
    // Each run first takes a scratch buffer of 100 MiB + 2 MiB per item, frees it, then holds
    // 4 MiB per item: batches 1 and 2 peak in the scratch, so their line predicts far too much
    // (150). That run completes over the budget (which is below the device), so the model is
    // refitted between it and the largest batch that fits, where the peak is affine again.
    // Whole 2 MiB pages throughout: reserved equals allocated, as on the heap.
    let device = Device::isolated_host();
    let budget = 400 * MIB as u64;
    let run = |batch: usize| -> Result<Allocation, OutOfMemory> {
        drop(device.allocate((100 + 2 * batch) * MIB)?);
        device.allocate(4 * batch * MIB)
    };
    let found = MaxBatchSearch::new(budget)
        .on_run(|_| {})
        .run(&device, run)
        .expect("no other errors");
    let brute = (1..)
        .find(|&batch| {
            empty_cache(&device);
            reset_peak_stats(&device);
            let _ = run(batch);
            stats(&device).peak_reserved_bytes > budget
        })
        .expect("a batch exceeds the budget")
        - 1;
    assert_eq!(found.batch, brute, "{found}: {:#?}", found.runs);
    assert_eq!(found.batch, 100, "4 MiB per item within 400 MiB");
    assert_eq!(found.first_prediction, Some(150));
    let batches: Vec<usize> = found.runs.iter().map(|r| r.batch).collect();
    // Stepping down from 150 and bisecting, as before the refit, took 14 runs.
    assert_eq!(batches, [1, 2, 150, 90, 100, 101], "{found}");
}

#[test]
fn a_search_on_the_heap_without_the_tracking_allocator_says_how_to_install_it() {
    // This test binary's global allocator is the default one.
    assert!(!crate::heap::is_tracking());
    let err = MaxBatchSearch::new(1 << 30)
        .run_on_heap(|batch| Ok::<_, std::convert::Infallible>(vec![0u8; batch]))
        .expect_err("nothing to measure");
    assert!(matches!(err, MaxBatchError::HeapNotTracked));
    assert!(err
        .to_string()
        .contains("#[global_allocator] static ALLOC: vramguard::TrackingAllocator"));
}

/// A run shaped like a model's on a paged pool: one large block affine in the batch (sizes no
/// multiple of a page), a small block, and a small block that grows slowly (the small pool's
/// segment): the reserved bytes exceed the allocated ones by a partly used page plus that
/// segment, an overhead that varies from batch to batch.
fn paged_model(fixed: usize, per_item: usize) -> impl Fn(usize) -> Vec<usize> + Copy {
    move |b| vec![fixed + per_item * b, 1000, 70_000 + 13 * b]
}

#[test]
fn an_overhead_smaller_at_the_answer_than_at_small_batches_costs_no_extra_run() {
    // Batches 1 and 2 reserve 3.57 and 4.06 MB above their allocated peaks, the answer (122)
    // 2.56 MB: the prediction with the smallest overhead seen is 121, one too low, while the
    // allocated peak alone puts 122 within the budget. The search runs 122 first: it fits,
    // and 123 does not. (Running 121 first took 5 runs: 121, then the refit's 122, then 123.)
    let budget = 768 * MIB as u64;
    let device = Device::isolated_host();
    let sizes = paged_model(351_271_936, 3_700_003);
    let found = search(&device, budget, sizes).expect("no other errors");
    assert_eq!(found.batch, brute_force(&device, budget, sizes));
    assert_eq!(found.batch, 122);
    let batches: Vec<usize> = found.runs.iter().map(|r| r.batch).collect();
    assert_eq!(batches, [1, 2, 122, 123], "{found}");
    assert!(found.prediction_held(), "{found}");
    let overhead = |r: &BatchRun| r.peak_reserved_bytes - r.peak_allocated_bytes;
    assert!(
        overhead(&found.runs[2]) < overhead(&found.runs[0]).min(overhead(&found.runs[1])),
        "the overhead at the answer is the smaller: {:#?}",
        found.runs
    );
    // When the batch above the prediction does not fit after all, the prediction confirms
    // the answer: 4 runs too.
    let sizes = paged_model(308_237_312, 3_539_456);
    let found = search(&device, budget, sizes).expect("no other errors");
    assert_eq!(found.batch, brute_force(&device, budget, sizes));
    let runs: Vec<(usize, RunReason, bool)> = found
        .runs
        .iter()
        .map(|r| (r.batch, r.reason, r.fits()))
        .collect();
    assert_eq!(
        runs,
        [
            (1, RunReason::Measure, true),
            (2, RunReason::Measure, true),
            (140, RunReason::Predicted, false),
            (139, RunReason::Confirm, true)
        ],
        "{found}"
    );
    assert!(found.prediction_held(), "{found}");
    // And across sizes of that shape: every answer exact, in 4 runs (12 of these 80 took 5 or
    // 6 when the search ran the prediction with the smallest overhead seen first).
    for fixed_kib in (340_000..360_000).step_by(1013) {
        for per_item in [3_539_456, 3_300_001, 3_700_003, 2_900_017] {
            let device = Device::isolated_host();
            let sizes = paged_model(fixed_kib * 1024, per_item);
            let found = search(&device, budget, sizes).expect("no other errors");
            assert_eq!(found.batch, brute_force(&device, budget, sizes), "{found}");
            assert!(found.run_count() <= 4, "{found}: {:#?}", found.runs);
        }
    }
}
