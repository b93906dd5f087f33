//! Whether `apply` may write into a crate: like `cargo fix`, only when git can give back what
//! was there (the crate's files committed), unless the user says otherwise. Owns the git
//! queries; what to write is `apply`'s.

use std::path::Path;
use std::process::Command;

use crate::error::{Error, Result};

/// What the user allowed on the command line.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Allowed {
    /// `--allow-dirty`: uncommitted changes are fine.
    pub dirty: bool,
    /// `--allow-no-vcs`: a crate outside any git repository is fine.
    pub no_vcs: bool,
}

/// Refuses a crate outside git, or with uncommitted changes under its directory, unless allowed.
pub(crate) fn ensure_clean(crate_dir: &Path, allowed: Allowed) -> Result<()> {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(crate_dir)
            .env("GIT_OPTIONAL_LOCKS", "0")
            .output()
    };
    let inside = git(&["rev-parse", "--is-inside-work-tree"])
        .is_ok_and(|o| o.status.success() && o.stdout.starts_with(b"true"));
    if !inside {
        if allowed.no_vcs || allowed.dirty {
            return Ok(());
        }
        return Err(Error::NoVcs {
            dir: crate_dir.to_path_buf(),
        });
    }
    if allowed.dirty {
        return Ok(());
    }
    let output =
        git(&["status", "--porcelain", "--untracked-files=all", "--", "."]).map_err(|source| {
            Error::Spawn {
                command: "git status --porcelain".to_string(),
                source,
            }
        })?;
    let files: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| l.len() > 3)
        .map(|l| {
            let state = if l.starts_with("??") {
                "untracked"
            } else if l.starts_with(' ') {
                "dirty"
            } else {
                "staged"
            };
            format!("  * {} ({state})", &l[3..])
        })
        .collect();
    if files.is_empty() {
        return Ok(());
    }
    Err(Error::Dirty {
        dir: crate_dir.to_path_buf(),
        files: files.join("\n"),
    })
}
