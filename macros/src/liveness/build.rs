//! The small pieces of generated code, built as syntax trees rather than parsed from tokens:
//! the transform emits thousands of them in a large crate, and syn's parser would be most of
//! the macro's own time (which runs unoptimized in a user's debug build).
//!
//! Every token carries the span of the user's statement, as `quote_spanned!` would give it.

use proc_macro2::{Ident, Span};
use syn::punctuated::Punctuated;
use syn::{Expr, Stmt};

/// `if (&&&krate::__private::Probe::of(&x)).__vg_releasable() { krate::__private::release(x); }`
pub(super) fn release(krate: &syn::Path, target: Ident, span: Span) -> Stmt {
    let condition = probe(krate, target.clone(), "__vg_releasable", span);
    let call = call(
        private(krate, &["release"], span),
        vec![ident(target)],
        span,
    );
    let body = syn::Block {
        brace_token: syn::token::Brace(span),
        stmts: vec![Stmt::Expr(call, Some(syn::Token![;](span)))],
    };
    Stmt::Expr(
        Expr::If(syn::ExprIf {
            attrs: Vec::new(),
            if_token: syn::Token![if](span),
            cond: Box::new(condition),
            then_branch: body,
            else_branch: None,
        }),
        None,
    )
}

/// `(&&&krate::__private::Probe::of(&x)).question()`: answered from `x`'s type.
pub(super) fn probe(krate: &syn::Path, target: Ident, question: &str, span: Span) -> Expr {
    let of = call(
        private(krate, &["Probe", "of"], span),
        vec![reference(ident(target), span)],
        span,
    );
    let mut receiver = of;
    for _ in 0..3 {
        receiver = reference(receiver, span);
    }
    Expr::MethodCall(syn::ExprMethodCall {
        attrs: Vec::new(),
        receiver: Box::new(Expr::Paren(syn::ExprParen {
            attrs: Vec::new(),
            paren_token: syn::token::Paren(span),
            expr: Box::new(receiver),
        })),
        dot_token: syn::Token![.](span),
        method: Ident::new(question, span),
        turbofish: None,
        paren_token: syn::token::Paren(span),
        args: Punctuated::new(),
    })
}

/// `left && right`.
pub(super) fn and(left: Expr, right: Expr, span: Span) -> Expr {
    Expr::Binary(syn::ExprBinary {
        attrs: Vec::new(),
        left: Box::new(left),
        op: syn::BinOp::And(syn::Token![&&](span)),
        right: Box::new(right),
    })
}

/// `#[allow(unused_mut, unused_variables)] let [mut] x = krate::__private::last_use(x);`
pub(super) fn rebind(krate: &syn::Path, target: Ident, mutable: bool, span: Span) -> Stmt {
    let value = call(
        private(krate, &["last_use"], span),
        vec![ident(target.clone())],
        span,
    );
    let allow: syn::Attribute =
        syn::parse_quote_spanned!(span=> #[allow(unused_mut, unused_variables)]);
    Stmt::Local(syn::Local {
        attrs: vec![allow],
        let_token: syn::Token![let](span),
        modifiers: syn::LocalModifiers::default(),
        pat: syn::Pat::Ident(syn::PatIdent {
            attrs: Vec::new(),
            by_ref: None,
            mutability: mutable.then(|| syn::Token![mut](span)),
            ident: target,
            subpat: None,
        }),
        init: Some(syn::LocalInit {
            eq_token: syn::Token![=](span),
            expr: Box::new(value),
            diverge: None,
        }),
        semi_token: syn::Token![;](span),
    })
}

/// `krate::__private::a::b`, every segment spanned at `span` (the facade path keeps its own).
fn private(krate: &syn::Path, names: &[&str], span: Span) -> Expr {
    let mut path = krate.clone();
    path.segments.push(Ident::new("__private", span).into());
    for name in names {
        path.segments.push(Ident::new(name, span).into());
    }
    Expr::Path(syn::ExprPath {
        attrs: Vec::new(),
        qself: None,
        path,
    })
}

fn call(func: Expr, args: Vec<Expr>, span: Span) -> Expr {
    Expr::Call(syn::ExprCall {
        attrs: Vec::new(),
        func: Box::new(func),
        paren_token: syn::token::Paren(span),
        args: args.into_iter().collect(),
    })
}

fn reference(expr: Expr, span: Span) -> Expr {
    Expr::Reference(syn::ExprReference {
        attrs: Vec::new(),
        and_token: syn::Token![&](span),
        mutability: None,
        expr: Box::new(expr),
    })
}

/// `let name: ty = value;` (without the annotation when `ty` is `None`).
pub(super) fn local(name: Ident, ty: Option<syn::Type>, value: Expr, span: Span) -> Stmt {
    let binding = syn::Pat::Ident(syn::PatIdent {
        attrs: Vec::new(),
        by_ref: None,
        mutability: None,
        ident: name,
        subpat: None,
    });
    let pat = match ty {
        Some(ty) => syn::Pat::Type(syn::PatType {
            attrs: Vec::new(),
            pat: Box::new(binding),
            colon_token: syn::Token![:](span),
            ty: Box::new(ty),
        }),
        None => binding,
    };
    Stmt::Local(syn::Local {
        attrs: Vec::new(),
        let_token: syn::Token![let](span),
        modifiers: syn::LocalModifiers::default(),
        pat,
        init: Some(syn::LocalInit {
            eq_token: syn::Token![=](span),
            expr: Box::new(value),
            diverge: None,
        }),
        semi_token: syn::Token![;](span),
    })
}

/// A path expression naming one local.
pub(super) fn ident(ident: Ident) -> Expr {
    Expr::Path(syn::ExprPath {
        attrs: Vec::new(),
        qself: None,
        path: ident.into(),
    })
}
