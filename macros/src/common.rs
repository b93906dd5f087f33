//! Helpers shared by the attribute macros.

use proc_macro2::{TokenStream, TokenTree};
use quote::quote;
use syn::{Attribute, Expr};

/// The default path of the facade crate in generated code.
pub(crate) fn default_crate_path() -> syn::Path {
    syn::parse_quote!(::vramguard)
}

/// Emits the original item followed by the errors, so that IDEs keep seeing the item
/// (the way `tokio::main` does).
pub(crate) fn item_with_errors(item: TokenStream, errors: syn::Error) -> TokenStream {
    let errors = errors.to_compile_error();
    quote! { #item #errors }
}

/// Calls `each` on every identifier of the syntax tree that `walk` visits (macro arguments and
/// unparsed tokens included) until it returns `false`. Walks the tree instead of printing it to
/// tokens: the macro runs unoptimized in a user's debug build, where printing a whole body to
/// look for names was a large part of its time.
pub(crate) fn visit_idents(
    each: &mut dyn FnMut(&syn::Ident) -> bool,
    walk: impl FnOnce(&mut IdentVisitor<'_>),
) {
    walk(&mut IdentVisitor { each, done: false });
}

/// The visitor of [`visit_idents`].
pub(crate) struct IdentVisitor<'f> {
    each: &'f mut dyn FnMut(&syn::Ident) -> bool,
    done: bool,
}

impl IdentVisitor<'_> {
    fn ident(&mut self, ident: &syn::Ident) {
        if !self.done {
            self.done = !(self.each)(ident);
        }
    }

    fn tokens(&mut self, tokens: TokenStream) {
        for tree in tokens {
            if self.done {
                return;
            }
            match tree {
                TokenTree::Ident(ident) => self.ident(&ident),
                TokenTree::Group(group) => self.tokens(group.stream()),
                _ => {}
            }
        }
    }
}

impl<'ast> syn::visit::Visit<'ast> for IdentVisitor<'_> {
    fn visit_ident(&mut self, ident: &'ast syn::Ident) {
        self.ident(ident);
    }
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        syn::visit::visit_macro(self, mac);
        self.tokens(mac.tokens.clone());
    }
    fn visit_expr(&mut self, expr: &'ast syn::Expr) {
        match expr {
            syn::Expr::Verbatim(tokens) => self.tokens(tokens.clone()),
            _ => syn::visit::visit_expr(self, expr),
        }
    }
}

/// The attributes of an expression, if its kind has any (shared access).
pub(crate) fn expr_attrs(expr: &Expr) -> Option<&Vec<Attribute>> {
    macro_rules! attrs {
        ($($variant:ident),*) => {
            match expr {
                $(Expr::$variant(e) => Some(&e.attrs),)*
                _ => None,
            }
        };
    }
    attrs!(
        Array, Assign, Async, Await, Binary, Block, Break, Call, Cast, Closure, Const, Continue,
        Field, ForLoop, Group, If, Index, Infer, Let, Lit, Loop, Macro, Match, MethodCall, Paren,
        Path, Range, RawAddr, Reference, Repeat, Return, Struct, Try, TryBlock, Tuple, Unary,
        Unsafe, While, Yield
    )
}

/// The attributes of an expression, if its kind has any.
pub(crate) fn expr_attrs_mut(expr: &mut Expr) -> Option<&mut Vec<Attribute>> {
    macro_rules! attrs {
        ($($variant:ident),*) => {
            match expr {
                $(Expr::$variant(e) => Some(&mut e.attrs),)*
                _ => None,
            }
        };
    }
    attrs!(
        Array, Assign, Async, Await, Binary, Block, Break, Call, Cast, Closure, Const, Continue,
        Field, ForLoop, Group, If, Index, Infer, Let, Lit, Loop, Macro, Match, MethodCall, Paren,
        Path, Range, RawAddr, Reference, Repeat, Return, Struct, Try, TryBlock, Tuple, Unary,
        Unsafe, While, Yield
    )
}
