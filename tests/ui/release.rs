//! trybuild suites of `#[derive(vramguard::Release)]`: the pass case compiles (with
//! `#![deny(warnings)]`) and checks with the attributes' own probe which types are releasable;
//! pass cases also hold shapes the attribute once broke (late-inferred local types,
//! mixed-hygiene `Release` locals, kept guards from borrowing methods); the fail cases match their `.stderr` files (the error points at the offending field or
//! option and says why).

#[test]
fn release_derive_pass() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/release/pass/*.rs");
}

#[test]
fn release_derive_fail() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/release/fail/*.rs");
}
