//! The work copy: the crate copied into the work directory, its manifest given a path
//! dependency on the vramguard facade and a `[workspace]` table of its own (so it never joins
//! a parent workspace). Owns the copy and `Cargo.toml`; the `.rs` files are `annotate`'s.

use std::path::{Path, PathBuf};

use toml_edit::{value, Array, DocumentMut, InlineTable, Item, Table};

use crate::error::{Error, Result};

/// A prepared work copy.
#[derive(Debug)]
pub(crate) struct WorkCopy {
    /// The copy's root directory.
    pub dir: PathBuf,
    /// The package name.
    pub name: String,
    /// The package version.
    pub version: String,
    /// Whether it has a library target.
    pub has_lib: bool,
}

/// Copies `src` into `work_dir/NAME-VERSION` (replacing an older copy) and edits its manifest.
pub(crate) fn prepare(
    src: &Path,
    work_dir: &Path,
    vramguard_path: &Path,
    features: &[String],
) -> Result<WorkCopy> {
    let manifest_path = src.join("Cargo.toml");
    let text =
        std::fs::read_to_string(&manifest_path).map_err(Error::io("read", &manifest_path))?;
    let mut doc: DocumentMut = text.parse().map_err(|e| Error::Manifest {
        path: manifest_path.clone(),
        detail: format!("not valid TOML: {e}"),
    })?;
    let package = doc
        .get("package")
        .and_then(Item::as_table_like)
        .ok_or_else(|| Error::Manifest {
            path: manifest_path.clone(),
            detail: "no [package] table: give the directory of one package, not a virtual \
                     workspace"
                .to_string(),
        })?;
    let name = package
        .get("name")
        .and_then(Item::as_str)
        .ok_or_else(|| Error::Manifest {
            path: manifest_path.clone(),
            detail: "[package] has no `name`".to_string(),
        })?
        .to_string();
    let version = match package.get("version") {
        Some(item) if item.as_str().is_some() => item.as_str().unwrap_or_default().to_string(),
        None => "0.0.0".to_string(),
        Some(_) => {
            return Err(inherits(&manifest_path, "package.version"));
        }
    };
    if let Some(key) = inherited_key(&doc) {
        return Err(inherits(&manifest_path, &key));
    }
    let has_lib = doc.contains_key("lib") || src.join("src/lib.rs").is_file();
    make_paths_absolute(&mut doc, src);
    add_facade(&mut doc, vramguard_path, features);
    if doc.get("workspace").is_none() {
        doc.insert("workspace", Item::Table(Table::new()));
    }

    let dir = work_dir.join(format!("{name}-{version}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(Error::io("remove the old copy", &dir))?;
    }
    copy_dir(src, &dir, true)?;
    let out = dir.join("Cargo.toml");
    std::fs::write(&out, doc.to_string()).map_err(Error::io("write", &out))?;
    Ok(WorkCopy {
        dir,
        name,
        version,
        has_lib,
    })
}

fn inherits(path: &Path, key: &str) -> Error {
    Error::Manifest {
        path: path.to_path_buf(),
        detail: format!(
            "`{key}` is inherited from the crate's workspace (`workspace = true`), and the check \
             copies the crate alone. Package it first (`cargo package --no-verify \
             --allow-dirty -p NAME`) and check `target/package/NAME-VERSION` instead"
        ),
    }
}

/// The first `workspace = true` key, as `table.key`.
fn inherited_key(doc: &DocumentMut) -> Option<String> {
    fn walk(prefix: &str, table: &dyn toml_edit::TableLike) -> Option<String> {
        for (key, item) in table.iter() {
            let here = if prefix.is_empty() {
                key.to_string()
            } else {
                format!("{prefix}.{key}")
            };
            if key == "workspace" && item.as_bool() == Some(true) {
                return Some(prefix.to_string());
            }
            if let Some(inner) = item.as_table_like() {
                if let Some(found) = walk(&here, inner) {
                    return Some(found);
                }
            }
        }
        None
    }
    let mut tables = vec![
        "package",
        "dependencies",
        "dev-dependencies",
        "build-dependencies",
        "lints",
    ];
    tables.push("target");
    tables.iter().find_map(|t| {
        let item = doc.get(t)?;
        if t == &"lints" && item.get("workspace").and_then(Item::as_bool) == Some(true) {
            return Some("lints".to_string());
        }
        walk(t, item.as_table_like()?)
    })
}

/// Relative `path = ".."` dependencies point at the original location after the copy.
fn make_paths_absolute(doc: &mut DocumentMut, src: &Path) {
    fn fix(deps: &mut dyn toml_edit::TableLike, src: &Path) {
        for (_, dep) in deps.iter_mut() {
            let Some(dep) = dep.as_table_like_mut() else {
                continue;
            };
            let Some(path) = dep.get("path").and_then(Item::as_str) else {
                continue;
            };
            if Path::new(path).is_relative() {
                let absolute = src.join(path).display().to_string();
                dep.insert("path", value(absolute));
            }
        }
    }
    const KINDS: [&str; 3] = ["dependencies", "dev-dependencies", "build-dependencies"];
    for kind in KINDS {
        if let Some(deps) = doc.get_mut(kind).and_then(Item::as_table_like_mut) {
            fix(deps, src);
        }
    }
    if let Some(targets) = doc.get_mut("target").and_then(Item::as_table_like_mut) {
        for (_, target) in targets.iter_mut() {
            let Some(target) = target.as_table_like_mut() else {
                continue;
            };
            for kind in KINDS {
                if let Some(deps) = target.get_mut(kind).and_then(Item::as_table_like_mut) {
                    fix(deps, src);
                }
            }
        }
    }
}

/// `vramguard = { path = "…", features = [..] }` under `[dependencies]` (replacing any).
fn add_facade(doc: &mut DocumentMut, vramguard_path: &Path, features: &[String]) {
    let mut dep = InlineTable::new();
    dep.insert("path", vramguard_path.display().to_string().into());
    if !features.is_empty() {
        let mut list = Array::new();
        for feature in features {
            list.push(feature.as_str());
        }
        dep.insert("features", list.into());
    }
    if !doc.contains_key("dependencies") {
        doc.insert("dependencies", Item::Table(Table::new()));
    }
    if let Some(deps) = doc
        .get_mut("dependencies")
        .and_then(Item::as_table_like_mut)
    {
        deps.insert("vramguard", Item::Value(dep.into()));
    }
}

/// Copies a directory tree; at the top level, `target/` and `.git/` are left out.
fn copy_dir(from: &Path, to: &Path, top: bool) -> Result<()> {
    std::fs::create_dir_all(to).map_err(Error::io("create", to))?;
    for entry in std::fs::read_dir(from).map_err(Error::io("read", from))? {
        let entry = entry.map_err(Error::io("read", from))?;
        let name = entry.file_name();
        if top && (name == "target" || name == ".git") {
            continue;
        }
        let source = entry.path();
        let dest = to.join(&name);
        let kind = entry.file_type().map_err(Error::io("read", &source))?;
        if kind.is_dir() {
            copy_dir(&source, &dest, false)?;
        } else if kind.is_file() || source.is_file() {
            std::fs::copy(&source, &dest).map_err(Error::io("copy", &source))?;
            // Registry sources are read-only; the copy must be writable.
            let mut permissions = std::fs::metadata(&dest)
                .map_err(Error::io("read", &dest))?
                .permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            permissions.set_readonly(false);
            std::fs::set_permissions(&dest, permissions).map_err(Error::io("write", &dest))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facade_dependency_and_workspace_table_are_added_and_relative_paths_fixed() {
        let mut doc: DocumentMut =
            "[package]\nname = \"x\"\n\n[dependencies.helper]\npath = \"../helper\"\n"
                .parse()
                .expect("test manifest parses");
        make_paths_absolute(&mut doc, Path::new("/src/x"));
        add_facade(&mut doc, Path::new("/vg"), &["candle".to_string()]);
        let text = doc.to_string();
        assert!(text.contains("path = \"/src/x/../helper\""), "{text}");
        assert!(
            text.contains("vramguard = { path = \"/vg\", features = [\"candle\"] }"),
            "{text}"
        );
    }

    #[test]
    fn workspace_inheritance_is_reported_with_its_key() {
        let doc: DocumentMut =
            "[package]\nname = \"x\"\n[dependencies]\nserde = { workspace = true }\n"
                .parse()
                .expect("test manifest parses");
        assert_eq!(inherited_key(&doc).as_deref(), Some("dependencies.serde"));
    }
}
