//! The runtime's modules are layers: each imports only from the layers below it (issue #23).
//! From the bottom: `diagnostics` (warnings), `driver` (the CUDA driver context and its
//! errors), `alloc` (the caching allocator, which owns the trace label it records), `heap`
//! (the tracking allocator), `device` (devices and allocations; the batch scope observes them
//! through a hook it installs), `grad`, `scope`, `tensor`, `nn`, `memory` (per-device tools,
//! the largest-batch search) and `driver_pool` (the CUDA driver's pool for candle).
//!
//! Checked on the sources: every `crate::` path (groups included) and every `super::` path that
//! leaves a top-level module, in code that is not a test (`//` comments, files declared under
//! `#[cfg(test)]` and inline `#[cfg(test)] mod` blocks are left out: tests may drive a layer
//! through the ones above it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first.
const LAYERS: [&str; 11] = [
    "diagnostics",
    "driver",
    "alloc",
    "heap",
    "device",
    "grad",
    "scope",
    "tensor",
    "nn",
    "memory",
    "driver_pool",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {dir:?}: {e}"))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` without `//` comments and without an inline `#[cfg(test)] mod … {` block (by the
/// crate's convention the last item of its file).
fn code(text: &str) -> String {
    let mut kept = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let code = line.split("//").next().unwrap_or("");
        if is_test_cfg(code) {
            if let Some(next) = lines.peek() {
                let next = next.trim_start();
                if next.starts_with("mod ") && next.trim_end().ends_with('{') {
                    break;
                }
            }
        }
        kept.push(code);
    }
    kept.join("\n")
}

/// Whether an attribute line compiles what follows only for tests (`any(test, …)` does not).
fn is_test_cfg(line: &str) -> bool {
    let line = line.trim();
    line.starts_with("#[cfg(test)]") || line.starts_with("#[cfg(all(test")
}

/// The module path of a source file relative to `src` (`alloc/blocks.rs` → `[alloc, blocks]`,
/// `alloc/mod.rs` → `[alloc]`, `lib.rs` → `[]`).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs").to_string();
    }
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

/// Files declared under a test-only `cfg` (relative to `src`), and what lies beneath them.
fn test_only_files(src: &Path, files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut test_only = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let rel = file.strip_prefix(src).unwrap_or(file);
        let dir = rel.parent().unwrap_or(Path::new(""));
        let is_mod_rs = rel
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs");
        let child_dir = if is_mod_rs {
            dir.to_path_buf()
        } else {
            dir.join(rel.file_stem().unwrap_or_default())
        };
        let mut test_cfg = false;
        let mut path_attr: Option<String> = None;
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with("#[") {
                test_cfg |= is_test_cfg(line);
                if let Some(rest) = line.strip_prefix("#[path = \"") {
                    path_attr = rest.split('"').next().map(str::to_string);
                }
                continue;
            }
            let declared = line
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'));
            if let (true, Some(name)) = (test_cfg, declared) {
                match &path_attr {
                    Some(path) => {
                        test_only.insert(dir.join(path));
                    }
                    None => {
                        test_only.insert(child_dir.join(format!("{name}.rs")));
                        test_only.insert(child_dir.join(name));
                    }
                }
            }
            test_cfg = false;
            path_attr = None;
        }
    }
    test_only
}

/// The top-level modules that `code`, in module `me`, names: `crate::x…`, `crate::{x, y…}`,
/// `super::…` that reaches the crate root, and the root's re-exports (`crate::Device`).
fn imports(code: &str, me: &[String], root_items: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut add = |name: &str| {
        let name = name.trim();
        if let Some(module) = root_items.get(name) {
            found.insert(module.clone());
        } else if LAYERS.contains(&name) {
            found.insert(name.to_string());
        }
    };
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let Some(offset) = rest
            .find("crate::")
            .into_iter()
            .chain(rest.find("super::"))
            .min()
        else {
            break;
        };
        let start = at + offset;
        at = start + 1;
        // Skip identifiers that merely end in the keyword (`my_crate::`).
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        let mut path = &code[start..];
        let depth = if path.starts_with("crate::") {
            path = &path["crate::".len()..];
            0
        } else {
            let mut ups = 0;
            while let Some(after) = path.strip_prefix("super::") {
                path = after;
                ups += 1;
            }
            ups
        };
        if depth > 0 && depth < me.len() {
            continue; // Stays inside this top-level module.
        }
        if depth > me.len() {
            continue; // Not a path this crate's files can write.
        }
        if let Some(group) = path.strip_prefix('{') {
            let mut level = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => level += 1,
                    '}' if level == 0 => break,
                    '}' => level -= 1,
                    _ => {}
                }
                if level == 0 && c == ',' {
                    add(item.split("::").next().unwrap_or(""));
                    item.clear();
                } else {
                    item.push(c);
                }
            }
            add(item.split("::").next().unwrap_or(""));
        } else {
            let name: String = path
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            add(&name);
        }
    }
    found
}

/// What the crate root re-exports, by name: `pub use device::Device;` → `Device` → `device`.
fn root_items(lib: &str) -> BTreeMap<String, String> {
    let mut items = BTreeMap::new();
    for line in code(lib).split(';') {
        let Some(used) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, names)) = used.split_once("::") else {
            continue;
        };
        for name in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            let name = name.rsplit("::").next().unwrap_or("").trim();
            if !name.is_empty() {
                items.insert(name.to_string(), module.trim().to_string());
            }
        }
    }
    items
}

/// Every import of a lower layer from a higher one, as `module -> module (file)`.
fn violations(src: &Path) -> (Vec<String>, BTreeMap<String, BTreeSet<String>>) {
    let mut files = Vec::new();
    sources(src, &mut files);
    assert!(
        files.len() > 20,
        "found {} sources under {src:?}",
        files.len()
    );
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs");
    let root_items = root_items(&lib);
    let test_only = test_only_files(src, &files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(src).unwrap_or(file);
        if test_only.iter().any(|t| rel.starts_with(t)) {
            continue;
        }
        let me = module_path(rel);
        let Some(top) = me.first() else {
            continue; // lib.rs: the root re-exports every layer.
        };
        let Some(my_layer) = LAYERS.iter().position(|l| l == top) else {
            wrong.push(format!(
                "{top} ({}) is in no layer: add it to LAYERS",
                rel.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for target in imports(&code(&text), &me, &root_items) {
            if &target == top {
                continue;
            }
            let layer = LAYERS.iter().position(|l| *l == target).unwrap_or(0);
            if layer > my_layer {
                wrong.push(format!("{top} -> {target} ({})", rel.display()));
            }
            graph.entry(top.clone()).or_default().insert(target);
        }
    }
    (wrong, graph)
}

#[test]
fn each_layer_imports_only_from_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (wrong, graph) = violations(&src);
    let listing: Vec<String> = graph
        .iter()
        .map(|(m, targets)| {
            let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
            format!("{m} -> {}", targets.join(", "))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "imports of a higher layer (layers, lowest first: {LAYERS:?}):\n{}\nthe graph:\n{}",
        wrong.join("\n"),
        listing.join("\n")
    );
    // The check reads the real sources: the allocator uses the driver and diagnostics.
    assert!(graph["alloc"].contains("diagnostics"), "{listing:?}");
}

#[test]
fn the_check_sees_paths_groups_super_and_root_items() {
    let root = root_items("pub use device::Device;\npub use grad::{no_grad, NoGradGuard};\n");
    let me = vec!["alloc".to_string(), "blocks".to_string()];
    let sample = "use crate::{scope::tag, heap};\nlet d = crate::Device::host();\n\
                  use super::super::tensor::Tensor;\nuse super::Block; // crate::nn\n\
                  let g = crate::no_grad(|| 1);\nmy_crate::memory::x();\n";
    let found = imports(&code(sample), &me, &root);
    let found: Vec<&str> = found.iter().map(String::as_str).collect();
    assert_eq!(found, ["device", "grad", "heap", "scope", "tensor"]);
    let inline_tests = "use crate::alloc;\n#[cfg(test)]\nmod tests {\n    use crate::memory;\n}\n";
    assert_eq!(code(inline_tests).trim(), "use crate::alloc;");
}
