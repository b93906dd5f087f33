//! Compile-time memory lints and `#[vramguard::allow]`. INTERIM; the lints issue implements it.
#![allow(dead_code)] // INTERIM: used once the macros are implemented.

use proc_macro2::TokenStream;

/// Which attribute is linting, and what it may assume.
pub(crate) struct LintContext<'a> {
    /// Inside `#[inference]`: grad is off, `.backward()` is an error.
    pub inference: bool,
    /// Path of the facade crate in generated code.
    pub krate: &'a syn::Path,
    /// Name of the function being linted (for messages).
    pub fn_name: &'a syn::Ident,
}

/// What the lints found: hard errors, and warning items to emit beside the function.
#[derive(Default)]
pub(crate) struct LintOutput {
    /// Errors (e.g. `backward_in_inference`), each with a span.
    pub errors: Vec<syn::Error>,
    /// Generated items that raise the warnings on stable Rust.
    pub warnings: TokenStream,
}

/// Lints a function body. Strips `#[vramguard::allow(..)]`/`#[allow(..)]` markers it consumes.
pub(crate) fn check(_block: &mut syn::Block, _ctx: &LintContext<'_>) -> LintOutput {
    LintOutput::default()
}

pub(crate) fn expand_allow(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
