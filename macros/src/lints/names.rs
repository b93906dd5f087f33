//! The lints: stable names, one-line explanations and fixes, and `allow(...)` parsing.

use proc_macro2::Span;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Attribute, Ident, Token};

/// A vramguard lint. The names are stable: users write them in `#[vramguard::allow(..)]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Lint {
    BackwardInInference,
    AccumulatesAcrossIterations,
    GraphAcrossIterations,
    InplaceOnActivation,
    EmptyCacheIsNotFree,
}

impl Lint {
    pub(crate) const ALL: [Lint; 5] = [
        Lint::BackwardInInference,
        Lint::AccumulatesAcrossIterations,
        Lint::GraphAcrossIterations,
        Lint::InplaceOnActivation,
        Lint::EmptyCacheIsNotFree,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Lint::BackwardInInference => "backward_in_inference",
            Lint::AccumulatesAcrossIterations => "accumulates_across_iterations",
            Lint::GraphAcrossIterations => "graph_across_iterations",
            Lint::InplaceOnActivation => "inplace_on_activation",
            Lint::EmptyCacheIsNotFree => "empty_cache_is_not_free",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Lint> {
        Lint::ALL.into_iter().find(|lint| lint.name() == name)
    }

    /// Name of the generated deprecated constant that carries the warning.
    pub(crate) fn const_name(self) -> String {
        format!("VRAMGUARD_{}", self.name().to_ascii_uppercase())
    }

    /// Why the code wastes (or cannot use) memory, in one line.
    pub(crate) fn explanation(self) -> &'static str {
        match self {
            Lint::BackwardInInference => {
                "grad recording is off under #[inference], so there is no graph to run backward on"
            }
            Lint::AccumulatesAcrossIterations => {
                "a collection declared outside the loop keeps a value of every iteration alive, \
                 so memory grows until it runs out"
            }
            Lint::GraphAcrossIterations => {
                "adding a per-iteration result to a value declared outside the loop chains every \
                 iteration's autograd graph (and its activations) into it"
            }
            Lint::InplaceOnActivation => {
                "an in-place op on an activation overwrites what autograd saved for backward, so \
                 backward fails (or computes wrong gradients)"
            }
            Lint::EmptyCacheIsNotFree => {
                "empty_cache() only returns cached blocks nobody holds; it frees nothing that a \
                 live value still holds"
            }
        }
    }

    /// The usual fix, in one line.
    pub(crate) fn fix(self) -> &'static str {
        match self {
            Lint::BackwardInInference => {
                "train outside #[inference] (e.g. a #[batch_scope] training loop)"
            }
            Lint::AccumulatesAcrossIterations => {
                "keep a scalar (`.to_scalar()?`) or a host copy (`.to_vec()?`), or consume the \
                 value inside the iteration"
            }
            Lint::GraphAcrossIterations => {
                "accumulate a scalar (`total += loss.to_scalar()?`) or a detached value \
                 (`total += loss.detach()`)"
            }
            Lint::InplaceOnActivation => {
                "use the out-of-place form (`let h = h.relu()`), or run the code under no_grad"
            }
            Lint::EmptyCacheIsNotFree => {
                "drop the values first (`drop(x)`) or call empty_cache() after their last use"
            }
        }
    }
}

fn known_names() -> String {
    Lint::ALL
        .iter()
        .map(|lint| lint.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Levenshtein distance, for "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

fn unknown_lint(ident: &Ident) -> syn::Error {
    let name = ident.to_string();
    let closest = Lint::ALL
        .iter()
        .map(|lint| (edit_distance(&name, lint.name()), lint.name()))
        .min();
    let hint = match closest {
        Some((distance, known)) if distance <= 4 => format!("did you mean `{known}`? "),
        _ => String::new(),
    };
    syn::Error::new(
        ident.span(),
        format!(
            "unknown vramguard lint `{name}`; {hint}known lints: {}",
            known_names()
        ),
    )
}

/// Parses the arguments of `allow(..)`: one or more lint names.
pub(crate) fn parse_allow_args(
    tokens: proc_macro2::TokenStream,
    span: Span,
) -> syn::Result<Vec<Lint>> {
    let names = Punctuated::<Ident, Token![,]>::parse_terminated.parse2(tokens)?;
    if names.is_empty() {
        return Err(syn::Error::new(
            span,
            format!(
                "name the vramguard lints to allow, e.g. \
                 #[vramguard::allow(accumulates_across_iterations)]; known lints: {}",
                known_names()
            ),
        ));
    }
    let mut lints = Vec::new();
    let mut errors: Option<syn::Error> = None;
    for ident in &names {
        match Lint::from_name(&ident.to_string()) {
            Some(lint) => lints.push(lint),
            None => match &mut errors {
                Some(all) => all.combine(unknown_lint(ident)),
                None => errors = Some(unknown_lint(ident)),
            },
        }
    }
    match errors {
        Some(errors) => Err(errors),
        None => Ok(lints),
    }
}

/// Whether `attr` is `#[vramguard::allow(..)]` (any path of two or more segments ending in
/// `allow`, so that a renamed facade crate works; a bare `#[allow]` is rustc's own).
pub(crate) fn is_vramguard_allow(attr: &Attribute) -> bool {
    let path = attr.path();
    path.segments.len() >= 2 && path.segments.last().is_some_and(|s| s.ident == "allow")
}

/// The lints allowed by the `#[vramguard::allow(..)]` attributes in `attrs`.
pub(crate) fn allowed_in(attrs: &[Attribute]) -> syn::Result<Vec<Lint>> {
    let mut lints = Vec::new();
    for attr in attrs.iter().filter(|a| is_vramguard_allow(a)) {
        let tokens = match &attr.meta {
            syn::Meta::List(list) => list.tokens.clone(),
            _ => proc_macro2::TokenStream::new(),
        };
        lints.extend(parse_allow_args(tokens, attr_span(attr))?);
    }
    Ok(lints)
}

/// Span of an attribute, for messages.
pub(crate) fn attr_span(attr: &Attribute) -> Span {
    attr.path()
        .segments
        .last()
        .map_or_else(Span::call_site, |s| s.ident.span())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_misspellings_get_a_suggestion() {
        for lint in Lint::ALL {
            assert_eq!(Lint::from_name(lint.name()), Some(lint));
        }
        let err = parse_allow_args(
            quote::quote!(accumulate_across_iterations),
            Span::call_site(),
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            err.contains("did you mean `accumulates_across_iterations`"),
            "{err}"
        );
        assert!(err.contains("empty_cache_is_not_free"), "{err}");
    }
}
