//! The allocator's policy as small pure functions over sizes: rounding, pool choice, segment
//! size, whether to split a block, whether a request may take a block under `max_split_size`,
//! and the out-of-memory cause. They follow PyTorch's `round_size`, `get_allocation_size`,
//! `should_split` and `get_free_block` rules (`CUDACachingAllocator.cpp`).
//!
//! This module owns no state: the block bookkeeping (`state/`) and the allocator
//! (`allocator.rs`) call these functions and act on the answers.

use super::{OomCause, PoolKind};

/// Block size granularity.
pub const ROUND: usize = 512;
/// Largest rounded size served by the small pool.
pub const SMALL_SIZE: usize = 1 << 20;
/// Segment size of the small pool.
pub const SMALL_SEGMENT: usize = 2 << 20;
/// Segment size of the large pool for requests under [`MIN_LARGE_ALLOC`].
pub const LARGE_SEGMENT: usize = 20 << 20;
/// Requests at least this large get a segment of their own size (rounded to [`ROUND_LARGE`]).
pub const MIN_LARGE_ALLOC: usize = 10 << 20;
/// Rounding of large segments.
pub const ROUND_LARGE: usize = 2 << 20;

/// Sizes and addresses must fit in 48 bits (256 TiB): the free sets pack them into one key.
#[doc(hidden)]
pub const ADDR_LIMIT: u64 = 1 << 48;

/// Rounds a request up to the allocator's block granularity (512 bytes).
pub fn round_size(bytes: usize) -> usize {
    bytes.max(1).div_ceil(ROUND).saturating_mul(ROUND)
}

/// The block size of a request of `bytes` with PyTorch's `roundup_power2_divisions` (`divisions`
/// steps between consecutive powers of two above `512 · divisions`; 0 or 1: plain 512-byte
/// rounding). `None` when it overflows.
#[doc(hidden)]
pub fn rounded_size(bytes: usize, divisions: usize) -> Option<usize> {
    let bytes = bytes.max(1);
    if divisions <= 1 || bytes <= ROUND * divisions {
        return bytes.div_ceil(ROUND).checked_mul(ROUND);
    }
    if bytes.is_power_of_two() {
        return Some(bytes);
    }
    let floor = 1usize << (usize::BITS - 1 - bytes.leading_zeros());
    let step = floor / divisions;
    bytes.div_ceil(step).checked_mul(step)
}

/// The pool a block of `size` (rounded) bytes comes from.
#[doc(hidden)]
pub fn pool_for(size: usize) -> PoolKind {
    if size <= SMALL_SIZE {
        PoolKind::Small
    } else {
        PoolKind::Large
    }
}

/// The fixed segment a `size` request of `pool` asks the backend for: 2 MiB for the small pool,
/// 20 MiB for large requests under 10 MiB, the request rounded up to 2 MiB above. Under a max
/// split size, a request below it gets a segment below it too (one it may be split from).
#[doc(hidden)]
pub fn segment_size(pool: PoolKind, size: usize, max_split: Option<usize>) -> usize {
    let preferred = match pool {
        PoolKind::Small => SMALL_SEGMENT,
        PoolKind::Large if size < MIN_LARGE_ALLOC => LARGE_SEGMENT,
        PoolKind::Large => size.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE),
    };
    match max_split {
        Some(ms) if size < ms && preferred >= ms => size,
        _ => preferred,
    }
}

/// Whether a free block of `block` bytes taken by a `size` request is split, the remainder
/// staying cached: in the small pool when at least 512 bytes remain; in the expandable segment
/// likewise (the remainder merges with the free tail or its neighbours later); in a fixed
/// large segment only when more than 1 MiB remains (a smaller remainder could serve no large
/// request) and the request is below the max split size.
#[doc(hidden)]
pub fn should_split(
    pool: PoolKind,
    expandable: bool,
    block: usize,
    size: usize,
    max_split: Option<usize>,
) -> bool {
    let remaining = block - size;
    match pool {
        PoolKind::Small => remaining >= ROUND,
        PoolKind::Large if expandable => remaining >= ROUND,
        PoolKind::Large => remaining > SMALL_SIZE && max_split.is_none_or(|ms| size < ms),
    }
}

/// Whether a `size` request may take a free block of `block` bytes under max split size
/// `max_split`: blocks of at least the max split size serve only requests of at least that
/// size, and only when less than 20 MiB larger (PyTorch's rule). Blocks of the expandable
/// segment are exempt: its tail grows to fit.
pub fn may_take(max_split: Option<usize>, size: usize, block: usize, expandable: bool) -> bool {
    let Some(ms) = max_split else { return true };
    if expandable {
        return true;
    }
    if size < ms {
        block < ms
    } else {
        // Saturating: an out-of-memory report may ask about a request near `usize::MAX`.
        block < size.saturating_add(LARGE_SEGMENT)
    }
}

/// What the allocator knew when a request of `rounded` bytes failed.
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub struct OomFacts {
    /// Bytes of the request's block.
    pub rounded: u64,
    /// Reserved bytes in free cached blocks the request could draw on.
    pub cached_free: u64,
    /// Bytes that could still be reserved (device free memory, capped by the limit).
    pub device_free: u64,
    /// Bytes reserved.
    pub reserved: u64,
    /// The memory limit, if any.
    pub limit: Option<u64>,
    /// The expandable segment could not grow at its end because its address range is used up.
    pub range_used_up: bool,
}

/// Why a request failed: fragmentation when the free memory would hold it but not in one piece
/// (cached blocks too small, or split between such blocks and the device); the limit when
/// reserving it would cross the limit; else the device is full. An expandable segment that
/// could not grow because its address range is used up is named first: neither the limit nor
/// the device refused those pages.
#[doc(hidden)]
pub fn oom_cause(f: OomFacts) -> OomCause {
    if f.range_used_up {
        OomCause::AddressRangeUsedUp
    } else if f.cached_free >= f.rounded
        || (f.cached_free > 0 && f.cached_free + f.device_free >= f.rounded)
    {
        OomCause::Fragmentation
    } else if f
        .limit
        .is_some_and(|l| f.reserved.saturating_add(f.rounded) > l)
    {
        OomCause::LimitReached
    } else {
        OomCause::DeviceFull
    }
}
