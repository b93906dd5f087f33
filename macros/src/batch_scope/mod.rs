//! `#[batch_scope]`: every loop of a function (or the loops marked `#[batch_scope]`) becomes a
//! per-iteration scope. Parse → validate → expand, one file each.
//!
//! Expansion of one scoped loop (names hygienic, paths absolute through `crate`):
//!
//! ```text
//! for batch in loader {
//!     let __vramguard_scope = ::vramguard::__private::BatchScope::enter_with(
//!         concat!(module_path!(), "::", "train", ":", line!()),
//!         ::vramguard::__private::ScopeOptions::new(),
//!     );
//!     { /* the body, with drops at last use inserted */ };
//! }
//! ```
//!
//! The guard is the first local of the iteration, so it is dropped last: after the body's
//! locals and, because the body is a statement of its own, after the temporaries of its tail
//! expression. Every exit (end of body, `continue`, `break`, `?`, `return`, a panic) drops it.

mod expand;
mod parse;
mod validate;

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::visit_mut::{self, VisitMut};
use syn::{Expr, ItemFn};

use crate::common::item_with_errors;
use parse::{is_marker, FnOptions};

/// Entry point of the attribute.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let options = match syn::parse2::<FnOptions>(args) {
        Ok(options) => options,
        Err(error) => return item_with_errors(strip_markers(item), error),
    };
    let target = match parse::target(item.clone()) {
        Ok(target) => target,
        Err(error) => return item_with_errors(strip_markers(item), error),
    };
    match validate::validate(target, &options) {
        Ok(function) => expand::expand(function, &options),
        Err(error) => item_with_errors(strip_markers(item), error),
    }
}

/// Strips `#[batch_scope]` markers (for the original item emitted next to an error).
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

#[cfg(test)]
mod tests;
