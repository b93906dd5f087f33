//! trybuild suites of `#[inference]`: the pass cases compile (with `#![deny(warnings)]`) and
//! run their own equivalence checks; the fail cases match their `.stderr` files.

#[test]
fn inference_pass() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/inference/pass/*.rs");
}

#[test]
fn inference_fail() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/inference/fail/*.rs");
}
