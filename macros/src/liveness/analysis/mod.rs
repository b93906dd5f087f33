//! Analysis: what each statement of a block does to the locals around it.
//!
//! Facts only, no decisions (those are the plan's): which locals a statement mentions and how
//! ([`mentions`]), what the values it produces may borrow ([`sources`]), which names a pattern
//! binds ([`patterns`]), what the syntax says about a value's type and a statement's shape
//! ([`shapes`]), what the callee names mean ([`known_names`]), and the facts about a whole
//! block ([`block`]).

pub(crate) mod block;
pub(crate) mod branches;
mod format;
pub(crate) mod known_names;
pub(crate) mod mentions;
pub(crate) mod patterns;
pub(crate) mod shapes;
pub(crate) mod sources;

use std::collections::{BTreeMap, BTreeSet};

/// How a later binding depends on a local it may borrow from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum BorrowKind {
    /// Borrows the local's storage without moving it (`&x`, `x.iter()`): the local can be
    /// dropped after the borrower's last use.
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
    Storage(String, BorrowKind, bool),
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
    /// Passed by value so on every path on which the statement completes (not only inside a
    /// branch, a loop body or a macro; a closure created unconditionally counts, as it takes
    /// the value when created): the statement itself moves it.
    pub consumed_always: bool,
    /// A field (or the pointee) may be moved out: the local is partially moved afterwards.
    pub partial: bool,
    /// Passed by value, or the receiver of a method call that is not followed by `?` (whose
    /// method may take `self` by value, as burn's tensor ops do; a fallible op followed by `?`
    /// is taken to borrow its receiver, as candle's do): the statement may move it somewhere.
    pub consumable: bool,
    /// Written through (`x = …`, `x.f = …`, `x += …`, `&mut x`, `x.push(..)`): a borrow of it
    /// taken before the statement cannot be used after it.
    pub mutated: bool,
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

/// What the analysis knows besides the statement: the name lists and the local macros.
pub(crate) struct Env<'a> {
    /// `?` marks a fallible tensor op, whose result owns its data and whose receiver is only
    /// borrowed (`x.matmul(&w)?`). Not in a function returning `Option`, where `?` unwraps a
    /// lookup whose result borrows its arguments (`re.find(&line)?`).
    pub try_owns: bool,
    /// Extra methods/functions whose result owns its data (`owned(..)` option).
    pub owned: &'a [String],
    /// Extra methods whose result borrows the receiver (`borrows(..)` option).
    pub borrows: &'a [String],
    /// Local `macro_rules!` names → the identifiers of their bodies.
    pub local_macros: &'a BTreeMap<String, BTreeSet<String>>,
    /// Measurement only: treat every unknown call as returning an owned value.
    pub optimistic: bool,
}

/// Whether an attribute is `#[cfg(..)]` or `#[cfg_attr(..)]`.
pub(crate) fn is_cfg_attr(attr: &syn::Attribute) -> bool {
    attr.path().is_ident("cfg") || attr.path().is_ident("cfg_attr")
}

/// Whether an attribute is the inert `#[keep]` marker on a `let`.
pub(crate) fn is_keep_attr(attr: &syn::Attribute) -> bool {
    attr.path().is_ident("keep")
}
