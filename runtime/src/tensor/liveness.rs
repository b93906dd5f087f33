//! The liveness lower bound: the peak memory a computation would have if every buffer were
//! freed right after its last use.
//!
//! Benchmarks and tests compare the peaks of real code against it: code that drops each
//! intermediate at its last use reaches it; code that keeps intermediates to the end of their
//! scope does not. The recorder sees every storage the tensor layer allocates on this thread
//! while it is active, every end of a use (a kernel releasing its read or write access, so an
//! op's inputs overlap its output), and every free. Buffers that existed before recording
//! started (weights, inputs) are not counted, matching peaks measured above the bytes live
//! before the computation.

use std::cell::RefCell;
use std::collections::HashMap;

/// Result of a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LivenessBound {
    /// Peak bytes live if each buffer lived from its allocation to its last use (buffers still
    /// alive when recording ended, such as the returned output, count to the end).
    pub peak_bytes: u64,
    /// Buffers allocated while recording.
    pub buffers: u64,
    /// Bytes of all buffers allocated while recording.
    pub total_allocated_bytes: u64,
}

#[derive(Debug)]
struct Buffer {
    bytes: u64,
    allocated_at: u64,
    last_use_at: u64,
    freed: bool,
}

#[derive(Debug, Default)]
struct Recording {
    clock: u64,
    buffers: HashMap<u64, Buffer>,
}

impl Recording {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }
}

thread_local! {
    static RECORDING: RefCell<Option<Recording>> = const { RefCell::new(None) };
}

/// Records tensor buffer lifetimes on the current thread until [`LivenessRecorder::finish`].
///
/// ```
/// # use vramguard_runtime::{Device, tensor::LivenessRecorder, Tensor};
/// # fn main() -> Result<(), vramguard_runtime::tensor::TensorError> {
/// let dev = Device::isolated_host();
/// let x = Tensor::ones(&[256], &dev)?; // 1 KiB, allocated before recording: not counted
/// let recorder = LivenessRecorder::start();
/// // exp's output dies after relu reads it, relu's after tanh reads it; tanh's lives on.
/// let y = x.exp()?.relu()?.tanh()?;
/// let bound = recorder.finish();
/// assert_eq!(bound.peak_bytes, 2 * 1024); // two 1 KiB buffers overlap inside each op
/// assert_eq!(bound.total_allocated_bytes, 3 * 1024);
/// # drop(y); Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "the bound is only known once `finish` is called"]
pub struct LivenessRecorder {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl LivenessRecorder {
    /// Starts recording on this thread (replacing any recording already running here).
    pub fn start() -> LivenessRecorder {
        RECORDING.with(|r| *r.borrow_mut() = Some(Recording::default()));
        LivenessRecorder {
            _not_send: std::marker::PhantomData,
        }
    }

    /// Stops recording and computes the bound.
    pub fn finish(self) -> LivenessBound {
        let recording = RECORDING
            .with(|r| r.borrow_mut().take())
            .unwrap_or_default();
        bound_of(&recording)
    }
}

impl Drop for LivenessRecorder {
    fn drop(&mut self) {
        RECORDING.with(|r| r.borrow_mut().take());
    }
}

fn bound_of(recording: &Recording) -> LivenessBound {
    let end = recording.clock + 1;
    // (time, delta): a buffer is live on [allocated_at, last_use_at] inclusive.
    let mut events: Vec<(u64, i64)> = Vec::with_capacity(recording.buffers.len() * 2);
    let mut total = 0u64;
    for b in recording.buffers.values() {
        let last = if b.freed {
            b.last_use_at.max(b.allocated_at)
        } else {
            end
        };
        events.push((b.allocated_at, b.bytes as i64));
        events.push((last + 1, -(b.bytes as i64)));
        total += b.bytes;
    }
    // At equal times, frees (negative) come before allocations.
    events.sort_unstable();
    let (mut live, mut peak) = (0i64, 0i64);
    for (_, delta) in events {
        live += delta;
        peak = peak.max(live);
    }
    LivenessBound {
        peak_bytes: peak as u64,
        buffers: recording.buffers.len() as u64,
        total_allocated_bytes: total,
    }
}

fn with_recording(f: impl FnOnce(&mut Recording)) {
    // `try_with`: storages may be dropped during thread teardown.
    let _ = RECORDING.try_with(|r| {
        if let Ok(mut slot) = r.try_borrow_mut() {
            if let Some(rec) = slot.as_mut() {
                f(rec);
            }
        }
    });
}

pub(crate) fn on_alloc(id: u64, bytes: usize) {
    with_recording(|rec| {
        let now = rec.tick();
        rec.buffers.insert(
            id,
            Buffer {
                bytes: bytes as u64,
                allocated_at: now,
                last_use_at: now,
                freed: false,
            },
        );
    });
}

pub(crate) fn on_use_end(id: u64) {
    with_recording(|rec| {
        let now = rec.tick();
        if let Some(b) = rec.buffers.get_mut(&id) {
            b.last_use_at = now;
        }
    });
}

pub(crate) fn on_free(id: u64) {
    with_recording(|rec| {
        rec.tick();
        if let Some(b) = rec.buffers.get_mut(&id) {
            b.freed = true;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_and_disjoint_intervals() {
        let r = LivenessRecorder::start();
        on_alloc(1, 100); // t1
        on_alloc(2, 50); // t2
        on_use_end(1); // t3: 1 dies here (150 live at t2..t3)
        on_free(1);
        on_alloc(3, 70); // 2 + 3 = 120
        on_use_end(2);
        on_free(2);
        on_free(3);
        let b = r.finish();
        assert_eq!(b.peak_bytes, 150);
        assert_eq!(b.buffers, 3);
        assert_eq!(b.total_allocated_bytes, 220);
    }

    #[test]
    fn unfreed_buffers_live_to_the_end() {
        let r = LivenessRecorder::start();
        on_alloc(1, 10);
        on_alloc(2, 20);
        on_use_end(2);
        on_free(2);
        on_alloc(3, 30);
        assert_eq!(r.finish().peak_bytes, 40);
    }

    #[test]
    fn nothing_recorded_without_a_recorder() {
        on_alloc(1, 10);
        let r = LivenessRecorder::start();
        on_use_end(1);
        assert_eq!(r.finish().peak_bytes, 0);
    }
}
