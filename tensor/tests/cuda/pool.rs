//! The driver's default memory pool taken over (`vramguard::driver_pool::DriverPool`), with buffers
//! from cudarc's stream allocation (`cuMemAllocAsync` on the default pool, what candle's CUDA
//! tensors use). Without a GPU the test prints `skipped: <reason>` and passes.

use crate::gpu;

use gpu::{exclusive, figure, skip};
use vramguard_alloc::ContextError;
use vramguard_memory::device::DeviceError;
use vramguard_memory::driver_pool::{DriverPool, KEEP_ALL_CACHED};
use vramguard_memory::scope::{account_with, BatchScope};

const MIB: usize = 1 << 20;

#[test]
fn cuda_the_taken_over_pool_keeps_its_cache_reports_its_figures_and_feeds_batch_scopes() {
    const TEST: &str =
        "cuda_the_taken_over_pool_keeps_its_cache_reports_its_figures_and_feeds_batch_scopes";
    let _gpu = exclusive();
    let pool = match DriverPool::take_over(0) {
        Ok(p) => p,
        Err(DeviceError::Context(ContextError::NoDriver)) => {
            return skip(TEST, "no CUDA driver (libcuda.so not found)")
        }
        Err(e @ DeviceError::Context(ContextError::NoDevice { .. })) => {
            return skip(TEST, &format!("no CUDA device ({e})"))
        }
        Err(e) => panic!("{TEST}: {e}"),
    };
    assert_eq!(pool.release_threshold().unwrap(), KEEP_ALL_CACHED);
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    if !ctx.has_async_alloc() {
        return skip(
            TEST,
            "this GPU has no stream-ordered allocator (cuMemAllocAsync)",
        );
    }
    let stream = ctx.default_stream();
    pool.empty_cache().unwrap();
    pool.reset_peak_stats().unwrap();
    let base = pool.stats().unwrap();

    let buf = stream.alloc_zeros::<u8>(64 * MIB).unwrap();
    stream.synchronize().unwrap();
    let s = pool.stats().unwrap();
    assert!(
        s.allocated_bytes >= base.allocated_bytes + 64 * MIB as u64,
        "{s:?}"
    );
    drop(buf);
    stream.synchronize().unwrap();
    let s = pool.stats().unwrap();
    assert_eq!(s.allocated_bytes, base.allocated_bytes);
    assert!(s.peak_allocated_bytes >= base.allocated_bytes + 64 * MIB as u64);
    // The threshold kept the freed memory cached across the synchronisation.
    assert!(s.reserved_bytes >= 64 * MIB as u64, "{s:?}");
    figure(
        TEST,
        "pool_reserved_after_free",
        s.reserved_bytes as f64,
        "bytes",
    );
    pool.reset_peak_stats().unwrap();
    assert_eq!(
        pool.stats().unwrap().peak_allocated_bytes,
        base.allocated_bytes
    );
    let released = pool.empty_cache().unwrap();
    assert!(released >= 64 * MIB as u64, "released {released}");

    // The thread's batch scopes account with the pool: a kept buffer per iteration is growth.
    let mut kept = Vec::new();
    let mut last = None;
    for _ in 0..4 {
        let guard = BatchScope::enter("cuda_pool_loop");
        let scratch = stream.alloc_zeros::<u8>(32 * MIB).unwrap();
        kept.push(stream.alloc_zeros::<u8>(2 * MIB).unwrap());
        stream.synchronize().unwrap();
        drop(scratch);
        stream.synchronize().unwrap();
        last = Some(guard.exit());
    }
    let r = last.unwrap();
    assert!(r.escaped_bytes >= 2 * MIB as u64, "{r}");
    assert!(r.allocated_bytes >= 34 * MIB as u64, "{r}");
    assert_eq!(r.growth_streak, 3, "{r}");
    account_with(None);
}
