//! The allocator's HTML page, through devices: the page's embedded data against the allocator's own figures: exact counts of events,
//! labels, bands and allocations, the replayed segment map against snapshots taken at those
//! moments, the fragmentation figures, the peak window, escaping.

use crate::alloc::trace::timeline::{TimelineData, MAX_DRAWN_ALLOCATIONS};
use crate::alloc::{AllocatorConfig, MemorySnapshot};
use crate::device::{Allocation, Device};
use crate::memory;

const MIB: usize = 1 << 20;

/// The JSON the page embeds, parsed back.
fn embedded(html: &str) -> serde_json::Value {
    let open = "<script type=\"application/json\" id=\"vg-data\">";
    let start = html.find(open).map(|i| i + open.len()).unwrap_or(0);
    let end = start + html[start..].find("</script>").unwrap_or(0);
    serde_json::from_str(&html[start..end]).unwrap_or(serde_json::Value::Null)
}

fn traced(config: AllocatorConfig) -> Device {
    Device::host_with_config(config.with_trace_capacity(10_000)).unwrap()
}

fn blocks_of(snap: &MemorySnapshot) -> Vec<(u64, u64)> {
    let mut live: Vec<(u64, u64)> = snap
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.allocated)
        .map(|b| (b.addr, b.size))
        .collect();
    live.sort_unstable();
    live
}

fn segments_of(snap: &MemorySnapshot) -> Vec<(u64, u64)> {
    snap.segments.iter().map(|s| (s.addr, s.size)).collect()
}

#[test]
fn the_page_embeds_every_event_label_band_and_allocation_exactly() {
    let device = traced(AllocatorConfig::default().with_expandable_segments(false));
    let nasty = "batch <1> & \"co\" </script><img src=x>";
    let keep = {
        let _l = crate::scope::tag(nasty);
        let a = device.allocate(3 * MIB).unwrap();
        let b = device.allocate(1000).unwrap();
        drop(a);
        b
    };
    let later = {
        let _l = crate::scope::tag("batch 2");
        device.allocate(5 * MIB).unwrap()
    };
    let unlabelled = device.allocate(4096).unwrap();
    drop(unlabelled);
    let trace = memory::trace(&device);
    let snap = memory::snapshot(&device);
    let html = memory::html_report(&device, "run <x>");
    let data = embedded(&html);

    // Escaping: the title and label never appear as markup; the label survives in the data.
    assert!(html.contains("<title>run &lt;x&gt;</title>"));
    assert!(!html.contains("<x>") && !html.contains("<1>") && !html.contains("<img"));
    assert_eq!(
        html.matches("</script>").count(),
        2,
        "only the page's own two scripts end"
    );
    assert_eq!(data["labels"], serde_json::json!([nasty, "batch 2"]));

    // 2 small-pool and 2 large-pool segments mapped (fixed segments: one each for 3 MiB and
    // 5 MiB would share a 20 MiB one, so: one small, one large), 4 allocs, 2 frees.
    let kinds: Vec<u64> = data["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[0].as_u64().unwrap())
        .collect();
    assert_eq!(kinds.len(), trace.events.len());
    assert_eq!(kinds.iter().filter(|&&k| k == 0).count(), 4);
    assert_eq!(kinds.iter().filter(|&&k| k == 1).count(), 2);
    assert_eq!(
        kinds.iter().filter(|&&k| k == 2).count() as u64,
        snap.stats.backend_allocs
    );
    // Bands: the first label's run, then the second's (the unlabelled events make none).
    let bands = data["bands"].as_array().unwrap();
    assert_eq!(bands.len(), 2);
    assert_eq!(bands[0][0], 0);
    assert_eq!(bands[1][0], 1);
    // Allocations: 4 made in the trace, 2 live at the end with the snapshot's ids and sizes.
    let allocations = data["allocations"].as_array().unwrap();
    assert_eq!(allocations.len(), 4);
    let n = trace.events.len() as i64;
    let live: Vec<(u64, u64, u64)> = allocations
        .iter()
        .filter(|a| a["end"].as_i64() == Some(n))
        .map(|a| {
            (
                a["addr"].as_u64().unwrap(),
                a["size"].as_u64().unwrap(),
                a["id"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut expected: Vec<(u64, u64, u64)> = snap
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.allocated)
        .map(|b| (b.addr, b.size, b.id))
        .collect();
    expected.sort_unstable();
    let mut live_sorted = live.clone();
    live_sorted.sort_unstable();
    assert_eq!(live_sorted, expected);
    assert_eq!(
        allocations
            .iter()
            .filter(|a| a["label"] == serde_json::json!(0))
            .count(),
        2
    );
    assert!(allocations.iter().all(|a| a["drawn"] == true));
    // Each knows where it was made: this file, the raw `allocate` op, no shape.
    for a in allocations {
        assert_eq!(a["origin"]["file"], file!(), "{a}");
        assert_eq!(a["origin"]["op"], "allocate");
        assert_eq!(a["origin"]["shape"], serde_json::Value::Null);
    }
    assert_eq!(
        data["segments"].as_array().unwrap().len(),
        snap.segments.len()
    );
    assert_eq!(data["end"]["segments"], snap.segments.len());
    assert_eq!(data["end"]["live_blocks"], 2);
    drop((keep, later));
}

#[test]
fn an_empty_device_gives_a_page_that_says_so() {
    let quiet = Device::isolated_host();
    let html = memory::html_report(&quiet, "quiet");
    let data = embedded(&html);
    assert!(html.contains("No events recorded"));
    assert_eq!(data["events"].as_array().map(Vec::len), Some(0));
    assert_eq!(data["allocations"].as_array().map(Vec::len), Some(0));
    assert_eq!(data["segments"].as_array().map(Vec::len), Some(0));
}

/// One step of a replay test.
enum Step {
    /// Allocate this many bytes and hold the allocation (its index is the next in `held`).
    Alloc(usize),
    /// Drop the held allocation with this index.
    Free(usize),
    /// Return cached memory to the backend.
    EmptyCache,
}

/// Runs `steps`, takes a snapshot after each, and checks that replaying the trace to that
/// step gives it. `held` are allocations made before (they may predate the trace).
fn replay_matches_snapshots(device: &Device, mut held: Vec<Option<Allocation>>, steps: &[Step]) {
    let mut checkpoints = vec![(memory::trace(device).events.len(), memory::snapshot(device))];
    for step in steps {
        match *step {
            Step::Alloc(bytes) => held.push(Some(device.allocate(bytes).unwrap())),
            Step::Free(i) => drop(held[i].take()),
            Step::EmptyCache => {
                memory::empty_cache(device);
            }
        }
        checkpoints.push((memory::trace(device).events.len(), memory::snapshot(device)));
    }
    let data = TimelineData::new(&memory::trace(device), &memory::snapshot(device));
    for (at, snap) in &checkpoints {
        let (ranges, live) = data.state_at(*at as i64);
        assert_eq!(ranges, segments_of(snap), "mapped ranges after {at} events");
        assert_eq!(live, blocks_of(snap), "live blocks after {at} events");
    }
}

#[test]
fn replaying_fixed_segments_gives_the_snapshot_of_each_moment() {
    // Recording starts after two allocations: they are there before the first event.
    let device =
        Device::host_with_config(AllocatorConfig::default().with_expandable_segments(false))
            .unwrap();
    let early = vec![
        Some(device.allocate(64 * 1024).unwrap()),
        Some(device.allocate(4 * MIB).unwrap()),
    ];
    memory::record_trace(&device, 10_000);
    use Step::*;
    replay_matches_snapshots(
        &device,
        early,
        &[
            Alloc(30 * MIB),
            Alloc(2 * MIB),
            Free(1),
            Free(0),
            Alloc(512 * 1024),
            Free(2),
            EmptyCache,
            Alloc(6 * MIB),
        ],
    );
}

#[cfg(unix)]
#[test]
fn replaying_the_expandable_segment_follows_its_maps_and_unmaps() {
    let device = traced(AllocatorConfig::default().with_expandable_segments(true));
    assert!(memory::uses_expandable_segments(&device));
    use Step::*;
    replay_matches_snapshots(
        &device,
        Vec::new(),
        &[
            Alloc(4 * MIB),
            Alloc(100 * 1024),
            Alloc(6 * MIB),
            Free(0),
            // Unmaps the hole the first left and the free tail: the range is cut in pieces.
            EmptyCache,
            Alloc(2 * MIB),
            Free(2),
            EmptyCache,
        ],
    );
}

#[test]
fn fragmentation_is_inactive_split_and_the_unusable_share_of_cached_free() {
    let device = traced(AllocatorConfig::default().with_expandable_segments(false));
    // One 20 MiB segment: 4 MiB kept at its start, 6 MiB freed after it, then the tail.
    let first = device.allocate(4 * MIB).unwrap();
    let hole = device.allocate(6 * MIB).unwrap();
    let last = device.allocate(3 * MIB).unwrap();
    drop(hole);
    let snap = memory::snapshot(&device);
    let data = TimelineData::new(&memory::trace(&device), &snap);
    let f = data.end.fragmentation;
    let detailed = memory::detailed_stats(&device);
    assert_eq!(
        f.inactive_split_bytes,
        detailed.all.inactive_split_bytes.current
    );
    assert_eq!(f.inactive_split_bytes, (20 - 4 - 3) as u64 * MIB as u64);
    assert_eq!(f.cached_free_bytes, snap.stats.cached_free_bytes);
    assert_eq!(f.largest_free_block, 7 * MIB as u64);
    assert_eq!(f.free_split_ratio, 1.0 - 7.0 / 13.0);
    let html = memory::html_report(&device, "f");
    assert!(html.contains(&format!("{:.1} %", (1.0 - 7.0 / 13.0) * 100.0)));
    assert!(html.contains("1 − largest free block / cached free"));
    drop((first, last));
}

#[cfg(unix)]
#[test]
fn one_free_tail_is_not_fragmentation() {
    // The case: the old figure (1 − allocated/reserved) called this 63 %.
    let device = traced(AllocatorConfig::default().with_expandable_segments(true));
    let big = device.allocate(24 * MIB).unwrap();
    let small = device.allocate(12 * MIB).unwrap();
    drop(big);
    let kept = device.allocate(2 * MIB).unwrap();
    drop(small);
    let snap = memory::snapshot(&device);
    let f = TimelineData::new(&memory::trace(&device), &snap)
        .end
        .fragmentation;
    assert!(snap.stats.cached_free_bytes > 0);
    assert_eq!(f.largest_free_block, f.cached_free_bytes);
    assert_eq!(f.free_split_ratio, 0.0);
    drop(kept);
}

#[test]
fn a_peak_reset_inside_the_trace_is_located_and_said() {
    let device = traced(AllocatorConfig::default().with_expandable_segments(false));
    let big = device.allocate(8 * MIB).unwrap();
    drop(big);
    memory::reset_peak_stats(&device);
    let small = device.allocate(MIB / 2).unwrap();
    let trace = memory::trace(&device);
    let data = TimelineData::new(&trace, &memory::snapshot(&device));
    // Events: map, alloc 8 MiB (allocated above the new peak), free, map (small), alloc.
    let above = trace
        .events
        .iter()
        .rposition(|e| e.allocated_bytes > memory::stats(&device).peak_allocated_bytes);
    assert_eq!(data.end.reset_after_event, above);
    assert_eq!(above, Some(1));
    let html = memory::html_report(&device, "reset");
    assert!(html.contains("which came after event 2 of the trace"));
    drop(small);
}

#[test]
fn an_out_of_memory_is_an_event_of_the_page() {
    let device = Device::host_pool(
        crate::alloc::HostBackend::with_capacity(8 * MIB),
        AllocatorConfig::default()
            .with_expandable_segments(false)
            .with_trace_capacity(100),
    )
    .unwrap();
    assert!(device.allocate(16 * MIB).is_err());
    let data = embedded(&memory::html_report(&device, "oom"));
    let ooms = data["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e[0] == 4)
        .count();
    assert_eq!(ooms, 1);
    assert_eq!(data["kinds"][4], "oom");
}

#[test]
fn only_the_largest_allocations_are_drawn_one_by_one() {
    let device = traced(AllocatorConfig::default().with_expandable_segments(false));
    let mut kept = Vec::new();
    for i in 0..MAX_DRAWN_ALLOCATIONS + 10 {
        // The first 10 are the smallest (512 B); the rest 1 KiB.
        kept.push(device.allocate(if i < 10 { 512 } else { 1024 }).unwrap());
    }
    let data = TimelineData::new(&memory::trace(&device), &memory::snapshot(&device));
    assert_eq!(data.allocations.len(), MAX_DRAWN_ALLOCATIONS + 10);
    assert_eq!(
        data.allocations.iter().filter(|a| a.drawn).count(),
        MAX_DRAWN_ALLOCATIONS
    );
    assert!(data
        .allocations
        .iter()
        .filter(|a| !a.drawn)
        .all(|a| a.size == 512));
}
