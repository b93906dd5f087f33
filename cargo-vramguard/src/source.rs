//! Where the crate's source comes from: a directory as given, or `NAME@VERSION` fetched by
//! cargo itself (a throwaway package that depends on `NAME = "=VERSION"`, then
//! `cargo metadata` names the unpacked source in cargo's registry cache). Owns no copying and
//! no editing; that is `workspace`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli::CrateSource;
use crate::error::{Error, Result};

/// The unpacked source of a crate, read-only: it is copied before anything changes.
#[derive(Debug)]
pub(crate) struct Located {
    /// The directory holding the crate's `Cargo.toml`.
    pub dir: PathBuf,
}

/// Finds the source directory of `source`, fetching it from the registry when needed.
pub(crate) fn locate(source: &CrateSource, work_dir: &Path, offline: bool) -> Result<Located> {
    match source {
        CrateSource::Path(dir) => Ok(Located { dir: dir.clone() }),
        CrateSource::Registry { name, version } => fetch(name, version, work_dir, offline),
    }
}

fn fetch(name: &str, version: &str, work_dir: &Path, offline: bool) -> Result<Located> {
    let project = work_dir.join(format!("fetch-{name}-{version}"));
    std::fs::create_dir_all(project.join("src")).map_err(Error::io("create", &project))?;
    let manifest = format!(
        "[package]\nname = \"vramguard-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         publish = false\n\n[dependencies]\n{name} = \"={version}\"\n\n[workspace]\n"
    );
    let manifest_path = project.join("Cargo.toml");
    std::fs::write(&manifest_path, manifest).map_err(Error::io("write", &manifest_path))?;
    let lib = project.join("src/lib.rs");
    std::fs::write(&lib, "").map_err(Error::io("write", &lib))?;
    let mut command = Command::new(crate::cargo::cargo_program());
    command
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(&manifest_path);
    if offline {
        command.arg("--offline");
    }
    let display = format!("cargo metadata --manifest-path {}", manifest_path.display());
    let output = command.output().map_err(|source| Error::Spawn {
        command: display.clone(),
        source,
    })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(Error::Fetch {
            name: name.to_string(),
            version: version.to_string(),
            detail: last_lines(&stderr, 6),
        });
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).map_err(|e| Error::CargoOutput {
            command: display.clone(),
            detail: e.to_string(),
        })?;
    let packages = metadata["packages"]
        .as_array()
        .ok_or_else(|| Error::CargoOutput {
            command: display.clone(),
            detail: "no `packages` array".to_string(),
        })?;
    let found = packages
        .iter()
        .find(|p| p["name"].as_str() == Some(name) && p["version"].as_str() == Some(version));
    let manifest = found
        .and_then(|p| p["manifest_path"].as_str())
        .ok_or_else(|| Error::Fetch {
            name: name.to_string(),
            version: version.to_string(),
            detail: "cargo resolved the dependency but listed no such package".to_string(),
        })?;
    let dir = Path::new(manifest)
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| Error::CargoOutput {
            command: display,
            detail: format!("manifest path `{manifest}` has no parent directory"),
        })?;
    Ok(Located { dir })
}

/// The last `n` non-empty lines of `text`, joined.
pub(crate) fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
