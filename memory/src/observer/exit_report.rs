//! The GPU report written when the process exits, the twin of the heap's
//! (`VRAMGUARD_HEAP_REPORT`), for a tool that runs a program and reads its GPU figures from
//! outside (`cargo vramguard measure --device cuda`): [`report_at_exit`] starts the observer
//! with a log long enough to replay ([`REPORT_LOG_CAPACITY`] events) and, with
//! `VRAMGUARD_GPU_REPORT=PATH` in the environment, writes one JSON object to PATH at exit.
//! Owns the variable and the report's format; the figures are the books', the census's shape
//! the heap report's (`crate::heap`).
//!
//! It is meant to be called from a CUDA injection library (the driver's
//! `CUDA_INJECTION64_PATH` hook: the driver loads the library at `cuInit` and calls its
//! `InitializeInjection`), so it makes no driver call itself: the driver is in the middle of
//! `cuInit` then. The observer it starts therefore sets no soft memory limit
//! (`memory_limit` in `VRAMGUARD_ALLOC_CONF` is not applied by it). A program may also call
//! it directly, before its first CUDA call.
//!
//! The report's format is in [`report_at_exit`]'s documentation.

use super::books::{books, device_index, MAX_DEVICES};
use super::{Observer, ObserverError, ObserverOptions};
use crate::alloc::{TraceEventKind, TraceLabel};
use serde::Serialize;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::sync::OnceLock;

/// The variable naming the file the GPU report is written to at exit.
pub const GPU_REPORT_ENV: &str = "VRAMGUARD_GPU_REPORT";

/// Events the log of [`report_at_exit`]'s observer keeps (2^20; a few hundred bytes of host
/// memory each, allocated as the log fills): enough to replay the peak of a program that
/// allocates and frees fewer times than that through the driver; past it the census says
/// `"complete":false`.
pub const REPORT_LOG_CAPACITY: usize = 1 << 20;

/// The label of allocations made outside any batch scope or tag (the heap census's word).
const NO_LABEL: &str = "(no label)";

/// Whether the exit handler is registered.
static REGISTERED: AtomicBool = AtomicBool::new(false);
/// Why the observer could not start, when it could not.
static START_ERROR: OnceLock<String> = OnceLock::new();

/// Starts the GPU observer with a log of [`REPORT_LOG_CAPACITY`] events (no call sites, no
/// soft limit) and registers the `atexit` handler that writes one JSON object to the file
/// [`GPU_REPORT_ENV`] names. Makes no CUDA driver call: it is meant for the driver's injection
/// hook (`InitializeInjection`, called inside `cuInit`), and a program may also call it before
/// its first CUDA call. A second call returns a handle to the running observer.
///
/// ```json
/// {"observing":true,"peak_bytes":8388608,"live_bytes":0,"allocations":4,"frees":4,
///  "devices":[{"ordinal":0,"peak_bytes":8388608,"live_bytes":0,"allocations":4,"frees":4}],
///  "census":{"device":0,"peak_bytes":8388608,"complete":true,
///            "groups":[{"label":"(no label)","size":4194304,"count":2,"bytes":8388608}]}}
/// ```
///
/// - `peak_bytes`: the sum over the devices seen of each device's own peak of observed live
///   bytes. With one device (the usual case) that device's exact peak; with several, an upper
///   bound of the live bytes at any one moment (the devices' peaks need not coincide).
/// - `census`: what was live when the device with the largest peak reached it, by label and
///   size, replayed from the event log. `complete` is false when the log dropped its oldest
///   events (more than [`REPORT_LOG_CAPACITY`] allocations and frees): the groups are then
///   those the remaining events account for, which may miss older allocations; nothing is
///   invented for them.
/// - When the observer could not start: `{"observing":false,"error":"..."}`, the error's text
///   (where to get CUPTI, a profiler holding it, ...).
///
/// As with the heap report, the object is written by an `atexit` handler (Unix only): it exists
/// when the program returns from `main` or calls `std::process::exit`, not when it is killed or
/// aborts.
pub fn report_at_exit() -> Result<Observer, ObserverError> {
    let started = Observer::start_observing(
        ObserverOptions::new().log_capacity(REPORT_LOG_CAPACITY),
        false,
    );
    if let Err(error) = &started {
        let _ = START_ERROR.set(error.to_string());
    }
    if !REGISTERED.swap(true, Relaxed) && !crate::heap::register_at_exit(write_at_exit) {
        REGISTERED.store(false, Relaxed);
    }
    started
}

/// Writes the calling thread's label (UTF-8) into a buffer of the given length, truncated to
/// fit, and returns its whole length (0: no label).
type LabelSource = extern "C" fn(*mut u8, usize) -> usize;

/// The program's own labels, when its copy of vramguard handed them over.
static LABEL_SOURCE: OnceLock<LabelSource> = OnceLock::new();

/// Labels longer than this are cut.
const LABEL_BYTES: usize = 256;

thread_local! {
    /// The last label text the source gave on this thread, and the label made of it.
    static LAST_LABEL: RefCell<Option<(Box<[u8]>, TraceLabel)>> = const { RefCell::new(None) };
}

/// Labels the observed allocations with the program's own thread labels (`scope::tag`,
/// `#[batch_scope]` iterations) when this observer is another copy of vramguard than the
/// program's, as in an injection library: `source` writes the calling thread's label, as
/// text, into a buffer (at most its length; it returns the label's whole length, 0 for none).
/// The program's vramguard finds the injection library through `CUDA_INJECTION64_PATH` and
/// calls its exported `vramguard_gpu_report_label_source`, which the library `cargo vramguard
/// measure` generates forwards here. The first source set stays.
pub fn set_label_source(source: extern "C" fn(*mut u8, usize) -> usize) {
    let _ = LABEL_SOURCE.set(source);
}

/// The program's label of the calling thread, from the source [`set_label_source`] set.
pub(super) fn program_label() -> Option<TraceLabel> {
    let source = LABEL_SOURCE.get()?;
    let mut buf = [0u8; LABEL_BYTES];
    let len = source(buf.as_mut_ptr(), buf.len()).min(buf.len());
    if len == 0 {
        return None;
    }
    let text = &buf[..len];
    LAST_LABEL
        .try_with(|last| {
            let mut last = last.try_borrow_mut().ok()?;
            if let Some((bytes, label)) = last.as_ref() {
                if **bytes == *text {
                    return Some(label.clone());
                }
            }
            let name: Arc<str> = Arc::from(String::from_utf8_lossy(text).as_ref());
            let label = TraceLabel::nested(None, name, None);
            *last = Some((text.into(), label.clone()));
            Some(label)
        })
        .ok()
        .flatten()
}

extern "C" fn write_at_exit() {
    // A panic must not unwind into libc.
    let _ = std::panic::catch_unwind(write_report);
}

/// One device's figures.
#[derive(Debug, Serialize)]
struct DeviceReport {
    ordinal: u32,
    peak_bytes: u64,
    live_bytes: u64,
    allocations: u64,
    frees: u64,
}

/// The census, with the device it was taken on.
#[derive(Debug, Serialize)]
struct Census {
    device: u32,
    #[serde(flatten)]
    report: crate::heap::CensusReport,
}

#[derive(Debug, Serialize)]
struct GpuReport {
    observing: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    peak_bytes: u64,
    live_bytes: u64,
    allocations: u64,
    frees: u64,
    devices: Vec<DeviceReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    census: Option<Census>,
}

/// Writes the report to the file [`GPU_REPORT_ENV`] names.
fn write_report() {
    let Some(path) = std::env::var_os(GPU_REPORT_ENV)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
    else {
        return;
    };
    let report = match START_ERROR.get() {
        Some(error) => GpuReport {
            observing: false,
            error: Some(error.clone()),
            peak_bytes: 0,
            live_bytes: 0,
            allocations: 0,
            frees: 0,
            devices: Vec::new(),
            census: None,
        },
        None => observed(),
    };
    let written = serde_json::to_string(&report)
        .map_err(std::io::Error::other)
        .and_then(|text| std::fs::write(&path, text + "\n"));
    if let Err(error) = written {
        eprintln!(
            "warning: vramguard: cannot write the GPU report to `{}` ({GPU_REPORT_ENV}): {error}",
            path.display()
        );
    }
}

/// The figures of every device seen, and the census of the one with the largest peak.
fn observed() -> GpuReport {
    let books = books();
    let devices: Vec<DeviceReport> = (0..MAX_DEVICES as u32)
        .filter_map(|ordinal| {
            let s = books.stats(ordinal);
            (s.num_allocs > 0 || s.num_ooms > 0).then_some(DeviceReport {
                ordinal,
                peak_bytes: s.peak_allocated_bytes,
                live_bytes: s.allocated_bytes,
                allocations: s.num_allocs,
                frees: s.num_frees,
            })
        })
        .collect();
    let largest = devices
        .iter()
        .filter(|d| d.peak_bytes > 0)
        .max_by_key(|d| (d.peak_bytes, std::cmp::Reverse(d.ordinal)))
        .map(|d| d.ordinal);
    GpuReport {
        observing: true,
        error: None,
        peak_bytes: devices.iter().map(|d| d.peak_bytes).sum(),
        live_bytes: devices.iter().map(|d| d.live_bytes).sum(),
        allocations: devices.iter().map(|d| d.allocations).sum(),
        frees: devices.iter().map(|d| d.frees).sum(),
        census: largest.map(census),
        devices,
    }
}

/// What was live on `device` when its live bytes first reached their highest, replayed from
/// the log.
fn census(device: u32) -> Census {
    let (events, dropped, _) = books().events();
    let index = device_index(device);
    let mine: Vec<_> = events
        .iter()
        .filter(|e| device_index(e.allocation.device) == index)
        .filter(|e| matches!(e.kind, TraceEventKind::Alloc | TraceEventKind::Free))
        .collect();
    // The first event after which the live bytes were at their highest, then the live set
    // replayed up to it.
    let mut peak: Option<(usize, u64)> = None;
    for (at, event) in mine.iter().enumerate() {
        if peak.is_none() || peak.is_some_and(|(_, bytes)| event.live_bytes > bytes) {
            peak = Some((at, event.live_bytes));
        }
    }
    let (last, peak_bytes) = peak.map_or((None, 0), |(at, bytes)| (Some(at), bytes));
    let mut live: HashMap<u64, (Option<String>, u64)> = HashMap::new();
    for event in mine.iter().take(last.map_or(0, |at| at + 1)) {
        let a = &event.allocation;
        if event.kind == TraceEventKind::Alloc {
            live.insert(a.id, (a.label.as_ref().map(|l| l.to_string()), a.bytes));
        } else {
            live.remove(&a.id);
        }
    }
    let mut groups: HashMap<(String, u64), (u64, u64)> = HashMap::new();
    for (label, bytes) in live.into_values() {
        let group = groups
            .entry((label.unwrap_or_else(|| NO_LABEL.to_string()), bytes))
            .or_default();
        group.0 += 1;
        group.1 += bytes;
    }
    let mut groups: Vec<(String, u64, u64, u64)> = groups
        .into_iter()
        .map(|((label, size), (count, bytes))| (label, size, count, bytes))
        .collect();
    groups.sort_by(|a, b| (b.3, b.1).cmp(&(a.3, a.1)).then_with(|| a.0.cmp(&b.0)));
    Census {
        device,
        report: crate::heap::census_report(peak_bytes, Some(dropped == 0), groups),
    }
}
