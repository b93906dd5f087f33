//! Runtime equivalence of `#[inference]`: every pass case run with and without the attribute
//! returns the same value, and its drop log differs only by earlier drops of non-guard locals.

#[path = "ui/inference/pass/basics.rs"]
mod basics;

#[test]
fn basics() {
    basics::main();
}
