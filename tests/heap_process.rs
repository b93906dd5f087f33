//! What the tracking allocator says on stderr, read from a child process: the report printed
//! when the soft limit (from `VRAMGUARD_ALLOC_CONF`) refuses an allocation, the one message
//! for a malformed `VRAMGUARD_ALLOC_CONF` in a program that uses only the tracking allocator and
//! the macros, and `heap_tracking:false`.
//!
//! No libtest harness (`harness = false`): the binary is both the parent, which runs each case
//! as a child with `VRAMGUARD_TEST_CHILD` set, and the child, which does what the case names.

use std::process::{Command, Output};
use vramguard::{heap, scope, TrackingAllocator};

#[global_allocator]
static ALLOC: TrackingAllocator = TrackingAllocator::system();

const CHILD: &str = "VRAMGUARD_TEST_CHILD";

fn main() {
    if let Ok(case) = std::env::var(CHILD) {
        child(&case);
        return;
    }
    let cases: [(&str, fn()); 3] = [
        (
            "crossing the soft limit prints what holds the memory, then the allocation fails",
            the_limit_report_names_the_largest_live_allocations,
        ),
        (
            "a malformed VRAMGUARD_ALLOC_CONF is reported once in a program of macros and heap",
            a_malformed_setting_is_reported_once,
        ),
        (
            "heap_tracking:false makes the allocator a pass-through",
            heap_tracking_false_turns_tracking_off,
        ),
    ];
    let mut failed = 0;
    for (name, case) in cases {
        match std::panic::catch_unwind(case) {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("{} passed, {failed} failed", cases.len() - failed);
    if failed > 0 {
        std::process::exit(1);
    }
}

fn run_child(case: &str, setting: &str) -> Output {
    let exe = std::env::current_exe().expect("the test binary knows its path");
    Command::new(exe)
        .env(CHILD, case)
        .env("VRAMGUARD_ALLOC_CONF", setting)
        .output()
        .expect("the test binary runs again as a child")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn child(case: &str) {
    match case {
        "limit" => {
            // 40 MiB held under a tag, then a request that crosses the 64 MiB limit.
            let _tag = scope::tag("weights");
            let held = vec![1u8; 40 << 20];
            drop(_tag);
            let request = vec![0u8; 30 << 20];
            println!("not reached: {} {}", held.len(), request.len());
        }
        "bad-config" => {
            #[vramguard::inference]
            fn forward(x: Vec<f32>) -> f32 {
                let y: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
                let z: Vec<f32> = y.iter().map(|v| v + 1.0).collect();
                z.iter().sum()
            }
            #[vramguard::batch_scope(label = "child-eval")]
            fn eval() -> f32 {
                let mut largest = 0.0f32;
                for i in 0..3 {
                    largest = largest.max(forward(vec![i as f32; 16]));
                }
                largest
            }
            assert!(heap::is_tracking());
            println!("{}", eval());
        }
        "off" => {
            let buffer = vec![0u8; 1 << 20];
            assert!(!heap::is_tracking(), "heap_tracking:false still tracks");
            assert_eq!(heap::stats().allocated_bytes, 0);
            drop(buffer);
        }
        other => panic!("unknown child case {other}"),
    }
}

fn the_limit_report_names_the_largest_live_allocations() {
    let output = run_child("limit", "memory_limit:64MiB");
    let text = stderr(&output);
    assert!(
        !output.status.success(),
        "the refused allocation must fail: {text}"
    );
    assert!(
        text.contains("out of memory on the heap (vramguard::TrackingAllocator): cannot allocate 30.0 MiB (31457280 bytes); memory limit reached"),
        "{text}"
    );
    assert!(text.contains("of a 64.0 MiB limit"), "{text}");
    assert!(
        text.contains("raise `memory_limit` in VRAMGUARD_ALLOC_CONF"),
        "{text}"
    );
    assert!(
        text.contains(
            "Largest live allocations (what holds the memory):\n    40.0 MiB  made in weights"
        ),
        "{text}"
    );
    // The report comes before Rust's own message about the failed allocation.
    let report = text.find("out of memory on the heap").unwrap_or(usize::MAX);
    let abort = text.find("memory allocation of 31457280 bytes failed");
    assert!(abort.is_some_and(|abort| report < abort), "{text}");
}

fn a_malformed_setting_is_reported_once() {
    let output = run_child("bad-config", "memory_limit=64MiB");
    let text = stderr(&output);
    assert!(output.status.success(), "{text}");
    assert_eq!(
        text.matches("VRAMGUARD_ALLOC_CONF").count(),
        2, // the variable's name, in the message and in its example of the right form
        "{text}"
    );
    assert_eq!(text.matches("error: vramguard:").count(), 1, "{text}");
    assert!(
        text.contains("malformed entry `memory_limit=64MiB`"),
        "{text}"
    );
    assert!(
        text.contains("uses the default allocator settings"),
        "{text}"
    );
}

fn heap_tracking_false_turns_tracking_off() {
    let output = run_child("off", "heap_tracking:false");
    assert!(output.status.success(), "{}", stderr(&output));
}
