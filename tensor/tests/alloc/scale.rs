//! Reliability at scale (issue #22): the caching allocator against a reference model, over a
//! fake device that fails its calls at random (`common/faulty.rs`).
//!
//! `model_at_scale`: random sequences of up to 1,000 operations — alloc, free, `empty_cache`,
//! `reserve`, `record_stream` (events that complete at random later ticks), batch-scope
//! iterations with planning (repeated, and varied), a pressure handler that frees memory — each
//! under a configuration drawn at random (expandable segments on or off, `max_split_size`,
//! `roundup_power2_divisions` as a number or per interval, GC threshold, memory limit), with
//! segment allocation, segment free, map, unmap, event record and event query failing at random.
//! After every step: the allocator's invariants hold, no two live blocks overlap, the segments'
//! blocks tile them, the reserved bytes equal what the device holds (so a failed call left the
//! books as they were), the statistics equal the model's, a refusal with no fault injected is
//! genuine (no usable free block, no room for the segment it needs), a refusal names an injected
//! fault exactly when one refused it memory, and after a refusal the same request is served or
//! genuinely refused once the faults stop. At the end, faults off: everything freed,
//! `empty_cache`, and the device holds no segment, no mapped page and no event.
//!
//! `threads_at_scale`: 8 threads on one allocator, faults on; no two live blocks overlap at any
//! moment and the counts are exact at the end.
//!
//! Counts: `cargo test --release -p vramguard-tensor --test alloc -- scale::` runs the full counts
//! (10,000 sequences; 8 × 100,000 operations); a debug build runs fewer and says so.
//! `VRAMGUARD_MODEL_SEQUENCES`, `VRAMGUARD_THREAD_OPS` override them; `VRAMGUARD_MODEL_SEED`
//! fixes the seed (else it changes per run and is printed).

use crate::{faulty, refusal};

use faulty::{FaultKind, Faulty, Injected, Rng, GRANULE};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use vramguard_alloc::{
    AllocatorConfig, Block, CachingAllocator, IterationId, MemorySnapshot, OomCause, OutOfMemory,
    PoolKind, StreamId,
};

const MIB: usize = 1 << 20;
const CAPACITY: usize = 192 * MIB;
/// Side streams `record_stream` names (the blocks live on the default stream).
const SIDE_STREAMS: [StreamId; 3] = [StreamId(0x51de), StreamId(0x07e4), StreamId(0x3a3a)];

type Alloc = CachingAllocator<Faulty>;

/// A count from `var`, else the release or the debug default.
fn count(var: &str, release: usize, debug: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) {
            debug
        } else {
            release
        })
}

/// The run's seed: `VRAMGUARD_MODEL_SEED`, else from the clock (a new one per run).
fn run_seed() -> u64 {
    std::env::var("VRAMGUARD_MODEL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        })
}

/// A request size: mostly small, some large, a few huge.
fn request_size(rng: &mut Rng) -> usize {
    match rng.below(13) {
        0..=5 => rng.range(1, 64 * 1024),
        6..=8 => rng.range(64 * 1024, MIB),
        9..=11 => rng.range(MIB + 1, 8 * MIB),
        _ => rng.range(8 * MIB, 48 * MIB),
    }
}

/// A configuration drawn at random, with the limit (if any) it sets.
fn draw_config(rng: &mut Rng) -> (AllocatorConfig, Option<u64>) {
    let mut cfg = AllocatorConfig::default()
        .with_expandable_segments(rng.chance(500))
        .with_iteration_planning(rng.chance(800))
        // The trace is off, as in production by default; snapshots do not need it.
        .with_trace_capacity(0);
    if rng.chance(300) {
        cfg = cfg.with_max_split_size(rng.range(21, 64) * MIB);
    }
    match rng.below(4) {
        0 => cfg = cfg.with_roundup_power2_divisions(1 << rng.range(1, 4)),
        1 => {
            cfg = cfg.with_roundup_power2_intervals([
                (Some(MIB), 1 << rng.range(0, 3)),
                (Some(16 * MIB), 1 << rng.range(0, 3)),
                (None, 1 << rng.range(0, 3)),
            ])
        }
        _ => {}
    }
    if rng.chance(300) {
        cfg = cfg.with_garbage_collection_threshold(rng.range(3, 9) as f64 / 10.0);
    }
    let limit = rng
        .chance(400)
        .then(|| (rng.range(48, CAPACITY / MIB) * MIB) as u64);
    if let Some(l) = limit {
        cfg = cfg.with_memory_limit(l);
    }
    (cfg, limit)
}

/// Fault rates per mille for one sequence: none, rare, or frequent, per kind.
fn draw_rates(rng: &mut Rng) -> [u32; 6] {
    if rng.chance(150) {
        return [0; 6];
    }
    let mut rates = [0; 6];
    for r in &mut rates {
        *r = [0, 5, 30, 120][rng.below(4)];
    }
    rates
}

/// A live block with the bytes the allocator counts for it (the whole block when not split).
#[derive(Debug)]
struct Held {
    block: Block,
    counted: u64,
}

/// The blocks a pressure handler may free, shared with it.
#[derive(Default)]
struct Evictable {
    held: Mutex<Vec<Held>>,
    /// Blocks and bytes the handler freed.
    frees: AtomicU64,
}

/// What the model expects of the allocator.
#[derive(Default)]
struct Model {
    live: Vec<Held>,
    allocs: u64,
    frees: u64,
    ooms: u64,
}

/// One step of a batch-scope iteration: a large request, or the free of the `k`-th block.
#[derive(Debug, Clone, Copy)]
enum IterStep {
    Alloc(usize),
    Free(usize),
}

/// An iteration body: large requests, each freed later in a shuffled order.
fn draw_iteration(rng: &mut Rng) -> Vec<IterStep> {
    let n = rng.range(2, 7);
    let mut steps = Vec::new();
    let mut open = Vec::new();
    for k in 0..n {
        steps.push(IterStep::Alloc(rng.range(MIB + 1, 12 * MIB)));
        open.push(k);
        while !open.is_empty() && rng.chance(400) {
            steps.push(IterStep::Free(open.swap_remove(rng.below(open.len()))));
        }
    }
    while !open.is_empty() {
        steps.push(IterStep::Free(open.swap_remove(rng.below(open.len()))));
    }
    steps
}

struct Sequence {
    rng: Rng,
    a: Arc<Alloc>,
    limit: Option<u64>,
    model: Model,
    evictable: Arc<Evictable>,
    handler_frees_seen: u64,
    rates: [u32; 6],
    iterations: Vec<Vec<IterStep>>,
    next_iteration: u64,
}

/// What one sequence did, for the totals.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    operations: u64,
    ooms: u64,
    faults: [u64; 6],
    planned: u64,
    handler_frees: u64,
}

impl Sequence {
    fn new(seed: u64) -> Sequence {
        let mut rng = Rng::new(seed);
        let (cfg, limit) = draw_config(&mut rng);
        let backend = Faulty::new(CAPACITY, rng.next());
        let a = Arc::new(
            CachingAllocator::with_config(backend, cfg).unwrap_or_else(|e| {
                panic!("a drawn configuration is refused: {e}");
            }),
        );
        let rates = draw_rates(&mut rng);
        let evictable = Arc::new(Evictable::default());
        if rng.chance(500) {
            let (weak, ev): (Weak<Alloc>, _) = (Arc::downgrade(&a), Arc::clone(&evictable));
            a.add_pressure_handler(move |size| {
                let Some(a) = weak.upgrade() else { return 0 };
                let mut freed = 0usize;
                let mut held = ev.held.lock().unwrap_or_else(|e| e.into_inner());
                while freed < size {
                    let Some(h) = held.pop() else { break };
                    freed += h.counted as usize;
                    a.free(h.block);
                    ev.frees.fetch_add(1, Ordering::SeqCst);
                }
                freed
            });
        }
        let iterations = (0..rng.range(1, 3))
            .map(|_| draw_iteration(&mut rng))
            .collect();
        Sequence {
            rng,
            a,
            limit,
            model: Model::default(),
            evictable,
            handler_frees_seen: 0,
            rates,
            iterations,
            next_iteration: 0,
        }
    }

    fn set_faults(&self, on: bool) {
        self.a
            .backend()
            .ledger()
            .set_rates(if on { self.rates } else { [0; 6] });
    }

    fn recent_faults(&self) -> Vec<Injected> {
        self.a.backend().ledger().take_recent()
    }

    /// Allocates `n` bytes (in `iteration`, if any) and checks the outcome against the model.
    fn alloc(&mut self, n: usize, iteration: Option<IterationId>, evictable: bool) -> Option<u64> {
        self.recent_faults();
        let result = self.a.allocate_in(n, iteration);
        let injected = self.recent_faults();
        self.sync_handler_frees();
        match result {
            Ok(block) => Some(self.admit(block, n, evictable)),
            Err(e) => {
                self.model.ooms += 1;
                self.judge_refusal(n, &e, &injected);
                // The allocator serves the next request that fits: the same one, faults off,
                // is served or refused for lack of memory alone.
                if !injected.is_empty() {
                    self.set_faults(false);
                    let again = self.a.allocate(n);
                    self.sync_handler_frees();
                    match again {
                        Ok(block) => {
                            self.admit(block, n, evictable);
                        }
                        Err(e) => {
                            self.model.ooms += 1;
                            self.judge_refusal(n, &e, &[]);
                        }
                    }
                    self.set_faults(true);
                }
                None
            }
        }
    }

    /// Takes a block the allocator handed out into the model; returns its id.
    fn admit(&mut self, block: Block, n: usize, evictable: bool) -> u64 {
        let rounded = self.a.rounded_size(n).unwrap_or(usize::MAX);
        assert_eq!(block.size, rounded, "block size of a {n}-byte request");
        assert_eq!(block.requested, n);
        assert_eq!(block.addr % 512, 0, "alignment");
        let snap = self.a.snapshot();
        let counted = snap
            .segments
            .iter()
            .flat_map(|g| &g.blocks)
            .find(|b| b.addr == block.addr && b.allocated)
            .map_or(0, |b| b.size);
        assert!(
            counted >= rounded as u64,
            "block {block:?} counted {counted}"
        );
        self.model.allocs += 1;
        let id = block.id;
        let held = Held { block, counted };
        if evictable {
            self.evictable
                .held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(held);
        } else {
            self.model.live.push(held);
        }
        id
    }

    fn sync_handler_frees(&mut self) {
        let now = self.evictable.frees.load(Ordering::SeqCst);
        self.model.frees += now - self.handler_frees_seen;
        self.handler_frees_seen = now;
    }

    /// A refusal names its true cause, and one with no fault injected is genuine.
    fn judge_refusal(&self, n: usize, e: &OutOfMemory, injected: &[Injected]) {
        let named = e.context.backend_error.as_ref();
        if let Some(f) = named {
            assert_eq!(e.cause, OomCause::BackendFailed);
            assert!(
                injected
                    .iter()
                    .any(|i| i.error == f.error && i.kind.op() == f.op),
                "the refusal names {f:?}, which this request did not meet (injected: {injected:?})"
            );
        }
        if injected.iter().any(|i| i.kind.refuses_memory()) {
            assert_eq!(
                e.cause,
                OomCause::BackendFailed,
                "a refused segment or map is not named: {e}; injected {injected:?}"
            );
            return;
        }
        if injected.is_empty() {
            assert_ne!(e.cause, OomCause::BackendFailed, "{e}");
            if let Err(why) = really_could_not_fit(&self.a, self.limit, n, e.cause) {
                panic!("spurious out-of-memory for {n} bytes: {why}; {e}");
            }
        }
    }

    fn free(&mut self, i: usize) {
        let h = self.model.live.swap_remove(i);
        self.recent_faults();
        self.a.free(h.block);
        self.model.frees += 1;
    }

    /// One batch-scope iteration of body `which`, varied (one size changed) when `vary`.
    fn iteration(&mut self, which: usize, vary: bool) {
        let mut body = self.iterations[which].clone();
        if vary {
            let k = self.rng.below(body.len());
            if let IterStep::Alloc(n) = &mut body[k] {
                *n = self.rng.range(MIB + 1, 12 * MIB);
            }
        }
        let id = IterationId {
            scope: which as u64 + 1,
            iteration: self.next_iteration,
        };
        self.next_iteration += 1;
        let mut blocks: Vec<Option<u64>> = Vec::new();
        for step in body {
            match step {
                IterStep::Alloc(n) => {
                    let got = self.alloc(n, Some(id), false);
                    blocks.push(got);
                }
                IterStep::Free(k) => {
                    if let Some(block_id) = blocks.get(k).copied().flatten() {
                        if let Some(i) = self.model.live.iter().position(|h| h.block.id == block_id)
                        {
                            self.free(i);
                        }
                    }
                }
            }
            self.check();
        }
        self.a.end_iteration(id);
    }

    fn step(&mut self) {
        self.a.backend().ledger().tick();
        match self.rng.below(100) {
            0..=39 => {
                let n = request_size(&mut self.rng);
                self.alloc(n, None, false);
            }
            40..=44 => {
                let n = request_size(&mut self.rng);
                self.alloc(n, None, true);
            }
            45..=74 if !self.model.live.is_empty() => {
                let i = self.rng.below(self.model.live.len());
                self.free(i);
            }
            75..=84 if !self.model.live.is_empty() => {
                let i = self.rng.below(self.model.live.len());
                let stream = SIDE_STREAMS[self.rng.below(SIDE_STREAMS.len())];
                self.a.record_stream(&self.model.live[i].block, stream);
            }
            85..=86 => {
                let before = self.a.stats().reserved_bytes;
                let released = self.a.empty_cache();
                assert_eq!(self.a.stats().reserved_bytes, before - released);
            }
            87..=88 => {
                let n = self.rng.range(MIB, 40 * MIB);
                self.recent_faults();
                let result = self.a.reserve(n);
                let injected = self.recent_faults();
                if let Err(e) = result {
                    self.model.ooms += 1;
                    if injected.iter().any(|i| i.kind.refuses_memory()) {
                        assert_eq!(e.cause, OomCause::BackendFailed, "{e}");
                    }
                }
            }
            _ => {
                let which = self.rng.below(self.iterations.len());
                let vary = self.rng.chance(250);
                self.iteration(which, vary);
            }
        }
        self.check();
    }

    /// Everything the books must satisfy after a step.
    fn check(&mut self) {
        self.sync_handler_frees();
        let a = &self.a;
        a.check_invariants()
            .unwrap_or_else(|e| panic!("invariant broken: {e}"));
        let s = a.stats();
        let evictable = self
            .evictable
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let held = self.model.live.iter().chain(evictable.iter());
        let (mut allocated, mut requested, mut blocks) = (0, 0, 0);
        for h in held {
            allocated += h.counted;
            requested += h.block.requested as u64;
            blocks += 1;
        }
        assert_eq!(s.allocated_bytes, allocated, "allocated bytes");
        assert_eq!(s.requested_bytes, requested, "requested bytes");
        assert_eq!(
            s.active_blocks,
            blocks + a.pending_frees() as u64,
            "active blocks: live, plus freed blocks other streams may still use"
        );
        assert_eq!(
            (s.num_allocs, s.num_frees, s.num_ooms),
            (self.model.allocs, self.model.frees, self.model.ooms),
            "allocs, frees, out-of-memory errors"
        );
        assert_eq!(s.cached_free_bytes, s.reserved_bytes - s.active_bytes);
        {
            let ledger = a.backend().ledger();
            assert_eq!(
                s.reserved_bytes,
                ledger.held(),
                "reserved bytes against what the device holds"
            );
            assert!(ledger.violations.is_empty(), "{:?}", ledger.violations);
        }
        if let Some(l) = self.limit {
            assert!(
                s.reserved_bytes <= l,
                "{} reserved over the limit {l}",
                s.reserved_bytes
            );
        }
        let snap = a.snapshot();
        check_tiling(&snap, s.reserved_bytes);
        let mut spans: Vec<(u64, u64)> = self
            .model
            .live
            .iter()
            .chain(evictable.iter())
            .map(|h| (h.block.addr, h.counted))
            .collect();
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "live blocks overlap: {w:?}");
        }
    }

    /// Faults off: free everything, `empty_cache`, and the device holds nothing.
    fn finish(mut self) -> Tally {
        self.set_faults(false);
        self.recent_faults();
        while !self.model.live.is_empty() {
            self.free(0);
        }
        let evicted: Vec<Held> = std::mem::take(
            &mut *self
                .evictable
                .held
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for h in evicted {
            self.a.free(h.block);
            self.model.frees += 1;
        }
        self.a.empty_cache();
        self.check();
        let s = self.a.stats();
        assert_eq!(
            (
                s.reserved_bytes,
                s.allocated_bytes,
                s.active_bytes,
                s.segments
            ),
            (0, 0, 0, 0),
            "reserved, allocated, active bytes and segments after freeing everything"
        );
        assert_eq!(s.num_allocs, s.num_frees);
        let (planned, _) = self.a.planning_counts();
        let ledger = self.a.backend().ledger();
        assert_eq!(
            ledger.holdings(),
            (0, 0),
            "segments and mapped granules left"
        );
        assert_eq!(ledger.outstanding_events(), 0, "events never destroyed");
        Tally {
            operations: 0,
            ooms: self.model.ooms,
            faults: ledger.injected,
            planned,
            handler_frees: self.handler_frees_seen,
        }
    }
}

/// The snapshot's segments sum to `reserved`, and their blocks tile them exactly.
fn check_tiling(snap: &MemorySnapshot, reserved: u64) {
    let mut total = 0;
    for g in &snap.segments {
        total += g.size;
        let mut at = g.addr;
        for b in &g.blocks {
            assert_eq!(b.addr, at, "a gap or overlap in segment {:#x}", g.addr);
            at += b.size;
        }
        assert_eq!(
            at,
            g.addr + g.size,
            "blocks do not fill segment {:#x}",
            g.addr
        );
    }
    assert_eq!(total, reserved, "segments against reserved bytes");
}

/// `Ok` when a request of `n` bytes really cannot be served now (after the out-of-memory path
/// ran): no free block of its pool may take it (the max split rule included), and the room left
/// under the capacity and the limit is less than the least it needs reserved (its block in a
/// fixed segment, or what the free tail of the expandable segment lacks, in whole granules).
fn really_could_not_fit(
    a: &Alloc,
    limit: Option<u64>,
    n: usize,
    cause: OomCause,
) -> Result<(), String> {
    let Some(rounded) = a.rounded_size(n).map(|r| r as u64) else {
        return Ok(());
    };
    let pool = refusal::pool_of(rounded);
    let max_split = a.config().max_split_size.map(|m| m as u64);
    let snap = a.snapshot();
    let tail_free = refusal::no_free_block_fits(&snap, pool, rounded, max_split)?;
    let bound = limit.unwrap_or(CAPACITY as u64).min(CAPACITY as u64);
    let room = bound.saturating_sub(a.stats().reserved_bytes);
    let least = if pool == PoolKind::Large && a.uses_expandable_segments() {
        (rounded - tail_free.min(rounded))
            .next_multiple_of(GRANULE as u64)
            .min(rounded)
    } else {
        rounded
    };
    if cause == OomCause::AddressRangeUsedUp {
        return refusal::range_really_used_up(&snap, a.expandable_range(), least, rounded, room);
    }
    if room >= least {
        return Err(format!("{room} bytes left under the bound, {least} needed"));
    }
    Ok(())
}

/// Runs sequence `seed` of up to `max_ops` operations; a failure names the command that
/// reproduces it.
fn run_sequence(seed: u64, max_ops: usize) -> Tally {
    let outcome = std::panic::catch_unwind(|| {
        let mut seq = Sequence::new(seed);
        seq.set_faults(true);
        let ops = seq.rng.range(1, max_ops);
        for _ in 0..ops {
            seq.step();
        }
        let mut tally = seq.finish();
        tally.operations = ops as u64;
        tally
    });
    outcome.unwrap_or_else(|_| {
        panic!(
            "sequence {seed} failed (above); reproduce it alone with \
             VRAMGUARD_MODEL_SEED={seed} VRAMGUARD_MODEL_SEQUENCES=1 \
             cargo test --release -p vramguard-tensor --test alloc scale::model_at_scale"
        )
    })
}

/// Sequences that found a bug, run on every `cargo test` whatever the seed (issue #22, point 5).
/// 1796197838382965643: an expandable segment whose address range (then twice the limit) was
/// used up by unmapped holes refused an 11.4 MiB request while the limit had room, and the
/// refusal named fragmentation. The range is now twice the larger of limit and capacity, and a
/// refusal for a used-up range says so (`OomCause::AddressRangeUsedUp`; unit tests in
/// `alloc/tests/` build that case on purpose). 1796215301571043105 and 1796215301571044173: the
/// same defect, found by a random run before the fix (a 9.0 and a 9.6 MiB request refused with
/// 9.0 and 8.6 MiB left under the limit and 8 MiB needed at the end of the range).
/// 1796223147230632205 and 1796223147230637617 (CI): the out-of-memory retry's wait returned a
/// block next to the expandable segment's free tail, but the retry grew the segment only when it
/// had unmapped something (9.3 and 7.5 MiB requests refused with 8.2 and 6.3 MiB left and 8 and
/// 6 MiB needed; `the_out_of_memory_retry_grows_the_tail_its_wait_returned`).
const SEQUENCES_THAT_FOUND_BUGS: [u64; 5] = [
    1796197838382965643,
    1796215301571043105,
    1796215301571044173,
    1796223147230632205,
    1796223147230637617,
];

#[test]
fn sequences_that_found_bugs() {
    for seed in SEQUENCES_THAT_FOUND_BUGS {
        run_sequence(seed, 1000);
    }
}

#[test]
fn model_at_scale() {
    let sequences = count("VRAMGUARD_MODEL_SEQUENCES", 10_000, 150);
    let base = run_seed();
    println!("model_at_scale: seed {base}, {sequences} sequences of up to 1,000 operations");
    // Two workers: CI has two cores. Sequence i uses seed base + i, whichever worker runs it.
    let workers = 2.min(sequences.max(1));
    let next = AtomicU64::new(0);
    let total = Mutex::new(Tally::default());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= sequences as u64 {
                    break;
                }
                let t = run_sequence(base.wrapping_add(i), 1000);
                let mut total = total.lock().unwrap_or_else(|e| e.into_inner());
                total.operations += t.operations;
                total.ooms += t.ooms;
                total.planned += t.planned;
                total.handler_frees += t.handler_frees;
                for (sum, k) in total.faults.iter_mut().zip(t.faults) {
                    *sum += k;
                }
            });
        }
    });
    let t = total.into_inner().unwrap_or_else(|e| e.into_inner());
    let faults: Vec<String> = FaultKind::ALL
        .iter()
        .zip(t.faults)
        .map(|(k, n)| format!("{k:?} {n}"))
        .collect();
    println!(
        "model_at_scale: {sequences} sequences, {} operations, {} refusals, {} planned \
         placements, {} blocks freed by pressure handlers; faults injected: {}",
        t.operations,
        t.ooms,
        t.planned,
        t.handler_frees,
        faults.join(", ")
    );
    if cfg!(debug_assertions) && std::env::var("VRAMGUARD_MODEL_SEQUENCES").is_err() {
        println!(
            "model_at_scale: a debug build runs {sequences}; the full 10,000: \
             cargo test --release -p vramguard-tensor --test alloc -- scale::"
        );
    }
    // The run exercised what it claims: every fault kind, planning, pressure handlers.
    if sequences >= 100 {
        assert!(t.faults.iter().all(|&n| n > 0), "{faults:?}");
        assert!(t.planned > 0 && t.handler_frees > 0 && t.ooms > 0);
    }
}

#[test]
fn threads_at_scale() {
    let ops = count("VRAMGUARD_THREAD_OPS", 100_000, 5_000);
    const THREADS: u64 = 8;
    let seed = run_seed();
    println!("threads_at_scale: seed {seed}, {THREADS} threads x {ops} operations");
    let expandable = seed.is_multiple_of(2);
    let cfg = AllocatorConfig::default()
        .with_expandable_segments(expandable)
        .with_trace_capacity(0);
    let a = Arc::new(
        CachingAllocator::with_config(Faulty::new(4 * CAPACITY, seed), cfg)
            .unwrap_or_else(|e| panic!("{e}")),
    );
    a.backend().ledger().set_rates([20, 10, 20, 10, 10, 20]);
    // Every live block's span, by address, across threads: an overlap is caught when made.
    let spans: Mutex<BTreeMap<u64, u64>> = Mutex::new(BTreeMap::new());
    let totals = Mutex::new((0u64, 0u64, 0u64));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (a, spans, totals) = (&a, &spans, &totals);
            s.spawn(move || {
                let mut rng = Rng::new(seed.wrapping_add(t));
                let mut live: Vec<Block> = Vec::new();
                let (mut allocs, mut frees, mut ooms) = (0u64, 0u64, 0u64);
                let free = |b: Block, frees: &mut u64| {
                    spans
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&b.addr);
                    a.free(b);
                    *frees += 1;
                };
                for _ in 0..ops {
                    match rng.below(100) {
                        0..=44 => {
                            let n = request_size(&mut rng).min(16 * MIB);
                            match a.allocate(n) {
                                Ok(b) => {
                                    let (start, end) = (b.addr, b.addr + b.size as u64);
                                    let mut sp = spans.lock().unwrap_or_else(|e| e.into_inner());
                                    if let Some((&p, &pe)) = sp.range(..end).next_back() {
                                        assert!(pe <= start, "{start:#x} overlaps {p:#x}..{pe:#x}");
                                    }
                                    sp.insert(start, end);
                                    drop(sp);
                                    allocs += 1;
                                    live.push(b);
                                }
                                Err(_) => ooms += 1,
                            }
                        }
                        45..=84 if !live.is_empty() => {
                            let b = live.swap_remove(rng.below(live.len()));
                            free(b, &mut frees);
                        }
                        85..=92 if !live.is_empty() => {
                            let b = &live[rng.below(live.len())];
                            a.record_stream(b, SIDE_STREAMS[rng.below(SIDE_STREAMS.len())]);
                        }
                        93 => {
                            a.empty_cache();
                        }
                        94 => {
                            if a.reserve(rng.range(MIB, 24 * MIB)).is_err() {
                                ooms += 1;
                            }
                        }
                        _ => a.backend().ledger().tick(),
                    }
                }
                for b in live {
                    free(b, &mut frees);
                }
                let mut tot = totals.lock().unwrap_or_else(|e| e.into_inner());
                tot.0 += allocs;
                tot.1 += frees;
                tot.2 += ooms;
            });
        }
    });
    let (allocs, frees, ooms) = *totals.lock().unwrap_or_else(|e| e.into_inner());
    a.check_invariants()
        .unwrap_or_else(|e| panic!("invariant broken: {e}"));
    let s = a.stats();
    assert_eq!(
        (s.num_allocs, s.num_frees, s.num_ooms),
        (allocs, frees, ooms)
    );
    assert_eq!((s.allocated_bytes, s.requested_bytes), (0, 0));
    assert_eq!(s.active_bytes, s.reserved_bytes - s.cached_free_bytes);
    let injected = {
        let mut l = a.backend().ledger();
        assert_eq!(
            s.reserved_bytes,
            l.held(),
            "reserved against what the device holds"
        );
        assert!(l.violations.is_empty(), "{:?}", l.violations);
        l.set_rates([0; 6]);
        l.injected
    };
    a.empty_cache();
    let s = a.stats();
    assert_eq!((s.reserved_bytes, s.active_bytes, s.segments), (0, 0, 0));
    let l = a.backend().ledger();
    assert_eq!(l.holdings(), (0, 0), "segments and mapped granules left");
    assert_eq!(l.outstanding_events(), 0, "events never destroyed");
    println!(
        "threads_at_scale: {allocs} allocations, {frees} frees, {ooms} refusals; faults \
         injected: {injected:?} (kinds in the order {:?})",
        FaultKind::ALL
    );
    // Every kind of fault the configuration can meet was injected (a fixed-segment allocator
    // never maps or unmaps pages). Checked at full scale only: a debug run's few thousand
    // operations may draw no fault of a rare kind.
    if ops >= 50_000 {
        for (kind, n) in FaultKind::ALL.iter().zip(injected) {
            let applies = expandable || !matches!(kind, FaultKind::Map | FaultKind::Unmap);
            assert!(
                !applies || n > 0,
                "no {kind:?} fault injected: {injected:?}"
            );
        }
    }
}

/// A fixed-segment allocator over the fake, faults off, events held until waited for.
fn held_events(limit: u64) -> CachingAllocator<Faulty> {
    let cfg = AllocatorConfig::default()
        .with_expandable_segments(false)
        .with_memory_limit(limit);
    let a = CachingAllocator::with_config(Faulty::new(CAPACITY, 1), cfg)
        .unwrap_or_else(|e| panic!("{e}"));
    a.backend().ledger().hold_events = true;
    a
}

// Regression (found by `model_at_scale`): the out-of-memory retry waited for the blocks other
// streams used, which returned them to the pool, but asked only for new segments afterwards:
// a returned block that held the request was left unused and the request refused.
#[test]
fn the_out_of_memory_retry_reuses_the_blocks_its_wait_returned() {
    let a = held_events(24 * MIB as u64);
    let first = a.allocate(8 * MIB).unwrap_or_else(|e| panic!("{e}"));
    let second = a.allocate(8 * MIB).unwrap_or_else(|e| panic!("{e}"));
    let addr = first.addr;
    a.record_stream(&first, SIDE_STREAMS[0]);
    a.free(first);
    assert_eq!(a.pending_frees(), 1);
    // The 20 MiB segment holds `second` and 4 MiB free; no new segment fits the limit. Only
    // the pending block holds 8 MiB once its stream is done.
    let third = a
        .allocate(8 * MIB)
        .unwrap_or_else(|e| panic!("refused: {e}"));
    assert_eq!(third.addr, addr);
    let s = a.stats();
    assert_eq!(
        (s.num_ooms, s.reserved_bytes, s.allocated_bytes),
        (0, 20 * MIB as u64, 16 * MIB as u64)
    );
    assert_eq!(a.pending_frees(), 0);
    a.free(second);
    a.free(third);
    a.check_invariants().unwrap_or_else(|e| panic!("{e}"));
}

// Regression (found by `model_at_scale` in CI, seeds 1796223147230632205 and
// 1796223147230637617): the out-of-memory retry waited for the blocks other streams used and
// reused one that held the request, but when none did and nothing could be unmapped it gave up,
// although a returned block had joined the expandable segment's free tail, so that growing the
// segment now needed fewer pages than the limit had room for.
#[test]
fn the_out_of_memory_retry_grows_the_tail_its_wait_returned() {
    let cfg = AllocatorConfig::default()
        .with_expandable_segments(true)
        .with_memory_limit(16 * MIB as u64);
    let a = CachingAllocator::with_config(Faulty::new(CAPACITY, 1), cfg)
        .unwrap_or_else(|e| panic!("{e}"));
    a.backend().ledger().hold_events = true;
    // 12 MiB mapped: `first` and a 1.5 MiB free tail, of which `second` takes 1.25 MiB.
    let first = a
        .allocate(10 * MIB + MIB / 2)
        .unwrap_or_else(|e| panic!("{e}"));
    let second = a.allocate(MIB + MIB / 4).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(a.stats().reserved_bytes, 12 * MIB as u64);
    let addr = second.addr;
    a.record_stream(&second, SIDE_STREAMS[0]);
    a.free(second);
    assert_eq!(a.pending_frees(), 1);
    // 4 MiB left under the limit. A 5 MiB request needs 6 MiB more at the end while `second`
    // is pending, 4 MiB once it is back (its 1.5 MiB and the 0.25 MiB after it are free, and
    // hold no whole 2 MiB page that the retry could unmap).
    let third = a
        .allocate(5 * MIB)
        .unwrap_or_else(|e| panic!("refused: {e}"));
    assert_eq!(third.addr, addr);
    let s = a.stats();
    assert_eq!(
        (s.num_ooms, s.reserved_bytes, a.pending_frees()),
        (0, 16 * MIB as u64, 0)
    );
    a.free(first);
    a.free(third);
    a.check_invariants().unwrap_or_else(|e| panic!("{e}"));
}

// Regression (found by `model_at_scale`): a block whose event could not be recorded (or
// queried) stayed out of the pool for good, so its segment was never returned, even after the
// driver recovered: `empty_cache` now records the missing event and waits for it.
#[test]
fn a_wait_returns_the_blocks_whose_events_failed_once_the_driver_recovers() {
    for kind in [FaultKind::EventRecord, FaultKind::EventQuery] {
        let a = held_events(CAPACITY as u64);
        let b = a.allocate(5 * MIB).unwrap_or_else(|e| panic!("{e}"));
        a.record_stream(&b, SIDE_STREAMS[1]);
        let mut rates = [0; 6];
        rates[FaultKind::ALL.iter().position(|&k| k == kind).unwrap_or(0)] = 1000;
        a.backend().ledger().set_rates(rates);
        a.free(b);
        // A query happens on the next request.
        let other = a.allocate(512).unwrap_or_else(|e| panic!("{e}"));
        a.free(other);
        let failure = a
            .last_backend_error()
            .unwrap_or_else(|| panic!("{kind:?}: no failure"));
        assert_eq!(failure.op, kind.op());
        assert_eq!(a.pending_frees(), 1, "{kind:?}");
        if kind == FaultKind::EventRecord {
            // Recording still fails: the wait keeps the block out, and its segment.
            assert_eq!(a.empty_cache(), 2 * MIB as u64, "the small segment only");
            assert_eq!(a.pending_frees(), 1);
            a.backend().ledger().set_rates([0; 6]);
            assert_eq!(a.empty_cache(), 20 * MIB as u64);
        } else {
            // Queries still fail, but a wait does not query: the block and both segments go.
            assert_eq!(a.empty_cache(), 22 * MIB as u64);
            a.backend().ledger().set_rates([0; 6]);
        }
        assert_eq!(a.pending_frees(), 0);
        let s = a.stats();
        assert_eq!((s.reserved_bytes, s.active_bytes), (0, 0), "{kind:?}");
        let l = a.backend().ledger();
        assert_eq!(
            (l.holdings(), l.outstanding_events()),
            ((0, 0), 0),
            "{kind:?}"
        );
    }
}
