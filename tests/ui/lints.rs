//! Lints: each one firing (as an error under `#![deny(deprecated)]`, which also proves that the
//! user's lint level applies) and the fixed code silent (compiled with `#![deny(deprecated)]`,
//! so a false positive fails the case). One case shows the default level: a plain warning.
//! Warnings are only visible in trybuild's `compile_fail` output, hence the deny.

#[test]
fn lints_ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/lints/pass/*.rs");
    cases.compile_fail("tests/ui/lints/fail/*.rs");
}
