//! The `TrackingAllocator` line in a target's root file: found, or written in by text (two
//! lines and a blank one, before `fn main`, else before the first item), every other byte left
//! as it was. `apply --track` writes it into the crate's binaries, `measure` into the target it
//! measures (in its copies only). Owns the line and where it goes; which files get it is the
//! caller's.

use proc_macro2::LineColumn;
use syn::spanned::Spanned;

use crate::annotate::LineIndex;

/// What a root file's global allocator is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Allocator {
    /// vramguard's `TrackingAllocator` is installed already.
    Tracking,
    /// Another `#[global_allocator]`: its type, as written.
    Other(String),
    /// None: the text with the line written in.
    Missing(String),
}

/// The name of the static, unless the file has an item of that name already.
const NAMES: [&str; 2] = ["ALLOC", "VRAMGUARD_ALLOC"];

/// Finds the global allocator of a root file, and when there is none, writes vramguard's in.
/// `Err` when syn cannot parse the file.
pub(crate) fn install(text: &str) -> Result<Allocator, String> {
    let file = syn::parse_file(text).map_err(|e| {
        let at = e.span().start();
        format!("line {}: syn cannot parse it ({e})", at.line)
    })?;
    let lines = LineIndex::new(text);
    for item in &file.items {
        if let syn::Item::Static(item) = item {
            let global = item
                .attrs
                .iter()
                .any(|a| a.path().is_ident("global_allocator"));
            if !global {
                continue;
            }
            let ty = &item.ty;
            let span = ty.span();
            let written = text[lines.offset(span.start())..lines.offset(span.end())].to_string();
            let tracking = match &**ty {
                syn::Type::Path(path) => path
                    .path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "TrackingAllocator"),
                _ => false,
            };
            return Ok(if tracking {
                Allocator::Tracking
            } else {
                Allocator::Other(written)
            });
        }
    }
    let taken = |name: &str| {
        file.items
            .iter()
            .any(|item| item_name(item).as_deref() == Some(name))
    };
    let name = NAMES
        .iter()
        .find(|n| !taken(n))
        .copied()
        .unwrap_or("VRAMGUARD_TRACKING_ALLOC");
    let main = file
        .items
        .iter()
        .find(|item| item_name(item).as_deref() == Some("main"));
    let before = main.or_else(|| file.items.first());
    let offset = match before {
        Some(item) => {
            let start = item.span().start();
            lines.offset(LineColumn {
                line: start.line,
                column: 0,
            })
        }
        None => text.len(),
    };
    let mut line = format!(
        "#[global_allocator]\nstatic {name}: vramguard::TrackingAllocator = \
         vramguard::TrackingAllocator::system();\n"
    );
    if before.is_some() {
        line.push('\n');
    } else if !text.is_empty() && !text.ends_with('\n') {
        line.insert(0, '\n');
    }
    let mut out = String::with_capacity(text.len() + line.len());
    out.push_str(&text[..offset]);
    out.push_str(&line);
    out.push_str(&text[offset..]);
    Ok(Allocator::Missing(out))
}

fn item_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Fn(f) => &f.sig.ident,
        syn::Item::Static(s) => &s.ident,
        syn::Item::Const(c) => &c.ident,
        syn::Item::Struct(s) => &s.ident,
        syn::Item::Enum(e) => &e.ident,
        syn::Item::Mod(m) => &m.ident,
        syn::Item::Type(t) => &t.ident,
        syn::Item::Union(u) => &u.ident,
        syn::Item::Trait(t) => &t.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_goes_before_main_with_its_doc_comment_and_nothing_else_changes() {
        let text = "//! A tool.\nuse std::io;\n\n/// Entry.\n#[allow(unused)]\nfn main() {\n    let _ = io::stdin();\n}\n";
        let Ok(Allocator::Missing(out)) = install(text) else {
            panic!("expected the line written in");
        };
        assert_eq!(
            out,
            "//! A tool.\nuse std::io;\n\n#[global_allocator]\nstatic ALLOC: vramguard::TrackingAllocator = vramguard::TrackingAllocator::system();\n\n/// Entry.\n#[allow(unused)]\nfn main() {\n    let _ = io::stdin();\n}\n"
        );
        assert_eq!(
            install(&out),
            Ok(Allocator::Tracking),
            "a second run finds it"
        );
    }

    #[test]
    fn another_allocator_is_named_and_a_taken_name_is_avoided() {
        let other = "#[global_allocator]\nstatic GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;\nfn main() {}\n";
        assert_eq!(
            install(other),
            Ok(Allocator::Other("mimalloc::MiMalloc".to_string()))
        );
        let taken = "const ALLOC: u8 = 1;\n#[test]\nfn t() {}\n";
        let Ok(Allocator::Missing(out)) = install(taken) else {
            panic!("expected the line written in");
        };
        assert!(
            out.starts_with("#[global_allocator]\nstatic VRAMGUARD_ALLOC: "),
            "{out}"
        );
        assert!(install("fn main( {").is_err());
    }
}
