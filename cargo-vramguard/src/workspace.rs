//! The work copy: the crate copied into the work directory, its manifest given a path
//! dependency on the vramguard facade and a `[workspace]` table of its own (so it never joins
//! a parent workspace). Owns the copy and `Cargo.toml`; the `.rs` files are `annotate`'s.
//!
//! The facade dependency keeps the configuration the crate declares (`features`,
//! `default-features`, from every table that names vramguard, renamed or target-specific),
//! merged with `--features`; a tensor library the crate depends on whose vramguard feature is
//! off is a warning naming the `Cargo.toml` change.

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
    /// The facade's features in the copy: the crate's own, then `--features`.
    pub features: Vec<String>,
    /// Whether the facade's default features (`cuda`) are on in the copy.
    pub default_features: bool,
    /// One line each: a tensor library the crate uses whose vramguard feature is off.
    pub warnings: Vec<String>,
}

/// Copies `src` into `work_dir/NAME-VERSION` (replacing an older copy) and edits its manifest
/// (`manifest`: that text instead of the crate's own `Cargo.toml`, e.g. the one `apply` is
/// about to write).
pub(crate) fn prepare(
    src: &Path,
    work_dir: &Path,
    vramguard_path: Option<&Path>,
    features: &[String],
    manifest: Option<&str>,
) -> Result<WorkCopy> {
    let manifest_path = src.join("Cargo.toml");
    let text = match manifest {
        Some(text) => text.to_string(),
        None => {
            std::fs::read_to_string(&manifest_path).map_err(Error::io("read", &manifest_path))?
        }
    };
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
    let declared = take_facade(&mut doc);
    let facade = FacadeConfig::merge(&declared, features);
    let mut warnings = missing_features(&doc, &declared, &facade);
    for renamed in declared.iter().filter(|d| d.name != "vramguard") {
        // Cargo refuses one package under two names, and the attribute's expansion names
        // `::vramguard`: code that uses the rename does not build in the copy.
        warnings.push(format!(
            "warning: the crate names vramguard `{}` (in [{}]); the copy names it `vramguard`, \
             the name the attribute's expansion uses, so code that says `{}::` does not build",
            renamed.name, renamed.table, renamed.name
        ));
    }
    make_paths_absolute(&mut doc, src);
    add_facade(&mut doc, vramguard_path, &declared, src, &facade);
    mark_as_copy(&mut doc, &version);
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
        features: facade.features,
        default_features: facade.default_features,
        warnings,
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

/// The version build metadata that sets the copy's artifacts apart from the crate's own.
pub(crate) const COPY_BUILD_METADATA: &str = "vramguard-copy";

/// Gives the copy's version the build metadata [`COPY_BUILD_METADATA`]. Cargo names a
/// package's artifacts by a hash of its name, its version and its path relative to its
/// workspace root, and the crate and its copy are each the root of their own workspace: with
/// one target directory for both (`CARGO_TARGET_DIR`), they would write the same files, and a
/// build of one could take the other's library for fresh. The version is the one thing in that
/// hash the copy can change without changing its code's names; `CARGO_PKG_VERSION` reads
/// `0.1.0+vramguard-copy` in the copy (in both of `measure`'s builds alike).
fn mark_as_copy(doc: &mut DocumentMut, version: &str) {
    let tagged = match version.split_once('+') {
        Some(_) => format!("{version}.{COPY_BUILD_METADATA}"),
        None => format!("{version}+{COPY_BUILD_METADATA}"),
    };
    if let Some(package) = doc.get_mut("package").and_then(Item::as_table_like_mut) {
        package.insert("version", value(tagged));
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

/// The dependency tables: `[dependencies]`, `[dev-dependencies]`, `[build-dependencies]` and
/// their `[target.<cfg>.*]` forms, each with its name as written in the manifest.
pub(crate) fn visit_dependency_tables(
    doc: &mut DocumentMut,
    mut visit: impl FnMut(&str, &mut dyn toml_edit::TableLike),
) {
    const KINDS: [&str; 3] = ["dependencies", "dev-dependencies", "build-dependencies"];
    for kind in KINDS {
        if let Some(deps) = doc.get_mut(kind).and_then(Item::as_table_like_mut) {
            visit(kind, deps);
        }
    }
    if let Some(targets) = doc.get_mut("target").and_then(Item::as_table_like_mut) {
        for (target, item) in targets.iter_mut() {
            let Some(item) = item.as_table_like_mut() else {
                continue;
            };
            for kind in KINDS {
                if let Some(deps) = item.get_mut(kind).and_then(Item::as_table_like_mut) {
                    visit(&format!("target.'{}'.{kind}", target.get()), deps);
                }
            }
        }
    }
}

/// Relative `path = ".."` dependencies point at the original location after the copy.
fn make_paths_absolute(doc: &mut DocumentMut, src: &Path) {
    visit_dependency_tables(doc, |_, deps| {
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
    });
}

/// The package a dependency entry names: its `package` key, else its own name.
pub(crate) fn package_of<'a>(name: &'a str, dep: &'a Item) -> &'a str {
    dep.as_table_like()
        .and_then(|t| t.get("package"))
        .and_then(Item::as_str)
        .unwrap_or(name)
}

/// One vramguard dependency the crate declares.
#[derive(Debug, Clone)]
pub(crate) struct DeclaredFacade {
    /// The table it is in (`dependencies`, `target.'cfg(unix)'.dependencies`, …).
    pub table: String,
    /// Its name in that table (`vramguard`, or the rename of `package = "vramguard"`).
    pub name: String,
    /// The entry's keys (`"0.1"` is `{ version = "0.1" }`).
    pub entry: InlineTable,
    /// Its `features`.
    pub features: Vec<String>,
    /// Its `default-features` (true when absent).
    pub default_features: bool,
}

/// Removes every dependency on vramguard from the manifest (the copy gets one path dependency
/// instead) and returns what each declared.
fn take_facade(doc: &mut DocumentMut) -> Vec<DeclaredFacade> {
    let mut declared = Vec::new();
    visit_dependency_tables(doc, |table, deps| {
        let names: Vec<String> = deps
            .iter()
            .filter(|(name, dep)| package_of(name, dep) == "vramguard")
            .map(|(name, _)| name.to_string())
            .collect();
        for name in names {
            let Some(dep) = deps.remove(&name) else {
                continue;
            };
            let fields = dep.as_table_like();
            let features = fields
                .and_then(|t| t.get("features"))
                .and_then(Item::as_array)
                .map(|list| {
                    list.iter()
                        .filter_map(|f| f.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let default_features = fields
                .and_then(|t| {
                    t.get("default-features")
                        .or_else(|| t.get("default_features"))
                })
                .and_then(Item::as_bool)
                .unwrap_or(true);
            declared.push(DeclaredFacade {
                table: table.to_string(),
                name,
                entry: inline(&dep),
                features,
                default_features,
            });
        }
    });
    declared
}

/// A dependency entry as an inline table (`"0.1"` becomes `{ version = "0.1" }`).
fn inline(dep: &Item) -> InlineTable {
    let mut table = InlineTable::new();
    if let Some(version) = dep.as_str() {
        table.insert("version", version.into());
    } else if let Some(fields) = dep.as_table_like() {
        for (key, item) in fields.iter() {
            if let Some(v) = item.as_value() {
                table.insert(key, v.clone());
            }
        }
    }
    table.fmt();
    table
}

/// The facade's configuration in the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FacadeConfig {
    /// Every declared feature, then those of `--features`, each once.
    pub features: Vec<String>,
    /// On unless every declaration turns it off (cargo unifies them the same way).
    pub default_features: bool,
}

impl FacadeConfig {
    /// What the declarations and the command line ask for together.
    pub(crate) fn merge(declared: &[DeclaredFacade], cli: &[String]) -> FacadeConfig {
        let mut features: Vec<String> = Vec::new();
        for feature in declared.iter().flat_map(|d| &d.features).chain(cli) {
            if !features.contains(feature) {
                features.push(feature.clone());
            }
        }
        FacadeConfig {
            features,
            default_features: declared.is_empty() || declared.iter().any(|d| d.default_features),
        }
    }

    /// Whether `feature` is on, directly or through a feature that implies it.
    fn enables(&self, feature: &str) -> bool {
        self.features
            .iter()
            .any(|f| f == feature || (f == "candle-cuda" && feature == "candle"))
    }
}

/// The vramguard feature that makes a tensor library's tensors known to vramguard, for a
/// dependency on `package` at version requirement `version`.
pub(crate) fn feature_for(package: &str, version: Option<&str>) -> Option<&'static str> {
    match package {
        "candle-core" => Some("candle"),
        "burn" | "burn-tensor" => {
            let version = version
                .unwrap_or_default()
                .trim_start_matches(['=', '^', '~', ' ']);
            Some(if version.starts_with("0.21") {
                "burn-021"
            } else {
                "burn"
            })
        }
        "ndarray" => Some("ndarray"),
        "tch" => Some("tch"),
        _ => None,
    }
}

/// The facade's major.minor, for the suggested `version = "…"`.
pub(crate) fn facade_version() -> String {
    let version = env!("CARGO_PKG_VERSION");
    version
        .rsplit_once('.')
        .map_or(version, |(head, _)| head)
        .to_string()
}

/// One warning line per tensor library the crate depends on (normal, dev or target-specific
/// dependencies) whose vramguard feature `facade` leaves off, with the `Cargo.toml` change.
fn missing_features(
    doc: &DocumentMut,
    declared: &[DeclaredFacade],
    facade: &FacadeConfig,
) -> Vec<String> {
    let mut libraries: Vec<(String, &'static str)> = Vec::new();
    let mut doc = doc.clone();
    visit_dependency_tables(&mut doc, |table, deps| {
        if table.ends_with("build-dependencies") {
            return;
        }
        for (name, dep) in deps.iter() {
            let package = package_of(name, dep);
            let version = dep
                .as_str()
                .or_else(|| dep.as_table_like()?.get("version")?.as_str());
            if let Some(feature) = feature_for(package, version) {
                if !libraries.iter().any(|(_, f)| *f == feature) {
                    libraries.push((package.to_string(), feature));
                }
            }
        }
    });
    libraries
        .into_iter()
        .filter(|(_, feature)| !facade.enables(feature))
        .map(|(package, feature)| {
            let change = match declared.first() {
                Some(first) => {
                    let mut entry = first.entry.clone();
                    let mut list = Array::new();
                    for f in first.features.iter().map(String::as_str).chain([feature]) {
                        list.push(f);
                    }
                    entry.insert("features", list.into());
                    entry.fmt();
                    format!(
                        "in [{}] of Cargo.toml write `{} = {}`",
                        first.table, first.name, entry
                    )
                }
                None => format!(
                    "add `vramguard = {{ version = \"{}\", features = [\"{feature}\"] }}` to \
                     [dependencies] in Cargo.toml",
                    facade_version()
                ),
            };
            format!(
                "warning: the crate depends on `{package}` but vramguard's `{feature}` feature \
                 is off, so vramguard does not know its tensors: {change} (or pass \
                 --features {feature} to this check)"
            )
        })
        .collect()
}

/// `vramguard = { path = "…", default-features = false, features = [..] }` under
/// `[dependencies]` (replacing any). Without a facade directory (a tool installed from a
/// registry), the source is that of the first declaration (its `version`, `path`, `git` or
/// `registry`, relative paths made absolute against `src`), else this tool's version.
fn add_facade(
    doc: &mut DocumentMut,
    vramguard_path: Option<&Path>,
    declared: &[DeclaredFacade],
    src: &Path,
    facade: &FacadeConfig,
) {
    let mut dep = InlineTable::new();
    match (vramguard_path, declared.first()) {
        (Some(path), _) => {
            dep.insert("path", path.display().to_string().into());
        }
        (None, Some(first)) => {
            const SOURCE_KEYS: [&str; 7] =
                ["version", "path", "git", "branch", "tag", "rev", "registry"];
            for key in SOURCE_KEYS {
                let Some(value) = first.entry.get(key) else {
                    continue;
                };
                match value.as_str() {
                    Some(path) if key == "path" && Path::new(path).is_relative() => {
                        dep.insert(key, src.join(path).display().to_string().into());
                    }
                    _ => {
                        dep.insert(key, value.clone());
                    }
                }
            }
        }
        (None, None) => {
            dep.insert("version", facade_version().into());
        }
    }
    if !facade.default_features {
        dep.insert("default-features", false.into());
    }
    if !facade.features.is_empty() {
        let mut list = Array::new();
        for feature in &facade.features {
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
        let facade = FacadeConfig::merge(&[], &["candle".to_string()]);
        add_facade(
            &mut doc,
            Some(Path::new("/vg")),
            &[],
            Path::new("/src/x"),
            &facade,
        );
        let text = doc.to_string();
        assert!(text.contains("path = \"/src/x/../helper\""), "{text}");
        assert!(
            text.contains("vramguard = { path = \"/vg\", features = [\"candle\"] }"),
            "{text}"
        );
    }

    fn manifest(text: &str) -> DocumentMut {
        text.parse().expect("test manifest parses")
    }

    #[test]
    fn declared_features_and_default_features_are_kept_and_merged_with_the_command_line() {
        let mut doc = manifest(
            "[package]\nname = \"x\"\n\n[dependencies]\nserde = \"1\"\n\
             vramguard = { version = \"0.1\", default-features = false, features = [\"ndarray\"] }\n\
             \n[target.'cfg(unix)'.dependencies.vg]\npackage = \"vramguard\"\nversion = \"0.1\"\n\
             default-features = false\nfeatures = [\"tch\", \"ndarray\"]\n",
        );
        let declared = take_facade(&mut doc);
        assert_eq!(declared.len(), 2, "{declared:?}");
        assert_eq!(declared[0].table, "dependencies");
        assert_eq!(declared[0].name, "vramguard");
        assert_eq!(declared[1].table, "target.'cfg(unix)'.dependencies");
        assert_eq!(declared[1].name, "vg");
        assert_eq!(declared[1].features, ["tch", "ndarray"]);
        let facade = FacadeConfig::merge(&declared, &["candle".to_string(), "tch".to_string()]);
        assert_eq!(facade.features, ["ndarray", "tch", "candle"]);
        assert!(!facade.default_features, "every declaration turns them off");
        add_facade(
            &mut doc,
            Some(Path::new("/vg")),
            &[],
            Path::new("/src/x"),
            &facade,
        );
        let text = doc.to_string();
        assert!(
            text.contains(
                "vramguard = { path = \"/vg\", default-features = false, features = [\"ndarray\", \"tch\", \"candle\"] }"
            ),
            "{text}"
        );
        assert!(
            !text.contains("package = \"vramguard\""),
            "the rename is gone: {text}"
        );
        assert!(text.contains("serde = \"1\""), "{text}");
    }

    #[test]
    fn default_features_stay_on_when_one_declaration_keeps_them() {
        let mut doc = manifest(
            "[package]\nname = \"x\"\n[dependencies]\nvramguard = \"0.1\"\n\
             [dev-dependencies]\nvramguard = { version = \"0.1\", default-features = false }\n",
        );
        let declared = take_facade(&mut doc);
        assert_eq!(declared.len(), 2);
        assert!(FacadeConfig::merge(&declared, &[]).default_features);
        assert!(FacadeConfig::merge(&[], &[]).default_features);
    }

    #[test]
    fn a_tensor_library_without_its_feature_is_one_warning_with_the_cargo_toml_change() {
        let mut doc = manifest(
            "[package]\nname = \"x\"\n[dependencies]\ncandle = { package = \"candle-core\", version = \"0.11\" }\n\
             burn-tensor = \"0.21.0\"\nndarray = \"0.17\"\n\
             vramguard = { version = \"0.1\", features = [\"ndarray\"] }\n\
             [build-dependencies]\ntch = \"0.26\"\n",
        );
        let declared = take_facade(&mut doc);
        let facade = FacadeConfig::merge(&declared, &[]);
        let warnings = missing_features(&doc, &declared, &facade);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("warning: the crate depends on `candle-core` but vramguard's `candle` feature is off"), "{warnings:?}");
        assert!(
            warnings[0].contains(
                "in [dependencies] of Cargo.toml write `vramguard = { version = \"0.1\", features = [\"ndarray\", \"candle\"] }`"
            ),
            "{warnings:?}"
        );
        assert!(warnings[1].contains("`burn-tensor`"), "{warnings:?}");
        assert!(
            warnings[1].contains("`burn-021` feature"),
            "0.21 is the older line: {warnings:?}"
        );
        // candle-cuda implies candle; the command line counts too.
        let cuda = FacadeConfig::merge(&declared, &["candle-cuda".into(), "burn-021".into()]);
        assert_eq!(
            missing_features(&doc, &declared, &cuda),
            Vec::<String>::new()
        );
    }

    #[test]
    fn without_a_declared_vramguard_the_warning_says_what_to_add() {
        let doc = manifest("[package]\nname = \"x\"\n[dependencies]\nburn = \"0.22\"\n");
        let warnings = missing_features(&doc, &[], &FacadeConfig::merge(&[], &[]));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains(&format!(
                "add `vramguard = {{ version = \"{}\", features = [\"burn\"] }}` to [dependencies]",
                facade_version()
            )),
            "{warnings:?}"
        );
        assert!(warnings[0].contains("--features burn"), "{warnings:?}");
    }

    #[test]
    fn without_a_facade_directory_the_declared_source_is_kept() {
        let mut doc = manifest(
            "[package]\nname = \"x\"\n[dependencies]\n\
             vramguard = { version = \"0.1\", default-features = false, features = [\"candle\"] }\n",
        );
        let declared = take_facade(&mut doc);
        let facade = FacadeConfig::merge(&declared, &[]);
        add_facade(&mut doc, None, &declared, Path::new("/src/x"), &facade);
        assert!(
            doc.to_string().contains(
                "vramguard = { version = \"0.1\", default-features = false, features = [\"candle\"] }"
            ),
            "{doc}"
        );
        let mut doc = manifest("[package]\nname = \"x\"\n[dependencies]\nvg = { package = \"vramguard\", path = \"../vg\" }\n");
        let declared = take_facade(&mut doc);
        let facade = FacadeConfig::merge(&declared, &[]);
        add_facade(&mut doc, None, &declared, Path::new("/src/x"), &facade);
        assert!(
            doc.to_string()
                .contains("vramguard = { path = \"/src/x/../vg\" }"),
            "{doc}"
        );
        let mut doc = manifest("[package]\nname = \"x\"\n");
        add_facade(
            &mut doc,
            None,
            &[],
            Path::new("/src/x"),
            &FacadeConfig::merge(&[], &[]),
        );
        assert!(
            doc.to_string().contains(&format!(
                "vramguard = {{ version = \"{}\" }}",
                facade_version()
            )),
            "{doc}"
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
