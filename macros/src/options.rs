//! Option parsing shared by `#[inference(..)]` and `#[batch_scope(..)]`: the option both take
//! (`crate = path`), and the parts of an option list that read the same in both (unknown
//! options, options given twice, the `,` between options), so both report them with one
//! sentence shape at the option's own span.
//!
//! Each option is a type with its own `impl Parse` that starts at its keyword; an attribute's
//! option set is a struct whose `impl Parse` loops over [`OptionList::next`] (the shape of
//! tracing-attributes' `attr.rs`). Errors are built where they are detected, with their final
//! text.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, Token};

/// An option (or an option's keyword) that remembers where it was written, for "given twice"
/// errors.
pub(crate) trait NamedOption {
    /// The option's name as written in the attribute.
    const NAME: &'static str;
    /// The span of the option's keyword.
    fn span(&self) -> Span;
}

macro_rules! keywords {
    ($($keyword:ident),*) => {
        /// The keywords of the options (`crate` is Rust's own keyword).
        pub(crate) mod kw {
            $(syn::custom_keyword!($keyword);)*
        }
        $(
            impl NamedOption for kw::$keyword {
                const NAME: &'static str = stringify!($keyword);
                fn span(&self) -> Span {
                    self.span
                }
            }
        )*
    };
}

keywords!(keep, drops, inplace, owned, borrows, label, strict, every, warn_after, warnings);

/// `crate = path` (or `crate = "path"`): the path of the facade crate when it is renamed.
pub(crate) struct CrateOption {
    /// The `crate` keyword's span.
    pub span: Span,
    /// The path generated code uses instead of `::vramguard`.
    pub path: syn::Path,
}

const CRATE_VALUE: &str = "`crate` takes the path of the renamed facade: `crate = my_vramguard`";

impl Parse for CrateOption {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let keyword: Token![crate] = input.parse()?;
        let value_error = |span: Span| syn::Error::new(span, CRATE_VALUE);
        if !input.peek(Token![=]) {
            return Err(value_error(keyword.span));
        }
        input.parse::<Token![=]>()?;
        let path = if input.peek(syn::LitStr) {
            let text: syn::LitStr = input.parse()?;
            text.parse::<syn::Path>()
                .map_err(|_| value_error(text.span()))?
        } else {
            let start = input.span();
            syn::Path::parse_mod_style(input).map_err(|_| value_error(start))?
        };
        Ok(CrateOption {
            span: keyword.span,
            path,
        })
    }
}

impl NamedOption for CrateOption {
    const NAME: &'static str = "crate";
    fn span(&self) -> Span {
        self.span
    }
}

/// The comma-separated option list of one attribute, for the errors common to every option.
pub(crate) struct OptionList {
    /// The attribute as users write it, e.g. `#[batch_scope]`.
    pub attribute: &'static str,
    /// Every option with its syntax, for "unknown option" errors.
    pub accepted: &'static str,
}

impl OptionList {
    /// Consumes the `,` after an option; `false` once the list is over.
    pub(crate) fn next(&self, input: ParseStream) -> syn::Result<bool> {
        if input.is_empty() {
            return Ok(false);
        }
        if !input.peek(Token![,]) {
            return Err(input.error(format!(
                "expected `,` between {} options; the options are {}",
                self.attribute, self.accepted
            )));
        }
        input.parse::<Token![,]>()?;
        Ok(!input.is_empty())
    }

    /// The error for an option no keyword matched; its span is the option's name.
    pub(crate) fn unknown(&self, input: ParseStream) -> syn::Error {
        if input.peek(Ident::peek_any) {
            if let Ok(path) = syn::Path::parse_mod_style(input) {
                let name = path
                    .segments
                    .iter()
                    .map(|segment| segment.ident.to_string())
                    .collect::<Vec<_>>()
                    .join("::");
                return syn::Error::new_spanned(
                    &path,
                    format!(
                        "unknown {} option `{name}`; the options are {}",
                        self.attribute, self.accepted
                    ),
                );
            }
        }
        input.error(format!(
            "expected a {} option; the options are {}",
            self.attribute, self.accepted
        ))
    }

    /// Stores an option, or reports it as given twice (at the second one's keyword).
    pub(crate) fn set_once<T: NamedOption>(
        &self,
        slot: &mut Option<T>,
        option: T,
    ) -> syn::Result<()> {
        if slot.is_some() {
            return Err(syn::Error::new(
                option.span(),
                format!(
                    "option `{}` is given twice; {} takes each option once",
                    T::NAME,
                    self.attribute
                ),
            ));
        }
        *slot = Some(option);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proc_macro2::TokenStream;
    use quote::quote;

    fn inference(args: TokenStream) -> String {
        crate::inference::expand(
            args,
            quote!(
                fn f(x: u32) -> u32 {
                    x
                }
            ),
        )
        .to_string()
    }

    fn batch_scope(args: TokenStream) -> String {
        crate::batch_scope::expand(
            args,
            quote!(
                fn f(xs: &[u32]) {
                    for x in xs {
                        g(x);
                    }
                }
            ),
        )
        .to_string()
    }

    #[test]
    fn unknown_options_read_the_same_in_both_attributes() {
        let inference = inference(quote!(keep(x), scope::drops = false));
        assert!(
            inference.contains("unknown #[inference] option `scope::drops`; the options are"),
            "{inference}"
        );
        let batch_scope = batch_scope(quote!(strict, scope::label = "eval"));
        assert!(
            batch_scope.contains("unknown #[batch_scope] option `scope::label`; the options are"),
            "{batch_scope}"
        );
    }

    #[test]
    fn repeated_options_read_the_same_in_both_attributes() {
        let inference = inference(quote!(crate = vg, crate = vg));
        assert!(
            inference
                .contains("option `crate` is given twice; #[inference] takes each option once"),
            "{inference}"
        );
        let batch_scope = batch_scope(quote!(crate = vg, crate = vg));
        assert!(
            batch_scope
                .contains("option `crate` is given twice; #[batch_scope] takes each option once"),
            "{batch_scope}"
        );
    }

    #[test]
    fn crate_takes_a_path_or_a_string_in_both_attributes() {
        for args in [quote!(crate = my_vg), quote!(crate = "my_vg")] {
            let inference = inference(args.clone());
            assert!(
                inference.contains("my_vg :: __private :: inference_guard"),
                "{inference}"
            );
            let batch_scope = batch_scope(args);
            assert!(
                batch_scope.contains("my_vg :: __private :: BatchScope"),
                "{batch_scope}"
            );
        }
        let bad = batch_scope(quote!(crate = 5));
        assert!(
            bad.contains("`crate` takes the path of the renamed facade"),
            "{bad}"
        );
    }

    #[test]
    fn a_missing_comma_is_reported_at_the_next_option() {
        let inference = inference(quote!(keep(x) drops = false));
        assert!(
            inference.contains("expected `,` between #[inference] options"),
            "{inference}"
        );
        let batch_scope = batch_scope(quote!(strict every = 2));
        assert!(
            batch_scope.contains("expected `,` between #[batch_scope] options"),
            "{batch_scope}"
        );
    }
}
