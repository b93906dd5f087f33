//! Parsing of `#[inference(...)]`: the options and the annotated item.

use proc_macro2::{Span, TokenStream};
use syn::parse::Parser;
use syn::spanned::Spanned;

/// The accepted options, for error messages.
pub(crate) const ACCEPTED: &str =
    "accepted options: `keep(a, b)`, `drops = false`, `crate = path`, `owned(name, ..)`, `borrows(name, ..)`";

/// The options of one `#[inference(...)]`.
pub(crate) struct Options {
    /// Locals never dropped early.
    pub keep: Vec<syn::Ident>,
    /// Whether to insert drops at last use (`drops = false` keeps only the no-grad guard).
    pub drops: bool,
    /// Path of the facade crate.
    pub krate: Option<syn::Path>,
    /// Extra names whose results own their data.
    pub owned: Vec<syn::Ident>,
    /// Extra method names whose results borrow the receiver.
    pub borrows: Vec<syn::Ident>,
}

/// The item the attribute is placed on, as far as parsing can tell.
pub(crate) enum Target {
    /// A free function (or a method written alone, e.g. in an `impl` block or a trait).
    Fn(syn::ItemFn),
    /// A trait method with or without a default body.
    TraitFn(syn::TraitItemFn),
    /// A whole `impl` block.
    Impl(syn::ItemImpl),
    /// Anything else, with a description and a span for the error.
    Other(&'static str, Span),
}

pub(crate) fn options(args: TokenStream) -> syn::Result<Options> {
    let mut options = Options {
        keep: Vec::new(),
        drops: true,
        krate: None,
        owned: Vec::new(),
        borrows: Vec::new(),
    };
    let mut seen: Vec<String> = Vec::new();
    let parser = syn::meta::parser(|meta| {
        let name = meta
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_default();
        if seen.contains(&name) {
            return Err(meta.error(format_args!("duplicate option `{name}`")));
        }
        match name.as_str() {
            "keep" => options.keep = ident_list(&meta, "keep")?,
            "owned" => options.owned = ident_list(&meta, "owned")?,
            "borrows" => options.borrows = ident_list(&meta, "borrows")?,
            "drops" => {
                let value = meta.value().map_err(|_| {
                    meta.error("`drops` takes a boolean: `drops = false` or `drops = true`")
                })?;
                let lit: syn::LitBool = value.parse().map_err(|e| {
                    syn::Error::new(
                        e.span(),
                        "`drops` takes a boolean: `drops = false` or `drops = true`",
                    )
                })?;
                options.drops = lit.value;
            }
            "crate" => {
                let value = meta.value().map_err(|_| {
                    meta.error(
                        "`crate` takes the path of the renamed facade: `crate = my_vramguard`",
                    )
                })?;
                let invalid = |e: syn::Error| {
                    syn::Error::new(
                        e.span(),
                        "`crate` takes the path of the renamed facade: `crate = my_vramguard`",
                    )
                };
                let path = if value.peek(syn::LitStr) {
                    let text: syn::LitStr = value.parse()?;
                    text.parse::<syn::Path>().map_err(invalid)?
                } else {
                    syn::Path::parse_mod_style(value).map_err(invalid)?
                };
                options.krate = Some(path);
            }
            _ => {
                return Err(syn::Error::new(
                    meta.path.span(),
                    format!(
                        "unknown option `{}` for #[inference]; {ACCEPTED}",
                        path_text(&meta.path)
                    ),
                ));
            }
        }
        seen.push(name);
        Ok(())
    });
    parser.parse2(args).map_err(|e| {
        let message = e.to_string();
        if message.contains(ACCEPTED) {
            e
        } else if message.contains("takes") || message.contains("duplicate") {
            syn::Error::new(e.span(), format!("{message}; {ACCEPTED}"))
        } else {
            syn::Error::new(
                e.span(),
                format!("malformed #[inference] options: {message}; {ACCEPTED}"),
            )
        }
    })?;
    Ok(options)
}

fn path_text(path: &syn::Path) -> String {
    path.segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect::<Vec<_>>()
        .join("::")
}

fn ident_list(meta: &syn::meta::ParseNestedMeta<'_>, option: &str) -> syn::Result<Vec<syn::Ident>> {
    let mut names = Vec::new();
    let result = meta.parse_nested_meta(|inner| match inner.path.get_ident() {
        Some(ident) if inner.input.is_empty() || inner.input.peek(syn::Token![,]) => {
            names.push(ident.clone());
            Ok(())
        }
        _ => Err(inner.error(format_args!(
            "`{option}(..)` takes a list of names: `{option}(a, b)`"
        ))),
    });
    result.map_err(|e| {
        let message = e.to_string();
        if message.contains("takes a list") {
            e
        } else {
            syn::Error::new(
                e.span(),
                format!("`{option}(..)` takes a list of names: `{option}(a, b)`"),
            )
        }
    })?;
    Ok(names)
}

pub(crate) fn target(item: TokenStream) -> syn::Result<Target> {
    let parsed: syn::Item = match syn::parse2(item.clone()) {
        Ok(item) => item,
        Err(error) => {
            // A trait method without a body does not parse as an item.
            return match syn::parse2::<syn::TraitItemFn>(item) {
                Ok(method) => Ok(Target::TraitFn(method)),
                Err(_) => Err(error),
            };
        }
    };
    let span = parsed.span();
    Ok(match parsed {
        syn::Item::Fn(function) => Target::Fn(function),
        syn::Item::Impl(block) => Target::Impl(block),
        syn::Item::Verbatim(tokens) => match syn::parse2::<syn::TraitItemFn>(tokens) {
            Ok(method) => Target::TraitFn(method),
            Err(_) => Target::Other("this item", span),
        },
        syn::Item::Struct(s) => Target::Other("a struct", s.ident.span()),
        syn::Item::Enum(e) => Target::Other("an enum", e.ident.span()),
        syn::Item::Union(u) => Target::Other("a union", u.ident.span()),
        syn::Item::Trait(t) => Target::Other("a trait declaration", t.ident.span()),
        syn::Item::TraitAlias(t) => Target::Other("a trait alias", t.ident.span()),
        syn::Item::Const(c) => Target::Other("a const item", c.ident.span()),
        syn::Item::Static(s) => Target::Other("a static item", s.ident.span()),
        syn::Item::ForeignMod(f) => Target::Other("an extern block", f.abi.span()),
        syn::Item::Mod(m) => Target::Other("a module", m.ident.span()),
        syn::Item::Type(t) => Target::Other("a type alias", t.ident.span()),
        syn::Item::Use(u) => Target::Other("a use declaration", u.span()),
        syn::Item::ExternCrate(e) => Target::Other("an extern crate declaration", e.ident.span()),
        syn::Item::Macro(m) => Target::Other("a macro item", m.mac.path.span()),
        _ => Target::Other("this item", span),
    })
}
