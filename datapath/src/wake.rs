//! When the main loop wakes up while it knows flows (`--fold kernel`).
//!
//! A report wakes the loop at once unless another report did so less than
//! `--report-wake-ms` ago (BPF `report_wake_flag`, ccp.bpf.c): a forced
//! ring-buffer wakeup costs 20-30 us of BPF time inside the ACK's program
//! here, so there are at most 1000 / report-wake-ms of them a second. A
//! flow reporting now and then (an application-limited flow, once a second)
//! is heard at once without any polling. The reports submitted in between
//! without a wakeup (many flows reporting) are looked for when they are due:
//! reports come at the cadence of the flow's fold program (`Cadence`, at
//! least `--min-report-interval-us` of the algorithm apart), so the loop
//! sleeps until the next report of any flow is due, plus [`SLACK`] for the
//! ACK that triggers it:
//!
//! - a flow whose next report is due at `last + interval`: until then + SLACK;
//! - a flow past its due time (a late report, an idle sender) or with fewer
//!   than two reports seen: nothing; its report wakes the loop itself, or
//!   comes with the next look for another flow's, or with the idle poll.
//!
//! The loop's timeout is the smallest over the flows, between [`MIN_POLL`]
//! and the idle poll (the liveness probe's period, which also keeps the
//! heartbeat fresh). Urgent reports and flow events wake the loop at once.
//!
//! Measured (datapath/README.md "Performance"): before the wakeups, with
//! a look every 1/64 of the interval while a report was late, a paced
//! one-flow run woke the daemon ~60 times a second for 1-4 reports.

use std::collections::HashMap;
use std::time::Duration;

/// The shortest poll timeout.
pub const MIN_POLL: Duration = Duration::from_millis(1);
/// Wait this long past a report's due time: it is submitted by the first
/// ACK after the interval, not at the interval itself.
pub const SLACK: Duration = Duration::from_millis(1);

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
    /// schedule but no longer known are ignored): until the earliest report
    /// still to come is due, + SLACK, between MIN_POLL and `idle`.
    pub fn timeout(&self, known: impl IntoIterator<Item = u32>, now_ns: u64, idle: Duration) -> Duration {
        let min = MIN_POLL.as_nanos() as u64;
        let idle_ns = (idle.as_nanos() as u64).max(min);
        let slack = SLACK.as_nanos() as u64;
        let t = known
            .into_iter()
            .filter_map(|flow| self.flows.get(&flow))
            .filter_map(|c| Some(c.last_ns + c.interval_ns? + slack))
            .filter(|&due| due > now_ns)
            .map(|due| due - now_ns)
            .min()
            .unwrap_or(idle_ns);
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
    fn without_a_known_cadence_only_the_idle_poll() {
        let mut s = ReportSchedule::default();
        assert_eq!(s.timeout([1], 100 * MS, IDLE), IDLE, "no report yet: its first one wakes the loop");
        s.report(1, 350 * MS);
        assert_eq!(s.timeout([1], 351 * MS, IDLE), IDLE, "one report: no interval yet");
    }

    #[test]
    fn sleeps_until_the_next_report_is_due_plus_slack() {
        let mut s = ReportSchedule::default();
        s.report(1, 100 * MS);
        s.report(1, 120 * MS); // every 20 ms
        assert_eq!(ms(s.timeout([1], 121 * MS, IDLE)), 20.0, "due at 140 ms, +1 ms slack, from 121 ms");
        assert_eq!(ms(s.timeout([1], 140 * MS, IDLE)), 1.0, "just before due + slack");
        assert_eq!(s.timeout([1], 141 * MS, IDLE), IDLE, "late: the report wakes the loop itself");
        s.report(1, 1000 * MS); // application-limited: a second later
        assert_eq!(s.timeout([1], 1001 * MS, IDLE), IDLE, "next due in 880 ms: the idle poll comes first");
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
        assert_eq!(s.timeout([2], 31 * MS, IDLE), IDLE, "a released flow's cadence is forgotten");
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
