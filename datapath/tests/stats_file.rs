//! `--stats-file`: the JSON object the datapath writes at exit carries
//! exactly the figures of its exit summary line, under the keys other tools
//! read (the agreed schema, [`SCHEMA`]).
//!
//! - `stats_file_holds_the_summary_lines_figures`: distinct values through
//!   the library's stats path (`Stats` -> summary line and
//!   `Stats::write_file`); needs nothing.
//! - `the_datapath_writes_its_stats_file_at_exit`: the built `ccp-datapath`
//!   started with `--stats-file`, stopped with SIGTERM; its file against
//!   the summary line in its log. Needs root and registers `ccp` (takes
//!   /tmp/ccp-datapath-tests.lock like the other tests that start it).

use std::path::PathBuf;
use std::time::Duration;

use ccp_datapath::summary::{AckCost, BpfCounters, KernelFoldCounters, Latency, Micros, OutboxCounters, Stats};
use ccplab_util::testkit::{lock_ccp_registration, require_root};
use serde_json::Value;

mod common;
use common::process::{uniq, DatapathProc};

/// The stats file's figures as JSON pointers, in the order the summary
/// line prints them.
const SCHEMA: [&str; 43] = [
    "/flows_created",
    "/bpf_flow_ids",
    "/active",
    "/resynced",
    "/invokes",
    "/commands",
    "/skipped_invalid",
    "/unknown_flow_acks",
    "/bpf/command_acks",
    "/bpf/fallback_acks",
    "/bpf/rto_await_acks",
    "/bpf/guard_fallbacks",
    "/bpf/cwnd_clamped",
    "/bpf/rate_floored",
    "/bpf/dropped_events",
    "/bad_records",
    "/refused_msgs",
    "/untrusted_msgs",
    "/outbox/deferred",
    "/outbox/peak",
    "/outbox/dropped",
    "/user_ack_cost_us/mean",
    "/user_ack_cost_us/p50",
    "/user_ack_cost_us/p99",
    "/event_to_command_us/p50",
    "/event_to_command_us/p99",
    "/event_to_command_us/n",
    "/kernel_fold/invocations",
    "/kernel_fold/compiled_runs",
    "/kernel_fold/aborted",
    "/kernel_fold/reports",
    "/kernel_fold/reports_dropped",
    "/kernel_fold/no_state_flows",
    "/kernel_fold/installs",
    "/kernel_fold/compiled",
    "/kernel_fold/interpreted",
    "/kernel_fold/staged",
    "/kernel_fold/refused",
    "/kernel_fold/evictions_refused",
    "/kernel_fold/replaced_unused",
    "/report_to_cwnd_us/p50",
    "/report_to_cwnd_us/p99",
    "/report_to_cwnd_us/n",
];

/// The summary line's `(name, value)` pairs in order; `bpf ids N` is
/// named `bpf_ids`.
fn line_figures(line: &str) -> Vec<(String, String)> {
    let mut out = vec![];
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.next() {
        if w == "(bpf" {
            assert_eq!(words.next(), Some("ids"), "{line}");
            let v = words.next().expect("bpf ids N");
            out.push(("bpf_ids".to_string(), v.trim_end_matches(')').to_string()));
        } else if let Some((k, v)) = w.split_once('=') {
            out.push((k.trim_start_matches('(').to_string(), v.trim_end_matches([';', ')']).to_string()));
        }
    }
    out
}

/// Every leaf of `v` as a JSON pointer.
fn leaves(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| leaves(v, format!("{at}/{k}"), out)),
        _ => out.push(at),
    }
}

/// The JSON has exactly the schema's keys, and each holds the figure the
/// line prints at the same place: the same integer, the same µs number,
/// null where the line prints `-`.
fn assert_json_matches_line(json: &Value, line: &str) {
    let mut keys = vec![];
    leaves(json, String::new(), &mut keys);
    keys.sort();
    let mut want: Vec<String> = SCHEMA.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(keys, want, "the stats file's keys: {json}");
    let figures = line_figures(line);
    assert_eq!(figures.len(), SCHEMA.len(), "figures in the summary line: {line}");
    for (ptr, (name, text)) in SCHEMA.iter().zip(&figures) {
        let leaf = ptr.rsplit('/').next().unwrap();
        let same_name = match name.as_str() {
            "flows" => leaf == "flows_created",
            "bpf_ids" => leaf == "bpf_flow_ids",
            n => leaf == n,
        };
        assert!(same_name, "{ptr} against the line's {name}= ({line})");
        let got = json.pointer(ptr).unwrap_or_else(|| panic!("{ptr} missing: {json}"));
        if text == "-" {
            assert!(got.is_null(), "{ptr}: the line prints -, the file {got}");
        } else if text.contains('.') {
            let want: f64 = text.parse().unwrap_or_else(|e| panic!("{name}={text}: {e}"));
            assert!(got.is_f64() || got.is_u64(), "{ptr}: a number, not {got}");
            assert_eq!(got.as_f64(), Some(want), "{ptr} against {name}={text}");
        } else {
            let want: u64 = text.parse().unwrap_or_else(|e| panic!("{name}={text}: {e}"));
            assert_eq!(got.as_u64(), Some(want), "{ptr}: an integer, as {name}={text}");
        }
    }
}

#[test]
fn stats_file_holds_the_summary_lines_figures() {
    // every figure distinct, so a value under the wrong key cannot pass
    let next = std::cell::Cell::new(0u64);
    let n = || {
        next.set(next.get() + 1);
        next.get()
    };
    let us = |none: bool| Micros((!none).then(|| n() * 1001 + 7));
    let stats = Stats {
        flows_created: n(),
        bpf_flow_ids: n(),
        active: n(),
        resynced: n(),
        invokes: n(),
        commands: n(),
        skipped_invalid: n(),
        unknown_flow_acks: n(),
        bad_records: n(),
        refused_msgs: n(),
        untrusted_msgs: n(),
        bpf: BpfCounters {
            command_acks: n(),
            fallback_acks: n(),
            rto_await_acks: n(),
            guard_fallbacks: n(),
            cwnd_clamped: n(),
            rate_floored: n(),
            dropped_events: n(),
        },
        outbox: OutboxCounters { deferred: n(), peak: n(), dropped: n() },
        user_ack_cost_us: AckCost { mean: us(false), p50: us(false), p99: us(false) },
        event_to_command_us: Latency { p50: us(false), p99: us(false), n: n() },
        kernel_fold: KernelFoldCounters {
            invocations: n(),
            compiled_runs: n(),
            aborted: n(),
            reports: n(),
            reports_dropped: n(),
            no_state_flows: n(),
            installs: n(),
            compiled: n(),
            interpreted: n(),
            staged: n(),
            refused: n(),
            evictions_refused: n(),
            replaced_unused: n(),
        },
        // no sample: `-` in the line, null in the file
        report_to_cwnd_us: Latency { p50: us(true), p99: us(true), n: 0 },
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("stats.json");
    stats.write_file(&path).expect("write the stats file");
    let json: Value = serde_json::from_slice(&std::fs::read(&path).expect("read it back")).expect("JSON");
    let line = stats.to_string();
    assert_json_matches_line(&json, &line);
    assert!(json["report_to_cwnd_us"]["p50"].is_null() && line.contains("report->cwnd us: p50=- p99=- (n=0)"), "{line}");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["stats.json"], "no temporary file left beside it");
}

#[test]
fn a_missing_directory_is_an_error_naming_the_option() {
    let err = Stats::default().write_file(&PathBuf::from("/nonexistent-ccplab-dir/stats.json")).unwrap_err();
    assert!(format!("{err:#}").contains("--stats-file /nonexistent-ccplab-dir/stats.json"), "{err:#}");
}

#[test]
fn the_datapath_writes_its_stats_file_at_exit() {
    require_root("registering the `ccp` struct_ops");
    let _l = lock_ccp_registration();
    let stats = std::env::temp_dir().join(format!("ccp-stats-{}.json", uniq("")));
    let _rm = Remove(stats.clone());
    let portus = std::env::temp_dir().join(format!("ccp-stats-portus-{}", uniq("")));
    let mut dp = DatapathProc::start(
        &["--portus-socket", portus.to_str().unwrap(), "--stats-file", stats.to_str().unwrap()],
        "ccp-stats",
        Duration::from_secs(15),
    );
    assert!(!stats.exists(), "written at exit, not before");
    let status = dp.stop().expect("ccp-datapath stops on SIGTERM");
    let log = dp.log_text();
    assert!(status.success(), "exit {status}: {log}");
    let line = log.lines().rev().find(|l| l.contains("kernel fold: invocations=")).unwrap_or_else(|| panic!("no exit summary in the log:\n{log}"));
    let line = &line[line.find("flows=").unwrap()..];
    let json: Value = serde_json::from_slice(&std::fs::read(&stats).expect("the stats file")).expect("stats file JSON");
    assert_json_matches_line(&json, line);
}

/// Removes a file when dropped.
struct Remove(PathBuf);
impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
