//! Code generation of `#[batch_scope]`: the lints, then a scope guard and drops at last use in
//! every scoped loop of a validated function.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::visit_mut::{self, VisitMut};
use syn::{Block, Expr, Ident, Stmt};

use super::parse::{is_marker, FnOptions, Loop, ScopeSettings, ScopedFunction};
use crate::lints::{self, LintContext};
use crate::liveness::{self, DropOptions};

/// Expands a validated function: the function, then the lints' errors.
pub(crate) fn expand(function: ScopedFunction, options: &FnOptions) -> TokenStream {
    let krate = options
        .krate
        .clone()
        .unwrap_or_else(crate::common::default_crate_path);
    let only_marked = function.only_marked();
    let mut func = function.item;
    let fn_name = func.sig.ident.clone();
    let lint_output = {
        let sig = func.sig.clone();
        let ctx = LintContext {
            inference: false,
            krate: &krate,
            sig: &sig,
        };
        lints::check_fn(&func.attrs, &mut func.block, &ctx)
    };
    let mut scoper = Scoper {
        settings: &options.settings,
        krate: &krate,
        fn_name: fn_name.to_string(),
        try_owns: !liveness::returns_option(&func.sig),
        only_marked,
        loops: function.loops.into_iter(),
    };
    scoper.visit_block_mut(&mut func.block);
    let mut extra = lint_output.warnings.clone();
    extra.extend(lint_output.errors_to_tokens());
    quote! { #func #extra }
}

/// Rewrites the scoped loops, taking each loop's parsed facts in the order `parse` recorded
/// them (nested items and `const` blocks skipped, a loop after the loops inside it).
struct Scoper<'a> {
    /// The function's settings, under each marker's own.
    settings: &'a ScopeSettings,
    krate: &'a syn::Path,
    fn_name: String,
    /// The function does not return `Option` (see `DropOptions::try_owns`).
    try_owns: bool,
    only_marked: bool,
    loops: std::vec::IntoIter<Loop>,
}

impl Scoper<'_> {
    fn scope_loop(&mut self, expr: &mut Expr, facts: Loop) {
        let (keyword_span, attrs, body, params) = match expr {
            Expr::ForLoop(e) => (
                e.for_token.span,
                &mut e.attrs,
                &mut e.body,
                liveness::pattern_params(&e.pat),
            ),
            Expr::While(e) => {
                let params = match &*e.cond {
                    Expr::Let(cond) => liveness::pattern_params(&cond.pat),
                    _ => Vec::new(),
                };
                (e.while_token.span, &mut e.attrs, &mut e.body, params)
            }
            Expr::Loop(e) => (e.loop_token.span, &mut e.attrs, &mut e.body, Vec::new()),
            _ => return,
        };
        attrs.retain(|a| !is_marker(a));
        if self.only_marked && facts.marker.is_none() {
            return;
        }
        let drop_options = DropOptions {
            try_owns: self.try_owns,
            ..DropOptions::new(self.krate.clone())
        };
        liveness::insert_drops(body, &params, &drop_options);
        let marker = facts.marker.unwrap_or_default();
        let guard = self.guard_statement(&marker.settings, keyword_span);
        // The user's braces, not the macro's: edition 2024 decides a block's tail-temporary
        // scope from its span's edition (a macro's own span has the macro crate's edition, 2021,
        // under which a tail `m.lock().unwrap().push(i)` would outlive a body-local `m`).
        let user_body = Block {
            brace_token: body.brace_token,
            stmts: std::mem::take(&mut body.stmts),
        };
        body.stmts = vec![
            guard,
            Stmt::Expr(
                Expr::Block(syn::ExprBlock {
                    attrs: Vec::new(),
                    label: None,
                    block: user_body,
                }),
                Some(Default::default()),
            ),
        ];
    }

    /// `let __vramguard_scope = BatchScope::enter_with(label, options);`, the marker's settings
    /// first, then the function's.
    fn guard_statement(&self, marker: &ScopeSettings, keyword_span: Span) -> Stmt {
        let krate = self.krate;
        let function = self.settings;
        let label = match marker.label.as_ref().or(function.label.as_ref()) {
            Some(label) => label.to_token_stream(),
            None => {
                let fn_name = &self.fn_name;
                let line = quote_spanned!(keyword_span=> ::core::line!());
                quote!(::core::concat!(::core::module_path!(), "::", #fn_name, ":", #line))
            }
        };
        let mut options = quote!(#krate::__private::ScopeOptions::new());
        if marker.strict || function.strict {
            options.extend(quote!(.strict(true)));
        }
        if let Some(n) = marker.warn_after.or(function.warn_after) {
            options.extend(quote!(.warn_after_growing(#n)));
        }
        if let Some(n) = marker.every.or(function.every) {
            options.extend(quote!(.empty_cache_every(#n)));
        }
        if let Some(output) = marker.warnings.as_ref().or(function.warnings.as_ref()) {
            options.extend(quote!(.warnings(#krate::__private::WarningOutput::#output)));
        }
        let guard = Ident::new("__vramguard_scope", Span::mixed_site());
        syn::parse_quote! {
            let #guard = #krate::__private::BatchScope::enter_with(#label, #options);
        }
    }
}

impl VisitMut for Scoper<'_> {
    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
    fn visit_expr_const_mut(&mut self, _: &mut syn::ExprConst) {}

    fn visit_expr_mut(&mut self, expr: &mut Expr) {
        // Inner loops first: the outer body's drop insertion then sees their final form.
        visit_mut::visit_expr_mut(self, expr);
        if matches!(expr, Expr::ForLoop(_) | Expr::While(_) | Expr::Loop(_)) {
            if let Some(facts) = self.loops.next() {
                self.scope_loop(expr, facts);
            }
        }
    }
}
