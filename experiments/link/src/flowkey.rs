//! The flow a packet belongs to, for per-flow accounting and per-flow delay.
//!
//! Every flow of a ccplab run talks to its own receiver port (its iperf3
//! server's), so the TCP/UDP port on the receiver's side names the flow: the
//! destination port of a data packet (uplink) and the source port of an ACK
//! (downlink). The runner maps ports to flows (metadata.json `flows`).

use crate::queue::FlowKey;

const ETHERNET_HEADER_BYTES: usize = 14;
const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
const IP_PROTO_TCP: u8 = 6;
const IP_PROTO_UDP: u8 = 17;

/// Which port of a packet names its flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortSide {
    /// The destination port (data packets towards the receiver).
    Destination,
    /// The source port (ACKs coming back from the receiver).
    Source,
}

/// The TCP/UDP port on `side` of an Ethernet frame carrying IPv4, or 0 for
/// anything else (non-IPv4, other protocols, a later IP fragment, a frame
/// too short to hold the ports).
pub fn flow_key(frame: &[u8], side: PortSide) -> FlowKey {
    let Some(ip) = frame.get(ETHERNET_HEADER_BYTES..) else {
        return 0;
    };
    if frame[12..14] != ETHERTYPE_IPV4 || ip.len() < 20 || ip[0] >> 4 != 4 {
        return 0;
    }
    let protocol = ip[9];
    let fragment_offset = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff;
    if !(protocol == IP_PROTO_TCP || protocol == IP_PROTO_UDP) || fragment_offset != 0 {
        return 0;
    }
    let l4 = usize::from(ip[0] & 0x0f) * 4;
    let at = l4 + if side == PortSide::Source { 0 } else { 2 };
    match ip.get(at..at + 2) {
        Some(port) => u16::from_be_bytes([port[0], port[1]]),
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + a 20-byte IPv4 header (protocol `proto`) + ports.
    fn frame(proto: u8, sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12] = 0x08;
        let mut ip = vec![0u8; 20];
        ip[0] = 0x45;
        ip[9] = proto;
        f.extend(ip);
        f.extend(sport.to_be_bytes());
        f.extend(dport.to_be_bytes());
        f.extend([0u8; 16]);
        f
    }

    #[test]
    fn tcp_and_udp_ports_by_side() {
        let f = frame(IP_PROTO_TCP, 40000, 5202);
        assert_eq!(flow_key(&f, PortSide::Destination), 5202);
        assert_eq!(flow_key(&f, PortSide::Source), 40000);
        assert_eq!(flow_key(&frame(IP_PROTO_UDP, 1, 2), PortSide::Destination), 2);
    }

    #[test]
    fn other_frames_have_no_key() {
        assert_eq!(flow_key(&frame(1, 40000, 5202), PortSide::Destination), 0, "ICMP");
        let mut v6 = frame(IP_PROTO_TCP, 1, 2);
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(flow_key(&v6, PortSide::Destination), 0, "IPv6");
        assert_eq!(flow_key(&frame(IP_PROTO_TCP, 1, 2)[..35], PortSide::Destination), 0, "short");
        let mut later_fragment = frame(IP_PROTO_TCP, 1, 2);
        later_fragment[14 + 7] = 0x10;
        assert_eq!(flow_key(&later_fragment, PortSide::Destination), 0);
        let mut options = frame(IP_PROTO_TCP, 7, 9);
        options[14] = 0x46; // 24-byte IP header: ports 4 bytes later
        options.splice(34..34, [0u8; 4]);
        assert_eq!(flow_key(&options, PortSide::Destination), 9);
    }
}
