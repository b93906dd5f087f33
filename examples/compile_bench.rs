//! `compile` benchmark: what `#[inference]` costs at compile time.
//!
//! Builds the generated test corpus (`tests/gen/corpus_*.rs`, every function of both its
//! modules) as two throwaway crates under `target/compile-bench/`: `plain`, with no attribute,
//! and `annotated`, with `#[vramguard::inference]` on every function. Dependencies are built
//! once; then each crate's own compilation (`cargo build`, dev profile, incremental off) is
//! timed `--reps` times, the two interleaved, and the medians compared:
//! `compile_time_ratio` = annotated / plain (a reported figure: the target is on real model
//! code, `scripts/compile-time.sh`). The annotated time includes running
//! the macro itself.
//!
//! `compile_time_ratio_no_drops` times a third crate with `#[vramguard::inference(drops =
//! false)]`: the attribute parses each function, lints it and writes it back with only the
//! no-grad guard; the rest of `compile_time_ratio` is the drop-at-last-use code and the analysis
//! behind it. (`macros/src/liveness/tests.rs` prints the size of the generated code.)
//!
//! `compile_time_ratio_syn_roundtrip` times a fourth crate whose attribute (a throwaway
//! proc-macro crate the bench writes beside the others, on the same syn, quote and proc-macro2)
//! parses each function with syn and prints it back unchanged: the floor of any syn-based
//! attribute that reads a function body, which no work inside `#[inference]` can go below.
//!
//! The macro runs as built by the user's profile: in a debug build Cargo compiles proc macros
//! unoptimized. `compile_time_ratio_optimized_macro` repeats the comparison with
//! `[profile.dev.build-override] opt-level = 3` in both crates, the setting heavy proc-macro
//! users add, which leaves the cost of the generated code itself.
//!
//! Flags: `--reps N` (3), `--quick` (one corpus file, 2 reps), plus the shared `--json` and
//! `--write`.

#[path = "../benches/support/report.rs"]
mod report;

use report::{Args, Report, Unit};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("compile_bench failed: {e}");
        std::process::exit(1);
    }
}

type Error = Box<dyn std::error::Error>;

fn run(args: &Args) -> Result<(), Error> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let reps: usize = args
        .value::<usize>("reps")
        .unwrap_or(if args.quick { 2 } else { 3 })
        .max(1);
    let files = if args.quick { 1 } else { 4 };
    let mut report = Report::new("compile_bench");
    // The program is `compile_bench` itself, not `<bench>_bench`.
    report.cargo_args("--example compile_bench");
    for optimized_macro in [false, true] {
        let suffix = if optimized_macro {
            "_optimized_macro"
        } else {
            ""
        };
        let bench_dir = root.join("target/compile-bench").join(if optimized_macro {
            "optimized-macro"
        } else {
            "default"
        });
        let target_dir = bench_dir.join("target");
        let mut functions = 0;
        write_roundtrip_macro(&bench_dir.join(ROUNDTRIP_MACRO))?;
        for (name, attribute) in [
            ("plain", None),
            ("annotated", Some("#[vramguard::inference]")),
            ("no-drops", Some("#[vramguard::inference(drops = false)]")),
            ("syn-roundtrip", Some("#[vg_syn_roundtrip::roundtrip]")),
        ] {
            let dir = bench_dir.join(name);
            functions = write_crate(&root, &dir, files, attribute, optimized_macro)?;
        }
        eprintln!("{functions} functions per crate{suffix}; building dependencies once ...");
        for name in CRATES {
            build(&bench_dir.join(name), &target_dir)?;
        }
        let [plain, annotated, no_drops, roundtrip] = time_crates(&bench_dir, &target_dir, reps)?;
        if !optimized_macro {
            report.metric("corpus_functions", functions as f64, Unit::Count);
        }
        report.metric(
            &format!("compile_seconds_plain{suffix}"),
            plain,
            Unit::Ratio,
        );
        report.metric(
            &format!("compile_seconds_annotated{suffix}"),
            annotated,
            Unit::Ratio,
        );
        // A reported figure with no target (issue #19): the target is on real model code,
        // `scripts/compile-time.sh`.
        report.metric(
            &format!("compile_time_ratio{suffix}"),
            annotated / plain,
            Unit::Ratio,
        );
        report.metric(
            &format!("compile_time_ratio_no_drops{suffix}"),
            no_drops / plain,
            Unit::Ratio,
        );
        report.metric(
            &format!("compile_time_ratio_syn_roundtrip{suffix}"),
            roundtrip / plain,
            Unit::Ratio,
        );
    }
    report.note(&format!(
        "The generated corpus (every function of both modules of {files} corpus file(s), over \
         the logging type `T`), compiled as a crate of its own with no attribute and with \
         `#[vramguard::inference]` on every function (and, for `_no_drops`, with \
         `#[vramguard::inference(drops = false)]`: parsed, linted and written back with the \
         no-grad guard, nothing dropped early; for `_syn_roundtrip`, with an attribute that only \
         parses each function with syn and prints it back, the floor of any syn-based \
         attribute); \
         `cargo build`, dev profile, \
         CARGO_INCREMENTAL=0, dependencies prebuilt; median of {reps} interleaved builds each \
         (seconds, reported with unit `ratio` for want of a time unit). The annotated time \
         includes the macro's own run: unoptimized as a debug build compiles proc macros, and \
         (`_optimized_macro`) with `[profile.dev.build-override] opt-level = 3`. A reported \
         figure with no target: the target is on real model code (`scripts/compile-time.sh`, \
         \"Compile time on real code\")."
    ));
    report.finish(args);
    Ok(())
}

/// The crates compared: no attribute, `#[inference]`, `#[inference(drops = false)]`, and the
/// syn round trip.
const CRATES: [&str; 4] = ["plain", "annotated", "no-drops", "syn-roundtrip"];

/// The directory of the throwaway proc-macro crate of the syn round trip.
const ROUNDTRIP_MACRO: &str = "roundtrip-macro";

/// Median build seconds of each of [`CRATES`], `reps` builds each, interleaved.
fn time_crates(bench_dir: &Path, target_dir: &Path, reps: usize) -> Result<[f64; 4], Error> {
    let mut times: [Vec<f64>; 4] = Default::default();
    for rep in 0..reps {
        for (name, times) in CRATES.iter().zip(times.iter_mut()) {
            let dir = bench_dir.join(name);
            // A new modification time: the crate itself is rebuilt, its dependencies are not.
            let lib = dir.join("src/lib.rs");
            std::fs::write(&lib, std::fs::read_to_string(&lib)?)?;
            let start = Instant::now();
            build(&dir, target_dir)?;
            let seconds = start.elapsed().as_secs_f64();
            eprintln!("  rep {}/{reps}: {name} {seconds:.2} s", rep + 1);
            times.push(seconds);
        }
    }
    Ok(times.map(|mut t| median(&mut t)))
}

fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn build(dir: &Path, target_dir: &Path) -> Result<(), Error> {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir)
        .env("CARGO_INCREMENTAL", "0")
        .status()?;
    if !status.success() {
        return Err(format!("cargo build failed in {}", dir.display()).into());
    }
    Ok(())
}

/// Writes the proc-macro crate `vg_syn_roundtrip`: `#[roundtrip]` parses the function with syn
/// (the features `vramguard-macros` enables) and prints it back unchanged.
fn write_roundtrip_macro(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"vg-syn-roundtrip\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         publish = false\n\n[lib]\nproc-macro = true\n\n[dependencies]\n\
         syn = { version = \"3\", features = [\"full\", \"visit\", \"visit-mut\", \"extra-traits\"] }\n\
         quote = \"1\"\nproc-macro2 = \"1\"\n\n[workspace]\n",
    )?;
    std::fs::write(
        dir.join("src/lib.rs"),
        "use quote::ToTokens;\n\n\
         #[proc_macro_attribute]\n\
         pub fn roundtrip(_: proc_macro::TokenStream, item: proc_macro::TokenStream) \
         -> proc_macro::TokenStream {\n\
         \x20   match syn::parse::<syn::ItemFn>(item) {\n\
         \x20       Ok(function) => function.into_token_stream().into(),\n\
         \x20       Err(error) => error.to_compile_error().into(),\n\
         \x20   }\n\
         }\n",
    )?;
    Ok(())
}

/// Writes a crate holding the corpus; returns the number of functions in it.
fn write_crate(
    root: &Path,
    dir: &Path,
    files: usize,
    attribute: Option<&str>,
    optimized_macro: bool,
) -> Result<usize, Error> {
    std::fs::create_dir_all(dir.join("src"))?;
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("bad crate directory")?;
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"corpus-{name}\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
             publish = false\n\n[dependencies]\nvramguard = {{ path = {:?} }}\n\
             vg-syn-roundtrip = {{ path = \"../{ROUNDTRIP_MACRO}\" }}\n\n[workspace]\n",
            root.display().to_string()
        ) + if optimized_macro {
            "\n[profile.dev.build-override]\nopt-level = 3\n"
        } else {
            ""
        },
    )?;
    let mut lib = String::from(
        "#![allow(dead_code, unused_imports, unused_variables, unused_mut, unused_assignments)]\n\
         #![allow(clippy::all)]\n#[path = \"support.rs\"]\npub mod support;\n",
    );
    std::fs::copy(
        root.join("tests/ui/inference/support.rs"),
        dir.join("src/support.rs"),
    )?;
    let mut functions = 0;
    for index in 0..files {
        let text = std::fs::read_to_string(root.join(format!("tests/gen/corpus_{index}.rs")))?;
        let mut out = String::new();
        for line in text.lines() {
            if line.trim() == "#[vramguard::inference]" {
                continue;
            }
            if line.trim_start().starts_with("pub fn f") {
                functions += 1;
                if let Some(attribute) = attribute {
                    out.push_str(&format!("    {attribute}\n"));
                }
            }
            out.push_str(line);
            out.push('\n');
        }
        // The corpus reaches the support module as `super::super::support`.
        out = out.replace("super::super::support", "crate::support");
        out = out.replace("super::support", "crate::support");
        std::fs::write(dir.join(format!("src/corpus_{index}.rs")), out)?;
        lib.push_str(&format!("pub mod corpus_{index};\n"));
    }
    std::fs::write(dir.join("src/lib.rs"), lib)?;
    Ok(functions)
}
