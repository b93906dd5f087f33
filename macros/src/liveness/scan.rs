//! What one statement does to the locals around it: which it mentions (scope-aware), how (by
//! value, borrowed, a field moved out), and what the values it produces may borrow.

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::visit::Visit;
use syn::{BinOp, Block, Expr, Macro, Pat, Stmt, Token, UnOp};

use super::{format, lists};

/// How a later binding depends on a local it may borrow from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// Borrows the local's storage without moving it (`&x`, `x.iter()`): the local can be
    /// released after the borrower's last use.
    Borrow,
    /// Unknown: the expression may move the local or borrow it (an unknown method on `x`, an
    /// unknown macro, a non-`move` closure). The local must then live to the end of its scope.
    Maybe,
}

/// Where a value may get references from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Source {
    /// The storage of the named local itself. `into` when the value *is* a reference into it
    /// (`&x`, `x.dims()`), so that reading through it yields what `x` holds; `false` when the
    /// value merely holds such a reference somewhere (a tuple, a struct, a call's result).
    Storage(String, Kind, bool),
    /// Whatever the named local's value borrows (its value flows into the result).
    ValueOf(String),
    /// Something read out of the named local (`r.field`, `r[i]`, `*r`): through a reference
    /// into `x` that is what `x` holds; otherwise what the local holds.
    Contents(String),
}

/// How a statement uses one local.
#[derive(Clone, Debug, Default)]
pub(crate) struct Mention {
    /// Used by value somewhere (maybe moved).
    pub moved: bool,
    /// Passed by value somewhere other than as a method receiver (`f(x)`, `let y = x;`,
    /// `a + x`): moved unless `Copy` (a receiver may be auto-referenced instead).
    pub consumed: bool,
    /// A field (or the pointee) may be moved out: the local is partially moved afterwards.
    pub partial: bool,
    /// Its address is taken as a raw pointer (`&raw`, `as *const _`, `addr_of!`, `as_ptr()`):
    /// the pointer may escape where the borrow checker cannot see it, so the local is never
    /// dropped early.
    pub raw_address: bool,
}

/// What a statement does to the locals around it.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    /// Free mentions (names the statement does not bind itself).
    pub mentions: BTreeMap<String, Mention>,
    /// `target` may now hold references from `sources` (`target = &x`, `target.push(&x)`).
    pub stores: Vec<(String, Vec<Source>)>,
    /// Some assignment or storing method call appears (even into a local of the statement).
    pub stores_anything: bool,
}

/// What the scan knows besides the statement: the name lists and the local macros.
pub(crate) struct Env<'a> {
    /// Extra methods/functions whose result owns its data (`owned(..)` option).
    pub owned: &'a [String],
    /// Extra methods whose result borrows the receiver (`borrows(..)` option).
    pub borrows: &'a [String],
    /// Local `macro_rules!` names → the identifiers of their bodies.
    pub local_macros: &'a BTreeMap<String, BTreeSet<String>>,
    /// Measurement only: treat every unknown call as returning an owned value.
    pub optimistic: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    /// Used by value: may be moved.
    Value,
    /// Only borrowed (`&x`, comparison operand, format argument).
    Borrow,
    /// Receiver of a method that may take `self` by value or by reference.
    Receiver,
    /// Assigned to (`x = …`).
    Assign,
}

impl Env<'_> {
    fn is_owned_method(&self, name: &str) -> bool {
        self.owned.iter().any(|n| n == name)
            || (lists::OWNED_METHODS.contains(&name) && !self.is_user_borrow(name))
    }

    /// Owned in one library, a view of the receiver in another (and not listed by the user).
    fn is_ambiguous(&self, name: &str) -> bool {
        lists::AMBIGUOUS_METHODS.contains(&name) && !self.owned.iter().any(|n| n == name)
    }

    fn is_user_borrow(&self, name: &str) -> bool {
        self.borrows.iter().any(|n| n == name)
    }

    /// A borrowing name that std also defines on a by-value `self` (and the user did not list).
    fn maybe_consumes(&self, name: &str) -> bool {
        lists::MAYBE_CONSUMING_METHODS.contains(&name) && !self.is_user_borrow(name)
    }

    fn is_borrow_method(&self, name: &str) -> bool {
        self.is_user_borrow(name) || lists::BORROW_METHODS.contains(&name)
    }

    /// The facts of one statement of a block.
    pub(crate) fn scan_stmt(&self, stmt: &Stmt) -> Facts {
        let mut walker = Walker::new(self);
        walker.stmt(stmt);
        walker.facts
    }

    /// The facts of one expression.
    pub(crate) fn scan_expr(&self, expr: &Expr) -> Facts {
        let mut walker = Walker::new(self);
        walker.expr(expr, Ctx::Value);
        walker.facts
    }

    /// Conservative sources: every local the expression mentions may be borrowed, with
    /// [`Kind::Maybe`] where it is used by value.
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

    fn value(&self, expr: &Expr, out: &mut Vec<Source>) {
        match expr {
            Expr::Path(path) => {
                if let Some(name) = local_name(path) {
                    out.push(Source::ValueOf(name));
                }
            }
            Expr::Reference(reference) => self.borrow_of(&reference.expr, Kind::Borrow, out),
            Expr::RawAddr(raw) => self.borrow_of(&raw.expr, Kind::Borrow, out),
            Expr::MethodCall(call) => self.method_value(call, out),
            Expr::Call(call) => self.call_value(call, out),
            Expr::Macro(mac) => self.macro_value(&mac.mac, out),
            // Operators on tensors return owned values (`&a + &b`); a library whose operator
            // returns a borrow of an operand would make the rewrite fail to compile, not
            // misbehave.
            Expr::Binary(_) | Expr::Lit(_) | Expr::Let(_) | Expr::Assign(_) | Expr::Return(_) => {}
            Expr::Break(_) | Expr::Continue(_) | Expr::Infer(_) => {}
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
            // `x.t()?`: only a fallible tensor op is followed by `?`, so the result is owned.
            Expr::Try(try_) => match &*try_.expr {
                Expr::MethodCall(call) if self.is_ambiguous(&call.method.to_string()) => {}
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
    fn borrow_of(&self, operand: &Expr, kind: Kind, out: &mut Vec<Source>) {
        match place_root(operand) {
            Some(root) => {
                out.push(Source::Storage(root.clone(), kind, kind == Kind::Borrow));
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
                if lists::REFERENCE_METHODS.contains(&call.method.to_string().as_str()) =>
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
    fn held(&self, expr: &Expr, out: &mut Vec<Source>) {
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

    fn method_value(&self, call: &syn::ExprMethodCall, out: &mut Vec<Source>) {
        let name = call.method.to_string();
        let user_owned = self.owned.contains(&name);
        if !user_owned && lists::ITEM_METHODS.contains(&name.as_str()) {
            self.value(&call.receiver, out);
            call.args.iter().for_each(|a| self.held(a, out));
            return;
        }
        if !user_owned && lists::VALUE_COPYING_METHODS.contains(&name.as_str()) {
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
            self.borrow_of(&call.receiver, Kind::Borrow, &mut sources);
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
            // A guard (`RefCell::borrow_mut`, `Mutex::lock`) is never `Release`: it keeps its
            // drop point, and its borrow lasts until then, so the local it borrows from must
            // too (releasing that local earlier would not compile).
            let kind =
                if self.maybe_consumes(&name) || lists::GUARD_METHODS.contains(&name.as_str()) {
                    Kind::Maybe
                } else {
                    Kind::Borrow
                };
            let mut sources = Vec::new();
            self.borrow_of(&call.receiver, kind, &mut sources);
            if kind == Kind::Maybe {
                // Through an accessor too (`let g = map.data().lock()?`): whatever the guard
                // borrows must outlive the guard.
                for source in &mut sources {
                    if let Source::Storage(_, k, _) = source {
                        *k = Kind::Maybe;
                    }
                }
            }
            if !lists::REFERENCE_METHODS.contains(&name.as_str()) {
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
        if lists::PASSTHROUGH_METHODS.contains(&name.as_str()) || name.starts_with("into_") {
            self.value(&call.receiver, out);
            call.args.iter().for_each(|a| self.held(a, out));
            return;
        }
        if lists::STORING_METHODS.contains(&name.as_str()) || self.optimistic {
            return;
        }
        // Unknown method: the result may borrow the receiver (autoref) or own it (by-value
        // `self`). Lifetime elision ties an output lifetime to `self`, not to `&arg`s, so
        // reference arguments are not sources; by-value arguments may flow in (generics).
        self.borrow_of(&call.receiver, Kind::Maybe, out);
        for arg in &call.args {
            if !matches!(arg, Expr::Reference(_)) {
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
                || (!lists::BORROWING_CONSTRUCTORS.contains(&last.as_str())
                    && (lists::OWNED_FUNCTIONS.contains(&last.as_str())
                        || owner
                            .as_deref()
                            .is_some_and(|o| lists::OWNED_TYPES.contains(&o))));
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
                                    .map(|name| Source::Storage(name, Kind::Maybe, false)),
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
        if lists::FORMAT_MACROS.contains(&name.as_str())
            || matches!(
                name.as_str(),
                "matches" | "concat" | "stringify" | "assert_matches"
            )
        {
            return;
        }
        if lists::CONTAINER_MACROS.contains(&name.as_str()) {
            if let Some(args) = container_args(mac) {
                args.iter().for_each(|a| self.held(a, out));
                return;
            }
        }
        if self.optimistic {
            return;
        }
        let mut walker = Walker::new(self);
        walker.mac(mac);
        out.extend(sources_of_mentions(&walker.facts.mentions));
        // An unknown macro may take references: every mention may be borrowed.
        for name in walker.facts.mentions.into_keys() {
            out.push(Source::Storage(name, Kind::Maybe, false));
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

fn sources_of_mentions(mentions: &BTreeMap<String, Mention>) -> Vec<Source> {
    let mut out = Vec::new();
    for (name, mention) in mentions {
        let kind = if mention.moved {
            Kind::Maybe
        } else {
            Kind::Borrow
        };
        out.push(Source::Storage(name.clone(), kind, false));
        out.push(Source::ValueOf(name.clone()));
    }
    out
}

/// The local a path expression names (`x`), if it is a single lowercase identifier.
/// A store target that is no local of the block (a field of `self`, a static, a pointee).
pub(crate) const OUTSIDE: &str = "<outside>";

pub(crate) fn local_name(path: &syn::ExprPath) -> Option<String> {
    if path.qself.is_some() || path.path.leading_colon.is_some() || path.path.segments.len() != 1 {
        return None;
    }
    let segment = &path.path.segments[0];
    if !segment.arguments.is_none() {
        return None;
    }
    // Uppercase names are constants and unit structs, or uppercase locals (`let X = &data;`):
    // only names bound in the block count as locals, so both readings are safe.
    let name = segment.ident.unraw().to_string();
    (name != "self").then_some(name)
}

/// The local at the root of a place expression (`x`, `x.a.b`, `x[i]`, `*x`, `(x)`).
pub(crate) fn place_root(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Path(path) => local_name(path),
        Expr::Field(field) => place_root(&field.base),
        Expr::Index(index) => place_root(&index.expr),
        Expr::Paren(paren) => place_root(&paren.expr),
        Expr::Group(group) => place_root(&group.expr),
        Expr::Unary(unary) if matches!(unary.op, UnOp::Deref(_)) => place_root(&unary.expr),
        _ => None,
    }
}

/// The last segment of a macro's path (`println` for `std::println!`).
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

pub(crate) fn macro_name(mac: &Macro) -> String {
    mac.path
        .segments
        .last()
        .map(|s| s.ident.to_string())
        .unwrap_or_default()
}

fn container_args(mac: &Macro) -> Option<Vec<Expr>> {
    let parser = Punctuated::<Expr, Token![,]>::parse_terminated;
    if let Ok(args) = parser.parse2(mac.tokens.clone()) {
        return Some(args.into_iter().collect());
    }
    // `vec![elem; n]`
    let repeat = |input: syn::parse::ParseStream<'_>| {
        let elem: Expr = input.parse()?;
        let _: Token![;] = input.parse()?;
        let count: Expr = input.parse()?;
        Ok(vec![elem, count])
    };
    repeat.parse2(mac.tokens.clone()).ok()
}

/// The names a pattern binds, with whether each is `mut`; `ref` bindings reported apart.
pub(crate) fn pattern_bindings(pat: &Pat, out: &mut Vec<(syn::Ident, bool)>) -> bool {
    let mut has_ref = false;
    collect_bindings(pat, out, &mut has_ref);
    has_ref
}

/// The bindings of an irrefutable `let` pattern: as [`pattern_bindings`], plus a whole
/// pattern that is one uppercase identifier (`let X = &data;`), which there can only be a
/// binding (a constant pattern would be refutable, or a unit struct nobody binds this way).
pub(crate) fn let_bindings(pat: &Pat, out: &mut Vec<(syn::Ident, bool)>) -> bool {
    let whole = match pat {
        Pat::Type(typed) => &*typed.pat,
        other => other,
    };
    match whole {
        Pat::Ident(ident)
            if ident.subpat.is_none()
                && ident.ident.to_string().starts_with(char::is_uppercase) =>
        {
            out.push((ident.ident.clone(), ident.mutability.is_some()));
            ident.by_ref.is_some()
        }
        _ => pattern_bindings(pat, out),
    }
}

fn collect_bindings(pat: &Pat, out: &mut Vec<(syn::Ident, bool)>, has_ref: &mut bool) {
    match pat {
        Pat::Ident(ident) => {
            let name = ident.ident.to_string();
            // Uppercase identifiers in patterns are constants or unit variants, not bindings.
            if !name.starts_with(char::is_uppercase) {
                out.push((ident.ident.clone(), ident.mutability.is_some()));
                *has_ref |= ident.by_ref.is_some();
            }
            if let Some((_, sub)) = &ident.subpat {
                collect_bindings(sub, out, has_ref);
            }
        }
        Pat::Or(or) => {
            // Every alternative binds the same names: the first one is enough.
            if let Some(first) = or.cases.first() {
                collect_bindings(first, out, has_ref);
            }
        }
        Pat::Paren(p) => collect_bindings(&p.pat, out, has_ref),
        Pat::Reference(r) => collect_bindings(&r.pat, out, has_ref),
        Pat::Slice(s) => s
            .elems
            .iter()
            .for_each(|p| collect_bindings(p, out, has_ref)),
        Pat::Struct(s) => s
            .fields
            .iter()
            .for_each(|f| collect_bindings(&f.pat, out, has_ref)),
        Pat::Tuple(t) => t
            .elems
            .iter()
            .for_each(|p| collect_bindings(p, out, has_ref)),
        Pat::TupleStruct(t) => t
            .elems
            .iter()
            .for_each(|p| collect_bindings(p, out, has_ref)),
        Pat::Type(t) => collect_bindings(&t.pat, out, has_ref),
        Pat::Guard(g) => collect_bindings(&g.pat, out, has_ref),
        _ => {}
    }
}

/// Whether a pattern takes its value apart (so a place it matches is partially moved).
fn destructures(pat: &Pat) -> bool {
    match pat {
        Pat::Ident(ident) => ident.subpat.is_some(),
        Pat::Type(t) => destructures(&t.pat),
        Pat::Paren(p) => destructures(&p.pat),
        Pat::Wild(_) => false,
        _ => {
            let mut names = Vec::new();
            pattern_bindings(pat, &mut names);
            !names.is_empty()
        }
    }
}

struct Walker<'e, 'a> {
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
    /// after the loop. Such a use is released after the statement, never written twice.
    breakless_loops: usize,
    facts: Facts,
}

impl<'e, 'a> Walker<'e, 'a> {
    fn new(env: &'e Env<'a>) -> Self {
        Self {
            env,
            bound: Vec::new(),
            bound_sources: BTreeMap::new(),
            closure_sources: Vec::new(),
            move_captures: 0,
            breakless_loops: 0,
            facts: Facts::default(),
        }
    }

    /// Visits a loop's repeated part (its body, and a `while` condition).
    fn loop_body(&mut self, body: &Block, condition: Option<&Expr>) {
        let breakless = !can_break(body) && !condition.is_some_and(can_break_expr);
        self.breakless_loops += usize::from(breakless);
        if let Some(condition) = condition {
            self.cond(condition);
        }
        self.block(body);
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
                mention.partial |= projected;
            }
            Ctx::Receiver => mention.moved = true,
            Ctx::Borrow | Ctx::Assign => {}
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
            Some(root) if self.bound.contains(&root) => {}
            Some(root) => self.facts.stores.push((root, sources)),
            // `self.f = …`, `*p = …`, a static: stored beyond this block's locals.
            None => self.facts.stores.push((OUTSIDE.to_string(), sources)),
        }
    }

    /// Marks every local mentioned in `expr` as having its address taken.
    fn raw_address_of(&mut self, tokens: TokenStream) {
        let mut inner = Walker::new(self.env);
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
        match stmt {
            Stmt::Local(local) => {
                if let Some(init) = &local.init {
                    self.matched(&init.expr, destructures(&local.pat));
                    if let Some((_, otherwise)) = &init.diverge {
                        self.expr(otherwise, Ctx::Value);
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
                        Some(init) => self.scrutinee_sources(&local.pat, &init.expr),
                        None => Vec::new(),
                    };
                    let sources = self.substitute_bound(sources);
                    self.bind_from(&local.pat, sources);
                }
            }
            // Items cannot capture locals; a local `macro_rules!` counts where it is invoked.
            Stmt::Item(_) => {}
            Stmt::Expr(expr, _) => self.expr(expr, Ctx::Value),
            Stmt::Macro(mac) => self.mac(&mac.mac),
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
                self.matched(&let_.expr, destructures(&let_.pat));
                let sources = self.substitute_bound(self.scrutinee_sources(&let_.pat, &let_.expr));
                self.bind_from(&let_.pat, sources);
            }
            Expr::Binary(binary) if matches!(binary.op, BinOp::And(_)) => {
                self.cond(&binary.left);
                self.cond(&binary.right);
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
            Expr::Reference(r) => self.expr(&r.expr, Ctx::Borrow),
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
            Expr::MethodCall(call) => {
                let name = call.method.to_string();
                let receiver_ctx = if self.env.maybe_consumes(&name) {
                    Ctx::Receiver
                } else if self.env.is_borrow_method(&name)
                    || lists::BORROWING_RECEIVER_METHODS.contains(&name.as_str())
                {
                    Ctx::Borrow
                } else if name.starts_with("into_")
                    || lists::PASSTHROUGH_METHODS.contains(&name.as_str())
                {
                    Ctx::Value
                } else {
                    Ctx::Receiver
                };
                self.expr(&call.receiver, receiver_ctx);
                // A closure argument's parameters may borrow from the receiver and the other
                // arguments (`names.iter().for_each(|n| refs.push(n))`).
                let mut passed = self.env.value_sources(&call.receiver);
                call.args
                    .iter()
                    .filter(|a| !matches!(a, Expr::Closure(_)))
                    .for_each(|a| self.env.held(a, &mut passed));
                let passed = self.substitute_bound(passed);
                for arg in &call.args {
                    if matches!(arg, Expr::Closure(_)) {
                        self.closure_sources = passed.clone();
                    }
                    self.expr(arg, Ctx::Value);
                }
                if lists::RAW_POINTER_METHODS.contains(&name.as_str()) {
                    self.raw_address_of(call.receiver.to_token_stream());
                }
                if lists::STORING_METHODS.contains(&name.as_str()) {
                    let mut sources = Vec::new();
                    call.args
                        .iter()
                        .for_each(|a| self.env.value(a, &mut sources));
                    self.store(&call.receiver, sources);
                }
            }
            Expr::Call(call) => {
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
            Expr::Binary(binary) => {
                let (left, right) = match binary.op {
                    BinOp::Eq(_)
                    | BinOp::Ne(_)
                    | BinOp::Lt(_)
                    | BinOp::Le(_)
                    | BinOp::Gt(_)
                    | BinOp::Ge(_) => (Ctx::Borrow, Ctx::Borrow),
                    BinOp::AddAssign(_)
                    | BinOp::SubAssign(_)
                    | BinOp::MulAssign(_)
                    | BinOp::DivAssign(_)
                    | BinOp::RemAssign(_)
                    | BinOp::BitXorAssign(_)
                    | BinOp::BitAndAssign(_)
                    | BinOp::BitOrAssign(_)
                    | BinOp::ShlAssign(_)
                    | BinOp::ShrAssign(_) => (Ctx::Borrow, Ctx::Value),
                    _ => (Ctx::Value, Ctx::Value),
                };
                self.expr(&binary.left, left);
                self.expr(&binary.right, right);
            }
            Expr::Assign(assign) => {
                self.projection_or_assign(&assign.left);
                self.expr(&assign.right, Ctx::Value);
                let sources = self.env.value_sources(&assign.right);
                self.store(&assign.left, sources);
            }
            Expr::Closure(closure) => {
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
                self.block(&if_.then_branch);
                self.bound.truncate(depth);
                if let Some((_, otherwise)) = &if_.else_branch {
                    self.expr(otherwise, Ctx::Value);
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
            Expr::Match(match_) => {
                let destructuring = match_.arms.iter().any(|a| destructures(&a.pat));
                self.matched(&match_.expr, destructuring);
                for arm in &match_.arms {
                    let depth = self.bound.len();
                    let sources =
                        self.substitute_bound(self.scrutinee_sources(&arm.pat, &match_.expr));
                    self.bind_from(&arm.pat, sources);
                    self.expr(&arm.body, Ctx::Value);
                    self.bound.truncate(depth);
                }
            }
            Expr::Let(let_) => {
                // Outside an `if`/`while` condition (e.g. in a `matches!`-like position).
                self.matched(&let_.expr, destructures(&let_.pat));
                let sources = self.substitute_bound(self.scrutinee_sources(&let_.pat, &let_.expr));
                self.bind_from(&let_.pat, sources);
            }
            Expr::Macro(mac) => self.mac(&mac.mac),
            Expr::Return(r) => r.expr.iter().for_each(|e| self.expr(e, Ctx::Value)),
            Expr::Break(b) => b.expr.iter().for_each(|e| self.expr(e, Ctx::Value)),
            Expr::Yield(y) => y.expr.iter().for_each(|e| self.expr(e, Ctx::Value)),
            Expr::Try(t) => self.expr(&t.expr, Ctx::Value),
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
            other => self.tokens(other.to_token_stream()),
        }
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
        if lists::FORMAT_MACROS.contains(&name.as_str()) {
            let parser = Punctuated::<Expr, Token![,]>::parse_terminated;
            if let Ok(args) = parser.parse2(mac.tokens.clone()) {
                for arg in &args {
                    self.format_arg(arg);
                }
                return;
            }
        } else if lists::CONTAINER_MACROS.contains(&name.as_str()) {
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

    /// Tokens the scan cannot parse: every identifier may be a use by value, and every string
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

/// Whether a statement may be written twice (`if <Release> { let x = x; S } else { S }`).
///
/// Not when the copies could differ in type or meaning: every closure and async block has a
/// type of its own, so a `let` whose value may hold one (`let f = move || x.v;`, an unfinished
/// iterator chain `v.iter().map(|a| a + 1)`) cannot choose between two copies, and an item
/// (`impl`, `fn`, `macro_rules!`) would be defined twice.
pub(crate) fn duplicable(stmt: &Stmt) -> bool {
    struct Items(bool);
    impl<'ast> syn::visit::Visit<'ast> for Items {
        fn visit_item(&mut self, _: &'ast syn::Item) {
            self.0 = true;
        }
    }
    let mut items = Items(false);
    syn::visit::Visit::visit_stmt(&mut items, stmt);
    let value_may_hold_closure = match stmt {
        Stmt::Local(local) => local
            .init
            .as_ref()
            .is_some_and(|init| may_hold_closure(&init.expr)),
        _ => false,
    };
    !items.0 && !value_may_hold_closure
}

/// Whether the value of `expr` may have a closure or async block in its type.
pub(crate) fn may_hold_closure(expr: &Expr) -> bool {
    match expr {
        Expr::Closure(_) | Expr::Async(_) => true,
        // A consuming end of an iterator chain (`collect`, `sum`, …) leaves no closure type.
        Expr::MethodCall(call)
            if lists::CLOSURE_FREE_RESULTS.contains(&call.method.to_string().as_str()) =>
        {
            false
        }
        Expr::MethodCall(call) => {
            may_hold_closure(&call.receiver) || call.args.iter().any(may_hold_closure)
        }
        Expr::Call(call) => may_hold_closure(&call.func) || call.args.iter().any(may_hold_closure),
        Expr::Try(t) => may_hold_closure(&t.expr),
        Expr::Await(a) => may_hold_closure(&a.base),
        Expr::Paren(p) => may_hold_closure(&p.expr),
        Expr::Group(g) => may_hold_closure(&g.expr),
        Expr::Reference(r) => may_hold_closure(&r.expr),
        Expr::Unary(u) => may_hold_closure(&u.expr),
        Expr::Cast(c) => may_hold_closure(&c.expr),
        Expr::Binary(b) => may_hold_closure(&b.left) || may_hold_closure(&b.right),
        Expr::Tuple(t) => t.elems.iter().any(may_hold_closure),
        Expr::Array(a) => a.elems.iter().any(may_hold_closure),
        Expr::Struct(s) => s.fields.iter().any(|f| may_hold_closure(&f.expr)),
        Expr::Field(f) => may_hold_closure(&f.base),
        Expr::Index(i) => may_hold_closure(&i.expr),
        Expr::Lit(_) | Expr::Path(_) | Expr::Range(_) => false,
        Expr::Macro(mac) => {
            !lists::is_known_macro(&macro_name(&mac.mac)) || closure_tokens(mac.mac.tokens.clone())
        }
        // Blocks, branches, loops: whatever they contain.
        other => {
            struct Find(bool);
            impl<'ast> syn::visit::Visit<'ast> for Find {
                fn visit_expr_closure(&mut self, _: &'ast syn::ExprClosure) {
                    self.0 = true;
                }
                fn visit_expr_async(&mut self, _: &'ast syn::ExprAsync) {
                    self.0 = true;
                }
                fn visit_macro(&mut self, mac: &'ast Macro) {
                    self.0 |= !lists::is_known_macro(&macro_name(mac))
                        || closure_tokens(mac.tokens.clone());
                }
            }
            let mut find = Find(false);
            syn::visit::Visit::visit_expr(&mut find, other);
            find.0
        }
    }
}

/// Whether `expr` (through `?`, `.await` and parentheses) calls a local binding, such as a
/// closure: `g(1)` after `let g = |a| async move { a };`.
pub(crate) fn calls_local(expr: &Expr, is_local: &dyn Fn(&str) -> bool) -> bool {
    match expr {
        Expr::Call(call) => match &*call.func {
            Expr::Path(path) => local_name(path).is_some_and(|name| is_local(&name)),
            other => calls_local(other, is_local),
        },
        Expr::Try(t) => calls_local(&t.expr, is_local),
        Expr::Await(a) => calls_local(&a.base, is_local),
        Expr::Paren(p) => calls_local(&p.expr, is_local),
        Expr::Group(g) => calls_local(&g.expr, is_local),
        _ => false,
    }
}

/// Whether a statement has paths that may skip part of it (a branch, a loop, a block, a
/// macro, a `let … else`): a value it passes by value may not be moved on every path. A closure
/// is no such path: it captures what it uses by value when it is created.
pub(crate) fn has_branches(stmt: &Stmt) -> bool {
    struct Find(bool);
    impl<'ast> syn::visit::Visit<'ast> for Find {
        fn visit_expr(&mut self, expr: &'ast Expr) {
            match expr {
                Expr::If(_)
                | Expr::Match(_)
                | Expr::Loop(_)
                | Expr::While(_)
                | Expr::ForLoop(_)
                | Expr::Block(_)
                | Expr::Unsafe(_)
                | Expr::TryBlock(_)
                | Expr::Macro(_) => self.0 = true,
                // `a && f(x)`: the right side may not run.
                Expr::Binary(b) if matches!(b.op, BinOp::And(_) | BinOp::Or(_)) => self.0 = true,
                other => syn::visit::visit_expr(self, other),
            }
        }
        fn visit_local(&mut self, local: &'ast syn::Local) {
            self.0 |= local.init.as_ref().is_some_and(|i| i.diverge.is_some());
            syn::visit::visit_local(self, local);
        }
        fn visit_stmt_macro(&mut self, _: &'ast syn::StmtMacro) {
            self.0 = true;
        }
    }
    let mut find = Find(false);
    syn::visit::Visit::visit_stmt(&mut find, stmt);
    find.0
}

/// Tokens that may form a closure or an async block (`|`, `move`, `async`).
fn closure_tokens(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Punct(p) => p.as_char() == '|',
        TokenTree::Ident(i) => i == "move" || i == "async",
        TokenTree::Group(g) => closure_tokens(g.stream()),
        TokenTree::Literal(_) => false,
    })
}

/// Whether the type of a `let`'s value may be decided only by a later use of the binding:
/// `Vec::new()`, `HashMap::new()`, `Default::default()`, `None`, `Ok(..)`, `vec![]`,
/// `x.parse()`, `x.collect()`, `x.into()`, `x.sum()`, `x as _`, or a turbofish with `_`.
/// A release probe must not be placed before that use: method resolution would have to
/// answer for a type not known yet (and would take it for a `Release` one).
/// A value whose type the syntax alone shows is not `Release`: a literal, a comparison or a
/// boolean operator (`bool`), a reference, a range, a cast to a primitive. Such a local needs
/// no probe; it keeps its drop point either way.
pub(crate) fn never_release(expr: &Expr) -> bool {
    match expr {
        Expr::Lit(_) | Expr::Reference(_) | Expr::Range(_) => true,
        Expr::Cast(cast) => plain_type(&cast.ty),
        Expr::Binary(binary) => matches!(
            binary.op,
            BinOp::Eq(_)
                | BinOp::Ne(_)
                | BinOp::Lt(_)
                | BinOp::Le(_)
                | BinOp::Gt(_)
                | BinOp::Ge(_)
                | BinOp::And(_)
                | BinOp::Or(_)
        ),
        Expr::Paren(paren) => never_release(&paren.expr),
        Expr::Group(group) => never_release(&group.expr),
        _ => false,
    }
}

/// A primitive scalar, a reference or a raw pointer: never `Release`.
pub(crate) fn plain_type(ty: &syn::Type) -> bool {
    const PRIMITIVES: &[&str] = &[
        "bool", "char", "f32", "f64", "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16",
        "u32", "u64", "u128", "usize",
    ];
    match ty {
        syn::Type::Reference(_) | syn::Type::Ptr(_) => true,
        syn::Type::Paren(paren) => plain_type(&paren.elem),
        syn::Type::Path(path) => {
            path.qself.is_none()
                && path
                    .path
                    .get_ident()
                    .is_some_and(|i| PRIMITIVES.contains(&i.to_string().as_str()))
        }
        _ => false,
    }
}

pub(crate) fn type_deferred(expr: &Expr) -> bool {
    match expr {
        Expr::Try(t) => type_deferred(&t.expr),
        Expr::Await(a) => type_deferred(&a.base),
        Expr::Paren(p) => type_deferred(&p.expr),
        Expr::Group(g) => type_deferred(&g.expr),
        Expr::Cast(c) => has_placeholder(&c.ty),
        Expr::Tuple(t) => t.elems.iter().any(type_deferred),
        Expr::Array(a) => a.elems.iter().any(type_deferred),
        Expr::Reference(r) => type_deferred(&r.expr),
        Expr::MethodCall(call) => {
            let name = call.method.to_string();
            // `collect::<Vec<_>>()`: the turbofish fixes the type; its `_`s come from the
            // receiver, which is known by then.
            if call.turbofish.is_some() {
                return false;
            }
            lists::TYPE_DEFERRING_METHODS.contains(&name.as_str())
                || (lists::PASSTHROUGH_METHODS.contains(&name.as_str())
                    && type_deferred(&call.receiver))
        }
        // `Some(Vec::new())`, `Box::new(Vec::new())`: a constructor of a deferred value.
        Expr::Call(call) if call.args.iter().any(type_deferred) => true,
        Expr::Call(call) => match &*call.func {
            Expr::Path(path) => {
                let segments = &path.path.segments;
                // `Vec::<_>::new()`, `make::<_>()`.
                if segments
                    .iter()
                    .any(|s| has_placeholder_tokens(s.arguments.to_token_stream()))
                {
                    return true;
                }
                let Some(last) = segments.last() else {
                    return false;
                };
                let name = last.ident.to_string();
                if !last.arguments.is_none() {
                    return false;
                }
                let owner = (segments.len() >= 2)
                    .then(|| &segments[segments.len() - 2])
                    .filter(|owner| owner.arguments.is_none())
                    .map(|owner| owner.ident.to_string());
                match owner.as_deref() {
                    // `Vec::new()`, `HashMap::with_capacity(n)`: the element types come later.
                    Some(owner) if lists::GENERIC_CONTAINERS.contains(&owner) => {
                        !call
                            .args
                            .iter()
                            .any(|a| !matches!(a, Expr::Lit(_) | Expr::Path(_)))
                            && name != "from"
                    }
                    // `Default::default()`, `From::from(x)`: `Self` comes later.
                    Some(owner) => lists::CONVERSION_TRAITS.contains(&owner),
                    None => matches!(name.as_str(), "Ok" | "Err" | "default"),
                }
            }
            _ => false,
        },
        Expr::Path(path) => path.path.is_ident("None"),
        Expr::Macro(mac) => macro_name(&mac.mac) == "vec" && mac.mac.tokens.is_empty(),
        Expr::Block(b) => match b.block.stmts.last() {
            Some(Stmt::Expr(tail, None)) => type_deferred(tail),
            _ => false,
        },
        _ => false,
    }
}

/// Whether a type has an inferred part (`_`).
pub(crate) fn has_placeholder(ty: &syn::Type) -> bool {
    has_placeholder_tokens(ty.to_token_stream())
}

fn has_placeholder_tokens(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Ident(i) => i == "_",
        TokenTree::Punct(p) => p.as_char() == '_',
        TokenTree::Group(g) => has_placeholder_tokens(g.stream()),
        TokenTree::Literal(_) => false,
    })
}

/// The span of a statement's first token: what syn's `Spanned::span` returns on stable (where
/// spans cannot be joined), without printing the whole statement to tokens to find it.
pub(crate) fn first_span_of_stmt(stmt: &Stmt) -> proc_macro2::Span {
    match stmt {
        Stmt::Local(local) => match local.attrs.first() {
            Some(attr) => attr.pound_token.span,
            None => local.let_token.span,
        },
        Stmt::Expr(expr, _) => first_span(expr),
        Stmt::Macro(mac) => match mac.attrs.first() {
            Some(attr) => attr.pound_token.span,
            None => first_span_of_path(&mac.mac.path),
        },
        Stmt::Item(item) => syn::spanned::Spanned::span(item),
    }
}

/// The span of an expression's first token (see [`first_span_of_stmt`]).
pub(crate) fn first_span(expr: &Expr) -> proc_macro2::Span {
    if let Some(attr) = expr_attrs(expr).first() {
        return attr.pound_token.span;
    }
    match expr {
        Expr::Path(path) => match &path.qself {
            Some(qself) => qself.lt_token.span,
            None => first_span_of_path(&path.path),
        },
        Expr::MethodCall(call) => first_span(&call.receiver),
        Expr::Call(call) => first_span(&call.func),
        Expr::Field(field) => first_span(&field.base),
        Expr::Index(index) => first_span(&index.expr),
        Expr::Try(t) => first_span(&t.expr),
        Expr::Await(a) => first_span(&a.base),
        Expr::Binary(b) => first_span(&b.left),
        Expr::Cast(c) => first_span(&c.expr),
        Expr::Assign(a) => first_span(&a.left),
        Expr::Range(r) => match &r.start {
            Some(start) => first_span(start),
            None => syn::spanned::Spanned::span(&r.limits),
        },
        Expr::Reference(r) => r.and_token.span,
        Expr::Paren(p) => p.paren_token.span.open(),
        Expr::Tuple(t) => t.paren_token.span.open(),
        Expr::Array(a) => a.bracket_token.span.open(),
        Expr::Block(b) => match &b.label {
            Some(label) => label.name.apostrophe,
            None => b.block.brace_token.span.open(),
        },
        Expr::If(i) => i.if_token.span,
        Expr::Match(m) => m.match_token.span,
        Expr::Return(r) => r.return_token.span,
        Expr::Macro(m) => first_span_of_path(&m.mac.path),
        Expr::Lit(l) => l.lit.span(),
        other => syn::spanned::Spanned::span(other),
    }
}

fn first_span_of_path(path: &syn::Path) -> proc_macro2::Span {
    match (&path.leading_colon, path.segments.first()) {
        (Some(colon), _) => colon.spans[0],
        (None, Some(segment)) => segment.ident.span(),
        (None, None) => proc_macro2::Span::call_site(),
    }
}

/// The attributes written on an expression.
fn expr_attrs(expr: &Expr) -> &[syn::Attribute] {
    match expr {
        Expr::Path(e) => &e.attrs,
        Expr::MethodCall(e) => &e.attrs,
        Expr::Call(e) => &e.attrs,
        Expr::Block(e) => &e.attrs,
        Expr::If(e) => &e.attrs,
        Expr::Match(e) => &e.attrs,
        Expr::Macro(e) => &e.attrs,
        Expr::Loop(e) => &e.attrs,
        Expr::ForLoop(e) => &e.attrs,
        Expr::While(e) => &e.attrs,
        Expr::Closure(e) => &e.attrs,
        _ => &[],
    }
}
