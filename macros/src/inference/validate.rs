//! Validation of `#[inference]`: where it may be placed, and options that name nothing.

use std::collections::BTreeSet;

use syn::ext::IdentExt;
use syn::spanned::Spanned;

use super::parse::{InferenceTarget, Options};
use crate::liveness;

/// One function the attribute applies to (borrowed from the target).
pub(crate) struct AnnotatedFn<'a> {
    pub sig: &'a syn::Signature,
    pub block: &'a syn::Block,
}

const PLACEMENT: &str = "#[inference] applies to functions, methods, `impl` blocks and `async fn`";

/// Checks the target and the options; returns every problem found.
pub(crate) fn validate(target: &InferenceTarget, options: &Options) -> Result<(), syn::Error> {
    let mut errors: Vec<syn::Error> = Vec::new();
    let functions: Vec<AnnotatedFn<'_>> = match target {
        InferenceTarget::Fn(function) => {
            check_signature(&function.sig, &mut errors);
            vec![AnnotatedFn {
                sig: &function.sig,
                block: &function.block,
            }]
        }
        InferenceTarget::TraitFn(method) => match &method.default {
            Some(block) => {
                check_signature(&method.sig, &mut errors);
                vec![AnnotatedFn {
                    sig: &method.sig,
                    block,
                }]
            }
            None => {
                errors.push(syn::Error::new(
                    method.sig.ident.span(),
                    format!(
                        "#[inference] needs a function body, and the trait method `{}` has none; \
                         put the attribute on the method in each `impl` instead",
                        method.sig.ident
                    ),
                ));
                Vec::new()
            }
        },
        InferenceTarget::Impl(block) => {
            let methods: Vec<AnnotatedFn<'_>> = block
                .items
                .iter()
                .filter_map(|item| match item {
                    syn::ImplItem::Fn(method) if method.sig.constness.is_none() => {
                        Some(AnnotatedFn {
                            sig: &method.sig,
                            block: &method.block,
                        })
                    }
                    _ => None,
                })
                .collect();
            if methods.is_empty() {
                errors.push(syn::Error::new(
                    block.impl_token.span(),
                    "#[inference] on an `impl` block applies to its methods, and this block has \
                     no non-const method with a body",
                ));
            }
            methods
        }
        InferenceTarget::Other(what, span) => {
            errors.push(syn::Error::new(
                *span,
                format!("{PLACEMENT}, not to {what}"),
            ));
            Vec::new()
        }
    };
    if !functions.is_empty() {
        let mut declared = BTreeSet::new();
        for function in &functions {
            liveness::declared_names(function.block, &mut declared);
            for param in liveness::params_of(function.sig) {
                declared.insert(param.ident.unraw().to_string());
            }
        }
        for name in &options.keep {
            if !declared.contains(&name.unraw().to_string()) {
                errors.push(syn::Error::new(
                    name.span(),
                    format!(
                        "keep(`{name}`): no local or parameter named `{name}` in this function"
                    ),
                ));
            }
        }
    }
    combine(errors)
}

fn check_signature(sig: &syn::Signature, errors: &mut Vec<syn::Error>) {
    if let Some(constness) = &sig.constness {
        errors.push(syn::Error::new(
            constness.span(),
            "#[inference] cannot apply to a `const fn`: it enters a runtime no-grad guard; remove \
             `const` or the attribute",
        ));
    }
}

fn combine(errors: Vec<syn::Error>) -> Result<(), syn::Error> {
    let mut iter = errors.into_iter();
    match iter.next() {
        None => Ok(()),
        Some(mut first) => {
            iter.for_each(|e| first.combine(e));
            Err(first)
        }
    }
}
