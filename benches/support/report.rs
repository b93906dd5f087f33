//! Shared output of the benchmark programs (included with `#[path]` by each one).
//!
//! Every program prints either a human table or, with `--json`, one JSON object per metric:
//! `{"bench":"<bench>","metric":"<name>","value":<number>,"unit":"<unit>"}`.
//! With `--write` it also replaces its own section of `BENCHMARKS.md` (between
//! `<!-- bench:<bench> -->` and `<!-- /bench:<bench> -->`), stamped with date, machine and command.

#![allow(dead_code)] // Each program uses a different subset.

use std::fmt::Write as _;
use std::path::Path;

/// Unit of a metric, as DESIGN.md's benchmark format names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Ns,
    Ms,
    Ratio,
    Count,
    Batch,
    Gflops,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::Ns => "ns",
            Unit::Ms => "ms",
            Unit::Ratio => "ratio",
            Unit::Count => "count",
            Unit::Batch => "batch",
            Unit::Gflops => "GFLOP/s",
        }
    }
}

/// One measured figure, with an optional target it is checked against in the table.
#[derive(Debug, Clone)]
pub struct Metric {
    pub name: String,
    pub value: f64,
    pub unit: Unit,
    pub target: Option<String>,
    pub met: Option<bool>,
}

/// Command-line switches every benchmark program accepts.
#[derive(Debug, Clone, Default)]
pub struct Args {
    /// `--json`: one JSON object per line instead of a table.
    pub json: bool,
    /// `--write`: update this program's section of BENCHMARKS.md.
    pub write: bool,
    /// `--quick`: smaller sizes, for smoke runs.
    pub quick: bool,
    /// Everything else, for program-specific flags.
    pub rest: Vec<String>,
}

impl Args {
    /// Parses `std::env::args()`.
    pub fn parse() -> Args {
        let mut args = Args::default();
        for a in std::env::args().skip(1) {
            match a.as_str() {
                "--json" => args.json = true,
                "--write" => args.write = true,
                "--quick" => args.quick = true,
                // `cargo bench` passes this to bench targets.
                "--bench" => {}
                _ => args.rest.push(a),
            }
        }
        args
    }

    /// The value following `--name`, parsed.
    pub fn value<T: std::str::FromStr>(&self, name: &str) -> Option<T> {
        let flag = format!("--{name}");
        let at = self.rest.iter().position(|a| *a == flag)?;
        self.rest.get(at + 1)?.parse().ok()
    }
}

/// Collects metrics and prints them in the format asked for.
pub struct Report {
    bench: String,
    /// What follows `cargo run --release` in the command `--write` records
    /// (`--example <bench>_bench` unless set).
    cargo_args: Option<String>,
    metrics: Vec<Metric>,
    notes: Vec<String>,
}

impl Report {
    pub fn new(bench: &str) -> Report {
        Report {
            bench: bench.to_string(),
            cargo_args: None,
            metrics: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Sets what follows `cargo run --release` in the recorded command, for a program that is
    /// not `--example <bench>_bench` (`"--features candle --example candle_inference"`).
    pub fn cargo_args(&mut self, args: &str) {
        self.cargo_args = Some(args.to_string());
    }

    /// Records a metric without a target.
    pub fn metric(&mut self, name: &str, value: f64, unit: Unit) {
        self.metrics.push(Metric {
            name: name.to_string(),
            value,
            unit,
            target: None,
            met: None,
        });
    }

    /// Records a metric with a target (`"≤ 1.15"`) and whether the measured value meets it.
    pub fn metric_with_target(
        &mut self,
        name: &str,
        value: f64,
        unit: Unit,
        target: &str,
        met: bool,
    ) {
        self.metrics.push(Metric {
            name: name.to_string(),
            value,
            unit,
            target: Some(target.to_string()),
            met: Some(met),
        });
    }

    /// A line printed under the table (what was measured, how).
    pub fn note(&mut self, text: &str) {
        self.notes.push(text.to_string());
    }

    /// Prints the report (JSON lines or a table) and, with `--write`, updates BENCHMARKS.md.
    pub fn finish(&self, args: &Args) {
        if args.json {
            for m in &self.metrics {
                println!(
                    "{{\"bench\":\"{}\",\"metric\":\"{}\",\"value\":{},\"unit\":\"{}\"{}}}",
                    self.bench,
                    m.name,
                    json_number(m.value),
                    m.unit.as_str(),
                    match m.met {
                        Some(met) => format!(",\"target_met\":{met}"),
                        None => String::new(),
                    }
                );
            }
        } else {
            print!("{}", self.table());
        }
        if args.write {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("BENCHMARKS.md");
            match self.write_section(&path, args) {
                Ok(()) => eprintln!("updated {}", path.display()),
                Err(e) => eprintln!("could not update {}: {e}", path.display()),
            }
        }
    }

    /// The human-readable table (Markdown, so it is also what BENCHMARKS.md holds).
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "| metric | value | unit | target | met |");
        let _ = writeln!(out, "| --- | ---: | --- | --- | --- |");
        for m in &self.metrics {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} |",
                m.name,
                human_number(m.value, m.unit),
                m.unit.as_str(),
                m.target.as_deref().unwrap_or(""),
                match m.met {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "",
                }
            );
        }
        for n in &self.notes {
            let _ = writeln!(out, "\n{n}");
        }
        out
    }

    fn write_section(&self, path: &Path, args: &Args) -> std::io::Result<()> {
        let start = format!("<!-- bench:{} -->", self.bench);
        let end = format!("<!-- /bench:{} -->", self.bench);
        let cargo_args = match &self.cargo_args {
            Some(args) => args.clone(),
            None => format!("--example {}_bench", self.bench),
        };
        let mut command = format!("cargo run --release {cargo_args} --");
        if args.quick {
            command.push_str(" --quick");
        }
        for r in &args.rest {
            command.push(' ');
            command.push_str(r);
        }
        command.push_str(" --write");
        let section = format!(
            "{start}\n## `{bench}`\n\nMeasured {date} on {machine}.\nCommand: `{command}`\n\n{table}{end}",
            bench = self.bench,
            date = today(),
            machine = machine(),
            table = self.table(),
        );
        let old = std::fs::read_to_string(path).unwrap_or_else(|_| {
            "# Benchmarks\n\nFigures measured by the benchmark programs; each section is rewritten by its program with `--write`.\n".to_string()
        });
        let new = match (old.find(&start), old.find(&end)) {
            (Some(s), Some(e)) if e > s => {
                format!("{}{}{}", &old[..s], section, &old[e + end.len()..])
            }
            _ => format!("{}\n{}\n", old.trim_end(), section),
        };
        std::fs::write(path, new)
    }
}

fn json_number(v: f64) -> String {
    if v.is_finite() {
        if v.fract() == 0.0 && v.abs() < 1e15 {
            format!("{}", v as i64)
        } else {
            format!("{v:.6}")
        }
    } else {
        "null".to_string()
    }
}

fn human_number(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Bytes => {
            let mib = v / (1024.0 * 1024.0);
            format!("{} ({mib:.2} MiB)", v as i64)
        }
        Unit::Count | Unit::Batch => format!("{}", v as i64),
        Unit::Ratio => format!("{v:.3}"),
        _ => format!("{v:.2}"),
    }
}

/// Today's date (UTC) as YYYY-MM-DD, without a date crate.
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// CPU model and core count, read from /proc where available.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    format!("{cpu}, {cores} cores")
}
