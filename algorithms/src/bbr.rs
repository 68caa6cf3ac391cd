//! BBR v1 (Cardwell et al., ACM Queue 2016) as Linux tcp_bbr.c, on Portus:
//! a rate-based controller that sets the pacing rate and the cwnd.
//!
//! Per report (two per RTT; the kernel's rules applied with the report's totals):
//! - Rounds: a round ends when as much data as was in flight at its start has
//!   been delivered (cumulatively acknowledged or SACKed; tcp_bbr.c counts
//!   `tp->delivered` the same way).
//! - Bottleneck bandwidth BtlBw: windowed max of the delivery rate over the
//!   last 10 rounds (`--bw-window-rounds`); the delivery-rate sample is the
//!   report's largest per-ACK min(send rate, ACK rate), i.e. Linux's
//!   delivered / max(send interval, ACK interval).
//! - RTprop: minimum RTT over 10 s (`--min-rtt-window-s`).
//! - Startup: pacing_gain = cwnd_gain = 2/ln 2 (2.885); full bandwidth reached
//!   when BtlBw grew less than 25 % in 3 rounds; then Drain: pacing_gain =
//!   1/2.885 until in-flight <= BDP; then ProbeBW.
//! - ProbeBW: the 8-phase gain cycle 5/4, 3/4, 1, 1, 1, 1, 1, 1, each phase
//!   about one RTprop (5/4 also until in-flight reaches 5/4 BDP + the
//!   quantization budget, `bbr_inflight`, or a loss; 3/4
//!   ends early when in-flight <= BDP); it starts at a random phase other than
//!   3/4 (seeded by `--seed`).
//! - ProbeRTT: when RTprop was not refreshed for 10 s: cwnd = 4 packets for
//!   max(200 ms, one round) after in-flight fell to 4, then RTprop's stamp is
//!   renewed, the earlier cwnd restored, and BBR returns to ProbeBW (or Startup
//!   if it never filled the pipe).
//! - pacing rate = pacing_gain x BtlBw x 99 % (tcp_bbr.c's 1 % margin); in
//!   Startup the rate never goes down. Before the first bandwidth sample:
//!   2.885 x init cwnd / SRTT.
//! - cwnd = cwnd_gain x BDP + 3 x TSO segments (quantization budget, +2
//!   packets in the 5/4 phase), reached by growing with the acked packets; at
//!   least 4 packets. After Startup the target also carries the
//!   ACK-aggregation allowance (`bbr_ack_aggregation_cwnd`, `--ack-aggregation`):
//!   the max over 5-10 rounds of the per-ACK excess of delivered packets over
//!   BtlBw x the aggregation epoch, measured in the fold
//!   ([`ack_aggregation_block`]), capped at cwnd and at BtlBw x 100 ms.
//! - Loss: each report's lost packets come off cwnd (tcp_bbr.c deducts
//!   `rs->losses` per ACK; loss reports are urgent, so nearly per ACK here);
//!   on entering recovery cwnd = in-flight + the last ACK's delivered packets
//!   and a new round starts; for that round, packet conservation; the earlier
//!   cwnd restored at the recovery point. RTO: cwnd = 1 packet, the
//!   full-bandwidth count restarts; growth by acked packets.
//!
//! Fold program: [`crate::fold`]'s fields, [`REPORTS_PER_RTT`] (2) reports per
//! RTT, urgent on loss or timeout, the ACK-aggregation excess per ACK
//! ([`ack_aggregation_block`], BtlBw sent to it with each command), Startup's pacing rate per ACK until user
//! space commands one ([`startup_rate_block`]; user space commands none
//! until Startup ends, `--startup-rate-in-fold`, default on), Startup's cwnd
//! rule per ACK ([`startup_cwnd_block`]: grow by the newly delivered packets
//! while cwnd < 2.885 x the largest rate sample x the smallest RTT + budget,
//! or before 10 packets were delivered, as tcp_bbr.c's `bbr_set_cwnd` while
//! the pipe is not full; `--startup-cwnd-in-fold`, default on; user space
//! turns it on with its initial command and off when Startup ends), and cwnd grown **per ACK in the fold toward
//! the commanded value** ([`FOLD_GROWTH`]: cwnd = min(cwnd + acked, cap), a
//! lower cap at once), as tcp_bbr.c's per-ACK `bbr_set_cwnd`; user space
//! adopts the fold's cwnd from each report and commands the target (ProbeBW /
//! Drain target, packet conservation, ProbeRTT's 4 packets; in Startup a
//! loose 2 x cwnd + budget) as the cap.
//!
//! Per-report decisions made to land where the kernel's per-ACK ones do
//! (each found in `ccplab fidelity` runs):
//! - packet conservation uses the report's mean delivered packets per ACK,
//!   not its total (a report can carry 50 SACKed packets), and a loss
//!   report's deduction is not undone by the in-flight floor (in-flight then
//!   includes what was sent under the command being replaced);
//! - without the fold's Startup cwnd rule (`--startup-cwnd-in-fold false`),
//!   Startup's cap extrapolates BtlBw's growth since the previous report (the
//!   kernel's target rises per ACK) and doubles cwnd before the first sample;
//! - Drain and the 3/4 phase end at BDP + quantization budget
//!   (`bbr_inflight`) within the report interval in which in-flight reaches
//!   it, the ended phase's gain blended into that interval's pacing rate.
//!
//! Differences from Linux `bbr` that remain: per-report (not per-ACK)
//! decisions elsewhere (Startup's end, the
//! 5/4 phase ends at a report, and so does ProbeRTT, whose saved cwnd comes
//! back at once with that report's command: `fcw`, the fold's cwnd, set to
//! it, [`Bbr::restore_jump_pkts`]); after loss recovery the saved cwnd is
//! regrown per ACK rather than jumped to (see `restore_prior_cwnd`); after
//! Startup cwnd grows by cumulatively acked bytes
//! only (the kernel adds SACKed packets too); in Startup the fold's
//! BtlBw is the largest sample since the flow began, not a 10-round max; the delivery-rate samples carry
//! no app-limited mark (libccp has none); the ACK-aggregation excess is
//! capped at cwnd per report, not per ACK, and its filter rotates on the
//! report that starts a round (per report, without the fold's per-ACK
//! excess, it over-estimated the excess 2x and raised the p95 queueing delay
//! after a capacity drop 2.6x); no
//! idle-restart handling; no long-term (policer) bandwidth mode; the socket's
//! send buffer is sized 2 x cwnd by the datapath where tcp_bbr.c asks 3 x
//! (`bbr_sndbuf_expand`).
//!
//! How close it comes to the kernel's bbr: `ccplab fidelity`
//! (docs/results/fidelity.md). What remains apart is mostly the per-report
//! decisions above and ProbeBW's standing queue, which spreads widely in both.

use crate::cc::{Measurement, RttEstimator, WindowParams};
use crate::fold::{Cadence, Features, FoldProgram, Growth, TowardCap};
use crate::{AlgorithmSpec, Control, Controller};
use std::collections::VecDeque;

/// 2/ln(2) (tcp_bbr.c `bbr_high_gain` = 2885/1000), written as a constant: no
/// logarithm in a binary that may link libccp (docs/NOTES.md, "libccp's `log` symbol").
pub const HIGH_GAIN: f64 = 2.885;
/// The ProbeBW gain cycle (tcp_bbr.c `bbr_pacing_gain`).
pub const GAIN_CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// cwnd in ProbeRTT, packets (`bbr_cwnd_min_target`).
pub const MIN_CWND_PKTS: f64 = 4.0;
/// Time in ProbeRTT after in-flight fell to 4 packets, us.
pub const PROBE_RTT_US: u64 = 200_000;

/// BBR as an [`AlgorithmSpec`].
pub struct BbrSpec;

/// BBR's flags (tcp_bbr.c constants).
#[derive(clap::Args, Clone, Debug)]
pub struct BbrArgs {
    /// Rounds of the BtlBw max filter (`bbr_bw_rtts`).
    #[arg(long, default_value = "10", value_name = "ROUNDS")]
    pub bw_window_rounds: u64,
    /// Window of the RTprop min filter, seconds (`bbr_min_rtt_win_sec`).
    #[arg(long, default_value = "10")]
    pub min_rtt_window_s: f64,
    /// cwnd gain in ProbeBW (`bbr_cwnd_gain`).
    #[arg(long, default_value = "2")]
    pub cwnd_gain: f64,
    /// Startup gain for pacing and cwnd (`bbr_high_gain`, 2/ln 2).
    #[arg(long, default_value = "2.885")]
    pub high_gain: f64,
    /// Seed of the random first ProbeBW phase.
    #[arg(long, default_value = "1")]
    pub seed: u64,
    /// Leave Startup's pacing rate to the fold program, set per ACK
    /// ([`startup_rate_block`]; user space commands no Rate until Startup
    /// ends), as tcp_bbr.c's per-ACK `bbr_set_pacing_rate`. On by default
    /// together with `--startup-cwnd-in-fold`: alone, the per-ACK rate without
    /// the per-ACK cwnd rule raised retransmits on the 0 -> 12 Mbit/s step, and
    /// the two together follow the kernel's Startup closest in `ccplab fidelity`.
    #[arg(long, default_value = "true", action = clap::ArgAction::Set, value_name = "BOOL")]
    pub startup_rate_in_fold: bool,
    /// Leave Startup's cwnd growth to the fold program's per-ACK rule
    /// (tcp_bbr.c `bbr_set_cwnd` while the pipe is not full: grow by the
    /// newly delivered packets while cwnd < 2.885 x BtlBw x RTprop + budget,
    /// both per ACK, or while fewer than 10 packets were delivered;
    /// [`startup_cwnd_block`]); user space commands a loose cap (2 x cwnd +
    /// budget) until Startup ends. On by default (see `--startup-rate-in-fold`).
    #[arg(long, default_value = "true", action = clap::ArgAction::Set, value_name = "BOOL")]
    pub startup_cwnd_in_fold: bool,
    /// Add tcp_bbr.c's ACK-aggregation allowance to the cwnd target after
    /// Startup (`bbr_ack_aggregation_cwnd`: the 5-10-round max of the per-ACK
    /// excess the fold measures, [`ack_aggregation_block`], capped at BtlBw x
    /// 100 ms). Needs the fold's cwnd growth (the daemon's default).
    #[arg(long, default_value = "true", action = clap::ArgAction::Set, value_name = "BOOL")]
    pub ack_aggregation: bool,
}

/// Regular reports per RTT. Every per-report decision (Startup's pacing rate
/// and cap, the ends of Drain and the gain-cycle phases) lags the kernel's
/// per-ACK one by up to a report interval. Measured on fixed12-q1bdp (3 runs,
/// ccp side): 4 per RTT left Startup's ramp and the Normalized Area as they
/// were (0.097 s both) and made the retransmits less steady (0.60-1.56x the
/// kernel's against 1.05-1.09x at 2), so 2.
pub const REPORTS_PER_RTT: u32 = 2;

/// The control registers of the per-ACK Startup pacing rate
/// ([`startup_rate_block`]): `sr` the block is on (until user space commands
/// a Rate), `srate` the fold's Startup pacing rate in bytes/s. Its scratch,
/// "no rate yet" and this ACK's gained sample, then the rate to set, are the
/// ACK-aggregation block's `xr` and `xn` ([`ACK_AGG_DEFS`], which sets both
/// before it reads them): Portus serializes at most 16 control registers
/// (the language nests 3 deep at most; Portus cannot compile
/// `(:= Rate (if ..))`, so the block writes `max(Rate, srate or 0)`: Rate is
/// then 0 or `srate` while it holds).
pub const STARTUP_RATE_DEFS: &str = "    (sr true)\n    (srate 0)\n";

/// [`HIGH_GAIN`] x 99 % (tcp_bbr.c `bbr_rate_bytes_per_sec`'s 1 % pacing
/// margin) in thousandths: the fold's Startup rate is
/// `sample / 1000 * STARTUP_RATE_PER_MILLE` (integer arithmetic only).
pub const STARTUP_RATE_PER_MILLE: u64 = 2856;

/// Startup's pacing rate per ACK in the fold, as tcp_bbr.c's per-ACK
/// `bbr_set_pacing_rate` in Startup: the rate never goes down and rises on
/// each ACK to high_gain x 99 % x the delivery-rate sample
/// (min(`Flow.rate_outgoing`, `Flow.rate_incoming`), bytes/s, as the report's
/// `rate`); the first ACK with an RTT sample sets high_gain x 99 % x Cwnd /
/// RTT (`bbr_init_pacing_rate_from_rtt`, Cwnd then the initial window).
/// The block holds while every ACK finds Rate at 0 (nothing set yet, or the
/// datapath dropped its controls after a timeout) or at the fold's own
/// `srate`; the first Rate user space commands (Drain's) differs and ends it
/// for good, so user space commands no Rate until Startup ends.
///
/// Why: per-report rates left Startup's 2nd-3rd rounds pacing-limited at
/// 19 and 36 packets where the kernel sends 22 and 44 (a larger Normalized
/// Area than the kernel's in `ccplab fidelity`).
pub fn startup_rate_block() -> String {
    let g = STARTUP_RATE_PER_MILLE;
    format!(
        "\
(when true
    (:= sr (&& sr (|| (== Rate 0) (== Rate srate))))
    (:= xr (&& sr (== srate 0)))
    (:= srate (if (&& xr (< Flow.rtt_sample_us +infinity)) (/ (* Cwnd {}) Flow.rtt_sample_us)))
    (:= xn (min Flow.rate_outgoing Flow.rate_incoming))
    (:= xn (* (/ xn 1000) {g}))
    (:= srate (if sr (max srate xn)))
    (:= xn 0)
    (:= xn (if sr srate))
    (:= Rate (max Rate xn))
    (fallthrough)
)
",
        g * 1000
    )
}

/// The control registers of Startup's per-ACK cwnd rule ([`startup_cwnd_block`],
/// applied in the growth toward the cap, [`startup_cwnd_growth_lines`]): `sg` 0 = off (the initial value: user
/// space turns it on with `--startup-cwnd-in-fold`), else 1 + the packets
/// delivered so far, counted up to [`STARTUP_SG_FULL`]; `sbw` the largest
/// per-ACK delivery-rate sample, bytes/s (min(`Flow.rate_outgoing`,
/// `Flow.rate_incoming`), the report's `rate`); `srt` the smallest RTT
/// sample, us (+infinity = none); `sq` the quantization budget, bytes (user
/// space sends it with each command, `Bbr::quantization_budget` x MSS);
/// `smss` the MSS, bytes (sent with them): the rule grows cwnd by the
/// packets an ACK newly delivers x MSS. Control registers: 16 of 16.
pub const STARTUP_CWND_DEFS: &str = "    (sg 0)\n    (sbw 0)\n    (srt +infinity)\n    (sq 0)\n    (smss 0)\n";

/// `sg` once at least `TCP_INIT_CWND` (10) packets were delivered: 1 + 10.
pub const STARTUP_SG_FULL: u32 = 11;

/// [`HIGH_GAIN`] in thousandths: the fold's Startup cwnd target is
/// `sbw x min(srt, 10 s) / 10^6 x STARTUP_CWND_GAIN_PER_MILLE / 1000 + sq` bytes.
pub const STARTUP_CWND_GAIN_PER_MILLE: u64 = 2885;

/// What Startup's per-ACK cwnd rule needs on every ACK, before the other
/// blocks: the largest delivery-rate sample and the smallest RTT sample so far
/// (tcp_bbr.c's BtlBw max filter and RTprop min filter, updated per ACK
/// before `bbr_set_cwnd`; in Startup BtlBw is the largest sample, its bandwidth
/// only grows), and, while `sg` is on, the packets delivered (`Ack.packets_acked +
/// Ack.packets_misordered`, the kernel's `tp->delivered` growth), counted to
/// [`STARTUP_SG_FULL`]. The rule itself is in [`startup_cwnd_growth_lines`]: while `sg`
/// is on, an ACK grows cwnd only if cwnd < 2.885 x `sbw` x `srt` + `sq` or
/// fewer than 10 packets were delivered (tcp_bbr.c `bbr_set_cwnd` while
/// `!bbr_full_bw_reached`: `cwnd < target_cwnd || tp->delivered <
/// TCP_INIT_CWND`), where user space's cap no longer stops it (it commands
/// a loose cap, `Bbr::set_cap`); user space turns `sg` off (0) when Startup
/// ends.
///
/// Why: user space's per-report cap was taken from a BtlBw up to half an
/// RTT old (extrapolated by its growth): in Startup's rounds 2-3 ccp sent 19 and
/// 36 packets where the kernel sends 22 and 44 (a larger Normalized Area
/// than the kernel's in `ccplab fidelity`).
pub fn startup_cwnd_block() -> String {
    format!(
        "\
(when true
    (:= sbw (max sbw (min Flow.rate_outgoing Flow.rate_incoming)))
    (:= srt (min srt Flow.rtt_sample_us))
    (:= xe (+ sg (+ Ack.packets_acked Ack.packets_misordered)))
    (:= xe (min xe {STARTUP_SG_FULL}))
    (:= sg (if (> sg 0) xe))
    (fallthrough)
)
"
    )
}

/// The lines of the fold's growth toward the cap ([`TowardCap::growth`]) that
/// decide how much cwnd grows by on this ACK (`xe`, then added up to the cap). Rule off (`sg` = 0): the ACK's
/// `Ack.bytes_acked`. Rule on: nothing once at least 10 packets were
/// delivered (`sg` = [`STARTUP_SG_FULL`]) and cwnd (`fcw`) is at or above the
/// target 2.885 x `sbw` x `srt` + `sq` bytes ([`startup_cwnd_block`]), else
/// the packets the ACK newly delivered (`Ack.packets_acked +
/// Ack.packets_misordered`, tcp_bbr.c's `acked` = `rs->acked_sacked`) x
/// `smss`. Not `Ack.bytes_acked` there: the cumulative ACK that ends a loss
/// recovery counts every packet SACKed before it again (measured on
/// step0-12: one ACK of 296 packets' bytes raised cwnd from 145 to the
/// loose Startup cap, 296, and the burst lost ~120 packets). `srt` is
/// bounded at 10 s so that the product fits a u64 before an RTT sample.
pub fn startup_cwnd_growth_lines() -> String {
    let g = STARTUP_CWND_GAIN_PER_MILLE;
    format!(
        "\
    (:= xe (/ (* sbw (min srt 10000000)) 1000000))
    (:= xe (+ (/ (* xe {g}) 1000) sq))
    (:= xr (|| (< sg {STARTUP_SG_FULL}) (< fcw xe)))
    (:= xe 0)
    (:= xe (if xr Ack.bytes_acked))
    (:= xe (if (&& xr (> sg 0)) (* (+ Ack.packets_acked Ack.packets_misordered) smss)))
"
    )
}

/// The control registers of the per-ACK ACK-aggregation excess
/// ([`ack_aggregation_block`]), counted in thousandths of a packet (mpkt):
/// `xbw` BtlBw in mpkt/s, i.e. packets per 1000 s (user space sets it with
/// each command, [`Controller::fold_registers`]), `xt` the epoch's start
/// (`Ack.now`, us), `xa` the mpkts delivered since then, `xe` the mpkts
/// BtlBw would have delivered since then, `xn` this ACK's delivered mpkts,
/// then its excess, `xr` "restart the epoch".
pub const ACK_AGG_DEFS: &str = "    (xbw 0)\n    (xt 0)\n    (xa 0)\n    (xe 0)\n    (xn 0)\n    (xr false)\n";

/// The report field of the per-ACK excess (largest in the report, mpkts); bbr's
/// program declares it ([`crate::fold::EXTRA_ACKED`]) in place of HyStart's ACK
/// train, which bbr has no use for (Portus allows 16 report fields).
pub use crate::fold::EXTRA_ACKED_FIELD;

/// Longest aggregation epoch the fold measures, us: bounds BtlBw x elapsed
/// (a u32 mpkt/s times at most 10^7 us fits a u64) where tcp_bbr.c restarts
/// an epoch after 2^20 packets.
pub const ACK_EPOCH_MAX_US: u64 = 10_000_000;

/// tcp_bbr.c's per-ACK ACK-aggregation estimate (`bbr_update_ack_aggregation`)
/// in the fold: on each ACK that delivers packets, expected = BtlBw (`xbw`)
/// x the time since the epoch started; when the packets delivered since then
/// (before this ACK) are at most that, a new epoch starts at this ACK
/// (expected 0); this ACK's packets are added and the excess (delivered
/// since the epoch start - expected) goes into the report as its maximum
/// ([`EXTRA_ACKED_FIELD`]). User space caps it at cwnd (the kernel does so
/// per ACK; the fold has cwnd in bytes and no MSS), keeps the windowed max
/// and adds it to the cwnd target ([`Bbr::ack_aggregation_cwnd_pkts`]).
///
/// Delivered = `Ack.packets_acked + Ack.packets_misordered`, the kernel's
/// `rs->acked_sacked` (newly delivered packets). Not `Ack.bytes_acked +
/// Ack.bytes_misordered`: the cumulative ACK that ends a loss recovery
/// counts the packets SACKed before it again (289600 bytes on one ACK
/// after Startup's losses on fixed12-q1bdp), a surplus an epoch at BtlBw
/// never pays back: measured, the epoch then never restarted and the excess
/// stood at cwnd (allowance at its 100 ms cap on every fixed link).
///
/// Why per ACK: the excess of a report taken as one ACK is about 2x the
/// kernel's (after an epoch restart the whole report counts as excess), and
/// with the report spread evenly over its interval about a third (cellular
/// bursts last a few ms, a report 25-90 ms), which raised the queueing delay
/// on Verizon LTE and after a capacity drop. The language has no `>=` and subtraction underflow aborts
/// the invocation, so the restart test is `xa < xe + 1` and the excess is
/// taken only once `xa > xe` is known (after a restart `xe` is 0).
pub fn ack_aggregation_block() -> String {
    format!(
        "\
(when (> (+ Ack.packets_acked Ack.packets_misordered) 0)
    (:= xn (* (+ Ack.packets_acked Ack.packets_misordered) 1000))
    (:= xt (min xt Ack.now))
    (:= xe (min (- Ack.now xt) {ACK_EPOCH_MAX_US}))
    (:= xe (/ (* xbw xe) 1000000))
    (:= xr (< xa (+ xe 1)))
    (:= xa (if xr 0))
    (:= xt (if xr Ack.now))
    (:= xe (if xr 0))
    (:= xa (+ xa xn))
    (:= xn (- xa xe))
    (:= {EXTRA_ACKED_FIELD} (max {EXTRA_ACKED_FIELD} xn))
    (fallthrough)
)
"
    )
}

/// Rounds per half of the ACK-aggregation max filter (tcp_bbr.c
/// `bbr_extra_acked_win_rtts`; two halves: the max spans 5-10 rounds).
pub const EXTRA_ACKED_WIN_ROUNDS: u32 = 5;
/// Cap of the ACK-aggregation allowance, us of BtlBw (`bbr_extra_acked_max_us`).
pub const EXTRA_ACKED_MAX_US: f64 = 100_000.0;

/// BBR's per-ACK blocks in the fold, in the order they run: Startup's cwnd
/// rule's filters ([`startup_cwnd_block`]), Startup's pacing rate
/// ([`startup_rate_block`]) and the ACK-aggregation excess
/// ([`ack_aggregation_block`]), all before the growth toward the cap.
fn fold_blocks() -> String {
    startup_cwnd_block() + &startup_rate_block() + &ack_aggregation_block()
}

/// cwnd growth per ACK toward the cap bbr commands (tcp_bbr.c's per-ACK
/// `bbr_set_cwnd`), with bbr's blocks and its Startup rule
/// ([`startup_cwnd_growth_lines`]: with `--startup-cwnd-in-fold`, an ACK grows
/// cwnd only while it is below the kernel's per-ACK target or fewer than 10
/// packets were delivered). The growth's scratch is the ACK-aggregation
/// block's `xn`, `xr` and `xe` ([`ACK_AGG_DEFS`]): that block runs earlier on
/// the same ACK and leaves nothing in them that is read later, and bbr's
/// program uses 15 of Portus's 16 control registers.
pub const FOLD_GROWTH: TowardCap = TowardCap {
    report_fields: &[crate::fold::EXTRA_ACKED],
    registers: &[STARTUP_RATE_DEFS, STARTUP_CWND_DEFS, ACK_AGG_DEFS],
    blocks: fold_blocks,
    growth: startup_cwnd_growth_lines,
    scratch: ["xn", "xr", "xe"],
};

/// BBR's fold program: [`REPORTS_PER_RTT`] reports per RTT, urgent on loss or
/// timeout, cwnd grown per ACK toward the commanded cap ([`FOLD_GROWTH`]).
pub const PROGRAM: FoldProgram = FoldProgram {
    name: "ccplab_bbr",
    cadence: Cadence::PerRtt(REPORTS_PER_RTT),
    urgent_on_loss: true,
    features: Features { growth: Growth::TowardCap(&FOLD_GROWTH), ..Features::NONE },
};

impl AlgorithmSpec for BbrSpec {
    const NAME: &'static str = "bbr";
    const SUMMARY: &'static str = "BBR v1: Startup, Drain, ProbeBW gain cycle, ProbeRTT; pacing rate = gain x BtlBw, \
        cwnd = cwnd_gain x BDP";
    const SOURCE: &'static str = "Cardwell et al., ACM Queue 2016; Linux tcp_bbr.c";
    const CONTROLS: &'static str = "cwnd+rate";
    type Args = BbrArgs;
    type Flow = Bbr;

    fn validate(a: &BbrArgs) -> Result<(), String> {
        if a.bw_window_rounds == 0 {
            return Err("--bw-window-rounds must be >= 1".into());
        }
        crate::check_range("min-rtt-window-s", a.min_rtt_window_s, 0.0, 3600.0)?;
        crate::check_range("cwnd-gain", a.cwnd_gain, 0.0, 100.0)?;
        crate::check_range("high-gain", a.high_gain, 1.0, 100.0)
    }

    fn new_flow(a: &BbrArgs, params: WindowParams) -> Bbr {
        Bbr::new(params, a.clone()).with_fold_growth(PROGRAM.cwnd_toward_cap_in_fold())
    }

    fn program(_args: &BbrArgs) -> FoldProgram {
        PROGRAM
    }
}

/// BBR's state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Startup => "startup",
            Mode::Drain => "drain",
            Mode::ProbeBw => "probe_bw",
            Mode::ProbeRtt => "probe_rtt",
        }
    }
}

/// BBR's per-flow state.
#[derive(Clone, Debug)]
pub struct Bbr {
    params: WindowParams,
    args: BbrArgs,
    mode: Mode,
    cwnd: f64,
    pacing_rate: f64,
    pacing_gain: f64,
    cwnd_gain: f64,
    /// (round, largest delivery rate of that round in bytes/s), newest last.
    bw_filter: VecDeque<(u64, f64)>,
    min_rtt_us: u64,
    min_rtt_stamp_us: u64,
    rtt: RttEstimator,
    acked_total: u64,
    delivered_total: u64,
    round: u64,
    next_round_at: u64,
    round_start: bool,
    full_bw: f64,
    full_bw_count: u32,
    full_bw_reached: bool,
    cycle_idx: usize,
    cycle_stamp_us: u64,
    probe_rtt_done_us: Option<u64>,
    probe_rtt_round_done: bool,
    prior_cwnd: f64,
    /// Recovery point (acked_total to reach) and the round that ends packet conservation.
    recovery: Option<(u64, u64)>,
    rng: u64,
    /// The fold grows cwnd per ACK toward the commanded cap ([`FOLD_GROWTH`]).
    fold_growth: bool,
    /// The cap this report commands (fold growth only; None = the cwnd itself).
    cap: Option<f64>,
    /// This report ended ProbeRTT and restored the cwnd saved at its entry
    /// (fold growth only): the fold's cwnd jumps there with this command
    /// ([`Controller::fold_registers`]) instead of growing per ACK.
    restored: bool,
    /// BtlBw at the previous report, bytes/s (Startup's growth extrapolation).
    prev_report_bw: f64,
    /// (gain of the phase that ended within this report interval, fraction of
    /// the interval it still had): the pacing gain of this report only.
    blend: Option<(f64, f64)>,
    /// The fold sets Startup's pacing rate per ACK ([`startup_rate_block`]):
    /// user space commands no Rate until Startup ends.
    fold_startup_rate: bool,
    /// A Rate was commanded (the fold's Startup block has ended).
    rate_commanded: bool,
    /// The fold's per-ACK Startup cwnd rule is in use ([`startup_cwnd_block`]).
    fold_startup_cwnd: bool,
    /// The `sg` register to send with this report's command (the rule's
    /// on/off and delivered count), None = leave the fold's as it is.
    sg_send: Option<u32>,
    /// The last `sg` sent: the rule was turned on (> 0) or off (0).
    sg_sent: Option<u32>,
    /// The two halves of the ACK-aggregation max filter, packets (tcp_bbr.c
    /// `extra_acked[2]`), the current half and the rounds it has run.
    extra_acked: [f64; 2],
    extra_acked_idx: usize,
    extra_acked_rounds: u32,
    /// The last report's per-ACK excess, packets, capped at cwnd (for the log).
    last_extra_acked: f64,
}

impl Bbr {
    /// A new flow in Startup at the initial cwnd.
    pub fn new(params: WindowParams, args: BbrArgs) -> Self {
        Bbr {
            cwnd: params.clamp(params.init_cwnd_pkts),
            pacing_gain: args.high_gain,
            cwnd_gain: args.high_gain,
            rng: args.seed.max(1),
            params,
            args,
            mode: Mode::Startup,
            pacing_rate: 0.0,
            bw_filter: VecDeque::new(),
            min_rtt_us: 0,
            min_rtt_stamp_us: 0,
            rtt: RttEstimator::default(),
            acked_total: 0,
            delivered_total: 0,
            round: 0,
            next_round_at: 0,
            round_start: false,
            full_bw: 0.0,
            full_bw_count: 0,
            full_bw_reached: false,
            cycle_idx: 0,
            cycle_stamp_us: 0,
            probe_rtt_done_us: None,
            probe_rtt_round_done: false,
            prior_cwnd: 0.0,
            recovery: None,
            fold_growth: false,
            cap: None,
            restored: false,
            prev_report_bw: 0.0,
            blend: None,
            fold_startup_rate: false,
            rate_commanded: false,
            fold_startup_cwnd: false,
            sg_send: None,
            sg_sent: None,
            extra_acked: [0.0; 2],
            extra_acked_idx: 0,
            extra_acked_rounds: 0,
            last_extra_acked: 0.0,
        }
    }

    /// The same flow with cwnd grown per ACK by the fold program toward the
    /// commanded value (on: commands are caps, see [`FOLD_GROWTH`]).
    /// With `--startup-rate-in-fold` the same program also sets Startup's
    /// pacing rate per ACK ([`startup_rate_block`], at the default
    /// [`HIGH_GAIN`] only: its gain is a constant in the program text; another
    /// `--high-gain` commands rates). Without it user space commands the rate
    /// from its first report, which ends the fold's block (the fold then set
    /// only the initial rate from the first RTT sample).
    pub fn with_fold_growth(mut self, on: bool) -> Self {
        self.fold_growth = on;
        self.fold_startup_rate = on && self.args.startup_rate_in_fold && self.args.high_gain == HIGH_GAIN;
        self.fold_startup_cwnd = on && self.args.startup_cwnd_in_fold && self.args.high_gain == HIGH_GAIN;
        self
    }

    /// Startup's cwnd grows by the fold's per-ACK rule now: the rule is in
    /// use and the pipe is not yet full (tcp_bbr.c applies it while
    /// `!bbr_full_bw_reached`).
    fn startup_cwnd_in_fold_now(&self) -> bool {
        self.fold_startup_cwnd && !self.full_bw_reached
    }

    /// The `sg` register for this report's command: on with the first
    /// command (1 + the packets delivered so far, at most
    /// [`STARTUP_SG_FULL`]), off (0) once the pipe is full; nothing when it
    /// does not change (the fold counts the delivered packets itself, and
    /// a count from a report would set it back).
    fn update_sg_send(&mut self) {
        let want = if self.startup_cwnd_in_fold_now() {
            let mss = u64::from(self.params.mss_bytes.max(1));
            (1 + self.delivered_total / mss).min(u64::from(STARTUP_SG_FULL)) as u32
        } else {
            0
        };
        let on = |v: Option<u32>| v.is_some_and(|v| v > 0);
        self.sg_send = match self.sg_sent {
            _ if !self.fold_startup_cwnd => None,
            Some(_) if on(self.sg_sent) == (want > 0) => None,
            None if want == 0 => None,
            _ => Some(want),
        };
        if self.sg_send.is_some() {
            self.sg_sent = self.sg_send;
        }
    }

    /// The Rate to command after this report, bytes/s: none before the
    /// first estimate, and none in the first Startup while the fold sets it
    /// per ACK (any command would end the fold's block).
    fn commanded_rate(&mut self) -> Option<u64> {
        let fold_sets_it = self.fold_startup_rate && !self.rate_commanded && self.mode == Mode::Startup;
        if fold_sets_it || self.pacing_rate <= 0.0 {
            return None;
        }
        self.rate_commanded = true;
        Some(self.pacing_rate.min(f64::from(u32::MAX)) as u64)
    }

    /// The cwnd cap commanded after the last report (fold growth), packets.
    pub fn cap_pkts(&self) -> Option<f64> {
        self.cap
    }

    /// The ACK-aggregation allowance the cwnd target carries, packets
    /// (tcp_bbr.c `bbr_ack_aggregation_cwnd`): after Startup, the larger half
    /// of the excess max filter, at most BtlBw x 100 ms; 0 with
    /// `--ack-aggregation false` or without the fold's cwnd growth (no per-ACK
    /// excess then).
    pub fn ack_aggregation_cwnd_pkts(&self) -> f64 {
        if !(self.args.ack_aggregation && self.fold_growth && self.full_bw_reached) {
            return 0.0;
        }
        let max = self.btl_bw() * EXTRA_ACKED_MAX_US / 1e6 / f64::from(self.params.mss_bytes.max(1));
        self.extra_acked[0].max(self.extra_acked[1]).min(max)
    }

    /// The report's per-ACK excess, capped at cwnd (the fold's cwnd at the
    /// report; tcp_bbr.c caps each ACK's at the cwnd then), into the max
    /// filter; a new half every [`EXTRA_ACKED_WIN_ROUNDS`] rounds (tcp_bbr.c
    /// rotates on the round's first ACK, here on the report that starts a round).
    fn update_ack_aggregation(&mut self, m: &Measurement) {
        if self.round_start {
            self.extra_acked_rounds += 1;
            if self.extra_acked_rounds >= EXTRA_ACKED_WIN_ROUNDS {
                self.extra_acked_rounds = 0;
                self.extra_acked_idx ^= 1;
                self.extra_acked[self.extra_acked_idx] = 0.0;
            }
        }
        self.last_extra_acked = (m.extra_acked_milli_pkts as f64 / 1000.0).min(self.cwnd);
        let cur = &mut self.extra_acked[self.extra_acked_idx];
        *cur = cur.max(self.last_extra_acked);
    }

    /// Current state.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Current cwnd, packets.
    pub fn cwnd_pkts(&self) -> f64 {
        self.cwnd
    }

    /// Current pacing rate, bytes/s (0 before the first report).
    pub fn pacing_rate(&self) -> f64 {
        self.pacing_rate
    }

    /// Current pacing gain.
    pub fn pacing_gain(&self) -> f64 {
        self.pacing_gain
    }

    /// Index into [`GAIN_CYCLE`] (meaningful in ProbeBW).
    pub fn cycle_idx(&self) -> usize {
        self.cycle_idx
    }

    /// BtlBw: the max-filtered delivery rate, bytes/s.
    pub fn btl_bw(&self) -> f64 {
        self.bw_filter.iter().map(|&(_, b)| b).fold(0.0, f64::max)
    }

    /// RTprop, us (0 before a sample).
    pub fn min_rtt_us(&self) -> u64 {
        self.min_rtt_us
    }

    /// True once Startup found the pipe full.
    pub fn full_bw_reached(&self) -> bool {
        self.full_bw_reached
    }

    /// Round count.
    pub fn round(&self) -> u64 {
        self.round
    }

    /// gain x BDP in packets (tcp_bbr.c `bbr_bdp`); the initial cwnd before any sample.
    pub fn bdp_pkts(&self, gain: f64) -> f64 {
        let bw = self.btl_bw();
        if bw <= 0.0 || self.min_rtt_us == 0 {
            return self.params.init_cwnd_pkts;
        }
        gain * bw * self.min_rtt_us as f64 / 1e6 / f64::from(self.params.mss_bytes)
    }

    fn xorshift(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    fn update_round(&mut self, m: &Measurement) {
        let mss = u64::from(self.params.mss_bytes);
        self.acked_total += m.acked_bytes;
        // Delivered data counts SACKed packets too (tcp_bbr.c rounds use
        // tp->delivered), so rounds keep advancing during loss recovery.
        // (Counting packets marked lost as well, on the view that the kernel's
        // round ends once the packets in flight at its start are delivered or
        // lost, was measured on fixed12-q1bdp, 3 runs: Startup ended no
        // earlier, p95 queueing delay 31 ms, retransmits 1.6x; not kept.)
        self.delivered_total += m.acked_bytes + m.sacked_pkts * mss;
        self.round_start = false;
        if self.delivered_total >= self.next_round_at {
            self.round += 1;
            self.round_start = true;
            let inflight = m.inflight_pkts.max(1);
            self.next_round_at = self.delivered_total + inflight * mss;
        }
    }

    fn update_bw(&mut self, m: &Measurement) {
        let sample = m.delivery_rate_bps as f64;
        if sample > 0.0 {
            match self.bw_filter.back_mut() {
                Some((r, b)) if *r == self.round => *b = b.max(sample),
                _ => self.bw_filter.push_back((self.round, sample)),
            }
        }
        let oldest = self.round.saturating_sub(self.args.bw_window_rounds - 1);
        while self.bw_filter.len() > 1 && self.bw_filter.front().is_some_and(|&(r, _)| r < oldest) {
            self.bw_filter.pop_front();
        }
    }

    /// Returns whether the RTprop filter had expired (tcp_bbr.c `filter_expired`).
    fn update_min_rtt(&mut self, m: &Measurement) -> bool {
        let window_us = (self.args.min_rtt_window_s * 1e6) as u64;
        let expired = self.min_rtt_us > 0 && m.now_us > self.min_rtt_stamp_us + window_us;
        if m.min_rtt_us > 0 && (self.min_rtt_us == 0 || m.min_rtt_us < self.min_rtt_us || expired) {
            self.min_rtt_us = m.min_rtt_us;
            self.min_rtt_stamp_us = m.now_us;
        }
        expired
    }

    fn check_full_bw(&mut self) {
        if self.full_bw_reached || !self.round_start {
            return;
        }
        let bw = self.btl_bw();
        if bw >= self.full_bw * 1.25 {
            self.full_bw = bw;
            self.full_bw_count = 0;
            return;
        }
        self.full_bw_count += 1;
        self.full_bw_reached = self.full_bw_count >= 3;
    }

    fn enter_probe_bw(&mut self, now_us: u64) {
        self.mode = Mode::ProbeBw;
        self.cwnd_gain = self.args.cwnd_gain;
        // tcp_bbr.c: a random phase other than the 3/4 one (index 1), then advance.
        self.cycle_idx = GAIN_CYCLE.len() - 1 - (self.xorshift() % 7) as usize;
        self.advance_cycle(now_us);
    }

    fn advance_cycle(&mut self, now_us: u64) {
        self.cycle_idx = (self.cycle_idx + 1) % GAIN_CYCLE.len();
        self.cycle_stamp_us = now_us;
        self.pacing_gain = GAIN_CYCLE[self.cycle_idx];
    }

    fn update_cycle(&mut self, m: &Measurement) {
        if self.mode != Mode::ProbeBw {
            return;
        }
        let full_length = m.now_us.saturating_sub(self.cycle_stamp_us) > self.min_rtt_us;
        let gain = self.pacing_gain;
        let next = if gain == 1.0 {
            full_length
        } else if gain > 1.0 {
            // tcp_bbr.c: in flight >= bbr_inflight(bw, 5/4), the quantization
            // budget (+2 packets in this phase) included
            full_length && (m.has_loss() || m.inflight_max_pkts as f64 >= self.inflight_target(gain))
        } else if full_length {
            true
        } else {
            self.ends_within_report(m, gain)
        };
        if next {
            self.advance_cycle(m.now_us);
        }
    }

    /// Whether a phase pacing at `gain` < 1 (Drain, the 3/4 phase) ends by the
    /// next report: in-flight reaches BDP + budget (tcp_bbr.c
    /// `bbr_inflight(bw, 1)`) within the fall of one report interval. If so it
    /// ends now and [`Bbr::blend`] keeps the old gain for the fraction of the
    /// next interval the kernel would still spend in it (per ACK it ends on the
    /// ACK that reaches the target). Why: ending at the first report at or
    /// below the target left the queue up to a whole interval's fall (12
    /// packets at 24 Mbit/s) below the kernel's, often empty; an empty queue
    /// refreshed RTprop with a sample a few us lower, which moved ProbeRTT
    /// seconds later than the kernel's and kept the 24 Mbit/s BtlBw's queue
    /// after the step to 6 Mbit/s (p95 queueing delay 2.65x).
    fn ends_within_report(&mut self, m: &Measurement, gain: f64) -> bool {
        let above = m.inflight_pkts as f64 - self.inflight_target(1.0);
        let step = self.report_fall_pkts(m, gain);
        if above <= 0.0 {
            return true;
        }
        if above < step {
            self.blend = Some((gain, above / step));
            return true;
        }
        false
    }

    fn check_drain(&mut self, m: &Measurement) {
        if self.mode == Mode::Startup && self.full_bw_reached {
            self.mode = Mode::Drain;
            self.pacing_gain = 1.0 / self.args.high_gain;
            self.cwnd_gain = self.args.high_gain;
        }
        if self.mode == Mode::Drain && self.ends_within_report(m, self.pacing_gain) {
            self.enter_probe_bw(m.now_us);
        }
    }

    fn update_probe_rtt(&mut self, m: &Measurement, expired: bool) {
        if expired && self.mode != Mode::ProbeRtt {
            self.mode = Mode::ProbeRtt;
            self.pacing_gain = 1.0;
            self.cwnd_gain = 1.0;
            self.prior_cwnd = self.prior_cwnd.max(self.cwnd);
            self.probe_rtt_done_us = None;
        }
        if self.mode != Mode::ProbeRtt {
            return;
        }
        match self.probe_rtt_done_us {
            None if (m.inflight_pkts as f64) <= MIN_CWND_PKTS => {
                self.probe_rtt_done_us = Some(m.now_us + PROBE_RTT_US);
                self.probe_rtt_round_done = false;
                self.next_round_at = self.delivered_total;
            }
            Some(done) => {
                if self.round_start {
                    self.probe_rtt_round_done = true;
                }
                if self.probe_rtt_round_done && m.now_us > done {
                    self.min_rtt_stamp_us = m.now_us;
                    self.restore_prior_cwnd(true);
                    self.prior_cwnd = 0.0;
                    if self.full_bw_reached {
                        self.enter_probe_bw(m.now_us);
                    } else {
                        self.mode = Mode::Startup;
                        self.pacing_gain = self.args.high_gain;
                        self.cwnd_gain = self.args.high_gain;
                    }
                }
            }
            None => {}
        }
    }

    fn set_pacing_rate(&mut self) {
        let bw = self.btl_bw();
        // A phase that ended within this report interval keeps its gain for
        // the fraction of the interval it would have lasted (see ends_within_report).
        let gain = match self.blend.take() {
            Some((old, f)) => f * old + (1.0 - f) * self.pacing_gain,
            None => self.pacing_gain,
        };
        let rate = if bw > 0.0 {
            gain * bw * 0.99
        } else if self.rtt.srtt_us > 0.0 {
            self.args.high_gain * self.params.init_cwnd_pkts * f64::from(self.params.mss_bytes) * 1e6
                / self.rtt.srtt_us
        } else {
            return;
        };
        if self.full_bw_reached || rate > self.pacing_rate {
            self.pacing_rate = rate;
        }
    }

    /// 3 x TSO segments (tcp_bbr.c `bbr_quantization_budget`): 1 ms of data at
    /// the pacing rate, at least 2 segments, at most 64 KB.
    fn quantization_budget(&self) -> f64 {
        let mss = f64::from(self.params.mss_bytes);
        let segs = (self.pacing_rate / 1000.0 / mss).floor().clamp(2.0, (65536.0 / mss).floor().max(2.0));
        let extra = if self.mode == Mode::ProbeBw && self.cycle_idx == 0 { 2.0 } else { 0.0 };
        3.0 * segs + extra
    }

    /// gain x BDP plus the quantization budget, packets (tcp_bbr.c
    /// `bbr_inflight`): the in-flight level at which Drain and the 3/4 phase
    /// end. Why the budget: the kernel's queue in ProbeBW stands at about the
    /// budget (8 ms at 12 Mbit/s); ending at BDP alone drained it to 1-2 ms
    /// (p95 queueing delay 0.65-0.85x the kernel's) and idled the link after
    /// Drain.
    fn inflight_target(&self, gain: f64) -> f64 {
        self.bdp_pkts(gain) + self.quantization_budget()
    }

    /// Packets the report's last ACK delivered (acked + SACKed), estimated
    /// as the report's mean per ACK: packet conservation (tcp_bbr.c: cwnd =
    /// in flight + this ACK's `acked_sacked`) is per ACK, and the report's
    /// total (up to 50 SACKed packets in one report during recovery) would
    /// let cwnd run that far above in-flight, refilling a full queue.
    fn last_ack_delivered(&self, m: &Measurement) -> f64 {
        (m.acked_pkts(self.params.mss_bytes) + m.sacked_pkts as f64) / m.acks.max(1) as f64
    }

    /// BtlBw's growth factor since the previous report, in [1, 2]: how much
    /// the kernel's per-ACK target would rise before the next report while
    /// Startup's bandwidth doubles per round.
    fn startup_bw_growth(&self) -> f64 {
        let bw = self.btl_bw();
        if self.prev_report_bw > 0.0 && bw > 0.0 {
            (bw / self.prev_report_bw).clamp(1.0, 2.0)
        } else {
            1.0
        }
    }

    /// The fall of in-flight before the next report when pacing at `gain` <
    /// 1, packets: (1 - gain) x BtlBw x the report interval (the latest RTT
    /// sample / [`REPORTS_PER_RTT`], the fold's cadence).
    fn report_fall_pkts(&self, m: &Measurement, gain: f64) -> f64 {
        let rtt_us = if m.rtt_us > 0 { m.rtt_us as f64 } else { self.rtt.srtt_us };
        let interval_s = rtt_us / f64::from(REPORTS_PER_RTT) / 1e6;
        (1.0 - gain).max(0.0) * self.btl_bw() * interval_s / f64::from(self.params.mss_bytes)
    }

    fn set_cwnd(&mut self, m: &Measurement) {
        let acked = m.acked_pkts(self.params.mss_bytes);
        let target = self.bdp_pkts(self.cwnd_gain) + self.ack_aggregation_cwnd_pkts() + self.quantization_budget();
        let conserving = self.recovery.is_some_and(|(_, until)| self.round < until);
        if self.fold_growth {
            return self.set_cap(m, target, conserving);
        }
        if conserving {
            self.cwnd = self.cwnd.max(m.inflight_pkts as f64 + acked);
        } else if self.full_bw_reached {
            self.cwnd = (self.cwnd + acked).min(target);
        } else if self.cwnd < target || self.acked_total < (self.params.init_cwnd_pkts as u64) * u64::from(self.params.mss_bytes) {
            self.cwnd += acked;
        }
        self.cwnd = self.cwnd.max(MIN_CWND_PKTS);
        if self.mode == Mode::ProbeRtt {
            self.cwnd = self.cwnd.min(MIN_CWND_PKTS);
        }
        self.cwnd = self.params.clamp(self.cwnd);
    }

    /// Fold growth: the fold adds each ACK's bytes to cwnd up to the cap, as
    /// tcp_bbr.c's per-ACK `bbr_set_cwnd` (`min(cwnd + acked, target)` once the
    /// pipe is full, `cwnd + acked` while below target in Startup); user space
    /// commands the cap and lowers its model of cwnd at once to it.
    ///
    /// Losses: every report's lost packets come off cwnd first (tcp_bbr.c
    /// `bbr_set_cwnd_to_recover_or_restore` deducts `rs->losses` on each ACK;
    /// loss reports are urgent, so this is per loss ACK here too), and the
    /// command is at most that reduced cwnd, which the fold applies at once.
    /// Without it cwnd stayed at its pre-loss value through recovery while
    /// in-flight fell, refilling a full queue (Startup's overshoot lost 40 %
    /// more packets than the kernel's).
    ///
    /// Startup: the kernel grows cwnd by each ACK while cwnd < target, with a
    /// target that rises per ACK with the bandwidth estimate. A cap from this
    /// report's estimate would stop the fold's growth half an RTT early (the
    /// first round at init cwnd + budget, 16 packets, before any bandwidth
    /// sample), so while cwnd < target (or before the first sample or
    /// `TCP_INIT_CWND` delivered packets) the cap also lets cwnd grow by what
    /// the next report's ACKs will raise it to: BtlBw extrapolated by its
    /// growth since the previous report ([`Bbr::startup_bw_growth`]), or
    /// double cwnd before the first sample. Once BtlBw stops growing the cap
    /// is the kernel's target (about 2.885 BDP), which bounds the overshoot
    /// into the queue as the kernel's does.
    fn set_cap(&mut self, m: &Measurement, target: f64, conserving: bool) {
        let early = self.acked_total < (self.params.init_cwnd_pkts as u64) * u64::from(self.params.mss_bytes);
        let delivered = self.last_ack_delivered(m);
        if m.has_loss() {
            self.cwnd = (self.cwnd - m.lost_pkts as f64).max(1.0);
        }
        let mut cap = if conserving && m.has_loss() {
            // The kernel's floor (in flight + acked) never binds on a loss
            // ACK of a conserving round (in flight <= cwnd before the ACK);
            // here in-flight includes what was sent under the command this
            // one replaces, and the floor would undo the deduction.
            self.cwnd.max(MIN_CWND_PKTS)
        } else if conserving {
            self.cwnd.max(m.inflight_pkts as f64 + delivered)
        } else if self.full_bw_reached {
            target
        } else if self.fold_startup_cwnd {
            // The fold's per-ACK rule decides Startup's growth; this cap only
            // bounds it (cwnd can at most double per round, a report comes
            // every half round).
            (2.0 * self.cwnd + self.quantization_budget()).max(target)
        } else if early || self.btl_bw() <= 0.0 {
            target.max(2.0 * self.cwnd)
        } else if self.cwnd < target {
            self.bdp_pkts(self.cwnd_gain) * self.startup_bw_growth() + self.quantization_budget()
        } else {
            self.cwnd
        };
        if m.has_loss() && !conserving {
            cap = cap.min(self.cwnd);
        }
        cap = cap.max(MIN_CWND_PKTS);
        if self.mode == Mode::ProbeRtt {
            cap = cap.min(MIN_CWND_PKTS);
        }
        cap = self.params.clamp(cap);
        self.cwnd = self.cwnd.min(cap);
        self.cap = Some(cap);
    }

    /// Returns true when this report started loss recovery (cwnd set here).
    fn on_loss(&mut self, m: &Measurement) -> bool {
        if m.timeout {
            self.prior_cwnd = self.prior_cwnd.max(self.cwnd);
            self.cwnd = 1.0;
            self.full_bw = 0.0;
            self.full_bw_count = 0;
            let outstanding = (m.outstanding_pkts() as f64).max(self.prior_cwnd);
            let point = self.acked_total + (outstanding * f64::from(self.params.mss_bytes)) as u64;
            self.recovery = Some((point, self.round));
        } else if m.has_loss() && self.recovery.is_none() {
            // tcp_bbr.c bbr_save_cwnd: in ProbeRTT the cwnd is a temporary cut,
            // the one saved at its entry stays.
            self.prior_cwnd = if self.mode == Mode::ProbeRtt { self.prior_cwnd.max(self.cwnd) } else { self.cwnd };
            let outstanding = (m.outstanding_pkts() as f64).max(1.0);
            let point = self.acked_total + (outstanding * f64::from(self.params.mss_bytes)) as u64;
            // Packet conservation for one round from now (tcp_bbr.c starts a
            // round at the entry into recovery).
            self.recovery = Some((point, self.round + 1));
            self.next_round_at = self.delivered_total + m.inflight_pkts.max(1) * u64::from(self.params.mss_bytes);
            self.cwnd = (m.inflight_pkts as f64 + self.last_ack_delivered(m)).max(MIN_CWND_PKTS);
            return true;
        }
        false
    }

    fn end_recovery(&mut self) {
        if let Some((point, _)) = self.recovery {
            if self.acked_total >= point {
                self.recovery = None;
                self.restore_prior_cwnd(false);
                // A recovery that ends inside ProbeRTT leaves the saved cwnd to
                // ProbeRTT's own end (the kernel never clears `prior_cwnd`;
                // ProbeRTT's cap holds cwnd at 4 packets until then).
                if self.mode != Mode::ProbeRtt {
                    self.prior_cwnd = 0.0;
                }
            }
        }
    }

    /// Back to the cwnd saved before ProbeRTT or loss recovery
    /// (`max(cwnd, prior_cwnd)`, tcp_bbr.c); the cap `set_cwnd` then computes
    /// bounds it as the kernel's next `min(cwnd + acked, target)` does. With
    /// `jump` (ProbeRTT's end) the fold's cwnd jumps there with the command, as
    /// the kernel's does; after loss recovery it regrows per ACK toward it:
    /// the cwnd saved at a loss report is the fold's at the report, up to a
    /// report interval of Startup growth above the kernel's at the loss ACK,
    /// and jumping there raised fixed12-q1bdp's retransmits from 1.11x to
    /// 1.57x the kernel's in `ccplab fidelity`. The caller decides whether the
    /// saved cwnd is used up.
    fn restore_prior_cwnd(&mut self, jump: bool) {
        if self.prior_cwnd > self.cwnd {
            self.cwnd = self.prior_cwnd;
            self.restored = jump;
        }
    }

    /// The cwnd the fold jumps to with this report's command, packets: the
    /// restored cwnd within this report's cap (None when nothing was restored).
    pub fn restore_jump_pkts(&self) -> Option<f64> {
        if !(self.restored && self.fold_growth) {
            return None;
        }
        Some(self.cap.map_or(self.cwnd, |cap| self.cwnd.min(cap)))
    }
}

impl Controller for Bbr {
    fn initial(&self) -> Control {
        Control { cwnd_bytes: Some(self.params.to_bytes(self.cwnd)), rate_bytes_per_sec: None }
    }

    fn on_report(&mut self, m: &Measurement) -> Control {
        self.cap = None;
        self.restored = false;
        // Fold growth: the report's cwnd is the fold's (a timeout report's is the kernel's loss window).
        if self.fold_growth && m.dp_cwnd_bytes > 0 && !m.timeout {
            self.cwnd = m.dp_cwnd_bytes as f64 / f64::from(self.params.mss_bytes.max(1));
        }
        self.rtt.update(m);
        self.update_round(m);
        self.end_recovery();
        self.update_bw(m);
        self.update_ack_aggregation(m);
        let expired = self.update_min_rtt(m);
        self.check_full_bw();
        self.check_drain(m);
        self.update_cycle(m);
        self.update_probe_rtt(m, expired);
        self.set_pacing_rate();
        let timed_out = m.timeout;
        let entered_recovery = self.on_loss(m);
        if !timed_out && !entered_recovery {
            self.set_cwnd(m);
        }
        let rate = self.commanded_rate();
        self.update_sg_send();
        let cwnd = self.cap.unwrap_or(self.cwnd);
        self.prev_report_bw = self.btl_bw();
        Control { cwnd_bytes: Some(self.params.to_bytes(cwnd)), rate_bytes_per_sec: rate }
    }

    fn state(&self) -> String {
        format!(
            "cwnd_pkts={:.3} pacing_rate_bps={:.0} btlbw_bps={:.0} min_rtt_us={} pacing_gain={:.3} mode={} cycle={} round={} extra_acked_pkts={:.1} report_extra_acked_pkts={:.1}",
            self.cwnd,
            self.pacing_rate,
            self.btl_bw(),
            self.min_rtt_us,
            self.pacing_gain,
            self.mode.as_str(),
            self.cycle_idx,
            self.round,
            self.ack_aggregation_cwnd_pkts(),
            self.last_extra_acked
        )
    }

    /// With `--startup-cwnd-in-fold`: Startup's per-ACK rule on from the first
    /// ACK (`sg` = 1, `sq` the budget), the fold's cwnd `fcw` at the initial cwnd (so the
    /// initial command is not taken for a new cap) and its cap `cap` at 2 x
    /// the initial cwnd + budget, so the first round grows by each ACK as the
    /// kernel's (`tp->delivered < TCP_INIT_CWND`) instead of stopping at the
    /// initial cwnd until the first report's command arrives (measured: ccp
    /// sent 19 packets in its second round where the kernel sends 22).
    fn initial_fold_registers(&self) -> Vec<(&'static str, u32)> {
        if !self.fold_startup_cwnd {
            return Vec::new();
        }
        let budget = self.quantization_budget();
        let cap = 2.0 * self.cwnd + budget;
        let sq = (budget * f64::from(self.params.mss_bytes)).round() as u32;
        let mss = self.params.mss_bytes;
        vec![("fcw", self.params.to_bytes(self.cwnd)), ("cap", self.params.to_bytes(cap)), ("sg", 1), ("sq", sq), ("smss", mss)]
    }

    /// With each command: BtlBw for the fold's ACK-aggregation block (`xbw`,
    /// thousandths of a packet per second); after a restore
    /// ([`Bbr::restore_jump_pkts`]) the fold's cwnd `fcw` set to the restored
    /// value and its cap `cap` to the commanded one, so cwnd jumps back as
    /// the kernel's does instead of regrowing per ACK from ProbeRTT's 4
    /// packets (which idled the link ~0.2 s longer after each ProbeRTT at 6 Mbit/s).
    fn fold_registers(&self) -> Vec<(&'static str, u32)> {
        let mut regs = Vec::new();
        if self.args.ack_aggregation && self.fold_growth {
            let milli_pkts = self.btl_bw() * 1000.0 / f64::from(self.params.mss_bytes.max(1));
            regs.push(("xbw", milli_pkts.round().clamp(0.0, f64::from(u32::MAX)) as u32));
        }
        if let Some(sg) = self.sg_send {
            regs.push(("sg", sg));
        }
        if self.startup_cwnd_in_fold_now() {
            let budget = self.quantization_budget() * f64::from(self.params.mss_bytes);
            regs.push(("sq", budget.round().clamp(0.0, f64::from(u32::MAX)) as u32));
            regs.push(("smss", self.params.mss_bytes));
        }
        if let Some(jump) = self.restore_jump_pkts() {
            let cap = self.cap.unwrap_or(self.cwnd);
            regs.push(("fcw", self.params.to_bytes(jump)));
            regs.push(("cap", self.params.to_bytes(cap)));
        }
        regs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1000;
    const RTT: u64 = 40_000;

    fn bbr() -> Bbr {
        // 10 packets to start, no ssthresh, floor 1.
        let params = WindowParams { mss_bytes: MSS, max_cwnd_pkts: 1e6, ..crate::cc::test_params() };
        let args = BbrArgs {
            bw_window_rounds: 10,
            min_rtt_window_s: 10.0,
            cwnd_gain: 2.0,
            high_gain: HIGH_GAIN,
            seed: 1,
            startup_rate_in_fold: false,
            startup_cwnd_in_fold: false,
            ack_aggregation: true,
        };
        Bbr::new(params, args)
    }

    /// One report = one round: `acked` packets acked, `inflight` left in flight,
    /// delivery rate `rate` bytes/s, RTT `rtt_us`.
    fn report(now_us: u64, acked: u64, inflight: u64, rate: u64, rtt_us: u64) -> Measurement {
        Measurement {
            now_us,
            acked_bytes: acked * u64::from(MSS),
            inflight_pkts: inflight,
            inflight_max_pkts: inflight + acked,
            delivery_rate_bps: rate,
            rtt_us,
            min_rtt_us: rtt_us,
            rtt_samples: 8,
            ..Default::default()
        }
    }

    #[test]
    fn fold_growth_adopts_the_fold_cwnd_and_commands_the_target_as_cap() {
        let mut b = bbr().with_fold_growth(true);
        // Startup: the fold grew cwnd to 14 per ACK; the command is the Startup
        // target (2.885 x BDP + quantization budget), not the per-report growth.
        let m = Measurement { dp_cwnd_bytes: 14 * u64::from(MSS), ..report(RTT, 12, 12, 1_000_000, RTT) };
        let ctl = b.on_report(&m);
        assert_eq!(b.cwnd_pkts(), 14.0);
        let cap = b.cap_pkts().expect("a cap");
        let target = b.bdp_pkts(HIGH_GAIN) + b.quantization_budget();
        assert!((cap - target).abs() < 1e-9, "cap {cap} vs target {target}");
        assert_eq!(ctl.cwnd_bytes, Some(b.params.to_bytes(cap)));
        // A loss: packet conservation commands in flight + acked at once, below the fold's cwnd.
        let loss = Measurement { lost_pkts: 3, dp_cwnd_bytes: 90 * u64::from(MSS), ..report(2 * RTT, 2, 30, 0, RTT) };
        let ctl = b.on_report(&loss);
        assert_eq!(ctl.cwnd_bytes, Some(32 * MSS));
        assert_eq!(b.cwnd_pkts(), 32.0);
        // Without fold growth the command is the cwnd grown per report (the default in unit tests).
        let mut plain = bbr();
        let ctl = plain.on_report(&report(RTT, 12, 12, 1_000_000, RTT));
        assert_eq!((plain.cap_pkts(), ctl.cwnd_bytes), (None, Some(22 * MSS)));
        assert!(PROGRAM.cwnd_toward_cap_in_fold() && !PROGRAM.slow_start_in_fold());
        // The fold writes Rate per ACK and grows cwnd toward the cap: every answer goes.
        assert!(!PROGRAM.skips_repeated_answers());
    }

    #[test]
    fn startup_commands_no_rate_while_the_fold_sets_it_per_ack() {
        let on = BbrArgs { startup_rate_in_fold: true, ..bbr().args };
        let mut b = Bbr::new(bbr().params, on).with_fold_growth(true);
        assert!(PROGRAM.text().contains(&startup_rate_block()), "bbr's program carries the per-ACK Startup rate");
        let (mut now, mut rate) = (0, 125_000);
        while b.mode() == Mode::Startup {
            now += RTT;
            let ctl = b.on_report(&report(now, 40, 40, rate, RTT));
            if b.mode() == Mode::Startup {
                assert_eq!(ctl.rate_bytes_per_sec, None, "a Rate would end the fold's Startup block");
                assert!(b.pacing_rate() > 0.0, "user space still tracks the rate (quantization budget)");
            } else {
                // Drain's rate is commanded on the report that leaves Startup.
                assert!(ctl.rate_bytes_per_sec.is_some_and(|r| (r as f64) < 1_000_000.0));
            }
            rate = (rate * 2).min(1_000_000);
            assert!(now < 40 * RTT, "Startup never ended");
        }
        // Without the fold's block (flag off, no fold growth, or another high gain) Startup commands rates.
        let mut off = bbr().with_fold_growth(true);
        assert!(off.on_report(&report(RTT, 12, 12, 125_000, RTT)).rate_bytes_per_sec.is_some());
        let mut plain = Bbr::new(b.params, b.args.clone());
        assert!(plain.on_report(&report(RTT, 12, 12, 125_000, RTT)).rate_bytes_per_sec.is_some());
        let args = BbrArgs { high_gain: 3.0, ..b.args.clone() };
        let mut other = Bbr::new(b.params, args).with_fold_growth(true);
        assert!(other.on_report(&report(RTT, 12, 12, 125_000, RTT)).rate_bytes_per_sec.is_some());
        // The fold's gain is high_gain x 99 % in thousandths.
        assert_eq!(STARTUP_RATE_PER_MILLE, (HIGH_GAIN * 990.0).round() as u64);
    }

    #[test]
    fn startup_rules_in_the_fold_are_on_by_default_and_can_be_turned_off() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: BbrArgs,
        }
        let on = <Cli as clap::Parser>::parse_from(["bbr"]).a;
        assert!(on.startup_cwnd_in_fold && on.startup_rate_in_fold);
        let b = Bbr::new(bbr().params, on).with_fold_growth(true);
        assert!(b.fold_startup_cwnd && b.fold_startup_rate);
        let off = ["bbr", "--startup-cwnd-in-fold", "false", "--startup-rate-in-fold", "false"];
        let off = <Cli as clap::Parser>::parse_from(off).a;
        assert!(!off.startup_cwnd_in_fold && !off.startup_rate_in_fold);
    }

    #[test]
    fn startup_cwnd_rule_goes_on_with_the_first_command_and_off_when_startup_ends() {
        let on = BbrArgs { startup_cwnd_in_fold: true, ..bbr().args };
        let mut b = Bbr::new(bbr().params, on).with_fold_growth(true);
        let text = PROGRAM.text();
        assert!(text.contains(&startup_cwnd_block()) && text.contains(&startup_cwnd_growth_lines()));
        assert!(text.contains(STARTUP_CWND_DEFS), "bbr's program declares sg, sbw, srt, sq");
        // The initial command turns the rule on and lets the first round grow
        // past the initial window (fcw = the initial cwnd: not a new cap).
        let init = Controller::initial_fold_registers(&b);
        assert_eq!(&init[..3], &[("fcw", 10 * MSS), ("cap", 26 * MSS), ("sg", 1)], "2 x 10 + 6 packets of budget");
        assert_eq!(&init[3..], &[("sq", 6 * MSS), ("smss", MSS)]);
        // First report, 3 packets delivered: on (sg = 1 + 3), the budget in bytes, a loose cap.
        b.on_report(&dp(report(10_000, 3, 9, 0, RTT), 12));
        let budget = b.quantization_budget();
        assert_eq!(reg(&b, "sg"), Some(4));
        assert_eq!(reg(&b, "sq"), Some((budget * f64::from(MSS)).round() as u32));
        assert_eq!(b.cap_pkts(), Some(2.0 * 12.0 + budget), "2 x cwnd + budget: the fold's rule decides");
        // Later Startup reports: the budget again, sg not again (the fold counts on its own).
        let (mut now, mut rate, mut reports) = (10_000, 125_000, 0);
        let mut ended_at = None;
        while b.mode() == Mode::Startup {
            now += RTT;
            let cwnd = b.cwnd_pkts().max(20.0) as u64;
            b.on_report(&dp(report(now, 40, 40, rate, RTT), cwnd));
            reports += 1;
            if b.mode() == Mode::Startup {
                assert_eq!(reg(&b, "sg"), None, "report {reports}");
                assert!(reg(&b, "sq").is_some());
                assert_eq!(reg(&b, "smss"), Some(MSS));
                let target = b.bdp_pkts(HIGH_GAIN) + b.quantization_budget();
                let loose = (2.0 * b.cwnd_pkts() + b.quantization_budget()).max(target);
                assert!((b.cap_pkts().unwrap() - loose).abs() < 1e-9, "{:?} vs {loose}", b.cap_pkts());
            } else {
                ended_at = Some(reports);
            }
            rate = (rate * 2).min(1_000_000);
            assert!(now < 40 * RTT, "Startup never ended");
        }
        // The report that found the pipe full turns it off; its cap is the
        // kernel's target (Drain's, or ProbeBW's if Drain ended in it too).
        assert!(ended_at.is_some());
        assert_eq!(reg(&b, "sg"), Some(0));
        assert_eq!((reg(&b, "sq"), reg(&b, "smss")), (None, None));
        let target = b.bdp_pkts(b.cwnd_gain) + b.ack_aggregation_cwnd_pkts() + b.quantization_budget();
        assert!((b.cap_pkts().unwrap() - target).abs() < 1e-9);
        // and nothing after that.
        b.on_report(&dp(report(now + RTT, 40, 40, 1_000_000, RTT), 100));
        assert_eq!((reg(&b, "sg"), reg(&b, "sq")), (None, None));
        // Flag off (the default): never sent, the fold's rule stays off (sg starts at 0).
        assert!(STARTUP_CWND_DEFS.contains("(sg 0)"));
        let mut off = bbr().with_fold_growth(true);
        assert!(Controller::initial_fold_registers(&off).is_empty());
        off.on_report(&dp(report(10_000, 3, 9, 0, RTT), 12));
        assert_eq!((reg(&off, "sg"), reg(&off, "sq")), (None, None));
        assert_eq!(off.cap_pkts(), Some(off.bdp_pkts(HIGH_GAIN).max(24.0)), "the per-report cap as before");
        // The fold's gain is high_gain in thousandths.
        assert_eq!(STARTUP_CWND_GAIN_PER_MILLE, (HIGH_GAIN * 1000.0).round() as u64);
    }

    #[test]
    fn goes_through_every_state() {
        let mut b = bbr();
        let mut now = 0;
        // Startup: the delivery rate doubles each round, then stays at 1 MB/s
        // (BDP = 1e6 x 0.04 / 1000 = 40 packets).
        let mut rate = 125_000;
        let mut inflight = 10;
        let mut rounds = 0;
        while !b.full_bw_reached() {
            now += RTT;
            b.on_report(&report(now, inflight, inflight, rate, RTT));
            assert_eq!(b.mode(), if b.full_bw_reached() { Mode::Drain } else { Mode::Startup });
            if !b.full_bw_reached() {
                assert_eq!(b.pacing_gain(), HIGH_GAIN);
            }
            rate = (rate * 2).min(1_000_000);
            inflight = b.cwnd_pkts() as u64;
            rounds += 1;
            assert!(rounds < 20, "Startup never ended");
        }
        // Three rounds without 25 % growth after reaching 1 MB/s.
        assert!(rounds >= 6, "{rounds}");
        assert_eq!(b.btl_bw(), 1_000_000.0);
        assert_eq!(b.mode(), Mode::Drain);
        assert!((b.pacing_gain() - 1.0 / HIGH_GAIN).abs() < 1e-12);
        // Drain until in-flight <= BDP (40 packets).
        now += RTT;
        b.on_report(&report(now, 60, 80, 1_000_000, RTT));
        assert_eq!(b.mode(), Mode::Drain);
        now += RTT;
        b.on_report(&report(now, 40, 39, 1_000_000, RTT));
        assert_eq!(b.mode(), Mode::ProbeBw);
        // ProbeBW: phases advance every RTprop; the whole cycle is visited, and
        // the pacing rate is gain x BtlBw x 0.99, cwnd -> 2 BDP + budget.
        let mut seen = [false; 8];
        for _ in 0..24 {
            seen[b.cycle_idx()] = true;
            assert!((b.pacing_rate() - b.pacing_gain() * 1_000_000.0 * 0.99).abs() < 1e-6);
            now += RTT + 1;
            let inflight = (b.bdp_pkts(b.pacing_gain()) + 1.0) as u64;
            b.on_report(&report(now, 40, inflight, 1_000_000, RTT));
        }
        assert!(seen.iter().all(|&s| s), "{seen:?}");
        let target = 2.0 * 40.0 + b.quantization_budget();
        assert!((b.cwnd_pkts() - target).abs() < 1e-9, "{} vs {target}", b.cwnd_pkts());
        // ProbeRTT: no lower RTT for 10 s.
        let before = b.cwnd_pkts();
        now += 10_000_000;
        b.on_report(&report(now, 40, 40, 1_000_000, RTT + 5_000));
        assert_eq!(b.mode(), Mode::ProbeRtt);
        assert_eq!(b.cwnd_pkts(), MIN_CWND_PKTS);
        now += RTT;
        b.on_report(&report(now, 36, 4, 1_000_000, RTT));
        assert_eq!(b.mode(), Mode::ProbeRtt, "200 ms after in-flight reached 4");
        now += 100_000;
        b.on_report(&report(now, 4, 4, 1_000_000, RTT));
        assert_eq!(b.mode(), Mode::ProbeRtt);
        now += 150_000;
        b.on_report(&report(now, 4, 4, 1_000_000, RTT));
        assert_eq!(b.mode(), Mode::ProbeBw, "back to ProbeBW after 200 ms and a round");
        assert!(b.cwnd_pkts() >= before, "cwnd restored: {} < {before}", b.cwnd_pkts());
    }

    /// The value of fold register `name` in `b`'s next command, if sent.
    fn reg(b: &Bbr, name: &str) -> Option<u32> {
        Controller::fold_registers(b).into_iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    #[test]
    fn fold_growth_jumps_back_to_the_saved_cwnd_after_probe_rtt_not_after_recovery() {
        let mut b = bbr().with_fold_growth(true);
        let mut now = 0;
        // Startup to ProbeBW at 1 MB/s x 40 ms (BDP 40 packets), cwnd as the fold grew it.
        for _ in 0..8 {
            now += RTT;
            b.on_report(&dp(report(now, 40, 40, 1_000_000, RTT), 80));
        }
        b.on_report(&dp(report(now + RTT, 40, 39, 1_000_000, RTT), 80));
        assert_eq!(b.mode(), Mode::ProbeBw);
        assert_eq!(reg(&b, "fcw"), None, "no restore: the fold keeps growing toward the cap");
        // ProbeRTT: the fold's cwnd falls to 4 packets; 200 ms and a round later it ends.
        now += 10_000_000;
        b.on_report(&dp(report(now, 40, 40, 1_000_000, RTT + 5_000), 80));
        assert_eq!(b.mode(), Mode::ProbeRtt);
        for dt in [RTT, 100_000, 150_000] {
            now += dt;
            b.on_report(&dp(report(now, 4, 4, 1_000_000, RTT), 4));
        }
        assert_eq!(b.mode(), Mode::ProbeBw);
        let cap = b.cap_pkts().expect("a cap");
        let jump = b.restore_jump_pkts().expect("a restore");
        assert_eq!(jump, 80f64.min(cap), "the saved 80 packets, within the cap");
        assert_eq!(reg(&b, "fcw"), Some(b.params.to_bytes(jump)), "the fold's cwnd jumps");
        assert_eq!(reg(&b, "cap"), Some(b.params.to_bytes(cap)));
        // The next report: nothing restored, nothing jumps.
        now += RTT;
        b.on_report(&dp(report(now, 40, 40, 1_000_000, RTT), 60));
        assert_eq!((b.restore_jump_pkts(), reg(&b, "fcw")), (None, None));
        // Loss recovery: conservation below the saved cwnd, then back at the recovery point.
        now += RTT;
        b.on_report(&dp(Measurement { lost_pkts: 3, ..report(now, 4, 50, 1_000_000, RTT) }, 70));
        assert!(b.cwnd_pkts() < 70.0);
        now += RTT;
        b.on_report(&dp(report(now, 80, 30, 1_000_000, RTT), 40));
        assert!(b.recovery.is_none() && b.cwnd_pkts() > 40.0, "restored at the recovery point");
        assert_eq!(reg(&b, "fcw"), None, "after recovery the fold regrows toward the cap per ACK");
        // A loss inside ProbeRTT, its recovery ending there too: ProbeRTT's end
        // still restores the cwnd saved at its entry (tcp_bbr.c bbr_save_cwnd).
        now += 10_000_000;
        b.on_report(&dp(report(now, 40, 60, 1_000_000, RTT + 5_000), 60));
        assert_eq!(b.mode(), Mode::ProbeRtt);
        now += RTT;
        b.on_report(&dp(Measurement { lost_pkts: 2, ..report(now, 4, 30, 1_000_000, RTT) }, 10));
        now += RTT;
        b.on_report(&dp(report(now, 60, 4, 1_000_000, RTT), 4));
        assert!(b.recovery.is_none(), "recovery ended inside ProbeRTT");
        assert_eq!(b.mode(), Mode::ProbeRtt);
        for dt in [100_000, 150_000] {
            now += dt;
            b.on_report(&dp(report(now, 4, 4, 1_000_000, RTT), 4));
        }
        assert_eq!(b.mode(), Mode::ProbeBw);
        assert_eq!(b.restore_jump_pkts(), Some(60f64.min(b.cap_pkts().unwrap())), "the cwnd saved at ProbeRTT's entry");
        // Without fold growth there is no fold register to jump.
        let mut plain = bbr();
        plain.on_report(&report(RTT, 10, 30, 1_000_000, RTT));
        plain.on_report(&Measurement { lost_pkts: 2, ..report(2 * RTT, 5, 20, 1_000_000, RTT) });
        plain.on_report(&report(3 * RTT, 30, 20, 1_000_000, RTT));
        assert_eq!((plain.restore_jump_pkts(), reg(&plain, "fcw")), (None, None));
    }

    #[test]
    fn probe_phase_lasts_until_in_flight_reaches_five_quarters_bdp_plus_the_budget() {
        let mut b = bbr();
        let mut now = 0;
        // To ProbeBW at 1 MB/s x 40 ms (BDP 40 packets), then to the 5/4 phase.
        for _ in 0..8 {
            now += RTT;
            b.on_report(&report(now, 40, 40, 1_000_000, RTT));
        }
        b.on_report(&report(now + RTT, 40, 39, 1_000_000, RTT));
        assert_eq!(b.mode(), Mode::ProbeBw);
        while b.cycle_idx() != 0 {
            now += RTT + 1;
            b.on_report(&report(now, 40, 40, 1_000_000, RTT));
        }
        let target = b.inflight_target(1.25);
        assert!(target > b.bdp_pkts(1.25) + 2.0, "budget {} packets", target - b.bdp_pkts(1.25));
        // A whole RTprop at 5/4, in flight at 5/4 BDP but below the budget: the phase goes on.
        now += RTT + 1;
        let at_bdp = b.bdp_pkts(1.25).ceil() as u64;
        b.on_report(&Measurement { inflight_max_pkts: at_bdp, ..report(now, 40, at_bdp, 1_000_000, RTT) });
        assert_eq!(b.cycle_idx(), 0, "5/4 BDP alone does not end the probe (tcp_bbr.c bbr_inflight)");
        // In flight reaches 5/4 BDP + the budget: the 3/4 phase follows.
        now += 1_000;
        let at_target = target.ceil() as u64;
        b.on_report(&Measurement { inflight_max_pkts: at_target, ..report(now, 10, at_target, 1_000_000, RTT) });
        assert_eq!(b.cycle_idx(), 1);
    }

    #[test]
    fn bandwidth_filter_forgets_after_ten_rounds() {
        let mut b = bbr();
        let mut now = 0;
        b.on_report(&report(now, 10, 10, 2_000_000, RTT));
        for _ in 0..9 {
            now += RTT;
            b.on_report(&report(now, 10, 10, 500_000, RTT));
        }
        assert_eq!(b.btl_bw(), 2_000_000.0);
        now += RTT;
        b.on_report(&report(now, 10, 10, 500_000, RTT));
        assert_eq!(b.btl_bw(), 500_000.0, "the 2 MB/s round left the 10-round window");
    }

    #[test]
    fn loss_conserves_packets_then_restores() {
        let mut b = bbr();
        b.on_report(&report(0, 10, 30, 1_000_000, RTT));
        let before = b.cwnd_pkts();
        let loss = Measurement { lost_pkts: 2, ..report(RTT, 5, 20, 1_000_000, RTT) };
        b.on_report(&loss);
        assert_eq!(b.cwnd_pkts(), 25.0, "cwnd = in flight + acked");
        // All 27 packets outstanding at the loss acknowledged: restored.
        b.on_report(&report(2 * RTT, 30, 20, 1_000_000, RTT));
        assert!(b.cwnd_pkts() >= before);
        // An RTO: cwnd 1 packet.
        b.on_report(&Measurement { timeout: true, ..report(3 * RTT, 0, 0, 0, RTT) });
        assert_eq!(b.cwnd_pkts(), 1.0);
    }

    /// A report from the fold-growth datapath: `dp_cwnd` packets in the fold.
    fn dp(m: Measurement, dp_cwnd: u64) -> Measurement {
        Measurement { dp_cwnd_bytes: dp_cwnd * u64::from(MSS), ..m }
    }

    #[test]
    fn recovery_deducts_each_reports_losses_and_conserves_per_ack() {
        let mut b = bbr().with_fold_growth(true);
        b.on_report(&dp(report(RTT, 10, 100, 1_000_000, RTT), 100));
        // Entry: in flight + the last ACK's delivered packets (the report's mean
        // per ACK: 4 acked + 16 SACKed over 10 ACKs = 2), not the report's 20.
        let entry = Measurement { lost_pkts: 5, sacked_pkts: 16, acks: 10, ..report(RTT + 2_000, 4, 90, 1_000_000, RTT) };
        let ctl = b.on_report(&dp(entry, 100));
        assert_eq!(ctl.cwnd_bytes, Some(92 * MSS));
        // Later loss reports of the conserving round: cwnd - lost, applied at once,
        // even though in flight (sent under the previous command) is higher.
        let more = Measurement { lost_pkts: 3, sacked_pkts: 2, acks: 2, ..report(RTT + 4_000, 0, 91, 1_000_000, RTT) };
        let ctl = b.on_report(&dp(more, 92));
        assert_eq!(ctl.cwnd_bytes, Some(89 * MSS));
        // A loss-free report of the round: the kernel's floor, in flight + delivered per ACK.
        let calm = Measurement { sacked_pkts: 50, acks: 25, ..report(RTT + 30_000, 0, 88, 1_000_000, RTT) };
        let ctl = b.on_report(&dp(calm, 89));
        assert_eq!(ctl.cwnd_bytes, Some(90 * MSS), "88 + 50/25, not 88 + 50");
    }

    #[test]
    fn startup_cap_does_not_stop_the_first_round_or_a_growing_ramp() {
        let mut b = bbr().with_fold_growth(true);
        // First report, no bandwidth sample yet: cwnd may double (tcp_bbr.c grows
        // by acked while fewer than TCP_INIT_CWND packets were delivered).
        b.on_report(&dp(report(10_000, 1, 9, 0, RTT), 10));
        assert_eq!(b.cap_pkts(), Some(20.0));
        // BtlBw doubled since the previous report: the cap is the target at twice BtlBw.
        b.on_report(&dp(report(RTT, 10, 20, 250_000, RTT), 20));
        b.on_report(&dp(report(RTT + RTT / 2, 10, 30, 500_000, RTT), 30));
        let expect = 2.0 * b.bdp_pkts(HIGH_GAIN) + b.quantization_budget();
        assert!((b.cap_pkts().unwrap() - expect).abs() < 1e-9, "{:?} vs {expect}", b.cap_pkts());
        // BtlBw flat: the kernel's target, no extrapolation.
        b.on_report(&dp(report(2 * RTT, 15, 40, 500_000, RTT), 40));
        let target = b.bdp_pkts(HIGH_GAIN) + b.quantization_budget();
        assert!((b.cap_pkts().unwrap() - target).abs() < 1e-9);
    }

    /// A flow with fold growth driven through Startup and Drain into ProbeBW
    /// at BtlBw 1 MB/s, RTprop 40 ms (BDP 40 packets), each report carrying
    /// `extra` bytes of per-ACK excess; returns it and the time reached.
    fn in_probe_bw(args: BbrArgs, extra: u64) -> (Bbr, u64) {
        let mut b = Bbr::new(bbr().params, args).with_fold_growth(true);
        let (mut now, mut rate) = (0, 125_000);
        while b.mode() != Mode::ProbeBw {
            now += RTT;
            let inflight = if b.full_bw_reached() { 30 } else { 80 };
            let m = Measurement { extra_acked_milli_pkts: extra, ..report(now, 40, inflight, rate, RTT) };
            b.on_report(&dp(m, 200));
            if b.mode() == Mode::Startup {
                assert_eq!(b.ack_aggregation_cwnd_pkts(), 0.0, "no allowance before the pipe is full (tcp_bbr.c)");
            }
            rate = (rate * 2).min(1_000_000);
            assert!(now < 40 * RTT, "never reached ProbeBW");
        }
        (b, now)
    }

    #[test]
    fn ack_aggregation_allowance_enters_the_cwnd_target_after_startup() {
        let (mut b, mut now) = in_probe_bw(bbr().args, 20_000);
        // ProbeBW: target = 2 BDP + the 20-packet allowance + budget.
        now += RTT;
        b.on_report(&dp(report(now, 40, 60, 1_000_000, RTT), 80));
        assert_eq!(b.ack_aggregation_cwnd_pkts(), 20.0);
        let expect = b.bdp_pkts(2.0) + 20.0 + b.quantization_budget();
        assert!((b.cap_pkts().unwrap() - expect).abs() < 1e-9, "{:?} vs {expect}", b.cap_pkts());
        // A larger excess is capped at BtlBw x 100 ms = 100 packets.
        now += RTT;
        let big = Measurement { extra_acked_milli_pkts: 150_000, ..report(now, 40, 60, 1_000_000, RTT) };
        b.on_report(&dp(big, 160));
        assert_eq!(b.ack_aggregation_cwnd_pkts(), 100.0);
        // and each report's excess at the fold's cwnd (tcp_bbr.c: at snd_cwnd).
        let mut c = b.clone();
        let over = Measurement { extra_acked_milli_pkts: 500_000, ..report(now + 1, 1, 60, 1_000_000, RTT) };
        c.on_report(&dp(over, 90));
        assert_eq!(c.last_extra_acked, 90.0);
        // The max filter forgets after 5-10 rounds without excess (two halves of 5).
        let mut rounds = 0;
        while b.ack_aggregation_cwnd_pkts() > 0.0 {
            now += RTT;
            b.on_report(&dp(report(now, 60, 60, 1_000_000, RTT), 80));
            rounds += 1;
            assert!(rounds <= 2 * EXTRA_ACKED_WIN_ROUNDS, "still {} after {rounds} rounds", b.ack_aggregation_cwnd_pkts());
        }
        assert!(rounds >= EXTRA_ACKED_WIN_ROUNDS, "forgotten after {rounds} rounds");
        // --ack-aggregation false: the kernel's target without it.
        let off = BbrArgs { ack_aggregation: false, ..bbr().args };
        let (mut b, now) = in_probe_bw(off, 20_000);
        b.on_report(&dp(report(now + RTT, 40, 60, 1_000_000, RTT), 80));
        assert_eq!(b.ack_aggregation_cwnd_pkts(), 0.0);
        assert!(Controller::fold_registers(&b).is_empty(), "no BtlBw sent to the fold when off");
        let expect = b.bdp_pkts(2.0) + b.quantization_budget();
        assert!((b.cap_pkts().unwrap() - expect).abs() < 1e-9);
    }

    #[test]
    fn btlbw_goes_to_the_fold_with_each_command() {
        let mut b = bbr().with_fold_growth(true);
        b.on_report(&dp(report(RTT, 10, 20, 250_000, RTT), 20));
        assert_eq!(Controller::fold_registers(&b), vec![("xbw", 250_000)], "250 packets/s in thousandths");
        assert!(PROGRAM.text().contains(&ack_aggregation_block()) && PROGRAM.text().contains(ACK_AGG_DEFS));
        // Without fold growth there is no per-ACK excess: nothing to send, no allowance.
        let plain = bbr();
        assert!(Controller::fold_registers(&plain).is_empty());
    }

    #[test]
    fn drain_ends_within_the_report_that_reaches_the_target_with_a_blended_rate() {
        let mut b = bbr();
        let mut now = 0;
        let mut rate = 125_000;
        while !b.full_bw_reached() {
            now += RTT;
            b.on_report(&report(now, 40, 80, rate, RTT));
            rate = (rate * 2).min(1_000_000);
        }
        assert_eq!(b.mode(), Mode::Drain);
        // BDP 40 + budget 6 = 46 packets; one report interval (RTT / 2) at gain
        // 1/2.885 drains (1 - 1/2.885) x 1000 pkt/s x 0.02 s = 13.07 packets.
        let fall = (1.0 - 1.0 / HIGH_GAIN) * 1000.0 * 0.02;
        now += RTT;
        b.on_report(&report(now, 20, 60, 1_000_000, RTT));
        assert_eq!(b.mode(), Mode::Drain, "14 above the target: more than one interval's fall");
        now += RTT / 2;
        b.on_report(&report(now, 20, 50, 1_000_000, RTT));
        assert_eq!(b.mode(), Mode::ProbeBw, "4 above: reached within the interval");
        // This interval's rate keeps the drain gain for 4 / fall of it.
        let f = 4.0 / fall;
        let gain = f / HIGH_GAIN + (1.0 - f) * b.pacing_gain();
        assert!((b.pacing_rate() - gain * 1_000_000.0 * 0.99).abs() < 1e-6, "{} vs {}", b.pacing_rate(), gain * 990_000.0);
        // The next report paces at the phase's own gain.
        now += RTT / 2;
        b.on_report(&report(now, 20, 46, 1_000_000, RTT));
        assert!((b.pacing_rate() - b.pacing_gain() * 990_000.0).abs() < 1e-6);
    }
}
