//! Prompt reports (docs/datapath.md, "Performance"): a program that reports
//! on every ACK has each report answered within a fraction of its RTT, not
//! after the 20 ms report window.
//!
//! One iperf3 flow through `ccplab-link` (24 Mbit/s, 25 ms each way, so a
//! 50 ms path; 100-packet queue) under an in-process Portus algorithm whose
//! fold program reports on every ACK and which answers every report with a
//! cwnd of 40 packets (below the BDP: no loss). The datapath's exit summary
//! gives report-to-cwnd (a report's kernel timestamp to its answer staged
//! into the kernel): with the default `--report-prompt-us` its p99 must be
//! under a tenth of the path's RTT (5 ms) and under a third of the p99 of the
//! same run with `--report-prompt-us 20000` (the report window: the behaviour
//! before prompt reports), which is printed beside it. The bound leaves room
//! for a loaded 2-core host's scheduling tail: latency figures are judged by
//! the benchmark, not by this test.
//!
//! Needs root, BPF struct_ops, network namespaces, iperf3 and the
//! workspace's built `ccplab-link`; fails naming what is missing otherwise.
//! Registers `ccp`: run under the host lock (`flock /tmp/ccplab-netlab.lock`).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use ccplab_util::testkit::{
    ccp_registered, lock_ccp_registration, require_root, require_tools, try_wait_until, wait_for_tcp_listener,
};
use portus::ipc::Ipc;
use portus::lang::Scope;
use portus::{CongAlg, Datapath, DatapathInfo, DatapathTrait, Flow, Report};

mod common;
use common::link::{in_netns, Link, LinkSpec};
use common::process::{DatapathProc, PortusThread};

/// Bottleneck: 2 delivery opportunities of 1500 bytes per ms = 24 Mbit/s;
/// 25 ms one-way delay, so a 50 ms path; 100-packet queue.
const LINK: LinkSpec = LinkSpec { opportunities_per_ms: 2, one_way_delay_ms: 25, queue_packets: 100 };
/// The algorithm's cwnd, packets: below the BDP (100 packets).
const CWND_PKTS: u32 = 40;
const FLOW_S: u32 = 6;

// ------------------------------------------------------------ the algorithm

/// Reports on every ACK.
const PER_ACK_PROGRAM: &str = "
(def (Report (volatile acked 0)))
(when true
    (:= Report.acked (+ Report.acked Ack.bytes_acked))
    (report))
";

/// Answers every report with a cwnd of [`CWND_PKTS`].
#[derive(Clone, Copy, Default)]
struct PerAck;

struct PerAckFlow<I: Ipc> {
    control: Datapath<I>,
    sc: Scope,
    cwnd_bytes: u32,
}

impl<I: Ipc> CongAlg<I> for PerAck {
    type Flow = PerAckFlow<I>;

    fn name() -> &'static str {
        "ccpdp-test-per-ack"
    }

    fn datapath_programs(&self) -> HashMap<&'static str, String> {
        HashMap::from([("per-ack", PER_ACK_PROGRAM.to_string())])
    }

    fn new_flow(&self, mut control: Datapath<I>, info: DatapathInfo) -> PerAckFlow<I> {
        let cwnd_bytes = CWND_PKTS * info.mss;
        let sc = control.set_program("per-ack", Some(&[("Cwnd", cwnd_bytes)])).expect("set_program");
        PerAckFlow { control, sc, cwnd_bytes }
    }
}

impl<I: Ipc> Flow for PerAckFlow<I> {
    fn on_report(&mut self, _sock_id: u32, _m: Report) {
        self.control.update_field(&self.sc, &[("Cwnd", self.cwnd_bytes)]).expect("update_field");
    }
}

// ------------------------------------------------------------ the test

/// (p50, p99) report-to-cwnd, us, and the sample count, from the datapath's
/// exit summary (`report->cwnd us: p50=A.B p99=C.D (n=N)`).
fn report_to_cwnd(log: &str) -> (f64, f64, u64) {
    let line = log.lines().rev().find(|l| l.contains("report->cwnd us:")).unwrap_or_else(|| panic!("no summary:\n{log}"));
    // the figures after the label (the line has other p50=/p99=/n= before it)
    let line = &line[line.find("report->cwnd us:").expect("found above")..];
    let field = |key: &str| -> &str {
        let at = line.find(key).unwrap_or_else(|| panic!("{key} not in {line}")) + key.len();
        line[at..].split([' ', ')']).next().unwrap()
    };
    // "-": no sample (no report answered)
    let us = |key: &str| field(key).parse::<f64>().unwrap_or(f64::NAN);
    (us("p50="), us("p99="), field("(n=").parse().unwrap_or(0))
}

/// One flow through the link with `extra` datapath flags: its report-to-cwnd.
fn one_run(dir: &Path, link: &Link, portus: &PortusThread<PerAck>, tag: &str, extra: &[&str]) -> (f64, f64, u64) {
    let (sender, receiver, receiver_ip) = (&link.ready.sender_netns, &link.ready.receiver_netns, link.ready.receiver_ip.as_str());
    let portus_socket = portus.path.to_str().expect("a UTF-8 path");
    let mut args = vec!["--portus-socket", portus_socket, "--congalg", "ccpdp-test-per-ack"];
    args.extend_from_slice(extra);
    let mut dp = DatapathProc::start_in(dir, tag, &args, Duration::from_secs(20));
    assert!(ccp_registered(), "ccp registered once the datapath is ready");
    let mut server = in_netns("iperf3 -s", receiver, &["iperf3", "-s", "-p", "5201", "-1"], dir.join(format!("srv-{tag}.log")));
    wait_for_tcp_listener(Some(receiver), 5201, Duration::from_secs(10));
    let t = FLOW_S.to_string();
    let mut client = in_netns("iperf3 -c", sender, &["iperf3", "-c", receiver_ip, "-C", "ccp", "-t", &t], dir.join(format!("cli-{tag}.log")));
    let done = try_wait_until(Duration::from_secs(u64::from(FLOW_S) + 10), || {
        client.child.as_mut().unwrap().try_wait().unwrap().map(|st| st.success())
    });
    assert_eq!(done, Some(true), "iperf3 client did not finish cleanly: {}", client.log_text());
    server.stop();
    dp.stop();
    let log = dp.log_text();
    let r = report_to_cwnd(&log);
    if r.2 == 0 {
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        eprintln!("{tag}: no answered report; the datapath log's last lines:\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
    }
    r
}

#[test]
fn per_ack_reports_are_answered_within_a_fraction_of_the_rtt() {
    require_root("loading the BPF struct_ops congestion control and creating network namespaces");
    require_tools(&["ip", "iperf3"], "the emulated link and the flow");
    let _lock = lock_ccp_registration();
    let dir = tempfile::Builder::new().prefix("ccplab-prompt-").tempdir().expect("temp dir");
    let link = Link::start(dir.path(), LINK);
    let portus = PortusThread::start("ccpdp-prompt-portus-", PerAck);
    let window = one_run(dir.path(), &link, &portus, "window", &["--report-prompt-us", "20000"]);
    let prompt = one_run(dir.path(), &link, &portus, "prompt", &[]);
    println!(
        "per-ACK reporter, 50 ms path, {FLOW_S} s: report->cwnd us p50/p99 (n): prompt {:.0}/{:.0} ({}), report window only {:.0}/{:.0} ({})",
        prompt.0, prompt.1, prompt.2, window.0, window.1, window.2
    );
    assert!(prompt.2 > 100, "too few answered reports to judge: {} (window-only run: {})", prompt.2, window.2);
    assert!(prompt.1 < 5000.0, "report->cwnd p99 {:.0} us with prompt reports (window only: {:.0})", prompt.1, window.1);
    assert!(
        prompt.1 < window.1 / 3.0,
        "prompt reports p99 {:.0} us is not well under the report window's {:.0} us",
        prompt.1,
        window.1
    );
}
