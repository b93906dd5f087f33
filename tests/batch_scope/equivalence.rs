//! Loops with and without `#[batch_scope]` compute the same values, and every exit leaves the
//! scope.

use crate::support::T;
use vramguard::scope;
use vramguard::{batch_scope, memory, Device};

/// A few SGD steps of a 2-layer regression model, returning each step's loss.
fn train_plain(dev: &Device, steps: usize) -> Vec<f32> {
    let mut w1 = T::seeded(dev, 4, 8, 1);
    let mut w2 = T::seeded(dev, 8, 1, 2);
    let mut losses = Vec::new();
    for step in 0..steps {
        let x = T::seeded(dev, 16, 4, 100 + step as u64);
        let h = x.matmul(&w1);
        let h = h.relu();
        let y = h.matmul(&w2);
        let loss = y.mse(0.25);
        let g2 = h.t_matmul(&y);
        let g1 = x.t_matmul(&h.matmul(&T::seeded(dev, 8, 8, 7)));
        w1.sgd_step(&g1, 0.01);
        w2.sgd_step(&g2, 0.01);
        losses.push(loss.item());
    }
    losses
}

#[batch_scope(label = "equivalence-train")]
fn train_scoped(dev: &Device, steps: usize) -> Vec<f32> {
    let mut w1 = T::seeded(dev, 4, 8, 1);
    let mut w2 = T::seeded(dev, 8, 1, 2);
    let mut losses = Vec::new();
    for step in 0..steps {
        let x = T::seeded(dev, 16, 4, 100 + step as u64);
        let h = x.matmul(&w1);
        let h = h.relu();
        let y = h.matmul(&w2);
        let loss = y.mse(0.25);
        let g2 = h.t_matmul(&y);
        let g1 = x.t_matmul(&h.matmul(&T::seeded(dev, 8, 8, 7)));
        w1.sgd_step(&g1, 0.01);
        w2.sgd_step(&g2, 0.01);
        losses.push(loss.item());
    }
    losses
}

#[test]
fn training_losses_are_bit_identical_with_and_without_the_attribute() {
    let dev = Device::isolated_host();
    let plain = train_plain(&dev, 5);
    let scoped = train_scoped(&dev, 5);
    assert_eq!(
        plain.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        scoped.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    let report = scope::last_report("equivalence-train").expect("report");
    assert_eq!(report.iterations, 5);
    assert_eq!(
        report.live_bytes, 0,
        "nothing escapes: losses are host scalars"
    );
    assert_eq!(memory::stats(&dev).allocated_bytes, 0);
}

#[derive(Debug, PartialEq)]
enum Exit {
    Finished(Vec<i64>),
    Broke(i64),
    Returned(i64),
    Failed(String),
}

fn parse_all(items: &[&str]) -> Result<Vec<i64>, String> {
    let mut out = Vec::new();
    for item in items {
        let value: i64 = item.parse().map_err(|_| format!("bad item {item}"))?;
        out.push(value);
    }
    Ok(out)
}

macro_rules! control_flow {
    ($name:ident $(, #[$attr:meta])?) => {
        $(#[$attr])?
        fn $name(items: &[i64], dev: &Device) -> Result<Exit, String> {
            let mut seen = Vec::new();
            let mut i = 0;
            let found = loop {
                if i >= items.len() {
                    break None;
                }
                let item = items[i];
                i += 1;
                let _memory = T::seeded(dev, 2, 2, item as u64);
                if item < 0 {
                    continue;
                }
                if item == 99 {
                    return Ok(Exit::Returned(item));
                }
                if item == 42 {
                    break Some(item * 2);
                }
                seen.push(item);
            };
            let mut total = 0;
            'outer: for a in 0..3 {
                for b in 0..3 {
                    if a * b == 2 {
                        break 'outer;
                    }
                    total += a + b;
                }
            }
            let mut n = 0;
            while n < 3 {
                n += 1;
                if items.contains(&77) {
                    parse_all(&["1", "x"])?;
                }
            }
            seen.push(total);
            Ok(match found {
                Some(value) => Exit::Broke(value),
                None => Exit::Finished(seen),
            })
        }
    };
}

control_flow!(flow_plain);
control_flow!(flow_scoped, #[batch_scope]);

#[test]
fn every_exit_gives_the_same_result_and_leaves_the_scope() {
    let dev = Device::isolated_host();
    let cases: [&[i64]; 5] = [&[1, -2, 3], &[1, 42, 5], &[7, 99, 1], &[77], &[]];
    for items in cases {
        let plain = flow_plain(items, &dev).unwrap_or_else(Exit::Failed);
        let scoped = flow_scoped(items, &dev).unwrap_or_else(Exit::Failed);
        assert_eq!(plain, scoped, "items {items:?}");
        assert_eq!(scope::current_label(), None, "items {items:?}");
        assert_eq!(memory::stats(&dev).allocated_bytes, 0);
    }
}

#[batch_scope]
fn panics_in_the_loop(dev: &Device) {
    for i in 0..3 {
        let _value = T::seeded(dev, 4, 4, i);
        if i == 1 {
            panic!("model code failed");
        }
    }
}

#[test]
fn a_panic_in_the_loop_leaves_the_scope() {
    let dev = Device::isolated_host();
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| panics_in_the_loop(&dev)));
    assert!(result.is_err());
    assert_eq!(scope::current_label(), None);
    assert_eq!(memory::stats(&dev).allocated_bytes, 0);
}

#[batch_scope]
fn default_label(dev: &Device) -> (String, u32) {
    let mut seen = (String::new(), 0);
    for i in 0..2 {
        let body_line = line!();
        let _value = T::seeded(dev, 1, 1, i);
        seen = (scope::current_label().unwrap_or_default(), body_line - 1);
    }
    seen
}

#[test]
fn the_default_label_is_module_function_and_loop_line() {
    let dev = Device::isolated_host();
    let (label, loop_line) = default_label(&dev);
    assert_eq!(
        label,
        format!("{}::default_label:{loop_line}", module_path!())
    );
    assert_eq!(scope::last_report(&label).map(|r| r.iterations), Some(2));
}

#[batch_scope]
fn only_marked_loops(dev: &Device) -> usize {
    let mut count = 0;
    for i in 0..2 {
        let _value = T::seeded(dev, 1, 1, i);
        count += usize::from(scope::current_label().is_some());
    }
    #[batch_scope(label = "marked-loop")]
    for i in 0..3 {
        let _value = T::seeded(dev, 1, 1, i);
        count += usize::from(scope::current_label().is_some());
    }
    count
}

#[test]
fn markers_select_the_loops() {
    let dev = Device::isolated_host();
    assert_eq!(
        only_marked_loops(&dev),
        3,
        "only the marked loop's iterations are scoped"
    );
    let report = scope::last_report("marked-loop").expect("report");
    assert_eq!(report.iterations, 3);
    assert_eq!(report.allocated_count, 1);
}

#[batch_scope(label = "strict-macro", strict, warn_after = 2)]
#[vramguard::allow(accumulates_across_iterations)]
fn leaks_strictly(dev: &Device, history: &mut Vec<T>) {
    for i in 0..10 {
        let value = T::seeded(dev, 2, 2, i).relu();
        history.push(value);
    }
}

#[test]
fn strict_fails_on_sustained_growth() {
    let dev = Device::isolated_host();
    let mut history = Vec::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        leaks_strictly(&dev, &mut history)
    }));
    assert!(result.is_err());
    assert_eq!(history.len(), 3, "baseline, then 2 growing iterations");
}

#[batch_scope(label = "every-macro", every = 2)]
fn with_cache_policy(dev: &Device) -> Vec<Option<u64>> {
    let mut released = Vec::new();
    for i in 0..4 {
        released.push(scope::last_report("every-macro").and_then(|r| r.cache_released_bytes));
        let _value = T::seeded(dev, 8, 8, i);
    }
    released
}

#[test]
fn every_n_empties_the_cache_on_the_nth_iterations() {
    let dev = Device::isolated_host();
    let released = with_cache_policy(&dev);
    // Seen at the top of iterations 2..=4: iteration 2's exit ran the policy.
    assert_eq!(released[1], None);
    assert!(released[2].is_some());
    assert_eq!(released[3], None);
    let last = scope::last_report("every-macro").expect("report");
    assert!(last.cache_released_bytes.is_some());
    let stats = memory::stats(&dev);
    assert_eq!(
        stats.reserved_bytes, stats.allocated_bytes,
        "the cache is empty after iteration 4"
    );
}

mod renamed {
    use crate::support::T;
    use vramguard as vg;

    #[vg::batch_scope(crate = vg, label = "renamed-crate")]
    pub fn run(dev: &vg::Device) -> usize {
        let mut n = 0;
        for i in 0..2 {
            let _value = T::seeded(dev, 1, 1, i);
            n += 1;
        }
        n
    }
}

#[test]
fn crate_option_works_with_a_renamed_facade() {
    let dev = Device::isolated_host();
    assert_eq!(renamed::run(&dev), 2);
    assert_eq!(
        scope::last_report("renamed-crate").map(|r| r.iterations),
        Some(2)
    );
}
