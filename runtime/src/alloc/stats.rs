//! The allocator's statistics: exact byte and event counts ([`MemoryStats`]). The allocator
//! updates them under its lock; this module owns only their meaning.

/// Allocator statistics: exact byte counts. Peaks are since creation or the last
/// [`CachingAllocator::reset_peak_stats`](super::CachingAllocator::reset_peak_stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct MemoryStats {
    /// Bytes in live allocations, each counted at its rounded size (512-byte granularity).
    pub allocated_bytes: u64,
    /// Highest `allocated_bytes`.
    pub peak_allocated_bytes: u64,
    /// Bytes held from the backend (sum of segment sizes).
    pub reserved_bytes: u64,
    /// Highest `reserved_bytes`.
    pub peak_reserved_bytes: u64,
    /// Bytes of the blocks holding live allocations (≥ `allocated_bytes`: a block that was not
    /// split is counted whole).
    pub active_bytes: u64,
    /// Highest `active_bytes`.
    pub peak_active_bytes: u64,
    /// Live allocations.
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
