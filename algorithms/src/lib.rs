//! ccp-algorithms: congestion-control algorithms for the Congestion Control
//! Plane (CCP), written against Portus 0.9.
//!
//! Layout (one module per idea, one file per algorithm):
//! - [`cc`]: the congestion-control building blocks, one module per idea
//!   (measurement, window bounds, RTT estimation, window vocabulary, loss
//!   guard, PRR, slow start, pacing).
//! - [`loss_based`]: the loss-based core (recovery, PRR, slow start in the
//!   fold) Reno and Cubic share; each keeps only its own rules.
//! - [`reno`], [`cubic`], [`vegas`], [`copa`], [`bbr`]: one algorithm each: its
//!   pure logic (unit-tested on scripted reports without any datapath), its
//!   flags and its [`AlgorithmSpec`].
//! - [`suite`]: THE list of algorithms. The runner's registry, `ccplab
//!   algorithms` and the names all come from it (`ccp-algorithms --list-json`).
//! - [`fold`]: the fold programs (per-ACK accumulation + report cadence) and
//!   report decoding.
//! - [`portus_glue`]: the thin Portus adapter (CongAlg / Flow), logging.
//! - [`cli`]: the shared command line (`--ipc`, window bounds,
//!   `--dump-program`, `--describe-json`) and the `main` of an algorithm.
//!
//! Adding an algorithm (see docs/writing-an-algorithm.md): one file `src/<name>.rs`
//! with its logic (a [`Controller`], or a [`cc::WindowAlgorithm`] for a
//! pure window algorithm), its flags (a clap `Args` struct) and an
//! [`AlgorithmSpec`]; one line in [`suite::SUITE`].

pub mod bbr;
pub mod cli;
pub mod contest;
pub mod copa;
pub mod cubic;
pub mod fold;
pub mod loss_based;
pub mod portus_glue;
pub mod reno;
pub mod reinstall;
pub mod repeats;
pub mod suite;
pub mod tutorial;
pub mod unix_ipc;
pub mod vegas;
pub mod cc;

pub use cubic::CubicSpec;
pub use reno::RenoSpec;

use fold::FoldProgram;
use cc::{Measurement, WindowAlgorithm, WindowParams};

/// What an algorithm commands the datapath after a report: a congestion window
/// and/or a pacing rate. `None` leaves that control as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Control {
    /// Congestion window in bytes (the datapath converts to packets with the MSS).
    pub cwnd_bytes: Option<u32>,
    /// Pacing rate in bytes/s (the datapath turns on TCP-internal pacing).
    pub rate_bytes_per_sec: Option<u64>,
}

/// The per-flow logic of an algorithm, independent of Portus: it sees each
/// report of its fold program and answers with a [`Control`].
pub trait Controller: Send {
    /// The control to install when the flow starts (before any report).
    fn initial(&self) -> Control;
    /// Apply one report; returns what to command now.
    fn on_report(&mut self, m: &Measurement) -> Control;
    /// The algorithm's state for the log line of a report, `key=value` pairs
    /// (e.g. `cwnd_pkts=12.000 ssthresh_pkts=inf phase=cong_avoid`).
    fn state(&self) -> String;
    /// Control registers of the algorithm's own fold program to set with
    /// each command after a report, (register name, value); none by default
    /// (bbr: BtlBw for its per-ACK ACK-aggregation block).
    fn fold_registers(&self) -> Vec<(&'static str, u32)> {
        Vec::new()
    }
    /// Control registers to set with [`Controller::initial`]; none by default
    /// (reno, cubic: the fold's slow-start cwnd, so a late initial command is
    /// not taken for user space's takeover, [`crate::cc::FoldSlowStart::initial_registers`]).
    fn initial_fold_registers(&self) -> Vec<(&'static str, u32)> {
        Vec::new()
    }
}

/// Every pure window algorithm is a [`Controller`] that sets cwnd only.
impl<W: WindowAlgorithm> Controller for W {
    fn initial(&self) -> Control {
        Control { cwnd_bytes: Some(self.cwnd_bytes()), rate_bytes_per_sec: None }
    }

    fn on_report(&mut self, m: &Measurement) -> Control {
        Control { cwnd_bytes: Some(WindowAlgorithm::on_report(self, m)), rate_bytes_per_sec: None }
    }

    fn state(&self) -> String {
        format!(
            "cwnd_pkts={:.3} ssthresh_pkts={:.3} phase={}",
            self.cwnd_pkts(),
            self.ssthresh_pkts(),
            self.phase().as_str()
        )
    }

    fn fold_registers(&self) -> Vec<(&'static str, u32)> {
        WindowAlgorithm::fold_registers(self)
    }

    fn initial_fold_registers(&self) -> Vec<(&'static str, u32)> {
        WindowAlgorithm::initial_fold_registers(self)
    }
}

/// Everything the shared CLI, the suite table and the Portus glue need to know
/// about one algorithm.
pub trait AlgorithmSpec: 'static {
    /// Registry name, and the CongAlg name Portus matches against the
    /// datapath's requested congAlg string (e.g. "reno").
    const NAME: &'static str;
    /// One-line summary.
    const SUMMARY: &'static str;
    /// Source of truth for the algorithm (RFC, paper, kernel file).
    const SOURCE: &'static str;
    /// What it commands: "cwnd", "rate" or "cwnd+rate" (for the listing).
    const CONTROLS: &'static str = "cwnd";
    /// Default floor of cwnd in packets (1; 2 where the algorithm's spec says so, docs/algorithms.md).
    const DEFAULT_MIN_CWND_PKTS: &'static str = "1";
    /// The algorithm's own flags (clap), beside the shared ones.
    type Args: clap::Args + Clone + Send + std::fmt::Debug + 'static;
    /// The per-flow logic.
    type Flow: Controller + 'static;

    /// Check the algorithm's flags; the error names the flag and what is wrong.
    fn validate(_args: &Self::Args) -> Result<(), String> {
        Ok(())
    }

    /// Create the logic of a new flow.
    fn new_flow(args: &Self::Args, params: WindowParams) -> Self::Flow;

    /// The fold program this algorithm installs (its report cadence).
    fn program(args: &Self::Args) -> FoldProgram;

    /// On a datapath that does not pace cwnd-only flows itself (ccp-kernel, whose
    /// pacing rate stays at its connect-time value; `--datapath-paces no`) for a
    /// socket Linux would pace as `socket`: change `args` so the algorithm paces as
    /// that socket would and return None when it commands its own rate, or return
    /// the pacing the Portus glue commands for it ([`cc::ReportPacer`]: a rate no
    /// link reaches for an unpaced socket, Linux tcp_update_pacing_rate's rate
    /// with every report for a paced one). Default: None when the algorithm
    /// commands a rate ([`AlgorithmSpec::CONTROLS`] names it), else `socket`.
    fn pace_itself(_args: &mut Self::Args, socket: cc::SocketPacing) -> Option<cc::SocketPacing> {
        (!Self::CONTROLS.contains("rate")).then_some(socket)
    }
}

/// Check that `v` is a finite number in the open interval (lo, hi); the error
/// names the flag.
pub fn check_range(flag: &str, v: f64, lo: f64, hi: f64) -> Result<(), String> {
    if v.is_finite() && v > lo && v < hi {
        Ok(())
    } else {
        Err(format!("--{flag} must be a number in ({lo}, {hi}), got {v}"))
    }
}
