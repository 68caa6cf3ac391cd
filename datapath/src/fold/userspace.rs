//! The fold engine: libccp (crate `libccp` 1.2) runs the datapath programs
//! (fold functions) that the Portus algorithm installed, one libccp
//! Connection per flow, invoked with each ACK's primitives. libccp's
//! set_cwnd / set_rate_abs callbacks are recorded and turned into
//! [`Command`]s for the BPF side.
//!
//! IPC is not done here: outgoing libccp messages go to a [`MsgSink`],
//! incoming ones are handed to [`FoldEngine::recv_msg`].
//!
//! The control guard, as the BPF side's in `--fold kernel` (datapath docs,
//! "never frozen"): a flow the algorithm has not commanded (no update or
//! program change addressed to its libccp socket id) for max(16 x SRTT,
//! the guard's floor) while commands of its are applied is taken: its
//! command leaves the map, so the kernel's cubic runs it, and it is handed
//! back once the algorithm addresses it again and its program's cwnd (other
//! than the fallback's) or a rate follows ([`GuardEvent`]).

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;

use anyhow::{anyhow, Result};
use libccp::{CongestionOps, Connection, Datapath, DatapathBuilder, DatapathOps, FlowInfo, Primitives};

use crate::primitives::{compute, hold_rtt, sample_valid, Baseline, Prims};
use crate::wire::{AckSample, Command, FlowCreated};

/// Where libccp's outgoing messages go (the Portus socket).
pub trait MsgSink {
    /// Send one message; false if it was not delivered.
    fn send(&mut self, msg: &[u8]) -> bool;
}

impl MsgSink for crate::ipc::PortusSender {
    fn send(&mut self, msg: &[u8]) -> bool {
        crate::ipc::PortusSender::send(self, msg)
    }
}

/// libccp / Portus message types (libccp's ccp_priv.h): a flow's create
/// message (datapath to Portus), field updates and program changes.
const CREATE_MSG: u16 = 0;
const UPDATE_FIELD_MSG: u16 = 3;
const CHANGE_PROG_MSG: u16 = 4;

/// The guard's bound in SRTTs (as ccp.bpf.c's CTL_GUARD_RTTS).
const GUARD_RTTS: u64 = 16;

/// (type, socket id) of a libccp message: its header is u16 type, u16 length, u32 socket id.
fn msg_header(msg: &[u8]) -> Option<(u16, u32)> {
    (msg.len() >= 8).then(|| (u16::from_ne_bytes([msg[0], msg[1]]), u32::from_ne_bytes([msg[4], msg[5], msg[6], msg[7]])))
}

/// What the control guard did to a flow on one ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardEvent {
    /// Taken (its command must leave the map): `bound_ns`, and whether its
    /// program failed on its last invocation (aborting, or no program).
    Took { flow_id: u32, bound_ns: u64, program_failing: bool },
    /// The algorithm commands it again.
    Resumed { flow_id: u32 },
}

/// If a flow's create message could not be delivered (Portus not up yet),
/// re-announce the flow this often (ns).
const CREATE_RETRY_NS: u64 = 1_000_000_000;

struct Ops {
    sink: Box<dyn MsgSink>,
    /// Set when a send fails: the libccp shim always reports success to C,
    /// so this is how we learn that a create message was lost.
    send_failed: Rc<Cell<bool>>,
    /// The socket id of the last create message sent: the flow libccp just
    /// started is addressed by it.
    created_sid: Rc<Cell<Option<u32>>>,
}

impl DatapathOps for Ops {
    fn send_msg(&mut self, msg: &[u8]) {
        if let Some((CREATE_MSG, sid)) = msg_header(msg) {
            self.created_sid.set(Some(sid));
        }
        if !self.sink.send(msg) {
            self.send_failed.set(true);
        }
    }
    // log(): libccp's level type is private in the crate, so its log
    // messages are dropped (the default).
}

/// Per-connection libccp callbacks: remember what the algorithm asked for.
#[derive(Debug, Default)]
struct Requested {
    cwnd_bytes: Option<u32>,
    rate: Option<u32>,
}

impl CongestionOps for Requested {
    fn set_cwnd(&mut self, cwnd: u32) {
        self.cwnd_bytes = Some(cwnd);
    }

    fn set_rate_abs(&mut self, rate: u32) {
        self.rate = Some(rate);
    }
}

struct Flow {
    info: FlowCreated,
    /// The algorithm asked for in its create message (the rule table's pick).
    alg: String,
    conn: Option<Connection<'static, Requested>>,
    base: Baseline,
    /// Monotonic ns of the last create attempt that failed to reach Portus;
    /// None once announced.
    create_failed_at: Option<u64>,
    last_cmd: Option<Command>,
    invokes: u64,
    /// After an RTO: the algorithm has not commanded since (its last request is
    /// stale and must not be re-applied; the kernel's loss window stands).
    awaiting_alg: bool,
    /// `updates_received` when the RTO was seen: an update staged in libccp
    /// before it (applied by the first invocation after an outage) is stale too.
    updates_at_rto: u64,
    /// The last valid RTT sample, us: what an ACK without one gets
    /// ([`crate::primitives::hold_rtt`]).
    rtt_held_us: u32,
    /// libccp's socket id of the flow (from its create message).
    sid: Option<u32>,
    /// Monotonic ns of the algorithm's last update or program change for the
    /// flow (or of its announcement): the control guard's clock.
    commanded_ns: u64,
    /// Taken by the control guard at this time (ns).
    guarded_at: Option<u64>,
    /// Monotonic ns of the flow's last ACK (0: none yet). An ACK after a
    /// silence longer than twice the guard's floor restarts the guard's clock.
    last_ack_ns: u64,
    /// The last invocation failed (the program aborted, or there is none).
    invoke_failed: bool,
}

/// Counters for logging / the exit summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct FoldStats {
    pub flows_created: u64,
    pub flows_released: u64,
    pub invokes: u64,
    /// Invocations with an invalid rate sample (RTT treated as absent).
    pub skipped_invalid: u64,
    /// Retransmission timeouts seen (each makes the last command stale).
    pub timeouts: u64,
    pub invoke_errors: u64,
    pub commands: u64,
    pub unknown_flow_acks: u64,
    pub recv_errors: u64,
}

/// libccp datapath plus one Connection per `ccp` flow.
pub struct FoldEngine {
    /// Boxed and leaked: libccp Connections keep a raw pointer into the
    /// Datapath, so it must never move and must outlive every Connection.
    dp: &'static Datapath,
    send_failed: Rc<Cell<bool>>,
    congalg: String,
    flows: HashMap<u32, Flow>,
    stats: FoldStats,
    /// Updates (Portus UPDATE_FIELD messages) received so far; a flow awaiting
    /// the algorithm after an RTO only listens to updates received after it.
    updates_received: u64,
    created_sid: Rc<Cell<Option<u32>>>,
    /// The control guard's floor (ns): a flow is taken after max(16 x SRTT, it).
    guard_floor_ns: u64,
    /// What the guard did since [`FoldEngine::take_guard_events`] was called.
    guard_events: Vec<GuardEvent>,
}

impl FoldEngine {
    /// Initialize libccp (this sends the ready message to Portus) with
    /// datapath id `id`; flows will ask Portus for algorithm `congalg`
    /// (matched against `CongAlg::name()`, at most 63 bytes).
    ///
    /// Errors: `congalg` too long or libccp initialization failing.
    pub fn new(sink: Box<dyn MsgSink>, id: u32, congalg: &str) -> Result<Self> {
        FlowInfo::default()
            .with_cong_alg(congalg)
            .map_err(|e| anyhow!("--congalg {congalg:?}: {e}"))?;
        let send_failed = Rc::new(Cell::new(false));
        let created_sid = Rc::new(Cell::new(None));
        let ops = Ops { sink, send_failed: send_failed.clone(), created_sid: created_sid.clone() };
        let dp = DatapathBuilder::default()
            .with_ops(ops)
            .with_id(id)
            .init()
            .map_err(|e| anyhow!("libccp init: {e}"))?;
        let dp: &'static Datapath = Box::leak(Box::new(dp));
        zero_connection_table(dp)?;
        if send_failed.replace(false) {
            tracing::info!("Portus not reachable yet; flows will be announced when it is");
        }
        Ok(FoldEngine {
            dp,
            send_failed,
            congalg: congalg.to_string(),
            flows: HashMap::new(),
            stats: FoldStats::default(),
            updates_received: 0,
            created_sid,
            guard_floor_ns: 250_000_000,
            guard_events: Vec::new(),
        })
    }

    /// The control guard's floor (`--control-timeout-ms`; default 250 ms).
    pub fn with_guard_floor(mut self, floor: std::time::Duration) -> Self {
        self.guard_floor_ns = floor.as_nanos() as u64;
        self
    }

    /// What the control guard did since the last call (oldest first).
    pub fn take_guard_events(&mut self) -> Vec<GuardEvent> {
        std::mem::take(&mut self.guard_events)
    }

    /// A flow switched to `ccp`: start its libccp Connection (announces the
    /// flow to Portus with a create message asking for algorithm `alg`;
    /// None: the datapath's default).
    ///
    /// Errors: `alg` longer than 63 bytes, libccp out of connection slots.
    pub fn create(&mut self, info: &FlowCreated, alg: Option<&str>, now_ns: u64) -> Result<()> {
        let alg = alg.unwrap_or(&self.congalg).to_string();
        self.send_failed.set(false);
        self.created_sid.set(None);
        let conn = Self::start_conn_for(self.dp, &alg, info)?;
        let create_failed_at = self.send_failed.replace(false).then_some(now_ns);
        self.stats.flows_created += 1;
        self.flows.insert(
            info.flow_id,
            Flow {
                info: info.clone(),
                alg,
                conn: Some(conn),
                base: Baseline::at_start(info.bytes_acked, info.lost),
                create_failed_at,
                last_cmd: None,
                invokes: 0,
                awaiting_alg: false,
                updates_at_rto: 0,
                rtt_held_us: 0,
                sid: self.created_sid.take(),
                commanded_ns: now_ns,
                guarded_at: None,
                last_ack_ns: 0,
                invoke_failed: false,
            },
        );
        Ok(())
    }

    /// Announce a live flow again to a (re)started algorithm: a fresh libccp
    /// Connection from `info` (cwnd and counters as the fallback left them),
    /// and nothing goes out until the algorithm has commanded anew (what the
    /// previous one asked for is stale). Unknown flows are created.
    ///
    /// Errors: as [`FoldEngine::create`].
    pub fn reannounce(&mut self, info: &FlowCreated, alg: Option<&str>, now_ns: u64) -> Result<()> {
        let Some(flow) = self.flows.get_mut(&info.flow_id) else {
            return self.create(info, alg, now_ns);
        };
        flow.conn = None; // frees the libccp slot first
        flow.info = info.clone();
        self.send_failed.set(false);
        self.created_sid.set(None);
        flow.conn = Some(Self::start_conn_for(self.dp, &flow.alg, info)?);
        flow.sid = self.created_sid.take();
        flow.commanded_ns = now_ns;
        flow.guarded_at = None;
        flow.create_failed_at = self.send_failed.replace(false).then_some(now_ns);
        flow.awaiting_alg = true;
        flow.updates_at_rto = self.updates_received;
        flow.last_cmd = None;
        Ok(())
    }

    /// The flow is gone: free its Connection (sends the close message).
    pub fn release(&mut self, flow_id: u32) -> bool {
        let known = self.flows.remove(&flow_id).is_some();
        if known {
            self.stats.flows_released += 1;
        }
        known
    }

    /// Feed one ACK: compute the primitives, run the installed fold program,
    /// and return a command if what the algorithm requests changed.
    pub fn on_ack(&mut self, s: &AckSample, now_ns: u64) -> Option<Command> {
        let Some(flow) = self.flows.get_mut(&s.flow_id) else {
            self.stats.unknown_flow_acks += 1;
            return None;
        };
        // No ACK for longer than twice the guard's floor (an outage, an idle
        // flow; a flow paced at the floor with delayed ACKs gets one a floor
        // apart): no report asked the algorithm anything meanwhile, so the
        // control guard's clock starts again (as ccp.bpf.c's fold_ack_begin).
        // A flow the guard holds stays held: only the algorithm hands it back.
        // Not under a commanded rate: the silence may be the rate's own doing.
        let paced = flow.last_cmd.is_some_and(|c| c.rate_bytes_per_sec != 0);
        // (An RTO's announcement is not an ACK: the silence goes on.)
        if !s.state_only {
            if flow.guarded_at.is_none() && !paced && now_ns.saturating_sub(flow.last_ack_ns) > 2 * self.guard_floor_ns {
                flow.commanded_ns = flow.commanded_ns.max(now_ns);
            }
            flow.last_ack_ns = now_ns;
        }
        // Re-announce a flow whose create message was lost.
        if let Some(t) = flow.create_failed_at {
            if now_ns.saturating_sub(t) < CREATE_RETRY_NS {
                return None;
            }
            flow.conn = None; // frees the libccp slot first
            self.send_failed.set(false);
            self.created_sid.set(None);
            let info = flow.info.clone();
            match Self::start_conn_for(self.dp, &flow.alg, &info) {
                Ok(c) => {
                    flow.conn = Some(c);
                    flow.sid = self.created_sid.take();
                    flow.commanded_ns = now_ns;
                }
                Err(e) => tracing::warn!(flow = s.flow_id, error = %e, "re-announcing flow failed"),
            }
            flow.create_failed_at = self.send_failed.replace(false).then_some(now_ns);
            if flow.create_failed_at.is_none() {
                tracing::info!(flow = s.flow_id, "flow announced to Portus");
            }
        }
        let conn = flow.conn.as_mut()?;
        if !sample_valid(s) {
            self.stats.skipped_invalid += 1;
        }
        if s.timeouts != flow.base.timeouts {
            // An RTO: what the algorithm asked for before it is stale. Forget it,
            // so libccp's Cwnd register is seeded from the kernel's loss window,
            // and send nothing until the algorithm answers the timeout report.
            // The timeout is a new question to the algorithm: the guard's
            // bound applies to its answer from here, as the kernel fold's
            // (fold_ack_begin), and not to the silence that led to it.
            self.stats.timeouts += 1;
            flow.awaiting_alg = true;
            flow.updates_at_rto = self.updates_received;
            flow.commanded_ns = flow.commanded_ns.max(now_ns);
        }
        if flow.awaiting_alg {
            conn.cwnd_bytes = None;
            conn.rate = None;
        }
        let seed_cwnd = s.snd_cwnd.saturating_mul(s.mss.max(1));
        let mut p = compute(&mut flow.base, s, conn.cwnd_bytes, conn.rate.map(u64::from));
        hold_rtt(&mut p, &mut flow.rtt_held_us, s.srtt_us);
        conn.load_primitives(to_libccp(&p));
        flow.invokes += 1;
        self.stats.invokes += 1;
        flow.invoke_failed = false;
        if let Err(e) = conn.invoke() {
            // LibccpProgIsNull until Portus installed a program: expected.
            self.stats.invoke_errors += 1;
            flow.invoke_failed = true;
            tracing::trace!(flow = s.flow_id, error = %e, "libccp invoke");
        }
        // The control guard: commands applied, but none from the algorithm within the bound.
        let bound_ns = (u64::from(s.srtt_us) * 1000 * GUARD_RTTS).max(self.guard_floor_ns);
        if flow.guarded_at.is_none() && flow.last_cmd.is_some() && now_ns.saturating_sub(flow.commanded_ns) > bound_ns {
            flow.guarded_at = Some(now_ns);
            flow.awaiting_alg = true;
            flow.last_cmd = None;
            self.guard_events.push(GuardEvent::Took { flow_id: s.flow_id, bound_ns, program_failing: flow.invoke_failed });
        }
        if flow.awaiting_alg {
            // libccp echoes the seeded loss window on every invoke; only a
            // different cwnd or a rate is the algorithm speaking again (after
            // an RTO: an update received since; taken by the guard: an update
            // or program change for this flow since).
            let fresh = match flow.guarded_at {
                Some(at) => flow.commanded_ns > at,
                None => self.updates_received > flow.updates_at_rto,
            };
            let spoke = fresh && (conn.cwnd_bytes.is_some_and(|c| c != seed_cwnd) || conn.rate.is_some());
            if !spoke {
                conn.cwnd_bytes = None;
                conn.rate = None;
                return None;
            }
            flow.awaiting_alg = false;
            if flow.guarded_at.take().is_some() {
                self.guard_events.push(GuardEvent::Resumed { flow_id: s.flow_id });
            }
        }
        if conn.cwnd_bytes.is_none() && conn.rate.is_none() {
            return None;
        }
        let cmd = Command {
            cwnd_bytes: conn.cwnd_bytes.unwrap_or(0),
            rate_bytes_per_sec: conn.rate.map(u64::from).unwrap_or(0),
            epoch: s.timeouts,
        };
        if flow.last_cmd == Some(cmd) {
            return None;
        }
        flow.last_cmd = Some(cmd);
        self.stats.commands += 1;
        Some(cmd)
    }

    fn start_conn_for(dp: &'static Datapath, congalg: &str, info: &FlowCreated) -> Result<Connection<'static, Requested>> {
        let fi = FlowInfo::default()
            .with_init_cwnd(info.init_cwnd_pkts.saturating_mul(info.mss))
            .with_mss(info.mss)
            .with_four_tuple(info.saddr, info.sport as u32, info.daddr, info.dport as u32)
            .with_cong_alg(congalg)
            .map_err(|e| anyhow!("{e}"))?;
        Connection::start(dp, Requested::default(), fi).map_err(|e| anyhow!("libccp connection start: {e}"))
    }

    /// Hand one message received from Portus at `now_ns` to libccp (install
    /// program, change program, update fields). Staged changes apply on the
    /// flow's next invocation; an update or program change restarts the
    /// control guard's clock of the flow it addresses.
    pub fn recv_msg(&mut self, msg: &mut [u8], now_ns: u64) -> Result<()> {
        let header = msg_header(msg);
        if header.is_some_and(|(ty, _)| ty == UPDATE_FIELD_MSG) {
            self.updates_received += 1;
        }
        self.dp.recv_msg(msg).map_err(|e| {
            self.stats.recv_errors += 1;
            anyhow!("libccp rejected a Portus message: {e}")
        })?;
        if let Some((UPDATE_FIELD_MSG | CHANGE_PROG_MSG, sid)) = header {
            if let Some(flow) = self.flows.values_mut().find(|f| f.sid == Some(sid)) {
                flow.commanded_ns = now_ns;
            }
        }
        Ok(())
    }

    /// Number of flows with a libccp Connection.
    pub fn active_flows(&self) -> usize {
        self.flows.len()
    }

    pub fn stats(&self) -> FoldStats {
        self.stats
    }
}

/// libccp 1.2's `DatapathBuilder::init` mallocs the 1024-entry connection
/// table without zeroing it, but `ccp_connection_start` treats `index == 0`
/// as "free slot" and `send_conn_create` reads `last_create_msg_sent`
/// (garbage there panicked with a subtraction overflow in `since_usecs`).
/// The table pointer is private, so it is read at its C offset inside
/// `struct ccp_datapath` after checking the neighbouring fields hold the
/// values the crate sets (max_connections 1024, fto_us 1000, max_programs 10).
fn zero_connection_table(dp: &Datapath) -> Result<()> {
    const MAX_CONNECTIONS: usize = 1024;
    // sizeof(struct ccp_connection) on x86_64/aarch64 for libccp 1.2
    const CONN_SIZE: usize = 216;
    if std::mem::size_of::<Datapath>() != 128 {
        anyhow::bail!("unexpected libccp Datapath layout ({} bytes)", std::mem::size_of::<Datapath>());
    }
    let base = dp as *const Datapath as *const u8;
    // SAFETY: Datapath is a newtype around `struct ccp_datapath` (128 bytes,
    // checked above); we only read word-aligned fields inside it and write
    // the table it owns, before any connection exists.
    unsafe {
        let word = |off: usize| (base.add(off) as *const usize).read();
        if word(64) != MAX_CONNECTIONS || word(80) != 1000 || word(104) != 10 {
            anyhow::bail!("unexpected libccp ccp_datapath field values; cannot zero its connection table");
        }
        let table = word(72) as *mut u8;
        if table.is_null() || libc::malloc_usable_size(table as *mut libc::c_void) < MAX_CONNECTIONS * CONN_SIZE {
            anyhow::bail!("libccp connection table smaller than expected");
        }
        std::ptr::write_bytes(table, 0, MAX_CONNECTIONS * CONN_SIZE);
    }
    Ok(())
}

fn to_libccp(p: &Prims) -> Primitives {
    Primitives::default()
        .with_bytes_acked(p.bytes_acked)
        .with_packets_acked(p.packets_acked)
        .with_bytes_misordered(p.bytes_misordered)
        .with_packets_misordered(p.packets_misordered)
        .with_ecn_bytes(p.ecn_bytes)
        .with_ecn_packets(p.ecn_packets)
        .with_lost_pkts_sample(p.lost_pkts_sample)
        .with_was_timeout(p.was_timeout)
        .with_rtt_sample_us(p.rtt_sample_us)
        .with_rate_outgoing(p.rate_outgoing)
        .with_rate_incoming(p.rate_incoming)
        .with_bytes_in_flight(p.bytes_in_flight)
        .with_packets_in_flight(p.packets_in_flight)
        .with_snd_cwnd(p.snd_cwnd)
        .with_snd_rate(p.snd_rate)
        .with_bytes_pending(p.bytes_pending)
}

#[cfg(test)]
mod tests {
    //! The daemon's side of kernel-like loss handling, with a real libccp and a
    //! program installed the way Portus does it: every lost packet reaches the
    //! fold (also on ACKs without a rate sample), and after an RTO no command
    //! is sent until the algorithm commands again, and then with the new epoch.
    use super::*;
    use portus::lang::Reg;
    use portus::serialize::{self, Msg};
    use std::cell::RefCell;

    const MSS: u32 = 1000;

    #[derive(Clone, Default)]
    struct Outbox(Rc<RefCell<Vec<Vec<u8>>>>);

    impl MsgSink for Outbox {
        fn send(&mut self, msg: &[u8]) -> bool {
            self.0.borrow_mut().push(msg.to_vec());
            true
        }
    }

    /// Reports `Report.loss` (sum of lost packets) at once when it is > 0.
    const PROGRAM: &str = "(def (Report (volatile loss 0) (volatile timeout false)))
(when true
    (:= Report.loss (+ Report.loss Ack.lost_pkts_sample))
    (:= Report.timeout (|| Report.timeout Flow.was_timeout))
    (fallthrough)
)
(when (|| Report.timeout (> Report.loss 0))
    (report)
)
";

    fn ack(lost: u32, timeouts: u32, valid: bool) -> AckSample {
        AckSample {
            flow_id: 1,
            mss: MSS,
            bytes_acked: 0,
            rtt_us: if valid { 10_000 } else { -1 },
            interval_us: 10_000,
            delivered: if valid { 2 } else { 0 },
            snd_interval_us: 10_000,
            rcv_interval_us: 10_000,
            packets_out: 10,
            snd_cwnd: if timeouts > 0 { 1 } else { 10 },
            lost,
            timeouts,
            ..Default::default()
        }
    }

    /// The reports libccp sent since the last call: (loss, timeout) per report.
    fn reports(out: &Outbox, sc: &portus::lang::Scope) -> Vec<(u64, u64)> {
        let field = |m: &serialize::measure::Msg, name: &str| match sc.get(name) {
            Some(Reg::Report(i, _, _)) => m.fields[*i as usize],
            _ => panic!("{name}"),
        };
        out.0
            .borrow_mut()
            .drain(..)
            .filter_map(|b| match Msg::from_buf(&b) {
                Ok((Msg::Ms(m), _)) => Some((field(&m, "Report.loss"), field(&m, "Report.timeout"))),
                _ => None,
            })
            .collect()
    }

    /// An engine (control guard floor `guard_floor_ms`) with `PROGRAM` installed the way Portus does
    /// it and flow 1 created and changed to it: (engine, its outbox, the program's scope, the flow's
    /// libccp socket id).
    fn flow_running_program(guard_floor_ms: u64) -> (FoldEngine, Outbox, portus::lang::Scope, u32) {
        let out = Outbox::default();
        let mut eng = FoldEngine::new(Box::new(out.clone()), 1, "reno")
            .expect("libccp")
            .with_guard_floor(std::time::Duration::from_millis(guard_floor_ms));
        let (bin, sc) = portus::lang::compile(PROGRAM.as_bytes(), &[]).expect("compiles");
        let install = serialize::install::Msg {
            sid: 0,
            program_uid: sc.program_uid,
            num_events: bin.events.len() as u32,
            num_instrs: bin.instrs.len() as u32,
            instrs: bin,
        };
        eng.recv_msg(&mut serialize::serialize(&install).unwrap(), 0).unwrap();
        let info = FlowCreated { flow_id: 1, mss: MSS, init_cwnd_pkts: 10, ..Default::default() };
        eng.create(&info, None, 0).unwrap();
        let sid = out
            .0
            .borrow()
            .iter()
            .find_map(|b| match Msg::from_buf(b) {
                Ok((Msg::Cr(c), _)) => Some(c.sid),
                _ => None,
            })
            .expect("create message");
        let change = serialize::changeprog::Msg { sid, program_uid: sc.program_uid, num_fields: 0, fields: vec![] };
        eng.recv_msg(&mut serialize::serialize(&change).unwrap(), 0).unwrap();
        (eng, out, sc, sid)
    }

    #[test]
    fn losses_always_reach_the_fold_and_rto_makes_the_last_command_stale() {
        let (mut eng, out, sc, sid) = flow_running_program(250);
        let set_cwnd = |eng: &mut FoldEngine, bytes: u64| {
            let cwnd = sc.get("Cwnd").unwrap().clone();
            let m = serialize::update_field::Msg { sid, num_fields: 1, fields: vec![(cwnd, bytes)] };
            eng.recv_msg(&mut serialize::serialize(&m).unwrap(), 0).unwrap();
        };

        // The algorithm commands 40 packets; the command carries epoch 0.
        set_cwnd(&mut eng, 40 * u64::from(MSS));
        let cmd = eng.on_ack(&ack(0, 0, true), 1).expect("a command");
        assert_eq!((cmd.cwnd_bytes, cmd.epoch), (40 * MSS, 0));
        reports(&out, &sc);

        // Losses on an ACK whose rate sample is invalid still reach the fold.
        assert_eq!(eng.on_ack(&ack(3, 0, false), 2), None);
        assert_eq!(reports(&out, &sc), vec![(3, 0)], "urgent report of 3 lost packets");

        // The algorithm's last update before an outage (no ACK applies it) ...
        set_cwnd(&mut eng, 50 * u64::from(MSS));
        // ... then an RTO (EV_STATE snapshot: timeouts 1, cwnd 1): the fold reports
        // the timeout at once, and no command goes out: neither the stale 40 nor
        // the 50 staged before the RTO are applied, the kernel's loss window stands.
        assert_eq!(eng.on_ack(&ack(13, 1, false), 3), None);
        assert_eq!(reports(&out, &sc), vec![(10, 1)]);
        assert_eq!(eng.on_ack(&ack(13, 1, true), 4), None, "still waiting for the algorithm");
        assert_eq!(eng.stats().timeouts, 1);

        // The algorithm answers the timeout: its new cwnd goes out with epoch 1.
        set_cwnd(&mut eng, 2 * u64::from(MSS));
        let cmd = eng.on_ack(&ack(13, 1, true), 5).expect("the algorithm's answer");
        assert_eq!((cmd.cwnd_bytes, cmd.epoch), (2 * MSS, 1));
    }

    #[test]
    fn the_control_guard_takes_a_flow_the_algorithm_stopped_commanding_and_hands_it_back() {
        const MS: u64 = 1_000_000;
        let (mut eng, _out, sc, sid) = flow_running_program(250);
        let cwnd_reg = sc.get("Cwnd").unwrap().clone();
        let set_cwnd = |eng: &mut FoldEngine, to_sid: u32, pkts: u64, at: u64| {
            let m = serialize::update_field::Msg { sid: to_sid, num_fields: 1, fields: vec![(cwnd_reg.clone(), pkts * u64::from(MSS))] };
            eng.recv_msg(&mut serialize::serialize(&m).unwrap(), at)
        };
        // srtt 10 ms: the bound is the 250 ms floor
        let ack_at = |cwnd_pkts: u32| AckSample { srtt_us: 10_000, snd_cwnd: cwnd_pkts, ..ack(0, 0, true) };

        set_cwnd(&mut eng, sid, 40, 0).unwrap();
        assert_eq!(eng.on_ack(&ack_at(10), MS).map(|c| c.cwnd_bytes), Some(40 * MSS));
        // the program echoes 40 on every ACK, the algorithm says nothing: within the bound the flow stays
        for t in [100, 200, 250] {
            assert_eq!(eng.on_ack(&ack_at(40), t * MS), None);
        }
        assert!(eng.take_guard_events().is_empty(), "taken within the bound");
        // past it: taken, nothing is commanded (the kernel's cubic runs it)
        assert_eq!(eng.on_ack(&ack_at(40), 252 * MS), None);
        assert_eq!(eng.take_guard_events(), vec![GuardEvent::Took { flow_id: 1, bound_ns: 250 * MS, program_failing: false }]);
        // the program's own Cwnd (40, not the fallback's 41) does not take it back, nor does an
        // update libccp refuses (no such flow)
        assert_eq!(eng.on_ack(&ack_at(41), 260 * MS), None);
        assert!(set_cwnd(&mut eng, sid + 7, 30, 270 * MS).is_err(), "libccp knows no flow {}", sid + 7);
        assert_eq!(eng.on_ack(&ack_at(42), 280 * MS), None);
        assert!(eng.take_guard_events().is_empty());
        // the algorithm commands the flow again: handed back with its cwnd
        set_cwnd(&mut eng, sid, 30, 300 * MS).unwrap();
        assert_eq!(eng.on_ack(&ack_at(43), 310 * MS).map(|c| c.cwnd_bytes), Some(30 * MSS));
        assert_eq!(eng.take_guard_events(), vec![GuardEvent::Resumed { flow_id: 1 }]);
        // an algorithm that answers within the bound keeps the flow, the same cwnd each time
        for t in (400..2000).step_by(200) {
            set_cwnd(&mut eng, sid, 30, t * MS).unwrap();
            eng.on_ack(&ack_at(30), (t + 10) * MS);
        }
        assert!(eng.take_guard_events().is_empty(), "an algorithm answering every 200 ms was taken");
    }

    /// A flow whose program runs (guard floor 250 ms), commanded a cwnd of
    /// 40 packets by an update at 0 ms, applied at its first ACK, at 1 ms
    /// (srtt 10 ms: the guard's bound is its floor).
    fn commanded_flow() -> FoldEngine {
        let (mut eng, _out, sc, sid) = flow_running_program(250);
        let m = serialize::update_field::Msg { sid, num_fields: 1, fields: vec![(sc.get("Cwnd").unwrap().clone(), 40 * u64::from(MSS))] };
        eng.recv_msg(&mut serialize::serialize(&m).unwrap(), 0).unwrap();
        let first = AckSample { srtt_us: 10_000, ..ack(0, 0, true) };
        assert_eq!(eng.on_ack(&first, 1_000_000).map(|c| c.cwnd_bytes), Some(40 * MSS));
        eng
    }

    #[test]
    fn a_silence_without_acks_is_not_charged_to_the_algorithm() {
        const MS: u64 = 1_000_000;
        let mut eng = commanded_flow();
        let ack_at = |cwnd_pkts: u32| AckSample { srtt_us: 10_000, snd_cwnd: cwnd_pkts, ..ack(0, 0, true) };
        // an outage: no ACK for 1 s; the ACKs after it come within the bound of its end
        for t in [1001, 1100, 1200, 1250] {
            eng.on_ack(&ack_at(40), t * MS);
        }
        assert!(eng.take_guard_events().is_empty(), "the outage was charged to the algorithm");
        // but the clock runs while ACKs come: 250 ms of them after the outage and the flow is taken
        eng.on_ack(&ack_at(40), 1252 * MS);
        assert_eq!(eng.take_guard_events(), vec![GuardEvent::Took { flow_id: 1, bound_ns: 250 * MS, program_failing: false }]);
        // a later silence does not hand the taken flow back: only the algorithm does
        assert_eq!(eng.on_ack(&ack_at(41), 2000 * MS), None);
        assert!(eng.take_guard_events().is_empty());
    }

    #[test]
    fn a_retransmission_timeout_restarts_the_control_guards_clock() {
        const MS: u64 = 1_000_000;
        let mut eng = commanded_flow();
        let at = |timeouts: u32, state_only: bool| AckSample { srtt_us: 10_000, state_only, ..ack(0, timeouts, true) };
        // an outage: the RTO fires 240 ms after the last ACK (announced by
        // set_state, no ACK), and the ACKs after it come 300..490 ms in:
        // within the bound of the timeout, though 250 ms past the last command
        assert_eq!(eng.on_ack(&at(1, true), 240 * MS), None);
        for t in [300, 400, 489] {
            assert_eq!(eng.on_ack(&at(1, false), t * MS), None, "no answer to the RTO yet at {t} ms");
        }
        assert!(eng.take_guard_events().is_empty(), "the silence before the RTO was charged to the algorithm");
        // an algorithm that never answers it is taken a bound after the timeout
        eng.on_ack(&at(1, false), 491 * MS);
        assert_eq!(eng.take_guard_events(), vec![GuardEvent::Took { flow_id: 1, bound_ns: 250 * MS, program_failing: false }]);
    }

    #[test]
    fn an_rto_announced_during_an_outage_does_not_end_its_silence() {
        const MS: u64 = 1_000_000;
        let mut eng = commanded_flow();
        let at = |timeouts: u32, state_only: bool| AckSample { srtt_us: 10_000, state_only, ..ack(0, timeouts, true) };
        // the RTO at 240 ms is lost on the dead link, the backed-off one at
        // 720 ms is ACKed: 720 ms without an ACK, the clock restarts there
        eng.on_ack(&at(1, true), 240 * MS);
        for t in [720, 800, 960] {
            eng.on_ack(&at(1, false), t * MS);
        }
        assert!(eng.take_guard_events().is_empty(), "the RTO's announcement was taken for an ACK");
        eng.on_ack(&at(1, false), 972 * MS);
        assert_eq!(eng.take_guard_events().len(), 1, "not taken a bound after the outage's first ACK");
    }

    #[test]
    fn a_silence_under_a_commanded_rate_is_charged_to_the_algorithm() {
        const MS: u64 = 1_000_000;
        let (mut eng, _out, sc, sid) = flow_running_program(250);
        let fields = vec![(sc.get("Cwnd").unwrap().clone(), 40 * u64::from(MSS)), (sc.get("Rate").unwrap().clone(), 1000)];
        let m = serialize::update_field::Msg { sid, num_fields: 2, fields };
        eng.recv_msg(&mut serialize::serialize(&m).unwrap(), 0).unwrap();
        let ack_at = |cwnd_pkts: u32| AckSample { srtt_us: 10_000, snd_cwnd: cwnd_pkts, ..ack(0, 0, true) };
        assert!(eng.on_ack(&ack_at(10), MS).is_some_and(|c| c.rate_bytes_per_sec == 1000));
        // 1,000 B/s: the rate itself spaces the ACKs a second apart; the guard takes the flow
        eng.on_ack(&ack_at(40), 1001 * MS);
        assert_eq!(eng.take_guard_events(), vec![GuardEvent::Took { flow_id: 1, bound_ns: 250 * MS, program_failing: false }]);
    }
}
