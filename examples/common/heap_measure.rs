//! What the host-heap examples (`candle_inference`, `burn_inference`) share: the fits-predicate
//! of `vramguard::heap::max_batch` and the plain bisection its answer is checked against, the
//! independent measure of a leak (bytes freed when the kept values are dropped), and the
//! tracking allocator's time cost, measured in child processes of the example itself.
//!
//! The time cost needs two processes because the tracking allocator is chosen once per process:
//! `VRAMGUARD_ALLOC_CONF=heap_tracking:false` makes it a plain pass-through from the first
//! allocation on. The example re-runs itself with [`TIME_CHILD_FLAG`], alternately with and
//! without that setting, and each child prints the median time of its forward passes.

#![allow(dead_code)] // Each program uses a different subset.

use std::process::Command;
use std::time::Instant;
use vramguard::heap;

/// Errors of the examples' measurements.
pub type BoxError = Box<dyn std::error::Error>;

/// The flag that makes the program a timing child ([`time_child`]).
pub const TIME_CHILD_FLAG: &str = "--time-child";

/// The environment variable of vramguard's settings, which also switches heap tracking.
const ALLOC_CONF: &str = "VRAMGUARD_ALLOC_CONF";

/// The predicate `heap::max_batch` searches with: the process's heap peak during `run(batch)`,
/// the peak reset just before, within `budget_bytes` (weights and everything else live
/// included).
pub fn heap_fits<T, E>(
    budget_bytes: u64,
    batch: usize,
    run: &mut impl FnMut(usize) -> Result<T, E>,
) -> Result<bool, E> {
    heap::reset_peak_stats();
    drop(run(batch)?);
    Ok(heap::stats().peak_allocated_bytes <= budget_bytes)
}

/// The heap bytes freed by dropping `kept`, its own buffer left out: what the kept values held.
pub fn bytes_held_by<T>(kept: Vec<T>) -> u64 {
    let buffer = (kept.capacity() * std::mem::size_of::<T>()) as u64;
    let before = heap::stats().allocated_bytes;
    drop(kept);
    let after = heap::stats().allocated_bytes;
    before.saturating_sub(after).saturating_sub(buffer)
}

/// The child's side of [`tracking_time_ratio`]: one warm-up pass, then at least
/// [`MIN_TIMED_PASSES`] timed passes of `forward`, more when they are short (as many as fit in
/// [`MIN_TIMED_SECONDS`], at most 1000); prints `tracking=<0|1> forward_ns=<median>` on stdout.
pub fn time_child<E>(mut forward: impl FnMut() -> Result<(), E>) -> Result<(), E> {
    let start = Instant::now();
    forward()?;
    let warm_up = start.elapsed().as_secs_f64();
    let passes = ((MIN_TIMED_SECONDS / warm_up.max(1e-9)) as usize).clamp(MIN_TIMED_PASSES, 1000);
    let mut times = Vec::with_capacity(passes);
    for _ in 0..passes {
        let start = Instant::now();
        forward()?;
        times.push(start.elapsed().as_secs_f64() * 1e9);
    }
    println!(
        "tracking={} forward_ns={:.0}",
        u8::from(heap::is_tracking()),
        median(&mut times)
    );
    Ok(())
}

/// The fewest passes a timing child times.
pub const MIN_TIMED_PASSES: usize = 5;

/// The least time a timing child spends on timed passes (short passes are repeated more: the
/// median of a few millisecond-long passes is mostly the machine's noise).
pub const MIN_TIMED_SECONDS: f64 = 0.5;

/// Forward-pass times with the tracking allocator on and off, from `rounds` pairs of child
/// processes run one after the other (the order alternates between rounds).
#[derive(Debug, Clone)]
pub struct TrackingTimes {
    /// Each child's median forward time with tracking on, in nanoseconds.
    pub with_tracking_ns: Vec<f64>,
    /// The same with `heap_tracking:false`.
    pub without_tracking_ns: Vec<f64>,
}

impl TrackingTimes {
    /// The median over the rounds of each round's time with tracking over its time without:
    /// the two children of a round ran back to back, so a change in the machine's load between
    /// rounds cancels out.
    pub fn ratio(&self) -> f64 {
        median(&mut self.round_ratios())
    }

    /// Each round's time with tracking over its time without, smallest first: their spread is
    /// the machine's noise.
    pub fn round_ratios(&self) -> Vec<f64> {
        let mut ratios: Vec<f64> = self
            .with_tracking_ns
            .iter()
            .zip(&self.without_tracking_ns)
            .map(|(with, without)| with / without)
            .collect();
        ratios.sort_by(f64::total_cmp);
        ratios
    }
}

/// Re-runs this program `2 × rounds` times as a timing child (its own arguments, less `--json`
/// and `--write`, plus [`TIME_CHILD_FLAG`]), interleaving children with tracking on and off,
/// and checks that each child ran in the mode it was started in.
pub fn tracking_time_ratio(rounds: usize) -> Result<TrackingTimes, BoxError> {
    let exe = std::env::current_exe()?;
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--json" && a != "--write")
        .collect();
    let mut times = TrackingTimes {
        with_tracking_ns: Vec::new(),
        without_tracking_ns: Vec::new(),
    };
    for round in 0..rounds.max(1) {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for tracking in order {
            let mut child = Command::new(&exe);
            child.args(&args).arg(TIME_CHILD_FLAG);
            if !tracking {
                let conf = match std::env::var(ALLOC_CONF) {
                    Ok(conf) if !conf.trim().is_empty() => format!("{conf},heap_tracking:false"),
                    _ => "heap_tracking:false".to_string(),
                };
                child.env(ALLOC_CONF, conf);
            }
            let output = child.output()?;
            let stdout = String::from_utf8_lossy(&output.stdout);
            if !output.status.success() {
                return Err(format!(
                    "the timing child ({}) failed: {}",
                    if tracking {
                        "tracking on"
                    } else {
                        "tracking off"
                    },
                    String::from_utf8_lossy(&output.stderr).trim()
                )
                .into());
            }
            let (child_tracking, ns) = parse_child_line(&stdout).ok_or_else(|| {
                format!("the timing child printed no `tracking=… forward_ns=…` line: {stdout}")
            })?;
            if child_tracking != tracking {
                return Err(format!(
                    "a timing child started with heap tracking {} ran with it {}: check \
                     {ALLOC_CONF} (the `heap_tracking` key)",
                    if tracking { "on" } else { "off" },
                    if child_tracking { "on" } else { "off" },
                )
                .into());
            }
            eprintln!(
                "  tracking {}: median forward pass {:.2} ms",
                if tracking { "on " } else { "off" },
                ns / 1e6
            );
            if tracking {
                times.with_tracking_ns.push(ns);
            } else {
                times.without_tracking_ns.push(ns);
            }
        }
    }
    Ok(times)
}

fn parse_child_line(stdout: &str) -> Option<(bool, f64)> {
    let line = stdout.lines().rev().find(|l| l.starts_with("tracking="))?;
    let mut fields = line.split_whitespace();
    let tracking = fields.next()?.strip_prefix("tracking=")?;
    let ns = fields.next()?.strip_prefix("forward_ns=")?.parse().ok()?;
    Some((tracking == "1", ns))
}

/// The median (the upper one of an even count); `NaN` for no values.
pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The metrics both heap examples print, in order (candle's and burn's `--json` lines).
pub struct HeapMetrics<'a> {
    /// Heap peak of the plain forward pass, above the bytes live before it.
    pub peak_plain: u64,
    /// The same under `#[vramguard::inference]`.
    pub peak_annotated: u64,
    /// The target of `peak_annotated_over_plain`, if the example sets one.
    pub peak_ratio_target: Option<f64>,
    /// Whether every output element has the same bits in both variants.
    pub identical: bool,
    /// Bytes of one `[batch, seq, hidden]` f32 activation.
    pub activation_bytes: f64,
    /// Bytes of the model's weights.
    pub weight_bytes: usize,
    /// The leak loop's growth per iteration, from the scope's reports.
    pub leak_per_iter: u64,
    /// The bytes a `Vec` of the same outputs, made outside any scope, frees per iteration.
    pub freed_per_iter: u64,
    /// Whether the two leak figures agree to the byte (over all iterations).
    pub leak_exact: bool,
    /// The leak loop's last report.
    pub last_report: &'a vramguard::scope::ScopeReport,
    /// `heap::max_batch` on the plain and the annotated forward pass.
    pub finders: [&'a vramguard::memory::MaxBatch; 2],
    /// The bisection's run counts, plain and annotated.
    pub bisection_runs: [usize; 2],
    /// Whether both finders' answers equal the bisection's.
    pub max_batch_exact: bool,
    /// The tracking time ratio's rounds.
    pub times: &'a TrackingTimes,
}

impl HeapMetrics<'_> {
    /// Adds the metrics to `r`.
    pub fn add_to(&self, r: &mut crate::report::Report) {
        use crate::report::Unit;
        let flag = |ok: bool| f64::from(u8::from(ok));
        r.metric("peak_bytes_plain", self.peak_plain as f64, Unit::Bytes);
        r.metric(
            "peak_bytes_annotated",
            self.peak_annotated as f64,
            Unit::Bytes,
        );
        let ratio = self.peak_annotated as f64 / self.peak_plain.max(1) as f64;
        match self.peak_ratio_target {
            Some(target) => r.metric_with_target(
                "peak_annotated_over_plain",
                ratio,
                Unit::Ratio,
                &format!("≤ {target:.2}"),
                ratio <= target,
            ),
            None => r.metric("peak_annotated_over_plain", ratio, Unit::Ratio),
        }
        r.metric_with_target(
            "outputs_bit_identical",
            flag(self.identical),
            Unit::Count,
            "= 1",
            self.identical,
        );
        r.metric(
            "peak_plain_in_activations",
            self.peak_plain as f64 / self.activation_bytes,
            Unit::Ratio,
        );
        r.metric(
            "peak_annotated_in_activations",
            self.peak_annotated as f64 / self.activation_bytes,
            Unit::Ratio,
        );
        r.metric("weight_bytes", self.weight_bytes as f64, Unit::Bytes);
        let leak_exact = self.leak_exact;
        r.metric(
            "leak_bytes_per_iter",
            self.leak_per_iter as f64,
            Unit::Bytes,
        );
        r.metric(
            "leak_bytes_freed_per_iter",
            self.freed_per_iter as f64,
            Unit::Bytes,
        );
        r.metric_with_target(
            "leak_exact",
            flag(leak_exact),
            Unit::Count,
            "= 1",
            leak_exact,
        );
        r.metric(
            "leak_escaped_bytes_last_iter",
            self.last_report.escaped_bytes as f64,
            Unit::Bytes,
        );
        r.metric(
            "leak_growth_streak",
            f64::from(self.last_report.growth_streak),
            Unit::Count,
        );
        let [plain, annotated] = self.finders;
        r.metric("max_batch_plain", plain.batch as f64, Unit::Batch);
        r.metric("max_batch_annotated", annotated.batch as f64, Unit::Batch);
        r.metric(
            "max_batch_annotated_over_plain",
            annotated.batch as f64 / plain.batch.max(1) as f64,
            Unit::Ratio,
        );
        let finder_runs = plain.run_count().max(annotated.run_count());
        r.metric("max_batch_runs", finder_runs as f64, Unit::Count);
        r.metric(
            "max_batch_bisection_runs_plain",
            self.bisection_runs[0] as f64,
            Unit::Count,
        );
        r.metric(
            "max_batch_bisection_runs_annotated",
            self.bisection_runs[1] as f64,
            Unit::Count,
        );
        r.metric_with_target(
            "max_batch_exact",
            flag(self.max_batch_exact),
            Unit::Count,
            "= 1",
            self.max_batch_exact,
        );
        let time_ratio = self.times.ratio();
        r.metric_with_target(
            "tracking_time_ratio",
            time_ratio,
            Unit::Ratio,
            "≤ 1.05",
            time_ratio <= 1.05,
        );
        let round_ratios = self.times.round_ratios();
        r.metric(
            "tracking_time_ratio_lowest_round",
            round_ratios.first().copied().unwrap_or(f64::NAN),
            Unit::Ratio,
        );
        r.metric(
            "tracking_time_ratio_highest_round",
            round_ratios.last().copied().unwrap_or(f64::NAN),
            Unit::Ratio,
        );
    }
}
