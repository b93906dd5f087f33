//! The module layers inside the runtime's crates (`memory/src/`, `tensor/src/` and inside it
//! `tensor/src/tensor/`) and of `macros/`: each module imports only from the layers below it, so
//! that a reader can start at the bottom and never meet a name from above. Between the crates
//! (`vramguard-alloc` below `vramguard-memory` below `vramguard-tensor`) the compiler enforces
//! it: a crate cannot name one that depends on it. The lists below are the layers, lowest
//! first; the crate docs of `vramguard-memory`, `vramguard-tensor` and `tensor/src/tensor/mod.rs`
//! say what each one owns.
//!
//! The test reads the sources (no compiler needed): every `crate::…` and `super::…` path
//! (`{…}` groups expanded, the root's re-exports such as `crate::Device` resolved to their
//! module) outside comments, string literals and test-only code (`#[cfg(test)]` items and the
//! files they declare: tests may drive a layer through the ones above it). It fails on an import
//! of the same or a higher layer, and on a module no layer lists (a new module must be placed).
//! `cargo test --test layout layers -- --nocapture` prints the graphs.
//!
//! The lists are written once more for readers, in `docs/layout.md` and in the crate docs
//! (`memory/src/lib.rs`, `tensor/src/lib.rs`, `tensor/src/tensor/mod.rs`): the test fails
//! when one of them differs from the lists here, in a name or in the order. It also checks the
//! layout rules of `docs/layout.md`: a module with children is a folder with `mod.rs`, no
//! `#[path]` in a crate's `src/`, and no source file outside the tests over 1,000 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A crate's layers, lowest first. Modules in one layer may not import each other.
struct Layers {
    /// The crate's `src` directory (or a module's directory inside it), relative to the
    /// workspace root.
    src: &'static str,
    /// The layers, lowest first, each the names of its modules.
    layers: &'static [&'static [&'static str]],
    /// Where else the list is written: (file, the heading its table follows).
    docs: &'static [(&'static str, &'static str)],
}

const MEMORY: Layers = Layers {
    src: "memory/src",
    layers: &[
        &["accounting"],
        &["heap"],
        &["device"],
        &["grad"],
        &["scope"],
        &["observer"],
        &["memory"],
        &["driver_pool"],
    ],
    docs: &[
        ("docs/layout.md", "### `memory/src/`"),
        ("memory/src/lib.rs", "# Layers"),
    ],
};

const TENSOR_CRATE: Layers = Layers {
    src: "tensor/src",
    layers: &[&["tensor"], &["nn"]],
    docs: &[
        ("docs/layout.md", "### `tensor/src/`"),
        ("tensor/src/lib.rs", "# Layers"),
    ],
};

const TENSOR: Layers = Layers {
    src: "tensor/src/tensor",
    layers: &[
        &["error"],
        &["kinds"],
        &["peak_bound", "rng"],
        &["storage"],
        &["backend"],
        &["last_use"],
        &["ops", "inspect"],
        &["autograd", "inplace"],
    ],
    docs: &[
        ("docs/layout.md", "### `tensor/src/tensor/`"),
        ("tensor/src/tensor/mod.rs", "# Layers"),
    ],
};

const MACROS: Layers = Layers {
    src: "macros/src",
    layers: &[
        &["common"],
        &["options"],
        &["liveness"],
        &["lints", "drop_at_last_use"],
        &["inference", "batch_scope"],
    ],
    docs: &[("docs/layout.md", "### `macros/src/`")],
};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// Every `.rs` file under `dir`, recursively, skipping test-only files.
fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            if name != "golden" {
                source_files(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(path);
        }
    }
}

/// The module path of a file relative to its crate's `src` (`alloc/blocks.rs` → `alloc::blocks`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("file under src");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The text with comments, string and char literals blanked, and `#[cfg(test)]` items removed.
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(text.len(), |n| i + n);
            i = end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(text.len(), |n| i + n + 2);
            i = end;
        } else if rest.starts_with("r#\"") || rest.starts_with("r\"") {
            let hashes = rest[1..].chars().take_while(|&c| c == '#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            let end = rest[body..]
                .find(&close)
                .map_or(text.len(), |n| i + body + n + close.len());
            out.push_str("\"\"");
            i = end;
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
        } else if bytes[i] == b'\'' && char_literal_len(rest).is_some() {
            out.push_str("' '");
            i += char_literal_len(rest).unwrap_or(1);
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    remove_test_items(&out)
}

/// The length of a char literal at the start of `s` (`'a'`, `'\n'`, `'\u{1F600}'`), or `None`
/// for a lifetime.
fn char_literal_len(s: &str) -> Option<usize> {
    let mut chars = s.char_indices().skip(1);
    let (_, first) = chars.next()?;
    if first == '\\' {
        let close = s[2..].find('\'')?;
        return Some(close + 3);
    }
    let (idx, second) = chars.next()?;
    (second == '\'').then_some(idx + 1)
}

/// Removes each item that follows `#[cfg(test)]` (a `mod tests { … }` or a `use`).
fn remove_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = [rest.find("#[cfg(test)]"), rest.find("#[cfg(all(test")]
        .into_iter()
        .flatten()
        .min()
    {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        // The item ends at its `;` or at the `}` closing its first `{`, whichever comes first.
        let mut depth = 0usize;
        let mut end = after.len();
        let attribute_end = after.find(']').map_or(after.len(), |n| n + 1);
        for (i, c) in after.char_indices().skip_while(|(i, _)| *i < attribute_end) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Every path that starts with `crate::` or `super::`, expanded over `{…}` groups, as segments
/// (`crate::{a::B, c}` → `[crate, a, B]`, `[crate, c]`).
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(pos) = code[from..].find(start) {
            let at = from + pos;
            from = at + start.len();
            let boundary = at == 0
                || !(bytes[at - 1].is_ascii_alphanumeric() || matches!(bytes[at - 1], b'_' | b':'));
            // `$crate::` in macro_rules refers to the crate too.
            if boundary || (at > 0 && bytes[at - 1] == b'$') {
                let root = start.trim_end_matches("::").to_string();
                expand_tree(&code[at + start.len()..], vec![root], &mut out);
            }
        }
    }
    out
}

/// Reads a use-tree at the start of `s` and pushes every full path under `prefix`.
fn expand_tree(s: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let s = s.trim_start();
    if let Some(inner) = s.strip_prefix('{') {
        for part in split_group(inner) {
            expand_tree(part, prefix.clone(), out);
        }
        return;
    }
    let ident: String = s
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if ident.is_empty() {
        out.push(prefix);
        return;
    }
    let mut path = prefix;
    path.push(ident.clone());
    let rest = &s[ident.len()..];
    match rest.strip_prefix("::") {
        Some(more) => expand_tree(more, path, out),
        None => out.push(path),
    }
}

/// The comma-separated parts of a `{…}` group whose opening brace was just consumed.
fn split_group(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut begin = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                parts.push(&s[begin..i]);
                return parts;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[begin..i]);
                begin = i + 1;
            }
            _ => {}
        }
    }
    parts
}

/// The graph of one crate (or directory) at the depth of its layer names: module → modules it
/// imports, each edge with one file that makes it.
fn graph(root: &Path, layers: &Layers) -> BTreeMap<String, BTreeMap<String, String>> {
    let src = root.join(layers.src);
    // The crate's real src dir (for `crate::` paths) and the prefix of this directory inside it.
    let (crate_src, prefix) = match layers.src.split_once("/src/") {
        Some((krate, inner)) => (
            root.join(krate).join("src"),
            inner.split('/').map(String::from).collect::<Vec<_>>(),
        ),
        None => (src.clone(), Vec::new()),
    };
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let test_only = test_only_files(&src, &files);
    let root_file = if src.join("lib.rs").is_file() {
        src.join("lib.rs")
    } else {
        src.join("mod.rs")
    };
    let reexports = root_reexports(&fs::read_to_string(root_file).unwrap_or_default());
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap_or(&file);
        if test_only.iter().any(|t| rel.starts_with(t)) {
            continue;
        }
        let Ok(text) = fs::read_to_string(&file) else {
            continue;
        };
        let module = module_of(&crate_src, &file);
        let Some(me) = local_name(&module, &prefix) else {
            continue;
        };
        for path in crate_paths(&code_only(&text)) {
            let absolute = resolve(&module, &path);
            let Some(mut target) = local_name(&absolute, &prefix) else {
                continue;
            };
            // `crate::Device`, `super::Tensor`: an item the root re-exports from a module.
            if let Some(module) = reexports.get(&target) {
                target = module.clone();
            }
            // An item of the directory's root module (`crate::Tensor`, `super::checked_numel`)
            // is not a module of a layer.
            let is_module = src.join(format!("{target}.rs")).is_file()
                || src.join(&target).join("mod.rs").is_file();
            if !is_module || me.is_empty() || target == me {
                continue;
            }
            let shown = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .display()
                .to_string();
            edges
                .entry(me.clone())
                .or_default()
                .entry(target)
                .or_insert(shown);
        }
    }
    edges
}

/// What a root module re-exports, by name: `pub use device::Device;` → `Device` → `device`.
fn root_reexports(root: &str) -> BTreeMap<String, String> {
    let mut items = BTreeMap::new();
    for statement in code_only(root).split(';') {
        let Some(used) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let used = used.trim_start_matches("self::");
        let Some((module, names)) = used.split_once("::") else {
            continue;
        };
        for name in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            let name = name.rsplit("::").next().unwrap_or("").trim();
            if !name.is_empty() && name != "*" {
                items.insert(name.to_string(), module.trim().to_string());
            }
        }
    }
    items
}

/// Files declared under a test-only `cfg` (`#[cfg(test)] mod fake_tests;`), relative to `src`,
/// with the directories beneath them: tests may drive a layer through the ones above it.
fn test_only_files(src: &Path, files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut test_only = BTreeSet::new();
    for file in files {
        let text = fs::read_to_string(file).unwrap_or_default();
        let rel = file.strip_prefix(src).unwrap_or(file);
        let dir = rel.parent().unwrap_or(Path::new(""));
        let is_root = matches!(
            rel.file_name().and_then(|n| n.to_str()),
            Some("mod.rs" | "lib.rs")
        );
        let child_dir = if is_root {
            dir.to_path_buf()
        } else {
            dir.join(rel.file_stem().unwrap_or_default())
        };
        let mut test_cfg = false;
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with("#[") {
                test_cfg |= line.starts_with("#[cfg(test)]") || line.starts_with("#[cfg(all(test");
                continue;
            }
            let declared = line
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'));
            if let (true, Some(name)) = (test_cfg, declared) {
                test_only.insert(child_dir.join(format!("{name}.rs")));
                test_only.insert(child_dir.join(name));
            }
            test_cfg = false;
        }
    }
    test_only
}

/// `crate::a::b` or `super::b` from `module` → the absolute module path it names.
fn resolve(module: &[String], path: &[String]) -> Vec<String> {
    let mut base: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        _ => {
            // `super` of `a::b` (file b.rs or b/mod.rs) is `a`.
            let mut m = module.to_vec();
            m.pop();
            m
        }
    };
    let mut rest = &path[1..];
    while rest.first().map(String::as_str) == Some("super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    base
}

/// The first component below `prefix` (the name this graph uses), if `path` is under `prefix`.
fn local_name(path: &[String], prefix: &[String]) -> Option<String> {
    if path.len() < prefix.len() || path[..prefix.len()] != *prefix {
        return None;
    }
    Some(path.get(prefix.len()).cloned().unwrap_or_default())
}

/// The modules directly under `dir`: `name.rs` files and `name/mod.rs` directories.
fn child_modules(dir: &Path) -> BTreeSet<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter_map(|path| {
            let name = path.file_stem()?.to_str()?.to_string();
            let is_module = if path.is_dir() {
                path.join("mod.rs").is_file()
            } else {
                path.extension().is_some_and(|e| e == "rs")
                    && !matches!(name.as_str(), "lib" | "mod" | "tests")
                    && !name.ends_with("_tests")
            };
            is_module.then_some(name)
        })
        .collect()
}

fn check(root: &Path, layers: &Layers) -> Vec<String> {
    let edges = graph(root, layers);
    let position = |name: &str| layers.layers.iter().position(|layer| layer.contains(&name));
    let modules = child_modules(&root.join(layers.src));
    let mut problems = Vec::new();
    println!("{}:", layers.src);
    for (module, targets) in &edges {
        let list: Vec<&str> = targets.keys().map(String::as_str).collect();
        println!("  {module} -> {}", list.join(", "));
    }
    for module in &modules {
        if position(module).is_none() {
            problems.push(format!(
                "{}: module `{module}` is in no layer; place it in the list of this test",
                layers.src
            ));
        }
    }
    for (module, targets) in &edges {
        let Some(from) = position(module) else {
            continue;
        };
        for (target, file) in targets {
            let Some(to) = position(target) else { continue };
            if to >= from {
                problems.push(format!(
                    "{}: `{module}` (layer {from}) imports `{target}` (layer {to}) in {file}: a layer may only import the layers below it",
                    layers.src
                ));
            }
        }
    }
    problems
}

#[test]
fn memory_layers_import_only_downwards() {
    let problems = check(&workspace_root(), &MEMORY);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn tensor_crate_layers_import_only_downwards() {
    let problems = check(&workspace_root(), &TENSOR_CRATE);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn tensor_layers_import_only_downwards() {
    let problems = check(&workspace_root(), &TENSOR);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn macro_layers_import_only_downwards() {
    let problems = check(&workspace_root(), &MACROS);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_scanner_sees_grouped_and_relative_imports() {
    let code = code_only(
        "use crate::{alloc::{Block, trace}, scope};\n// use crate::nn;\nlet s = \"crate::tensor\";\nuse super::super::grad::X;\n#[cfg(test)]\nmod tests { use crate::memory; }\n",
    );
    let paths = crate_paths(&code);
    let shown: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        shown,
        [
            "crate::alloc::Block",
            "crate::alloc::trace",
            "crate::scope",
            "super::super::grad::X"
        ]
    );
    let module = vec!["tensor".to_string(), "ops".to_string(), "view".to_string()];
    assert_eq!(resolve(&module, &paths[3]), ["tensor", "grad", "X"]);
    let gated = code_only("use crate::a;\n#[cfg(all(test, feature = \"cuda\"))]\nmod gpu { use crate::b; }\nuse crate::c;\n");
    let shown: Vec<String> = crate_paths(&gated).iter().map(|p| p.join("::")).collect();
    assert_eq!(shown, ["crate::a", "crate::c"]);
}

#[test]
fn an_upward_import_a_root_reexport_and_an_unplaced_module_are_caught() {
    let root = std::env::temp_dir().join(format!("vramguard-layers-{}", std::process::id()));
    let src = root.join("fake/src");
    fs::create_dir_all(src.join("high")).expect("temp dir");
    let files = [
        (
            "lib.rs",
            "mod low;\nmod high;\nmod stray;\npub use high::Top;\n",
        ),
        ("low.rs", "use crate::Top;\n#[cfg(test)]\nmod low_tests;\n"),
        ("low_tests.rs", "use crate::high::Top;\n"),
        ("high/mod.rs", "pub struct Top;\nuse crate::low;\n"),
        ("stray.rs", ""),
    ];
    for (name, text) in files {
        fs::write(src.join(name), text).expect("write a fake source");
    }
    const FAKE: Layers = Layers {
        src: "fake/src",
        layers: &[&["low"], &["high"]],
        docs: &[],
    };
    let problems = check(&root, &FAKE);
    let _ = fs::remove_dir_all(&root);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems[0].contains("module `stray` is in no layer"),
        "{problems:#?}"
    );
    assert!(
        problems[1].contains("`low` (layer 0) imports `high` (layer 1) in fake/src/low.rs"),
        "{problems:#?}"
    );
}

/// The table that follows `heading` in `text` (a Markdown file, or Rust doc comments), as
/// layers: the names in backticks of each row's first cell. `None` when there is no such
/// heading or no table after it.
fn documented_layers(text: &str, heading: &str) -> Option<Vec<Vec<String>>> {
    let lines: Vec<&str> = text
        .lines()
        .map(|line| {
            let line = line.trim_start();
            line.strip_prefix("//!").map_or(line, str::trim_start)
        })
        .collect();
    let at = lines.iter().position(|line| line.trim_end() == heading)?;
    let rows: Vec<&str> = lines[at + 1..]
        .iter()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2) // the header and its separator
        .copied()
        .collect();
    if rows.is_empty() {
        return None;
    }
    let layers = rows
        .iter()
        .map(|row| {
            let first_cell = row[1..].split('|').next().unwrap_or("");
            first_cell
                .split('`')
                .skip(1)
                .step_by(2)
                .map(String::from)
                .collect()
        })
        .collect();
    Some(layers)
}

#[test]
fn the_layer_tables_of_the_docs_are_the_lists_of_this_test() {
    let root = workspace_root();
    let mut problems = Vec::new();
    for layers in [&MEMORY, &TENSOR_CRATE, &TENSOR, &MACROS] {
        let want: Vec<Vec<String>> = layers
            .layers
            .iter()
            .map(|layer| layer.iter().map(|m| m.to_string()).collect())
            .collect();
        for (file, heading) in layers.docs {
            let text = fs::read_to_string(root.join(file)).unwrap_or_default();
            match documented_layers(&text, heading) {
                None => problems.push(format!("{file}: no layer table after `{heading}`")),
                Some(found) if found != want => problems.push(format!(
                    "{file} (`{heading}`) lists the layers of {} as {found:?}; this test lists \
                     {want:?}: make them the same",
                    layers.src
                )),
                Some(_) => {}
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_layer_table_is_read_from_markdown_and_from_doc_comments() {
    let markdown =
        "## Layers\n\n| layer | owns |\n| --- | --- |\n| `a` | x |\n| `b`, `c` | y |\n\nafter";
    let layers = documented_layers(markdown, "## Layers");
    assert_eq!(
        layers,
        Some(vec![
            vec!["a".to_string()],
            vec!["b".to_string(), "c".to_string()]
        ])
    );
    let doc =
        "//! # Layers\n//!\n//! | module | owns |\n//! | --- | --- |\n//! | [`a`] | x `not` |\n";
    assert_eq!(
        documented_layers(doc, "# Layers"),
        Some(vec![vec!["a".to_string()]])
    );
    assert_eq!(documented_layers(doc, "# Elsewhere"), None);
}

/// The source directories of the workspace's crates (`src` of each, plus the example programs
/// and the bench support), whose files are not tests. The test crates (`tests/edition2024`,
/// `tests/transform_scale`) are tests. `every_member_s_sources_are_checked` keeps the list whole.
const SOURCE_DIRS: &[&str] = &[
    "src",
    "macros/src",
    "lints/src",
    "alloc/src",
    "memory/src",
    "tensor/src",
    "cargo-vramguard/src",
    "fake-cuda/src",
    "examples",
    "benches",
];

#[test]
fn every_member_s_sources_are_checked() {
    let manifest = fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
    let members = manifest
        .lines()
        .find_map(|line| line.strip_prefix("members = "))
        .expect("the workspace's `members = [..]` line");
    let unchecked: Vec<&str> = members
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|member| member.trim().trim_matches('"'))
        .filter(|member| !member.starts_with("tests/"))
        .filter(|member| !SOURCE_DIRS.contains(&format!("{member}/src").as_str()))
        .collect();
    assert!(
        unchecked.is_empty(),
        "workspace members whose sources the 1000-line rule does not read: {unchecked:?} (add their src to SOURCE_DIRS)"
    );
}

/// Every `.rs` file under `dir` that is not a test: not under a `tests` or `golden` folder, not
/// `tests.rs` nor `*_tests.rs`.
fn non_test_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for path in entries.filter_map(Result::ok).map(|e| e.path()) {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            if name != "tests" && name != "golden" {
                non_test_sources(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(path);
        }
    }
}

/// The longest a source file that is not a test may be.
const MAX_SOURCE_LINES: usize = 1000;

#[test]
fn no_source_file_outside_the_tests_is_over_1000_lines() {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        non_test_sources(&root.join(dir), &mut files);
    }
    assert!(
        files.len() > 100,
        "the sources were not found under {root:?}"
    );
    let mut long: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let lines = fs::read_to_string(file).ok()?.lines().count();
            let shown = file.strip_prefix(&root).unwrap_or(file).display();
            (lines > MAX_SOURCE_LINES).then(|| format!("{shown}: {lines} lines"))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "source files over {MAX_SOURCE_LINES} lines (split them by what they own):\n{}",
        long.join("\n")
    );
}

#[test]
fn modules_with_children_are_folders_with_mod_rs_and_no_crate_uses_path() {
    let root = workspace_root();
    let mut problems = Vec::new();
    for dir in [
        "src",
        "macros/src",
        "alloc/src",
        "memory/src",
        "tensor/src",
        "cargo-vramguard/src",
    ] {
        let mut files = Vec::new();
        source_files(&root.join(dir), &mut files);
        for file in files {
            let shown = file
                .strip_prefix(&root)
                .unwrap_or(&file)
                .display()
                .to_string();
            if file.with_extension("").is_dir() {
                problems.push(format!(
                    "{shown}: a module with children is a folder with mod.rs (move it into {}/mod.rs)",
                    shown.trim_end_matches(".rs")
                ));
            }
            let text = fs::read_to_string(&file).unwrap_or_default();
            if code_only(&text).contains("#[path") {
                problems.push(format!(
                    "{shown}: `#[path]` in a crate's src (declare the module where its file is)"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
