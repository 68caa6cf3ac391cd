//! Thin Portus adapter: a `CongAlg` that installs the algorithm's fold program
//! for each new flow, and a `Flow` that decodes each report, calls the
//! algorithm's [`Controller`] and sets the datapath's cwnd and/or pacing rate
//! with `update_field("Cwnd")` / `update_field("Rate")`.
//!
//! Log lines (tracing, info level, target `ccp`):
//! - `flow sid=<u32> alg=<name> mss=<bytes> dp_init_cwnd=<bytes> -> cwnd=<bytes> bytes`
//! - `report sid=<u32> acked=<bytes> sacked=<pkts> loss=<pkts> timeout=<bool>
//!    rtt_us=<us> min_rtt_us=<us> inflight=<pkts> inflight_max=<pkts> rate_bps=<bytes/s>
//!    dp_cwnd=<bytes> -> cwnd=<bytes|-> bytes rate=<bytes/s|-> <algorithm state, key=value>`
//!   (reno/cubic/vegas state: `cwnd_pkts=<f64> ssthresh_pkts=<f64|inf>
//!   phase=<slow_start|cong_avoid|recovery|rto_recovery>`; bbr: `mode=`, copa: `mode=`, `velocity=`)
//! - `flow closed sid=<u32>`

use crate::window::WindowParams;
use crate::{AlgorithmSpec, Control, Controller};
use portus::ipc::Ipc;
use portus::lang::Scope;
use portus::{CongAlg, Datapath, DatapathInfo, DatapathTrait, Report};
use std::collections::HashMap;
use std::marker::PhantomData;
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
}

/// One algorithm as a Portus `CongAlg`; its name is `S::NAME`.
pub struct PortusAlg<S: AlgorithmSpec> {
    args: S::Args,
    bounds: WindowBounds,
    clock: Instant,
    _spec: PhantomData<fn() -> S>,
}

impl<S: AlgorithmSpec> PortusAlg<S> {
    /// An algorithm instance with its flags and the shared window bounds.
    pub fn new(args: S::Args, bounds: WindowBounds) -> Self {
        PortusAlg { args, bounds, clock: Instant::now(), _spec: PhantomData }
    }
}

impl<I: Ipc, S: AlgorithmSpec> CongAlg<I> for PortusAlg<S> {
    type Flow = PortusFlow<I, S::Flow>;

    fn name() -> &'static str {
        S::NAME
    }

    fn datapath_programs(&self) -> HashMap<&'static str, String> {
        let prog = S::program(&self.args);
        HashMap::from([(prog.name, prog.text())])
    }

    fn new_flow(&self, mut control: Datapath<I>, info: DatapathInfo) -> Self::Flow {
        let mss = if info.mss == 0 {
            warn!(target: "ccp", "flow sid={} has mss=0, assuming {FALLBACK_MSS_BYTES}", info.sock_id);
            FALLBACK_MSS_BYTES
        } else {
            info.mss
        };
        let window = S::new_flow(&self.args, self.bounds.params(mss));
        let program = S::program(&self.args).name;
        let sc = match control.set_program(program, None) {
            Ok(sc) => Some(sc),
            Err(e) => {
                error!(target: "ccp", "flow sid={}: installing program {program} failed: {}", info.sock_id, e.0);
                None
            }
        };
        let flow = PortusFlow { control, sc, window, clock: self.clock };
        let initial = flow.window.initial();
        info!(
            target: "ccp",
            "flow sid={} alg={} mss={} dp_init_cwnd={} -> cwnd={} bytes",
            info.sock_id,
            S::NAME,
            mss,
            info.init_cwnd,
            initial.cwnd_bytes.unwrap_or(0)
        );
        flow.apply(info.sock_id, initial);
        flow
    }
}

/// Per-flow adapter around the algorithm's logic `W`.
pub struct PortusFlow<I: Ipc, W: Controller> {
    control: Datapath<I>,
    sc: Option<Scope>,
    window: W,
    clock: Instant,
}

impl<I: Ipc, W: Controller> PortusFlow<I, W> {
    /// The algorithm's logic (for inspection).
    pub fn window(&self) -> &W {
        &self.window
    }

    /// Send `ctl` to the datapath in one update (Cwnd and/or Rate).
    fn apply(&self, sid: u32, ctl: Control) {
        let Some(sc) = &self.sc else { return };
        let mut fields: Vec<(&str, u32)> = Vec::with_capacity(2);
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
        if let Err(e) = self.control.update_field(sc, &fields) {
            warn!(target: "ccp", "flow sid={sid}: control update failed: {}", e.0);
        }
    }
}

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
        let ctl = self.window.on_report(&m);
        info!(
            target: "ccp",
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
        self.apply(sid, ctl);
    }

    fn close(&mut self) {
        info!(target: "ccp", "flow closed sid={}", self.control.get_sock_id());
    }
}
