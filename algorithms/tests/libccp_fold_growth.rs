//! cwnd growth per ACK in the fold: slow start in reno's and cubic's programs (`fold::Growth::SlowStart`) and growth toward a cap in bbr's (`fold::Growth::TowardCap`)
//! run by a real libccp 1.2 datapath (in-process), the semantics the kernel
//! fold interpreter copies: every ACK raises cwnd by its acknowledged bytes while
//! the flow is cwnd-limited; a Cwnd 0 from user space is "go on"; a loss, a
//! timeout or a marked takeover command ends it for good.
//!
//! This binary links libccp, whose exported `log` symbol shadows libm's: no
//! f64::ln here (docs/NOTES.md, "libccp's `log` symbol").

mod common;
use ccp_algorithms::fold::FoldProgram;
use ccp_algorithms::cc::TAKEOVER_MARK_BYTES;
use common::{send, Conn, Outbox};
use portus::lang::Scope;
use portus::serialize;

const MSS: u32 = 1448;



/// A libccp datapath with `prog` installed, its outbox and the program's scope.
fn datapath(prog: FoldProgram) -> (Box<libccp::Datapath>, Outbox, Scope) {
    common::datapath_with_program(&prog.text())
}

/// One flow on `dp` starting at 10 packets and running the installed program; its sid.
fn connect<'a>(dp: &'a libccp::Datapath, outbox: &Outbox, sc: &Scope) -> (libccp::Connection<'a, Conn>, u32) {
    common::start_flow(dp, outbox, sc, Conn { cwnd: 10 * MSS }, MSS, "reno")
}

/// One ACK of `acked` packets with `inflight` packets in flight after it; the cwnd (bytes) after it.
fn ack(conn: &mut libccp::Connection<'_, Conn>, acked: u32, inflight: u32, lost: u32, timeout: bool) -> u32 {
    let cwnd = conn.cwnd;
    conn.load_primitives(
        libccp::Primitives::default()
            .with_bytes_acked(acked * MSS)
            .with_packets_acked(acked)
            .with_lost_pkts_sample(lost)
            .with_was_timeout(timeout)
            .with_rtt_sample_us(20_000)
            .with_bytes_in_flight(inflight * MSS)
            .with_packets_in_flight(inflight)
            .with_snd_cwnd(cwnd),
    );
    conn.invoke().expect("invoke");
    conn.cwnd
}

/// User space commands Cwnd = `bytes` (as the Portus glue's update_field).
fn command(dp: &libccp::Datapath, sc: &Scope, sid: u32, bytes: u32) {
    let reg = sc.get("Cwnd").expect("Cwnd register").clone();
    let msg = serialize::update_field::Msg { sid, num_fields: 1, fields: vec![(reg, u64::from(bytes))] };
    send(dp, serialize::serialize(&msg).unwrap());
}

#[test]
fn reno_and_cubic_programs_grow_cwnd_per_ack_until_a_loss() {
    for prog in [ccp_algorithms::reno::PROGRAM, ccp_algorithms::cubic::PROGRAM] {
        let (dp, outbox, sc) = datapath(prog);
        let (mut f, sid) = connect(&dp, &outbox, &sc);
        // Each ACK of 2 packets raises cwnd by 2 packets (tcp_slow_start).
        for k in 1..=5 {
            assert_eq!(ack(&mut f, 2, 9 + k, 0, false), (10 + 2 * k) * MSS, "{}: ACK {k}", prog.name);
        }
        // User space's "go on" (Cwnd 0) is neither applied nor stops the growth.
        command(&dp, &sc, sid, 0);
        assert_eq!(ack(&mut f, 1, 20, 0, false), 21 * MSS);
        // The application now keeps 5 packets in flight. Within the round cwnd
        // still grows (tcp_is_cwnd_limited compares with the round's largest in
        // flight, 21 packets, not this ACK's), then stops once that round and the
        // next (of 6 packets) are acknowledged: not cwnd-limited any more.
        let mut cwnd = ack(&mut f, 1, 5, 0, false);
        assert_eq!(cwnd, 22 * MSS, "{}: still within the round of 21 packets in flight", prog.name);
        let mut acks = 1;
        loop {
            let next = ack(&mut f, 1, 5, 0, false);
            acks += 1;
            if next == cwnd {
                break;
            }
            cwnd = next;
            assert!(acks < 40, "{}: cwnd still growing after {acks} ACKs at 5 in flight", prog.name);
        }
        assert!(acks <= 31, "{}: the rounds of 21 and 6 packets ended after {acks} ACKs", prog.name);
        for _ in 0..5 {
            assert_eq!(ack(&mut f, 1, 5, 0, false), cwnd, "{}: no growth while not cwnd-limited", prog.name);
        }
        // A loss stops the fold's growth at once and for good.
        assert_eq!(ack(&mut f, 1, 40, 1, false), cwnd);
        assert_eq!(ack(&mut f, 3, 40, 0, false), cwnd, "{}: no growth after the loss", prog.name);
        // User space's commands apply as they are from now on.
        command(&dp, &sc, sid, 10 * MSS + TAKEOVER_MARK_BYTES);
        assert_eq!(ack(&mut f, 1, 9, 0, false), 10 * MSS + TAKEOVER_MARK_BYTES);
        drop(f);
    }
}

#[test]
fn a_marked_takeover_or_a_timeout_ends_slow_start_in_the_fold() {
    let (dp, outbox, sc) = datapath(ccp_algorithms::cubic::PROGRAM);
    let (mut f, sid) = connect(&dp, &outbox, &sc);
    assert_eq!(ack(&mut f, 4, 10, 0, false), 14 * MSS);
    // HyStart in user space: cwnd = ssthresh = 13 packets, marked so the fold
    // cannot take it for its own 14 x MSS.
    command(&dp, &sc, sid, 13 * MSS + TAKEOVER_MARK_BYTES);
    assert_eq!(ack(&mut f, 2, 12, 0, false), 13 * MSS + TAKEOVER_MARK_BYTES);
    assert_eq!(ack(&mut f, 2, 12, 0, false), 13 * MSS + TAKEOVER_MARK_BYTES, "the fold no longer grows");
    drop(f);

    let (dp, outbox, sc) = datapath(ccp_algorithms::reno::PROGRAM);
    let (mut f, _) = connect(&dp, &outbox, &sc);
    assert_eq!(ack(&mut f, 2, 10, 0, false), 12 * MSS);
    assert_eq!(ack(&mut f, 1, 10, 0, true), 12 * MSS, "no growth on the timeout ACK");
    assert_eq!(ack(&mut f, 4, 10, 0, false), 12 * MSS, "nor after it");
    drop(f);
    // Programs without slow start in the fold leave cwnd to user space.
    let (dp, outbox, sc) = datapath(ccp_algorithms::vegas::PROGRAM);
    let (mut v, _) = connect(&dp, &outbox, &sc);
    assert_eq!(ack(&mut v, 4, 10, 0, false), 10 * MSS);
    drop(v);
}

#[test]
fn bbr_program_grows_cwnd_per_ack_toward_the_commanded_cap() {
    let (dp, outbox, sc) = datapath(ccp_algorithms::bbr::PROGRAM);
    let (mut f, sid) = connect(&dp, &outbox, &sc);
    // No command yet: the initial 10 packets are the cap.
    assert_eq!(ack(&mut f, 2, 10, 0, false), 10 * MSS);
    // Cap 20 packets: each ACK adds its bytes, up to the cap (tcp_bbr.c min(cwnd + acked, target)).
    command(&dp, &sc, sid, 20 * MSS);
    assert_eq!(ack(&mut f, 3, 10, 0, false), 13 * MSS);
    assert_eq!(ack(&mut f, 3, 10, 0, false), 16 * MSS);
    // The same cap again (user space repeats it each report): growth goes on.
    command(&dp, &sc, sid, 20 * MSS);
    assert_eq!(ack(&mut f, 3, 10, 0, false), 19 * MSS);
    assert_eq!(ack(&mut f, 3, 10, 0, false), 20 * MSS);
    assert_eq!(ack(&mut f, 3, 10, 0, false), 20 * MSS, "held at the cap");
    // A cap below cwnd applies at once (ProbeRTT, packet conservation).
    command(&dp, &sc, sid, 4 * MSS);
    assert_eq!(ack(&mut f, 1, 4, 0, false), 4 * MSS);
    assert_eq!(ack(&mut f, 1, 4, 0, false), 4 * MSS);
    drop(f);
}

#[test]
fn bbr_program_jumps_to_a_restored_cwnd_sent_with_the_cap() {
    let (dp, outbox, sc) = datapath(ccp_algorithms::bbr::PROGRAM);
    let (mut f, sid) = connect(&dp, &outbox, &sc);
    command(&dp, &sc, sid, 40 * MSS);
    for _ in 0..10 {
        ack(&mut f, 3, 10, 0, false);
    }
    assert_eq!(ack(&mut f, 3, 10, 0, false), 40 * MSS);
    // ProbeRTT: cap 4 packets, applied at once.
    command(&dp, &sc, sid, 4 * MSS);
    assert_eq!(ack(&mut f, 1, 4, 0, false), 4 * MSS);
    // ProbeRTT ends: the cap rises to 50 packets and the fold's cwnd is set to the
    // saved 40 (Bbr::fold_registers after a restore): the next ACK finds cwnd at
    // 40 + its acked packets, not at 4 + 1 as growth from ProbeRTT's window would give.
    common::command_with_registers(&dp, &sc, sid, 50 * MSS, &[("fcw", 40 * MSS), ("cap", 50 * MSS)]);
    assert_eq!(ack(&mut f, 1, 4, 0, false), 41 * MSS);
    assert_eq!(ack(&mut f, 2, 5, 0, false), 43 * MSS, "then growth toward the cap as before");
    // A restore above the cap stays at the cap (the kernel's min(cwnd + acked, target)).
    common::command_with_registers(&dp, &sc, sid, 30 * MSS, &[("fcw", 45 * MSS), ("cap", 30 * MSS)]);
    assert_eq!(ack(&mut f, 1, 30, 0, false), 30 * MSS);
    drop(f);
}

#[test]
fn a_late_initial_command_restarts_slow_start_instead_of_ending_it() {
    use ccp_algorithms::cc::{WindowAlgorithm, WindowParams};
    let params = WindowParams {
        mss_bytes: MSS,
        init_cwnd_pkts: 10.0,
        init_ssthresh_pkts: f64::INFINITY,
        min_cwnd_pkts: 1.0,
        max_cwnd_pkts: 1e5,
    };
    for prog in [ccp_algorithms::reno::PROGRAM, ccp_algorithms::cubic::PROGRAM] {
        let reno = ccp_algorithms::reno::Reno::new(params).with_fold_slow_start(true);
        let (initial, regs) = (reno.cwnd_bytes(), reno.initial_fold_registers());
        assert_eq!(regs, vec![("fcw", 10 * MSS)], "the initial command carries the fold's own cwnd");

        // A veth flow: the fold grows on the first ACKs before the initial command arrives.
        let (dp, outbox, sc) = datapath(prog);
        let (mut f, sid) = connect(&dp, &outbox, &sc);
        assert_eq!(ack(&mut f, 4, 10, 0, false), 14 * MSS);
        common::command_with_registers(&dp, &sc, sid, initial, &regs);
        assert_eq!(ack(&mut f, 2, 10, 0, false), 12 * MSS, "{}: back to the initial window, growing", prog.name);
        assert_eq!(ack(&mut f, 2, 12, 0, false), 14 * MSS, "{}: slow start goes on", prog.name);
        drop(f);

        // Without the register the fold took the same command for a takeover: cwnd stuck.
        let (dp, outbox, sc) = datapath(prog);
        let (mut f, sid) = connect(&dp, &outbox, &sc);
        assert_eq!(ack(&mut f, 4, 10, 0, false), 14 * MSS);
        command(&dp, &sc, sid, initial);
        assert_eq!(ack(&mut f, 2, 10, 0, false), 10 * MSS);
        assert_eq!(ack(&mut f, 2, 10, 0, false), 10 * MSS, "{}: slow start ended by the unmarked command", prog.name);
        drop(f);
    }
}
