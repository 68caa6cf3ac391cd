//! The control guard and the program table's guard (docs/datapath.md,
//! "Never frozen"), under a fuzzer of structurally valid Portus messages
//! during a real flow (needs root, BPF struct_ops, netns, `ip`/`tc`; fails
//! naming what is missing otherwise).
//!
//! A `ccp-algorithms reno` daemon runs one bulk flow through a 20 Mbit/s TBF
//! (small queue, so RTTs stay short and the guard's bound is its floor). A
//! second root process sends the datapath messages Portus's own compiler and
//! serializer made: installs of random fold programs (some abort on every
//! invocation, some set Cwnd or Rate, uids 1..40, so uid 1 asks to clear the
//! table), cwnd/rate/control-register updates and program changes, all for
//! the live flow's id, in bursts with quiet spells between them. Then it
//! changes the flow to a program that aborts on every ACK and says nothing
//! for two seconds: the guard must take the flow, and a cwnd update must get
//! it back.
//!
//! Requirements: the sender's cwnd and commanded pacing rate (TCP_INFO,
//! sampled every 5 ms; a rate counts as commanded where it is not the one
//! the datapath computes for a cwnd-only CCA) never both stay constant
//! longer than the guard's bound, max(16 x SRTT, 250 ms),
//! plus the 250 ms a takeover and the fallback's first growth may take,
//! plus the longest wait for an ACK in the stretch (the guard acts on ACKs;
//! a fuzzed pacing rate is floored at one MSS per 125 ms, ccp.bpf.c
//! `pacing_floor`, so data in flight is ACKed at least that often), plus
//! the sampler's own lateness, unless the kernel's cubic ran the flow in
//! the stretch (the guard took it before the stretch began, or within the
//! bound, by its log lines' times), or the fuzzer
//! itself kept addressing the flow (no quiet part of the stretch longer
//! than the bound: its messages are commands, as the algorithm's): what cubic and
//! the kernel's loss recovery do next is a kernel flow's behaviour (in
//! recovery the fallback holds cwnd at ssthresh until the lost packets are
//! repaired, which at a window of one packet takes many RTTs); stretches in
//! TCP_CA_Loss (an RTO, paced by the kernel's timer) do not count. The
//! datapath and the algorithm survive (the datapath exits 0 on SIGTERM);
//! its summary shows the installs refused or replaced and the guard's
//! fallbacks. Prints messages sent / accepted / refused, the longest
//! constant-cwnd stretch, the stretches past the bound and the fallback
//! events.
//!
//! Messages: `CCPLAB_GUARD_FUZZ_MESSAGES` (default 20,000; `make bench` runs
//! 1,000,000), seed `CCPLAB_GUARD_FUZZ_SEED`.

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use ccplab_util::testkit::{lock_ccp_registration, require_root, require_tools, try_wait_until, CcpRegistrationLock};
use portus::lang::{Bin, Reg, Scope};
use portus::serialize::{changeprog, install, serialize, update_field};

mod common;
use common::net::{BulkFlow, Net, NetSpec};
use common::process::{uniq, AlgorithmProc, DatapathProc};
use common::{env_u64, Rng};

const LINK_BPS: u64 = 20_000_000;
/// Namespaces ccpgA/ccpgB (10.202.0.1 -> 10.202.0.2), TBF at LINK_BPS with a
/// small (64 KB) queue, so RTTs stay short and the guard's bound is its floor.
const NET: NetSpec = NetSpec { ns_prefix: "ccpg", veth_prefix: "cg", subnet: 202, rate_bps: LINK_BPS, queue_limit: "64kb" };
/// The datapath's default guard floor (--control-timeout-ms).
const GUARD_FLOOR: Duration = Duration::from_millis(250);
/// CTL_GUARD_RTTS in bpf/ccp.bpf.c.
const GUARD_RTTS: u32 = 16;
/// What a takeover may add to the bound: the guard acts on the first ACK
/// past it, and cubic's first increment after taking over comes a few RTTs
/// later (it starts a fresh epoch at the cwnd it found).
const TAKEOVER_SLACK: Duration = Duration::from_millis(250);
const TCP_CA_LOSS: u8 = 4;

/// Messages the fuzzer sends: `CCPLAB_GUARD_FUZZ_MESSAGES`, 20,000 by default.
fn messages() -> u64 {
    env_u64("CCPLAB_GUARD_FUZZ_MESSAGES", 20_000)
}

/// The fuzzer's seed: `CCPLAB_GUARD_FUZZ_SEED`, fixed by default so a failure reproduces.
fn seed() -> u64 {
    env_u64("CCPLAB_GUARD_FUZZ_SEED", 0x9a2d_c0de)
}

/// `KEY=N` from the datapath's exit summary.
fn summary_count(log: &str, key: &str) -> u64 {
    let line = log.lines().rev().find(|l| l.contains("kernel fold: invocations=")).unwrap_or_else(|| panic!("no exit summary in the datapath log:\n{log}"));
    let at = line.find(&format!(" {key}=")).unwrap_or_else(|| panic!("{key}= not in the summary: {line}"));
    line[at + key.len() + 2..].chars().take_while(|c| c.is_ascii_digit()).collect::<String>().parse().unwrap()
}

// ------------------------------------------------------------ the fuzzer

/// A fold program Portus compiled, with its scope (register names).
struct Program {
    bin: Bin,
    scope: Scope,
}

fn compile(src: &str) -> Program {
    let (bin, scope) = portus::lang::compile(src.as_bytes(), &[]).unwrap_or_else(|e| panic!("Portus compiles {src}: {e:?}"));
    Program { bin, scope }
}

/// A random, valid fold program: operands from the primitives, the flow's
/// registers and constants; `-` and `/` abort whenever they underflow or
/// divide by zero; half of them set Cwnd, some Rate; a report every
/// 1-50 ms.
fn random_program(r: &mut Rng) -> String {
    const ATOMS: [&str; 12] = [
        "Ack.bytes_acked",
        "Ack.packets_acked",
        "Ack.lost_pkts_sample",
        "Flow.rtt_sample_us",
        "Flow.packets_in_flight",
        "Cwnd",
        "Report.a",
        "c0",
        "0",
        "1",
        "1448",
        "30000",
    ];
    const OPS: [&str; 6] = ["+", "-", "*", "/", "max", "min"];
    let expr = |r: &mut Rng| -> String {
        let leaf = |r: &mut Rng| r.pick(&ATOMS).to_string();
        if r.chance(30) {
            leaf(r)
        } else if r.chance(70) {
            format!("({} {} {})", r.pick(&OPS), leaf(r), leaf(r))
        } else {
            format!("({} ({} {} {}) {})", r.pick(&OPS), r.pick(&OPS), leaf(r), leaf(r), leaf(r))
        }
    };
    let mut body = format!("(:= Report.a {})", expr(r));
    if r.chance(50) {
        body += &format!(" (:= Cwnd {})", expr(r));
    }
    if r.chance(10) {
        body += &format!(" (:= Rate (max 100000 {}))", expr(r));
    }
    format!(
        "(def (Report (volatile a 0)) (c0 {}))
         (when true {body} (fallthrough))
         (when (> Micros {}) (report) (:= Micros 0))",
        r.pick(&[0u64, 1, 7, 1448, 100_000]),
        1000 * (1 + r.below(50))
    )
}

/// A program that aborts on every invocation (division by c0 = 0).
const POISON: &str = "(def (Report (volatile a 0)) (c0 0))
    (when true (:= Report.a (/ Cwnd c0)) (fallthrough))
    (when (> Micros 10000) (report) (:= Micros 0))";
const POISON_UID: u32 = 900;

fn install_msg(p: &Program, uid: u32) -> Vec<u8> {
    let msg = install::Msg {
        sid: 0,
        program_uid: uid,
        num_events: p.bin.events.len() as u32,
        num_instrs: p.bin.instrs.len() as u32,
        instrs: p.bin.clone(),
    };
    serialize(&msg).expect("serialize install")
}

fn reg(p: &Program, name: &str) -> Reg {
    p.scope.get(name).cloned().unwrap_or_else(|| panic!("{name} in the program's scope"))
}

/// A cwnd of 2-60 packets mostly (the path holds about 45), now and then
/// 0 (leave it) or u32::MAX bytes (the datapath's ceiling clamps it).
fn cwnd_value(r: &mut Rng) -> u64 {
    match r.below(100) {
        0 => 0,
        1 => u64::from(u32::MAX),
        _ => 1448 * (2 + r.below(59)),
    }
}

struct Fuzzer {
    rng: Rng,
    programs: Vec<Program>,
    sid: u32,
}

impl Fuzzer {
    fn new(seed: u64, sid: u32) -> Fuzzer {
        let mut rng = Rng(seed);
        let programs = (0..64).map(|_| compile(&random_program(&mut rng))).collect();
        Fuzzer { rng, programs, sid }
    }

    /// One structurally valid message for the live flow: 3% installs (uid
    /// 1..40), 12% program changes, the rest updates.
    fn message(&mut self) -> Vec<u8> {
        let r = &mut self.rng;
        let p = &self.programs[r.below(self.programs.len() as u64) as usize];
        let uid = 1 + r.below(40) as u32;
        match r.below(100) {
            0..=2 => install_msg(p, uid),
            3..=14 => {
                let fields = vec![(reg(p, "Cwnd"), cwnd_value(r))];
                serialize(&changeprog::Msg { sid: self.sid, program_uid: uid, num_fields: 1, fields }).expect("serialize change")
            }
            _ => {
                let mut fields = vec![];
                if r.chance(80) {
                    fields.push((reg(p, "Cwnd"), cwnd_value(r)));
                }
                if r.chance(10) {
                    fields.push((reg(p, "Rate"), r.pick(&[0u64, 250_000, 2_500_000, u64::from(u32::MAX)])));
                }
                if fields.is_empty() || r.chance(20) {
                    fields.push((reg(p, "c0"), r.pick(&[0u64, 1, 1448, u64::from(u32::MAX)])));
                }
                serialize(&update_field::Msg { sid: self.sid, num_fields: fields.len() as u8, fields }).expect("serialize update")
            }
        }
    }
}

// ------------------------------------------------------------ cwnd watch

/// TCP_INFO samples every 5 ms on its own thread: the longest stretch of
/// one cwnd, and the stretches longer than the guard allows.
#[derive(Default, Debug)]
struct Stretches {
    longest: Duration,
    longest_cwnd: u32,
    /// Each stretch over its bound: (cwnd, commanded pacing rate, length, allowed, when it began).
    over: Vec<(u32, Option<u64>, Duration, Duration, SystemTime)>,
    /// The longest wait for an ACK seen (tcpi_last_ack_recv).
    longest_ack_gap: Duration,
    samples: u64,
    /// Samples with a commanded pacing rate ([`commanded_rate`]).
    rate_commanded: u64,
}

fn watch(flow: Arc<BulkFlow>, stop: Arc<AtomicBool>) -> JoinHandle<Stretches> {
    std::thread::spawn(move || {
        let mut st = Stretches::default();
        let mut cur: Option<Stretch> = None;
        let mut last_sample = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            let ti = flow.info();
            let now = Instant::now();
            // a late sample (this thread descheduled) can lengthen the stretch it ends by its lateness
            let gap = now - last_sample;
            last_sample = now;
            st.samples += 1;
            st.longest_ack_gap = st.longest_ack_gap.max(Duration::from_millis(u64::from(ti.tcpi_last_ack_recv)));
            if ti.tcpi_ca_state == TCP_CA_LOSS {
                // an RTO: the kernel's retransmission timer paces the flow
                cur = None;
            } else {
                let rate = commanded_rate(&ti);
                st.rate_commanded += u64::from(rate.is_some());
                match &mut cur {
                    Some(s) if s.cwnd == ti.tcpi_snd_cwnd && s.rate == rate => {
                        s.srtt_us = s.srtt_us.max(ti.tcpi_rtt);
                        s.ack_gap_ms = s.ack_gap_ms.max(ti.tcpi_last_ack_recv);
                        s.sample_gap = s.sample_gap.max(gap);
                    }
                    _ => {
                        if let Some(s) = cur.take() {
                            s.close(&mut st, now, gap);
                        }
                        cur = Some(Stretch {
                            cwnd: ti.tcpi_snd_cwnd,
                            rate,
                            since: now,
                            since_wall: SystemTime::now(),
                            srtt_us: ti.tcpi_rtt,
                            ack_gap_ms: ti.tcpi_last_ack_recv,
                            sample_gap: Duration::ZERO,
                        });
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(5)); // sampling period, not a wait
        }
        if let Some(s) = cur {
            s.close(&mut st, Instant::now(), Duration::ZERO);
        }
        st
    })
}

/// The pacing rate (B/s) a command set, or None where the datapath paces as
/// the kernel would for a cwnd-only CCA (ccp.bpf.c `kernel_like_pacing`:
/// mss x 1e6 x {120 | 200} % x max(cwnd, packets out) / SRTT us, from the
/// ACK that TCP_INFO's figures also come from). A program that commands a
/// new rate on every ACK controls its flow though its cwnd stays put.
fn commanded_rate(ti: &libc::tcp_info) -> Option<u64> {
    if ti.tcpi_rtt == 0 {
        return Some(ti.tcpi_pacing_rate);
    }
    let packets = u64::from(ti.tcpi_snd_cwnd.max(ti.tcpi_unacked));
    let kernel_like = |percent: u64| u64::from(ti.tcpi_snd_mss) * 1_000_000 * percent / 100 * packets / u64::from(ti.tcpi_rtt);
    let near = |expected: u64| ti.tcpi_pacing_rate.abs_diff(expected) * 100 <= expected;
    (!near(kernel_like(120)) && !near(kernel_like(200))).then_some(ti.tcpi_pacing_rate)
}

/// One run of samples with the same cwnd and the same commanded pacing rate.
struct Stretch {
    cwnd: u32,
    rate: Option<u64>,
    since: Instant,
    /// `since` on the clock of the datapath's log lines.
    since_wall: SystemTime,
    /// Largest SRTT (us) and wait for an ACK (ms) seen in it.
    srtt_us: u32,
    ack_gap_ms: u32,
    /// Longest wait between two of its samples.
    sample_gap: Duration,
}

impl Stretch {
    /// The stretch ended at `now` (the first sample with another cwnd, `end_gap` after the one before).
    fn close(self, st: &mut Stretches, now: Instant, end_gap: Duration) {
        let len = now - self.since;
        let allowed = (Duration::from_micros(u64::from(self.srtt_us)) * GUARD_RTTS).max(GUARD_FLOOR)
            + TAKEOVER_SLACK
            + Duration::from_millis(u64::from(self.ack_gap_ms))
            + self.sample_gap.max(end_gap);
        if len > st.longest {
            st.longest = len;
            st.longest_cwnd = self.cwnd;
        }
        if len > allowed {
            st.over.push((self.cwnd, self.rate, len, allowed, self.since_wall));
        }
    }
}

// ------------------------------------------------------------ the test

/// The longest part of [from, to] outside every burst.
fn longest_quiet(from: SystemTime, to: SystemTime, bursts: &[(SystemTime, SystemTime)]) -> Duration {
    let mut longest = Duration::ZERO;
    let mut at = from;
    for &(b, e) in bursts.iter().filter(|(b, e)| *e > from && *b < to) {
        longest = longest.max(b.duration_since(at).unwrap_or_default());
        at = at.max(e);
    }
    longest.max(to.duration_since(at).unwrap_or_default())
}

/// When the algorithm answered a report of flow `sid` with a cwnd (its log's
/// `report sid=<sid> ... -> cwnd=<bytes>` lines): a command, as the fuzzer's.
fn algorithm_answers(log: &str, sid: u32) -> Vec<SystemTime> {
    let this_flow = format!(" report sid={sid} ");
    log.lines()
        .filter(|l| l.contains(&this_flow) && l.contains("-> cwnd=") && !l.contains("-> cwnd=-"))
        .filter_map(|l| humantime::parse_rfc3339(l.split_whitespace().next()?).ok())
        .collect()
}

/// When the kernel's cubic ran the flow: from each control-guard takeover to
/// the hand-back that ended it (or the end of the log), by the datapath's
/// log lines' RFC 3339 timestamps.
fn fallback_spans(log: &str) -> Vec<(SystemTime, SystemTime)> {
    let mut spans = vec![];
    let mut took: Option<SystemTime> = None;
    for line in log.lines() {
        let Some(at) = line.split_whitespace().next().and_then(|t| humantime::parse_rfc3339(t).ok()) else { continue };
        if line.contains("control guard: flow not commanded") {
            took.get_or_insert(at);
        } else if line.contains("control guard: the algorithm commands the flow again") {
            if let Some(from) = took.take() {
                spans.push((from, at));
            }
        }
    }
    spans.extend(took.map(|from| (from, SystemTime::now())));
    spans
}

fn lock() -> CcpRegistrationLock {
    require_root("loading the BPF struct_ops congestion control and creating network namespaces");
    require_tools(&["ip", "tc"], "the test network");
    lock_ccp_registration()
}

#[test]
fn structurally_valid_fuzz_never_freezes_a_flow() {
    let _l = lock();
    let total = messages();
    let net = Net::new(NET);

    let mut alg = AlgorithmProc::start(&uniq("ccpguard-alg-"), &["reno"], "ccp-guard-test");
    let alg_socket = alg.path.to_str().unwrap().to_owned();
    let mut dp = DatapathProc::start(&["--portus-socket", &alg_socket, "--congalg", "reno"], "ccp-guard-test", Duration::from_secs(15));
    let dp_socket = dp.socket.clone();

    let flow = Arc::new(BulkFlow::start(&net));
    // under the algorithm once it answers the flow's reports
    let heard = try_wait_until(Duration::from_secs(10), || alg.log_text().contains("report sid=").then_some(()));
    assert!(heard.is_some(), "reno never got a report: {}\n{}", alg.log_text(), dp.log_text());
    let sid: u32 = {
        let log = dp.log_text();
        let line = log.lines().find(|l| l.contains("flow created")).expect("flow created in the datapath log");
        let at = line.find("flow=").expect("flow= on the line") + 5;
        line[at..].chars().take_while(|c| c.is_ascii_digit()).collect::<String>().parse().unwrap()
    };

    // reno commands cwnd only, so the datapath paces it as the kernel would: the
    // estimate in commanded_rate must see that, or every sample would end a stretch
    let samples: Vec<(u64, Option<u64>)> = (0..100)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(5)); // sampling period, not a wait
            let ti = flow.info();
            (ti.tcpi_pacing_rate, commanded_rate(&ti))
        })
        .collect();
    let kernel_like = samples.iter().filter(|(_, c)| c.is_none()).count();
    assert!(kernel_like >= 90, "reno's pacing rate matched the kernel-like estimate in {kernel_like} of 100 samples: {samples:?}");

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch(flow.clone(), stop.clone());
    let tx = UnixDatagram::unbound().unwrap();
    tx.connect(&dp_socket).unwrap();
    let mut fz = Fuzzer::new(seed(), sid);
    let sent = AtomicU64::new(0);
    let started = Instant::now();
    // when each burst was sent: during one, the fuzzer addresses the flow itself
    let mut bursts: Vec<(SystemTime, SystemTime)> = vec![];
    // bursts of 5,000 with a quiet second after each: what the fuzz left
    // behind must be commanded by the algorithm again, or taken by the guard
    while sent.load(Ordering::Relaxed) < total {
        let burst_began = SystemTime::now();
        for _ in 0..5000.min(total - sent.load(Ordering::Relaxed)) {
            tx.send(&fz.message()).expect("send to the datapath");
            sent.fetch_add(1, Ordering::Relaxed);
        }
        bursts.push((burst_began, SystemTime::now()));
        let quiet = Instant::now() + Duration::from_secs(1);
        while Instant::now() < quiet {
            assert!(dp.alive(), "ccp-datapath died under the fuzz: {}", dp.log_text());
            std::thread::sleep(Duration::from_millis(50)); // the quiet spell itself
        }
    }
    let fuzz_time = started.elapsed();

    // a program that aborts on every invocation, and silence: the guard takes the flow
    let count = |what: &str| dp.log_text().lines().filter(|l| l.contains(what)).count();
    let (aborting_before, back_before) = (count("aborts on every invocation"), count("handed back"));
    // The poison acts on ACKs: first let the flow out of whatever the fuzz left it in (a loss
    // recovery paced at the rate floor, an RTO backed off for seconds) until ACKs come again.
    const TCP_CA_OPEN: u8 = 0;
    let acking = try_wait_until(Duration::from_secs(20), || {
        let ti = flow.info();
        (ti.tcpi_ca_state == TCP_CA_OPEN && ti.tcpi_last_ack_recv < 50).then_some(())
    });
    let ti = flow.info();
    assert!(
        acking.is_some(),
        "the flow got no ACKs in the open state for 20 s after the fuzz (cwnd {}, ca_state {}, unacked {}, {} ms since \
         the last ACK): {}",
        ti.tcpi_snd_cwnd,
        ti.tcpi_ca_state,
        ti.tcpi_unacked,
        ti.tcpi_last_ack_recv,
        dp.log_text()
    );
    let poison = compile(POISON);
    let mss = flow.info().tcpi_snd_mss;
    tx.send(&install_msg(&poison, POISON_UID)).unwrap();
    // with a cwnd of 25 packets: the flow is commanded, then nothing more
    let fields = vec![(reg(&poison, "Cwnd"), u64::from(25 * mss))];
    tx.send(&serialize(&changeprog::Msg { sid, program_uid: POISON_UID, num_fields: 1, fields }).unwrap()).unwrap();
    // (cwnd, ca_state, unacked, ms since the last ACK, pacing rate B/s) as they change
    let mut seen: Vec<(u32, u8, u32, u32, u64)> = vec![];
    let held = try_wait_until(Duration::from_secs(3), || {
        let ti = flow.info();
        let now = (ti.tcpi_snd_cwnd, ti.tcpi_ca_state, ti.tcpi_unacked, ti.tcpi_last_ack_recv, ti.tcpi_pacing_rate);
        if seen.last().is_none_or(|l| (l.0, l.1, l.2, l.4) != (now.0, now.1, now.2, now.4)) {
            seen.push(now);
        }
        (ti.tcpi_snd_cwnd == 25).then_some(())
    });
    assert!(
        held.is_some(),
        "the program change's cwnd of 25 packets never applied ((cwnd, ca_state, unacked, ms since the last ACK, \
         pacing B/s) seen: {seen:?}): {}",
        dp.log_text()
    );
    // the flow leaves 25 within the guard's bound: the guard takes it (or the
    // kernel's loss recovery does, which also forgets the algorithm's cwnd
    // until it answers). The bound is 16 SRTTs: a flow the fuzz left paced at
    // the rate floor sends one packet at a time, each ACK comes after the
    // receiver's delayed-ACK timer, and its SRTT grows to 100-200 ms.
    seen.clear();
    let (since, mut srtt_max_us) = (Instant::now(), 0u32);
    let left = try_wait_until(Duration::from_secs(15), || {
        let ti = flow.info();
        srtt_max_us = srtt_max_us.max(ti.tcpi_rtt);
        let now = (ti.tcpi_snd_cwnd, ti.tcpi_ca_state, ti.tcpi_unacked, ti.tcpi_last_ack_recv, ti.tcpi_pacing_rate);
        if seen.last().is_none_or(|l| (l.0, l.1, l.2, l.4) != (now.0, now.1, now.2, now.4)) {
            seen.push(now);
        }
        (ti.tcpi_snd_cwnd != 25).then_some(since.elapsed())
    });
    let allowed = (Duration::from_micros(u64::from(srtt_max_us)) * GUARD_RTTS).max(GUARD_FLOOR)
        + TAKEOVER_SLACK
        + Duration::from_secs(1);
    assert!(
        left.is_some_and(|after| after <= allowed),
        "the flow stayed at the aborting program's last cwnd of 25 for {left:?} (allowed {allowed:?}: SRTT up to {srtt_max_us} \
         us; (cwnd, ca_state, unacked, ms since the last ACK, pacing B/s) seen: {seen:?}): {}",
        dp.log_text()
    );
    let took = try_wait_until(Duration::from_secs(1), || (count("aborts on every invocation") > aborting_before).then_some(()));
    eprintln!("aborting program: the flow left cwnd 25 ({})", if took.is_some() { "the guard took it" } else { "the kernel's loss recovery took it" });
    // a command gets it back: cwnd 30 packets
    let upd = update_field::Msg { sid, num_fields: 1, fields: vec![(reg(&poison, "Cwnd"), u64::from(30 * mss))] };
    tx.send(&serialize(&upd).unwrap()).unwrap();
    let back = try_wait_until(Duration::from_secs(3), || (flow.info().tcpi_snd_cwnd == 30).then_some(()));
    assert!(back.is_some(), "a cwnd update did not get the flow back (cwnd {}): {}", flow.info().tcpi_snd_cwnd, dp.log_text());
    if took.is_some() {
        let handed_back = try_wait_until(Duration::from_secs(2), || (count("handed back") > back_before).then_some(()));
        assert!(handed_back.is_some(), "no hand-back logged: {}", dp.log_text());
    }
    std::thread::sleep(Duration::from_secs(1)); // the flow under the guard once more, sampled

    stop.store(true, Ordering::SeqCst);
    let stretches = watcher.join().expect("cwnd watcher");
    assert!(alg.alive(), "ccp-algorithms died: {}", alg.log_text());
    let status = dp.stop();
    assert!(status.is_some_and(|s| s.success()), "ccp-datapath did not exit cleanly ({status:?}): {}", dp.log_text());
    let log = dp.log_text();
    let n = |k: &str| summary_count(&log, k);
    let guard_warnings = log.lines().filter(|l| l.contains("WARN") && l.contains("control guard")).count();
    println!(
        "guard fuzz: {} messages in {:.1} s ({} bursts of 5000 + 1 s quiet), seed {:#x}; datapath: installs={} staged={} refused={} \
         evictions_refused={} replaced_unused={} aborted={} guard_fallbacks={} (warn lines {guard_warnings}) cwnd_clamped={} \
         rate_floored={}; \
         longest constant cwnd and commanded rate {:?} (at {} packets; longest wait for an ACK {:?}) over {} samples \
         ({} with a commanded pacing rate)",
        sent.load(Ordering::Relaxed),
        fuzz_time.as_secs_f64(),
        total.div_ceil(5000),
        seed(),
        n("installs"),
        n("staged"),
        n("refused"),
        n("evictions_refused"),
        n("replaced_unused"),
        n("aborted"),
        n("guard_fallbacks"),
        n("cwnd_clamped"),
        n("rate_floored"),
        stretches.longest,
        stretches.longest_cwnd,
        stretches.longest_ack_gap,
        stretches.samples,
        stretches.rate_commanded,
    );
    // A stretch past its bound is the datapath's fault unless the fallback ran the flow in it
    // (the guard took the flow before the stretch began, or within its bound): then the kernel's
    // cubic (and its loss recovery, which holds cwnd at ssthresh until the lost packets are
    // repaired) decides, as for any kernel flow.
    // A stretch during which the fuzzer or the algorithm kept sending the flow updates was
    // commanded all along (a message for the flow is a command); one with a quiet part longer
    // than the bound must have been taken by the guard within its bound.
    let fallbacks = fallback_spans(&log);
    // the algorithm's answers command the flow too (a constant cwnd it keeps answering is its own)
    let mut commands = bursts.clone();
    commands.extend(algorithm_answers(&alg.log_text(), sid).into_iter().map(|t| (t, t)));
    commands.sort();
    let taken = |began: SystemTime, allowed: Duration| fallbacks.iter().any(|&(from, to)| from <= began + allowed && to >= began);
    let (mut by_guard, mut commanded) = (0, 0);
    let mut frozen = vec![];
    for o @ &(_, _, len, allowed, began) in &stretches.over {
        if taken(began, allowed) {
            by_guard += 1;
        } else if longest_quiet(began, began + len, &commands) <= allowed {
            commanded += 1;
        } else {
            frozen.push(o);
        }
    }
    println!(
        "guard fuzz: {} constant-cwnd stretches past their bound of {} samples: {by_guard} run by the kernel's cubic (the guard \
         took the flow before or within it), {commanded} commanded by the fuzzer's or the algorithm's messages throughout, {} frozen",
        stretches.over.len(),
        stretches.samples,
        frozen.len()
    );
    assert!(
        frozen.is_empty(),
        "cwnd constant past the guard's bound, quiet for longer than it and no guard takeover within it \
         (cwnd, commanded pacing B/s, length, allowed, began): {frozen:?}\n{log}"
    );
    assert!(n("guard_fallbacks") >= 1, "the guard never acted");
    assert!(n("evictions_refused") >= 1, "no install was refused for evicting the live flow's program (uid 1 comes up)");
    drop(flow);
    drop(net);
}
