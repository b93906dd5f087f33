//! The allocator's statistics: exact byte and event counts. [`DetailedStats`] holds PyTorch's
//! (`torch.cuda.memory_stats()`: allocated/reserved/active/inactive-split/requested bytes and
//! counts, each current/peak/allocated/freed, per pool and in total, retries, OOMs, oversize);
//! [`MemoryStats`] is the flat summary most code reads. The allocator keeps them under its lock
//! as [`Counters`] (per pool, the total added up when read) and updates them through the `on_*`
//! methods here; this module owns their meaning and arithmetic.

use super::PoolKind;
use std::collections::BTreeMap;

/// Allocator statistics: exact byte counts. Peaks are since creation or the last
/// [`CachingAllocator::reset_peak_stats`](super::CachingAllocator::reset_peak_stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct MemoryStats {
    /// Bytes of the blocks holding live allocations, as PyTorch counts them (a block that was
    /// not split counts whole; equal to `active_bytes`). `requested_bytes` has the requests.
    pub allocated_bytes: u64,
    /// Highest `allocated_bytes`.
    pub peak_allocated_bytes: u64,
    /// Bytes held from the backend (sum of segment sizes).
    pub reserved_bytes: u64,
    /// Highest `reserved_bytes`.
    pub peak_reserved_bytes: u64,
    /// Bytes of the blocks holding live allocations and of freed blocks waiting for other
    /// streams' events before they can be reused (see `Allocation::record_stream`), as
    /// PyTorch counts them; equal to `allocated_bytes` when no block is waiting.
    pub active_bytes: u64,
    /// Highest `active_bytes`.
    pub peak_active_bytes: u64,
    /// Live allocations, and freed blocks waiting for other streams' events.
    pub active_blocks: u64,
    /// Highest `active_blocks`.
    pub peak_active_blocks: u64,
    /// Sum of the bytes asked for by live allocations (before rounding).
    pub requested_bytes: u64,
    /// Reserved bytes in free cached blocks (`reserved_bytes - active_bytes`).
    pub cached_free_bytes: u64,
    /// The largest free cached block.
    pub largest_free_block: u64,
    /// `1 - allocated / reserved` (0 when nothing is reserved).
    pub fragmentation: f64,
    /// Segments held.
    pub segments: u64,
    /// Segments obtained from the backend.
    pub backend_allocs: u64,
    /// Segments returned to the backend.
    pub backend_frees: u64,
    /// Times the cache was released and a segment request retried after the backend refused.
    pub alloc_retries: u64,
    /// Allocations that failed with out-of-memory.
    pub num_ooms: u64,
    /// Allocations served.
    pub num_allocs: u64,
    /// Allocations returned.
    pub num_frees: u64,
}

/// One statistic as PyTorch keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stat {
    /// The value now.
    pub current: u64,
    /// The highest value since creation or the last peak reset.
    pub peak: u64,
    /// Sum of all increases since creation or the last accumulated-stats reset.
    pub allocated: u64,
    /// Sum of all decreases since creation or the last accumulated-stats reset.
    pub freed: u64,
}

impl Stat {
    /// `by` more: current and allocated grow, the peak follows.
    #[inline]
    #[doc(hidden)]
    pub fn increase(&mut self, by: u64) {
        self.current += by;
        self.allocated += by;
        if self.current > self.peak {
            self.peak = self.current;
        }
    }
    /// `by` less: current shrinks, freed grows.
    #[inline]
    #[doc(hidden)]
    pub fn decrease(&mut self, by: u64) {
        self.current -= by;
        self.freed += by;
    }
}

/// The statistics of one pool (or of both: [`DetailedStats::all`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Bytes of blocks holding live allocations.
    pub allocated_bytes: Stat,
    /// Bytes of segments (mapped pages of the expandable segment).
    pub reserved_bytes: Stat,
    /// Bytes of active blocks (here: the allocated ones).
    pub active_bytes: Stat,
    /// Bytes of free blocks in segments that also hold other blocks (cached but unreleasable).
    pub inactive_split_bytes: Stat,
    /// Bytes asked for by live allocations.
    pub requested_bytes: Stat,
    /// Live allocations.
    pub allocation: Stat,
    /// Segments.
    pub segment: Stat,
    /// Active blocks.
    pub active: Stat,
    /// Free blocks in segments that also hold other blocks.
    pub inactive_split: Stat,
}

/// PyTorch's allocator statistics (`torch.cuda.memory_stats()`), exact.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DetailedStats {
    /// Both pools.
    pub all: PoolStats,
    /// Requests up to 1 MiB.
    pub small_pool: PoolStats,
    /// Larger requests.
    pub large_pool: PoolStats,
    /// Times the cache was released and a segment request retried.
    pub num_alloc_retries: u64,
    /// Allocations that failed with out-of-memory.
    pub num_ooms: u64,
    /// Allocations of at least `max_split_size` (only counted when it is set).
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size` (only counted when it is set).
    pub oversize_segments: Stat,
    /// Backend calls that obtained memory (segments, page mappings).
    pub num_device_alloc: u64,
    /// Backend calls that returned memory.
    pub num_device_free: u64,
}

impl DetailedStats {
    /// The statistics of `pool`.
    pub fn pools_of(&self, pool: PoolKind) -> &PoolStats {
        match pool {
            PoolKind::Small => &self.small_pool,
            PoolKind::Large => &self.large_pool,
        }
    }

    /// The statistics under PyTorch's keys (`allocated_bytes.all.current`,
    /// `reserved_bytes.large_pool.peak`, `num_alloc_retries`, `oversize_allocations.current`, ...).
    pub fn to_map(&self) -> BTreeMap<String, u64> {
        let mut map = BTreeMap::new();
        let mut put = |name: &str, s: &Stat| {
            for (kind, v) in [
                ("current", s.current),
                ("peak", s.peak),
                ("allocated", s.allocated),
                ("freed", s.freed),
            ] {
                map.insert(format!("{name}.{kind}"), v);
            }
        };
        for (pool, p) in [
            ("all", &self.all),
            ("small_pool", &self.small_pool),
            ("large_pool", &self.large_pool),
        ] {
            for (name, s) in p.named() {
                put(&format!("{name}.{pool}"), s);
            }
        }
        put("oversize_allocations", &self.oversize_allocations);
        put("oversize_segments", &self.oversize_segments);
        map.insert("num_alloc_retries".into(), self.num_alloc_retries);
        map.insert("num_ooms".into(), self.num_ooms);
        map.insert("num_device_alloc".into(), self.num_device_alloc);
        map.insert("num_device_free".into(), self.num_device_free);
        map
    }
}

/// One statistic of [`PoolStats`], by its place in [`Counters`].
#[derive(Debug, Clone, Copy)]
#[repr(usize)]
#[doc(hidden)]
pub enum Key {
    AllocatedBytes,
    ReservedBytes,
    ActiveBytes,
    InactiveSplitBytes,
    RequestedBytes,
    Allocation,
    Segment,
    Active,
    InactiveSplit,
}

/// Statistics in a pool.
const KEYS: usize = 9;

/// One pool's statistic as the allocator keeps it. `freed` is not stored: it is
/// `allocated + freed_base - current` (`freed_base` is `current` at the last reset of the
/// accumulated counts), so a decrease writes one word.
#[derive(Debug, Clone, Copy, Default)]
struct Counter {
    current: u64,
    peak: u64,
    allocated: u64,
    freed_base: u64,
}

impl Counter {
    fn freed(&self) -> u64 {
        self.allocated
            .wrapping_add(self.freed_base)
            .wrapping_sub(self.current)
    }

    fn as_stat(&self) -> Stat {
        Stat {
            current: self.current,
            peak: self.peak,
            allocated: self.allocated,
            freed: self.freed(),
        }
    }
}

/// The statistics under the allocator's lock, from which [`DetailedStats`] is read.
///
/// Each pool keeps its own counters; the total of both ([`DetailedStats::all`]) is not
/// stored but added up when read, except its peak, raised by every increase that takes the
/// sum above it. An increase writes the pool's current value and accumulated count (and a
/// peak only when it rises), a decrease the current value alone: the cached alloc+free pair
/// changes every statistic of its pool, and its time follows its stores (`docs/perf-notes.md`,
/// "Stores, atomics and the cached pair"), far fewer than keeping both pools and the total in
/// [`Stat`]s took. The values read are the same.
#[derive(Debug, Clone, Default)]
#[doc(hidden)]
pub struct Counters {
    /// By [`PoolKind`] (small, large), then by [`Key`].
    pools: [[Counter; KEYS]; 2],
    /// The highest sum of both pools' `current`, by [`Key`].
    total_peak: [u64; KEYS],
    /// Allocations of at least `max_split_size` (only counted when it is set).
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size` (only counted when it is set).
    pub oversize_segments: Stat,
    /// Times the cache was released and a segment request retried.
    pub num_alloc_retries: u64,
    /// Allocations that failed with out-of-memory.
    pub num_ooms: u64,
    /// Backend calls that obtained memory (segments, page mappings).
    pub num_device_alloc: u64,
    /// Backend calls that returned memory.
    pub num_device_free: u64,
}

impl Counters {
    #[inline(always)]
    fn increase(&mut self, pool: PoolKind, key: Key, by: u64) {
        let (p, k) = (pool as usize, key as usize);
        let c = &mut self.pools[p][k];
        c.current += by;
        c.allocated += by;
        if c.current > c.peak {
            c.peak = c.current;
        }
        let total = c.current + self.pools[p ^ 1][k].current;
        if total > self.total_peak[k] {
            self.total_peak[k] = total;
        }
    }

    #[inline(always)]
    fn decrease(&mut self, pool: PoolKind, key: Key, by: u64) {
        self.pools[pool as usize][key as usize].current -= by;
    }

    /// The current value of statistic `key` of both pools together.
    #[inline]
    #[doc(hidden)]
    pub fn total(&self, key: Key) -> u64 {
        self.pools[0][key as usize].current + self.pools[1][key as usize].current
    }

    /// The statistics of `pool`.
    #[doc(hidden)]
    pub fn pool(&self, pool: PoolKind) -> PoolStats {
        let c = &self.pools[pool as usize];
        let s = |k: Key| c[k as usize].as_stat();
        PoolStats::by_key(s)
    }

    /// Both pools' statistics added up, with the total's own peaks.
    fn all(&self) -> PoolStats {
        let s = |k: Key| {
            let [a, b] = [&self.pools[0][k as usize], &self.pools[1][k as usize]];
            Stat {
                current: a.current + b.current,
                peak: self.total_peak[k as usize],
                allocated: a.allocated + b.allocated,
                freed: a.freed() + b.freed(),
            }
        };
        PoolStats::by_key(s)
    }

    /// The statistics as PyTorch reads them.
    #[doc(hidden)]
    pub fn detailed(&self) -> DetailedStats {
        DetailedStats {
            all: self.all(),
            small_pool: self.pool(PoolKind::Small),
            large_pool: self.pool(PoolKind::Large),
            num_alloc_retries: self.num_alloc_retries,
            num_ooms: self.num_ooms,
            oversize_allocations: self.oversize_allocations,
            oversize_segments: self.oversize_segments,
            num_device_alloc: self.num_device_alloc,
            num_device_free: self.num_device_free,
        }
    }

    /// A block of `block` bytes handed out for a request of `requested` bytes.
    #[inline(always)]
    #[doc(hidden)]
    pub fn on_alloc(&mut self, pool: PoolKind, block: usize, requested: usize) {
        self.increase(pool, Key::AllocatedBytes, block as u64);
        self.increase(pool, Key::ActiveBytes, block as u64);
        self.increase(pool, Key::RequestedBytes, requested as u64);
        self.increase(pool, Key::Allocation, 1);
        self.increase(pool, Key::Active, 1);
    }

    /// The owner of a block of [`Counters::on_alloc`] freed it: it is no longer allocated,
    /// though it stays active while other streams' events are pending.
    #[inline(always)]
    #[doc(hidden)]
    pub fn on_free(&mut self, pool: PoolKind, block: usize, requested: usize) {
        self.decrease(pool, Key::AllocatedBytes, block as u64);
        self.decrease(pool, Key::RequestedBytes, requested as u64);
        self.decrease(pool, Key::Allocation, 1);
    }

    /// A freed block of `block` bytes went back to the pool (no stream uses it anymore).
    #[inline(always)]
    #[doc(hidden)]
    pub fn on_deactivate(&mut self, pool: PoolKind, block: usize) {
        self.decrease(pool, Key::ActiveBytes, block as u64);
        self.decrease(pool, Key::Active, 1);
    }

    /// An allocation of at least the max split size was made (`true`) or freed (`false`).
    #[doc(hidden)]
    pub fn on_oversize_allocation(&mut self, made: bool) {
        if made {
            self.oversize_allocations.increase(1)
        } else {
            self.oversize_allocations.decrease(1)
        }
    }

    /// `bytes` more reserved in `pool` (`new_segment`: a segment more, not pages of one).
    #[doc(hidden)]
    pub fn on_reserve(&mut self, pool: PoolKind, bytes: usize, new_segment: bool) {
        self.num_device_alloc += 1;
        self.increase(pool, Key::ReservedBytes, bytes as u64);
        if new_segment {
            self.increase(pool, Key::Segment, 1);
        }
    }

    /// `bytes` fewer reserved in `pool`, given back to the backend (`segment_gone`: a whole
    /// segment released, not pages of one).
    #[doc(hidden)]
    pub fn on_release(&mut self, pool: PoolKind, bytes: usize, segment_gone: bool) {
        self.num_device_free += 1;
        self.decrease(pool, Key::ReservedBytes, bytes as u64);
        if segment_gone {
            self.decrease(pool, Key::Segment, 1);
        }
    }

    /// A segment of `pool` went without a backend call of its own (the expandable segment
    /// after its last pages were unmapped).
    #[doc(hidden)]
    pub fn on_segment_gone(&mut self, pool: PoolKind) {
        self.decrease(pool, Key::Segment, 1);
    }

    /// A free block of `bytes` in a segment holding other blocks appeared (`true`) or went
    /// (`false`: taken, merged, released).
    #[inline(always)]
    #[doc(hidden)]
    pub fn on_inactive_split(&mut self, pool: PoolKind, bytes: usize, appeared: bool) {
        if appeared {
            self.increase(pool, Key::InactiveSplitBytes, bytes as u64);
            self.increase(pool, Key::InactiveSplit, 1);
        } else {
            self.decrease(pool, Key::InactiveSplitBytes, bytes as u64);
            self.decrease(pool, Key::InactiveSplit, 1);
        }
    }

    /// Peaks back to the current values.
    #[doc(hidden)]
    pub fn reset_peaks(&mut self) {
        for c in self.pools.iter_mut().flatten() {
            c.peak = c.current;
        }
        for k in 0..KEYS {
            self.total_peak[k] = self.pools[0][k].current + self.pools[1][k].current;
        }
        for s in [&mut self.oversize_allocations, &mut self.oversize_segments] {
            s.peak = s.current;
        }
    }

    /// Accumulated counts (`allocated`, `freed`, retries, OOMs, backend calls) back to 0, as
    /// PyTorch's `reset_accumulated_memory_stats`.
    #[doc(hidden)]
    pub fn reset_accumulated(&mut self) {
        for c in self.pools.iter_mut().flatten() {
            c.allocated = 0;
            c.freed_base = c.current;
        }
        for s in [&mut self.oversize_allocations, &mut self.oversize_segments] {
            s.allocated = 0;
            s.freed = 0;
        }
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
    }
}

/// PyTorch's `_format_size`: the unit chosen by the row's first value (`pref`), six digits.
fn format_size(value: u64, pref: u64) -> String {
    const PREFIXES: [&str; 6] = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let (mut value, mut pref, mut unit) = (value, pref, PREFIXES[0]);
    for next in &PREFIXES[1..] {
        if pref < 768 * 1024 {
            break;
        }
        unit = next;
        value /= 1024;
        pref /= 1024;
    }
    format!("{value:6} {unit}")
}

/// PyTorch's `_format_count`.
fn format_count(value: u64, pref: u64) -> String {
    const PREFIXES: [&str; 3] = [" ", "K", "M"];
    let (mut value, mut pref, mut unit) = (value, pref, PREFIXES[0]);
    for next in &PREFIXES[1..] {
        if pref < 750 * 1000 {
            break;
        }
        unit = next;
        value /= 1000;
        pref /= 1000;
    }
    format!("{value:7} {unit} ")
}

impl DetailedStats {
    /// The text table of `torch.cuda.memory_summary()`, for `device`: current, peak, total
    /// allocated and total freed of each statistic, in total and per pool.
    pub fn summary(&self, device: &str) -> String {
        let rule = |c: char| c.to_string().repeat(75);
        let mut lines = vec![
            rule('='),
            format!(
                " {:<73} ",
                format!("{:16} vramguard memory summary, device {device}", "")
            ),
            rule('-'),
            format!(
                " {:<34}| {:<37} ",
                format!("{:9} OOMs: {}", "", self.num_ooms),
                format!("{:6} allocation retries: {}", "", self.num_alloc_retries)
            ),
            rule('='),
            "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ".into(),
        ];
        type Pick = fn(&PoolStats) -> &Stat;
        type Format = fn(u64, u64) -> String;
        let rows: [(&str, Pick, Format); 9] = [
            ("Allocated memory", |p| &p.allocated_bytes, format_size),
            ("Active memory", |p| &p.active_bytes, format_size),
            ("Requested memory", |p| &p.requested_bytes, format_size),
            ("Reserved memory", |p| &p.reserved_bytes, format_size),
            (
                "Non-releasable memory",
                |p| &p.inactive_split_bytes,
                format_size,
            ),
            ("Allocations", |p| &p.allocation, format_count),
            ("Active allocs", |p| &p.active, format_count),
            ("Reserved segments", |p| &p.segment, format_count),
            ("Non-releasable allocs", |p| &p.inactive_split, format_count),
        ];
        let row = |name: &str, s: &Stat, pref: &Stat, f: Format| {
            format!(
                " {name:<21} | {} | {} | {} | {} ",
                f(s.current, pref.current),
                f(s.peak, pref.peak),
                f(s.allocated, pref.allocated),
                f(s.freed, pref.freed)
            )
        };
        for (name, pick, f) in rows {
            lines.push(rule('-'));
            let all = pick(&self.all);
            lines.push(row(name, all, all, f));
            lines.push(row("      from large pool", pick(&self.large_pool), all, f));
            lines.push(row("      from small pool", pick(&self.small_pool), all, f));
        }
        for (name, s) in [
            ("Oversize allocations", &self.oversize_allocations),
            ("Oversize segments", &self.oversize_segments),
        ] {
            lines.push(rule('-'));
            lines.push(row(name, s, s, format_count));
        }
        lines.push(rule('='));
        let mut out = String::new();
        for line in lines {
            out.push('|');
            out.push_str(&line);
            out.push_str("|\n");
        }
        out
    }
}

impl PoolStats {
    /// Each statistic from its [`Key`].
    fn by_key(s: impl Fn(Key) -> Stat) -> PoolStats {
        PoolStats {
            allocated_bytes: s(Key::AllocatedBytes),
            reserved_bytes: s(Key::ReservedBytes),
            active_bytes: s(Key::ActiveBytes),
            inactive_split_bytes: s(Key::InactiveSplitBytes),
            requested_bytes: s(Key::RequestedBytes),
            allocation: s(Key::Allocation),
            segment: s(Key::Segment),
            active: s(Key::Active),
            inactive_split: s(Key::InactiveSplit),
        }
    }

    /// Each statistic with PyTorch's name.
    pub fn named(&self) -> [(&'static str, &Stat); 9] {
        [
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statistics as they were kept before [`Counters`]: a [`Stat`] per pool and one for
    /// the total, each increase and decrease applied to both.
    #[derive(Default)]
    struct Reference {
        all: PoolStats,
        pools: [PoolStats; 2],
    }

    impl Reference {
        fn stat(p: &mut PoolStats, key: Key) -> &mut Stat {
            match key {
                Key::AllocatedBytes => &mut p.allocated_bytes,
                Key::ReservedBytes => &mut p.reserved_bytes,
                Key::ActiveBytes => &mut p.active_bytes,
                Key::InactiveSplitBytes => &mut p.inactive_split_bytes,
                Key::RequestedBytes => &mut p.requested_bytes,
                Key::Allocation => &mut p.allocation,
                Key::Segment => &mut p.segment,
                Key::Active => &mut p.active,
                Key::InactiveSplit => &mut p.inactive_split,
            }
        }
        fn apply(&mut self, pool: usize, key: Key, by: i64) {
            for p in [&mut self.all, &mut self.pools[pool]] {
                let s = Self::stat(p, key);
                if by >= 0 {
                    s.increase(by as u64);
                } else {
                    s.decrease(by.unsigned_abs());
                }
            }
        }
        fn each(&mut self, f: impl Fn(&mut Stat)) {
            let [small, large] = &mut self.pools;
            for p in [&mut self.all, small, large] {
                for key in KEY_LIST {
                    f(Self::stat(p, key));
                }
            }
        }
    }

    const KEY_LIST: [Key; KEYS] = [
        Key::AllocatedBytes,
        Key::ReservedBytes,
        Key::ActiveBytes,
        Key::InactiveSplitBytes,
        Key::RequestedBytes,
        Key::Allocation,
        Key::Segment,
        Key::Active,
        Key::InactiveSplit,
    ];

    /// Random increases and decreases of every statistic in both pools, with peak and
    /// accumulated resets among them: what [`Counters`] reads back (per pool and in total,
    /// current, peak, allocated and freed) equals the per-`Stat` bookkeeping after every step.
    #[test]
    fn counters_read_back_as_stats_kept_per_pool_and_in_total() {
        let (mut counters, mut reference) = (Counters::default(), Reference::default());
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for step in 0..20_000 {
            let (pool, key) = (next(2) as usize, KEY_LIST[next(KEYS as u64) as usize]);
            let kind = [PoolKind::Small, PoolKind::Large][pool];
            let current = counters.pools[pool][key as usize].current;
            match next(100) {
                0 => {
                    counters.reset_peaks();
                    reference.each(|s| s.peak = s.current);
                }
                1 => {
                    counters.reset_accumulated();
                    reference.each(|s| {
                        s.allocated = 0;
                        s.freed = 0;
                    });
                }
                r if r < 55 || current == 0 => {
                    // Steps of a few units too: a peak off by one must show.
                    let range = [3, 1 << 20][next(2) as usize];
                    let by = 1 + next(range);
                    counters.increase(kind, key, by);
                    reference.apply(pool, key, by as i64);
                }
                _ => {
                    let by = 1 + next(current);
                    counters.decrease(kind, key, by);
                    reference.apply(pool, key, -(by as i64));
                }
            }
            let read = counters.detailed();
            assert_eq!(read.all, reference.all, "total after step {step}");
            assert_eq!(
                read.small_pool, reference.pools[0],
                "small after step {step}"
            );
            assert_eq!(
                read.large_pool, reference.pools[1],
                "large after step {step}"
            );
        }
    }
}
