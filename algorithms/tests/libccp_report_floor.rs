//! `--min-report-interval-us` in a real libccp 1.2 datapath (in-process):
//! cubic's program (four reports per RTT) at a 200 us RTT reports on every
//! ACK without a floor, and with a 10 ms floor only after 10 ms have passed
//! since the last report, never later than the first ACK after them; a loss
//! is still reported at once. A flow keeping in flight at or below half its
//! cwnd (application-limited) reports every `APP_LIMITED_REPORT_US` instead,
//! and at the regular cadence again as soon as it fills its cwnd.
//!
//! This binary links libccp, whose exported `log` symbol shadows libm's: no
//! f64::ln here (docs/NOTES.md, "libccp's `log` symbol").

mod common;
use common::{Conn, Outbox};
use portus::serialize::Msg;
use std::time::{Duration, Instant};

const MSS: u32 = 1448;
const RTT_US: u64 = 200;
const ACK_EVERY: Duration = Duration::from_millis(1);

/// The reports (measurement messages) in `outbox` since the last call.
fn reports(outbox: &Outbox) -> usize {
    let msgs = std::mem::take(&mut *outbox.0.lock().unwrap());
    msgs.iter().filter(|b| matches!(Msg::from_buf(b), Ok((Msg::Ms(_), _)))).count()
}

/// Runs `acks` ACKs 1 ms apart (an RTT sample of 200 us each) on cubic's
/// program with `floor_us`; checks every report against the floor, then one
/// ACK with a loss. Returns the number of regular reports and the time the
/// ACKs took.
fn run(floor_us: u64, acks: u32) -> (usize, Duration) {
    let text = ccp_algorithms::cubic::PROGRAM.text_with_report_floor(floor_us);
    let (dp, outbox, sc) = common::datapath_with_program(&text);
    let (mut conn, _) = common::start_flow(&dp, &outbox, &sc, Conn { cwnd: 10 * MSS }, MSS, "cubic");
    let mut ack = |lost: u32| -> (Instant, Instant, usize) {
        let cwnd = conn.cwnd;
        // cwnd-limited: the whole cwnd in flight
        conn.load_primitives(
            libccp::Primitives::default()
                .with_bytes_acked(MSS)
                .with_packets_acked(1)
                .with_lost_pkts_sample(lost)
                .with_rtt_sample_us(RTT_US)
                .with_packets_in_flight(cwnd / MSS)
                .with_bytes_in_flight(cwnd)
                .with_snd_cwnd(cwnd),
        );
        let before = Instant::now();
        conn.invoke().expect("invoke");
        (before, Instant::now(), reports(&outbox))
    };
    let floor = Duration::from_micros(floor_us);
    let (start, mut last_after, _) = ack(0); // Micros starts here
    let mut last_before = Instant::now();
    let mut n = 0;
    for i in 1..acks {
        std::thread::sleep(ACK_EVERY);
        let (before, after, seen) = ack(0);
        assert!(seen <= 1, "ACK {i}: {seen} reports");
        if seen == 0 {
            // Micros <= max(RTT/4, floor) at evaluation (+1 us of truncation).
            assert!(before - last_after <= floor.max(Duration::from_micros(RTT_US / 4)) + Duration::from_micros(1),
                    "ACK {i}: floor {floor_us} us: a report is overdue");
            continue;
        }
        if n > 0 {
            assert!(after - last_before > floor, "ACK {i}: report before the {floor_us} us floor passed");
        }
        (last_before, last_after) = (before, after);
        n += 1;
    }
    let took = last_after.max(Instant::now()) - start;
    assert_eq!(ack(2).2, 1, "floor {floor_us} us: a loss is reported at once");
    (n, took)
}

#[test]
fn cubic_reports_per_ack_at_a_short_rtt_and_at_the_floor_with_one() {
    let acks = 60;
    let (without, _) = run(0, acks);
    assert!(without + 1 >= acks as usize, "no floor: a report on (nearly) every ACK, got {without} of {acks}");
    let (with, took) = run(10_000, acks);
    // 60 ACKs 1+ ms apart: at most one report per 10 ms of them (each checked above).
    assert!(with >= 2 && with as f64 <= took.as_secs_f64() / 0.010,
            "10 ms floor over {took:?}: got {with} reports");
}

/// Reports of cubic's program with a 10 ms floor over `acks` ACKs 1+ ms
/// apart, with `in_flight(i)` packets in flight at ACK i (cwnd as the program
/// sets it): (ACK index, ms since the first ACK) of each, the time of each
/// ACK, and the reports of one more ACK carrying a loss.
fn report_times(acks: u32, in_flight: impl Fn(u32) -> u32) -> (Vec<(u32, u64)>, Vec<u64>, usize) {
    let text = ccp_algorithms::cubic::PROGRAM.text_with_report_floor(10_000);
    let (dp, outbox, sc) = common::datapath_with_program(&text);
    let (mut conn, _) = common::start_flow(&dp, &outbox, &sc, Conn { cwnd: 40 * MSS }, MSS, "cubic");
    let mut ack = |pkts: u32, lost: u32| -> usize {
        let cwnd = conn.cwnd;
        conn.load_primitives(
            libccp::Primitives::default()
                .with_bytes_acked(MSS)
                .with_packets_acked(1)
                .with_lost_pkts_sample(lost)
                .with_rtt_sample_us(RTT_US)
                .with_packets_in_flight(pkts)
                .with_bytes_in_flight(pkts * MSS)
                .with_snd_cwnd(cwnd),
        );
        conn.invoke().expect("invoke");
        reports(&outbox)
    };
    let start = Instant::now();
    let (mut reports_at, mut acked_at) = (vec![], vec![]);
    for i in 0..acks {
        let n = ack(in_flight(i), 0);
        let t = start.elapsed().as_millis() as u64;
        acked_at.push(t);
        if n > 0 {
            reports_at.push((i, t));
        }
        std::thread::sleep(ACK_EVERY);
    }
    let loss = ack(in_flight(acks), 3);
    (reports_at, acked_at, loss)
}

#[test]
fn an_application_limited_flow_reports_rarely_until_it_fills_its_cwnd() {
    let slow_ms = ccp_algorithms::fold::APP_LIMITED_REPORT_US / 1000;
    // 2 packets in flight against a cwnd of 40 (and growing in slow start):
    // far from cwnd-limited for 2.5 back-off intervals of 1+ ms ACKs (two
    // gaps to check), then the whole cwnd in flight for 150 ACKs.
    let switch = (slow_ms * 5 / 2) as u32;
    let (reports_at, acked_at, loss) = report_times(switch + 150, |i| if i < switch { 2 } else { 1000 });
    let (idle, busy): (Vec<_>, Vec<_>) = reports_at.iter().map(|&(i, t)| (i, t)).partition(|&(i, _)| i < switch);
    let switch_ms = acked_at[switch as usize];
    let idle_ms: Vec<u64> = idle.iter().map(|&(_, t)| t).collect();
    assert!(idle_ms.len() >= 2 && idle_ms.len() as u64 <= switch_ms / slow_ms + 1, "app-limited: {idle_ms:?}");
    for w in idle_ms.windows(2) {
        assert!(w[1] - w[0] >= slow_ms, "app-limited reports {slow_ms} ms apart: {idle_ms:?}");
    }
    // cwnd-limited from ACK `switch`: back to the 10 ms floor at once
    let busy_ms: Vec<u64> = busy.iter().map(|&(_, t)| t).collect();
    assert!(busy_ms.first().is_some_and(|&t| t <= switch_ms + 15), "first cwnd-limited report late ({switch_ms} ms): {busy_ms:?}");
    let per_10ms = (acked_at[acked_at.len() - 1] - switch_ms) / 10;
    assert!(busy_ms.len() as u64 + 2 >= per_10ms, "cwnd-limited: about one report per 10 ms, got {busy_ms:?}");
    assert_eq!(loss, 1, "a loss is reported at once, app-limited or not");
}
