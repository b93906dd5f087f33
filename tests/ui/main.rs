//! trybuild suites: what compiles and the errors for what does not, for `#[inference]`,
//! `#[batch_scope]`, `#[derive(DropAtLastUse)]` and the lints. The cases are the `.rs` files under
//! `pass/` and `fail/` beside these modules (each compiled by trybuild as a crate of its own,
//! never as a module of this binary).

mod batch_scope;
mod drop_at_last_use;
mod inference;
mod lints;
