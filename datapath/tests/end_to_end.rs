//! End-to-end tests of `ccp-datapath` (need root, BPF struct_ops, netns,
//! and the tools ip, tc, setpriv). Without them each test fails naming what
//! is missing (ccplab_util::testkit, the project's one policy).
//!
//! Each test: two fresh network namespaces joined by a veth pair whose
//! sender side has a TBF bottleneck (no netem on this kernel); an in-process
//! Portus algorithm on its own unix socket; the built `ccp-datapath` binary;
//! a TCP flow with congestion control `ccp` from namespace A to B. The
//! sender's TCP_INFO shows whether the algorithm's cwnd reached the socket.
//!
//! Only one datapath can register `ccp` at a time: tests hold a process-wide
//! mutex plus a file lock, and wait for a foreign `ccp` to go away.
//! Everything (namespaces, processes, Portus thread, files) is torn down by
//! Drop guards, also when an assertion fails.

use std::collections::HashMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ccplab_util::testkit::{
    ccp_registered, lock_ccp_registration, require_root, require_tools, try_wait_until, wait_for_exit,
    CcpRegistrationLock,
};
use portus::ipc::Ipc;
use portus::lang::Scope;
use portus::{CongAlg, Datapath, DatapathInfo, DatapathTrait, Flow, Report};

mod common;
use common::net::{connect_with, enter_netns, sh, BulkFlow, Net, NetSpec, SocketSetup};
use common::process::{uniq, AlgorithmProc, DatapathProc, PortusThread, DATAPATH as BIN};

/// Bottleneck rate on A's veth egress (TBF), bits/s.
const LINK_BPS: u64 = 20_000_000;
/// tcpi_snd_ssthresh while slow start has not ended (TCP_INFINITE_SSTHRESH).
const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;
/// Bytes on the wire per full-size segment (1448 payload + TCP/IP/timestamps + Ethernet).
const WIRE_BYTES_PER_SEG: u64 = 1514;
/// Namespaces ccpdpA/ccpdpB (10.201.0.1 -> 10.201.0.2), TBF at LINK_BPS with a 1 MB queue.
const NET: NetSpec = NetSpec { ns_prefix: "ccpdp", veth_prefix: "cd", subnet: 201, rate_bps: LINK_BPS, queue_limit: "1mb" };

// ---------------------------------------------------------------- locking

/// Fail (naming what is missing) unless the test can load BPF struct_ops
/// and create namespaces; then hold the `ccp` registration lock.
fn lock() -> CcpRegistrationLock {
    require_root("loading the BPF struct_ops congestion control and creating network namespaces");
    require_tools(&["ip", "tc", "setpriv"], "the test network and the non-root check");
    lock_ccp_registration()
}

// ---------------------------------------------------------------- Portus alg

/// Test algorithm: installs a fold program that reports every RTT and sets
/// a fixed cwnd of `target_pkts * MSS`; changes it when `target_pkts` changes.
#[derive(Clone)]
struct FixedCwnd {
    target_pkts: Arc<AtomicU32>,
    reports: Arc<AtomicU64>,
    flows: Arc<AtomicU32>,
    /// Flows Portus closed (on the datapath's close message).
    closed: Arc<AtomicU32>,
    /// Time Portus's thread spends on each create and close, ms: a slow
    /// algorithm whose socket queue fills under a burst.
    busy_ms: Arc<AtomicU64>,
    /// New flows get SPARSE_PROGRAM (a report every 200 ms) instead of PROGRAM.
    sparse: Arc<AtomicBool>,
    /// Per SPARSE_PROGRAM report: (CLOCK_MONOTONIC us when Portus got it,
    /// its Report.now, the ACK's us since the datapath's time zero).
    sparse_reports: Arc<std::sync::Mutex<Vec<(u64, u64)>>>,
}

const PROGRAM: &str = "
(def (Report (volatile acked 0) (volatile rtt 0) (volatile cwnd 0)))
(when true
    (:= Report.acked (+ Report.acked Ack.bytes_acked))
    (:= Report.rtt Flow.rtt_sample_us)
    (:= Report.cwnd Cwnd)
    (fallthrough))
(when (> Micros Report.rtt)
    (report)
    (:= Micros 0))
";

/// PROGRAM's cwnd, reporting every 200 ms with the ACK's time (Ack.now).
const SPARSE_PROGRAM: &str = "
(def (Report (volatile acked 0) (volatile now 0)))
(when true
    (:= Report.acked (+ Report.acked Ack.bytes_acked))
    (:= Report.now Ack.now)
    (fallthrough))
(when (> Micros 200000)
    (report)
    (:= Micros 0))
";

fn monotonic_us() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

struct FixedFlow<I: Ipc> {
    control: Datapath<I>,
    sc: Scope,
    mss: u32,
    alg: FixedCwnd,
}

impl<I: Ipc> CongAlg<I> for FixedCwnd {
    type Flow = FixedFlow<I>;

    fn name() -> &'static str {
        "ccpdp-test-fixed"
    }

    fn datapath_programs(&self) -> HashMap<&'static str, String> {
        HashMap::from([("fixed", PROGRAM.to_string()), ("sparse", SPARSE_PROGRAM.to_string())])
    }

    fn new_flow(&self, mut control: Datapath<I>, info: DatapathInfo) -> FixedFlow<I> {
        let pkts = self.target_pkts.load(Ordering::SeqCst);
        let program = if self.sparse.load(Ordering::SeqCst) { "sparse" } else { "fixed" };
        let sc = control.set_program(program, Some(&[("Cwnd", pkts * info.mss)])).expect("set_program");
        std::thread::sleep(Duration::from_millis(self.busy_ms.load(Ordering::SeqCst)));
        self.flows.fetch_add(1, Ordering::SeqCst);
        FixedFlow { control, sc, mss: info.mss, alg: self.clone() }
    }
}

impl<I: Ipc> Flow for FixedFlow<I> {
    fn on_report(&mut self, _sock_id: u32, m: Report) {
        if m.get_field("Report.acked", &self.sc).is_ok() {
            self.alg.reports.fetch_add(1, Ordering::SeqCst);
        }
        if let Ok(now) = m.get_field("Report.now", &self.sc) {
            self.alg.sparse_reports.lock().unwrap().push((monotonic_us(), now));
        }
        // every report is answered, as the suite's algorithms do: a flow
        // nothing commands for 16 RTTs is taken by the datapath's control
        // guard (docs/datapath.md, "Never frozen")
        let want = self.alg.target_pkts.load(Ordering::SeqCst);
        self.control.update_field(&self.sc, &[("Cwnd", want * self.mss)]).expect("update_field");
    }
}

impl<I: Ipc> Drop for FixedFlow<I> {
    /// Portus drops a flow when the datapath's close message arrives.
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(self.alg.busy_ms.load(Ordering::SeqCst)));
        self.alg.closed.fetch_add(1, Ordering::SeqCst);
    }
}

/// The fixed-cwnd algorithm on an in-process Portus.
type Portus = PortusThread<FixedCwnd>;

/// [`FixedCwnd`] at `target_pkts`, on its own Portus socket.
fn start_portus(target_pkts: u32) -> Portus {
    let alg = FixedCwnd {
        target_pkts: Arc::new(AtomicU32::new(target_pkts)),
        reports: Arc::new(AtomicU64::new(0)),
        flows: Arc::new(AtomicU32::new(0)),
        closed: Arc::new(AtomicU32::new(0)),
        busy_ms: Arc::new(AtomicU64::new(0)),
        sparse: Arc::new(AtomicBool::new(false)),
        sparse_reports: Arc::new(std::sync::Mutex::new(Vec::new())),
    };
    PortusThread::start("ccpdp-test-portus-", alg)
}

// ---------------------------------------------------------------- datapath

/// `ccp-datapath --portus-socket PORTUS --congalg CONGALG -v EXTRA...`,
/// ready within 15 s: its ready file names `ccp`, its pid and a socket
/// that exists, and `ccp` is registered.
fn start_datapath(portus_socket: &Path, congalg: &str, extra: &[&str]) -> DatapathProc {
    let mut args = vec!["--portus-socket", portus_socket.to_str().unwrap(), "--congalg", congalg, "-v"];
    args.extend_from_slice(extra);
    let dp = DatapathProc::start(&args, "ccp-dp-test", Duration::from_secs(15));
    assert_eq!(dp.ready_json["ca"], "ccp");
    assert_eq!(dp.ready_json["pid"], dp.proc.child.as_ref().unwrap().id());
    assert!(dp.socket.exists(), "bound socket exists");
    assert!(ccp_registered(), "ccp registered once ready");
    dp
}

/// Expected smoothed RTT when `cwnd_pkts` full segments sit in the TBF queue.
fn queueing_rtt_us(cwnd_pkts: u64) -> u64 {
    cwnd_pkts * WIRE_BYTES_PER_SEG * 8 * 1_000_000 / LINK_BPS
}

/// Whether an RTT (us) is within [0.6, 1.6] x the queueing delay of `pkts`
/// segments at the bottleneck.
fn rtt_in_band(rtt_us: u64, pkts: u32) -> bool {
    let want = queueing_rtt_us(pkts as u64);
    rtt_us * 10 >= want * 6 && rtt_us * 10 <= want * 16
}

/// Wait (at most 5 s) until the queue has settled at `pkts` segments: cwnd
/// is `pkts`, what was sent under a larger cwnd before (the fallback's slow
/// start) has been acked, and the smoothed RTT is in the expected band.
/// (The smoothed RTT alone can enter the band while 13 segments are still
/// out under a cwnd of 10.)
fn wait_settled(flow: &BulkFlow, pkts: u32) {
    let settled = flow.wait_for(Duration::from_secs(5), |t| t.tcpi_snd_cwnd == pkts && t.tcpi_unacked <= pkts && rtt_in_band(t.tcpi_rtt as u64, pkts));
    let now = flow.info();
    assert!(
        settled.is_some(),
        "queue did not settle at cwnd {pkts} within 5 s: cwnd {}, srtt {} us, expected about {} us",
        now.tcpi_snd_cwnd,
        now.tcpi_rtt,
        queueing_rtt_us(pkts as u64)
    );
}

/// Check over `window` that the sender's cwnd stays at `pkts`, the flow is
/// cwnd-limited (in flight reaches cwnd) and the RTT is the queueing delay
/// of `pkts` segments at the bottleneck (so cwnd/RTT ~= link rate). Returns
/// the median smoothed RTT (us) over the window's samples: one sample can
/// carry a transient (CI saw 7.9 ms at cwnd 10, where 4.8-5.1 ms is usual).
fn assert_held_at(flow: &BulkFlow, pkts: u32, window: Duration) -> u64 {
    let end = Instant::now() + window;
    let mut saw_full = false;
    let mut srtts = vec![];
    while Instant::now() < end {
        let now = flow.info();
        assert_eq!(now.tcpi_snd_cwnd, pkts, "cwnd drifted from the algorithm's value");
        assert!(now.tcpi_unacked <= pkts, "more in flight ({}) than cwnd {pkts}", now.tcpi_unacked);
        saw_full |= now.tcpi_unacked + 1 >= pkts;
        srtts.push(now.tcpi_rtt as u64);
        std::thread::sleep(Duration::from_millis(25)); // sampling period, not a wait
    }
    assert!(saw_full, "flow never filled its cwnd of {pkts}");
    srtts.sort_unstable();
    let median = srtts[srtts.len() / 2];
    assert!(
        rtt_in_band(median, pkts),
        "median srtt {median} us, expected about {} us for {pkts} packets queued at {LINK_BPS} bit/s",
        queueing_rtt_us(pkts as u64)
    );
    median
}

// ---------------------------------------------------------------- tests

/// The counter `key=` of the datapath's last summary line (`kernel fold:` part).
fn summary_count(log: &str, key: &str) -> u64 {
    summary_field(log, "kernel fold:", key)
}

#[test]
fn fixed_cwnd_from_portus_reaches_the_socket_and_follows_changes() {
    // both of FixedCwnd's programs (PROGRAM, SPARSE_PROGRAM) compiled
    fixed_cwnd_follows_portus(&[], (2, 0));
}

#[test]
fn fixed_cwnd_follows_portus_with_the_interpreted_fold() {
    fixed_cwnd_follows_portus(&["--fold-jit", "false"], (0, 0));
}

/// One flow under a fixed-cwnd Portus algorithm; `programs` = (compiled,
/// interpreted) the datapath's summary must count: which of the two ran
/// the program's main section.
fn fixed_cwnd_follows_portus(datapath_args: &[&str], programs: (u64, u64)) {
    let _l = lock();
    let net = Net::new(NET);
    let portus = start_portus(10);
    let mut dp = start_datapath(&portus.path, "ccpdp-test-fixed", datapath_args);
    let flow = BulkFlow::start(&net);
    assert_eq!(flow.congestion_control(), "ccp");

    let ti = flow.wait_for(Duration::from_secs(5), |t| t.tcpi_snd_cwnd == 10);
    assert!(ti.is_some(), "cwnd never became 10 (now {}): {}", flow.info().tcpi_snd_cwnd, dp.log_text());
    assert_eq!(ti.unwrap().tcpi_snd_mss, 1448);
    wait_settled(&flow, 10);
    let at10 = assert_held_at(&flow, 10, Duration::from_secs(2));
    assert!(portus.alg.reports.load(Ordering::SeqCst) > 20, "fold program reports every RTT");
    assert_eq!(portus.alg.flows.load(Ordering::SeqCst), 1);

    // the algorithm changes its mind mid-flow
    let t0 = Instant::now();
    portus.alg.target_pkts.store(40, Ordering::SeqCst);
    let ti = flow.wait_for(Duration::from_secs(5), |t| t.tcpi_snd_cwnd == 40);
    assert!(ti.is_some(), "cwnd did not follow 10 -> 40 (now {})", flow.info().tcpi_snd_cwnd);
    eprintln!("cwnd 10 -> 40 visible in TCP_INFO after {:?}", t0.elapsed());
    wait_settled(&flow, 40);
    let at40 = assert_held_at(&flow, 40, Duration::from_secs(2));
    eprintln!("median srtt at cwnd 10: {at10} us, at cwnd 40: {at40} us (expected {} / {})", queueing_rtt_us(10), queueing_rtt_us(40));
    // 4x the queue, ~4x the RTT (3.8-4.0x measured); CI once saw 2.42x (single
    // samples of 7.9 ms at cwnd 10 and 19.0 ms at cwnd 40, each inside its own
    // band above). 2x leaves room for a few ms of scheduling delay on a busy
    // machine, while a cwnd that did not reach the socket leaves the ratio near 1
    assert!(at40 > at10 * 2, "RTT should grow ~4x with 4x the queued packets");

    drop(flow);
    let st = dp.stop_with(libc::SIGINT).expect("datapath exits on SIGINT");
    assert!(st.success(), "exit status {st}");
    let log = dp.log_text();
    assert_eq!(
        (summary_count(&log, "compiled"), summary_count(&log, "interpreted")),
        programs,
        "programs compiled / left to the interpreter: {log}"
    );
    assert!(summary_count(&log, "installs") >= 1);
    let (invocations, compiled_runs) = (summary_count(&log, "invocations"), summary_count(&log, "compiled_runs"));
    assert!(invocations > 100, "the fold ran per ACK: {log}");
    if programs.0 > 0 {
        // all but the ACKs before the program was installed and compiled
        assert!(compiled_runs * 10 >= invocations * 9, "compiled main sections ran: {compiled_runs} of {invocations}");
    } else {
        assert_eq!(compiled_runs, 0, "nothing compiled ran");
    }
    assert!(!ccp_registered(), "ccp unregistered after exit");
    assert!(!dp.ready.exists(), "ready file removed on exit");
    assert!(!dp.socket.exists(), "socket file removed on exit");
    drop(net);
}

/// `n` connections A -> B with congestion control `ccp`, opened back to
/// back and held open (each sends a little, so the fold runs); closed
/// together on drop.
struct ConnectionBurst {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl ConnectionBurst {
    const PORT: u16 = 5202;

    fn open(net: &Net, n: usize) -> ConnectionBurst {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let (b, b_ip, stop_r) = (net.b.clone(), net.b_ip, stop.clone());
        let receiver = std::thread::spawn(move || {
            enter_netns(&b);
            let l = TcpListener::bind((b_ip, Self::PORT)).expect("listen in B");
            ready_tx.send(()).unwrap();
            let accepted: Vec<TcpStream> = (0..n).map(|_| l.accept().expect("accept").0).collect();
            while !stop_r.load(Ordering::SeqCst) {
                std::thread::park();
            }
            drop(accepted);
        });
        ready_rx.recv_timeout(Duration::from_secs(5)).expect("receiver ready");
        let (opened_tx, opened_rx) = mpsc::channel();
        let (a, stop_s) = (net.a.clone(), stop.clone());
        let sender = std::thread::spawn(move || {
            enter_netns(&a);
            let mut conns = vec![];
            for _ in 0..n {
                let mut s = connect_with(b_ip, Self::PORT, SocketSetup::CCP).expect("connect");
                s.write_all(&[0x5a; 4096]).expect("write");
                conns.push(s);
            }
            opened_tx.send(()).unwrap();
            while !stop_s.load(Ordering::SeqCst) {
                std::thread::park();
            }
            drop(conns); // all closed within microseconds
        });
        opened_rx.recv_timeout(Duration::from_secs(10)).expect("connections opened");
        ConnectionBurst { stop, threads: vec![receiver, sender] }
    }
}

impl Drop for ConnectionBurst {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// The words `key=value` after `section` in the datapath's last summary.
fn summary_field(log: &str, section: &str, key: &str) -> u64 {
    let line = log.lines().rev().find(|l| l.contains(section)).unwrap_or_else(|| panic!("no {section} in a summary: {log}"));
    let after = line.split(section).nth(1).unwrap();
    let v = after
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("summary has no {key}= after {section}: {line}"));
    v.parse().unwrap_or_else(|e| panic!("{key}={v}: {e}"))
}

/// Portus's socket queue holds net.unix.max_dgram_qlen (10) datagrams: a
/// burst of creates or closes beyond it, faster than the algorithm reads,
/// used to lose messages (EAGAIN): closes for good (Portus kept dead flows),
/// creates until a retry a second later. Now they wait in the datapath's
/// outbox and every one arrives.
#[test]
fn a_burst_of_creates_and_closes_reaches_a_slow_algorithm_whole() {
    const N: u32 = 40;
    let _l = lock();
    let net = Net::new(NET);
    let portus = start_portus(10);
    portus.alg.busy_ms.store(5, Ordering::SeqCst);
    let mut dp = start_datapath(&portus.path, "ccpdp-test-fixed", &[]);
    let burst = ConnectionBurst::open(&net, N as usize);
    let created = try_wait_until(Duration::from_secs(10), || (portus.alg.flows.load(Ordering::SeqCst) >= N).then_some(()));
    assert!(created.is_some(), "Portus saw {} of {N} creates: {}", portus.alg.flows.load(Ordering::SeqCst), dp.log_text());
    drop(burst);
    let closed = try_wait_until(Duration::from_secs(10), || (portus.alg.closed.load(Ordering::SeqCst) >= N).then_some(()));
    assert!(closed.is_some(), "Portus saw {} of {N} closes: {}", portus.alg.closed.load(Ordering::SeqCst), dp.log_text());
    assert_eq!(portus.alg.flows.load(Ordering::SeqCst), N, "each flow created once (no retry of a create that was deferred)");
    let st = dp.stop_with(libc::SIGINT).expect("datapath exits on SIGINT");
    assert!(st.success(), "exit status {st}");
    let log = dp.log_text();
    assert!(summary_field(&log, "outbox:", "deferred") > 0, "the burst outran the slow algorithm: {log}");
    assert_eq!(summary_field(&log, "outbox:", "dropped"), 0, "{log}");
    assert!(!log.contains("cannot send to Portus"), "{log}");
    drop(net);
}

/// A flow reporting now and then (every 200 ms) is heard at once: with no
/// look promised, its report wakes the daemon (src/wake.rs) rather than
/// waiting up to the 100 ms idle poll. The delay of each report, from its
/// ACK (Report.now) to Portus, less the smallest seen (the clocks' offset).
#[test]
fn a_sparse_report_wakes_the_datapath_at_once() {
    let _l = lock();
    let net = Net::new(NET);
    let portus = start_portus(10);
    portus.alg.sparse.store(true, Ordering::SeqCst);
    let mut dp = start_datapath(&portus.path, "ccpdp-test-fixed", &[]);
    let flow = BulkFlow::start(&net);
    let enough = try_wait_until(Duration::from_secs(15), || (portus.alg.sparse_reports.lock().unwrap().len() >= 16).then_some(()));
    assert!(enough.is_some(), "{} sparse reports in 15 s: {}", portus.alg.sparse_reports.lock().unwrap().len(), dp.log_text());
    drop(flow);
    let lags: Vec<i64> = portus.alg.sparse_reports.lock().unwrap().iter().skip(1).map(|&(at, now)| at as i64 - now as i64).collect();
    let base = *lags.iter().min().unwrap();
    let mut delays: Vec<i64> = lags.iter().map(|l| l - base).collect();
    delays.sort_unstable();
    let p50 = delays[delays.len() / 2];
    eprintln!("sparse report delays beyond the smallest, us: {delays:?}");
    assert!(p50 < 10_000, "median report delay {p50} us: reports waited for a poll instead of waking the daemon");
    let st = dp.stop_with(libc::SIGINT).expect("datapath exits on SIGINT");
    assert!(st.success(), "exit status {st}");
    drop(net);
}

#[test]
fn flow_keeps_moving_without_an_algorithm() {
    let _l = lock();
    let net = Net::new(NET);
    // nobody listens on this Portus path
    let missing = PathBuf::from(format!("/tmp/ccp/{}", uniq("ccpdp-test-nobody-")));
    let mut dp = start_datapath(&missing, "reno", &[]);
    let flow = BulkFlow::start(&net);
    assert_eq!(flow.congestion_control(), "ccp");
    let start = flow.info();
    std::thread::sleep(Duration::from_secs(3)); // measurement window
    let end = flow.info();
    let rate_bps = (end.tcpi_bytes_acked - start.tcpi_bytes_acked) * 8 / 3;
    assert!(rate_bps > LINK_BPS / 2, "fallback flow delivered only {rate_bps} bit/s");
    // the fallback (kernel cubic, slow start) grew the window beyond its initial 10 packets
    assert!(end.tcpi_snd_cwnd > 10, "no fallback growth: cwnd {}", end.tcpi_snd_cwnd);
    drop(flow);
    assert!(dp.stop().expect("exits on SIGTERM").success());
}

/// The fallback's cubic gets its RTT samples (cong_control feeds
/// cubictcp_acked, as a pkts_acked op would): HyStart ends slow start on the
/// queue's delay before the 1 MB TBF queue overflows, so ssthresh is set
/// while nothing was retransmitted. Without the samples ssthresh stays
/// infinite until the first loss.
#[test]
fn fallback_cubic_leaves_slow_start_by_hystart_before_any_loss() {
    let _l = lock();
    let net = Net::new(NET);
    let missing = PathBuf::from(format!("/tmp/ccp/{}", uniq("ccpdp-test-nobody-")));
    let mut dp = start_datapath(&missing, "reno", &[]);
    let flow = BulkFlow::start(&net);
    assert_eq!(flow.congestion_control(), "ccp");
    let ti = flow.wait_for(Duration::from_secs(10), |t| t.tcpi_snd_ssthresh < INFINITE_SSTHRESH);
    let ti = ti.unwrap_or_else(|| panic!("slow start never ended: {:?}", flow.info().tcpi_snd_ssthresh));
    assert_eq!(
        (ti.tcpi_total_retrans, ti.tcpi_lost),
        (0, 0),
        "ssthresh {} came from a loss, not from HyStart (cwnd {})",
        ti.tcpi_snd_ssthresh,
        ti.tcpi_snd_cwnd
    );
    eprintln!("HyStart set ssthresh {} at cwnd {}, srtt {} us", ti.tcpi_snd_ssthresh, ti.tcpi_snd_cwnd, ti.tcpi_rtt);
    drop(flow);
    assert!(dp.stop().expect("exits on SIGTERM").success());
}

/// How long the application stays idle in the idle-restart test.
const IDLE: Duration = Duration::from_secs(10);

/// cwnd growth of a cubic flow over an idle period: the flow reaches
/// congestion avoidance (HyStart, no loss) and grows on the cubic curve for
/// 2 s (to ~100 packets: a flow paused right after HyStart, at ~25 packets,
/// grows as fast after the restart with the epoch moved as without), its
/// application stops writing until everything is acked, the flow stays idle
/// for IDLE and the application writes again. Returns (cwnd when it went
/// idle, cwnd 1 s after the restart). Slow start after idle is off in the
/// sender's namespace, so the window survives the idle period.
fn cwnd_growth_over_idle(cc: &'static str) -> (u32, u32) {
    let net = Net::new(NET);
    sh(&["ip", "netns", "exec", &net.a, "sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle=0"]);
    let flow = BulkFlow::start_with(&net, SocketSetup { cc, ..SocketSetup::CCP });
    assert_eq!(flow.congestion_control(), cc);
    let ca = flow.wait_for(Duration::from_secs(10), |t| t.tcpi_snd_ssthresh < INFINITE_SSTHRESH);
    assert!(ca.is_some(), "{cc}: slow start never ended");
    std::thread::sleep(Duration::from_secs(2)); // growth on the cubic curve
    flow.pause();
    let drained = try_wait_until(Duration::from_secs(10), || (flow.send_queue_bytes() == 0).then_some(()));
    assert!(drained.is_some(), "{cc}: send queue never drained ({} bytes left)", flow.send_queue_bytes());
    let idle = flow.info();
    std::thread::sleep(IDLE); // the idle period itself
    assert_eq!(flow.info().tcpi_snd_cwnd, idle.tcpi_snd_cwnd, "{cc}: cwnd moved while idle");
    flow.resume();
    std::thread::sleep(Duration::from_secs(1)); // growth after the restart
    let after = flow.info();
    assert_eq!(after.tcpi_total_retrans, idle.tcpi_total_retrans, "{cc}: a loss in the measurement");
    (idle.tcpi_snd_cwnd, after.tcpi_snd_cwnd)
}

/// The fallback's cubic restarts after idle as kernel cubic does (which
/// shifts its epoch by the idle time on CA_EVENT_TX_START; the datapath has
/// no cwnd_event op and shifts it at the first ACK after the restart).
/// Without the shift the cubic curve's clock runs on through the idle 10 s,
/// and the window jumps within an RTT or two of the restart (+69 packets in
/// the first second against kernel cubic's +15); with it, it
/// grows as kernel cubic's does (+19 against +18).
#[test]
fn fallback_cubic_grows_after_idle_as_kernel_cubic_does() {
    let _l = lock();
    let missing = PathBuf::from(format!("/tmp/ccp/{}", uniq("ccpdp-test-nobody-")));
    let mut dp = start_datapath(&missing, "reno", &[]);
    let (k0, k1) = cwnd_growth_over_idle("cubic");
    let (c0, c1) = cwnd_growth_over_idle("ccp");
    let (kernel, ccp) = (k1 as i64 - k0 as i64, c1 as i64 - c0 as i64);
    eprintln!("cwnd 1 s after a {IDLE:?} idle: kernel cubic {k0} -> {k1} ({kernel:+}), ccp fallback {c0} -> {c1} ({ccp:+})");
    assert!(kernel >= 0 && ccp >= 0, "a window shrank over the restart: kernel {kernel:+}, ccp {ccp:+}");
    assert!(ccp <= kernel + 30, "fallback grew {ccp:+} packets after the idle period, kernel cubic {kernel:+}");
    assert!(dp.stop().expect("exits on SIGTERM").success());
}

#[test]
fn flow_falls_back_to_kernel_cubic_when_the_datapath_dies() {
    let _l = lock();
    let net = Net::new(NET);
    let portus = start_portus(10);
    let mut dp = start_datapath(&portus.path, "ccpdp-test-fixed", &[]);
    let flow = BulkFlow::start(&net);
    assert!(flow.wait_for(Duration::from_secs(5), |t| t.tcpi_snd_cwnd == 10).is_some(), "{}", dp.log_text());
    // SIGKILL: no cleanup; the kernel drops the struct_ops link with the process
    dp.signal(libc::SIGKILL);
    let st = dp.stop_with(libc::SIGKILL);
    assert!(st.is_some());
    assert!(!ccp_registered(), "ccp unregistered when its process died");
    // heartbeat goes stale after 500 ms: the BPF side runs kernel cubic
    let grown = flow.wait_for(Duration::from_secs(5), |t| t.tcpi_snd_cwnd > 12);
    assert!(grown.is_some(), "flow stuck at cwnd {} after the datapath died", flow.info().tcpi_snd_cwnd);
    let a = flow.info().tcpi_bytes_acked;
    std::thread::sleep(Duration::from_secs(1)); // measurement window
    assert!(flow.info().tcpi_bytes_acked - a > LINK_BPS / 8 / 2, "flow not moving after fallback");
    drop(flow);
    drop(net);
}

/// Bytes/s the flow delivers over `window` (tcpi_bytes_acked).
fn delivery_rate(flow: &BulkFlow, window: Duration) -> f64 {
    let start = flow.info().tcpi_bytes_acked;
    std::thread::sleep(window); // measurement window, not a wait
    (flow.info().tcpi_bytes_acked - start) as f64 / window.as_secs_f64()
}

/// TCP-internal pacing the socket had before `ccp` took it stays on, as the
/// kernel keeps it for reno or cubic (Linux tcp_update_pacing_rate): a user's
/// SO_MAX_PACING_RATE still caps the flow, and a socket bbr had paced is
/// paced at the kernel's rate (200 % or 120 % of cwnd/SRTT), not bbr's.
#[test]
fn pacing_the_socket_came_with_stays_on_at_the_kernel_rate() {
    let _l = lock();
    let net = Net::new(NET);
    let portus = start_portus(40); // a cwnd-only algorithm: commands no rate
    let dp = start_datapath(&portus.path, "ccpdp-test-fixed", &[]);

    // SO_MAX_PACING_RATE at a quarter of the link rate, set before connect
    let cap = (LINK_BPS / 8 / 4) as u32;
    let setup = SocketSetup { max_pacing_bytes_per_s: Some(cap), ..SocketSetup::CCP };
    let flow = BulkFlow::start_with(&net, setup);
    assert!(flow.wait_for(Duration::from_secs(5), |t| t.tcpi_snd_cwnd == 40).is_some(), "{}", dp.log_text());
    let rate = delivery_rate(&flow, Duration::from_secs(2));
    eprintln!("SO_MAX_PACING_RATE {cap} B/s: delivered {rate:.0} B/s (link {} B/s)", LINK_BPS / 8);
    assert!(
        rate < cap as f64 * 1.3 && rate > cap as f64 * 0.5,
        "SO_MAX_PACING_RATE {cap} B/s not honoured: {rate:.0} B/s delivered"
    );
    drop(flow);

    // a socket bbr initialised (bbr_init turns pacing on), then switched to ccp
    let setup = SocketSetup { cc: "bbr", cc_after_connect: Some("ccp"), ..SocketSetup::CCP };
    let flow = BulkFlow::start_with(&net, setup);
    assert_eq!(flow.congestion_control(), "ccp");
    wait_settled(&flow, 40);
    let ti = flow.info();
    // tcp_update_pacing_rate: 200 % of cwnd x MSS / SRTT while cwnd < ssthresh/2 (the
    // fixed-cwnd algorithm never lowers ssthresh from "infinite"), else 120 %
    let ratio = if ti.tcpi_snd_cwnd < ti.tcpi_snd_ssthresh / 2 { 2.0 } else { 1.2 };
    let kernel_rate = ratio * (ti.tcpi_snd_cwnd as f64 * ti.tcpi_snd_mss as f64) / (ti.tcpi_rtt as f64 / 1e6);
    let rate = ti.tcpi_pacing_rate as f64;
    eprintln!("switched from bbr: pacing rate {rate:.0} B/s, kernel's rule {kernel_rate:.0} B/s");
    assert!((rate / kernel_rate - 1.0).abs() < 0.25, "pacing rate {rate:.0} B/s, kernel's rule gives {kernel_rate:.0}");
    let log = dp.log_text();
    let created: Vec<&str> = log.lines().filter(|l| l.contains("flow created")).collect();
    assert_eq!(created.len(), 2, "two flows created: {log}");
    assert!(created[0].contains("kernel_pacing=true"), "SO_MAX_PACING_RATE turned pacing on: {}", created[0]);
    assert!(created[1].contains("kernel_pacing=true"), "bbr turned pacing on: {}", created[1]);
    drop(flow);

    // a plain ccp socket comes without pacing, and is not paced
    let flow = BulkFlow::start(&net);
    assert!(flow.wait_for(Duration::from_secs(5), |t| t.tcpi_snd_cwnd == 40).is_some(), "{}", dp.log_text());
    // the fallback's slow start can reach 40 packets before the daemon has
    // logged the create: wait for the line, do not race it
    let third = try_wait_until(Duration::from_secs(5), || {
        dp.log_text().lines().filter(|l| l.contains("flow created")).nth(2).map(str::to_owned)
    });
    assert!(third.as_deref().is_some_and(|l| l.contains("kernel_pacing=false")), "plain socket: {third:?}");
    drop(flow);
    drop(net);
}

fn run_expect_failure(args: &[&str], setpriv_nobody: bool) -> String {
    let mut cmd = if setpriv_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]);
        c
    } else {
        Command::new(BIN)
    };
    let mut child = cmd.args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn");
    if wait_for_exit(&mut child, Duration::from_secs(10)).is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{args:?} did not exit within 10 s");
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "{args:?} should fail");
    assert_eq!(out.status.code(), Some(1), "{args:?}: exit code");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn clear_errors_for_bad_environment() {
    let _l = lock();
    let err = run_expect_failure(&[], true);
    assert!(err.contains("must run as root"), "{err}");
    let err = run_expect_failure(&["--bind-dir", "/proc/ccp-not-writable"], false);
    assert!(err.contains("--bind-dir"), "{err}");
    assert!(!ccp_registered(), "a failed start leaves nothing registered");
    let err = run_expect_failure(&["--congalg", &"x".repeat(64)], false);
    assert!(err.contains("--congalg"), "{err}");
    assert!(!ccp_registered());

    // a second datapath while one is running
    let missing = PathBuf::from(format!("/tmp/ccp/{}", uniq("ccpdp-test-nobody-")));
    let mut dp = start_datapath(&missing, "reno", &[]);
    let err = run_expect_failure(&[], false);
    assert!(err.contains("already registered"), "{err}");
    assert!(ccp_registered(), "the first datapath is unaffected");
    assert!(dp.stop().expect("exits").success());
    assert!(!ccp_registered());
}

// ------------------------------------------------- never frozen

/// Over `window`: distinct cwnd values seen and bytes acked (the flow moves).
fn watch_cwnd(flow: &BulkFlow, window: Duration) -> (std::collections::BTreeSet<u32>, u64) {
    let start = flow.info();
    let end = Instant::now() + window;
    let mut seen = std::collections::BTreeSet::new();
    while Instant::now() < end {
        seen.insert(flow.info().tcpi_snd_cwnd);
        std::thread::sleep(Duration::from_millis(20)); // sampling period, not a wait
    }
    (seen, flow.info().tcpi_bytes_acked - start.tcpi_bytes_acked)
}

#[test]
fn no_phase_freezes_the_flow_algorithm_killed_restarted_then_datapath_killed() {
    no_phase_freezes_the_flow(&[]);
}

#[test]
fn no_phase_freezes_the_flow_with_the_userspace_fold() {
    no_phase_freezes_the_flow(&["--fold", "userspace"]);
}

/// Kill the algorithm, restart it, kill the datapath, in one flow.
fn no_phase_freezes_the_flow(datapath_args: &[&str]) {
    let _l = lock();
    let net = Net::new(NET);
    let name = uniq("ccpdp-test-alg-");
    let mut alg = AlgorithmProc::start(&name, &["fixed-window", "--window", "20"], "ccp-dp-test-alg");
    let mut dp = start_datapath(&alg.path, "fixed-window", datapath_args);
    let flow = BulkFlow::start(&net);
    let moving = LINK_BPS / 8 / 4; // bytes in a 1 s window at a quarter of the link

    // 1. under the algorithm: cwnd is its 20 packets
    let ti = flow.wait_for(Duration::from_secs(5), |t| t.tcpi_snd_cwnd == 20);
    assert!(ti.is_some(), "cwnd never became the algorithm's 20 (now {}): {}", flow.info().tcpi_snd_cwnd, dp.log_text());

    // 2. the algorithm is SIGKILLed: after the fallback timeout (500 ms) the
    //    kernel's cubic moves cwnd (it grows from 20, then a loss cuts it)
    alg.kill();
    let t_kill = Instant::now();
    let left = flow.wait_for(Duration::from_secs(5), |t| t.tcpi_snd_cwnd != 20);
    assert!(left.is_some(), "flow frozen at the dead algorithm's cwnd 20: {}", dp.log_text());
    eprintln!("algorithm killed: cwnd left 20 after {:?}", t_kill.elapsed());
    let (seen, acked) = watch_cwnd(&flow, Duration::from_secs(1));
    assert!(seen.len() >= 3, "cwnd not moving under the fallback: {seen:?}");
    assert!(acked > moving, "flow stalled under the fallback: {acked} bytes in 1 s");
    assert!(dp.log_text().contains("algorithm away"), "datapath did not log the algorithm's absence: {}", dp.log_text());
    assert!(
        dp.log_text().contains("the algorithm's process exited"),
        "the exit was not seen through the algorithm's pidfd: {}",
        dp.log_text()
    );

    // 3. the algorithm restarts as reno: the datapath announces the flow to
    //    it again with the cwnd the fallback left, and reno takes the flow
    //    back from there (congestion avoidance), not from 10 packets in slow
    //    start: cwnd never falls below 80% of what it was at the restart
    //    (unless the flow meets a loss: then reno halves it, as it should)
    let t_restart = Instant::now();
    let before = flow.info();
    let mut alg2 = AlgorithmProc::start(&name, &["reno"], "ccp-dp-test-alg");
    let announced = try_wait_until(Duration::from_secs(5), || dp.log_text().contains("live flows announced").then_some(()));
    assert!(announced.is_some(), "the flow was not announced to the restarted algorithm: {}", dp.log_text());
    let end = Instant::now() + Duration::from_secs(2);
    let mut lowest = u32::MAX;
    while Instant::now() < end {
        let ti = flow.info();
        if ti.tcpi_total_retrans > before.tcpi_total_retrans {
            break; // a loss: a cut is reno's answer to it
        }
        lowest = lowest.min(ti.tcpi_snd_cwnd);
        std::thread::sleep(Duration::from_millis(5)); // sampling period, not a wait
    }
    eprintln!(
        "algorithm restarted as reno: cwnd {} at the restart, lowest {} over the {:?} after (no loss)",
        before.tcpi_snd_cwnd,
        lowest,
        t_restart.elapsed()
    );
    assert!(
        u64::from(lowest) * 10 >= u64::from(before.tcpi_snd_cwnd) * 8,
        "the restarted algorithm cut cwnd from {} to {} without a loss (it must start from the fallback's cwnd): {}",
        before.tcpi_snd_cwnd,
        lowest,
        dp.log_text()
    );
    // reno answers the flow's reports (it holds cwnd while the flow does
    // not fill it, so a constant cwnd here is reno's own)
    let answering = try_wait_until(Duration::from_secs(2), || {
        alg2.log_text().contains("report sid=").then_some(())
    });
    assert!(answering.is_some(), "the restarted reno got no report: {}", dp.log_text());
    let (_, acked) = watch_cwnd(&flow, Duration::from_secs(1));
    assert!(acked > moving, "flow stalled under the restarted algorithm: {acked} bytes in 1 s");

    // 4. the datapath is SIGKILLed: the BPF side's heartbeat goes stale and
    //    the kernel's cubic runs the flow again
    dp.signal(libc::SIGKILL);
    assert!(dp.stop_with(libc::SIGKILL).is_some());
    assert!(!ccp_registered(), "ccp unregistered when its process died");
    let at_kill = flow.info().tcpi_snd_cwnd;
    let left = flow.wait_for(Duration::from_secs(5), |t| t.tcpi_snd_cwnd != at_kill);
    // the kernel's cubic grows only a window the flow fills: one left above what is in flight
    // stays put under any kernel CCA, and the flow is not held back by it
    let t = flow.info();
    assert!(
        left.is_some() || t.tcpi_unacked + 2 < t.tcpi_snd_cwnd,
        "flow frozen at cwnd {at_kill} after the datapath died ({} packets in flight)",
        t.tcpi_unacked
    );
    let (seen, acked) = watch_cwnd(&flow, Duration::from_secs(1));
    assert!(
        seen.len() >= 3 || left.is_none(),
        "cwnd not moving after the datapath died: {seen:?}"
    );
    assert!(acked > moving, "flow stalled after the datapath died: {acked} bytes in 1 s");
    alg2.kill();
    drop(flow);
    drop(net);
}

#[test]
fn a_flow_whose_create_record_was_lost_is_announced_from_the_flows_map() {
    let _l = lock();
    let net = Net::new(NET);
    // 7 packets: below the initial window, where the fallback never goes
    let portus = start_portus(7);
    let mut dp = start_datapath(&portus.path, "ccpdp-test-fixed", &["--test-drop-create-records", "1"]);
    // start the flow after the datapath's first announcement to Portus (which
    // would otherwise tell Portus about it, lost record or not)
    let announced = try_wait_until(Duration::from_secs(5), || dp.log_text().contains("no live flow to announce").then_some(()));
    assert!(announced.is_some(), "datapath never made its first announcement: {}", dp.log_text());
    let flow = BulkFlow::start(&net);
    let t0 = Instant::now();
    let dropped = try_wait_until(Duration::from_secs(5), || dp.log_text().contains("create record dropped").then_some(()));
    assert!(dropped.is_some(), "fault not injected: {}", dp.log_text());
    // without its create the flow would stay in the fallback; the resync pass
    // (every second, confirmed on the second) announces it
    let ti = flow.wait_for(Duration::from_secs(6), |t| t.tcpi_snd_cwnd == 7);
    assert!(ti.is_some(), "flow never reached the algorithm's cwnd 7 (now {}): {}", flow.info().tcpi_snd_cwnd, dp.log_text());
    eprintln!("lost create: flow under the algorithm after {:?}", t0.elapsed());
    let (seen, _) = watch_cwnd(&flow, Duration::from_secs(1));
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![7], "cwnd not held by the algorithm");
    assert!(dp.log_text().contains("create record was lost"), "resync not logged: {}", dp.log_text());
    assert_eq!(portus.alg.flows.load(Ordering::SeqCst), 1, "announced exactly once");
    drop(flow);
    assert!(dp.stop().expect("exits on SIGTERM").success());
    drop(net);
}
