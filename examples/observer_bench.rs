//! GPU observer benchmark (`bench` = `observer`): what CUPTI's callbacks and vramguard's books
//! add to a driver allocation (feature `cupti`; a CUDA driver and libcupti: a GPU, or the fake
//! driver with its fake CUPTI as `scripts/observer-check.sh` runs it).
//!
//! ```sh
//! cargo run --release --features cupti --example observer_bench [-- --json] [--quick] [--write]
//!                                                                 [--device cuda]
//! scripts/observer-check.sh bench   # the same on the fake driver, with --write
//! ```
//!
//! It always measures GPU 0; `--device cuda` (what `scripts/gpu-check.sh` passes every
//! benchmark) is accepted and changes nothing.
//!
//! The pair is the one candle's CUDA tensors make: `cuMemAllocAsync` + `cuMemFreeAsync` of
//! the same size on one stream (sizes cycling through 4 KiB to 4 MiB), as the host sees it:
//! the calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`, so that time other processes of
//! a shared machine took is not counted) over a block of pairs; stream-ordered calls only
//! enqueue, and the stream is synchronised after each block, outside the timing. Modes, measured side by side in one run — rounds
//! of one block per mode, the order rotated every round, the observer started before and
//! stopped after its blocks — each reported as the median over rounds of ns per pair:
//!
//! - `plain_pair_ns`: no observer (no CUPTI subscriber);
//! - `empty_subscriber_pair_ns`: a CUPTI subscriber whose callback returns at once, on the two
//!   callbacks of the pair: CUPTI's own dispatch (`cupti_dispatch_ns_per_pair`);
//! - `observed_pair_ns`: the observer with its defaults (records, counters; no log, no call
//!   sites);
//! - `observed_log_pair_ns`: the observer keeping the log (`record_log`);
//! - `observed_call_sites_pair_ns`: the observer recording each allocation's Rust call site
//!   (a stack walk per allocation).
//!
//! `observer_added_ns_per_pair` (`observed - plain`) and `observed_over_plain` (the ratio) are
//! the callback's cost per pair, CUPTI's dispatch included. Without a driver or libcupti the program prints one line and
//! exits 0.

#[path = "../benches/support/report.rs"]
mod report;

use cudarc::cupti::{result as cupti, sys as cupti_sys};
use cudarc::driver::{result, CudaContext};
use report::{Args, Report, Unit};
use vramguard::observer::{Observer, ObserverOptions};

const KIB: usize = 1 << 10;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Plain,
    EmptySubscriber,
    Observed,
    ObservedLog,
    ObservedCallSites,
}

impl Mode {
    const ALL: [Mode; 5] = [
        Mode::Plain,
        Mode::EmptySubscriber,
        Mode::Observed,
        Mode::ObservedLog,
        Mode::ObservedCallSites,
    ];
    /// Index of [`Mode::Observed`] in [`Mode::ALL`].
    const OBSERVED: usize = 2;
    fn metric(self) -> &'static str {
        match self {
            Mode::Plain => "plain_pair_ns",
            Mode::EmptySubscriber => "empty_subscriber_pair_ns",
            Mode::Observed => "observed_pair_ns",
            Mode::ObservedLog => "observed_log_pair_ns",
            Mode::ObservedCallSites => "observed_call_sites_pair_ns",
        }
    }
    fn options(self) -> Option<ObserverOptions> {
        match self {
            Mode::Plain | Mode::EmptySubscriber => None,
            Mode::Observed => Some(ObserverOptions::new().log_capacity(0)),
            Mode::ObservedLog => Some(ObserverOptions::new().log_capacity(1 << 16)),
            Mode::ObservedCallSites => {
                Some(ObserverOptions::new().log_capacity(0).call_sites(true))
            }
        }
    }
}

/// A CUPTI subscriber whose callback does nothing, on the pair's two callbacks: what CUPTI's
/// dispatch alone costs.
fn subscribe_empty() -> Result<cupti_sys::CUpti_SubscriberHandle, String> {
    unsafe extern "C" fn nothing(
        _: *mut std::ffi::c_void,
        _: cupti_sys::CUpti_CallbackDomain,
        _: u32,
        _: *const std::ffi::c_void,
    ) {
    }
    use cupti_sys::CUpti_driver_api_trace_cbid as Cbid;
    let mut handle = std::ptr::null_mut();
    // SAFETY: `handle` is valid for the write; the callback does nothing; the ids are the
    // driver domain's.
    unsafe {
        cupti::subscribe(&mut handle, Some(nothing), std::ptr::null_mut())
            .map_err(|e| format!("cuptiSubscribe: {:?}", e.0))?;
        for cbid in [
            Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
            Cbid::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
        ] {
            cupti::enable_callback(
                1,
                handle,
                cupti_sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API,
                cbid as u32,
            )
            .map_err(|e| format!("cuptiEnableCallback: {:?}", e.0))?;
        }
    }
    Ok(handle)
}

/// The calling thread's CPU time in ns (`CLOCK_THREAD_CPUTIME_ID`): time the thread was not
/// running (other processes on a shared machine) is not counted.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid for the write; the clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("observer_bench: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let quick = args.quick;
    // Probe the observer once before anything is timed: a machine without a driver or
    // libcupti gets one line, not a failure.
    match Observer::start() {
        Ok(observer) => observer.stop(),
        Err(e) => {
            println!("observer_bench: skipped: {e}");
            return Ok(());
        }
    }
    let ctx = CudaContext::new(0)?;
    if !ctx.has_async_alloc() {
        println!("observer_bench: skipped: this GPU has no stream-ordered allocator");
        return Ok(());
    }
    let stream = ctx.new_stream()?;
    let sizes: Vec<usize> = (0..11).map(|i| (4 * KIB) << i).collect(); // 4 KiB .. 4 MiB
    let (rounds, pairs) = if quick { (41, 250) } else { (161, 250) };

    // One block: `n` pairs, timed; then the stream synchronised, untimed. Returns ns of the
    // thread's CPU time per pair.
    let block = |n: usize| -> Result<f64, Box<dyn std::error::Error>> {
        ctx.bind_to_thread()?;
        let start = thread_cpu_ns();
        for i in 0..n {
            let bytes = sizes[i % sizes.len()];
            // SAFETY: an allocation on a live stream, freed on it at once and never touched.
            unsafe {
                let ptr = result::malloc_async(stream.cu_stream(), bytes)?;
                result::free_async(ptr, stream.cu_stream())?;
            }
        }
        let ns = (thread_cpu_ns() - start) as f64 / n as f64;
        stream.synchronize()?;
        Ok(ns)
    };
    block(pairs)?; // warm the pool: every size cached once

    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); Mode::ALL.len()];
    for round in 0..rounds {
        for k in 0..Mode::ALL.len() {
            let index = (k + round) % Mode::ALL.len();
            let mode = Mode::ALL[index];
            let observer = match mode.options() {
                Some(options) => Some(Observer::start_with(options)?),
                None => None,
            };
            let empty = (mode == Mode::EmptySubscriber)
                .then(subscribe_empty)
                .transpose()?;
            let n = pairs;
            let ns = block(n)?;
            if let Some(handle) = empty {
                // SAFETY: the handle subscribed above.
                unsafe { cupti::unsubscribe(handle) }.map_err(|e| format!("{:?}", e.0))?;
            }
            if let Some(observer) = observer {
                let s = observer.stats(0);
                // The observer saw every pair of its block.
                assert_eq!((s.num_allocs, s.num_frees), (n as u64, n as u64), "{s:?}");
                observer.stop();
            }
            samples[index].push(ns);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let medians: Vec<f64> = samples.iter_mut().map(median).collect();
    let plain = medians[0];
    let observed = medians[Mode::OBSERVED];
    let device = result::device::get(0)
        .and_then(result::device::get_name)
        .unwrap_or_else(|_| "unknown device".to_string());
    let mut report = Report::new("observer");
    report.cargo_args("--features cupti --example observer_bench");
    for (mode, ns) in Mode::ALL.iter().zip(&medians) {
        report.metric(mode.metric(), *ns, Unit::Ns);
    }
    report.metric("cupti_dispatch_ns_per_pair", medians[1] - plain, Unit::Ns);
    report.metric("observer_added_ns_per_pair", observed - plain, Unit::Ns);
    report.metric("observed_over_plain", observed / plain, Unit::Ratio);
    report.metric("observed_log_over_plain", medians[3] / plain, Unit::Ratio);
    report.metric(
        "observed_call_sites_over_plain",
        medians[4] / plain,
        Unit::Ratio,
    );
    report.note(&format!(
        "On {device}. `cuMemAllocAsync` + `cuMemFreeAsync` pairs on one stream (sizes 4 KiB to \
         4 MiB), the thread's CPU time per pair, median of {rounds} rounds of {pairs} pairs per \
         mode, the modes interleaved (order rotated each round). `empty_subscriber`: a CUPTI \
         subscriber whose callback returns at once, on the pair's two callbacks; `observed`: \
         the observer with its defaults (records, counters), CUPTI's dispatch included; \
         `_log`: keeping the log; `_call_sites`: walking the stack for each allocation's Rust \
         call site. On the fake driver (`scripts/observer-check.sh bench`) the fake's CUPTI \
         dispatches, and its pair costs what its bookkeeping costs (a lock, `mprotect` of the \
         chunk): the ratio is to that pair, the added ns are the observer's."
    ));
    report.finish(args);
    Ok(())
}
