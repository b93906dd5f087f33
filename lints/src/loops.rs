//! What a loop is, read before its body is walked: whether it goes over the model's own parts
//! (one forward pass) or over data, and which collections it also empties (a working set, not
//! a history).

use std::collections::HashSet;

use syn::visit::Visit;
use syn::{Expr, ExprMethodCall};

use crate::holds::{
    classify, is_one_of, is_self_field, peel, peel_value, shown, single_ident, Holds, Scope,
};
use crate::syntax::NameList;

/// Collection methods that take values out (a loop that also calls one keeps a working set,
/// not a history).
static SHRINKING: NameList = NameList::new(&[
    "clear",
    "drain",
    "remove",
    "swap_remove",
    "pop",
    "pop_front",
    "pop_back",
    "retain",
    "truncate",
    "split_off",
]);

/// Whether a loop's iterated expression is rooted in `self` (`self.layers.iter()`,
/// `&self.blocks`, `self.embs.iter().zip(ids)`, `0..self.num_layers`).
pub(crate) fn rooted_in_self(expr: &Expr) -> bool {
    match peel(expr) {
        Expr::Path(p) => p.path.is_ident("self"),
        Expr::MethodCall(m) => rooted_in_self(&m.receiver),
        Expr::Reference(r) => rooted_in_self(&r.expr),
        Expr::Field(f) => rooted_in_self(&f.base),
        Expr::Index(i) => rooted_in_self(&i.expr),
        Expr::Range(r) => {
            r.start.as_deref().is_some_and(rooted_in_self)
                || r.end.as_deref().is_some_and(rooted_in_self)
        }
        _ => false,
    }
}

/// The collections a loop body takes values out of (`buf.clear()`, `queue.pop()`,
/// `std::mem::take(&mut buf)`, `buf = Vec::new()`), by name (`self.field` for fields).
#[derive(Default)]
pub(crate) struct ShrinkFinder(HashSet<String>);

impl ShrinkFinder {
    /// The names found.
    pub(crate) fn into_names(self) -> HashSet<String> {
        self.0
    }

    fn place(&mut self, expr: &Expr) {
        let place = peel_value(expr);
        if is_self_field(place) {
            self.0.insert(shown(place, 60));
        } else if let Some(ident) = single_ident(place) {
            self.0.insert(ident.to_string());
        }
    }
}

impl<'ast> Visit<'ast> for ShrinkFinder {
    fn visit_item(&mut self, _: &'ast syn::Item) {}
    fn visit_expr_method_call(&mut self, call: &'ast ExprMethodCall) {
        if is_one_of(&call.method, &SHRINKING) {
            self.place(&call.receiver);
        }
        syn::visit::visit_expr_method_call(self, call);
    }
    fn visit_expr_call(&mut self, call: &'ast syn::ExprCall) {
        if let Expr::Path(p) = peel(&call.func) {
            if p.path
                .segments
                .last()
                .is_some_and(|s| s.ident == "take" || s.ident == "replace")
            {
                if let Some(first) = call.args.first() {
                    self.place(first);
                }
            }
        }
        syn::visit::visit_expr_call(self, call);
    }
    fn visit_expr_assign(&mut self, assign: &'ast syn::ExprAssign) {
        // `buf = Vec::new()`: a fresh collection each time.
        let nothing = |_: &str| None;
        let no_fns = HashSet::new();
        let no_closures = std::collections::HashMap::new();
        let scope = Scope {
            lookup: &nothing,
            library: crate::Library::Unknown,
            number_fns: &no_fns,
            closures: &no_closures,
        };
        if classify(&assign.right, &scope) == Holds::Created {
            self.place(&assign.left);
        }
        syn::visit::visit_expr_assign(self, assign);
    }
}
