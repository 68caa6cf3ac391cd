//! The binary end to end: a log's archive written, a log it does not take declined with its line.

use std::process::Command;

fn run(log_text: &str) -> (std::process::Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("uplink.log");
    std::fs::write(&log, log_text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ccplab-logreduce"))
        .arg(&log)
        .arg("--out")
        .arg(dir.path().join("uplink.log.ms.npz"))
        .output()
        .unwrap();
    (out, dir)
}

#[test]
fn writes_the_archive_with_every_array_and_the_header() {
    let (out, dir) =
        run("# base timestamp: 100\n100 # 1504\n100 + 1504\n\n103 - 1504 3\n104 d 1 1504\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let zip = std::fs::read(dir.path().join("uplink.log.ms.npz")).unwrap();
    for name in ccplab_logreduce::reduce::COLUMNS.iter().chain(&["meta"]) {
        let entry = format!("{name}.npy");
        assert!(
            zip.windows(entry.len()).any(|w| w == entry.as_bytes()),
            "{entry} missing"
        );
    }
    let meta = String::from_utf8_lossy(&zip);
    assert!(meta.contains(
        "\"n_events\": 4, \"first_ms\": 0, \"first_event_ms\": 0, \"has_packets\": true"
    ));
    assert!(meta.contains("\"data_ms\": [0, 0], \"delay_dtype\": \"|u1\""));
    // nothing left beside it but the log and its archive, which has a new file's mode (not 0600)
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode(&dir.path().join("uplink.log.ms.npz")),
        mode(&dir.path().join("uplink.log")) & 0o666
    );
}

#[test]
fn declines_a_line_it_does_not_take_naming_the_file_and_line() {
    let (out, dir) = run("0 # 1504\n0 + 1504\n1 - 1504 2.5\n");
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    let log = dir.path().join("uplink.log");
    assert!(
        err.starts_with(&format!(
            "ccplab-logreduce: {}:3: not reduced here",
            log.display()
        )),
        "{err}"
    );
    assert!(!dir.path().join("uplink.log.ms.npz").exists());
}

#[test]
fn a_missing_log_is_an_error_naming_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_ccplab-logreduce"))
        .args(["/nonexistent/uplink.log", "--out", "/nonexistent/x.npz"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/uplink.log"));
}
