//! Compile-time behaviour of `#[distributed_lock]`: what compiles (`ui/pass`, which also
//! run) and the errors for what does not (`ui/fail`, with the expected `.stderr` beside).
//!
//! Regenerate the `.stderr` files with `TRYBUILD=overwrite cargo test -p lock-macros --test
//! ui`, then review the diff. Compiler messages change between releases, so this only runs
//! on a stable toolchain.

use std::process::Command;

#[test]
fn ui() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version = Command::new(rustc)
        .arg("-V")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    if !version.starts_with("rustc ")
        || ["nightly", "beta", "-dev"]
            .iter()
            .any(|c| version.contains(c))
    {
        eprintln!("skipping the UI tests: they expect a stable rustc, found {version:?}");
        return;
    }
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
