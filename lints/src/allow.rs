//! `#[vramguard::allow(..)]`: parsing its lint names (with "did you mean" for a misspelling)
//! and reading the lints an item's attributes allow.

use proc_macro2::Span;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Attribute, Ident, Token};

use crate::names::Lint;

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
pub fn parse_allow_args(tokens: proc_macro2::TokenStream, span: Span) -> syn::Result<Vec<Lint>> {
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
pub fn is_vramguard_allow(attr: &Attribute) -> bool {
    let path = attr.path();
    path.segments.len() >= 2 && path.segments.last().is_some_and(|s| s.ident == "allow")
}

/// The lints allowed by the `#[vramguard::allow(..)]` attributes in `attrs`.
pub fn allowed_in(attrs: &[Attribute]) -> syn::Result<Vec<Lint>> {
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
fn attr_span(attr: &Attribute) -> Span {
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
