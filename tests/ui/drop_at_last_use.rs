//! trybuild suites of `#[derive(vramguard::DropAtLastUse)]`: the pass case compiles (with
//! `#![deny(warnings)]`) and checks with the attributes' own probe which types are droppable;
//! pass cases also hold shapes the attribute once broke (late-inferred local types,
//! mixed-hygiene `DropAtLastUse` locals, kept guards from borrowing methods); the fail cases match
//! their `.stderr` files (the error points at the offending field or option and says why).

#[test]
fn drop_at_last_use_derive_pass() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/drop_at_last_use/pass/*.rs");
}

#[test]
fn drop_at_last_use_derive_fail() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/drop_at_last_use/fail/*.rs");
}
