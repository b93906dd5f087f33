//! One accounting interface for batch scopes: [`ScopeAccounting`].
//!
//! A batch scope (`crate::scope`) reports what each iteration allocated, what escaped it and
//! what stays alive, from every *source* of memory it can see:
//!
//! - vramguard's devices (`crate::device`): every block a device hands out;
//! - the process's heap (`crate::heap`), once `TrackingAllocator` is the global allocator:
//!   candle's, burn's and ndarray's CPU tensors, any `Vec`;
//! - a pool outside vramguard that a thread's scopes account with ([`account_with`]): the CUDA
//!   driver's pool candle allocates from (`vramguard::driver_pool`), or any other.
//!
//! Each source implements [`ScopeAccounting`] once: the scope begins an iteration on every
//! source ([`ScopeAccounting::begin_iteration`]), ends it on every source
//! ([`ScopeAccounting::end_iteration`]) and adds their [`IterationFigures`] up. A source that
//! sees single allocations (devices, heap) attributes each to the iteration running on the
//! allocating thread and keeps a [`ScopeBook`] per scope; its figures are exact to the byte
//! ([`Coverage::Attributed`]). A pool whose figures cover everything in it, the scope's
//! allocations and anybody else's, gives only bytes ([`Coverage::WholePool`],
//! [`IterationFigures::whole_pool`]): those replace the attributed sources' bytes, and counts
//! and tags come from the attributed sources alone.
//!
//! This module owns the interface and the books. It does not own which sources a scope uses
//! (the scope's business), how a source sees its allocations (each source's), nor what the
//! report makes of the figures (growth, warnings: the scope's).
//!
//! [`account_with`]: crate::scope::account_with

use std::collections::BTreeMap;
use std::sync::Arc;

/// One iteration of one batch scope: the scope's id (unique in the process: one per label and
/// thread) and the iteration's number (1 for the first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScopeIteration {
    /// The scope's id.
    pub scope: u64,
    /// The iteration's number within the scope.
    pub iteration: u64,
}

/// What a source's figures cover.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Coverage {
    /// Exactly the allocations made on the scope's thread while the iteration was its innermost
    /// scope: counts, bytes and tags, summed with the other attributed sources'.
    #[default]
    Attributed,
    /// Everything in a pool, the scope's allocations and anybody else's: bytes only. Its byte
    /// figures replace the attributed sources' (which the pool's include when they allocate
    /// from it).
    WholePool,
}

/// Where a source's figures stood when an iteration began: what
/// [`ScopeAccounting::begin_iteration`] returns, given back to
/// [`ScopeAccounting::end_iteration`]. Each source fills the fields it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IterationStart {
    /// The iteration that began.
    pub iteration: ScopeIteration,
    /// The iteration this thread's allocations belonged to before (an enclosing scope's, or an
    /// outer iteration of the same scope), restored when this one ends.
    pub previous: Option<ScopeIteration>,
    /// Bytes the scope had allocated, over all its iterations, when this one began.
    pub allocated_bytes: u64,
    /// Allocations the scope had made, over all its iterations, when this one began.
    pub allocated_count: u64,
    /// The scope's peak of live bytes before the iteration (handed back when it ends: a
    /// nested iteration of the same scope does not lower the outer one's peak).
    pub previous_peak: u64,
    /// Bytes in use in a whole pool when the iteration began.
    pub used_bytes: u64,
}

impl IterationStart {
    /// A start at `iteration` with every figure 0 and no previous iteration.
    pub fn new(iteration: ScopeIteration) -> Self {
        Self {
            iteration,
            previous: None,
            allocated_bytes: 0,
            allocated_count: 0,
            previous_peak: 0,
            used_bytes: 0,
        }
    }
}

/// Escaped allocations of one tag, as a source counted them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagFigures {
    /// The innermost tag active when the allocations were made (`None`: no tag inside the
    /// scope; the report shows the scope's label).
    pub tag: Option<Arc<str>>,
    /// Allocations still alive.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// What one source saw of one iteration of a batch scope (see [`Coverage`] for what the
/// figures cover and how sources add up).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IterationFigures {
    /// What the figures cover.
    pub coverage: Coverage,
    /// Bytes allocated during the iteration.
    pub allocated_bytes: u64,
    /// Allocations made during the iteration.
    pub allocated_count: u64,
    /// Highest bytes of the scope alive at once during the iteration, earlier iterations'
    /// survivors included.
    pub peak_live_bytes: u64,
    /// Bytes of the iteration's allocations still alive at its end.
    pub escaped_bytes: u64,
    /// The iteration's allocations still alive at its end.
    pub escaped_count: u64,
    /// The escapes by tag, in no particular order.
    pub escaped_by_tag: Vec<TagFigures>,
    /// Bytes of the scope alive at the end of the iteration, from any iteration.
    pub live_bytes: u64,
    /// Allocations of the scope alive at the end of the iteration.
    pub live_count: u64,
    /// Earlier iterations of the scope that still have allocations alive.
    pub older_iterations_alive: Vec<u64>,
}

impl IterationFigures {
    /// The figures of a whole pool ([`Coverage::WholePool`]) over an iteration that began with
    /// `used_at_start` bytes in use, ended with `used_now`, and saw at most `peak` in use
    /// (counted since the pool's peak was reset at the iteration's start): the iteration
    /// allocated at least the peak's rise, and escaped what the pool grew by.
    pub fn whole_pool(used_at_start: u64, used_now: u64, peak: u64) -> Self {
        let peak = peak.max(used_now).max(used_at_start);
        Self {
            coverage: Coverage::WholePool,
            allocated_bytes: peak - used_at_start,
            peak_live_bytes: peak,
            escaped_bytes: used_now.saturating_sub(used_at_start),
            live_bytes: used_now,
            ..Self::default()
        }
    }
}

/// A source of memory that batch scopes account with. Begin and end are called on the scope's
/// own thread, in the scope's order (an inner iteration ends before the outer one); a source
/// that sees single allocations attributes those made on that thread between the two to the
/// iteration (its frees may come from any thread).
pub trait ScopeAccounting: Send + Sync {
    /// Iteration `iteration` begins on this thread: where the source's figures stand now, or
    /// `None` when the source sees nothing now (it is then left out of the iteration).
    fn begin_iteration(&self, iteration: ScopeIteration) -> Option<IterationStart>;

    /// The iteration `start` began ends on this thread: what the source saw of it, or `None`
    /// when its figures cannot be read (it is then left out, and the scope reports what the
    /// other sources saw).
    fn end_iteration(&self, start: &IterationStart) -> Option<IterationFigures>;
}

/// The books of one scope in one attributed source, over all its iterations: live bytes and
/// their peak, totals, and what is alive of each iteration. A source keeps one per scope and
/// tells it of every allocation it attributes to an iteration of the scope, and of its free.
#[derive(Debug, Default)]
pub(crate) struct ScopeBook {
    live_bytes: u64,
    live_count: u64,
    /// Highest `live_bytes` since the current iteration began.
    peak_live_bytes: u64,
    allocated_bytes: u64,
    allocated_count: u64,
    /// (count, bytes) alive, per iteration.
    alive_by_iteration: BTreeMap<u64, (u64, u64)>,
}

impl ScopeBook {
    /// An allocation of `bytes` made in iteration `iteration`.
    pub(crate) fn on_alloc(&mut self, iteration: u64, bytes: u64) {
        self.live_bytes += bytes;
        self.live_count += 1;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
        self.allocated_bytes += bytes;
        self.allocated_count += 1;
        let alive = self.alive_by_iteration.entry(iteration).or_default();
        alive.0 += 1;
        alive.1 += bytes;
    }

    /// The free of an allocation of `bytes` that [`ScopeBook::on_alloc`] counted in
    /// `iteration`.
    pub(crate) fn on_free(&mut self, iteration: u64, bytes: u64) {
        self.live_bytes -= bytes;
        self.live_count -= 1;
        if let Some(alive) = self.alive_by_iteration.get_mut(&iteration) {
            alive.0 -= 1;
            alive.1 -= bytes;
            if alive.0 == 0 {
                self.alive_by_iteration.remove(&iteration);
            }
        }
    }

    /// Iteration `iteration` begins (after `previous` on this thread): the totals it starts
    /// from, and a new peak window.
    pub(crate) fn begin(
        &mut self,
        iteration: ScopeIteration,
        previous: Option<ScopeIteration>,
    ) -> IterationStart {
        let start = IterationStart {
            iteration,
            previous,
            allocated_bytes: self.allocated_bytes,
            allocated_count: self.allocated_count,
            previous_peak: self.peak_live_bytes,
            used_bytes: 0,
        };
        self.peak_live_bytes = self.live_bytes;
        start
    }

    /// The iteration `start` began ends: its figures (without tags, which the source knows),
    /// and the peak handed back to an enclosing iteration of the same scope.
    pub(crate) fn end(&mut self, start: &IterationStart) -> IterationFigures {
        let iteration = start.iteration.iteration;
        let (escaped_count, escaped_bytes) = self
            .alive_by_iteration
            .get(&iteration)
            .copied()
            .unwrap_or((0, 0));
        let figures = IterationFigures {
            coverage: Coverage::Attributed,
            allocated_bytes: self.allocated_bytes - start.allocated_bytes,
            allocated_count: self.allocated_count - start.allocated_count,
            peak_live_bytes: self.peak_live_bytes,
            escaped_bytes,
            escaped_count,
            escaped_by_tag: Vec::new(),
            live_bytes: self.live_bytes,
            live_count: self.live_count,
            older_iterations_alive: self
                .alive_by_iteration
                .range(..iteration)
                .map(|(older, _)| *older)
                .collect(),
        };
        self.peak_live_bytes = start.previous_peak.max(self.peak_live_bytes);
        figures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(iteration: u64) -> ScopeIteration {
        ScopeIteration {
            scope: 7,
            iteration,
        }
    }

    /// Two iterations: the second keeps one of its two allocations, and the first's survivor
    /// is an older iteration alive at its end; a nested iteration hands its peak back.
    #[test]
    fn a_book_counts_escapes_survivors_and_peaks_per_iteration() {
        let mut book = ScopeBook::default();
        let first = book.begin(at(1), None);
        book.on_alloc(1, 100);
        book.on_alloc(1, 50);
        book.on_free(1, 50);
        let f = book.end(&first);
        assert_eq!((f.allocated_bytes, f.allocated_count), (150, 2));
        assert_eq!((f.escaped_bytes, f.escaped_count), (100, 1));
        assert_eq!(
            (f.peak_live_bytes, f.live_bytes, f.live_count),
            (150, 100, 1)
        );
        let second = book.begin(at(2), Some(at(1)));
        assert_eq!(second.previous, Some(at(1)));
        book.on_alloc(2, 30);
        let nested = book.begin(at(3), Some(at(2)));
        book.on_alloc(3, 500);
        book.on_free(3, 500);
        let n = book.end(&nested);
        assert_eq!(
            (n.allocated_bytes, n.escaped_bytes, n.peak_live_bytes),
            (500, 0, 630)
        );
        let s = book.end(&second);
        assert_eq!((s.allocated_bytes, s.allocated_count), (530, 2));
        assert_eq!((s.escaped_bytes, s.escaped_count), (30, 1));
        assert_eq!(
            s.peak_live_bytes, 630,
            "the nested iteration's peak is the outer one's"
        );
        assert_eq!(s.older_iterations_alive, [1]);
        assert_eq!((s.live_bytes, s.live_count), (130, 2));
    }

    #[test]
    fn a_whole_pool_allocated_at_least_its_peaks_rise_and_escaped_its_growth() {
        let f = IterationFigures::whole_pool(100, 102, 140);
        assert_eq!(f.coverage, Coverage::WholePool);
        assert_eq!(
            (
                f.allocated_bytes,
                f.peak_live_bytes,
                f.escaped_bytes,
                f.live_bytes
            ),
            (40, 140, 2, 102)
        );
        // A peak read before the pool reached its figures (or never reset) is raised to them;
        // a pool that shrank escaped nothing.
        let f = IterationFigures::whole_pool(100, 90, 0);
        assert_eq!(
            (f.allocated_bytes, f.peak_live_bytes, f.escaped_bytes),
            (0, 100, 0)
        );
    }
}
