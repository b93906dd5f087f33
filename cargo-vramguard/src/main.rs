//! `cargo vramguard check`: where would `#[vramguard::inference]` (or `#[batch_scope]`) break
//! a crate? The entry point: parses the command line, runs the check, prints the report, and
//! exits 0 (everything compiles), 1 (some functions do not) or 2 (usage or I/O error).
//! `cargo vramguard apply` writes the check's result into the crate, `cargo vramguard measure`
//! compares a program's heap (or GPU) peak with and without the attribute; each has its own
//! module.
//!
//! - `cli`: the command line.
//! - `source`: where the crate's source comes from (a directory or crates.io).
//! - `workspace`: the work copy and its manifest.
//! - `annotate`: the functions, and the attribute written in by text insertion.
//! - `cargo`: cargo runs and their output.
//! - `check`: the rounds, the error → function mapping and the escape hatches.
//! - `report`: the human and JSON output.
//! - `lint`: `cargo vramguard lint`, the memory lints over a crate (its own module doc).
//! - `apply` (with `adopt_cli`, `dependency`, `track`, `vcs`): `cargo vramguard apply`.
//! - `measure` (with `measure_text`, `strip`, `targets`, `inject`): `cargo vramguard measure`.
//!
//! Decisions, for whoever changes this:
//! - The attribute goes after a function's existing attributes (so `#[cfg]` is applied before
//!   the macro runs), on the line of `pub`/`fn`: every line number stays that of the original,
//!   and an error maps to the innermost annotated function whose lines contain it (its primary
//!   span, else the macro call sites it was expanded from).
//! - Candidates: functions with a body (free, inherent and trait-impl methods, trait default
//!   methods, nested functions); not `const fn`, not functions inside macros, not those that
//!   already carry the attribute (or sit in an `#[inference] impl`); `#[test]` functions and
//!   `#[cfg(test)]` modules only with `--test`.
//! - A failing function tries, one round each: `keep(..)` naming every binding its borrow
//!   errors name (E0382/E0505/E0597/E0716), widened while new names appear; `#[keep]` on the
//!   `let` holding the error; `drops = false`; then no attribute. A vramguard lint error is a
//!   rejection by design: the attribute comes off at once. A hatch counts as verified only
//!   when the whole crate builds with it.
//! - Errors inside no annotated function: if the crate does not build plain either, that is
//!   the report (exit 2); otherwise the function responsible is found by bisection.
//! - Tests: each test binary runs directly (results keyed `binary::test`), then the doc tests;
//!   once annotated, once plain, compared per test.

mod adopt_cli;
mod annotate;
mod apply;
mod cargo;
mod check;
mod cli;
mod dependency;
mod error;
mod inject;
mod lint;
mod measure;
mod measure_text;
mod report;
mod source;
mod strip;
mod targets;
mod track;
mod vcs;
mod workspace;

use std::process::ExitCode;

fn main() -> ExitCode {
    // `apply` and `measure` parse their own arguments (`cargo` passes `vramguard` first).
    let args: Vec<String> = std::env::args().skip(1).collect();
    let after_cargo = usize::from(args.first().is_some_and(|a| a == "vramguard"));
    match args.get(after_cargo).map(String::as_str) {
        Some("apply") => return apply::main(args[after_cargo + 1..].to_vec()),
        Some("measure") => return measure::main(args[after_cargo + 1..].to_vec()),
        _ => {}
    }
    let command = match cli::parse(args) {
        Ok(command) => command,
        Err(error) => return fail(&error),
    };
    let options = match command {
        cli::Command::Help => {
            print!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        cli::Command::Check(options) => options,
        cli::Command::Lint(lint::options::LintCommand::Help) => {
            print!("{}", lint::options::USAGE);
            return ExitCode::SUCCESS;
        }
        cli::Command::Lint(lint::options::LintCommand::Run(options)) => {
            return match lint::run(&options) {
                Ok(report) => {
                    print!("{}", report.output);
                    eprint!("{}", report.notes);
                    ExitCode::from(report.exit_code())
                }
                Err(error) => fail(&error),
            };
        }
    };
    match check::run(&options) {
        Ok(outcome) => {
            if options.json {
                println!("{}", outcome.json());
            } else {
                print!("{}", outcome.human());
            }
            ExitCode::from(u8::try_from(outcome.exit_code()).unwrap_or(1))
        }
        Err(error) => fail(&error),
    }
}

/// Prints the error and returns exit code 2.
pub(crate) fn fail(error: &error::Error) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::from(2)
}
