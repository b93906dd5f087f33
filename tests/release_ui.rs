//! trybuild suites of `#[derive(vramguard::Release)]`: the pass case compiles (with
//! `#![deny(warnings)]`) and checks with the attributes' own probe which types are releasable;
//! the fail cases match their `.stderr` files (the error points at the offending field or
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

/// Shapes on which the attribute breaks code that compiles without it (reported; see each
/// file's header). Moved to `pass/` once fixed.
#[test]
#[ignore = "known failures of #[inference]: late-inferred local types, mixed-hygiene Release locals, kept guards from known borrowing methods"]
fn release_pending() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/release/pending/*.rs");
}
