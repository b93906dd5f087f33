//! What the tracking allocator says on stderr, read from a child process: the report printed
//! when the soft limit (from `VRAMGUARD_ALLOC_CONF`) refuses an allocation, the one message
//! for a malformed `VRAMGUARD_ALLOC_CONF` in a program that uses only the tracking allocator and
//! the macros, and `heap_tracking:false`; and the report written at exit
//! (`VRAMGUARD_HEAP_REPORT`, with and without the peak census), read from the file it names.
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
    let cases: [(&str, fn()); 5] = [
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
        (
            "the exit report gives the program's exact peak, the same with the census on",
            the_exit_report_gives_the_exact_peak_with_or_without_the_census,
        ),
        (
            "the census lists what was live at the peak, by label, summing to the peak",
            the_census_lists_what_was_live_at_the_peak_by_label,
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

/// Runs `case` as a child that writes its exit report (and, with `census`, the peak census) to
/// a file; returns the child's output and the report.
fn run_child_with_report(case: &str, census: bool) -> (Output, serde_json::Value) {
    let exe = std::env::current_exe().expect("the test binary knows its path");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("heap-report-{case}-{census}.json"));
    let _ = std::fs::remove_file(&path);
    let mut command = Command::new(exe);
    command
        .env(CHILD, case)
        .env_remove("VRAMGUARD_ALLOC_CONF")
        .env(heap::REPORT_ENV, &path);
    if census {
        command.env(heap::CENSUS_ENV, "1");
    } else {
        command.env_remove(heap::CENSUS_ENV);
    }
    let output = command
        .output()
        .expect("the test binary runs again as a child");
    assert!(output.status.success(), "{}", stderr(&output));
    let text = std::fs::read_to_string(&path).expect("the child wrote its report at exit");
    let report = serde_json::from_str(&text).expect("the report is one JSON object");
    (output, report)
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
        "peak" => {
            // Held at the peak: 1 MiB of weights, then three 256 KiB activations at once.
            let weights = {
                let _tag = scope::tag("weights");
                vec![1u8; 1 << 20]
            };
            let activations: Vec<Vec<u8>> = {
                let _tag = scope::tag("forward");
                (0..3).map(|i| vec![i as u8; 256 << 10]).collect()
            };
            drop(activations);
            // Smaller than the peak: not what the census lists.
            let later = {
                let _tag = scope::tag("later");
                vec![2u8; 512 << 10]
            };
            let peak = heap::stats().peak_allocated_bytes;
            println!("{peak} {} {}", weights.len(), later.len());
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

fn the_exit_report_gives_the_exact_peak_with_or_without_the_census() {
    let (output, plain) = run_child_with_report("peak", false);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let printed: u64 = stdout
        .split_whitespace()
        .next()
        .and_then(|peak| peak.parse().ok())
        .unwrap_or_else(|| panic!("the child prints its peak: {stdout}"));
    assert_eq!(plain["tracking"], true, "{plain}");
    assert_eq!(plain["peak_bytes"], printed, "{plain}");
    assert!(plain.get("census").is_none(), "{plain}");
    assert!(
        printed >= (1 << 20) + 3 * (256 << 10),
        "the weights and the activations: {printed}"
    );
    // The census's own tables are not counted: the same peak to the byte.
    let (_, with_census) = run_child_with_report("peak", true);
    assert_eq!(with_census["peak_bytes"], printed, "{with_census}");
    assert_eq!(
        with_census["census"]["peak_bytes"], printed,
        "{with_census}"
    );
}

fn the_census_lists_what_was_live_at_the_peak_by_label() {
    let (_, report) = run_child_with_report("peak", true);
    let census = &report["census"];
    let groups = census["groups"].as_array().expect("groups");
    let group = |label: &str, size: u64| {
        groups
            .iter()
            .find(|g| g["label"] == label && g["size"] == size)
            .unwrap_or_else(|| panic!("no group {label} of {size} B: {report}"))
    };
    let weights = group("weights", 1 << 20);
    assert_eq!(weights["bytes"], 1 << 20, "{report}");
    assert_eq!(weights["count"], 1, "{report}");
    let activations = group("forward", 256 << 10);
    assert_eq!(activations["bytes"], 3 * (256 << 10), "{report}");
    assert_eq!(activations["count"], 3, "{report}");
    // The `Vec` holding them was allocated under the tag as well.
    let holder = 3 * std::mem::size_of::<Vec<u8>>() as u64;
    assert_eq!(group("forward", holder)["count"], 1, "{report}");
    assert_eq!(groups[0]["label"], "weights", "most bytes first: {report}");
    assert_eq!(groups[1]["label"], "forward", "{report}");
    assert!(
        groups.iter().all(|g| g["label"] != "later"),
        "allocated after the peak: {report}"
    );
    let sum: u64 = groups.iter().filter_map(|g| g["bytes"].as_u64()).sum();
    assert_eq!(sum, census["peak_bytes"].as_u64().unwrap_or(0), "{report}");
}
