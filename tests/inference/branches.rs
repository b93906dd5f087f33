//! Exact bytes of a drop inside a branch (issue #19, point 2): under a memory limit, a branch
//! whose own allocation fits only once the value dead in that branch is freed. `#[inference]`
//! frees `h` at the start of the branch that does not use it, so that branch's activation takes
//! `h`'s cached block; dropped after the whole `if` (as before, and as the plain code does at
//! the end of the function), `h` is still alive there and the allocation fails.

use vramguard::alloc::{AllocatorConfig, HostBackend};
use vramguard::{memory, Device, Tensor, TensorError};

type Result<T> = std::result::Result<T, TensorError>;

const MIB: u64 = 1 << 20;
/// Elements of one activation: 1 Mi `f32`s, 4 MiB, a large block of its own segment (fixed
/// segments round a large request up to 2 MiB, which 4 MiB already is).
const N: usize = 1 << 20;
const ACT: u64 = 4 * MIB;
/// The input and two activations fit; the input and three do not.
const LIMIT: u64 = 2 * ACT + 2 * MIB;

macro_rules! branchy {
    ($name:ident $(, #[$attr:meta])*) => {
        $(#[$attr])*
        fn $name(x: &Tensor, reduce: bool) -> Result<Tensor> {
            let h = x.exp()?;
            if reduce {
                let s = h.sum_all()?;
                Ok(s)
            } else {
                // `h` is dead here: its 4 MiB block can hold `w`.
                let w = x.mul_scalar(2.0)?;
                Ok(w)
            }
        }
    };
}

branchy!(branchy_plain);
branchy!(branchy_inference, #[vramguard::inference]);

/// A device that holds at most `LIMIT` bytes, in fixed segments (each large block its own).
fn limited_device() -> Device {
    let config = AllocatorConfig::default()
        .with_expandable_segments(false)
        .with_memory_limit(LIMIT);
    match Device::host_pool(HostBackend::new(), config) {
        Ok(device) => device,
        Err(e) => panic!("a host pool with a memory limit: {e}"),
    }
}

#[test]
fn a_branch_allocates_in_the_block_of_the_value_dead_there() -> Result<()> {
    let device = limited_device();
    let x = Tensor::ones(&[N], &device)?;
    assert_eq!(memory::stats(&device).allocated_bytes, ACT);
    memory::reset_peak_stats(&device);

    let w = branchy_inference(&x, false)?;
    let stats = memory::stats(&device);
    // `x`, then `h`; `h` freed at the branch's start; `w` in `h`'s block.
    assert_eq!(stats.peak_allocated_bytes, 2 * ACT);
    assert_eq!(stats.peak_reserved_bytes, 2 * ACT);
    assert_eq!(stats.allocated_bytes, 2 * ACT);
    assert_eq!(stats.num_ooms, 0);
    assert_eq!(w.to_vec()?[0], 2.0);
    drop(w);

    // The branch that uses `h` frees it after its last use there: the sum's block comes from
    // the small pool's 2 MiB segment, under the same limit.
    memory::reset_peak_stats(&device);
    let s = branchy_inference(&x, true)?;
    let stats = memory::stats(&device);
    assert_eq!(stats.peak_allocated_bytes, 2 * ACT + 512);
    assert_eq!(stats.num_ooms, 0);
    // The same sum as the plain code's, bit for bit (on a device without a limit).
    let unlimited = Device::isolated_host();
    let expected = branchy_plain(&Tensor::ones(&[N], &unlimited)?, true)?;
    assert_eq!(s.to_scalar()?.to_bits(), expected.to_scalar()?.to_bits());
    Ok(())
}

#[test]
fn with_the_dead_value_alive_the_branch_does_not_fit() -> Result<()> {
    let device = limited_device();
    let x = Tensor::ones(&[N], &device)?;
    match branchy_plain(&x, false) {
        Err(TensorError::OutOfMemory(oom)) => {
            assert_eq!(oom.allocated, 2 * ACT);
            assert_eq!(oom.limit, Some(LIMIT));
        }
        Err(other) => panic!("expected an out-of-memory error, got {other}"),
        Ok(_) => panic!("`x`, `h` and `w` fit under the limit: the test proves nothing"),
    }
    assert_eq!(memory::stats(&device).num_ooms, 1);
    Ok(())
}
