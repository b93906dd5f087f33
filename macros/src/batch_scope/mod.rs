//! `#[batch_scope]`. INTERIM passthrough; the batch-scope issue implements it.

use proc_macro2::TokenStream;

pub(crate) fn expand(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
