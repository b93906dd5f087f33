//! A lower bound on peak memory: the peak a computation would have if every buffer were
//! freed right after its last use.
//!
//! Benchmarks and tests compare the peaks of real code against it: code that drops each
//! intermediate at its last use reaches it; code that keeps intermediates to the end of their
//! scope does not. The recorder sees every storage the tensor layer allocates on this thread
//! while it is active, every end of a use (a kernel releasing its read or write access, so an
//! op's inputs overlap its output), and every free. The bound is relative to the bytes live
//! when recording started, matching peaks measured above that baseline: buffers that existed
//! before (weights, inputs) are not counted, and one of them that is freed while recording
//! (last step's gradients, say) counts as negative from its last use while recording, or from
//! the start if it was not used.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Result of a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeakBound {
    /// Peak bytes live above the bytes live when recording started, if each buffer lived from
    /// its allocation to its last use (buffers still alive when recording ended, such as the
    /// returned output, count to the end).
    pub peak_bytes: u64,
    /// The same, except that gradients stored in leaves (parameters) live until the code frees
    /// them (`zero_grad`), as the optimizer API holds them: the bound for what dropping locals
    /// early can reach without changing where the code zeroes gradients.
    pub peak_bytes_grads_held: u64,
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
    /// When it was freed, if it was.
    freed_at: Option<u64>,
    /// Stored as a leaf's gradient.
    held_as_grad: bool,
}

#[derive(Debug)]
struct OlderFreed {
    bytes: u64,
    /// Last use while recording, or 0.
    last_use_at: u64,
    freed_at: u64,
    held_as_grad: bool,
}

#[derive(Debug, Default)]
struct BufferLog {
    /// Which [`PeakBoundRecorder`] owns it (a later `start` replaces it).
    generation: u64,
    clock: u64,
    buffers: HashMap<u64, Buffer>,
    /// Last use of buffers allocated before recording started.
    older_last_use: HashMap<u64, u64>,
    /// Buffers allocated before recording and freed during it.
    older_freed: Vec<OlderFreed>,
}

impl BufferLog {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }
}

thread_local! {
    static RECORDING: RefCell<Option<BufferLog>> = const { RefCell::new(None) };
}

/// Records tensor buffer lifetimes on the current thread until [`PeakBoundRecorder::finish`].
///
/// ```
/// # use vramguard_memory::Device;
/// # use vramguard_tensor::{tensor::PeakBoundRecorder, Tensor};
/// # fn main() -> Result<(), vramguard_tensor::tensor::TensorError> {
/// let dev = Device::isolated_host();
/// let x = Tensor::ones(&[256], &dev)?; // 1 KiB, allocated before recording: not counted
/// let recorder = PeakBoundRecorder::start();
/// // exp's output dies after relu reads it, relu's after tanh reads it; tanh's lives on.
/// let y = x.exp()?.relu()?.tanh()?;
/// let bound = recorder.finish();
/// assert_eq!(bound.peak_bytes, 2 * 1024); // two 1 KiB buffers overlap inside each op
/// assert_eq!(bound.total_allocated_bytes, 3 * 1024);
/// # drop(y); Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "the bound is only known once `finish` is called"]
pub struct PeakBoundRecorder {
    generation: u64,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl PeakBoundRecorder {
    /// Starts recording on this thread (replacing any recording already running here).
    pub fn start() -> PeakBoundRecorder {
        static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);
        let generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
        RECORDING.with(|r| {
            *r.borrow_mut() = Some(BufferLog {
                generation,
                ..BufferLog::default()
            })
        });
        PeakBoundRecorder {
            generation,
            _not_send: std::marker::PhantomData,
        }
    }

    /// Stops recording and computes the bound. A recorder replaced by a later
    /// [`PeakBoundRecorder::start`] on this thread saw nothing after that: its bound is zero.
    pub fn finish(mut self) -> PeakBound {
        bound_of(&self.take().unwrap_or_default())
    }

    /// Takes this recorder's recording, leaving one started later in place.
    fn take(&mut self) -> Option<BufferLog> {
        RECORDING.with(|r| {
            let mut slot = r.borrow_mut();
            if slot.as_ref().map(|rec| rec.generation) == Some(self.generation) {
                slot.take()
            } else {
                None
            }
        })
    }
}

impl Drop for PeakBoundRecorder {
    fn drop(&mut self) {
        self.take();
    }
}

fn bound_of(recording: &BufferLog) -> PeakBound {
    let total = recording.buffers.values().map(|b| b.bytes).sum();
    PeakBound {
        peak_bytes: peak_of(recording, false),
        peak_bytes_grads_held: peak_of(recording, true),
        buffers: recording.buffers.len() as u64,
        total_allocated_bytes: total,
    }
}

/// Peak of the live bytes over time; a buffer is live on `[allocated_at, end]` inclusive.
fn peak_of(recording: &BufferLog, grads_held: bool) -> u64 {
    let end = recording.clock + 1;
    let mut events: Vec<(u64, i64)> = Vec::with_capacity(recording.buffers.len() * 2);
    for b in recording.buffers.values() {
        let last = match b.freed_at {
            None => end,
            Some(freed_at) if grads_held && b.held_as_grad => freed_at,
            Some(_) => b.last_use_at.max(b.allocated_at),
        };
        events.push((b.allocated_at, b.bytes as i64));
        events.push((last + 1, -(b.bytes as i64)));
    }
    for o in &recording.older_freed {
        let last = if grads_held && o.held_as_grad {
            o.freed_at
        } else {
            o.last_use_at
        };
        events.push((last + 1, -(o.bytes as i64)));
    }
    // At equal times, frees (negative) come before allocations.
    events.sort_unstable();
    let (mut live, mut peak) = (0i64, 0i64);
    for (_, delta) in events {
        live += delta;
        peak = peak.max(live);
    }
    peak as u64
}

fn with_recording(f: impl FnOnce(&mut BufferLog)) {
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
                freed_at: None,
                held_as_grad: false,
            },
        );
    });
}

pub(crate) fn on_use_end(id: u64) {
    with_recording(|rec| {
        let now = rec.tick();
        match rec.buffers.get_mut(&id) {
            Some(b) => b.last_use_at = now,
            None => {
                rec.older_last_use.insert(id, now);
            }
        }
    });
}

/// Buffer `id` of `bytes` bytes is freed; `held_as_grad`: it was stored as a leaf's gradient.
pub(crate) fn on_free(id: u64, bytes: usize, held_as_grad: bool) {
    with_recording(|rec| {
        let now = rec.tick();
        match rec.buffers.get_mut(&id) {
            Some(b) => {
                b.freed_at = Some(now);
                b.held_as_grad = held_as_grad;
            }
            None => {
                let last_use_at = rec.older_last_use.remove(&id).unwrap_or(0);
                rec.older_freed.push(OlderFreed {
                    bytes: bytes as u64,
                    last_use_at,
                    freed_at: now,
                    held_as_grad,
                });
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_and_disjoint_intervals() {
        let r = PeakBoundRecorder::start();
        on_alloc(1, 100); // t1
        on_alloc(2, 50); // t2
        on_use_end(1); // t3: 1 dies here (150 live at t2..t3)
        on_free(1, 0, false);
        on_alloc(3, 70); // 2 + 3 = 120
        on_use_end(2);
        on_free(2, 0, false);
        on_free(3, 0, false);
        let b = r.finish();
        assert_eq!(b.peak_bytes, 150);
        assert_eq!(b.buffers, 3);
        assert_eq!(b.total_allocated_bytes, 220);
    }

    #[test]
    fn unfreed_buffers_live_to_the_end() {
        let r = PeakBoundRecorder::start();
        on_alloc(1, 10);
        on_alloc(2, 20);
        on_use_end(2);
        on_free(2, 0, false);
        on_alloc(3, 30);
        assert_eq!(r.finish().peak_bytes, 40);
    }

    #[test]
    fn older_buffers_freed_while_recording_make_room() {
        let r = PeakBoundRecorder::start();
        on_free(90, 100, false); // t1: allocated before, unused while recording: gone from the start
        on_alloc(1, 150); // t2: 150 - 100 = 50 above the baseline
        on_use_end(91); // t3: allocated before, last used here
        on_alloc(2, 20); // t4: 91 is dead from t4 on: 50 - 80 + 20 = -10
        on_free(91, 80, false); // t5
        assert_eq!(r.finish().peak_bytes, 50);
    }

    #[test]
    fn gradients_held_by_leaves_live_until_freed_in_the_second_bound() {
        let r = PeakBoundRecorder::start();
        on_free(90, 40, true); // t1: last step's gradient, zeroed
        on_alloc(1, 100); // t2: a gradient
        on_use_end(1); // t3: the optimizer reads it
        on_alloc(2, 30); // t4: an activation of the next step
        on_free(1, 100, true); // t5: zero_grad
        let b = r.finish();
        // Every tensor at its last use: 90 is gone from the start, 1 dies at t3.
        assert_eq!(b.peak_bytes, 100 - 40);
        // Gradients live until zeroed: 90 until t1, 1 until t5 (overlapping 2).
        assert_eq!(b.peak_bytes_grads_held, 100 + 30 - 40);
    }

    #[test]
    fn dropping_a_replaced_recorder_leaves_the_newer_one_recording() {
        let old = PeakBoundRecorder::start();
        let new = PeakBoundRecorder::start();
        drop(old);
        on_alloc(1, 10);
        assert_eq!(new.finish().peak_bytes, 10);
    }

    #[test]
    fn nothing_recorded_without_a_recorder() {
        on_alloc(1, 10);
        let r = PeakBoundRecorder::start();
        on_use_end(1);
        assert_eq!(r.finish().peak_bytes, 0);
    }
}
