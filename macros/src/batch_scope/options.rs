//! Options of `#[batch_scope(..)]`, on the function and on loop markers.

use proc_macro2::TokenStream;
use syn::parse::Parser;
use syn::{LitInt, LitStr};

/// Options given on the function (`crate` allowed) or on a loop marker (`crate` not allowed).
#[derive(Default, Clone)]
pub(crate) struct ScopeArgs {
    pub label: Option<LitStr>,
    pub strict: bool,
    pub every: Option<u32>,
    pub warn_after: Option<u32>,
    /// `warnings = "auto" | "stderr" | "tracing"`: the runtime's `WarningOutput` variant.
    pub warnings: Option<syn::Ident>,
    pub krate: Option<syn::Path>,
}

const KNOWN: &str = "`label = \"…\"`, `strict`, `every = N`, `warn_after = N`, \
                     `warnings = \"auto\" | \"stderr\" | \"tracing\"`, `crate = path`";

/// The `WarningOutput` variant a `warnings = "…"` value names.
fn warning_output(lit: &LitStr) -> syn::Result<syn::Ident> {
    let variant = match lit.value().as_str() {
        "auto" => "Auto",
        "stderr" => "Stderr",
        "tracing" => "Tracing",
        other => {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "unknown `warnings` output `{other}`; use \"auto\" (stderr unless a tracing \
                     subscriber is installed), \"stderr\" or \"tracing\""
                ),
            ))
        }
    };
    Ok(syn::Ident::new(variant, lit.span()))
}

fn positive(lit: &LitInt, option: &str) -> syn::Result<u32> {
    match lit.base10_parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(syn::Error::new(
            lit.span(),
            format!(
                "`{option}` takes a whole number of iterations from 1 to {}",
                u32::MAX
            ),
        )),
    }
}

/// Parses the arguments; `on_loop` rejects `crate` (it belongs on the function).
pub(crate) fn parse(tokens: TokenStream, on_loop: bool) -> syn::Result<ScopeArgs> {
    let mut args = ScopeArgs::default();
    let mut seen: Vec<String> = Vec::new();
    let parser = syn::meta::parser(|meta| {
        let name = meta
            .path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_else(|| quote::quote!(meta.path).to_string());
        let name = if meta.path.is_ident("crate") {
            "crate".to_string()
        } else {
            name
        };
        if seen.contains(&name) {
            return Err(meta.error(format!("`{name}` is given twice")));
        }
        seen.push(name.clone());
        match name.as_str() {
            "label" => {
                let lit: LitStr = meta.value()?.parse()?;
                if lit.value().is_empty() {
                    return Err(syn::Error::new(lit.span(), "the label must not be empty"));
                }
                args.label = Some(lit);
            }
            "strict" => args.strict = true,
            "every" => args.every = Some(positive(&meta.value()?.parse()?, "every")?),
            "warn_after" => {
                args.warn_after = Some(positive(&meta.value()?.parse()?, "warn_after")?)
            }
            "warnings" => args.warnings = Some(warning_output(&meta.value()?.parse()?)?),
            "crate" if on_loop => {
                return Err(meta
                    .error("`crate = path` goes on the function's #[batch_scope], not on a loop"))
            }
            "crate" => args.krate = Some(meta.value()?.parse()?),
            _ => {
                return Err(meta.error(format!(
                    "unknown #[batch_scope] option `{name}`; the options are {KNOWN}"
                )))
            }
        }
        Ok(())
    });
    parser.parse2(tokens)?;
    Ok(args)
}
