//! The event trace and the snapshot: a bounded ring in order, its times, its labels.

use super::*;

#[test]
fn trace_records_events_with_labels_in_a_bounded_ring() {
    let before = std::time::Instant::now();
    let a = alloc(None, fixed_config().with_trace_capacity(4));
    let x = {
        let _label = tag("batch 7");
        a.allocate(4 * KIB).unwrap()
    };
    assert_eq!(crate::trace::thread_label(), None);
    a.free(x);
    let t = a.trace();
    let kinds: Vec<TraceEventKind> = t.events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![
            TraceEventKind::SegmentAlloc,
            TraceEventKind::Alloc,
            TraceEventKind::Free
        ]
    );
    let label = t.events[1].label.as_ref().map(|l| l.to_string());
    assert_eq!(label.as_deref(), Some("batch 7"));
    assert_eq!(t.events[1].size, 4 * KIB as u64);
    assert_eq!(t.events[1].allocated_bytes, 4 * KIB as u64);
    assert_eq!(t.events[2].label, None);
    assert!(t.events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    // Times count from the allocator's creation: none exceeds the time since just before it.
    let since_before = before.elapsed().as_nanos() as u64;
    assert!(
        t.events.iter().all(|e| e.time_ns <= since_before),
        "{since_before} ns since creation: {:?}",
        t.events.iter().map(|e| e.time_ns).collect::<Vec<_>>()
    );
    a.empty_cache();
    let y = a.allocate(512).unwrap();
    a.free(y);
    let t = a.trace();
    assert_eq!(t.events.len(), 4);
    assert_eq!(t.dropped, 3);
    assert_eq!(t.events[3].kind, TraceEventKind::Free);
    let json: serde_json::Value = serde_json::from_str(&t.to_json()).unwrap();
    assert_eq!(json["events"][0]["kind"], "segment_free");
    a.clear_trace();
    assert!(a.trace().events.is_empty());

    let off = alloc(None, fixed_config().with_trace_capacity(0));
    let z = off.allocate(1).unwrap();
    off.free(z);
    assert!(off.trace().events.is_empty());
}

/// The ring overwrites its oldest event in place once full: what it shows is still the newest
/// events, oldest first, each alloc and free with the origin of its block.
#[test]
fn trace_ring_keeps_the_newest_events_in_order_across_wraps() {
    let a = alloc(None, fixed_config().with_trace_capacity(5));
    let mut lines = Vec::new();
    for kib in 1..=6 {
        lines.push(line!() + 1);
        let block = a.allocate(kib * KIB).unwrap();
        a.free(block);
    }
    let t = a.trace();
    // A segment, then an alloc and a free per block: 13 events, the last 5 kept.
    assert_eq!(t.dropped, 8);
    let kib = |k: usize| (k * KIB) as u64;
    let shown: Vec<(TraceEventKind, u64)> = t.events.iter().map(|e| (e.kind, e.size)).collect();
    assert_eq!(
        shown,
        vec![
            (TraceEventKind::Free, kib(4)),
            (TraceEventKind::Alloc, kib(5)),
            (TraceEventKind::Free, kib(5)),
            (TraceEventKind::Alloc, kib(6)),
            (TraceEventKind::Free, kib(6)),
        ]
    );
    let origin_lines: Vec<u32> = t
        .events
        .iter()
        .map(|e| e.origin.as_ref().map_or(0, |o| o.line))
        .collect();
    assert_eq!(
        origin_lines,
        vec![lines[3], lines[4], lines[4], lines[5], lines[5]]
    );
    assert!(t.events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    a.clear_trace();
    let block = a.allocate(KIB).unwrap();
    a.free(block);
    let t = a.trace();
    assert_eq!(t.dropped, 0);
    let kinds: Vec<TraceEventKind> = t.events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, vec![TraceEventKind::Alloc, TraceEventKind::Free]);
}

/// An alloc or free event is written first and stamped at the end of its call
/// (`State::stamp_block_event`), with the clock read before the call took the lock: each
/// event's time falls inside the call that made it, wherever the newest event sits in a ring
/// that wraps.
#[test]
fn trace_times_fall_inside_the_calls_that_made_them() {
    use std::time::{Duration, Instant};
    // Calls 2 ms apart, checked to 0.2 ms: far above the conversion's error (tens of ns), far
    // below the gap, so a time taken at another call, or never, lands outside.
    const GAP: Duration = Duration::from_millis(2);
    const SLACK_NS: u64 = 200_000;
    let before_creation = Instant::now();
    let a = alloc(None, fixed_config().with_trace_capacity(3));
    let creation_window = before_creation.elapsed().as_nanos() as u64;
    let since = |t: Instant| t.duration_since(before_creation).as_nanos() as u64;
    let mut live = Vec::new();
    for call in 0..10 {
        std::thread::sleep(GAP);
        let start = Instant::now();
        let kind = if call % 3 == 2 {
            a.free(live.pop().unwrap());
            TraceEventKind::Free
        } else {
            live.push(a.allocate((call + 1) * KIB).unwrap());
            TraceEventKind::Alloc
        };
        let end = Instant::now();
        let t = a.trace();
        let newest = t.events.last().unwrap();
        assert_eq!(newest.kind, kind, "call {call}");
        // The allocator was created within `creation_window` ns of `before_creation`.
        assert!(
            newest.time_ns + creation_window + SLACK_NS >= since(start)
                && newest.time_ns <= since(end) + SLACK_NS,
            "call {call}: event at {} ns after creation, call from {} to {} ns",
            newest.time_ns,
            since(start),
            since(end)
        );
        assert!(t.events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    }
    for block in live {
        a.free(block);
    }
}

/// Threads recording through one allocator: each call reads the clock before it takes the lock
/// (`CachingAllocator::early_read`), so a call can read it before another call that gets the
/// lock first. Times still never go backwards in the ring, and every pair is recorded.
#[test]
fn trace_times_never_go_backwards_with_threads_racing_for_the_lock() {
    const THREADS: usize = 4;
    const PAIRS: usize = 3000;
    let a = alloc(
        None,
        fixed_config().with_trace_capacity(4 * THREADS * PAIRS),
    );
    std::thread::scope(|s| {
        for thread in 0..THREADS {
            let a = &a;
            s.spawn(move || {
                for pair in 0..PAIRS {
                    let block = a.allocate((1 + (thread + pair) % 7) * KIB).unwrap();
                    a.free(block);
                }
            });
        }
    });
    let t = a.trace();
    let count = |kind| t.events.iter().filter(|e| e.kind == kind).count();
    assert_eq!(count(TraceEventKind::Alloc), THREADS * PAIRS);
    assert_eq!(count(TraceEventKind::Free), THREADS * PAIRS);
    let backwards = t
        .events
        .windows(2)
        .filter(|w| w[0].time_ns > w[1].time_ns)
        .count();
    assert_eq!(
        backwards, 0,
        "events whose time is before the previous event's"
    );
}

/// Consecutive events under one label share it in the ring; each event still shows its own
/// label after older ones were overwritten.
/// A 1 KiB block allocated and freed: two trace events.
fn traced_pair(a: &CachingAllocator<HostBackend>) {
    let block = a.allocate(KIB).unwrap();
    a.free(block);
}

/// The labels of the trace's events, oldest first.
fn trace_labels(a: &CachingAllocator<HostBackend>) -> Vec<Option<String>> {
    a.trace()
        .events
        .iter()
        .map(|e| e.label.as_ref().map(|l| l.to_string()))
        .collect()
}

#[test]
fn trace_ring_labels_follow_their_events_across_wraps() {
    let a = alloc(None, fixed_config().with_trace_capacity(4));
    let (pair, labels) = (traced_pair, trace_labels);
    let name = |n: &str| Some(n.to_string());
    {
        let _tag = tag("a");
        pair(&a);
        pair(&a);
    }
    // The segment's event and four of the block's, the oldest overwritten.
    assert_eq!(labels(&a), vec![name("a"), name("a"), name("a"), name("a")]);
    {
        let _tag = tag("b");
        pair(&a);
    }
    assert_eq!(labels(&a), vec![name("a"), name("a"), name("b"), name("b")]);
    pair(&a);
    assert_eq!(labels(&a), vec![name("b"), name("b"), None, None]);
    {
        let _tag = tag("c");
        pair(&a);
        pair(&a);
    }
    assert_eq!(labels(&a), vec![name("c"), name("c"), name("c"), name("c")]);
    // A segment and six pairs: 13 events, 4 kept.
    assert_eq!(a.trace().dropped, 13 - 4);
}

/// Events refer to their labels by index into the ring's table of labels: with a new label
/// every step (a batch scope's iterations are new labels) and unlabelled events between, every
/// event keeps its own label across wraps and compactions, and labels no event refers to any
/// more are dropped, so the table stays bounded.
#[test]
fn trace_labels_stay_right_and_bounded_under_many_labels() {
    let a = alloc(None, fixed_config().with_trace_capacity(8));
    let (pair, labels) = (traced_pair, trace_labels);
    let name = |i: usize| Some(format!("step {i}"));
    let mut most_entries = 0;
    for i in 0..500 {
        {
            let _tag = tag(format!("step {i}"));
            pair(&a);
        }
        // Unlabelled between two labels: the cached label changes twice per step.
        pair(&a);
        if i >= 2 {
            let (last, now) = (name(i - 1), name(i));
            let expected = vec![last.clone(), last, None, None, now.clone(), now, None, None];
            assert_eq!(labels(&a), expected, "step {i}");
        }
        most_entries = most_entries.max(a.trace_label_entries());
    }
    assert!(most_entries <= 64, "{most_entries} label entries");
}

#[test]
fn snapshot_lists_segments_and_blocks_as_json() {
    let a = fixed();
    let x = a.allocate(1000).unwrap();
    let snap = a.snapshot();
    let json: serde_json::Value = serde_json::from_str(&snap.to_json()).unwrap();
    assert_eq!(json["device"], "host");
    assert_eq!(json["segments"][0]["pool"], "small");
    assert_eq!(json["segments"][0]["blocks"][0]["requested"], 1000);
    assert_eq!(json["segments"][0]["blocks"][0]["allocated"], true);
    assert_eq!(json["segments"][0]["blocks"][1]["allocated"], false);
    assert_eq!(json["stats"]["allocated_bytes"], 1024);
    a.free(x);
}
