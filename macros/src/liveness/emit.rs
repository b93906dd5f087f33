//! The small pieces of generated code, built as syntax trees rather than parsed from tokens:
//! the transform emits thousands of them in a large crate, and syn's parser would be most of
//! the macro's own time (which runs unoptimized in a user's debug build).
//!
//! Every token carries the span of the user's statement, as `quote_spanned!` would give it.

use proc_macro2::{Ident, Span};
use syn::punctuated::Punctuated;
use syn::{Expr, Stmt};

/// The names under which a transformed block imports the helpers it calls (see [`imports`]):
/// one identifier per use instead of a four-segment path keeps the generated code small, and
/// the macro's output crosses the compiler's proc-macro bridge token by token.
const PROBE: &str = "__VgProbe";
const DROP: &str = "__vg_drop";
const LAST_USE: &str = "__vg_last_use";
/// `__private::Dying`, the receiver of a consuming call (see `inplace`).
pub(super) const DYING: &str = "__VgDying";

/// `use krate::__private::{…};` at the top of a transformed block: the probe's answering traits
/// (method resolution needs them in scope) and the helpers under their short names. Items of a
/// block are visible in all of it, nested blocks and closures included.
pub(super) fn imports(krate: &syn::Path) -> Stmt {
    let [probe, drop, last_use, dying] = [PROBE, DROP, LAST_USE, DYING].map(short_name);
    // Emitted as written: a `use` item needs no analysis after this point, and parsing it
    // back into a tree once per function was measurable in an unoptimized macro.
    Stmt::Item(syn::Item::Verbatim(quote::quote! {
        #[allow(unused_imports)]
        use #krate::__private::{
            CopyAtLastUse as _, KeepToScopeEnd as _, DroppableAtLastUse as _, PlainAtLastUse as _,
            Probe as #probe, drop_at_last_use as #drop, last_use as #last_use, Dying as #dying,
        };
    }))
}

/// `#[allow(lints…)]`, spanned at `span`, built as a tree (one per rewritten binding).
pub(super) fn allow(lints: &[&str], span: Span) -> syn::Attribute {
    let mut tokens = proc_macro2::TokenStream::new();
    for (index, lint) in lints.iter().enumerate() {
        if index > 0 {
            let mut comma = proc_macro2::Punct::new(',', proc_macro2::Spacing::Alone);
            comma.set_span(span);
            tokens.extend([proc_macro2::TokenTree::Punct(comma)]);
        }
        tokens.extend([proc_macro2::TokenTree::Ident(Ident::new(lint, span))]);
    }
    syn::Attribute {
        pound_token: syn::Token![#](span),
        style: syn::AttrStyle::Outer,
        bracket_token: syn::token::Bracket(span),
        meta: syn::Meta::List(syn::MetaList {
            path: Ident::new("allow", span).into(),
            delimiter: syn::MacroDelimiter::Paren(syn::token::Paren(span)),
            tokens,
        }),
    }
}

/// A helper's short name, resolved where the macro was invoked (so that it finds the block's
/// `use` from inside a `macro_rules!` expansion too).
fn short_name(name: &str) -> Ident {
    Ident::new(name, Span::call_site())
}

/// A helper's short name as a path expression, pointing at the user's statement.
fn helper(name: &str, span: Span) -> Expr {
    ident(Ident::new(name, Span::call_site().located_at(span)))
}

/// `if (&&&__VgProbe(&x)).__vg_droppable() { __vg_drop(x); }`
pub(super) fn drop_at_last_use(target: Ident, span: Span) -> Stmt {
    let condition = probe(target.clone(), "__vg_droppable", span);
    let call = call(helper(DROP, span), vec![ident(target)], span);
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

/// `(&&&__VgProbe(&x)).question()`: answered from `x`'s type.
pub(super) fn probe(target: Ident, question: &str, span: Span) -> Expr {
    let probe_path = helper(PROBE, span);
    let of = call(probe_path, vec![reference(ident(target), span)], span);
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

/// `#[allow(unused_mut, unused_variables)] let [mut] x = __vg_last_use(x);`
pub(super) fn rebind(target: Ident, mutable: bool, span: Span) -> Stmt {
    let value = call(helper(LAST_USE, span), vec![ident(target.clone())], span);
    let allow = allow(&["unused_mut", "unused_variables"], span);
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

/// The span of a statement's first token: what syn's `Spanned::span` returns on stable (where
/// spans cannot be joined), without printing the whole statement to tokens to find it.
pub(crate) fn first_span_of_stmt(stmt: &Stmt) -> proc_macro2::Span {
    match stmt {
        Stmt::Local(local) => match local.attrs.first() {
            Some(attr) => attr.pound_token.span,
            None => local.let_token.span,
        },
        Stmt::Expr(expr, _) => first_span(expr),
        Stmt::Macro(mac) => match mac.attrs.first() {
            Some(attr) => attr.pound_token.span,
            None => first_span_of_path(&mac.mac.path),
        },
        Stmt::Item(item) => syn::spanned::Spanned::span(item),
    }
}

/// The span of an expression's first token (see [`first_span_of_stmt`]).
pub(crate) fn first_span(expr: &Expr) -> proc_macro2::Span {
    if let Some(attr) = crate::common::expr_attrs(expr).and_then(|attrs| attrs.first()) {
        return attr.pound_token.span;
    }
    match expr {
        Expr::Path(path) => match &path.qself {
            Some(qself) => qself.lt_token.span,
            None => first_span_of_path(&path.path),
        },
        Expr::MethodCall(call) => first_span(&call.receiver),
        Expr::Call(call) => first_span(&call.func),
        Expr::Field(field) => first_span(&field.base),
        Expr::Index(index) => first_span(&index.expr),
        Expr::Try(t) => first_span(&t.expr),
        Expr::Await(a) => first_span(&a.base),
        Expr::Binary(b) => first_span(&b.left),
        Expr::Cast(c) => first_span(&c.expr),
        Expr::Assign(a) => first_span(&a.left),
        Expr::Range(r) => match &r.start {
            Some(start) => first_span(start),
            None => syn::spanned::Spanned::span(&r.limits),
        },
        Expr::Reference(r) => r.and_token.span,
        Expr::Paren(p) => p.paren_token.span.open(),
        Expr::Tuple(t) => t.paren_token.span.open(),
        Expr::Array(a) => a.bracket_token.span.open(),
        Expr::Block(b) => match &b.label {
            Some(label) => label.name.apostrophe,
            None => b.block.brace_token.span.open(),
        },
        Expr::If(i) => i.if_token.span,
        Expr::Match(m) => m.match_token.span,
        Expr::Return(r) => r.return_token.span,
        Expr::Macro(m) => first_span_of_path(&m.mac.path),
        Expr::Lit(l) => l.lit.span(),
        other => syn::spanned::Spanned::span(other),
    }
}

fn first_span_of_path(path: &syn::Path) -> proc_macro2::Span {
    match (&path.leading_colon, path.segments.first()) {
        (Some(colon), _) => colon.spans[0],
        (None, Some(segment)) => segment.ident.span(),
        (None, None) => proc_macro2::Span::call_site(),
    }
}
