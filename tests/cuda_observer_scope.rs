//! `#[batch_scope]` accounting GPU memory it never allocated itself: a loop shaped like
//! candle's (cudarc's `CudaStream::alloc_zeros`, a `CudaSlice` dropped: `cuMemAllocAsync` and
//! `cuMemFreeAsync`) that keeps one buffer per iteration, seen by the GPU observer (feature
//! `cupti`) as a source of the scope's accounting: its report's escapes are exact to the byte,
//! by tag. Runs on the fake driver and its fake CUPTI in CI (`scripts/observer-check.sh`), on a
//! GPU in `scripts/gpu-check.sh`; without a driver or libcupti it prints `skipped: <reason>`
//! (and fails under `VRAMGUARD_REQUIRE_GPU=1`).

use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use std::sync::Arc;
use vramguard::batch_scope;
use vramguard::observer::{Observer, ObserverError};
use vramguard::scope::{self, tag, ScopeReport};

const KIB: usize = 1 << 10;
/// What each iteration keeps.
const KEPT: usize = 48 * KIB;
/// What each iteration allocates and frees.
const SCRATCH: usize = 64 * KIB;

fn skip(test: &str, why: &str) {
    let required = std::env::var("VRAMGUARD_REQUIRE_GPU").is_ok_and(|v| v == "1");
    assert!(!required, "VRAMGUARD_REQUIRE_GPU=1 but {why}");
    println!("{test}: skipped: {why}");
}

#[batch_scope(label = "observed-leaky")]
fn leaky(stream: &Arc<CudaStream>, iterations: usize, history: &mut Vec<CudaSlice<u8>>) {
    for _ in 0..iterations {
        let scratch = stream.alloc_zeros::<u8>(SCRATCH).expect("scratch");
        let _tag = tag("history");
        let out = stream.alloc_zeros::<u8>(KEPT).expect("output");
        #[vramguard::allow(accumulates_across_iterations)]
        history.push(out);
        drop(scratch);
    }
}

#[test]
fn cuda_a_leaking_loop_under_batch_scope_escapes_exactly_what_it_keeps_on_the_gpu() {
    const TEST: &str =
        "cuda_a_leaking_loop_under_batch_scope_escapes_exactly_what_it_keeps_on_the_gpu";
    let observer = match Observer::start() {
        Ok(o) => o,
        Err(e @ (ObserverError::NoDriver | ObserverError::NoCupti { .. })) => {
            return skip(TEST, &e.to_string())
        }
        Err(e) => panic!("{TEST}: {e}"),
    };
    let stream = match CudaContext::new(0) {
        Ok(ctx) if ctx.has_async_alloc() => ctx.default_stream(),
        Ok(_) => return skip(TEST, "this GPU has no stream-ordered allocator"),
        Err(e) => return skip(TEST, &format!("no CUDA device ({e})")),
    };
    let iterations = 6;
    let mut history = Vec::with_capacity(iterations);
    let mut reports: Vec<ScopeReport> = Vec::new();
    for _ in 0..iterations {
        leaky(&stream, 1, &mut history);
        reports.push(scope::last_report("observed-leaky").expect("an iteration ran"));
    }
    for (i, r) in reports.iter().enumerate() {
        let n = i as u64 + 1;
        assert_eq!(r.iterations, n, "{r}");
        assert_eq!((r.escaped_bytes, r.escaped_count), (KEPT as u64, 1), "{r}");
        assert_eq!(r.escaped_by_tag.len(), 1, "{r}");
        let group = &r.escaped_by_tag[0];
        assert_eq!(
            (group.tag.as_str(), group.count, group.bytes),
            ("history", 1, KEPT as u64)
        );
        assert_eq!(r.allocated_bytes, (KEPT + SCRATCH) as u64, "{r}");
        assert_eq!(r.allocated_count, 2, "{r}");
        assert_eq!((r.live_bytes, r.live_count), (n * KEPT as u64, n), "{r}");
        assert_eq!(r.older_iterations_alive, n - 1, "{r}");
        assert_eq!(r.growth_streak, n as u32 - 1, "{r}");
    }
    // The observer's own figures agree: the kept buffers are live on the device.
    let kept: u64 = observer
        .live_allocations(0)
        .iter()
        .filter(|a| a.label.as_ref().is_some_and(|l| l.tag() == Some("history")))
        .map(|a| a.bytes)
        .sum();
    assert_eq!(kept, (iterations * KEPT) as u64);
    drop(history);
    stream.synchronize().unwrap();
    println!("scope escape {KEPT} bytes/iter exact ({iterations} iterations, tag `history`)");
}
