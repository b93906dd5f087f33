//! `#[batch_scope]`: every loop of a function (or the loops marked `#[batch_scope]`) becomes a
//! per-iteration scope.
//!
//! Expansion of one scoped loop (names hygienic, paths absolute through `crate`):
//!
//! ```text
//! for batch in loader {
//!     let __vramguard_scope = ::vramguard::__private::BatchScope::enter_with(
//!         concat!(module_path!(), "::", "train", ":", line!()),
//!         ::vramguard::__private::ScopeOptions::new(),
//!     );
//!     { /* the body, with drop-at-last-use inserted */ };
//! }
//! ```
//!
//! The guard is the first local of the iteration, so it is dropped last: after the body's
//! locals and, because the body is a statement of its own, after the temporaries of its tail
//! expression. Every exit (end of body, `continue`, `break`, `?`, `return`, a panic) drops it.

mod options;

use crate::common::{default_crate_path, item_with_errors};
use crate::lints::{self, LintContext};
use crate::liveness::{self, ReleaseOptions};
use options::ScopeArgs;
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::visit::Visit;
use syn::visit_mut::{self, VisitMut};
use syn::{Attribute, Block, Expr, Ident, ItemFn, Stmt};

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let fn_args = match options::parse(args, false) {
        Ok(args) => args,
        Err(err) => return item_with_errors(strip_markers(item), err),
    };
    let mut func: ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(_) => return item_with_errors(item.clone(), not_a_function(item)),
    };
    if let Some(constness) = &func.sig.constness {
        let err = syn::Error::new(
            constness.span,
            "#[batch_scope] cannot be used on a `const fn`: a batch scope is a runtime guard; \
             remove `const` or the attribute",
        );
        return item_with_errors(strip_markers(func.into_token_stream()), err);
    }
    match rewrite(&mut func, &fn_args) {
        Ok(extra) => quote! { #func #extra },
        Err(err) => item_with_errors(strip_markers(item), err),
    }
}

/// Lints, then scopes the loops. Returns tokens to emit beside the function.
fn rewrite(func: &mut ItemFn, fn_args: &ScopeArgs) -> syn::Result<TokenStream> {
    let krate = fn_args.krate.clone().unwrap_or_else(default_crate_path);
    let mut scan = LoopScan::default();
    scan.visit_block(&func.block);
    if let Some(err) = scan.errors {
        return Err(err);
    }
    let scoped = if scan.marked > 0 {
        scan.marked
    } else {
        scan.loops
    };
    if scoped == 0 {
        return Err(syn::Error::new(
            func.sig.ident.span(),
            format!(
                "#[batch_scope] found no `for`, `while` or `loop` in `{}`; put it on the function \
                 that runs the training or evaluation loop",
                func.sig.ident
            ),
        ));
    }
    if let (Some(label), true) = (&fn_args.label, scoped > 1) {
        return Err(syn::Error::new(
            label.span(),
            format!(
                "`label` names one loop, but `{}` has {scoped} scoped loops; put \
                 `#[batch_scope(label = \"…\")]` markers on the loops instead",
                func.sig.ident
            ),
        ));
    }

    let fn_name = func.sig.ident.clone();
    let lint_output = {
        let ctx = LintContext {
            inference: false,
            krate: &krate,
            fn_name: &fn_name,
        };
        lints::check_fn(&func.attrs, &mut func.block, &ctx)
    };

    let mut scoper = Scoper {
        fn_args,
        krate: &krate,
        fn_name: fn_name.to_string(),
        only_marked: scan.marked > 0,
        errors: None,
    };
    scoper.visit_block_mut(&mut func.block);
    let mut extra = lint_output.warnings.clone();
    extra.extend(lint_output.errors_to_tokens());
    if let Some(err) = scoper.errors {
        extra.extend(err.to_compile_error());
    }
    Ok(extra)
}

fn not_a_function(item: TokenStream) -> syn::Error {
    let (span, kind) = match syn::parse2::<syn::Item>(item) {
        Ok(syn::Item::Struct(s)) => (s.ident.span(), "a struct"),
        Ok(syn::Item::Enum(e)) => (e.ident.span(), "an enum"),
        Ok(syn::Item::Impl(i)) => (i.impl_token.span, "an impl block (put it on the method)"),
        Ok(syn::Item::Trait(t)) => (t.ident.span(), "a trait"),
        Ok(syn::Item::Mod(m)) => (m.ident.span(), "a module"),
        Ok(syn::Item::Static(s)) => (s.ident.span(), "a static"),
        Ok(syn::Item::Const(c)) => (c.ident.span(), "a const"),
        Ok(syn::Item::Type(t)) => (t.ident.span(), "a type alias"),
        _ => (Span::call_site(), "this item"),
    };
    syn::Error::new(
        span,
        format!(
            "#[batch_scope] goes on a function (or method) whose loops should free their \
             intermediates each iteration; it cannot be used on {kind}"
        ),
    )
}

/// Whether an attribute is a `#[batch_scope]` loop marker (under any path).
fn is_marker(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "batch_scope")
}

fn loop_attrs(expr: &Expr) -> Option<&Vec<Attribute>> {
    match expr {
        Expr::ForLoop(e) => Some(&e.attrs),
        Expr::While(e) => Some(&e.attrs),
        Expr::Loop(e) => Some(&e.attrs),
        _ => None,
    }
}

fn loop_attrs_mut(expr: &mut Expr) -> Option<&mut Vec<Attribute>> {
    match expr {
        Expr::ForLoop(e) => Some(&mut e.attrs),
        Expr::While(e) => Some(&mut e.attrs),
        Expr::Loop(e) => Some(&mut e.attrs),
        _ => None,
    }
}

fn combine(errors: &mut Option<syn::Error>, err: syn::Error) {
    match errors {
        Some(all) => all.combine(err),
        None => *errors = Some(err),
    }
}

/// Counts loops and markers; rejects markers that are not on loops and bad marker options.
#[derive(Default)]
struct LoopScan {
    loops: usize,
    marked: usize,
    errors: Option<syn::Error>,
}

impl LoopScan {
    fn misplaced(&mut self, attrs: &[Attribute]) {
        for attr in attrs.iter().filter(|a| is_marker(a)) {
            let span = attr
                .path()
                .segments
                .last()
                .map_or_else(Span::call_site, |s| s.ident.span());
            combine(
                &mut self.errors,
                syn::Error::new(
                    span,
                    "the #[batch_scope] marker goes on a `for`, `while` or `loop`",
                ),
            );
        }
    }
}

impl<'ast> Visit<'ast> for LoopScan {
    fn visit_item(&mut self, _: &'ast syn::Item) {}
    // Loops in `const { .. }` run at compile time: nothing to scope.
    fn visit_expr_const(&mut self, _: &'ast syn::ExprConst) {}

    fn visit_local(&mut self, local: &'ast syn::Local) {
        self.misplaced(&local.attrs);
        syn::visit::visit_local(self, local);
    }

    fn visit_stmt_macro(&mut self, mac: &'ast syn::StmtMacro) {
        self.misplaced(&mac.attrs);
    }

    fn visit_expr(&mut self, expr: &'ast Expr) {
        if let Some(attrs) = loop_attrs(expr) {
            self.loops += 1;
            let markers: Vec<&Attribute> = attrs.iter().filter(|a| is_marker(a)).collect();
            if !markers.is_empty() {
                self.marked += 1;
            }
            for marker in markers.iter().skip(1) {
                combine(
                    &mut self.errors,
                    syn::Error::new(
                        marker
                            .path()
                            .segments
                            .last()
                            .map_or_else(Span::call_site, |s| s.ident.span()),
                        "this loop already has a #[batch_scope] marker",
                    ),
                );
            }
            if let Some(marker) = markers.first() {
                if let Err(err) = marker_args(marker) {
                    combine(&mut self.errors, err);
                }
            }
        } else if let Some(attrs) = crate::common::expr_attrs(expr) {
            self.misplaced(attrs);
        }
        syn::visit::visit_expr(self, expr);
    }
}

fn marker_args(marker: &Attribute) -> syn::Result<ScopeArgs> {
    match &marker.meta {
        syn::Meta::Path(_) => Ok(ScopeArgs::default()),
        syn::Meta::List(list) => options::parse(list.tokens.clone(), true),
        syn::Meta::NameValue(nv) => Err(syn::Error::new(
            nv.eq_token.span,
            "write the marker as #[batch_scope] or #[batch_scope(label = \"…\")]",
        )),
    }
}

/// Finds `.await` in a loop body (not inside closures, async blocks or items).
#[derive(Default)]
struct AwaitScan {
    found: Option<Span>,
}

impl<'ast> Visit<'ast> for AwaitScan {
    fn visit_item(&mut self, _: &'ast syn::Item) {}
    fn visit_expr_closure(&mut self, _: &'ast syn::ExprClosure) {}
    fn visit_expr_async(&mut self, _: &'ast syn::ExprAsync) {}
    fn visit_expr_await(&mut self, e: &'ast syn::ExprAwait) {
        if self.found.is_none() {
            self.found = Some(e.await_token.span);
        }
    }
    // Macro arguments are tokens: `println!("{}", f().await)` awaits too.
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        if self.found.is_none() {
            self.found = await_in_tokens(mac.tokens.clone());
        }
    }
}

/// The span of a `.await` in `tokens`, outside `async` blocks.
fn await_in_tokens(tokens: TokenStream) -> Option<Span> {
    use proc_macro2::TokenTree;
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut skip_next_group = false;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            TokenTree::Ident(ident) if ident == "async" => skip_next_group = true,
            TokenTree::Ident(ident) if ident == "move" => {}
            TokenTree::Ident(ident) if ident == "await" => {
                let after_dot =
                    i > 0 && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == '.');
                if after_dot {
                    return Some(ident.span());
                }
                skip_next_group = false;
            }
            TokenTree::Group(group) => {
                if !std::mem::take(&mut skip_next_group) {
                    if let Some(span) = await_in_tokens(group.stream()) {
                        return Some(span);
                    }
                }
            }
            _ => skip_next_group = false,
        }
    }
    None
}

/// Strips `#[batch_scope]` markers (for the fallback output next to an error).
fn strip_markers(item: TokenStream) -> TokenStream {
    struct Strip;
    impl VisitMut for Strip {
        fn visit_expr_mut(&mut self, expr: &mut Expr) {
            if let Some(attrs) = crate::common::expr_attrs_mut(expr) {
                attrs.retain(|a| !is_marker(a));
            }
            visit_mut::visit_expr_mut(self, expr);
        }
        fn visit_local_mut(&mut self, local: &mut syn::Local) {
            local.attrs.retain(|a| !is_marker(a));
            visit_mut::visit_local_mut(self, local);
        }
        fn visit_stmt_macro_mut(&mut self, mac: &mut syn::StmtMacro) {
            mac.attrs.retain(|a| !is_marker(a));
        }
    }
    match syn::parse2::<ItemFn>(item.clone()) {
        Ok(mut func) => {
            Strip.visit_block_mut(&mut func.block);
            func.into_token_stream()
        }
        Err(_) => item,
    }
}

/// Rewrites scoped loops.
struct Scoper<'a> {
    fn_args: &'a ScopeArgs,
    krate: &'a syn::Path,
    fn_name: String,
    only_marked: bool,
    errors: Option<syn::Error>,
}

impl Scoper<'_> {
    fn scope_loop(&mut self, expr: &mut Expr) {
        let Some(attrs) = loop_attrs_mut(expr) else {
            return;
        };
        let marker = attrs.iter().position(is_marker).map(|i| attrs.remove(i));
        attrs.retain(|a| !is_marker(a));
        if self.only_marked && marker.is_none() {
            return;
        }
        let marker_args = match marker.as_ref().map(marker_args).transpose() {
            Ok(args) => args.unwrap_or_default(),
            Err(_) => return, // reported by the scan
        };
        let (keyword_span, body, params) = match expr {
            Expr::ForLoop(e) => (
                e.for_token.span,
                &mut e.body,
                liveness::pattern_params(&e.pat),
            ),
            Expr::While(e) => {
                let params = match &*e.cond {
                    Expr::Let(cond) => liveness::pattern_params(&cond.pat),
                    _ => Vec::new(),
                };
                (e.while_token.span, &mut e.body, params)
            }
            Expr::Loop(e) => (e.loop_token.span, &mut e.body, Vec::new()),
            _ => return,
        };
        let mut awaits = AwaitScan::default();
        awaits.visit_block(body);
        if let Some(span) = awaits.found {
            combine(
                &mut self.errors,
                syn::Error::new(
                    span,
                    "#[batch_scope] cannot scope a loop body that awaits: the scope belongs to \
                     the thread, and the task may move to another thread at `.await`; mark only \
                     the loops without `.await`",
                ),
            );
            return;
        }
        liveness::insert_releases(body, &params, &ReleaseOptions::new(self.krate.clone()));
        let guard = self.guard_statement(&marker_args, keyword_span);
        let user_body = Block {
            brace_token: Default::default(),
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

    fn guard_statement(&self, marker: &ScopeArgs, keyword_span: Span) -> Stmt {
        let krate = self.krate;
        let label = match marker.label.as_ref().or(self.fn_args.label.as_ref()) {
            Some(label) => label.to_token_stream(),
            None => {
                let fn_name = &self.fn_name;
                let line = quote_spanned!(keyword_span=> ::core::line!());
                quote!(::core::concat!(::core::module_path!(), "::", #fn_name, ":", #line))
            }
        };
        let mut options = quote!(#krate::__private::ScopeOptions::new());
        if marker.strict || self.fn_args.strict {
            options.extend(quote!(.strict(true)));
        }
        if let Some(n) = marker.warn_after.or(self.fn_args.warn_after) {
            options.extend(quote!(.warn_after_growing(#n)));
        }
        if let Some(n) = marker.every.or(self.fn_args.every) {
            options.extend(quote!(.empty_cache_every(#n)));
        }
        if let Some(output) = marker.warnings.as_ref().or(self.fn_args.warnings.as_ref()) {
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
        if loop_attrs(expr).is_some() {
            self.scope_loop(expr);
        }
    }
}

#[cfg(test)]
mod tests;
