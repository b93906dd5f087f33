//! Growth warnings go through `tracing`.

use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};
use vramguard_memory::scope::{BatchScope, ScopeOptions};
use vramguard_memory::Device;

/// Records the messages of `warn` events.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

struct Message(String);
impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Warnings {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() == Level::WARN {
            let mut message = Message(String::new());
            event.record(&mut message);
            self.0.lock().expect("lock").push(message.0);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn sustained_growth_warns_once_per_threshold_and_flat_loops_never_warn() {
    let warnings = Warnings::default();
    let dev = Device::isolated_host();
    tracing::subscriber::with_default(warnings.clone(), || {
        let options = ScopeOptions::new().warn_after_growing(4);
        let mut history = Vec::new();
        // Iteration 1 is the baseline; 2..=5 grow (warn), 6..=9 grow (warn again), 10 grows.
        for _ in 0..10 {
            let _scope = BatchScope::enter_with("warned", options.clone());
            history.push(dev.allocate(1024).expect("alloc"));
        }
        for _ in 0..10 {
            let _scope = BatchScope::enter_with("flat", options.clone());
            drop(dev.allocate(1024).expect("alloc"));
        }
    });
    let warnings = warnings.0.lock().expect("lock").clone();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("live memory keeps growing"),
        "{}",
        warnings[0]
    );
    assert!(warnings[0].contains("`warned`"), "{}", warnings[0]);
}
