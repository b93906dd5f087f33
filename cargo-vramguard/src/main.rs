//! `cargo vramguard check`: where would `#[vramguard::inference]` (or `#[batch_scope]`) break
//! a crate? The entry point: parses the command line, runs the check, prints the report, and
//! exits 0 (everything compiles), 1 (some functions do not) or 2 (usage or I/O error).
//!
//! - `cli`: the command line.
//! - `source`: where the crate's source comes from (a directory or crates.io).
//! - `workspace`: the work copy and its manifest.
//! - `annotate`: the functions, and the attribute written in by text insertion.
//! - `cargo`: cargo runs and their output.
//! - `check`: the rounds, the error → function mapping and the escape hatches.
//! - `report`: the human and JSON output.

mod annotate;
mod cargo;
mod check;
mod cli;
mod error;
mod report;
mod source;
mod workspace;

use std::process::ExitCode;

fn main() -> ExitCode {
    let command = match cli::parse(std::env::args().skip(1)) {
        Ok(command) => command,
        Err(error) => return fail(&error),
    };
    let options = match command {
        cli::Command::Help => {
            print!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        cli::Command::Check(options) => options,
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

fn fail(error: &error::Error) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::from(2)
}
