//! The memory lints of [vramguard](https://docs.rs/vramguard), as a library: the one
//! implementation of every rule, used by the attribute macros (`#[vramguard::inference]`,
//! `#[vramguard::batch_scope]`, which report findings as compiler warnings) and by
//! `cargo vramguard lint` (which reports them as rustc and cargo do, over a whole crate).
//!
//! What it owns: the rules ([`lint_fn`] walks one function body), the lints' names,
//! explanations and fixes ([`Lint`], spelled for the user's tensor [`Library`]), and
//! `#[vramguard::allow(..)]` ([`allowed_in`], [`parse_allow_args`]). What it does not: how a
//! finding reaches the user (the macros turn it into a warning, the command into a diagnostic),
//! and which functions are linted.
//!
//! Every rule reads syntax only, never types: the guesses lean towards silence (see
//! `docs/lints.md` in the repository for what each lint fires on, and its precision measured on
//! public crates).
//!
//! ```
//! let mut function: syn::ItemFn = syn::parse_quote! {
//!     fn train(batches: &[Tensor]) -> Result<()> {
//!         let mut losses = Vec::new();
//!         for batch in batches {
//!             let loss = model.forward(batch)?;
//!             losses.push(loss);
//!         }
//!         Ok(())
//!     }
//! };
//! let context = vramguard_lints::Context::of_signature(&function.sig);
//! let outcome = vramguard_lints::lint_fn(&function.attrs, &mut function.block, &context);
//! assert_eq!(outcome.findings.len(), 1);
//! let finding = &outcome.findings[0];
//! assert_eq!(finding.lint.name(), "accumulates_across_iterations");
//! assert_eq!(
//!     finding.fix(vramguard_lints::Library::Candle),
//!     "keep a number (`loss.to_scalar::<f32>()?`) or a host copy (`loss.to_vec1::<f32>()?`), \
//!      or consume the value inside the iteration"
//! );
//! ```

#![warn(missing_docs)]

mod allow;
mod analysis;
mod holds;
mod library;
mod loops;
mod names;
mod results;
pub mod syntax;

pub use allow::{allowed_in, is_vramguard_allow, parse_allow_args};
pub use library::Library;
pub use names::Lint;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use proc_macro2::Span;
use syn::visit::Visit;
use syn::visit_mut::VisitMut;

/// What the linted function is, beyond its body.
#[derive(Debug, Clone)]
pub struct Context {
    /// The function's name, for messages and for the evaluation lint (`evaluate`, `predict`).
    pub fn_name: String,
    /// Inside `#[inference]`: grad recording is off, `.backward()` is reported.
    pub inference: bool,
    /// The tensor library the code uses, when known: some rules depend on it (no graph to
    /// chain in ndarray; a forgotten no-grad switch only where the library has one).
    pub library: Library,
    /// The function builds a value of its own type (it returns `Self`, or is named `new`,
    /// `load`, `new_*`, `load_*`, `from_*`): what its loops collect are the value's parts (a
    /// model's layers), not a leak.
    pub builds_self: bool,
    /// Functions and methods of the crate whose declared return type is a number (or a
    /// collection of numbers): see [`number_functions`]. Empty in the macros, which see one
    /// function.
    pub number_fns: Arc<HashSet<String>>,
}

impl Context {
    /// A function named `fn_name` outside `#[inference]`, its library not known.
    pub fn new(fn_name: &str) -> Self {
        Self {
            fn_name: fn_name.to_string(),
            inference: false,
            library: Library::Unknown,
            builds_self: false,
            number_fns: Arc::default(),
        }
    }

    /// The context of a function with this signature (its name, whether it builds `Self`),
    /// outside `#[inference]`, its library not known.
    pub fn of_signature(signature: &syn::Signature) -> Self {
        let name = signature.ident.to_string();
        let returns_self = match &signature.output {
            syn::ReturnType::Type(_, ty) => {
                let mut found = false;
                syntax::visit_idents(
                    &mut |ident| {
                        found = ident == "Self";
                        !found
                    },
                    |visitor| syn::visit::Visit::visit_type(visitor, ty),
                );
                found
            }
            syn::ReturnType::Default => false,
        };
        let constructor_name = name == "new"
            || name == "load"
            || ["new_", "load_", "from_"]
                .iter()
                .any(|prefix| name.starts_with(prefix));
        Self {
            builds_self: returns_self || constructor_name,
            ..Self::new(&name)
        }
    }
}

/// One finding of one lint.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The lint.
    pub lint: Lint,
    /// The one token that names the problem (`push` in `results.push(feat)`, `+=`): a single
    /// token's span is all a proc macro can attach a warning to on stable Rust.
    pub span: Span,
    /// The whole construct (`results.push(feat)`), for tools that can show a range.
    pub extent: Span,
    /// The sentence about this code, e.g. "`results.push(feat)` keeps a value computed in
    /// each iteration".
    pub sentence: String,
    /// The value the fix is written around (`feat`), when the lint names one.
    pub value: Option<String>,
}

impl Finding {
    /// The fix, in the spelling of `library`.
    pub fn fix(&self, library: Library) -> String {
        self.lint.fix(library, self.value.as_deref())
    }

    /// The whole message in one paragraph (sentence, why, fix, how to silence), for channels
    /// that carry one string, like the macros' warnings.
    pub fn paragraph(&self, library: Library) -> String {
        format!(
            "{}: {}. Fix: {}. (Silence with #[vramguard::allow({})].)",
            self.sentence,
            self.lint.explanation(),
            self.fix(library),
            self.lint.name(),
        )
    }
}

/// What [`lint_fn`] found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The findings, in the order of the body.
    pub findings: Vec<Finding>,
    /// Misspelled lint names in the `#[vramguard::allow(..)]` of a statement or a `match` arm,
    /// each with its span. (Those on the function itself are the `allow` macro's to report.)
    pub errors: Vec<syn::Error>,
}

/// Lints one function body. `fn_attrs` are the function's own attributes (their
/// `#[vramguard::allow(..)]` are honoured; a misspelled one allows nothing). The
/// `#[vramguard::allow(..)]` of statements and `match` arms are honoured and removed from
/// `body`, so that the macros emit code without them.
pub fn lint_fn(fn_attrs: &[syn::Attribute], body: &mut syn::Block, context: &Context) -> Outcome {
    let allowed = allowed_in(fn_attrs).unwrap_or_default();
    let mut walker = analysis::Walker::new(context, allowed, body);
    walker.visit_block_mut(body);
    walker.finish();
    Outcome {
        findings: walker.findings,
        errors: walker.errors,
    }
}

/// The names of the functions and methods defined in `files` whose declared return type is a
/// number, a host value (`String`, `Duration`) or a collection of them (`Vec<f64>`,
/// `Result<usize, E>`), by every definition of that name: a call to one yields no tensor.
pub fn number_functions<'a>(files: impl IntoIterator<Item = &'a syn::File>) -> HashSet<String> {
    struct Signatures(HashMap<String, bool>);
    impl Signatures {
        fn add(&mut self, signature: &syn::Signature) {
            let number = match &signature.output {
                syn::ReturnType::Type(_, ty) => holds::is_scalar_type(ty),
                syn::ReturnType::Default => false,
            };
            *self.0.entry(signature.ident.to_string()).or_insert(true) &= number;
        }
    }
    impl<'ast> Visit<'ast> for Signatures {
        fn visit_signature(&mut self, signature: &'ast syn::Signature) {
            self.add(signature);
        }
    }
    let mut signatures = Signatures(HashMap::new());
    for file in files {
        signatures.visit_file(file);
    }
    signatures
        .0
        .into_iter()
        .filter_map(|(name, number)| number.then_some(name))
        .collect()
}

#[cfg(test)]
mod tests;
