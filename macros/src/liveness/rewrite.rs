//! Rewrite: applies each block's plan, innermost blocks first, and writes the statements that
//! move a binding in twice (see the crate-level technique in [`super`]).

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::visit_mut::{self, VisitMut};
use syn::{Block, Expr, Ident, Item, Stmt};

use super::analysis::block::ParamBinding;
use super::analysis::branches::branching_expr_mut;
use super::analysis::is_keep_attr;
use super::analysis::patterns::let_bindings;
use super::analysis::Env;
use super::emit::{self, first_span, first_span_of_stmt};
use super::plan::{self, Plan, PlanContext};
use super::{DropOptions, DropReport};

/// Rewrites a block and, through [`VisitMut`], every block nested in it.
pub(super) struct Rewriter<'o> {
    /// The attribute's options.
    pub opts: &'o DropOptions,
    /// Local `macro_rules!` names → the identifiers of their bodies.
    pub local_macros: BTreeMap<String, BTreeSet<String>>,
    /// Names written in more than one hygiene context (`$m` and a `macro_rules!` body's own
    /// `m`): the analysis compares names as text, so it cannot tell their uses apart, and
    /// locals of these names keep their scope end.
    pub mixed_hygiene: BTreeSet<String>,
    /// What was dropped, over all blocks.
    pub report: DropReport,
    /// Nesting depth of the block being rewritten.
    pub depth: usize,
    /// Rewriting the fallback copy of a statement that is written twice: no statement inside
    /// it is written twice again, so the output stays within (nesting depth + 1) × the input.
    pub no_dup: bool,
    /// A drop probe was emitted: the block needs the probe traits in scope.
    pub probes: bool,
    /// Names known to be numbers where the block being rewritten starts (see
    /// `analysis::shapes::scalar`).
    pub outer_scalars: BTreeSet<String>,
}

impl Rewriter<'_> {
    /// Plans and rewrites `block`, whose entry bindings are `params`.
    pub(super) fn block(&mut self, block: &mut Block, params: &[ParamBinding]) {
        let kept_names = self
            .opts
            .keep
            .iter()
            .map(|k| k.unraw().to_string())
            .chain(self.mixed_hygiene.iter().cloned())
            .collect();
        let ctx = PlanContext {
            env: Env {
                owned: &self.opts.owned,
                borrows: &self.opts.borrows,
                local_macros: &self.local_macros,
                optimistic: self.opts.optimistic,
                try_owns: self.opts.try_owns,
            },
            kept_names,
            no_dup: self.no_dup,
            depth: self.depth,
            probe_only: false,
            outer_scalars: &self.outer_scalars,
        };
        let plan = plan::plan(block, params, &ctx, &mut self.report);
        // A statement that may move a binding it drops is written twice (see `apply`);
        // its fallback copy, used when the binding's type is not `DropAtLastUse`, starts from the
        // statement as written.
        let mut fallback: BTreeMap<usize, Stmt> = plan
            .stmts
            .iter()
            .filter(|(_, drops)| !drops.move_in.is_empty())
            .map(|(&index, _)| (index, block.stmts[index].clone()))
            .collect();
        self.depth += 1;
        // Blocks nested in a statement see the numbers known there.
        let outer_scalars = self.outer_scalars.clone();
        for (index, stmt) in block.stmts.iter_mut().enumerate() {
            self.outer_scalars = plan.scalars_at[index].clone();
            match plan.stmts.get(&index) {
                Some(drops) if !drops.pushed.is_empty() => {
                    self.push_into_stmt(stmt, &drops.pushed);
                }
                _ => self.visit_stmt_mut(stmt),
            }
        }
        let no_dup = std::mem::replace(&mut self.no_dup, true);
        for (&index, stmt) in fallback.iter_mut() {
            self.outer_scalars = plan.scalars_at[index].clone();
            self.visit_stmt_mut(stmt);
        }
        self.outer_scalars = outer_scalars;
        self.no_dup = no_dup;
        self.depth -= 1;
        for stmt in block.stmts.iter_mut().chain(fallback.values_mut()) {
            if let Stmt::Local(local) = stmt {
                local.attrs.retain(|a| !is_keep_attr(a));
            }
        }
        self.apply(block, plan, fallback);
    }

    /// Rewrites a statement whose `if`/`match` drops `pushed` inside its branches (see
    /// `plan::branches`): a branch that uses a binding is rewritten with the binding handed in
    /// (dropped at its last use there), every other branch drops it at its start (a
    /// missing `else` becomes one). Conditions, scrutinees and guards are rewritten as usual
    /// and drop nothing.
    fn push_into_stmt(&mut self, stmt: &mut Stmt, pushed: &[(Ident, bool)]) {
        match branching_expr_mut(stmt) {
            Some(expr) => self.push_into_expr(expr, pushed),
            None => self.visit_stmt_mut(stmt),
        }
    }

    fn push_into_expr(&mut self, expr: &mut Expr, pushed: &[(Ident, bool)]) {
        match expr {
            Expr::If(if_) => {
                self.visit_expr_mut(&mut if_.cond);
                self.push_into_block(&mut if_.then_branch, pushed);
                match &mut if_.else_branch {
                    Some((_, otherwise)) => match &mut **otherwise {
                        nested @ Expr::If(_) => self.push_into_expr(nested, pushed),
                        Expr::Block(b) => self.push_into_block(&mut b.block, pushed),
                        other => self.push_into_arm(other, pushed),
                    },
                    None => {
                        let span = if_.then_branch.brace_token.span.close();
                        let mut block = Block {
                            brace_token: syn::token::Brace(span),
                            stmts: Vec::new(),
                        };
                        self.push_into_block(&mut block, pushed);
                        if_.else_branch = Some((
                            syn::Token![else](span),
                            Box::new(Expr::Block(syn::ExprBlock {
                                attrs: Vec::new(),
                                label: None,
                                block,
                            })),
                        ));
                    }
                }
            }
            Expr::Match(match_) => {
                self.visit_expr_mut(&mut match_.expr);
                for arm in &mut match_.arms {
                    // A guard (inside the pattern) is a condition: rewritten, never a drop.
                    self.visit_pat_mut(&mut arm.pat);
                    self.push_into_arm(&mut arm.body, pushed);
                }
            }
            Expr::Block(b) => self.push_into_block(&mut b.block, pushed),
            other => self.visit_expr_mut(other),
        }
    }

    /// A `match` arm's body (or an `else` that is no block) as a block (see
    /// `analysis::branches::body_block`), then [`Self::push_into_block`].
    fn push_into_arm(&mut self, body: &mut Expr, pushed: &[(Ident, bool)]) {
        if !matches!(body, Expr::Block(b) if b.label.is_none() && b.attrs.is_empty()) {
            let span = first_span(body);
            let inner = std::mem::replace(body, Expr::Verbatim(TokenStream::new()));
            *body = Expr::Block(syn::ExprBlock {
                attrs: Vec::new(),
                label: None,
                block: Block {
                    brace_token: syn::token::Brace(span),
                    stmts: vec![Stmt::Expr(inner, None)],
                },
            });
        }
        if let Expr::Block(b) = body {
            self.push_into_block(&mut b.block, pushed);
        }
    }

    /// One branch: the bindings it uses are handed in to it, the others dropped at its start.
    fn push_into_block(&mut self, block: &mut Block, pushed: &[(Ident, bool)]) {
        let mentions = Env {
            owned: &self.opts.owned,
            borrows: &self.opts.borrows,
            local_macros: &self.local_macros,
            optimistic: self.opts.optimistic,
            try_owns: self.opts.try_owns,
        }
        .scan_block(block)
        .mentions;
        let (used, dead): (Vec<_>, Vec<_>) = pushed
            .iter()
            .partition(|(ident, _)| mentions.contains_key(&ident.unraw().to_string()));
        let handed: Vec<ParamBinding> = used
            .into_iter()
            .map(|(ident, mutable)| ParamBinding {
                ident: ident.clone(),
                mutable: *mutable,
                handed_in: true,
            })
            .collect();
        self.block(block, &handed);
        if !dead.is_empty() {
            self.probes = true;
            let span = block.brace_token.span.open();
            // Latest declaration first, like a scope end.
            let drops: Vec<Stmt> = dead
                .iter()
                .rev()
                .map(|(ident, _)| {
                    let mut ident = ident.clone();
                    ident.set_span(ident.span().located_at(span));
                    emit::drop_at_last_use(ident, span)
                })
                .collect();
            block.stmts.splice(0..0, drops);
        }
    }

    fn apply(&mut self, block: &mut Block, plan: Plan, mut fallback: BTreeMap<usize, Stmt>) {
        for decl in plan.mut_decls {
            if let Some(Stmt::Local(local)) = block.stmts.get_mut(decl) {
                local
                    .attrs
                    .push(emit::allow(&["unused_mut"], Span::call_site()));
            }
        }
        // The block's value: only a binding handed in to a branch is dropped there.
        let tail = match block.stmts.last() {
            Some(Stmt::Expr(_, None)) => Some(block.stmts.len() - 1),
            _ => None,
        };
        for (index, scheduled) in plan.stmts.into_iter().rev() {
            let is_tail = tail == Some(index);
            let stmt = &mut block.stmts[index];
            let span = first_span_of_stmt(stmt);
            let located = |ident: &Ident| {
                // Cloned, not `Ident::new`: raw identifiers (`r#type`) and the identifier's
                // hygiene (a `macro_rules!` body's own locals) stay as written.
                let mut ident = ident.clone();
                ident.set_span(ident.span().located_at(span));
                ident
            };
            // A `mut` binding moved in would be mutated as a copy if it were `Copy`.
            let condition = scheduled
                .move_in
                .iter()
                .map(|(ident, mutable)| {
                    let question = if *mutable {
                        "__vg_droppable"
                    } else {
                        "__vg_movable"
                    };
                    emit::probe(located(ident), question, span)
                })
                .reduce(|all, next| emit::and(all, next, span));
            if let (Some(condition), Some(fallback)) = (condition, fallback.remove(&index)) {
                self.probes = true;
                let rebinds: Vec<Stmt> = scheduled
                    .move_in
                    .iter()
                    .map(|(ident, mutable)| emit::rebind(located(ident), *mutable, span))
                    .collect();
                let moved: &[(Ident, bool)] = if self.opts.inplace {
                    &scheduled.move_in
                } else {
                    &[]
                };
                self.report.in_place_calls +=
                    wrap(stmt, rebinds, condition, fallback, moved, is_tail);
            }
            // Dropped after the statement, latest declaration first (like a scope end);
            // only if the type is `DropAtLastUse`, otherwise the value stays to its scope's end
            // (a conditional move: the compiler's drop flag keeps its scope end and drop order).
            let drops: Vec<Stmt> = scheduled
                .drop_after
                .iter()
                .rev()
                .map(|ident| {
                    self.probes = true;
                    emit::drop_at_last_use(located(ident), span)
                })
                .collect();
            if drops.is_empty() {
                continue;
            }
            match stmt {
                // `{ …; let v = TAIL; DROPS v }`: the value keeps its place, the tail's
                // temporaries are gone before the drops.
                Stmt::Expr(expr, None) if is_tail => {
                    let span = first_span(expr);
                    let placeholder = Expr::Verbatim(TokenStream::new());
                    let value = std::mem::replace(expr, placeholder);
                    let mut stmts = vec![emit::local(value_ident(), None, value, span)];
                    stmts.extend(drops);
                    stmts.push(Stmt::Expr(value_ident_expr(), None));
                    block.stmts.splice(index..=index, stmts);
                }
                Stmt::Local(local)
                    if local.init.is_some()
                        && !scheduled.after_value_borrows
                        && shadows_any(&local.pat, &scheduled.drop_after) =>
                {
                    drop_in_initializer(local, drops);
                }
                _ => {
                    block.stmts.splice(index + 1..index + 1, drops);
                }
            }
        }
    }
}

/// Writes a statement that may move the bindings it drops twice, and lets their types
/// choose: `if !<all DropAtLastUse> { STMT } else { let x = x; STMT }`. The first copy, `fallback`,
/// is the statement with nothing moved, so values of other types keep their scope end and drop
/// order; in the second the bindings are moved in, so they die at the statement's end whether
/// it borrows or moves them. For a `let`, only the initializer is written twice. In the moved
/// copy, calls of listed methods on the `moved` bindings get a receiver that may consume them
/// (see [`super::inplace`]); returns how many. The two copies differ in nothing else, so a
/// mistake inside the statement gives the same diagnostic twice, which rustc shows once.
fn wrap(
    stmt: &mut Stmt,
    rebinds: Vec<Stmt>,
    condition: Expr,
    fallback: Stmt,
    moved: &[(Ident, bool)],
    is_tail: bool,
) -> usize {
    let mut in_place = 0;
    // Built as syntax trees around the statement, never re-parsed: re-parsing a statement at
    // every level it is nested in would make the macro's own time grow with nesting depth.
    let span = first_span_of_stmt(stmt);
    match (stmt, fallback) {
        // A branch's value (a binding handed in to it dies there): `if <..> { let x = x;
        // let v = TAIL; v } else { TAIL }`, the value bound first so that the tail's
        // temporaries die before `x` does.
        (Stmt::Expr(expr, None), Stmt::Expr(fallback, None)) if is_tail => {
            let placeholder = Expr::Verbatim(TokenStream::new());
            let mut value = std::mem::replace(expr, placeholder);
            in_place += super::inplace::rewrite(&mut value, moved);
            let mut then = rebinds;
            then.push(emit::local(value_ident(), None, value, span));
            then.push(Stmt::Expr(value_ident_expr(), None));
            *expr = if_else(condition, then, vec![Stmt::Expr(fallback, None)], span);
        }
        (Stmt::Local(local), Stmt::Local(fallback)) => {
            let (Some(init), Some(fallback_init)) = (&mut local.init, fallback.init) else {
                return 0;
            };
            let placeholder = Expr::Verbatim(TokenStream::new());
            let mut expr = std::mem::replace(&mut *init.expr, placeholder);
            in_place += super::inplace::rewrite(&mut expr, moved);
            let mut then = rebinds;
            then.push(value_local(&local.pat, expr, span));
            then.push(Stmt::Expr(value_ident_expr(), None));
            // With a type annotation, the fallback carries its value the same way, so that a
            // type error reads the same in both copies ("expected due to this" at the
            // annotation) and rustc shows it once. Its initializer's temporaries then die at
            // that inner `let`, where nothing else runs before the statement ends (not so in a
            // `let … else`, whose `else` runs in between: left as written).
            let otherwise = if matches!(local.pat, syn::Pat::Type(_)) && init.diverge.is_none() {
                vec![
                    value_local(&local.pat, *fallback_init.expr, span),
                    Stmt::Expr(value_ident_expr(), None),
                ]
            } else {
                vec![Stmt::Expr(*fallback_init.expr, None)]
            };
            let chosen = if_else(condition, then, otherwise, span);
            // `let … else` initializers may not end with `}`.
            *init.expr = if init.diverge.is_some() {
                Expr::Paren(syn::ExprParen {
                    attrs: Vec::new(),
                    paren_token: syn::token::Paren(span),
                    expr: Box::new(chosen),
                })
            } else {
                chosen
            };
        }
        (stmt @ (Stmt::Expr(..) | Stmt::Macro(_)), fallback) => {
            let placeholder = Stmt::Expr(Expr::Verbatim(TokenStream::new()), None);
            let mut inner = as_statement(std::mem::replace(stmt, placeholder));
            if let Stmt::Expr(expr, _) = &mut inner {
                in_place += super::inplace::rewrite(expr, moved);
            }
            let mut then = rebinds;
            then.push(inner);
            let chosen = if_else(condition, then, vec![as_statement(fallback)], span);
            *stmt = Stmt::Expr(chosen, None);
        }
        _ => {}
    }
    in_place
}

/// `if !condition { fallback } else { moved }`: the statement as written comes first, so that
/// where rustc reports an error once per place and predicate (an unmet trait bound), the copy
/// it reports is the user's own.
fn if_else(condition: Expr, moved: Vec<Stmt>, fallback: Vec<Stmt>, span: Span) -> Expr {
    let block = |stmts| syn::Block {
        brace_token: syn::token::Brace(span),
        stmts,
    };
    let condition = match condition {
        binary @ Expr::Binary(_) => Expr::Paren(syn::ExprParen {
            attrs: Vec::new(),
            paren_token: syn::token::Paren(span),
            expr: Box::new(binary),
        }),
        other => other,
    };
    Expr::If(syn::ExprIf {
        attrs: Vec::new(),
        if_token: syn::Token![if](span),
        cond: Box::new(Expr::Unary(syn::ExprUnary {
            attrs: Vec::new(),
            op: syn::UnOp::Not(syn::Token![!](span)),
            expr: Box::new(condition),
        })),
        then_branch: block(fallback),
        else_branch: Some((
            syn::Token![else](span),
            Box::new(Expr::Block(syn::ExprBlock {
                attrs: Vec::new(),
                label: None,
                block: block(moved),
            })),
        )),
    })
}

/// The hygienic local that carries a `let`'s value through a block.
fn value_ident() -> Ident {
    Ident::new("__vg_value", Span::mixed_site())
}

fn value_ident_expr() -> Expr {
    emit::ident(value_ident())
}

/// `let __vg_value: T = expr;`, with the type annotation of the `let` whose value it carries,
/// so that inference is unchanged.
fn value_local(pat: &syn::Pat, expr: Expr, span: Span) -> Stmt {
    let ty = match pat {
        syn::Pat::Type(typed) => Some((*typed.ty).clone()),
        _ => None,
    };
    emit::local(value_ident(), ty, expr, span)
}

/// A statement that can be followed by others in a block: ends with `;` where it could
/// otherwise be read as the block's value.
fn as_statement(stmt: Stmt) -> Stmt {
    match stmt {
        Stmt::Expr(expr, None) => Stmt::Expr(expr, Some(syn::Token![;](Span::call_site()))),
        Stmt::Macro(mut mac)
            if mac.semi_token.is_none()
                && !matches!(mac.mac.delimiter, syn::MacroDelimiter::Brace(_)) =>
        {
            mac.semi_token = Some(syn::Token![;](Span::call_site()));
            Stmt::Macro(mac)
        }
        other => other,
    }
}

/// Whether a `let` pattern binds one of `names` (which the statement's drops must still
/// name as they were before it).
fn shadows_any(pat: &syn::Pat, names: &[Ident]) -> bool {
    let mut bound = Vec::new();
    let_bindings(pat, &mut bound);
    bound
        .iter()
        .any(|(ident, _)| names.iter().any(|n| n.unraw() == ident.unraw()))
}

/// `let p = { let v = INIT; DROPS v };`: the drops name the bindings as they were before
/// this `let`, which may shadow them. `INIT`'s temporaries are gone by then (a temporary
/// borrowing a dropped binding, `x.lock().unwrap().len()`, must die first).
fn drop_in_initializer(local: &mut syn::Local, drops: Vec<Stmt>) {
    let Some(init) = &mut local.init else { return };
    let span = first_span(&init.expr);
    let placeholder = Expr::Verbatim(TokenStream::new());
    let expr = std::mem::replace(&mut *init.expr, placeholder);
    let mut stmts = vec![value_local(&local.pat, expr, span)];
    stmts.extend(drops);
    stmts.push(Stmt::Expr(value_ident_expr(), None));
    let block = Expr::Block(syn::ExprBlock {
        attrs: Vec::new(),
        label: None,
        block: syn::Block {
            brace_token: syn::token::Brace(span),
            stmts,
        },
    });
    *init.expr = if init.diverge.is_some() {
        Expr::Paren(syn::ExprParen {
            attrs: Vec::new(),
            paren_token: syn::token::Paren(span),
            expr: Box::new(block),
        })
    } else {
        block
    };
}

impl VisitMut for Rewriter<'_> {
    fn visit_block_mut(&mut self, block: &mut Block) {
        self.block(block, &[]);
    }

    // Nested items are other functions: not ours to rewrite.
    fn visit_item_mut(&mut self, _: &mut Item) {}

    // The loop's pattern binds its names in the body: over a range of numbers
    // (`for i in 0..n`) a single name is a number there; otherwise they are not.
    fn visit_expr_for_loop_mut(&mut self, for_loop: &mut syn::ExprForLoop) {
        self.visit_expr_mut(&mut for_loop.expr);
        let outer_scalars = self.outer_scalars.clone();
        let mut names = Vec::new();
        super::analysis::patterns::pattern_bindings(&for_loop.pat, &mut names);
        for (ident, _) in &names {
            self.outer_scalars.remove(&ident.unraw().to_string());
        }
        let numbers = match (&*for_loop.pat, &*for_loop.expr) {
            (syn::Pat::Ident(pat), Expr::Range(range)) if pat.subpat.is_none() => {
                let known = |name: &str| outer_scalars.contains(name);
                [&range.start, &range.end]
                    .into_iter()
                    .flatten()
                    .all(|bound| super::analysis::shapes::scalar(bound, &known))
                    .then(|| pat.ident.unraw().to_string())
            }
            _ => None,
        };
        self.outer_scalars.extend(numbers);
        self.visit_block_mut(&mut for_loop.body);
        self.outer_scalars = outer_scalars;
    }

    // A closure's parameters shadow the names they bind.
    fn visit_expr_closure_mut(&mut self, closure: &mut syn::ExprClosure) {
        let outer_scalars = self.outer_scalars.clone();
        for input in &closure.inputs {
            let mut names = Vec::new();
            super::analysis::patterns::pattern_bindings(input, &mut names);
            for (ident, _) in &names {
                self.outer_scalars.remove(&ident.unraw().to_string());
            }
        }
        visit_mut::visit_expr_closure_mut(self, closure);
        self.outer_scalars = outer_scalars;
    }

    // A `const { }` block runs at compile time: nothing there to free, and a drop probe
    // is not a `const` call.
    fn visit_expr_const_mut(&mut self, konst: &mut syn::ExprConst) {
        strip_keep_markers(&mut konst.block);
    }
}

/// Removes `#[keep]` markers without transforming anything (`drops = false`).
pub(crate) fn strip_keep_markers(block: &mut Block) {
    struct Strip;
    impl VisitMut for Strip {
        fn visit_local_mut(&mut self, local: &mut syn::Local) {
            local.attrs.retain(|a| !is_keep_attr(a));
            visit_mut::visit_local_mut(self, local);
        }
        fn visit_item_mut(&mut self, _: &mut Item) {}
    }
    Strip.visit_block_mut(block);
}
