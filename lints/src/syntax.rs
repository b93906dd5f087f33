//! Syntax helpers that the lints and the attribute macros share: name lists, identifier walks,
//! the attributes of an expression and the names a pattern binds.
//!
//! Owns nothing specific to one lint or one macro; every helper reads syntax only, never
//! types.

use std::sync::OnceLock;

use proc_macro2::{TokenStream, TokenTree};
use syn::{Attribute, Expr, Pat};

/// A fixed list of names (methods, functions, macros, types), kept in the order its source
/// groups them and looked up by binary search in a sorted copy made on first use. The macros
/// run unoptimised in a user's debug build, where a linear scan of a 200-name list on every
/// method call of every annotated function was a measurable part of their time.
pub struct NameList {
    names: &'static [&'static str],
    sorted: OnceLock<Box<[&'static str]>>,
}

impl NameList {
    /// The list of `names` (any order, duplicates allowed).
    pub const fn new(names: &'static [&'static str]) -> Self {
        Self {
            names,
            sorted: OnceLock::new(),
        }
    }

    /// Whether `name` is in the list.
    pub fn contains(&self, name: impl AsRef<str>) -> bool {
        let sorted = self.sorted.get_or_init(|| {
            let mut names = self.names.to_vec();
            names.sort_unstable();
            names.into_boxed_slice()
        });
        sorted.binary_search(&name.as_ref()).is_ok()
    }
}

/// Calls `each` on every identifier of the syntax tree that `walk` visits (macro arguments and
/// unparsed tokens included) until it returns `false`. Walks the tree instead of printing it to
/// tokens: the macros run unoptimized in a user's debug build, where printing a whole body to
/// look for names was a large part of their time.
pub fn visit_idents(
    each: &mut dyn FnMut(&syn::Ident) -> bool,
    walk: impl FnOnce(&mut IdentVisitor<'_>),
) {
    walk(&mut IdentVisitor { each, done: false });
}

/// The visitor of [`visit_idents`].
pub struct IdentVisitor<'f> {
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
pub fn expr_attrs(expr: &Expr) -> Option<&Vec<Attribute>> {
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
pub fn expr_attrs_mut(expr: &mut Expr) -> Option<&mut Vec<Attribute>> {
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

/// The names a pattern binds. Uppercase identifiers are constants or unit variants, not
/// bindings; the alternatives of an or-pattern bind the same names, so the first is read.
pub(crate) fn pattern_names(pat: &Pat, out: &mut Vec<syn::Ident>) {
    match pat {
        Pat::Ident(ident) => {
            if !ident.ident.to_string().starts_with(char::is_uppercase) {
                out.push(ident.ident.clone());
            }
            if let Some((_, sub)) = &ident.subpat {
                pattern_names(sub, out);
            }
        }
        Pat::Or(or) => {
            if let Some(first) = or.cases.first() {
                pattern_names(first, out);
            }
        }
        Pat::Paren(p) => pattern_names(&p.pat, out),
        Pat::Reference(r) => pattern_names(&r.pat, out),
        Pat::Slice(s) => s.elems.iter().for_each(|p| pattern_names(p, out)),
        Pat::Struct(s) => s.fields.iter().for_each(|f| pattern_names(&f.pat, out)),
        Pat::Tuple(t) => t.elems.iter().for_each(|p| pattern_names(p, out)),
        Pat::TupleStruct(t) => t.elems.iter().for_each(|p| pattern_names(p, out)),
        Pat::Type(t) => pattern_names(&t.pat, out),
        Pat::Guard(g) => pattern_names(&g.pat, out),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_lists_find_exactly_their_names_in_any_order() {
        static LIST: NameList = NameList::new(&["view", "add", "t", "add", "broadcast_add"]);
        for name in ["view", "add", "t", "broadcast_add"] {
            assert!(LIST.contains(name), "{name}");
        }
        for name in ["", "a", "ad", "adds", "views", "T", "broadcast", "zz"] {
            assert!(!LIST.contains(name), "{name}");
        }
        // A `String`, as the callers pass identifiers.
        assert!(LIST.contains(String::from("view")));
        static EMPTY: NameList = NameList::new(&[]);
        assert!(!EMPTY.contains("view"));
    }

    #[test]
    fn pattern_names_skip_constants_and_read_one_alternative() {
        let pat: Pat = syn::parse_quote!((a, Some(ref b), S { c, d: [e, ..] }, NONE, f @ 1..));
        let mut names = Vec::new();
        pattern_names(&pat, &mut names);
        let names: Vec<String> = names.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["a", "b", "c", "e", "f"]);
        let or: Pat = syn::parse_quote!(Ok(x) | Err(x));
        let mut names = Vec::new();
        pattern_names(&or, &mut names);
        assert_eq!(names.len(), 1);
    }
}
