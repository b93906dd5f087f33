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

/// Makes every loop of a function (or only the loops marked `#[batch_scope]`) a per-iteration
/// batch scope: each iteration enters a runtime `BatchScope` that accounts what it allocates,
/// reports what escapes it and warns when live memory grows iteration after iteration; the
/// iteration's locals are dropped at their last use; and the body is linted.
///
/// ```ignore
/// #[vramguard::batch_scope(strict, every = 100)]
/// fn train(model: &mut Gan, data: &Loader) -> Result<(), Error> {
///     for batch in data.batches() {          // one scope per iteration
///         let fake = model.generate(&batch)?;
///         // ...
///     }
///     Ok(())
/// }
/// ```
///
/// Options (on the function; all but `crate` also on a loop marker
/// `#[batch_scope(label = "d_step")] for ... {}`):
/// - `label = "…"`: the scope label (default: `module::fn:line` of the loop); on the function
///   only when it scopes a single loop;
/// - `strict`: panic with the report when live memory grows for `warn_after` iterations (tests);
/// - `warn_after = N`: growing iterations before a warning (default 8);
/// - `every = N`: call `empty_cache` every N iterations on the devices the scope allocated on;
/// - `crate = path`: the path of the `vramguard` crate when it is renamed.
///
/// Loops whose body contains `.await` cannot be scoped (the scope belongs to a thread); a
/// `const fn`, a non-function item, a function without loops, unknown options and markers
/// that are not on loops are compile errors. Reports: `vramguard::scope::last_report(label)`.
#[proc_macro_attribute]
pub fn batch_scope(args: TokenStream, item: TokenStream) -> TokenStream {
    batch_scope::expand(args.into(), item.into()).into()
}

/// Suppresses vramguard lints by name: `#[vramguard::allow(accumulates_across_iterations)]`
/// on a function processed by `#[inference]` or `#[batch_scope]` (either attribute order), or on
/// a statement inside one. Misspelled names are errors that list the known lints:
/// `backward_in_inference`, `accumulates_across_iterations`, `graph_across_iterations`,
/// `inplace_on_activation`, `empty_cache_is_not_free`.
///
/// The warnings are rustc `deprecated` warnings carrying the lint's message, so rustc's own
/// `#[allow(deprecated)]`, `#[deny(deprecated)]` and `-D warnings` apply to them as well.
#[proc_macro_attribute]
pub fn allow(args: TokenStream, item: TokenStream) -> TokenStream {
    lints::expand_allow(args.into(), item.into()).into()
}
