//! A malformed `VRAMGUARD_ALLOC_CONF` is reported in a program that uses nothing of vramguard
//! but `#[inference]` (no device, no tracking allocator): read from a child process's stderr.
//!
//! No libtest harness (`harness = false`): the binary is both the parent and the child.

use std::process::Command;

const CHILD: &str = "VRAMGUARD_TEST_CHILD";

#[vramguard::inference]
fn forward(x: Vec<f32>) -> f32 {
    let y: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
    y.iter().sum()
}

fn main() {
    if std::env::var(CHILD).is_ok() {
        println!("{}", forward(vec![1.0; 8]));
        println!("{}", forward(vec![2.0; 8]));
        return;
    }
    let name = "a malformed setting is reported once by a program that only uses the macros";
    let exe = std::env::current_exe().expect("the test binary knows its path");
    let output = Command::new(exe)
        .env(CHILD, "1")
        .env("VRAMGUARD_ALLOC_CONF", "trace_capacity:many")
        .output()
        .expect("the test binary runs again as a child");
    let text = String::from_utf8_lossy(&output.stderr);
    let ok = output.status.success()
        && text.matches("error: vramguard:").count() == 1
        && text.contains("`trace_capacity`")
        && text.contains("uses the default allocator settings");
    println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
    if !ok {
        println!("child's stderr:\n{text}");
        println!("0 passed, 1 failed");
        std::process::exit(1);
    }
    println!("1 passed, 0 failed");
}
