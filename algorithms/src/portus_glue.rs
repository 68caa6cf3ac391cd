//! Thin Portus adapter: a `CongAlg` that installs the algorithm's fold program
//! for each new flow, and a `Flow` that decodes each report, calls the
//! algorithm's [`Controller`] and sets the datapath's cwnd and/or pacing rate
//! with `update_field("Cwnd")` / `update_field("Rate")`.
//!
//! Log lines (tracing, info level, target `ccp`; the report line's target is
//! `ccp::report`, [`REPORT_LOG_TARGET`]):
//! - `flow sid=<u32> alg=<name> mss=<bytes> dp_init_cwnd=<bytes> -> cwnd=<bytes> bytes`
//! - `report sid=<u32> acked=<bytes> sacked=<pkts> loss=<pkts> timeout=<bool>
//!    rtt_us=<us> min_rtt_us=<us> inflight=<pkts> inflight_max=<pkts> rate_bps=<bytes/s>
//!    dp_cwnd=<bytes> -> cwnd=<bytes|-> bytes rate=<bytes/s|-> <algorithm state, key=value>`
//!   (reno/cubic/vegas state: `cwnd_pkts=<f64> ssthresh_pkts=<f64|inf>
//!   phase=<slow_start|cong_avoid|recovery|rto_recovery>`; bbr: `mode=`, copa: `mode=`, `velocity=`)
//! - `flow closed sid=<u32> repeats_skipped=<answers not sent, crate::repeats>`

use crate::reinstall::InstallWatch;
use crate::repeats::RepeatFilter;
use crate::cc::{Measurement, ReportPacer, SocketPacing, WindowParams};
use crate::{AlgorithmSpec, Control, Controller};
use portus::ipc::Ipc;
use portus::lang::Scope;
use portus::{CongAlg, Datapath, DatapathInfo, DatapathTrait, Report};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tracing::{debug, error, info, warn};

/// MSS assumed when the datapath reports 0 (an Ethernet TCP/IPv4 segment without options).
pub const FALLBACK_MSS_BYTES: u32 = 1460;

/// The window bounds every algorithm shares, in packets (from the CLI).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowBounds {
    pub init_cwnd_pkts: f64,
    pub init_ssthresh_pkts: f64,
    pub min_cwnd_pkts: f64,
    pub max_cwnd_pkts: f64,
    /// Floor of the fold program's regular report interval, us (0 = none;
    /// `--min-report-interval-us`, see [`crate::fold::FoldProgram::text_with_report_floor`]).
    pub min_report_interval_us: u64,
    /// Skip answers that repeat what the datapath holds ([`crate::repeats`];
    /// `--skip-repeated-answers`), for the programs that allow it.
    pub skip_repeated_answers: bool,
}

impl WindowBounds {
    /// The bounds for a flow with this MSS.
    pub fn params(&self, mss_bytes: u32) -> WindowParams {
        WindowParams {
            mss_bytes,
            init_cwnd_pkts: self.init_cwnd_pkts,
            init_ssthresh_pkts: self.init_ssthresh_pkts,
            min_cwnd_pkts: self.min_cwnd_pkts,
            max_cwnd_pkts: self.max_cwnd_pkts,
        }
    }

    /// The bounds for a flow the datapath announces with `dp_init_cwnd_bytes`
    /// (the create message's init_cwnd). A cwnd above this daemon's initial
    /// window is a flow already running, announced to a (re)started
    /// algorithm: ccp-datapath announces each live flow with the cwnd its
    /// fallback (the kernel's cubic) left (docs/datapath.md, "Never
    /// frozen"). Such a flow starts there, in congestion avoidance
    /// (ssthresh = that cwnd; the create message carries no ssthresh):
    /// restarting it from the initial window in slow start cut a 118-packet
    /// window to 46 and overshot to 146 with 8 retransmissions. This is what
    /// the fallback does when it takes a flow from the algorithm, the other
    /// way round. A new flow's init_cwnd (10 packets) leaves the bounds as
    /// they are; so does a cwnd at or below the initial window.
    pub fn params_for_flow(&self, mss_bytes: u32, dp_init_cwnd_bytes: u32) -> WindowParams {
        let mut p = self.params(mss_bytes);
        let dp_pkts = f64::from(dp_init_cwnd_bytes) / f64::from(mss_bytes.max(1));
        if dp_pkts > self.init_cwnd_pkts {
            let pkts = p.clamp(dp_pkts.floor());
            p.init_cwnd_pkts = pkts;
            p.init_ssthresh_pkts = pkts.min(self.init_ssthresh_pkts);
        }
        p
    }
}

/// One algorithm as a Portus `CongAlg`; its name is `S::NAME`.
pub struct PortusAlg<S: AlgorithmSpec> {
    args: S::Args,
    bounds: WindowBounds,
    /// The pacing the glue commands where the algorithm commands no rate
    /// ([`ReportPacer`]); None on a datapath that paces.
    glue_pacing: Option<SocketPacing>,
    clock: Instant,
    _spec: PhantomData<fn() -> S>,
}

impl<S: AlgorithmSpec> PortusAlg<S> {
    /// An algorithm instance with its flags and the shared window bounds.
    pub fn new(args: S::Args, bounds: WindowBounds) -> Self {
        PortusAlg { args, bounds, glue_pacing: None, clock: Instant::now(), _spec: PhantomData }
    }

    /// For a datapath that does not pace, on a socket Linux would pace as
    /// `socket`: the algorithm paces itself ([`AlgorithmSpec::pace_itself`]) or
    /// the glue commands the rate for it.
    pub fn without_datapath_pacing(&mut self, socket: SocketPacing) {
        self.glue_pacing = S::pace_itself(&mut self.args, socket);
    }
}

impl<I: Ipc, S: AlgorithmSpec> CongAlg<I> for PortusAlg<S> {
    type Flow = PortusFlow<I, S::Flow>;

    fn name() -> &'static str {
        S::NAME
    }

    fn datapath_programs(&self) -> HashMap<&'static str, String> {
        let prog = S::program(&self.args);
        HashMap::from([(prog.name, prog.text_with_report_floor(self.bounds.min_report_interval_us))])
    }

    fn new_flow(&self, mut control: Datapath<I>, info: DatapathInfo) -> Self::Flow {
        let mss = if info.mss == 0 {
            warn!(target: "ccp", "flow sid={} has mss=0, assuming {FALLBACK_MSS_BYTES}", info.sock_id);
            FALLBACK_MSS_BYTES
        } else {
            info.mss
        };
        let window = S::new_flow(&self.args, self.bounds.params_for_flow(mss, info.init_cwnd));
        let fold = S::program(&self.args);
        let repeats = RepeatFilter::new(self.bounds.skip_repeated_answers && fold.skips_repeated_answers(), mss);
        let program = fold.name;
        let sc = match control.set_program(program, None) {
            Ok(sc) => Some(sc),
            Err(e) => {
                error!(target: "ccp", "flow sid={}: installing program {program} failed: {}", info.sock_id, e.0);
                None
            }
        };
        let pacer = self.glue_pacing.map(|socket| ReportPacer::new(mss, socket));
        let mut initial = window.initial();
        initial.rate_bytes_per_sec = initial.rate_bytes_per_sec.or(pacer.as_ref().and_then(ReportPacer::initial_rate));
        let mut flow = PortusFlow { control, sc, window, clock: self.clock, repeats, pacer };
        info!(
            target: "ccp",
            "flow sid={} alg={} mss={} dp_init_cwnd={} -> cwnd={} bytes",
            info.sock_id,
            S::NAME,
            mss,
            info.init_cwnd,
            initial.cwnd_bytes.unwrap_or(0)
        );
        let regs = flow.window.initial_fold_registers();
        flow.apply(info.sock_id, initial, &regs, None);
        flow
    }
}

/// Per-flow adapter around the algorithm's logic `W`.
pub struct PortusFlow<I: Ipc, W: Controller> {
    control: Datapath<I>,
    sc: Option<Scope>,
    window: W,
    clock: Instant,
    repeats: RepeatFilter,
    /// Commands the kernel's pacing rate where the algorithm commands none.
    pacer: Option<ReportPacer>,
}

impl<I: Ipc, W: Controller> PortusFlow<I, W> {
    /// The algorithm's logic (for inspection).
    pub fn window(&self) -> &W {
        &self.window
    }

    /// Send `ctl` to the datapath in one update (Cwnd and/or Rate, and the
    /// algorithm's fold registers `regs`, [`Controller::fold_registers`]),
    /// unless it only repeats the last one ([`crate::repeats`]); `report` is
    /// the report it answers, None for the initial command.
    fn apply(&mut self, sid: u32, ctl: Control, regs: &[(&'static str, u32)], report: Option<&Measurement>) {
        let Some(sc) = &self.sc else { return };
        let mut fields: Vec<(&'static str, u32)> = Vec::with_capacity(2 + regs.len());
        if let Some(bytes) = ctl.cwnd_bytes {
            fields.push(("Cwnd", bytes));
        }
        if let Some(rate) = ctl.rate_bytes_per_sec {
            // libccp's Rate is a u32 in bytes/s; 0 would mean "no rate".
            fields.push(("Rate", rate.clamp(1, u64::from(u32::MAX)) as u32));
        }
        if fields.is_empty() {
            return;
        }
        fields.extend_from_slice(regs);
        if !self.repeats.should_send(&fields, report) {
            return;
        }
        if let Err(e) = self.control.update_field(sc, &fields) {
            warn!(target: "ccp", "flow sid={sid}: control update failed: {}", e.0);
        }
    }
}

/// The tracing target of the per-report line (`report sid=... -> cwnd=...`),
/// apart from the daemon's other lines (target `ccp`) so that a run at a high
/// report rate can turn it off alone: `RUST_LOG=info,ccp::report=off`. One
/// formatted line and one write per report cost the daemon about as much as
/// the report itself at 100 flows (the datapath benchmark turns it off).
pub const REPORT_LOG_TARGET: &str = "ccp::report";

/// `-` for a control left unchanged.
fn shown(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |x| x.to_string())
}

impl<I: Ipc, W: Controller> portus::Flow for PortusFlow<I, W> {
    fn on_report(&mut self, sid: u32, report: Report) {
        let Some(sc) = &self.sc else { return };
        let now_us = self.clock.elapsed().as_micros() as u64;
        let m = match crate::fold::read_measurement(&report, sc, now_us) {
            Ok(m) => m,
            Err(e) => {
                // A report of a program this flow no longer runs, or a malformed one.
                debug!(target: "ccp", "report sid={sid} ignored: {}", e.0);
                return;
            }
        };
        let mut ctl = self.window.on_report(&m);
        if let Some(p) = &mut self.pacer {
            let rate = p.rate_for(&m, ctl.cwnd_bytes);
            ctl.rate_bytes_per_sec = ctl.rate_bytes_per_sec.or(rate);
        }
        info!(
            target: REPORT_LOG_TARGET,
            "report sid={} acked={} sacked={} loss={} timeout={} rtt_us={} min_rtt_us={} inflight={} inflight_max={} rate_bps={} dp_cwnd={} -> cwnd={} bytes rate={} {}",
            sid,
            m.acked_bytes,
            m.sacked_pkts,
            m.lost_pkts,
            m.timeout,
            m.rtt_us,
            m.min_rtt_us,
            m.inflight_pkts,
            m.inflight_max_pkts,
            m.delivery_rate_bps,
            m.dp_cwnd_bytes,
            shown(ctl.cwnd_bytes.map(u64::from)),
            shown(ctl.rate_bytes_per_sec),
            self.window.state()
        );
        let regs = self.window.fold_registers();
        self.apply(sid, ctl, &regs, Some(&m));
    }

    fn close(&mut self) {
        info!(target: "ccp", "flow closed sid={} repeats_skipped={}", self.control.get_sock_id(), self.repeats.skipped());
    }
}

// ---------------------------------------------------------------------------
// Several algorithms in one daemon.
//
// Portus 0.9 picks the algorithm of a new flow by comparing the create
// message's congAlg string with `CongAlg::name()` of each algorithm given to
// `RunBuilder::additional_alg`, falling back to `default_alg`. That list is a
// type-level list fixed at compile time (`name()` has no `self`), while the
// hosted set here is chosen on the command line; a list with one typed slot
// per suite algorithm made rustc's trait solver run for more than 14 minutes.
// So the daemon registers one [`Router`] as Portus's default algorithm and
// does the same matching itself: [`TapIpc`] wraps the IPC socket and notes
// each create message's (sid, congAlg) with Portus's own parser
// (`portus::serialize::Msg::from_buf`) before Portus reads it; Portus then
// calls `Router::new_flow` for that sid in the same thread, which looks the
// name up among the hosted algorithms (exact match, as Portus does) or uses
// the first one.
// ---------------------------------------------------------------------------

/// Portus's unix-socket IPC as the daemon uses it: Portus's socket, its
/// sends batched until the next receive ([`crate::unix_ipc`]).
pub type UnixIpc = crate::unix_ipc::BatchedUnixSocket;
/// Portus's netlink IPC as the daemon uses it.
pub type NetlinkIpc = portus::ipc::netlink::Socket<portus::ipc::Blocking>;

/// libccp's MAX_NUM_PROGRAMS: Portus installs every hosted algorithm's fold
/// program in the datapath when it announces itself, and a libccp datapath
/// (ccp-datapath included) holds at most this many.
pub const LIBCCP_MAX_PROGRAMS: usize = 10;

/// One algorithm with its flags, over IPC `I`, without its type.
pub trait HostedAlgOver<I: Ipc> {
    /// Start a flow (as `CongAlg::new_flow`).
    fn start_flow(&self, control: Datapath<I>, info: DatapathInfo) -> Box<dyn portus::Flow>;
}

/// One algorithm with its flags, ready to host over either IPC.
/// (Over [`TapIpc`], the socket wrapper [`Hosting::run`] puts around the IPC.)
pub trait HostedAlg: HostedAlgOver<TapIpc<UnixIpc>> + HostedAlgOver<TapIpc<NetlinkIpc>> + Send {
    /// Its suite name (the congAlg string it answers to).
    fn name(&self) -> &'static str;
    /// Its fold programs, {program name: text}.
    fn programs(&self) -> HashMap<&'static str, String>;
    /// Run on a datapath that does not pace ([`PortusAlg::without_datapath_pacing`]).
    fn without_datapath_pacing(&mut self, socket: SocketPacing);
}

impl<I: Ipc, S: AlgorithmSpec> HostedAlgOver<I> for PortusAlg<S> {
    fn start_flow(&self, control: Datapath<I>, info: DatapathInfo) -> Box<dyn portus::Flow> {
        Box::new(<Self as CongAlg<I>>::new_flow(self, control, info))
    }
}

impl<S: AlgorithmSpec> HostedAlg for PortusAlg<S> {
    fn name(&self) -> &'static str {
        S::NAME
    }

    fn programs(&self) -> HashMap<&'static str, String> {
        <Self as CongAlg<UnixIpc>>::datapath_programs(self)
    }

    fn without_datapath_pacing(&mut self, socket: SocketPacing) {
        PortusAlg::without_datapath_pacing(self, socket)
    }
}

/// The congAlg each created flow asked for, by sid, noted by [`TapIpc`] and
/// taken by [`Router::new_flow`].
type Requested = Arc<Mutex<HashMap<u32, String>>>;

/// An IPC socket that notes the congAlg of every create message it receives,
/// and installs the fold programs again when no flow reports after an install
/// ([`crate::reinstall`]).
pub struct TapIpc<I: Ipc> {
    inner: I,
    requested: Requested,
    watch: Mutex<InstallWatch<I::Addr>>,
    /// Install messages still to drop ([`DROP_INSTALLS_ENV`]).
    drop_installs: std::sync::atomic::AtomicU32,
    /// Whether installs are sent again ([`crate::reinstall`]): only over netlink, to ccp-kernel,
    /// whose libccp can refuse installs that arrive before its program table exists. ccp-datapath
    /// announces its flows again itself and guards its program table, so re-sent installs there
    /// would be refused or undo a program change the algorithm made since.
    reinstall: bool,
}

/// Fault injection for the start-order check: the daemon drops this many of the first
/// install messages it sends (as the kernel refuses installs that arrive before libccp has
/// its program table), so the guest check can show the recovery of [`crate::reinstall`]
/// on the real module. Unset or 0 in normal use.
pub const DROP_INSTALLS_ENV: &str = "CCPLAB_DROP_INSTALLS";

/// `Ipc::name()` of Portus's netlink socket (the ccp-kernel module's IPC).
const NETLINK_IPC_NAME: &str = "netlink";

impl<I: Ipc> TapIpc<I> {
    /// `inner` with an empty create table and install watch.
    fn new(inner: I, requested: Requested) -> Self {
        let drop: u32 = std::env::var(DROP_INSTALLS_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        if drop > 0 {
            warn!(target: "ccp", "{DROP_INSTALLS_ENV}={drop}: dropping the first {drop} install messages (fault injection)");
        }
        TapIpc {
            inner,
            requested,
            watch: Mutex::new(InstallWatch::default()),
            drop_installs: std::sync::atomic::AtomicU32::new(drop),
            reinstall: I::name() == NETLINK_IPC_NAME,
        }
    }

    /// Send again what the install watch says is due (logged once per round).
    fn resend_due(&self) {
        if !self.reinstall {
            return;
        }
        let (again, overdue) = self.watch.lock().unwrap_or_else(|e| e.into_inner()).due(Instant::now());
        if again.is_empty() {
            return;
        }
        warn!(
            target: "ccp",
            "flows {overdue:?} sent no report since the fold programs were installed: installing them again ({} messages)",
            again.len()
        );
        for (msg, to) in again {
            if let Err(e) = self.inner.send(&msg, &to) {
                warn!(target: "ccp", "installing again failed: {}", e.0);
            }
        }
    }

    /// Note (sid, congAlg) of each create message in one received datagram
    /// (a datagram may hold several messages, each with its length; [`crate::reinstall::messages`]).
    fn note_creates(&self, buf: &[u8]) {
        for (typ, _, msg) in crate::reinstall::messages(buf) {
            if typ == crate::reinstall::MSG_CREATE {
                if let Ok((portus::serialize::Msg::Cr(c), _)) = portus::serialize::Msg::from_buf(msg) {
                    let name = c.cong_alg.unwrap_or_default();
                    self.requested.lock().unwrap_or_else(|e| e.into_inner()).insert(c.sid, name);
                }
            }
        }
    }
}

impl<I: Ipc> Ipc for TapIpc<I>
where
    I::Addr: Send,
{
    type Addr = I::Addr;

    fn name() -> String {
        I::name()
    }

    fn send(&self, msg: &[u8], to: &Self::Addr) -> portus::Result<()> {
        self.watch.lock().unwrap_or_else(|e| e.into_inner()).sent(msg, to);
        let is_install = crate::reinstall::messages(msg).any(|(t, _, _)| t == crate::reinstall::MSG_INSTALL);
        if is_install && self.drop_installs.load(Ordering::Relaxed) > 0 {
            self.drop_installs.fetch_sub(1, Ordering::Relaxed);
            warn!(target: "ccp", "fault injection: install message dropped");
            return Ok(());
        }
        self.inner.send(msg, to)
    }

    fn recv(&self, msg: &mut [u8]) -> portus::Result<(usize, Self::Addr)> {
        // Runs at least once a second: Portus's sockets time out their receives.
        self.resend_due();
        let (n, addr) = self.inner.recv(msg)?;
        self.note_creates(&msg[..n]);
        self.watch.lock().unwrap_or_else(|e| e.into_inner()).received(&msg[..n], Instant::now());
        Ok((n, addr))
    }

    fn close(&mut self) -> portus::Result<()> {
        self.inner.close()
    }
}

/// The algorithms one daemon hosts, the first being the default. Build with
/// [`Hosting::new`], run with [`Hosting::run`].
pub struct Hosting {
    algs: Vec<Box<dyn HostedAlg>>,
}

impl Hosting {
    /// Host `algs`; the first is also the default for flows whose congAlg
    /// matches none of them. Errors (naming the algorithm): an empty list, a
    /// name given twice, two fold programs of one name with different texts,
    /// more programs than a libccp datapath holds.
    pub fn new(algs: Vec<Box<dyn HostedAlg>>) -> Result<Self, String> {
        if algs.is_empty() {
            return Err("no algorithm to host".into());
        }
        let mut programs: HashMap<&'static str, (&'static str, String)> = HashMap::new();
        for (i, alg) in algs.iter().enumerate() {
            let name = alg.name();
            if algs[..i].iter().any(|a| a.name() == name) {
                return Err(format!("{name} is hosted twice; flows choose an algorithm by name only, so host each once"));
            }
            for (p, text) in alg.programs() {
                match programs.get(p) {
                    Some((other, t)) if *t != text => {
                        return Err(format!("{name} and {other} both install a fold program named {p}, with different texts"));
                    }
                    _ => {
                        programs.insert(p, (name, text));
                    }
                }
            }
        }
        if programs.len() > LIBCCP_MAX_PROGRAMS {
            return Err(format!(
                "{} hosted algorithms install {} fold programs; a libccp datapath holds at most {LIBCCP_MAX_PROGRAMS}",
                algs.len(),
                programs.len()
            ));
        }
        Ok(Hosting { algs })
    }

    /// The hosted names, default first.
    pub fn names(&self) -> Vec<&'static str> {
        self.algs.iter().map(|a| a.name()).collect()
    }

    /// Every hosted fold program as (program name, text), in hosted order.
    pub fn programs(&self) -> Vec<(&'static str, String)> {
        let mut out: Vec<(&'static str, String)> = Vec::new();
        for alg in &self.algs {
            let mut progs: Vec<_> = alg.programs().into_iter().collect();
            progs.sort();
            for p in progs {
                if !out.iter().any(|(q, _)| *q == p.0) {
                    out.push(p);
                }
            }
        }
        out
    }

    /// The hosted algorithm a flow asking for `congalg` gets: the one of that
    /// name, else the first (Portus's rule for `default_alg`).
    pub fn pick(&self, congalg: &str) -> &(dyn HostedAlg + 'static) {
        self.algs.iter().find(|a| a.name() == congalg).unwrap_or(&self.algs[0]).as_ref()
    }

    /// Run Portus on `sock` until `keep_running` is cleared or the IPC fails.
    pub fn run<I: Ipc>(self, sock: I, keep_running: Arc<AtomicBool>) -> portus::Result<()>
    where
        I::Addr: Send,
        dyn HostedAlg: HostedAlgOver<TapIpc<I>>,
    {
        let requested = Requested::default();
        let sock = TapIpc::new(sock, requested.clone());
        portus::RunBuilder::new(portus::ipc::BackendBuilder { sock })
            .default_alg(Router { hosting: self, requested })
            .with_stop_handle(keep_running)
            .run()
    }
}

/// Portus's only (default) algorithm in the daemon: hands each flow to the
/// hosted algorithm its create message asked for.
pub struct Router {
    hosting: Hosting,
    requested: Requested,
}

impl<I: Ipc> CongAlg<TapIpc<I>> for Router
where
    I::Addr: Send,
    dyn HostedAlg: HostedAlgOver<TapIpc<I>>,
{
    type Flow = Box<dyn portus::Flow>;

    fn name() -> &'static str {
        "ccplab-router"
    }

    fn datapath_programs(&self) -> HashMap<&'static str, String> {
        self.hosting.programs().into_iter().collect()
    }

    fn new_flow(&self, control: Datapath<TapIpc<I>>, info: DatapathInfo) -> Self::Flow {
        let asked = self.requested.lock().unwrap_or_else(|e| e.into_inner()).remove(&info.sock_id).unwrap_or_default();
        let alg = self.hosting.pick(&asked);
        if alg.name() != asked && self.hosting.algs.len() > 1 {
            info!(target: "ccp", "flow sid={} asked for {asked:?}, not hosted: default {}", info.sock_id, alg.name());
        }
        <dyn HostedAlg as HostedAlgOver<TapIpc<I>>>::start_flow(alg, control, info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::parse_from;
    use crate::cc::PacingMode;
    use crate::{bbr::BbrSpec, contest::fixed_window::FixedWindowSpec, cubic::CubicSpec, reno::RenoSpec};

    fn alg<S: AlgorithmSpec>(argv: &[&str]) -> PortusAlg<S> {
        let cli = parse_from::<S, _>(argv.iter().copied()).expect("valid flags");
        PortusAlg::<S>::new(cli.alg, cli.common.bounds().expect("valid bounds"))
    }

    #[test]
    fn without_datapath_pacing_reno_and_cubic_command_their_rate_and_cwnd_only_algorithms_get_the_glue_pacer() {
        use SocketPacing::{Kernel, Unpaced};
        let mut reno = alg::<RenoSpec>(&["reno"]);
        assert_eq!(reno.args.pacing, PacingMode::Kernel);
        reno.without_datapath_pacing(Kernel);
        assert_eq!(reno.args.pacing, PacingMode::Report, "--pacing kernel on a paced socket: reno commands the rate");
        assert_eq!(reno.glue_pacing, None);
        let mut reno = alg::<RenoSpec>(&["reno"]);
        reno.without_datapath_pacing(Unpaced);
        assert_eq!(reno.args.pacing, PacingMode::Off, "an unpaced socket: reno commands no rate");
        assert_eq!(reno.glue_pacing, Some(Unpaced), "and the glue lifts the datapath's pacing");
        let mut off = alg::<CubicSpec>(&["cubic", "--pacing", "off"]);
        off.without_datapath_pacing(Kernel);
        assert_eq!(off.args.pacing, PacingMode::Off, "an explicit off stays off");
        assert_eq!(off.glue_pacing, Some(Unpaced), "off means unpaced, on any socket");
        for socket in [Kernel, Unpaced] {
            let mut fw = alg::<FixedWindowSpec>(&["fixed-window", "--window", "37"]);
            assert_eq!(fw.glue_pacing, None, "a pacing datapath: nothing added");
            fw.without_datapath_pacing(socket);
            assert_eq!(fw.glue_pacing, Some(socket), "cwnd only: the glue paces as the socket would");
            let mut bbr = alg::<BbrSpec>(&["bbr"]);
            bbr.without_datapath_pacing(socket);
            assert_eq!(bbr.glue_pacing, None, "bbr commands its own pacing rate");
        }
    }

    /// An IPC that hands out queued datagrams (then times out, as Portus's sockets do) and keeps what is sent.
    struct FakeIpc {
        incoming: Mutex<Vec<Vec<u8>>>,
        sent: Arc<Mutex<Vec<Vec<u8>>>>,
    }

    impl Ipc for FakeIpc {
        type Addr = ();
        fn name() -> String {
            "fake".into()
        }
        fn send(&self, msg: &[u8], _to: &()) -> portus::Result<()> {
            self.sent.lock().unwrap().push(msg.to_vec());
            Ok(())
        }
        fn recv(&self, msg: &mut [u8]) -> portus::Result<(usize, ())> {
            match self.incoming.lock().unwrap().pop() {
                Some(m) => {
                    msg[..m.len()].copy_from_slice(&m);
                    Ok((m.len(), ()))
                }
                None => Err(portus::Error("timed out".into())),
            }
        }
        fn close(&mut self) -> portus::Result<()> {
            Ok(())
        }
    }

    fn libccp_msg(typ: u16, sid: u32, body: &[u32]) -> Vec<u8> {
        let mut m = typ.to_le_bytes().to_vec();
        m.extend_from_slice(&((8 + 4 * body.len()) as u16).to_le_bytes());
        m.extend_from_slice(&sid.to_le_bytes());
        body.iter().for_each(|b| m.extend_from_slice(&b.to_le_bytes()));
        m
    }

    #[test]
    fn tap_sends_the_programs_again_from_a_receive_that_times_out() {
        use crate::reinstall::{MSG_CHANGE_PROG, MSG_CREATE, MSG_INSTALL};
        let sent = Arc::new(Mutex::new(Vec::new()));
        let mut body = vec![14480, 1448, 0, 0, 0, 0];
        body.extend([0u32; 16]); // congAlg, 64 bytes
        let create = libccp_msg(MSG_CREATE, 1, &body);
        let fake = FakeIpc { incoming: Mutex::new(vec![create]), sent: sent.clone() };
        let tap = TapIpc {
            inner: fake,
            requested: Requested::default(),
            watch: Mutex::new(InstallWatch::new(std::time::Duration::ZERO)),
            // The install is lost, as the kernel refuses one that comes before its program table.
            drop_installs: std::sync::atomic::AtomicU32::new(1),
            reinstall: true, // as over netlink
        };
        let install = libccp_msg(MSG_INSTALL, 0, &[1, 0, 0]);
        tap.send(&install, &()).unwrap();
        let mut buf = [0u8; 1024];
        tap.recv(&mut buf).unwrap(); // the create
        let change = libccp_msg(MSG_CHANGE_PROG, 1, &[1, 0]);
        tap.send(&change, &()).unwrap(); // Portus's change-program for the flow
        assert_eq!(*sent.lock().unwrap(), [change.clone()], "the install was dropped");
        assert!(tap.recv(&mut buf).is_err(), "the timeout still reaches Portus");
        let all = sent.lock().unwrap().clone();
        assert_eq!(all[1..], [install, change], "install and change-program sent again before the receive");
    }

    #[test]
    fn netlink_daemons_do_without_datapath_pacing_unless_told_otherwise() {
        use crate::cli::{DatapathPaces, IpcKind};
        assert!(!DatapathPaces::Auto.resolve(IpcKind::Netlink));
        assert!(DatapathPaces::Auto.resolve(IpcKind::Unix));
        assert!(DatapathPaces::Yes.resolve(IpcKind::Netlink));
        assert!(!DatapathPaces::No.resolve(IpcKind::Unix));
        let cli = parse_from::<RenoSpec, _>(["reno", "--ipc", "netlink", "--datapath-paces", "yes"]).unwrap();
        assert_eq!(cli.common.datapath_paces, DatapathPaces::Yes);
        let e = parse_from::<RenoSpec, _>(["reno", "--also", "cubic:datapath-paces=no"]).err().expect("refused");
        assert!(e.to_string().contains("--datapath-paces belongs to the whole daemon"), "{e}");
    }

    use crate::Controller;

    fn bounds() -> WindowBounds {
        WindowBounds {
            init_cwnd_pkts: 10.0,
            init_ssthresh_pkts: f64::INFINITY,
            min_cwnd_pkts: 1.0,
            max_cwnd_pkts: 100_000.0,
            min_report_interval_us: 0,
            skip_repeated_answers: true,
        }
    }

    #[test]
    fn a_flow_announced_with_a_running_cwnd_starts_there_in_congestion_avoidance() {
        // the measured case: dp_init_cwnd=170864 bytes at MSS 1448 = 118 packets
        let p = bounds().params_for_flow(1448, 170_864);
        assert_eq!((p.init_cwnd_pkts, p.init_ssthresh_pkts), (118.0, 118.0));
        let reno = crate::reno::Reno::new(p).with_fold_slow_start(true);
        assert_eq!(reno.initial().cwnd_bytes, Some(170_864), "reno starts from the fallback's cwnd");
        assert!(!reno.state().contains("slow_start"), "not in slow start: {}", reno.state());
        let cubic = crate::cubic::Cubic::new(p, Default::default()).with_fold_slow_start(true);
        assert_eq!(cubic.initial().cwnd_bytes, Some(170_864), "cubic starts from the fallback's cwnd");
        assert!(!cubic.state().contains("slow_start"), "not in slow start: {}", cubic.state());
        // a new flow (10 packets) keeps the configured start, in slow start
        let p = bounds().params_for_flow(1448, 14_480);
        assert_eq!((p.init_cwnd_pkts, p.init_ssthresh_pkts), (10.0, f64::INFINITY));
        let reno = crate::reno::Reno::new(p).with_fold_slow_start(true);
        assert!(reno.state().contains("slow_start"), "{}", reno.state());
        // clamped to the ceiling, and never above a configured ssthresh
        let mut b = bounds();
        b.max_cwnd_pkts = 50.0;
        b.init_ssthresh_pkts = 30.0;
        let p = b.params_for_flow(1448, 170_864);
        assert_eq!((p.init_cwnd_pkts, p.init_ssthresh_pkts), (50.0, 30.0));
    }
}
