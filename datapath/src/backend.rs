//! Where the fold programs run, as the datapath loop sees it: one
//! [`Backend`] per daemon, chosen by `--fold`. The kernel backend speaks
//! Portus's protocol for the in-kernel fold (creates, reports, closes,
//! with retries); the user-space one hands every ACK to libccp.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Result;
use libbpf_rs::RingBuffer;

use crate::bpf::{monotonic_ns, BpfDatapath};
use crate::cli::{Cli, FoldMode};
use crate::fold::{self, FoldEngine, FoldMsgError, KernelFold};
use crate::ipc::PortusSender;
use crate::wake::{self, Promise, ReportLooks};
use crate::wire::FlowCreated;

/// The fold backend and its state.
pub enum Backend {
    /// `--fold kernel`: programs run in BPF; only reports reach this daemon.
    Kernel(Box<KernelMode>),
    /// `--fold userspace`: libccp runs the programs on every ACK.
    Userspace(FoldEngine),
}

impl Backend {
    /// The backend `--fold` asks for. The kernel one tells Portus this
    /// datapath is ready and opens the report ring; `outbox` is the sender
    /// both share with the loop.
    ///
    /// Errors: libccp refuses `--congalg`, or the report ring cannot be
    /// opened.
    pub fn new(cli: &Cli, bpf: &BpfDatapath, outbox: &PortusSender) -> Result<Backend> {
        Ok(match cli.fold {
            FoldMode::Kernel => {
                let mut sender = outbox.clone();
                if !sender.send(&fold::ready_msg(std::process::id())) {
                    tracing::info!("Portus not reachable yet; flows will be announced when it is");
                }
                let reports = Rc::new(RefCell::new(Vec::new()));
                let ring = bpf.report_reader(reports.clone())?;
                Backend::Kernel(Box::new(KernelMode {
                    kf: KernelFold::guarded(),
                    sender,
                    unsent: vec![],
                    reports,
                    pending: vec![],
                    send_failed: false,
                    looks: ReportLooks::new(
                        Duration::from_millis(cli.report_wake_ms),
                        Duration::from_micros(cli.report_prompt_us),
                    ),
                    ring,
                }))
            }
            FoldMode::Userspace => Backend::Userspace(
                FoldEngine::new(Box::new(outbox.clone()), std::process::id(), &cli.congalg)?
                    .with_guard_floor(Duration::from_millis(cli.control_timeout_ms)),
            ),
        })
    }

    /// The report ring's epoll fd, for the loop's poll (kernel backend only).
    pub fn poll_fd(&self) -> Option<libc::c_int> {
        match self {
            Backend::Kernel(k) => Some(k.ring.epoll_fd()),
            Backend::Userspace(_) => None,
        }
    }

    /// A new algorithm, or none: what the previous one asked for is stale.
    pub fn algorithm_changed(&mut self) {
        if let Backend::Kernel(k) = self {
            k.kf.algorithm_changed();
        }
    }

    /// How long the loop may sleep while flows are live, ms: one report
    /// window after a look that found reports (kernel, [`ReportLooks`]), or
    /// [`wake::MIN_POLL`] for the per-ACK events of the user-space fold.
    pub fn busy_poll_ms(&self, idle_ms: libc::c_int) -> libc::c_int {
        match self {
            Backend::Kernel(k) => {
                let t = k.looks.timeout(monotonic_ns(), Duration::from_millis(idle_ms as u64));
                // poll() takes whole ms: round up, so the report is there when we look
                t.as_micros().div_ceil(1000) as libc::c_int
            }
            Backend::Userspace(_) => wake::MIN_POLL.as_millis() as libc::c_int,
        }
    }

    /// A flow the kernel just created, for algorithm `alg`.
    pub fn flow_created(&mut self, c: &FlowCreated, alg: &str) {
        match self {
            Backend::Kernel(k) => k.created(c, alg),
            Backend::Userspace(fold) => {
                if let Err(e) = fold.create(c, Some(alg), monotonic_ns()) {
                    tracing::warn!(flow = c.flow_id, error = %e, "flow not managed by libccp (fallback)");
                }
            }
        }
    }

    /// A live flow told again to a new algorithm (`now_ns`: its info's time).
    pub fn flow_reannounced(&mut self, c: &FlowCreated, alg: &str, now_ns: u64) {
        match self {
            Backend::Kernel(k) => k.created(c, alg),
            Backend::Userspace(fold) => {
                if let Err(e) = fold.reannounce(c, Some(alg), now_ns) {
                    tracing::warn!(flow = c.flow_id, error = %e, "flow not announced (fallback)");
                }
            }
        }
    }

    pub fn flow_released(&mut self, flow_id: u32) {
        match self {
            Backend::Kernel(k) => k.released(flow_id),
            Backend::Userspace(fold) => {
                fold.release(flow_id);
            }
        }
    }

    /// One message from Portus. Errors: the message is refused (libccp's
    /// rules); an install refused because it would evict a live flow's
    /// program is counted and logged here instead (a flood stays readable).
    pub fn on_portus_msg(&mut self, msg: &mut [u8], bpf: &mut BpfDatapath) -> Result<()> {
        match self {
            Backend::Kernel(k) => match k.kf.on_portus_msg(msg, bpf) {
                Err(e @ FoldMsgError::Evicts(_)) => {
                    // counted apart (evictions_refused=); logged first and
                    // every 100th
                    let refused = k.kf.evictions_refused();
                    if refused % 100 == 1 {
                        tracing::warn!(error = %e, refused, "install refused: it would evict a live flow's program");
                    }
                    Ok(())
                }
                r => r.map_err(anyhow::Error::from),
            },
            Backend::Userspace(fold) => crate::ipc::deliver_to_libccp(fold, msg, monotonic_ns()),
        }
    }

    /// Kernel backend: queue the reports in the ring for Portus and keep
    /// the promise of the next look up to date.
    pub fn collect_reports(&mut self, bpf: &BpfDatapath) {
        if let Backend::Kernel(k) = self {
            k.look_for_reports(bpf);
        }
    }

    /// End of a loop turn: the kernel backend sends what this turn has for
    /// Portus and retries creates Portus did not get. Returns whether a
    /// send to Portus failed (the algorithm may be gone).
    pub fn end_turn(&mut self) -> bool {
        let Backend::Kernel(k) = self else {
            return false;
        };
        k.retry_unsent();
        // what this turn has for Portus (announcements, creates, reports,
        // closes), in order, several to a datagram
        k.flush();
        std::mem::take(&mut k.send_failed)
    }
}

/// `--fold kernel`: the Portus side of the kernel fold.
pub struct KernelMode {
    kf: KernelFold,
    sender: PortusSender,
    /// Create messages Portus did not get yet (flow, message, last try).
    unsent: Vec<(u32, Vec<u8>, Instant)>,
    /// Report records from the kernel, raw.
    reports: Rc<RefCell<Vec<Vec<u8>>>>,
    /// Messages for Portus from this turn of the loop, in order, sent
    /// together by [`KernelMode::flush`]; a create names its flow.
    pending: Vec<(Option<u32>, Vec<u8>)>,
    /// A send to Portus failed since the loop last looked.
    send_failed: bool,
    /// Whether the loop promised the BPF side to look again within the
    /// report window (the loop's poll timeout).
    looks: ReportLooks,
    /// The kernel's report ring; its consumer fills `reports`.
    ring: RingBuffer<'static>,
}

/// Re-send a create message Portus did not get this often.
const CREATE_RETRY: Duration = Duration::from_secs(1);

impl KernelMode {
    /// Send this turn's messages, several to a datagram. A create Portus
    /// did not get is kept to be announced again ([`CREATE_RETRY`]).
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let sent = self.sender.send_packed(pending.iter().map(|(_, m)| m.as_slice()));
        if sent < pending.len() {
            self.send_failed = true;
            let now = Instant::now();
            for (flow, msg) in pending.into_iter().skip(sent) {
                if let Some(flow) = flow {
                    self.unsent.push((flow, msg, now));
                }
            }
        }
    }

    fn created(&mut self, c: &FlowCreated, alg: &str) {
        self.unsent.retain(|(f, _, _)| *f != c.flow_id);
        self.pending.retain(|(f, _)| *f != Some(c.flow_id));
        let msg = self.kf.flow_created(
            c.flow_id,
            c.init_cwnd_pkts.saturating_mul(c.mss),
            c.mss,
            (c.saddr, u32::from(c.sport)),
            (c.daddr, u32::from(c.dport)),
            alg,
        );
        match msg {
            Ok(m) => self.pending.push((Some(c.flow_id), m)),
            Err(e) => tracing::warn!(flow = c.flow_id, error = %e, "flow not announced (fallback)"),
        }
    }

    fn released(&mut self, flow_id: u32) {
        self.unsent.retain(|(f, _, _)| *f != flow_id);
        let close = self.kf.flow_released(flow_id);
        self.pending.push((None, close));
    }

    /// Queue the kernel's reports (collected by the report ring's
    /// consumer) for Portus; returns how many, and how many of them came
    /// from flows that report several times per RTT.
    fn forward_reports(&mut self) -> (usize, usize) {
        let records = std::mem::take(&mut *self.reports.borrow_mut());
        for rec in &records {
            match self.kf.report_msg_for_portus(rec) {
                Ok((_, msg)) => self.pending.push((None, msg)),
                Err(e) => tracing::warn!(error = %e, "report record"),
            }
        }
        (records.len(), records.iter().filter(|r| fold::report_is_prompt(r)).count())
    }

    /// Re-announce flows whose create message Portus did not get.
    fn retry_unsent(&mut self) {
        let sender = &mut self.sender;
        let send_failed = &mut self.send_failed;
        self.unsent.retain_mut(|(flow, msg, at)| {
            if at.elapsed() < CREATE_RETRY {
                return true;
            }
            *at = Instant::now();
            let sent = sender.send(msg);
            *send_failed |= !sent;
            if sent {
                tracing::info!(flow = *flow, "flow announced to Portus");
            }
            !sent
        });
    }

    /// The kernel fold's counters (the summary's `kernel fold:` part).
    pub fn fold_stats(&self) -> fold::KernelFoldStats {
        self.kf.stats()
    }

    /// Run the report ring's consumer (it fills `reports`).
    fn consume_ring(&self) {
        if let Err(e) = self.ring.consume() {
            tracing::warn!(error = %e, "report ring buffer consume");
        }
    }

    /// Forward the reports in the ring and renew, keep or withdraw the
    /// promise of the next look (src/wake.rs). Withdrawing, it looks once
    /// more, for a report submitted while the old promise stood.
    fn look_for_reports(&mut self, bpf: &BpfDatapath) {
        self.consume_ring();
        let now = monotonic_ns();
        let (found, prompt) = self.forward_reports();
        match self.looks.looked(found, prompt, now) {
            Promise::Renew => bpf.promise_report_look(now),
            Promise::Keep => {}
            Promise::Withdraw => {
                bpf.promise_report_look(0);
                self.consume_ring();
                let (found, prompt) = self.forward_reports();
                if self.looks.looked(found, prompt, now) == Promise::Renew {
                    bpf.promise_report_look(now);
                }
            }
        }
    }
}
