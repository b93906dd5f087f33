//! `cargo vramguard measure`: what the attribute saves on one program. The target (a binary,
//! an example or a test) is built twice from the check's copy of the crate — annotated, and
//! plain with every vramguard attribute removed — each with vramguard's `TrackingAllocator` as
//! its global allocator (written into the copy when the source lacks it). Both run, in turn,
//! with `VRAMGUARD_HEAP_REPORT` set, so the allocator writes the process's exact heap peak at
//! exit; one more run of the annotated build with `VRAMGUARD_HEAP_CENSUS` says what was live
//! at its peak, by label. Prints both peaks, their ratio, whether standard output is the same,
//! and the time ratio (medians of alternating runs).
//!
//! With `--device cuda` the bytes are the GPU's: each build runs with the CUDA driver's
//! injection hook (`CUDA_INJECTION64_PATH`) naming a library `inject` builds, which starts
//! vramguard's GPU observer at the program's first `cuInit` and writes, at exit, the observed
//! peak of the bytes every library allocated through the driver and what was live at that
//! peak, by label (`VRAMGUARD_GPU_REPORT`). Nothing of the program changes for it; the heap
//! report is not asked for.
//!
//! What "annotated" means: the crate as it is when it already carries the attribute and no
//! `--fns` is given (what `apply` left); otherwise the check's result for `--fns` and `--attr`
//! on top of what it carries. Owns the command, its builds and runs, and its report; which
//! functions compile is `check`'s, the allocator line `track`'s, the plain text `strip`'s.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use serde::Serialize;

use crate::adopt_cli::{self, CopyOptions};
use crate::annotate;
use crate::check;
use crate::error::{Error, Result};
use crate::targets::{self, Kind, Target};
use crate::track::{self, Allocator};
use crate::{dependency, inject, strip, workspace};

/// The variables the tracking allocator reads (`vramguard::heap::REPORT_ENV`, `CENSUS_ENV`;
/// this tool does not link vramguard, so they are spelled here).
const REPORT_ENV: &str = "VRAMGUARD_HEAP_REPORT";
const CENSUS_ENV: &str = "VRAMGUARD_HEAP_CENSUS";
/// The variable the GPU observer's exit report reads (`vramguard::observer::GPU_REPORT_ENV`).
const GPU_REPORT_ENV: &str = "VRAMGUARD_GPU_REPORT";

/// The usage text of `cargo vramguard measure --help`.
pub(crate) const USAGE: &str = "\
cargo vramguard measure: the heap (or GPU) peak of a program with and without the attribute

Builds the target twice from a copy of the crate: annotated (the crate as it is when it
already carries #[vramguard::inference] and no --fns is given; otherwise the check's result
for --fns) and plain (every vramguard attribute removed), both with vramguard's
TrackingAllocator as the global allocator (--device cpu). Runs each in turn and prints the exact heap peak of
each, their ratio, whether standard output is identical, the time ratio, and the largest live
allocations at the annotated peak, by label (vramguard::scope::tag, #[batch_scope]).

With --device cuda the peaks are the GPU's: the bytes every library of the program (candle,
burn, tch, vramguard) allocates through the CUDA driver, seen by vramguard's GPU observer,
which a library built beside the copy attaches at the program's first cuInit through the
driver's CUDA_INJECTION64_PATH hook (the program is not changed for it). Needs CUPTI
(libcupti.so: the CUDA toolkit's extras/CUPTI/lib64, or the nvidia-cuda-cupti-cu12 wheel) on
LD_LIBRARY_PATH.

USAGE:
    cargo vramguard measure (--bin NAME | --example NAME | --test NAME) [OPTIONS] [CRATE_DIR]
                            [-- ARGS]

ARGS:
    [CRATE_DIR]    the crate's directory [default: the current directory]
    [ARGS]         passed to the program (for a test: to the test harness)

OPTIONS:
    --bin <NAME> | --example <NAME> | --test <NAME>
                                    the target to measure (exactly one)
    --json                          print one JSON object: plain_peak_bytes,
                                    annotated_peak_bytes, peak_ratio, stdout_identical,
                                    time_ratio, and the rest of the report
    --runs <N>                      runs of each build, alternating [default: 3]; the time
                                    ratio is that of the median times
    --release                       build with the release profile
    --device <cpu|cuda>             what to measure [default: cpu, the process's heap;
                                    cuda: the GPU bytes allocated through the driver]

EXIT CODE:
    0 measured, standard output identical
    1 measured, standard output differs
    2 usage error, or a build or a run failed
";

/// What `measure` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct MeasureOptions {
    /// The crate and the check's settings.
    pub copy: CopyOptions,
    /// The target's kind and name.
    pub kind: Kind,
    /// The target's name.
    pub name: String,
    /// Print JSON.
    pub json: bool,
    /// Runs of each build.
    pub runs: usize,
    /// Release profile.
    pub release: bool,
    /// Arguments for the program.
    pub args: Vec<String>,
    /// Whose bytes.
    pub device: Device,
}

/// What `measure` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Device {
    /// The process's heap (the tracking allocator's report).
    Cpu,
    /// The GPU bytes allocated through the CUDA driver (the GPU observer's report).
    Cuda,
}

impl Device {
    fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        }
    }
}

/// Parses the arguments after `measure` (`None`: `--help`).
pub(crate) fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<MeasureOptions>> {
    let args: Vec<String> = args.into_iter().collect();
    if adopt_cli::asks_for_help(&args) {
        return Ok(None);
    }
    let mut target: Option<(Kind, String)> = None;
    let mut json = false;
    let mut runs = 3;
    let mut release = false;
    let mut device = Device::Cpu;
    let (copy, rest) = adopt_cli::parse("measure", args, |name, inline, args| {
        let kind = match name {
            "--bin" => Some(Kind::Bin),
            "--example" => Some(Kind::Example),
            "--test" => Some(Kind::Test),
            _ => None,
        };
        if let Some(kind) = kind {
            let value = args.value(name, inline, "NAME")?;
            if let Some((other, before)) = &target {
                return Err(Error::Usage(format!(
                    "one target per run: `{name} {value}` comes after `--{} {before}`",
                    other.name()
                )));
            }
            target = Some((kind, value));
            return Ok(true);
        }
        match name {
            "--json" => json = true,
            "--release" => release = true,
            "--runs" => {
                let text = args.value(name, inline, "N")?;
                runs = match text.parse::<usize>() {
                    Ok(n) if n > 0 => n,
                    _ => {
                        return Err(Error::Usage(format!(
                            "`--runs {text}`: give a whole number of runs, 1 or more"
                        )))
                    }
                };
            }
            "--device" => match args.value(name, inline, "cpu|cuda")?.as_str() {
                "cpu" | "host" => device = Device::Cpu,
                "cuda" => device = Device::Cuda,
                other => {
                    return Err(Error::Usage(format!(
                        "`--device {other}`: the device is `cpu` (the heap) or `cuda`"
                    )))
                }
            },
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let Some((kind, name)) = target else {
        return Err(Error::Usage(
            "name the program to measure: `--bin NAME`, `--example NAME` or `--test NAME`"
                .to_string(),
        ));
    };
    Ok(Some(MeasureOptions {
        copy,
        kind,
        name,
        json,
        runs,
        release,
        args: rest,
        device,
    }))
}

/// The entry point: parses, measures, prints; exit code 0 (same output), 1 (output differs)
/// or 2 (an error).
pub(crate) fn main(args: Vec<String>) -> ExitCode {
    let options = match parse(args) {
        Ok(Some(options)) => options,
        Ok(None) => {
            print!("{USAGE}\nSHARED OPTIONS:\n{}", adopt_cli::SHARED_USAGE);
            return ExitCode::SUCCESS;
        }
        Err(error) => return crate::fail(&error),
    };
    match run(&options) {
        Ok(report) => {
            if options.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_else(|e| format!(
                        "{{\"error\":\"cannot serialize the report: {e}\"}}"
                    ))
                );
            } else {
                print!("{}", report.human());
            }
            if report.stdout_identical {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(error) => crate::fail(&error),
    }
}

/// One group of the census: allocations of one size made under one label, live at the
/// annotated peak.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct LiveGroup {
    /// The label (`(no label)`, `(vramguard bookkeeping)` for vramguard's own).
    pub label: String,
    /// The size of each.
    pub size: u64,
    /// Allocations.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// The target that was measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct MeasuredTarget {
    /// `bin`, `example` or `test`.
    pub kind: Kind,
    /// Its name.
    pub name: String,
}

/// Everything `measure` found.
#[derive(Debug, Serialize)]
pub(crate) struct MeasureReport {
    /// Package name.
    #[serde(rename = "crate")]
    pub krate: String,
    /// Package version.
    pub version: String,
    /// The program.
    pub target: MeasuredTarget,
    /// `cpu` (the heap's bytes) or `cuda` (the GPU's, through the driver).
    pub device: &'static str,
    /// `dev` or `release`.
    pub profile: &'static str,
    /// Runs of each build.
    pub runs: usize,
    /// The functions the annotated build has the attribute on (`Type::name`).
    pub annotated_functions: Vec<String>,
    /// Whether those are the crate's own (`as_written`) or added by the check.
    pub annotation_source: &'static str,
    /// The plain build's heap (or GPU) peak (its first run).
    pub plain_peak_bytes: u64,
    /// The annotated build's heap (or GPU) peak (its first run).
    pub annotated_peak_bytes: u64,
    /// `annotated_peak_bytes / plain_peak_bytes`.
    pub peak_ratio: f64,
    /// Whether every run of each build had the same peak (false: the program is not
    /// deterministic, e.g. threads).
    pub peaks_stable: bool,
    /// Whether the first runs' standard outputs are byte for byte the same.
    pub stdout_identical: bool,
    /// The first line where they differ (1-based), when they do.
    pub stdout_first_difference: Option<usize>,
    /// Median wall time of the annotated runs over that of the plain runs.
    pub time_ratio: f64,
    /// Median wall time of the plain runs.
    pub plain_seconds: f64,
    /// Median wall time of the annotated runs.
    pub annotated_seconds: f64,
    /// The census run's peak (the annotated build, run once more; on `cuda`, its first run,
    /// whose report holds the census).
    pub census_peak_bytes: u64,
    /// What was live at that peak, by label and size, most bytes first.
    pub largest_at_peak: Vec<LiveGroup>,
    /// Whether the census saw every allocation up to the peak (false: the GPU observer's log
    /// dropped its oldest events, and older allocations may be missing from it).
    pub census_complete: bool,
    /// Where the copy and the two executables are.
    pub work_dir: PathBuf,
}

/// Builds, runs and compares.
pub(crate) fn run(options: &MeasureOptions) -> Result<MeasureReport> {
    let dir = &options.copy.crate_dir;
    let manifest_path = dir.join("Cargo.toml");
    let manifest =
        std::fs::read_to_string(&manifest_path).map_err(Error::io("read", &manifest_path))?;
    let library_features = dependency::ensure_vramguard(&manifest, None)
        .map_err(|detail| Error::Manifest {
            path: manifest_path.clone(),
            detail,
        })?
        .features;

    // The annotated copy: the crate as written, or the check's result on top of it.
    let written = annotate::collect_files(dir, true)?;
    let carries_attribute = written
        .iter()
        .any(|f| strip::strip(&f.text).is_ok_and(|(_, removed)| removed > 0));
    let add = options.copy.fns.is_some() || !carries_attribute;
    let (copy_dir, krate, version, added) = if add {
        let checked = check::run_detailed(&options.copy.check_options(&library_features, None))?;
        if !checked.outcome.converged || !checked.outcome.unmapped.is_empty() {
            return Err(Error::Unsettled(format!(
                "the check did not settle which functions compile annotated (`cargo vramguard \
                 check {}` shows why); nothing was measured",
                dir.display()
            )));
        }
        let added: Vec<String> = checked
            .decisions
            .iter()
            .filter(|d| d.annotation.is_some())
            .map(|d| d.site.name.clone())
            .collect();
        let outcome = checked.outcome;
        (outcome.copy_dir, outcome.krate, outcome.version, added)
    } else {
        let copy = workspace::prepare(
            dir,
            &options.copy.work_dir,
            options.copy.vramguard_path.as_deref(),
            &union(&options.copy.features, &library_features),
            None,
        )?;
        for warning in &copy.warnings {
            eprintln!("{warning}");
        }
        (copy.dir, copy.name, copy.version, Vec::new())
    };
    let annotated_files = annotate::collect_files(&copy_dir, true)?;
    let annotated_functions = functions_carrying_attribute(&annotated_files);

    let (_, _, all) = targets::targets(&copy_dir, options.copy.offline)?;
    let target = find_target(&all, options)?;
    let root_rel = relative(&target.src_path, &copy_dir);

    let out_dir = options
        .copy
        .work_dir
        .join("measure")
        .join(format!("{krate}-{version}"));
    std::fs::create_dir_all(&out_dir).map_err(Error::io("create", &out_dir))?;

    // Annotated build (the heap is read through the tracking allocator; the GPU through the
    // injection library, so the source is left as it is).
    let track = options.device == Device::Cpu;
    let annotated_texts = with_tracking(&annotated_files, &root_rel, track, |text| {
        Ok(text.to_string())
    })?;
    write_texts(&copy_dir, &annotated_texts)?;
    eprintln!(
        "cargo-vramguard: building {} `{}` annotated…",
        target.kind.name(),
        target.name
    );
    let annotated_exe = build(&copy_dir, target, options, &out_dir, "annotated")?;
    // Plain build.
    let plain_texts = with_tracking(&annotated_files, &root_rel, track, |text| {
        strip::strip(text).map(|(plain, _)| plain)
    })?;
    write_texts(&copy_dir, &plain_texts)?;
    eprintln!(
        "cargo-vramguard: building {} `{}` plain…",
        target.kind.name(),
        target.name
    );
    let plain_exe = build(&copy_dir, target, options, &out_dir, "plain");
    // The copy is left annotated, for inspection, whether the plain build worked or not.
    write_texts(&copy_dir, &annotated_texts)?;
    let plain_exe = plain_exe?;
    let injection = match options.device {
        Device::Cpu => None,
        Device::Cuda => {
            eprintln!("cargo-vramguard: building the CUDA injection library (the GPU observer)…");
            Some(inject::build(&inject::BuildSettings {
                copy_dir: &copy_dir,
                out_dir: &out_dir,
                target_dir: &options.copy.target_dir,
                release: options.release,
                offline: options.copy.offline,
            })?)
        }
    };
    let injection = injection.as_deref();

    // Alternating runs; the first pair gives the peaks and the outputs compared.
    let mut plain_runs = Vec::new();
    let mut annotated_runs = Vec::new();
    for round in 0..options.runs {
        eprintln!(
            "cargo-vramguard: run {} of {} (plain and annotated)…",
            round + 1,
            options.runs
        );
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for annotated in order {
            let (exe, runs, which) = if annotated {
                (&annotated_exe, &mut annotated_runs, "annotated")
            } else {
                (&plain_exe, &mut plain_runs, "plain")
            };
            runs.push(run_once(exe, options, &out_dir, which, false, injection)?);
        }
    }
    // The GPU report holds its census already; the heap's census costs a run of its own.
    let census_run;
    let census = match injection {
        Some(_) => &annotated_runs[0],
        None => {
            eprintln!("cargo-vramguard: census run (annotated)…");
            census_run = run_once(&annotated_exe, options, &out_dir, "annotated", true, None)?;
            &census_run
        }
    };

    let plain = &plain_runs[0];
    let annotated = &annotated_runs[0];
    let plain_seconds = median(plain_runs.iter().map(|r| r.seconds).collect());
    let annotated_seconds = median(annotated_runs.iter().map(|r| r.seconds).collect());
    let stable = |runs: &[Run]| runs.iter().all(|r| r.peak_bytes == runs[0].peak_bytes);
    Ok(MeasureReport {
        krate,
        version,
        target: MeasuredTarget {
            kind: target.kind,
            name: target.name.clone(),
        },
        device: options.device.name(),
        profile: if options.release { "release" } else { "dev" },
        runs: options.runs,
        annotated_functions,
        annotation_source: if add && !added.is_empty() {
            "check"
        } else {
            "as_written"
        },
        plain_peak_bytes: plain.peak_bytes,
        annotated_peak_bytes: annotated.peak_bytes,
        peak_ratio: ratio(annotated.peak_bytes as f64, plain.peak_bytes as f64),
        peaks_stable: stable(&plain_runs) && stable(&annotated_runs),
        stdout_identical: plain.stdout == annotated.stdout,
        stdout_first_difference: first_difference(&plain.stdout, &annotated.stdout),
        time_ratio: ratio(annotated_seconds, plain_seconds),
        plain_seconds,
        annotated_seconds,
        census_peak_bytes: census.census_peak_bytes.unwrap_or(census.peak_bytes),
        largest_at_peak: census.groups.clone(),
        census_complete: census.census_complete,
        work_dir: out_dir,
    })
}

fn union(a: &[String], b: &[String]) -> Vec<String> {
    let mut all = a.to_vec();
    for item in b {
        if !all.contains(item) {
            all.push(item.clone());
        }
    }
    all
}

/// `Type::name` of every function that carries the attribute in `files`.
fn functions_carrying_attribute(files: &[annotate::SourceFile]) -> Vec<String> {
    let mut names = Vec::new();
    for file in files {
        let Ok(ast) = syn::parse_file(&file.text) else {
            continue;
        };
        let mut finder = Carriers {
            owner: None,
            names: &mut names,
        };
        syn::visit::Visit::visit_file(&mut finder, &ast);
    }
    names
}

struct Carriers<'a> {
    owner: Option<String>,
    names: &'a mut Vec<String>,
}

impl<'ast> syn::visit::Visit<'ast> for Carriers<'_> {
    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if annotate::has_attr(&item.attrs, &annotate::OURS) {
            self.names.push(item.sig.ident.to_string());
        }
        syn::visit::visit_item_fn(self, item);
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        let saved = self.owner.take();
        if let syn::Type::Path(path) = &*item.self_ty {
            self.owner = path.path.segments.last().map(|s| s.ident.to_string());
        }
        let whole = annotate::has_attr(&item.attrs, &annotate::OURS);
        for inner in &item.items {
            if let syn::ImplItem::Fn(method) = inner {
                if whole || annotate::has_attr(&method.attrs, &annotate::OURS) {
                    let owner = self.owner.as_deref().unwrap_or("_");
                    self.names.push(format!("{owner}::{}", method.sig.ident));
                }
            }
        }
        syn::visit::visit_item_impl(self, item);
        self.owner = saved;
    }
}

fn find_target<'a>(all: &'a [Target], options: &MeasureOptions) -> Result<&'a Target> {
    all.iter()
        .find(|t| t.kind == options.kind && t.name == options.name)
        .ok_or_else(|| {
            let names: Vec<&str> = all
                .iter()
                .filter(|t| t.kind == options.kind)
                .map(|t| t.name.as_str())
                .collect();
            Error::Measure(format!(
                "the crate has no {} target `{}`; its {} targets: {}",
                options.kind.name(),
                options.name,
                options.kind.name(),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ))
        })
}

/// Every file's text through `form`, with the tracking allocator line in the target's root
/// (when `track`).
fn with_tracking(
    files: &[annotate::SourceFile],
    root_rel: &str,
    track: bool,
    form: impl Fn(&str) -> std::result::Result<String, String>,
) -> Result<Vec<(String, String)>> {
    let mut texts = Vec::new();
    let mut root_found = false;
    for file in files {
        let text = form(&file.text).map_err(|detail| {
            Error::Measure(format!("{}: {detail}; nothing was measured", file.rel))
        })?;
        let text = if file.rel == root_rel {
            root_found = true;
            if track {
                tracked(&file.rel, &text)?
            } else {
                text
            }
        } else {
            text
        };
        texts.push((file.rel.clone(), text));
    }
    if track && !root_found {
        return Err(Error::Measure(format!(
            "the target's root file `{root_rel}` is outside src/, tests/ and examples/; \
             measure installs the tracking allocator there and cannot. Move it, or write \
             `#[global_allocator] static ALLOC: vramguard::TrackingAllocator = \
             vramguard::TrackingAllocator::system();` in it yourself"
        )));
    }
    Ok(texts)
}

fn tracked(rel: &str, text: &str) -> Result<String> {
    match track::install(text) {
        Ok(Allocator::Tracking) => Ok(text.to_string()),
        Ok(Allocator::Missing(with_line)) => Ok(with_line),
        Ok(Allocator::Other(ty)) => Err(Error::Measure(format!(
            "{rel} has its own #[global_allocator] (`{ty}`), and measure reads the heap through \
             vramguard::TrackingAllocator: wrap yours in it (`static A: \
             vramguard::TrackingAllocator<{ty}> = vramguard::TrackingAllocator::new(…);`)"
        ))),
        Err(detail) => Err(Error::Measure(format!("{rel}: {detail}"))),
    }
}

fn write_texts(root: &Path, texts: &[(String, String)]) -> Result<()> {
    for (rel, text) in texts {
        let path = root.join(rel);
        if std::fs::read_to_string(&path).is_ok_and(|old| old == *text) {
            continue;
        }
        std::fs::write(&path, text).map_err(Error::io("write", &path))?;
    }
    Ok(())
}

fn relative(path: &Path, dir: &Path) -> String {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let path = canonical(path);
    let dir = canonical(dir);
    path.strip_prefix(&dir)
        .unwrap_or(&path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Builds the target in the copy and copies its executable out (the next build replaces it).
fn build(
    copy_dir: &Path,
    target: &Target,
    options: &MeasureOptions,
    out_dir: &Path,
    which: &str,
) -> Result<PathBuf> {
    // Cargo puts a binary where its artifact message says (`target/debug/NAME`) only when it
    // compiles it: a build it finds fresh leaves there whatever was built last under that
    // name, by any package sharing the target directory (the crate itself, an earlier copy).
    // A newer root file makes it compile this one.
    let root = std::fs::File::options()
        .append(true)
        .open(&target.src_path)
        .and_then(|file| file.set_modified(std::time::SystemTime::now()));
    root.map_err(Error::io("touch", &target.src_path))?;
    let mut command = Command::new(crate::cargo::cargo_program());
    command
        .arg("build")
        .arg("--manifest-path")
        .arg(copy_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&options.copy.target_dir)
        .arg(format!("--{}", target.kind.name()))
        .arg(&target.name)
        .arg("--message-format=json-render-diagnostics")
        .current_dir(copy_dir)
        .env("CARGO_TERM_COLOR", "never")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    if options.release {
        command.arg("--release");
    }
    if !options.copy.crate_features.is_empty() {
        command
            .arg("--features")
            .arg(options.copy.crate_features.join(","));
    }
    if options.copy.offline {
        command.arg("--offline");
    }
    let shown = format!(
        "cargo build --{} {} ({which} copy in {})",
        target.kind.name(),
        target.name,
        copy_dir.display()
    );
    let executable = crate::cargo::build_artifact(
        command,
        &shown,
        &target.name,
        crate::cargo::Artifact::Executable,
        "",
    )?;
    let dest = out_dir.join(format!("{}-{}-{which}", target.kind.name(), target.name));
    std::fs::copy(&executable, &dest).map_err(Error::io("copy", &executable))?;
    Ok(dest)
}

/// One run of one build.
#[derive(Debug)]
struct Run {
    stdout: Vec<u8>,
    seconds: f64,
    peak_bytes: u64,
    census_peak_bytes: Option<u64>,
    groups: Vec<LiveGroup>,
    census_complete: bool,
}

/// Runs an executable with the heap report (and with `census`, the peak census) asked for;
/// with `injection`, the GPU report instead (the CUDA driver loads that library at `cuInit`).
fn run_once(
    exe: &Path,
    options: &MeasureOptions,
    out_dir: &Path,
    which: &str,
    census: bool,
    injection: Option<&Path>,
) -> Result<Run> {
    let report_path = out_dir.join(format!(
        "{}-{which}{}.json",
        if injection.is_some() { "gpu" } else { "heap" },
        if census { "-census" } else { "" }
    ));
    let _ = std::fs::remove_file(&report_path);
    let mut command = Command::new(exe);
    command
        .args(&options.args)
        // As `cargo run` and `cargo test` do: the crate's own directory for tests, the
        // caller's for programs.
        .current_dir(if options.kind == Kind::Test {
            options.copy.crate_dir.clone()
        } else {
            std::env::current_dir().map_err(Error::io("read", "the current directory"))?
        })
        .stdin(Stdio::null());
    match injection {
        Some(library) => {
            command
                .env(inject::INJECTION_ENV, library)
                .env(GPU_REPORT_ENV, &report_path)
                .env_remove(REPORT_ENV)
                .env_remove(CENSUS_ENV);
        }
        None => {
            command.env(REPORT_ENV, &report_path);
            if census {
                command.env(CENSUS_ENV, "1");
            } else {
                command.env_remove(CENSUS_ENV);
            }
        }
    }
    let shown = format!("{} ({which} build)", exe.display());
    let started = Instant::now();
    let output = command.output().map_err(|source| Error::Spawn {
        command: shown.clone(),
        source,
    })?;
    let seconds = started.elapsed().as_secs_f64();
    if !output.status.success() {
        return Err(Error::Measure(format!(
            "the {which} build of {} `{}` exited with {}; its last lines:\n{}",
            options.kind.name(),
            options.name,
            output.status,
            crate::source::last_lines(&String::from_utf8_lossy(&output.stderr), 12)
        )));
    }
    let text = std::fs::read_to_string(&report_path).map_err(|_| match injection {
        Some(_) => Error::Measure(format!(
            "the {which} build of {} `{}` wrote no GPU report ({}): the program made no CUDA \
             driver call, or exited without returning from main: nothing was observed",
            options.kind.name(),
            options.name,
            report_path.display()
        )),
        None => Error::Measure(format!(
            "the {which} build of {} `{}` exited without writing its heap report ({}): the \
             tracking allocator writes it at exit on Unix, when the program returns from main \
             or calls std::process::exit",
            options.kind.name(),
            options.name,
            report_path.display()
        )),
    })?;
    let report: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::CargoOutput {
            command: shown.clone(),
            detail: format!("its report is not JSON: {e}"),
        })?;
    match injection {
        Some(_) if report["observing"] != true => {
            return Err(Error::Measure(format!(
                "the GPU observer could not start in the {which} build, so nothing was \
                 measured: {}",
                report["error"]
                    .as_str()
                    .unwrap_or("(the report gives no reason)")
            )));
        }
        None if report["tracking"] != true => {
            return Err(Error::Measure(format!(
                "the {which} build did not track its heap: is `heap_tracking:false` in \
                 VRAMGUARD_ALLOC_CONF?"
            )));
        }
        _ => {}
    }
    let number = |value: &serde_json::Value| value.as_u64().unwrap_or(0);
    let groups = report["census"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| LiveGroup {
            label: g["label"].as_str().unwrap_or_default().to_string(),
            size: number(&g["size"]),
            count: number(&g["count"]),
            bytes: number(&g["bytes"]),
        })
        .collect();
    Ok(Run {
        stdout: output.stdout,
        seconds,
        peak_bytes: number(&report["peak_bytes"]),
        census_peak_bytes: report["census"]["peak_bytes"].as_u64(),
        groups,
        census_complete: report["census"]["complete"].as_bool().unwrap_or(true),
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn ratio(numerator: f64, denominator: f64) -> f64 {
    if denominator == 0.0 {
        0.0
    } else {
        numerator / denominator
    }
}

/// The first line (1-based) where two outputs differ.
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    let mut a_lines = a.split(|c| *c == b'\n');
    let mut b_lines = b.split(|c| *c == b'\n');
    let mut line = 1;
    loop {
        match (a_lines.next(), b_lines.next()) {
            (Some(x), Some(y)) if x == y => line += 1,
            _ => return Some(line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_compared_by_line() {
        assert_eq!(first_difference(b"a\nb\nc", b"a\nb\nc"), None);
        assert_eq!(first_difference(b"a\nb\nc", b"a\nx\nc"), Some(2));
        assert_eq!(first_difference(b"a\n", b"a\nb"), Some(2));
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0]), 2.5);
    }

    #[test]
    fn the_target_is_required_and_the_device_is_cpu_or_cuda() {
        let parse_strs = |args: &[&str]| parse(args.iter().map(|s| s.to_string()));
        for (args, needle) in [
            (&["--json"][..], "name the program"),
            (&["--bin", "a", "--example", "b"][..], "one target per run"),
            (
                &["--bin", "a", "--device", "gpu"][..],
                "the device is `cpu`",
            ),
            (&["--bin", "a", "--runs", "0"][..], "--runs 0"),
        ] {
            match parse_strs(args) {
                Err(Error::Usage(message)) => assert!(message.contains(needle), "{message}"),
                other => panic!("{args:?}: expected a usage error, got {other:?}"),
            }
        }
        let Ok(Some(options)) = parse_strs(&["--test", "model", "--json", "--", "--nocapture"])
        else {
            panic!("expected options");
        };
        assert_eq!((options.kind, options.name.as_str()), (Kind::Test, "model"));
        assert_eq!(options.args, ["--nocapture"]);
        assert_eq!(options.device, Device::Cpu);
        let Ok(Some(options)) = parse_strs(&["--bin", "a", "--device", "cuda"]) else {
            panic!("expected options");
        };
        assert_eq!(options.device, Device::Cuda);
    }
}
