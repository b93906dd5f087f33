//! Patterns and places: the names a pattern binds and whether it takes its value apart, and
//! the local a place expression (`x.a[i]`) is rooted in.

use syn::{Expr, Pat, UnOp};

use syn::ext::IdentExt;

/// The names a pattern binds, with whether each is `mut`; `ref` bindings reported apart.
pub(crate) fn pattern_bindings(pat: &Pat, out: &mut Vec<(syn::Ident, bool)>) -> bool {
    let mut has_ref = false;
    collect_bindings(pat, out, &mut has_ref);
    has_ref
}

/// The bindings of an irrefutable `let` pattern: as [`pattern_bindings`], plus a whole
/// pattern that is one uppercase identifier (`let X = &data;`), which there can only be a
/// binding (a constant pattern would be refutable, or a unit struct nobody binds this way).
pub(crate) fn let_bindings(pat: &Pat, out: &mut Vec<(syn::Ident, bool)>) -> bool {
    let whole = match pat {
        Pat::Type(typed) => &*typed.pat,
        other => other,
    };
    match whole {
        Pat::Ident(ident)
            if ident.subpat.is_none()
                && ident.ident.to_string().starts_with(char::is_uppercase) =>
        {
            out.push((ident.ident.clone(), ident.mutability.is_some()));
            ident.by_ref.is_some()
        }
        _ => pattern_bindings(pat, out),
    }
}

fn collect_bindings(pat: &Pat, out: &mut Vec<(syn::Ident, bool)>, has_ref: &mut bool) {
    match pat {
        Pat::Ident(ident) => {
            let name = ident.ident.to_string();
            // Uppercase identifiers in patterns are constants or unit variants, not bindings.
            if !name.starts_with(char::is_uppercase) {
                out.push((ident.ident.clone(), ident.mutability.is_some()));
                *has_ref |= ident.by_ref.is_some();
            }
            if let Some((_, sub)) = &ident.subpat {
                collect_bindings(sub, out, has_ref);
            }
        }
        Pat::Or(or) => {
            // Every alternative binds the same names: the first one is enough.
            if let Some(first) = or.cases.first() {
                collect_bindings(first, out, has_ref);
            }
        }
        Pat::Paren(p) => collect_bindings(&p.pat, out, has_ref),
        Pat::Reference(r) => collect_bindings(&r.pat, out, has_ref),
        Pat::Slice(s) => s
            .elems
            .iter()
            .for_each(|p| collect_bindings(p, out, has_ref)),
        Pat::Struct(s) => s
            .fields
            .iter()
            .for_each(|f| collect_bindings(&f.pat, out, has_ref)),
        Pat::Tuple(t) => t
            .elems
            .iter()
            .for_each(|p| collect_bindings(p, out, has_ref)),
        Pat::TupleStruct(t) => t
            .elems
            .iter()
            .for_each(|p| collect_bindings(p, out, has_ref)),
        Pat::Type(t) => collect_bindings(&t.pat, out, has_ref),
        Pat::Guard(g) => collect_bindings(&g.pat, out, has_ref),
        _ => {}
    }
}

/// Whether a pattern takes its value apart (so a place it matches is partially moved).
pub(super) fn destructures(pat: &Pat) -> bool {
    match pat {
        Pat::Ident(ident) => ident.subpat.is_some(),
        Pat::Type(t) => destructures(&t.pat),
        Pat::Paren(p) => destructures(&p.pat),
        Pat::Wild(_) => false,
        _ => {
            let mut names = Vec::new();
            pattern_bindings(pat, &mut names);
            !names.is_empty()
        }
    }
}

/// The local a path expression names (`x`), if it is a single lowercase identifier.
pub(crate) fn local_name(path: &syn::ExprPath) -> Option<String> {
    if path.qself.is_some() || path.path.leading_colon.is_some() || path.path.segments.len() != 1 {
        return None;
    }
    let segment = &path.path.segments[0];
    if !segment.arguments.is_none() {
        return None;
    }
    // Uppercase names are constants and unit structs, or uppercase locals (`let X = &data;`):
    // only names bound in the block count as locals, so both readings are safe.
    let name = segment.ident.unraw().to_string();
    (name != "self").then_some(name)
}

/// The local at the root of a place expression (`x`, `x.a.b`, `x[i]`, `*x`, `(x)`).
pub(crate) fn place_root(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Path(path) => local_name(path),
        Expr::Field(field) => place_root(&field.base),
        Expr::Index(index) => place_root(&index.expr),
        Expr::Paren(paren) => place_root(&paren.expr),
        Expr::Group(group) => place_root(&group.expr),
        Expr::Unary(unary) if matches!(unary.op, UnOp::Deref(_)) => place_root(&unary.expr),
        _ => None,
    }
}

/// The names a pattern binds (the lints use it too: one pattern walk in the crate).
pub(crate) fn pattern_names(pat: &Pat, out: &mut Vec<syn::Ident>) {
    let mut names = Vec::new();
    pattern_bindings(pat, &mut names);
    out.extend(names.into_iter().map(|(ident, _mutable)| ident));
}
