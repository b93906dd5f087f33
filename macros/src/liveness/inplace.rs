//! In place at last use: inside the copy of a statement into which a binding `x` was moved (see
//! `rewrite::wrap`), a call of a listed method on `x` gets a receiver that lets `x`'s type
//! choose a consuming form:
//!
//! ```text
//! x.gelu()              →  __VgDying(x).gelu_receiver().gelu()
//! x.broadcast_add(&b)   →  __VgDying(x).broadcast_add_receiver().broadcast_add(&b)
//! x.mapv(f)             →  __VgDying(x).mapv_receiver().mapv(f)
//! ```
//!
//! `__private::Dying<T>` has inherent `*_receiver` methods only for types with consuming forms
//! (vramguard's `Tensor`, an owned ndarray array's `mapv`), whose receiver is a wrapper with
//! methods of the same names and parameters; a fallback trait, for every `T`, gives the value
//! itself, whose own method then runs as written, by value, `&self` or `&mut self`. The method,
//! its arguments and their tokens stay the user's: a closure argument gets its parameter types
//! from the method as before, and a mistake in the call is reported at the user's code with the
//! same text as in the statement's other copy, so rustc shows it once.
//!
//! Rewritten only where nothing else can be affected: `x` is mentioned exactly once in the
//! statement (as that receiver), the method name and argument count are in [`METHODS`], no
//! turbofish, and the call is not inside a closure, a loop, an async block or a macro (moving
//! `x` there would change the closure's kind or move it once per iteration).

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::punctuated::Punctuated;
use syn::visit_mut::{self, VisitMut};
use syn::{Expr, Ident};

/// The methods with a consuming form, by the number of arguments. Calls with another count
/// are left alone.
pub(super) const METHODS: &[(&str, usize)] = &[
    ("relu", 0),
    ("gelu", 0),
    ("tanh", 0),
    ("sigmoid", 0),
    ("exp", 0),
    ("log", 0),
    ("add", 1),
    ("sub", 1),
    ("mul", 1),
    ("div", 1),
    ("broadcast_add", 1),
    ("broadcast_sub", 1),
    ("broadcast_mul", 1),
    ("broadcast_div", 1),
    ("add_scalar", 1),
    ("mul_scalar", 1),
    ("softmax", 1),
    ("affine", 2),
    ("layer_norm", 3),
];

/// ndarray's `mapv`: listed for any one argument (its receiver is an owned array's).
const MAPV: &str = "mapv";

/// Rewrites the calls of listed methods on the `moved` bindings (name, declared `mut`) in
/// `expr`. Returns how many calls were rewritten.
pub(super) fn rewrite(expr: &mut Expr, moved: &[(Ident, bool)]) -> usize {
    let mut once: Vec<Ident> = Vec::new();
    for (ident, _) in moved {
        if mentions(expr.to_token_stream(), ident) == 1 {
            once.push(ident.clone());
        }
    }
    if once.is_empty() {
        return 0;
    }
    let mut visitor = Calls {
        targets: once,
        rewritten: 0,
    };
    visitor.visit_expr_mut(expr);
    visitor.rewritten
}

/// Mentions of `ident` anywhere in `tokens`, macro arguments included.
fn mentions(tokens: TokenStream, ident: &Ident) -> usize {
    tokens
        .into_iter()
        .map(|tree| match tree {
            TokenTree::Ident(i) => usize::from(i == *ident),
            TokenTree::Group(g) => mentions(g.stream(), ident),
            _ => 0,
        })
        .sum()
}

struct Calls {
    targets: Vec<Ident>,
    rewritten: usize,
}

impl Calls {
    /// The receiver, as written, if it names a target on its own.
    fn target(&self, receiver: &Expr) -> Option<Ident> {
        let Expr::Path(path) = receiver else {
            return None;
        };
        if path.qself.is_some() || !path.attrs.is_empty() {
            return None;
        }
        let ident = path.path.get_ident()?;
        self.targets.contains(ident).then(|| ident.clone())
    }
}

impl VisitMut for Calls {
    fn visit_expr_mut(&mut self, expr: &mut Expr) {
        match expr {
            // Moving the binding in there would change what the code is, not just when a
            // buffer is written.
            Expr::Closure(_)
            | Expr::Async(_)
            | Expr::ForLoop(_)
            | Expr::While(_)
            | Expr::Loop(_)
            | Expr::Macro(_) => return,
            Expr::MethodCall(call) if call.turbofish.is_none() && call.attrs.is_empty() => {
                let name = call.method.to_string();
                let listed = name == MAPV && call.args.len() == 1
                    || METHODS
                        .iter()
                        .any(|&(m, arity)| m == name && arity == call.args.len());
                if listed {
                    if let Some(target) = self.target(&call.receiver) {
                        self.rewritten += 1;
                        // Arguments may hold calls on other targets.
                        for arg in call.args.iter_mut() {
                            self.visit_expr_mut(arg);
                        }
                        let placeholder = Expr::Verbatim(TokenStream::new());
                        let Expr::MethodCall(call) = std::mem::replace(expr, placeholder) else {
                            return;
                        };
                        *expr = consuming_call(call, target);
                        return;
                    }
                }
            }
            _ => {}
        }
        visit_mut::visit_expr_mut(self, expr);
    }

    fn visit_item_mut(&mut self, _item: &mut syn::Item) {}
}

/// `__VgDying(x).NAME_receiver().NAME(args..)`: only the receiver changes. The tokens added
/// carry the receiver's own span (location and hygiene), so the call as a whole spans what the
/// user wrote, and a mistake in it reads exactly as in the statement's other copy: rustc shows
/// the two identical diagnostics once.
fn consuming_call(call: syn::ExprMethodCall, target: Ident) -> Expr {
    let span = target.span();
    let dying = Expr::Call(syn::ExprCall {
        attrs: Vec::new(),
        func: Box::new(path_expr(Ident::new(super::emit::DYING, span))),
        paren_token: syn::token::Paren(span),
        args: std::iter::once(path_expr(target)).collect(),
    });
    let receiver = Expr::MethodCall(syn::ExprMethodCall {
        attrs: Vec::new(),
        receiver: Box::new(dying),
        dot_token: syn::Token![.](span),
        method: Ident::new(&format!("{}_receiver", call.method), span),
        turbofish: None,
        paren_token: syn::token::Paren(span),
        args: Punctuated::new(),
    });
    Expr::MethodCall(syn::ExprMethodCall {
        receiver: Box::new(receiver),
        ..call
    })
}

fn path_expr(ident: Ident) -> Expr {
    super::emit::ident(ident)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proc_macro2::Span;
    use quote::quote;

    fn rewritten(expr: TokenStream, moved: &[&str]) -> (String, usize) {
        let mut expr: Expr = syn::parse2(expr).expect("test input parses");
        let moved: Vec<(Ident, bool)> = moved
            .iter()
            .map(|m| (Ident::new(m, Span::call_site()), false))
            .collect();
        let count = rewrite(&mut expr, &moved);
        (expr.to_token_stream().to_string(), count)
    }

    #[test]
    fn listed_calls_on_a_moved_receiver_take_the_consuming_path() {
        let (text, n) = rewritten(quote!(x.gelu()?), &["x"]);
        assert_eq!(n, 1);
        assert_eq!(text, "__VgDying (x) . gelu_receiver () . gelu () ?");
        let (text, n) = rewritten(quote!(h.broadcast_add(&self.b)?), &["h"]);
        assert_eq!(n, 1);
        assert_eq!(
            text,
            "__VgDying (h) . broadcast_add_receiver () . broadcast_add (& self . b) ?"
        );
        let (text, n) = rewritten(quote!(a.mapv(|v| v * 2.0)), &["a"]);
        assert_eq!(n, 1);
        assert!(
            text.contains("__VgDying (a) . mapv_receiver () . mapv (| v | v * 2.0)"),
            "{text}"
        );
    }

    #[test]
    fn other_calls_and_other_mentions_are_left_alone() {
        for (input, moved) in [
            (quote!(x.add(&x)?), "x"),      // mentioned twice
            (quote!(x.gelu_fast()?), "x"),  // not listed
            (quote!(x.softmax()?), "x"),    // another argument count
            (quote!(x.gelu::<f32>()), "x"), // turbofish
            (quote!(y.gelu()?), "x"),       // not moved in
            (quote!(f(|| x.gelu())), "x"),  // inside a closure
            (
                quote!(for _ in 0..2 {
                    x.gelu();
                }),
                "x",
            ),
            (quote!(m!(x.gelu())), "x"), // inside a macro
            (quote!(x.0.gelu()), "x"),   // a field, not the binding
        ] {
            let (text, n) = rewritten(input, &[moved]);
            assert_eq!(n, 0, "{text}");
            assert!(!text.contains("__VgDying"), "{text}");
        }
    }
}
