//! `#[batch_scope]` on heap memory: with `TrackingAllocator` as the global allocator, an
//! iteration's report counts the heap allocations made on its thread, exactly, whatever library
//! made them (plain `Vec<f32>` buffers here; candle's CPU tensors with the `candle` feature).
//! Scopes attribute per thread, so these tests can run in parallel.

use vramguard::scope::{self, ScopeReport};
use vramguard::{batch_scope, heap};

const ELEMENTS: usize = 4096;
const KEPT: u64 = (ELEMENTS * std::mem::size_of::<f32>()) as u64;

fn step(i: usize) -> Vec<f32> {
    let a = vec![i as f32; ELEMENTS];
    let b: Vec<f32> = a.iter().map(|x| x * 2.0).collect();
    b.iter().map(|x| x + 1.0).collect()
}

#[batch_scope(label = "heap-leaky")]
fn leaky(iterations: usize, history: &mut Vec<Vec<f32>>) {
    for i in 0..iterations {
        let out = step(i);
        #[vramguard::allow(accumulates_across_iterations)]
        history.push(out);
    }
}

#[batch_scope(label = "heap-clean")]
fn clean(iterations: usize) -> f32 {
    let mut total = 0.0;
    for i in 0..iterations {
        let out = step(i);
        total += out[0];
    }
    total
}

fn report(label: &str) -> ScopeReport {
    scope::last_report(label).expect("the loop ran at least one iteration")
}

#[test]
fn a_loop_that_keeps_its_outputs_reports_exactly_the_bytes_it_keeps() {
    assert!(heap::is_tracking());
    let mut history = Vec::with_capacity(16); // no reallocation inside the loop
    leaky(5, &mut history);
    let last = report("heap-leaky");
    assert_eq!(last.iterations, 5);
    assert_eq!(last.escaped_bytes, KEPT, "{last}");
    assert_eq!(last.escaped_count, 1, "{last}");
    assert_eq!(last.live_bytes, 5 * KEPT, "{last}");
    assert_eq!(last.older_iterations_alive, 4, "{last}");
    assert_eq!(last.growth_streak, 4, "{last}");
    // `step` allocates three buffers of the same size each iteration.
    assert_eq!(last.allocated_bytes, 3 * KEPT, "{last}");
    assert_eq!(last.allocated_count, 3, "{last}");
    assert_eq!(last.escaped_by_tag.len(), 1);
    assert_eq!(last.escaped_by_tag[0].tag, "heap-leaky");
    // Freed anywhere, later: the scope sees it.
    history.clear();
    let mut again = Vec::with_capacity(4);
    leaky(1, &mut again);
    let after = report("heap-leaky");
    assert_eq!(after.live_bytes, KEPT, "{after}");
    assert_eq!(after.older_iterations_alive, 0, "{after}");
}

#[test]
fn a_loop_that_keeps_nothing_reports_no_escape() {
    clean(4);
    let last = report("heap-clean");
    assert_eq!(last.escaped_bytes, 0, "{last}");
    assert_eq!(last.live_bytes, 0, "{last}");
    assert_eq!(last.growth_streak, 0, "{last}");
    assert_eq!(last.allocated_bytes, 3 * KEPT, "{last}");
}

#[test]
fn tags_group_the_heap_escapes() {
    #[batch_scope(label = "heap-tagged")]
    fn tagged(history: &mut Vec<Vec<f32>>) {
        for i in 0..2 {
            let _tag = scope::tag("history");
            let out = step(i);
            #[vramguard::allow(accumulates_across_iterations)]
            history.push(out);
        }
    }
    let mut history = Vec::with_capacity(4);
    tagged(&mut history);
    let last = report("heap-tagged");
    assert_eq!(last.escaped_by_tag.len(), 1, "{last}");
    assert_eq!(last.escaped_by_tag[0].tag, "history");
    assert_eq!(last.escaped_by_tag[0].bytes, KEPT);
}

#[test]
#[should_panic(expected = "vramguard strict batch scope")]
fn strict_fails_a_loop_whose_heap_keeps_growing() {
    #[batch_scope(label = "heap-strict", strict, warn_after = 3)]
    fn strict_leaky(history: &mut Vec<Vec<f32>>) {
        for i in 0..6 {
            let out = step(i);
            #[vramguard::allow(accumulates_across_iterations)]
            history.push(out);
        }
    }
    let mut history = Vec::with_capacity(8);
    strict_leaky(&mut history);
}

#[test]
fn a_vec_grown_inside_the_iteration_is_that_iterations_escape() {
    // Not reserved: the history's buffer moves when it grows, and the new buffer belongs to the
    // iteration that grew it.
    #[batch_scope(label = "heap-growing-vec")]
    fn growing(history: &mut Vec<u64>) {
        for i in 0..3 {
            history.push(i);
        }
    }
    let mut history: Vec<u64> = Vec::new();
    growing(&mut history);
    let last = report("heap-growing-vec");
    // Capacity 4 after the first push (8 bytes each): the first iteration's buffer.
    assert_eq!(last.live_bytes, 4 * 8, "{last}");
    assert_eq!(last.escaped_bytes, 0, "{last}");
}

#[cfg(feature = "candle")]
mod candle {
    use super::*;
    use candle_core::{Device, Tensor};

    #[batch_scope(label = "candle-eval")]
    fn eval(
        weight: &Tensor,
        batches: &[Tensor],
        outputs: &mut Vec<Tensor>,
    ) -> candle_core::Result<()> {
        for x in batches {
            let h = x.matmul(weight)?;
            let h = h.relu()?;
            let y = h.sum_keepdim(1)?;
            #[vramguard::allow(accumulates_across_iterations)]
            outputs.push(y);
        }
        Ok(())
    }

    #[test]
    fn a_candle_loop_that_keeps_its_outputs_reports_its_exact_growth() -> candle_core::Result<()> {
        let device = Device::Cpu;
        let weight = Tensor::ones((64, 32), candle_core::DType::F32, &device)?;
        let batches = (0..6)
            .map(|i| Tensor::full(i as f32, (8, 64), &device))
            .collect::<candle_core::Result<Vec<_>>>()?;
        // A warm-up run first: candle's matmul keeps a scratch buffer per thread from its first
        // call on (a cache, alive to the process's end), which would be that iteration's escape.
        eval(&weight, &batches[..1], &mut Vec::new())?;
        scope::reset("candle-eval");
        let mut outputs = Vec::with_capacity(batches.len());
        eval(&weight, &batches, &mut outputs)?;
        let last = report("candle-eval");
        assert!(last.escaped_bytes > 0, "{last}");
        assert_eq!(last.growth_streak, 5, "{last}");
        assert_eq!(last.live_bytes, 6 * last.escaped_bytes, "{last}");
        // Every escape was one of the kept outputs: once they are dropped, nothing of the six
        // iterations is alive (the exact bytes per output are checked against the heap's own
        // statistics in `stats.rs`, which runs alone).
        drop(std::mem::take(&mut outputs));
        let mut none = Vec::new();
        eval(&weight, &batches[..1], &mut none)?;
        let again = report("candle-eval");
        assert_eq!(again.live_bytes, again.escaped_bytes, "{again}");
        Ok(())
    }
}

#[cfg(feature = "ndarray")]
mod ndarray_arrays {
    use super::*;
    use ndarray::Array2;

    #[batch_scope(label = "ndarray-eval")]
    fn eval(weight: &Array2<f32>, outputs: &mut Vec<Array2<f32>>) {
        for i in 0..5 {
            let x = Array2::<f32>::from_elem((8, 64), i as f32);
            let h = x.dot(weight);
            let y = h.mapv(|v| v.max(0.0));
            #[vramguard::allow(accumulates_across_iterations)]
            outputs.push(y);
        }
    }

    #[test]
    fn an_ndarray_loop_that_keeps_its_outputs_reports_each_kept_array() {
        let weight = Array2::<f32>::ones((64, 32));
        let mut outputs = Vec::with_capacity(8);
        eval(&weight, &mut outputs);
        let last = report("ndarray-eval");
        // One [8, 32] f32 array kept per iteration: its buffer and nothing else.
        assert_eq!(last.escaped_bytes, 8 * 32 * 4, "{last}");
        assert_eq!(last.escaped_count, 1, "{last}");
        assert_eq!(last.live_bytes, 5 * 8 * 32 * 4, "{last}");
        assert_eq!(last.growth_streak, 4, "{last}");
    }
}
