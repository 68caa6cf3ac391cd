//! bbr's per-ACK Startup cwnd rule in the fold (`bbr::startup_cwnd_block`,
//! applied in `fold::toward_cap`) run by a real libccp 1.2 datapath
//! (in-process), the semantics the kernel fold interpreter copies. As
//! tcp_bbr.c's `bbr_set_cwnd` while the pipe is not full: an ACK grows cwnd by
//! its acked bytes while cwnd < 2.885 x BtlBw x RTprop + the quantization
//! budget (BtlBw = the largest per-ACK delivery-rate sample so far, RTprop the
//! smallest RTT sample, both updated on that very ACK) or while fewer than 10
//! packets were delivered; user space's cap still bounds it and a lower cap
//! still applies at once; `sg` = 0 (the initial value, and user space's
//! "Startup is over") leaves plain growth toward the cap.
//!
//! This binary links libccp, whose exported `log` symbol shadows libm's: no
//! f64::ln here (docs/NOTES.md, "libccp's `log` symbol").

mod common;
use ccp_algorithms::bbr::{PROGRAM, STARTUP_CWND_GAIN_PER_MILLE, STARTUP_SG_FULL};
use common::{command_with_registers, Conn};

const MSS: u32 = 1448;
const RTT_US: u64 = 20_000;

/// One ACK of `acked` packets with delivery-rate sample `rate` bytes/s and
/// RTT sample `rtt_us` (0 = none); the cwnd (bytes) after it.
fn ack(conn: &mut libccp::Connection<'_, Conn>, acked: u32, rate: u64, rtt_us: u64) -> u32 {
    ack_bytes(conn, acked, acked * MSS, rate, rtt_us)
}

/// One ACK that newly delivers `acked` packets but acknowledges `bytes`
/// cumulatively (the ACK that ends a loss recovery covers packets SACKed
/// before it); the cwnd (bytes) after it.
fn ack_bytes(conn: &mut libccp::Connection<'_, Conn>, acked: u32, bytes: u32, rate: u64, rtt_us: u64) -> u32 {
    let cwnd = conn.cwnd;
    conn.load_primitives(
        libccp::Primitives::default()
            .with_bytes_acked(bytes)
            .with_packets_acked(acked)
            .with_rtt_sample_us(rtt_us)
            .with_rate_outgoing(rate)
            .with_rate_incoming(rate)
            .with_bytes_in_flight(10 * MSS)
            .with_packets_in_flight(10)
            .with_snd_cwnd(cwnd),
    );
    conn.invoke().expect("invoke");
    conn.cwnd
}

/// The fold's Startup target in bytes for BtlBw `bw` bytes/s, RTprop `rtt_us`
/// and budget `sq` bytes, in the program's integer arithmetic.
fn target(bw: u64, rtt_us: u64, sq: u32) -> u64 {
    bw * rtt_us / 1_000_000 * STARTUP_CWND_GAIN_PER_MILLE / 1000 + u64::from(sq)
}

#[test]
fn startup_grows_per_ack_below_the_per_ack_target_or_before_ten_delivered_packets() {
    let (dp, outbox, sc) = common::datapath_with_program(&PROGRAM.text());
    let (mut f, sid) = common::start_flow(&dp, &outbox, &sc, Conn { cwnd: 10 * MSS }, MSS, "bbr");
    let sq = 6 * MSS;
    // Before any command the initial 10 packets are the cap (the rule is off).
    assert_eq!(ack(&mut f, 2, 0, RTT_US), 10 * MSS);
    // User space turns the rule on (1 + the 2 packets delivered) with a loose cap of 200 packets.
    command_with_registers(&dp, &sc, sid, 200 * MSS, &[("sg", 3), ("sq", sq), ("smss", MSS)]);
    // A tiny bandwidth sample: target = 2.885 x 10 kB/s x 20 ms + 6 packets,
    // about 6.4 packets, below cwnd; still each ACK grows cwnd while fewer than
    // 10 packets have been delivered (tcp_bbr.c `tp->delivered < TCP_INIT_CWND`,
    // counted after the ACK).
    let small = 10_000;
    assert!(target(small, RTT_US, sq) < u64::from(10 * MSS));
    let mut cwnd = 0;
    for _ in 0..3 {
        cwnd = ack(&mut f, 2, small, RTT_US);
    }
    assert_eq!(cwnd, 16 * MSS, "8 packets delivered: grown by each ACK");
    assert_eq!(ack(&mut f, 2, small, RTT_US), 16 * MSS, "10 delivered and cwnd above the target: held");
    assert_eq!(ack(&mut f, 2, small, RTT_US), 16 * MSS);
    // A delivery-rate sample whose target is above cwnd grows cwnd on that very ACK.
    // 1 MB/s x 20 ms x 2.885 = 57.7 kB + 6 packets = 48 packets.
    let bw = 1_000_000;
    let t = target(bw, RTT_US, sq);
    assert_eq!(ack(&mut f, 2, bw, RTT_US), 18 * MSS);
    // A smaller sample does not lower the target (BtlBw is the max): growth goes on
    // until cwnd is at or above the target, overshooting it by at most one ACK.
    let mut n = 0;
    loop {
        let before = u64::from(cwnd_of(&f));
        let after = u64::from(ack(&mut f, 3, 200_000, RTT_US));
        if after == before {
            assert!(before >= t && before < t + u64::from(3 * MSS), "stopped at {before} B, target {t} B");
            break;
        }
        assert!(before < t, "grew at {before} B above the target {t} B");
        n += 1;
        assert!(n < 100, "never stopped");
    }
    // The RTprop is the smallest sample: a later, larger RTT does not raise the target.
    let held = cwnd_of(&f);
    assert_eq!(ack(&mut f, 2, bw, 4 * RTT_US), held);
    // The cumulative ACK that ends a recovery acknowledges 100 packets' bytes
    // but delivers 2 new ones: cwnd grows by 2 packets (tcp_bbr.c `acked_sacked`).
    let below = cwnd_of(&f);
    command_with_registers(&dp, &sc, sid, 200 * MSS, &[("sq", 40 * MSS)]);
    assert_eq!(ack_bytes(&mut f, 2, 100 * MSS, bw, RTT_US), below + 2 * MSS);
    command_with_registers(&dp, &sc, sid, 200 * MSS, &[("sq", sq)]);
    // A lower cap applies at once as before (a loss report, ProbeRTT).
    command_with_registers(&dp, &sc, sid, 30 * MSS, &[]);
    assert_eq!(ack(&mut f, 1, bw, RTT_US), 30 * MSS);
    // A larger budget raises the target: growth resumes up to the cap.
    command_with_registers(&dp, &sc, sid, 200 * MSS, &[("sq", 40 * MSS)]);
    assert_eq!(ack(&mut f, 2, bw, RTT_US), 32 * MSS);
    // Startup over (sg = 0): plain growth toward the cap whatever the target,
    // by the acknowledged bytes as before.
    command_with_registers(&dp, &sc, sid, 120 * MSS, &[("sg", 0), ("sq", 0)]);
    let mut last = 0;
    for _ in 0..60 {
        last = ack(&mut f, 2, 10_000, RTT_US);
    }
    assert_eq!(last, 120 * MSS, "after Startup the cap is the only bound");
    drop(f);
}

#[test]
fn the_rule_is_off_until_user_space_turns_it_on() {
    let (dp, outbox, sc) = common::datapath_with_program(&PROGRAM.text());
    let (mut f, sid) = common::start_flow(&dp, &outbox, &sc, Conn { cwnd: 10 * MSS }, MSS, "bbr");
    assert_eq!(ack(&mut f, 2, 0, RTT_US), 10 * MSS);
    command_with_registers(&dp, &sc, sid, 60 * MSS, &[]);
    let mut last = 0;
    for _ in 0..30 {
        last = ack(&mut f, 2, 10_000, RTT_US);
    }
    assert_eq!(last, 60 * MSS, "sg starts at 0: growth toward the cap only");
    // Turned on with 10 packets already delivered (sg = 11): held at once below a low target.
    command_with_registers(&dp, &sc, sid, 100 * MSS, &[("sg", STARTUP_SG_FULL), ("sq", 6 * MSS), ("smss", MSS)]);
    assert_eq!(ack(&mut f, 2, 10_000, RTT_US), 60 * MSS);
    drop(f);
}

fn cwnd_of(f: &libccp::Connection<'_, Conn>) -> u32 {
    f.cwnd
}

#[test]
fn the_initial_command_lets_the_first_round_grow_past_the_initial_cwnd() {
    use ccp_algorithms::bbr::{Bbr, BbrArgs, HIGH_GAIN};
    use ccp_algorithms::cc::WindowParams;
    use ccp_algorithms::Controller;
    let params = WindowParams {
        mss_bytes: MSS,
        init_cwnd_pkts: 10.0,
        init_ssthresh_pkts: f64::INFINITY,
        min_cwnd_pkts: 1.0,
        max_cwnd_pkts: 1e6,
    };
    let args = BbrArgs {
        bw_window_rounds: 10,
        min_rtt_window_s: 10.0,
        cwnd_gain: 2.0,
        high_gain: HIGH_GAIN,
        seed: 1,
        startup_rate_in_fold: false,
        startup_cwnd_in_fold: true,
        ack_aggregation: true,
    };
    let b = Bbr::new(params, args.clone()).with_fold_growth(true);
    let (dp, outbox, sc) = common::datapath_with_program(&PROGRAM.text());
    let (mut f, sid) = common::start_flow(&dp, &outbox, &sc, Conn { cwnd: 10 * MSS }, MSS, "bbr");
    // The glue's initial command: Cwnd and the initial fold registers together.
    let init = Controller::initial(&b).cwnd_bytes.expect("an initial cwnd");
    command_with_registers(&dp, &sc, sid, init, &Controller::initial_fold_registers(&b));
    assert_eq!(f.cwnd, 10 * MSS, "the flow starts at the initial window");
    // Round 1's ACKs (no report answered yet) grow cwnd by their packets, as
    // tcp_bbr.c's (10 delivered at 0.5 MB/s: target 2.885 x 10 kB + the budget
    // sent with the command, above cwnd): 20 packets, not 10.
    let mut cwnd = 0;
    for _ in 0..5 {
        cwnd = ack(&mut f, 2, 500_000, RTT_US);
    }
    assert_eq!(cwnd, 20 * MSS);
    // Without the flag the initial command is the cap until the first report.
    let plain = Bbr::new(params, BbrArgs { startup_cwnd_in_fold: false, ..args }).with_fold_growth(true);
    assert!(Controller::initial_fold_registers(&plain).is_empty());
    let (dp, outbox, sc) = common::datapath_with_program(&PROGRAM.text());
    let (mut f, sid) = common::start_flow(&dp, &outbox, &sc, Conn { cwnd: 10 * MSS }, MSS, "bbr");
    command_with_registers(&dp, &sc, sid, init, &[]);
    for _ in 0..5 {
        cwnd = ack(&mut f, 2, 500_000, RTT_US);
    }
    assert_eq!(cwnd, 10 * MSS);
    drop(f);
}
