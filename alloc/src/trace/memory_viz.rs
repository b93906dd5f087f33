//! The snapshot and trace in PyTorch's snapshot format: the pickle that
//! `torch.cuda.memory._dump_snapshot` writes, which pytorch.org/memory_viz and
//! `torch.cuda._memory_viz` read. It owns only the translation:
//!
//! - `segments`: one dict per segment (`device`, `address`, `total_size`, `allocated_size`,
//!   `active_size`, `requested_size`, `stream`, `segment_type` `'small'`/`'large'`,
//!   `segment_pool_id` `(0, 0)`, `is_expandable`, `frames` `[]`, `blocks`); each block
//!   (`address`, `size`, `requested_size`, `state` `'active_allocated'`/`'inactive'`, `frames`);
//! - `device_traces`: one list per device index up to this device's, its events as trace
//!   entries (`action`, `addr` — `device_free` for an OOM —, `size`, `stream`, `time_us`,
//!   `frames`, and the event's label as `user_metadata`): an alloc is `'alloc'`, a free is
//!   `'free_requested'` then `'free_completed'` (PyTorch records both when no other stream uses
//!   the block; there are no streams here), a segment of the expandable range mapped or
//!   unmapped is `'segment_map'`/`'segment_unmap'`, other segments `'segment_alloc'`/
//!   `'segment_free'`, a failed request `'oom'`;
//! - frames: the allocation's origin as one frame, `{filename, line, name}`, the name being the
//!   op and the tensor's shape (`matmul [8, 512, 768]`);
//! - `allocator_settings`: `max_split_size` (`None` when unset), `garbage_collection_threshold`
//!   (0.0 when unset, as PyTorch writes it) and `expandable_segments` (what the allocator runs
//!   with).

use super::pickle::PickleWriter;
use super::{AllocOrigin, MemorySnapshot, PoolKind, Trace, TraceEventKind};
use crate::AllocatorConfig;

/// Where the allocator's expandable segment lies: `(start, end)` of its reserved range.
#[doc(hidden)]
pub type ExpandableRange = Option<(u64, u64)>;

/// The pickle of `snapshot` and `trace` for device index `device`, from an allocator with
/// `config`.
#[doc(hidden)]
pub fn snapshot_pickle(
    snapshot: &MemorySnapshot,
    trace: &Trace,
    device: u32,
    expandable: ExpandableRange,
    config: &AllocatorConfig,
) -> Vec<u8> {
    let mut p = PickleWriter::new();
    p.begin_dict();
    p.str("segments");
    p.begin_list();
    for seg in &snapshot.segments {
        segment(&mut p, seg, device);
    }
    p.end_list();
    p.str("device_traces");
    p.begin_list();
    for _ in 0..device {
        p.begin_list();
        p.end_list();
    }
    p.begin_list();
    for event in &trace.events {
        trace_entries(&mut p, event, expandable);
    }
    p.end_list();
    p.end_list();
    p.str("allocator_settings");
    p.begin_dict();
    p.str("max_split_size");
    match config.max_split_size {
        Some(bytes) => p.uint(bytes as u64),
        None => p.none(),
    }
    p.str("garbage_collection_threshold");
    p.float(config.garbage_collection_threshold.unwrap_or(0.0));
    p.str("expandable_segments");
    p.bool(snapshot.expandable_segments);
    p.end_dict();
    p.end_dict();
    p.finish()
}

fn segment(p: &mut PickleWriter, seg: &super::SegmentSnapshot, device: u32) {
    let live = || seg.blocks.iter().filter(|b| b.allocated);
    let allocated: u64 = live().map(|b| b.size).sum();
    let requested: u64 = live().map(|b| b.requested).sum();
    p.begin_dict();
    p.entry_uint("device", u64::from(device));
    p.entry_uint("address", seg.addr);
    p.entry_uint("total_size", seg.size);
    p.entry_uint("allocated_size", allocated);
    // No block waits for another stream here, so active memory is allocated memory.
    p.entry_uint("active_size", allocated);
    p.entry_uint("requested_size", requested);
    p.entry_uint("stream", 0);
    p.entry_str(
        "segment_type",
        match seg.pool {
            PoolKind::Small => "small",
            PoolKind::Large => "large",
        },
    );
    p.str("segment_pool_id");
    p.begin_tuple();
    p.uint(0);
    p.uint(0);
    p.end_tuple();
    p.str("is_expandable");
    p.bool(seg.expandable);
    p.str("frames");
    frames(p, None);
    p.str("blocks");
    p.begin_list();
    for b in &seg.blocks {
        p.begin_dict();
        p.entry_uint("address", b.addr);
        p.entry_uint("size", b.size);
        p.entry_uint("requested_size", b.requested);
        p.entry_str(
            "state",
            if b.allocated {
                "active_allocated"
            } else {
                "inactive"
            },
        );
        p.str("frames");
        frames(p, b.origin.as_ref());
        p.end_dict();
    }
    p.end_list();
    p.end_dict();
}

/// The trace entries of one event (a free is two).
fn trace_entries(p: &mut PickleWriter, e: &super::TraceEvent, expandable: ExpandableRange) {
    let in_expandable = expandable.is_some_and(|(start, end)| e.addr >= start && e.addr < end);
    let actions: &[&str] = match e.kind {
        TraceEventKind::Alloc => &["alloc"],
        TraceEventKind::Free => &["free_requested", "free_completed"],
        TraceEventKind::SegmentAlloc if in_expandable => &["segment_map"],
        TraceEventKind::SegmentFree if in_expandable => &["segment_unmap"],
        TraceEventKind::SegmentAlloc => &["segment_alloc"],
        TraceEventKind::SegmentFree => &["segment_free"],
        TraceEventKind::Oom => &["oom"],
    };
    for action in actions {
        p.begin_dict();
        p.entry_str("action", action);
        if e.kind == TraceEventKind::Oom {
            // What the device could still provide is not recorded per event.
            p.entry_uint("device_free", 0);
        } else {
            p.entry_uint("addr", e.addr);
        }
        p.entry_uint("size", e.size);
        p.entry_uint("stream", 0);
        p.entry_uint("time_us", e.time_ns / 1000);
        p.str("frames");
        frames(p, e.origin.as_ref());
        if let Some(label) = &e.label {
            p.entry_str("user_metadata", &label.to_string());
        }
        p.end_dict();
    }
}

/// `[{filename, line, name}]` for an origin, `[]` without one.
fn frames(p: &mut PickleWriter, origin: Option<&AllocOrigin>) {
    p.begin_list();
    if let Some(o) = origin {
        p.begin_dict();
        p.entry_str("filename", o.file);
        p.entry_uint("line", u64::from(o.line));
        let name = match &o.shape {
            Some(shape) => format!("{} {shape:?}", o.op),
            None => o.op.to_string(),
        };
        p.entry_str("name", &name);
        p.end_dict();
    }
    p.end_list();
}
