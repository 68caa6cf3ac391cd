//! Thin Portus adapter: a `CongAlg` that installs the algorithm's fold program
//! for each new flow, and a `Flow` that decodes each report, calls the pure
//! window logic and sets the datapath's cwnd with `update_field("Cwnd")`.
//!
//! Log lines (tracing, info level, target `ccp`):
//! - `flow sid=<u32> alg=<name> mss=<bytes> dp_init_cwnd=<bytes> -> cwnd=<bytes> bytes`
//! - `report sid=<u32> acked=<bytes> sacked=<pkts> loss=<pkts> timeout=<bool>
//!    rtt_us=<us> min_rtt_us=<us> inflight=<pkts> dp_cwnd=<bytes> -> cwnd=<bytes> bytes
//!    cwnd_pkts=<f64> ssthresh_pkts=<f64|inf> phase=<slow_start|cong_avoid|recovery|rto_recovery>`
//! - `flow closed sid=<u32>`

use crate::window::{WindowAlgorithm, WindowParams};
use crate::AlgorithmSpec;
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
    type Flow = PortusFlow<I, S::Window>;

    fn name() -> &'static str {
        S::NAME
    }

    fn datapath_programs(&self) -> HashMap<&'static str, String> {
        let (name, text) = S::program();
        HashMap::from([(name, text.to_owned())])
    }

    fn new_flow(&self, mut control: Datapath<I>, info: DatapathInfo) -> Self::Flow {
        let mss = if info.mss == 0 {
            warn!(target: "ccp", "flow sid={} has mss=0, assuming {FALLBACK_MSS_BYTES}", info.sock_id);
            FALLBACK_MSS_BYTES
        } else {
            info.mss
        };
        let window = S::new_window(&self.args, self.bounds.params(mss));
        let (program, _) = S::program();
        let sc = match control.set_program(program, None) {
            Ok(sc) => Some(sc),
            Err(e) => {
                error!(target: "ccp", "flow sid={}: installing program {program} failed: {}", info.sock_id, e.0);
                None
            }
        };
        let flow = PortusFlow { control, sc, window, clock: self.clock };
        info!(
            target: "ccp",
            "flow sid={} alg={} mss={} dp_init_cwnd={} -> cwnd={} bytes",
            info.sock_id,
            S::NAME,
            mss,
            info.init_cwnd,
            flow.window.cwnd_bytes()
        );
        flow.set_cwnd(info.sock_id);
        flow
    }
}

/// Per-flow adapter around the pure window logic `W`.
pub struct PortusFlow<I: Ipc, W: WindowAlgorithm> {
    control: Datapath<I>,
    sc: Option<Scope>,
    window: W,
    clock: Instant,
}

impl<I: Ipc, W: WindowAlgorithm> PortusFlow<I, W> {
    /// The pure window logic (for inspection).
    pub fn window(&self) -> &W {
        &self.window
    }

    fn set_cwnd(&self, sid: u32) {
        let Some(sc) = &self.sc else { return };
        let bytes = self.window.cwnd_bytes();
        if let Err(e) = self.control.update_field(sc, &[("Cwnd", bytes)]) {
            warn!(target: "ccp", "flow sid={sid}: cwnd update failed: {}", e.0);
        }
    }
}

impl<I: Ipc, W: WindowAlgorithm> portus::Flow for PortusFlow<I, W> {
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
        let cwnd = self.window.on_report(&m);
        info!(
            target: "ccp",
            "report sid={} acked={} sacked={} loss={} timeout={} rtt_us={} min_rtt_us={} inflight={} dp_cwnd={} -> cwnd={} bytes cwnd_pkts={:.3} ssthresh_pkts={:.3} phase={}",
            sid,
            m.acked_bytes,
            m.sacked_pkts,
            m.lost_pkts,
            m.timeout,
            m.rtt_us,
            m.min_rtt_us,
            m.inflight_pkts,
            m.dp_cwnd_bytes,
            cwnd,
            self.window.cwnd_pkts(),
            self.window.ssthresh_pkts(),
            self.window.phase().as_str()
        );
        self.set_cwnd(sid);
    }

    fn close(&mut self) {
        info!(target: "ccp", "flow closed sid={}", self.control.get_sock_id());
    }
}
