//! Two flows with different CCP algorithms through one bottleneck
//! (docs/datapath.md, `--rule`): one `ccp-algorithms` daemon hosts cubic and fixed-window; one
//! `ccp-datapath` picks each flow's algorithm by destination port with its
//! `--rule` table; two iperf3 flows share one `ccplab-link` bottleneck.
//!
//! Checked from the sender's `ss -tin` every 100 ms for 6 s: the
//! fixed-window flow's cwnd is exactly the window it sets (deterministic:
//! [`FIXED_WINDOW_PKTS`] is below the BDP, so it never loses a packet), while
//! the cubic flow's cwnd differs from it and moves (it fills the shared
//! queue, loses, backs off, grows again). The daemon's log shows which
//! algorithm each flow got.
//!
//! Needs root, BPF struct_ops, network namespaces, iperf3, ss and the
//! workspace's built `ccp-algorithms` and `ccplab-link` (target/<profile>);
//! without them it fails naming what is missing (ccplab_util::testkit).
//! Registers `ccp`: run under the host lock (`flock /tmp/ccplab-netlab.lock`).
//! Everything (link and its namespaces, processes inside, datapath, daemon)
//! is torn down by Drop guards, also when an assertion fails.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use ccplab_util::testkit::{ccp_registered, lock_ccp_registration, require_root, require_tools, wait_for_tcp_listener, wait_until};

mod common;
use common::link::{in_netns, Link, LinkSpec};
use common::process::{uniq, workspace_bin, DatapathProc, Proc};

/// Port of the cubic flow (iperf3's default).
const CUBIC_PORT: u16 = 5201;
/// Port of the fixed-window flow.
const FIXED_PORT: u16 = 5202;
/// fixed-window's `--window`, packets: well below the BDP (see [`LINK`]).
const FIXED_WINDOW_PKTS: u32 = 20;
/// Bottleneck: 2 delivery opportunities of 1500 bytes per ms = 24 Mbit/s;
/// 20 ms one-way delay: RTT 40 ms, BDP = 24 Mbit/s x 40 ms = 80 packets;
/// a 100-packet droptail queue.
const LINK: LinkSpec = LinkSpec { opportunities_per_ms: 2, one_way_delay_ms: 20, queue_packets: 100 };
/// How long each iperf3 client sends, s (covers the wait for its start and the sampling).
const FLOW_S: u32 = 14;
/// Sampling window and period of `ss -tin`.
const SAMPLE_FOR: Duration = Duration::from_secs(6);
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

// ------------------------------------------------------------ ss -tin

/// One TCP socket of `ss -tin`: peer port, cwnd (packets), bytes acked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SsSocket {
    dport: u16,
    cwnd: u32,
    bytes_acked: u64,
}

/// Parse `ss -tin` (with or without the header): each socket is a line
/// `STATE RECV-Q SEND-Q LOCAL:PORT PEER:PORT` followed by an indented info
/// line with `cwnd:N` and `bytes_acked:N` (absent before the first ACK: 0).
fn parse_ss(text: &str) -> Vec<SsSocket> {
    let mut out = Vec::new();
    let mut dport: Option<u16> = None;
    for line in text.lines() {
        if line.starts_with(|c: char| c.is_whitespace()) {
            let Some(port) = dport.take() else { continue };
            let field = |key: &str| line.split_whitespace().find_map(|t| t.strip_prefix(key));
            if let Some(cwnd) = field("cwnd:").and_then(|v| v.parse().ok()) {
                let bytes_acked = field("bytes_acked:").and_then(|v| v.parse().ok()).unwrap_or(0);
                out.push(SsSocket { dport: port, cwnd, bytes_acked });
            }
        } else {
            // the peer is the second ADDRESS:PORT column (`ss ... state X`
            // leaves the State column out, so count, do not index)
            dport = line
                .split_whitespace()
                .filter_map(|c| c.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()))
                .nth(1);
        }
    }
    out
}

/// The data connection to `port`: of the sockets to it (iperf3 also has a
/// control connection), the one with the most bytes acked.
fn data_socket(sockets: &[SsSocket], port: u16) -> Option<SsSocket> {
    sockets.iter().filter(|s| s.dport == port).max_by_key(|s| s.bytes_acked).copied()
}

fn ss_sender(ns: &str, receiver_ip: &str) -> Vec<SsSocket> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-tin", "state", "established", "dst", receiver_ip])
        .output()
        .expect("running ss");
    assert!(out.status.success(), "ss failed: {}", String::from_utf8_lossy(&out.stderr));
    parse_ss(&String::from_utf8_lossy(&out.stdout))
}

#[test]
fn ss_output_is_parsed_per_socket() {
    let text = "State Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n\
        ESTAB 0 0 10.1.1.1:40000 10.2.1.1:5201\n\
        \t ccp wscale:7,7 rto:240 rtt:41.5/1.2 mss:1448 cwnd:57 ssthresh:40 bytes_acked:1234567 segs_out:900\n\
        ESTAB 0 0 10.1.1.1:40002 10.2.1.1:5202\n\
        \t ccp wscale:7,7 rto:204 rtt:40.1/0.5 mss:1448 cwnd:20 bytes_acked:99 segs_out:4\n\
        ESTAB 0 0 10.1.1.1:40004 10.2.1.1:5202\n\
        \t ccp wscale:7,7 rto:204 rtt:40.3/0.5 mss:1448 cwnd:20 bytes_acked:777777 segs_out:600\n\
        ESTAB 0 0 10.1.1.1:40006 10.2.1.1:5203\n";
    let s = parse_ss(text);
    assert_eq!(s.len(), 3, "{s:?}");
    // `ss -tin state established` prints no State column
    let stateless = "Recv-Q Send-Q Local Address:Port Peer Address:PortProcess\n\
        0 0 10.1.1.1:40000 10.2.1.1:5201\n\
        \t ccp wscale:7,7 rto:240 rtt:41.5/1.2 mss:1448 cwnd:57 bytes_acked:42 segs_out:900\n";
    assert_eq!(parse_ss(stateless), vec![SsSocket { dport: 5201, cwnd: 57, bytes_acked: 42 }]);
    assert_eq!(s[0], SsSocket { dport: 5201, cwnd: 57, bytes_acked: 1_234_567 });
    assert_eq!(data_socket(&s, 5202), Some(SsSocket { dport: 5202, cwnd: 20, bytes_acked: 777_777 }));
    assert_eq!(data_socket(&s, 5203), None, "a socket without an info line is skipped");
}

// ------------------------------------------------------------ the test

#[test]
fn two_flows_with_different_ccp_algorithms_share_one_bottleneck() {
    require_root("loading the BPF struct_ops congestion control and creating network namespaces");
    require_tools(&["ip", "ss", "iperf3"], "the emulated link, the two flows and reading their cwnd");
    let _lock = lock_ccp_registration();
    let dir = tempfile::Builder::new().prefix("ccplab-two-algs-").tempdir().expect("temp dir");

    // One daemon hosting both algorithms (reno takes any other name).
    let ipc_name = uniq("ccplab-two-algs-");
    let portus_socket = PathBuf::from(format!("/tmp/ccp/{ipc_name}"));
    let fixed = format!("fixed-window:window={FIXED_WINDOW_PKTS}");
    let mut daemon = Proc::spawn(
        "ccp-algorithms",
        Command::new(workspace_bin("ccp-algorithms"))
            .args(["reno", "--ipc-name", &ipc_name, "--also", "cubic", "--also", &fixed]),
        dir.path().join("algorithms.log"),
    );
    daemon.wait_log("hosted=reno,cubic,fixed-window", Duration::from_secs(10));

    let link = Link::start(dir.path(), LINK);
    let (sender, receiver, receiver_ip) =
        (&link.ready.sender_netns, &link.ready.receiver_netns, link.ready.receiver_ip.as_str());

    // The datapath: flows to FIXED_PORT ask for fixed-window, to CUBIC_PORT for cubic.
    let fixed_rule = format!("dport={FIXED_PORT}:fixed-window");
    let cubic_rule = format!("dport={CUBIC_PORT}:cubic");
    let datapath = DatapathProc::start_in(
        dir.path(),
        "ready",
        &[
            "--portus-socket",
            portus_socket.to_str().expect("a UTF-8 path"),
            "--congalg",
            "reno",
            "-v",
            "--rule",
            &fixed_rule,
            "--rule",
            &cubic_rule,
        ],
        Duration::from_secs(20),
    );
    assert!(ccp_registered(), "ccp registered once the datapath is ready");

    // Two iperf3 servers behind the link, two ccp clients through it.
    let mut servers = Vec::new();
    for port in [CUBIC_PORT, FIXED_PORT] {
        let p = port.to_string();
        servers.push(in_netns("iperf3 -s", receiver, &["iperf3", "-s", "-p", &p], dir.path().join(format!("srv{p}.log"))));
        wait_for_tcp_listener(Some(receiver), port, Duration::from_secs(10));
    }
    let t = FLOW_S.to_string();
    let mut clients = Vec::new();
    for port in [CUBIC_PORT, FIXED_PORT] {
        let p = port.to_string();
        let args = ["iperf3", "-c", receiver_ip, "-p", &p, "-C", "ccp", "-t", &t];
        clients.push(in_netns("iperf3 -c", sender, &args, dir.path().join(format!("cli{p}.log"))));
    }

    // Both data connections carry data and the fixed-window flow holds its window.
    wait_until("both iperf3 data connections acked data, the fixed-window one at its window", Duration::from_secs(10), || {
        clients.iter_mut().for_each(Proc::assert_running);
        let s = ss_sender(sender, receiver_ip);
        let (c, f) = (data_socket(&s, CUBIC_PORT)?, data_socket(&s, FIXED_PORT)?);
        (c.bytes_acked > 0 && f.bytes_acked > 0 && f.cwnd == FIXED_WINDOW_PKTS).then_some(())
    });

    // Sample both flows' cwnd.
    let mut fixed_cwnds: BTreeMap<u32, usize> = BTreeMap::new();
    let mut cubic_cwnds: Vec<u32> = Vec::new();
    let (mut fixed_acked, mut cubic_acked) = ((u64::MAX, 0), (u64::MAX, 0));
    let end = Instant::now() + SAMPLE_FOR;
    while Instant::now() < end {
        let s = ss_sender(sender, receiver_ip);
        let c = data_socket(&s, CUBIC_PORT).expect("the cubic flow is established");
        let f = data_socket(&s, FIXED_PORT).expect("the fixed-window flow is established");
        *fixed_cwnds.entry(f.cwnd).or_default() += 1;
        cubic_cwnds.push(c.cwnd);
        fixed_acked = (fixed_acked.0.min(f.bytes_acked), f.bytes_acked);
        cubic_acked = (cubic_acked.0.min(c.bytes_acked), c.bytes_acked);
        std::thread::sleep(SAMPLE_EVERY); // sampling period, not synchronisation
    }
    let distinct: std::collections::BTreeSet<u32> = cubic_cwnds.iter().copied().collect();
    eprintln!(
        "fixed-window cwnd samples {fixed_cwnds:?}; cubic cwnd min {} max {} ({} distinct of {}); \
         acked during sampling: fixed {} B, cubic {} B",
        distinct.first().unwrap(),
        distinct.last().unwrap(),
        distinct.len(),
        cubic_cwnds.len(),
        fixed_acked.1 - fixed_acked.0,
        cubic_acked.1 - cubic_acked.0
    );

    // The fixed-window flow: exactly its window in every sample, and moving data.
    assert_eq!(
        fixed_cwnds.keys().copied().collect::<Vec<_>>(),
        [FIXED_WINDOW_PKTS],
        "the fixed-window flow left its window: {fixed_cwnds:?}\ndatapath log:\n{}",
        datapath.log_text()
    );
    assert!(fixed_acked.1 > fixed_acked.0, "the fixed-window flow delivered nothing while sampled");
    // The cubic flow: not fixed-window's window, and moving.
    let at_fixed = cubic_cwnds.iter().filter(|&&c| c == FIXED_WINDOW_PKTS).count();
    assert!(at_fixed * 10 < cubic_cwnds.len(), "the cubic flow sat at the fixed window in {at_fixed} of {} samples", cubic_cwnds.len());
    assert!(distinct.len() >= 5, "the cubic flow's cwnd barely moved: {distinct:?}");
    assert!(cubic_acked.1 > cubic_acked.0, "the cubic flow delivered nothing while sampled");

    // The daemon gave each flow the algorithm its port asks for.
    let log = daemon.log_text();
    assert!(log.contains(" alg=cubic mss="), "no flow ran cubic:\n{log}");
    assert!(log.contains(" alg=fixed-window mss="), "no flow ran fixed-window:\n{log}");
    assert!(!log.contains("not hosted"), "a flow asked for an algorithm the daemon does not host:\n{log}");

    // Orderly teardown: clients, servers, datapath (unregisters ccp), link, daemon.
    drop(clients);
    drop(servers);
    drop(datapath);
    assert!(!ccp_registered(), "ccp unregistered after the datapath stopped");
    drop(link);
    drop(daemon);
    let _ = std::fs::remove_file(&portus_socket);
}
