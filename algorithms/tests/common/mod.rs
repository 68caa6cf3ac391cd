//! Test support shared by the libccp-driven tests.

/// A libccp connection's congestion state as the datapath would hold it:
/// the last cwnd (bytes) libccp set. Rate commands are ignored (Reno and
/// Cubic only set cwnd).
pub struct Conn {
    pub cwnd: u32,
}

impl libccp::CongestionOps for Conn {
    fn set_cwnd(&mut self, cwnd: u32) {
        self.cwnd = cwnd;
    }
    fn set_rate_abs(&mut self, _rate: u32) {}
}
