//! Validation of `#[batch_scope]`: where it may be placed, the markers, and options that do not
//! fit the function's loops. Every problem is reported, each at its own span.

use super::parse::{FnOptions, ScopeTarget, ScopedFunction, StrayMarker};

/// Checks the target against the options: the function to expand, or every problem found.
pub(crate) fn validate(target: ScopeTarget, options: &FnOptions) -> syn::Result<ScopedFunction> {
    let function = match target {
        ScopeTarget::Fn(function) => *function,
        ScopeTarget::Other(what, span) => {
            return Err(syn::Error::new(
                span,
                format!(
                    "#[batch_scope] goes on a function (or method) whose loops should free their \
                     intermediates each iteration; it cannot be used on {what}"
                ),
            ))
        }
    };
    let mut errors: Vec<syn::Error> = Vec::new();
    if let Some(constness) = &function.item.sig.constness {
        errors.push(syn::Error::new(
            constness.span,
            "#[batch_scope] cannot be used on a `const fn`: a batch scope is a runtime guard; \
             remove `const` or the attribute",
        ));
    }
    for marker in &function.stray_markers {
        errors.push(match marker {
            StrayMarker::NotOnALoop(span) => syn::Error::new(
                *span,
                "the #[batch_scope] marker goes on a `for`, `while` or `loop`",
            ),
            StrayMarker::Repeated(span) => {
                syn::Error::new(*span, "this loop already has a #[batch_scope] marker")
            }
        });
    }
    check_loops(&function, options, &mut errors);
    let mut errors = errors.into_iter();
    match errors.next() {
        None => Ok(function),
        Some(mut first) => {
            errors.for_each(|e| first.combine(e));
            Err(first)
        }
    }
}

/// The scoped loops: at least one, one only if the function names the label, none awaiting.
fn check_loops(function: &ScopedFunction, options: &FnOptions, errors: &mut Vec<syn::Error>) {
    let name = &function.item.sig.ident;
    let scoped = function.scoped_loops().count();
    if scoped == 0 {
        errors.push(syn::Error::new(
            name.span(),
            format!(
                "#[batch_scope] found no `for`, `while` or `loop` in `{name}`; put it on the \
                 function that runs the training or evaluation loop"
            ),
        ));
    }
    if let (Some(label), true) = (&options.settings.label, scoped > 1) {
        errors.push(syn::Error::new(
            label.span(),
            format!(
                "`label` names one loop, but `{name}` has {scoped} scoped loops; put \
                 `#[batch_scope(label = \"…\")]` markers on the loops instead"
            ),
        ));
    }
    for span in function.scoped_loops().filter_map(|l| l.awaits) {
        errors.push(syn::Error::new(
            span,
            "#[batch_scope] cannot scope a loop body that awaits: the scope belongs to the \
             thread, and the task may move to another thread at `.await`; mark only the loops \
             without `.await`",
        ));
    }
}
