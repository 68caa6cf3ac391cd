//! The fold programs the algorithms install in the datapath, and the code that
//! turns their reports into [`Measurement`]s.
//!
//! Every algorithm owns a [`FoldProgram`]: the same per-ACK accumulation (the
//! report fields below) with its own report cadence ([`Cadence`]) and urgent
//! reports on loss or timeout. One field set means one decoder for the whole
//! suite; the cadence is what the algorithms differ in, and the per-ACK parts
//! a program declares ([`Features`]): slow start and PRR of the loss-based
//! core, or growth toward a commanded cap with its algorithm's own blocks
//! ([`TowardCap`]). The text is composed from those typed parts; this module
//! names no algorithm.
//!
//! Language limits respected (docs/fold-language.md; libccp 1.2 / Portus 0.9): binary
//! operators only, no `>=`/`<=`, expressions at most 3 deep (libccp has 8 tmp
//! registers), no `#` comments anywhere in the program text (a comment inside a
//! `when` body panics the compiler), no subtraction, division only by a nonzero
//! constant (an underflow or a division by zero silently aborts the whole
//! invocation), and `(report)` is followed by `(:= Micros 0)` because it does
//! not reset the timer. libccp reads an absent RTT sample (0) as 4294967295, so
//! "has a sample" is `(< Flow.rtt_sample_us +infinity)`, not `> 0`.

use crate::cc::Measurement;
use portus::lang::Scope;
use portus::Report;

/// Initial report interval in microseconds, used until the first RTT sample.
pub const INITIAL_REPORT_INTERVAL_US: u64 = 10_000;

/// How often a fold program reports (besides its urgent reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cadence {
    /// `k` reports per RTT: on the first ACK after the latest RTT sample / k
    /// microseconds have passed since the last report (k = 1: once per RTT).
    PerRtt(u32),
    /// After every `n` fold invocations (ACKs; the kernel may merge several).
    PerAcks(u32),
    /// On the first ACK after this many microseconds.
    IntervalUs(u64),
}

/// An algorithm's fold program: its name (the key Portus installs it under),
/// its report cadence and what it runs per ACK besides the report fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoldProgram {
    /// Program name, unique per algorithm (e.g. "ccplab_reno").
    pub name: &'static str,
    /// Regular report cadence.
    pub cadence: Cadence,
    /// Report at once on an ACK that carries a loss or a timeout.
    pub urgent_on_loss: bool,
    /// The per-ACK parts the program adds to the shared report fields
    /// ([`Features::NONE`]: none).
    pub features: Features,
}

/// The parts a fold program adds to the shared per-ACK accumulation, and what
/// its algorithm promises about them. The fold layer composes the program text
/// from these; it knows no algorithm by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// Who moves cwnd per ACK in the fold, if anyone.
    pub growth: Growth,
    /// PRR per ACK in recovery (`PRR_PER_ACK`); its algorithm sends
    /// [`crate::cc::FoldPrr::registers`] with each command.
    pub prr: bool,
    /// The fold writes the control registers its algorithm sends only at a
    /// loss ACK or a timeout (`PRR_PER_ACK`'s `pm`), and otherwise only Cwnd
    /// (slow start, PRR): an answer that repeats the last one sent, to a
    /// report without loss or timeout whose cwnd is the answer's, changes
    /// nothing in the datapath and is not sent ([`crate::repeats`]). A test
    /// checks the claim on the program's text.
    pub skips_repeated_answers: bool,
    /// Regular reports back off while the flow is far from cwnd-limited
    /// (`APP_LIMITED_TRACK`): for an algorithm that grows cwnd only when
    /// cwnd-limited ([`crate::cc::cwnd_limited`], as Linux's
    /// `tcp_is_cwnd_limited`), a report of a flow using less than half its cwnd
    /// cannot change its decision, and losses and timeouts are reported at once
    /// anyway.
    pub backs_off_when_app_limited: bool,
}

impl Features {
    /// The shared report fields only (HyStart's ACK train included).
    pub const NONE: Features =
        Features { growth: Growth::None, prr: false, skips_repeated_answers: false, backs_off_when_app_limited: false };
}

/// How a fold program moves cwnd per ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growth {
    /// It does not: cwnd changes only by user space's commands.
    None,
    /// Slow start per ACK until the first loss or user space takes over
    /// (`SLOW_START`); its algorithm answers reports with Cwnd 0 while it runs
    /// ([`crate::cc::FoldSlowStart`]).
    SlowStart,
    /// Growth toward the cap user space commands (`toward_cap`), fed by the
    /// algorithm's own per-ACK parts.
    TowardCap(&'static TowardCap),
}

/// What growth toward a cap (`toward_cap`) takes from its algorithm: its
/// report fields, control registers and per-ACK blocks, and the rule for how
/// much one ACK grows cwnd by. Two are equal when they produce the same text.
#[derive(Clone, Copy, Debug)]
pub struct TowardCap {
    /// Report fields declared in place of HyStart's ACK train
    /// ([`ACK_TRAIN_FIELDS`]), which such a program does not have: Portus
    /// allows 16 report registers.
    pub report_fields: &'static [ReportField],
    /// Declarations of the algorithm's control registers, one per line
    /// (`    (name init)\n`), after the cap's own `fcw` and `cap`.
    pub registers: &'static [&'static str],
    /// The algorithm's per-ACK `when` blocks, which run before the growth.
    pub blocks: fn() -> String,
    /// Lines inside the growth that set the bytes this ACK may grow cwnd by
    /// (`scratch[2]`), read with `fcw` the fold's cwnd and `cap` the cap.
    pub growth: fn() -> String,
    /// Three of the algorithm's registers the growth uses as scratch: the Cwnd
    /// seen at this ACK (a number), whether it is a command (a flag), the bytes
    /// to grow by (a number). Portus serializes at most 16 control registers,
    /// too few for the growth to own its scratch; these must hold nothing
    /// read after the growth on the same ACK.
    pub scratch: [&'static str; 3],
}

impl PartialEq for TowardCap {
    fn eq(&self, other: &Self) -> bool {
        (self.report_fields, self.registers, self.scratch) == (other.report_fields, other.registers, other.scratch)
            && (self.blocks)() == (other.blocks)()
            && (self.growth)() == (other.growth)()
    }
}

impl Eq for TowardCap {}

/// A report field: declared `(volatile NAME INIT)`, read as `Report.NAME`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportField {
    /// Its name in the `Report` block.
    pub name: &'static str,
    /// Its value after each report.
    pub init: &'static str,
}

impl ReportField {
    fn declaration(&self) -> String {
        format!("        (volatile {} {})\n", self.name, self.init)
    }
}

/// The Report fields every program accumulates, in the order
/// [`measurement_from_fields`] reads them. Per ACK (volatile: reset after
/// each report):
/// - `acked`: bytes cumulatively acknowledged (sum of `Ack.bytes_acked`),
/// - `sacked`: packets SACKed/misordered (sum of `Ack.packets_misordered`),
/// - `loss`: packets marked lost (sum of `Ack.lost_pkts_sample`), plus
///   [`TIMEOUT_MARK`] for each ACK that saw `Flow.was_timeout` (an RTO; one
///   register for both, so that `delivered` fits in Portus's 16),
/// - `delivered`: packets newly delivered, cumulatively or selectively (sum of
///   `Ack.packets_acked + Ack.packets_misordered`: Linux's per-ACK
///   `acked_sacked`, which `acked` is not: a cumulative ACK over packets SACKed
///   before counts their bytes again),
/// - `rtt`: the latest nonzero `Flow.rtt_sample_us` (0 = none),
/// - `minrtt`: the smallest nonzero RTT sample (+infinity = none),
/// - `maxrtt`: the largest RTT sample (0 = none),
/// - `inflight`: `Flow.packets_in_flight` at the last ACK,
/// - `inflmax`: the largest `Flow.packets_in_flight + Ack.packets_acked`
///   (in flight just before an ACK), for the cwnd-limited test,
/// - `rate`: the largest per-ACK `min(Flow.rate_outgoing, Flow.rate_incoming)`
///   (delivery rate, bytes/s),
/// - `acks`: fold invocations,
/// - `cwnd`: the datapath's `Cwnd` (bytes) at the last ACK,
/// - `rtt8`: the smallest of the report's first 8 RTT samples (+infinity =
///   none), and `nrtt` the number of RTT samples (HyStart's delay increase),
/// - `train`: the length in us of the ACK train that starts the report: ACKs
///   each at most 2 ms after the previous one, timed from the report that
///   opened this one (HyStart's ACK train), and `trainon` whether it was still
///   unbroken at the report (so a train can continue into the next report),
///
/// Portus allows report registers 0..15, so a program has at most 16 such
/// fields (the suite's test compiles and serializes every program). A program
/// that grows cwnd toward a cap ([`Growth::TowardCap`]) has no HyStart ACK
/// train (`train`, `trainon`, decoded as 0) and declares its algorithm's
/// fields ([`TowardCap::report_fields`], e.g. [`EXTRA_ACKED_FIELD`]) instead.
pub const REPORT_FIELDS: [&str; 16] = [
    "Report.acked",
    "Report.sacked",
    "Report.loss",
    "Report.delivered",
    "Report.rtt",
    "Report.minrtt",
    "Report.inflight",
    "Report.inflmax",
    "Report.rate",
    "Report.acks",
    "Report.cwnd",
    "Report.rtt8",
    "Report.nrtt",
    "Report.train",
    "Report.maxrtt",
    "Report.trainon",
];

/// The report fields every program declares, in declaration order, before the
/// ACK-train slot ([`ACK_TRAIN_FIELDS`] or [`TowardCap::report_fields`]).
const SHARED_FIELDS: [ReportField; 13] = [
    field("acked", "0"), field("sacked", "0"), field("loss", "0"), field("delivered", "0"),
    field("rtt", "0"), field("minrtt", "+infinity"), field("inflight", "0"), field("inflmax", "0"),
    field("rate", "0"), field("acks", "0"), field("cwnd", "0"), field("rtt8", "+infinity"),
    field("nrtt", "0"),
];

const fn field(name: &'static str, init: &'static str) -> ReportField {
    ReportField { name, init }
}

/// The report field declared after the ACK-train slot.
const MAX_RTT_FIELD: ReportField = ReportField { name: "maxrtt", init: "0" };

/// HyStart's ACK-train fields (`train`, `trainon`), declared by every program
/// but those that grow cwnd toward a cap, which declare their algorithm's
/// fields in their place to free report registers.
pub const ACK_TRAIN_FIELDS: [ReportField; 2] =
    [ReportField { name: "train", init: "0" }, ReportField { name: "trainon", init: "true" }];

/// How [`PER_ACK`] updates the ACK-train fields, after the other fields.
const TRAIN_PER_ACK: &str = "    (:= Report.trainon (&& Report.trainon (< Micros (+ Report.train 2001))))\n    (:= Report.train (if Report.trainon Micros))\n";
const TRAIN_FIELDS: [&str; 2] = ["Report.train", "Report.trainon"];

/// Largest gap between two ACKs of one ACK train, us (Linux tcp_cubic.c
/// `hystart_ack_delta_us`).
pub const ACK_TRAIN_GAP_US: u64 = 2000;

/// The per-ACK ACK-aggregation excess (largest in the report, thousandths of a
/// packet), decoded into [`Measurement::extra_acked_milli_pkts`] when a program
/// declares it ([`EXTRA_ACKED`]; the program's own blocks write it).
pub const EXTRA_ACKED_FIELD: &str = "Report.xacked";

/// The declaration of [`EXTRA_ACKED_FIELD`].
pub const EXTRA_ACKED: ReportField = ReportField { name: "xacked", init: "0" };

/// The control registers of slow start in the fold (see [`SLOW_START`]):
/// `ss` on until it ends, `fcw` the cwnd in bytes the fold set last, `mx` the
/// largest in flight (bytes, before an ACK) of the current round, `pmx` that
/// of the previous round and `acc` the bytes acknowledged in the current one;
/// it also uses the scratch registers of [`SCRATCH_DEFS`] (`t1` the new Cwnd:
/// Portus cannot bind an `if` to Cwnd itself; `t2` one ACK's flags).
const SLOW_START_DEFS: &str = "    (ss true)\n    (fcw 0)\n    (mx 0)\n    (pmx 0)\n    (acc 0)\n";

/// Scratch registers of one ACK, `t1` a number shared by [`SLOW_START`] and
/// [`PRR_PER_ACK`], `t2` a flag of [`SLOW_START`]: Portus serializes at most 16
/// control registers (indices 0..15, counting `reportIntervalUs`; a program
/// with [`crate::loss_based::FOLD_FEATURES`] uses 15), too few for each block
/// to own its scratch.
const SCRATCH_DEFS: &str = "    (t1 0)\n    (t2 false)\n";

/// Slow start per ACK in the datapath, as Linux `tcp_slow_start` (and CCP's
/// own slow start in the datapath): while `ss` holds, every ACK raises Cwnd
/// by `Ack.bytes_acked` if the flow is cwnd-limited: cwnd < 2 x the largest
/// in flight of this round and the previous one, as `tcp_is_cwnd_limited` in
/// slow start compares with `max_packets_out`, the largest `packets_out` since
/// `cwnd_usage_seq` (a round: here it restarts once as many bytes as its
/// largest in flight are acknowledged, the fold's stand-in for snd_una passing
/// the round's snd_nxt). The previous round counts too because the fold sees
/// in flight only at ACKs, not right after the paced transmissions where the
/// kernel samples `packets_out` (with this round alone, cwnd stopped at 36
/// instead of 40 packets after the second round in one run of three). Not the
/// in flight of the ACK itself: a paced flow
/// ([`crate::cc::Paced`]) keeps in flight below cwnd while its cwnd
/// doubles, and that test stopped the growth at about half the round's ACKs
/// (cwnd 36 instead of 40 packets after the second round). `ss` ends
/// for good at the first ACK that carries a loss or a timeout, or when user
/// space takes over by commanding a Cwnd other than 0 and other than the
/// fold's own last value `fcw` (user space marks that command with
/// [`crate::cc::TAKEOVER_MARK_BYTES`] so it cannot equal `fcw`). While `ss`
/// holds, user space commands Cwnd 0, which the datapath does not apply (it
/// keeps the fold's cwnd) and the fold reads as "go on".
///
/// Why: growth applied once per report released a report's worth of packets
/// at once, a burst the kernel's per-ACK growth never sends. Runs before the per-ACK accumulation, so
/// `Report.cwnd` is the cwnd after this ACK.
const SLOW_START: &str = "\
(when (&& ss true)
    (:= t1 Cwnd)
    (:= t1 (if (== t1 0) fcw))
    (:= t2 (|| (== fcw 0) (== t1 fcw)))
    (:= ss (&& t2 (== Ack.lost_pkts_sample 0)))
    (:= ss (if Flow.was_timeout false))
    (:= fcw (if (&& ss true) t1))
    (:= acc (+ acc Ack.bytes_acked))
    (:= t2 (> acc mx))
    (:= acc (if t2 0))
    (:= pmx (if t2 mx))
    (:= mx (if t2 0))
    (:= mx (max mx (+ Flow.bytes_in_flight Ack.bytes_acked)))
    (:= t2 (< t1 (* 2 (max mx pmx))))
    (:= fcw (if (&& ss t2) (+ fcw Ack.bytes_acked)))
    (:= t1 (if (&& ss true) fcw))
    (:= Cwnd t1)
    (fallthrough)
)
";

/// The control registers of PRR per ACK in the fold (see [`PRR_PER_ACK`]):
/// `nrep` the reports sent so far, and from user space
/// ([`crate::cc::FoldPrr::registers`]) `pm` (0 = nothing to do, 1 = hold
/// cwnd at the next loss ACK, 2 = PRR), `pn` (the reports user space had seen
/// when it answered), `pa` (the PRR window at that report before the
/// ssthresh floor, packets, at least 0), `pf` (ssthresh / RecoverFS x 1024),
/// `pss` (ssthresh, packets) and `pmss` (bytes); `t1` scratch ([`SCRATCH_DEFS`]).
const PRR_DEFS: &str =
    "    (nrep 0)\n    (pm 0)\n    (pn 0)\n    (pa 0)\n    (pf 0)\n    (pss 0)\n    (pmss 0)\n";

/// Proportional Rate Reduction (RFC 6937, Linux `tcp_cwnd_reduction`) per ACK,
/// after the per-ACK report fields: while `pm` = 2 and no report has left
/// since user space's answer (`pn` = `nrep`), every ACK sets cwnd to
/// `max(pa + d x pf / 1024, l + d + pss) - (l + d)` packets with `d`, `l` the
/// packets delivered and marked lost since that report (`Report.delivered`,
/// `Report.loss`): the PRR window of [`crate::cc::Prr`] at this ACK. At a
/// loss ACK before user space has answered (`pm` = 1), cwnd is held at in
/// flight + 1 packet, once. An RTO ends both and leaves cwnd to the
/// datapath's loss window. The subtraction cannot underflow: it
/// subtracts a term from a max that contains it. The cost outside recovery is
/// the three conditions.
///
/// Why: per report, the window stood still while in flight fell with every
/// delivered or newly lost packet, and the kernel refilled it one for one
/// (see [`crate::cc::FoldPrr`] for what that cost on Verizon LTE).
const PRR_PER_ACK: &str = "\
(when (&& Flow.was_timeout true)
    (:= pm 0)
    (fallthrough)
)
(when (&& (== pm 1) (> Ack.lost_pkts_sample 0))
    (:= pm 0)
    (:= Cwnd (min Cwnd (+ Flow.bytes_in_flight pmss)))
    (fallthrough)
)
(when (&& (== pm 2) (== pn nrep))
    (:= t1 (+ pa (/ (* Report.delivered pf) 1024)))
    (:= t1 (max t1 (+ (+ Report.loss Report.delivered) pss)))
    (:= Cwnd (* pmss (- t1 (+ Report.loss Report.delivered))))
    (fallthrough)
)
";

/// What the report blocks of a program with PRR ([`Features::prr`]) add before `(report)`:
/// count the report.
const PRR_AT_REPORT: &str = "    (:= nrep (+ nrep 1))\n";

/// The control registers of cwnd growth toward a cap in the fold (see
/// `toward_cap`): `fcw` the fold's cwnd in bytes, `cap` the last Cwnd user
/// space commanded. Its scratch is the algorithm's ([`TowardCap::scratch`]).
const TOWARD_CAP_DEFS: &str = "    (fcw 0)\n    (cap 0)\n";

/// cwnd growth per ACK toward the commanded value, as tcp_bbr.c's per-ACK
/// `bbr_set_cwnd`: a Cwnd from user space (one other than the fold's own last
/// value) is a cap; a cap below the current cwnd applies at once, above it
/// cwnd grows by what the algorithm's rule allows on this ACK
/// ([`TowardCap::growth`]) until it reaches the cap. After an RTO the
/// datapath seeds the loss window, which the fold takes as the cap until user
/// space commands again.
///
/// Why: BBR commanding its cwnd twice per RTT raised it in half-window steps
/// in Startup, bursts into the queue the kernel's per-ACK growth never sends
/// (retransmits 2-18x the kernel's in `ccplab fidelity`).
fn toward_cap(c: &TowardCap) -> String {
    let [n, r, e] = c.scratch;
    format!(
        "\
(when true
    (:= {n} Cwnd)
    (:= {r} (&& (> {n} 0) (|| (< {n} fcw) (> {n} fcw))))
    (:= cap (if {r} {n}))
    (:= fcw (if (== fcw 0) {n}))
    (:= fcw (min fcw cap))
{}    (:= fcw (min cap (+ fcw {e})))
    (:= Cwnd fcw)
    (fallthrough)
)
",
        (c.growth)()
    )
}

/// Report interval, us, of a program that backs off ([`Features::backs_off_when_app_limited`])
/// while its flow keeps in flight at or below half its cwnd (an application-
/// or receive-window-limited flow): one report a second instead of one per
/// RTT, the minimum RTO of RFC 6298 and the timescale on which RFC 2861/7661
/// reconsider an application-limited flow's cwnd. Why: each report costs the
/// two daemons 40-170 us of CPU and the ACK that sends it ~2 us of BPF time
/// on this kind of machine (docs/NOTES.md); at 100 ms, 100 paced veth
/// flows cost the daemons 2.0 % of both cores where kernel cubic spends
/// nothing, at 1 s 0.6 %.
pub const APP_LIMITED_REPORT_US: u64 = 1_000_000;

/// The control register of the back-off: `lim`, whether the flow was
/// cwnd-limited or close to it at some ACK since the last report.
const APP_LIMITED_DEFS: &str = "    (lim false)\n";

/// Per ACK: `lim` once in flight just before the ACK exceeds half of Cwnd
/// (a looser test than the algorithm's own, so every report it would find
/// cwnd-limited still comes at the regular cadence).
const APP_LIMITED_TRACK: &str = "\
(when true
    (:= lim (|| lim (> (* 2 (+ Flow.bytes_in_flight Ack.bytes_acked)) Cwnd)))
    (fallthrough)
)
";

const PER_ACK: &str = "\
(when true
    (:= Report.acked (+ Report.acked Ack.bytes_acked))
    (:= Report.sacked (+ Report.sacked Ack.packets_misordered))
    (:= Report.loss (+ Report.loss Ack.lost_pkts_sample))
    (:= Report.loss (if Flow.was_timeout (+ Report.loss 1000000000)))
    (:= Report.delivered (+ Report.delivered (+ Ack.packets_acked Ack.packets_misordered)))
    (:= Report.rtt (if (< Flow.rtt_sample_us +infinity) Flow.rtt_sample_us))
    (:= Report.minrtt (if (&& (< Flow.rtt_sample_us +infinity) (< Flow.rtt_sample_us Report.minrtt)) Flow.rtt_sample_us))
    (:= Report.inflight Flow.packets_in_flight)
    (:= Report.inflmax (max Report.inflmax (+ Flow.packets_in_flight Ack.packets_acked)))
    (:= Report.rate (max Report.rate (min Flow.rate_outgoing Flow.rate_incoming)))
    (:= Report.acks (+ Report.acks 1))
    (:= Report.cwnd Cwnd)
    (:= Report.rtt8 (if (&& (< Flow.rtt_sample_us +infinity) (< Report.nrtt 8)) (min Report.rtt8 Flow.rtt_sample_us)))
    (:= Report.nrtt (if (< Flow.rtt_sample_us +infinity) (+ Report.nrtt 1)))
    (:= Report.maxrtt (if (< Flow.rtt_sample_us +infinity) (max Report.maxrtt Flow.rtt_sample_us)))
";

/// The condition of the urgent report on an ACK that carries a loss or a
/// timeout (`Report.loss` counts both).
const URGENT_CONDITION: &str = "(> Report.loss 0)";

/// The condition of the report at once on a retransmission timeout, in the
/// programs that are not urgent on every loss: after an RTO the datapath sends
/// from the kernel's loss window until the algorithm commands again
/// (docs/datapath.md, "Never frozen"), so even an algorithm whose rule ignores
/// losses must answer a timeout at once, or the kernel's cubic drives the flow
/// for up to a report interval (seconds when a cellular outage fills the queue).
/// `Report.loss` carries [`TIMEOUT_MARK`] from the timeout's event on.
const TIMEOUT_CONDITION: &str = "(> Report.loss 999999999)";

/// A report block: on `cond`, `at_report` (the features' lines before each
/// report), the report, the timer reset and then `after` (lines that reset
/// per-report registers).
fn report_when(cond: &str, at_report: &str, after: &str) -> String {
    format!("(when {cond}\n{at_report}    (report)\n    (:= Micros 0)\n{after})\n")
}

impl FoldProgram {
    /// Whether this program runs slow start per ACK in the fold ([`Growth::SlowStart`]).
    pub fn slow_start_in_fold(&self) -> bool {
        self.features.growth == Growth::SlowStart
    }

    /// Whether this program runs PRR per ACK in the fold ([`Features::prr`]).
    pub fn prr_in_fold(&self) -> bool {
        self.features.prr
    }

    /// Whether its algorithm's repeated answers may be skipped ([`Features::skips_repeated_answers`]).
    pub fn skips_repeated_answers(&self) -> bool {
        self.features.skips_repeated_answers
    }

    /// Whether this program's regular reports back off while its flow is far
    /// from cwnd-limited ([`Features::backs_off_when_app_limited`]).
    pub fn backs_off_when_app_limited(&self) -> bool {
        self.features.backs_off_when_app_limited
    }

    /// Whether this program grows cwnd per ACK toward a commanded cap ([`Growth::TowardCap`]).
    pub fn cwnd_toward_cap_in_fold(&self) -> bool {
        matches!(self.features.growth, Growth::TowardCap(_))
    }

    /// The program text exactly as installed (and printed by `--dump-program`)
    /// without a report-interval floor: `text_with_report_floor(0)`.
    pub fn text(&self) -> String {
        self.text_with_report_floor(0)
    }

    /// The program text with regular reports at least `floor_us` apart
    /// (`--min-report-interval-us`): `PerRtt(k)` reports after
    /// max(RTT / k, floor_us) (`max` in the report condition), `IntervalUs(us)`
    /// after max(us, floor_us); `PerAcks` and the urgent reports on loss or
    /// timeout are not held back. `floor_us` = 0 gives the program without a
    /// floor, text for text.
    ///
    /// The per-ACK `when` ends in `(fallthrough)`; the urgent `when` has none,
    /// so an ACK never produces two reports.
    pub fn text_with_report_floor(&self, floor_us: u64) -> String {
        let f = &self.features;
        let cap = match f.growth {
            Growth::TowardCap(c) => Some(c),
            _ => None,
        };
        let slow_start = f.growth == Growth::SlowStart;
        // The definitions: report fields, then control registers.
        let mut t = String::from("(def\n    (Report\n");
        let slot: &[ReportField] = cap.map_or(&ACK_TRAIN_FIELDS, |c| c.report_fields);
        for field in SHARED_FIELDS.iter().chain(slot).chain([&MAX_RTT_FIELD]) {
            t.push_str(&field.declaration());
        }
        t.push_str("    )\n    (reportIntervalUs 10000)\n");
        if f.prr {
            t.push_str(PRR_DEFS);
        }
        if f.prr || slow_start {
            t.push_str(SCRATCH_DEFS);
        }
        if f.backs_off_when_app_limited {
            t.push_str(APP_LIMITED_DEFS);
        }
        if slow_start {
            t.push_str(SLOW_START_DEFS);
        } else if let Some(c) = cap {
            t.push_str(TOWARD_CAP_DEFS);
            c.registers.iter().for_each(|r| t.push_str(r));
        }
        t.push_str(")\n");
        // Per ACK: growth first, so Report.cwnd is the cwnd after this ACK's.
        if slow_start {
            t.push_str(SLOW_START);
        } else if let Some(c) = cap {
            t.push_str(&(c.blocks)());
            t.push_str(&toward_cap(c));
        }
        t.push_str(PER_ACK);
        if cap.is_none() {
            t.push_str(TRAIN_PER_ACK);
        }
        if let Cadence::PerRtt(k) = self.cadence {
            let sample = if k <= 1 {
                "Flow.rtt_sample_us".to_string()
            } else {
                format!("(/ Flow.rtt_sample_us {k})")
            };
            t.push_str(&format!("    (:= reportIntervalUs (if (< Flow.rtt_sample_us +infinity) {sample}))\n"));
        }
        t.push_str("    (fallthrough)\n)\n");
        if f.backs_off_when_app_limited {
            t.push_str(APP_LIMITED_TRACK);
        }
        if f.prr {
            // After the per-ACK fields: Report.cwnd keeps the cwnd before this
            // ACK's reduction (user space takes ssthresh from the loss report's).
            t.push_str(PRR_PER_ACK);
        }
        let at_report = if f.prr { PRR_AT_REPORT } else { "" };
        let urgent = if self.urgent_on_loss { URGENT_CONDITION } else { TIMEOUT_CONDITION };
        t.push_str(&report_when(urgent, at_report, ""));
        let cond = match self.cadence {
            Cadence::PerRtt(_) if floor_us > 0 => format!("(> Micros (max reportIntervalUs {floor_us}))"),
            Cadence::PerRtt(_) => "(> Micros reportIntervalUs)".to_string(),
            Cadence::PerAcks(n) => format!("(> Report.acks {})", n.max(1) - 1),
            Cadence::IntervalUs(us) => format!("(> Micros {})", us.max(floor_us)),
        };
        if f.backs_off_when_app_limited {
            // the regular cadence while the flow was (nearly) cwnd-limited,
            // else one report per APP_LIMITED_REPORT_US (at least the floor)
            let slow = APP_LIMITED_REPORT_US.max(floor_us);
            for c in [format!("(&& lim {cond})"), format!("(> Micros {slow})")] {
                t.push_str(&report_when(&c, at_report, "    (:= lim false)\n"));
            }
            return t;
        }
        t.push_str(&report_when(&cond, at_report, ""));
        t
    }
}

/// What an RTO adds to `Report.loss` (see [`REPORT_FIELDS`]): far above any
/// count of lost packets in one report. Written literally in `PER_ACK`.
pub const TIMEOUT_MARK: u64 = 1_000_000_000;

/// Values at or above this are "+infinity" (libccp sends +infinity as u32::MAX
/// or u64::MAX depending on the path).
const INFINITY_THRESHOLD: u64 = u32::MAX as u64;

/// A packet count of a report summed or maxed over `Ack.packets_acked`, taken modulo 2^32.
///
/// Why: ccp-kernel computes `Ack.packets_acked` as `rs->acked_sacked - packets_misordered`
/// in u32 (tcp_ccp.c `load_primitives`, ccp-kernel 024bdc8 and be2c947), where
/// `packets_misordered` is the growth of `tp->sacked_out` since the last ACK; when that
/// growth exceeds the ACK's `acked_sacked` the difference wraps to about 2^32, and the
/// fold's u64 sums carry it: `Report.delivered` and `Report.inflmax` came as 2^32 + a few
/// packets in a recovery on 6.12 (`make kmod-check`), and ccp:reno's cwnd jumped to its
/// 100000-packet ceiling at the first such report. A real count of one report is far below
/// 2^32, and the wrapped terms sum to the true count modulo 2^32. (Folds that use
/// `Ack.packets_acked` per ACK themselves, bbr's, see the same wrap on ccp-kernel.)
pub fn unwrap_u32_count(v: u64) -> u64 {
    v & u64::from(u32::MAX)
}

/// Convert the raw Report field values (in [`REPORT_FIELDS`] order) into a
/// [`Measurement`] stamped with `now_us`.
pub fn measurement_from_fields(values: [u64; 16], now_us: u64) -> Measurement {
    let [acked, sacked, loss, delivered, rtt, minrtt, inflight, inflmax, rate, acks, cwnd, rtt8, nrtt, train, maxrtt, trainon] =
        values;
    let finite = |v: u64| if v >= INFINITY_THRESHOLD { 0 } else { v };
    let (delivered, inflmax) = (unwrap_u32_count(delivered), unwrap_u32_count(inflmax));
    Measurement {
        now_us,
        acked_bytes: acked,
        sacked_pkts: sacked,
        lost_pkts: loss % TIMEOUT_MARK,
        timeout: loss >= TIMEOUT_MARK,
        delivered_pkts: delivered,
        rtt_us: rtt,
        min_rtt_us: finite(minrtt),
        inflight_pkts: inflight,
        dp_cwnd_bytes: cwnd,
        inflight_max_pkts: inflmax,
        delivery_rate_bps: finite(rate),
        acks,
        first8_min_rtt_us: finite(rtt8),
        rtt_samples: nrtt,
        ack_train_us: train,
        max_rtt_us: finite(maxrtt),
        ack_train_unbroken: trainon != 0,
        extra_acked_milli_pkts: 0,
    }
}

/// Read a Portus report of a [`FoldProgram`] (installed with scope `sc`).
///
/// Errors: the report comes from another program (stale uid) or lacks a field.
pub fn read_measurement(report: &Report, sc: &Scope, now_us: u64) -> portus::Result<Measurement> {
    let mut values = [0u64; 16];
    for (v, name) in values.iter_mut().zip(REPORT_FIELDS) {
        if TRAIN_FIELDS.contains(&name) && sc.get(name).is_none() {
            continue; // a program without HyStart's ACK train (one that grows toward a cap)
        }
        *v = report.get_field(name, sc)?;
    }
    let mut m = measurement_from_fields(values, now_us);
    if sc.get(EXTRA_ACKED_FIELD).is_some() {
        m.extra_acked_milli_pkts = report.get_field(EXTRA_ACKED_FIELD, sc)?;
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn programs() -> Vec<FoldProgram> {
        let p = |cadence, urgent| FoldProgram { name: "t", cadence, urgent_on_loss: urgent, features: Features::NONE };
        vec![
            p(Cadence::PerRtt(1), true),
            p(Cadence::PerRtt(2), true),
            p(Cadence::PerAcks(10), false),
            p(Cadence::IntervalUs(30_000), true),
        ]
    }

    #[test]
    fn every_cadence_compiles_and_declares_every_report_field() {
        for prog in programs() {
            let text = prog.text();
            let (bin, sc) = portus::lang::compile(text.as_bytes(), &[]).expect("compiles");
            assert_eq!(bin.events.len(), 3, "an urgent report (loss, or timeout only) and the regular one: {text}");
            for f in REPORT_FIELDS {
                assert!(matches!(sc.get(f), Some(portus::lang::Reg::Report(..))), "{f} is not a report register");
            }
            assert!(!text.contains('#'), "no comments in fold text");
        }
        let half = programs()[1].text();
        assert!(half.contains("(/ Flow.rtt_sample_us 2)"));
        assert!(programs()[2].text().contains("(when (> Report.acks 9)"));
        assert!(!programs()[2].text().contains("Report.loss 0))\n    (report)"));
        assert!(programs()[2].text().contains(&report_when(TIMEOUT_CONDITION, "", "")), "a timeout is reported at once");
    }

    #[test]
    fn the_timeout_condition_is_the_timeout_mark() {
        assert_eq!(TIMEOUT_CONDITION, format!("(> Report.loss {})", TIMEOUT_MARK - 1));
    }

    #[test]
    fn a_report_floor_bounds_the_regular_condition_only() {
        let [rtt1, rtt2, acks, interval] = programs().try_into().expect("four programs");
        for prog in [rtt1, rtt2, acks, interval] {
            assert_eq!(prog.text_with_report_floor(0), prog.text(), "floor 0: the program without a floor");
            let text = prog.text_with_report_floor(5_000);
            portus::lang::compile(text.as_bytes(), &[]).expect("compiles with a floor");
            let urgent = if prog.urgent_on_loss { URGENT_CONDITION } else { TIMEOUT_CONDITION };
            assert!(text.contains(&report_when(urgent, "", "")), "urgent reports are not held back");
        }
        let floored = rtt2.text_with_report_floor(5_000);
        assert!(floored.contains("(when (> Micros (max reportIntervalUs 5000))\n    (report)"), "{floored}");
        assert!(floored.contains("(/ Flow.rtt_sample_us 2)"), "the per-RTT interval is still computed");
        assert!(interval.text_with_report_floor(5_000).contains("(when (> Micros 30000)"), "above the floor: kept");
        assert!(interval.text_with_report_floor(50_000).contains("(when (> Micros 50000)"), "below: raised");
        assert_eq!(acks.text_with_report_floor(5_000), acks.text(), "a per-ACK cadence has no time to floor");
    }

    #[test]
    fn ccp_kernels_wrapped_packets_acked_is_taken_modulo_2_pow_32() {
        // As seen on ccp-kernel 6.12: inflmax 4294967435 and delivered 2^32 + 34 in one recovery report.
        let mut f = [0u64; 16];
        f[3] = (1u64 << 32) + 34;
        f[6] = 98;
        f[7] = 4_294_967_435;
        let m = measurement_from_fields(f, 0);
        assert_eq!((m.delivered_pkts, m.inflight_max_pkts, m.inflight_pkts), (34, 139, 98));
        // Two wrapped ACKs in one sum, and ordinary values, come out as the true counts.
        f[3] = (2u64 << 32) + 7;
        f[7] = 152;
        let m = measurement_from_fields(f, 0);
        assert_eq!((m.delivered_pkts, m.inflight_max_pkts), (7, 152));
    }

    #[test]
    fn infinite_minrtt_means_no_sample() {
        let m = measurement_from_fields([1, 2, 3 + TIMEOUT_MARK, 4, 5, u64::MAX, 7, 8, 10, 11, 12, u64::MAX, 14, 15, 16, 1], 13);
        assert!(m.ack_train_unbroken);
        assert_eq!(m.min_rtt_us, 0);
        assert_eq!((m.first8_min_rtt_us, m.rtt_samples, m.ack_train_us, m.max_rtt_us), (0, 14, 15, 16));
        assert!(m.timeout);
        assert_eq!((m.acked_bytes, m.sacked_pkts, m.lost_pkts, m.delivered_pkts), (1, 2, 3, 4));
        assert_eq!((m.rtt_us, m.inflight_pkts, m.inflight_max_pkts), (5, 7, 8));
        assert_eq!((m.delivery_rate_bps, m.acks, m.dp_cwnd_bytes, m.now_us), (10, 11, 12, 13));
        let m = measurement_from_fields([0, 0, 0, 0, 0, 4_294_967_295, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 0);
        assert_eq!(m.min_rtt_us, 0);
        assert!(!m.timeout, "no RTO mark: no timeout");
    }
}
