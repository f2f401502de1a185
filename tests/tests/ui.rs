//! Compile-fail tests: every misuse of the derive is an error that points at what to fix.
//! One `.rs` and its expected `.stderr` per rule, under `tests/ui/`.

#[test]
fn derive_misuse_is_a_compile_error() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
