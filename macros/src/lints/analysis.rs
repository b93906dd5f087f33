//! The lint pass: one walk over a function body that tracks loops, blocks, locals, no-grad
//! regions and `allow`s, and records findings with their spans.

use super::names::{allowed_in, is_vramguard_allow, Lint};
use super::syntax::{
    classify, classify_local, idents_in, is_one_of, is_self_field, names_any_of, peel, peel_value,
    shown, single_ident, stmt_attrs_mut, Holds,
};
use super::LintContext;
use crate::common::NameList;
use crate::liveness::pattern_names;
use proc_macro2::Span;
use quote::ToTokens;
use std::collections::{HashMap, HashSet};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::visit_mut::{self, VisitMut};
use syn::{BinOp, Block, Expr, ExprMethodCall, Stmt};

/// One lint hit.
pub(crate) struct Finding {
    pub lint: Lint,
    pub span: Span,
    pub message: String,
}

/// Collection methods that keep their argument.
static COLLECTING: NameList = NameList::new(&[
    "push",
    "push_back",
    "push_front",
    "insert",
    "extend",
    "extend_from_slice",
    "append",
]);

/// Locals bound inside the current iteration of a loop.
#[derive(Default)]
struct LoopFrame {
    locals: HashMap<String, Holds>,
}

/// Locals of a block, and the names mentioned by its statements after the current one.
#[derive(Default)]
struct BlockFrame {
    locals: Vec<(String, Holds)>,
    later: HashSet<String>,
    no_grad_guards: usize,
}

pub(crate) struct Walker<'c, 'a> {
    ctx: &'c LintContext<'a>,
    allowed: Vec<Lint>,
    loops: Vec<LoopFrame>,
    blocks: Vec<BlockFrame>,
    no_grad: usize,
    track_later_uses: bool,
    pub findings: Vec<Finding>,
    pub errors: Vec<syn::Error>,
}

impl<'c, 'a> Walker<'c, 'a> {
    pub(crate) fn new(ctx: &'c LintContext<'a>, allowed: Vec<Lint>, body: &Block) -> Self {
        let empty_cache = names_any_of(&["empty_cache"], |f| f.visit_block(body));
        Self {
            ctx,
            allowed,
            loops: Vec::new(),
            blocks: Vec::new(),
            no_grad: 0,
            track_later_uses: empty_cache,
            findings: Vec::new(),
            errors: Vec::new(),
        }
    }

    fn report(&mut self, lint: Lint, span: Span, specific: String) {
        if self.allowed.contains(&lint) {
            return;
        }
        let message = format!(
            "vramguard::{name}: {specific}: {why}. Fix: {fix}. (Silence with \
             #[vramguard::allow({name})].)",
            name = lint.name(),
            why = lint.explanation(),
            fix = lint.fix(),
        );
        if !self
            .findings
            .iter()
            .any(|f| f.lint == lint && f.message == message)
        {
            self.findings.push(Finding {
                lint,
                span,
                message,
            });
        }
    }

    fn lookup(&self, name: &str) -> Option<Holds> {
        self.loops.last().and_then(|l| l.locals.get(name).copied())
    }

    fn bind_in_loop(&mut self, names: &[syn::Ident], holds: Holds) {
        if let Some(frame) = self.loops.last_mut() {
            for name in names {
                frame.locals.insert(name.to_string(), holds);
            }
        }
    }

    fn bind_pattern(&mut self, pat: &syn::Pat) {
        let mut names = Vec::new();
        pattern_names(pat, &mut names);
        self.bind_in_loop(&names, Holds::Pattern);
    }

    /// Whether `receiver` names state that outlives the current iteration.
    fn declared_outside_loop(&self, receiver: &Expr) -> Option<String> {
        let receiver = peel(receiver);
        if is_self_field(receiver) {
            return Some(shown(receiver, 60));
        }
        let ident = single_ident(receiver)?;
        let frame = self.loops.last()?;
        (!frame.locals.contains_key(&ident.to_string())).then(|| ident.to_string())
    }

    /// What the innermost local named `name` was declared holding (`None`: not a local of
    /// this function, e.g. a parameter).
    fn declared_holds(&self, name: &str) -> Option<Holds> {
        self.blocks.iter().rev().find_map(|frame| {
            frame
                .locals
                .iter()
                .rev()
                .find(|(local, _)| local == name)
                .map(|&(_, holds)| holds)
        })
    }

    fn holds_of(&self, expr: &Expr) -> Holds {
        let lookup = |name: &str| self.lookup(name);
        classify(expr, &lookup)
    }

    fn check_method_call(&mut self, call: &ExprMethodCall) {
        let method = call.method.to_string();
        if method == "backward" && self.ctx.inference {
            self.report(
                Lint::BackwardInInference,
                call.method.span(),
                format!("`.backward()` in `{}`", self.ctx.fn_name),
            );
        }
        if method == "empty_cache" {
            self.check_empty_cache(call.method.span());
        }
        if self.loops.is_empty() {
            return;
        }
        if is_one_of(&call.method, &COLLECTING) {
            self.check_accumulation(call);
        }
        if is_inplace(&method) && !self.ctx.inference && self.no_grad == 0 {
            let receiver = peel(&call.receiver);
            if let Some(ident) = single_ident(receiver) {
                if self.lookup(&ident.to_string()) == Some(Holds::Produced) {
                    self.report(
                        Lint::InplaceOnActivation,
                        call.method.span(),
                        format!(
                            "`{ident}.{method}(..)` modifies `{ident}`, computed in this \
                             iteration with grad enabled"
                        ),
                    );
                }
            }
        }
    }

    fn check_accumulation(&mut self, call: &ExprMethodCall) {
        let Some(collection) = self.declared_outside_loop(&call.receiver) else {
            return;
        };
        let Some(value) = call.args.last() else {
            return;
        };
        let holds = self.holds_of(peel_value(value));
        if matches!(holds, Holds::Produced | Holds::Detached) {
            let shown = shown(value, 60);
            self.report(
                Lint::AccumulatesAcrossIterations,
                call.method.span(),
                format!(
                    "`{collection}.{}({shown})` keeps a value computed in each iteration",
                    call.method
                ),
            );
        }
    }

    /// `total += loss` and `total = total + loss` on a total declared outside the loop.
    fn check_running_total(&mut self, target: &Expr, added: &Expr, span: Span) {
        if self.loops.is_empty() {
            return;
        }
        let Some(total) = self.declared_outside_loop(target) else {
            return;
        };
        // A total declared as a number (`let mut sum = 0f32;`) is a primitive: no tensor can
        // be added to it, whatever `added` is.
        if self.declared_holds(&total) == Some(Holds::Scalar) {
            return;
        }
        if self.holds_of(peel_value(added)) == Holds::Produced {
            let shown = shown(added, 60);
            self.report(
                Lint::GraphAcrossIterations,
                span,
                format!("`{total}` accumulates `{shown}`, computed in each iteration"),
            );
        }
    }

    fn check_empty_cache(&mut self, span: Span) {
        let mut later = HashSet::new();
        let mut alive = Vec::new();
        for frame in self.blocks.iter().rev() {
            later.extend(frame.later.iter().cloned());
            for (name, holds) in frame.locals.iter().rev() {
                if holds.holds_memory()
                    && !name.starts_with('_')
                    && later.contains(name)
                    && !alive.contains(name)
                {
                    alive.push(name.clone());
                }
            }
        }
        if alive.is_empty() {
            return;
        }
        alive.reverse();
        let names = alive
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        self.report(
            Lint::EmptyCacheIsNotFree,
            span,
            format!("`empty_cache()` runs while {names} are still alive (used afterwards)"),
        );
    }

    fn with_allows<R>(&mut self, allows: Vec<Lint>, f: impl FnOnce(&mut Self) -> R) -> R {
        let mark = self.allowed.len();
        self.allowed.extend(allows);
        let result = f(self);
        self.allowed.truncate(mark);
        result
    }

    fn in_loop<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        self.loops.push(LoopFrame::default());
        let result = f(self);
        self.loops.pop();
        result
    }

    /// Removes `#[vramguard::allow(..)]` from a statement and returns what it allows.
    fn take_statement_allows(&mut self, stmt: &mut Stmt) -> Vec<Lint> {
        match stmt_attrs_mut(stmt) {
            Some(attrs) => self.take_allows(attrs),
            None => Vec::new(),
        }
    }

    /// Removes `#[vramguard::allow(..)]` from `attrs` (a statement's or a `match` arm's) and
    /// returns what it allows.
    fn take_allows(&mut self, attrs: &mut Vec<syn::Attribute>) -> Vec<Lint> {
        let (ours, rest): (Vec<_>, Vec<_>) = attrs.drain(..).partition(is_vramguard_allow);
        *attrs = rest;
        match allowed_in(&ours) {
            Ok(lints) => lints,
            Err(err) => {
                self.errors.push(err);
                Vec::new()
            }
        }
    }
}

/// `add_`, `relu_`, ...: PyTorch's naming of in-place ops (not `detach_`, which is safe).
fn is_inplace(method: &str) -> bool {
    method.len() > 1
        && method.ends_with('_')
        && !method.starts_with('_')
        && !method.ends_with("__")
        && method != "detach_"
}

/// Whether a `let` starts a no-grad region (`let _g = NoGradGuard::new();`).
fn starts_no_grad(local: &syn::Local) -> bool {
    let Some(init) = &local.init else {
        return false;
    };
    names_any_of(&["NoGradGuard", "no_grad_guard"], |f| {
        f.visit_expr(&init.expr)
    })
}

/// For each statement, the names mentioned after it in the block (a `let` that re-binds a
/// name hides later mentions of the new binding).
fn later_mentions(stmts: &[Stmt]) -> Vec<HashSet<String>> {
    let mut result = vec![HashSet::new(); stmts.len()];
    let mut after: HashSet<String> = HashSet::new();
    for (i, stmt) in stmts.iter().enumerate().rev() {
        result[i] = after.clone();
        match stmt {
            Stmt::Local(local) => {
                let mut bound = Vec::new();
                pattern_names(&local.pat, &mut bound);
                for name in bound {
                    after.remove(&name.to_string());
                }
                if let Some(init) = &local.init {
                    idents_in(init.expr.to_token_stream(), &mut after);
                    if let Some((_, diverge)) = &init.diverge {
                        idents_in(diverge.to_token_stream(), &mut after);
                    }
                }
            }
            other => idents_in(other.to_token_stream(), &mut after),
        }
    }
    result
}

impl VisitMut for Walker<'_, '_> {
    fn visit_block_mut(&mut self, block: &mut Block) {
        let later = if self.track_later_uses {
            later_mentions(&block.stmts)
        } else {
            vec![HashSet::new(); block.stmts.len()]
        };
        self.blocks.push(BlockFrame::default());
        for (stmt, later) in block.stmts.iter_mut().zip(later) {
            if let Some(frame) = self.blocks.last_mut() {
                frame.later = later;
            }
            let allows = self.take_statement_allows(stmt);
            self.with_allows(allows, |this| this.visit_stmt_mut(stmt));
        }
        if let Some(frame) = self.blocks.pop() {
            self.no_grad -= frame.no_grad_guards;
        }
    }

    fn visit_item_mut(&mut self, _item: &mut syn::Item) {
        // A nested item is not part of this function's control flow.
    }

    fn visit_local_mut(&mut self, local: &mut syn::Local) {
        if let Some(init) = &mut local.init {
            self.visit_expr_mut(&mut init.expr);
            if let Some((_, diverge)) = &mut init.diverge {
                self.visit_expr_mut(diverge);
            }
        }
        let holds = {
            let lookup = |name: &str| self.lookup(name);
            classify_local(local, &lookup)
        };
        let mut names = Vec::new();
        pattern_names(&local.pat, &mut names);
        self.bind_in_loop(&names, holds);
        let no_grad = starts_no_grad(local);
        if let Some(frame) = self.blocks.last_mut() {
            frame
                .locals
                .extend(names.iter().map(|n| (n.to_string(), holds)));
            if no_grad {
                frame.no_grad_guards += 1;
            }
        }
        if no_grad {
            self.no_grad += 1;
        }
    }

    fn visit_expr_mut(&mut self, expr: &mut Expr) {
        match expr {
            Expr::ForLoop(e) => {
                self.visit_expr_mut(&mut e.expr);
                self.in_loop(|this| {
                    this.bind_pattern(&e.pat);
                    this.visit_block_mut(&mut e.body);
                });
            }
            Expr::While(e) => self.in_loop(|this| {
                this.visit_expr_mut(&mut e.cond);
                this.visit_block_mut(&mut e.body);
            }),
            Expr::Loop(e) => self.in_loop(|this| this.visit_block_mut(&mut e.body)),
            Expr::MethodCall(call) => {
                self.check_method_call(call);
                visit_mut::visit_expr_method_call_mut(self, call);
            }
            Expr::Call(call) => {
                let callee = match peel(&call.func) {
                    Expr::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
                    _ => None,
                };
                if callee.as_deref() == Some("empty_cache") {
                    self.check_empty_cache(call.func.span());
                }
                let no_grad = callee.as_deref() == Some("no_grad");
                self.no_grad += usize::from(no_grad);
                visit_mut::visit_expr_call_mut(self, call);
                self.no_grad -= usize::from(no_grad);
            }
            Expr::Binary(b) => {
                if matches!(
                    b.op,
                    BinOp::AddAssign(_)
                        | BinOp::SubAssign(_)
                        | BinOp::MulAssign(_)
                        | BinOp::DivAssign(_)
                ) {
                    let span = b.op.span();
                    self.check_running_total(&b.left, &b.right, span);
                }
                visit_mut::visit_expr_binary_mut(self, b);
            }
            Expr::Assign(a) => {
                if let Expr::Binary(sum) = peel(&a.right) {
                    let arithmetic = matches!(
                        sum.op,
                        BinOp::Add(_) | BinOp::Sub(_) | BinOp::Mul(_) | BinOp::Div(_)
                    );
                    let target = single_ident(peel(&a.left)).map(ToString::to_string);
                    let names_target =
                        |e: &Expr| single_ident(peel_value(e)).map(ToString::to_string) == target;
                    if arithmetic && target.is_some() {
                        let span = a.eq_token.span();
                        if names_target(&sum.left) {
                            self.check_running_total(&a.left, &sum.right, span);
                        } else if names_target(&sum.right) {
                            self.check_running_total(&a.left, &sum.left, span);
                        }
                    }
                }
                visit_mut::visit_expr_assign_mut(self, a);
            }
            Expr::Let(e) => {
                self.visit_expr_mut(&mut e.expr);
                self.bind_pattern(&e.pat);
            }
            Expr::Closure(c) => {
                for input in &c.inputs {
                    self.bind_pattern(input);
                }
                self.visit_expr_mut(&mut c.body);
            }
            Expr::Match(m) => {
                self.visit_expr_mut(&mut m.expr);
                for arm in &mut m.arms {
                    let allows = self.take_allows(&mut arm.attrs);
                    self.with_allows(allows, |this| {
                        this.bind_pattern(&arm.pat);
                        this.visit_pat_mut(&mut arm.pat);
                        this.visit_expr_mut(&mut arm.body);
                    });
                }
            }
            _ => visit_mut::visit_expr_mut(self, expr),
        }
    }
}
