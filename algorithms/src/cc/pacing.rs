//! Pacing as the kernel paces a cwnd-only congestion control: Linux
//! `tcp_update_pacing_rate`'s rate ([`KernelPacing`]), who applies it
//! ([`PacingMode`]), and the per-report pacers for a datapath that does not
//! ([`Paced`] for a window algorithm, [`ReportPacer`] for any other).

use super::{Measurement, RttEstimator, WindowAlgorithm};

/// TCP-internal pacing at the rate Linux `tcp_update_pacing_rate` sets for a
/// congestion control without `cong_control` (as kernel reno and cubic):
/// `ratio x mss x max(cwnd, packets_out) / SRTT`, with ratio
/// `tcp_pacing_ss_ratio` (200 %) while cwnd < ssthresh / 2 and
/// `tcp_pacing_ca_ratio` (120 %) after.
///
/// Why: kernel:reno and kernel:cubic in this lab are paced. The namespaces'
/// default congestion control is bbr, whose init leaves `SK_PACING_NEEDED`
/// when iperf3 switches the socket to reno or cubic (docs/NOTES.md), so the
/// kernel paces them at this rate (seen in the link log: a slow-start flight
/// spread over ~30 ms at 2-5 packets/ms). ccp-datapath used to turn that pacing
/// off for a ccp socket unless the algorithm commands a rate, and unpaced ccp:reno
/// and ccp:cubic sent each flight as a line-rate burst: more slow-start losses
/// earlier, HyStart's ACK train judged on bursts (tcp_cubic.c halves its
/// threshold only for unpaced flows), and after a loss a refill of in flight to
/// ssthresh in one burst at twice the link rate (measured on the 0 -> 48 Mbit/s
/// step). ccp-datapath keeps the pacing a
/// socket came with and sets this rate per ACK itself ([`PacingMode::Kernel`],
/// the default); [`Paced`] commands it per report for a datapath that does not.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelPacing {
    /// Percent of cwnd / SRTT while cwnd < ssthresh / 2 (Linux 200).
    pub ss_ratio_pct: f64,
    /// Percent of cwnd / SRTT otherwise (Linux 120).
    pub ca_ratio_pct: f64,
}

impl KernelPacing {
    /// Linux's defaults (`net.ipv4.tcp_pacing_ss_ratio` 200, `tcp_pacing_ca_ratio` 120).
    pub const LINUX: KernelPacing = KernelPacing { ss_ratio_pct: 200.0, ca_ratio_pct: 120.0 };

    /// The pacing rate in bytes/s for a window of `window_pkts` (cwnd, or the
    /// outstanding packets when more), `ssthresh_pkts`, `mss_bytes` and a smoothed
    /// RTT of `srtt_us`; None before the first RTT sample (the flow stays unpaced).
    pub fn rate_bytes_per_sec(&self, window_pkts: f64, ssthresh_pkts: f64, mss_bytes: u32, srtt_us: f64) -> Option<u64> {
        if !(srtt_us > 0.0) {
            return None;
        }
        let pct = if window_pkts < ssthresh_pkts / 2.0 { self.ss_ratio_pct } else { self.ca_ratio_pct };
        let rate = pct / 100.0 * f64::from(mss_bytes) * window_pkts.max(1.0) * 1e6 / srtt_us;
        Some(rate.round().max(1.0) as u64)
    }
}

/// How a window algorithm's flow is paced (`--pacing` of reno and cubic).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacingMode {
    /// The kernel side paces per ACK at Linux tcp_update_pacing_rate's rate
    /// (as KernelPacing) where the socket came with TCP-internal pacing
    /// (bbr as the namespace default, SO_MAX_PACING_RATE), as it would pace
    /// kernel reno or cubic on that socket; the algorithm commands no rate.
    /// ccp-datapath does this; on a socket without pacing the flow is
    /// unpaced, as the kernel's would be.
    Kernel,
    /// The algorithm commands KernelPacing's rate with every report
    /// (Paced), for a datapath that does not keep the kernel's pacing.
    #[value(alias = "true")]
    Report,
    /// cwnd only, no rate.
    #[value(alias = "false")]
    Off,
}

impl PacingMode {
    /// The rate [`Paced`] commands per report (None: none).
    pub fn per_report(self) -> Option<KernelPacing> {
        (self == PacingMode::Report).then_some(KernelPacing::LINUX)
    }

    /// Whether the flow is paced at all (HyStart's ACK-train threshold
    /// depends on it, as tcp_cubic.c's on `sk_pacing_status`).
    pub fn paced(self) -> bool {
        self != PacingMode::Off
    }

    /// The mode on a datapath that does not pace per ACK
    /// ([`crate::AlgorithmSpec::pace_itself`]): `Kernel` needs one, so the
    /// algorithm commands the same rate with every report (`Report`) where the
    /// socket would be paced, and commands none (`Off`, the glue lifts the
    /// datapath's pacing) where it would not ([`SocketPacing`]).
    pub fn without_datapath_pacing(self, socket: SocketPacing) -> PacingMode {
        match (self, socket) {
            (PacingMode::Kernel, SocketPacing::Kernel) => PacingMode::Report,
            (PacingMode::Kernel, SocketPacing::Unpaced) => PacingMode::Off,
            (mode, _) => mode,
        }
    }

    /// What the glue adds for a window algorithm in this mode on a datapath that
    /// does not pace (None: the algorithm commands its own rate).
    pub fn glue_pacing(self) -> Option<SocketPacing> {
        match self {
            PacingMode::Report => None,
            PacingMode::Off | PacingMode::Kernel => Some(SocketPacing::Unpaced),
        }
    }
}

/// How a Linux socket would pace a cwnd-only flow, which a datapath that does
/// not pace for the algorithm (ccp-kernel) must be told (`--socket-pacing`).
///
/// Why: ccp-kernel turns TCP-internal pacing on for every flow, so a flow is
/// paced at whatever rate was last set. Linux paces reno or cubic only on a
/// socket that asked for it (the fq qdisc, SO_MAX_PACING_RATE, a CCA that needs
/// pacing set before); on a host's default qdisc (fq_codel, pfifo_fast) they send
/// cwnd-limited bursts. Emulating the paced kind where the kernel's flow is not
/// paced cost ccp reno and cubic a third of their throughput in the ccp-kernel
/// guest (docs/ccp-kernel.md).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketPacing {
    /// Not paced (the default qdisc): the daemon commands
    /// [`UNPACED_RATE_BYTES_PER_SEC`] for the flow, a rate no link reaches, so
    /// only cwnd limits the sending.
    Unpaced,
    /// Paced as on an fq qdisc: Linux tcp_update_pacing_rate's rate
    /// ([`KernelPacing`]) commanded with every report.
    Kernel,
}

/// The pacing rate that stands for "not paced" on a datapath that paces every
/// flow: libccp's largest rate (a u32 in bytes/s, 34.4 Gbit/s). With it,
/// Linux's pacing check (`tcp_pacing_check`) finds every packet's departure
/// time already past and never arms its timer.
pub const UNPACED_RATE_BYTES_PER_SEC: u64 = u32::MAX as u64;

/// The window the pacing rate is computed for while slow start runs in the
/// fold, as a multiple of the cwnd at the report (see [`Paced`]).
pub const FOLD_SLOW_START_PACING_WINDOW: f64 = 1.5;

/// A window algorithm `W` that also commands the kernel's pacing rate
/// ([`KernelPacing`]) with every report, from its own window and a smoothed RTT
/// of the reports (RFC 6298, as [`RttEstimator`]). Dereferences to `W`.
///
/// Per report, not per ACK as the kernel: while slow start runs in the fold the
/// window doubles per round between reports, and a report may come at the
/// first ACK of a round (ACKs arrive in trains), so the rate is computed for
/// the window in the middle of the round slow start is in, 1.5 x the cwnd at
/// the report ([`FOLD_SLOW_START_PACING_WINDOW`]). With the cwnd at the report
/// (measured: `ccplab fidelity` step 0 -> 48 Mbit/s) each round's packets were
/// paced over more than an RTT: 34 and 56 packets per 50 ms in the third and
/// fourth rounds where kernel:reno delivered 40 and 80.
///
/// The window is at least the packets still outstanding
/// ([`WindowAlgorithm::packets_out_pkts`]), as the kernel's
/// `max(cwnd, packets_out)`: in fast recovery SACKed and lost packets stay in
/// `packets_out` until the cumulative ACK passes them, and the higher rate lets
/// PRR-SSRB refill in flight to ssthresh at once. With in flight instead the
/// rate sat at 1.05 x the link rate at the end of the recovery and in flight
/// crept back to ssthresh over ~100 ms, a throughput dip kernel:reno does not
/// have (0 -> 48 Mbit/s step: 172 against 184 packets per 50 ms).
#[derive(Clone, Debug)]
pub struct Paced<W> {
    inner: W,
    pacing: Option<KernelPacing>,
    rtt: RttEstimator,
}

impl<W: WindowAlgorithm> Paced<W> {
    /// `inner` paced as the kernel does (`pacing` Some) or unpaced (None: cwnd only).
    pub fn new(inner: W, pacing: Option<KernelPacing>) -> Self {
        Paced { inner, pacing, rtt: RttEstimator::default() }
    }

    /// The pacing in use (None: unpaced).
    pub fn pacing(&self) -> Option<KernelPacing> {
        self.pacing
    }

    /// The rate for report `m` after the window logic answered `cwnd_bytes`
    /// (0 = slow start in the fold, which keeps growing cwnd per ACK).
    fn rate_after(&self, m: &Measurement, cwnd_bytes: u32) -> Option<u64> {
        let pacing = self.pacing?;
        let p = self.inner.params();
        let window = if cwnd_bytes == 0 {
            self.inner.cwnd_pkts() * FOLD_SLOW_START_PACING_WINDOW
        } else {
            f64::from(cwnd_bytes) / f64::from(p.mss_bytes.max(1))
        };
        let window = window.max(self.inner.packets_out_pkts(m));
        pacing.rate_bytes_per_sec(window, self.inner.ssthresh_pkts(), p.mss_bytes, self.rtt.srtt_us)
    }
}

impl<W> std::ops::Deref for Paced<W> {
    type Target = W;
    fn deref(&self) -> &W {
        &self.inner
    }
}

impl<W> std::ops::DerefMut for Paced<W> {
    fn deref_mut(&mut self) -> &mut W {
        &mut self.inner
    }
}

impl<W: WindowAlgorithm> crate::Controller for Paced<W> {
    fn initial(&self) -> crate::Control {
        crate::Control { cwnd_bytes: Some(self.inner.cwnd_bytes()), rate_bytes_per_sec: None }
    }

    fn on_report(&mut self, m: &Measurement) -> crate::Control {
        self.rtt.update(m);
        let cwnd_bytes = self.inner.on_report(m);
        crate::Control { cwnd_bytes: Some(cwnd_bytes), rate_bytes_per_sec: self.rate_after(m, cwnd_bytes) }
    }

    fn state(&self) -> String {
        crate::Controller::state(&self.inner)
    }

    fn fold_registers(&self) -> Vec<(&'static str, u32)> {
        self.inner.fold_registers()
    }

    fn initial_fold_registers(&self) -> Vec<(&'static str, u32)> {
        self.inner.initial_fold_registers()
    }
}

/// The kernel's pacing rate ([`KernelPacing`]) commanded with every report of an
/// algorithm that commands cwnd only, on a datapath that does not pace for it.
///
/// Why: ccp-kernel turns TCP-internal pacing on for every flow (tcp_ccp_init sets
/// `SK_PACING_NEEDED`) and sets `.cong_control`, so `tcp_cong_control()` returns
/// before `tcp_update_pacing_rate()`: the pacing rate stays at its connect-time
/// value, about 2 x initial window / SYN RTT, for the whole flow unless the
/// algorithm commands one. On a 20 Mbit/s, 40 ms link that capped ccp:reno,
/// ccp:cubic and a fixed window of 37 at 11.1-11.2 Mbit/s where kernel reno
/// and cubic got 19.8 (docs/ccp-kernel.md).
///
/// The rule is Linux `tcp_update_pacing_rate` (net/ipv4/tcp_input.c) with what
/// a report carries: the window is the cwnd the algorithm commands (or the
/// datapath's, when it commands none), at least the packets outstanding; the
/// SRTT is RFC 6298's smoothing of the reports' RTT samples ([`RttEstimator`]);
/// the ratio is 200 % until the flow's first loss or timeout and 120 % after,
/// which is what the kernel's rule (200 % while cwnd < ssthresh / 2) gives for
/// an algorithm without a slow-start threshold: the socket's `snd_ssthresh`
/// stays infinite until the first loss. Reno and cubic command this rate
/// themselves from their own ssthresh ([`Paced`], `--pacing report`).
///
/// For an unpaced socket ([`SocketPacing::Unpaced`]) it commands
/// [`UNPACED_RATE_BYTES_PER_SEC`] from the flow's start and with every report
/// instead.
#[derive(Clone, Debug)]
pub struct ReportPacer {
    socket: SocketPacing,
    pacing: KernelPacing,
    mss_bytes: u32,
    rtt: RttEstimator,
    lost: bool,
}

impl ReportPacer {
    /// A pacer for a flow of `mss_bytes` on a socket paced as `socket`, with Linux's ratios.
    pub fn new(mss_bytes: u32, socket: SocketPacing) -> Self {
        ReportPacer {
            socket,
            pacing: KernelPacing::LINUX,
            mss_bytes: mss_bytes.max(1),
            rtt: RttEstimator::default(),
            lost: false,
        }
    }

    /// The rate in bytes/s to command when the flow starts (None: none yet).
    pub fn initial_rate(&self) -> Option<u64> {
        (self.socket == SocketPacing::Unpaced).then_some(UNPACED_RATE_BYTES_PER_SEC)
    }

    /// The rate in bytes/s for report `m` when the algorithm answered with a cwnd of
    /// `cwnd_bytes` (None: it left cwnd as the datapath holds it, `m.dp_cwnd_bytes`);
    /// None until the first RTT sample on a paced socket.
    pub fn rate_for(&mut self, m: &Measurement, cwnd_bytes: Option<u32>) -> Option<u64> {
        if self.socket == SocketPacing::Unpaced {
            return Some(UNPACED_RATE_BYTES_PER_SEC);
        }
        self.rtt.update(m);
        self.lost |= m.lost_pkts > 0 || m.timeout;
        let cwnd = cwnd_bytes.map_or(m.dp_cwnd_bytes, u64::from) as f64 / f64::from(self.mss_bytes);
        let window = cwnd.max(m.outstanding_pkts() as f64);
        let ssthresh = if self.lost { 0.0 } else { f64::INFINITY };
        self.pacing.rate_bytes_per_sec(window, ssthresh, self.mss_bytes, self.rtt.srtt_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::{test_params as params, WindowParams};

    #[test]
    fn pacing_modes_parse_with_the_old_boolean_spellings_and_say_who_paces() {
        use clap::ValueEnum;
        let parse = |v: &str| PacingMode::from_str(v, false);
        assert_eq!(parse("kernel"), Ok(PacingMode::Kernel));
        assert_eq!(parse("true"), Ok(PacingMode::Report), "--pacing true meant: command the rate per report");
        assert_eq!(parse("false"), Ok(PacingMode::Off));
        assert!(parse("fast").is_err());
        assert_eq!(PacingMode::Report.per_report(), Some(KernelPacing::LINUX));
        assert_eq!(PacingMode::Kernel.per_report(), None, "the kernel side paces: no commanded rate");
        assert!(PacingMode::Kernel.paced() && PacingMode::Report.paced() && !PacingMode::Off.paced());
    }

    #[test]
    fn report_pacer_commands_tcp_update_pacing_rate_200_then_120_percent_after_a_loss() {
        let mut p = ReportPacer::new(1000, SocketPacing::Kernel);
        assert_eq!(p.initial_rate(), None, "a paced socket: no rate before an RTT sample");
        let m = |rtt_us, dp_cwnd_bytes, lost_pkts| Measurement { rtt_us, dp_cwnd_bytes, lost_pkts, ..Default::default() };
        assert_eq!(p.rate_for(&m(0, 10_000, 0), None), None, "no RTT sample yet: no rate");
        // 37 packets of 1000 bytes per 40 ms = 925 kB/s; x 2 before any loss (ssthresh infinite).
        assert_eq!(p.rate_for(&m(40_000, 37_000, 0), None), Some(1_850_000));
        // The commanded cwnd wins over the datapath's.
        assert_eq!(p.rate_for(&m(40_000, 37_000, 0), Some(20_000)), Some(1_000_000));
        // After the first loss: 120 %, and it stays so.
        assert_eq!(p.rate_for(&m(40_000, 37_000, 1), None), Some(1_110_000));
        assert_eq!(p.rate_for(&m(40_000, 37_000, 0), None), Some(1_110_000));
        // At least the packets outstanding (the kernel's max(cwnd, packets_out)).
        let out = Measurement { rtt_us: 40_000, dp_cwnd_bytes: 10_000, inflight_max_pkts: 20, ..Default::default() };
        assert_eq!(p.rate_for(&out, None), Some(600_000));
        // SRTT is smoothed (RFC 6298): one 80 ms sample moves it to 45 ms.
        assert_eq!(p.rate_for(&m(80_000, 45_000, 0), None), Some(1_200_000));
    }

    #[test]
    fn report_pacer_on_an_unpaced_socket_commands_the_largest_rate_from_the_start() {
        let mut p = ReportPacer::new(1448, SocketPacing::Unpaced);
        assert_eq!(p.initial_rate(), Some(u64::from(u32::MAX)));
        let m = Measurement { rtt_us: 40_000, dp_cwnd_bytes: 37 * 1448, lost_pkts: 3, ..Default::default() };
        assert_eq!(p.rate_for(&m, Some(10 * 1448)), Some(u64::from(u32::MAX)), "whatever the window, RTT or losses");
    }

    #[test]
    fn without_datapath_pacing_kernel_mode_follows_the_socket_and_explicit_modes_stay() {
        use SocketPacing::*;
        assert_eq!(PacingMode::Kernel.without_datapath_pacing(Kernel), PacingMode::Report);
        assert_eq!(PacingMode::Kernel.without_datapath_pacing(Unpaced), PacingMode::Off);
        assert_eq!(PacingMode::Report.without_datapath_pacing(Unpaced), PacingMode::Report);
        assert_eq!(PacingMode::Off.without_datapath_pacing(Kernel), PacingMode::Off);
        assert_eq!(PacingMode::Report.glue_pacing(), None, "the algorithm commands its rate");
        assert_eq!(PacingMode::Off.glue_pacing(), Some(Unpaced), "off: the glue lifts the datapath's pacing");
    }

    #[test]
    fn kernel_pacing_is_tcp_update_pacing_rate() {
        let k = KernelPacing::LINUX;
        // 100 packets of 1000 bytes per 50 ms = 2 MB/s; slow start (cwnd < ssthresh / 2): 200 %.
        assert_eq!(k.rate_bytes_per_sec(100.0, f64::INFINITY, 1000, 50_000.0), Some(4_000_000));
        assert_eq!(k.rate_bytes_per_sec(100.0, 201.0, 1000, 50_000.0), Some(4_000_000));
        // From ssthresh / 2 on (and in congestion avoidance): 120 %.
        assert_eq!(k.rate_bytes_per_sec(100.0, 200.0, 1000, 50_000.0), Some(2_400_000));
        assert_eq!(k.rate_bytes_per_sec(100.0, 50.0, 1000, 50_000.0), Some(2_400_000));
        assert_eq!(k.rate_bytes_per_sec(100.0, 50.0, 1000, 0.0), None, "no RTT sample: unpaced");
    }

    #[test]
    fn paced_commands_the_window_and_the_kernel_rate() {
        use crate::Controller;
        let mut r = Paced::new(crate::reno::Reno::new(params()), Some(KernelPacing::LINUX));
        assert_eq!(r.initial().rate_bytes_per_sec, None, "no SRTT before the first report");
        let m = Measurement { acked_bytes: 10_000, delivered_pkts: 10, rtt_us: 50_000, min_rtt_us: 50_000, ..Default::default() };
        let c = r.on_report(&m);
        // Slow start 10 -> 20 packets (ceiling 50): 200 % x 20 x 1000 B / 50 ms.
        assert_eq!(c.cwnd_bytes, Some(20_000));
        assert_eq!(c.rate_bytes_per_sec, Some(800_000));
        // In the fold's slow start (Cwnd 0) the rate is for the cwnd half a report ahead.
        let mut f = Paced::new(crate::reno::Reno::new(params()).with_fold_slow_start(true), Some(KernelPacing::LINUX));
        let c = f.on_report(&Measurement { dp_cwnd_bytes: 20_000, ..m });
        assert_eq!(c.cwnd_bytes, Some(0));
        assert_eq!(c.rate_bytes_per_sec, Some(1_200_000), "200 % x 1.5 x 20 x 1000 B / 50 ms");
        // Unpaced: cwnd only.
        let mut u = Paced::new(crate::reno::Reno::new(params()), None);
        assert_eq!(u.on_report(&m).rate_bytes_per_sec, None);
        assert!(u.pacing().is_none() && f.fold_slow_start(), "Deref reaches the window logic");
    }

    #[test]
    fn pacing_in_fast_recovery_counts_the_unacknowledged_packets() {
        use crate::Controller;
        let p = WindowParams { init_cwnd_pkts: 40.0, max_cwnd_pkts: 1000.0, ..params() };
        let mut r = Paced::new(crate::reno::Reno::new(p), Some(KernelPacing::LINUX));
        let rtt = |m: Measurement| Measurement { rtt_us: 50_000, min_rtt_us: 50_000, ..m };
        r.on_report(&rtt(Measurement { acked_bytes: 1000, delivered_pkts: 1, ..Default::default() }));
        // A loss with 100 packets outstanding (RecoverFS), 10 of them lost.
        let c = r.on_report(&rtt(Measurement { lost_pkts: 10, inflight_pkts: 60, inflight_max_pkts: 100, ..Default::default() }));
        assert_eq!(c.cwnd_bytes, Some(90_000), "PRR: 100 - 10 lost");
        // 30 SACKed: in flight 30, but all 100 stay in packets_out until the
        // cumulative ACK: 120 % x 100 x 1000 B / 50 ms, as the kernel's max(cwnd, packets_out).
        let c = r.on_report(&rtt(Measurement {
            sacked_pkts: 30, delivered_pkts: 30, inflight_pkts: 30, inflight_max_pkts: 40, ..Default::default()
        }));
        assert_eq!(c.rate_bytes_per_sec, Some(2_400_000));
        // 60 of them cumulatively acknowledged (the 30 SACKed among them): 40 outstanding.
        let c = r.on_report(&rtt(Measurement {
            acked_bytes: 60_000, delivered_pkts: 30, inflight_pkts: 30, inflight_max_pkts: 35, ..Default::default()
        }));
        // 120 % x max(PRR's window, the 40 outstanding) x 1000 B / 50 ms
        let window = (c.cwnd_bytes.unwrap() as f64 / 1000.0).max(40.0);
        assert_eq!(c.rate_bytes_per_sec, Some((1.2 * window * 1000.0 / 0.05).round() as u64));
        assert!(window > 40.0, "PRR counted 60 delivered (30 SACKed + 30 newly acked), not 90");
    }
}
