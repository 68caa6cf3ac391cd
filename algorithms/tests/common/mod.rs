//! Test support shared by the libccp-driven tests.
#![allow(dead_code)] // each test binary uses part of it

use std::sync::{Arc, Mutex};

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

/// libccp's outgoing messages, collected.
#[derive(Clone, Default)]
pub struct Outbox(pub Arc<Mutex<Vec<Vec<u8>>>>);

impl libccp::DatapathOps for Outbox {
    fn send_msg(&mut self, msg: &[u8]) {
        self.0.lock().unwrap().push(msg.to_vec());
    }
}

/// Hand one Portus message to libccp; panics if libccp refuses it.
pub fn send(dp: &libccp::Datapath, mut buf: Vec<u8>) {
    dp.recv_msg(&mut buf[..]).expect("libccp accepts the message");
}
