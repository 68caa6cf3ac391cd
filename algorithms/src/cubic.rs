//! CUBIC window logic (RFC 9438), independent of Portus.
//!
//! This file keeps CUBIC's own rules ([`CubicRules`]: the cubic curve, the
//! Reno-friendly region, beta and fast convergence, HyStart); slow start,
//! recovery, PRR and the fold's per-ACK parts are the loss-based core's
//! ([`crate::loss_based`]), shared with Reno.
//!
//! Applied **per report** (four per RTT, plus an urgent report on loss or
//! timeout) with the report's totals: the per-ACK rule
//! `cwnd += (target - cwnd) / cwnd` becomes `cwnd += (target - cwnd) * acked / cwnd`
//! (capped at target), and `W_est += alpha * segments_acked / cwnd` is applied
//! with the report's acknowledged packets. Time `t` is the report's arrival time.
//!
//! - W_cubic(t) = C (t - K)^3 + W_max (§4.2, eq. 1), t in seconds since the
//!   start of the congestion-avoidance epoch, K = cbrt((W_max - cwnd_epoch) / C)
//!   (eq. 2); right after a reduction without fast convergence cwnd_epoch =
//!   beta W_max, so K = cbrt(W_max (1 - beta) / C). When W_max <= cwnd_epoch
//!   (after slow start or an RTO) K = 0 and W_max = cwnd_epoch (§4.2, §4.8).
//! - target = W_cubic(t + RTT) clamped to [cwnd, 1.5 cwnd] (§4.2), with RTT
//!   the flow's **minimum** RTT as Linux (`t += delay_min`), not the smoothed
//!   RTT of the RFC: behind a standing queue the SRTT is seconds (Verizon LTE,
//!   1000 packets of buffer: 1.9 s against 50 ms) and the curve ran that far
//!   ahead of kernel:cubic's.
//! - Before the first congestion event (and after an RTO), when W_max is only
//!   cwnd_epoch, cwnd grows at least 1 packet per 20 acknowledged, as Linux
//!   (`ca->cnt` at most 20 while `last_max_cwnd == 0`).
//! - Reno-friendly region (§4.3): W_est starts at cwnd_epoch and grows by
//!   alpha_cubic = 3 (1 - beta) / (1 + beta) per window of ACKs (1 once
//!   W_est >= cwnd_prior); when W_cubic(t) < W_est, cwnd = W_est.
//! - Congestion event (§4.6): cwnd_prior = cwnd, ssthresh = max(beta cwnd, 2),
//!   cwnd = ssthresh; W_max = cwnd, or with fast convergence (§4.7) and
//!   cwnd < previous W_max: W_max = cwnd (1 + beta) / 2. Once per window, as in
//!   Reno: no growth and no second cut until the recovery point.
//! - Timeout (§4.8): ssthresh = max(beta cwnd, 2) (kept when the RTO hits
//!   during recovery), cwnd = 1, epoch and W_max forgotten.
//! - Growth only when cwnd-limited (as Linux `tcp_is_cwnd_limited`).
//! - Slow start as Reno's, ended early by HyStart as Linux tcp_cubic.c does
//!   (see [`HyStart`]): delay increase (the minimum of a round's first 8 RTT
//!   samples exceeds the flow's minimum RTT by clamp(min/8, 4 ms, 16 ms); for
//!   a paced flow also a report whose every RTT sample, at least 8, does: the
//!   kernel's rounds start with each flight, ours are SRTTs of reports) or
//!   ACK train (the round's ACKs, each at most 2 ms apart, span more than the
//!   minimum RTT + 1 ms for a paced flow, half the minimum RTT unpaced); then
//!   ssthresh = cwnd. Active from cwnd >= 16 packets.
//!
//! - Slow start runs per ACK in the fold program, as Reno's (see
//!   [`crate::reno`]): user space adopts the fold's cwnd at each report, checks
//!   HyStart on it and, when a detector fires, takes over with cwnd = ssthresh
//!   = the cwnd at that moment (the fold's growth after it is undone).
//! - Fast recovery follows PRR ([`crate::cc::Prr`]), as Linux, applied per
//!   ACK by the fold program as Reno's ([`crate::cc::FoldPrr`]).
//! - Pacing as kernel:cubic is paced on the same socket (`--pacing kernel`, the
//!   default): ccp-datapath keeps the TCP-internal pacing a socket came with
//!   and sets Linux `tcp_update_pacing_rate`'s rate per ACK, as the kernel
//!   does; `--pacing report` commands that rate per report instead
//!   ([`crate::cc::Paced`]), `--pacing off` commands none. See
//!   [`crate::cc::PacingMode`].
//!
//! Fold program: [`crate::fold`]'s fields (incl. the HyStart fields `rtt8`,
//! `nrtt`, `train`, `trainon` accumulated per ACK) and the per-ACK slow start,
//! four reports per RTT and at once on a loss or timeout. Differences from
//! Linux `cubic`: congestion avoidance per report, so
//! HyStart acts at the end of the report in which it triggers (ssthresh is set
//! to the cwnd the flow had when the train crossed the threshold, interpolated
//! from the report; rounds are one SRTT of reports, not the kernel's
//! ACK-of-`end_seq` rounds); the recovery point is estimated from the
//! in-flight, lost and SACKed counts at the loss; alpha switches to 1 at cwnd_prior (RFC 9438;
//! Linux keeps alpha_cubic); the epoch is not shifted after idle periods;
//! a HyStart exit is not seen by the kernel (libccp has no ssthresh field:
//! the socket's `snd_ssthresh` changes only at a loss, through the
//! datapath's `ssthresh` op), so with `--pacing kernel` the datapath keeps
//! pacing at slow start's 200 % of cwnd/SRTT after HyStart, where Linux
//! drops to 120 %.
//!
//! Why pacing and the minimum-RTT offset. Unpaced, the per-report HyStart
//! (ACK train judged against half the minimum RTT, rounds not aligned with
//! line-rate flights) left slow start early on a 0 -> 48 Mbit/s step and the
//! 0.7 cut left cwnd below the BDP for most of a second; kernel:cubic, paced,
//! judges the ACK train against the whole minimum RTT and runs into the first
//! loss, and so does ccp:cubic paced with that threshold. With a standing queue
//! (Verizon LTE, 1000 packets) W_cubic(t + SRTT) ran ahead of the kernel's
//! curve and overflowed the buffer earlier; the kernel's offset, the minimum
//! RTT, does not. How close it comes to kernel:cubic: `ccplab fidelity`
//! (docs/results/fidelity.md).
//!
//! Math: only `f64::cbrt` and multiplications, never `powf`/`ln` — the
//! `libccp` crate exports a C symbol `log` that shadows libm's in any binary
//! that links it (docs/NOTES.md, "libccp's `log` symbol"), and that is tested in tests/libccp_glue.rs.

use crate::fold::{Cadence, FoldProgram};
use crate::loss_based::{LossBased, LossRules, LossWindow, FOLD_FEATURES};
use crate::cc::{Measurement, Paced, PacingMode, SocketPacing, WindowParams};
use crate::AlgorithmSpec;

/// CUBIC (RFC 9438) as an [`AlgorithmSpec`].
pub struct CubicSpec;

/// CUBIC's flags (RFC 9438 constants, Linux HyStart).
#[derive(clap::Args, Clone, Debug)]
pub struct CubicArgs {
    /// C, the cubic scaling constant, packets/s^3 (RFC 9438 §4.1). Must be > 0.
    #[arg(long = "c", default_value = "0.4")]
    pub c: f64,
    /// beta_cubic, the multiplicative decrease factor (RFC 9438 §4.6). In (0, 1).
    #[arg(long, default_value = "0.7")]
    pub beta: f64,
    /// Fast convergence (RFC 9438 §4.7): lower W_max when a loss happens below it.
    #[arg(long, default_value = "true", action = clap::ArgAction::Set, value_name = "BOOL")]
    pub fast_convergence: bool,
    /// Reno-friendly region (RFC 9438 §4.3): cwnd = W_est when W_cubic(t) < W_est.
    #[arg(long, default_value = "true", action = clap::ArgAction::Set, value_name = "BOOL")]
    pub reno_friendly: bool,
    /// HyStart slow-start exit (Linux tcp_cubic.c `hystart`).
    #[arg(long, default_value = "true", action = clap::ArgAction::Set, value_name = "BOOL")]
    pub hystart: bool,
    /// HyStart detectors: both, ack-train or delay (Linux `hystart_detect` 3, 1, 2).
    #[arg(long, default_value = "both", value_parser = ["both", "ack-train", "delay"])]
    pub hystart_detect: String,
    /// cwnd from which HyStart is active, packets (Linux `hystart_low_window`).
    #[arg(long, default_value = "16", value_name = "PKTS")]
    pub hystart_low_window: f64,
    /// Pacing: kernel (the kernel side paces per ACK as it paces kernel:cubic
    /// on the same socket; in this lab every socket comes paced, docs/NOTES.md),
    /// report (the algorithm commands Linux tcp_update_pacing_rate's rate, 200 %
    /// of cwnd/SRTT while cwnd < ssthresh/2, 120 % after, every report; `true`
    /// also means this) or off (cwnd only; `false`).
    #[arg(long, value_enum, default_value = "kernel", value_name = "MODE")]
    pub pacing: PacingMode,
}

/// Cubic's fold program: four reports per RTT (smaller cwnd steps, so slow start
/// sends smaller bursts), urgent on loss or timeout.
pub const PROGRAM: FoldProgram =
    FoldProgram { name: "ccplab_cubic", cadence: Cadence::PerRtt(4), urgent_on_loss: true, features: FOLD_FEATURES };

impl AlgorithmSpec for CubicSpec {
    const NAME: &'static str = "cubic";
    const SUMMARY: &'static str = "CUBIC: W_cubic(t) = C(t-K)^3 + W_max growth, beta = 0.7 decrease, \
        fast convergence, Reno-friendly region, HyStart (per-report updates)";
    const SOURCE: &'static str = "RFC 9438; HyStart as Linux tcp_cubic.c";
    const CONTROLS: &'static str = "cwnd+rate";
    type Args = CubicArgs;
    type Flow = Paced<Cubic>;

    fn validate(a: &CubicArgs) -> Result<(), String> {
        if !(a.c.is_finite() && a.c > 0.0) {
            return Err(format!("--c must be a finite number > 0, got {}", a.c));
        }
        crate::check_range("beta", a.beta, 0.0, 1.0)?;
        crate::check_range("hystart-low-window", a.hystart_low_window, 0.0, 1e9)
    }

    fn new_flow(a: &CubicArgs, params: WindowParams) -> Paced<Cubic> {
        let cp = CubicParams {
            c: a.c,
            beta: a.beta,
            fast_convergence: a.fast_convergence,
            reno_friendly: a.reno_friendly,
        };
        let hs = a.hystart.then(|| {
            HyStart::new(a.hystart_detect != "delay", a.hystart_detect != "ack-train", a.hystart_low_window)
                .with_paced(a.pacing.paced())
        });
        let cubic = Cubic::new(params, cp)
            .with_hystart(hs)
            .with_fold(&PROGRAM);
        Paced::new(cubic, a.pacing.per_report())
    }

    fn pace_itself(args: &mut Self::Args, socket: SocketPacing) -> Option<SocketPacing> {
        args.pacing = args.pacing.without_datapath_pacing(socket);
        args.pacing.glue_pacing()
    }

    fn program(_args: &CubicArgs) -> FoldProgram {
        PROGRAM
    }
}

/// HyStart (Ha and Rhee 2008) as Linux tcp_cubic.c: leave slow start before the
/// first loss when the RTT rises or the ACK train gets long.
///
/// A round is one smoothed RTT of reports (tcp_cubic.c: until the data sent at
/// the round's start is acked). The ACK train of a round is the sum of the
/// reports' train lengths while the train stays unbroken across them (each
/// report's train starts at the report, see [`crate::fold`]); the delay
/// detector uses the minimum of the round's first 8 RTT samples (the first
/// reports' `rtt8` until 8 samples are seen).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct HyStart {
    /// Use the ACK-train detector.
    pub ack_train: bool,
    /// Use the delay-increase detector.
    pub delay: bool,
    /// Active from this cwnd, packets (Linux 16).
    pub low_window_pkts: f64,
    /// The flow is paced: the ACK train must span the whole minimum RTT (plus
    /// `hystart_ack_delay`, [`HYSTART_ACK_DELAY_US`]), not half of it.
    pub paced: bool,
    /// The flow's minimum RTT so far, us (0 = none yet); Linux `delay_min`.
    pub delay_min_us: u64,
    /// Start of the current round (time of the report that opened it), us.
    round_start_us: Option<u64>,
    last_report_us: u64,
    round_train_us: u64,
    train_alive: bool,
    round_min8_us: u64,
    round_samples: u64,
}

/// Which HyStart detector fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HyStartExit {
    AckTrain,
    DelayIncrease,
}

/// Linux HYSTART_MIN_SAMPLES: RTT samples a round needs for the delay detector.
pub const HYSTART_MIN_SAMPLES: u64 = 8;

/// tcp_cubic.c `hystart_ack_delay`: min(1 ms, 4 x GSO size / pacing rate),
/// added to the ACK-train threshold; 1 ms at every rate of these links (64 KB
/// GSO at up to 260 MB/s).
pub const HYSTART_ACK_DELAY_US: u64 = 1000;

impl HyStart {
    /// HyStart with the given detectors, active from `low_window_pkts` (unpaced).
    pub fn new(ack_train: bool, delay: bool, low_window_pkts: f64) -> Self {
        HyStart { ack_train, delay, low_window_pkts, ..Default::default() }
    }

    /// The same detectors for a paced (`true`) or unpaced flow.
    pub fn with_paced(mut self, paced: bool) -> Self {
        self.paced = paced;
        self
    }

    /// The ACK-train threshold, us: as tcp_cubic.c, (delay_min + ack delay) / 2
    /// for an unpaced flow ("pacing might have delayed packets up to RTT/2"
    /// only applies to paced ones), the whole of it for a paced flow.
    pub fn train_limit_us(&self) -> u64 {
        if self.paced {
            self.delay_min_us + HYSTART_ACK_DELAY_US
        } else {
            self.delay_min_us / 2
        }
    }

    /// Linux HYSTART_DELAY_THRESH: clamp(delay_min / 8, 4 ms, 16 ms), us.
    pub fn delay_thresh_us(delay_min_us: u64) -> u64 {
        (delay_min_us / 8).clamp(4_000, 16_000)
    }

    /// The ACK train of the current round so far, us.
    pub fn round_train_us(&self) -> u64 {
        self.round_train_us
    }

    /// Check report `m` in slow start at `cwnd_pkts` with smoothed RTT `srtt_us`.
    /// Returns the detector that fired and the fraction of the report's ACKs that
    /// had arrived when it fired (1 for the delay detector).
    pub fn check(&mut self, m: &Measurement, cwnd_pkts: f64, srtt_us: f64) -> Option<(HyStartExit, f64)> {
        if m.min_rtt_us > 0 && (self.delay_min_us == 0 || m.min_rtt_us < self.delay_min_us) {
            self.delay_min_us = m.min_rtt_us;
        }
        let round_len = if srtt_us > 0.0 { srtt_us as u64 } else { self.delay_min_us };
        if self.round_start_us.is_none_or(|t| m.now_us.saturating_sub(t) >= round_len) {
            self.round_start_us = Some(self.last_report_us);
            self.round_train_us = 0;
            self.train_alive = true;
            self.round_min8_us = 0;
            self.round_samples = 0;
        }
        self.last_report_us = m.now_us;
        let train_before = self.round_train_us;
        if self.train_alive {
            self.round_train_us += m.ack_train_us;
            self.train_alive = m.ack_train_unbroken;
        }
        if self.round_samples < HYSTART_MIN_SAMPLES && m.first8_min_rtt_us > 0 {
            self.round_min8_us = match self.round_min8_us {
                0 => m.first8_min_rtt_us,
                v => v.min(m.first8_min_rtt_us),
            };
            self.round_samples += m.rtt_samples;
        }
        if cwnd_pkts < self.low_window_pkts || self.delay_min_us == 0 {
            return None;
        }
        let train_limit_us = self.train_limit_us();
        if self.ack_train && self.round_train_us > train_limit_us {
            let into_report = train_limit_us.saturating_sub(train_before) as f64;
            let frac = (into_report / m.ack_train_us.max(1) as f64).clamp(0.0, 1.0);
            return Some((HyStartExit::AckTrain, frac));
        }
        let delay_limit_us = self.delay_min_us + Self::delay_thresh_us(self.delay_min_us);
        let round_delayed = self.round_samples >= HYSTART_MIN_SAMPLES && self.round_min8_us > delay_limit_us;
        // A paced flight builds its queue smoothly: a report whose every RTT
        // sample (at least 8) is above the limit saw the queue stay up for a
        // quarter RTT, where the kernel's flight-aligned round would see it.
        let report_delayed = self.paced && m.rtt_samples >= HYSTART_MIN_SAMPLES && m.min_rtt_us > delay_limit_us;
        if self.delay && (round_delayed || report_delayed) {
            return Some((HyStartExit::DelayIncrease, 1.0));
        }
        None
    }
}

/// CUBIC's constants (RFC 9438 §4.1, §4.7, §4.3).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CubicParams {
    /// C, the cubic scaling constant in packets / s^3 (RFC default 0.4).
    pub c: f64,
    /// beta_cubic, the multiplicative decrease factor (RFC default 0.7).
    pub beta: f64,
    /// Fast convergence (§4.7) on or off.
    pub fast_convergence: bool,
    /// Reno-friendly region (§4.3) on or off.
    pub reno_friendly: bool,
}

impl Default for CubicParams {
    fn default() -> Self {
        CubicParams { c: 0.4, beta: 0.7, fast_convergence: true, reno_friendly: true }
    }
}

impl CubicParams {
    /// alpha_cubic = 3 (1 - beta) / (1 + beta) (RFC 9438 §4.3).
    pub fn alpha_cubic(&self) -> f64 {
        3.0 * (1.0 - self.beta) / (1.0 + self.beta)
    }
}

/// W_cubic(t) = C (t - K)^3 + W_max (RFC 9438 eq. 1); t and K in seconds,
/// windows in packets.
pub fn w_cubic(c: f64, k_s: f64, w_max_pkts: f64, t_s: f64) -> f64 {
    let d = t_s - k_s;
    c * d * d * d + w_max_pkts
}

/// One congestion-avoidance epoch (from its first ACK to the next congestion event).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Epoch {
    /// Start time (report time) in microseconds.
    pub start_us: u64,
    /// cwnd at the start of the epoch, packets.
    pub cwnd_epoch: f64,
    /// W_max used by W_cubic in this epoch, packets.
    pub w_max: f64,
    /// K in seconds.
    pub k_s: f64,
    /// W_max came from a congestion event (false after slow start or an RTO:
    /// Linux's `last_max_cwnd == 0`, when cwnd grows at least 1 packet per 20 acked).
    pub w_max_known: bool,
}

/// Before the first congestion event (and after an RTO) Linux grows cwnd by at
/// least one packet per this many acknowledged (tcp_cubic.c: `ca->cnt` at most
/// 20 while `last_max_cwnd == 0`), about 5 % per RTT.
pub const UNKNOWN_W_MAX_ACKS_PER_PKT: f64 = 20.0;

/// CUBIC's own rules and what they keep (Linux tcp_cubic.c); the rest is
/// the loss-based core's.
#[derive(Clone, Debug)]
pub struct CubicRules {
    cp: CubicParams,
    /// W_max from the last congestion event (None before one, or after an RTO).
    w_max: Option<f64>,
    /// cwnd just before the last congestion event.
    cwnd_prior: Option<f64>,
    epoch: Option<Epoch>,
    w_est: f64,
    /// The flow's minimum RTT sample, us (0 = none): the time offset of the
    /// target, as tcp_cubic.c's `delay_min`.
    min_rtt_us: u64,
    hystart: Option<HyStart>,
    last_hystart_exit: Option<HyStartExit>,
}

impl CubicRules {
    /// The rules with constants `cp`, before any congestion event, without HyStart.
    pub fn new(cp: CubicParams) -> Self {
        CubicRules {
            cp,
            w_max: None,
            cwnd_prior: None,
            epoch: None,
            w_est: 0.0,
            min_rtt_us: 0,
            hystart: None,
            last_hystart_exit: None,
        }
    }

    fn start_epoch(&mut self, now_us: u64, cwnd_epoch: f64) -> Epoch {
        let w_max_known = self.w_max.is_some();
        let (w_max, k_s) = match self.w_max {
            Some(w) if w > cwnd_epoch => (w, ((w - cwnd_epoch) / self.cp.c).cbrt()),
            _ => (cwnd_epoch, 0.0),
        };
        self.w_max = Some(w_max);
        self.w_est = cwnd_epoch;
        let e = Epoch { start_us: now_us, cwnd_epoch, w_max, k_s, w_max_known };
        self.epoch = Some(e);
        e
    }

    /// The time added to t for the target, s: the flow's minimum RTT, as Linux
    /// (`t += delay_min`), not RFC 9438's smoothed RTT; the SRTT (`srtt_us`)
    /// until a minimum is known. With a standing queue the SRTT is far above
    /// the minimum (1.9 s against 50 ms on Verizon LTE with 1000 packets of
    /// buffer), and W_cubic(t + SRTT) ran ~2 s ahead of kernel:cubic's curve:
    /// the buffer overflowed 1.1 s earlier than kernel:cubic's.
    fn target_offset_s(&self, srtt_us: f64) -> f64 {
        if self.min_rtt_us > 0 {
            self.min_rtt_us as f64 / 1e6
        } else {
            srtt_us / 1e6
        }
    }
}

impl LossRules for CubicRules {
    /// beta x cwnd, at least 2 packets (§4.6); W_max = cwnd, or with fast
    /// convergence (§4.7) below the previous W_max, cwnd (1 + beta) / 2; the
    /// epoch ends.
    fn ssthresh(&mut self, cwnd: f64) -> f64 {
        self.w_max = Some(match self.w_max {
            Some(prev) if self.cp.fast_convergence && cwnd < prev => cwnd * (1.0 + self.cp.beta) / 2.0,
            _ => cwnd,
        });
        self.cwnd_prior = Some(cwnd);
        self.epoch = None;
        (cwnd * self.cp.beta).max(2.0)
    }

    /// A timeout forgets W_max and the epoch (§4.8).
    fn on_timeout(&mut self) {
        self.w_max = None;
        self.epoch = None;
    }

    fn observe(&mut self, m: &Measurement) {
        if m.min_rtt_us > 0 && (self.min_rtt_us == 0 || m.min_rtt_us < self.min_rtt_us) {
            self.min_rtt_us = m.min_rtt_us;
        }
    }

    /// HyStart, when on.
    fn slow_start_exit(&mut self, m: &Measurement, cwnd_pkts: f64, srtt_us: f64) -> Option<f64> {
        let (how, frac) = self.hystart.as_mut()?.check(m, cwnd_pkts, srtt_us)?;
        self.last_hystart_exit = Some(how);
        Some(frac)
    }

    /// cwnd toward W_cubic(t + RTT) clamped to [cwnd, 1.5 cwnd] (§4.2), the
    /// Reno-friendly W_est (§4.3), at least 1 packet per 20 acknowledged while
    /// W_max is unknown.
    fn congestion_avoidance(&mut self, w: &mut LossWindow, now_us: u64, acked_pkts: f64) {
        let e = match self.epoch {
            Some(e) => e,
            None => self.start_epoch(now_us, w.cwnd),
        };
        let t_s = now_us.saturating_sub(e.start_us) as f64 / 1e6;
        let cwnd = w.cwnd;
        let target = w_cubic(self.cp.c, e.k_s, e.w_max, t_s + self.target_offset_s(w.rtt.srtt_us))
            .max(cwnd)
            .min(1.5 * cwnd);
        let mut next = (cwnd + (target - cwnd) * acked_pkts / cwnd).min(target);
        if self.cp.reno_friendly {
            let alpha = match self.cwnd_prior {
                Some(prior) if self.w_est < prior => self.cp.alpha_cubic(),
                _ => 1.0,
            };
            self.w_est += alpha * acked_pkts / cwnd;
            if w_cubic(self.cp.c, e.k_s, e.w_max, t_s) < self.w_est {
                next = self.w_est.max(cwnd);
            }
        }
        if !e.w_max_known {
            next = next.max(cwnd + acked_pkts / UNKNOWN_W_MAX_ACKS_PER_PKT);
        }
        w.cwnd = next;
    }
}

/// CUBIC's per-flow state: the loss-based core with CUBIC's rules.
pub type Cubic = LossBased<CubicRules>;

impl Cubic {
    /// A new flow starting at `params.init_cwnd_pkts` in slow start.
    pub fn new(params: WindowParams, cp: CubicParams) -> Self {
        LossBased::with_rules(params, CubicRules::new(cp))
    }

    /// The same flow with HyStart (None = plain slow start).
    pub fn with_hystart(mut self, hs: Option<HyStart>) -> Self {
        self.rules_mut().hystart = hs;
        self
    }

    /// The HyStart detector that ended slow start last, if any.
    pub fn hystart_exit(&self) -> Option<HyStartExit> {
        self.rules().last_hystart_exit
    }

    /// W_max remembered from the last congestion event, packets.
    pub fn w_max(&self) -> Option<f64> {
        self.rules().w_max
    }

    /// The current congestion-avoidance epoch, if one has started.
    pub fn epoch(&self) -> Option<Epoch> {
        self.rules().epoch
    }

    /// The Reno-friendly estimate W_est, packets (meaningful during an epoch).
    pub fn w_est(&self) -> f64 {
        self.rules().w_est
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::{Phase, WindowAlgorithm};

    const MSS: u32 = 1000;
    const C: f64 = 0.4;
    const BETA: f64 = 0.7;

    /// [`crate::cc::test_params`] (floor 1) with these start values, ceiling 1e6.
    fn params(init: f64, ssthresh: f64) -> WindowParams {
        WindowParams { mss_bytes: MSS, init_cwnd_pkts: init, init_ssthresh_pkts: ssthresh, max_cwnd_pkts: 1e6, ..crate::cc::test_params() }
    }

    fn report(now_us: u64, acked_pkts: f64, rtt_us: u64) -> Measurement {
        Measurement {
            now_us,
            acked_bytes: (acked_pkts * f64::from(MSS)).round() as u64,
            delivered_pkts: acked_pkts.round() as u64,
            rtt_us,
            min_rtt_us: rtt_us,
            ..Default::default()
        }
    }

    fn loss(now_us: u64, rtt_us: u64) -> Measurement {
        Measurement { lost_pkts: 1, ..report(now_us, 0.0, rtt_us) }
    }

    fn default_args() -> CubicArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: CubicArgs,
        }
        Cli::parse_from(["cubic"]).a
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn w_cubic_matches_eq1_and_passes_w_max_at_k() {
        let w_max = 100.0;
        let k = (w_max * (1.0 - BETA) / C).cbrt();
        // At t = 0 the curve starts at beta W_max, at t = K it reaches W_max.
        assert!(close(w_cubic(C, k, w_max, 0.0), BETA * w_max));
        assert!(close(w_cubic(C, k, w_max, k), w_max));
        for t in [0.5, 1.0, 2.0, 5.0, 6.0] {
            let expected = C * (t - k) * (t - k) * (t - k) + w_max;
            assert!(close(w_cubic(C, k, w_max, t), expected));
        }
    }

    #[test]
    fn loss_sets_w_max_and_k_from_rfc_formula() {
        let mut cu = Cubic::new(params(100.0, 100.0), CubicParams::default());
        cu.on_report(&report(0, 1.0, 100_000));
        let w = cu.cwnd_pkts();
        cu.on_report(&loss(100_000, 100_000));
        assert_eq!(cu.w_max(), Some(w));
        assert!(close(cu.cwnd_pkts(), BETA * w));
        assert!(close(cu.ssthresh_pkts(), BETA * w));
        // The next epoch (after one RTT of recovery) uses K = cbrt(W_max (1 - beta) / C).
        cu.on_report(&report(200_001, 1.0, 100_000));
        let e = cu.epoch().expect("epoch started");
        assert!(close(e.k_s, (w * (1.0 - BETA) / C).cbrt()));
        assert!(close(e.w_max, w));
    }

    /// cwnd follows W_cubic(t + RTT) (clamped to [cwnd, 1.5 cwnd]) when every
    /// report acknowledges a full window, in the concave and the convex region.
    #[test]
    fn cwnd_tracks_cubic_curve_in_time() {
        let cp = CubicParams { reno_friendly: false, ..Default::default() };
        let rtt_us = 100_000;
        let mut cu = Cubic::new(params(200.0, 200.0), cp);
        cu.on_report(&report(0, 1.0, rtt_us));
        let w_max = cu.cwnd_pkts();
        cu.on_report(&loss(rtt_us, rtt_us));
        let k = (w_max * (1.0 - BETA) / C).cbrt();
        let epoch_start = 2 * rtt_us + 1;
        let mut now = epoch_start;
        let mut saw_concave = false;
        let mut saw_convex = false;
        while now < epoch_start + 80 * rtt_us {
            let before = cu.cwnd_pkts();
            // More than a window acknowledged: the per-report step is capped at target.
            cu.on_report(&report(now, before + 1.0, rtt_us));
            let t = (now - epoch_start) as f64 / 1e6;
            let rtt_s = rtt_us as f64 / 1e6;
            let expected = (C * (t + rtt_s - k).powi(3) + w_max).max(before).min(1.5 * before);
            assert!(close(cu.cwnd_pkts(), expected), "t={t}: {} vs {expected}", cu.cwnd_pkts());
            saw_concave |= cu.cwnd_pkts() < w_max && cu.cwnd_pkts() > before;
            saw_convex |= cu.cwnd_pkts() > w_max + 1.0;
            now += rtt_us;
        }
        assert!(saw_concave && saw_convex);
    }

    /// The target is W_cubic(t + minimum RTT) as Linux, not t + SRTT: with a
    /// standing queue (SRTT 2 s, minimum 50 ms) the window follows the curve at t.
    #[test]
    fn target_time_offset_is_the_minimum_rtt() {
        let cp = CubicParams { reno_friendly: false, ..Default::default() };
        let mut cu = Cubic::new(params(200.0, 200.0), cp);
        cu.on_report(&report(0, 1.0, 50_000));
        let w_max = cu.cwnd_pkts();
        cu.on_report(&loss(50_000, 50_000));
        let k = (w_max * (1.0 - BETA) / C).cbrt();
        let start = 100_001;
        cu.on_report(&Measurement { min_rtt_us: 2_000_000, ..report(start, 1.0, 2_000_000) });
        assert!(cu.srtt_us() > 200_000.0, "the queue raised the SRTT");
        let now = start + 3_000_000;
        let before = cu.cwnd_pkts();
        cu.on_report(&Measurement { min_rtt_us: 2_000_000, ..report(now, before.ceil(), 2_000_000) });
        let expected = (C * (3.0 + 0.05 - k).powi(3) + w_max).max(before).min(1.5 * before);
        assert!(close(cu.cwnd_pkts(), expected), "{} vs {expected}", cu.cwnd_pkts());
    }

    /// Before any congestion event (W_max unknown) cwnd grows at least one packet
    /// per 20 acknowledged (Linux `cnt <= 20` while `last_max_cwnd == 0`), where
    /// W_cubic(t) = C t^3 + cwnd_epoch alone would hardly move.
    #[test]
    fn growth_floor_before_the_first_congestion_event() {
        let cp = CubicParams { reno_friendly: false, ..Default::default() };
        let mut cu = Cubic::new(params(100.0, 100.0), cp);
        cu.on_report(&report(0, 1.0, 50_000));
        let start = cu.cwnd_pkts();
        assert!(!cu.epoch().unwrap().w_max_known);
        cu.on_report(&report(50_000, start.round(), 50_000));
        assert!(close(cu.cwnd_pkts(), start + start.round() / 20.0), "{}", cu.cwnd_pkts());
        // After a loss W_max is known: no floor, the curve's concave start.
        cu.on_report(&loss(100_000, 50_000));
        cu.on_report(&report(200_001, 1.0, 50_000));
        assert!(cu.epoch().unwrap().w_max_known);
        let before = cu.cwnd_pkts();
        cu.on_report(&report(250_001, before, 50_000));
        assert!(cu.cwnd_pkts() - before < before / 20.0);
    }

    #[test]
    fn fast_convergence_lowers_w_max() {
        let mut cu = Cubic::new(params(100.0, 100.0), CubicParams::default());
        cu.on_report(&report(0, 1.0, 10_000));
        let first = cu.cwnd_pkts();
        cu.on_report(&loss(10_000, 10_000));
        assert_eq!(cu.w_max(), Some(first));
        // Second loss below W_max: W_max = cwnd (1 + beta) / 2.
        cu.on_report(&report(30_000, 1.0, 10_000));
        let second = cu.cwnd_pkts();
        assert!(second < first);
        cu.on_report(&loss(40_000, 10_000));
        let expected = second * (1.0 + BETA) / 2.0;
        assert!(close(cu.w_max().unwrap(), expected));
        assert!(close(cu.cwnd_pkts(), BETA * second));
        // K then uses eq. 2 with cwnd_epoch = beta * second.
        cu.on_report(&report(60_000, 1.0, 10_000));
        let e = cu.epoch().unwrap();
        assert!(close(e.k_s, ((expected - BETA * second) / C).cbrt()));
        // Without fast convergence W_max is the plain cwnd at the event.
        let cp = CubicParams { fast_convergence: false, ..Default::default() };
        let mut cu = Cubic::new(params(100.0, 100.0), cp);
        cu.on_report(&loss(0, 10_000));
        cu.on_report(&report(20_000, 1.0, 10_000));
        let w = cu.cwnd_pkts();
        cu.on_report(&loss(30_000, 10_000));
        assert_eq!(cu.w_max(), Some(w));
    }

    /// Short RTT, small W_max: W_est (AIMD with alpha_cubic) outgrows W_cubic(t)
    /// and cwnd = W_est; alpha switches to 1 once W_est >= cwnd_prior.
    #[test]
    fn reno_friendly_region_takes_over() {
        let rtt_us = 10_000;
        let mut cu = Cubic::new(params(10.0, 10.0), CubicParams::default());
        cu.on_report(&report(0, 1.0, rtt_us));
        let prior = cu.cwnd_pkts();
        cu.on_report(&loss(rtt_us, rtt_us));
        let k = (prior * (1.0 - BETA) / C).cbrt();
        let alpha = 3.0 * (1.0 - BETA) / (1.0 + BETA);
        let start = 2 * rtt_us + 1;
        let mut w_est = BETA * prior;
        let mut now = start;
        let mut friendly_rounds = 0;
        for _ in 0..40 {
            let before = cu.cwnd_pkts();
            // whole packets delivered, as the fold counts them
            cu.on_report(&report(now, before.round(), rtt_us));
            let a = if w_est < prior { alpha } else { 1.0 };
            let acked = before.round();
            w_est += a * acked / before;
            let t = (now - start) as f64 / 1e6;
            let cubic_t = C * (t - k).powi(3) + prior;
            assert!(close(cu.w_est(), w_est));
            if cubic_t < w_est {
                assert!(close(cu.cwnd_pkts(), w_est));
                friendly_rounds += 1;
            }
            now += rtt_us;
        }
        // 40 RTTs = 0.4 s << K: the Reno-friendly region governed most of them.
        assert!(friendly_rounds > 30, "{friendly_rounds}");
        assert!(cu.cwnd_pkts() > prior);
    }

    #[test]
    fn timeout_resets_and_next_epoch_has_k_zero() {
        let mut cu = Cubic::new(params(50.0, 50.0), CubicParams::default());
        cu.on_report(&report(0, 1.0, 10_000));
        let before = cu.cwnd_pkts();
        cu.on_report(&Measurement { timeout: true, ..report(10_000, 0.0, 10_000) });
        assert_eq!(cu.cwnd_pkts(), 1.0);
        assert!(close(cu.ssthresh_pkts(), BETA * before));
        assert_eq!(cu.phase(), Phase::TimeoutRecovery);
        assert_eq!(cu.w_max(), None);
        // Slow start back to ssthresh, then an epoch with K = 0, W_max = cwnd_epoch.
        let mut now = 30_000;
        while cu.cwnd_pkts() < cu.ssthresh_pkts() {
            cu.on_report(&report(now, cu.cwnd_pkts(), 10_000));
            now += 10_000;
        }
        let e = cu.epoch().expect("epoch after slow start");
        assert_eq!(e.k_s, 0.0);
        assert!(close(e.w_max, e.cwnd_epoch));
    }

    /// A slow-start report at `now_us` whose ACK train lasted `train_us`.
    fn ss_report(now_us: u64, acked: f64, rtt_us: u64, train_us: u64, unbroken: bool) -> Measurement {
        Measurement {
            ack_train_us: train_us,
            ack_train_unbroken: unbroken,
            rtt_samples: 8,
            first8_min_rtt_us: rtt_us,
            ..report(now_us, acked, rtt_us)
        }
    }

    #[test]
    fn hystart_ack_train_spans_reports_of_a_round() {
        let mut hs = HyStart::new(true, false, 16.0);
        // delay_min 40 ms: the train must exceed 20 ms. Reports every 12 ms, each
        // a 12 ms unbroken train: 12 ms, then 24 ms -> fires 8/12 into the 2nd report.
        assert_eq!(hs.check(&ss_report(0, 0.0, 40_000, 0, true), 20.0, 40_000.0), None);
        assert_eq!(hs.check(&ss_report(12_000, 10.0, 40_000, 12_000, true), 20.0, 40_000.0), None);
        let (how, frac) = hs.check(&ss_report(24_000, 10.0, 40_000, 12_000, true), 20.0, 40_000.0).unwrap();
        assert_eq!(how, HyStartExit::AckTrain);
        assert!((frac - 8.0 / 12.0).abs() < 1e-9);
        // Below the low window nothing fires; a broken train stops adding up.
        let mut hs = HyStart::new(true, false, 16.0);
        hs.check(&ss_report(0, 0.0, 40_000, 0, true), 20.0, 40_000.0);
        assert_eq!(hs.check(&ss_report(12_000, 10.0, 40_000, 12_000, true), 10.0, 40_000.0), None);
        let mut hs = HyStart::new(true, false, 16.0);
        hs.check(&ss_report(0, 0.0, 40_000, 0, true), 20.0, 40_000.0);
        hs.check(&ss_report(12_000, 10.0, 40_000, 5_000, false), 20.0, 40_000.0);
        assert_eq!(hs.check(&ss_report(24_000, 10.0, 40_000, 12_000, true), 20.0, 40_000.0), None);
        assert_eq!(hs.round_train_us(), 5_000);
    }

    #[test]
    fn hystart_ack_train_of_a_paced_flow_must_span_the_minimum_rtt() {
        // delay_min 40 ms, paced: the threshold is 41 ms (tcp_cubic.c does not
        // halve it for paced flows); the 24 ms train that fires unpaced does not.
        // (A round lasts one SRTT, 50 ms: the queue that stretches the train
        // also stretches the round.)
        let mut hs = HyStart::new(true, false, 16.0).with_paced(true);
        hs.check(&ss_report(0, 0.0, 40_000, 0, true), 20.0, 50_000.0);
        assert_eq!(hs.train_limit_us(), 41_000);
        assert_eq!(hs.check(&ss_report(12_000, 10.0, 40_000, 12_000, true), 20.0, 50_000.0), None);
        assert_eq!(hs.check(&ss_report(24_000, 10.0, 40_000, 12_000, true), 20.0, 50_000.0), None);
        assert_eq!(hs.check(&ss_report(36_000, 10.0, 40_000, 12_000, true), 20.0, 50_000.0), None);
        let (how, frac) = hs.check(&ss_report(48_000, 10.0, 40_000, 12_000, true), 20.0, 50_000.0).unwrap();
        assert_eq!(how, HyStartExit::AckTrain);
        assert!((frac - 5.0 / 12.0).abs() < 1e-9);
    }

    #[test]
    fn hystart_delay_of_a_paced_flow_fires_on_a_report_whose_every_sample_is_late() {
        // delay_min 40 ms, limit 45 ms. The round opened with low samples (40 ms),
        // then a report of 8+ samples all above 45 ms: a paced flight's queue
        // stayed up for the report. Unpaced, only the round's first 8 count.
        let late = |now| Measurement { min_rtt_us: 47_000, ..ss_report(now, 10.0, 47_000, 0, false) };
        for (paced, fires) in [(true, true), (false, false)] {
            let mut hs = HyStart::new(false, true, 16.0).with_paced(paced);
            hs.check(&ss_report(0, 0.0, 40_000, 0, false), 20.0, 60_000.0);
            assert_eq!(hs.check(&ss_report(12_000, 10.0, 40_000, 0, false), 20.0, 60_000.0), None);
            let got = hs.check(&late(24_000), 20.0, 60_000.0);
            assert_eq!(got.is_some(), fires, "paced {paced}: {got:?}");
        }
    }

    #[test]
    fn hystart_delay_increase_ends_slow_start_with_ssthresh_cwnd() {
        // delay_min 40 ms: threshold clamp(5 ms, 4, 16) -> a round minimum above 45 ms.
        let p = params(20.0, f64::INFINITY);
        let mut cu = Cubic::new(p, CubicParams::default()).with_hystart(Some(HyStart::new(false, true, 16.0)));
        cu.on_report(&ss_report(0, 0.0, 40_000, 0, false));
        cu.on_report(&ss_report(50_000, 20.0, 44_000, 0, false));
        assert_eq!(cu.phase(), Phase::SlowStart, "44 ms is within the threshold");
        assert_eq!(cu.cwnd_pkts(), 40.0);
        cu.on_report(&ss_report(100_000, 40.0, 46_000, 0, false));
        assert_eq!(cu.hystart_exit(), Some(HyStartExit::DelayIncrease));
        assert_eq!(cu.ssthresh_pkts(), 80.0, "ssthresh = cwnd when it fired (after the report's ACKs)");
        assert_eq!(cu.phase(), Phase::CongestionAvoidance);
        // Without HyStart the same reports keep doubling.
        let mut plain = Cubic::new(p, CubicParams::default());
        for (t, a, r) in [(0, 0.0, 40_000), (50_000, 20.0, 44_000), (100_000, 40.0, 46_000)] {
            plain.on_report(&ss_report(t, a, r, 0, false));
        }
        assert_eq!(plain.phase(), Phase::SlowStart);
        assert_eq!(plain.cwnd_pkts(), 80.0);
    }

    #[test]
    fn hystart_ends_slow_start_in_the_fold_at_the_cwnd_it_fired() {
        let p = params(20.0, f64::INFINITY);
        let hs = Some(HyStart::new(false, true, 16.0));
        let mut cu = Cubic::new(p, CubicParams::default()).with_hystart(hs).with_fold_slow_start(true);
        let fold = |m: Measurement, cwnd: u64| Measurement { dp_cwnd_bytes: cwnd * u64::from(MSS), ..m };
        // The fold grew cwnd per ACK (20 -> 40): adopted, Cwnd 0 commanded.
        assert_eq!(cu.on_report(&fold(ss_report(0, 0.0, 40_000, 0, false), 20)), 0);
        assert_eq!(cu.on_report(&fold(ss_report(50_000, 20.0, 44_000, 0, false), 40)), 0);
        assert_eq!((cu.cwnd_pkts(), cu.phase()), (40.0, Phase::SlowStart));
        // The delay detector fires on the report that took the fold to 80:
        // ssthresh = cwnd = 80 (as grow() does), user space takes over, marked.
        let bytes = cu.on_report(&fold(ss_report(100_000, 40.0, 46_000, 0, false), 80));
        assert_eq!(cu.hystart_exit(), Some(HyStartExit::DelayIncrease));
        assert!(!cu.fold_slow_start());
        assert_eq!((cu.cwnd_pkts(), cu.ssthresh_pkts()), (80.0, 80.0));
        assert_eq!(bytes, 80 * MSS + crate::cc::TAKEOVER_MARK_BYTES);
        // A loss before any detector: the fold's cwnd at the loss is cut by beta.
        let mut cu = Cubic::new(p, CubicParams::default()).with_fold_slow_start(true);
        cu.on_report(&fold(ss_report(0, 10.0, 40_000, 0, false), 30));
        let cut = cu.on_report(&fold(Measurement { lost_pkts: 1, inflight_max_pkts: 50, ..report(40_000, 20.0, 40_000) }, 50));
        assert!(close(cu.cwnd_pkts(), 35.0) && close(cu.w_max().unwrap(), 50.0));
        // Commanded: the PRR window, 50 outstanding - 1 lost = 49 (the report's 20
        // acked packets came before the loss ACK: not deliveries of the recovery).
        assert_eq!(cut, 49 * MSS + crate::cc::TAKEOVER_MARK_BYTES);
        assert!(CubicSpec::new_flow(&default_args(), p).fold_slow_start(), "on by default");
    }

    #[test]
    fn floor_and_ceiling_hold() {
        let p = WindowParams { max_cwnd_pkts: 30.0, ..params(10.0, f64::INFINITY) };
        let mut cu = Cubic::new(p, CubicParams::default());
        for i in 1..10 {
            cu.on_report(&report(i * 10_000, cu.cwnd_pkts(), 10_000));
            assert!(cu.cwnd_pkts() <= 30.0);
        }
        assert_eq!(cu.cwnd_pkts(), 30.0);
        // Repeated losses never take cwnd below ssthresh floor 2 / cwnd floor 1.
        let mut cu = Cubic::new(params(2.0, f64::INFINITY), CubicParams::default());
        cu.on_report(&loss(0, 0));
        assert_eq!(cu.cwnd_pkts(), 2.0);
        cu.on_report(&Measurement { timeout: true, ..report(1, 0.0, 0) });
        assert_eq!(cu.cwnd_pkts(), 1.0);
        assert_eq!(cu.cwnd_bytes(), MSS);
    }
}
