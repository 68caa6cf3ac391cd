//! PRR per ACK in reno's and cubic's fold programs (`fold::Features::prr`), run by
//! a real libccp 1.2 datapath (in-process), the semantics the kernel fold
//! interpreter copies: at the loss ACK cwnd is held at in flight + 1 packet
//! until user space answers; from its answer until the next report every ACK
//! sets cwnd to the PRR window (`cc::FoldPrr`, the same window
//! `cc::Prr` computes per report), then cwnd holds until the answer to that
//! report; an RTO ends both.
//!
//! This binary links libccp, whose exported `log` symbol shadows libm's: no
//! f64::ln here (docs/NOTES.md, "libccp's `log` symbol").

mod common;
use ccp_algorithms::fold::FoldProgram;
use ccp_algorithms::reno::Reno;
use ccp_algorithms::cc::{FoldPrr, Measurement, WindowAlgorithm, WindowParams};
use common::Conn;

const MSS: u32 = 1448;

/// One ACK's primitives: `acked` packets cumulatively, `sacked` newly SACKed,
/// `lost` newly marked lost, `inflight` packets in flight after it.
#[derive(Clone, Copy)]
struct Ack {
    acked: u32,
    sacked: u32,
    lost: u32,
    inflight: u32,
    timeout: bool,
    /// The RTT sample, us: reno reports every RTT / 4, so a long one keeps
    /// timer reports out of the test and a short one brings one.
    rtt_us: u32,
}

const LONG_RTT_US: u32 = 20_000_000;

const fn ack(acked: u32, sacked: u32, lost: u32, inflight: u32) -> Ack {
    Ack { acked, sacked, lost, inflight, timeout: false, rtt_us: LONG_RTT_US }
}

/// Feed `a` to the flow; the cwnd (bytes) after it.
fn invoke(conn: &mut libccp::Connection<'_, Conn>, a: Ack) -> u32 {
    let cwnd = conn.cwnd;
    conn.load_primitives(
        libccp::Primitives::default()
            .with_bytes_acked(a.acked * MSS)
            .with_packets_acked(a.acked)
            .with_bytes_misordered(a.sacked * MSS)
            .with_packets_misordered(a.sacked)
            .with_lost_pkts_sample(a.lost)
            .with_was_timeout(a.timeout)
            .with_rtt_sample_us(u64::from(a.rtt_us))
            .with_bytes_in_flight(a.inflight * MSS)
            .with_packets_in_flight(a.inflight)
            .with_snd_cwnd(cwnd),
    );
    conn.invoke().expect("invoke");
    conn.cwnd
}

/// The report the fold would send for `acks` with Cwnd `cwnd_bytes` before the
/// last ACK's reduction (the fields the window logic reads).
fn report(acks: &[Ack], cwnd_bytes: u32) -> Measurement {
    let sum = |f: fn(&Ack) -> u32| acks.iter().map(|a| u64::from(f(a))).sum::<u64>();
    let last = acks.last().expect("a report has ACKs");
    Measurement {
        acked_bytes: sum(|a| a.acked) * u64::from(MSS),
        sacked_pkts: sum(|a| a.sacked),
        delivered_pkts: sum(|a| a.acked + a.sacked),
        lost_pkts: sum(|a| a.lost),
        timeout: acks.iter().any(|a| a.timeout),
        inflight_pkts: u64::from(last.inflight),
        inflight_max_pkts: acks.iter().map(|a| u64::from(a.inflight + a.acked)).max().unwrap_or(0),
        rtt_us: 20_000,
        min_rtt_us: 20_000,
        dp_cwnd_bytes: u64::from(cwnd_bytes),
        ..Default::default()
    }
}

fn params() -> WindowParams {
    WindowParams {
        mss_bytes: MSS,
        init_cwnd_pkts: 10.0,
        init_ssthresh_pkts: f64::INFINITY,
        min_cwnd_pkts: 1.0,
        max_cwnd_pkts: 1e5,
    }
}

/// Packets delivered and lost over `acks`.
fn counts(acks: &[Ack]) -> (u64, u64) {
    (acks.iter().map(|a| u64::from(a.acked + a.sacked)).sum(), acks.iter().map(|a| u64::from(a.lost)).sum())
}

/// Reports libccp has sent so far.
fn reports_sent(outbox: &common::Outbox) -> usize {
    outbox.0.lock().unwrap().iter().filter(|b| matches!(portus::serialize::Msg::from_buf(b), Ok((portus::serialize::Msg::Ms(_), _)))).count()
}

fn reno_recovery_follows_prr_per_ack(prog: FoldProgram) {
    let (dp, outbox, sc) = common::datapath_with_program(&prog.text());
    let (mut f, sid) = common::start_flow(&dp, &outbox, &sc, Conn { cwnd: 10 * MSS }, MSS, "reno");
    let mut reno = Reno::new(params()).with_fold_slow_start(true).with_fold_prr(true);

    // Slow start in the fold: 10 packets acknowledged, cwnd 10 -> 20 packets;
    // the last ACK's short RTT sample (report interval 100 us) after 1 ms
    // brings the first report.
    let mut ss: Vec<Ack> = (0..5).map(|k| ack(2, 0, 0, 10 + 2 * k)).collect();
    ss[4].rtt_us = 400;
    for (k, a) in ss.iter().enumerate() {
        if k == 4 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        invoke(&mut f, *a);
    }
    assert_eq!((f.cwnd, reports_sent(&outbox)), (20 * MSS, 1), "{}: slow start, one timer report", prog.name);
    let go_on = reno.on_report(&report(&ss, 20 * MSS));
    assert_eq!(go_on, 0, "slow start in the fold: Cwnd 0 (go on)");
    let regs = reno.fold_registers();
    assert!(regs.contains(&("pm", 1)) && regs.contains(&("pn", 0)), "open: no PRR, the hold armed: {regs:?}");
    common::command_with_registers(&dp, &sc, sid, go_on, &regs);

    // The loss ACK: 3 packets SACKed, 2 marked lost, 15 in flight (20 sent,
    // 3 SACKed, 2 lost), an urgent report. Until user space answers, cwnd is
    // held at in flight + 1 packet (Linux's PRR sends one packet, the fast
    // retransmit), once.
    let loss = ack(0, 3, 2, 15);
    assert_eq!(invoke(&mut f, loss), 16 * MSS, "{}: held at in flight + 1", prog.name);
    let early = ack(0, 1, 0, 14);
    assert_eq!(invoke(&mut f, early), 16 * MSS);
    assert_eq!(reports_sent(&outbox), 2);

    // User space answers the loss report: ssthresh 10, PRR from 20 outstanding.
    let cwnd = reno.on_report(&report(&[loss], 20 * MSS));
    assert_eq!(reno.ssthresh_pkts(), 10.0, "half the cwnd before the hold");
    let regs = reno.fold_registers();
    assert!(regs.contains(&("pm", 2)) && regs.contains(&("pn", 2)), "in recovery: PRR on: {regs:?}");
    common::command_with_registers(&dp, &sc, sid, cwnd, &regs);
    // Every ACK now sets the PRR window for the packets since the loss report
    // (the early ACK, after that report and before the answer, counts too).
    let mut since = vec![early];
    let mut windows = vec![];
    for a in [ack(0, 2, 0, 13), ack(1, 3, 0, 10), ack(0, 4, 1, 5)] {
        let got = invoke(&mut f, a);
        since.push(a);
        let (d, l) = counts(&since);
        let want = FoldPrr::fold_window(&regs, d, l).expect("PRR on") as u32 * MSS;
        assert_eq!(got, want, "{}: {d} delivered and {l} lost since the report", prog.name);
        windows.push(got / MSS);
    }
    assert_eq!(reports_sent(&outbox), 3, "the last ACK marked a loss: an urgent report");
    // Until user space answers that report, cwnd holds (no per-ACK window from a stale answer).
    let stale = ack(0, 2, 0, 3);
    assert_eq!(invoke(&mut f, stale), *windows.last().unwrap() * MSS, "{}: held until the answer", prog.name);
    let cwnd = reno.on_report(&report(&since, 20 * MSS));
    let regs = reno.fold_registers();
    assert!(regs.contains(&("pn", 3)), "{regs:?}");
    common::command_with_registers(&dp, &sc, sid, cwnd, &regs);
    let mut since = vec![stale];
    for a in [ack(0, 1, 0, 3), ack(0, 5, 0, 2), ack(0, 9, 0, 1)] {
        let got = invoke(&mut f, a);
        since.push(a);
        let (d, l) = counts(&since);
        assert_eq!(got, FoldPrr::fold_window(&regs, d, l).expect("PRR on") as u32 * MSS, "{}", prog.name);
        windows.push(got / MSS);
    }
    // The window shrinks with the deliveries, then floors at ssthresh (10).
    assert!(windows.windows(2).all(|w| w[1] <= w[0]), "{}: the window only shrinks: {windows:?}", prog.name);
    assert_eq!(*windows.last().unwrap(), 10, "{}: floored at ssthresh: {windows:?}", prog.name);

    // An RTO ends PRR and the hold: the datapath's loss window stays.
    f.cwnd = MSS;
    let rto = Ack { timeout: true, ..ack(0, 0, 4, 0) };
    assert_eq!(invoke(&mut f, rto), MSS, "{}: the RTO's loss window is not overridden", prog.name);
    assert_eq!(invoke(&mut f, ack(0, 1, 1, 0)), MSS, "{}: no PRR or hold after the RTO", prog.name);
    drop(f);
}

#[test]
fn reno_program_reduces_cwnd_per_ack_as_prr() {
    reno_recovery_follows_prr_per_ack(ccp_algorithms::reno::PROGRAM);
}

#[test]
fn cubic_program_runs_the_same_prr_block() {
    // cubic's program carries the same block; the constants come from Reno's
    // window logic here (the block does not depend on who computed them).
    reno_recovery_follows_prr_per_ack(ccp_algorithms::cubic::PROGRAM);
}

#[test]
fn programs_without_prr_in_the_fold_leave_cwnd_to_user_space() {
    let (dp, outbox, sc) = common::datapath_with_program(&ccp_algorithms::vegas::PROGRAM.text());
    let (mut f, _) = common::start_flow(&dp, &outbox, &sc, Conn { cwnd: 20 * MSS }, MSS, "vegas");
    assert!(sc.get("pa").is_none(), "vegas's program has no PRR registers");
    assert_eq!(invoke(&mut f, ack(0, 3, 2, 15)), 20 * MSS, "no hold at a loss ACK");
    drop(f);
}
