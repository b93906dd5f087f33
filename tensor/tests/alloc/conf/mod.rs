//! `VRAMGUARD_ALLOC_CONF` and what a user sees on stderr, each case in a process of its own:
//! the variable is read once per process, and stderr is the process's. A test runs itself
//! again as a child of this binary ([`in_child`]: that test alone, `--exact`, with the variable
//! set as the case needs), and checks that the case passed there and what the child printed.
//! The child runs no other test, so these share the binary with tests that touch the
//! process-wide devices.

mod env;
mod stderr;

use std::process::Command;

const CHILD: &str = "VRAMGUARD_TEST_CHILD";

/// Runs test `name` alone in a child with `VRAMGUARD_ALLOC_CONF=conf` (unset for `None`),
/// checks that the case ran and passed there, and returns the child's stderr (as `Err`, so that
/// the caller's `unwrap_err` reads as "what it printed").
pub(crate) fn in_child(name: &str, conf: Option<&str>) -> Result<(), String> {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = Command::new(exe);
    command
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, name);
    match conf {
        Some(conf) => command.env("VRAMGUARD_ALLOC_CONF", conf),
        None => command.env_remove("VRAMGUARD_ALLOC_CONF"),
    };
    let output = command.output().expect("the test binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the child ran the case and it passed: {stdout}\n{stderr}"
    );
    Err(stderr)
}

pub(crate) fn is_child(name: &str) -> bool {
    std::env::var(CHILD).as_deref() == Ok(name)
}

/// Stderr lines written by vramguard (the test harness writes its own lines too).
pub(crate) fn vramguard_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("vramguard:"))
        .collect()
}
