//! The lints inside the attribute macros. The rules themselves are the `vramguard-lints`
//! crate's (one implementation, shared with `cargo vramguard lint`); this module runs them on a
//! function body before any rewrite, turns each finding into a warning, and owns
//! `#[vramguard::allow]` as an attribute macro.
//!
//! ## Warnings on stable Rust
//!
//! A proc macro cannot emit a warning on stable (`proc_macro::Diagnostic` is unstable, rust
//! issue #54140), so each warning is a use of a `#[deprecated]` function whose note is the
//! message, at the top of the function body, the use carrying the span of the offending code
//! (the trick of the `proc-macro-warning` crate). rustc writes such a warning as
//! "use of deprecated function `PATH`: NOTE", and PATH is the item's path: the function is
//! named after the lint inside a module named `vramguard`, so that the path reads as the lint's
//! name and the note as the sentence about the code:
//!
//! ```text
//! warning: use of deprecated function `train::vramguard::accumulates_across_iterations`:
//!          `history.push(fake)` keeps a value computed in each iteration: ...
//! ```
//!
//! No level of the `deprecated` lint is set in generated code, so the user's own applies:
//! `#[allow(deprecated)]` on the function (or module, or crate) silences it,
//! `#[deny(deprecated)]` and `-D warnings` make it an error. Every lint is a warning, even
//! `backward_in_inference` (there is no graph under `#[inference]`): a lint reads names, not
//! types, so it may fire on an unrelated type's `.backward()`, and a lint must never turn code
//! that compiles into code that does not. Each is suppressed by `#[vramguard::allow(name)]`
//! on the function or on a statement inside it.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, ToTokens};
use syn::parse::Parser;
use syn::Attribute;
use vramguard_lints::{lint_fn, parse_allow_args, Context, Finding, Library};

/// Which attribute is linting, and what it may assume.
pub(crate) struct LintContext<'a> {
    /// Inside `#[inference]`: grad is off, `.backward()` is reported.
    pub inference: bool,
    /// Path of the facade crate in generated code.
    #[allow(dead_code)] // The generated warnings need no runtime item today.
    pub krate: &'a syn::Path,
    /// Signature of the function being linted (its name for messages; whether it builds
    /// `Self`).
    pub sig: &'a syn::Signature,
}

/// What the lints found: errors, and warning items to emit beside the function.
#[derive(Default)]
pub(crate) struct LintOutput {
    /// Errors, each with a span: a misspelled lint name in a statement's `#[vramguard::allow]`
    /// (every lint itself is a warning, see the module doc).
    pub errors: Vec<syn::Error>,
    /// Items to emit beside the function. The warnings themselves are inserted into the body
    /// by [`check_fn`] (so that the function's own lint levels apply); this stays empty today
    /// and is kept so that callers need not change if an item is ever needed.
    pub warnings: TokenStream,
}

impl LintOutput {
    /// The errors as one `compile_error!` token stream (empty when there are none).
    pub(crate) fn errors_to_tokens(&self) -> TokenStream {
        self.errors
            .iter()
            .map(syn::Error::to_compile_error)
            .collect()
    }
}

/// Lints a function body whose own attributes may hold `#[vramguard::allow(..)]` (honoured
/// and left in place: the `allow` attribute macro validates them and returns the item). Strips
/// the statement-level allows and inserts the warning statements at the top of the body.
pub(crate) fn check_fn(
    fn_attrs: &[Attribute],
    block: &mut syn::Block,
    ctx: &LintContext<'_>,
) -> LintOutput {
    let context = Context {
        inference: ctx.inference,
        // The macros see one function, not the crate's dependencies.
        library: Library::Unknown,
        ..Context::of_signature(ctx.sig)
    };
    let outcome = lint_fn(fn_attrs, block, &context);
    let warnings: Vec<syn::Stmt> = outcome.findings.iter().map(warning_statement).collect();
    block.stmts.splice(0..0, warnings);
    LintOutput {
        errors: outcome.errors,
        warnings: TokenStream::new(),
    }
}

/// `{ mod vramguard { #[deprecated(note = "...")] pub(super) fn <lint>() {} }
/// let _ = vramguard::<lint>; }`, the use carrying the span of the offending code. A function,
/// not a constant: its snake-case name needs no `#[allow(non_upper_case_globals)]`, which a
/// crate's `#![forbid(non_upper_case_globals)]` would reject; it is named, never called.
fn warning_statement(finding: &Finding) -> syn::Stmt {
    let name = finding.lint.name();
    let message = finding.paragraph(Library::Unknown);
    let definition = Ident::new(name, Span::call_site());
    let usage = Ident::new(name, Span::call_site().located_at(finding.span));
    syn::parse_quote! {
        {
            mod vramguard {
                #[deprecated(note = #message)]
                pub(super) fn #definition() {}
            }
            let _ = vramguard::#usage;
        }
    }
}

/// `#[vramguard::allow(names)]` as an attribute macro: validates the names and returns the
/// item. When a processing attribute (`#[inference]`, `#[batch_scope]`) follows it, the allow
/// is moved after that attribute so that the processing macro sees it (attribute macros expand
/// outermost first, and an expanded attribute is gone from the item).
pub(crate) fn expand_allow(args: TokenStream, item: TokenStream) -> TokenStream {
    if let Err(err) = parse_allow_args(args.clone(), Span::call_site()) {
        let err = err.to_compile_error();
        return quote! { #err #item };
    }
    let parsed = (|input: syn::parse::ParseStream| {
        let attrs = input.call(Attribute::parse_outer)?;
        let rest: TokenStream = input.parse()?;
        Ok((attrs, rest))
    })
    .parse2(item.clone());
    let Ok((attrs, rest)) = parsed else {
        return item;
    };
    let Some(position) = attrs.iter().position(is_processing_attribute) else {
        return item;
    };
    let allow_path = sibling_allow_path(attrs[position].path());
    let mut out = TokenStream::new();
    for (i, attr) in attrs.iter().enumerate() {
        attr.to_tokens(&mut out);
        if i == position {
            out.extend(quote! { #[#allow_path(#args)] });
        }
    }
    out.extend(rest);
    out
}

/// `#[inference]` / `#[batch_scope]` under any path.
fn is_processing_attribute(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "inference" || s.ident == "batch_scope")
}

/// `vg::batch_scope` → `vg::allow`; a bare `batch_scope` (imported) → `::vramguard::allow`
/// (the built-in `allow` cannot be shadowed, so the allow is always written with a path).
fn sibling_allow_path(processing: &syn::Path) -> syn::Path {
    let mut path = processing.clone();
    if path.segments.len() < 2 {
        return syn::parse_quote!(::vramguard::allow);
    }
    if let Some(last) = path.segments.last_mut() {
        last.ident = Ident::new("allow", last.ident.span());
        last.arguments = syn::PathArguments::None;
    }
    path
}

#[cfg(test)]
mod tests;
