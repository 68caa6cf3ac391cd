//! The contest algorithms' logarithms and exponentials inside a binary that
//! links libccp, whose exported C symbol `log` shadows libm's (docs/NOTES.md, "libccp's `log` symbol"):
//! a C-library `log` call here would run libccp's logger instead (and crash).
//! `ccp_algorithms::contest::{ln, exp, pow}` are plain Rust series, so they
//! must give the right numbers here too; exp3cc and spoderman, which use them,
//! run their rules in this binary.
//!
//! The test first checks that the hazard is present (this binary defines a
//! global `log`, found with `nm`), so it cannot pass for the wrong reason.

use ccp_algorithms::contest::{exp, ln, pow};
use ccp_algorithms::contest::exp3cc::{schedule, Exp3cc, Exp3ccArgs};
use ccp_algorithms::contest::spoderman::{Spoderman, SpodermanArgs};
use ccp_algorithms::cc::{Measurement, WindowParams};
use ccp_algorithms::Controller;
use std::process::Command;

struct NoOut;

impl libccp::DatapathOps for NoOut {
    fn send_msg(&mut self, _msg: &[u8]) {}
}

fn params() -> WindowParams {
    WindowParams { mss_bytes: 1000, init_cwnd_pkts: 10.0, init_ssthresh_pkts: f64::INFINITY, min_cwnd_pkts: 1.0,
        max_cwnd_pkts: 1000.0 }
}

/// The symbol table of this test binary, from `nm` (fails naming the tool if it is missing).
fn defined_log_symbol() -> bool {
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new("nm")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("MISSING: nm (binutils) to read {}'s symbols: {e}", exe.display()));
    assert!(out.status.success(), "nm failed on {}", exe.display());
    String::from_utf8_lossy(&out.stdout).lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() == 3 && f[1] == "T" && f[2] == "log"
    })
}

#[test]
fn pure_ln_exp_and_the_bandit_run_where_libccp_shadows_log() {
    // Link and start libccp so its symbols are really part of this process.
    let dp = libccp::DatapathBuilder::default().with_ops(NoOut).init().expect("libccp init");
    assert!(defined_log_symbol(), "this binary should define libccp's global `log` (else the test proves nothing)");

    let x = std::hint::black_box(20.0);
    assert!((ln(x) - 2.995_732_273_553_991).abs() < 1e-14);
    assert!((exp(std::hint::black_box(-3.5)) - 0.030_197_383_422_318_5).abs() < 1e-16);
    assert!((pow(std::hint::black_box(100.0), 2.0 / 3.0) - 21.544_346_900_318_84).abs() < 1e-12);

    // exp3cc: tau and gamma (ln, pow) and its weight updates (exp) over many rounds.
    let (n, tau, gamma) = schedule(&Exp3ccArgs::default());
    assert_eq!(n, 20);
    assert!((tau - 84.303_252_662_243_89).abs() < 1e-9 && (gamma - 0.643_127_577_477_151_5).abs() < 1e-12);
    let mut bandit = Exp3cc::new(&Exp3ccArgs::default(), params());
    for k in 0..3000u64 {
        let w = bandit.current().1;
        let acked = (w / 0.05).min(800.0) * 0.01;
        bandit.on_report(&Measurement { now_us: k * 10_000, acked_bytes: (acked * 1000.0) as u64, ..Default::default() });
    }
    assert!(bandit.rounds > 100);
    assert!(bandit.weights().iter().all(|w| w.is_finite() && *w >= 1.0));

    // spoderman: Poisson log-likelihoods (ln) and the kernel (exp).
    let mut s = Spoderman::new(&SpodermanArgs::default(), params());
    for _ in 0..30 {
        s.tick(10.0);
    }
    assert!((s.mean_rate() - 500.0).abs() < 80.0, "posterior mean {}", s.mean_rate());
    drop(dp);
}
