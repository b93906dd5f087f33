//! Whether an allocator's refusal was genuine, shared by the model tests (`model.rs`,
//! `scale.rs`): the rules a request of `rounded` bytes is served by, read off a snapshot.

use std::ops::Range;

use vramguard_alloc::{MemorySnapshot, PoolKind};

const MIB: u64 = 1 << 20;

/// The pool a request of `rounded` bytes (already rounded) comes from.
pub fn pool_of(rounded: u64) -> PoolKind {
    if rounded <= MIB {
        PoolKind::Small
    } else {
        PoolKind::Large
    }
}

/// `Err` naming a free block of `pool` that could take a request of `rounded` bytes (PyTorch's
/// max split rule included: an oversize block of a fixed segment serves only requests within 20
/// MiB of its size); else `Ok` with the free tail of the pool's expandable segment, the part of
/// the request it can already hold.
pub fn no_free_block_fits(
    snap: &MemorySnapshot,
    pool: PoolKind,
    rounded: u64,
    max_split: Option<u64>,
) -> Result<u64, String> {
    let mut tail_free = 0;
    for seg in snap.segments.iter().filter(|g| g.pool == pool) {
        for b in seg.blocks.iter().filter(|b| !b.allocated) {
            let allowed = seg.expandable
                || max_split.is_none_or(|ms| {
                    if rounded < ms {
                        b.size < ms
                    } else {
                        b.size < rounded + 20 * MIB
                    }
                });
            if b.size >= rounded && allowed {
                return Err(format!("free block {:#x} of {} bytes fits", b.addr, b.size));
            }
        }
        if seg.expandable {
            tail_free = seg
                .blocks
                .last()
                .filter(|b| !b.allocated)
                .map_or(0, |b| b.size);
        }
    }
    Ok(tail_free)
}

/// `Ok` when a refusal that names the expandable segment's used-up address range is genuine:
/// mapping the `least` bytes the request needs at the end of the mapped part would run past
/// `range`, and a fixed segment of the whole `rounded` request does not fit the `room` left
/// under the bound.
pub fn range_really_used_up(
    snap: &MemorySnapshot,
    range: Option<Range<u64>>,
    least: u64,
    rounded: u64,
    room: u64,
) -> Result<(), String> {
    let Some(range) = range else {
        return Err("the refusal names the expandable range, but there is none".into());
    };
    let mapped_end = snap
        .segments
        .iter()
        .filter(|g| g.expandable)
        .map(|g| g.addr + g.size)
        .max()
        .unwrap_or(range.start);
    if mapped_end + least <= range.end {
        return Err(format!(
            "the range {range:x?} has room: mapped up to {mapped_end:#x}, {least} bytes needed"
        ));
    }
    if rounded <= room {
        return Err(format!(
            "a fixed segment of {rounded} bytes fits the {room} bytes left under the bound"
        ));
    }
    Ok(())
}
