//! bbr's per-ACK Startup pacing rate in the fold (`bbr::startup_rate_block`)
//! run by a real libccp 1.2 datapath (in-process), the semantics the kernel
//! fold interpreter copies (a non-zero Rate calls set_rate each ACK; Rate is
//! re-seeded each ACK from the datapath's current rate): the first ACK with an
//! RTT sample sets high_gain x 99 % x Cwnd / RTT, each ACK raises the rate to
//! high_gain x 99 % x its delivery-rate sample and never lowers it, and the
//! first Rate user space commands ends the block for good.
//!
//! This binary links libccp, whose exported `log` symbol shadows libm's: no
//! f64::ln here (docs/NOTES.md, "libccp's `log` symbol").

mod common;
use ccp_algorithms::bbr::{PROGRAM, STARTUP_RATE_PER_MILLE};
use common::{send, Outbox};
use portus::lang::Scope;
use portus::serialize;

const MSS: u32 = 1448;
const RTT_US: u64 = 20_000;

/// The connection as a datapath holds it: the last cwnd and pacing rate libccp set.
struct Paced {
    cwnd: u32,
    rate: u32,
    rate_calls: u32,
}

impl libccp::CongestionOps for Paced {
    fn set_cwnd(&mut self, cwnd: u32) {
        self.cwnd = cwnd;
    }
    fn set_rate_abs(&mut self, rate: u32) {
        self.rate = rate;
        self.rate_calls += 1;
    }
}

/// A libccp datapath running bbr's program: (datapath, outbox, scope).
fn bbr_flow() -> (Box<libccp::Datapath>, Outbox, Scope) {
    common::datapath_with_program(&PROGRAM.text())
}

/// One flow of 10 packets on `dp` running bbr's program, and its sid.
fn start<'a>(dp: &'a libccp::Datapath, outbox: &Outbox, sc: &Scope) -> (libccp::Connection<'a, Paced>, u32) {
    common::start_flow(dp, outbox, sc, Paced { cwnd: 10 * MSS, rate: 0, rate_calls: 0 }, MSS, "bbr")
}

/// One ACK of 2 packets with delivery-rate sample `rate` bytes/s (both
/// directions) and RTT sample `rtt_us` (0: none); the pacing rate after it.
fn ack(conn: &mut libccp::Connection<'_, Paced>, rate: u64, rtt_us: u64) -> u32 {
    let (cwnd, cur) = (conn.cwnd, conn.rate);
    conn.load_primitives(
        libccp::Primitives::default()
            .with_bytes_acked(2 * MSS)
            .with_packets_acked(2)
            .with_rtt_sample_us(rtt_us)
            .with_rate_outgoing(rate)
            .with_rate_incoming(rate)
            .with_packets_in_flight(10)
            .with_bytes_in_flight(10 * MSS)
            .with_snd_cwnd(cwnd)
            .with_snd_rate(u64::from(cur)),
    );
    conn.invoke().expect("invoke");
    conn.rate
}

fn gained(sample: u64) -> u32 {
    (sample / 1000 * STARTUP_RATE_PER_MILLE) as u32
}

#[test]
fn startup_rate_rises_per_ack_never_falls_and_ends_at_the_first_commanded_rate() {
    let (dp, outbox, sc) = bbr_flow();
    let (mut f, sid) = start(&dp, &outbox, &sc);
    // No RTT and no rate sample yet: no rate is set.
    assert_eq!(ack(&mut f, 0, 0), 0);
    assert_eq!(f.rate_calls, 0, "a zero Rate must not call set_rate");
    // First RTT sample: 2.856 x 10 packets / 20 ms (tcp_bbr.c bbr_init_pacing_rate_from_rtt).
    let init = (u64::from(10 * MSS) * STARTUP_RATE_PER_MILLE * 1000 / RTT_US) as u32;
    assert_eq!(ack(&mut f, 100_000, RTT_US), init);
    // A delivery rate whose gained value is above: the rate follows on this very ACK.
    assert_eq!(ack(&mut f, 1_000_000, RTT_US), gained(1_000_000));
    assert_eq!(ack(&mut f, 1_500_000, 0), gained(1_500_000));
    // A smaller sample does not lower it (Startup's rate never goes down).
    assert_eq!(ack(&mut f, 700_000, RTT_US), gained(1_500_000));
    // User space leaves Startup: its Drain rate holds, whatever the samples.
    let reg = sc.get("Rate").expect("Rate register").clone();
    let msg = serialize::update_field::Msg { sid, num_fields: 1, fields: vec![(reg, 600_000)] };
    send(&dp, serialize::serialize(&msg).unwrap());
    assert_eq!(ack(&mut f, 3_000_000, RTT_US), 600_000);
    assert_eq!(ack(&mut f, 3_000_000, RTT_US), 600_000, "the Startup block ended for good");
    drop(f);
}

