//! Runtime equivalence of `#[inference]`: every pass case run with and without the attribute
//! returns the same value, and its drop log differs only by earlier drops of non-guard locals.
#![allow(clippy::duplicate_mod)] // each pass case includes the shared support module itself

#[path = "../ui/inference/pass/basics.rs"]
mod basics;

#[test]
fn basics() {
    basics::main();
}

#[path = "../ui/inference/pass/control.rs"]
mod control;

#[test]
fn control() {
    control::main();
}

#[path = "../ui/inference/pass/macros.rs"]
mod macros;

#[test]
fn macros() {
    macros::main();
}

#[path = "../ui/inference/pass/borrows.rs"]
mod borrows;

#[test]
fn borrows() {
    borrows::main();
}

#[path = "../ui/inference/pass/placement.rs"]
mod placement;

#[test]
fn placement() {
    placement::main();
}

#[path = "../ui/inference/pass/model.rs"]
mod model;

#[test]
fn model() {
    model::main();
}

#[path = "../ui/inference/pass/tricky.rs"]
mod tricky;

#[test]
fn tricky() {
    tricky::main();
}

#[path = "../ui/inference/pass/adversarial.rs"]
mod adversarial;

#[test]
fn adversarial() {
    adversarial::main();
}

#[path = "../ui/inference/pass/third_party.rs"]
mod third_party;

#[test]
fn third_party() {
    third_party::main();
}

#[path = "../ui/inference/pass/branches.rs"]
mod branches;

#[test]
fn branches() {
    branches::main();
}

#[path = "../ui/inference/pass/last_shapes.rs"]
mod last_shapes;

#[test]
fn last_shapes() {
    last_shapes::main();
}
