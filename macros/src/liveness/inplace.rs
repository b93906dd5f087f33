//! In place at last use: inside the copy of a statement into which a binding `x` was moved (see
//! `rewrite::wrap`), a call of a listed method on `x` becomes a call that lets `x`'s type choose
//! a consuming form:
//!
//! ```text
//! x.gelu()              →  __VgDying(x).gelu_at_last_use(|v| v.gelu())
//! x.broadcast_add(&b)   →  __VgDying(x).broadcast_add_at_last_use(|v, a0| v.broadcast_add(a0), &b)
//! x.mapv(f)             →  __VgDying(x).mapv_receiver().mapv(f)
//! ```
//!
//! `__private::Dying<T>` has inherent `*_at_last_use` methods only for types with consuming
//! forms (vramguard's `Tensor`), and a fallback trait, for every `T`, that calls the closure:
//! the original call. `mapv` stays a method call on a receiver (its argument is usually a
//! closure literal, whose parameter types only a `mapv` method can give): the fallback's
//! `mapv_receiver` is the value itself, whose own `mapv` then runs as written, by value,
//! `&self` or `&mut self`; an owned ndarray array's is a wrapper whose `mapv` has ndarray's
//! signature and maps in place only when that is unobservable (decided on the concrete types,
//! after type checking).
//!
//! Rewritten only where nothing else can be affected: `x` is mentioned exactly once in the
//! statement (as that receiver), the method name and argument count are in [`METHODS`], no
//! turbofish, and the call is not inside a closure, a loop, an async block or a macro (moving
//! `x` there would change the closure's kind or move it once per iteration).

use proc_macro2::{Span, TokenStream, TokenTree};
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

/// The method that keeps its name on `Dying` (see the module docs).
const MAPV: &str = "mapv";

/// Rewrites the calls of listed methods on the `moved` bindings (name, declared `mut`) in
/// `expr`. Returns how many calls were rewritten.
pub(super) fn rewrite(expr: &mut Expr, moved: &[(Ident, bool)]) -> usize {
    let mut once: Vec<(Ident, bool)> = Vec::new();
    for (ident, mutable) in moved {
        if mentions(expr.to_token_stream(), ident) == 1 {
            once.push((ident.clone(), *mutable));
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
    targets: Vec<(Ident, bool)>,
    rewritten: usize,
}

impl Calls {
    /// The target that `receiver` names, if it is one on its own.
    fn target(&self, receiver: &Expr) -> Option<(Ident, bool)> {
        let Expr::Path(path) = receiver else {
            return None;
        };
        if path.qself.is_some() || !path.attrs.is_empty() {
            return None;
        }
        let ident = path.path.get_ident()?;
        self.targets.iter().find(|(t, _)| t == ident).cloned()
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
                    if let Some((target, mutable)) = self.target(&call.receiver) {
                        self.rewritten += 1;
                        // Arguments may hold calls on other targets.
                        for arg in call.args.iter_mut() {
                            self.visit_expr_mut(arg);
                        }
                        let placeholder = Expr::Verbatim(TokenStream::new());
                        let Expr::MethodCall(call) = std::mem::replace(expr, placeholder) else {
                            return;
                        };
                        *expr = consuming_call(call, target, mutable);
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

/// `__VgDying(x).NAME_at_last_use(|v, a0, ..| v.NAME(a0, ..), args..)`, or for `mapv`
/// `__VgDying(x).mapv_receiver().mapv(args)`.
fn consuming_call(call: syn::ExprMethodCall, target: Ident, mutable: bool) -> Expr {
    let span = call.method.span();
    let dying = Expr::Call(syn::ExprCall {
        attrs: Vec::new(),
        func: Box::new(path_expr(Ident::new(
            super::emit::DYING,
            Span::call_site().located_at(span),
        ))),
        paren_token: syn::token::Paren(span),
        args: std::iter::once(path_expr(target)).collect(),
    });
    if call.method == MAPV {
        let receiver = Expr::MethodCall(syn::ExprMethodCall {
            attrs: Vec::new(),
            receiver: Box::new(dying),
            dot_token: call.dot_token,
            method: Ident::new("mapv_receiver", span),
            turbofish: None,
            paren_token: call.paren_token,
            args: Punctuated::new(),
        });
        return Expr::MethodCall(syn::ExprMethodCall {
            receiver: Box::new(receiver),
            ..call
        });
    }
    let value = Ident::new("__vg_dying", Span::mixed_site().located_at(span));
    let arg_names: Vec<Ident> = (0..call.args.len())
        .map(|i| Ident::new(&format!("__vg_arg{i}"), Span::mixed_site().located_at(span)))
        .collect();
    let plain_call = Expr::MethodCall(syn::ExprMethodCall {
        attrs: Vec::new(),
        receiver: Box::new(path_expr(value.clone())),
        dot_token: call.dot_token,
        method: call.method.clone(),
        turbofish: None,
        paren_token: call.paren_token,
        args: arg_names.iter().cloned().map(path_expr).collect(),
    });
    // A `mut` binding may be the receiver of a `&mut self` method of the same name (a type
    // without a consuming form): the closure's value is rebound `mut`, as the binding was.
    let body = if mutable {
        let rebind = super::emit::rebind_mut(value.clone(), span);
        Expr::Block(syn::ExprBlock {
            attrs: Vec::new(),
            label: None,
            block: syn::Block {
                brace_token: syn::token::Brace(span),
                stmts: vec![rebind, syn::Stmt::Expr(plain_call, None)],
            },
        })
    } else {
        plain_call
    };
    let mut inputs: Punctuated<syn::Pat, syn::Token![,]> = Punctuated::new();
    for name in std::iter::once(&value).chain(&arg_names) {
        inputs.push(syn::Pat::Ident(syn::PatIdent {
            attrs: Vec::new(),
            by_ref: None,
            mutability: None,
            ident: name.clone(),
            subpat: None,
        }));
    }
    let plain = Expr::Closure(syn::ExprClosure {
        attrs: Vec::new(),
        lifetimes: None,
        modifiers: syn::ClosureModifiers::default(),
        constness: None,
        asyncness: None,
        capture: None,
        inputs_begin: syn::Token![|](span),
        inputs,
        inputs_end: syn::Token![|](span),
        output: syn::ReturnType::Default,
        body: Box::new(body),
    });
    let mut args: Punctuated<Expr, syn::Token![,]> = Punctuated::new();
    args.push(plain);
    args.extend(call.args);
    Expr::MethodCall(syn::ExprMethodCall {
        attrs: call.attrs,
        receiver: Box::new(dying),
        dot_token: call.dot_token,
        method: Ident::new(&format!("{}_at_last_use", call.method), span),
        turbofish: None,
        paren_token: call.paren_token,
        args,
    })
}

fn path_expr(ident: Ident) -> Expr {
    super::emit::ident(ident)
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert!(text.contains("__VgDying (x) . gelu_at_last_use"), "{text}");
        let (text, n) = rewritten(quote!(h.broadcast_add(&self.b)?), &["h"]);
        assert_eq!(n, 1);
        assert!(text.contains("broadcast_add_at_last_use"), "{text}");
        assert!(text.contains("& self . b"), "{text}");
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
