//! The fold program runs in a real libccp 1.2 datapath (in-process): libccp
//! accepts the install, and the reports arrive once per RTT and at once on loss
//! or timeout, with the accumulated fields.
//!
//! This binary links libccp, whose exported `log` symbol shadows libm's: no
//! f64::ln here (docs/NOTES.md, "libccp's `log` symbol").

mod common;
use common::{Conn, Outbox};
use ccp_algorithms::fold::REPORT_FIELDS;
use portus::lang::{Reg, Scope};
use portus::serialize::Msg;
use std::time::{Duration, Instant};

const RTT_US: u64 = 20_000;
const MSS: u32 = 1448;


impl Outbox {
    fn take(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}


/// A decoded measurement message: field name -> value.
#[derive(Debug)]
struct Seen {
    fields: std::collections::HashMap<&'static str, u64>,
}

fn decode_reports(msgs: Vec<Vec<u8>>, sc: &Scope) -> Vec<Seen> {
    let mut out = vec![];
    for buf in msgs {
        if let Ok((Msg::Ms(m), _)) = Msg::from_buf(&buf) {
            assert_eq!(m.program_uid, sc.program_uid, "report of the installed program");
            let mut fields = std::collections::HashMap::new();
            for name in REPORT_FIELDS {
                let Some(Reg::Report(idx, _, _)) = sc.get(name) else {
                    panic!("{name} is not a report register")
                };
                fields.insert(name, m.fields[*idx as usize]);
            }
            out.push(Seen { fields });
        }
    }
    out
}


#[test]
fn fold_reports_once_per_rtt_and_at_once_on_loss_or_timeout() {
    let text = ccp_algorithms::vegas::PROGRAM.text(); // one report per RTT
    let (dp, outbox, sc) = common::datapath_with_program(&text);
    let (mut conn, _) = common::start_flow(&dp, &outbox, &sc, Conn { cwnd: 10 * MSS }, MSS, "reno");
    outbox.take(); // libccp's create message: only reports from here on

    // Scripted ACKs every 2 ms; an RTT sample on every other ACK (0 = none).
    let mut invoke = |i: u32, lost: u32, timeout: bool| -> (Instant, Instant, Vec<Seen>) {
        let rtt = if i % 2 == 0 { RTT_US } else { 0 };
        let rtt = if i == 4 { RTT_US + 5_000 } else { rtt };
        let cwnd = conn.cwnd;
        conn.load_primitives(
            libccp::Primitives::default()
                .with_bytes_acked(MSS)
                .with_packets_acked(1)
                .with_packets_misordered(i % 3)
                .with_lost_pkts_sample(lost)
                .with_was_timeout(timeout)
                .with_rtt_sample_us(rtt)
                .with_packets_in_flight(7 + i)
                .with_snd_cwnd(cwnd),
        );
        let before = Instant::now();
        conn.invoke().expect("invoke");
        let after = Instant::now();
        (before, after, decode_reports(outbox.take(), &sc))
    };

    let rtt = Duration::from_micros(RTT_US);
    // The program (and Micros) start at the first invoke.
    let (mut last_before, mut last_after, first) = invoke(0, 0, false);
    assert!(first.is_empty(), "no report on the first ACK");
    let (mut acked, mut sacked) = (MSS as u64, 0u64);
    // packets_acked 1 + packets_misordered (0 on the first ACK) per ACK
    let mut delivered = 1u64;
    let (mut acks, mut samples) = (1u64, 1u64);
    let mut reports = 0;
    for i in 1..40u32 {
        std::thread::sleep(Duration::from_millis(2));
        let (before, after, seen) = invoke(i, 0, false);
        acked += u64::from(MSS);
        sacked += u64::from(i % 3);
        delivered += 1 + u64::from(i % 3);
        acks += 1;
        samples += u64::from(i % 2 == 0);
        let inflight = u64::from(7 + i);
        if seen.is_empty() {
            // Micros <= RTT at evaluation, so at most an RTT (+1 us of Micros
            // truncation) can have passed since the reset.
            assert!(before - last_after <= rtt + Duration::from_micros(1), "ACK {i}: a report is overdue");
            continue;
        }
        assert_eq!(seen.len(), 1, "one report per ACK at most");
        let f = &seen[0].fields;
        assert!(after - last_before > rtt, "ACK {i}: report before one RTT passed");
        assert_eq!(f["Report.acked"], acked, "acked bytes accumulate");
        assert_eq!(f["Report.sacked"], sacked, "misordered packets accumulate");
        assert_eq!(f["Report.loss"], 0, "no loss, no RTO mark");
        assert_eq!(f["Report.delivered"], delivered, "acked + misordered packets accumulate");
        assert_eq!(f["Report.rtt"], RTT_US, "latest nonzero RTT sample");
        let min_expected = RTT_US; // samples are RTT_US (and RTT_US + 5 ms once)
        assert_eq!(f["Report.minrtt"], min_expected);
        assert_eq!(f["Report.inflight"], inflight);
        assert_eq!(f["Report.cwnd"], u64::from(10 * MSS));
        // In flight before the last ACK (it acked 1 packet): the largest of the report.
        assert_eq!(f["Report.inflmax"], inflight + 1);
        assert_eq!(f["Report.acks"], acks, "one count per invocation");
        assert_eq!(f["Report.nrtt"], samples, "RTT samples counted");
        assert_eq!(f["Report.rtt8"], RTT_US, "min of the first 8 samples");
        // ACKs 2 ms + apart: the ACK train breaks at once (gap > 2 ms).
        assert_eq!(f["Report.train"], 0);
        (acked, sacked, delivered) = (0, 0, 0);
        (acks, samples) = (0, 0);
        (last_before, last_after) = (before, after);
        reports += 1;
    }
    assert!(reports >= 2, "about one report per 20 ms over 80 ms, got {reports}");

    // A loss is reported on the very ACK that carries it, with the totals so far.
    let (_, _, seen) = invoke(100, 2, false);
    assert_eq!(seen.len(), 1, "urgent report on loss");
    assert_eq!(seen[0].fields["Report.loss"], 2, "2 lost, no RTO mark");
    assert_eq!(seen[0].fields["Report.acked"], acked + u64::from(MSS));

    // The next ACK without loss does not report (Micros was reset)...
    let (_, _, seen) = invoke(102, 0, false);
    assert!(seen.is_empty());
    // ...and a timeout is reported at once too.
    let (_, _, seen) = invoke(104, 0, true);
    assert_eq!(seen.len(), 1, "urgent report on timeout");
    assert_eq!(seen[0].fields["Report.loss"], ccp_algorithms::fold::TIMEOUT_MARK, "an RTO adds its mark to loss");
    let m = ccp_algorithms::fold::measurement_from_fields(
        std::array::from_fn(|k| seen[0].fields[REPORT_FIELDS[k]]),
        0,
    );
    assert!(m.timeout && m.lost_pkts == 0, "decoded: a timeout, no lost packets");
    assert_eq!(seen[0].fields["Report.acked"], 2 * u64::from(MSS));

    drop(conn);
    drop(dp);
}
