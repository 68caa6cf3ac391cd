//! The datapath's figures in one place ([`Stats`]): the summary line it
//! logs every 10 s and at exit (a fixed text other tools parse), and the
//! JSON object `--stats-file` writes at exit, both from the same values so
//! they cannot disagree.

use std::fmt;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Serialize, Serializer};

/// A duration kept in ns and shown in µs: `12.345` in the summary line and
/// a JSON number; `-` and `null` without a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Micros(pub Option<u64>);

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // integer formatting: no float logarithm may reach this binary (lib.rs)
        match self.0 {
            Some(ns) => write!(f, "{}.{:03}", ns / 1000, ns % 1000),
            None => f.write_str("-"),
        }
    }
}

impl Serialize for Micros {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            // exact to the ns: the summary line's 3 decimals as a number
            Some(ns) => s.serialize_f64(ns as f64 / 1000.0),
            None => s.serialize_none(),
        }
    }
}

/// Counters the BPF side keeps (`guard_fallbacks` adds the user-space
/// guard's under `--fold userspace`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BpfCounters {
    pub command_acks: u64,
    pub fallback_acks: u64,
    /// Of `fallback_acks`, those while the algorithm's answer to an RTO
    /// was awaited (within the control guard's bound).
    pub rto_await_acks: u64,
    pub guard_fallbacks: u64,
    pub cwnd_clamped: u64,
    pub rate_floored: u64,
    pub dropped_events: u64,
}

/// Messages that found Portus's queue full ([`crate::ipc::OutboxStats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OutboxCounters {
    pub deferred: u64,
    pub peak: u64,
    pub dropped: u64,
}

/// `--fold userspace`: user-space cost per ACK, decode to command, µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AckCost {
    pub mean: Micros,
    pub p50: Micros,
    pub p99: Micros,
}

/// A latency's median and 99th percentile, µs, and its sample count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Latency {
    pub p50: Micros,
    pub p99: Micros,
    pub n: u64,
}

/// `--fold kernel`: the in-kernel fold's counters (BPF side and
/// [`crate::fold::KernelFold`]); `compiled` / `interpreted` count the
/// programs the JIT took or declined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KernelFoldCounters {
    pub invocations: u64,
    pub compiled_runs: u64,
    pub aborted: u64,
    pub reports: u64,
    pub reports_dropped: u64,
    pub no_state_flows: u64,
    pub installs: u64,
    pub compiled: u64,
    pub interpreted: u64,
    pub staged: u64,
    pub refused: u64,
    pub evictions_refused: u64,
    pub replaced_unused: u64,
}

/// Everything the summary line shows. Serialized, it is the `--stats-file`
/// object (docs/datapath.md): the same names, nested as the line groups
/// them, counters as integers, µs as numbers or null.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Flows libccp was told of (`--fold userspace`).
    pub flows_created: u64,
    /// Flow ids the BPF side handed out.
    pub bpf_flow_ids: u64,
    /// Flows libccp runs now (`--fold userspace`).
    pub active: u64,
    /// Flows whose create or release record was lost and found again.
    pub resynced: u64,
    pub invokes: u64,
    pub commands: u64,
    pub skipped_invalid: u64,
    pub unknown_flow_acks: u64,
    /// Ring records that did not decode.
    pub bad_records: u64,
    /// Portus messages refused (parse errors, over libccp's limits, oversized).
    pub refused_msgs: u64,
    /// Datagrams from senders that are not trusted.
    pub untrusted_msgs: u64,
    pub bpf: BpfCounters,
    pub outbox: OutboxCounters,
    pub user_ack_cost_us: AckCost,
    /// Kernel event timestamp to command written into the map (`--fold userspace`).
    pub event_to_command_us: Latency,
    pub kernel_fold: KernelFoldCounters,
    /// Report timestamp to the first cwnd or rate staged after it (`--fold kernel`).
    pub report_to_cwnd_us: Latency,
}

impl fmt::Display for Stats {
    /// The summary line: `flows=N (bpf ids N) active=N ...`, one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Stats { bpf: b, outbox: o, user_ack_cost_us: c, event_to_command_us: e, kernel_fold: k, report_to_cwnd_us: r, .. } = self;
        write!(
            f,
            "flows={} (bpf ids {}) active={} resynced={} invokes={} commands={} skipped_invalid={} unknown_flow_acks={} ",
            self.flows_created,
            self.bpf_flow_ids,
            self.active,
            self.resynced,
            self.invokes,
            self.commands,
            self.skipped_invalid,
            self.unknown_flow_acks,
        )?;
        write!(
            f,
            "bpf: command_acks={} fallback_acks={} rto_await_acks={} guard_fallbacks={} cwnd_clamped={} rate_floored={} dropped_events={} ",
            b.command_acks, b.fallback_acks, b.rto_await_acks, b.guard_fallbacks, b.cwnd_clamped, b.rate_floored, b.dropped_events,
        )?;
        write!(f, "bad_records={} refused_msgs={} untrusted_msgs={} ", self.bad_records, self.refused_msgs, self.untrusted_msgs)?;
        write!(f, "outbox: deferred={} peak={} dropped={} ", o.deferred, o.peak, o.dropped)?;
        write!(f, "per-ACK user cost us: mean={} p50={} p99={}; ", c.mean, c.p50, c.p99)?;
        write!(f, "event->command us: p50={} p99={} (n={}) ", e.p50, e.p99, e.n)?;
        write!(
            f,
            "kernel fold: invocations={} compiled_runs={} aborted={} reports={} reports_dropped={} no_state_flows={} ",
            k.invocations, k.compiled_runs, k.aborted, k.reports, k.reports_dropped, k.no_state_flows,
        )?;
        write!(
            f,
            "installs={} compiled={} interpreted={} staged={} refused={} evictions_refused={} replaced_unused={} ",
            k.installs, k.compiled, k.interpreted, k.staged, k.refused, k.evictions_refused, k.replaced_unused,
        )?;
        write!(f, "report->cwnd us: p50={} p99={} (n={})", r.p50, r.p99, r.n)
    }
}

impl Stats {
    /// Write the JSON object to `path` atomically (a temporary file in the
    /// same directory, then a rename): a reader sees the whole file or none.
    ///
    /// Errors: the directory is missing or not writable.
    pub fn write_file(&self, path: &Path) -> Result<()> {
        let body = serde_json::to_vec_pretty(self)?;
        ccplab_util::fs::write_atomically(path, |w| w.write_all(&body))
            .with_context(|| format!("--stats-file {}: cannot write", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_keeps_its_text() {
        // the text other tools parse (experiments/ccplab/control.py): word
        // for word, with every figure distinct
        let s = Stats {
            flows_created: 1,
            bpf_flow_ids: 2,
            active: 3,
            resynced: 4,
            invokes: 5,
            commands: 6,
            skipped_invalid: 7,
            unknown_flow_acks: 8,
            bad_records: 15,
            refused_msgs: 16,
            untrusted_msgs: 17,
            bpf: BpfCounters {
                command_acks: 9,
                fallback_acks: 10,
                rto_await_acks: 43,
                guard_fallbacks: 11,
                cwnd_clamped: 12,
                rate_floored: 13,
                dropped_events: 14,
            },
            outbox: OutboxCounters { deferred: 18, peak: 19, dropped: 20 },
            user_ack_cost_us: AckCost { mean: Micros(Some(21_001)), p50: Micros(Some(22_020)), p99: Micros(Some(23)) },
            event_to_command_us: Latency { p50: Micros(Some(24_000)), p99: Micros(None), n: 26 },
            kernel_fold: KernelFoldCounters {
                invocations: 27,
                compiled_runs: 28,
                aborted: 29,
                reports: 30,
                reports_dropped: 31,
                no_state_flows: 32,
                installs: 33,
                compiled: 34,
                interpreted: 35,
                staged: 36,
                refused: 37,
                evictions_refused: 38,
                replaced_unused: 39,
            },
            report_to_cwnd_us: Latency { p50: Micros(Some(40_500)), p99: Micros(Some(41_999)), n: 42 },
        };
        assert_eq!(
            s.to_string(),
            "flows=1 (bpf ids 2) active=3 resynced=4 invokes=5 commands=6 skipped_invalid=7 unknown_flow_acks=8 \
             bpf: command_acks=9 fallback_acks=10 rto_await_acks=43 guard_fallbacks=11 cwnd_clamped=12 rate_floored=13 dropped_events=14 \
             bad_records=15 refused_msgs=16 untrusted_msgs=17 outbox: deferred=18 peak=19 dropped=20 \
             per-ACK user cost us: mean=21.001 p50=22.020 p99=0.023; event->command us: p50=24.000 p99=- (n=26) \
             kernel fold: invocations=27 compiled_runs=28 aborted=29 reports=30 reports_dropped=31 no_state_flows=32 \
             installs=33 compiled=34 interpreted=35 staged=36 refused=37 evictions_refused=38 replaced_unused=39 \
             report->cwnd us: p50=40.500 p99=41.999 (n=42)"
        );
    }

    #[test]
    fn micros_are_numbers_or_null_in_json() {
        assert_eq!(serde_json::to_string(&Micros(Some(1_500))).unwrap(), "1.5");
        assert_eq!(serde_json::to_string(&Micros(Some(7))).unwrap(), "0.007");
        assert_eq!(serde_json::to_string(&Micros(None)).unwrap(), "null");
    }
}
