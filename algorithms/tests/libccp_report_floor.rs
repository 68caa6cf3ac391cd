//! `--min-report-interval-us` in a real libccp 1.2 datapath (in-process):
//! cubic's program (four reports per RTT) at a 200 us RTT reports on every
//! ACK without a floor, and with a 10 ms floor only after 10 ms have passed
//! since the last report, never later than the first ACK after them; a loss
//! is still reported at once.
//!
//! This binary links libccp, whose exported `log` symbol shadows libm's: no
//! f64::ln here (FIELD-NOTES).

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
        conn.load_primitives(
            libccp::Primitives::default()
                .with_bytes_acked(MSS)
                .with_packets_acked(1)
                .with_lost_pkts_sample(lost)
                .with_rtt_sample_us(RTT_US)
                .with_packets_in_flight(10)
                .with_bytes_in_flight(10 * MSS)
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
