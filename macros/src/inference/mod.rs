//! `#[inference]`. INTERIM passthrough; the inference issue implements it.

use proc_macro2::TokenStream;

pub(crate) fn expand(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
