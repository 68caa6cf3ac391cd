//! Behavioural tests of trace parsing, writing and generation.

use std::path::{Path, PathBuf};

use ccplab_traces::{Segment, StepTraceSpec, Trace, TraceError};

/// A temporary directory removed on drop (also when a test fails).
struct TmpDir(PathBuf);

impl std::ops::Deref for TmpDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmpdir(name: &str) -> TmpDir {
    let d = std::env::temp_dir().join(format!("ccplab-traces-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    TmpDir(d)
}

fn write_file(dir: &Path, name: &str, content: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

fn gen_bytes(spec: &StepTraceSpec, dir: &Path, name: &str) -> Vec<u8> {
    let p = dir.join(name);
    spec.generate().unwrap().write(&p).unwrap();
    std::fs::read(p).unwrap()
}

#[test]
fn same_seed_same_bytes_different_seed_differs() {
    let dir = tmpdir("determinism");
    let spec = StepTraceSpec::single_step(0.0, 12.0, 2000, 10_000, 2.0, 42);
    let a = gen_bytes(&spec, &dir, "a");
    let b = gen_bytes(&spec, &dir, "b");
    assert_eq!(a, b, "same seed must give byte-identical files");
    let other = StepTraceSpec { seed: 43, ..spec };
    let c = gen_bytes(&other, &dir, "c");
    assert_ne!(a, c, "different seeds should give different noise");
}

#[test]
fn long_trace_mean_close_to_nominal() {
    let dir = tmpdir("mean");
    for (rate, seed) in [(12.0, 1u64), (48.0, 2)] {
        let spec = StepTraceSpec {
            schedule: vec![Segment {
                start_ms: 0,
                mbps: rate,
            }],
            duration_ms: 60_000,
            sigma_mbps: 2.0,
            seed,
        };
        let p = dir.join(format!("r{rate}"));
        spec.generate().unwrap().write(&p).unwrap();
        // Measure from the produced file, not from memory.
        let t = Trace::read(&p).unwrap();
        let mean = t.mean_mbps();
        assert!(
            (mean - rate).abs() <= 0.02 * rate,
            "mean {mean} Mbit/s not within 2% of {rate}"
        );
        assert_eq!(t.period_ms(), 60_000);
    }
}

#[test]
fn zero_segment_stays_empty_and_period_is_duration() {
    let spec = StepTraceSpec::single_step(0.0, 12.0, 2000, 5000, 2.0, 9);
    let t = spec.generate().unwrap();
    assert!(
        t.timestamps().iter().all(|&ts| ts > 2000),
        "0 Mbit/s segment got an opportunity"
    );
    assert_eq!(t.period_ms(), 5000);
    // The first opportunity comes right after the step (noise may delay it a few ms).
    assert!(
        (2001..=2005).contains(&t.timestamps()[0]),
        "first ts {}",
        t.timestamps()[0]
    );
    // After the step the rate is about 12 Mbit/s.
    let cap = t.capacity_per_interval(1000);
    assert_eq!(cap[0..2], [0.0, 0.0]);
    for c in &cap[2..] {
        assert!((c - 12.0).abs() < 1.0, "capacity {c} far from 12 Mbit/s");
    }
}

#[test]
fn last_line_forced_when_final_segment_is_zero() {
    // 12 then 0: the last millisecond would have no opportunity.
    let spec = StepTraceSpec::single_step(12.0, 0.0, 1000, 3000, 0.0, 0);
    let t = spec.generate().unwrap();
    assert_eq!(t.period_ms(), 3000);
    let ts = t.timestamps();
    assert_eq!(
        ts.iter().filter(|&&x| x > 1000).count(),
        1,
        "only the forced period line"
    );
    assert_eq!(ts.len(), 1001);
}

#[test]
fn truncation_bound_respected() {
    // Per ms: rate <= B + 3 sigma, so opportunities <= floor((B+3s)/12 + credit<1).
    let (b, sigma) = (48.0, 8.0);
    let spec = StepTraceSpec::single_step(b, b, 0, 30_000, sigma, 5);
    let t = spec.generate().unwrap();
    let per_ms = t.opportunities_per_ms();
    let max_allowed = ((b + 3.0 * sigma) / 12.0 + 1.0).floor() as u32;
    let max_seen = *per_ms.iter().max().unwrap();
    assert!(max_seen <= max_allowed, "{max_seen} > {max_allowed}");
    // And the lower bound: rate >= B - 3 sigma = 24 → at least 1 per ms.
    let min_allowed = ((b - 3.0 * sigma) / 12.0).floor() as u32 - 1;
    assert!(per_ms[1..].iter().all(|&n| n >= min_allowed));
    // Noise is really there (not all ms equal).
    assert!(per_ms[1..].iter().any(|&n| n != per_ms[1]));
}

#[test]
fn multi_step_schedule() {
    let spec = StepTraceSpec {
        schedule: vec![
            Segment {
                start_ms: 0,
                mbps: 12.0,
            },
            Segment {
                start_ms: 1000,
                mbps: 24.0,
            },
            Segment {
                start_ms: 2000,
                mbps: 0.0,
            },
            Segment {
                start_ms: 3000,
                mbps: 6.0,
            },
        ],
        duration_ms: 4000,
        sigma_mbps: 0.0,
        seed: 0,
    };
    let cap = spec.generate().unwrap().capacity_per_interval(1000);
    assert_eq!(cap, vec![12.0, 24.0, 0.0, 6.0]);
}

fn err_of(content: &str) -> (TraceError, String) {
    let dir = tmpdir("errors");
    let p = write_file(&dir, "bad.trace", content);
    let e = Trace::read(&p).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&p.display().to_string()),
        "message {msg:?} lacks the file name"
    );
    (e, msg)
}

#[test]
fn validation_errors_name_file_and_line() {
    let (e, _) = err_of("");
    assert!(matches!(e, TraceError::Empty { .. }));
    let (e, msg) = err_of("1\nx\n3\n");
    assert!(matches!(e, TraceError::NotInteger { line: 2, .. }));
    assert!(msg.contains(":2:"), "{msg}");
    let (e, msg) = err_of("1\n-3\n");
    assert!(matches!(e, TraceError::NotInteger { line: 2, .. }), "{msg}");
    let (e, msg) = err_of("1\n\n3\n");
    assert!(matches!(e, TraceError::BlankLine { line: 2, .. }));
    assert!(msg.contains(":2:"), "{msg}");
    let (e, _) = err_of("1\n2\n\n");
    assert!(matches!(e, TraceError::BlankLine { line: 3, .. }));
    let (e, msg) = err_of("1\n5\n4\n");
    assert!(matches!(
        e,
        TraceError::Decreasing {
            line: 3,
            prev: 5,
            ts: 4,
            ..
        }
    ));
    assert!(msg.contains(":3:"), "{msg}");
    let (e, msg) = err_of("0\n0\n");
    assert!(matches!(e, TraceError::ZeroPeriod { line: 2, .. }));
    assert!(msg.contains(":2:"), "{msg}");
    let e = Trace::read("/nonexistent/ccplab.trace").unwrap_err();
    assert!(matches!(e, TraceError::Read { .. }));
    assert!(e.to_string().contains("/nonexistent/ccplab.trace"));
}

#[test]
fn write_is_atomic_and_roundtrips() {
    let dir = tmpdir("write");
    let t = Trace::from_timestamps(Path::new("x"), vec![0, 1, 1, 7]).unwrap();
    let p = dir.join("rt.trace");
    t.write(&p).unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "0\n1\n1\n7\n");
    assert_eq!(Trace::read(&p).unwrap(), t);
    // No temporary file left behind.
    let names: Vec<_> = std::fs::read_dir(&*dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    // Writing into a missing directory fails cleanly.
    assert!(matches!(
        t.write(dir.join("no/such/dir/x")),
        Err(TraceError::Write { .. })
    ));
}

/// The cellular traces in the repository; the tests fail, naming the
/// directory, if they are missing (never a silent pass).
fn cellular_dir() -> PathBuf {
    let dir = ccplab_traces::cellular::dir();
    assert!(
        dir.is_dir(),
        "MISSING: the mahimahi cellular traces: {} does not exist (they are tracked in the repository under traces/cellular)",
        dir.display()
    );
    dir
}

#[test]
fn reads_every_cellular_trace() {
    let dir = cellular_dir();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if !(name.ends_with(".up") || name.ends_with(".down")) {
            continue;
        }
        let t = Trace::read(&p).unwrap_or_else(|e| panic!("{e}"));
        let mean = t.mean_mbps();
        assert!(
            mean > 0.1 && mean < 100.0,
            "{name}: implausible mean {mean}"
        );
        names.push(name);
    }
    names.sort();
    assert_eq!(
        names.len(),
        13,
        "expected the 13 mahimahi cellular traces, found {names:?}"
    );
    for want in [
        "Verizon-LTE-short.down",
        "Verizon-LTE-short.up",
        "TMobile-LTE-short.down",
        "TMobile-LTE-short.up",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {}",
            dir.display()
        );
    }
    for doc in ["README", "SOURCE.md"] {
        assert!(
            dir.join(doc).is_file(),
            "{doc} (source and licence) missing from {}",
            dir.display()
        );
    }
}

#[test]
fn verizon_lte_short_down_mean() {
    let p = cellular_dir().join("Verizon-LTE-short.down");
    assert_eq!(p, ccplab_traces::cellular::trace("Verizon-LTE-short.down"));
    let mean = Trace::read(&p).unwrap().mean_mbps();
    assert!(
        (4.9..5.2).contains(&mean),
        "Verizon-LTE-short.down mean {mean} Mbit/s, expected ~5.04"
    );
}
