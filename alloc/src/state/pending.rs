//! Blocks freed while other streams may still use them (PyTorch's `record_stream`): each waits
//! out of its pool, counted as active, until the events recorded on those streams when it was
//! freed complete — queried on later requests, waited for before the cache is released.

use super::State;
use crate::{Backend, BackendError, BackendFailure, EventId, StreamId};

/// A block freed while other streams may still use it: it returns to its pool once every
/// event completed.
pub(super) struct PendingFree {
    pub(super) slot: u32,
    /// Events not yet seen complete.
    pub(super) events: Vec<EventId>,
    /// An event could not be recorded or queried: the block stays out of the pool (counted as
    /// active) until a wait — `empty_cache`, the out-of-memory retry, the allocator's drop —
    /// records the missing events and sees every event complete (after a driver error that
    /// sticks, as CUDA's usually do, that never happens).
    pub(super) poisoned: bool,
    /// Streams whose event could not be recorded: recorded again by the next wait.
    pub(super) unrecorded: Vec<StreamId>,
}

impl State {
    /// Returns to the pool the pending blocks whose events have all completed (queried, not
    /// waited for). A failed query poisons the block and is kept as the request's failure.
    #[inline]
    #[doc(hidden)]
    pub fn process_pending<B: Backend + ?Sized>(&mut self, backend: &B, name: &str) {
        // Checked inline: every request passes here, and blocks rarely wait on other streams.
        if !self.pending.is_empty() {
            self.settle_pending(backend, name, false);
        }
    }

    /// Waits for the events of every pending block and returns the blocks to the pool (before
    /// the cache is released: `empty_cache` and the out-of-memory retry).
    pub(super) fn synchronize_pending<B: Backend + ?Sized>(&mut self, backend: &B, name: &str) {
        self.settle_pending(backend, name, true);
    }

    /// Queries (or, when `wait`, waits for) the pending blocks' events and returns the blocks
    /// whose events all completed. Only a wait retries a poisoned block: it records the events
    /// that could not be recorded (an event recorded now follows the work that used the block)
    /// and waits for them all.
    fn settle_pending<B: Backend + ?Sized>(&mut self, backend: &B, name: &str, wait: bool) {
        if self.pending.is_empty() {
            return;
        }
        // A block returning to its pool may border a block whose merge is deferred.
        self.settle_deferred();
        let mut pending = std::mem::take(&mut self.pending);
        let (mut failures, mut finished) = (Vec::new(), Vec::new());
        pending.retain_mut(|p| {
            if p.poisoned {
                if !wait {
                    return true;
                }
                p.unrecorded
                    .retain(|&stream| match backend.record_event(stream) {
                        Ok(Some(e)) => {
                            p.events.push(e);
                            false
                        }
                        Ok(None) => false,
                        Err(err) => {
                            failures.push(err);
                            true
                        }
                    });
                if !p.unrecorded.is_empty() {
                    return true;
                }
                p.poisoned = false;
            }
            let done = |e: EventId| {
                if wait {
                    backend.synchronize_event(e).map(|()| true)
                } else {
                    backend.query_event(e)
                }
            };
            p.events.retain(|&e| match done(e) {
                Ok(true) => {
                    backend.destroy_event(e);
                    false
                }
                Ok(false) => true,
                Err(err) => {
                    failures.push(err);
                    p.poisoned = true;
                    true
                }
            });
            let keep = !p.events.is_empty() || p.poisoned;
            if !keep {
                finished.push(p.slot);
            }
            keep
        });
        self.pending = pending;
        for err in failures {
            let failure = match err {
                BackendError::Driver(f) => f,
                e => BackendFailure {
                    op: "waiting for a stream event".into(),
                    error: e.to_string(),
                },
            };
            self.note_failure(name, failure);
        }
        for slot in finished {
            self.finish_free(slot);
        }
    }

    /// Returns pending block `slot`, whose streams are done with it, to its pool.
    pub(super) fn finish_free(&mut self, slot: u32) {
        let (pool, size) = (
            self.nodes[slot as usize].pool,
            self.nodes[slot as usize].size,
        );
        self.stats.on_deactivate(pool, size);
        self.free_block(slot);
    }

    /// The rest of [`State::free`] for a block other streams were recorded as using: it waits
    /// for events recorded on them now (out of line: the common free carries none of it).
    #[cold]
    #[inline(never)]
    pub(super) fn free_after_uses<B: Backend + ?Sized>(
        &mut self,
        slot: u32,
        backend: &B,
        name: &str,
    ) {
        let uses = self.stream_uses.remove(&slot).unwrap_or_default();
        let mut pending = PendingFree {
            slot,
            events: Vec::new(),
            poisoned: false,
            unrecorded: Vec::new(),
        };
        for stream in uses {
            match backend.record_event(stream) {
                Ok(Some(event)) => pending.events.push(event),
                Ok(None) => {}
                Err(e) => {
                    pending.poisoned = true;
                    pending.unrecorded.push(stream);
                    let failure = match e {
                        BackendError::Driver(f) => f,
                        e => BackendFailure {
                            op: format!("recording an event on stream {:#x}", stream.0),
                            error: e.to_string(),
                        },
                    };
                    self.note_failure(name, failure);
                }
            }
        }
        if pending.events.is_empty() && !pending.poisoned {
            self.finish_free(slot);
        } else {
            self.nodes[slot as usize].pending = true;
            self.pending.push(pending);
        }
    }

    /// Blocks freed while other streams may still use them, not yet back in the pool.
    #[doc(hidden)]
    pub fn pending_frees(&self) -> usize {
        self.pending.len()
    }
}
