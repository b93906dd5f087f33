//! The GPU observer (`vramguard_memory::observer`, feature `cupti`) on a CUDA driver with
//! CUPTI: the fake driver and its fake CUPTI in CI (`scripts/fake-cuda.sh` puts both on
//! `LD_LIBRARY_PATH`), a GPU with NVIDIA's libcupti in `scripts/gpu-check.sh`.
//!
//! The allocations are cudarc's, as candle's CUDA backend makes them (`CudaStream::alloc`,
//! `clone_htod`, a `CudaSlice` dropped: `cuMemAllocAsync`/`cuMemFreeAsync`): the observer
//! sees them through CUPTI only. The tests share the process's one observer and GPU, so each
//! holds the GPU lock for its whole run and measures from the figures it found. The out of
//! memory, refusal and missing-library cases run in a child process (this test binary again,
//! with `OBSERVER_CHILD` naming the case), whose stderr the parent reads.
//!
//! Without a driver or without libcupti the tests print `skipped: <reason>`.

#[path = "../../tensor/tests/cuda/gpu.rs"]
mod gpu;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DriverError};
use gpu::{exclusive, skip};
use std::process::Command;
use std::sync::Arc;
use vramguard_memory::memory::MaxBatchSearch;
use vramguard_memory::observer::{Observer, ObserverError, ObserverOptions};
use vramguard_memory::scope::{tag, BatchScope};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const CHILD: &str = "OBSERVER_CHILD";

/// The observer (started with a log and call sites) and cuda:0's default stream, or `None`
/// after the skip line.
fn setup(test: &str) -> Option<(Observer, Arc<CudaStream>)> {
    let observer = match Observer::start_with(
        ObserverOptions::new()
            .call_sites(true)
            .log_capacity(100_000),
    ) {
        Ok(o) => o,
        Err(ObserverError::NoDriver) => {
            skip(test, "no CUDA driver (libcuda.so not found)");
            return None;
        }
        Err(e @ ObserverError::NoCupti { .. }) => {
            skip(test, &format!("no CUPTI: {e}"));
            return None;
        }
        Err(e) => panic!("{test}: {e}"),
    };
    let ctx = match CudaContext::new(0) {
        Ok(c) => c,
        Err(e) => {
            skip(test, &format!("no CUDA device ({e})"));
            return None;
        }
    };
    if !ctx.has_async_alloc() {
        skip(
            test,
            "this GPU has no stream-ordered allocator (cuMemAllocAsync)",
        );
        return None;
    }
    Some((observer, ctx.default_stream()))
}

/// One "layer" as candle runs it: the input copied to the device, a hidden activation, the
/// output; the input and the hidden one are dropped, the output returned.
fn layer(stream: &Arc<CudaStream>, batch: usize) -> Result<CudaSlice<f32>, DriverError> {
    let input = stream.clone_htod(&vec![1.0f32; batch * 256])?; // 1 KiB per item
    let hidden = stream.alloc_zeros::<f32>(batch * 1024)?; // 4 KiB per item
    let output = stream.alloc_zeros::<f32>(batch * 512)?; // 2 KiB per item
    drop(input);
    drop(hidden);
    Ok(output)
}

#[test]
fn cuda_observer_sees_a_candle_shaped_allocation_loop_exactly() {
    const TEST: &str = "cuda_observer_sees_a_candle_shaped_allocation_loop_exactly";
    let _gpu = exclusive();
    let Some((observer, stream)) = setup(TEST) else {
        return;
    };
    stream.synchronize().unwrap();
    let before = observer.stats(0);
    observer.reset_peak_stats(0);
    let weights = stream.alloc_zeros::<f32>(MIB / 4).unwrap(); // 1 MiB, alive throughout
    let iterations = 20;
    let mut outputs = Vec::new();
    for i in 0..iterations {
        let batch = 1 + i % 7;
        outputs.push(layer(&stream, batch).unwrap());
        if outputs.len() > 2 {
            outputs.remove(0);
        }
    }
    drop(outputs);
    drop(weights);
    stream.synchronize().unwrap();
    let after = observer.stats(0);

    // Each iteration: 3 allocations and their frees; the weights: one of each.
    let allocations = 1 + 3 * iterations as u64;
    assert_eq!(
        after.num_allocs - before.num_allocs,
        allocations,
        "{after:?}"
    );
    assert_eq!(after.num_frees - before.num_frees, allocations, "{after:?}");
    assert_eq!(after.allocated_bytes, before.allocated_bytes);
    // The peak, computed from the loop: the weights, the two outputs kept from earlier
    // iterations, and the iteration's input, hidden and output alive at once.
    let mut peak = 0usize;
    let mut kept: Vec<usize> = Vec::new();
    for i in 0..iterations {
        let b = 1 + i % 7;
        let earlier: usize = kept.iter().sum();
        peak = peak.max(MIB + earlier + b * (KIB + 4 * KIB + 2 * KIB));
        kept.push(b * 2 * KIB);
        if kept.len() > 2 {
            kept.remove(0);
        }
    }
    let observed_peak = after.peak_allocated_bytes - before.allocated_bytes;
    assert_eq!(observed_peak, peak as u64);

    // The records: each names the API, the stream, the thread, and (asked for) this file.
    let log = observer.log();
    let mine: Vec<_> = log
        .iter()
        .filter(|e| e.allocation.stream == stream.cu_stream() as u64)
        .filter(|e| e.allocation.api == "cuMemAllocAsync")
        .collect();
    assert!(
        mine.len() as u64 >= 2 * allocations,
        "{} events",
        mine.len()
    );
    let first = &mine[mine.len() - 1].allocation;
    assert!(first.thread != 0);
    // A binary with line tables (not the GPU check's stripped copy) shows this file as the
    // call site.
    let line_tables = std::backtrace::Backtrace::force_capture()
        .to_string()
        .contains("cuda_observer.rs");
    if line_tables {
        let origin = first.origin.as_ref().expect("call sites were asked for");
        assert!(origin.file.ends_with("cuda_observer.rs"), "{origin}");
    }
    println!(
        "observer: allocations {allocations} = frees {allocations}, peak {observed_peak} bytes exact"
    );
    gpu::figure(TEST, "observed_peak", observed_peak as f64, "bytes");
}

#[test]
fn cuda_observer_labels_allocations_and_draws_them() {
    const TEST: &str = "cuda_observer_labels_allocations_and_draws_them";
    let _gpu = exclusive();
    let Some((observer, stream)) = setup(TEST) else {
        return;
    };
    let mut kept = Vec::new();
    for _ in 0..3 {
        let _iteration = BatchScope::enter("observed_loop");
        let scratch = stream.alloc_zeros::<u8>(64 * KIB).unwrap();
        let _tag = tag("history");
        kept.push(stream.alloc_zeros::<u8>(16 * KIB).unwrap());
        drop(scratch);
    }
    stream.synchronize().unwrap();
    let live = observer.live_allocations(0);
    let labels: Vec<String> = live
        .iter()
        .filter(|a| a.bytes == 16 * KIB as u64)
        .filter_map(|a| a.label.as_ref().map(|l| l.to_string()))
        .collect();
    for i in 1..=3 {
        let expected = format!("observed_loop #{i} / history");
        assert!(labels.contains(&expected), "{expected} not in {labels:?}");
    }
    let html = observer.html_report(0, "observer test");
    assert!(
        html.contains("observed_loop #2 / history"),
        "the page names the labels"
    );
    let path =
        std::env::temp_dir().join(format!("vramguard-observer-{}.pickle", std::process::id()));
    observer.dump_snapshot(0, &path).unwrap();
    let pickle = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(&pickle[..2], b"\x80\x02", "a pickle, protocol 2");
    assert!(pickle.windows(14).any(|w| w == b"free_requested"));
    drop(kept);
    stream.synchronize().unwrap();
}

/// `max_batch` on what the observer sees: weights of 3 MiB, a fixed 1 MiB workspace and 640
/// KiB per batch item (input 128 KiB, hidden 384 KiB, output 128 KiB, all alive at once), in a
/// budget of 40 MiB: the largest batch is (40 − 4) MiB / 640 KiB = 57.6 → 57.
#[test]
fn cuda_observer_finds_the_largest_batch_exactly_in_four_runs() {
    const TEST: &str = "cuda_observer_finds_the_largest_batch_exactly_in_four_runs";
    let _gpu = exclusive();
    let Some((observer, stream)) = setup(TEST) else {
        return;
    };
    stream.synchronize().unwrap();
    let base = observer.stats(0).allocated_bytes;
    let weights = stream.alloc_zeros::<u8>(3 * MIB).unwrap();
    let budget = base + 40 * MIB as u64;
    let per_item = 640 * KIB as u64;
    let expected = ((budget - base - 4 * MIB as u64) / per_item) as usize;
    let found = MaxBatchSearch::new(budget)
        .run_on_observer(&observer, 0, |batch| {
            let workspace = stream.alloc_zeros::<u8>(MIB)?;
            let input = stream.alloc_zeros::<u8>(batch * 128 * KIB)?;
            let hidden = stream.alloc_zeros::<u8>(batch * 384 * KIB)?;
            let output = stream.alloc_zeros::<u8>(batch * 128 * KIB)?;
            drop((workspace, input, hidden));
            stream.synchronize()?;
            Ok::<_, DriverError>(output)
        })
        .unwrap();
    drop(weights);
    assert_eq!(found.batch, expected, "{found}");
    assert_eq!(expected, 57);
    let runs = found.run_count();
    assert!(runs <= 4, "{found}: {:#?}", found.runs);
    println!(
        "max_batch exact in {runs} <= 4 runs (batch {})",
        found.batch
    );
}

/// Runs this test binary's `test` as a child with `OBSERVER_CHILD=case` and the extra
/// environment; returns its stderr and stdout.
fn child(test: &str, case: &str, env: &[(&str, &str)]) -> (String, String, bool) {
    let exe = std::env::current_exe().unwrap();
    let mut command = Command::new(exe);
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, case);
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    (
        String::from_utf8_lossy(&out.stderr).into_owned(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.success(),
    )
}

/// The fake's device memory, for the child (ignored by a real driver).
const FAKE_DEVICE: &str = "64MiB";

#[test]
fn cuda_observer_prints_the_oom_text_before_the_librarys_error() {
    const TEST: &str = "cuda_observer_prints_the_oom_text_before_the_librarys_error";
    if std::env::var(CHILD).as_deref() == Ok("oom") {
        return oom_child();
    }
    let _gpu = exclusive();
    if setup(TEST).is_none() {
        return;
    }
    let (stderr, stdout, ok) = child(TEST, "oom", &[("FAKE_CUDA_MEMORY", FAKE_DEVICE)]);
    assert!(ok, "child failed:\n{stdout}\n{stderr}");
    let report = stderr
        .find("error: vramguard: out of memory on cuda:0: cuMemAllocAsync of")
        .unwrap_or_else(|| panic!("no OOM text:\n{stderr}"));
    let library = stderr
        .find("library error: ")
        .unwrap_or_else(|| panic!("no library error:\n{stderr}"));
    assert!(report < library, "{stderr}");
    let text = &stderr[report..library];
    for expected in [
        "failed with CUDA_ERROR_OUT_OF_MEMORY",
        "made in oom_loop #4",
        "device memory (cuMemGetInfo): ",
        "driver pool (the device's default memory pool): ",
        "seen by vramguard's observer: 24.0 MiB live in 3 allocations",
        "Largest live allocations by label:",
        "8.0 MiB in     1 allocations  oom_loop #1 / kept",
        "Largest live allocations:",
        "What to change:",
        "24.0 MiB of earlier iterations of batch scope `oom_loop` are still alive",
    ] {
        assert!(
            text.contains(expected),
            "`{expected}` missing from:\n{text}"
        );
    }
    if stdout.contains("fake device") {
        // The fake's device of the given size: exact figures from cuMemGetInfo.
        assert!(text.contains(" free of 64.0 MiB"), "{text}");
    }
    println!("OOM text printed before the library's error");
}

/// Keeps 8 MiB per iteration (tagged `kept`) for three iterations, then asks for the whole
/// device: the driver refuses, the observer prints, then the "library" reports its error.
fn oom_child() {
    let Some((_observer, stream)) = setup("oom_child") else {
        return;
    };
    let name = cudarc::driver::result::device::get(0)
        .and_then(cudarc::driver::result::device::get_name)
        .unwrap_or_default();
    if name.contains("vramguard fake") {
        println!("fake device: {name}");
    }
    let mut kept = Vec::new();
    for _ in 0..3 {
        let _iteration = BatchScope::enter("oom_loop");
        let _tag = tag("kept");
        kept.push(stream.alloc_zeros::<u8>(8 * MIB).unwrap());
    }
    let (_, total) = cudarc::driver::result::mem_get_info().unwrap();
    let _iteration = BatchScope::enter("oom_loop");
    match stream.alloc_zeros::<u8>(total) {
        Ok(_) => panic!("the driver gave the whole device"),
        Err(e) => eprintln!("library error: {e:?}"),
    }
    drop(kept);
}

#[test]
fn cuda_observer_warns_and_runs_on_when_a_profiler_holds_cupti() {
    const TEST: &str = "cuda_observer_warns_and_runs_on_when_a_profiler_holds_cupti";
    if std::env::var(CHILD).as_deref() == Ok("taken") {
        return taken_child();
    }
    let _gpu = exclusive();
    if setup(TEST).is_none() {
        return;
    }
    let (stderr, stdout, ok) = child(TEST, "taken", &[]);
    assert!(ok, "child failed:\n{stdout}\n{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning: vramguard: "))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("another CUPTI subscriber holds the callback API")
            && warnings[0].contains("Nsight Systems"),
        "{}",
        warnings[0]
    );
    assert!(
        stdout.contains("ran on: 4 MiB allocated and freed"),
        "{stdout}"
    );
    println!("single subscriber: a one-line warning, the program ran on");
}

/// Subscribes first (as Nsight Systems would), then starts the observer and allocates.
fn taken_child() {
    unsafe extern "C" fn profiler(
        _: *mut std::ffi::c_void,
        _: cudarc::cupti::sys::CUpti_CallbackDomain,
        _: u32,
        _: *const std::ffi::c_void,
    ) {
    }
    let mut handle = std::ptr::null_mut();
    // SAFETY: `handle` is valid for the write; the callback does nothing.
    unsafe { cudarc::cupti::result::subscribe(&mut handle, Some(profiler), std::ptr::null_mut()) }
        .expect("the first subscriber");
    assert!(Observer::start_or_warn().is_none());
    let ctx = CudaContext::new(0).unwrap();
    let stream = ctx.default_stream();
    let buffer = stream.alloc_zeros::<u8>(4 * MIB).unwrap();
    drop(buffer);
    stream.synchronize().unwrap();
    println!("ran on: 4 MiB allocated and freed");
    // SAFETY: the handle subscribed above.
    unsafe { cudarc::cupti::result::unsubscribe(handle) }.unwrap();
}

#[test]
fn cuda_observer_without_libcupti_says_where_to_get_it() {
    const TEST: &str = "cuda_observer_without_libcupti_says_where_to_get_it";
    if std::env::var(CHILD).as_deref() == Ok("missing") {
        return missing_child();
    }
    let _gpu = exclusive();
    if setup(TEST).is_none() {
        return;
    }
    // The child's library path: the folders of the parent's that hold the driver, each
    // copied without libcupti (links to the same files); no toolkit folder.
    let dir = std::env::temp_dir().join(format!("vramguard-no-cupti-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    for folder in path.split(':').filter(|f| !f.is_empty()) {
        for name in ["libcuda.so", "libcuda.so.1"] {
            let from = std::path::Path::new(folder).join(name);
            let to = dir.join(name);
            if from.exists() && !to.exists() {
                std::os::unix::fs::symlink(std::fs::canonicalize(&from).unwrap(), &to).unwrap();
            }
        }
    }
    let empty = dir.join("toolkit");
    std::fs::create_dir_all(&empty).unwrap();
    let (stderr, stdout, ok) = child(
        TEST,
        "missing",
        &[
            ("LD_LIBRARY_PATH", dir.to_str().unwrap()),
            ("CUDA_HOME", empty.to_str().unwrap()),
            ("CUDA_PATH", empty.to_str().unwrap()),
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(ok, "child failed:\n{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.find("error: CUPTI").map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("no error line:\n{stdout}\n{stderr}"));
    for expected in [
        "CUPTI (libcupti.so) not found",
        "toolkit/extras/CUPTI/lib64",
        "extras/CUPTI/lib64 (put that folder on LD_LIBRARY_PATH, or set CUDA_HOME",
        "nvidia-cuda-cupti-cu12",
    ] {
        assert!(line.contains(expected), "`{expected}` missing from {line}");
    }
    println!("missing libcupti: the error says where to get it");
}

fn missing_child() {
    match Observer::start() {
        Err(e @ ObserverError::NoCupti { .. }) => println!("error: {e}"),
        other => panic!("expected NoCupti, got {other:?}"),
    }
}

#[test]
fn cuda_observer_warns_when_memory_limit_from_the_environment_is_crossed() {
    const TEST: &str = "cuda_observer_warns_when_memory_limit_from_the_environment_is_crossed";
    if std::env::var(CHILD).as_deref() == Ok("limit") {
        return limit_child();
    }
    let _gpu = exclusive();
    if setup(TEST).is_none() {
        return;
    }
    let (stderr, stdout, ok) = child(
        TEST,
        "limit",
        &[("VRAMGUARD_ALLOC_CONF", "memory_limit:10MiB")],
    );
    assert!(ok, "child failed:\n{stdout}\n{stderr}");
    let warnings: Vec<&str> = stderr
        .match_indices("warning: vramguard: memory limit crossed on cuda:0: ")
        .map(|(at, _)| &stderr[at..])
        .collect();
    // Crossed by the third 4 MiB buffer, and again after falling back below the limit.
    assert_eq!(warnings.len(), 2, "{stderr}");
    for expected in [
        "cuMemAllocAsync of 4.0 MiB (4194304 bytes)",
        "took the observed live bytes to 12.0 MiB, over the memory_limit of 10.0 MiB",
        "seen by vramguard's observer: 12.0 MiB live in 3 allocations",
        "or raise `memory_limit` in VRAMGUARD_ALLOC_CONF",
    ] {
        assert!(
            warnings[0].contains(expected),
            "`{expected}` missing:\n{stderr}"
        );
    }
    assert!(stdout.contains("limit 10485760, ran on"), "{stdout}");
    println!("memory_limit: a soft cap, the same text at each crossing");
}

fn limit_child() {
    let Some((observer, stream)) = setup("limit_child") else {
        return;
    };
    let mut buffers: Vec<_> = (0..3)
        .map(|_| stream.alloc_zeros::<u8>(4 * MIB).unwrap())
        .collect();
    buffers.truncate(2); // back to 8 MiB, below the limit
    buffers.push(stream.alloc_zeros::<u8>(4 * MIB).unwrap()); // crosses again
    stream.synchronize().unwrap();
    println!("limit {}, ran on", observer.memory_limit(0).unwrap_or(0));
}
