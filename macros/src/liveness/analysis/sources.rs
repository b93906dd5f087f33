//! Value sources: where the value an expression produces may hold references from (`&x`,
//! `x.iter()`, a call's result decided by the callee's name, a block's tail, a closure's
//! captures).

use std::collections::BTreeMap;

use syn::ext::IdentExt;
use syn::{BinOp, Block, Expr, Macro, Stmt, UnOp};

use super::known_names::{self as lists, container_args, macro_name};
use super::patterns::{local_name, pattern_bindings, place_root};
use super::{BorrowKind, Env, Mention, Source};

impl Env<'_> {
    /// Conservative sources: every local the expression mentions may be borrowed, with
    /// [`BorrowKind::Maybe`] where it is used by value.
    pub(crate) fn conservative(&self, expr: &Expr) -> Vec<Source> {
        sources_of_mentions(&self.scan_expr(expr).mentions)
    }

    /// Where the value of `expr` may hold references from.
    pub(crate) fn value_sources(&self, expr: &Expr) -> Vec<Source> {
        let mut out = Vec::new();
        self.value(expr, &mut out);
        out.sort();
        out.dedup();
        out
    }

    /// Adds to `out` where the value of `expr` may hold references from.
    pub(super) fn value(&self, expr: &Expr, out: &mut Vec<Source>) {
        match expr {
            Expr::Path(path) => {
                if let Some(name) = local_name(path) {
                    out.push(Source::ValueOf(name));
                }
            }
            Expr::Reference(reference) => self.borrow_of(&reference.expr, BorrowKind::Borrow, out),
            Expr::RawAddr(raw) => self.borrow_of(&raw.expr, BorrowKind::Borrow, out),
            Expr::MethodCall(call) => self.method_value(call, false, out),
            Expr::Call(call) => self.call_value(call, out),
            Expr::Macro(mac) => self.macro_value(&mac.mac, out),
            // Operators on tensors return owned values (`&a + &b`); a library whose operator
            // returns a borrow of an operand would make the rewrite fail to compile, not
            // misbehave.
            Expr::Binary(_) | Expr::Lit(_) | Expr::Let(_) | Expr::Assign(_) | Expr::Return(_) => {}
            Expr::Break(_) | Expr::Continue(_) | Expr::Infer(_) => {}
            // `for` and `while` loops are `()`: no `break value` leaves them.
            Expr::ForLoop(_) | Expr::While(_) => {}
            Expr::Unary(unary) => {
                if let UnOp::Deref(_) = unary.op {
                    self.projection_value(&unary.expr, out);
                }
            }
            Expr::Field(field) => self.projection_value(&field.base, out),
            Expr::Index(index) => self.projection_value(&index.expr, out),
            Expr::Cast(cast) => self.value(&cast.expr, out),
            Expr::Paren(paren) => self.value(&paren.expr, out),
            Expr::Group(group) => self.value(&group.expr, out),
            Expr::Tuple(tuple) => tuple.elems.iter().for_each(|e| self.held(e, out)),
            Expr::Array(array) => array.elems.iter().for_each(|e| self.held(e, out)),
            Expr::Repeat(repeat) => self.held(&repeat.expr, out),
            Expr::Struct(lit) => {
                lit.fields.iter().for_each(|f| self.held(&f.expr, out));
                if let Some(rest) = &lit.rest {
                    self.value(rest, out);
                }
            }
            Expr::Range(range) => {
                range
                    .start
                    .iter()
                    .chain(&range.end)
                    .for_each(|e| self.value(e, out));
            }
            // `?` on an `Option` (a lookup, `re.find(&line)?`): what the lookup returned.
            Expr::Try(try_) if !self.try_owns => self.value(&try_.expr, out),
            // `x.t()?`: only a fallible tensor op is followed by `?`, so the result is owned.
            Expr::Try(try_) => match &*try_.expr {
                Expr::MethodCall(call) if self.is_ambiguous(&call.method.to_string()) => {}
                Expr::MethodCall(call) => self.method_value(call, true, out),
                Expr::Await(a) => match &*a.base {
                    Expr::MethodCall(call) => self.method_value(call, true, out),
                    base => self.value(base, out),
                },
                inner => self.value(inner, out),
            },
            Expr::Await(await_) => self.value(&await_.base, out),
            Expr::Closure(closure) if closure.capture.is_some() => {
                self.captured_by_move(expr, out);
            }
            Expr::Async(block) if block.capture.is_some() => self.captured_by_move(expr, out),
            // A labeled block's value may come from any `break 'label value` inside it.
            Expr::Block(block) if block.label.is_some() => out.extend(self.conservative(expr)),
            Expr::Block(block) => self.block_value(&block.block, expr, out),
            Expr::Unsafe(block) => self.block_value(&block.block, expr, out),
            Expr::If(if_) => {
                // `if let Some(v) = map.get(&k) { v.as_str() }`: the value may hold what the
                // `let`s bind.
                self.cond_sources(&if_.cond, out);
                self.block_value(&if_.then_branch, expr, out);
                if let Some((_, otherwise)) = &if_.else_branch {
                    self.value(otherwise, out);
                }
            }
            Expr::Match(match_) => {
                out.extend(self.conservative(&match_.expr));
                for arm in &match_.arms {
                    self.value(&arm.body, out);
                }
            }
            // Non-`move` closures and async blocks, loops with `break value`, anything else.
            _ => out.extend(self.conservative(expr)),
        }
    }

    /// What the bindings of a condition's `let`s may hold.
    fn cond_sources(&self, cond: &Expr, out: &mut Vec<Source>) {
        match cond {
            Expr::Let(let_) => {
                out.extend(self.value_sources(&let_.expr));
                if pattern_bindings(&let_.pat, &mut Vec::new()) {
                    out.extend(self.conservative(&let_.expr));
                }
            }
            Expr::Binary(binary) if matches!(binary.op, BinOp::And(_)) => {
                self.cond_sources(&binary.left, out);
                self.cond_sources(&binary.right, out);
            }
            Expr::Paren(paren) => self.cond_sources(&paren.expr, out),
            _ => {}
        }
    }

    /// `&place` borrows the place's root local; `&value` holds what the value holds.
    fn borrow_of(&self, operand: &Expr, kind: BorrowKind, out: &mut Vec<Source>) {
        match place_root(operand) {
            Some(root) => {
                out.push(Source::Storage(
                    root.clone(),
                    kind,
                    kind == BorrowKind::Borrow,
                ));
                out.push(Source::ValueOf(root));
            }
            None => self.value(operand, out),
        }
    }

    /// A field, element or pointee read out of `base`.
    fn projection_value(&self, base: &Expr, out: &mut Vec<Source>) {
        match (place_root(base), base) {
            (Some(root), _) => out.push(Source::Contents(root)),
            // Read through a reference an accessor returned (`x.get(0).v`): the field holds
            // what `x`'s contents hold, never `x`'s own storage.
            (None, Expr::MethodCall(call))
                if lists::REFERENCE_METHODS.contains(call.method.to_string()) =>
            {
                self.projection_value(&call.receiver, out);
            }
            (None, _) => {
                let mut inner = Vec::new();
                self.value(base, &mut inner);
                out.extend(inner.into_iter().map(|s| match s {
                    Source::Storage(name, _, true) => Source::ValueOf(name),
                    other => other,
                }));
            }
        }
    }

    /// The sources of a value stored inside another (tuple, struct, argument, container): a
    /// reference into `x` becomes "holds a reference into `x`".
    pub(super) fn held(&self, expr: &Expr, out: &mut Vec<Source>) {
        let mut inner = Vec::new();
        self.value(expr, &mut inner);
        out.extend(inner.into_iter().map(|s| match s {
            Source::Storage(name, kind, _) => Source::Storage(name, kind, false),
            other => other,
        }));
    }

    fn captured_by_move(&self, expr: &Expr, out: &mut Vec<Source>) {
        for name in self.scan_expr(expr).mentions.into_keys() {
            out.push(Source::ValueOf(name));
        }
    }

    /// The value of a block: its tail, with the block's own locals replaced by what their
    /// initializers hold (a borrow of a block-local cannot escape it). Blocks that store into
    /// their locals or have other statements fall back to the conservative answer.
    fn block_value(&self, block: &Block, whole: &Expr, out: &mut Vec<Source>) {
        let Some((Stmt::Expr(tail, None), body)) = block.stmts.split_last() else {
            // No tail: the value is `()` or the block diverges.
            return;
        };
        let mut locals: BTreeMap<String, Vec<Source>> = BTreeMap::new();
        let substitute = |sources: Vec<Source>, locals: &BTreeMap<String, Vec<Source>>| {
            let mut result = Vec::new();
            for source in sources {
                match &source {
                    Source::Storage(name, _, _) if locals.contains_key(name) => {}
                    Source::Contents(name) if locals.contains_key(name) => {
                        result.extend(locals[name].iter().map(|s| match s {
                            Source::Storage(target, _, true) => Source::ValueOf(target.clone()),
                            other => other.clone(),
                        }));
                    }
                    Source::ValueOf(name) if locals.contains_key(name) => {
                        result.extend(locals[name].iter().cloned());
                    }
                    _ => result.push(source),
                }
            }
            result
        };
        for stmt in body {
            // Statements whose value is discarded only matter if they store a borrow.
            let local = match stmt {
                Stmt::Local(local) => local,
                Stmt::Expr(..) | Stmt::Macro(_) if !self.scan_stmt(stmt).stores_anything => {
                    continue
                }
                _ => {
                    out.extend(self.conservative(whole));
                    return;
                }
            };
            let mut names = Vec::new();
            let has_ref = pattern_bindings(&local.pat, &mut names);
            let Some(init) = &local.init else {
                out.extend(self.conservative(whole));
                return;
            };
            if has_ref
                || Self::has_extended_temporary(&init.expr)
                || self.scan_expr(&init.expr).stores_anything
            {
                out.extend(self.conservative(whole));
                return;
            }
            let sources = substitute(self.value_sources(&init.expr), &locals);
            for (ident, _) in names {
                locals.insert(ident.unraw().to_string(), sources.clone());
            }
        }
        if self.scan_expr(tail).stores_anything {
            out.extend(self.conservative(whole));
            return;
        }
        out.extend(substitute(self.value_sources(tail), &locals));
    }

    /// `fallible`: the call is followed by `?` (after an `.await`, if any).
    fn method_value(&self, call: &syn::ExprMethodCall, fallible: bool, out: &mut Vec<Source>) {
        let name = call.method.to_string();
        let user_owned = self.owned.contains(&name);
        if !user_owned && lists::ITEM_METHODS.contains(name.as_str()) {
            self.value(&call.receiver, out);
            call.args.iter().for_each(|a| self.held(a, out));
            return;
        }
        if !user_owned && lists::VALUE_COPYING_METHODS.contains(name.as_str()) {
            let mut inner = Vec::new();
            self.value(&call.receiver, &mut inner);
            out.extend(inner.into_iter().map(|s| match s {
                Source::Storage(name, _, true) => Source::ValueOf(name),
                other => other,
            }));
            return;
        }
        if self.is_ambiguous(&name) {
            // May be a view of the receiver (ndarray's `view`): held like a borrowed iterator.
            let mut sources = Vec::new();
            self.borrow_of(&call.receiver, BorrowKind::Borrow, &mut sources);
            out.extend(sources.into_iter().map(|s| match s {
                Source::Storage(n, k, _) => Source::Storage(n, k, false),
                other => other,
            }));
            for arg in &call.args {
                if !matches!(arg, Expr::Reference(_)) {
                    self.held(arg, out);
                }
            }
            return;
        }
        if self.is_owned_method(&name) {
            return;
        }
        if self.is_borrow_method(&name) {
            // A guard (`RefCell::borrow_mut`, `Mutex::lock`) is never `DropAtLastUse`: it keeps its
            // scope end, and its borrow lasts until then, so the local it borrows from must
            // too (dropping that local earlier would not compile).
            let kind = if self.maybe_consumes(&name) || lists::GUARD_METHODS.contains(name.as_str())
            {
                BorrowKind::Maybe
            } else {
                BorrowKind::Borrow
            };
            let mut sources = Vec::new();
            self.borrow_of(&call.receiver, kind, &mut sources);
            if kind == BorrowKind::Maybe {
                // Through an accessor too (`let g = map.data().lock()?`): whatever the guard
                // borrows must outlive the guard.
                for source in &mut sources {
                    if let Source::Storage(_, k, _) = source {
                        *k = BorrowKind::Maybe;
                    }
                }
            }
            if !lists::REFERENCE_METHODS.contains(name.as_str()) {
                // An iterator, `Option<&T>` or guard *holds* a reference into the receiver.
                sources = sources
                    .into_iter()
                    .map(|s| match s {
                        Source::Storage(n, k, _) => Source::Storage(n, k, false),
                        other => other,
                    })
                    .collect();
            }
            out.extend(sources);
            return;
        }
        // `into_*` methods consume `self`: their result cannot borrow it, only hold its value.
        if lists::PASSTHROUGH_METHODS.contains(name.as_str()) || name.starts_with("into_") {
            self.value(&call.receiver, out);
            call.args.iter().for_each(|a| self.held(a, out));
            return;
        }
        if lists::STORING_METHODS.contains(name.as_str()) || self.optimistic {
            return;
        }
        // Unknown method: the result may borrow the receiver (autoref) or own it (by-value
        // `self`); by-value arguments may flow in (generics). Elision ties an output lifetime
        // to `self`, but a named one can tie it to a reference argument (rten's
        // `ctx.with_new_inputs(&inputs)` returns a context that borrows `inputs`), so those
        // are sources too, except under `?`: a fallible op's result is owned, as above
        // (`self.encoder.forward(&x)?`), and were it not, the rewrite would fail to compile,
        // not misbehave.
        self.borrow_of(&call.receiver, BorrowKind::Maybe, out);
        for arg in &call.args {
            if !fallible || !matches!(arg, Expr::Reference(_)) {
                self.held(arg, out);
            }
        }
    }

    fn call_value(&self, call: &syn::ExprCall, out: &mut Vec<Source>) {
        if let Expr::Path(path) = &*call.func {
            let segments = &path.path.segments;
            let last = segments
                .last()
                .map(|s| s.ident.to_string())
                .unwrap_or_default();
            let owner =
                (segments.len() >= 2).then(|| segments[segments.len() - 2].ident.to_string());
            let owned = self.owned.contains(&last)
                || (!lists::BORROWING_CONSTRUCTORS.contains(last.as_str())
                    && (lists::OWNED_FUNCTIONS.contains(last.as_str())
                        || owner
                            .as_deref()
                            .is_some_and(|o| lists::OWNED_TYPES.contains(o))));
            if owned {
                return;
            }
            let constructor = last.starts_with(char::is_uppercase);
            if self.optimistic && !constructor {
                return;
            }
            // `Box::new(|| use(&x))`: a boxed closure is usually a trait object, whose drop may
            // use what it borrows: `x` must outlive it.
            let boxing = owner
                .as_deref()
                .is_some_and(|o| matches!(o, "Box" | "Rc" | "Arc"))
                && matches!(last.as_str(), "new" | "pin");
            if boxing {
                for arg in &call.args {
                    if let Expr::Closure(closure) = arg {
                        if closure.capture.is_none() {
                            let mentions = self.scan_expr(arg).mentions;
                            out.extend(
                                mentions
                                    .into_keys()
                                    .map(|name| Source::Storage(name, BorrowKind::Maybe, false)),
                            );
                        }
                    }
                }
            }
            // Calling a local closure: its result may hold what the closure captured.
            if let Some(name) = local_name(path) {
                out.push(Source::ValueOf(name));
            }
        } else {
            self.value(&call.func, out);
        }
        // A free function's output can only borrow what its arguments hold (no autoref):
        // `f(&x)` may borrow `x`, `f(x)` may hold what `x` holds.
        call.args.iter().for_each(|a| self.held(a, out));
    }

    fn macro_value(&self, mac: &Macro, out: &mut Vec<Source>) {
        let name = macro_name(mac);
        if lists::FORMAT_MACROS.contains(name.as_str())
            || matches!(
                name.as_str(),
                "matches" | "concat" | "stringify" | "assert_matches"
            )
        {
            return;
        }
        if lists::CONTAINER_MACROS.contains(name.as_str()) {
            if let Some(args) = container_args(mac) {
                args.iter().for_each(|a| self.held(a, out));
                return;
            }
        }
        if self.optimistic {
            return;
        }
        let facts = self.scan_macro(mac);
        out.extend(sources_of_mentions(&facts.mentions));
        // An unknown macro may take references: every mention may be borrowed.
        for name in facts.mentions.into_keys() {
            out.push(Source::Storage(name, BorrowKind::Maybe, false));
        }
    }

    /// Whether a `let` initializer creates a temporary whose lifetime is extended to the
    /// enclosing block (`let r = &make(&x);`, `let s = S { f: &g(x) };`).
    pub(crate) fn has_extended_temporary(expr: &Expr) -> bool {
        match expr {
            Expr::Reference(r) => {
                place_root(&r.expr).is_none() || Self::has_extended_temporary(&r.expr)
            }
            Expr::Struct(s) => s
                .fields
                .iter()
                .any(|f| Self::has_extended_temporary(&f.expr)),
            Expr::Tuple(t) => t.elems.iter().any(Self::has_extended_temporary),
            Expr::Array(a) => a.elems.iter().any(Self::has_extended_temporary),
            Expr::Cast(c) => Self::has_extended_temporary(&c.expr),
            Expr::Paren(p) => Self::has_extended_temporary(&p.expr),
            Expr::Group(g) => Self::has_extended_temporary(&g.expr),
            Expr::Block(b) => block_tail_extends(&b.block),
            Expr::Unsafe(b) => block_tail_extends(&b.block),
            Expr::If(i) => {
                block_tail_extends(&i.then_branch)
                    || i.else_branch
                        .as_ref()
                        .is_some_and(|(_, e)| Self::has_extended_temporary(e))
            }
            Expr::Match(m) => m.arms.iter().any(|a| Self::has_extended_temporary(&a.body)),
            // Tuple struct and variant constructors extend too (`let y = Some(&make(x));`).
            Expr::Call(c) => {
                let constructor = matches!(&*c.func, Expr::Path(p) if p.path.segments.last()
                    .is_some_and(|s| s.ident.to_string().starts_with(char::is_uppercase)));
                constructor && c.args.iter().any(Self::has_extended_temporary)
            }
            // `let f = format_args!("{}", x.v);` and `pin!(value)` borrow temporaries that the
            // `let` extends.
            Expr::Macro(m) => matches!(macro_name(&m.mac).as_str(), "format_args" | "pin"),
            _ => false,
        }
    }
}

fn block_tail_extends(block: &Block) -> bool {
    matches!(block.stmts.last(), Some(Stmt::Expr(tail, None)) if Env::has_extended_temporary(tail))
}

pub(super) fn sources_of_mentions(mentions: &BTreeMap<String, Mention>) -> Vec<Source> {
    let mut out = Vec::new();
    for (name, mention) in mentions {
        let kind = if mention.moved {
            BorrowKind::Maybe
        } else {
            BorrowKind::Borrow
        };
        out.push(Source::Storage(name.clone(), kind, false));
        out.push(Source::ValueOf(name.clone()));
    }
    out
}
