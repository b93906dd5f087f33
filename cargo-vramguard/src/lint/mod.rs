//! `cargo vramguard lint`: the memory lints of `vramguard-lints` over every function of a
//! crate's targets, reported as rustc and cargo report warnings. Needs no build and no
//! vramguard dependency: it reads the manifest (`cargo metadata --no-deps`) and the source.
//!
//! - `options`: the command line;
//! - `package`: the packages, their targets and their tensor libraries;
//! - `modules`: the files of a target, through its `mod` declarations;
//! - `functions`: the functions of a file, each linted;
//! - `render`: the human, short and JSON formats.
//!
//! Decisions, for whoever changes this:
//! - A file is linted once, for the first target that reaches it (a `src/main.rs` that
//!   declares the library's modules again does not double its findings).
//! - The fix is spelled for the library of the file (its `use` items), else of the package.
//! - Output goes to stdout in every format (JSON lines for tools); the closing count and the
//!   files that could not be read go to stderr.

pub(crate) mod options;

mod functions;
mod modules;
mod package;
mod render;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use vramguard_lints::Library;

use crate::cli::CrateSource;
use crate::error::Result;
use functions::Found;
use options::{LintOptions, MessageFormat};
use render::{Child, Level, LintDiagnostic, Region};

/// What a lint run found, written out.
#[derive(Debug)]
pub(crate) struct LintReport {
    /// The diagnostics in the chosen format (stdout).
    pub output: String,
    /// Notes for stderr: unreadable files, and the closing count.
    pub notes: String,
    /// Findings (lint warnings and misspelled allows).
    pub findings: usize,
    /// `--deny` was given.
    pub deny: bool,
}

impl LintReport {
    /// 1 with `--deny` and a finding, else 0.
    pub(crate) fn exit_code(&self) -> u8 {
        u8::from(self.deny && self.findings > 0)
    }
}

/// Lints the crate (or workspace) `options` name.
pub(crate) fn run(options: &LintOptions) -> Result<LintReport> {
    let dir = match &options.source {
        CrateSource::Path(dir) => dir.clone(),
        source => {
            let work_dir = std::env::temp_dir().join("cargo-vramguard");
            crate::source::locate(source, &work_dir, options.offline)?.dir
        }
    };
    let workspace = package::read(&dir, options.all_targets)?;
    let level = if options.deny {
        Level::Error
    } else {
        Level::Warning
    };
    let mut output = String::new();
    let mut problems = Vec::new();
    let (mut findings, mut functions, mut files) = (0, 0, 0);
    for package in &workspace.packages {
        // Every file of every target first: the functions declared to return numbers are
        // read from all of them.
        let mut seen = HashSet::new();
        let by_target: Vec<Vec<modules::ModuleFile>> = package
            .targets
            .iter()
            .map(|target| {
                modules::module_files(
                    &target.src_path,
                    options.all_targets,
                    &mut seen,
                    &mut problems,
                )
            })
            .collect();
        let number_fns = Arc::new(vramguard_lints::number_functions(
            by_target.iter().flatten().map(|file| &file.ast),
        ));
        for (target, target_files) in package.targets.iter().zip(&by_target) {
            let mut in_target = 0;
            for file in target_files {
                let library =
                    functions::file_library(&file.ast, &package.libraries, package.default_library);
                let linted = functions::lint_file(
                    &file.ast,
                    functions::Settings {
                        library,
                        number_fns: &number_fns,
                        fns: options.fns.as_ref(),
                        all_targets: options.all_targets,
                    },
                    file.cfg_test,
                );
                files += 1;
                functions += linted.functions;
                let file_name = relative(&file.path, &workspace.root);
                let mut diagnostics: Vec<LintDiagnostic> = linted
                    .found
                    .into_iter()
                    .map(|found| diagnostic(found, &file_name, &file.text, library, level))
                    .collect();
                diagnostics.sort_by_key(|d| (d.region.line_start, d.region.column_start));
                in_target += diagnostics.len();
                for d in diagnostics {
                    match options.format {
                        MessageFormat::Human => output.push_str(&d.human()),
                        MessageFormat::Short => output.push_str(&d.short()),
                        MessageFormat::Json => {
                            let message = json!({
                                "reason": "compiler-message",
                                "package_id": package.id,
                                "manifest_path": package.manifest_path,
                                "target": target.json,
                                "message": d.json(),
                            });
                            output.push_str(&message.to_string());
                            output.push('\n');
                        }
                    }
                }
            }
            findings += in_target;
            if in_target > 0 && options.format != MessageFormat::Json {
                output.push_str(&target_summary(package, target, in_target, level));
            }
        }
    }
    if options.format == MessageFormat::Json {
        let finished = json!({
            "reason": "build-finished",
            "success": !(options.deny && findings > 0),
        });
        output.push_str(&finished.to_string());
        output.push('\n');
    }
    let mut notes: String = problems.iter().map(|p| format!("warning: {p}\n")).collect();
    let names: Vec<&str> = workspace.packages.iter().map(|p| p.name.as_str()).collect();
    notes.push_str(&format!(
        "vramguard lint: {findings} finding{} in {functions} functions ({files} files) of {}\n",
        if findings == 1 { "" } else { "s" },
        names.join(", ")
    ));
    Ok(LintReport {
        output,
        notes,
        findings,
        deny: options.deny,
    })
}

/// `path` relative to the workspace root, with `/` separators (as cargo writes file names);
/// absolute when outside it.
fn relative(path: &Path, root: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) => rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/"),
        Err(_) => path.display().to_string(),
    }
}

/// `warning: `name` (lib) generated 2 warnings`, as cargo closes a target.
fn target_summary(
    package: &package::Package,
    target: &package::LintTarget,
    count: usize,
    level: Level,
) -> String {
    let what = match target.kind.as_str() {
        "lib" | "rlib" | "dylib" | "cdylib" | "staticlib" | "proc-macro" => "lib".to_string(),
        kind => format!("{kind} \"{}\"", target.name),
    };
    let (level, noun) = match level {
        Level::Error => ("error", "error"),
        _ => ("warning", "warning"),
    };
    format!(
        "{level}: `{}` ({what}) generated {count} {noun}{}\n\n",
        package.name,
        if count == 1 { "" } else { "s" }
    )
}

/// A finding as a diagnostic.
fn diagnostic(
    found: Found,
    file_name: &str,
    text: &str,
    library: Library,
    level: Level,
) -> LintDiagnostic {
    match found {
        Found::Lint(finding) => {
            let name = finding.lint.name();
            LintDiagnostic {
                level,
                code: Some(format!("vramguard::{name}")),
                explanation: Some(finding.lint.explanation().to_string()),
                message: finding.sentence.clone(),
                region: Region::new(
                    file_name.to_string(),
                    text,
                    finding.extent.start(),
                    finding.extent.end(),
                ),
                label: Some(finding.lint.label().to_string()),
                children: vec![
                    Child {
                        level: Level::Note,
                        message: finding.lint.explanation().to_string(),
                    },
                    Child {
                        level: Level::Help,
                        message: finding.fix(library),
                    },
                    Child {
                        level: Level::Note,
                        message: format!(
                            "`#[vramguard::allow({name})]` on the function or the statement \
                             silences it"
                        ),
                    },
                ],
            }
        }
        Found::BadAllow {
            message,
            start,
            end,
        } => LintDiagnostic {
            level,
            code: None,
            explanation: None,
            message,
            region: Region::new(file_name.to_string(), text, start, end),
            label: None,
            children: Vec::new(),
        },
    }
}
