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
//! under 2 ms. The same run with `--report-prompt-us 20000` (the report
//! window: the behaviour before prompt reports) is printed beside it.
//!
//! Needs root, BPF struct_ops, network namespaces, iperf3 and the
//! workspace's built `ccplab-link`; fails naming what is missing otherwise.
//! Registers `ccp`: run under the host lock (`flock /tmp/ccplab-netlab.lock`).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ccplab_util::testkit::{
    ccp_registered, lock_ccp_registration, require_path, require_root, require_tools, try_wait_until,
    wait_for_exit, wait_for_tcp_listener, wait_until,
};
use portus::ipc::{BackendBuilder, Blocking, Ipc};
use portus::lang::Scope;
use portus::{CCPHandle, CongAlg, Datapath, DatapathInfo, DatapathTrait, Flow, Report, RunBuilder};

const DATAPATH: &str = env!("CARGO_BIN_EXE_ccp-datapath");
/// Bottleneck: 2 delivery opportunities of 1500 bytes per ms = 24 Mbit/s.
const LINK_OPPORTUNITIES_PER_MS: usize = 2;
/// One-way delay, ms: a 50 ms path.
const ONE_WAY_DELAY_MS: u32 = 25;
const QUEUE_PKTS: u32 = 100;
/// The algorithm's cwnd, packets: below the BDP (100 packets).
const CWND_PKTS: u32 = 40;
const FLOW_S: u32 = 6;

/// A name no other run uses now (pid and clock).
fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{tag}-{}-{nanos}", std::process::id())
}

/// A child process with a log file; SIGTERM then SIGKILL on drop.
struct Proc {
    name: &'static str,
    child: Option<Child>,
    log: PathBuf,
}

impl Proc {
    fn spawn(name: &'static str, cmd: &mut Command, log: PathBuf) -> Proc {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
        Proc { name, child: Some(child), log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn assert_running(&mut self) {
        if let Some(st) = self.child.as_mut().and_then(|c| c.try_wait().expect("try_wait")) {
            panic!("{} exited early ({st}):\n{}", self.name, self.log_text());
        }
    }

    /// SIGTERM and wait (SIGKILL after 5 s).
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            if wait_for_exit(&mut c, Duration::from_secs(5)).is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!("{} log kept at {}", self.name, self.log.display());
        }
    }
}

/// Directory of the workspace's built binaries (target/<profile>).
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent().and_then(|d| d.parent()).expect("target/<profile>/deps/<test>").to_path_buf()
}

fn workspace_bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    require_path(&p, &format!("the workspace binary {name} (`cargo build --release --workspace` or `make build`)"));
    p
}

#[derive(serde::Deserialize)]
struct LinkReady {
    sender_netns: String,
    receiver_netns: String,
    emulator_netns: String,
    receiver_ip: String,
}

/// `ccplab-link` with a constant-rate trace; it stops the processes inside
/// its namespaces and deletes them when it stops (SIGTERM on drop).
struct Link {
    proc: Proc,
    ready: LinkReady,
}

impl Link {
    fn start(dir: &Path) -> Link {
        let trace = dir.join("constant.up");
        std::fs::write(&trace, "1\n".repeat(LINK_OPPORTUNITIES_PER_MS)).unwrap();
        let ready_file = dir.join("link-ready.json");
        let mut cmd = Command::new(workspace_bin("ccplab-link"));
        cmd.arg("--uplink-trace")
            .arg(&trace)
            .arg("--uplink-log")
            .arg(dir.join("uplink.log"))
            .arg("--ready-file")
            .arg(&ready_file)
            .args(["--one-way-delay-ms", &ONE_WAY_DELAY_MS.to_string()])
            .args(["--queue-packets", &QUEUE_PKTS.to_string()])
            .args(["--duration-s", "120"]);
        let mut proc = Proc::spawn("ccplab-link", &mut cmd, dir.join("link.log"));
        // The ready file is written atomically once the link is up.
        let ready = wait_until("ccplab-link's ready file", Duration::from_secs(20), || {
            proc.assert_running();
            let text = std::fs::read_to_string(&ready_file).ok()?;
            Some(serde_json::from_str::<LinkReady>(&text).expect("ready file JSON"))
        });
        Link { proc, ready }
    }
}

impl Drop for Link {
    /// SIGTERM and wait for its own cleanup (longer than [`Proc`]'s 5 s),
    /// then delete any namespace a killed link left behind.
    fn drop(&mut self) {
        if let Some(mut c) = self.proc.child.take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            // It stops the processes inside (SIGTERM, SIGKILL after 1 s) and deletes its namespaces.
            if wait_for_exit(&mut c, Duration::from_secs(15)).is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for ns in [&self.ready.sender_netns, &self.ready.emulator_netns, &self.ready.receiver_netns] {
            if Path::new("/var/run/netns").join(ns).exists() {
                let _ = Command::new("ip").args(["netns", "del", ns]).status();
            }
        }
    }
}

/// `ip netns exec NS ARGS...` as a background process (killed on drop;
/// `ip netns exec` execs the command, so the kill reaches it).
fn in_netns(name: &'static str, ns: &str, args: &[&str], log: PathBuf) -> Proc {
    Proc::spawn(name, Command::new("ip").args(["netns", "exec", ns]).args(args), log)
}


// ------------------------------------------------------------ the algorithm

/// Reports on every ACK.
const PER_ACK_PROGRAM: &str = "
(def (Report (volatile acked 0)))
(when true
    (:= Report.acked (+ Report.acked Ack.bytes_acked))
    (report))
";

/// Answers every report with a cwnd of [`CWND_PKTS`].
#[derive(Clone, Default)]
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

/// In-process Portus on /tmp/ccp/<name>; stopped and unlinked on drop.
struct Portus {
    handle: Option<CCPHandle>,
    path: PathBuf,
}

impl Portus {
    fn start() -> Portus {
        let name = unique("ccpdp-prompt-portus");
        let sock = portus::ipc::unix::Socket::<Blocking>::new(&name).expect("bind Portus socket");
        let handle = RunBuilder::new(BackendBuilder { sock }).default_alg(PerAck).spawn_thread().run().expect("spawn Portus");
        Portus { handle: Some(handle), path: PathBuf::from(format!("/tmp/ccp/{name}")) }
    }
}

impl Drop for Portus {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.kill();
            let _ = h.wait();
        }
        let _ = std::fs::remove_file(&self.path);
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
        line[at..].split(|c: char| c == ' ' || c == ')').next().unwrap()
    };
    // "-": no sample (no report answered)
    let us = |key: &str| field(key).parse::<f64>().unwrap_or(f64::NAN);
    (us("p50="), us("p99="), field("(n=").parse().unwrap_or(0))
}

/// One flow through the link with `extra` datapath flags: its report-to-cwnd.
fn one_run(dir: &Path, link: &Link, portus: &Portus, tag: &str, extra: &[&str]) -> (f64, f64, u64) {
    let (sender, receiver, receiver_ip) = (&link.ready.sender_netns, &link.ready.receiver_netns, link.ready.receiver_ip.as_str());
    let ready = dir.join(format!("datapath-{tag}.json"));
    let mut dp = Proc::spawn(
        "ccp-datapath",
        Command::new(DATAPATH)
            .arg("--portus-socket")
            .arg(&portus.path)
            .args(["--congalg", "ccpdp-test-per-ack"])
            .args(extra)
            .arg("--ready-file")
            .arg(&ready),
        dir.join(format!("datapath-{tag}.log")),
    );
    wait_until("ccp-datapath's ready file", Duration::from_secs(20), || {
        dp.assert_running();
        ready.exists().then_some(())
    });
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
    let link = Link::start(dir.path());
    let portus = Portus::start();
    let window = one_run(dir.path(), &link, &portus, "window", &["--report-prompt-us", "20000"]);
    let prompt = one_run(dir.path(), &link, &portus, "prompt", &[]);
    println!(
        "per-ACK reporter, 50 ms path, {FLOW_S} s: report->cwnd us p50/p99 (n): prompt {:.0}/{:.0} ({}), report window only {:.0}/{:.0} ({})",
        prompt.0, prompt.1, prompt.2, window.0, window.1, window.2
    );
    assert!(prompt.2 > 100, "too few answered reports to judge: {} (window-only run: {})", prompt.2, window.2);
    assert!(prompt.1 < 2000.0, "report->cwnd p99 {:.0} us with prompt reports (window only: {:.0})", prompt.1, window.1);
}
