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

/// A fresh in-process libccp datapath with the fold program `text` installed
/// (Portus's install message): the datapath (boxed: it must not move while a
/// Connection points into it), its outbox and the program's scope.
pub fn datapath_with_program(text: &str) -> (Box<libccp::Datapath>, Outbox, portus::lang::Scope) {
    use portus::serialize;
    let outbox = Outbox::default();
    let dp = Box::new(libccp::DatapathBuilder::default().with_ops(outbox.clone()).init().expect("libccp init"));
    let (bin, sc) = portus::lang::compile(text.as_bytes(), &[]).expect("the fold program compiles");
    let install = serialize::install::Msg {
        sid: 0,
        program_uid: sc.program_uid,
        num_events: bin.events.len() as u32,
        num_instrs: bin.instrs.len() as u32,
        instrs: bin,
    };
    send(&dp, serialize::serialize(&install).unwrap());
    (dp, outbox, sc)
}

/// One flow on `dp` (MSS `mss` bytes, initial cwnd 10 packets, congestion
/// algorithm `cong_alg`) switched to the installed program `sc`: the
/// connection and its sid (from libccp's create message in `outbox`).
pub fn start_flow<'a, T: libccp::CongestionOps>(
    dp: &'a libccp::Datapath,
    outbox: &Outbox,
    sc: &portus::lang::Scope,
    ops: T,
    mss: u32,
    cong_alg: &str,
) -> (libccp::Connection<'a, T>, u32) {
    use portus::serialize::{self, Msg};
    let info = libccp::FlowInfo::default().with_mss(mss).with_init_cwnd(10 * mss);
    let info = info.with_cong_alg(cong_alg).unwrap();
    let conn = libccp::Connection::start(dp, ops, info).expect("libccp starts the connection");
    let sid = outbox
        .0
        .lock()
        .unwrap()
        .iter()
        .find_map(|b| match Msg::from_buf(b) {
            Ok((Msg::Cr(c), _)) => Some(c.sid),
            _ => None,
        })
        .expect("libccp sent a create message");
    let change = serialize::changeprog::Msg { sid, program_uid: sc.program_uid, num_fields: 0, fields: vec![] };
    send(dp, serialize::serialize(&change).unwrap());
    (conn, sid)
}

/// User space's command as the Portus glue sends it: Cwnd (bytes) and the
/// fold registers `regs` (name, value) in one update_field message; panics if
/// the program lacks a register.
pub fn command_with_registers(
    dp: &libccp::Datapath,
    sc: &portus::lang::Scope,
    sid: u32,
    cwnd_bytes: u32,
    regs: &[(&'static str, u32)],
) {
    use portus::serialize;
    let mut fields = vec![(sc.get("Cwnd").expect("Cwnd register").clone(), u64::from(cwnd_bytes))];
    for (name, v) in regs {
        fields.push((sc.get(name).unwrap_or_else(|| panic!("{name} is a register of the program")).clone(), u64::from(*v)));
    }
    let msg = serialize::update_field::Msg { sid, num_fields: fields.len() as u8, fields };
    send(dp, serialize::serialize(&msg).unwrap());
}
