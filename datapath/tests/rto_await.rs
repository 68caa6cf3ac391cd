//! Who drove a flow around a retransmission timeout (docs/datapath.md, "Who
//! controlled a flow"): the ACKs that come while the datapath awaits the
//! algorithm's answer to an RTO are counted apart (`rto_await_pkts` in the
//! flow's release record, `rto_await_acks` in the exit summary), within a
//! bound: until the algorithm's first valid command after the RTO, and never
//! longer than the control guard's bound, max(16 x SRTT, 250 ms). Needs
//! root, BPF struct_ops, netns, `ip`/`tc`; fails naming what is missing
//! otherwise.
//!
//! Each test: a bulk flow with congestion control `ccp` through a 20 Mbit/s
//! TBF (a small queue), a fixed-cwnd algorithm on an in-process Portus that
//! answers every report, and an outage: the receiver's end of the link goes
//! down until the sender's retransmission timer has fired (TCP_CA_Loss),
//! then comes back. With both fold modes:
//!
//! - an algorithm that answers the RTO (at its next report, an RTT later):
//!   the flow's ACKs until its answer are rto_await, and the fallback drove
//!   nothing else of note (the runner's 1 % rule holds once rto_await is
//!   left out);
//! - an algorithm that goes silent before the outage and never answers the
//!   RTO: the fallback drives the flow from then on, and only the ACKs within
//!   the guard's bound are rto_await; the rest is fallback, more than the
//!   runner allows.

use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ccplab_util::testkit::{lock_ccp_registration, require_root, require_tools, try_wait_until, CcpRegistrationLock};
use portus::ipc::Ipc;
use portus::lang::Scope;
use portus::{CongAlg, Datapath, DatapathInfo, DatapathTrait, Flow, Report};

mod common;
use common::net::{sh, BulkFlow, Net, NetSpec};
use common::process::{DatapathProc, PortusThread};

/// Bottleneck rate on the sender's veth egress (TBF), bits/s.
const LINK_BPS: u64 = 20_000_000;
/// Bytes on the wire per full-size segment (1448 payload + headers + Ethernet).
const WIRE_BYTES_PER_SEG: u64 = 1514;
/// Namespaces ccprA/ccprB (10.204.0.1 -> 10.204.0.2), TBF at LINK_BPS with a
/// small (64 KB) queue, so RTTs stay short and the guard's bound is about its floor.
const NET: NetSpec = NetSpec { ns_prefix: "ccpr", veth_prefix: "cr", subnet: 204, rate_bps: LINK_BPS, queue_limit: "64kb" };
/// The algorithm's window, packets.
const TARGET_PKTS: u32 = 20;
/// The datapath's default guard floor (--control-timeout-ms) and CTL_GUARD_RTTS (bpf/ccp.bpf.c).
const GUARD_FLOOR: Duration = Duration::from_millis(250);
const GUARD_RTTS: u32 = 16;
/// The runner's default largest fallback share (experiments/ccplab/control.py).
const MAX_FALLBACK_SHARE: f64 = 0.01;
const TCP_CA_LOSS: u8 = 4;

fn lock() -> CcpRegistrationLock {
    require_root("loading the BPF struct_ops congestion control and creating network namespaces");
    require_tools(&["ip", "tc"], "the test network");
    lock_ccp_registration()
}

/// Reports every RTT, and whether a timeout came since the last report; the
/// algorithm answers each with Cwnd = TARGET_PKTS packets unless `mute` is
/// set.
const PROGRAM: &str = "
(def (Report (volatile acked 0) (volatile timeout 0)))
(when true
    (:= Report.acked (+ Report.acked Ack.bytes_acked))
    (:= Report.timeout (if Flow.was_timeout 1))
    (fallthrough))
(when (> Micros Flow.rtt_sample_us)
    (report)
    (:= Micros 0))
";

#[derive(Clone)]
struct Fixed {
    /// While set, reports go unanswered (the algorithm is alive and silent).
    mute: Arc<AtomicBool>,
    /// Leave a report that carries a timeout unanswered: the RTO is answered
    /// at the next report, about an RTT later. (Under --fold userspace the
    /// datapath tells the algorithm of an RTO when it fires, and an answer
    /// at once is there before the outage's first ACK: nothing awaits it.)
    late: bool,
}

struct FixedFlow<I: Ipc> {
    control: Datapath<I>,
    sc: Scope,
    mss: u32,
    alg: Fixed,
}

impl<I: Ipc> CongAlg<I> for Fixed {
    type Flow = FixedFlow<I>;

    fn name() -> &'static str {
        "ccprto-test-fixed"
    }

    fn datapath_programs(&self) -> HashMap<&'static str, String> {
        HashMap::from([("fixed", PROGRAM.to_string())])
    }

    fn new_flow(&self, mut control: Datapath<I>, info: DatapathInfo) -> FixedFlow<I> {
        let sc = control.set_program("fixed", Some(&[("Cwnd", TARGET_PKTS * info.mss)])).expect("set_program");
        FixedFlow { control, sc, mss: info.mss, alg: self.clone() }
    }
}

impl<I: Ipc> Flow for FixedFlow<I> {
    fn on_report(&mut self, _sock_id: u32, m: Report) {
        let timeout = m.get_field("Report.timeout", &self.sc).is_ok_and(|t| t > 0);
        if !self.alg.mute.load(Ordering::SeqCst) && !(self.alg.late && timeout) {
            self.control.update_field(&self.sc, &[("Cwnd", TARGET_PKTS * self.mss)]).expect("update_field");
        }
    }
}

/// The name of the veth end in namespace `ns`.
fn veth_in(ns: &str) -> String {
    let out = Command::new("ip").args(["-n", ns, "-o", "link", "show", "type", "veth"]).output().expect("ip link show");
    let text = String::from_utf8_lossy(&out.stdout);
    // "2: crb123@if2: <BROADCAST,...> ..."
    let name = text.split(": ").nth(1).and_then(|n| n.split('@').next()).map(str::to_string);
    name.unwrap_or_else(|| panic!("no veth in {ns}: {text}"))
}

/// A key's value in the datapath log's last line containing `marker`.
fn logged(log: &str, marker: &str, key: &str) -> u64 {
    let line = log.lines().rev().find(|l| l.contains(marker)).unwrap_or_else(|| panic!("no `{marker}` line: {log}"));
    let v = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in: {line}"));
    v.parse().unwrap_or_else(|e| panic!("{key}={v}: {e}"))
}

/// What the datapath logged of the flow and the run.
#[derive(Debug)]
struct Evidence {
    delivered_pkts: u64,
    fallback_pkts: u64,
    rto_await_pkts: u64,
    fallback_acks: u64,
    rto_await_acks: u64,
    /// Packets the flow delivered from the link's return to its end (TCP_INFO).
    delivered_after_outage: u64,
    /// The largest smoothed RTT seen, us.
    srtt_max_us: u32,
}

/// One flow through an outage that ends in an RTO, under `fold` (`kernel` or
/// `userspace`); with `silent`, the algorithm stops answering just before the
/// outage. The flow then runs `after` before it closes.
fn through_an_outage(fold: &str, silent: bool, after: Duration) -> Evidence {
    let _l = lock();
    let net = Net::new(NET);
    let alg = Fixed { mute: Arc::new(AtomicBool::new(false)), late: !silent };
    let portus = PortusThread::start("ccprto-portus-", alg.clone());
    let mut dp = DatapathProc::start(
        &["--portus-socket", portus.path.to_str().unwrap(), "--congalg", "ccprto-test-fixed", "--fold", fold, "-v"],
        "ccprto-dp",
        Duration::from_secs(15),
    );
    let flow = BulkFlow::start(&net);
    let commanded = flow.wait_for(Duration::from_secs(5), |t| t.tcpi_snd_cwnd == TARGET_PKTS);
    assert!(commanded.is_some(), "the algorithm's cwnd of {TARGET_PKTS} never reached the socket: {}", dp.log_text());
    let mut srtt_max_us = flow.info().tcpi_rtt;

    alg.mute.store(silent, Ordering::SeqCst);
    let (b_veth, b_ns) = (veth_in(&net.b), net.b.clone());
    sh(&["ip", "-n", &b_ns, "link", "set", &b_veth, "down"]);
    let rto = flow.wait_for(Duration::from_secs(5), |t| t.tcpi_ca_state == TCP_CA_LOSS);
    sh(&["ip", "-n", &b_ns, "link", "set", &b_veth, "up"]);
    assert!(rto.is_some(), "no retransmission timeout within 5 s of the link going down: {:?}", flow.info().tcpi_ca_state);
    let delivered_at_return = flow.info().tcpi_delivered;
    let recovered = flow.wait_for(Duration::from_secs(10), |t| t.tcpi_ca_state != TCP_CA_LOSS);
    assert!(recovered.is_some(), "the flow stayed in TCP_CA_Loss for 10 s after the link came back: {}", dp.log_text());
    if !silent {
        let answered = flow.wait_for(Duration::from_secs(5), |t| t.tcpi_snd_cwnd == TARGET_PKTS);
        assert!(answered.is_some(), "the algorithm's cwnd did not come back after the RTO: {}", dp.log_text());
    }
    // the flow as it goes on, sampled: its RTT sets the guard's bound
    let _ = try_wait_until(after, || {
        srtt_max_us = srtt_max_us.max(flow.info().tcpi_rtt);
        std::thread::sleep(Duration::from_millis(20)); // sampling period, not a wait
        None::<()>
    });
    let delivered_after_outage = u64::from(flow.info().tcpi_delivered - delivered_at_return);
    drop(flow);
    dp.proc.wait_log("flow released", Duration::from_secs(5));
    let status = dp.stop();
    assert!(status.is_some_and(|s| s.success()), "ccp-datapath did not exit cleanly ({status:?}): {}", dp.log_text());
    let log = dp.log_text();
    let ev = Evidence {
        delivered_pkts: logged(&log, "flow released", "delivered_pkts"),
        fallback_pkts: logged(&log, "flow released", "fallback_pkts"),
        rto_await_pkts: logged(&log, "flow released", "rto_await_pkts"),
        fallback_acks: logged(&log, "command_acks=", "fallback_acks"),
        rto_await_acks: logged(&log, "command_acks=", "rto_await_acks"),
        delivered_after_outage,
        srtt_max_us,
    };
    println!("fold {fold}, algorithm {}: {ev:?}", if silent { "silent" } else { "answering" });
    assert!(ev.rto_await_pkts <= ev.fallback_pkts && ev.rto_await_acks <= ev.fallback_acks, "rto_await is part of the fallback's: {ev:?}");
    drop(portus);
    drop(net);
    ev
}

fn answering(fold: &str) {
    let ev = through_an_outage(fold, false, Duration::from_secs(1));
    // the ACK that brings the timeout to the algorithm is at least one
    assert!(ev.rto_await_pkts >= 1 && ev.rto_await_acks >= 1, "no ACK counted as awaiting the RTO's answer: {ev:?}");
    let share = (ev.fallback_pkts - ev.rto_await_pkts) as f64 / ev.delivered_pkts as f64;
    assert!(
        share <= MAX_FALLBACK_SHARE,
        "the fallback drove {:.2} % of the flow's packets beyond the RTO's await: {ev:?}",
        share * 100.0
    );
}

fn silent(fold: &str) {
    let ev = through_an_outage(fold, true, Duration::from_secs(2));
    // the await ends within the guard's bound after its first ACK: what the
    // link can deliver in it (and a sampling slack) is the most it may count
    let bound = (Duration::from_micros(u64::from(ev.srtt_max_us)) * GUARD_RTTS).max(GUARD_FLOOR) + Duration::from_millis(100);
    let most = (bound.as_secs_f64() * LINK_BPS as f64 / (WIRE_BYTES_PER_SEG * 8) as f64) as u64;
    assert!(ev.rto_await_pkts <= most, "rto_await went past the guard's bound ({bound:?}, {most} packets at most): {ev:?}");
    let beyond = ev.fallback_pkts - ev.rto_await_pkts;
    assert!(
        beyond * 2 >= ev.delivered_after_outage,
        "an algorithm that never answered the RTO: the fallback's packets beyond the await ({beyond}) are not most of \
         the {} delivered after the outage: {ev:?}",
        ev.delivered_after_outage
    );
    assert!(beyond as f64 > MAX_FALLBACK_SHARE * ev.delivered_pkts as f64, "such a run must be invalid: {ev:?}");
}

#[test]
fn an_answered_rto_is_rto_await_not_fallback_kernel_fold() {
    answering("kernel");
}

#[test]
fn an_answered_rto_is_rto_await_not_fallback_userspace_fold() {
    answering("userspace");
}

#[test]
fn an_unanswered_rto_is_fallback_after_the_guard_bound_kernel_fold() {
    silent("kernel");
}

#[test]
fn an_unanswered_rto_is_fallback_after_the_guard_bound_userspace_fold() {
    silent("userspace");
}
