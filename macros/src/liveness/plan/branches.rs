//! Drops inside branches: a binding whose drop point is an `if` or `match` statement
//! (also a `let` of one, an `else if` chain, a block's tail) dies inside it — in each branch
//! that uses it, at its last use there; in each other branch, at the branch's start — instead
//! of after the whole statement, so that a branch's own work never runs beside a dead value.
//!
//! Whether a binding may go into the branches is decided here, for all of a statement's
//! branches at once (otherwise it is dropped after the statement, as without this rule):
//! - the statement's value does not borrow it (it would have to outlive the branch);
//! - a condition that runs before a body (an `if`'s, a `match` guard, which may run and fail
//!   before the next arm) only borrows it: a condition's temporaries are gone before any
//!   body runs, and nothing is ever dropped inside a condition;
//! - a scrutinee (a `match`'s, an `if let`'s) that uses it is not the binding itself (a place
//!   the arms bind into), does not borrow it and calls no guard method: a scrutinee's
//!   temporaries and its patterns' bindings live through the bodies;
//! - no pattern binds its name (the body's name would be the pattern's binding);
//! - each body that uses it drops it there, by its own last use, a move, or leaving the
//!   block: the body is planned as a block to which the binding is *handed in* (see
//!   `ParamBinding::handed_in`), where a value that dies in the body's tail is dropped there
//!   too. A loop inside a body is one statement of it: a binding is never dropped inside a
//!   loop that is not its own;
//! - the drops at a branch's start fit its budget ([`budget`]), which keeps the generated
//!   code linear in the input.

use std::borrow::Cow;

use proc_macro2::Ident;
use syn::ext::IdentExt;
use syn::Stmt;

use super::{plan, PlanContext};
use crate::liveness::analysis::block::ParamBinding;
use crate::liveness::analysis::branches::{self as facts, BranchBody};
use crate::liveness::analysis::patterns::{pattern_bindings, place_root};
use crate::liveness::analysis::{Env, Source};
use crate::liveness::DropReport;

/// Of `bindings` (dropped at `stmt`, with whether each is `mut`), which may be dropped
/// inside its branches instead of after it.
pub(super) fn pushable(
    stmt: &Stmt,
    bindings: &[(Ident, bool)],
    ctx: &PlanContext<'_>,
) -> Vec<bool> {
    let mut ok = vec![true; bindings.len()];
    let Some(expr) = facts::branching_expr(stmt) else {
        return vec![false; bindings.len()];
    };
    let names: Vec<String> = bindings
        .iter()
        .map(|(i, _)| i.unraw().to_string())
        .collect();
    let env = &ctx.env;
    let refuse = |name: &str, ok: &mut Vec<bool>| {
        if let Some(i) = names.iter().position(|n| n == name) {
            ok[i] = false;
        }
    };
    for source in env.value_sources(expr) {
        if let Source::Storage(name, ..) = source {
            refuse(&name, &mut ok);
        }
    }
    let branches = facts::branches(expr);
    for branch in &branches {
        for pat in &branch.patterns {
            let mut bound = Vec::new();
            pattern_bindings(pat, &mut bound);
            bound
                .iter()
                .for_each(|(ident, _)| refuse(&ident.unraw().to_string(), &mut ok));
        }
        for condition in &branch.conditions {
            for (name, mention) in env.scan_expr(condition).mentions {
                if mention.moved {
                    refuse(&name, &mut ok);
                }
            }
        }
        for scrutinee in &branch.scrutinees {
            let guard = facts::calls_guard_method(scrutinee);
            let place = place_root(scrutinee);
            let sources = env.value_sources(scrutinee);
            for (name, mention) in env.scan_expr(scrutinee).mentions {
                let borrowed = sources.iter().any(|s| match s {
                    Source::Storage(n, ..) | Source::ValueOf(n) | Source::Contents(n) => *n == name,
                });
                if mention.moved || guard || place.as_deref() == Some(&name) || borrowed {
                    refuse(&name, &mut ok);
                }
            }
        }
    }
    // Each body that uses a binding must drop it (planned once per body, for all), and
    // some branch must free it earlier than after the whole statement: one that does not use
    // it, or one that uses it before its last statement.
    // A plain block (one branch) always gains: where the binding would be moved into the
    // statement, only the block's statement of its last use is written twice, not the block.
    let mut gains = vec![matches!(expr, syn::Expr::Block(_)); bindings.len()];
    // Per branch: which bindings it does not use (dropped at its start), and how many
    // such drops its own statements pay for.
    let mut dead_in: Vec<(Vec<bool>, usize)> = Vec::new();
    for branch in &branches {
        let block = match branch.body {
            BranchBody::Block(block) => Cow::Borrowed(block),
            BranchBody::Arm(body) => facts::body_block(body),
            BranchBody::Empty => {
                gains.iter_mut().for_each(|g| *g = true);
                dead_in.push((vec![true; bindings.len()], budget(0)));
                continue;
            }
        };
        let mentions = env.scan_block(&block).mentions;
        for (name, gain) in names.iter().zip(&mut gains) {
            *gain |= !mentions.contains_key(name);
        }
        dead_in.push((
            names.iter().map(|n| !mentions.contains_key(n)).collect(),
            budget(block.stmts.len()),
        ));
        let handed: Vec<ParamBinding> = bindings
            .iter()
            .zip(&names)
            .zip(&ok)
            .filter(|((_, name), &ok)| ok && mentions.contains_key(*name))
            .map(|(((ident, mutable), _), _)| ParamBinding {
                ident: ident.clone(),
                mutable: *mutable,
                handed_in: true,
            })
            .collect();
        if handed.is_empty() {
            continue;
        }
        let probe = PlanContext {
            env: Env {
                owned: env.owned,
                borrows: env.borrows,
                local_macros: env.local_macros,
                optimistic: env.optimistic,
                try_owns: env.try_owns,
            },
            kept_names: ctx.kept_names.clone(),
            no_dup: false,
            depth: ctx.depth + 1,
            probe_only: true,
            outer_scalars: ctx.outer_scalars,
        };
        let placed = plan(&block, &handed, &probe, &mut DropReport::default()).handed_placed;
        for param in &handed {
            let name = param.ident.unraw().to_string();
            match placed.get(&name) {
                Some(&gain) => {
                    if let Some(i) = names.iter().position(|n| *n == name) {
                        gains[i] |= gain;
                    }
                }
                None => refuse(&name, &mut ok),
            }
        }
    }
    let mut ok: Vec<bool> = ok.iter().zip(gains).map(|(&ok, gain)| ok && gain).collect();
    // Within each branch's budget of start drops, first declared first: the others are
    // dropped after the statement, as before.
    for (i, ok) in ok.iter_mut().enumerate() {
        if !*ok {
            continue;
        }
        if dead_in.iter().all(|(dead, left)| !dead[i] || *left > 0) {
            for (dead, left) in &mut dead_in {
                if dead[i] {
                    *left -= 1;
                }
            }
        } else {
            *ok = false;
        }
    }
    ok
}

/// How many bindings a branch of `stmts` statements may drop at its start. Each drop is
/// paid for by the branch's own statements, so that the output stays linear in the input: a
/// value declared before `n` nested `if`s and used in the innermost would otherwise be
/// dropped at the start of all `n` `else`s, and `n` such values `n²` times.
fn budget(stmts: usize) -> usize {
    2 * stmts + 2
}
