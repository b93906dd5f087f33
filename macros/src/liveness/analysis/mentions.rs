//! Mentions: which locals one statement uses, scope-aware (names it binds itself are not
//! mentions), and how (by value, borrowed, a field moved out, its address taken), with what
//! it stores where (`v.push(&x)`, `r = &x`).

use std::collections::BTreeMap;

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::visit::Visit;
use syn::{BinOp, Block, Expr, Macro, Pat, Stmt, Token, UnOp};

use super::known_names::{self as lists, container_args, macro_name};
use super::patterns::{destructures, local_name, pattern_bindings, place_root};
use super::{format, Env, Facts, Source};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    /// Used by value: may be moved.
    Value,
    /// Only borrowed (`&x`, comparison operand, format argument).
    Borrow,
    /// Receiver of a method that may take `self` by value or by reference.
    Receiver,
    /// Receiver of a method call followed by `?`: a fallible tensor op, taken to borrow its
    /// receiver (see [`Env::try_owns`]).
    FallibleReceiver,
    /// Assigned to (`x = …`).
    Assign,
}

impl Env<'_> {
    /// The facts of a macro invocation's arguments.
    pub(super) fn scan_macro(&self, mac: &Macro) -> Facts {
        let mut scanner = Scanner::new(self);
        scanner.mac(mac);
        scanner.facts
    }

    /// The facts of one statement of a block.
    pub(crate) fn scan_stmt(&self, stmt: &Stmt) -> Facts {
        let mut scanner = Scanner::new(self);
        scanner.whole_stmt = true;
        scanner.stmt(stmt);
        scanner.facts
    }

    /// The facts of a block's statements (names its `let`s bind are not mentions after them).
    pub(crate) fn scan_block(&self, block: &Block) -> Facts {
        let mut scanner = Scanner::new(self);
        scanner.block(block);
        scanner.facts
    }

    /// The facts of one expression.
    pub(crate) fn scan_expr(&self, expr: &Expr) -> Facts {
        let mut scanner = Scanner::new(self);
        scanner.expr(expr, Ctx::Value);
        scanner.facts
    }
}

/// A store target that is no local of the block (a field of `self`, a static, a pointee).
pub(crate) const OUTSIDE: &str = "<outside>";

/// Whether a `break` may leave the loop whose body this is: any `break` inside it (also one
/// leaving only an inner loop, or inside a known macro's tokens), or a macro that could expand
/// to one.
fn can_break(body: &Block) -> bool {
    let mut finder = BreakFinder(false);
    finder.visit_block(body);
    finder.0
}

fn can_break_expr(expr: &Expr) -> bool {
    let mut finder = BreakFinder(false);
    finder.visit_expr(expr);
    finder.0
}

struct BreakFinder(bool);

impl<'ast> Visit<'ast> for BreakFinder {
    fn visit_expr_break(&mut self, _: &'ast syn::ExprBreak) {
        self.0 = true;
    }
    fn visit_macro(&mut self, mac: &'ast Macro) {
        fn has_break(tokens: TokenStream) -> bool {
            tokens.into_iter().any(|t| match t {
                TokenTree::Ident(ident) => ident == "break",
                TokenTree::Group(group) => has_break(group.stream()),
                _ => false,
            })
        }
        self.0 |= !lists::is_known_macro(&macro_name(mac)) || has_break(mac.tokens.clone());
    }
    fn visit_item(&mut self, _: &'ast syn::Item) {}
}

struct Scanner<'e, 'a> {
    env: &'e Env<'a>,
    /// Names bound inside the statement so far (inner `let`s, closure parameters, arms).
    bound: Vec<String>,
    /// What the name at each index of `bound` may hold (an `if let` binding, a loop or
    /// closure parameter borrowing from the value it came from); entries past `bound.len()`
    /// are stale.
    bound_sources: BTreeMap<usize, Vec<Source>>,
    /// The sources of the values passed to the closure about to be visited (the receiver and
    /// other arguments of the call it is an argument of).
    closure_sources: Vec<Source>,
    /// Inside a `move` closure or `async move` block: every outer local named there is moved
    /// into it when it is created, however the body uses it.
    move_captures: usize,
    /// Inside a loop that no `break` can leave (see [`can_break`]): a local declared outside
    /// it is never moved here, since moving it would be a "value moved in a previous iteration"
    /// error unless the path diverges (`return`, `?`, a panic) and so never reaches the code
    /// after the loop. Such a use is dropped after the statement, never written twice.
    breakless_loops: usize,
    /// Inside a part of the statement that may not run when it completes: a branch, a loop
    /// body, the right side of `&&`/`||`, a macro's tokens, a matched place (which only a
    /// destructuring arm moves). A closure body is not one: a closure takes what it uses by
    /// value when it is created.
    conditional: usize,
    /// The next statement visited is the one [`Env::scan_stmt`] was asked about: nothing
    /// after it in the scan can name what its `let` binds, so what those names hold is not
    /// worked out (the plan's graph does that for the block's own `let`s).
    whole_stmt: bool,
    facts: Facts,
}

impl<'e, 'a> Scanner<'e, 'a> {
    fn new(env: &'e Env<'a>) -> Self {
        Self {
            env,
            bound: Vec::new(),
            bound_sources: BTreeMap::new(),
            closure_sources: Vec::new(),
            move_captures: 0,
            breakless_loops: 0,
            conditional: 0,
            whole_stmt: false,
            facts: Facts::default(),
        }
    }

    /// Runs `visit` as a part of the statement that may not run (see `conditional`).
    fn maybe(&mut self, visit: impl FnOnce(&mut Self)) {
        self.conditional += 1;
        visit(self);
        self.conditional -= 1;
    }

    /// Visits a loop's repeated part (its body, and a `while` condition).
    fn loop_body(&mut self, body: &Block, condition: Option<&Expr>) {
        let breakless = !can_break(body) && !condition.is_some_and(can_break_expr);
        self.breakless_loops += usize::from(breakless);
        self.conditional += 1;
        if let Some(condition) = condition {
            self.cond(condition);
        }
        self.block(body);
        self.conditional -= 1;
        self.breakless_loops -= usize::from(breakless);
    }

    fn mention(&mut self, name: &str, ctx: Ctx, projected: bool) {
        // `r#type` and `type` (a format capture) name the same local.
        let name = name.strip_prefix("r#").unwrap_or(name);
        if self.bound.iter().any(|b| b == name) {
            return;
        }
        let mention = self.facts.mentions.entry(name.to_string()).or_default();
        let ctx = if self.move_captures > 0 {
            Ctx::Value
        } else {
            ctx
        };
        let projected = projected && self.move_captures == 0;
        if self.breakless_loops > 0 {
            return;
        }
        match ctx {
            Ctx::Value => {
                mention.moved = true;
                mention.consumed |= !projected;
                mention.consumable |= !projected;
                mention.consumed_always |= !projected && self.conditional == 0;
                mention.partial |= projected;
            }
            Ctx::Receiver => {
                mention.moved = true;
                mention.consumable |= !projected;
            }
            Ctx::FallibleReceiver => mention.moved = true,
            Ctx::Borrow | Ctx::Assign => {}
        }
    }

    /// The place `target` is rooted in is written through (see [`super::Mention::mutated`]).
    /// Recorded also inside a loop no `break` leaves: a borrow must not outlive the write.
    fn mutated(&mut self, target: &Expr) {
        let Some(root) = place_root(target) else {
            return;
        };
        let name = root.strip_prefix("r#").unwrap_or(&root).to_string();
        if !self.bound.contains(&name) {
            self.facts.mentions.entry(name).or_default().mutated = true;
        }
    }

    /// Binds the names of `pat`, each of which may hold what `sources` hold.
    fn bind_from(&mut self, pat: &Pat, sources: Vec<Source>) {
        let mut names = Vec::new();
        pattern_bindings(pat, &mut names);
        // Against the names bound so far, before these take theirs (see `substitute_bound`).
        let sources = self.substitute_bound(sources);
        for (name, _) in names {
            self.bound_sources.insert(self.bound.len(), sources.clone());
            self.bound.push(name.unraw().to_string());
        }
        if let Pat::Guard(guard) = pat {
            self.expr(&guard.guard, Ctx::Value);
        }
    }

    /// The sources of what a bound pattern takes apart: its value's sources, and the place
    /// itself where the pattern binds by reference (`Some(ref v)`).
    fn scrutinee_sources(&self, pat: &Pat, scrutinee: &Expr) -> Vec<Source> {
        let mut sources = self.env.value_sources(scrutinee);
        if pattern_bindings(pat, &mut Vec::new()) {
            sources.extend(self.env.conservative(scrutinee));
        }
        sources
    }

    /// Sources naming names bound inside the statement, replaced by what those hold.
    ///
    /// One step is enough: [`Self::bind_from`] stores each binding's sources already
    /// substituted, against the names bound before it (a binding that shadows a name,
    /// `let xs = xs.f()`, holds what the earlier `xs` held, never itself). Substituting again at
    /// every use instead followed such a self-reference round and round, cloning lists until a
    /// step cap dropped what was left: seconds of macro time on real attention code.
    fn substitute_bound(&self, sources: Vec<Source>) -> Vec<Source> {
        let mut out = Vec::with_capacity(sources.len());
        for source in sources {
            let name = match &source {
                Source::Storage(name, ..) | Source::ValueOf(name) | Source::Contents(name) => name,
            };
            match self.bound.iter().rposition(|b| b == name) {
                Some(index) => {
                    if let Some(held) = self.bound_sources.get(&index) {
                        out.extend(held.iter().cloned());
                    }
                }
                None => out.push(source),
            }
        }
        // A chain of bindings each holding an earlier one twice (`let b = (a, a);`) would
        // otherwise double the list at every step.
        out.sort();
        out.dedup();
        out
    }

    fn store(&mut self, target: &Expr, sources: Vec<Source>) {
        self.facts.stores_anything = true;
        let sources = self.substitute_bound(sources);
        if sources.is_empty() {
            return;
        }
        match place_root(target) {
            // Through a name the statement binds (`if let Some(g) = groups.last_mut() {
            // g.push(&word) }`): into what that name points into or holds.
            Some(root) if self.bound.contains(&root) => {
                let index = self.bound.iter().rposition(|b| *b == root);
                let held = index.and_then(|i| self.bound_sources.get(&i)).cloned();
                for source in held.unwrap_or_default() {
                    let holder = match source {
                        Source::Storage(name, ..)
                        | Source::ValueOf(name)
                        | Source::Contents(name) => name,
                    };
                    if !self.bound.contains(&holder) {
                        self.facts.stores.push((holder, sources.clone()));
                    }
                }
            }
            Some(root) => self.facts.stores.push((root, sources)),
            // `self.f = …`, `*p = …`, a static: stored beyond this block's locals.
            None => self.facts.stores.push((OUTSIDE.to_string(), sources)),
        }
    }

    /// Marks every local mentioned in `expr` as having its address taken.
    fn raw_address_of(&mut self, tokens: TokenStream) {
        let mut inner = Scanner::new(self.env);
        inner.bound = self.bound.clone();
        inner.tokens(tokens);
        for name in inner.facts.mentions.into_keys() {
            if !self.bound.contains(&name) {
                self.facts.mentions.entry(name).or_default().raw_address = true;
            }
        }
    }

    /// A place matched by a destructuring pattern is partially moved.
    fn matched(&mut self, scrutinee: &Expr, destructuring: bool) {
        self.expr(scrutinee, Ctx::Value);
        if destructuring {
            if let Some(root) = place_root(scrutinee) {
                self.mention(&root, Ctx::Value, true);
            }
        }
    }

    fn stmt(&mut self, stmt: &Stmt) {
        let whole_stmt = std::mem::take(&mut self.whole_stmt);
        match stmt {
            Stmt::Local(local) => {
                if let Some(init) = &local.init {
                    self.matched(&init.expr, destructures(&local.pat));
                    if let Some((_, otherwise)) = &init.diverge {
                        self.maybe(|s| s.expr(otherwise, Ctx::Value));
                    }
                }
                // A `#[cfg(..)]` `let` may be compiled out: later uses of its names may be
                // uses of an outer binding, so they stay mentions.
                let conditional = local
                    .attrs
                    .iter()
                    .any(|a| a.path().is_ident("cfg") || a.path().is_ident("cfg_attr"));
                if !conditional {
                    let sources = match &local.init {
                        Some(init) if !whole_stmt => self.scrutinee_sources(&local.pat, &init.expr),
                        _ => Vec::new(),
                    };
                    let sources = self.substitute_bound(sources);
                    self.bind_from(&local.pat, sources);
                }
            }
            // Items cannot capture locals; a local `macro_rules!` counts where it is invoked.
            Stmt::Item(_) => {}
            Stmt::Expr(expr, _) => self.expr(expr, Ctx::Value),
            Stmt::Macro(mac) => self.maybe(|s| s.mac(&mac.mac)),
        }
    }

    fn block(&mut self, block: &Block) {
        let depth = self.bound.len();
        block.stmts.iter().for_each(|s| self.stmt(s));
        self.bound.truncate(depth);
    }

    /// A field/pointee access chain; `ctx` is how the projected value is used.
    fn projection(&mut self, base: &Expr, ctx: Ctx) {
        match base {
            Expr::Path(path) => {
                if let Some(name) = local_name(path) {
                    self.mention(&name, ctx, true);
                }
            }
            Expr::Field(field) => self.projection(&field.base, ctx),
            Expr::Paren(paren) => self.projection(&paren.expr, ctx),
            Expr::Group(group) => self.projection(&group.expr, ctx),
            Expr::Unary(unary) if matches!(unary.op, UnOp::Deref(_)) => {
                self.projection(&unary.expr, ctx)
            }
            other => self.expr(other, if ctx == Ctx::Assign { Ctx::Borrow } else { ctx }),
        }
    }

    fn cond(&mut self, cond: &Expr) {
        match cond {
            Expr::Let(let_) => {
                self.maybe(|s| s.matched(&let_.expr, destructures(&let_.pat)));
                let sources = self.substitute_bound(self.scrutinee_sources(&let_.pat, &let_.expr));
                self.bind_from(&let_.pat, sources);
            }
            Expr::Binary(binary) if matches!(binary.op, BinOp::And(_)) => {
                self.cond(&binary.left);
                self.maybe(|s| s.cond(&binary.right));
            }
            Expr::Paren(paren) => self.cond(&paren.expr),
            other => self.expr(other, Ctx::Value),
        }
    }

    fn expr(&mut self, expr: &Expr, ctx: Ctx) {
        match expr {
            Expr::Path(path) => {
                if let Some(name) = local_name(path) {
                    self.mention(&name, ctx, false);
                }
            }
            Expr::Reference(r) => {
                self.expr(&r.expr, Ctx::Borrow);
                if r.mutability.is_some() {
                    self.mutated(&r.expr);
                }
            }
            Expr::RawAddr(r) => {
                self.expr(&r.expr, Ctx::Borrow);
                self.raw_address_of(r.expr.to_token_stream());
            }
            Expr::Field(field) => self.projection(&field.base, ctx),
            Expr::Index(index) => {
                self.expr(&index.expr, Ctx::Borrow);
                self.expr(&index.index, Ctx::Value);
            }
            Expr::Unary(unary) => match unary.op {
                UnOp::Deref(_) => self.projection(&unary.expr, ctx),
                _ => self.expr(&unary.expr, Ctx::Value),
            },
            Expr::Paren(paren) => self.expr(&paren.expr, ctx),
            Expr::Group(group) => self.expr(&group.expr, ctx),
            Expr::MethodCall(call) => self.method_call(call, false),
            Expr::Call(call) => self.call(call),
            Expr::Binary(binary) => self.binary(binary),
            Expr::Assign(assign) => {
                self.projection_or_assign(&assign.left);
                self.mutated(&assign.left);
                self.expr(&assign.right, Ctx::Value);
                let sources = self.env.value_sources(&assign.right);
                self.store(&assign.left, sources);
            }
            Expr::Closure(closure) => self.closure(closure),
            Expr::Block(b) => self.block(&b.block),
            Expr::Unsafe(b) => self.block(&b.block),
            Expr::Async(b) => {
                let moving = b.capture.is_some();
                self.move_captures += usize::from(moving);
                self.block(&b.block);
                self.move_captures -= usize::from(moving);
            }
            Expr::TryBlock(b) => self.block(&b.block),
            Expr::Const(b) => self.block(&b.block),
            Expr::Loop(l) => self.loop_body(&l.body, None),
            Expr::If(if_) => {
                let depth = self.bound.len();
                self.cond(&if_.cond);
                self.maybe(|s| s.block(&if_.then_branch));
                self.bound.truncate(depth);
                if let Some((_, otherwise)) = &if_.else_branch {
                    self.maybe(|s| s.expr(otherwise, Ctx::Value));
                }
            }
            Expr::While(while_) => {
                let depth = self.bound.len();
                self.loop_body(&while_.body, Some(&while_.cond));
                self.bound.truncate(depth);
            }
            Expr::ForLoop(for_) => {
                self.expr(&for_.expr, Ctx::Value);
                let depth = self.bound.len();
                let items = self.substitute_bound(self.env.value_sources(&for_.expr));
                self.bind_from(&for_.pat, items);
                self.loop_body(&for_.body, None);
                self.bound.truncate(depth);
            }
            Expr::Match(match_) => self.match_arms(match_),
            Expr::Let(let_) => {
                // Outside an `if`/`while` condition (e.g. in a `matches!`-like position).
                self.maybe(|s| s.matched(&let_.expr, destructures(&let_.pat)));
                let sources = self.substitute_bound(self.scrutinee_sources(&let_.pat, &let_.expr));
                self.bind_from(&let_.pat, sources);
            }
            Expr::Macro(mac) => self.maybe(|s| s.mac(&mac.mac)),
            Expr::Return(r) => r.expr.iter().for_each(|e| self.expr(e, Ctx::Value)),
            Expr::Break(b) => b.expr.iter().for_each(|e| self.expr(e, Ctx::Value)),
            Expr::Yield(y) => y.expr.iter().for_each(|e| self.expr(e, Ctx::Value)),
            Expr::Try(t) => match &*t.expr {
                Expr::MethodCall(call) => self.method_call(call, true),
                other => self.expr(other, Ctx::Value),
            },
            Expr::Await(a) => self.expr(&a.base, Ctx::Value),
            Expr::Cast(c) => {
                self.expr(&c.expr, Ctx::Value);
                if matches!(&*c.ty, syn::Type::Ptr(_)) {
                    self.raw_address_of(c.expr.to_token_stream());
                }
            }
            Expr::Tuple(t) => t.elems.iter().for_each(|e| self.expr(e, Ctx::Value)),
            Expr::Array(a) => a.elems.iter().for_each(|e| self.expr(e, Ctx::Value)),
            Expr::Repeat(r) => {
                self.expr(&r.expr, Ctx::Value);
                self.expr(&r.len, Ctx::Value);
            }
            Expr::Struct(s) => {
                s.fields.iter().for_each(|f| self.expr(&f.expr, Ctx::Value));
                if let Some(rest) = &s.rest {
                    // `..base` moves the remaining fields out of `base`.
                    self.projection(rest, Ctx::Value);
                }
            }
            Expr::Range(r) => {
                r.start
                    .iter()
                    .chain(&r.end)
                    .for_each(|e| self.expr(e, Ctx::Value));
            }
            Expr::Lit(_) | Expr::Continue(_) | Expr::Infer(_) => {}
            other => self.maybe(|s| s.tokens(other.to_token_stream())),
        }
    }

    /// `x.m(args)`: the receiver's use depends on the method's name (and on a `?` after the
    /// call, `fallible`); closure arguments may borrow from the receiver and the other
    /// arguments; storing methods store their arguments.
    fn method_call(&mut self, call: &syn::ExprMethodCall, fallible: bool) {
        let name = call.method.to_string();
        let receiver_ctx = if self.env.maybe_consumes(&name) {
            Ctx::Receiver
        } else if self.env.is_borrow_method(&name)
            || lists::BORROWING_RECEIVER_METHODS.contains(name.as_str())
        {
            Ctx::Borrow
        } else if name.starts_with("into_") || lists::PASSTHROUGH_METHODS.contains(name.as_str()) {
            Ctx::Value
        } else if fallible && self.env.try_owns {
            Ctx::FallibleReceiver
        } else {
            Ctx::Receiver
        };
        self.expr(&call.receiver, receiver_ctx);
        if lists::is_mutating_method(&name) {
            self.mutated(&call.receiver);
        }
        // A closure argument's parameters may borrow from the receiver and the other
        // arguments (`names.iter().for_each(|n| refs.push(n))`). Only worked out when there is
        // one: the receiver's sources walk the whole call chain below it, so computing them at
        // every link of a chain (`x.a()?.b()?.c()?`) would cost its length squared.
        let passed = if call.args.iter().any(|a| matches!(a, Expr::Closure(_))) {
            let mut passed = self.env.value_sources(&call.receiver);
            call.args
                .iter()
                .filter(|a| !matches!(a, Expr::Closure(_)))
                .for_each(|a| self.env.held(a, &mut passed));
            self.substitute_bound(passed)
        } else {
            Vec::new()
        };
        for arg in &call.args {
            if matches!(arg, Expr::Closure(_)) {
                self.closure_sources = passed.clone();
            }
            self.expr(arg, Ctx::Value);
        }
        if lists::RAW_POINTER_METHODS.contains(name.as_str()) {
            self.raw_address_of(call.receiver.to_token_stream());
        }
        if lists::STORING_METHODS.contains(name.as_str()) {
            let mut sources = Vec::new();
            call.args
                .iter()
                .for_each(|a| self.env.value(a, &mut sources));
            self.store(&call.receiver, sources);
        }
    }

    /// `f(args)`: every argument by value; a `&mut` argument may receive borrows of the others.
    fn call(&mut self, call: &syn::ExprCall) {
        self.expr(&call.func, Ctx::Value);
        call.args.iter().for_each(|a| self.expr(a, Ctx::Value));
        // `fill(&mut out, &x)` may store a borrow of `x` (or what `x` holds) in `out`.
        for (i, arg) in call.args.iter().enumerate() {
            let Expr::Reference(out) = arg else { continue };
            if out.mutability.is_none() {
                continue;
            }
            let mut sources = Vec::new();
            for (j, other) in call.args.iter().enumerate() {
                if j != i {
                    self.env.held(other, &mut sources);
                }
            }
            self.store(&out.expr, sources);
        }
    }

    /// `a op b`: comparisons borrow both sides, compound assignments borrow the left one.
    fn binary(&mut self, binary: &syn::ExprBinary) {
        let compound = matches!(
            binary.op,
            BinOp::AddAssign(_)
                | BinOp::SubAssign(_)
                | BinOp::MulAssign(_)
                | BinOp::DivAssign(_)
                | BinOp::RemAssign(_)
                | BinOp::BitXorAssign(_)
                | BinOp::BitAndAssign(_)
                | BinOp::BitOrAssign(_)
                | BinOp::ShlAssign(_)
                | BinOp::ShrAssign(_)
        );
        let (left, right) = match binary.op {
            BinOp::Eq(_)
            | BinOp::Ne(_)
            | BinOp::Lt(_)
            | BinOp::Le(_)
            | BinOp::Gt(_)
            | BinOp::Ge(_) => (Ctx::Borrow, Ctx::Borrow),
            _ if compound => (Ctx::Borrow, Ctx::Value),
            _ => (Ctx::Value, Ctx::Value),
        };
        self.expr(&binary.left, left);
        if compound {
            self.mutated(&binary.left);
        }
        // `a && f(x)`: the right side may not run.
        if matches!(binary.op, BinOp::And(_) | BinOp::Or(_)) {
            self.maybe(|s| s.expr(&binary.right, right));
        } else {
            self.expr(&binary.right, right);
        }
    }

    /// A closure: its parameters bind what the call it is passed to hands it, and a `move`
    /// closure moves every outer local it names.
    fn closure(&mut self, closure: &syn::ExprClosure) {
        let depth = self.bound.len();
        let sources = std::mem::take(&mut self.closure_sources);
        closure
            .inputs
            .iter()
            .for_each(|p| self.bind_from(p, sources.clone()));
        let moving = closure.capture.is_some();
        self.move_captures += usize::from(moving);
        self.expr(&closure.body, Ctx::Value);
        self.move_captures -= usize::from(moving);
        self.bound.truncate(depth);
    }

    /// `match`: the scrutinee is matched (moved where an arm destructures it), and each arm's
    /// bindings hold what the scrutinee holds.
    fn match_arms(&mut self, match_: &syn::ExprMatch) {
        let destructuring = match_.arms.iter().any(|a| destructures(&a.pat));
        self.maybe(|s| s.matched(&match_.expr, destructuring));
        self.conditional += 1;
        for arm in &match_.arms {
            let depth = self.bound.len();
            let sources = self.substitute_bound(self.scrutinee_sources(&arm.pat, &match_.expr));
            self.bind_from(&arm.pat, sources);
            self.expr(&arm.body, Ctx::Value);
            self.bound.truncate(depth);
        }
        self.conditional -= 1;
    }

    fn projection_or_assign(&mut self, target: &Expr) {
        match target {
            Expr::Path(path) => {
                if let Some(name) = local_name(path) {
                    self.mention(&name, Ctx::Assign, false);
                }
            }
            other => self.projection(other, Ctx::Assign),
        }
    }

    fn mac(&mut self, mac: &Macro) {
        let name = macro_name(mac);
        if matches!(name.as_str(), "addr_of" | "addr_of_mut") {
            self.raw_address_of(mac.tokens.clone());
        }
        if mac.path.segments.len() == 1 {
            if let Some(body) = self.env.local_macros.get(&name) {
                for ident in body.clone() {
                    self.mention(&ident, Ctx::Value, false);
                }
            }
        }
        if lists::FORMAT_MACROS.contains(name.as_str()) {
            let parser = Punctuated::<Expr, Token![,]>::parse_terminated;
            if let Ok(args) = parser.parse2(mac.tokens.clone()) {
                for arg in &args {
                    self.format_arg(arg);
                }
                return;
            }
        } else if lists::CONTAINER_MACROS.contains(name.as_str()) {
            if let Some(args) = container_args(mac) {
                args.iter().for_each(|a| self.expr(a, Ctx::Value));
                return;
            }
        }
        self.tokens(mac.tokens.clone());
    }

    /// A format macro argument: borrowed; named arguments (`w = x`) name only their value;
    /// string literals capture `{name}`s.
    fn format_arg(&mut self, arg: &Expr) {
        match arg {
            Expr::Assign(named) if matches!(&*named.left, Expr::Path(_)) => {
                self.expr(&named.right, Ctx::Borrow);
            }
            Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(text),
                ..
            }) => {
                for name in format::captures(&text.value()) {
                    self.mention(&name, Ctx::Borrow, false);
                }
            }
            other => self.expr(other, Ctx::Borrow),
        }
    }

    /// Tokens the analysis cannot parse: every identifier may be a use by value, and every string
    /// literal may capture names.
    fn tokens(&mut self, tokens: TokenStream) {
        for token in tokens {
            match token {
                TokenTree::Ident(ident) => self.mention(&ident.to_string(), Ctx::Value, false),
                TokenTree::Group(group) => self.tokens(group.stream()),
                TokenTree::Literal(literal) => {
                    if let Ok(text) = syn::parse2::<syn::LitStr>(literal.into_token_stream()) {
                        for name in format::captures(&text.value()) {
                            self.mention(&name, Ctx::Borrow, false);
                        }
                    }
                }
                TokenTree::Punct(_) => {}
            }
        }
    }
}
