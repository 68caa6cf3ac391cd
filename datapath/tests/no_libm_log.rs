//! The `libccp` crate exports an unmangled C symbol `log` that shadows
//! libm's `log`: in a binary linking libccp, `f64::ln()` calls libccp's
//! logging shim with a float and crashes (seen here: misaligned pointer
//! dereference in libccp/src/ccp.rs, then abort). ccp-datapath therefore
//! uses no float logarithm (its statistics are integer-only).
//!
//! Guard: in the (unoptimized) test build, `f64::ln`/`f32::ln` are separate
//! functions whenever any code uses them, so their symbols must be absent.
//! Release builds inline them, so this check is only meaningful on the debug
//! binary that `cargo test` builds; the end-to-end tests additionally run
//! the binary's whole path (startup, flows, exit summary) and assert a clean
//! exit status.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_ccp-datapath");

fn nm(demangle: bool) -> String {
    let mut c = Command::new("nm");
    if demangle {
        c.arg("-C");
    }
    let out = c.arg(BIN).output().expect("run nm (binutils)");
    assert!(out.status.success(), "nm failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn binary_contains_no_float_logarithm() {
    let syms = nm(true);
    for bad in ["<impl f64>::ln", "<impl f32>::ln", "<impl f64>::log(", "<impl f32>::log("] {
        assert!(
            !syms.lines().any(|l| l.contains(bad)),
            "{bad} is linked into ccp-datapath: it would call libccp's `log` and crash"
        );
    }
}

#[test]
fn hazard_is_still_present_or_gone() {
    // Informational: tells a maintainer whether the restriction still matters.
    let shadowed = nm(false).lines().any(|l| l.ends_with(" T log"));
    eprintln!("libccp `log` symbol exported by the binary: {shadowed}");
}

#[test]
fn help_and_version_run_cleanly() {
    for arg in ["--help", "--version"] {
        let out = Command::new(BIN).arg(arg).output().unwrap();
        assert!(out.status.success(), "{arg}: {:?}", out.status);
        assert!(!out.stdout.is_empty());
    }
    let help = String::from_utf8(Command::new(BIN).arg("--help").output().unwrap().stdout).unwrap();
    for flag in ["--portus-socket", "--bind-dir", "--congalg", "--ready-file", "--verbose"] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}
