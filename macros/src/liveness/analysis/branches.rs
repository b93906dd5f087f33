//! Branches: the facts the plan needs to drop a binding inside the branches of an `if` or
//! `match` statement (see `plan::branches` for the decision): which expression of a statement
//! branches, each branch's body as a block, the conditions evaluated before a body runs, and
//! whether a statement leaves the block.

use std::borrow::Cow;

use syn::{Block, Expr, Pat, Stmt};

use super::known_names::{self as lists, macro_name};

/// The `if`/`match` of a statement whose branches a drop may go into: the statement itself
/// (with or without `;`, or as a block's tail), or the initializer of a `let` without `else`.
/// A plain block (`let x = { …; tail };`) counts as an `if` of one branch: a value dying in it
/// dies at its last use inside, and only the statement of that last use is written twice, not
/// the whole block.
pub(crate) fn branching_expr(stmt: &Stmt) -> Option<&Expr> {
    let expr = match stmt {
        Stmt::Expr(expr, _) => expr,
        Stmt::Local(local) => match &local.init {
            Some(init) if init.diverge.is_none() => &init.expr,
            _ => return None,
        },
        _ => return None,
    };
    (matches!(expr, Expr::If(_) | Expr::Match(_)) || plain_block(expr)).then_some(expr)
}

/// A block without label or attributes (not `unsafe`, `async` or `const`).
fn plain_block(expr: &Expr) -> bool {
    matches!(expr, Expr::Block(b) if b.label.is_none() && b.attrs.is_empty())
}

/// [`branching_expr`], to rewrite.
pub(crate) fn branching_expr_mut(stmt: &mut Stmt) -> Option<&mut Expr> {
    let expr = match stmt {
        Stmt::Expr(expr, _) => expr,
        Stmt::Local(local) => match &mut local.init {
            Some(init) if init.diverge.is_none() => &mut *init.expr,
            _ => return None,
        },
        _ => return None,
    };
    (matches!(expr, Expr::If(_) | Expr::Match(_)) || plain_block(expr)).then_some(expr)
}

/// What runs before one branch's body: the conditions, and the names its patterns bind.
pub(crate) struct Branch<'a> {
    /// The body: an `if`'s block or a `match` arm's expression.
    pub body: BranchBody<'a>,
    /// Plain conditions evaluated before the body (an `if` condition without `let`, a `match`
    /// guard): their temporaries are gone before any body runs.
    pub conditions: Vec<&'a Expr>,
    /// Scrutinees matched before the body (a `match`'s, an `if let`'s): their temporaries
    /// live through the bodies, and their patterns may bind references into them.
    pub scrutinees: Vec<&'a Expr>,
    /// Patterns in scope in the body (a `match` arm's, an `if let`'s).
    pub patterns: Vec<&'a Pat>,
}

/// One branch's body.
pub(crate) enum BranchBody<'a> {
    /// An `if`'s block, or a `match` arm's expression.
    Block(&'a Block),
    Arm(&'a Expr),
    /// The missing `else` of an `if` (`else {}`).
    Empty,
}

/// The branches of an `if` (an `else if` chain flattened, with the conditions tested before
/// each branch) or a `match`.
pub(crate) fn branches(expr: &Expr) -> Vec<Branch<'_>> {
    let mut out = Vec::new();
    match expr {
        Expr::If(_) => if_branches(expr, Vec::new(), Vec::new(), Vec::new(), &mut out),
        Expr::Match(m) => {
            // An arm's body runs after its own guard and the guards of earlier arms (which
            // may have run and failed), never after a later arm's.
            let mut guards = Vec::new();
            for arm in &m.arms {
                let (pat, guard) = match &arm.pat {
                    Pat::Guard(g) => (&*g.pat, Some(&*g.guard)),
                    other => (other, None),
                };
                guards.extend(guard);
                out.push(Branch {
                    body: BranchBody::Arm(&arm.body),
                    conditions: guards.clone(),
                    scrutinees: vec![&m.expr],
                    patterns: vec![pat],
                });
            }
        }
        Expr::Block(b) => out.push(Branch {
            body: BranchBody::Block(&b.block),
            conditions: Vec::new(),
            scrutinees: Vec::new(),
            patterns: Vec::new(),
        }),
        _ => {}
    }
    out
}

fn if_branches<'a>(
    expr: &'a Expr,
    mut conditions: Vec<&'a Expr>,
    mut scrutinees: Vec<&'a Expr>,
    mut patterns: Vec<&'a Pat>,
    out: &mut Vec<Branch<'a>>,
) {
    let Expr::If(if_) = expr else { return };
    split_condition(
        &if_.cond,
        &if_.cond,
        &mut conditions,
        &mut scrutinees,
        &mut patterns,
    );
    out.push(Branch {
        body: BranchBody::Block(&if_.then_branch),
        conditions: conditions.clone(),
        scrutinees: scrutinees.clone(),
        patterns: patterns.clone(),
    });
    match if_.else_branch.as_ref().map(|(_, e)| &**e) {
        Some(other @ Expr::If(_)) => if_branches(other, conditions, scrutinees, patterns, out),
        Some(Expr::Block(b)) => out.push(Branch {
            body: BranchBody::Block(&b.block),
            conditions,
            scrutinees,
            patterns,
        }),
        Some(other) => out.push(Branch {
            body: BranchBody::Arm(other),
            conditions,
            scrutinees,
            patterns,
        }),
        None => out.push(Branch {
            body: BranchBody::Empty,
            conditions,
            scrutinees,
            patterns,
        }),
    }
}

/// Splits an `if` condition into plain conditions and `let` scrutinees with their patterns
/// (`let` chains: `if let A = a && b`, whose every part counts as a scrutinee: whether its
/// temporaries live into the body depends on the edition).
fn split_condition<'a>(
    whole: &Expr,
    cond: &'a Expr,
    conditions: &mut Vec<&'a Expr>,
    scrutinees: &mut Vec<&'a Expr>,
    patterns: &mut Vec<&'a Pat>,
) {
    match cond {
        Expr::Let(let_) => {
            scrutinees.push(&let_.expr);
            patterns.push(&let_.pat);
        }
        Expr::Binary(b) if matches!(b.op, syn::BinOp::And(_)) && contains_let(cond) => {
            split_condition(whole, &b.left, conditions, scrutinees, patterns);
            split_condition(whole, &b.right, conditions, scrutinees, patterns);
        }
        Expr::Paren(p) if contains_let(cond) => {
            split_condition(whole, &p.expr, conditions, scrutinees, patterns)
        }
        other if contains_let(whole) => scrutinees.push(other),
        other => conditions.push(other),
    }
}

fn contains_let(cond: &Expr) -> bool {
    match cond {
        Expr::Let(_) => true,
        Expr::Binary(b) => contains_let(&b.left) || contains_let(&b.right),
        Expr::Paren(p) => contains_let(&p.expr),
        _ => false,
    }
}

/// A branch's body as a block: an `if`'s block as it is, a `match` arm's expression as the
/// tail of a new block (`=> { body }`), which keeps its value and its temporaries' scope (an
/// arm's body is a temporary scope of its own).
pub(crate) fn body_block(body: &Expr) -> Cow<'_, Block> {
    match body {
        Expr::Block(b) if b.label.is_none() && b.attrs.is_empty() => Cow::Borrowed(&b.block),
        other => Cow::Owned(Block {
            brace_token: syn::token::Brace(crate::liveness::emit::first_span(other)),
            stmts: vec![Stmt::Expr(other.clone(), None)],
        }),
    }
}

/// Whether `expr` calls a method that returns a guard borrowing its receiver (`lock`,
/// `borrow`, …): as a scrutinee's temporary, the guard would keep the receiver borrowed
/// through every branch.
pub(crate) fn calls_guard_method(expr: &Expr) -> bool {
    struct Find(bool);
    impl<'ast> syn::visit::Visit<'ast> for Find {
        fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
            self.0 |= lists::GUARD_METHODS.contains(call.method.to_string());
            syn::visit::visit_expr_method_call(self, call);
        }
        fn visit_macro(&mut self, mac: &'ast syn::Macro) {
            // Tokens the visitor cannot see into: assume the worst of an unknown macro.
            self.0 |= !lists::is_known_macro(&macro_name(mac));
        }
        fn visit_item(&mut self, _: &'ast syn::Item) {}
    }
    let mut find = Find(false);
    syn::visit::Visit::visit_expr(&mut find, expr);
    find.0
}

/// Whether a statement always leaves the block (`return`, `break`, `continue`, a panic): the
/// block's bindings die there, so nothing needs dropping before it.
pub(crate) fn diverges(stmt: &Stmt) -> bool {
    let expr = match stmt {
        Stmt::Expr(expr, _) => expr,
        Stmt::Macro(mac) => return diverging_macro(&mac.mac),
        _ => return false,
    };
    match expr {
        Expr::Return(_) | Expr::Break(_) | Expr::Continue(_) => true,
        Expr::Macro(mac) => diverging_macro(&mac.mac),
        _ => false,
    }
}

fn diverging_macro(mac: &syn::Macro) -> bool {
    matches!(
        macro_name(mac).as_str(),
        // `bail!`: candle's and anyhow's early `return Err(..)`.
        "panic" | "unreachable" | "todo" | "unimplemented" | "bail"
    )
}
