//! Pure window logic shared by the algorithms: the measurement a report carries,
//! the window bounds (floor, ceiling, MSS), RTT smoothing, the once-per-window
//! loss-event guard and slow start.
//!
//! Nothing here talks to Portus, so every algorithm can be unit-tested on a
//! scripted sequence of [`Measurement`]s. Windows are kept in packets (f64) as in
//! the RFCs' formulas and handed to the datapath in bytes (packets x MSS).

/// One report of the fold program (see [`crate::fold`]), as the window logic sees it.
///
/// All counters are totals since the previous report.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Measurement {
    /// When the report was received, in microseconds on a monotonic clock
    /// (any origin; only differences are used).
    pub now_us: u64,
    /// Bytes newly and cumulatively acknowledged (sum of `Ack.bytes_acked`).
    pub acked_bytes: u64,
    /// Packets SACKed / misordered (sum of `Ack.packets_misordered`).
    pub sacked_pkts: u64,
    /// Packets the datapath marked lost (sum of `Ack.lost_pkts_sample`).
    pub lost_pkts: u64,
    /// Packets newly delivered, cumulatively or selectively acknowledged
    /// (sum of `Ack.packets_acked + Ack.packets_misordered`, Linux's
    /// `acked_sacked`): each packet counts once, where `acked_bytes` +
    /// `sacked_pkts` counts a packet SACKed earlier again when the cumulative
    /// ACK passes it.
    pub delivered_pkts: u64,
    /// The datapath signalled a retransmission timeout (RTO).
    pub timeout: bool,
    /// Latest RTT sample in microseconds; 0 = no sample in this report.
    pub rtt_us: u64,
    /// Smallest RTT sample in this report in microseconds; 0 = no sample.
    pub min_rtt_us: u64,
    /// Packets in flight at the last ACK of the report.
    pub inflight_pkts: u64,
    /// The cwnd the datapath was using at the last ACK, in bytes (informational).
    pub dp_cwnd_bytes: u64,
    /// Largest in-flight count just before an ACK in this report
    /// (`Flow.packets_in_flight + Ack.packets_acked`), packets; 0 = not reported.
    /// Tells whether the flow used its window (see [`cwnd_limited`]).
    pub inflight_max_pkts: u64,
    /// Largest delivery-rate sample of the report in bytes/s: per ACK the smaller
    /// of `Flow.rate_outgoing` and `Flow.rate_incoming`, i.e. delivered data over
    /// max(send interval, ACK interval) as Linux tcp_rate.c; 0 = none.
    pub delivery_rate_bps: u64,
    /// Fold invocations (ACKs, possibly merged by the kernel) in the report.
    pub acks: u64,
    /// Smallest of the report's first 8 RTT samples, us; 0 = none (HyStart).
    pub first8_min_rtt_us: u64,
    /// RTT samples in the report.
    pub rtt_samples: u64,
    /// Length of the ACK train that opened the report, us (HyStart; see [`crate::fold`]).
    pub ack_train_us: u64,
    /// Largest RTT sample in the report, us; 0 = none.
    pub max_rtt_us: u64,
    /// The ACK train was still unbroken at the report (it may continue in the next).
    pub ack_train_unbroken: bool,
    /// Largest per-ACK ACK-aggregation excess of the report, thousandths of
    /// a packet (tcp_bbr.c `extra_acked` before its cwnd cap); 0 = none or not
    /// reported (bbr's program only: [`crate::bbr::ack_aggregation_block`]).
    pub extra_acked_milli_pkts: u64,
}

impl Measurement {
    /// Acknowledged data in packets (`acked_bytes / mss`, fractional).
    pub fn acked_pkts(&self, mss_bytes: u32) -> f64 {
        self.acked_bytes as f64 / f64::from(mss_bytes.max(1))
    }

    /// A loss event per RFC 5681: the datapath marked at least one packet lost.
    ///
    /// SACKed packets alone are not a loss event (they may be reordering); the
    /// datapath's loss detection (dupthresh / RACK) turns them into `lost_pkts`.
    pub fn has_loss(&self) -> bool {
        self.lost_pkts > 0
    }

    /// The window that was outstanding when this report was sent, packets: the
    /// largest in-flight count of the report, or in-flight plus the lost packets
    /// at its last ACK. Approximates `snd_nxt - snd_una`, which the kernel keeps
    /// as the recovery point (`high_seq`) when a loss starts recovery.
    pub fn outstanding_pkts(&self) -> u64 {
        self.inflight_max_pkts.max(self.inflight_pkts + self.lost_pkts)
    }
}

/// Whether the flow was limited by its congestion window during report `m`,
/// as Linux `tcp_is_cwnd_limited`: in slow start when cwnd < 2 x the largest
/// in-flight count, otherwise when the in-flight count reached cwnd (a slack of
/// max(3 packets, 10 %) absorbs delayed ACKs and TSO deferral, which keep
/// in-flight a little below cwnd in a cwnd-limited flow). A report without the
/// in-flight field counts as limited (the algorithm then grows as before).
///
/// Window growth only when cwnd-limited keeps an application- or
/// receive-window-limited flow's cwnd from climbing without bound (RFC 7661).
pub fn cwnd_limited(m: &Measurement, cwnd_pkts: f64, in_slow_start: bool) -> bool {
    if m.inflight_max_pkts == 0 {
        return true;
    }
    let used = m.inflight_max_pkts as f64;
    if in_slow_start {
        cwnd_pkts < 2.0 * used
    } else {
        used >= cwnd_pkts - (0.1 * cwnd_pkts).max(3.0)
    }
}

/// Window bounds and start values, in packets; shared by every algorithm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowParams {
    /// Maximum segment size in bytes, from the datapath's flow-create message.
    pub mss_bytes: u32,
    /// Initial cwnd in packets.
    pub init_cwnd_pkts: f64,
    /// Initial slow-start threshold in packets (`f64::INFINITY` = none).
    pub init_ssthresh_pkts: f64,
    /// Floor of cwnd in packets (1 for Reno and Cubic).
    pub min_cwnd_pkts: f64,
    /// Ceiling of cwnd in packets.
    pub max_cwnd_pkts: f64,
}

impl WindowParams {
    /// Clamp a window in packets to `[min_cwnd_pkts, max_cwnd_pkts]`.
    pub fn clamp(&self, cwnd_pkts: f64) -> f64 {
        cwnd_pkts.max(self.min_cwnd_pkts).min(self.max_cwnd_pkts)
    }

    /// Convert a window in packets to bytes for the datapath: round(pkts x MSS),
    /// saturated to `u32` (the datapath's Cwnd register width in libccp messages).
    pub fn to_bytes(&self, cwnd_pkts: f64) -> u32 {
        let bytes = (cwnd_pkts * f64::from(self.mss_bytes)).round();
        if bytes >= f64::from(u32::MAX) {
            u32::MAX
        } else if bytes <= 0.0 {
            0
        } else {
            bytes as u32
        }
    }
}

/// Where an algorithm is in its window cycle (for logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    SlowStart,
    CongestionAvoidance,
    /// Within one RTT after a loss-triggered reduction: no growth, no second cut.
    Recovery,
    /// Within one RTT after an RTO reset.
    TimeoutRecovery,
}

impl Phase {
    /// Short name used in log lines.
    pub fn as_str(&self) -> &'static str {
        match self {
            Phase::SlowStart => "slow_start",
            Phase::CongestionAvoidance => "cong_avoid",
            Phase::Recovery => "recovery",
            Phase::TimeoutRecovery => "rto_recovery",
        }
    }
}

/// The window logic of one flow, independent of Portus.
pub trait WindowAlgorithm: Send {
    /// Apply one report; returns the new cwnd in bytes (already clamped).
    fn on_report(&mut self, m: &Measurement) -> u32;
    /// Current cwnd in packets.
    fn cwnd_pkts(&self) -> f64;
    /// Current slow-start threshold in packets.
    fn ssthresh_pkts(&self) -> f64;
    /// Current phase (for logs).
    fn phase(&self) -> Phase;
    /// Window bounds and MSS in use.
    fn params(&self) -> &WindowParams;
    /// Current cwnd in bytes.
    fn cwnd_bytes(&self) -> u32 {
        self.params().to_bytes(self.cwnd_pkts())
    }
    /// The packets still outstanding after report `m` (the kernel's
    /// `packets_out`: in flight plus SACKed plus lost), as far as the window
    /// logic knows; by default the report's estimate
    /// ([`Measurement::outstanding_pkts`]). For pacing ([`Paced`]).
    fn packets_out_pkts(&self, m: &Measurement) -> f64 {
        m.outstanding_pkts() as f64
    }
    /// Control registers of the algorithm's fold program to set with each
    /// command ([`crate::Controller::fold_registers`]); none by default.
    fn fold_registers(&self) -> Vec<(&'static str, u32)> {
        Vec::new()
    }
    /// Control registers to set with the initial command
    /// ([`crate::Controller::initial_fold_registers`]); none by default.
    fn initial_fold_registers(&self) -> Vec<(&'static str, u32)> {
        Vec::new()
    }
}

/// Smoothed RTT per RFC 6298 (alpha = 1/8), from the reports' latest samples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RttEstimator {
    /// Smoothed RTT in microseconds; 0 until the first sample.
    pub srtt_us: f64,
}

impl RttEstimator {
    /// Fold in a report's latest RTT sample (ignored when 0 = no sample).
    pub fn update(&mut self, m: &Measurement) {
        if m.rtt_us == 0 {
            return;
        }
        let sample = m.rtt_us as f64;
        self.srtt_us = if self.srtt_us == 0.0 {
            sample
        } else {
            0.875 * self.srtt_us + 0.125 * sample
        };
    }
}

/// Tells apart a new congestion event from further losses of the same window,
/// as the kernel's recovery does.
///
/// RFC 5681 §3.2 and RFC 9438 §4.6 reduce cwnd once per loss event. Linux ends
/// fast recovery (and the Loss state after an RTO) when `snd_una` passes the
/// recovery point `high_seq`, the `snd_nxt` of the moment recovery started. In
/// report terms: recovery ends once the data cumulatively acknowledged since
/// the reduction covers the window that was outstanding then
/// ([`Measurement::outstanding_pkts`] x MSS). Losses before that belong to the
/// same window, and an RTO during recovery does not lower ssthresh a second
/// time (as `tcp_enter_loss` keeps ssthresh while `high_seq` is ahead).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LossGuard {
    /// Bytes cumulatively acknowledged over the flow's reports.
    acked_total: u64,
    /// Recovery ends when `acked_total` reaches this (None = not in recovery).
    recovery_point: Option<u64>,
    after_timeout: bool,
    /// Packets SACKed since the cumulative ACK last advanced (the reports'
    /// `sacked` since the last one with acknowledged bytes, that one's
    /// included): the kernel's `sacked_out`, which in-flight counts leave out.
    sacked_since_ack: u64,
}

/// What one report asks of a loss-based window (RFC 5681 §3, RFC 9438 §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportEvent {
    /// A retransmission timeout: reset the window.
    Timeout,
    /// The first loss of a window: one multiplicative decrease.
    LossEvent,
    /// No new congestion signal: grow (slow start or congestion avoidance).
    Growth,
    /// During recovery (before the recovery point): neither grow nor cut again.
    Hold,
}

impl LossGuard {
    /// Count report `m`'s acknowledged bytes (ending recovery at the recovery
    /// point), then classify it: a timeout wins; after an RTO the window grows
    /// and ignores losses until the recovery point; during fast recovery
    /// everything holds; otherwise a loss is a new event, else growth.
    pub fn classify(&mut self, m: &Measurement) -> ReportEvent {
        self.acked_total += m.acked_bytes;
        self.sacked_since_ack =
            if m.acked_bytes > 0 { m.sacked_pkts } else { self.sacked_since_ack.saturating_add(m.sacked_pkts) };
        let mut ended_now = false;
        if self.recovery_point.is_some_and(|p| self.acked_total >= p) {
            self.recovery_point = None;
            self.after_timeout = false;
            ended_now = true;
        }
        if m.timeout {
            ReportEvent::Timeout
        } else if self.after_timeout() {
            // Linux grows cwnd (slow start from the loss window) in the Loss
            // state (tcp_may_raise_cwnd), but losses of that window do not cut again.
            ReportEvent::Growth
        } else if self.active() {
            ReportEvent::Hold
        } else if m.has_loss() && !ended_now {
            ReportEvent::LossEvent
        } else {
            // A loss in the report that passes the recovery point is taken as
            // one of the old window's (a retransmission marked lost as the hole
            // fills): the report cannot tell which packet it was, and two more
            // halvings at the end of the first recovery were measured on
            // ccp:reno (cwnd 101 -> 25 packets) where kernel:reno cut once.
            ReportEvent::Growth
        }
    }

    /// True during recovery (fast recovery or after an RTO), before the recovery point.
    pub fn active(&self) -> bool {
        self.recovery_point.is_some()
    }

    /// True during the recovery that follows an RTO.
    pub fn after_timeout(&self) -> bool {
        self.active() && self.after_timeout
    }

    /// The phase a loss-based window is in: the recovery states first, then slow
    /// start below ssthresh, else congestion avoidance.
    pub fn phase(&self, cwnd_pkts: f64, ssthresh_pkts: f64) -> Phase {
        if self.after_timeout() {
            Phase::TimeoutRecovery
        } else if self.active() {
            Phase::Recovery
        } else if cwnd_pkts < ssthresh_pkts {
            Phase::SlowStart
        } else {
            Phase::CongestionAvoidance
        }
    }

    /// Start recovery: it lasts until `outstanding_pkts` (in flight and lost, as
    /// [`Measurement::outstanding_pkts`]) plus the packets SACKed since the
    /// cumulative ACK last advanced, x `mss_bytes`, more bytes are cumulatively
    /// acknowledged: snd_nxt - snd_una, the kernel's `high_seq`.
    ///
    /// Why the SACKed packets: RACK marks a hole lost only a reorder window
    /// after later packets were SACKed, so by the loss report `sacked_out` holds
    /// a quarter RTT or more of SACKed packets that are outstanding but not in
    /// flight. Without them the recovery point fell short and the old window's
    /// last losses, reported just after it, cut cwnd a second time (paced
    /// ccp:reno, 24 -> 6 Mbit/s step: 127 -> 64 -> 33 packets where kernel:reno
    /// cut once).
    pub fn start(&mut self, outstanding_pkts: f64, mss_bytes: u32, after_timeout: bool) {
        let pkts = outstanding_pkts.max(1.0) + self.sacked_since_ack as f64;
        let bytes = (pkts * f64::from(mss_bytes)) as u64;
        self.recovery_point = Some(self.acked_total + bytes);
        self.after_timeout = after_timeout;
    }
}

/// Proportional Rate Reduction (RFC 6937) per report, as Linux does in fast
/// recovery (`tcp_cwnd_reduction`; the datapath cannot, since the kernel skips
/// PRR for a CCA with `cong_control`).
///
/// PRR sends `delivered x ssthresh / RecoverFS` packets over the recovery. With
/// in flight = RecoverFS - delivered - lost + sent, the window that allows
/// exactly that is `RecoverFS - lost - delivered x (1 - ssthresh / RecoverFS)`,
/// and PRR-SSRB lets in flight climb back to ssthresh, so the window is the
/// larger of that and ssthresh. Without PRR (cwnd = ssthresh at once) the flow
/// sends nothing until in flight falls below ssthresh: about half a window of
/// silence after every loss (seen as the throughput dips of ccp:reno against
/// kernel:reno in `ccplab fidelity`).
///
/// Delivered = acknowledged + newly SACKed packets of the reports (a SACKed
/// packet later covered by the cumulative ACK counts twice, which only ends the
/// reduction sooner). The report that entered recovery counts its SACKed and
/// lost packets but not its cumulatively acknowledged ones: those were ACKs
/// before the loss ACK, delivered before recovery and already outside RecoverFS
/// (the in flight before the loss ACK); Linux counts only the loss ACK's
/// deliveries (`prr_delivered` starts at 0 in `tcp_init_cwnd_reduction`).
/// Counting them (up to a quarter RTT of slow-start ACKs) made PRR send that
/// many x (1 - ssthresh / RecoverFS) packets too few: measured on the 0 -> 48
/// Mbit/s step, 63 acked packets in the loss report, the link idle ~10 ms, then
/// PRR-SSRB refilled in flight to ssthresh in one burst at twice the link rate
/// that overflowed the queue, a second halving kernel:reno never made.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prr {
    recover_fs: f64,
    ssthresh: f64,
    delivered: f64,
    lost: f64,
    /// Packets cumulatively acknowledged since the entry report.
    acked: f64,
    /// No report counted yet: the next is the one that entered recovery.
    entry: bool,
}

/// The window to command after report `m`: `cwnd`, or during fast recovery
/// the larger PRR window (cwnd itself stays at ssthresh, where the reduction
/// ends as Linux `tcp_end_cwnd_reduction`). The reduction ends with the loss
/// guard or at a timeout (`prr` is cleared then). Packets, within `params`.
pub fn commanded_window(
    prr: &mut Option<Prr>,
    guard: &LossGuard,
    params: &WindowParams,
    cwnd: f64,
    m: &Measurement,
) -> f64 {
    if !guard.active() || guard.after_timeout() {
        *prr = None;
    }
    match prr.as_mut() {
        Some(p) => params.clamp(p.on_report(m, params.mss_bytes).max(cwnd)),
        None => cwnd,
    }
}

impl Prr {
    /// A reduction from `recover_fs` packets outstanding to `ssthresh_pkts`.
    pub fn new(recover_fs: f64, ssthresh_pkts: f64) -> Self {
        Prr {
            recover_fs: recover_fs.max(ssthresh_pkts).max(1.0),
            ssthresh: ssthresh_pkts,
            delivered: 0.0,
            lost: 0.0,
            acked: 0.0,
            entry: true,
        }
    }

    /// Count report `m`'s delivered and lost packets (the first report, the
    /// one that entered recovery, without its acknowledged ones); the window
    /// now, packets.
    pub fn on_report(&mut self, m: &Measurement, mss_bytes: u32) -> f64 {
        let entry = std::mem::take(&mut self.entry);
        let acked = if entry { 0.0 } else { m.acked_pkts(mss_bytes) };
        self.acked += acked;
        // Linux prr_delivered += acked_sacked: each packet once (a cumulative
        // ACK over packets SACKed earlier delivers none of them again).
        self.delivered += if entry { m.sacked_pkts as f64 } else { m.delivered_pkts as f64 };
        self.lost += m.lost_pkts as f64;
        self.window()
    }

    /// The packets of RecoverFS not yet cumulatively acknowledged: the holes and
    /// SACKed packets that stay in the kernel's `packets_out` until the
    /// cumulative ACK passes them (new data sent in recovery not counted).
    pub fn unacked_pkts(&self) -> f64 {
        (self.recover_fs - self.acked).max(0.0)
    }

    /// The PRR window, packets: max(ssthresh, RecoverFS - lost - delivered (1 - ssthresh / RecoverFS)).
    pub fn window(&self) -> f64 {
        self.keep().max(self.ssthresh)
    }

    /// The PRR window before the ssthresh floor (PRR-SSRB), packets:
    /// RecoverFS - lost - delivered x (1 - [`Prr::share`]); may be negative.
    pub fn keep(&self) -> f64 {
        self.recover_fs - self.lost - self.delivered * (1.0 - self.share())
    }

    /// ssthresh / RecoverFS: the packets PRR sends per packet delivered.
    pub fn share(&self) -> f64 {
        self.ssthresh / self.recover_fs
    }

    /// The slow-start threshold the reduction ends at, packets.
    pub fn ssthresh_pkts(&self) -> f64 {
        self.ssthresh
    }
}

/// User space's side of PRR per ACK in the fold ([`crate::fold::Features::prr`]).
///
/// Between two reports the kernel keeps the last commanded cwnd while every ACK
/// delivers packets and RACK marks more lost: in flight falls by each, and the
/// kernel refills it one for one, where Linux's `tcp_cwnd_reduction` sets
/// cwnd = in flight + sndcnt on every ACK and sends about one packet per two
/// delivered. On Verizon LTE, in the first 280 ms of recovery ccp:reno sent 166
/// packets on 90 ACKs where kernel:reno sent 109 on 218; the surplus into the
/// full 1000-packet queue cost retransmissions, and the hole they left stalled
/// the flow for ~2 s until an RTO.
///
/// The PRR window is linear in the packets delivered and lost, so the window
/// at user space's last report (before the ssthresh floor, [`Prr::keep`])
/// carries it: with `d`, `l` the packets delivered and lost since that report,
/// `W = max(keep + d x share, l + d + ssthresh) - (l + d)` ([`Prr::share`]), the
/// PRR-SSRB floor included. The fold applies W on every ACK from user space's
/// answer until the next report leaves (then it holds cwnd until the answer to
/// that one arrives: the fold counts reports, user space says which report it
/// answered, and a stale answer is never applied per ACK).
///
/// Between the loss ACK and user space's answer (a report's round trip) the
/// fold holds cwnd at in flight + 1 packet (`pm` = 1): without it the kernel
/// retransmits every packet the loss ACK marked lost at once, where PRR sends
/// one (`tcp_cwnd_reduction`'s forced fast retransmit).
///
/// A report lost between the datapath and user space (the datapath counts them
/// as `reports_dropped`) leaves the counts apart for good: the fold then never
/// applies PRR per ACK, and recovery runs per report as before.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FoldPrr {
    on: bool,
    /// Reports seen (the fold's `nrep` when it sent the last one).
    reports: u64,
}

impl FoldPrr {
    /// PRR per ACK in the fold when `on` (the program has PRR block, [`crate::fold::Features::prr`]).
    pub fn new(on: bool) -> Self {
        FoldPrr { on, reports: 0 }
    }

    /// Count one report (every report, in order).
    pub fn count(&mut self, _m: &Measurement) {
        self.reports += 1;
    }

    /// The fold's control registers after a report: `pm` (2 = PRR in
    /// recovery; otherwise 1 = hold cwnd at the next loss ACK, when not in
    /// recovery or after an RTO, else 0), `pn` (the reports seen while `pm` is
    /// 2, else 0: only the PRR block reads it, and a constant lets an answer
    /// outside recovery repeat the last one, [`crate::repeats`]), `pa`
    /// ([`Prr::keep`], packets, at least 0), `pf` (share x 1024), `pss`
    /// (ssthresh, packets) and `pmss` (bytes). None when off. Values saturate
    /// at u32::MAX.
    pub fn registers(&self, prr: Option<&Prr>, guard: &LossGuard, mss_bytes: u32) -> Vec<(&'static str, u32)> {
        if !self.on {
            return Vec::new();
        }
        let sat = |v: f64| v.round().clamp(0.0, f64::from(u32::MAX)) as u32;
        // keep < 0 floors to 0 exactly: keep + d x share < l + d + ssthresh then.
        let (pm, pa, pf, pss) = match prr {
            Some(p) => (2, sat(p.keep()), sat(p.share() * 1024.0), sat(p.ssthresh_pkts())),
            None => (u32::from(!guard.active()), 0, 0, 0),
        };
        vec![
            ("pm", pm),
            ("pn", if pm == 2 { (self.reports % (1 << 32)) as u32 } else { 0 }),
            ("pa", pa),
            ("pf", pf),
            ("pss", pss),
            ("pmss", mss_bytes),
        ]
    }

    /// The window (packets) the fold sets at an ACK after `delivered` and
    /// `lost` packets since the report `regs` answer (the fold block's formula),
    /// None without PRR. For tests.
    pub fn fold_window(regs: &[(&'static str, u32)], delivered: u64, lost: u64) -> Option<u64> {
        let get = |name: &str| regs.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| u64::from(*v));
        if get("pm") != 2 {
            return None;
        }
        let gone = lost + delivered;
        let w = (get("pa") + delivered * get("pf") / 1024).max(gone + get("pss"));
        Some(w - gone)
    }
}

/// Bytes added to the first Cwnd command after slow start in the fold ends, so
/// the fold cannot mistake it for its own value (see [`crate::fold`]'s
/// `SLOW_START`); the datapath converts bytes to whole packets (floor), so
/// the byte changes nothing else.
pub const TAKEOVER_MARK_BYTES: u32 = 1;

/// User space's side of slow start in the fold ([`crate::fold::Growth::SlowStart`]).
///
/// While active the fold grows cwnd per ACK: each report's `dp_cwnd_bytes` is
/// the flow's cwnd (adopted with [`FoldSlowStart::adopt`]), and the command is
/// Cwnd 0 ("leave it"). It ends when a report carries a loss or a timeout (the
/// fold stopped at that ACK) or when the algorithm calls [`FoldSlowStart::stop`]
/// (ssthresh, HyStart, the ceiling); the first command after that carries
/// [`TAKEOVER_MARK_BYTES`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FoldSlowStart {
    active: bool,
    mark_next: bool,
}

impl FoldSlowStart {
    /// Slow start in the fold, active from the flow's start when `on`.
    pub fn new(on: bool) -> Self {
        FoldSlowStart { active: on, mark_next: false }
    }

    /// True while the fold grows cwnd.
    pub fn active(&self) -> bool {
        self.active
    }

    /// Take report `m` into account: while active, `cwnd_pkts` becomes the
    /// fold's cwnd (`dp_cwnd_bytes / mss`, when reported and not a timeout
    /// report: that one holds the kernel's loss window); a loss or timeout ends
    /// slow start in the fold (it stopped at that ACK). Returns whether it was
    /// active for this report.
    pub fn adopt(&mut self, m: &Measurement, cwnd_pkts: &mut f64, mss_bytes: u32) -> bool {
        if !self.active {
            return false;
        }
        // A timeout report's cwnd is the kernel's loss window, not the fold's.
        if m.dp_cwnd_bytes > 0 && !m.timeout {
            *cwnd_pkts = m.dp_cwnd_bytes as f64 / f64::from(mss_bytes.max(1));
        }
        if m.has_loss() || m.timeout {
            self.stop();
        }
        true
    }

    /// The fold registers to send with the flow's initial command of
    /// `cwnd_bytes`: while active, `fcw` (the fold's own cwnd) = that window,
    /// so the fold takes the command as its own value and goes on growing from
    /// it. Without it a fast flow's fold had already grown cwnd when the
    /// initial command arrived (the first ACKs of a veth flow come within
    /// microseconds, the command a report round trip later), took the
    /// unmarked command for user space's takeover and ended slow start for
    /// good while user space went on answering "go on": cwnd stayed at the
    /// initial 10 packets for the whole run (1 flow on veth: 9-12 Gbit/s
    /// instead of 50 in 3 of 7 runs of `ccplab.dpbench`).
    pub fn initial_registers(&self, cwnd_bytes: u32) -> Vec<(&'static str, u32)> {
        if self.active {
            vec![("fcw", cwnd_bytes)]
        } else {
            Vec::new()
        }
    }

    /// User space takes over (the next command is marked).
    pub fn stop(&mut self) {
        if self.active {
            self.active = false;
            self.mark_next = true;
        }
    }

    /// The Cwnd to command for a window of `bytes`: 0 while active, `bytes`
    /// plus the mark on the first command after slow start in the fold ended.
    pub fn command(&mut self, bytes: u32) -> u32 {
        if self.active {
            0
        } else if std::mem::take(&mut self.mark_next) {
            bytes.saturating_add(TAKEOVER_MARK_BYTES)
        } else {
            bytes
        }
    }
}

/// Slow start per RFC 5681 §3.1 with byte counting (RFC 3465, as Linux
/// `tcp_slow_start`): cwnd grows by the acknowledged packets, but not beyond
/// ssthresh. Returns the acknowledged packets left over for congestion avoidance.
///
/// Applied per report with the report's total, which is what the per-ACK rule
/// sums to.
pub fn slow_start(cwnd_pkts: &mut f64, ssthresh_pkts: f64, acked_pkts: f64) -> f64 {
    if *cwnd_pkts >= ssthresh_pkts {
        return acked_pkts;
    }
    let room = ssthresh_pkts - *cwnd_pkts;
    let used = acked_pkts.min(room);
    *cwnd_pkts += used;
    acked_pkts - used
}

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
    /// algorithm commands the same rate with every report (`Report`).
    pub fn without_datapath_pacing(self) -> PacingMode {
        if self == PacingMode::Kernel {
            PacingMode::Report
        } else {
            self
        }
    }
}

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
#[derive(Clone, Debug)]
pub struct ReportPacer {
    pacing: KernelPacing,
    mss_bytes: u32,
    rtt: RttEstimator,
    lost: bool,
}

impl ReportPacer {
    /// A pacer for a flow of `mss_bytes` with Linux's ratios.
    pub fn new(mss_bytes: u32) -> Self {
        ReportPacer { pacing: KernelPacing::LINUX, mss_bytes: mss_bytes.max(1), rtt: RttEstimator::default(), lost: false }
    }

    /// The rate in bytes/s for report `m` when the algorithm answered with a cwnd of
    /// `cwnd_bytes` (None: it left cwnd as the datapath holds it, `m.dp_cwnd_bytes`);
    /// None until the first RTT sample.
    pub fn rate_for(&mut self, m: &Measurement, cwnd_bytes: Option<u32>) -> Option<u64> {
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

    fn params() -> WindowParams {
        WindowParams {
            mss_bytes: 1000,
            init_cwnd_pkts: 10.0,
            init_ssthresh_pkts: f64::INFINITY,
            min_cwnd_pkts: 1.0,
            max_cwnd_pkts: 50.0,
        }
    }

    #[test]
    fn report_pacer_commands_tcp_update_pacing_rate_200_then_120_percent_after_a_loss() {
        let mut p = ReportPacer::new(1000);
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
    fn clamp_and_bytes() {
        let p = params();
        assert_eq!(p.clamp(0.2), 1.0);
        assert_eq!(p.clamp(60.0), 50.0);
        assert_eq!(p.to_bytes(2.5), 2500);
        assert_eq!(p.to_bytes(1e12), u32::MAX);
    }

    #[test]
    fn slow_start_stops_at_ssthresh_and_returns_leftover() {
        let mut w = 10.0;
        assert_eq!(slow_start(&mut w, 16.0, 4.0), 0.0);
        assert_eq!(w, 14.0);
        assert_eq!(slow_start(&mut w, 16.0, 5.0), 3.0);
        assert_eq!(w, 16.0);
        assert_eq!(slow_start(&mut w, 16.0, 5.0), 5.0);
        assert_eq!(w, 16.0);
    }

    #[test]
    fn srtt_follows_rfc6298() {
        let mut r = RttEstimator::default();
        r.update(&Measurement { rtt_us: 0, ..Default::default() });
        assert_eq!(r.srtt_us, 0.0);
        r.update(&Measurement { rtt_us: 800, ..Default::default() });
        assert_eq!(r.srtt_us, 800.0);
        r.update(&Measurement { rtt_us: 1600, ..Default::default() });
        assert_eq!(r.srtt_us, 800.0 * 7.0 / 8.0 + 1600.0 / 8.0);
    }

    #[test]
    fn recovery_lasts_until_the_recovery_point() {
        let acked = |bytes| Measurement { acked_bytes: bytes, ..Default::default() };
        let mut g = LossGuard::default();
        assert_eq!(g.classify(&acked(5000)), ReportEvent::Growth);
        g.start(10.0, 1000, false);
        // A loss of the same window, however late, holds until 10 packets are acked.
        let loss = Measurement { lost_pkts: 2, ..acked(4000) };
        assert_eq!(g.classify(&loss), ReportEvent::Hold);
        assert_eq!(g.classify(&acked(5999)), ReportEvent::Hold);
        assert!(g.active() && !g.after_timeout());
        // The report that passes the recovery point: a loss in it is the old window's.
        assert_eq!(g.classify(&Measurement { lost_pkts: 1, ..acked(1) }), ReportEvent::Growth);
        assert!(!g.active());
        assert_eq!(g.classify(&loss), ReportEvent::LossEvent);
        // A timeout always wins; after it the window grows but ignores losses.
        g.start(3.0, 1000, false);
        assert_eq!(g.classify(&Measurement { timeout: true, ..Default::default() }), ReportEvent::Timeout);
        g.start(3.0, 1000, true);
        assert_eq!(g.classify(&Measurement { lost_pkts: 2, ..acked(0) }), ReportEvent::Growth);
        assert!(g.after_timeout());
    }

    #[test]
    fn recovery_point_counts_the_packets_sacked_since_the_cumulative_ack_stalled() {
        let m = |acked: u64, sacked: u64| Measurement { acked_bytes: acked, sacked_pkts: sacked, ..Default::default() };
        let mut g = LossGuard::default();
        g.classify(&m(5000, 2));
        // A hole: no cumulative ACK, 6 + 4 packets SACKed before RACK marks it lost.
        g.classify(&m(0, 6));
        assert_eq!(g.classify(&Measurement { lost_pkts: 1, ..m(0, 4) }), ReportEvent::LossEvent);
        // 10 in flight + lost, plus the 2 + 6 + 4 SACKed (the first report's 2 came
        // with acked bytes, after the ACK that advanced): 22 packets.
        g.start(10.0, 1000, false);
        assert_eq!(g.classify(&m(21_999, 0)), ReportEvent::Hold);
        assert!(g.active());
        assert_eq!(g.classify(&Measurement { lost_pkts: 1, ..m(1, 0) }), ReportEvent::Growth, "recovery ends at 22 packets");
        assert!(!g.active());
    }

    #[test]
    fn fold_slow_start_adopts_the_fold_cwnd_until_loss_then_marks_the_takeover() {
        let mut ss = FoldSlowStart::new(true);
        let mut cwnd = 10.0;
        let m = Measurement { dp_cwnd_bytes: 23_000, acked_bytes: 13_000, ..Default::default() };
        assert!(ss.adopt(&m, &mut cwnd, 1000));
        assert_eq!((cwnd, ss.command(23_000)), (23.0, 0), "Cwnd 0 while the fold grows");
        // The loss report: the fold stopped at that ACK; its cwnd is adopted once more.
        let loss = Measurement { dp_cwnd_bytes: 30_000, lost_pkts: 2, ..Default::default() };
        assert!(ss.adopt(&loss, &mut cwnd, 1000));
        assert!(!ss.active());
        assert_eq!(cwnd, 30.0);
        assert_eq!(ss.command(15_000), 15_001, "first command after the fold: marked");
        assert_eq!(ss.command(15_000), 15_000);
        assert!(!ss.adopt(&m, &mut cwnd, 1000), "inactive: the report's cwnd is not adopted");
        // A timeout report holds the kernel's loss window: not adopted.
        let mut rto = FoldSlowStart::new(true);
        let t = Measurement { dp_cwnd_bytes: 1000, timeout: true, ..Default::default() };
        assert!(rto.adopt(&t, &mut cwnd, 1000));
        assert_eq!((cwnd, rto.active()), (30.0, false));
        assert_eq!(cwnd, 30.0);
        // Off from the start (unit tests, other programs): plain commands.
        let mut off = FoldSlowStart::new(false);
        assert_eq!(off.command(5000), 5000);
        off.stop();
        assert_eq!(off.command(5000), 5000, "stop when inactive marks nothing");
    }

    /// A report whose acked (1000-byte packets) and SACKed packets are all newly delivered.
    fn fresh_deliveries(acked_pkts: u64, sacked: u64, lost: u64) -> Measurement {
        Measurement {
            acked_bytes: acked_pkts * 1000,
            sacked_pkts: sacked,
            delivered_pkts: acked_pkts + sacked,
            lost_pkts: lost,
            ..Default::default()
        }
    }

    #[test]
    fn fold_prr_registers_carry_the_prr_window_to_every_later_ack() {
        let m = fresh_deliveries;
        let mut fp = FoldPrr::new(true);
        let guard = LossGuard::default();
        // Before recovery: no window, the hold armed.
        fp.count(&m(500, 0, 0));
        let open = fp.registers(None, &guard, 1448);
        assert_eq!(FoldPrr::fold_window(&open, 3, 0), None);
        // pn is read only in recovery (pm 2): 0 outside it, so such answers can repeat
        assert!(open.contains(&("pm", 1)) && open.contains(&("pn", 0)) && open.contains(&("pmss", 1448)), "{open:?}");
        // Recovery from 100 outstanding to ssthresh 70 (cubic's beta): the entry
        // report, then three more; after each, the fold's window at any later ACK
        // equals what Prr says once that ACK's counts arrive as a report.
        let mut prr = Prr::new(100.0, 70.0);
        for (k, r) in [m(30, 10, 4), m(8, 3, 1), m(0, 20, 6), m(0, 60, 0)].into_iter().enumerate() {
            fp.count(&r);
            prr.on_report(&r, 1000);
            let regs = fp.registers(Some(&prr), &guard, 1448);
            assert!(regs.contains(&("pm", 2)) && regs.contains(&("pn", k as u32 + 2)), "{regs:?}");
            for (d, l) in [(0u64, 0u64), (1, 0), (3, 2), (17, 5), (200, 0)] {
                let mut later = prr;
                later.on_report(&m(0, d, l), 1000);
                let fold = FoldPrr::fold_window(&regs, d, l).expect("in recovery") as f64;
                assert!(
                    (fold - later.window()).abs() <= 1.0,
                    "report {k}, then {d} delivered and {l} lost: fold {fold} vs Prr {}",
                    later.window()
                );
            }
        }
        assert!(prr.keep() < prr.ssthresh_pkts(), "the last report reached the floor (keep {})", prr.keep());
        assert!(FoldPrr::new(false).registers(Some(&prr), &guard, 1448).is_empty(), "off: no registers");
    }

    #[test]
    fn prr_sends_ssthresh_over_recover_fs_of_the_delivered_packets() {
        // 100 outstanding, ssthresh 50: one packet sent per two delivered.
        let mut prr = Prr::new(100.0, 50.0);
        assert_eq!(prr.window(), 100.0, "nothing sent before anything is delivered");
        // fresh deliveries: every acked and SACKed packet newly delivered
        let m = fresh_deliveries;
        // 10 delivered (SACKed), 4 marked lost: in flight 100 - 10 - 4 = 86 before
        // sending; window 86 + 5 = 91, i.e. 5 new packets for 10 delivered.
        // The entry report's cumulatively acked packets (ACKs before the loss ACK,
        // not part of RecoverFS) are not deliveries of the recovery.
        assert_eq!(prr.on_report(&m(30, 10, 4), 1000), 91.0);
        assert_eq!(prr.on_report(&m(20, 0, 0), 1000), 81.0);
        // A cumulative ACK over 30 packets SACKed before delivers none of them
        // again (Linux prr_delivered counts acked_sacked): the window stays.
        let covered = Measurement { acked_bytes: 30_000, delivered_pkts: 0, ..Default::default() };
        assert_eq!(prr.on_report(&covered, 1000), 81.0);
        // Never below ssthresh (PRR-SSRB refills in flight up to ssthresh).
        assert_eq!(prr.on_report(&m(90, 0, 0), 1000), 50.0);
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

    #[test]
    fn cwnd_limited_as_tcp_is_cwnd_limited() {
        let m = |inflight| Measurement { inflight_max_pkts: inflight, ..Default::default() };
        // Slow start: limited while cwnd < 2 x in flight.
        assert!(cwnd_limited(&m(6), 10.0, true));
        assert!(!cwnd_limited(&m(5), 10.0, true));
        // Congestion avoidance: the window must be (nearly) full.
        assert!(cwnd_limited(&m(98), 100.0, false));
        assert!(!cwnd_limited(&m(50), 100.0, false));
        assert!(cwnd_limited(&m(0), 100.0, false), "unknown counts as limited");
    }
}
