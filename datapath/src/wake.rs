//! When the main loop wakes up while it knows flows (`--fold kernel`).
//!
//! Non-urgent reports are submitted to the report ring without a wakeup (a
//! forced ring-buffer wakeup costs about 25 us of BPF time per report here,
//! inside the ACK's program), so the loop has to look for them itself. Each
//! wakeup costs about 45 us of CPU in this VM (docs/NOTES.md), so a fixed
//! 1 ms poll alone costs 4.5% of a core. Reports come at the cadence of the
//! flow's fold program (`Cadence`, at least `--min-report-interval-us` of the
//! algorithm apart), so the loop can sleep until the next report of any flow
//! is due, plus [`SLACK`] for the ACK that triggers it:
//!
//! - a flow with fewer than two reports seen (cadence unknown): [`MIN_POLL`],
//!   as before this schedule, for [`UNKNOWN_GRACE`] after it was first seen
//!   or last reported, then as idle: `iperf3 -C ccp` also gives its control
//!   connection and the receiver's sockets the `ccp` CA, flows that never
//!   report, and they would keep the 1 ms poll for their whole life;
//! - a flow whose next report is due at `last + interval`: until then + SLACK;
//! - a report overdue (by up to [`OVERDUE_INTERVALS`] intervals): every
//!   interval / [`OVERDUE_POLLS_PER_INTERVAL`], at least MIN_POLL, so a late
//!   report waits at most 1/64 of the flow's own report interval: every
//!   millisecond for the per-RTT reports of paths up to 64 ms, every 16 ms
//!   for an application-limited flow reporting once a second (whose late
//!   reports kept a 1 ms poll for up to 3 s: most of the daemon's CPU in a
//!   paced one-flow run, datapath/README.md "Performance");
//! - a flow silent for longer (an idle sender): once per interval.
//!
//! The loop's timeout is the smallest over the flows, between MIN_POLL and
//! the idle poll (the liveness probe's period, which also keeps the heartbeat
//! fresh). Urgent reports and flow events wake the loop at once anyway.

use std::collections::HashMap;
use std::time::Duration;

/// The shortest poll timeout (the timeout of the loop before this schedule).
pub const MIN_POLL: Duration = Duration::from_millis(1);
/// Wait this long past a report's due time: it is submitted by the first
/// ACK after the interval, not at the interval itself.
pub const SLACK: Duration = Duration::from_millis(1);
/// After this many intervals without the report, the flow counts as idle.
pub const OVERDUE_INTERVALS: u64 = 4;
/// While a report is overdue, look this many times per report interval.
pub const OVERDUE_POLLS_PER_INTERVAL: u64 = 64;
/// How long a flow of unknown cadence is polled for every [`MIN_POLL`].
pub const UNKNOWN_GRACE: Duration = Duration::from_millis(200);

/// Per flow: CLOCK_MONOTONIC ns of its last report (the record's kernel
/// timestamp; before its first report, when the schedule first saw the
/// flow) and the latest interval between two of its reports.
#[derive(Debug, Default)]
pub struct ReportSchedule {
    flows: HashMap<u32, Cadence>,
}

#[derive(Debug, Clone, Copy)]
struct Cadence {
    /// Last report's timestamp, or when first seen (`reported` false).
    last_ns: u64,
    reported: bool,
    interval_ns: Option<u64>,
}

impl ReportSchedule {
    /// A report of `flow` stamped `ts_ns` (its record's `ts_ns`) arrived.
    pub fn report(&mut self, flow: u32, ts_ns: u64) {
        let e = self.flows.entry(flow).or_insert(Cadence { last_ns: ts_ns, reported: false, interval_ns: None });
        if !e.reported {
            *e = Cadence { last_ns: ts_ns, reported: true, interval_ns: None };
        } else if ts_ns > e.last_ns {
            *e = Cadence { last_ns: ts_ns, reported: true, interval_ns: Some(ts_ns - e.last_ns) };
        }
    }

    /// `flow` is gone.
    pub fn released(&mut self, flow: u32) {
        self.flows.remove(&flow);
    }

    /// Poll timeout at `now_ns` for `known` flows (reports of flows in the
    /// schedule but no longer known are ignored), at most `idle`. A known
    /// flow the schedule has not seen yet is noted as first seen now.
    pub fn timeout(&mut self, known: impl IntoIterator<Item = u32>, now_ns: u64, idle: Duration) -> Duration {
        let min = MIN_POLL.as_nanos() as u64;
        let idle_ns = (idle.as_nanos() as u64).max(min);
        let grace = UNKNOWN_GRACE.as_nanos() as u64;
        let mut t = idle_ns;
        for flow in known {
            let seen = Cadence { last_ns: now_ns, reported: false, interval_ns: None };
            let wait = match *self.flows.entry(flow).or_insert(seen) {
                Cadence { last_ns: last, interval_ns: None, .. } if now_ns < last + grace => min,
                Cadence { interval_ns: None, .. } => idle_ns,
                Cadence { last_ns: last, interval_ns: Some(interval), .. } => {
                    let due = last + interval + SLACK.as_nanos() as u64;
                    if now_ns < due {
                        due - now_ns
                    } else if now_ns < last + OVERDUE_INTERVALS * interval {
                        interval / OVERDUE_POLLS_PER_INTERVAL
                    } else {
                        interval
                    }
                }
            };
            t = t.min(wait);
        }
        Duration::from_nanos(t.clamp(min, idle_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const IDLE: Duration = Duration::from_millis(50);

    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1e3
    }

    #[test]
    fn unknown_cadence_polls_every_millisecond_for_a_while() {
        let mut s = ReportSchedule::default();
        assert_eq!(s.timeout([1], 100 * MS, IDLE), MIN_POLL, "no report yet");
        assert_eq!(s.timeout([1], 299 * MS, IDLE), MIN_POLL, "no report, seen 199 ms ago");
        assert_eq!(s.timeout([1], 300 * MS, IDLE), IDLE, "a flow that never reports: idle poll");
        s.report(1, 350 * MS);
        assert_eq!(s.timeout([1], 351 * MS, IDLE), MIN_POLL, "one report: no interval yet");
        assert_eq!(s.timeout([1], 551 * MS, IDLE), IDLE, "and no second one for 200 ms");
    }

    #[test]
    fn sleeps_until_the_next_report_is_due_plus_slack() {
        let mut s = ReportSchedule::default();
        s.report(1, 100 * MS);
        s.report(1, 120 * MS); // every 20 ms
        assert_eq!(ms(s.timeout([1], 121 * MS, IDLE)), 20.0, "due at 140 ms, +1 ms slack, from 121 ms");
        assert_eq!(s.timeout([1], 141 * MS, IDLE), MIN_POLL, "overdue: look every millisecond");
        assert_eq!(ms(s.timeout([1], 200 * MS, IDLE)), 20.0, "silent for 4 intervals: once per interval");
    }

    #[test]
    fn an_overdue_report_waits_at_most_a_64th_of_its_interval() {
        let mut s = ReportSchedule::default();
        s.report(1, 0);
        s.report(1, 1000 * MS); // application-limited: once a second
        assert_eq!(ms(s.timeout([1], 1001 * MS, IDLE)), 50.0, "not due yet: the idle poll");
        assert_eq!(ms(s.timeout([1], 2002 * MS, IDLE)), 15.625, "overdue: every 1000/64 ms, not every 1 ms");
        s.report(2, 0);
        s.report(2, 100 * MS); // per RTT on a 100 ms path
        assert_eq!(ms(s.timeout([2], 202 * MS, IDLE)), 1.5625, "overdue: a 64th of 100 ms");
        s.report(3, 0);
        s.report(3, 40 * MS); // per RTT on a 40 ms path
        assert_eq!(s.timeout([3], 82 * MS, IDLE), MIN_POLL, "never below the minimum poll");
    }

    #[test]
    fn the_earliest_flow_decides_within_the_bounds() {
        let mut s = ReportSchedule::default();
        s.report(1, 0);
        s.report(1, 30 * MS); // every 30 ms: due at 60 ms
        s.report(2, 20 * MS);
        s.report(2, 30 * MS); // every 10 ms: due at 40 ms
        assert_eq!(ms(s.timeout([1, 2], 31 * MS, IDLE)), 10.0, "flow 2 due at 40 ms + slack");
        assert_eq!(ms(s.timeout([1], 31 * MS, IDLE)), 30.0, "flow 2 not known any more");
        assert_eq!(ms(s.timeout([1], 31 * MS, Duration::from_millis(5))), 5.0, "never past the idle poll");
        s.report(3, 30 * MS);
        s.report(3, 30 * MS + 50_000); // a report per ACK at a 50 us RTT
        assert_eq!(s.timeout([1, 3], 31 * MS, IDLE), MIN_POLL, "never below the minimum poll");
        s.released(2);
        assert_eq!(s.timeout([2], 31 * MS, IDLE), MIN_POLL, "a released flow's cadence is forgotten");
    }

    #[test]
    fn a_late_or_reordered_stamp_does_not_break_the_interval() {
        let mut s = ReportSchedule::default();
        s.report(1, 10 * MS);
        s.report(1, 5 * MS); // an older record consumed late
        s.report(1, 30 * MS);
        assert_eq!(ms(s.timeout([1], 30 * MS, IDLE)), 21.0);
    }
}
