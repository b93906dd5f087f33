//! The largest batch that fits a memory budget, found from the allocator's exact peaks in a few
//! runs: [`max_batch`], and [`MaxBatchSearch`] for a limit or a progress callback of one's own.
//!
//! This module owns the search only; what a run does (build a batch, run the model) is the
//! caller's closure, and the figures come from the device's allocator statistics.
//!
//! # How it searches
//!
//! Every run starts from the same pool: [`empty_cache`], then
//! [`reset_peak_stats`], then the closure, then the allocator's peak.
//! A run *fits* when the closure returns `Ok` and the device's peak reserved bytes (everything
//! the device holds, weights included) stay within the budget; an out-of-memory error from the
//! closure means "does not fit", any other error ends the search.
//!
//! 1. **Measure** batches 1 and 2. Tensor sizes are affine in the batch, so the allocated peak
//!    is `a + s·batch` up to the allocator's 512-byte rounding of each block.
//! 2. **Predict** the largest batch whose allocated peak, plus the pool's overhead (the
//!    smallest peak-reserved-minus-peak-allocated figure of the runs that fitted: partly used
//!    pages, the small pool's segments), is within the budget. The overhead at the answer may
//!    be smaller than at small batches (a page partly used there is a smaller share of a large
//!    peak), and never below none: when the largest batch whose allocated peak alone is within
//!    the budget is the next one, the search runs that one — the answer is one of the two, and
//!    one run decides which.
//! 3. **Confirm**: the predicted batch must fit and the next one must not (or, when it does
//!    not fit, the one below must). When the prediction is exact or one too high, that is 4
//!    runs in all.
//!
//! A run that completes over the budget (a budget below what the device can hold, or the
//! heap, which never refuses) has a whole peak, unlike a run that ran out of memory: the model
//! is then refitted through it and the largest batch that fits, a secant across the answer. A
//! peak led by a fixed scratch buffer at small batches is affine again there, and the next
//! prediction is exact. After 4 predictions the search bisects.
//!
//! When the peak is *not* affine (the overhead grows with the batch, a model switches kernels
//! at some size, rounding adds up), a confirmation fails: the model is off by more than one.
//! The search then steps away from the confirmed side, doubling the step, until a run lands on
//! the other side of the answer, and bisects that bracket. The answer is still exact, with more
//! runs; [`MaxBatch::prediction_held`] and its `Display` say so, and each run's progress line
//! names why it was made ([`RunReason`]).
//!
//! The search assumes that fitting is monotone: if a batch fits, every smaller one does.

use super::{empty_cache, reset_peak_stats, stats, MemoryStats, OutOfMemory};
use crate::Device;
use std::fmt;

/// An error that may be the allocator running out of memory: a run that fails with one does
/// not fit; any other error ends the search ([`MaxBatchError::Run`]).
pub trait MaybeOutOfMemory {
    /// Whether this error is (or wraps) an [`OutOfMemory`].
    fn is_out_of_memory(&self) -> bool;
}

impl MaybeOutOfMemory for OutOfMemory {
    fn is_out_of_memory(&self) -> bool {
        true
    }
}

/// Errors of any kind behind a box (closures that use `?` on several error types): out of
/// memory when the box, or an error in its source chain, is an [`OutOfMemory`] (an error that
/// wraps one, as vramguard's tensor errors do, names it as its source).
impl MaybeOutOfMemory for Box<dyn std::error::Error + Send + Sync> {
    fn is_out_of_memory(&self) -> bool {
        chain_has_oom(self.as_ref())
    }
}

impl MaybeOutOfMemory for Box<dyn std::error::Error> {
    fn is_out_of_memory(&self) -> bool {
        chain_has_oom(self.as_ref())
    }
}

fn chain_has_oom(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.is::<OutOfMemory>() {
            return true;
        }
        next = e.source();
    }
    false
}

/// How one run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// It completed and the device's peak reserved bytes stayed within the budget.
    Fits,
    /// The closure returned an out-of-memory error.
    OutOfMemory,
    /// It completed, but the device's peak reserved bytes exceeded the budget.
    OverBudget,
}

/// Why the search ran a batch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunReason {
    /// Batches 1 and 2, whose peaks give the affine model.
    Measure,
    /// The largest batch the model predicts to fit.
    Predicted,
    /// A neighbour of the bracket that the model says must not fit (one above the largest
    /// batch that fits) or must fit (one below the smallest that does not).
    Confirm,
    /// A step past a failed confirmation (the model is off by more than one here), doubling
    /// until it crosses the answer.
    Step,
    /// Bisection of the bracket a step crossed.
    Bisect,
}

impl RunReason {
    fn as_str(self) -> &'static str {
        match self {
            RunReason::Measure => "measure",
            RunReason::Predicted => "predicted",
            RunReason::Confirm => "confirm",
            RunReason::Step => "step",
            RunReason::Bisect => "bisect",
        }
    }
}

/// One run of the closure: the batch, why it was run, and the allocator's exact figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRun {
    /// The batch size passed to the closure.
    pub batch: usize,
    /// Why this batch was run.
    pub reason: RunReason,
    /// How it ended.
    pub outcome: RunOutcome,
    /// Peak allocated bytes of the device during the run (up to the failure, if it failed).
    pub peak_allocated_bytes: u64,
    /// Peak reserved bytes of the device during the run: the figure compared with the budget.
    pub peak_reserved_bytes: u64,
}

impl BatchRun {
    /// Whether the run fitted.
    pub fn fits(&self) -> bool {
        self.outcome == RunOutcome::Fits
    }
}

impl fmt::Display for BatchRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let outcome = match self.outcome {
            RunOutcome::Fits => "fits",
            RunOutcome::OutOfMemory => "out of memory",
            RunOutcome::OverBudget => "over budget",
        };
        write!(
            f,
            "batch {:>5} ({:<9}): peak {:>14} B allocated, {:>14} B reserved: {outcome}",
            self.batch,
            self.reason.as_str(),
            self.peak_allocated_bytes,
            self.peak_reserved_bytes
        )
    }
}

/// What [`max_batch`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaxBatch {
    /// The largest batch that fits (0 when batch 1 does not).
    pub batch: usize,
    /// The batch predicted from the two measurements, the first the search ran after them
    /// (see the module's step 2; `None` when the search ended before predicting, or when the
    /// peak did not grow from batch 1 to 2).
    pub first_prediction: Option<usize>,
    /// Whether `batch` is the search's limit, which fits: larger batches were not tried.
    pub reached_limit: bool,
    /// Every run, in order.
    pub runs: Vec<BatchRun>,
}

impl MaxBatch {
    /// Runs of the closure.
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    /// Whether the affine model's first prediction was the answer or one above it, so that it
    /// took two confirmations only (4 runs in all). `false` means the peak was not affine in the
    /// batch around the limit and the search refitted, stepped or bisected (the answer is exact
    /// either way).
    pub fn prediction_held(&self) -> bool {
        self.first_prediction
            .is_some_and(|p| p == self.batch || p == self.batch + 1)
    }
}

impl fmt::Display for MaxBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "largest batch {} ({} runs", self.batch, self.run_count())?;
        match self.first_prediction {
            _ if self.reached_limit => write!(f, "; the search's limit, which fits)"),
            Some(p) if self.prediction_held() => {
                write!(f, "; predicted {p} from batches 1 and 2, confirmed)")
            }
            Some(p) => write!(
                f,
                "; predicted {p} from batches 1 and 2, but the peak is not affine in the batch \
                 here, so the search refitted, stepped or bisected: the answer is exact, the run \
                 count higher)"
            ),
            None => write!(f, ")"),
        }
    }
}

/// Why the search stopped without an answer.
#[derive(Debug, thiserror::Error)]
pub enum MaxBatchError<E> {
    /// The closure failed with an error other than out-of-memory.
    #[error("max_batch: the run at batch {batch} failed with an error other than out-of-memory: {source}")]
    Run {
        /// The batch size of the failed run.
        batch: usize,
        /// The closure's error (boxed: out-of-memory-capable errors are large).
        source: Box<E>,
    },
    /// Batches 1 and 2 peaked at the same bytes and no limit was set, so no batch size is
    /// known not to fit.
    #[error("max_batch: batches 1 and 2 peak at the same {allocated_bytes} allocated bytes, so the memory of a run does not grow with its batch size; use the batch size in the closure, or set a limit with MaxBatchSearch::limit")]
    PeakDoesNotGrow {
        /// The peak allocated bytes of both runs.
        allocated_bytes: u64,
    },
    /// A search on the heap ([`MaxBatchSearch::run_on_heap`]) in a program whose global
    /// allocator is not [`crate::heap::TrackingAllocator`] (or with `heap_tracking:false`): no
    /// peak to read.
    #[error("max_batch on the heap needs vramguard's tracking allocator: add `#[global_allocator] static ALLOC: vramguard::TrackingAllocator = vramguard::TrackingAllocator::system();` to the binary (and remove `heap_tracking:false` from VRAMGUARD_ALLOC_CONF, if set)")]
    HeapNotTracked,
}

/// The largest batch size whose run fits in `budget_bytes` of `device` (everything the device
/// reserves, weights included), in few runs of `run`, with one progress line per run on stderr.
///
/// `run(batch)` does the work for one batch (build the inputs, run the model) and returns its
/// result; an out-of-memory error means "does not fit" (see [`MaybeOutOfMemory`]). The module
/// documentation describes the search; [`MaxBatchSearch`] sets a limit or another progress
/// callback. To search against a device's whole memory, pass its capacity (or more) as the
/// budget: then only out-of-memory decides.
///
/// ```
/// use vramguard_memory::{memory, Device};
///
/// // A host device that behaves like a 96 MiB GPU; the "model" holds 4 MiB per batch item.
/// let device = Device::host_with_capacity(96 << 20);
/// let found = memory::max_batch(&device, 96 << 20, |batch| device.allocate(batch << 22))?;
/// assert_eq!(found.batch, 24);
/// assert!(found.run_count() <= 4);
/// # Ok::<(), memory::MaxBatchError<memory::OutOfMemory>>(())
/// ```
pub fn max_batch<T, E: MaybeOutOfMemory>(
    device: &Device,
    budget_bytes: u64,
    run: impl FnMut(usize) -> Result<T, E>,
) -> Result<MaxBatch, MaxBatchError<E>> {
    MaxBatchSearch::new(budget_bytes).run(device, run)
}

/// [`max_batch`] with options: the largest batch to try, and what to do after each run.
pub struct MaxBatchSearch<'a> {
    budget_bytes: u64,
    limit: usize,
    on_run: Box<dyn FnMut(&BatchRun) + 'a>,
}

impl fmt::Debug for MaxBatchSearch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaxBatchSearch")
            .field("budget_bytes", &self.budget_bytes)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl<'a> MaxBatchSearch<'a> {
    /// A search within `budget_bytes`, with no limit, printing one line per run on stderr.
    pub fn new(budget_bytes: u64) -> MaxBatchSearch<'a> {
        MaxBatchSearch {
            budget_bytes,
            limit: usize::MAX,
            on_run: Box::new(|run| eprintln!("max_batch: {run}")),
        }
    }

    /// Tries no batch above `max` (at least 1): when `max` fits, it is the answer, with
    /// [`MaxBatch::reached_limit`] set.
    pub fn limit(mut self, max: usize) -> Self {
        self.limit = max.max(1);
        self
    }

    /// Calls `f` after each run instead of printing the run on stderr (`|_| {}` for silence).
    pub fn on_run(mut self, f: impl FnMut(&BatchRun) + 'a) -> Self {
        self.on_run = Box::new(f);
        self
    }

    /// Runs the search on `device` (see [`max_batch`]). Releases the cache when done.
    pub fn run<T, E: MaybeOutOfMemory>(
        self,
        device: &Device,
        run: impl FnMut(usize) -> Result<T, E>,
    ) -> Result<MaxBatch, MaxBatchError<E>> {
        self.search_with(Meter::Device(device), run)
    }

    /// Runs the search against the process's heap (every live byte of the process, weights
    /// included, with the heap's exact peak; needs [`crate::heap::TrackingAllocator`] as the
    /// global allocator): a run fits when the heap's peak during it is within the budget. Any
    /// error from `run` ends the search ([`MaxBatchError::Run`]): the heap has no out-of-memory
    /// error to recover from. `vramguard::heap::max_batch` is this search with the defaults.
    pub fn run_on_heap<T, E>(
        self,
        mut run: impl FnMut(usize) -> Result<T, E>,
    ) -> Result<MaxBatch, MaxBatchError<E>> {
        if !crate::heap::is_tracking() {
            return Err(MaxBatchError::HeapNotTracked);
        }
        self.search_with(Meter::Heap, |batch| run(batch).map_err(NotOutOfMemory))
            .map_err(|e| match e {
                MaxBatchError::Run { batch, source } => MaxBatchError::Run {
                    batch,
                    source: Box::new(source.0),
                },
                MaxBatchError::PeakDoesNotGrow { allocated_bytes } => {
                    MaxBatchError::PeakDoesNotGrow { allocated_bytes }
                }
                MaxBatchError::HeapNotTracked => MaxBatchError::HeapNotTracked,
            })
    }

    /// Runs the search against what vramguard's GPU observer sees on device `ordinal`: the
    /// allocations of any library (candle, burn, tch), every live one included (weights too),
    /// with the observer's exact peak. A run fits when it returns `Ok` and the observed peak is
    /// within the budget; a run during which the driver refused an allocation for lack of
    /// memory (the observer counts it) does not fit, whatever error the library made of it;
    /// any other error ends the search ([`MaxBatchError::Run`]). Needs the `cupti` feature.
    #[cfg(feature = "cupti")]
    pub fn run_on_observer<T, E>(
        self,
        observer: &crate::observer::Observer,
        ordinal: usize,
        mut run: impl FnMut(usize) -> Result<T, E>,
    ) -> Result<MaxBatch, MaxBatchError<E>> {
        let meter = Meter::Observer(observer, ordinal);
        self.search_with(meter, |batch| {
            let refused = observer.stats(ordinal).num_ooms;
            run(batch).map_err(|error| ObservedError {
                out_of_memory: observer.stats(ordinal).num_ooms > refused,
                error,
            })
        })
        .map_err(|e| match e {
            MaxBatchError::Run { batch, source } => MaxBatchError::Run {
                batch,
                source: Box::new(source.error),
            },
            MaxBatchError::PeakDoesNotGrow { allocated_bytes } => {
                MaxBatchError::PeakDoesNotGrow { allocated_bytes }
            }
            MaxBatchError::HeapNotTracked => MaxBatchError::HeapNotTracked,
        })
    }

    fn search_with<T, E: MaybeOutOfMemory>(
        mut self,
        meter: Meter<'_>,
        mut run: impl FnMut(usize) -> Result<T, E>,
    ) -> Result<MaxBatch, MaxBatchError<E>> {
        let mut state = Search::default();
        let searched = self.search(meter, &mut run, &mut state);
        meter.release_cache();
        let first_prediction = searched?;
        Ok(MaxBatch {
            batch: state.lo,
            first_prediction,
            reached_limit: state.lo == self.limit && state.hi.is_none(),
            runs: state.runs,
        })
    }

    /// Measures, predicts and confirms; returns the first prediction.
    fn search<T, E: MaybeOutOfMemory>(
        &mut self,
        meter: Meter<'_>,
        run: &mut impl FnMut(usize) -> Result<T, E>,
        state: &mut Search,
    ) -> Result<Option<usize>, MaxBatchError<E>> {
        if !self.probe(meter, run, 1, RunReason::Measure, state)?.fits() {
            return Ok(None);
        }
        if self.limit >= 2 {
            self.probe(meter, run, 2, RunReason::Measure, state)?;
        }
        let first = state.guess(self.budget_bytes);
        if first.is_none() && state.hi.is_none() && self.limit == usize::MAX {
            let allocated_bytes = state.fitted[0].peak_allocated_bytes;
            return Err(MaxBatchError::PeakDoesNotGrow { allocated_bytes });
        }
        while let Some((batch, reason, expect_fit)) =
            state.next_probe(self.budget_bytes, self.limit)
        {
            let fits = self.probe(meter, run, batch, reason, state)?.fits();
            state.learn(fits, expect_fit, reason);
        }
        Ok(first)
    }

    fn probe<T, E: MaybeOutOfMemory>(
        &mut self,
        meter: Meter<'_>,
        run: &mut impl FnMut(usize) -> Result<T, E>,
        batch: usize,
        reason: RunReason,
        state: &mut Search,
    ) -> Result<BatchRun, MaxBatchError<E>> {
        // Every run starts from the same pool: nothing cached from the run before.
        meter.release_cache();
        meter.reset_peak();
        let output = run(batch);
        let after = meter.stats();
        let outcome = match output {
            Ok(value) => {
                drop(value);
                if after.peak_reserved_bytes <= self.budget_bytes {
                    RunOutcome::Fits
                } else {
                    RunOutcome::OverBudget
                }
            }
            Err(e) if e.is_out_of_memory() => RunOutcome::OutOfMemory,
            Err(e) => {
                return Err(MaxBatchError::Run {
                    batch,
                    source: Box::new(e),
                })
            }
        };
        let result = BatchRun {
            batch,
            reason,
            outcome,
            peak_allocated_bytes: after.peak_allocated_bytes,
            peak_reserved_bytes: after.peak_reserved_bytes,
        };
        (self.on_run)(&result);
        state.record(result);
        Ok(result)
    }
}

/// Where a search reads its peaks.
#[derive(Clone, Copy)]
enum Meter<'d> {
    /// A device's allocator.
    Device(&'d Device),
    /// The process's heap, through [`crate::heap::TrackingAllocator`].
    Heap,
    /// What the GPU observer sees on one device.
    #[cfg(feature = "cupti")]
    Observer(&'d crate::observer::Observer, usize),
}

impl Meter<'_> {
    fn release_cache(self) {
        if let Meter::Device(device) = self {
            empty_cache(device);
        }
    }
    fn reset_peak(self) {
        match self {
            Meter::Device(device) => reset_peak_stats(device),
            Meter::Heap => crate::heap::reset_peak_stats(),
            #[cfg(feature = "cupti")]
            Meter::Observer(observer, ordinal) => observer.reset_peak_stats(ordinal),
        }
    }
    fn stats(self) -> MemoryStats {
        match self {
            Meter::Device(device) => stats(device),
            Meter::Heap => crate::heap::stats(),
            #[cfg(feature = "cupti")]
            Meter::Observer(observer, ordinal) => observer.stats(ordinal),
        }
    }
}

/// An error of a heap run: never an out-of-memory (the heap has no such error to return).
struct NotOutOfMemory<E>(E);

impl<E> MaybeOutOfMemory for NotOutOfMemory<E> {
    fn is_out_of_memory(&self) -> bool {
        false
    }
}

/// An error of a run on the observer, and whether the driver refused an allocation during it.
#[cfg(feature = "cupti")]
struct ObservedError<E> {
    out_of_memory: bool,
    error: E,
}

#[cfg(feature = "cupti")]
impl<E> MaybeOutOfMemory for ObservedError<E> {
    fn is_out_of_memory(&self) -> bool {
        self.out_of_memory
    }
}

/// The search's bracket and what it has learnt.
#[derive(Debug, Default)]
struct Search {
    /// Largest batch known to fit (0: none yet).
    lo: usize,
    /// Smallest batch known not to fit.
    hi: Option<usize>,
    /// The runs that fitted, in batch order.
    fitted: Vec<BatchRun>,
    runs: Vec<BatchRun>,
    mode: Mode,
    /// The smallest batch that completed over the budget: its peak is whole (an out-of-memory
    /// run's is not), so the model can be refitted between it and the largest batch that fits.
    over: Option<BatchRun>,
    /// Predicted runs so far: after [`MAX_PREDICTIONS`], the search bisects.
    predictions: u32,
}

/// Predictions before the search stops refitting and bisects (a peak far from affine).
const MAX_PREDICTIONS: u32 = 4;

/// How the next batch is chosen.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Follow the affine model: its prediction, then the neighbours that confirm it.
    #[default]
    Guided,
    /// A confirmation failed: the model is off by more than one here. Step away from the
    /// bracket's side (`up`: above `lo`; else below `hi`), doubling the step, until the other
    /// side is found.
    Gallop { up: bool, step: usize },
    /// Both sides are known near the answer: halve the bracket.
    Bisect,
}

impl Search {
    fn record(&mut self, run: BatchRun) {
        self.runs.push(run);
        if run.fits() {
            self.lo = self.lo.max(run.batch);
            let at = self.fitted.partition_point(|r| r.batch < run.batch);
            self.fitted.insert(at, run);
        } else {
            self.hi = Some(self.hi.map_or(run.batch, |h| h.min(run.batch)));
            if run.outcome == RunOutcome::OverBudget
                && self.over.is_none_or(|o| run.batch < o.batch)
            {
                self.over = Some(run);
            }
        }
    }

    /// The batch the model says to run next: its prediction ([`Self::predict`]), or the batch
    /// above it when that one's allocated peak alone is within the budget (the pool's overhead
    /// there may be less than the smallest seen: whether it fits is then one run away, and if
    /// it does not, the prediction is the answer).
    fn guess(&self, budget: u64) -> Option<usize> {
        let predicted = self.predict(budget, self.overhead())?;
        let next = predicted.checked_add(1);
        Some(match next {
            Some(next) if self.predict(budget, 0) == Some(next) => next,
            _ => predicted,
        })
    }

    /// The pool's overhead: the smallest reserved-minus-allocated figure of the runs that
    /// fitted. A run's figure mixes slack that memory pressure would reclaim (cached free
    /// blocks, which a run far below the budget keeps) with slack it cannot (partly used pages,
    /// the small pool's segments); the smallest is the closest to the second.
    fn overhead(&self) -> u64 {
        self.fitted
            .iter()
            .map(|r| r.peak_reserved_bytes.saturating_sub(r.peak_allocated_bytes))
            .min()
            .unwrap_or(0)
    }

    /// The largest batch the affine model says fits: the allocated peak through the smallest
    /// and the largest batch that fitted — or, once a run completed over the budget, through
    /// the largest that fitted and that one (a secant across the answer, where a peak that is
    /// not affine at small batches, such as one led by a fixed scratch buffer, is affine
    /// again) — plus `overhead`. `None` with fewer than two measured batches or a peak that
    /// does not grow.
    fn predict(&self, budget: u64, overhead: u64) -> Option<usize> {
        let (first, last) = match (self.fitted.last(), self.over) {
            (Some(fitted), Some(over)) if self.hi == Some(over.batch) => (fitted, over),
            _ => (self.fitted.first()?, *self.fitted.last()?),
        };
        let growth = i128::from(last.peak_allocated_bytes) - i128::from(first.peak_allocated_bytes);
        let span = last.batch as i128 - first.batch as i128;
        if span <= 0 || growth <= 0 {
            return None;
        }
        let headroom =
            i128::from(budget) - i128::from(overhead) - i128::from(first.peak_allocated_bytes);
        // Exact rational arithmetic, rounded down (also when the headroom is negative).
        let predicted = first.batch as i128 + (headroom * span).div_euclid(growth);
        Some(usize::try_from(predicted.max(0)).unwrap_or(usize::MAX))
    }

    /// The next batch to run, why, and whether the model expects it to fit; `None` when the
    /// bracket is closed (`hi == lo + 1`) or `lo` is the limit.
    fn next_probe(&self, budget: u64, limit: usize) -> Option<(usize, RunReason, bool)> {
        let upper = self.hi.map_or(limit, |h| h - 1).min(limit);
        if self.lo >= upper {
            return None;
        }
        let above = |step: usize| self.lo.saturating_add(step).min(upper);
        let below = |step: usize| upper.saturating_sub(step - 1).max(self.lo + 1);
        Some(match self.mode {
            Mode::Bisect => (
                self.lo + (upper - self.lo).div_ceil(2),
                RunReason::Bisect,
                true,
            ),
            Mode::Gallop { up: true, step } => (above(step), RunReason::Step, false),
            Mode::Gallop { up: false, step } => (below(step), RunReason::Step, true),
            Mode::Guided => match self.guess(budget) {
                // The model says nothing fits above `lo`: confirm that `lo + 1` does not.
                Some(p) if p <= self.lo => (above(1), RunReason::Confirm, false),
                // The model says more fits than the bracket allows: confirm its top.
                Some(p) if p >= upper => (upper, RunReason::Confirm, true),
                Some(p) => (p, RunReason::Predicted, true),
                // No growth measured (so a limit is set): try the limit, then step down.
                None => (upper, RunReason::Confirm, true),
            },
        })
    }

    /// Updates the mode after a run of `reason` that did (not) fit against the expectation.
    fn learn(&mut self, fits: bool, expected_fit: bool, reason: RunReason) {
        self.mode = match (self.mode, reason) {
            // A failed confirmation: the model is off by more than one.
            (Mode::Guided, RunReason::Confirm) if fits != expected_fit => {
                Mode::Gallop { up: fits, step: 2 }
            }
            // Still on the same side: double the step.
            (Mode::Gallop { up, step }, _) if fits == up => Mode::Gallop {
                up,
                step: step.saturating_mul(2),
            },
            // Crossed to the other side: the answer lies in the bracket.
            (Mode::Gallop { .. }, _) => Mode::Bisect,
            // Refitting creeps towards the answer: bisect instead.
            (Mode::Guided, RunReason::Predicted) => {
                self.predictions += 1;
                if self.predictions >= MAX_PREDICTIONS {
                    Mode::Bisect
                } else {
                    Mode::Guided
                }
            }
            (mode, _) => mode,
        };
    }
}

#[cfg(test)]
mod tests;
