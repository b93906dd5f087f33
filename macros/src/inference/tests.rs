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
