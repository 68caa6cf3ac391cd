//! What one report of a fold program says about its flow ([`Measurement`]):
//! the per-ACK sums and extremes of [`crate::fold`]'s report fields, decoded.

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
    /// Tells whether the flow used its window (see [`super::cwnd_limited`]).
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
