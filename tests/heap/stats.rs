//! The heap's process-wide figures with `TrackingAllocator` as the global allocator: exact
//! statistics, the soft limit, the trace and its timeline, and `heap::max_batch`. These figures
//! cover every thread, so the test runs its checks one after the other in a child process of
//! this binary that runs nothing else (`--exact`, one test thread), and checks the child passed.

use vramguard::{batch_scope, heap, scope};

fn live() -> u64 {
    heap::stats().allocated_bytes
}

/// Set in the child that runs [`heap_figures_are_exact`] alone.
const CHILD: &str = "VRAMGUARD_TEST_CHILD";

#[test]
fn heap_figures_are_exact() {
    const NAME: &str = "stats::heap_figures_are_exact";
    if std::env::var(CHILD).as_deref() != Ok(NAME) {
        let exe = std::env::current_exe().expect("the test binary's path");
        let output = std::process::Command::new(exe)
            .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, NAME)
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "the child ran the checks alone and they passed: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        return;
    }
    assert!(heap::is_tracking());
    statistics_count_every_allocation_exactly();
    a_realloc_counts_the_difference();
    the_soft_limit_refuses_what_would_cross_it();
    max_batch_finds_the_largest_batch_within_the_budget_in_four_runs();
    the_trace_records_labels_and_renders_a_timeline();
    #[cfg(feature = "candle")]
    candle::a_scope_reports_the_bytes_the_candle_loop_keeps();
}

fn statistics_count_every_allocation_exactly() {
    let before = heap::stats();
    let buffer: Vec<u8> = Vec::with_capacity(1000);
    let during = heap::stats();
    assert_eq!(during.allocated_bytes - before.allocated_bytes, 1000);
    assert_eq!(during.num_allocs - before.num_allocs, 1);
    assert_eq!(during.reserved_bytes, during.allocated_bytes);
    drop(buffer);
    let after = heap::stats();
    assert_eq!(after.allocated_bytes, before.allocated_bytes);
    assert_eq!(after.num_frees - before.num_frees, 1);

    heap::reset_peak_stats();
    let base = live();
    let big = vec![0u8; 1 << 20];
    drop(big);
    let small = vec![0u8; 1 << 10];
    assert_eq!(heap::stats().peak_allocated_bytes - base, 1 << 20);
    drop(small);
}

fn a_realloc_counts_the_difference() {
    let mut buffer: Vec<u8> = Vec::with_capacity(100);
    let base = live();
    buffer.reserve_exact(300); // capacity 300: 200 more bytes
    assert_eq!(live() - base, 200);
    buffer.shrink_to(10);
    assert_eq!(base - live(), 90);
    drop(buffer);
}

fn the_soft_limit_refuses_what_would_cross_it() {
    let ooms = heap::stats().num_ooms;
    heap::set_memory_limit(Some(live() + (1 << 20)));
    let mut fits: Vec<u8> = Vec::new();
    assert!(fits.try_reserve_exact(1 << 19).is_ok());
    let mut refused: Vec<u8> = Vec::new();
    let result = refused.try_reserve_exact(1 << 20);
    heap::set_memory_limit(None);
    assert!(
        result.is_err(),
        "the limit let through an allocation that crosses it"
    );
    assert_eq!(heap::stats().num_ooms, ooms + 1);
    assert_eq!(heap::memory_limit(), None);
    drop(fits);
}

/// A model whose run at `batch` holds a 256 KiB input and a 256 KiB activation per sample at
/// once, beside 1 MiB of weights.
fn run_model(weights: &[f32], batch: usize) -> Result<f32, std::convert::Infallible> {
    let input = vec![1f32; batch * 64 * 1024];
    let hidden: Vec<f32> = input.iter().map(|x| x * weights[0]).collect();
    drop(input);
    let output: Vec<f32> = hidden.iter().map(|x| x + 1.0).collect();
    drop(hidden);
    Ok(output.iter().sum())
}

fn max_batch_finds_the_largest_batch_within_the_budget_in_four_runs() {
    let weights = vec![2f32; 256 * 1024];
    let budget = live() + 5 * (512 << 10) + (300 << 10);
    let found = vramguard::memory::MaxBatchSearch::new(budget)
        .on_run(|_| {})
        .run_on_heap(|batch| run_model(&weights, batch))
        .expect("the model runs");
    // The answer by plain bisection over the same runs, measured one by one.
    let fits = |batch: usize| {
        heap::reset_peak_stats();
        let _ = run_model(&weights, batch);
        heap::stats().peak_allocated_bytes <= budget
    };
    let (mut lo, mut hi) = (1usize, 64usize);
    assert!(fits(lo) && !fits(hi));
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    assert_eq!(found.batch, lo, "{found}");
    assert_eq!(found.batch, 5, "{found}");
    assert!(found.run_count() <= 4, "{found}");
}

fn the_trace_records_labels_and_renders_a_timeline() {
    #[batch_scope(label = "traced")]
    fn traced() -> usize {
        let mut total = 0;
        for i in 0..2 {
            let buffer = vec![i as u8; 4096];
            total += buffer.len();
        }
        total
    }
    heap::record_trace(10_000);
    assert_eq!(traced(), 8192);
    let trace = heap::trace();
    let page = heap::html_report("heap timeline");
    heap::record_trace(0);
    let labelled: Vec<_> = trace
        .events
        .iter()
        .filter(|e| e.size == 4096)
        .filter_map(|e| e.label.as_ref().map(|l| (e.kind, l.to_string())))
        .collect();
    use vramguard::alloc::TraceEventKind::{Alloc, Free};
    assert_eq!(
        labelled,
        [
            (Alloc, "traced #1".to_string()),
            (Free, "traced #1".to_string()),
            (Alloc, "traced #2".to_string()),
            (Free, "traced #2".to_string()),
        ]
    );
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains("heap timeline"));
    assert!(heap::trace().events.is_empty());
    assert!(scope::last_report("traced").is_some());
}

#[cfg(feature = "candle")]
mod candle {
    use super::*;
    use candle_core::{DType, Device, Tensor};

    #[batch_scope(label = "candle-kept")]
    fn eval(
        weight: &Tensor,
        batches: &[Tensor],
        outputs: &mut Vec<Tensor>,
    ) -> candle_core::Result<()> {
        for x in batches {
            let h = x.matmul(weight)?;
            let h = h.relu()?;
            #[vramguard::allow(accumulates_across_iterations)]
            outputs.push(h);
        }
        Ok(())
    }

    /// `eval` without the attribute.
    fn plain_eval(
        weight: &Tensor,
        batches: &[Tensor],
        outputs: &mut Vec<Tensor>,
    ) -> candle_core::Result<()> {
        for x in batches {
            let h = x.matmul(weight)?;
            let h = h.relu()?;
            outputs.push(h);
        }
        Ok(())
    }

    pub(super) fn a_scope_reports_the_bytes_the_candle_loop_keeps() {
        let run = || -> candle_core::Result<()> {
            let device = Device::Cpu;
            let weight = Tensor::ones((64, 32), DType::F32, &device)?;
            let batches = (0..6)
                .map(|i| Tensor::full(i as f32, (8, 64), &device))
                .collect::<candle_core::Result<Vec<_>>>()?;
            // A warm-up run first: candle's matmul keeps a scratch buffer per thread from its first
            // call on (a cache, alive to the process's end), which would be that iteration's escape.
            eval(&weight, &batches[..1], &mut Vec::new())?;
            scope::reset("candle-kept");
            let mut outputs = Vec::with_capacity(batches.len());
            eval(&weight, &batches, &mut outputs)?;
            let report = scope::last_report("candle-kept").expect("six iterations ran");
            // The bytes the loop keeps, measured apart from the scope: the same loop without
            // the attribute (so without the scope's records, which are heap memory too), and
            // what dropping its kept outputs returns to the heap, per iteration.
            let mut plain_outputs = Vec::with_capacity(batches.len());
            plain_eval(&weight, &batches, &mut plain_outputs)?;
            let before = live();
            plain_outputs.clear(); // the tensors, not the Vec's own buffer (made before the loop)
            let kept_per_iteration = (before - live()) / 6;
            assert_eq!(report.escaped_bytes, kept_per_iteration, "{report}");
            assert!(kept_per_iteration >= 8 * 32 * 4, "{report}");
            assert_eq!(report.live_bytes, 6 * kept_per_iteration, "{report}");
            assert_eq!(report.growth_streak, 5, "{report}");
            Ok(())
        };
        run().expect("candle runs");
    }
}
