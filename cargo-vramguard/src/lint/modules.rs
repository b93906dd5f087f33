//! The source files of a target: its root file and every file its `mod` declarations reach,
//! found the way rustc finds them (`name.rs` or `name/mod.rs`, `#[path]`, inline modules),
//! without expanding macros or evaluating `#[cfg]` (every module is linted, whatever its
//! features), except `#[cfg(test)]` modules, which only `--all-targets` reaches.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use syn::ext::IdentExt;

/// One parsed source file.
pub(crate) struct ModuleFile {
    /// Its path.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
    /// Its syntax tree.
    pub ast: syn::File,
    /// Whether its module is under `#[cfg(test)]`.
    pub cfg_test: bool,
}

/// A file to read: where it is, where its child modules' files are, and whether it is test
/// code.
struct Pending {
    path: PathBuf,
    children_dir: PathBuf,
    cfg_test: bool,
}

/// The files of the target rooted at `root`, skipping those in `seen` (already linted for
/// another target) and adding the rest to it. A file that cannot be read or parsed is a note
/// in `problems`, not an error: the other files are still linted.
pub(crate) fn module_files(
    root: &Path,
    all_targets: bool,
    seen: &mut HashSet<PathBuf>,
    problems: &mut Vec<String>,
) -> Vec<ModuleFile> {
    let mut files = Vec::new();
    let mut pending = vec![Pending {
        path: root.to_path_buf(),
        children_dir: root.parent().map(Path::to_path_buf).unwrap_or_default(),
        cfg_test: false,
    }];
    while let Some(next) = pending.pop() {
        let key = next
            .path
            .canonicalize()
            .unwrap_or_else(|_| next.path.clone());
        if !seen.insert(key) {
            continue;
        }
        let text = match std::fs::read_to_string(&next.path) {
            Ok(text) => text,
            Err(error) => {
                problems.push(format!("cannot read `{}`: {error}", next.path.display()));
                continue;
            }
        };
        let ast = match syn::parse_file(&text) {
            Ok(ast) => ast,
            Err(error) => {
                let at = error.span().start();
                problems.push(format!(
                    "cannot parse `{}` (line {}): {error}; its functions are not linted",
                    next.path.display(),
                    at.line
                ));
                continue;
            }
        };
        let mut children = Vec::new();
        declared_modules(
            &ast.items,
            &next.path,
            &next.children_dir,
            next.cfg_test,
            all_targets,
            &mut children,
        );
        // Depth first, in declaration order.
        pending.extend(children.into_iter().rev());
        files.push(ModuleFile {
            path: next.path,
            text,
            ast,
            cfg_test: next.cfg_test,
        });
    }
    files
}

/// The out-of-line modules declared in `items` (inline modules walked through), with where
/// their files are. `dir` is where the child modules of this scope live.
fn declared_modules(
    items: &[syn::Item],
    file: &Path,
    dir: &Path,
    cfg_test: bool,
    all_targets: bool,
    out: &mut Vec<Pending>,
) {
    for item in items {
        let syn::Item::Mod(module) = item else {
            continue;
        };
        let cfg_test = cfg_test || is_cfg_test(&module.attrs);
        if cfg_test && !all_targets {
            continue;
        }
        let name = module.ident.unraw().to_string();
        let path_attr = path_attribute(&module.attrs);
        match &module.content {
            Some((_, inner)) => {
                let inner_dir = match &path_attr {
                    Some(path) => dir.join(path),
                    None => dir.join(&name),
                };
                declared_modules(inner, file, &inner_dir, cfg_test, all_targets, out);
            }
            None => {
                let (path, children_dir) = match path_attr {
                    // A `#[path]` file owns its directory, like a `mod.rs`.
                    Some(path) => {
                        let base = if dir_is_file_dir(file, dir) {
                            file.parent().map(Path::to_path_buf).unwrap_or_default()
                        } else {
                            dir.to_path_buf()
                        };
                        let path = base.join(path);
                        let children = path.parent().map(Path::to_path_buf).unwrap_or_default();
                        (path, children)
                    }
                    None => {
                        let flat = dir.join(format!("{name}.rs"));
                        if flat.is_file() {
                            (flat, dir.join(&name))
                        } else {
                            let nested = dir.join(&name).join("mod.rs");
                            (nested, dir.join(&name))
                        }
                    }
                };
                out.push(Pending {
                    path,
                    children_dir,
                    cfg_test,
                });
            }
        }
    }
}

/// Whether `dir` (the children's directory of the scope) is the file's own directory, i.e.
/// the scope is the top level of a `mod.rs`-like file: `#[path]` is then relative to it.
fn dir_is_file_dir(file: &Path, dir: &Path) -> bool {
    file.parent() == Some(dir)
        || file
            .file_stem()
            .is_some_and(|stem| file.parent().map(|p| p.join(stem)).as_deref() == Some(dir))
}

/// `#[path = "..."]`.
fn path_attribute(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| {
        if !attr.path().is_ident("path") {
            return None;
        }
        match &attr.meta {
            syn::Meta::NameValue(syn::MetaNameValue {
                value:
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }),
                ..
            }) => Some(s.value()),
            _ => None,
        }
    })
}

/// `#[cfg(test)]` (alone; `cfg(any(test, ..))` is not test-only).
pub(crate) fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == "test")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create dirs");
        std::fs::write(path, text).expect("write");
    }

    #[test]
    fn modules_are_found_as_rustc_finds_them() {
        let root = std::env::temp_dir().join(format!("vramguard-modules-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        write(
            &root,
            "src/lib.rs",
            "mod flat; mod nested; #[path = \"elsewhere/x.rs\"] mod renamed; \
             mod inline { mod deep; } #[cfg(test)] mod tests;",
        );
        write(&root, "src/flat.rs", "mod child;");
        write(&root, "src/flat/child.rs", "fn c() {}");
        write(&root, "src/nested/mod.rs", "mod inner;");
        write(&root, "src/nested/inner.rs", "");
        write(&root, "src/elsewhere/x.rs", "mod y;");
        write(&root, "src/elsewhere/y.rs", "");
        write(&root, "src/inline/deep.rs", "");
        write(&root, "src/tests.rs", "");
        write(&root, "src/stray.rs", "this is not rust");
        let names = |all_targets: bool| {
            let mut problems = Vec::new();
            let files = module_files(
                &root.join("src/lib.rs"),
                all_targets,
                &mut HashSet::new(),
                &mut problems,
            );
            assert!(problems.is_empty(), "{problems:?}");
            files
                .iter()
                .map(|f| {
                    f.path
                        .strip_prefix(root.join("src"))
                        .expect("under src")
                        .to_string_lossy()
                        .into_owned()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(false),
            [
                "lib.rs",
                "flat.rs",
                "flat/child.rs",
                "nested/mod.rs",
                "nested/inner.rs",
                "elsewhere/x.rs",
                "elsewhere/y.rs",
                "inline/deep.rs"
            ]
        );
        assert_eq!(names(true).last().map(String::as_str), Some("tests.rs"));
        let _ = std::fs::remove_dir_all(&root);
    }
}
