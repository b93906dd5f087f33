//! Golden expansion files: `tests/expand/NAME.rs` expanded with `#[inference]` (rendered with
//! prettyplease) must equal `tests/expand/NAME.expanded.rs`. `VG_BLESS=1` rewrites them.

use std::path::PathBuf;

use quote::ToTokens;

/// Expands every item of a file that carries `#[inference(..)]` / `#[vramguard::inference(..)]`.
fn expand_file(source: &str) -> String {
    let mut file: syn::File = syn::parse_str(source).expect("golden input parses");
    for item in &mut file.items {
        let attrs = match item {
            syn::Item::Fn(f) => &mut f.attrs,
            syn::Item::Impl(i) => &mut i.attrs,
            _ => continue,
        };
        let Some(at) = attrs.iter().position(|a| {
            a.path()
                .segments
                .last()
                .is_some_and(|s| s.ident == "inference")
        }) else {
            continue;
        };
        let attr = attrs.remove(at);
        let args = match attr.meta {
            syn::Meta::List(list) => list.tokens,
            _ => proc_macro2::TokenStream::new(),
        };
        let expanded = super::expand(args, item.to_token_stream());
        *item = syn::Item::Verbatim(expanded);
    }
    let tokens = file.to_token_stream();
    let reparsed: syn::File = syn::parse2(tokens).expect("expansion parses as a file");
    prettyplease::unparse(&reparsed)
}

#[test]
fn golden_expansions() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/expand");
    let bless = std::env::var_os("VG_BLESS").is_some();
    let mut checked = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/expand exists")
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.path());
    for entry in entries {
        let path = entry.path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".rs") || name.ends_with(".expanded.rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        let actual = expand_file(&source);
        let golden = path.with_extension("expanded.rs");
        if bless {
            std::fs::write(&golden, &actual).unwrap();
        } else {
            let expected = std::fs::read_to_string(&golden)
                .unwrap_or_else(|_| panic!("missing {}; run with VG_BLESS=1", golden.display()));
            assert_eq!(
                actual, expected,
                "{name}: expansion changed; run with VG_BLESS=1 and review"
            );
        }
        checked += 1;
    }
    assert!(checked >= 5, "expected golden inputs in tests/expand");
}

/// The compile-fail cases of "one diagnostic per mistake" (`tests/ui/inference/fail/
/// one_diagnostic_*.rs`) prove something only if the statement holding each mistake is
/// rewritten: each function there follows a `// rewritten: MARKER` line, and its expansion
/// must contain MARKER (`__vg_last_use`: written twice; `__vg_drop`: dropped after or in a
/// branch; `NAME_receiver`: in place).
#[test]
fn one_diagnostic_cases_are_rewritten() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/ui/inference/fail");
    let mut checked = 0;
    for name in [
        "one_diagnostic_type_errors.rs",
        "one_diagnostic_borrow_errors.rs",
    ] {
        let source = std::fs::read_to_string(dir.join(name)).unwrap();
        for case in source.split("// rewritten: ").skip(1) {
            let (marker, rest) = case.split_once('\n').unwrap();
            let item = rest.split("\n}\n").next().unwrap().to_string() + "\n}\n";
            let mut function: syn::ItemFn = syn::parse_str(&item)
                .unwrap_or_else(|e| panic!("{name}: case `{marker}` parses: {e}"));
            function.attrs.clear();
            let expanded =
                super::expand(proc_macro2::TokenStream::new(), function.to_token_stream());
            let text = expanded.to_string();
            assert!(
                text.contains(marker.trim()),
                "{name}: `{}` is not rewritten as `{marker}`:\n{text}",
                function.sig.ident
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 19, "the cases of both files");
}

/// `VG_DEBUG_EXPAND=FILE`: prints FILE with every `#[inference]` item expanded (for working on
/// the rewrite; prints nothing otherwise).
#[test]
fn debug_expand() {
    if let Ok(path) = std::env::var("VG_DEBUG_EXPAND") {
        let source = std::fs::read_to_string(path).expect("VG_DEBUG_EXPAND names a readable file");
        println!("{}", expand_file(&source));
    }
}
