//! A flow's window bounds and start values ([`WindowParams`]), in packets,
//! and their conversion to the bytes the datapath takes.

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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A flow of 1000-byte packets, 10 to start, at most 50, no ssthresh.
    pub(crate) fn params() -> WindowParams {
        WindowParams {
            mss_bytes: 1000,
            init_cwnd_pkts: 10.0,
            init_ssthresh_pkts: f64::INFINITY,
            min_cwnd_pkts: 1.0,
            max_cwnd_pkts: 50.0,
        }
    }

    #[test]
    fn clamp_and_bytes() {
        let p = params();
        assert_eq!(p.clamp(0.2), 1.0);
        assert_eq!(p.clamp(60.0), 50.0);
        assert_eq!(p.to_bytes(2.5), 2500);
        assert_eq!(p.to_bytes(1e12), u32::MAX);
    }
}
