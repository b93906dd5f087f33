//! Parsing of `#[inference(...)]`: the options and the annotated item.

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::Token;

use crate::options::{kw, CrateOption, NamedOption, OptionList};

/// The option list of `#[inference(..)]`.
const OPTIONS: OptionList = OptionList {
    attribute: "#[inference]",
    accepted: "`keep(a, b)`, `drops = false`, `inplace = false`, `crate = path`, \
               `owned(name, ..)`, `borrows(name, ..)`",
};

/// The options of one `#[inference(...)]`.
pub(crate) struct Options {
    /// Locals never dropped early.
    pub keep: Vec<syn::Ident>,
    /// Whether to insert drops at last use (`drops = false` keeps only the no-grad guard).
    pub drops: bool,
    /// Whether a listed op on a local at its last use may run in place (`inplace = false`
    /// calls every op as written).
    pub inplace: bool,
    /// Path of the facade crate.
    pub krate: Option<syn::Path>,
    /// Extra names whose results own their data.
    pub owned: Vec<syn::Ident>,
    /// Extra method names whose results borrow the receiver.
    pub borrows: Vec<syn::Ident>,
}

/// The item the attribute is placed on, as far as parsing can tell.
pub(crate) enum InferenceTarget {
    /// A free function (or a method written alone, e.g. in an `impl` block or a trait).
    Fn(syn::ItemFn),
    /// A trait method with or without a default body.
    TraitFn(syn::TraitItemFn),
    /// A whole `impl` block.
    Impl(syn::ItemImpl),
    /// Anything else, with a description and a span for the error.
    Other(&'static str, Span),
}

impl Parse for Options {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut keep: Option<NamesOption<kw::keep>> = None;
        let mut drops: Option<BoolOption<kw::drops>> = None;
        let mut inplace: Option<BoolOption<kw::inplace>> = None;
        let mut krate: Option<CrateOption> = None;
        let mut owned: Option<NamesOption<kw::owned>> = None;
        let mut borrows: Option<NamesOption<kw::borrows>> = None;
        let mut more = !input.is_empty();
        while more {
            if input.peek(kw::keep) {
                OPTIONS.set_once(&mut keep, input.parse()?)?;
            } else if input.peek(kw::drops) {
                OPTIONS.set_once(&mut drops, input.parse()?)?;
            } else if input.peek(kw::inplace) {
                OPTIONS.set_once(&mut inplace, input.parse()?)?;
            } else if input.peek(Token![crate]) {
                OPTIONS.set_once(&mut krate, input.parse()?)?;
            } else if input.peek(kw::owned) {
                OPTIONS.set_once(&mut owned, input.parse()?)?;
            } else if input.peek(kw::borrows) {
                OPTIONS.set_once(&mut borrows, input.parse()?)?;
            } else {
                return Err(OPTIONS.unknown(input));
            }
            more = OPTIONS.next(input)?;
        }
        Ok(Options {
            keep: keep.map_or_else(Vec::new, |list| list.names),
            drops: drops.is_none_or(|option| option.value),
            inplace: inplace.is_none_or(|option| option.value),
            krate: krate.map(|option| option.path),
            owned: owned.map_or_else(Vec::new, |list| list.names),
            borrows: borrows.map_or_else(Vec::new, |list| list.names),
        })
    }
}

/// `drops = true | false`, `inplace = true | false`.
struct BoolOption<K> {
    keyword: K,
    value: bool,
}

impl<K: NamedOption + Parse> Parse for BoolOption<K> {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let value_error = format!(
            "`{name}` takes a boolean: `{name} = false` or `{name} = true`",
            name = K::NAME
        );
        let keyword: K = input.parse()?;
        if !input.peek(Token![=]) {
            return Err(syn::Error::new(keyword.span(), value_error));
        }
        input.parse::<Token![=]>()?;
        if !input.peek(syn::LitBool) {
            return Err(input.error(value_error));
        }
        let value: syn::LitBool = input.parse()?;
        Ok(BoolOption {
            keyword,
            value: value.value,
        })
    }
}

impl<K: NamedOption> NamedOption for BoolOption<K> {
    const NAME: &'static str = K::NAME;
    fn span(&self) -> Span {
        self.keyword.span()
    }
}

/// `keep(a, b)`, `owned(a, ..)`, `borrows(a, ..)`: a keyword and a parenthesized list of names.
struct NamesOption<K> {
    keyword: K,
    names: Vec<syn::Ident>,
}

impl<K: NamedOption + Parse> Parse for NamesOption<K> {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let keyword: K = input.parse()?;
        let value = format!(
            "`{name}(..)` takes a list of names: `{name}(a, b)`",
            name = K::NAME
        );
        if !input.peek(syn::token::Paren) {
            return Err(input.error(value));
        }
        let content;
        syn::parenthesized!(content in input);
        let mut names = Vec::new();
        while !content.is_empty() {
            // A name is one identifier (keywords such as `self` included) before `,` or `)`.
            let fork = content.fork();
            let name = match fork.call(syn::Ident::parse_any) {
                Ok(name) if fork.is_empty() || fork.peek(Token![,]) => name,
                _ => return Err(content.error(value)),
            };
            content.call(syn::Ident::parse_any)?;
            names.push(name);
            if !content.is_empty() {
                content.parse::<Token![,]>()?;
            }
        }
        Ok(NamesOption { keyword, names })
    }
}

impl<K: NamedOption> NamedOption for NamesOption<K> {
    const NAME: &'static str = K::NAME;
    fn span(&self) -> Span {
        self.keyword.span()
    }
}

/// The item under the attribute.
pub(crate) fn target(item: TokenStream) -> syn::Result<InferenceTarget> {
    let parsed: syn::Item = match syn::parse2(item.clone()) {
        Ok(item) => item,
        Err(error) => {
            // A trait method without a body does not parse as an item.
            return match syn::parse2::<syn::TraitItemFn>(item) {
                Ok(method) => Ok(InferenceTarget::TraitFn(method)),
                Err(_) => Err(error),
            };
        }
    };
    // (Only an item that is refused needs its span: `Spanned::span` prints the whole item.)
    Ok(match parsed {
        syn::Item::Fn(function) => InferenceTarget::Fn(function),
        syn::Item::Impl(block) => InferenceTarget::Impl(block),
        syn::Item::Verbatim(tokens) => {
            let span = tokens.span();
            match syn::parse2::<syn::TraitItemFn>(tokens) {
                Ok(method) => InferenceTarget::TraitFn(method),
                Err(_) => InferenceTarget::Other("this item", span),
            }
        }
        syn::Item::Struct(s) => InferenceTarget::Other("a struct", s.ident.span()),
        syn::Item::Enum(e) => InferenceTarget::Other("an enum", e.ident.span()),
        syn::Item::Union(u) => InferenceTarget::Other("a union", u.ident.span()),
        syn::Item::Trait(t) => InferenceTarget::Other("a trait declaration", t.ident.span()),
        syn::Item::TraitAlias(t) => InferenceTarget::Other("a trait alias", t.ident.span()),
        syn::Item::Const(c) => InferenceTarget::Other("a const item", c.ident.span()),
        syn::Item::Static(s) => InferenceTarget::Other("a static item", s.ident.span()),
        syn::Item::ForeignMod(f) => InferenceTarget::Other("an extern block", f.abi.span()),
        syn::Item::Mod(m) => InferenceTarget::Other("a module", m.ident.span()),
        syn::Item::Type(t) => InferenceTarget::Other("a type alias", t.ident.span()),
        syn::Item::Use(u) => InferenceTarget::Other("a use declaration", u.span()),
        syn::Item::ExternCrate(e) => {
            InferenceTarget::Other("an extern crate declaration", e.ident.span())
        }
        syn::Item::Macro(m) => InferenceTarget::Other("a macro item", m.mac.path.span()),
        other => InferenceTarget::Other("this item", other.span()),
    })
}
