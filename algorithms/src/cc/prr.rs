//! Proportional Rate Reduction (RFC 6937) in fast recovery: the window per
//! report ([`Prr`]) and the constants that let the fold apply it per ACK
//! ([`FoldPrr`]).

use super::{LossGuard, Measurement, WindowParams};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
