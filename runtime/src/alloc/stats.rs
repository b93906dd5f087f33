//! The allocator's statistics: exact byte and event counts. [`DetailedStats`] holds PyTorch's
//! (`torch.cuda.memory_stats()`: allocated/reserved/active/inactive-split/requested bytes and
//! counts, each current/peak/allocated/freed, per pool and in total, retries, OOMs, oversize);
//! [`MemoryStats`] is the flat summary most code reads. The allocator updates them under its
//! lock through the `on_*` methods here; this module owns their meaning and arithmetic.

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
    #[inline]
    pub(crate) fn increase(&mut self, by: u64) {
        self.current += by;
        self.peak = self.peak.max(self.current);
        self.allocated += by;
    }
    #[inline]
    pub(crate) fn decrease(&mut self, by: u64) {
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

    fn pools(&mut self, pool: PoolKind) -> [&mut PoolStats; 2] {
        match pool {
            PoolKind::Small => [&mut self.all, &mut self.small_pool],
            PoolKind::Large => [&mut self.all, &mut self.large_pool],
        }
    }

    /// A block of `block` bytes handed out for a request of `requested` bytes.
    #[inline]
    pub(crate) fn on_alloc(&mut self, pool: PoolKind, block: usize, requested: usize) {
        for p in self.pools(pool) {
            p.allocated_bytes.increase(block as u64);
            p.active_bytes.increase(block as u64);
            p.requested_bytes.increase(requested as u64);
            p.allocation.increase(1);
            p.active.increase(1);
        }
    }

    /// The owner of a block of [`DetailedStats::on_alloc`] freed it: it is no longer
    /// allocated, though it stays active while other streams' events are pending.
    #[inline]
    pub(crate) fn on_release_allocation(&mut self, pool: PoolKind, block: usize, requested: usize) {
        for p in self.pools(pool) {
            p.allocated_bytes.decrease(block as u64);
            p.requested_bytes.decrease(requested as u64);
            p.allocation.decrease(1);
        }
    }

    /// A freed block of `block` bytes went back to the pool (no stream uses it anymore).
    #[inline]
    pub(crate) fn on_deactivate(&mut self, pool: PoolKind, block: usize) {
        for p in self.pools(pool) {
            p.active_bytes.decrease(block as u64);
            p.active.decrease(1);
        }
    }

    /// An allocation of at least the max split size was made (`true`) or freed (`false`).
    pub(crate) fn on_oversize_allocation(&mut self, made: bool) {
        if made {
            self.oversize_allocations.increase(1)
        } else {
            self.oversize_allocations.decrease(1)
        }
    }

    /// `bytes` more reserved in `pool` (`new_segment`: a segment more, not pages of one).
    pub(crate) fn on_reserve(&mut self, pool: PoolKind, bytes: usize, new_segment: bool) {
        self.num_device_alloc += 1;
        for p in self.pools(pool) {
            p.reserved_bytes.increase(bytes as u64);
            if new_segment {
                p.segment.increase(1);
            }
        }
    }

    /// `bytes` fewer reserved in `pool` (`segment_gone`: a whole segment released).
    pub(crate) fn on_release(&mut self, pool: PoolKind, bytes: usize, segment_gone: bool) {
        self.num_device_free += 1;
        for p in self.pools(pool) {
            p.reserved_bytes.decrease(bytes as u64);
            if segment_gone {
                p.segment.decrease(1);
            }
        }
    }

    /// A segment of `pool` went without a backend call of its own (the expandable segment
    /// after its last pages were unmapped).
    pub(crate) fn on_segment_gone(&mut self, pool: PoolKind) {
        for p in self.pools(pool) {
            p.segment.decrease(1);
        }
    }

    /// A free block of `bytes` in a segment holding other blocks appeared (`true`) or went
    /// (`false`: taken, merged, released).
    #[inline]
    pub(crate) fn on_inactive_split(&mut self, pool: PoolKind, bytes: usize, appeared: bool) {
        for p in self.pools(pool) {
            if appeared {
                p.inactive_split_bytes.increase(bytes as u64);
                p.inactive_split.increase(1);
            } else {
                p.inactive_split_bytes.decrease(bytes as u64);
                p.inactive_split.decrease(1);
            }
        }
    }

    /// Peaks back to the current values.
    pub(crate) fn reset_peaks(&mut self) {
        for p in [&mut self.all, &mut self.small_pool, &mut self.large_pool] {
            for s in p.stats_mut() {
                s.peak = s.current;
            }
        }
        for s in [&mut self.oversize_allocations, &mut self.oversize_segments] {
            s.peak = s.current;
        }
    }

    /// Accumulated counts (`allocated`, `freed`, retries, OOMs, backend calls) back to 0, as
    /// PyTorch's `reset_accumulated_memory_stats`.
    pub(crate) fn reset_accumulated(&mut self) {
        for p in [&mut self.all, &mut self.small_pool, &mut self.large_pool] {
            for s in p.stats_mut() {
                s.allocated = 0;
                s.freed = 0;
            }
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
    fn stats_mut(&mut self) -> [&mut Stat; 9] {
        [
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
        ]
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
