//! The errors of `cargo vramguard check`: usage mistakes and I/O or cargo failures (exit code
//! 2). Functions that do not compile under the attribute are results, not errors (see
//! `report`).

use std::path::PathBuf;

/// Everything that stops the check before it can say which functions compile.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// A command-line mistake; the message names the argument and the accepted form.
    #[error("{0}\n\nRun `cargo vramguard --help` for the usage.")]
    Usage(String),
    /// A file or directory could not be read, written or copied.
    #[error("cannot {action} `{}`: {source}", path.display())]
    Io {
        /// What was being done (`read`, `copy`, …).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A command could not be started at all.
    #[error("cannot run `{command}`: {source}; is cargo on PATH (or set $CARGO)?")]
    Spawn {
        /// The command line.
        command: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Fetching a crate from crates.io failed.
    #[error(
        "cannot get `{name}@{version}` from the registry: {detail}\n\
         Check the name and the version on crates.io, and that cargo can reach the registry \
         (or that the crate is already in ~/.cargo/registry for --offline use)."
    )]
    Fetch {
        /// Crate name.
        name: String,
        /// Exact version.
        version: String,
        /// What cargo said.
        detail: String,
    },
    /// The crate's manifest cannot be used as is.
    #[error("{}: {detail}", path.display())]
    Manifest {
        /// The `Cargo.toml`.
        path: PathBuf,
        /// What is wrong and what to do.
        detail: String,
    },
    /// The crate does not build even without the attribute.
    #[error(
        "the crate does not build even without the attribute ({count} error(s); first: \
         {first}).\nMake `cargo check` pass on the crate itself first (features: \
         --crate-features), then run the check again."
    )]
    BrokenWithoutAttribute {
        /// Number of errors.
        count: usize,
        /// The first error, rendered as `file:line: error[CODE]: message`.
        first: String,
    },
    /// `apply` outside a git repository (like `cargo fix`).
    #[error(
        "no git repository holds `{}`, and `cargo vramguard apply` rewrites source files; \
         commit the crate to git first (then `git diff` shows what changed and `git checkout .` \
         undoes it), or pass `--allow-no-vcs`, or see the changes first with `--dry-run`",
        dir.display()
    )]
    NoVcs {
        /// The crate's directory.
        dir: PathBuf,
    },
    /// `apply` on a crate with uncommitted changes (like `cargo fix`).
    #[error(
        "the crate in `{}` has uncommitted changes, and `cargo vramguard apply` rewrites \
         source files; commit or stash them first (so `git checkout .` can undo the apply), or \
         pass `--allow-dirty`, or see the changes first with `--dry-run`:\n{files}",
        dir.display()
    )]
    Dirty {
        /// The crate's directory.
        dir: PathBuf,
        /// One line per file, with its state.
        files: String,
    },
    /// The check did not settle which functions compile annotated.
    #[error("{0}")]
    Unsettled(String),
    /// A cargo build (or test run) of the crate or of a copy failed.
    #[error("`{command}` failed:\n{detail}")]
    Build {
        /// The command line.
        command: String,
        /// What cargo said (its last lines).
        detail: String,
    },
    /// `measure` cannot measure the target as asked.
    #[error("{0}")]
    Measure(String),
    /// A cargo command produced output this tool cannot read.
    #[error("cannot read the output of `{command}`: {detail}")]
    CargoOutput {
        /// The command line.
        command: String,
        /// What went wrong.
        detail: String,
    },
}

impl Error {
    /// An I/O error on `path` while doing `action`.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    }
}

/// The result type of the tool.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;
