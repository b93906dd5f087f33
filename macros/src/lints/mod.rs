//! Compile-time memory lints and `#[vramguard::allow]`.
//!
//! The lints read the body as written (run [`check`] before any rewrite such as the releases
//! at last use). Each has a stable name, a one-line explanation and a fix (see `names.rs`).
//!
//! ## Warnings on stable Rust
//!
//! A proc macro cannot emit a warning on stable, so each warning becomes a use of a
//! `#[deprecated]` constant whose note is the message, placed at the top of the function body
//! with the span of the offending code (the trick of the `proc-macro-warning` crate):
//!
//! ```text
//! warning: use of deprecated constant `train::VRAMGUARD_ACCUMULATES_ACROSS_ITERATIONS`:
//!          vramguard::accumulates_across_iterations: `history.push(fake)` keeps ...
//! ```
//!
//! No lint level is set in generated code, so rustc's `deprecated` lint level of the user's
//! code applies: `#[allow(deprecated)]` on the function (or module, or crate) silences it,
//! `#[deny(deprecated)]` and `-D warnings` make it an error. Every lint is a warning, even
//! `backward_in_inference` (there is no graph under `#[inference]`): a lint reads names, not
//! types, so it may fire on an unrelated type's `.backward()`, and a lint must never turn code
//! that compiles into code that does not. Each is suppressed by `#[vramguard::allow(name)]`
//! on the function or on a statement inside it.

mod analysis;
mod names;
mod syntax;

pub(crate) use names::{allowed_in, parse_allow_args, Lint};

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, ToTokens};
use syn::parse::Parser;
use syn::visit_mut::VisitMut;
use syn::Attribute;

/// Which attribute is linting, and what it may assume.
pub(crate) struct LintContext<'a> {
    /// Inside `#[inference]`: grad is off, `.backward()` is reported.
    pub inference: bool,
    /// Path of the facade crate in generated code.
    #[allow(dead_code)] // The generated warnings need no runtime item today.
    pub krate: &'a syn::Path,
    /// Name of the function being linted (for messages).
    pub fn_name: &'a syn::Ident,
}

/// What the lints found: errors, and warning items to emit beside the function.
#[derive(Default)]
pub(crate) struct LintOutput {
    /// Errors, each with a span: a misspelled lint name in a statement's `#[vramguard::allow]`
    /// (every lint itself is a warning, see the module doc).
    pub errors: Vec<syn::Error>,
    /// Items to emit beside the function. The warnings themselves are inserted into the body
    /// by [`check`] (so that the function's own lint levels apply); this stays empty today and
    /// is kept so that callers need not change if an item is ever needed.
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

/// Lints a function body. Strips the statement-level `#[vramguard::allow(..)]` it consumes and
/// inserts the warning statements at the top of the body.
#[allow(dead_code)] // Called by `#[inference]`.
pub(crate) fn check(block: &mut syn::Block, ctx: &LintContext<'_>) -> LintOutput {
    check_fn(&[], block, ctx)
}

/// [`check`] for a function whose own attributes may hold `#[vramguard::allow(..)]` (they are
/// honoured and left in place: the `allow` attribute macro validates them and returns the item).
pub(crate) fn check_fn(
    fn_attrs: &[Attribute],
    block: &mut syn::Block,
    ctx: &LintContext<'_>,
) -> LintOutput {
    let (findings, errors) = analyze(fn_attrs, block, ctx);
    let warnings: Vec<syn::Stmt> = findings
        .iter()
        .map(|f| warning_statement(f.lint, &f.message, f.span))
        .collect();
    block.stmts.splice(0..0, warnings);
    LintOutput {
        errors,
        warnings: TokenStream::new(),
    }
}

/// Runs the lint pass (stripping statement-level allows) and returns warnings and errors.
fn analyze(
    fn_attrs: &[Attribute],
    block: &mut syn::Block,
    ctx: &LintContext<'_>,
) -> (Vec<analysis::Finding>, Vec<syn::Error>) {
    // Invalid names are reported by the `allow` macro itself when it expands.
    let allowed = allowed_in(fn_attrs).unwrap_or_default();
    let mut walker = analysis::Walker::new(ctx, allowed, block);
    walker.visit_block_mut(block);
    (walker.findings, walker.errors)
}

/// `{ #[deprecated(note = "...")] const VRAMGUARD_<LINT>: () = (); let () = VRAMGUARD_<LINT>; }`,
/// the use carrying the span of the offending code.
fn warning_statement(lint: Lint, message: &str, span: Span) -> syn::Stmt {
    let name = lint.const_name();
    let definition = Ident::new(&name, Span::call_site());
    let usage = Ident::new(&name, Span::call_site().located_at(span));
    syn::parse_quote! {
        {
            #[deprecated(note = #message)]
            const #definition: () = ();
            let () = #usage;
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
