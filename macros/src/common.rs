//! Helpers shared by the attribute macros.

use proc_macro2::TokenStream;
use quote::quote;

// The syntax helpers live in the lints crate, which shares them with `cargo vramguard lint`.
pub(crate) use vramguard_lints::syntax::{expr_attrs, expr_attrs_mut, visit_idents, NameList};

/// The default path of the facade crate in generated code.
pub(crate) fn default_crate_path() -> syn::Path {
    syn::parse_quote!(::vramguard)
}

/// Emits the original item followed by the errors, so that IDEs keep seeing the item
/// (the way `tokio::main` does).
pub(crate) fn item_with_errors(item: TokenStream, errors: syn::Error) -> TokenStream {
    let errors = errors.to_compile_error();
    quote! { #item #errors }
}
