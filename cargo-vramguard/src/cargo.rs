//! Running cargo on the work copy and reading what it says: `cargo check
//! --message-format=json` diagnostics, the file a `cargo build` made, and test results per test
//! name (each test binary run directly, so a result is keyed by its binary). Owns the command lines and the parsing of
//! their output; deciding what an error means is `check`'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;

use crate::error::{Error, Result};

/// The cargo to run: `$CARGO` (set when run as `cargo vramguard`), else `cargo`.
pub(crate) fn cargo_program() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// The file a `cargo build` is run for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Artifact {
    /// A binary, example or test: its executable.
    Executable,
    /// A `cdylib`: its shared library (`.so`, `.dylib`).
    SharedLibrary,
}

/// Runs `command`, a `cargo build --message-format=json-render-diagnostics` with cargo's
/// errors on the inherited stderr, and returns the `artifact` of the target named
/// `target_name` from its artifact messages. `shown` names the command in errors; `hint`, when
/// not empty, is added to the error of a failed build.
pub(crate) fn build_artifact(
    mut command: Command,
    shown: &str,
    target_name: &str,
    artifact: Artifact,
    hint: &str,
) -> Result<PathBuf> {
    let output = command.output().map_err(|source| Error::Spawn {
        command: shown.to_string(),
        source,
    })?;
    if !output.status.success() {
        let mut detail = format!(
            "it exited with {} (cargo's errors are above)",
            output.status
        );
        if !hint.is_empty() {
            detail = format!("{detail}; {hint}");
        }
        return Err(Error::Build {
            command: shown.to_string(),
            detail,
        });
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut messages = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == target_name);
    let found = match artifact {
        Artifact::Executable => messages.find_map(|m| m["executable"].as_str().map(PathBuf::from)),
        Artifact::SharedLibrary => messages.find_map(|m| {
            m["filenames"].as_array()?.iter().find_map(|f| {
                let file = PathBuf::from(f.as_str()?);
                let shared = file.extension().is_some_and(|e| e == "so" || e == "dylib");
                shared.then_some(file)
            })
        }),
    };
    found.ok_or_else(|| Error::CargoOutput {
        command: shown.to_string(),
        detail: match artifact {
            Artifact::Executable => "no executable in its artifacts",
            Artifact::SharedLibrary => "no shared library in its artifacts",
        }
        .to_string(),
    })
}

/// How to invoke cargo on the copy.
#[derive(Debug, Clone)]
pub(crate) struct Cargo {
    /// The copy's root (its `Cargo.toml` is the workspace root).
    pub dir: PathBuf,
    /// Cargo's target directory.
    pub target_dir: PathBuf,
    /// Features of the checked crate.
    pub crate_features: Vec<String>,
    /// Pass `--offline`.
    pub offline: bool,
    /// The crate has a library target (`--lib` is an error without one).
    pub has_lib: bool,
}

/// One place in the source a diagnostic points at.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Hash)]
pub(crate) struct Location {
    /// Path relative to the crate root (absolute when outside it).
    pub file: String,
    /// 1-based line.
    pub line: usize,
}

/// A compiler error.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Diagnostic {
    /// `E0597`, or `None` for errors without a code (macro errors, lints).
    pub code: Option<String>,
    /// The one-line message.
    pub message: String,
    /// Where it points: the primary span first, then the macro call sites it came from.
    #[serde(skip)]
    pub locations: Vec<Location>,
    /// The primary location, for the report.
    pub location: Option<Location>,
    /// rustc's full rendering.
    #[serde(skip)]
    pub rendered: String,
}

impl Diagnostic {
    /// `error[E0597]: message`.
    pub(crate) fn headline(&self) -> String {
        match &self.code {
            Some(code) => format!("error[{code}]: {}", self.message),
            None => format!("error: {}", self.message),
        }
    }
}

/// What a `cargo check` run said.
#[derive(Debug)]
pub(crate) struct CheckOutcome {
    /// The errors in the checked crate, in the order rustc gave them.
    pub errors: Vec<Diagnostic>,
    /// Whether the build finished successfully.
    pub success: bool,
    /// The end of cargo's stderr, for failures that are not diagnostics.
    pub stderr_tail: String,
}

impl Cargo {
    fn command(&self, subcommand: &str) -> Command {
        let mut command = Command::new(cargo_program());
        command
            .arg(subcommand)
            .arg("--manifest-path")
            .arg(self.dir.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&self.target_dir)
            .current_dir(&self.dir)
            .env("CARGO_TERM_COLOR", "never");
        if !self.crate_features.is_empty() {
            command.arg("--features").arg(self.crate_features.join(","));
        }
        if self.offline {
            command.arg("--offline");
        }
        command
    }

    /// `cargo check --message-format=json` (with `all_targets`: lib, bins, tests, examples).
    pub(crate) fn check(&self, all_targets: bool) -> Result<CheckOutcome> {
        let mut command = self.command("check");
        command.arg("--message-format=json");
        if all_targets {
            if self.has_lib {
                command.arg("--lib");
            }
            command.args(["--bins", "--tests", "--examples"]);
        }
        let display = format!(
            "cargo check --message-format=json in {}",
            self.dir.display()
        );
        let output = command
            .stdin(Stdio::null())
            .output()
            .map_err(|source| Error::Spawn {
                command: display.clone(),
                source,
            })?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let mut errors = Vec::new();
        let mut success = output.status.success();
        for line in stdout.lines().filter(|l| l.starts_with('{')) {
            let message: serde_json::Value =
                serde_json::from_str(line).map_err(|e| Error::CargoOutput {
                    command: display.clone(),
                    detail: e.to_string(),
                })?;
            match message["reason"].as_str() {
                Some("compiler-message") => {
                    if let Some(diagnostic) = diagnostic(&message["message"], &self.dir) {
                        errors.push(diagnostic);
                    }
                }
                Some("build-finished") => {
                    success = success && message["success"].as_bool().unwrap_or(false);
                }
                _ => {}
            }
        }
        Ok(CheckOutcome {
            errors,
            success,
            stderr_tail: crate::source::last_lines(&String::from_utf8_lossy(&output.stderr), 8),
        })
    }

    /// Builds the test binaries and runs each one, then the doc tests; results per test.
    pub(crate) fn test(&self, skip: &[String], doc: bool) -> Result<TestRun> {
        let mut command = self.command("test");
        command.args(["--no-run", "--message-format=json", "--bins", "--tests"]);
        if self.has_lib {
            command.arg("--lib");
        }
        let display = format!("cargo test --no-run in {}", self.dir.display());
        let output = command
            .stdin(Stdio::null())
            .output()
            .map_err(|source| Error::Spawn {
                command: display.clone(),
                source,
            })?;
        let mut run = TestRun::default();
        if !output.status.success() {
            run.build_error = Some(crate::source::last_lines(
                &String::from_utf8_lossy(&output.stderr),
                8,
            ));
            return Ok(run);
        }
        let mut binaries = Vec::new();
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
                continue;
            }
            if let (Some(executable), Some(name)) = (
                message["executable"].as_str(),
                message["target"]["name"].as_str(),
            ) {
                binaries.push((name.to_string(), PathBuf::from(executable)));
            }
        }
        for (name, executable) in binaries {
            let mut command = Command::new(&executable);
            command
                .current_dir(&self.dir)
                .env("CARGO_MANIFEST_DIR", &self.dir)
                .stdin(Stdio::null());
            for filter in skip {
                command.arg("--skip").arg(filter);
            }
            let started = std::time::Instant::now();
            let output = command.output().map_err(|source| Error::Spawn {
                command: executable.display().to_string(),
                source,
            })?;
            let elapsed = started.elapsed().as_secs_f64();
            if elapsed >= 10.0 {
                // Long test binaries are worth knowing about: `--skip-test` leaves them out.
                eprintln!("[tests] {name}: {elapsed:.0}s");
            }
            let stdout = String::from_utf8_lossy(&output.stdout);
            let found = parse_test_lines(&stdout, &name, &mut run.results);
            if !output.status.success() && found == 0 {
                run.results
                    .insert(format!("{name}::<binary>"), TestStatus::Failed);
            }
        }
        if doc && self.has_lib {
            let mut command = self.command("test");
            command.args(["--doc", "--no-fail-fast", "--"]);
            for filter in skip {
                command.arg("--skip").arg(filter);
            }
            let output = command
                .stdin(Stdio::null())
                .output()
                .map_err(|source| Error::Spawn {
                    command: format!("cargo test --doc in {}", self.dir.display()),
                    source,
                })?;
            parse_test_lines(
                &String::from_utf8_lossy(&output.stdout),
                "doc",
                &mut run.results,
            );
        }
        Ok(run)
    }
}

/// A test's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TestStatus {
    /// `ok`.
    Passed,
    /// `FAILED` (or the binary crashed before reporting).
    Failed,
    /// `ignored`.
    Ignored,
}

/// The results of one test run, keyed `binary::test name`.
#[derive(Debug, Default)]
pub(crate) struct TestRun {
    /// Every reported test.
    pub results: BTreeMap<String, TestStatus>,
    /// The tests did not build: cargo's last lines.
    pub build_error: Option<String>,
}

impl TestRun {
    /// How many tests have `status`.
    pub(crate) fn count(&self, status: TestStatus) -> usize {
        self.results.values().filter(|s| **s == status).count()
    }
}

/// Reads libtest's `test NAME ... ok` lines; returns how many it found.
fn parse_test_lines(
    stdout: &str,
    binary: &str,
    results: &mut BTreeMap<String, TestStatus>,
) -> usize {
    let mut found = 0;
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("test ") else {
            continue;
        };
        let Some((name, outcome)) = rest.rsplit_once(" ... ") else {
            continue;
        };
        let status = if outcome.starts_with("ok") {
            TestStatus::Passed
        } else if outcome.starts_with("FAILED") {
            TestStatus::Failed
        } else if outcome.starts_with("ignored") {
            TestStatus::Ignored
        } else {
            continue;
        };
        results.insert(format!("{binary}::{name}"), status);
        found += 1;
    }
    found
}

/// An error of the checked crate from a `compiler-message`; `None` for warnings, notes and
/// the closing "aborting due to N errors".
fn diagnostic(message: &serde_json::Value, root: &Path) -> Option<Diagnostic> {
    let level = message["level"].as_str()?;
    if !level.starts_with("error") {
        return None;
    }
    let text = message["message"].as_str()?.to_string();
    let spans = message["spans"].as_array();
    if spans.is_none_or(|s| s.is_empty()) && text.starts_with("aborting due to") {
        return None;
    }
    let mut locations = Vec::new();
    if let Some(spans) = spans {
        for span in spans.iter().filter(|s| s["is_primary"] == true) {
            let mut span = span;
            loop {
                if let (Some(file), Some(line)) =
                    (span["file_name"].as_str(), span["line_start"].as_u64())
                {
                    locations.push(Location {
                        file: relative(file, root),
                        line: usize::try_from(line).unwrap_or(usize::MAX),
                    });
                }
                match span.get("expansion") {
                    Some(expansion) if expansion.is_object() => span = &expansion["span"],
                    _ => break,
                }
            }
        }
    }
    Some(Diagnostic {
        code: message["code"]["code"].as_str().map(str::to_string),
        message: text,
        location: locations.first().cloned(),
        locations,
        rendered: message["rendered"].as_str().unwrap_or_default().to_string(),
    })
}

/// `file` relative to `root` with `/` separators, when it is inside it.
fn relative(file: &str, root: &Path) -> String {
    let path = Path::new(file);
    match path.strip_prefix(root) {
        Ok(rel) => rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/"),
        Err(_) => file.replace('\\', "/"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_lines_are_keyed_by_binary_and_name() {
        let mut results = BTreeMap::new();
        let found = parse_test_lines(
            "running 3 tests\ntest a::b ... ok\ntest c ... FAILED\ntest d ... ignored, slow\n\
             test result: FAILED. 1 passed; 1 failed; 1 ignored\n",
            "ops",
            &mut results,
        );
        assert_eq!(found, 3);
        assert_eq!(results["ops::a::b"], TestStatus::Passed);
        assert_eq!(results["ops::c"], TestStatus::Failed);
        assert_eq!(results["ops::d"], TestStatus::Ignored);
    }

    #[test]
    fn an_error_keeps_its_primary_span_and_the_macro_call_sites() {
        let message = serde_json::json!({
            "level": "error",
            "message": "`x` does not live long enough",
            "code": {"code": "E0597"},
            "rendered": "error[E0597]: ...",
            "spans": [
                {"is_primary": false, "file_name": "src/lib.rs", "line_start": 3},
                {"is_primary": true, "file_name": "/dep/macro.rs", "line_start": 9,
                 "expansion": {"span": {"file_name": "/copy/src/lib.rs", "line_start": 5}}}
            ]
        });
        let diagnostic = diagnostic(&message, Path::new("/copy")).expect("an error");
        assert_eq!(
            diagnostic.headline(),
            "error[E0597]: `x` does not live long enough"
        );
        let lines: Vec<_> = diagnostic
            .locations
            .iter()
            .map(|l| format!("{}:{}", l.file, l.line))
            .collect();
        assert_eq!(lines, ["/dep/macro.rs:9", "src/lib.rs:5"]);
        let warning = serde_json::json!({"level": "warning", "message": "unused", "spans": []});
        assert!(super::diagnostic(&warning, Path::new("/copy")).is_none());
    }
}
