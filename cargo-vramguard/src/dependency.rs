//! The crate's own `Cargo.toml` as `apply` leaves it: a `vramguard` dependency in
//! `[dependencies]` with the feature of every tensor library the crate uses (candle, burn,
//! ndarray, tch), added or completed in place by toml_edit, so every other byte keeps its
//! formatting. Owns that edit; the work copy's manifest is `workspace`'s.

use std::path::Path;

use toml_edit::{Array, DocumentMut, InlineTable, Item, Table, Value};

use crate::workspace::{facade_version, feature_for, package_of, visit_dependency_tables};

/// The manifest after the edit, and what changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edit {
    /// The new text (the old one when nothing changed).
    pub text: String,
    /// The features of the tensor libraries the crate uses, e.g. `["candle"]`.
    pub features: Vec<String>,
    /// One line per change, for the summary.
    pub changes: Vec<String>,
}

/// Adds or completes the `vramguard` dependency of `text`. `path`: also a `path = ".."` key
/// (when the user names a vramguard checkout); without it, the version of this tool.
pub(crate) fn ensure_vramguard(text: &str, path: Option<&Path>) -> Result<Edit, String> {
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e| format!("Cargo.toml is not valid TOML: {e}"))?;
    let features = library_features(&mut doc);
    let mut changes = Vec::new();
    let mut declared = false;
    // Only the tables the library code builds with: `[dependencies]` and its target forms.
    visit_dependency_tables(&mut doc, |table, deps| {
        if !table.ends_with("dependencies") || table.ends_with("-dependencies") {
            return;
        }
        let names: Vec<String> = deps
            .iter()
            .filter(|(name, dep)| package_of(name, dep) == "vramguard")
            .map(|(name, _)| name.to_string())
            .collect();
        for name in names {
            declared = true;
            let Some(item) = deps.get_mut(&name) else {
                continue;
            };
            let added = add_features(item, &features);
            if !added.is_empty() {
                changes.push(format!(
                    "Cargo.toml: [{table}] {name}: feature{} {} added",
                    if added.len() == 1 { "" } else { "s" },
                    added
                        .iter()
                        .map(|f| format!("`{f}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    });
    if !declared {
        let entry = new_entry(&features, path);
        changes.push(format!(
            "Cargo.toml: `vramguard = {entry}` added to [dependencies]"
        ));
        if !doc.contains_key("dependencies") {
            doc.insert("dependencies", Item::Table(Table::new()));
        }
        if let Some(deps) = doc
            .get_mut("dependencies")
            .and_then(Item::as_table_like_mut)
        {
            deps.insert("vramguard", Item::Value(entry));
        }
    }
    Ok(Edit {
        text: if changes.is_empty() {
            text.to_string()
        } else {
            doc.to_string()
        },
        features,
        changes,
    })
}

/// The vramguard features of the tensor libraries in `[dependencies]` (and its target forms).
fn library_features(doc: &mut DocumentMut) -> Vec<String> {
    let mut features: Vec<String> = Vec::new();
    visit_dependency_tables(doc, |table, deps| {
        if !table.ends_with("dependencies") || table.ends_with("-dependencies") {
            return;
        }
        for (name, dep) in deps.iter() {
            let version = dep
                .as_str()
                .or_else(|| dep.as_table_like()?.get("version")?.as_str());
            if let Some(feature) = feature_for(package_of(name, dep), version) {
                if !features.iter().any(|f| f == feature) {
                    features.push(feature.to_string());
                }
            }
        }
    });
    features
}

/// `{ version = "0.1", default-features = false, features = [..] }` for a crate that uses
/// another library's tensors (it needs no vramguard CUDA backend of its own), else `"0.1"`.
fn new_entry(features: &[String], path: Option<&Path>) -> Value {
    if features.is_empty() && path.is_none() {
        return Value::from(facade_version());
    }
    let mut entry = InlineTable::new();
    entry.insert("version", facade_version().into());
    if let Some(path) = path {
        entry.insert("path", path.display().to_string().into());
    }
    if !features.is_empty() {
        entry.insert("default-features", false.into());
        let mut list = Array::new();
        for feature in features {
            list.push(feature.as_str());
        }
        entry.insert("features", list.into());
    }
    entry.fmt();
    Value::InlineTable(entry)
}

/// Adds the missing `features` to one dependency entry (a version string becomes an inline
/// table); returns those added. `candle-cuda` counts as `candle`.
fn add_features(item: &mut Item, features: &[String]) -> Vec<String> {
    let has = |list: &Array, feature: &str| {
        list.iter().any(|f| {
            f.as_str()
                .is_some_and(|f| f == feature || (f == "candle-cuda" && feature == "candle"))
        })
    };
    let current = item
        .as_table_like()
        .and_then(|t| t.get("features"))
        .and_then(Item::as_array)
        .cloned()
        .unwrap_or_default();
    let missing: Vec<String> = features
        .iter()
        .filter(|f| !has(&current, f))
        .cloned()
        .collect();
    if missing.is_empty() {
        return missing;
    }
    if let Some(version) = item.as_str().map(str::to_string) {
        let mut entry = InlineTable::new();
        entry.insert("version", version.into());
        entry.fmt();
        let decor = item.as_value().map(|v| v.decor().clone());
        let mut value = Value::InlineTable(entry);
        if let Some(decor) = decor {
            *value.decor_mut() = decor;
        }
        *item = Item::Value(value);
    }
    let Some(table) = item.as_table_like_mut() else {
        return Vec::new();
    };
    match table.get_mut("features").and_then(Item::as_array_mut) {
        Some(list) => {
            for feature in &missing {
                list.push(feature.as_str());
            }
        }
        None => {
            let mut list = Array::new();
            for feature in &missing {
                list.push(feature.as_str());
            }
            table.insert("features", toml_edit::value(list));
        }
    }
    if let Some(inline) = item.as_inline_table_mut() {
        inline.fmt();
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANDLE: &str = "[package]\nname = \"m\"  # the model\nversion = \"0.1.0\"\n\n[dependencies]\ncandle-core = { version = \"0.11\", default-features = false }   # CPU\n\n[dev-dependencies]\ntch = \"0.26\"\n";

    #[test]
    fn a_missing_dependency_is_added_with_the_library_feature_and_nothing_else_moves() {
        let edit = ensure_vramguard(CANDLE, None).expect("edits");
        assert_eq!(edit.features, ["candle"], "dev-dependencies do not count");
        let line = format!(
            "vramguard = {{ version = \"{}\", default-features = false, features = [\"candle\"] }}",
            facade_version()
        );
        assert_eq!(
            edit.text,
            CANDLE.replace("# CPU\n", &format!("# CPU\n{line}\n")),
            "appended to [dependencies]"
        );
        let again = ensure_vramguard(&edit.text, None).expect("edits");
        assert!(again.changes.is_empty(), "{:?}", again.changes);
        assert_eq!(again.text, edit.text);
    }

    #[test]
    fn an_existing_dependency_gets_the_feature_in_place() {
        let text = "[dependencies]\nndarray = \"0.17\"\nvramguard = \"0.1\" # pinned\nburn = { version = \"0.21\" }\n";
        let edit = ensure_vramguard(text, None).expect("edits");
        assert_eq!(
            edit.text,
            "[dependencies]\nndarray = \"0.17\"\nvramguard = { version = \"0.1\", features = [\"ndarray\", \"burn-021\"] } # pinned\nburn = { version = \"0.21\" }\n"
        );
        assert_eq!(
            edit.changes,
            ["Cargo.toml: [dependencies] vramguard: features `ndarray`, `burn-021` added"]
        );
        let table = "[dependencies.vramguard]\nversion = \"0.1\"\nfeatures = [\"candle-cuda\"]\n\n[dependencies]\ncandle-core = \"0.11\"\ntch = \"0.26\"\n";
        let edit = ensure_vramguard(table, None).expect("edits");
        assert_eq!(edit.changes.len(), 1, "{:?}", edit.changes);
        assert!(
            edit.text.starts_with(
                "[dependencies.vramguard]\nversion = \"0.1\"\nfeatures = [\"candle-cuda\", \"tch\"]\n"
            ),
            "candle-cuda covers candle: {}",
            edit.text
        );
    }
}
