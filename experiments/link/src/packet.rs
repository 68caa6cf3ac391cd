//! The frame the cells carry: an Ethernet frame and its logical time.
//!
//! The cells' logic ([`LinkCore`](crate::cell::LinkCore),
//! [`DelayLine`](crate::delay::DelayLine),
//! [`FlowDelays`](crate::flowdelay::FlowDelays)) needs only the bytes and a
//! timestamp, so it is written against [`Packet`]. The direct datapath
//! carries [`StdPacket`]; the rattan paths (feature `rattan`) carry
//! rattan-core's `StdPacket`, which implements [`Packet`] too. The contract
//! is rattan's: a packet's timestamp is its logical arrival at a cell and,
//! when it leaves, its logical departure.

use tokio::time::Instant;

const ETHERNET_HEADER_BYTES: usize = 14;
const IPV4_MIN_HEADER_BYTES: usize = 20;

/// What the cells need of a frame.
pub trait Packet: Send + 'static {
    /// The whole frame (Ethernet header first).
    fn as_slice(&self) -> &[u8];
    /// The whole frame, writable (readdressing before a send).
    fn as_raw_buffer(&mut self) -> &mut [u8];
    /// The logical time the packet reached the cell holding it.
    fn get_timestamp(&self) -> Instant;
    /// Sets the logical time the packet left its cell.
    fn delay_until(&mut self, at: Instant);

    /// The IPv4 total length field (bytes) of a frame whose payload after
    /// the 14-byte Ethernet header parses as an IPv4 header (version 4, a
    /// header length of at least 20 bytes, all of it present), None
    /// otherwise. The ethertype is not looked at, as rattan's `ip_hdr`
    /// does not.
    fn ipv4_total_len(&self) -> Option<u16> {
        ipv4_total_len(self.as_slice())
    }
}

/// See [`Packet::ipv4_total_len`].
pub fn ipv4_total_len(frame: &[u8]) -> Option<u16> {
    let ip = frame.get(ETHERNET_HEADER_BYTES..)?;
    if ip.len() < IPV4_MIN_HEADER_BYTES || ip[0] >> 4 != 4 {
        return None;
    }
    let header = usize::from(ip[0] & 0x0f) * 4;
    if header < IPV4_MIN_HEADER_BYTES || ip.len() < header {
        return None;
    }
    Some(u16::from_be_bytes([ip[2], ip[3]]))
}

/// A received frame (a copy) and its timestamp.
#[derive(Debug, Clone)]
pub struct StdPacket {
    buf: Vec<u8>,
    timestamp: Instant,
}

impl StdPacket {
    /// A copy of `frame`, timestamped now.
    pub fn from_raw_buffer(frame: &[u8]) -> Self {
        Self {
            buf: frame.to_vec(),
            timestamp: Instant::now(),
        }
    }
}

impl Packet for StdPacket {
    fn as_slice(&self) -> &[u8] {
        &self.buf
    }
    fn as_raw_buffer(&mut self) -> &mut [u8] {
        &mut self.buf
    }
    fn get_timestamp(&self) -> Instant {
        self.timestamp
    }
    fn delay_until(&mut self, at: Instant) {
        self.timestamp = at;
    }
}

#[cfg(feature = "rattan")]
impl Packet for rattan_core::cells::StdPacket {
    fn as_slice(&self) -> &[u8] {
        rattan_core::cells::Packet::as_slice(self)
    }
    fn as_raw_buffer(&mut self) -> &mut [u8] {
        rattan_core::cells::Packet::as_raw_buffer(self)
    }
    fn get_timestamp(&self) -> Instant {
        rattan_core::cells::Packet::get_timestamp(self)
    }
    fn delay_until(&mut self, at: Instant) {
        rattan_core::cells::Packet::delay_until(self, at)
    }
    fn ipv4_total_len(&self) -> Option<u16> {
        rattan_core::cells::Packet::ip_hdr(self).map(|ip| ip.total_len)
    }
}

/// A packet the rattan cells can carry: ours and rattan's trait at once.
#[cfg(feature = "rattan")]
pub trait RattanPacket: Packet + rattan_core::cells::Packet + Sync {}

#[cfg(feature = "rattan")]
impl<P: Packet + rattan_core::cells::Packet + Sync> RattanPacket for P {}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ip: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; ETHERNET_HEADER_BYTES];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(ip);
        f
    }

    fn ipv4_header(first: u8, total_len: u16) -> Vec<u8> {
        let mut ip = vec![0u8; 20];
        ip[0] = first;
        ip[2..4].copy_from_slice(&total_len.to_be_bytes());
        ip
    }

    #[test]
    fn the_total_length_of_an_ipv4_header() {
        assert_eq!(ipv4_total_len(&frame(&ipv4_header(0x45, 1500))), Some(1500));
        // options present: the header is 24 bytes
        let mut with_options = ipv4_header(0x46, 64);
        with_options.extend_from_slice(&[1, 1, 1, 0]);
        assert_eq!(ipv4_total_len(&frame(&with_options)), Some(64));
    }

    #[test]
    fn anything_else_has_no_ipv4_length() {
        assert_eq!(ipv4_total_len(&[0u8; 10]), None, "shorter than an Ethernet header");
        assert_eq!(ipv4_total_len(&frame(&[0x45; 19])), None, "truncated IPv4 header");
        assert_eq!(ipv4_total_len(&frame(&ipv4_header(0x60, 40))), None, "IPv6");
        assert_eq!(ipv4_total_len(&frame(&ipv4_header(0x44, 40))), None, "header length 16");
        assert_eq!(ipv4_total_len(&frame(&ipv4_header(0x46, 40))), None, "options cut off");
    }

    #[cfg(feature = "rattan")]
    #[test]
    fn rattan_parses_the_same_lengths() {
        use rattan_core::cells::Packet as _;
        let mut with_options = ipv4_header(0x46, 64);
        with_options.extend_from_slice(&[1, 1, 1, 0]);
        let frames = [
            frame(&ipv4_header(0x45, 1500)),
            frame(&with_options),
            vec![0u8; 10],
            frame(&[0x45; 19]),
            frame(&ipv4_header(0x60, 40)),
            frame(&ipv4_header(0x44, 40)),
            frame(&ipv4_header(0x46, 40)),
        ];
        for f in frames {
            let theirs = rattan_core::cells::StdPacket::from_raw_buffer(&f);
            assert_eq!(Packet::ipv4_total_len(&theirs), ipv4_total_len(&f), "frame {f:?}");
        }
    }
}
