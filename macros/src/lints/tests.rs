//! The macros' side of the lints: warnings as deprecated functions, `allow` placement.

use super::*;
use quote::quote;

#[test]
fn warnings_become_deprecated_functions_named_after_the_lint_at_the_top_of_the_body() {
    let mut func: syn::ItemFn = syn::parse_quote! {
        fn f(xs: &[T]) { let mut r = Vec::new(); for x in xs { r.push(x.f()); } }
    };
    let krate: syn::Path = syn::parse_quote!(::vramguard);
    let sig = func.sig.clone();
    let ctx = LintContext {
        inference: false,
        krate: &krate,
        sig: &sig,
    };
    let output = check_fn(&[], &mut func.block, &ctx);
    assert!(output.errors.is_empty());
    let first = func.block.stmts[0].to_token_stream().to_string();
    assert!(first.contains("deprecated"), "{first}");
    assert!(
        first.contains("mod vramguard")
            && first.contains("fn accumulates_across_iterations")
            && first.contains("vramguard :: accumulates_across_iterations"),
        "the path reads as the lint's name: {first}"
    );
    assert!(
        !first.contains("# [allow"),
        "no lint level is set (a crate's `forbid` would reject an `allow`): {first}"
    );
}

#[test]
fn allow_moves_itself_after_a_processing_attribute() {
    let out = expand_allow(
        quote!(graph_across_iterations),
        quote! { #[doc = "d"] #[vg::batch_scope(strict)] fn f() {} },
    )
    .to_string();
    assert_eq!(
        out,
        quote! { #[doc = "d"] #[vg::batch_scope(strict)] #[vg::allow(graph_across_iterations)] fn f() {} }
            .to_string()
    );
    let bare = expand_allow(
        quote!(graph_across_iterations),
        quote! { #[inference] fn f() {} },
    );
    assert!(bare.to_string().contains(":: vramguard :: allow"), "{bare}");
    let plain = quote! { fn f() {} };
    assert_eq!(
        expand_allow(quote!(graph_across_iterations), plain.clone()).to_string(),
        plain.to_string()
    );
}
