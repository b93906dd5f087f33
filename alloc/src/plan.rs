//! Iteration planning: offline memory planning made online for loops run under
//! `#[batch_scope]`.
//!
//! A batch scope tells the allocator where an iteration starts and ends. The allocator records
//! the large-pool requests of an iteration (sizes, and when each block was freed, in events) as
//! an [`IterationRecording`]. A later iteration of the same scope whose events follow the
//! recording (its shape signature: the same sequence of requests and frees, sizes aside) is served from a plan:
//! at each request the rest of the iteration is laid out as an offline planner would (greedy by
//! size, each block at the lowest address where it overlaps no block alive at the same time),
//! with the live blocks as obstacles, the lifetimes of the recording, and sizes predicted from
//! it (a block that had the same size as one already seen in this iteration gets that block's
//! size now), and the request is placed where that layout puts it. The plan is recomputed only
//! when a prediction turns out wrong. An iteration that leaves the recording's events (another
//! code path) stops following it and is served by best fit; its own events become the
//! recording for the next one.
//!
//! One run is recorded at a time per allocator: scoped loops on several threads sharing a device
//! (or nested scopes) interrupt each other's recordings, which then stop matching and fall back
//! to best fit; nothing is ever placed on memory that is not free.
//!
//! This module owns the recordings, the current run and the layout computation; where a block
//! lands is carved by the state (`state/planned.rs`), in the expandable segment only.

use std::collections::HashMap;

/// An iteration of a batch scope: the scope's identity and the iteration's number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IterationId {
    /// Identifies the scope (one per label and thread).
    pub scope: u64,
    /// The iteration's number within the scope.
    pub iteration: u64,
}

/// One event of an iteration: a large-pool request (its ordinal is its rank among requests)
/// or the free of the block of request `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Alloc,
    Free(u32),
}

/// Lifetime end of a block not freed within the iteration.
const NEVER: u32 = u32::MAX;

/// What one iteration did, as the plan of the next one needs it.
#[derive(Debug, Clone)]
#[doc(hidden)]
pub struct IterationRecording {
    events: Vec<Event>,
    /// Block size of each request.
    sizes: Vec<usize>,
    /// Event index of each request.
    alloc_at: Vec<u32>,
    /// Event index of each request's free ([`NEVER`] when it outlived the iteration).
    free_at: Vec<u32>,
}

/// The iteration being recorded (and, while it follows a recording, planned).
#[derive(Debug)]
struct Run {
    id: IterationId,
    events: Vec<Event>,
    sizes: Vec<usize>,
    /// Request ordinal of each live block of the run, by block id.
    ordinal_of: HashMap<u64, u32>,
    /// The recordings of the scope this run still follows (the same events so far), the most
    /// recent first; the plan follows the first.
    follows: Vec<IterationRecording>,
    /// The events of the recording the last layout followed.
    planned_for: usize,
    /// Predicted size per recorded size, learned from this run's requests.
    learned: HashMap<usize, usize>,
    /// Planned address per ordinal from the last layout (valid while predictions hold).
    planned: Vec<u64>,
    /// Sizes the last layout assumed.
    assumed: Vec<usize>,
}

/// A block alive now that a layout must avoid: its address range and, for blocks of the run,
/// its lifetime in events (`[from, to)`); other blocks are alive for the whole iteration.
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub struct Obstacle {
    pub addr: u64,
    pub size: usize,
    pub ordinal: Option<u32>,
}

/// Distinct event sequences kept per scope (an iteration's large-pool requests depend on its
/// sizes: a small batch leaves some tensors to the small pool).
const RECORDINGS_PER_SCOPE: usize = 8;

/// Scopes whose recordings are kept (a scope is one label on one thread).
const SCOPES_KEPT: usize = 64;

/// Iterations with more large-pool requests than this are not recorded: laying one out costs
/// time quadratic in its requests.
const MAX_RECORDED_REQUESTS: usize = 4096;

/// Recordings per scope and the current run.
#[derive(Debug, Default)]
#[doc(hidden)]
pub struct Planner {
    /// Per scope, the most recent first.
    recordings: HashMap<u64, Vec<IterationRecording>>,
    run: Option<Run>,
    /// Requests served from a plan, and requests of planned iterations served by best fit.
    pub planned: u64,
    pub unplanned: u64,
}

impl Planner {
    /// Notes a large-pool request of `size` bytes in iteration `id`; starts a run when it is
    /// the iteration's first. Returns the request's ordinal.
    pub fn on_request(&mut self, id: IterationId) -> u32 {
        if self.run.as_ref().is_none_or(|r| r.id != id) {
            self.finish_run();
            let follows = self.recordings.get(&id.scope).cloned().unwrap_or_default();
            self.run = Some(Run {
                id,
                events: Vec::new(),
                sizes: Vec::new(),
                ordinal_of: HashMap::new(),
                follows,
                planned_for: usize::MAX,
                learned: HashMap::new(),
                planned: Vec::new(),
                assumed: Vec::new(),
            });
        }
        let Some(run) = self.run.as_mut() else {
            return 0;
        };
        let ordinal = run.sizes.len() as u32;
        // The recordings still on this run's path.
        let at = run.events.len();
        run.follows
            .retain(|rec| rec.events.get(at) == Some(&Event::Alloc));
        ordinal
    }

    /// Where the plan puts request `ordinal` of `size` bytes: `None` when the run follows no
    /// recording. `live` are the blocks alive now (the run's own with their ordinals), `base` the
    /// lowest address a block may take, `holes` address ranges that are not usable (unmapped).
    pub fn place(
        &mut self,
        ordinal: u32,
        size: usize,
        base: u64,
        live: &[Obstacle],
        holes: &[(u64, usize)],
    ) -> Option<u64> {
        let run = self.run.as_mut()?;
        let rec = run.follows.first()?;
        let o = ordinal as usize;
        if run.planned_for != rec.events.len() {
            // Another recording leads now: learn its sizes afresh from this run's requests.
            run.learned.clear();
            for (k, &actual) in run.sizes.iter().enumerate() {
                run.learned.insert(rec.sizes[k], actual);
            }
            run.planned.clear();
            run.planned_for = rec.events.len();
        }
        run.learned.insert(rec.sizes[o], size);
        let predict = |k: usize| -> usize {
            if k == o {
                size
            } else {
                run.learned
                    .get(&rec.sizes[k])
                    .copied()
                    .unwrap_or(rec.sizes[k])
            }
        };
        // Until every size class of the rest of the iteration has been seen in this run, the
        // predictions may be far off (a larger batch than the recording's): the request then
        // goes to the lowest address where it fits, and the plan takes over once they are known.
        let unsure = (o + 1..rec.sizes.len()).any(|k| !run.learned.contains_key(&rec.sizes[k]));
        let now = run.events.len() as u32;
        if unsure {
            let mut only = vec![0; rec.sizes.len()];
            only[o] = size;
            let placed = layout(rec, &only[..=o], o, now, base, live, holes);
            run.planned.clear();
            return placed.get(o).copied();
        }
        let still_valid = run.planned.len() == rec.sizes.len()
            && (o..rec.sizes.len()).all(|k| run.assumed[k] == predict(k));
        if !still_valid {
            let assumed: Vec<usize> = (0..rec.sizes.len()).map(predict).collect();
            let planned = layout(rec, &assumed, o, now, base, live, holes);
            run.assumed = assumed;
            run.planned = planned;
        }
        run.planned.get(o).copied()
    }

    /// Notes that request `ordinal` of the current run got block `id` of `size` bytes.
    pub fn on_allocated(&mut self, ordinal: u32, id: u64, size: usize) {
        if let Some(run) = self.run.as_mut() {
            if ordinal as usize == run.sizes.len() {
                run.events.push(Event::Alloc);
                run.sizes.push(size);
                run.ordinal_of.insert(id, ordinal);
            }
        }
    }

    /// Notes the free of block `id` (a block of the current run, or any other).
    #[inline]
    pub fn on_free(&mut self, id: u64) {
        // Checked inline: every free passes here, and most happen outside any run.
        if self.run.is_some() {
            self.on_free_in_run(id);
        }
    }

    /// [`Self::on_free`] while an iteration is being recorded or followed.
    #[inline(never)]
    fn on_free_in_run(&mut self, id: u64) {
        let Some(run) = self.run.as_mut() else {
            return;
        };
        let Some(ordinal) = run.ordinal_of.remove(&id) else {
            return;
        };
        let event = Event::Free(ordinal);
        let at = run.events.len();
        run.follows.retain(|rec| rec.events.get(at) == Some(&event));
        run.events.push(event);
    }

    /// The ordinal of live block `id` in the current run, if it is one of the run's.
    pub fn ordinal(&self, id: u64) -> Option<u32> {
        self.run.as_ref()?.ordinal_of.get(&id).copied()
    }

    /// Ends iteration `id`: its events become the recording of its scope.
    pub fn end_iteration(&mut self, id: IterationId) {
        if self.run.as_ref().is_some_and(|r| r.id == id) {
            self.finish_run();
        }
    }

    /// Stops planning the current run (a request could not be placed where planned).
    pub fn deviate(&mut self) {
        if let Some(run) = self.run.as_mut() {
            run.follows.clear();
        }
    }

    /// Whether the current run follows a recording.
    pub fn following(&self) -> bool {
        self.run.as_ref().is_some_and(|r| !r.follows.is_empty())
    }

    fn finish_run(&mut self) {
        let Some(run) = self.run.take() else { return };
        if run.sizes.is_empty() || run.sizes.len() > MAX_RECORDED_REQUESTS {
            return;
        }
        let n = run.sizes.len();
        let (mut alloc_at, mut free_at) = (vec![0u32; n], vec![NEVER; n]);
        let mut ordinal = 0usize;
        for (at, e) in run.events.iter().enumerate() {
            match *e {
                Event::Alloc => {
                    alloc_at[ordinal] = at as u32;
                    ordinal += 1;
                }
                Event::Free(k) => free_at[k as usize] = at as u32,
            }
        }
        let recording = IterationRecording {
            events: run.events,
            sizes: run.sizes,
            alloc_at,
            free_at,
        };
        if self.recordings.len() >= SCOPES_KEPT && !self.recordings.contains_key(&run.id.scope) {
            // Forget some other scope (scopes come and go with threads and `scope::reset`).
            if let Some(&other) = self.recordings.keys().next() {
                self.recordings.remove(&other);
            }
        }
        let kept = self.recordings.entry(run.id.scope).or_default();
        kept.retain(|r| r.events != recording.events);
        kept.insert(0, recording);
        kept.truncate(RECORDINGS_PER_SCOPE);
    }
}

/// Lays out requests `from..` of `rec` with sizes `sizes` (greedy by size: each at the lowest
/// address from `base` where it overlaps nothing alive at the same time: the `live` blocks, the
/// `holes`, and the requests placed before it). Returns the address per ordinal (0 for the
/// ordinals before `from`, which are placed already).
fn layout(
    rec: &IterationRecording,
    sizes: &[usize],
    from: usize,
    now: u32,
    base: u64,
    live: &[Obstacle],
    holes: &[(u64, usize)],
) -> Vec<u64> {
    // (lifetime start, end, addr, size) of what is fixed: live blocks and holes.
    let mut fixed: Vec<(u32, u32, u64, u64)> = live
        .iter()
        .map(|o| match o.ordinal {
            Some(k) => (now, rec.free_at[k as usize], o.addr, o.size as u64),
            None => (0, NEVER, o.addr, o.size as u64),
        })
        .collect();
    fixed.extend(holes.iter().map(|&(a, s)| (0, NEVER, a, s as u64)));
    let mut order: Vec<usize> = (from..sizes.len()).collect();
    order.sort_by(|&a, &b| sizes[b].cmp(&sizes[a]).then(a.cmp(&b)));
    let mut planned = vec![0u64; sizes.len()];
    let mut placed: Vec<(u32, u32, u64, u64)> = Vec::with_capacity(order.len());
    let mut conflicts: Vec<(u64, u64)> = Vec::new();
    for k in order {
        let (start, end) = (rec.alloc_at[k].max(now), rec.free_at[k]);
        let size = sizes[k] as u64;
        conflicts.clear();
        conflicts.extend(
            fixed
                .iter()
                .chain(placed.iter())
                .filter(|&&(s, e, _, _)| s < end && start < e)
                .map(|&(_, _, a, sz)| (a, a + sz)),
        );
        conflicts.sort_unstable();
        let mut at = base;
        for &(lo, hi) in &conflicts {
            if hi <= at {
                continue;
            }
            if lo >= at + size {
                break;
            }
            at = hi;
        }
        planned[k] = at;
        placed.push((start, end, at, size));
    }
    planned
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A(4) B(2) free A, C(4) free B free C: A and C never live together, B overlaps both.
    fn recording() -> IterationRecording {
        let mut planner = Planner::default();
        let id = IterationId {
            scope: 1,
            iteration: 1,
        };
        for (id_, size) in [(10, 4), (11, 2)] {
            let o = planner.on_request(id);
            planner.on_allocated(o, id_, size);
        }
        planner.on_free(10);
        let o = planner.on_request(id);
        planner.on_allocated(o, 12, 4);
        planner.on_free(11);
        planner.on_free(12);
        planner.end_iteration(id);
        planner.recordings[&1][0].clone()
    }

    #[test]
    fn the_layout_shares_addresses_between_blocks_that_never_live_together() {
        let rec = recording();
        assert_eq!(rec.alloc_at, vec![0, 1, 3]);
        assert_eq!(rec.free_at, vec![2, 4, 5]);
        let at = layout(&rec, &rec.sizes, 0, 0, 100, &[], &[]);
        // Largest first: A at the base, C there too (A is gone by then), B above both.
        assert_eq!(at, vec![100, 104, 100]);
        // A live block of another owner at the base pushes everything above it.
        let other = Obstacle {
            addr: 100,
            size: 3,
            ordinal: None,
        };
        assert_eq!(
            layout(&rec, &rec.sizes, 0, 0, 100, &[other], &[]),
            vec![103, 107, 103]
        );
    }

    #[test]
    fn an_iteration_follows_a_recording_while_its_events_match() {
        let rec = recording();
        let mut planner = Planner::default();
        planner.recordings.insert(1, vec![rec]);
        let id = IterationId {
            scope: 1,
            iteration: 2,
        };
        // Twice the sizes: the first request goes to the lowest free address until every size
        // class is seen, then the plan places the rest.
        let o = planner.on_request(id);
        assert!(planner.following());
        assert_eq!(planner.place(o, 8, 0, &[], &[]), Some(0));
        planner.on_allocated(o, 20, 8);
        let a = Obstacle {
            addr: 0,
            size: 8,
            ordinal: Some(0),
        };
        let o = planner.on_request(id);
        assert_eq!(planner.place(o, 4, 0, &[a], &[]), Some(8));
        planner.on_allocated(o, 21, 4);
        // A free the recording does not have: the plan is left.
        planner.on_free(21);
        assert!(!planner.following());
        assert_eq!(planner.place(2, 8, 0, &[], &[]), None);
    }
}
