//! `ccplab-trace step --step AT_S:FROM_MBPS:TO_MBPS` (repeatable): several steps in one trace.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temporary directory removed on drop, also when the test fails.
struct TmpDir(PathBuf);

impl TmpDir {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("ccplab-step-cli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TmpDir(dir)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ccplab-trace"))
}

/// `ccplab-trace step` of 2 s with one `--step` per entry of `steps`, the `extra` flags, and `--out out`.
fn run_step(steps: &[&str], extra: &[&str], out: &Path) -> Output {
    let mut cmd = bin();
    cmd.arg("step");
    for step in steps {
        cmd.args(["--step", step]);
    }
    cmd.args(["--duration-s", "2"]).args(extra).arg("--out").arg(out);
    cmd.output().unwrap()
}

/// Per-second opportunity counts of a written trace (timestamps 1..=period ms).
fn per_second(path: &Path) -> Vec<usize> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut counts = Vec::new();
    for ms in text.lines().map(|l| l.trim().parse::<u64>().unwrap()) {
        let s = ((ms - 1) / 1000) as usize;
        counts.resize(counts.len().max(s + 1), 0);
        counts[s] += 1;
    }
    counts
}

#[test]
fn two_steps_up_then_down() {
    let dir = TmpDir::new("two");
    let out = dir.path().join("two.trace");
    let o = run_step(&["0:0:12", "1:12:4"], &["--sigma-mbps", "0"], &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let counts = per_second(&out);
    // 12 Mbit/s = 1 packet/ms for the first second, 4 Mbit/s = 1/3 packet/ms after
    assert_eq!(counts[0], 1000, "{counts:?}");
    assert!((332..=334).contains(&counts[1]), "{counts:?}");
}

#[test]
fn step_whose_from_is_not_the_current_rate_is_refused() {
    let dir = TmpDir::new("bad");
    let out = dir.path().join("bad.trace");
    let o = run_step(&["0:0:12", "1:6:4"], &[], &out);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the rate before 1 s is 12 Mbit/s, not 6"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn old_two_field_step_is_refused_with_the_syntax() {
    let dir = TmpDir::new("old");
    let o = run_step(&["1:4"], &["--before-mbps", "12"], &dir.path().join("x.trace"));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("AT_S:FROM_MBPS:TO_MBPS"), "{err}");
}
