//! The datapath's event loop: registers `ccp`, then moves flow events,
//! reports and commands between the BPF side and Portus until a stop
//! signal. [`run`] is what the `ccp-datapath` binary calls.

use std::cell::RefCell;
use std::collections::HashSet;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ccplab_util::signals::StopSignals;
use libbpf_rs::RingBuffer;
use serde::Serialize;

use crate::backend::Backend;
use crate::bpf::{ca_available, monotonic_ns, BpfConfig, BpfDatapath, CA_NAME};
use crate::cli::{Cli, FoldMode};
use crate::fold::{self, GuardEvent};
use crate::ipc::{PortusIpc, PortusSender, Trust};
use crate::liveness::{AlgorithmWatch, Change};
use crate::resync::FlowResync;
use crate::rules::{FlowKeys, RuleTable};
use crate::stats::Samples;
use crate::summary::{AckCost, BpfCounters, KernelFoldCounters, Latency, Micros, OutboxCounters, Stats};
use crate::wake;
use crate::wire::{Event, FlowCreated, GuardCause};

/// Contents of --ready-file.
#[derive(Serialize)]
struct Ready<'a> {
    ca: &'a str,
    pid: u32,
    socket: &'a str,
}

fn preflight() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("must run as root (loading BPF struct_ops needs CAP_BPF/CAP_SYS_ADMIN and CAP_NET_ADMIN)");
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        bail!("kernel BTF (/sys/kernel/btf/vmlinux) missing: BPF struct_ops is not supported on this kernel");
    }
    if ca_available(CA_NAME)? {
        bail!("congestion control `{CA_NAME}` is already registered (another ccp-datapath running?)");
    }
    Ok(())
}

/// Removes the ready file when dropped (also on error paths).
struct ReadyFile(Option<PathBuf>);
impl Drop for ReadyFile {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The datapath loop's state: what it reads (the event ring, Portus's
/// socket, the algorithm's liveness) and what it keeps per flow.
struct Loop {
    /// Flow events from the BPF side; its consumer fills `queue`. First, so
    /// it is dropped before the maps it reads.
    events: RingBuffer<'static>,
    queue: Rc<RefCell<Vec<Event>>>,
    /// Where the fold programs run (`--fold`).
    backend: Backend,
    bpf: BpfDatapath,
    ipc: PortusIpc,
    /// Shares the outbox of the sender libccp or KernelMode sends with:
    /// messages Portus had no room for yet, flushed every loop.
    outbox: PortusSender,
    /// Per-ACK user-space cost: decode-to-command, ns.
    ack_cost: Samples,
    /// Kernel event timestamp to command written into the map, ns.
    cmd_latency: Samples,
    bad_records: Rc<RefCell<u64>>,
    /// Portus messages refused (parse errors, over libccp's limits, oversized).
    bad_msgs: u64,
    /// Which algorithm each flow asks for.
    rules: RuleTable,
    /// Is the algorithm there (and who is it)?
    watch: AlgorithmWatch,
    /// When to announce the live flows to a new algorithm.
    announce_at: Option<Instant>,
    /// Flows this daemon knows (created, not yet released).
    known: HashSet<u32>,
    /// Flows announced to the current algorithm (cleared when a new one appears).
    announced: HashSet<u32>,
    /// Lost create/release records, found from the BPF `flows` map.
    resync: FlowResync,
    resynced_flows: u64,
    /// Fault injection for tests (--test-drop-create-records): create
    /// records still to be dropped as if the ring buffer had been full.
    drop_creates: u32,
    /// `--fold userspace`: flows the control guard took (the BPF side
    /// counts `--fold kernel`'s).
    user_guard_fallbacks: u64,
}

/// Between a new algorithm's appearance and announcing the flows to it the
/// fallback runs, so the `flows` map holds each flow's current cwnd (the
/// fallback refreshes it per ACK): the algorithm starts from there.
const ANNOUNCE_DELAY: Duration = Duration::from_millis(100);
/// How often the known flows are checked against the BPF `flows` map.
const RESYNC_EVERY: Duration = Duration::from_secs(1);

impl Loop {
    /// The algorithm has been away for the whole fallback timeout: the
    /// heartbeat is no longer stamped (every flow runs the kernel's cubic) and
    /// what the algorithm asked for is forgotten.
    fn algorithm_away(&mut self) {
        self.bpf.bump_ctl_epoch();
        self.backend.algorithm_changed();
        self.bpf.clear_commands();
        self.announce_at = None;
        tracing::warn!(flows = self.known.len(), "algorithm away: its flows run the kernel's cubic until it is back");
    }

    /// A (re)started algorithm: the previous one's requests are stale; the
    /// live flows are announced to it after [`ANNOUNCE_DELAY`].
    fn new_algorithm(&mut self, now: Instant) {
        self.bpf.bump_ctl_epoch();
        self.backend.algorithm_changed();
        self.bpf.clear_commands();
        self.announce_at = Some(now + ANNOUNCE_DELAY);
        self.announced.clear();
        tracing::info!(socket = %self.watch_socket(), "algorithm present; announcing the live flows to it");
    }

    fn watch_socket(&self) -> String {
        self.watch.socket().display().to_string()
    }

    /// The loop's poll timeout, ms. Without flows nothing is submitted
    /// without a wakeup (creates wake us), and each wakeup costs 60-120 us
    /// of CPU in this VM: wait for the next liveness probe (`idle_ms`). With
    /// flows, ring records submitted without a wakeup must be picked up: in
    /// `--fold userspace` every 1 ms (per-ACK events), in `--fold kernel`
    /// one report window after a look that found reports ([`ReportLooks`]).
    fn poll_timeout_ms(&mut self, idle_ms: libc::c_int) -> libc::c_int {
        if self.outbox.backlog() > 0 {
            // Portus's queue was full: look again soon (an unconnected
            // datagram socket cannot poll for room in another's queue)
            return wake::MIN_POLL.as_millis() as libc::c_int;
        }
        if self.known.is_empty() {
            return idle_ms;
        }
        self.backend.busy_poll_ms(idle_ms)
    }

    /// Once per loop: follow the algorithm's comings and goings, announce
    /// flows when due, and stamp the heartbeat only while it controls them.
    fn watch_algorithm(&mut self) {
        let now = Instant::now();
        match self.watch.poll(now) {
            Change::Away => self.algorithm_away(),
            Change::NewAlgorithm => self.new_algorithm(now),
            Change::None => {}
        }
        if self.announce_at.is_some_and(|t| now >= t) {
            self.announce_at = None;
            self.announce_live_flows();
        }
        self.bpf.heartbeat(if self.watch.controls() { monotonic_ns() } else { 0 });
    }

    /// Tell the algorithm every live flow it was not told yet, from the BPF
    /// `flows` map.
    fn announce_live_flows(&mut self) {
        let now = monotonic_ns();
        let mut live = self.bpf.live_flows();
        live.retain(|(id, _)| !self.announced.contains(id));
        for (id, info) in &live {
            self.announced.insert(*id);
            let c = FlowCreated::from_flow_info(*id, info, now);
            let alg = self.algorithm_for(&c).to_string();
            self.known.insert(*id);
            self.backend.flow_reannounced(&c, &alg, now);
        }
        if live.is_empty() {
            tracing::debug!("no live flow to announce to the algorithm");
        } else {
            tracing::info!(flows = live.len(), "live flows announced to the algorithm");
        }
    }

    /// Flows whose create or release record was lost (ring buffer full):
    /// found from the BPF `flows` map ([`resync`]), then handled as if the
    /// record had arrived.
    fn resync(&mut self) {
        let now = monotonic_ns();
        let live = self.bpf.live_flows();
        let live_ids: HashSet<u32> = live.iter().map(|(id, _)| *id).collect();
        let found = self.resync.pass(&self.known, &live_ids);
        for (id, info) in live.iter().filter(|(id, _)| found.lost_creates.contains(id)) {
            tracing::warn!(flow = id, "flow's create record was lost; announcing it from the flows map");
            self.resynced_flows += 1;
            self.handle(Event::Created(FlowCreated::from_flow_info(*id, info, now)));
        }
        for flow_id in found.lost_releases {
            tracing::warn!(flow = flow_id, "flow's release record was lost; releasing it");
            self.resynced_flows += 1;
            // its record lost, its counts too: 0 of 0 says "no evidence"
            self.handle(Event::Released { flow_id, ts_ns: now, delivered_pkts: 0, fallback_pkts: 0, rto_await_pkts: 0 });
        }
    }

    /// The algorithm the rule table picks for a flow.
    fn algorithm_for(&self, c: &FlowCreated) -> &str {
        self.rules.algorithm_for(&FlowKeys { dport: c.dport, mark: c.mark, cgroup_id: c.cgroup_id })
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Created(c) => {
                self.known.insert(c.flow_id);
                self.announced.insert(c.flow_id);
                let alg = self.algorithm_for(&c).to_string();
                tracing::info!(
                    flow = c.flow_id,
                    src = %format!("{}:{}", std::net::Ipv4Addr::from(u32::from_be(c.saddr)), c.sport),
                    dst = %format!("{}:{}", std::net::Ipv4Addr::from(u32::from_be(c.daddr)), c.dport),
                    mss = c.mss,
                    init_cwnd_pkts = c.init_cwnd_pkts,
                    mark = c.mark,
                    cgroup_id = c.cgroup_id,
                    kernel_pacing = c.kernel_pacing,
                    algorithm = %alg,
                    "flow created"
                );
                self.backend.flow_created(&c, &alg);
            }
            Event::Ack(s) => {
                let Backend::Userspace(fold) = &mut self.backend else {
                    return; // --fold kernel: the kernel folds its own ACKs
                };
                let t0 = Instant::now();
                let cmd = fold.on_ack(&s, monotonic_ns());
                if let Some(cmd) = cmd {
                    match self.bpf.set_command(s.flow_id, cmd) {
                        Ok(()) => {
                            self.cmd_latency.push(monotonic_ns().saturating_sub(s.ts_ns));
                            tracing::debug!(
                                flow = s.flow_id,
                                cwnd_bytes = cmd.cwnd_bytes,
                                cwnd_pkts = cmd.cwnd_bytes / s.mss.max(1),
                                rate_bytes_per_sec = cmd.rate_bytes_per_sec,
                                "command applied"
                            );
                        }
                        Err(e) => tracing::warn!(flow = s.flow_id, error = %e, "cannot write command"),
                    }
                }
                for ev in fold.take_guard_events() {
                    self.user_guard(ev, s.snd_cwnd);
                }
                self.ack_cost.push(t0.elapsed().as_nanos() as u64);
            }
            Event::Guard { flow_id, cause: GuardCause::Resumed, cwnd_pkts, .. } => {
                tracing::info!(flow = flow_id, cwnd_pkts, "control guard: the algorithm commands the flow again; handed back");
            }
            Event::Guard { flow_id, cause, cwnd_pkts, bound_us } => {
                tracing::warn!(
                    flow = flow_id,
                    cwnd_pkts,
                    bound_ms = bound_us / 1000,
                    cause = %cause.describe(),
                    "control guard: flow not commanded within the bound; it runs the kernel's cubic until the algorithm commands it again"
                );
            }
            Event::Released { flow_id, delivered_pkts, fallback_pkts, rto_await_pkts, .. } => {
                self.known.remove(&flow_id);
                self.announced.remove(&flow_id);
                self.bpf.delete_command(flow_id);
                self.backend.flow_released(flow_id);
                // the runner reads these per flow (experiments/ccplab/control.py)
                tracing::info!(flow = flow_id, delivered_pkts, fallback_pkts, rto_await_pkts, "flow released");
            }
        }
    }

    /// `--fold userspace`: the control guard ([`crate::fold::GuardEvent`])
    /// took a flow (its command leaves the map: the kernel's cubic runs it)
    /// or handed it back; logged as the BPF guard's events are.
    fn user_guard(&mut self, ev: GuardEvent, cwnd_pkts: u32) {
        match ev {
            GuardEvent::Took { flow_id, bound_ns, program_failing } => {
                self.bpf.delete_command(flow_id);
                self.user_guard_fallbacks += 1;
                let cause = if program_failing {
                    "its fold program fails on its invocations (it aborts, or none is installed)".to_string()
                } else {
                    GuardCause::Silent.describe()
                };
                tracing::warn!(
                    flow = flow_id,
                    cwnd_pkts,
                    bound_ms = bound_ns / 1_000_000,
                    cause = %cause,
                    "control guard: flow not commanded within the bound; it runs the kernel's cubic until the algorithm commands it again"
                );
            }
            GuardEvent::Resumed { flow_id } => {
                tracing::info!(flow = flow_id, cwnd_pkts, "control guard: the algorithm commands the flow again; handed back");
            }
        }
    }

    fn drain_ipc(&mut self, buf: &mut [u8]) {
        loop {
            match self.ipc.try_recv(buf) {
                Ok(Some(n)) if n > buf.len() => {
                    self.bad_msgs += 1;
                    if self.bad_msgs % 1000 == 1 {
                        tracing::warn!(len = n, max = buf.len(), dropped = self.bad_msgs, "oversized Portus message dropped");
                    }
                }
                Ok(Some(n)) => {
                    self.watch.heard_from(self.ipc.portus_pid());
                    if let Err(e) = self.backend.on_portus_msg(&mut buf[..n], &mut self.bpf) {
                        // refused like libccp refuses it; rate-limited so a
                        // flood cannot fill the log
                        self.bad_msgs += 1;
                        if self.bad_msgs % 1000 == 1 {
                            tracing::warn!(error = %e, len = n, dropped = self.bad_msgs, "Portus message refused");
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "receiving from Portus");
                    break;
                }
            }
        }
    }

    /// The figures of the summary line and `--stats-file`.
    fn stats(&self) -> Stats {
        let b = self.bpf.stats();
        let (f, active, k) = match &self.backend {
            Backend::Userspace(fold) => (fold.stats(), fold.active_flows() as u64, Default::default()),
            Backend::Kernel(kernel) => (Default::default(), 0, kernel.fold_stats()),
        };
        let (jit_compiled, jit_declined) = self.bpf.jit_counts();
        let ob = self.outbox.outbox_stats();
        Stats {
            flows_created: f.flows_created,
            bpf_flow_ids: u64::from(b.flows),
            active,
            resynced: self.resynced_flows,
            invokes: f.invokes,
            commands: f.commands,
            skipped_invalid: f.skipped_invalid,
            unknown_flow_acks: f.unknown_flow_acks,
            bad_records: *self.bad_records.borrow(),
            refused_msgs: self.bad_msgs,
            untrusted_msgs: self.ipc.dropped_untrusted(),
            bpf: BpfCounters {
                command_acks: b.command_acks,
                fallback_acks: b.fallback_acks,
                rto_await_acks: b.rto_await_acks,
                guard_fallbacks: b.guard_fallbacks + self.user_guard_fallbacks,
                cwnd_clamped: b.cwnd_clamped,
                rate_floored: b.rate_floored,
                dropped_events: b.dropped_events,
            },
            outbox: OutboxCounters { deferred: ob.deferred, peak: ob.peak as u64, dropped: ob.dropped },
            user_ack_cost_us: AckCost {
                mean: Micros(self.ack_cost.mean()),
                p50: Micros(self.ack_cost.percentile(50)),
                p99: Micros(self.ack_cost.percentile(99)),
            },
            event_to_command_us: Latency {
                p50: Micros(self.cmd_latency.percentile(50)),
                p99: Micros(self.cmd_latency.percentile(99)),
                n: self.cmd_latency.count,
            },
            kernel_fold: KernelFoldCounters {
                invocations: b.fold_invocations,
                compiled_runs: b.fold_compiled_runs,
                aborted: b.fold_aborts,
                reports: b.fold_reports,
                reports_dropped: b.fold_reports_dropped,
                no_state_flows: b.fold_no_state_flows,
                installs: k.installs,
                compiled: jit_compiled,
                interpreted: jit_declined,
                staged: k.staged,
                refused: k.refused,
                evictions_refused: k.evictions_refused,
                replaced_unused: k.replaced_unused,
            },
            report_to_cwnd_us: Latency {
                p50: Micros(k.report_to_cwnd_p50_ns),
                p99: Micros(k.report_to_cwnd_p99_ns),
                n: k.report_to_cwnd_n,
            },
        }
    }

    /// Log the summary line (info at exit, debug every 10 s) and return
    /// its figures.
    fn summary(&self, level_info: bool) -> Stats {
        let stats = self.stats();
        if level_info {
            tracing::info!("{stats}");
        } else {
            tracing::debug!("{stats}");
        }
        stats
    }
}

/// Run the datapath with these options until `stop` fires: load and
/// register `ccp`, serve the flows, unregister, and write `--stats-file`.
///
/// Errors: not root, no kernel BTF, `ccp` already registered, a bad
/// --rule or --congalg, the socket directory refused, BPF load failures,
/// --ready-file or --stats-file not writable.
pub fn run(cli: Cli, stop: &StopSignals) -> Result<()> {
    preflight()?;
    let rules = RuleTable::parse(&cli.rules, &cli.congalg).map_err(|e| anyhow::anyhow!("--rule: {e}"))?;
    let ipc = PortusIpc::bind(&cli.bind_dir, &cli.portus_socket, Trust::current(cli.allow_gid))?;
    if cli.fold == FoldMode::Kernel {
        fold::create_msg(0, 0, 0, 0, 0, 0, 0, &cli.congalg).map_err(|e| anyhow::anyhow!("--congalg: {e}"))?;
    }
    let mut bpf = BpfDatapath::load(bpf_config(&cli))?;
    let outbox = ipc.sender()?;
    let backend = Backend::new(&cli, &bpf, &outbox)?;
    let queue = Rc::new(RefCell::new(Vec::<Event>::new()));
    let bad_records = Rc::new(RefCell::new(0u64));
    let events = bpf.event_reader(queue.clone(), bad_records.clone())?;
    bpf.register()?;
    if !ca_available(CA_NAME)? {
        bail!("attached the struct_ops but `{CA_NAME}` is not in tcp_available_congestion_control");
    }
    let _ready = announce_ready(&cli, &ipc, &rules)?;
    let mut lp = Loop {
        events,
        queue,
        backend,
        bpf,
        ipc,
        outbox,
        ack_cost: Samples::new(65536),
        cmd_latency: Samples::new(65536),
        bad_records,
        bad_msgs: 0,
        rules,
        watch: AlgorithmWatch::new(&cli.portus_socket, Duration::from_millis(cli.fallback_timeout_ms)),
        announce_at: None,
        known: HashSet::new(),
        announced: HashSet::new(),
        resync: FlowResync::default(),
        resynced_flows: 0,
        drop_creates: cli.test_drop_create_records,
        user_guard_fallbacks: 0,
    };
    lp.serve(stop, cli.fallback_timeout_ms);
    let stats = lp.shutdown();
    match &cli.stats_file {
        Some(path) => stats.write_file(path),
        None => Ok(()),
    }
}

/// The BPF side's settings from the command line.
fn bpf_config(cli: &Cli) -> BpfConfig {
    BpfConfig {
        wake_interval: Duration::from_micros(cli.wake_us),
        stale_after: Duration::from_millis(cli.fallback_timeout_ms),
        report_wake: Duration::from_millis(cli.report_wake_ms),
        report_prompt: Duration::from_micros(cli.report_prompt_us),
        fold_in_kernel: cli.fold == FoldMode::Kernel,
        fold_jit: cli.fold_jit,
        control_floor: Duration::from_millis(cli.control_timeout_ms),
    }
}

/// `ccp` is registered: write --ready-file (removed again when the returned
/// guard drops) and log what this datapath serves.
fn announce_ready(cli: &Cli, ipc: &PortusIpc, rules: &RuleTable) -> Result<ReadyFile> {
    let socket = ipc.path().to_string_lossy().into_owned();
    let ready = ReadyFile(cli.ready_file.clone());
    if let Some(p) = &cli.ready_file {
        let body = serde_json::to_vec(&Ready { ca: CA_NAME, pid: std::process::id(), socket: &socket })?;
        ccplab_util::fs::write_atomically(p, |w| w.write_all(&body))
            .with_context(|| format!("--ready-file {}: cannot write", p.display()))?;
    }
    tracing::info!(ca = CA_NAME, socket = %socket, portus = %cli.portus_socket.display(), congalg = %rules.default_algorithm(), fold = ?cli.fold, "registered; ready");
    for r in rules.rules() {
        tracing::info!(rule = %r, "flows matching this rule ask for this algorithm");
    }
    Ok(ready)
}

/// Index in the poll set of the algorithm process's pidfd.
const ALGORITHM_EXIT: usize = 3;
/// How often the summary line is logged (at debug) while running.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

impl Loop {
    /// What the loop sleeps on: the event ring, Portus's socket, the stop
    /// signals, the algorithm's pidfd and, `--fold kernel`, the report ring.
    fn poll_set(&self, stop: &StopSignals) -> Vec<libc::pollfd> {
        let mut fds = vec![
            libc::pollfd { fd: self.events.epoll_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: self.ipc.fd(), events: libc::POLLIN, revents: 0 },
            // readable once SIGINT/SIGTERM arrived: wakes the poll at once
            libc::pollfd { fd: stop.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            // the algorithm process's pidfd (readable once it exited), -1 (not
            // polled) until its process is known
            libc::pollfd { fd: -1, events: libc::POLLIN, revents: 0 },
        ];
        if let Some(fd) = self.backend.poll_fd() {
            fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        }
        fds
    }

    /// Turn after turn until a stop signal.
    fn serve(&mut self, stop: &StopSignals, fallback_timeout_ms: u64) {
        let mut buf = vec![0u8; 64 * 1024];
        let mut fds = self.poll_set(stop);
        let mut last_summary = Instant::now();
        let mut last_resync = Instant::now();
        while stop.received().is_none() {
            self.wait(&mut fds, fallback_timeout_ms);
            self.drain_ipc(&mut buf);
            if !self.outbox.flush() {
                self.watch.send_failed(Instant::now());
            }
            self.handle_events();
            self.backend.collect_reports(&self.bpf);
            if last_resync.elapsed() >= RESYNC_EVERY {
                self.resync();
                last_resync = Instant::now();
            }
            if self.backend.end_turn() {
                self.watch.send_failed(Instant::now());
            }
            if last_summary.elapsed() >= SUMMARY_EVERY {
                self.summary(false);
                last_summary = Instant::now();
            }
        }
    }

    /// Follow the algorithm, then sleep until something is ready or the
    /// poll timeout ([`Loop::poll_timeout_ms`]) passed.
    fn wait(&mut self, fds: &mut [libc::pollfd], fallback_timeout_ms: u64) {
        self.watch_algorithm();
        fds[ALGORITHM_EXIT].fd = self.watch.exit_fd().unwrap_or(-1);
        let timeout_ms = self.poll_timeout_ms(idle_poll_ms(fallback_timeout_ms, self.watch.probe_period()));
        // SAFETY: fds is a valid array of pollfd for the call's duration.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if fds[ALGORITHM_EXIT].fd >= 0 && fds[ALGORITHM_EXIT].revents != 0 {
            self.watch.process_exited(Instant::now());
        }
    }

    /// Handle the flow events in the ring (creates dropped first while
    /// --test-drop-create-records asks for it).
    fn handle_events(&mut self) {
        if let Err(e) = self.events.consume() {
            tracing::warn!(error = %e, "ring buffer consume");
        }
        let events = std::mem::take(&mut *self.queue.borrow_mut());
        for ev in events {
            if matches!(ev, Event::Created(_)) && self.drop_creates > 0 {
                self.drop_creates -= 1;
                tracing::warn!("test: create record dropped (--test-drop-create-records)");
                continue;
            }
            self.handle(ev);
        }
    }

    /// After a stop signal: handle the flow events still in the ring, log
    /// the summary, unregister `ccp`, close the maps and remove the socket
    /// file. Returns the summary's figures.
    ///
    /// The last drain matters: a run's sender closes its sockets as it
    /// exits, just before the runner's SIGTERM, so their release records
    /// (each flow's control evidence, read by experiments/ccplab/control.py)
    /// are often still in the ring when the signal wakes the loop.
    fn shutdown(mut self) -> Stats {
        self.handle_events();
        tracing::info!("signal received; unregistering {CA_NAME}");
        let stats = self.summary(true);
        self.bpf.unregister();
        drop(self); // rings first, then the maps; removes the socket file
        stats
    }
}

/// Heartbeats the loop stamps per fallback timeout while idle: the BPF side
/// falls back when the stamp is a whole timeout old, so a loop held up for
/// two thirds of the timeout (333 ms at the default) still keeps the flows.
const HEARTBEATS_PER_TIMEOUT: u64 = 3;

/// The idle poll timeout, ms: the liveness probe's period (`probe_period`,
/// [`liveness::AlgorithmWatch::probe_period`]) and short enough to refresh
/// the heartbeat [`HEARTBEATS_PER_TIMEOUT`] times per fallback timeout.
/// Each idle wakeup costs 60-120 us of CPU here (docs/NOTES.md).
fn idle_poll_ms(fallback_timeout_ms: u64, probe_period: Duration) -> libc::c_int {
    let probe_ms = probe_period.as_millis() as u64;
    (fallback_timeout_ms / HEARTBEATS_PER_TIMEOUT).clamp(1, probe_ms.max(1)) as libc::c_int
}

#[cfg(test)]
mod tests {
    use super::idle_poll_ms;
    use crate::liveness::{PROBE_EVERY, PROBE_EVERY_WATCHED};

    #[test]
    fn idle_poll_waits_for_the_probe_but_refreshes_the_heartbeat_in_time() {
        assert_eq!(idle_poll_ms(500, PROBE_EVERY), 100, "default fallback timeout: the 100 ms probe period");
        assert_eq!(idle_poll_ms(500, PROBE_EVERY_WATCHED), 166, "process watched: 3 heartbeats per timeout");
        assert_eq!(idle_poll_ms(200, PROBE_EVERY), 66, "3 heartbeat refreshes per fallback timeout");
        assert_eq!(idle_poll_ms(1, PROBE_EVERY), 1, "never a 0 ms (busy) poll");
        assert_eq!(idle_poll_ms(60_000, PROBE_EVERY), 100);
        assert_eq!(idle_poll_ms(60_000, PROBE_EVERY_WATCHED), 1000);
    }
}

