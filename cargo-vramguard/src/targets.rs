//! A package's targets (binaries, examples, tests) as cargo sees them: `cargo metadata
//! --no-deps`, so `[[bin]]` paths, `src/bin/*.rs` and auto-discovered examples all count. Owns
//! that query; what is done with a target is the caller's.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// The kind of a target that runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// `--bin`.
    Bin,
    /// `--example`.
    Example,
    /// `--test`.
    Test,
}

impl Kind {
    /// The cargo flag and the metadata kind: `bin`, `example`, `test`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Bin => "bin",
            Kind::Example => "example",
            Kind::Test => "test",
        }
    }
}

/// One target of the package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// Its kind.
    pub kind: Kind,
    /// Its name.
    pub name: String,
    /// Its root source file.
    pub src_path: PathBuf,
}

/// The package at `dir`: its name, version, and every bin, example and test target.
pub(crate) fn targets(dir: &Path, offline: bool) -> Result<(String, String, Vec<Target>)> {
    let mut command = Command::new(crate::cargo::cargo_program());
    command
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TERM_COLOR", "never");
    if offline {
        command.arg("--offline");
    }
    let display = format!("cargo metadata --no-deps in {}", dir.display());
    let output = command.output().map_err(|source| Error::Spawn {
        command: display.clone(),
        source,
    })?;
    if !output.status.success() {
        return Err(Error::Build {
            command: display,
            detail: crate::source::last_lines(&String::from_utf8_lossy(&output.stderr), 8),
        });
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).map_err(|e| Error::CargoOutput {
            command: display.clone(),
            detail: e.to_string(),
        })?;
    let canonical = |path: &Path| std::fs::canonicalize(path).unwrap_or_else(|_| path.into());
    let manifest = canonical(&dir.join("Cargo.toml"));
    let package = metadata["packages"]
        .as_array()
        .and_then(|packages| {
            packages.iter().find(|p| {
                p["manifest_path"]
                    .as_str()
                    .is_some_and(|m| canonical(Path::new(m)) == manifest)
            })
        })
        .ok_or_else(|| Error::CargoOutput {
            command: display.clone(),
            detail: format!("no package with the manifest {}", manifest.display()),
        })?;
    let mut found = Vec::new();
    for target in package["targets"].as_array().into_iter().flatten() {
        let kinds = target["kind"].as_array().into_iter().flatten();
        let kind = kinds.filter_map(|k| k.as_str()).find_map(|k| match k {
            "bin" => Some(Kind::Bin),
            "example" => Some(Kind::Example),
            "test" => Some(Kind::Test),
            _ => None,
        });
        if let (Some(kind), Some(name), Some(src)) =
            (kind, target["name"].as_str(), target["src_path"].as_str())
        {
            found.push(Target {
                kind,
                name: name.to_string(),
                src_path: PathBuf::from(src),
            });
        }
    }
    let text = |key: &str| package[key].as_str().unwrap_or_default().to_string();
    Ok((text("name"), text("version"), found))
}
