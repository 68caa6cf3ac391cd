//! The real binaries: `--dump-program`, `--describe-json`, the registry, and a
//! running `ccp-cubic` daemon driven over its unix socket by an in-process
//! libccp datapath (readiness, algorithm matching by name, log lines, socket
//! in use, clean stop on SIGTERM). Bounded in time; the daemon is killed and
//! the socket files removed also when an assertion fails.
//!
//! This binary links libccp (its `log` symbol shadows libm's): no f64::ln here.

mod common;
use common::Conn;
use ccp_algorithms::{cubic, reno, suite};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const CUBIC: &str = env!("CARGO_BIN_EXE_ccp-cubic");
const ALL: &str = env!("CARGO_BIN_EXE_ccp-algorithms");
const RENO: &str = env!("CARGO_BIN_EXE_ccp-reno");
const MSS: u32 = 1460;

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin).args(args).output().expect("binary runs")
}

#[test]
fn dump_program_prints_the_installed_fold() {
    for (bin, prog) in [(CUBIC, cubic::PROGRAM), (RENO, reno::PROGRAM)] {
        let out = run(bin, &["--dump-program"]);
        assert!(out.status.success());
        assert_eq!(String::from_utf8(out.stdout).unwrap(), prog.text());
    }
    // Every algorithm of the suite through the multiplexer.
    for e in suite::SUITE {
        let out = run(ALL, &[e.name, "--dump-program"]);
        assert!(out.status.success(), "{}", e.name);
        assert_eq!(String::from_utf8(out.stdout).unwrap(), (e.program)());
    }
}

#[test]
fn describe_json_lists_flags_with_defaults() {
    let out = run(CUBIC, &["--describe-json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["name"], "cubic");
    assert!(v["source"].as_str().unwrap().starts_with("RFC 9438"));
    let flags = v["flags"].as_array().unwrap();
    let default_of = |f: &str| {
        flags.iter().find(|x| x["flag"] == f).unwrap_or_else(|| panic!("{f} listed"))["default"].clone()
    };
    assert_eq!(default_of("--beta"), "0.7");
    assert_eq!(default_of("--c"), "0.4");
    assert_eq!(default_of("--ipc"), "unix");
    assert_eq!(default_of("--min-cwnd-pkts"), "1");
    assert!(flags.iter().all(|f| f["flag"] != "--dump-program" && f["flag"] != "--help"));
    // Reno has only the shared flags.
    let v: serde_json::Value = serde_json::from_slice(&run(RENO, &["--describe-json"]).stdout).unwrap();
    assert!(v["flags"].as_array().unwrap().iter().all(|f| f["flag"] != "--beta"));
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let out = run(CUBIC, &["--beta", "1.2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--beta"));
    let out = run(RENO, &["--max-cwnd-pkts", "0.5", "--min-cwnd-pkts", "2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-cwnd-pkts"));
}

#[test]
fn list_json_describes_the_whole_suite() {
    let out = run(ALL, &["--list-json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed: Vec<&str> = v.as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(listed, suite::names());
    for d in v.as_array().unwrap() {
        assert_eq!(d["command"][0], "ccp-algorithms");
        assert!(d["summary"].as_str().is_some_and(|s| !s.is_empty()));
        // The listing equals the algorithm's own --describe-json.
        let own = run(ALL, &[d["name"].as_str().unwrap(), "--describe-json"]);
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&own.stdout).unwrap(), *d);
    }
    let bbr = v.as_array().unwrap().iter().find(|d| d["name"] == "bbr").unwrap();
    assert_eq!(bbr["controls"], "cwnd+rate");
    let out = run(ALL, &["nosuch"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown algorithm \"nosuch\""));
}

/// Seconds since midnight (UTC) of the first log line containing `needle`, read from its
/// RFC 3339 timestamp (`2026-11-29T05:29:04.213232Z  INFO ccp: ...`); None without such a line.
fn log_time_s(log: &str, needle: &str) -> Option<f64> {
    let line = log.lines().find(|l| l.contains(needle))?;
    let clock = line.split_whitespace().next()?.split('T').nth(1)?.trim_end_matches('Z');
    let mut parts = clock.split(':').map(|p| p.parse::<f64>().ok());
    Some(parts.next()?? * 3600.0 + parts.next()?? * 60.0 + parts.next()??)
}

#[test]
fn log_time_reads_the_timestamp_of_the_first_matching_line() {
    let log = "2026-11-29T05:29:04.213232Z  INFO ccp: signal 15: stopping\n\
               2026-11-29T05:29:04.413365Z  INFO ccp: stopped alg=cubic\n";
    let (a, b) = (log_time_s(log, "stopping").unwrap(), log_time_s(log, "stopped").unwrap());
    assert!((a - (5.0 * 3600.0 + 29.0 * 60.0 + 4.213232)).abs() < 1e-9 && (b - a - 0.200133).abs() < 1e-9);
    assert_eq!(log_time_s(log, "absent"), None);
}

/// Kills the daemon and removes the socket files when dropped (also on panic).
struct Daemon {
    child: Option<Child>,
    files: Vec<PathBuf>,
    log: PathBuf,
}

impl Daemon {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.log_text().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

fn wait_for(path: &Path, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

struct UnixOut {
    sock: UnixDatagram,
    to: PathBuf,
}

impl libccp::DatapathOps for UnixOut {
    fn send_msg(&mut self, msg: &[u8]) {
        let _ = self.sock.send_to(msg, &self.to);
    }
}


/// Receive one datagram from Portus (at most 5 s) and hand it to libccp.
/// The socket id a daemon message is for (header: u16 type, u16 length, u32 sid).
fn sid_of(msg: &[u8]) -> u32 {
    u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]])
}

fn deliver(dp: &libccp::Datapath, sock: &UnixDatagram) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let n = sock.recv(&mut buf).expect("a message from the daemon within 5 s");
    buf.truncate(n);
    let mut m = buf.clone();
    dp.recv_msg(&mut m[..]).expect("libccp accepts the daemon's message");
    buf
}

#[test]
fn cubic_daemon_over_unix_socket() {
    let pid = std::process::id();
    let name = format!("ccplab-test-{pid}");
    let portus_path = PathBuf::from(format!("/tmp/ccp/{name}"));
    let dp_path = PathBuf::from(format!("/tmp/ccp/{name}-dp"));
    let log = std::env::temp_dir().join(format!("{name}.log"));
    let stderr = std::fs::File::create(&log).unwrap();
    let child = Command::new(CUBIC)
        .args(["--ipc", "unix", "--ipc-name", &name, "--init-cwnd-pkts", "12"])
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("daemon starts");
    let mut daemon = Daemon {
        child: Some(child),
        files: vec![portus_path.clone(), dp_path.clone(), log.clone()],
        log,
    };
    assert!(wait_for(&portus_path, Duration::from_secs(10)), "socket {portus_path:?} appears");
    assert!(daemon.wait_log("ready alg=cubic ipc=unix socket=", Duration::from_secs(5)));

    // A second daemon on the same name refuses to steal the socket.
    let second = Command::new(CUBIC).args(["--ipc-name", &name]).output().unwrap();
    assert_eq!(second.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&second.stderr).contains("in use"), "{second:?}");
    assert!(portus_path.exists());

    // A libccp datapath on its own bound path (Portus answers the sender's address).
    let _ = std::fs::remove_file(&dp_path);
    let sock = UnixDatagram::bind(&dp_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let out = UnixOut { sock: sock.try_clone().unwrap(), to: portus_path.clone() };
    let dp = Box::new(libccp::DatapathBuilder::default().with_ops(out).init().unwrap());
    deliver(&dp, &sock); // install
    let info = libccp::FlowInfo::default().with_mss(MSS).with_init_cwnd(10 * MSS);
    let info = info.with_cong_alg("cubic").unwrap();
    let mut conn = libccp::Connection::start(&dp, Conn { cwnd: 10 * MSS }, info).unwrap();
    // libccp numbers connections across the whole test process (tests run in
    // parallel): the flow's sid is the one the daemon's first answer names.
    let sid = sid_of(&deliver(&dp, &sock)); // changeprog
    deliver(&dp, &sock); // update_field Cwnd
    assert!(daemon.wait_log(&format!("flow sid={sid} alg=cubic mss=1460"), Duration::from_secs(5)));

    let ack = |conn: &mut libccp::Connection<'_, Conn>, lost: u32| {
        let cwnd = conn.cwnd;
        conn.load_primitives(
            libccp::Primitives::default()
                .with_bytes_acked(MSS)
                .with_lost_pkts_sample(lost)
                .with_rtt_sample_us(5_000)
                .with_packets_in_flight(cwnd / MSS)
                .with_snd_cwnd(cwnd),
        );
        conn.invoke().unwrap();
    };
    ack(&mut conn, 0);
    assert_eq!(conn.cwnd, 12 * MSS, "--init-cwnd-pkts 12 applied");
    // A loss: the urgent report comes back as the PRR window (cubic's ssthresh
    // 0.7 x 12 = 8.4 packets; RecoverFS 12 in flight + 3 lost; the report's 2
    // acked packets came before the loss ACK, so nothing delivered in recovery):
    // 15 - 3 = 12 packets, plus the 1-byte takeover mark (slow start ran in the
    // fold until this loss).
    ack(&mut conn, 3);
    let reply = deliver(&dp, &sock);
    // Header: u16 type (3 = update_field; portus's parser does not implement it), u16 len, u32 sid.
    assert_eq!(u16::from_le_bytes([reply[0], reply[1]]), 3, "an update_field message");
    assert_eq!(sid_of(&reply), sid, "for the flow's sid");
    ack(&mut conn, 0);
    let prr = 15.0 - 3.0;
    let commanded = (prr * f64::from(MSS)).round() as u32 + ccp_algorithms::cc::TAKEOVER_MARK_BYTES;
    // The fold's PRR block (fold::Features::prr) sets the same window at that
    // next ACK, in whole packets: nothing was delivered since the loss report.
    assert_eq!(conn.cwnd, 12 * MSS);
    let line = format!("-> cwnd={commanded} bytes");
    assert!(daemon.wait_log(&line, Duration::from_secs(5)), "log:\n{}", daemon.log_text());
    let report = format!("report sid={sid} acked=2920 sacked=0 loss=3 timeout=false rtt_us=5000");
    assert!(daemon.log_text().contains(&report), "log:\n{}", daemon.log_text());

    // SIGTERM: clean exit 0 at once (the signal wakes the receive; not at Portus's 1 s receive
    // timeout), socket removed.
    let child = daemon.child.as_mut().unwrap();
    // SAFETY: kill(2) on our own child's pid, which it still is (not yet waited for).
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "daemon did not stop within 5 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    daemon.child = None;
    assert!(status.success(), "exit status {status:?}\n{}", daemon.log_text());
    // From the signal thread's "stopping" to the main loop's "stopped", by the daemon's own clock:
    // the wake-up's work, whatever a loaded machine adds before the signal thread runs. 100 ms is
    // the goal; a daemon that waits out its 1 s receive timeout fails four times in five.
    let log = daemon.log_text();
    let took = log_time_s(&log, "signal 15: stopping").zip(log_time_s(&log, "stopped alg=cubic"));
    let (signalled, stopped) = took.unwrap_or_else(|| panic!("no stopping/stopped lines:\n{log}"));
    let gap = (stopped - signalled).rem_euclid(86_400.0); // a run across midnight
    assert!(gap < 0.2, "stopped {gap:.3} s after the signal thread ran\n{log}");
    assert!(!portus_path.exists(), "socket file removed on exit");
    assert!(daemon.log_text().contains("stopped alg=cubic"));
    drop(conn);
    drop(dp);
}

/// One daemon hosting three algorithms (`ccp-algorithms reno --also cubic
/// --also fixed-window:window=7`): each flow gets the algorithm its create
/// message names, with that algorithm's own flags; an unhosted name gets the
/// first (reno).
#[test]
fn one_daemon_hosts_several_algorithms_by_name() {
    let pid = std::process::id();
    let name = format!("ccplab-test-multi-{pid}");
    let portus_path = PathBuf::from(format!("/tmp/ccp/{name}"));
    let dp_path = PathBuf::from(format!("/tmp/ccp/{name}-dp"));
    let log = std::env::temp_dir().join(format!("{name}.log"));
    let stderr = std::fs::File::create(&log).unwrap();
    let child = Command::new(ALL)
        .args(["reno", "--ipc-name", &name, "--init-cwnd-pkts", "11"])
        .args(["--also", "cubic:init-cwnd-pkts=13", "--also", "fixed-window:window=7"])
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("daemon starts");
    let daemon = Daemon { child: Some(child), files: vec![portus_path.clone(), dp_path.clone(), log.clone()], log };
    assert!(wait_for(&portus_path, Duration::from_secs(10)), "socket {portus_path:?} appears");
    assert!(
        daemon.wait_log("ready alg=reno ipc=unix socket=", Duration::from_secs(5)),
        "log:\n{}",
        daemon.log_text()
    );
    assert!(daemon.log_text().contains("hosted=reno,cubic,fixed-window"), "{}", daemon.log_text());

    let _ = std::fs::remove_file(&dp_path);
    let sock = UnixDatagram::bind(&dp_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let out = UnixOut { sock: sock.try_clone().unwrap(), to: portus_path.clone() };
    let dp = Box::new(libccp::DatapathBuilder::default().with_ops(out).init().unwrap());
    // One install message per hosted fold program.
    for _ in 0..3 {
        let m = deliver(&dp, &sock);
        assert_eq!(u16::from_le_bytes([m[0], m[1]]), 2, "an install message (type 2)");
    }

    // (congAlg asked for, algorithm expected, cwnd in packets it sets first)
    let cases = [("cubic", "cubic", 13), ("fixed-window", "fixed-window", 7), ("vegas", "reno", 11), ("reno", "reno", 11)];
    let mut conns = Vec::new();
    let mut sids = Vec::new();
    for (asked, alg, pkts) in cases {
        let info = libccp::FlowInfo::default().with_mss(MSS).with_init_cwnd(10 * MSS).with_cong_alg(asked).unwrap();
        let mut conn = libccp::Connection::start(&dp, Conn { cwnd: 10 * MSS }, info).unwrap();
        let sid = sid_of(&deliver(&dp, &sock)); // changeprog (libccp's sids are process-wide)
        sids.push(sid);
        deliver(&dp, &sock); // update_field Cwnd
        let line = format!("flow sid={sid} alg={alg} mss=1460");
        assert!(daemon.wait_log(&line, Duration::from_secs(5)), "{line:?} missing; log:\n{}", daemon.log_text());
        conn.load_primitives(
            libccp::Primitives::default()
                .with_bytes_acked(MSS)
                .with_rtt_sample_us(5_000)
                .with_packets_in_flight(10)
                .with_snd_cwnd(conn.cwnd),
        );
        conn.invoke().unwrap();
        assert_eq!(conn.cwnd, pkts * MSS, "flow asking for {asked} runs {alg} with its own initial window");
        conns.push(conn);
    }
    let log = daemon.log_text();
    assert!(log.contains(&format!("flow sid={} asked for \"vegas\", not hosted: default reno", sids[2])), "{log}");
    for sid in [sids[0], sids[1], sids[3]] {
        assert!(!log.contains(&format!("sid={sid} asked for")), "a hosted name is not reported as unhosted:\n{log}");
    }
    drop(conns);
    drop(dp);
    drop(daemon);
}
