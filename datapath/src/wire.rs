//! Byte layouts shared with `bpf/ccp.bpf.c`: ring-buffer events (kernel ->
//! daemon) and per-flow commands (daemon -> kernel, `commands` hash map).
//!
//! The C side asserts the sizes (`struct ccp_event` = 128 bytes,
//! `struct ccp_cmd` = 16 bytes); all integers are native (little) endian.

use anyhow::{bail, Result};

/// Size of `struct ccp_event` in bytes.
pub const EVENT_SIZE: usize = 128;
/// Size of `struct ccp_cmd` in bytes.
pub const COMMAND_SIZE: usize = 16;

const EV_CREATE: u32 = 1;
const EV_ACK: u32 = 2;
const EV_RELEASE: u32 = 3;

/// A flow switched to congestion control `ccp` (struct_ops `init`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowCreated {
    pub flow_id: u32,
    pub ts_ns: u64,
    /// Local IPv4 address, network byte order (as the kernel stores it).
    pub saddr: u32,
    /// Remote IPv4 address, network byte order.
    pub daddr: u32,
    /// Local port, host byte order.
    pub sport: u16,
    /// Remote port, host byte order.
    pub dport: u16,
    /// Sender MSS (tp->mss_cache), bytes.
    pub mss: u32,
    /// cwnd at init, packets.
    pub init_cwnd_pkts: u32,
    /// tp->bytes_acked at init (cumulative bytes; non-zero when a running
    /// connection switches to `ccp`).
    pub bytes_acked: u64,
}

/// Snapshot of one `cong_control` call (one ACK, or several the kernel merged).
/// Counters named "cumulative" only grow; per-ACK deltas are computed in
/// [`crate::primitives`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckSample {
    pub flow_id: u32,
    /// bpf_ktime_get_ns (CLOCK_MONOTONIC), ns.
    pub ts_ns: u64,
    /// tp->mss_cache, bytes.
    pub mss: u32,
    /// tp->bytes_acked (RFC 4898 tcpEStatsAppHCThruOctetsAcked), cumulative bytes.
    pub bytes_acked: u64,
    /// rs->rtt_us, µs; negative when the ACK gave no RTT sample.
    pub rtt_us: i64,
    /// rs->interval_us, µs (max of send and ACK intervals).
    pub interval_us: i64,
    /// rs->delivered, packets delivered over the interval.
    pub delivered: i32,
    /// rs->snd_interval_us, µs.
    pub snd_interval_us: u32,
    /// rs->rcv_interval_us, µs.
    pub rcv_interval_us: u32,
    /// rs->losses, packets newly marked lost.
    pub losses: i32,
    /// rs->acked_sacked, packets newly (s)acked.
    pub acked_sacked: u32,
    /// tp->sacked_out, packets.
    pub sacked_out: u32,
    /// tp->lost_out, packets.
    pub lost_out: u32,
    /// tp->retrans_out, packets.
    pub retrans_out: u32,
    /// tp->packets_out, packets.
    pub packets_out: u32,
    /// tp->snd_cwnd at the time of the ACK, packets.
    pub snd_cwnd: u32,
    /// tp->write_seq (sequence number), bytes.
    pub write_seq: u32,
    /// tp->snd_una (sequence number), bytes.
    pub snd_una: u32,
    /// Cumulative bytes acked by ACKs carrying ECE.
    pub ecn_bytes: u32,
    /// Cumulative entries into TCP_CA_Loss (retransmission timeouts).
    pub timeouts: u32,
    /// icsk_ca_state (0 Open, 1 Disorder, 2 CWR, 3 Recovery, 4 Loss).
    pub ca_state: u32,
    /// BPF per-flow flags (1 paced, 2 a command was applied).
    pub flags: u32,
    /// sk->sk_pacing_rate, bytes/s.
    pub pacing_rate: u64,
}

/// One ring-buffer record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Created(FlowCreated),
    Ack(AckSample),
    Released { flow_id: u32, ts_ns: u64 },
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_ne_bytes(b[off..off + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(b[off..off + 4].try_into().unwrap())
}
fn i32_at(b: &[u8], off: usize) -> i32 {
    i32::from_ne_bytes(b[off..off + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().unwrap())
}
fn i64_at(b: &[u8], off: usize) -> i64 {
    i64::from_ne_bytes(b[off..off + 8].try_into().unwrap())
}

/// Decode one `struct ccp_event` record.
///
/// Errors: a record shorter than [`EVENT_SIZE`] or with an unknown kind.
pub fn decode_event(b: &[u8]) -> Result<Event> {
    if b.len() < EVENT_SIZE {
        bail!("ring-buffer record is {} bytes, expected {EVENT_SIZE}", b.len());
    }
    let kind = u32_at(b, 0);
    let flow_id = u32_at(b, 4);
    let ts_ns = u64_at(b, 8);
    Ok(match kind {
        EV_CREATE => Event::Created(FlowCreated {
            flow_id,
            ts_ns,
            saddr: u32_at(b, 16),
            daddr: u32_at(b, 20),
            sport: u16_at(b, 24),
            dport: u16_at(b, 26),
            mss: u32_at(b, 28),
            init_cwnd_pkts: u32_at(b, 92),
            bytes_acked: u64_at(b, 32),
        }),
        EV_ACK => Event::Ack(AckSample {
            flow_id,
            ts_ns,
            mss: u32_at(b, 28),
            bytes_acked: u64_at(b, 32),
            rtt_us: i64_at(b, 40),
            interval_us: i64_at(b, 48),
            delivered: i32_at(b, 56),
            snd_interval_us: u32_at(b, 60),
            rcv_interval_us: u32_at(b, 64),
            losses: i32_at(b, 68),
            acked_sacked: u32_at(b, 72),
            sacked_out: u32_at(b, 76),
            lost_out: u32_at(b, 80),
            retrans_out: u32_at(b, 84),
            packets_out: u32_at(b, 88),
            snd_cwnd: u32_at(b, 92),
            write_seq: u32_at(b, 96),
            snd_una: u32_at(b, 100),
            ecn_bytes: u32_at(b, 104),
            timeouts: u32_at(b, 108),
            ca_state: u32_at(b, 112),
            flags: u32_at(b, 116),
            pacing_rate: u64_at(b, 120),
        }),
        EV_RELEASE => Event::Released { flow_id, ts_ns },
        other => bail!("ring-buffer record has unknown kind {other}"),
    })
}

/// What the daemon asks the kernel to apply to one flow on its next ACK.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Command {
    /// Congestion window in bytes (converted to packets by the BPF side with
    /// the flow's MSS, at least 1 packet); 0 leaves cwnd unchanged.
    pub cwnd_bytes: u32,
    /// Pacing rate in bytes/s (TCP-internal pacing); 0 disables pacing.
    pub rate_bytes_per_sec: u64,
}

impl Command {
    /// Encode as `struct ccp_cmd` for a map update.
    pub fn to_bytes(self) -> [u8; COMMAND_SIZE] {
        let mut b = [0u8; COMMAND_SIZE];
        b[0..4].copy_from_slice(&self.cwnd_bytes.to_ne_bytes());
        b[8..16].copy_from_slice(&self.rate_bytes_per_sec.to_ne_bytes());
        b
    }

    /// Decode a `struct ccp_cmd` (e.g. read back from the map).
    #[cfg(test)]
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        if b.len() != COMMAND_SIZE {
            bail!("command value is {} bytes, expected {COMMAND_SIZE}", b.len());
        }
        Ok(Command {
            cwnd_bytes: u32_at(b, 0),
            rate_bytes_per_sec: u64_at(b, 8),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, flow_id: u32) -> Vec<u8> {
        let mut b = vec![0u8; EVENT_SIZE];
        b[0..4].copy_from_slice(&kind.to_ne_bytes());
        b[4..8].copy_from_slice(&flow_id.to_ne_bytes());
        b[8..16].copy_from_slice(&77u64.to_ne_bytes());
        b
    }

    #[test]
    fn decodes_create_fields_at_c_offsets() {
        let mut b = record(EV_CREATE, 9);
        b[16..20].copy_from_slice(&0x0100_007fu32.to_ne_bytes());
        b[24..26].copy_from_slice(&5201u16.to_ne_bytes());
        b[26..28].copy_from_slice(&40000u16.to_ne_bytes());
        b[28..32].copy_from_slice(&1448u32.to_ne_bytes());
        b[92..96].copy_from_slice(&10u32.to_ne_bytes());
        match decode_event(&b).unwrap() {
            Event::Created(c) => {
                assert_eq!(c.flow_id, 9);
                assert_eq!(c.ts_ns, 77);
                assert_eq!(c.saddr, 0x0100_007f);
                assert_eq!((c.sport, c.dport), (5201, 40000));
                assert_eq!(c.mss, 1448);
                assert_eq!(c.init_cwnd_pkts, 10);
            }
            other => panic!("decoded {other:?}"),
        }
    }

    #[test]
    fn decodes_ack_signed_fields() {
        let mut b = record(EV_ACK, 3);
        b[32..40].copy_from_slice(&123_456u64.to_ne_bytes());
        b[40..48].copy_from_slice(&(-1i64).to_ne_bytes());
        b[68..72].copy_from_slice(&(2i32).to_ne_bytes());
        b[120..128].copy_from_slice(&u64::MAX.to_ne_bytes());
        let Event::Ack(a) = decode_event(&b).unwrap() else { panic!("not an ack") };
        assert_eq!(a.bytes_acked, 123_456);
        assert_eq!(a.rtt_us, -1);
        assert_eq!(a.losses, 2);
        assert_eq!(a.pacing_rate, u64::MAX);
    }

    #[test]
    fn rejects_short_and_unknown_records() {
        assert!(decode_event(&[0u8; 12]).is_err());
        assert!(decode_event(&record(42, 1)).is_err());
        assert_eq!(
            decode_event(&record(EV_RELEASE, 5)).unwrap(),
            Event::Released { flow_id: 5, ts_ns: 77 }
        );
    }

    #[test]
    fn command_round_trips_with_c_layout() {
        let c = Command { cwnd_bytes: 14480, rate_bytes_per_sec: 1_250_000 };
        let b = c.to_bytes();
        assert_eq!(&b[0..4], &14480u32.to_ne_bytes());
        assert_eq!(&b[4..8], &[0, 0, 0, 0]);
        assert_eq!(&b[8..16], &1_250_000u64.to_ne_bytes());
        assert_eq!(Command::from_bytes(&b).unwrap(), c);
        assert!(Command::from_bytes(&b[..8]).is_err());
    }
}
