//! Exact-byte accounting of batch scopes on an isolated host device.

use vramguard_memory::device::Allocation;
use vramguard_memory::memory;
use vramguard_memory::scope::{self, BatchScope, ScopeOptions};
use vramguard_memory::Device;

const ACT: usize = 4096;

fn alloc(dev: &Device, bytes: usize) -> Allocation {
    dev.allocate(bytes).expect("host allocation")
}

#[test]
fn a_loop_pushing_into_an_outer_vec_is_reported_and_the_same_loop_without_push_is_not() {
    let dev = Device::isolated_host();
    let block = alloc(&dev, ACT).size() as u64;

    let mut history = Vec::new();
    for _ in 0..5 {
        let _scope = BatchScope::enter("pushing");
        let activation = alloc(&dev, ACT);
        let scratch = alloc(&dev, ACT);
        drop(scratch);
        history.push(activation);
    }
    let leaky = scope::last_report("pushing").expect("report");
    assert_eq!(leaky.iterations, 5);
    assert_eq!(leaky.allocated_count, 2);
    assert_eq!(leaky.allocated_bytes, 2 * block);
    assert_eq!(leaky.escaped_count, 1);
    assert_eq!(leaky.escaped_bytes, block);
    assert_eq!(leaky.live_count, 5);
    assert_eq!(leaky.live_bytes, 5 * block);
    assert_eq!(leaky.older_iterations_alive, 4);
    assert_eq!(
        leaky.growth_streak, 4,
        "iterations 2..=5 each end at a new high"
    );
    assert_eq!(leaky.escaped_by_tag.len(), 1);
    assert_eq!(leaky.escaped_by_tag[0].tag, "pushing");
    assert_eq!(leaky.escaped_by_tag[0].bytes, block);
    // The scope saw exactly what the allocator holds for it.
    assert_eq!(memory::stats(&dev).allocated_bytes, 5 * block);
    drop(history);

    for _ in 0..5 {
        let _scope = BatchScope::enter("not-pushing");
        let activation = alloc(&dev, ACT);
        let scratch = alloc(&dev, ACT);
        drop((activation, scratch));
    }
    let clean = scope::last_report("not-pushing").expect("report");
    assert_eq!(clean.allocated_bytes, 2 * block);
    assert_eq!(clean.escaped_count, 0);
    assert_eq!(clean.escaped_bytes, 0);
    assert!(clean.escaped_by_tag.is_empty());
    assert_eq!(clean.live_bytes, 0);
    assert_eq!(clean.growth_streak, 0);
    assert!(!clean.has_escapes());
    assert_eq!(memory::stats(&dev).allocated_bytes, 0);
}

#[test]
fn frees_after_the_iteration_are_seen_and_peak_is_per_iteration() {
    let dev = Device::isolated_host();
    let small = alloc(&dev, 512).size() as u64;
    let big = alloc(&dev, 8 * 512).size() as u64;
    let kept = {
        let _scope = BatchScope::enter("late-free");
        let a = alloc(&dev, 8 * 512);
        let b = alloc(&dev, 512);
        drop(a);
        b
    };
    let first = scope::last_report("late-free").expect("report");
    assert_eq!(first.peak_live_bytes, big + small);
    assert_eq!(first.escaped_bytes, small);
    drop(kept); // freed outside any scope: the label's live set still sees it
    {
        let _scope = BatchScope::enter("late-free");
        drop(alloc(&dev, 512));
    }
    let second = scope::last_report("late-free").expect("report");
    assert_eq!(second.live_bytes, 0);
    assert_eq!(second.older_iterations_alive, 0);
    assert_eq!(second.peak_live_bytes, small);
}

#[test]
fn carried_state_escapes_every_iteration_but_does_not_grow_and_strict_accepts_it() {
    let dev = Device::isolated_host();
    let options = ScopeOptions::new().strict(true).warn_after_growing(3);
    // `h = step(h)` with an optimizer state created lazily in the first iteration.
    let mut h = alloc(&dev, ACT);
    let mut optimizer_state: Option<Allocation> = None;
    let mut reports = Vec::new();
    for _ in 0..20 {
        let guard = BatchScope::enter_with("rnn", options.clone());
        if optimizer_state.is_none() {
            optimizer_state = Some(alloc(&dev, 2 * ACT));
        }
        let next = alloc(&dev, ACT);
        h = next;
        reports.push(guard.exit());
    }
    let block = h.size() as u64;
    let state = optimizer_state.as_ref().map_or(0, |s| s.size() as u64);
    assert_eq!(reports[0].escaped_bytes, block + state);
    for report in &reports[1..] {
        assert_eq!(report.escaped_count, 1);
        assert_eq!(report.escaped_bytes, block);
        assert_eq!(report.live_bytes, block + state, "flat live memory");
        assert_eq!(report.growth_streak, 0);
    }
    assert_eq!(
        reports[19].older_iterations_alive, 1,
        "the optimizer state of iteration 1"
    );
}

#[test]
fn strict_mode_panics_on_sustained_growth_with_the_report() {
    let dev = Device::isolated_host();
    let options = ScopeOptions::new().strict(true).warn_after_growing(3);
    let mut history = Vec::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for _ in 0..10 {
            let _scope = BatchScope::enter_with("strict-leak", options.clone());
            history.push(alloc(&dev, ACT));
        }
    }));
    let message = result
        .expect_err("strict scope must fail")
        .downcast::<String>()
        .map(|s| *s)
        .unwrap_or_default();
    assert!(
        message.contains("grew at the end of 3 iterations"),
        "{message}"
    );
    assert!(message.contains("strict-leak"), "{message}");
    // Iteration 1 is the baseline; iterations 2, 3 and 4 grow; the 4th fails.
    assert_eq!(history.len(), 4);
    assert_eq!(scope::current_label(), None, "the failed scope was left");
}

#[test]
fn a_leak_every_other_iteration_still_grows_and_a_sawtooth_resets() {
    let dev = Device::isolated_host();
    let mut history = Vec::new();
    for i in 0..9 {
        let _scope = BatchScope::enter("every-other");
        let value = alloc(&dev, ACT);
        if i % 2 == 0 {
            history.push(value);
        }
    }
    assert_eq!(
        scope::last_report("every-other").map(|r| r.growth_streak),
        Some(4)
    );

    let mut accumulated = Vec::new();
    let mut streaks = Vec::new();
    for i in 1..=9 {
        let guard = BatchScope::enter("sawtooth");
        accumulated.push(alloc(&dev, ACT));
        if i % 3 == 0 {
            accumulated.clear(); // gradient accumulation: freed every 3 steps
        }
        streaks.push(guard.exit().growth_streak);
    }
    assert_eq!(streaks, vec![0, 1, 0, 1, 2, 0, 1, 2, 0]);
}

#[test]
fn nested_scopes_attribute_to_the_innermost_and_restore_on_exit() {
    let dev = Device::isolated_host();
    let mut kept = Vec::new();
    {
        let _outer = BatchScope::enter("outer");
        kept.push(alloc(&dev, 512));
        {
            let _inner = BatchScope::enter("inner");
            assert_eq!(scope::current_label().as_deref(), Some("inner"));
            kept.push(alloc(&dev, 1024));
        }
        assert_eq!(scope::current_label().as_deref(), Some("outer"));
        kept.push(alloc(&dev, 512));
    }
    assert_eq!(scope::current_label(), None);
    let inner = scope::last_report("inner").expect("inner report");
    let outer = scope::last_report("outer").expect("outer report");
    assert_eq!(inner.allocated_bytes, kept[1].size() as u64);
    assert_eq!(inner.escaped_count, 1);
    assert_eq!(outer.allocated_count, 2);
    assert_eq!(
        outer.escaped_bytes,
        (kept[0].size() + kept[2].size()) as u64
    );
}

#[test]
fn a_panic_inside_a_scope_leaves_it_and_still_reports() {
    let dev = Device::isolated_host();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _scope = BatchScope::enter_with("panicking", ScopeOptions::new().strict(true));
        let _value = alloc(&dev, ACT);
        panic!("model code failed");
    }));
    assert!(result.is_err());
    assert_eq!(scope::current_label(), None);
    let report = scope::last_report("panicking").expect("report");
    assert_eq!(report.allocated_count, 1);
    // The value was dropped while unwinding, before the guard (declared first).
    assert_eq!(report.escaped_count, 0);
    assert_eq!(memory::stats(&dev).allocated_bytes, 0);
}

#[test]
fn tags_group_escapes() {
    let dev = Device::isolated_host();
    let mut history = Vec::new();
    {
        let _scope = BatchScope::enter("tagged");
        {
            let _tag = scope::tag("generator");
            history.push(alloc(&dev, 2048));
            history.push(alloc(&dev, 2048));
        }
        let _tag = scope::tag("discriminator");
        history.push(alloc(&dev, 512));
    }
    let report = scope::last_report("tagged").expect("report");
    let groups: Vec<(&str, u64, u64)> = report
        .escaped_by_tag
        .iter()
        .map(|g| (g.tag.as_str(), g.count, g.bytes))
        .collect();
    let gen = (history[0].size() + history[1].size()) as u64;
    let disc = history[2].size() as u64;
    assert_eq!(
        groups,
        vec![("generator", 2, gen), ("discriminator", 1, disc)]
    );
    let text = report.to_string();
    assert!(text.contains("escaped from `generator`"), "{text}");
}

#[test]
fn frees_on_another_thread_are_accounted() {
    let dev = Device::isolated_host();
    let value = {
        let _scope = BatchScope::enter("cross-thread");
        alloc(&dev, ACT)
    };
    std::thread::spawn(move || drop(value))
        .join()
        .expect("thread");
    {
        let _scope = BatchScope::enter("cross-thread");
    }
    let report = scope::last_report("cross-thread").expect("report");
    assert_eq!(report.live_bytes, 0);
}

#[test]
fn empty_cache_every_n_runs_on_the_scope_devices_and_reports_the_released_bytes() {
    let dev = Device::isolated_host();
    let options = ScopeOptions::new().empty_cache_every(3);
    let mut released = Vec::new();
    for _ in 0..6 {
        let guard = BatchScope::enter_with("cache-policy", options.clone());
        let a = alloc(&dev, 3 * ACT);
        let b = alloc(&dev, ACT);
        drop((a, b));
        let reserved_before_exit = memory::stats(&dev).reserved_bytes;
        let report = guard.exit();
        let after = memory::stats(&dev);
        match report.cache_released_bytes {
            Some(bytes) => {
                // Exactly the cached bytes went back: nothing allocated is left reserved.
                assert_eq!(bytes, reserved_before_exit - after.reserved_bytes);
                assert_eq!(after.reserved_bytes, after.allocated_bytes);
            }
            None => assert_eq!(after.reserved_bytes, reserved_before_exit),
        }
        released.push(report.cache_released_bytes.is_some());
    }
    assert_eq!(released, vec![false, false, true, false, false, true]);
    assert_eq!(memory::stats(&dev).allocated_bytes, 0);
}

#[test]
fn reset_forgets_the_label_on_this_thread() {
    let dev = Device::isolated_host();
    let mut kept = Vec::new();
    for _ in 0..3 {
        let _scope = BatchScope::enter("resettable");
        kept.push(alloc(&dev, 512));
    }
    assert_eq!(
        scope::last_report("resettable").map(|r| r.growth_streak),
        Some(2)
    );
    scope::reset("resettable");
    assert_eq!(scope::last_report("resettable"), None);
    {
        let _scope = BatchScope::enter("resettable");
    }
    let fresh = scope::last_report("resettable").expect("report");
    assert_eq!(fresh.iterations, 1);
    assert_eq!(
        fresh.live_bytes, 0,
        "the old allocations belong to the old state"
    );
}
