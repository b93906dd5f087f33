//! `#[inference]`: parse → validate → expand, one file each.

mod expand;
mod parse;
mod validate;

use proc_macro2::TokenStream;

use crate::common::item_with_errors;

/// Entry point of the attribute.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let options = match syn::parse2::<parse::Options>(args) {
        Ok(options) => options,
        Err(error) => return item_with_errors(item, error),
    };
    let target = match parse::target(item.clone()) {
        Ok(target) => target,
        Err(error) => return item_with_errors(item, error),
    };
    if let Err(error) = validate::validate(&target, &options) {
        return item_with_errors(item, error);
    }
    expand::expand(target, &options)
}

#[cfg(test)]
mod tests;
