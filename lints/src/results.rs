//! What a function gives back: the collections it returns, wraps, converts or concatenates.
//! What its loops collect into them is its result, not memory kept past its use.

use std::collections::HashSet;

use syn::visit::Visit;
use syn::{Block, Expr, ExprMethodCall, Stmt};

use crate::holds::{is_one_of, peel, peel_value, single_ident};
use crate::syntax::NameList;

/// Calls that join their arguments into one value: a collection passed to one holds the
/// pieces of a result.
static CONCATENATING: NameList = NameList::new(&[
    "cat",
    "stack",
    "concat",
    "concatenate",
    "hstack",
    "vstack",
    "dstack",
]);

/// Methods through which a returned value is still the collection itself (converted or
/// iterated): `out.try_into()`, `rows.into_iter().map(..).collect()`.
static CONVERTING: NameList = NameList::new(&[
    "into",
    "try_into",
    "into_iter",
    "iter",
    "map",
    "collect",
    "unwrap",
    "expect",
    "map_err",
    "ok",
    "ok_or",
    "ok_or_else",
    "into_boxed_slice",
]);

/// The names whose contents are the function's result: what its tail and `return`s give back
/// (`out`, `Ok(out)`, `Some(batch)`, `Self { layers }`, `rows.into_iter().collect()`), and what
/// it passes to a concatenation (`Tensor::cat(&outputs, 0)`).
pub(crate) fn outputs_of(body: &Block) -> HashSet<String> {
    #[derive(Default)]
    struct Outputs(HashSet<String>, usize);
    impl Outputs {
        fn returned(&mut self, expr: &Expr) {
            match peel(expr) {
                Expr::Path(_) => {
                    if let Some(ident) = single_ident(peel(expr)) {
                        self.0.insert(ident.to_string());
                    }
                }
                Expr::Reference(r) => self.returned(&r.expr),
                Expr::Call(call) => {
                    let constructor = match peel(&call.func) {
                        Expr::Path(p) => p.path.segments.last().is_some_and(|s| {
                            s.ident.to_string().starts_with(char::is_uppercase)
                                || s.ident == "new"
                                || is_one_of(&s.ident, &CONCATENATING)
                        }),
                        _ => false,
                    };
                    if constructor {
                        call.args.iter().for_each(|arg| self.returned(arg));
                    }
                }
                Expr::MethodCall(m) if is_one_of(&m.method, &CONVERTING) => {
                    self.returned(&m.receiver)
                }
                Expr::Struct(s) => s.fields.iter().for_each(|f| self.returned(&f.expr)),
                Expr::Tuple(t) => t.elems.iter().for_each(|e| self.returned(e)),
                Expr::Block(b) => self.tail(&b.block),
                Expr::If(i) => {
                    self.tail(&i.then_branch);
                    if let Some((_, other)) = &i.else_branch {
                        self.returned(other);
                    }
                }
                Expr::Match(m) => m.arms.iter().for_each(|arm| self.returned(&arm.body)),
                _ => {}
            }
        }
        fn tail(&mut self, block: &Block) {
            if let Some(Stmt::Expr(expr, None)) = block.stmts.last() {
                self.returned(expr);
            }
        }
        fn concatenated(&mut self, args: &syn::punctuated::Punctuated<Expr, syn::Token![,]>) {
            for arg in args {
                match peel_value(arg) {
                    Expr::Array(a) => a.elems.iter().for_each(|e| self.returned(e)),
                    other => self.returned(other),
                }
            }
        }
    }
    impl<'ast> Visit<'ast> for Outputs {
        fn visit_item(&mut self, _: &'ast syn::Item) {}
        fn visit_expr_closure(&mut self, closure: &'ast syn::ExprClosure) {
            // A closure's `return` is not the function's; its concatenations still count.
            self.1 += 1;
            syn::visit::visit_expr_closure(self, closure);
            self.1 -= 1;
        }
        fn visit_expr_return(&mut self, ret: &'ast syn::ExprReturn) {
            if let (Some(expr), 0) = (&ret.expr, self.1) {
                self.returned(expr);
            }
            syn::visit::visit_expr_return(self, ret);
        }
        fn visit_expr_call(&mut self, call: &'ast syn::ExprCall) {
            if let Expr::Path(p) = peel(&call.func) {
                if p.path
                    .segments
                    .last()
                    .is_some_and(|s| is_one_of(&s.ident, &CONCATENATING))
                {
                    self.concatenated(&call.args);
                }
            }
            syn::visit::visit_expr_call(self, call);
        }
        fn visit_expr_method_call(&mut self, call: &'ast ExprMethodCall) {
            if is_one_of(&call.method, &CONCATENATING) {
                self.concatenated(&call.args);
                // `outputs.concat()`.
                self.returned(&call.receiver);
            }
            syn::visit::visit_expr_method_call(self, call);
        }
    }
    let mut outputs = Outputs::default();
    outputs.tail(body);
    outputs.visit_block(body);
    outputs.0
}
