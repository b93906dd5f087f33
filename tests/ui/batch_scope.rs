//! `#[batch_scope]` placements and options: what compiles, and the errors for what does not.

#[test]
fn batch_scope_ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/batch_scope/pass/*.rs");
    cases.compile_fail("tests/ui/batch_scope/fail/*.rs");
}
