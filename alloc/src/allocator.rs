//! The caching allocator: its public API and the order in which it tries things. Every
//! request goes through [`CachingAllocator::malloc`], PyTorch's name for the one chain of
//! fallbacks — a cached free block, a new segment, the cache released and the segment asked
//! for again, a fixed segment when the expandable one cannot grow, the pressure handlers, then
//! the out-of-memory error — each step a small function. The bookkeeping it drives is the
//! state's (`state/`), the decisions are `policy.rs`'s.

use super::plan::IterationId;
use super::policy::{self, OomFacts, ADDR_LIMIT};
use super::pressure::PressureHandlers;
use super::state::expandable::{self, Resolved};
use super::state::{KeepAlive, KeptAlive, State};
use super::state_lock::{StateGuard, StateLock};
use super::trace::{RequestOrigin, RAW_OP};
use super::{
    AllocatorConfig, Backend, BackendFailure, ConfigSource, DetailedStats, ExpandableSegments,
    MemorySnapshot, MemoryStats, OomCause, OomContext, OutOfMemory, PoolKind, PressureHandlerId,
    SegmentMode, SetupError, StreamId, Trace, OOM_LARGEST_LIVE,
};
use std::fmt;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Caching allocator over a backend: see the [module documentation](super) for its rules.
pub struct CachingAllocator<B: Backend + ?Sized> {
    /// Identity stamped on every block handed out (see [`Block`]).
    id: u64,
    config: AllocatorConfig,
    limit: Option<u64>,
    state: StateLock<State>,
    handlers: PressureHandlers,
    name: String,
    /// The large pool's segments.
    segment_mode: SegmentMode,
    /// Why the large pool uses fixed segments (`None`: it has an expandable segment).
    fixed_segments_reason: Option<String>,
    /// Where `config` came from, for the out-of-memory advice.
    config_source: ConfigSource,
    /// Whether the trace records, readable without the lock: a recording call reads the clock
    /// before it takes the lock (see [`Self::early_read`]). Written under the lock whenever
    /// the ring is replaced.
    recording: AtomicBool,
    backend: B,
}

/// The allocator type a device (`vramguard::Device`) holds.
pub type DeviceAllocator = CachingAllocator<Box<dyn Backend>>;

impl KeepAlive for std::sync::Arc<DeviceAllocator> {
    fn keep_alive(&self) -> KeptAlive {
        self.clone()
    }
}

/// A block handed out by the allocator (no RAII; see `vramguard::device::Allocation`).
#[derive(Debug)]
pub struct Block {
    /// Device address.
    pub addr: u64,
    /// Block size: the request rounded to the allocator's granularity.
    pub size: usize,
    /// Size requested.
    pub requested: usize,
    /// Unique id, never reused within one allocator.
    pub id: u64,
    /// The stream the block was allocated on: once freed, it is reused in that stream's order.
    pub stream: StreamId,
    slot: u32,
    /// Whether the block keeps a holder alive ([`State::hold`]): a device's allocation.
    held: bool,
    /// The allocator that handed the block out ([`CachingAllocator::free`] refuses others).
    owner: u64,
}

/// Source of [`CachingAllocator`] identities, so a block is only ever freed to its own.
static NEXT_ALLOCATOR_ID: AtomicU64 = AtomicU64::new(1);

/// One request, as the policy sees it.
#[derive(Debug, Clone, Copy)]
struct Request {
    /// Bytes asked for.
    requested: usize,
    /// The block size it gets.
    size: usize,
    pool: PoolKind,
    /// Index of the request's stream in the state's stream list.
    stream: u32,
}

impl<B: Backend> CachingAllocator<B> {
    /// Creates an allocator with the default settings drawing from `backend` (expandable
    /// segments where the backend can map pages, fixed segments otherwise).
    pub fn new(backend: B) -> Self {
        let name = backend.name();
        // `Auto` never fails: every reason it cannot use expandable segments is a fallback.
        let resolved = expandable::resolve(ExpandableSegments::Auto, &backend, None, &name)
            .unwrap_or_else(|e| Resolved {
                expandable: None,
                mode: SegmentMode::FixedUnavailable,
                reason: Some(e.to_string()),
            });
        Self::build(backend, AllocatorConfig::default(), None, name, resolved)
    }

    /// Creates an allocator with `config`; reserves `config.preallocate` bytes at once.
    ///
    /// Fails on a setting that cannot be used: an invalid value, `memory_fraction` on a device
    /// of unknown capacity, `expandable_segments:true` on a backend that cannot map pages or
    /// whose self-test fails ([`SetupError::ExpandableSelfTestFailed`]), or a failed
    /// preallocation. Under the default `expandable_segments:auto` those expandable-segment
    /// failures fall back to fixed segments instead ([`Self::fixed_segments_reason`]).
    pub fn with_config(backend: B, config: AllocatorConfig) -> Result<Self, SetupError> {
        config.validate()?;
        let name = backend.name();
        let limit = config.limit_bytes(backend.capacity(), &name)?;
        let preallocate = config.preallocate;
        let resolved = expandable::resolve(config.expandable_segments, &backend, limit, &name)?;
        let this = Self::build(backend, config, limit, name, resolved);
        if preallocate > 0 {
            this.reserve(preallocate)
                .map_err(|e| SetupError::PreallocateFailed {
                    bytes: preallocate,
                    message: e.to_string(),
                })?;
        }
        Ok(this)
    }

    fn build(
        backend: B,
        config: AllocatorConfig,
        limit: Option<u64>,
        name: String,
        resolved: Resolved,
    ) -> Self {
        let state = State::new(
            config.trace_capacity,
            resolved.expandable,
            config.max_split_size,
        );
        let recording = state.trace_recording();
        Self {
            id: NEXT_ALLOCATOR_ID.fetch_add(1, Ordering::Relaxed),
            state: StateLock::new(state),
            config,
            limit,
            handlers: PressureHandlers::default(),
            name,
            segment_mode: resolved.mode,
            fixed_segments_reason: resolved.reason,
            config_source: ConfigSource::Code,
            recording: AtomicBool::new(recording),
            backend,
        }
    }
}

impl<B: Backend + ?Sized> CachingAllocator<B> {
    /// Whether the large pool has an expandable segment (what [`ExpandableSegments::Auto`]
    /// chose, or `On`); `false`: fixed segments only.
    pub fn uses_expandable_segments(&self) -> bool {
        self.segment_mode == SegmentMode::Expandable
    }

    /// The address range reserved for the expandable segment (`None` with fixed segments only):
    /// its pages are mapped from the start of the range as the large pool grows.
    pub fn expandable_range(&self) -> Option<std::ops::Range<u64>> {
        self.state.lock().expandable_range()
    }

    /// Which segments the large pool uses, and for fixed ones whether by configuration or
    /// because expandable segments are unavailable.
    pub fn segment_mode(&self) -> SegmentMode {
        self.segment_mode
    }

    /// Why this allocator uses fixed segments (`None` when it uses expandable segments):
    /// `expandable_segments:false`, a backend that cannot map pages, or — under `auto` — a
    /// failed self-test or address-space reservation (those also log a warning).
    pub fn fixed_segments_reason(&self) -> Option<&str> {
        self.fixed_segments_reason.as_deref()
    }

    /// Where this allocator's settings came from (`VRAMGUARD_ALLOC_CONF` for the process-wide
    /// devices, code otherwise).
    pub fn config_source(&self) -> ConfigSource {
        self.config_source
    }

    /// Marks the settings as read from `VRAMGUARD_ALLOC_CONF`.
    #[doc(hidden)]
    pub fn configured_from_environment(mut self) -> Self
    where
        B: Sized,
    {
        self.config_source = ConfigSource::Environment;
        self
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The settings this allocator runs with.
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    /// The memory limit in bytes, if one is configured.
    pub fn memory_limit(&self) -> Option<u64> {
        self.limit
    }

    /// The block size a request of `bytes` bytes gets (`None` if it overflows).
    pub fn rounded_size(&self, bytes: usize) -> Option<usize> {
        policy::rounded_size(bytes, self.config.divisions_for(bytes))
    }

    /// Allocates a block of at least `bytes` bytes, through the allocator's one chain of
    /// fallbacks (`malloc`, as PyTorch names it): a cached free block, else a new segment, else
    /// the same after releasing the cache, else the same after the pressure handlers freed
    /// memory, else [`OutOfMemory`]. The caller's line is the block's
    /// [`AllocOrigin`](super::AllocOrigin) (unless a tensor op of this thread is running: then
    /// that op's).
    #[track_caller]
    pub fn allocate(&self, bytes: usize) -> Result<Block, OutOfMemory> {
        self.malloc(
            bytes,
            StreamId::DEFAULT,
            &mut RequestOrigin::current(Location::caller(), RAW_OP),
            None,
        )
        .map_err(|oom| *oom)
    }

    /// Allocates like [`CachingAllocator::allocate`], for use on `stream`: the block comes from
    /// that stream's pool (blocks freed on it are reused in its order, with no wait), and
    /// returns there when freed. The expandable segment serves the default stream; other
    /// streams get fixed segments.
    #[track_caller]
    pub fn allocate_on(&self, bytes: usize, stream: StreamId) -> Result<Block, OutOfMemory> {
        self.malloc(
            bytes,
            stream,
            &mut RequestOrigin::current(Location::caller(), RAW_OP),
            None,
        )
        .map_err(|oom| *oom)
    }

    /// Serves one request: the chain of fallbacks, PyTorch's `malloc`. For `bytes` bytes on
    /// `stream` (the block comes from that stream's pool), whose origin the caller knows; the
    /// block keeps `holder` alive while it lives (a device's allocation: its allocator). In
    /// order:
    ///
    /// 1. a free block of the request's pool: the merged block whose merge the cached pair
    ///    deferred, else the best fit among the cached free blocks
    ///    (`take_free_block`);
    /// 2. garbage collection, then a new segment, or pages mapped at the end of the
    ///    expandable segment (`take_from_new_segment`);
    /// 3. the cache released and the segment asked for again (`take_after_release`);
    /// 4. a fixed segment when the expandable segment cannot grow
    ///    (`take_from_fixed_segment`);
    /// 5. the pressure handlers, and when they freed memory, steps 1–4 once more
    ///    (`take_after_pressure_handlers`);
    /// 6. [`OutOfMemory`], which says why.
    ///
    /// Step 1 is the cached pair's whole path; every later step is out of line, so the cached
    /// path carries none of their code (written as one loop over the steps instead, the
    /// cached path paid for the loop's state: `docs/perf-notes.md`, "The chain of fallbacks in
    /// one function"). The function is inlined into its callers, with the error
    /// boxed and the origin by reference: the block then stays in registers and the origin
    /// where its caller built it. Moved through memory instead (an argument by value, a result
    /// that a call also writes), each was stored a word at a time and copied 16 bytes at a
    /// time, and a load wider than the store it reads waits until that store reaches the cache.
    #[inline(always)]
    #[doc(hidden)]
    pub fn malloc(
        &self,
        bytes: usize,
        stream: StreamId,
        origin: &mut RequestOrigin,
        holder: Option<&dyn KeepAlive>,
    ) -> Result<Block, Box<OutOfMemory>> {
        let read = self.early_read();
        let mut st = self.state.lock();
        st.start_request();
        let Some(req) = self.request(bytes, st.stream_index(stream)) else {
            return Err(self.fail_boxed(&mut st, bytes, usize::MAX));
        };
        let found = match self.take_free_block(&mut st, &req) {
            Some(slot) => Some(slot),
            None => self
                .take_from_new_segment(&mut st, &req)
                .or_else(|| self.take_after_release(&mut st, &req))
                .or_else(|| self.take_from_fixed_segment(&mut st, &req))
                .or_else(|| self.take_after_pressure_handlers(&mut st, &req)),
        };
        let Some(slot) = found else {
            return Err(self.fail_boxed(&mut st, bytes, req.size));
        };
        Ok(self.hand_out(&mut st, slot, &req, origin, holder, read))
    }

    /// The state, locked, with the merges the cached pair deferred performed (the `deferred`
    /// module): what every path that changes blocks takes, but the pair's own. Readers
    /// (statistics, snapshots, the invariant check) take the plain lock and show a deferred
    /// merge as the merged block.
    #[inline]
    fn locked(&self) -> StateGuard<'_, State> {
        let mut st = self.state.lock();
        st.settle_deferred();
        st
    }

    /// The clock read for the event of a call that is about to take the lock, when the trace
    /// records (`None` otherwise, or when recording started since: the event is then stamped
    /// under the lock). Read outside the lock, the counter costs a recording pair less time.
    #[inline(always)]
    fn early_read(&self) -> Option<u64> {
        self.recording
            .load(Ordering::Relaxed)
            .then(super::trace::read_stamp)
    }

    /// Step 5 of [`Self::malloc`]: the pressure handlers run ([`Self::run_pressure_handlers`]);
    /// when they freed memory, the request goes through steps 1–4 once more.
    #[cold]
    #[inline(never)]
    fn take_after_pressure_handlers(
        &self,
        st: &mut StateGuard<'_, State>,
        req: &Request,
    ) -> Option<u32> {
        if !self.run_pressure_handlers(st, req) {
            return None;
        }
        self.take_free_block(st, req)
            .or_else(|| self.take_from_new_segment(st, req))
            .or_else(|| self.take_after_release(st, req))
            .or_else(|| self.take_from_fixed_segment(st, req))
    }

    /// The pressure handlers run with the lock released (unless this request is one of
    /// theirs); whether they freed anything, so that the request is tried again.
    #[cold]
    #[inline(never)]
    fn run_pressure_handlers(&self, st: &mut StateGuard<'_, State>, req: &Request) -> bool {
        if PressureHandlers::in_handler() {
            return false;
        }
        let freed = StateGuard::unlocked(st, || self.handlers.run(req.size));
        // Others may have freed meanwhile, their merges deferred.
        st.settle_deferred();
        freed > 0
    }

    /// [`Self::fail`], boxed for the allocation path (see [`Self::malloc`]).
    #[cold]
    #[inline(never)]
    fn fail_boxed(&self, st: &mut State, requested: usize, rounded: usize) -> Box<OutOfMemory> {
        Box::new(self.fail(st, requested, rounded))
    }

    /// Allocates like [`CachingAllocator::allocate`], for a request made in `iteration` of a
    /// batch scope: with `iteration_planning` (the default) and an expandable segment, a
    /// large-pool request of an iteration that follows the recording of the scope's previous one
    /// is placed where the plan puts it (see the `plan` module); any other is served as usual.
    #[track_caller]
    pub fn allocate_in(
        &self,
        bytes: usize,
        iteration: Option<IterationId>,
    ) -> Result<Block, OutOfMemory> {
        let mut origin = RequestOrigin::current(Location::caller(), RAW_OP);
        self.allocate_at(bytes, iteration, &mut origin, None)
            .map_err(|oom| *oom)
    }

    /// [`CachingAllocator::allocate_in`] for a request whose origin the caller knows (a
    /// tensor's shape, a device's caller); the block keeps `holder` alive while it lives.
    #[inline(always)]
    #[doc(hidden)]
    pub fn allocate_at(
        &self,
        bytes: usize,
        iteration: Option<IterationId>,
        origin: &mut RequestOrigin,
        holder: Option<&dyn KeepAlive>,
    ) -> Result<Block, Box<OutOfMemory>> {
        match iteration.filter(|_| self.config.iteration_planning) {
            None => self.malloc(bytes, StreamId::DEFAULT, origin, holder),
            Some(id) => self.allocate_planned(bytes, id, origin, holder),
        }
    }

    /// [`Self::allocate_at`] for a request made in iteration `id` with planning on.
    #[inline(always)]
    fn allocate_planned(
        &self,
        bytes: usize,
        id: IterationId,
        origin: &mut RequestOrigin,
        holder: Option<&dyn KeepAlive>,
    ) -> Result<Block, Box<OutOfMemory>> {
        let planned = self
            .request(bytes, 0)
            .filter(|req| req.pool == PoolKind::Large && self.uses_expandable_segments());
        let Some(req) = planned else {
            return self.malloc(bytes, StreamId::DEFAULT, origin, holder);
        };
        let read = self.early_read();
        let mut st = self.locked();
        st.start_request();
        st.process_pending(&self.backend, &self.name);
        let ordinal = st.planner().on_request(id);
        let placed = st.take_planned(&self.backend, self.limit, &self.name, req.size, ordinal);
        if let Some(slot) = placed {
            st.planner().planned += 1;
            let block = self.hand_out(&mut st, slot, &req, origin, holder, read);
            st.planner().on_allocated(ordinal, block.id, req.size);
            return Ok(block);
        }
        if st.planner().following() {
            st.planner().unplanned += 1;
            st.planner().deviate();
        }
        drop(st);
        let block = self.malloc(bytes, StreamId::DEFAULT, origin, holder)?;
        self.state
            .lock()
            .planner()
            .on_allocated(ordinal, block.id, req.size);
        Ok(block)
    }

    /// Ends `iteration` of a batch scope: what it allocated becomes the recording the scope's
    /// next iteration is planned from.
    pub fn end_iteration(&self, iteration: IterationId) {
        self.state.lock().planner().end_iteration(iteration);
    }

    /// Requests served by the cached pair's path: from a free block whose merge with its
    /// free neighbour was deferred when it was freed, resized in place instead of merged and
    /// split again (the `alloc` module, coalescing). Blocks, addresses and statistics are
    /// those of the eager merge; this count only says how often the shortcut was taken.
    pub fn deferred_reuses(&self) -> u64 {
        self.state.lock().deferred_reuses()
    }

    /// Entries of the trace ring's label table.
    #[cfg(test)]
    #[doc(hidden)]
    pub fn trace_label_entries(&self) -> usize {
        self.state.lock().trace_label_entries()
    }

    /// Makes every free merge at once (the tests' reference for deferred merges).
    #[cfg(test)]
    #[doc(hidden)]
    pub fn merge_eagerly(&self) {
        self.state.lock().merge_eagerly();
    }

    /// Large-pool requests of batch-scope iterations placed by a plan, and those of planned
    /// iterations that left it and were served by best fit.
    pub fn planning_counts(&self) -> (u64, u64) {
        let mut st = self.state.lock();
        let planner = st.planner();
        (planner.planned, planner.unplanned)
    }

    /// The request's block size and pool, on stream index `stream` (`None` when the size
    /// overflows).
    fn request(&self, bytes: usize, stream: u32) -> Option<Request> {
        let size = self
            .rounded_size(bytes)
            .filter(|&s| (s as u64) < ADDR_LIMIT)?;
        Some(Request {
            requested: bytes,
            size,
            pool: policy::pool_for(size),
            stream,
        })
    }

    /// Step 1 of [`Self::malloc`]: a free block of the request's pool — the merged block whose
    /// merge the cached pair deferred (taken in place: the `deferred` module), else, once that
    /// merge is performed and the blocks other streams finished with are back in the pool, the
    /// best fit.
    #[inline(always)]
    fn take_free_block(&self, st: &mut State, req: &Request) -> Option<u32> {
        let max_split = self.config.max_split_size;
        if let Some(slot) = st.take_deferred(req.pool, req.stream, req.size, max_split) {
            return Some(slot);
        }
        st.settle_pool(req.pool);
        st.process_pending(&self.backend, &self.name);
        self.take_cached(st, req)
    }

    /// The best fit among the cached free blocks of the request's pool.
    #[inline]
    fn take_cached(&self, st: &mut State, req: &Request) -> Option<u32> {
        st.take_free(req.pool, req.stream, req.size, self.config.max_split_size)
    }

    /// Step 2 of [`Self::malloc`]: garbage collection, then room for the request at the end of
    /// the expandable segment (large pool) or in a new fixed segment. The first step past the
    /// cache: out of line (the cached path carries none of it), and the merges the cached pair
    /// deferred are performed first.
    #[cold]
    #[inline(never)]
    fn take_from_new_segment(&self, st: &mut State, req: &Request) -> Option<u32> {
        st.settle_deferred();
        self.collect_garbage(st);
        let grown = if self.grows_expandable(st, req) {
            st.expand(&self.backend, self.limit, &self.name, req.size)
        } else {
            self.fixed_segments(st, req)
        };
        grown.then(|| self.take_cached(st, req)).flatten()
    }

    /// Step 3 of [`Self::malloc`]: releases the cache (nothing to do when it held nothing) and
    /// asks for room again.
    #[cold]
    #[inline(never)]
    fn take_after_release(&self, st: &mut State, req: &Request) -> Option<u32> {
        let pending = st.pending_frees();
        let released = st.release_cached(&self.backend, &self.name);
        // The release waited for the blocks other streams used: those are back in the pool,
        // and one may hold the request without any new segment.
        let returned = st.pending_frees() < pending;
        if returned {
            if let Some(slot) = self.take_cached(st, req) {
                return Some(slot);
            }
        }
        // A returned block may also have joined the expandable segment's free tail, so that
        // growing it now needs fewer pages than before the wait: grow again even when nothing
        // was unmapped.
        if released == 0 && !returned {
            return None;
        }
        st.count_alloc_retry();
        let grown = (self.grows_expandable(st, req)
            && st.expand(&self.backend, self.limit, &self.name, req.size))
            || self.fixed_segments(st, req);
        grown.then(|| self.take_cached(st, req)).flatten()
    }

    /// Step 4 of [`Self::malloc`]: when the expandable segment cannot grow (its range is used
    /// up, or the device refuses pages), plain segments serve the large pool.
    #[cold]
    #[inline(never)]
    fn take_from_fixed_segment(&self, st: &mut State, req: &Request) -> Option<u32> {
        (self.grows_expandable(st, req) && self.fixed_segments(st, req))
            .then(|| self.take_cached(st, req))
            .flatten()
    }

    /// Whether the request's pool grows by mapping pages into the expandable segment (the
    /// large pool of the default stream).
    fn grows_expandable(&self, st: &State, req: &Request) -> bool {
        req.pool == PoolKind::Large && req.stream == 0 && st.has_expandable()
    }

    /// A fixed segment of the preferred size for the request, else one of exactly its size.
    fn fixed_segments(&self, st: &mut State, req: &Request) -> bool {
        let preferred = policy::segment_size(req.pool, req.size, self.config.max_split_size);
        self.fixed_segment(st, req.pool, req.stream, preferred)
            || (preferred != req.size && self.fixed_segment(st, req.pool, req.stream, req.size))
    }

    fn fixed_segment(&self, st: &mut State, pool: PoolKind, stream: u32, bytes: usize) -> bool {
        st.new_segment(&self.backend, self.limit, &self.name, pool, stream, bytes)
    }

    /// Garbage collection as PyTorch's `garbage_collect_cached_blocks`: once reserved memory
    /// exceeds `garbage_collection_threshold × limit` (the capacity when no limit is set),
    /// the oldest fully free fixed segments of the large pool are released
    /// ([`State::collect_garbage`] says which).
    fn collect_garbage(&self, st: &mut State) {
        let bound = self
            .limit
            .or_else(|| self.backend.capacity().map(|c| c as u64));
        let (Some(t), Some(bound)) = (self.config.garbage_collection_threshold, bound) else {
            return;
        };
        let threshold = (bound as f64 * t) as u64;
        st.collect_garbage(&self.backend, &self.name, threshold);
    }

    /// The block `slot` serves `req` with, handed out ([`State::hand_out`]).
    #[inline(always)]
    fn hand_out(
        &self,
        st: &mut State,
        slot: u32,
        req: &Request,
        origin: &mut RequestOrigin,
        holder: Option<&dyn KeepAlive>,
        read: Option<u64>,
    ) -> Block {
        let (addr, id, stream) = st.hand_out(
            slot,
            req.pool,
            req.stream,
            req.size,
            req.requested,
            origin,
            holder,
            read,
        );
        Block {
            addr,
            size: req.size,
            requested: req.requested,
            id,
            stream,
            slot,
            held: holder.is_some(),
            owner: self.id,
        }
    }

    /// Counts the failure and describes it: a backend failure met while serving the request
    /// (not a shortage) is the cause when there was one.
    fn fail(&self, st: &mut State, requested: usize, rounded: usize) -> OutOfMemory {
        let backend_error = st.count_oom(rounded);
        let s = st.snapshot_stats();
        // What could still be reserved: the device's free memory, capped by the limit.
        let under_limit = self.limit.map(|l| l.saturating_sub(s.reserved_bytes));
        let device_free = match (self.backend.free_memory().map(|b| b as u64), under_limit) {
            (Some(d), Some(l)) => d.min(l),
            (d, l) => d.or(l).unwrap_or(0),
        };
        // Judged from the request's own pool: free slivers of small-pool segments cannot hold
        // a large request (nor the other way round), so they do not make a full device read
        // as fragmentation.
        let pool = st.counters().pool(policy::pool_for(rounded));
        let pool_cached_free = pool.reserved_bytes.current - pool.active_bytes.current;
        let cause = if backend_error.is_some() {
            OomCause::BackendFailed
        } else {
            policy::oom_cause(OomFacts {
                rounded: rounded as u64,
                cached_free: pool_cached_free,
                device_free,
                reserved: s.reserved_bytes,
                limit: self.limit,
                range_used_up: st.range_used_up(),
            })
        };
        OutOfMemory {
            device: self.name.as_str().into(),
            requested,
            rounded,
            capacity: self.backend.capacity().map(|c| c as u64),
            limit: self.limit,
            allocated: s.allocated_bytes,
            reserved: s.reserved_bytes,
            cached_free: pool_cached_free,
            largest_free_block: st.largest_usable(rounded, self.config.max_split_size),
            device_free,
            cause,
            segments: self.segment_mode,
            config_source: self.config_source,
            context: Box::new(OomContext {
                largest_live: st.largest_live(OOM_LARGEST_LIVE),
                backend_error,
            }),
        }
    }

    /// Returns a block to the cache, merging it with free neighbours.
    ///
    /// A block handed out by another allocator (another device, or one already dropped) is
    /// refused with a logged error and left alone: freeing it here would mark a live block of
    /// this allocator free and hand its memory out twice.
    ///
    /// A block that other streams were recorded as using ([`CachingAllocator::record_stream`])
    /// stays out of the pool until an event recorded now on each of those streams completes
    /// (checked on later allocations, waited for before the cache is released).
    #[inline]
    pub fn free(&self, block: Block) {
        // A block handed out here holds nothing (only a device's allocations do), so nothing
        // comes back to be dropped.
        let kept_alive = self.free_by_ref(&block);
        debug_assert!(kept_alive.is_none());
    }

    /// [`Self::free`] of a block its caller keeps no use for afterwards (an `Allocation`
    /// being dropped): by reference, so the block is not moved on the way. Returns what the
    /// allocator's held blocks kept alive once the last of them is freed (`hold`),
    /// for the caller to drop after this call, when nothing refers into the allocator (it may
    /// be the allocator's last reference).
    #[inline]
    #[must_use = "the returned reference may be the allocator's last: drop it after the call"]
    #[doc(hidden)]
    pub fn free_by_ref(&self, block: &Block) -> Option<KeptAlive> {
        let read = self.early_read();
        let mut st = self.state.lock();
        if !self.owns(&st, block) {
            self.refuse_free(block);
            return None;
        }
        st.free(
            block.slot,
            block.size,
            block.requested,
            block.id,
            block.held,
            read,
            &self.backend,
            &self.name,
        )
    }

    /// Logs the refusal of a block another allocator handed out (out of line, as it is rare).
    #[cold]
    #[inline(never)]
    fn refuse_free(&self, block: &Block) {
        crate::diagnostics::error(&format!(
            "{}: refused to free block {:#x} ({} bytes): another allocator handed it out",
            self.name, block.addr, block.size
        ));
    }

    /// Whether `block` is a live block this allocator handed out.
    #[inline]
    fn owns(&self, st: &State, block: &Block) -> bool {
        block.owner == self.id && st.owns(block.slot, block.addr, block.id, block.size)
    }

    /// Records that work queued on `stream` uses `block` (PyTorch's `record_stream`): when
    /// the block is freed, the allocator records an event on `stream` and keeps the block out of
    /// the pool until that work is done, so it is not handed out while the stream may still
    /// read or write it. Nothing to do for the block's own stream, whose order already protects
    /// it. A block of another allocator is ignored (logged).
    pub fn record_stream(&self, block: &Block, stream: StreamId) {
        if stream == block.stream {
            return;
        }
        let mut st = self.locked();
        if !self.owns(&st, block) {
            crate::diagnostics::error(&format!(
                "{}: record_stream on block {:#x}, which this allocator did not hand out",
                self.name, block.addr
            ));
            return;
        }
        st.record_stream(block.slot, stream);
    }

    /// The most recent failure of a backend call that was not a shortage of memory (a failed
    /// free, unmap or event query; a failed segment allocation also ends up in the
    /// [`OutOfMemory`] of its request), if any. The books stay as they were when a call fails:
    /// memory the backend could not take back is still counted as reserved.
    pub fn last_backend_error(&self) -> Option<BackendFailure> {
        self.state.lock().last_failure()
    }

    /// Blocks freed while other streams may still use them, not yet back in the pool.
    pub fn pending_frees(&self) -> usize {
        self.state.lock().pending_frees()
    }

    /// Current statistics.
    pub fn stats(&self) -> MemoryStats {
        self.state.lock().snapshot_stats()
    }

    /// Resets peaks to the current values.
    pub fn reset_peak_stats(&self) {
        self.state.lock().reset_peaks();
    }

    /// PyTorch's statistics (`torch.cuda.memory_stats()`): per pool and in total, current,
    /// peak, allocated and freed; [`DetailedStats::to_map`] gives them under PyTorch's keys.
    pub fn detailed_stats(&self) -> DetailedStats {
        self.state.lock().detailed_stats()
    }

    /// The statistics as the text table PyTorch users know from `torch.cuda.memory_summary()`.
    pub fn memory_summary(&self) -> String {
        self.detailed_stats().summary(&self.name)
    }

    /// Resets the accumulated counts (`allocated`/`freed` of every statistic, retries, OOMs,
    /// backend calls) to 0, as PyTorch's `reset_accumulated_memory_stats`.
    pub fn reset_accumulated_stats(&self) {
        self.state.lock().reset_accumulated();
    }

    /// Returns every cached, fully free segment to the backend; returns the bytes released.
    /// Frees nothing that is still allocated.
    pub fn empty_cache(&self) -> u64 {
        self.locked().release_cached(&self.backend, &self.name)
    }

    /// Preallocates one large-pool segment of `bytes` (rounded to 512) and keeps it cached, so
    /// later requests above 1 MiB are carved from it without backend calls. Returns the bytes
    /// reserved. It is a fixed segment even when the allocator has an expandable one (whose
    /// pages are mapped only as the pool grows), so it stays reserved until released. With
    /// `max_split_size` set, a segment at least that large serves only requests close to its
    /// size (it is not split). The segment is cache like any other: `empty_cache` releases it
    /// while it is unused, and so does the out-of-memory path when a request needs a segment
    /// of another shape.
    pub fn reserve(&self, bytes: usize) -> Result<u64, OutOfMemory> {
        let size = policy::round_size(bytes);
        let mut st = self.locked();
        st.start_request();
        if size as u64 >= ADDR_LIMIT {
            return Err(self.fail(&mut st, bytes, size));
        }
        let reserved = self.fixed_segment(&mut st, PoolKind::Large, 0, size)
            || (st.release_cached(&self.backend, &self.name) > 0 && {
                st.count_alloc_retry();
                self.fixed_segment(&mut st, PoolKind::Large, 0, size)
            });
        if reserved {
            Ok(size as u64)
        } else {
            Err(self.fail(&mut st, bytes, size))
        }
    }

    /// Registers a callback run when a request cannot be served even after the cache was
    /// released. It gets the rounded request size and returns the bytes it freed (e.g. a KV
    /// cache that evicts entries); the request is retried once if any handler freed something.
    /// Handlers run without the allocator's lock, so they may free (and allocate) memory; a
    /// handler's own allocations do not run the handlers again. A handler that holds
    /// allocations or a clone of the device keeps this allocator alive: remove it with
    /// [`CachingAllocator::remove_pressure_handler`] when it is no longer needed.
    pub fn add_pressure_handler(
        &self,
        handler: impl Fn(usize) -> usize + Send + Sync + 'static,
    ) -> PressureHandlerId {
        self.handlers.add(handler)
    }

    /// Unregisters a pressure handler; returns whether it was registered.
    pub fn remove_pressure_handler(&self, id: PressureHandlerId) -> bool {
        self.handlers.remove(id)
    }

    /// The segments and blocks, by address, with the statistics.
    pub fn snapshot(&self) -> MemorySnapshot {
        let st = self.state.lock();
        MemorySnapshot {
            device: self.name.as_str().into(),
            expandable_segments: self.uses_expandable_segments(),
            stats: st.snapshot_stats(),
            segments: st.segment_snapshots(),
        }
    }

    /// The snapshot and the trace, taken at one moment, as the pickle of PyTorch's
    /// `torch.cuda.memory._dump_snapshot` for device index `device` (see `memory_viz.rs`).
    #[doc(hidden)]
    pub fn memory_viz_pickle(&self, device: u32) -> Vec<u8> {
        let st = self.state.lock();
        let snapshot = MemorySnapshot {
            device: self.name.clone(),
            expandable_segments: self.uses_expandable_segments(),
            stats: st.snapshot_stats(),
            segments: st.segment_snapshots(),
        };
        let trace = st.trace();
        let range = st.expandable_range().map(|r| (r.start, r.end));
        drop(st);
        super::trace::snapshot_pickle(&snapshot, &trace, device, range, &self.config)
    }

    /// A copy of the event trace ring.
    pub fn trace(&self) -> Trace {
        self.state.lock().trace()
    }

    /// Starts recording the last `events` allocator events (0 stops recording); replaces the
    /// ring, so earlier events are dropped.
    pub fn set_trace_capacity(&self, events: usize) {
        let mut st = self.state.lock();
        st.set_trace_capacity(events);
        self.recording.store(events > 0, Ordering::Relaxed);
    }

    /// Empties the event trace ring.
    pub fn clear_trace(&self) {
        self.state.lock().clear_trace();
    }

    /// Verifies the allocator's internal consistency: blocks tile their segments exactly, no
    /// two free blocks are adjacent (coalescing is complete), the free sets hold exactly the
    /// free blocks, and the statistics equal sums over the blocks. For tests and debugging.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.state.lock().check_invariants()
    }
}

impl<B: Backend + ?Sized> Drop for CachingAllocator<B> {
    fn drop(&mut self) {
        // While any block handed out through a device lives, this allocator holds a reference
        // to itself (`State::hold`), so none can be live here; raw `Block`s are plain data, and
        // dereferencing their addresses was the caller's unsafe business. Everything reserved
        // goes back to the backend, after the work of other streams on freed blocks is done.
        self.state.get_mut().release_all(&self.backend, &self.name);
    }
}

impl<B: Backend + ?Sized> fmt::Debug for CachingAllocator<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingAllocator")
            .field("device", &self.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
