//! What the check found, and its two renderings: the human report (stdout) and one JSON
//! object for tools (`--json`). Owns the output format and the exit code; finds nothing.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use crate::cargo::{Diagnostic, TestStatus};
use crate::cli::Attr;

/// A function that does not compile with the bare attribute.
#[derive(Debug, Serialize)]
pub(crate) struct Failure {
    /// `Type::name` or `name`.
    pub function: String,
    /// Its file, relative to the crate root.
    pub file: String,
    /// Its line (where the attribute goes).
    pub line: usize,
    /// The first error under the bare attribute.
    pub error: Option<Diagnostic>,
    /// The escape hatch the error calls for.
    pub suggested: String,
    /// The hatch that compiled (or what to do when none did).
    pub fix: String,
    /// Whether `fix` was seen to compile, with every other function annotated.
    pub verified: bool,
}

/// One test whose result differs between the plain and the annotated crate.
#[derive(Debug, Serialize)]
pub(crate) struct TestDifference {
    /// `binary::test name`.
    pub test: String,
    /// Without the attribute (`None`: not run).
    pub plain: Option<TestStatus>,
    /// With it.
    pub annotated: Option<TestStatus>,
}

/// The crate's tests, annotated against plain.
#[derive(Debug, Serialize)]
pub(crate) struct TestComparison {
    /// Passed with the attribute.
    pub passed: usize,
    /// Failed with the attribute.
    pub failed: usize,
    /// Ignored.
    pub ignored: usize,
    /// Passed without the attribute.
    pub plain_passed: usize,
    /// Failed without the attribute.
    pub plain_failed: usize,
    /// The tests did not build.
    pub build_error: Option<String>,
    /// Tests whose result differs.
    pub differences: Vec<TestDifference>,
}

/// Everything the check found.
#[derive(Debug, Serialize)]
pub(crate) struct Outcome {
    /// Package name.
    #[serde(rename = "crate")]
    pub krate: String,
    /// Package version.
    pub version: String,
    /// The attribute tried.
    pub attr: Attr,
    /// Facade features in the copy: the crate's own, then `--features`.
    pub features: Vec<String>,
    /// Whether the facade's default features are on (off when the crate turns them off).
    pub default_features: bool,
    /// Tensor libraries the crate uses whose vramguard feature is off, one line each.
    pub warnings: Vec<String>,
    /// Functions annotated at first.
    pub total: usize,
    /// Functions that compile with the bare attribute.
    pub compiled: usize,
    /// `cargo check` rounds run.
    pub rounds: usize,
    /// Whether the crate built in the last round.
    pub converged: bool,
    /// The functions that do not compile with the bare attribute.
    pub failures: Vec<Failure>,
    /// Errors inside no annotated function (the crate builds without the attribute).
    pub unmapped: Vec<Diagnostic>,
    /// Files syn could not parse.
    pub skipped_files: Vec<String>,
    /// With `--test`: the tests, annotated against plain.
    pub tests: Option<TestComparison>,
    /// Where the annotated copy is.
    pub copy_dir: PathBuf,
}

impl Outcome {
    /// 0 when everything compiles (and tests agree), else 1.
    pub(crate) fn exit_code(&self) -> i32 {
        let tests_agree = self
            .tests
            .as_ref()
            .is_none_or(|t| t.differences.is_empty() && t.build_error.is_none());
        if self.converged && self.compiled == self.total && self.unmapped.is_empty() && tests_agree
        {
            0
        } else {
            1
        }
    }

    /// The JSON object.
    pub(crate) fn json(&self) -> String {
        serde_json::to_string_pretty(self)
            .unwrap_or_else(|e| format!("{{\"error\":\"cannot serialize the outcome: {e}\"}}"))
    }

    /// The human report.
    pub(crate) fn human(&self) -> String {
        let mut out = String::new();
        let mut features = if self.features.is_empty() {
            String::new()
        } else {
            format!(", features {}", self.features.join(","))
        };
        if !self.default_features {
            features.push_str(", no default features");
        }
        let _ = writeln!(
            out,
            "{} {} (#[{}]{features}): {}/{} functions compile",
            self.krate,
            self.version,
            self.attr.name(),
            self.compiled,
            self.total
        );
        if let Some(tests) = &self.tests {
            let _ = writeln!(
                out,
                "tests: {} passed, {} failed, {} ignored (plain: {} passed, {} failed); {}",
                tests.passed,
                tests.failed,
                tests.ignored,
                tests.plain_passed,
                tests.plain_failed,
                if tests.differences.is_empty() {
                    "same results".to_string()
                } else {
                    format!("{} differ", tests.differences.len())
                }
            );
            if let Some(error) = &tests.build_error {
                let _ = writeln!(out, "  the tests did not build:\n{error}");
            }
            for difference in &tests.differences {
                let _ = writeln!(
                    out,
                    "  {}: plain {}, annotated {}",
                    difference.test,
                    status(difference.plain),
                    status(difference.annotated)
                );
            }
        }
        if !self.converged {
            let _ = writeln!(
                out,
                "stopped after {} rounds with errors left (--max-rounds); the failures below \
                 are those found so far",
                self.rounds
            );
        }
        if !self.failures.is_empty() {
            let _ = writeln!(out, "\nfailures:");
        }
        for failure in &self.failures {
            let _ = writeln!(
                out,
                "  {}:{}  {}",
                failure.file, failure.line, failure.function
            );
            if let Some(error) = &failure.error {
                let at = error
                    .location
                    .as_ref()
                    .map(|l| format!(" ({}:{})", l.file, l.line))
                    .unwrap_or_default();
                let _ = writeln!(out, "      {}{at}", shorten(&error.headline(), 160));
            }
            let _ = writeln!(out, "      escape hatch: {}", failure.suggested);
            if failure.fix != failure.suggested || !failure.verified {
                let _ = writeln!(
                    out,
                    "      what compiles: {}{}",
                    failure.fix,
                    if failure.verified {
                        ""
                    } else {
                        " (not verified)"
                    }
                );
            } else {
                let _ = writeln!(out, "      (verified: the crate builds with it)");
            }
        }
        if !self.unmapped.is_empty() {
            let _ = writeln!(
                out,
                "\nerrors outside every annotated function (the crate builds without the \
                 attribute, so an annotated function changes something its callers see):"
            );
            for error in &self.unmapped {
                let _ = writeln!(out, "{}", error.rendered.trim_end());
            }
        }
        for warning in &self.warnings {
            let _ = writeln!(out, "{warning}");
        }
        for skipped in &self.skipped_files {
            let _ = writeln!(out, "note: {skipped}");
        }
        let _ = writeln!(out, "annotated copy: {}", self.copy_dir.display());
        out
    }
}

/// `text` cut to `max` characters (the JSON output keeps it whole).
/// `text` cut to `max` characters, with `…` when cut.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

fn status(status: Option<TestStatus>) -> &'static str {
    match status {
        Some(TestStatus::Passed) => "passed",
        Some(TestStatus::Failed) => "failed",
        Some(TestStatus::Ignored) => "ignored",
        None => "not run",
    }
}
