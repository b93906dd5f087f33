//! Facts about a whole block, gathered once before it is planned: the bindings it owns on
//! entry (by-value parameters, a loop's pattern), whether it contains `unsafe` code, the names
//! it declares, its local macros, and the names written in more than one hygiene context.

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::{Block, Item};

use proc_macro2::Ident;

use super::format;
use super::patterns::pattern_bindings;
use super::shapes::plain_type;

/// A by-value parameter (or other binding) the transformed block owns on entry.
#[derive(Clone, Debug)]
pub(crate) struct ParamBinding {
    /// The bound name.
    pub ident: Ident,
    /// Declared `mut`: the rebinding must be `let mut` too.
    pub mutable: bool,
    /// Handed in by the enclosing block to a branch of the `if`/`match` where it dies (see
    /// `plan::branches`): owned by the enclosing block, so it must be dropped in this branch
    /// (at the latest at its end) or not at all, and the enclosing block counts it.
    pub handed_in: bool,
}

/// The by-value parameters of a signature: ident patterns (and destructured patterns) whose
/// type is not a reference. `self` is never included (it cannot be rebound).
pub(crate) fn params_of(sig: &syn::Signature) -> Vec<ParamBinding> {
    let mut out = Vec::new();
    for input in &sig.inputs {
        if let syn::FnArg::Typed(typed) = input {
            // Dropping a reference or a primitive number early frees nothing.
            if plain_type(&typed.ty) {
                continue;
            }
            let mut names = Vec::new();
            pattern_bindings(&typed.pat, &mut names);
            out.extend(names.into_iter().map(|(ident, mutable)| ParamBinding {
                ident,
                mutable,
                handed_in: false,
            }));
        }
    }
    out
}

/// The parameters bound by a plain identifier to a primitive number type (`eps: f64`).
pub(crate) fn scalar_params(sig: &syn::Signature) -> BTreeSet<String> {
    sig.inputs
        .iter()
        .filter_map(|input| match input {
            syn::FnArg::Typed(typed) if super::shapes::primitive(&typed.ty) => match &*typed.pat {
                syn::Pat::Ident(pat) => Some(pat.ident.unraw().to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The bindings of a pattern (a `for` or `while let` pattern), as owned bindings of the block
/// that follows it; `_`-prefixed names are left out (guards by convention).
pub(crate) fn pattern_params(pat: &syn::Pat) -> Vec<ParamBinding> {
    let mut names = Vec::new();
    pattern_bindings(pat, &mut names);
    names
        .into_iter()
        .filter(|(ident, _)| !ident.to_string().starts_with('_'))
        .map(|(ident, mutable)| ParamBinding {
            ident,
            mutable,
            handed_in: false,
        })
        .collect()
}

/// Every binding name declared anywhere in `block` (for validating `keep(..)`).
pub(crate) fn declared_names(block: &Block, out: &mut BTreeSet<String>) {
    struct Names<'a>(&'a mut BTreeSet<String>);
    impl<'ast> syn::visit::Visit<'ast> for Names<'_> {
        fn visit_pat_ident(&mut self, pat: &'ast syn::PatIdent) {
            self.0.insert(pat.ident.unraw().to_string());
            syn::visit::visit_pat_ident(self, pat);
        }
        fn visit_item(&mut self, _: &'ast Item) {}
    }
    syn::visit::Visit::visit_block(&mut Names(out), block);
}

/// Whether `block` contains an `unsafe` block (nested items excluded).
pub(crate) fn contains_unsafe(block: &Block) -> bool {
    struct Find(bool);
    impl<'ast> syn::visit::Visit<'ast> for Find {
        fn visit_expr_unsafe(&mut self, _: &'ast syn::ExprUnsafe) {
            self.0 = true;
        }
        fn visit_item(&mut self, _: &'ast Item) {}
        fn visit_macro(&mut self, mac: &'ast syn::Macro) {
            // Macro arguments are tokens: look for the keyword.
            fn scan(tokens: TokenStream) -> bool {
                tokens.into_iter().any(|t| match t {
                    TokenTree::Ident(i) => i == "unsafe",
                    TokenTree::Group(g) => scan(g.stream()),
                    _ => false,
                })
            }
            self.0 |= scan(mac.tokens.clone());
        }
    }
    let mut find = Find(false);
    syn::visit::Visit::visit_block(&mut find, block);
    find.0
}

/// The names of locals of `block` that occur with more than one hygiene context in it.
///
/// Stable proc macros cannot compare hygiene, but the compiler's `Debug` of a span starts with
/// its syntax context (`#3 bytes(10..11)`); outside the compiler (unit tests) there is none and
/// every name counts as one context. Only identifiers spelling a declared local are asked (the
/// rule keeps locals), and the tree is walked rather than printed: each `Debug` is a round trip
/// to the compiler.
pub(crate) fn mixed_hygiene_names(block: &Block, params: &[ParamBinding]) -> BTreeSet<String> {
    let mut declared: BTreeSet<String> =
        params.iter().map(|p| p.ident.unraw().to_string()).collect();
    declared_names(block, &mut declared);
    if declared.is_empty() {
        return BTreeSet::new();
    }
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    crate::common::visit_idents(
        &mut |ident| {
            let name = ident.unraw().to_string();
            if declared.contains(&name) {
                let debug = format!("{:?}", ident.span());
                if let Some(context) = debug.strip_prefix('#').and_then(|d| d.split(' ').next()) {
                    seen.entry(name).or_default().insert(context.to_string());
                }
            }
            true
        },
        |visitor| syn::visit::Visit::visit_block(visitor, block),
    );
    seen.into_iter()
        .filter(|(_, contexts)| contexts.len() > 1)
        .map(|(name, _)| name)
        .collect()
}

/// The local `macro_rules!` of `block` → the identifiers their bodies mention (closed over
/// local macros that invoke each other).
pub(crate) fn collect_local_macros(block: &Block, out: &mut BTreeMap<String, BTreeSet<String>>) {
    struct Macros<'a>(&'a mut BTreeMap<String, BTreeSet<String>>);
    impl<'ast> syn::visit::Visit<'ast> for Macros<'_> {
        fn visit_item_macro(&mut self, item: &'ast syn::ItemMacro) {
            if let (Some(name), true) = (&item.ident, item.mac.path.is_ident("macro_rules")) {
                let mut idents = BTreeSet::new();
                idents_of(item.mac.tokens.clone(), &mut idents);
                self.0.entry(name.to_string()).or_default().extend(idents);
            }
        }
    }
    syn::visit::Visit::visit_block(&mut Macros(out), block);
    // A local macro whose body invokes another local macro mentions what that one mentions
    // (`macro_rules! show { () => { get_n!() } }`): close the sets transitively.
    loop {
        let mut changed = false;
        let names: Vec<String> = out.keys().cloned().collect();
        for name in &names {
            let inner: BTreeSet<String> = out[name]
                .iter()
                .filter(|ident| *ident != name)
                .filter_map(|ident| out.get(ident))
                .flatten()
                .cloned()
                .collect();
            if let Some(idents) = out.get_mut(name) {
                let before = idents.len();
                idents.extend(inner);
                changed |= idents.len() != before;
            }
        }
        if !changed {
            break;
        }
    }
}

/// The identifiers of `tokens`, format-string captures included.
fn idents_of(tokens: TokenStream, out: &mut BTreeSet<String>) {
    for token in tokens {
        match token {
            TokenTree::Ident(ident) => {
                out.insert(ident.unraw().to_string());
            }
            TokenTree::Group(group) => idents_of(group.stream(), out),
            TokenTree::Literal(literal) => {
                if let Ok(text) = syn::parse2::<syn::LitStr>(TokenTree::Literal(literal).into()) {
                    out.extend(format::captures(&text.value()));
                }
            }
            TokenTree::Punct(_) => {}
        }
    }
}
