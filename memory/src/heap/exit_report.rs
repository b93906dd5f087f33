//! The heap report written when the process exits, for a tool that runs a program and reads
//! its heap figures from outside (`cargo vramguard measure`): with
//! `VRAMGUARD_HEAP_REPORT=PATH` in the environment, the tracking allocator writes one JSON
//! object to PATH at exit; with `VRAMGUARD_HEAP_CENSUS=1` as well, the object says which
//! allocations were live at the peak, by label and size ([`super::census`]). Owns the two variables and
//! the report's format; the figures are the counters' and the census's.
//!
//! The peak is the counters' own: every byte the tracking allocator counted from the process's
//! first allocation to its exit, on every thread. The report is written by an `atexit` handler
//! (Unix only), so it exists when the program returns from `main` or calls
//! `std::process::exit`, not when it is killed or aborts; it never touches the program's
//! standard output or error, except for one warning if the file cannot be written. The path is
//! read again at exit (nothing stays allocated for it): a program that changes the variable
//! writes elsewhere, and a child process that inherits it writes there too (the last to exit
//! wins).
//!
//! ```json
//! {"tracking":true,"peak_bytes":4198400,"live_bytes":1024,"allocations":12,"frees":11,
//!  "census":{"peak_bytes":4198400,"groups":[{"label":"forward","size":2097152,"count":2,"bytes":4194304}]}}
//! ```

use super::census;
use super::tracking::{CallMode, ModeGuard};
use serde::Serialize;
use std::path::PathBuf;

/// The variable naming the file the report is written to at exit.
pub const REPORT_ENV: &str = "VRAMGUARD_HEAP_REPORT";
/// The variable that turns the peak census on (`1`); only read with [`REPORT_ENV`].
pub const CENSUS_ENV: &str = "VRAMGUARD_HEAP_CENSUS";
/// At most this many groups are listed; the rest are summed into one `"(the rest)"` group (its
/// `size` is the largest of theirs).
const LISTED_GROUPS: usize = 32;

/// One group of a peak census: the allocations of one size made under one label and live at
/// the peak. Shared with the GPU observer's exit report (`crate::observer`), so that
/// `cargo vramguard measure` reads one shape for both.
#[derive(Debug, Serialize)]
pub(crate) struct Group {
    label: String,
    size: u64,
    count: u64,
    bytes: u64,
}

/// The `"census"` object of an exit report: the peak it was taken at and its groups.
#[derive(Debug, Serialize)]
pub(crate) struct CensusReport {
    peak_bytes: u64,
    /// Whether every allocation up to the peak was seen (the GPU report's event log can wrap;
    /// the heap's census is always complete, and does not write the key).
    #[serde(skip_serializing_if = "Option::is_none")]
    complete: Option<bool>,
    groups: Vec<Group>,
}

/// The census object for `groups` (`(label, size, count, bytes)`, most bytes first): the first
/// [`LISTED_GROUPS`] listed, the rest summed into `"(the rest)"`.
pub(crate) fn census_report(
    peak_bytes: u64,
    complete: Option<bool>,
    groups: impl IntoIterator<Item = (String, u64, u64, u64)>,
) -> CensusReport {
    let mut listed: Vec<Group> = Vec::new();
    let mut other = Group {
        label: "(the rest)".to_string(),
        size: 0,
        count: 0,
        bytes: 0,
    };
    for (index, (label, size, count, bytes)) in groups.into_iter().enumerate() {
        if index < LISTED_GROUPS {
            listed.push(Group {
                label,
                size,
                count,
                bytes,
            });
        } else {
            other.count += count;
            other.bytes += bytes;
            other.size = other.size.max(size);
        }
    }
    if other.count > 0 {
        listed.push(other);
    }
    CensusReport {
        peak_bytes,
        complete,
        groups: listed,
    }
}

#[derive(Debug, Serialize)]
struct HeapReport {
    tracking: bool,
    peak_bytes: u64,
    live_bytes: u64,
    allocations: u64,
    frees: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    census: Option<CensusReport>,
}

/// Reads the two variables (at the tracking allocator's start; `tracking` is whether it
/// tracks): registers the exit handler when a report is asked for, and starts the census.
pub(super) fn install(tracking: bool) {
    // Both reads free what they allocate at once, and the path is read again at exit: nothing
    // stays allocated, so a program's figures are the same with or without a report.
    let asked = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0");
    if !asked(REPORT_ENV) || !register_at_exit() {
        return;
    }
    if tracking && asked(CENSUS_ENV) {
        census::start();
    }
}

fn register_at_exit() -> bool {
    register(write_at_exit)
}

/// Registers `handler` with `atexit` (Unix; elsewhere it returns false): shared with the GPU
/// observer's exit report.
#[cfg(unix)]
pub(crate) fn register(handler: extern "C" fn()) -> bool {
    // SAFETY: `handler` is an `extern "C" fn()` with no arguments, and each one registered
    // never unwinds (`write_at_exit` and the observer's catch panics); `atexit` only stores
    // the pointer, and the function stays valid for the whole process.
    unsafe { libc::atexit(handler) == 0 }
}

/// Elsewhere than Unix no report is written.
#[cfg(not(unix))]
pub(crate) fn register(_handler: extern "C" fn()) -> bool {
    false
}

#[cfg(unix)]
extern "C" fn write_at_exit() {
    // A panic must not unwind into libc.
    let _ = std::panic::catch_unwind(write_report);
}

/// Writes the report to the file [`REPORT_ENV`] named.
fn write_report() {
    // Read before anything below allocates: the figures are the program's.
    let (live, peak, allocations, frees, _) = super::tracking::counters();
    let tracking = super::tracking::is_on();
    // Everything the census hands out was allocated uncounted and is freed uncounted here;
    // without a census this mode changes nothing.
    let _uncounted = ModeGuard::enter(CallMode::Uncounted);
    let census = census::finish().map(|found| {
        census_report(
            found.peak_bytes,
            None,
            found
                .groups
                .into_iter()
                .map(|(label, size, tally)| (label, size, tally.count, tally.bytes)),
        )
    });
    let report = HeapReport {
        tracking,
        peak_bytes: peak,
        live_bytes: live,
        allocations,
        frees,
        census,
    };
    let Some(path) = std::env::var_os(REPORT_ENV).map(PathBuf::from) else {
        return;
    };
    let written = serde_json::to_string(&report)
        .map_err(std::io::Error::other)
        .and_then(|text| std::fs::write(&path, text + "\n"));
    if let Err(error) = written {
        eprintln!(
            "warning: vramguard: cannot write the heap report to `{}` ({REPORT_ENV}): {error}",
            path.display()
        );
    }
}
