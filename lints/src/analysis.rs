//! The lint pass: one walk over a function body that tracks loops (and iterator closures that
//! act as loop bodies), blocks, locals, no-grad regions and `allow`s, and records findings with
//! their spans.

use crate::allow::{allowed_in, is_vramguard_allow};
use crate::holds::{
    classify, classify_items, classify_local, idents_in, is_one_of, is_self_field, names_any_of,
    peel, peel_value, shown, single_ident, stmt_attrs_mut, Holds, Scope,
};
use crate::loops::{self, ShrinkFinder};
use crate::names::Lint;
use crate::syntax::{pattern_names, NameList};
use crate::{Context, Finding};
use proc_macro2::Span;
use quote::ToTokens;
use std::collections::{HashMap, HashSet};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::visit_mut::{self, VisitMut};
use syn::{BinOp, Block, Expr, ExprMethodCall, Stmt};

/// Collection methods that keep their (last) argument.
static COLLECTING: NameList = NameList::new(&[
    "push",
    "push_back",
    "push_front",
    "insert",
    "extend",
    "extend_from_slice",
    "append",
    // `map.entry(k).or_insert(v)`.
    "or_insert",
    "or_insert_with",
]);

/// Methods between a collection and the method that grows it, which return (a part of) the
/// same collection: `map.entry(k).or_default().push(v)`, `groups.last_mut().unwrap().push(v)`.
static COLLECTION_PATH: NameList = NameList::new(&[
    "entry",
    "or_default",
    "or_insert",
    "or_insert_with",
    "get_mut",
    "last_mut",
    "first_mut",
    "unwrap",
    "expect",
    "as_mut",
    "borrow_mut",
    "lock",
    "write",
]);

/// Collection methods whose argument is a collection or an iterator: what they keep are its
/// items.
static EXTENDING: NameList = NameList::new(&["extend", "extend_from_slice", "append"]);

/// Tensor methods that add their argument to the receiver: `total = total.add(&loss)?`.
static ADDING: NameList = NameList::new(&[
    "add",
    "sub",
    "mul",
    "div",
    "broadcast_add",
    "broadcast_sub",
    "broadcast_mul",
    "broadcast_div",
]);

/// Iterator methods whose closure runs once per item, like a loop body.
static PER_ITEM: NameList = NameList::new(&[
    "for_each",
    "try_for_each",
    "for_each_with",
    "for_each_init",
    "map",
    "filter_map",
    "flat_map",
    "map_while",
    "inspect",
    "fold",
    "try_fold",
    "scan",
]);

/// Methods that make (or step through) an iterator: a receiver chain with one of them is an
/// iterator, so `map`'s closure is a loop body (and `Option::map`'s is not).
static ITERATING: NameList = NameList::new(&[
    "iter",
    "iter_mut",
    "into_iter",
    "par_iter",
    "par_iter_mut",
    "into_par_iter",
    "par_chunks",
    "chunks",
    "chunks_exact",
    "windows",
    "drain",
    "keys",
    "values",
    "values_mut",
    "enumerate",
    "zip",
    "step_by",
    "rev",
    "skip",
    "take",
    "lines",
    "outer_iter",
    "axis_iter",
    "rows",
]);

/// Method and function names that run a model (what an evaluation runs).
static FORWARD: NameList =
    NameList::new(&["forward", "forward_t", "forward_ts", "apply", "apply_t"]);

/// Words of a function name that say it evaluates (no backward pass follows).
static EVALUATION_WORDS: NameList = NameList::new(&[
    "eval",
    "evaluate",
    "evaluation",
    "predict",
    "prediction",
    "infer",
    "inference",
    "validate",
    "validation",
    "accuracy",
    "generate",
]);

/// Calls that turn grad recording off, in any library.
static NO_GRAD: NameList = NameList::new(&[
    "no_grad",
    "no_grad_guard",
    "NoGradGuard",
    "set_grad_enabled",
    "inference_mode",
]);

/// Locals bound inside the current iteration of a loop (or a per-item closure), and what the
/// loop is.
#[derive(Default)]
struct LoopFrame {
    locals: HashMap<String, Holds>,
    /// It iterates over the model's own parts (`for layer in self.layers.iter()`): one forward
    /// pass, not data.
    structural: bool,
    /// Collections (and `self` fields) the loop also takes values out of.
    shrinks: HashSet<String>,
}

impl LoopFrame {
    /// The frame of a loop; `scan` walks its body (and condition) for what it empties.
    fn new(structural: bool, scan: impl FnOnce(&mut ShrinkFinder)) -> Self {
        let mut shrinks = ShrinkFinder::default();
        scan(&mut shrinks);
        Self {
            locals: HashMap::new(),
            structural,
            shrinks: shrinks.into_names(),
        }
    }
}

/// Locals of a block, and the names mentioned by its statements after the current one.
#[derive(Default)]
struct BlockFrame {
    locals: Vec<(String, Holds)>,
    later: HashSet<String>,
    no_grad_guards: usize,
}

/// What an evaluation with grad on shows: a model run outside every no-grad region.
#[derive(Default)]
struct EvaluationEvidence {
    /// Any no-grad switch anywhere in the body: the author thought of it, stay silent.
    switch_seen: bool,
    /// The first model run outside a no-grad region.
    first_forward: Option<(Span, Span, String)>,
    /// The first `forward_t(.., false)` / `apply_t(.., false)`: evaluation mode, said in code.
    eval_mode: Option<(Span, Span, String)>,
}

pub(crate) struct Walker<'c> {
    ctx: &'c Context,
    /// Names the function returns or concatenates: their contents are its result.
    outputs: HashSet<String>,
    /// What each local closure returns, by its name.
    closures: HashMap<String, Holds>,
    allowed: Vec<Lint>,
    loops: Vec<LoopFrame>,
    blocks: Vec<BlockFrame>,
    no_grad: usize,
    track_later_uses: bool,
    evaluation: EvaluationEvidence,
    pub findings: Vec<Finding>,
    pub errors: Vec<syn::Error>,
}

impl<'c> Walker<'c> {
    pub(crate) fn new(ctx: &'c Context, allowed: Vec<Lint>, body: &Block) -> Self {
        let empty_cache = names_any_of(&["empty_cache"], |f| f.visit_block(body));
        Self {
            ctx,
            outputs: crate::results::outputs_of(body),
            closures: HashMap::new(),
            allowed,
            loops: Vec::new(),
            blocks: Vec::new(),
            no_grad: 0,
            track_later_uses: empty_cache,
            evaluation: EvaluationEvidence::default(),
            findings: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// The checks that need the whole body: called once after the walk.
    pub(crate) fn finish(&mut self) {
        self.check_evaluation();
    }

    fn report(
        &mut self,
        lint: Lint,
        (span, extent): (Span, Span),
        sentence: String,
        value: Option<String>,
    ) {
        if self.allowed.contains(&lint) {
            return;
        }
        if self
            .findings
            .iter()
            .any(|f| f.lint == lint && f.sentence == sentence)
        {
            return;
        }
        self.findings.push(Finding {
            lint,
            span,
            extent,
            sentence,
            value,
        });
    }

    /// Grad is off here: under `#[inference]` or in a no-grad region.
    fn grad_off(&self) -> bool {
        self.ctx.inference || self.no_grad > 0
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

    /// Whether `place` names state that outlives the current iteration (a local declared
    /// outside the loop, or `self.field`); its name for messages.
    fn declared_outside_loop(&self, place: &Expr) -> Option<String> {
        let place = peel(place);
        if is_self_field(place) {
            return Some(shown(place, 60));
        }
        let ident = single_ident(place)?;
        let frame = self.loops.last()?;
        (!frame.locals.contains_key(&ident.to_string())).then(|| ident.to_string())
    }

    /// The collection a growing method's receiver belongs to, if it outlives the iteration:
    /// `results`, `self.history`, `map` of `map.entry(k).or_default()`, `rows` of `rows[i]`.
    fn collection_outside_loop(&self, receiver: &Expr) -> Option<String> {
        if let Some(name) = self.declared_outside_loop(receiver) {
            return Some(name);
        }
        match peel(receiver) {
            Expr::MethodCall(m) if is_one_of(&m.method, &COLLECTION_PATH) => {
                self.collection_outside_loop(&m.receiver)
            }
            Expr::Index(index) => self.collection_outside_loop(&index.expr),
            Expr::Field(field) => self.collection_outside_loop(&field.base),
            Expr::Unary(u) if matches!(u.op, syn::UnOp::Deref(_)) => {
                self.collection_outside_loop(&u.expr)
            }
            _ => None,
        }
    }

    /// The loops a place declared outside the innermost loop lives across: from the innermost
    /// outwards, up to the one it is declared in (all of them for `self` fields).
    fn spanned_loops<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s LoopFrame> + 's {
        let self_field = name.starts_with("self.");
        self.loops
            .iter()
            .rev()
            .take_while(move |frame| self_field || !frame.locals.contains_key(name))
    }

    /// Whether a place lives across a loop over data (not only loops over the model's parts).
    fn spans_data_loop(&self, name: &str) -> bool {
        self.spanned_loops(name).any(|frame| !frame.structural)
    }

    /// Whether a loop `name` lives across also takes values out of it.
    fn shrinks_in_loop(&self, name: &str) -> bool {
        self.spanned_loops(name)
            .any(|frame| frame.shrinks.contains(name))
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
        classify(
            expr,
            &Scope {
                lookup: &lookup,
                library: self.ctx.library,
                number_fns: &self.ctx.number_fns,
                closures: &self.closures,
            },
        )
    }

    fn check_method_call(&mut self, call: &ExprMethodCall) {
        let method = call.method.to_string();
        let spans = (call.method.span(), call.span());
        if method == "backward" && self.ctx.inference {
            self.report(
                Lint::BackwardInInference,
                spans,
                format!("`.backward()` in `{}`", self.ctx.fn_name),
                None,
            );
        }
        if method == "empty_cache" {
            // The receiver is the device or the allocator, not a value it could free.
            let mut own = HashSet::new();
            idents_in(call.receiver.to_token_stream(), &mut own);
            self.check_empty_cache(spans, &own);
        }
        if is_one_of(&call.method, &FORWARD) {
            self.note_forward(call, spans);
        }
        if self.loops.is_empty() {
            return;
        }
        if is_one_of(&call.method, &COLLECTING) {
            self.check_accumulation(call);
        }
        if is_inplace(&method) && !self.grad_off() {
            let receiver = peel(&call.receiver);
            if let Some(ident) = single_ident(receiver) {
                if self.lookup(&ident.to_string()) == Some(Holds::Produced) {
                    self.report(
                        Lint::InplaceOnActivation,
                        spans,
                        format!(
                            "`{ident}.{method}(..)` modifies `{ident}`, computed in this \
                             iteration with grad enabled"
                        ),
                        Some(ident.to_string()),
                    );
                }
            }
        }
    }

    fn check_accumulation(&mut self, call: &ExprMethodCall) {
        let Some(collection) = self.collection_outside_loop(&call.receiver) else {
            return;
        };
        let Some(value) = call.args.last() else {
            return;
        };
        // What the function builds (a model's layers in `new`), returns or concatenates is
        // its result; a collection of numbers, references or views keeps no tensor; a
        // collection the loop also empties is a working set; a loop over the model's own
        // parts is one forward pass.
        if self.ctx.builds_self
            || self.outputs.contains(&collection)
            || self.declared_holds(&collection) == Some(Holds::Scalar)
            || self.shrinks_in_loop(&collection)
            || !self.spans_data_loop(&collection)
        {
            return;
        }
        // `or_insert_with(|| v)`: the value is the closure's body.
        let value = match peel(value) {
            Expr::Closure(c) if c.inputs.is_empty() => &*c.body,
            _ => value,
        };
        let kept = peel_value(value);
        let holds = if is_one_of(&call.method, &EXTENDING) {
            let lookup = |name: &str| self.lookup(name);
            classify_items(
                kept,
                &Scope {
                    lookup: &lookup,
                    library: self.ctx.library,
                    number_fns: &self.ctx.number_fns,
                    closures: &self.closures,
                },
            )
        } else {
            self.holds_of(kept)
        };
        if matches!(holds, Holds::Produced | Holds::Detached) {
            let receiver = shown(&call.receiver, 40);
            let shown_value = shown(value, 60);
            let sentence = if receiver == collection {
                format!(
                    "`{collection}.{}({shown_value})` keeps a value computed in each iteration",
                    call.method
                )
            } else {
                format!(
                    "`{receiver}.{}({shown_value})` keeps a value computed in each iteration \
                     in `{collection}`",
                    call.method
                )
            };
            self.report(
                Lint::AccumulatesAcrossIterations,
                (call.method.span(), call.span()),
                sentence,
                Some(shown(kept, 40)),
            );
        }
    }

    /// `total += loss`, `total = total + loss` and `total = total.add(&loss)?` on a total
    /// declared outside the loop.
    fn check_running_total(&mut self, target: &Expr, added: &Expr, spans: (Span, Span)) {
        if self.loops.is_empty() || self.grad_off() || !self.ctx.library.records_graphs() {
            return;
        }
        let Some(total) = self.declared_outside_loop(target) else {
            return;
        };
        // Summing over the model's own parts (`for emb in self.embeddings.iter()`) is one
        // forward pass, not a chain across iterations over data.
        if !self.spans_data_loop(&total) {
            return;
        }
        // A total declared as a number (`let mut sum = 0f32;`) is a primitive: no tensor can
        // be added to it, whatever `added` is.
        if self.declared_holds(&total) == Some(Holds::Scalar) {
            return;
        }
        let added = peel_value(added);
        if self.holds_of(added) == Holds::Produced {
            let shown_added = shown(added, 60);
            self.report(
                Lint::GraphAcrossIterations,
                spans,
                format!("`{total}` accumulates `{shown_added}`, computed in each iteration"),
                Some(shown(added, 40)),
            );
        }
    }

    /// `total = <total ⊕ x>` in any of its spellings (`total + x`, `x + total`,
    /// `total.add(&x)`, `x.broadcast_add(&total)`), `total` a local or a `self` field.
    fn check_assigned_total(&mut self, assign: &syn::ExprAssign) {
        let Some(target) = place_name(&assign.left) else {
            return;
        };
        let names_target = |e: &Expr| place_name(e).as_ref() == Some(&target);
        let spans = (assign.eq_token.span(), assign.span());
        let added = match peel(&assign.right) {
            Expr::Binary(sum) if is_arithmetic(&sum.op) => {
                if names_target(&sum.left) {
                    Some(&*sum.right)
                } else if names_target(&sum.right) {
                    Some(&*sum.left)
                } else {
                    None
                }
            }
            Expr::MethodCall(m) if is_one_of(&m.method, &ADDING) && m.args.len() == 1 => {
                if names_target(&m.receiver) {
                    Some(&m.args[0])
                } else if names_target(&m.args[0]) {
                    Some(&*m.receiver)
                } else {
                    None
                }
            }
            _ => None,
        };
        if let Some(added) = added {
            self.check_running_total(&assign.left, added, spans);
        }
    }

    /// `empty_cache()` while locals that hold memory are used after it; `device` names what
    /// the call itself mentions (the device or allocator it empties).
    fn check_empty_cache(&mut self, spans: (Span, Span), device: &HashSet<String>) {
        let mut later = HashSet::new();
        let mut alive = Vec::new();
        for frame in self.blocks.iter().rev() {
            later.extend(frame.later.iter().cloned());
            for (name, holds) in frame.locals.iter().rev() {
                if holds.holds_memory()
                    && !device.contains(name)
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
        let value = (alive.len() == 1).then(|| alive[0].clone());
        self.report(
            Lint::EmptyCacheIsNotFree,
            spans,
            format!("`empty_cache()` runs while {names} are still alive (used afterwards)"),
            value,
        );
    }

    /// A model run: remembered for [`Self::check_evaluation`] when grad is on.
    fn note_forward(&mut self, call: &ExprMethodCall, spans: (Span, Span)) {
        if self.grad_off() {
            return;
        }
        let shown_call = format!("{}.{}(..)", shown(&call.receiver, 40), call.method);
        let eval_mode = call.method.to_string().ends_with("_t")
            && call.args.last().is_some_and(|arg| {
                matches!(peel(arg), Expr::Lit(lit) if lit.lit.to_token_stream().to_string() == "false")
            });
        if eval_mode && self.evaluation.eval_mode.is_none() {
            self.evaluation.eval_mode = Some((spans.0, spans.1, shown_call.clone()));
        }
        if self.evaluation.first_forward.is_none() {
            self.evaluation.first_forward = Some((spans.0, spans.1, shown_call));
        }
    }

    /// `eval_without_no_grad`: only where the library records by default and has a switch
    /// (tch, vramguard), in a function that says it evaluates (by its name, or by
    /// `forward_t(.., false)`), runs a model outside a no-grad region, and has no switch at all.
    fn check_evaluation(&mut self) {
        if self.ctx.inference || !self.ctx.library.has_grad_switch() {
            return;
        }
        let evidence = std::mem::take(&mut self.evaluation);
        if evidence.switch_seen {
            return;
        }
        let fn_name = self.ctx.fn_name.as_str();
        let (found, why) = match (evidence.eval_mode, evidence.first_forward) {
            (Some(found), _) => (found, "in evaluation mode (`train = false`)".to_string()),
            (None, Some(found)) if names_evaluation(fn_name) => {
                (found, format!("in `{fn_name}`, an evaluation"))
            }
            _ => return,
        };
        let (span, extent, call) = found;
        self.report(
            Lint::EvalWithoutNoGrad,
            (span, extent),
            format!("`{call}` runs {why} with grad recording on"),
            None,
        );
    }

    fn with_allows<R>(&mut self, allows: Vec<Lint>, f: impl FnOnce(&mut Self) -> R) -> R {
        let mark = self.allowed.len();
        self.allowed.extend(allows);
        let result = f(self);
        self.allowed.truncate(mark);
        result
    }

    /// Walks a loop body with `f`, inside `frame`.
    fn in_loop<R>(&mut self, frame: LoopFrame, f: impl FnOnce(&mut Self) -> R) -> R {
        self.loops.push(frame);
        let result = f(self);
        self.loops.pop();
        result
    }

    fn with_no_grad<R>(&mut self, on: bool, f: impl FnOnce(&mut Self) -> R) -> R {
        self.no_grad += usize::from(on);
        let result = f(self);
        self.no_grad -= usize::from(on);
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

    /// A method call whose closures run once per item of an iterator: each closure is walked
    /// as a loop body, its parameters bound in the iteration.
    fn visit_per_item_call(&mut self, call: &mut ExprMethodCall) {
        self.visit_expr_mut(&mut call.receiver);
        let structural = loops::rooted_in_self(&call.receiver);
        for arg in &mut call.args {
            match arg {
                Expr::Closure(closure) => {
                    let frame =
                        LoopFrame::new(structural, |finder| finder.visit_expr(&closure.body));
                    self.in_loop(frame, |this| {
                        for input in &closure.inputs {
                            this.bind_pattern(input);
                        }
                        this.visit_expr_mut(&mut closure.body);
                    })
                }
                other => self.visit_expr_mut(other),
            }
        }
    }
}

/// The local (`total`) or `self` field (`self.total`) a place expression names, through
/// `&`, `*`, `.clone()` and parentheses.
fn place_name(expr: &Expr) -> Option<String> {
    let place = peel_value(expr);
    if is_self_field(place) {
        return Some(shown(place, 60));
    }
    single_ident(place).map(ToString::to_string)
}

/// `+`, `-`, `*`, `/`.
fn is_arithmetic(op: &BinOp) -> bool {
    matches!(
        op,
        BinOp::Add(_) | BinOp::Sub(_) | BinOp::Mul(_) | BinOp::Div(_)
    )
}

/// `add_`, `relu_`, ...: PyTorch's naming of in-place ops (not `detach_`, which is safe).
fn is_inplace(method: &str) -> bool {
    method.len() > 1
        && method.ends_with('_')
        && !method.starts_with('_')
        && !method.ends_with("__")
        && method != "detach_"
}

/// Whether a function's name says it evaluates: one of its `_`-separated words is an
/// evaluation word (`evaluate`, `predict_batch`, `run_validation`).
fn names_evaluation(fn_name: &str) -> bool {
    fn_name
        .to_ascii_lowercase()
        .split('_')
        .any(|word| EVALUATION_WORDS.contains(word))
}

/// Whether a method call's closures are per-item bodies: `for_each` always, the other
/// adaptors when the receiver chain is an iterator (so not `Option::map`).
fn is_per_item_call(call: &ExprMethodCall) -> bool {
    if !is_one_of(&call.method, &PER_ITEM) {
        return false;
    }
    if call.method == "for_each" || call.method == "try_for_each" {
        return true;
    }
    let mut receiver = peel(&call.receiver);
    loop {
        match receiver {
            Expr::MethodCall(m) if is_one_of(&m.method, &ITERATING) => return true,
            Expr::MethodCall(m) => receiver = peel(&m.receiver),
            Expr::Range(_) => return true,
            Expr::Paren(p) => receiver = peel(&p.expr),
            _ => return false,
        }
    }
}

/// Whether a `let` starts a no-grad region (`let _g = NoGradGuard::new();`,
/// `let _guard = tch::no_grad_guard();`).
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

impl VisitMut for Walker<'_> {
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
            classify_local(
                local,
                &Scope {
                    lookup: &lookup,
                    library: self.ctx.library,
                    number_fns: &self.ctx.number_fns,
                    closures: &self.closures,
                },
            )
        };
        let mut names = Vec::new();
        pattern_names(&local.pat, &mut names);
        self.bind_in_loop(&names, holds);
        if let (Some(init), [name]) = (&local.init, names.as_slice()) {
            if let Expr::Closure(closure) = peel(&init.expr) {
                let body = self.holds_of(&closure.body);
                self.closures.insert(name.to_string(), body);
            }
        }
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
            self.evaluation.switch_seen = true;
        }
    }

    fn visit_expr_mut(&mut self, expr: &mut Expr) {
        match expr {
            Expr::ForLoop(e) => {
                self.visit_expr_mut(&mut e.expr);
                let structural = loops::rooted_in_self(&e.expr);
                let frame = LoopFrame::new(structural, |finder| finder.visit_block(&e.body));
                self.in_loop(frame, |this| {
                    this.bind_pattern(&e.pat);
                    this.visit_block_mut(&mut e.body);
                });
            }
            Expr::While(e) => {
                let frame = LoopFrame::new(false, |finder| {
                    finder.visit_expr(&e.cond);
                    finder.visit_block(&e.body);
                });
                self.in_loop(frame, |this| {
                    this.visit_expr_mut(&mut e.cond);
                    this.visit_block_mut(&mut e.body);
                })
            }
            Expr::Loop(e) => {
                let frame = LoopFrame::new(false, |finder| finder.visit_block(&e.body));
                self.in_loop(frame, |this| this.visit_block_mut(&mut e.body))
            }
            Expr::MethodCall(call) => {
                self.check_method_call(call);
                let no_grad = is_one_of(&call.method, &NO_GRAD);
                self.evaluation.switch_seen |= no_grad;
                self.with_no_grad(no_grad, |this| {
                    if is_per_item_call(call) {
                        this.visit_per_item_call(call);
                    } else {
                        visit_mut::visit_expr_method_call_mut(this, call);
                    }
                });
            }
            Expr::Call(call) => {
                let callee = match peel(&call.func) {
                    Expr::Path(p) => p.path.segments.last().map(|s| s.ident.clone()),
                    _ => None,
                };
                if callee.as_ref().is_some_and(|c| c == "empty_cache") {
                    // Its arguments name the device, not values it could free.
                    let mut own = HashSet::new();
                    idents_in(call.args.to_token_stream(), &mut own);
                    self.check_empty_cache((call.func.span(), call.span()), &own);
                }
                let no_grad = callee.as_ref().is_some_and(|c| is_one_of(c, &NO_GRAD));
                self.evaluation.switch_seen |= no_grad;
                self.with_no_grad(no_grad, |this| visit_mut::visit_expr_call_mut(this, call));
            }
            Expr::Binary(b) => {
                if matches!(
                    b.op,
                    BinOp::AddAssign(_)
                        | BinOp::SubAssign(_)
                        | BinOp::MulAssign(_)
                        | BinOp::DivAssign(_)
                ) {
                    let spans = (b.op.span(), b.span());
                    self.check_running_total(&b.left, &b.right, spans);
                }
                visit_mut::visit_expr_binary_mut(self, b);
            }
            Expr::Assign(a) => {
                self.check_assigned_total(a);
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
