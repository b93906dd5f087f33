//! The packages to lint and their targets, from `cargo metadata --no-deps` (which reads
//! manifests only: no build, no network), and the tensor libraries they depend on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use vramguard_lints::Library;

use crate::error::{Error, Result};

/// One package of the workspace.
#[derive(Debug, Clone)]
pub(crate) struct Package {
    /// Its name.
    pub name: String,
    /// Cargo's package id, as cargo's JSON messages carry it.
    pub id: String,
    /// Its `Cargo.toml`.
    pub manifest_path: PathBuf,
    /// Its targets, in cargo's order.
    pub targets: Vec<LintTarget>,
    /// The tensor library of each crate name the code may use (a dependency as the code names
    /// it, its rename applied, and the package itself as `crate`).
    pub libraries: BTreeMap<String, Library>,
    /// The library of the package itself (`candle-nn` is candle's), else the first of its
    /// dependencies' in [`Library::KNOWN`] order, else `Unknown`.
    pub default_library: Library,
}

/// One target of a package.
#[derive(Debug, Clone)]
pub(crate) struct LintTarget {
    /// Its name.
    pub name: String,
    /// `lib`, `bin`, `test`, `example`, `bench` (cargo's first kind).
    pub kind: String,
    /// Its root file.
    pub src_path: PathBuf,
    /// Cargo's target object, as cargo's JSON messages carry it.
    pub json: Value,
}

/// What `cargo metadata` says about the packages to lint.
#[derive(Debug)]
pub(crate) struct Workspace {
    /// The workspace root: file names in messages are relative to it, as cargo writes them.
    pub root: PathBuf,
    /// The packages to lint: the one at the given directory, or every member of a virtual
    /// workspace.
    pub packages: Vec<Package>,
}

/// Reads the packages of the manifest in `dir`.
pub(crate) fn read(dir: &Path, all_targets: bool) -> Result<Workspace> {
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(Error::Usage(format!(
            "`{}` has no Cargo.toml; give the directory of a package or a workspace",
            dir.display()
        )));
    }
    let mut command = Command::new(crate::cargo::cargo_program());
    command
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .arg("--manifest-path")
        .arg(&manifest);
    let display = format!(
        "cargo metadata --no-deps --manifest-path {}",
        manifest.display()
    );
    let output = command.output().map_err(|source| Error::Spawn {
        command: display.clone(),
        source,
    })?;
    if !output.status.success() {
        return Err(Error::Manifest {
            path: manifest,
            detail: crate::source::last_lines(&String::from_utf8_lossy(&output.stderr), 6),
        });
    }
    let metadata: Value =
        serde_json::from_slice(&output.stdout).map_err(|e| Error::CargoOutput {
            command: display.clone(),
            detail: e.to_string(),
        })?;
    let bad = |what: &str| Error::CargoOutput {
        command: display.clone(),
        detail: format!("no {what}"),
    };
    let root = PathBuf::from(
        metadata["workspace_root"]
            .as_str()
            .ok_or_else(|| bad("`workspace_root`"))?,
    );
    let members: Vec<&str> = metadata["workspace_members"]
        .as_array()
        .ok_or_else(|| bad("`workspace_members`"))?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let all = metadata["packages"]
        .as_array()
        .ok_or_else(|| bad("`packages`"))?;
    let wanted = same_file(&manifest);
    let at_dir: Vec<&Value> = all
        .iter()
        .filter(|p| p["manifest_path"].as_str().map(same_file) == Some(wanted.clone()))
        .collect();
    // A virtual manifest has no package of its own: every member is linted.
    let chosen: Vec<&Value> = if at_dir.is_empty() {
        all.iter()
            .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(&id)))
            .collect()
    } else {
        at_dir
    };
    let packages = chosen
        .into_iter()
        .map(|p| package(p, all_targets).ok_or_else(|| bad("package fields")))
        .collect::<Result<Vec<_>>>()?;
    Ok(Workspace { root, packages })
}

/// A path made comparable (canonical when it exists).
fn same_file(path: impl AsRef<Path>) -> PathBuf {
    let path = path.as_ref();
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// Target kinds linted by default (as `cargo check` and `cargo clippy` check them), and with
/// `--all-targets`. Build scripts are never linted.
fn linted_kind(kind: &str, all_targets: bool) -> bool {
    match kind {
        "lib" | "rlib" | "dylib" | "cdylib" | "staticlib" | "proc-macro" | "bin" => true,
        "test" | "example" | "bench" => all_targets,
        _ => false,
    }
}

fn package(value: &Value, all_targets: bool) -> Option<Package> {
    let name = value["name"].as_str()?.to_string();
    let targets = value["targets"]
        .as_array()?
        .iter()
        .filter_map(|t| {
            let kind = t["kind"].as_array()?.first()?.as_str()?.to_string();
            linted_kind(&kind, all_targets).then_some(())?;
            let json = serde_json::json!({
                "kind": t["kind"],
                "crate_types": t["crate_types"],
                "name": t["name"],
                "src_path": t["src_path"],
                "edition": t["edition"],
                "doc": t["doc"],
                "doctest": t["doctest"],
                "test": t["test"],
            });
            Some(LintTarget {
                name: t["name"].as_str()?.to_string(),
                kind,
                src_path: PathBuf::from(t["src_path"].as_str()?),
                json,
            })
        })
        .collect();
    let own = Library::of_package(&name);
    let mut libraries = BTreeMap::new();
    if let Some(own) = own {
        libraries.insert("crate".to_string(), own);
        libraries.insert(name.replace('-', "_"), own);
    }
    for dep in value["dependencies"].as_array()? {
        let Some(package) = dep["name"].as_str() else {
            continue;
        };
        let Some(library) = Library::of_package(package) else {
            continue;
        };
        let code_name = dep["rename"].as_str().unwrap_or(package).replace('-', "_");
        libraries.insert(code_name, library);
    }
    let default_library = own
        .or_else(|| {
            Library::KNOWN
                .into_iter()
                .find(|known| libraries.values().any(|l| l == known))
        })
        .unwrap_or(Library::Unknown);
    Some(Package {
        name,
        id: value["id"].as_str()?.to_string(),
        manifest_path: PathBuf::from(value["manifest_path"].as_str()?),
        targets,
        libraries,
        default_library,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_map_code_names_to_libraries() {
        let value = serde_json::json!({
            "name": "my-model",
            "id": "path+file:///x#my-model@0.1.0",
            "manifest_path": "/x/Cargo.toml",
            "targets": [
                {"kind": ["lib"], "crate_types": ["lib"], "name": "my_model",
                 "src_path": "/x/src/lib.rs", "edition": "2021", "doc": true, "doctest": true,
                 "test": true},
                {"kind": ["test"], "crate_types": ["bin"], "name": "t",
                 "src_path": "/x/tests/t.rs", "edition": "2021", "doc": false,
                 "doctest": false, "test": true},
                {"kind": ["custom-build"], "crate_types": ["bin"], "name": "build-script-build",
                 "src_path": "/x/build.rs", "edition": "2021", "doc": false,
                 "doctest": false, "test": false}
            ],
            "dependencies": [
                {"name": "candle-core", "rename": "candle"},
                {"name": "ndarray", "rename": null},
                {"name": "serde", "rename": null}
            ]
        });
        let package = package(&value, false).expect("a package");
        assert_eq!(package.targets.len(), 1, "the lib only, no build script");
        assert_eq!(package.libraries.get("candle"), Some(&Library::Candle));
        assert_eq!(package.libraries.get("ndarray"), Some(&Library::Ndarray));
        assert_eq!(
            package.default_library,
            Library::Candle,
            "candle before ndarray"
        );
        let with_tests = super::package(&value, true).expect("a package");
        assert_eq!(with_tests.targets.len(), 2);
    }
}
