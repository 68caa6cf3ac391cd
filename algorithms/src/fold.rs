//! The fold programs the algorithms install in the datapath, and the code that
//! turns their reports into [`Measurement`]s.
//!
//! Language limits respected (FIELD-NOTES, libccp 1.2 / Portus 0.9): binary
//! operators only, no `>=`/`<=`, expressions at most 3 deep (libccp has 8 tmp
//! registers), no `#` comments anywhere in the program text (a comment inside a
//! `when` body panics the compiler), no subtraction or division (an underflow or
//! a division by zero silently aborts the whole invocation), and `(report)` is
//! followed by `(:= Micros 0)` because it does not reset the timer.

use crate::window::Measurement;
use portus::lang::Scope;
use portus::Report;

/// Name under which [`PER_RTT_FOLD`] is installed (the key of
/// `CongAlg::datapath_programs`).
pub const PER_RTT_PROGRAM: &str = "ccplab_per_rtt";

/// Initial report interval in microseconds, used until the first RTT sample.
pub const INITIAL_REPORT_INTERVAL_US: u64 = 10_000;

/// Fold program: one report per RTT, and at once (urgent) on loss or timeout.
///
/// Per ACK it accumulates, into volatile Report fields (reset after each report):
/// - `acked`: bytes cumulatively acknowledged (sum of `Ack.bytes_acked`),
/// - `sacked`: packets SACKed/misordered (sum of `Ack.packets_misordered`),
/// - `loss`: packets marked lost (sum of `Ack.lost_pkts_sample`),
/// - `timeout`: `Flow.was_timeout` seen on any ACK,
/// - `rtt`: the latest nonzero `Flow.rtt_sample_us` (0 = none),
/// - `minrtt`: the smallest nonzero RTT sample (+infinity = none),
/// - `inflight`: `Flow.packets_in_flight` at the last ACK,
/// - `cwnd`: the datapath's `Cwnd` (bytes) at the last ACK.
///
/// The control register `reportIntervalUs` holds the latest nonzero RTT sample
/// (initially [`INITIAL_REPORT_INTERVAL_US`]); a report is sent on the first ACK
/// after `Micros` exceeds it. The second `when` sends the urgent report; it has
/// no `(fallthrough)`, so an ACK never produces two reports.
pub const PER_RTT_FOLD: &str = "\
(def
    (Report
        (volatile acked 0)
        (volatile sacked 0)
        (volatile loss 0)
        (volatile timeout false)
        (volatile rtt 0)
        (volatile minrtt +infinity)
        (volatile inflight 0)
        (volatile cwnd 0)
    )
    (reportIntervalUs 10000)
)
(when true
    (:= Report.acked (+ Report.acked Ack.bytes_acked))
    (:= Report.sacked (+ Report.sacked Ack.packets_misordered))
    (:= Report.loss (+ Report.loss Ack.lost_pkts_sample))
    (:= Report.timeout (|| Report.timeout Flow.was_timeout))
    (:= Report.rtt (if (> Flow.rtt_sample_us 0) Flow.rtt_sample_us))
    (:= Report.minrtt (if (&& (> Flow.rtt_sample_us 0) (< Flow.rtt_sample_us Report.minrtt)) Flow.rtt_sample_us))
    (:= reportIntervalUs (if (> Flow.rtt_sample_us 0) Flow.rtt_sample_us))
    (:= Report.inflight Flow.packets_in_flight)
    (:= Report.cwnd Cwnd)
    (fallthrough)
)
(when (|| Report.timeout (> Report.loss 0))
    (report)
    (:= Micros 0)
)
(when (> Micros reportIntervalUs)
    (report)
    (:= Micros 0)
)
";

/// The Report fields of [`PER_RTT_FOLD`], in the order [`read_measurement`] reads them.
pub const REPORT_FIELDS: [&str; 8] = [
    "Report.acked",
    "Report.sacked",
    "Report.loss",
    "Report.timeout",
    "Report.rtt",
    "Report.minrtt",
    "Report.inflight",
    "Report.cwnd",
];

/// Values at or above this are "+infinity" (libccp sends +infinity as u32::MAX
/// or u64::MAX depending on the path).
const INFINITY_THRESHOLD: u64 = u32::MAX as u64;

/// Convert the raw Report field values (in [`REPORT_FIELDS`] order) of
/// [`PER_RTT_FOLD`] into a [`Measurement`] stamped with `now_us`.
pub fn measurement_from_fields(values: [u64; 8], now_us: u64) -> Measurement {
    let [acked, sacked, loss, timeout, rtt, minrtt, inflight, cwnd] = values;
    Measurement {
        now_us,
        acked_bytes: acked,
        sacked_pkts: sacked,
        lost_pkts: loss,
        timeout: timeout != 0,
        rtt_us: rtt,
        min_rtt_us: if minrtt >= INFINITY_THRESHOLD { 0 } else { minrtt },
        inflight_pkts: inflight,
        dp_cwnd_bytes: cwnd,
    }
}

/// Read a Portus report of [`PER_RTT_FOLD`] (installed with scope `sc`).
///
/// Errors: the report comes from another program (stale uid) or lacks a field.
pub fn read_measurement(report: &Report, sc: &Scope, now_us: u64) -> portus::Result<Measurement> {
    let mut values = [0u64; 8];
    for (v, name) in values.iter_mut().zip(REPORT_FIELDS) {
        *v = report.get_field(name, sc)?;
    }
    Ok(measurement_from_fields(values, now_us))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_compiles_and_declares_every_report_field() {
        let (bin, sc) = portus::lang::compile(PER_RTT_FOLD.as_bytes(), &[]).expect("compiles");
        assert_eq!(bin.events.len(), 3);
        for f in REPORT_FIELDS {
            assert!(
                matches!(sc.get(f), Some(portus::lang::Reg::Report(..))),
                "{f} is not a report register"
            );
        }
        // The control register starts at INITIAL_REPORT_INTERVAL_US.
        assert!(PER_RTT_FOLD.contains(&format!("(reportIntervalUs {INITIAL_REPORT_INTERVAL_US})")));
        assert!(!PER_RTT_FOLD.contains('#'), "no comments in fold text");
    }

    #[test]
    fn infinite_minrtt_means_no_sample() {
        let m = measurement_from_fields([1, 2, 3, 1, 5, u64::MAX, 7, 8], 9);
        assert_eq!(m.min_rtt_us, 0);
        assert!(m.timeout);
        assert_eq!((m.acked_bytes, m.sacked_pkts, m.lost_pkts), (1, 2, 3));
        assert_eq!((m.rtt_us, m.inflight_pkts, m.dp_cwnd_bytes, m.now_us), (5, 7, 8, 9));
        let m = measurement_from_fields([0, 0, 0, 0, 0, 4_294_967_295, 0, 0], 0);
        assert_eq!(m.min_rtt_us, 0);
    }
}
