//! The user-space half of `--fold kernel`: Portus's messages applied to
//! the kernel's program and staging maps ([`FoldMaps`]), the kernel's
//! report records turned into Portus measure messages, and the counters
//! the exit summary prints.

use std::collections::HashMap;

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use crate::stats::{monotonic_ns, Samples};

use super::isa::*;
use super::msg::{create_msg, measure_msg, unsupported, FoldMsgError, HDR_LEN};
use super::table::{Effect, FoldStaged, FoldTables, STAGED_CWND, STAGED_RATE};

/// A report record from the kernel (`struct fold_report`).
#[repr(C)]
#[derive(Clone, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct FoldReport {
    pub flow_id: u32,
    pub uid: u32,
    pub n_fields: u32,
    pub _pad: u32,
    pub ts_ns: u64,
    pub fields: [u64; MAX_REPORT as usize],
}

const _: () = assert!(std::mem::size_of::<FoldReport>() == 24 + 8 * MAX_REPORT as usize);

/// Fields a `struct fold_report_small` holds: the kernel sends a report of a
/// program with at most this many report fields in that shorter record.
pub const SMALL_REPORT: usize = 32;

/// The header both report records share (`struct fold_report` without its fields).
#[repr(C)]
#[derive(Clone, Debug, FromBytes, Immutable, KnownLayout)]
struct FoldReportHeader {
    flow_id: u32,
    uid: u32,
    n_fields: u32,
    /// 1: the flow reports several times per RTT (fold_ccp.h `fold_report_prompt`).
    prompt: u32,
    ts_ns: u64,
}

/// Whether a report record (`struct fold_report` or `fold_report_small`) comes from a flow that
/// reports several times per RTT: the daemon then looks for its next reports within
/// `--report-prompt-us` instead of the report window. False for a record too short to say.
pub fn report_is_prompt(record: &[u8]) -> bool {
    FoldReportHeader::read_from_prefix(record).is_ok_and(|(h, _)| h.prompt != 0)
}

/// Where [`KernelFold`] writes: the BPF side's program map and staging
/// (implemented over the loaded skeleton by the datapath, over the test
/// harness by tests/fold_differential.rs).
pub trait FoldMaps {
    /// Write `prog` at key `slot` of the program map (array of struct fold_prog).
    fn write_program(&mut self, slot: u32, prog: &FoldProg) -> Result<(), String>;
    /// Merge `delta` into flow `flow_id`'s staged updates (fold_stage_merge).
    fn stage(&mut self, flow_id: u32, delta: &FoldStaged) -> Result<(), String>;
}

/// Counters of [`KernelFold`].
#[derive(Debug, Default, Clone, Copy)]
pub struct KernelFoldStats {
    pub installs: u64,
    /// Installs refused because they would evict a live flow's program.
    pub evictions_refused: u64,
    /// Installs that took the slot of a program no live flow ran (table full).
    pub replaced_unused: u64,
    pub staged: u64,
    pub refused: u64,
    pub reports: u64,
    /// Report-to-cwnd latency, ns: from a report's kernel timestamp
    /// (`ts_ns`, CLOCK_MONOTONIC) to the moment the first cwnd or rate
    /// update for that flow after it was staged into the kernel maps; the
    /// nearest-rank median and 99th percentile over the last
    /// [`REPORT_TO_CWND_KEPT`] samples (None before the first), and how
    /// many samples there were in all.
    pub report_to_cwnd_p50_ns: Option<u64>,
    pub report_to_cwnd_p99_ns: Option<u64>,
    pub report_to_cwnd_n: u64,
}

/// Report-to-cwnd latency samples kept for the percentiles.
pub const REPORT_TO_CWND_KEPT: usize = 1 << 16;

/// The datapath's side of Portus's protocol when fold functions run in the
/// kernel: what libccp does in user space, minus the per-ACK invocation.
/// Socket ids are the BPF side's flow ids.
#[derive(Debug)]
pub struct KernelFold {
    tables: FoldTables,
    written: std::collections::BTreeSet<u32>,
    stats: KernelFoldStats,
    /// Per flow: `ts_ns` of its last report not yet answered by a cwnd or
    /// rate update (taken by the first such update, so a report counts once
    /// and updates Portus sends on its own timers are not measured).
    unanswered_report_ns: HashMap<u32, u64>,
    report_to_cwnd: Samples,
    /// CLOCK_MONOTONIC ns (a parameter so tests can drive time).
    clock: fn() -> u64,
}

impl Default for KernelFold {
    fn default() -> Self {
        Self::with_clock(monotonic_ns)
    }
}

impl KernelFold {
    /// As `default()`, reading time (CLOCK_MONOTONIC ns, the clock of the
    /// kernel's report timestamps) from `clock`.
    pub fn with_clock(clock: fn() -> u64) -> Self {
        KernelFold {
            tables: FoldTables::new(LIBCCP_MAX_PROGRAMS),
            written: Default::default(),
            stats: KernelFoldStats::default(),
            unanswered_report_ns: HashMap::new(),
            report_to_cwnd: Samples::new(REPORT_TO_CWND_KEPT),
            clock,
        }
    }

    /// As `default()`, with the program table's guard on
    /// ([`FoldTables::guarded`]): what the datapath runs.
    pub fn guarded() -> Self {
        KernelFold { tables: FoldTables::guarded(LIBCCP_MAX_PROGRAMS), ..Self::default() }
    }

    /// Installs refused so far because they would evict a live flow's program.
    pub fn evictions_refused(&self) -> u64 {
        self.tables.evictions_refused
    }

    /// A new algorithm appeared or the old one went away: the flows' programs
    /// are no longer protected from eviction ([`FoldTables::forget_bindings`]).
    pub fn algorithm_changed(&mut self) {
        self.tables.forget_bindings();
    }

    /// A flow switched to `ccp`: returns its create message for Portus
    /// (`init_cwnd` and `mss` in bytes; addresses and ports as the datapath
    /// keeps them; `cong_alg` the algorithm asked for).
    ///
    /// Errors: `cong_alg` longer than 63 bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn flow_created(
        &mut self,
        flow_id: u32,
        init_cwnd: u32,
        mss: u32,
        src: (u32, u32),
        dst: (u32, u32),
        cong_alg: &str,
    ) -> Result<Vec<u8>, FoldMsgError> {
        let msg = create_msg(
            flow_id, init_cwnd, mss, src.0, src.1, dst.0, dst.1, cong_alg,
        )?;
        self.tables.add_flow(flow_id);
        Ok(msg)
    }

    /// The flow is gone: returns its close message for Portus.
    pub fn flow_released(&mut self, flow_id: u32) -> Vec<u8> {
        self.tables.remove_flow(flow_id);
        self.unanswered_report_ns.remove(&flow_id);
        measure_msg(flow_id, 0, &[])
    }

    /// Handle one message from Portus: program installs go to the program
    /// map, field updates and program changes to the flow's staging.
    ///
    /// Errors: the message is refused (as libccp refuses it; what libccp
    /// applies before refusing is applied too), or a map write failed
    /// ([`FoldMsgError::Unsupported`] naming it).
    pub fn on_portus_msg(
        &mut self,
        buf: &[u8],
        maps: &mut dyn FoldMaps,
    ) -> Result<(), FoldMsgError> {
        let handled = self.tables.handle(buf);
        for e in &handled.effects {
            let r = match e {
                Effect::ClearPrograms => {
                    let empty = FoldProg::new_zeroed();
                    std::mem::take(&mut self.written)
                        .into_iter()
                        .try_for_each(|slot| maps.write_program(slot, &empty))
                }
                Effect::WriteProgram { slot, prog } => {
                    self.written.insert(*slot);
                    self.stats.installs += 1;
                    maps.write_program(*slot, prog)
                }
                Effect::EmptySlot { slot } => maps.write_program(*slot, &FoldProg::new_zeroed()),
                Effect::Stage { sid, delta } => {
                    self.stats.staged += 1;
                    let r = maps.stage(*sid, delta);
                    if r.is_ok() && delta.flags & (STAGED_CWND | STAGED_RATE) != 0 {
                        self.answered(*sid);
                    }
                    r
                }
            };
            r.map_err(|e| unsupported(format!("writing the kernel fold maps: {e}")))?;
        }
        if handled.result.is_err() {
            self.stats.refused += 1;
        }
        handled.result
    }

    /// The measure message for a report record from the kernel, and the
    /// flow it belongs to.
    ///
    /// Errors: the record is neither a `struct fold_report` nor a `struct
    /// fold_report_small` (wrong size), or claims more fields than it holds.
    pub fn report_msg(&mut self, record: &[u8]) -> Result<(u32, Vec<u8>), FoldMsgError> {
        const HEADER: usize = std::mem::size_of::<FoldReportHeader>();
        let capacity = match record.len().checked_sub(HEADER).map(|b| b / 8) {
            Some(n) if n == SMALL_REPORT || n == MAX_REPORT as usize => n,
            _ => {
                return Err(unsupported(format!(
                    "report record of {} bytes (struct fold_report has {}, fold_report_small {})",
                    record.len(),
                    std::mem::size_of::<FoldReport>(),
                    HEADER + 8 * SMALL_REPORT
                )))
            }
        };
        let (h, rest) = FoldReportHeader::read_from_prefix(record).expect("length checked");
        let n = h.n_fields as usize;
        if n > capacity {
            return Err(unsupported(format!("report record claims {n} fields and holds {capacity}")));
        }

        let fields: Vec<u64> = rest[..8 * n].chunks_exact(8).map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes"))).collect();
        self.stats.reports += 1;
        self.unanswered_report_ns.insert(h.flow_id, h.ts_ns);
        Ok((h.flow_id, measure_msg(h.flow_id, h.uid, &fields)))
    }

    /// [`KernelFold::report_msg`] for sending to Portus: a report without
    /// fields is refused, since Portus reads a measure without fields as the
    /// flow's close. A report of a program replaced under a running section
    /// (a new algorithm's first install clears the table) has none: Portus
    /// dropped the live flow it had just been told about. (libccp would send
    /// it; the differential tests compare [`KernelFold::report_msg`].)
    ///
    /// Errors: as [`KernelFold::report_msg`], or a report without fields.
    pub fn report_msg_for_portus(&mut self, record: &[u8]) -> Result<(u32, Vec<u8>), FoldMsgError> {
        let (flow, msg) = self.report_msg(record)?;
        // measure_msg: header, program uid, field count, fields
        if msg.len() <= HDR_LEN + 8 {
            return Err(unsupported(format!("report of flow {flow} without fields: Portus would take it for a close")));
        }
        Ok((flow, msg))
    }

    /// A cwnd or rate update for `flow` reached the kernel maps: one
    /// report-to-cwnd sample if a report of it is waiting for its answer.
    fn answered(&mut self, flow: u32) {
        if let Some(ts) = self.unanswered_report_ns.remove(&flow) {
            // a report stamped after our clock read (other CPU) counts as 0
            self.report_to_cwnd.push((self.clock)().saturating_sub(ts));
        }
    }

    /// The counters and the report-to-cwnd percentiles (see [`KernelFoldStats`]).
    pub fn stats(&self) -> KernelFoldStats {
        KernelFoldStats {
            report_to_cwnd_p50_ns: self.report_to_cwnd.percentile(50),
            report_to_cwnd_p99_ns: self.report_to_cwnd.percentile(99),
            report_to_cwnd_n: self.report_to_cwnd.count,
            evictions_refused: self.tables.evictions_refused,
            replaced_unused: self.tables.replaced_unused,
            ..self.stats
        }
    }
}
