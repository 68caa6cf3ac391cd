//! libccp measurement primitives from the BPF per-ACK snapshots.
//!
//! Follows ccp-kernel's `load_primitives()` (tcp_ccp.c, ccp-project): deltas
//! of cumulative socket counters since the last invocation, rates from the
//! kernel's rate sample (delivered packets over the send / ACK interval),
//! and a cwnd/rate that echo what the algorithm last requested.
//! Differences: rates use the flow's MSS (ccp-kernel multiplies by a fixed
//! MTU of 1500), ECN comes from cumulative counters rather than the last ACK
//! only, lost packets are the growth of tp->lost (every packet the kernel
//! marks lost: per ACK, by RACK's timer, by an RTO) rather than rs->losses,
//! and every snapshot is used, also one without a valid rate sample
//! (ccp-kernel skips those, and their losses with them): its RTT sample is
//! then "none" (0) and the rates keep their previous values.

use crate::wire::AckSample;

/// The libccp `struct ccp_primitives` values for one invocation
/// (units: bytes, packets, µs, bytes/s as named).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prims {
    pub bytes_acked: u32,
    pub packets_acked: u32,
    pub bytes_misordered: u32,
    pub packets_misordered: u32,
    pub ecn_bytes: u32,
    pub ecn_packets: u32,
    pub lost_pkts_sample: u32,
    pub was_timeout: bool,
    /// 0 = no sample (libccp then reads the register as +infinity).
    pub rtt_sample_us: u64,
    /// Send rate, bytes/s (kept from the previous sample when not measurable).
    pub rate_outgoing: u64,
    /// Delivery (ACK) rate, bytes/s (kept from the previous sample when not measurable).
    pub rate_incoming: u64,
    pub bytes_in_flight: u32,
    pub packets_in_flight: u32,
    /// cwnd in bytes: the last cwnd the algorithm requested, else the kernel's.
    pub snd_cwnd: u32,
    /// Pacing rate in bytes/s the algorithm last requested, else 0.
    pub snd_rate: u64,
    /// Bytes written by the application but not yet acked (write_seq - snd_una).
    pub bytes_pending: u32,
}

/// Counter values at the last invocation, per flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Baseline {
    pub bytes_acked: u64,
    pub sacked_out: u32,
    pub ecn_bytes: u32,
    pub timeouts: u32,
    pub lost: u32,
    pub rate_outgoing: u64,
    pub rate_incoming: u64,
}

impl Baseline {
    /// Baseline at flow creation (cumulative counters as the kernel had them).
    pub fn at_start(bytes_acked: u64, lost: u32) -> Self {
        Baseline { bytes_acked, lost, ..Default::default() }
    }
}

/// Whether the kernel's rate sample is usable (ccp-kernel's test). ccp-kernel
/// skips the invocation otherwise; we invoke anyway (losses and timeouts must
/// not wait) and only treat the RTT sample as absent.
pub fn sample_valid(s: &AckSample) -> bool {
    s.delivered > 0 && s.interval_us > 0 && s.rtt_us > 0
}

/// ccp-kernel's input contract for `Flow.rtt_sample_us`: ccp-kernel invokes
/// the fold only on ACKs with a valid rate sample, so programs never see a
/// missing RTT; upstream programs copy it into reports or compare `Micros`
/// with it, and a missing one read as 4294967295 (+infinity) made nimbus
/// command a cwnd of u32::MAX bytes. This datapath invokes on every ACK (an
/// ACK without a sample can still carry losses), so a missing sample (0 in
/// `p`) becomes the last valid one (`held`, updated here), or the socket's
/// SRTT (`srtt_us`) before the first; only with neither does it stay 0,
/// which libccp turns into +infinity. bpf/fold_vm.h `fold_hold_rtt` is the
/// kernel twin (tests/fold_differential.rs compares them).
pub fn hold_rtt(p: &mut Prims, held: &mut u32, srtt_us: u32) {
    if p.rtt_sample_us != 0 {
        *held = clamp_u32(p.rtt_sample_us);
    } else {
        p.rtt_sample_us = u64::from(if *held != 0 { *held } else { srtt_us });
    }
}

/// tcp_packets_in_flight(): packets_out - (sacked_out + lost_out) + retrans_out.
pub fn packets_in_flight(s: &AckSample) -> u32 {
    s.packets_out
        .saturating_sub(s.sacked_out.saturating_add(s.lost_out))
        .saturating_add(s.retrans_out)
}

/// delivered * mss bytes over `interval_us`, in bytes/s; None if not measurable.
pub fn rate_bytes_per_sec(delivered: i32, mss: u32, interval_us: u32) -> Option<u64> {
    if delivered <= 0 || interval_us == 0 {
        return None;
    }
    Some(delivered as u64 * mss as u64 * 1_000_000 / interval_us as u64)
}

fn clamp_u32(v: u64) -> u32 {
    v.min(u32::MAX as u64) as u32
}

/// Compute the primitives for `s` and advance `base` to it.
///
/// `requested_cwnd_bytes` / `requested_rate` are what the algorithm last set
/// (None before its first set_cwnd / set_rate): libccp re-seeds its Cwnd and
/// Rate registers from these on every invocation, so reporting the kernel's
/// possibly not-yet-updated cwnd would flip updates back (docs/NOTES.md).
pub fn compute(
    base: &mut Baseline,
    s: &AckSample,
    requested_cwnd_bytes: Option<u32>,
    requested_rate: Option<u64>,
) -> Prims {
    let mss = s.mss.max(1);
    let packets_misordered = s.sacked_out.saturating_sub(base.sacked_out);
    let ecn_bytes = s.ecn_bytes.wrapping_sub(base.ecn_bytes);
    let rate_outgoing = rate_bytes_per_sec(s.delivered, mss, s.snd_interval_us).unwrap_or(base.rate_outgoing);
    let rate_incoming = rate_bytes_per_sec(s.delivered, mss, s.rcv_interval_us).unwrap_or(base.rate_incoming);
    let pif = packets_in_flight(s);
    let p = Prims {
        bytes_acked: clamp_u32(s.bytes_acked.saturating_sub(base.bytes_acked)),
        packets_acked: s.acked_sacked.saturating_sub(packets_misordered),
        bytes_misordered: packets_misordered.saturating_mul(mss),
        packets_misordered,
        ecn_bytes,
        ecn_packets: ecn_bytes / mss,
        lost_pkts_sample: s.lost.wrapping_sub(base.lost),
        was_timeout: s.timeouts != base.timeouts,
        rtt_sample_us: if sample_valid(s) { s.rtt_us as u64 } else { 0 },
        rate_outgoing,
        rate_incoming,
        bytes_in_flight: pif.saturating_mul(mss),
        packets_in_flight: pif,
        snd_cwnd: requested_cwnd_bytes.unwrap_or_else(|| s.snd_cwnd.saturating_mul(mss)),
        snd_rate: requested_rate.unwrap_or(0),
        bytes_pending: s.write_seq.wrapping_sub(s.snd_una),
    };
    *base = Baseline {
        bytes_acked: s.bytes_acked,
        sacked_out: s.sacked_out,
        ecn_bytes: s.ecn_bytes,
        timeouts: s.timeouts,
        lost: s.lost,
        rate_outgoing,
        rate_incoming,
    };
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> AckSample {
        AckSample {
            flow_id: 1,
            mss: 1000,
            bytes_acked: 50_000,
            rtt_us: 2_000,
            interval_us: 4_000,
            delivered: 10,
            snd_interval_us: 4_000,
            rcv_interval_us: 5_000,
            acked_sacked: 3,
            packets_out: 20,
            snd_cwnd: 20,
            write_seq: 100,
            snd_una: 40,
            ..Default::default()
        }
    }

    #[test]
    fn a_missing_rtt_sample_holds_the_last_valid_one() {
        let mut base = Baseline::default();
        let mut held = 0;
        let mut s = sample();
        s.rtt_us = -1;
        let mut p = compute(&mut base, &s, None, None);
        hold_rtt(&mut p, &mut held, 0);
        assert_eq!(p.rtt_sample_us, 0, "nothing measured yet: absent (libccp's +infinity)");
        let mut p = compute(&mut base, &s, None, None);
        hold_rtt(&mut p, &mut held, 1_500);
        assert_eq!(p.rtt_sample_us, 1_500, "before the first sample: SRTT");
        s.rtt_us = 2_000;
        let mut p = compute(&mut base, &s, None, None);
        hold_rtt(&mut p, &mut held, 1_500);
        assert_eq!((p.rtt_sample_us, held), (2_000, 2_000));
        s.rtt_us = -1;
        s.lost = 3;
        let mut p = compute(&mut base, &s, None, None);
        hold_rtt(&mut p, &mut held, 1_500);
        assert_eq!(p.rtt_sample_us, 2_000, "held, not SRTT");
        assert_eq!(p.lost_pkts_sample, 3, "the ACK's losses still reach the fold");
    }

    #[test]
    fn deltas_since_last_invocation() {
        let mut base = Baseline::at_start(44_000, 0);
        let p = compute(&mut base, &sample(), None, None);
        assert_eq!(p.bytes_acked, 6_000);
        assert_eq!(p.packets_acked, 3);
        assert_eq!(base.bytes_acked, 50_000);
        let mut next = sample();
        next.bytes_acked = 53_000;
        assert_eq!(compute(&mut base, &next, None, None).bytes_acked, 3_000);
    }

    #[test]
    fn rates_from_rate_sample() {
        let mut base = Baseline::default();
        let p = compute(&mut base, &sample(), None, None);
        // 10 pkts * 1000 B over 4 ms = 2.5 MB/s out; over 5 ms = 2 MB/s in
        assert_eq!(p.rate_outgoing, 2_500_000);
        assert_eq!(p.rate_incoming, 2_000_000);
        let mut no_rate = sample();
        no_rate.snd_interval_us = 0;
        no_rate.rcv_interval_us = 0;
        let q = compute(&mut base, &no_rate, None, None);
        assert_eq!((q.rate_outgoing, q.rate_incoming), (2_500_000, 2_000_000));
    }

    #[test]
    fn sacks_count_as_misordered_not_acked() {
        let mut base = Baseline::default();
        let mut s = sample();
        s.sacked_out = 2;
        s.acked_sacked = 5;
        let p = compute(&mut base, &s, None, None);
        assert_eq!(p.packets_misordered, 2);
        assert_eq!(p.bytes_misordered, 2_000);
        assert_eq!(p.packets_acked, 3);
        // sacked_out shrinking (holes filled) is not negative misordering
        s.sacked_out = 0;
        assert_eq!(compute(&mut base, &s, None, None).packets_misordered, 0);
    }

    #[test]
    fn in_flight_follows_tcp_packets_in_flight() {
        let mut s = sample();
        s.packets_out = 20;
        s.sacked_out = 3;
        s.lost_out = 2;
        s.retrans_out = 1;
        assert_eq!(packets_in_flight(&s), 16);
        let p = compute(&mut Baseline::default(), &s, None, None);
        assert_eq!(p.bytes_in_flight, 16_000);
    }

    #[test]
    fn cwnd_echoes_last_request_else_kernel() {
        let p = compute(&mut Baseline::default(), &sample(), None, None);
        assert_eq!(p.snd_cwnd, 20_000);
        assert_eq!(p.snd_rate, 0);
        let q = compute(&mut Baseline::default(), &sample(), Some(14_480), Some(1_000_000));
        assert_eq!(q.snd_cwnd, 14_480);
        assert_eq!(q.snd_rate, 1_000_000);
    }

    #[test]
    fn timeout_ecn_and_pending() {
        let mut base = Baseline::default();
        let mut s = sample();
        s.timeouts = 1;
        s.ecn_bytes = 3_000;
        s.write_seq = 5;
        s.snd_una = u32::MAX - 4; // sequence wrap: 10 bytes pending
        let p = compute(&mut base, &s, None, None);
        assert!(p.was_timeout);
        assert_eq!((p.ecn_bytes, p.ecn_packets), (3_000, 3));
        assert_eq!(p.bytes_pending, 10);
        let q = compute(&mut base, &s, None, None);
        assert!(!q.was_timeout);
        assert_eq!(q.ecn_bytes, 0);
    }

    #[test]
    fn every_lost_packet_counts_once_also_without_a_rate_sample() {
        let mut base = Baseline::at_start(0, 5);
        let mut s = sample();
        s.lost = 8; // 3 marked lost since the flow started (e.g. by RACK's timer)
        s.losses = 0; // ... none of them on this ACK's rate sample
        s.delivered = 0; // and the sample is not valid
        let p = compute(&mut base, &s, None, None);
        assert_eq!(p.lost_pkts_sample, 3);
        assert_eq!(p.rtt_sample_us, 0, "no valid sample: RTT absent");
        assert_eq!(compute(&mut base, &s, None, None).lost_pkts_sample, 0, "counted once");
        s.lost = 10;
        assert_eq!(compute(&mut base, &s, None, None).lost_pkts_sample, 2);
    }

    #[test]
    fn validity_matches_ccp_kernel() {
        assert!(sample_valid(&sample()));
        let mut s = sample();
        s.rtt_us = -1;
        assert!(!sample_valid(&s));
        let mut s = sample();
        s.delivered = 0;
        assert!(!sample_valid(&s));
    }
}
