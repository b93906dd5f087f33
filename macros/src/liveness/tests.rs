//! Unit tests of the drop-at-last-use rewrite on source text.

use super::*;

/// Rewrites the body of `fn` source and returns it pretty-printed, with the report.
pub(crate) fn rewrite(source: &str, optimistic: bool) -> (String, DropReport) {
    let mut function: syn::ItemFn = syn::parse_str(source).expect("test source parses");
    let mut options = DropOptions::new(syn::parse_quote!(::vramguard));
    options.optimistic = optimistic;
    let params = params_of(&function.sig);
    let report = insert_drops(&mut function.block, &params, &options);
    let file: syn::File = syn::parse_quote!(#function);
    (prettyplease::unparse(&file), report)
}

#[test]
fn debug_print() {
    if let Ok(path) = std::env::var("VG_DEBUG_SOURCE") {
        let source = std::fs::read_to_string(path).unwrap();
        let (text, report) = rewrite(&source, false);
        println!("{text}\n{report:?}");
    }
}
