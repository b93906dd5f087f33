//! Attribute macros of [vramguard](https://docs.rs/vramguard). Use them through the facade:
//! `#[vramguard::inference]`, `#[vramguard::batch_scope]`, `#[vramguard::allow(lint)]`.
//!
//! Layout (each macro is parse → validate → expand, one file each):
//! - `inference/`: the `#[inference]` attribute;
//! - `batch_scope/`: the `#[batch_scope]` attribute;
//! - `liveness/`: drop-at-last-use, shared by both;
//! - `lints/`: the compile-time memory lints and `#[allow]`.

mod batch_scope;
mod common;
mod inference;
mod lints;
mod liveness;

use proc_macro::TokenStream;

/// Runs a function (method, `impl` block, `async fn`) with grad recording disabled and drops
/// each local right after its last use. See the `vramguard` crate docs.
#[proc_macro_attribute]
pub fn inference(args: TokenStream, item: TokenStream) -> TokenStream {
    inference::expand(args.into(), item.into()).into()
}

/// Makes every loop of a function (or the loops marked `#[batch_scope]`) a per-iteration
/// batch scope that frees its intermediates and reports what escapes. See the `vramguard`
/// crate docs.
#[proc_macro_attribute]
pub fn batch_scope(args: TokenStream, item: TokenStream) -> TokenStream {
    batch_scope::expand(args.into(), item.into()).into()
}

/// Suppresses a vramguard lint by name on the item or statement it is placed on.
#[proc_macro_attribute]
pub fn allow(args: TokenStream, item: TokenStream) -> TokenStream {
    lints::expand_allow(args.into(), item.into()).into()
}
