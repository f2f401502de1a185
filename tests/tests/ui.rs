//! Compile-fail tests: every misuse of the derive is an error that points at what to fix.
//! One `.rs` and its expected `.stderr` per rule, under `tests/ui/`.
//!
//! Compiler messages change between Rust releases, so the `.stderr` files are pinned to
//! the toolchain in `tests/ui/TOOLCHAIN` (what `rustc --version` printed when they were
//! made). With another toolchain this test fails and says so, rather than comparing
//! messages of one release with another's; regenerate with `TRYBUILD=overwrite` and update
//! the file when moving to a new toolchain.

use std::process::Command;

#[test]
fn derive_misuse_is_a_compile_error() {
    let pinned = include_str!("ui/TOOLCHAIN").trim();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let output = Command::new(rustc)
        .arg("--version")
        .output()
        .expect("rustc --version runs");
    let current = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    assert_eq!(
        current, pinned,
        "the expected compiler messages in tests/ui were made with {pinned}; this is \
         {current}: run the UI tests with that toolchain, or regenerate them with \
         TRYBUILD=overwrite and write the new version into tests/ui/TOOLCHAIN"
    );
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
