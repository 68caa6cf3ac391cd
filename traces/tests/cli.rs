//! The `ccplab-trace` binary: step generation and check (exit codes, JSON).

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ccplab-trace"))
}

#[test]
fn step_then_check_json() {
    let dir = std::env::temp_dir().join(format!("ccplab-trace-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("step.trace");
    let st = bin()
        .args([
            "step",
            "--before-mbps",
            "0",
            "--after-mbps",
            "12",
            "--at-s",
            "1",
            "--duration-s",
            "3",
        ])
        .args(["--sigma-mbps", "0", "--seed", "3", "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success());
    let o = bin().arg("check").arg(&out).arg("--json").output().unwrap();
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["period_ms"], 3000);
    assert_eq!(v["opportunities"], 2000);
    assert!((v["mean_mbps"].as_f64().unwrap() - 8.0).abs() < 1e-9);
    assert_eq!(v["path"], out.display().to_string());

    let bad = dir.join("bad.trace");
    std::fs::write(&bad, "1\nabc\n").unwrap();
    let o = bin().arg("check").arg(&bad).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{}:2:", bad.display())), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}
