//! Differential test: the in-kernel fold interpreter (`bpf/fold_vm.h`, run
//! through `bpf/fold_test.bpf.c` with BPF_PROG_TEST_RUN) against libccp 1.2
//! (the `libccp` crate, in-process), fed the same Portus messages and the
//! same ACK primitives. Every message must be accepted or refused alike
//! (with libccp's error code), and every invocation must give the same
//! return code, the same set_cwnd / set_rate calls and the same report
//! (program uid and fields).
//!
//! Programs: the fold program of every algorithm of the suite
//! (`ccp-algorithms --list-json`, `ccp-algorithms NAME --dump-program`,
//! compiled by Portus), hand-written edge cases
//! (ewma, +infinity, underflow, division by zero, wrapped_max, volatile
//! resets, Micros writes, expressions nested past libccp's 8 tmp registers)
//! and random programs written directly in libccp's wire format within its
//! limits (FOLD_DIFF_CASES cases, default 10,000; FOLD_DIFF_SEED picks the
//! seed).
//!
//! libccp reads the clock through function pointers in its datapath struct;
//! they are pointed at a test clock so both sides see the same time.
//!
//! Needs root (loading BPF) and a kernel with syscall-type BPF programs and
//! bpf_loop; fails naming what is missing. Registers no struct_ops, so it
//! needs no host lock. Links libccp, whose `log` symbol shadows libm's: no
//! f64::ln here.
//!
//! Per-instruction cost: `cargo test --release -p ccp-datapath --test
//! fold_differential -- --ignored --nocapture` (prints figures; not a timed
//! test).

use ccp_datapath::fold;
// The user-space primitives (the reference for fold_vm.h fold_prims).
use ccp_datapath::{primitives, wire};

mod fold_harness;
use fold_harness::skel;

mod common;
use common::msg::{change_msg, install_msg, read_reg_with, small_index, update_msg, write_reg, WI};
use common::suite::{portus_install, suite_programs};
use common::{edge_u64, env_u64, Rng};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fold::{
    FoldMaps, FoldMsgError, FoldProg, FoldReport, FoldStaged, FoldState, KernelFold,
    LIBCCP_MAX_PROGRAMS, MAX_SLOTS,
};
use libbpf_rs::MapCore;
use libccp::{
    CongestionOps, Connection, Datapath, DatapathBuilder, DatapathOps, FlowInfo, LibccpError,
    Primitives,
};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

// ------------------------------------------------------------ test clock

/// libccp's clock is ns; start far from 0 so Micros arithmetic never
/// depends on the origin.
const EPOCH_NS: u64 = 1_000_000_000_000;
static FAKE_NOW_NS: AtomicU64 = AtomicU64::new(EPOCH_NS);
/// The fake clock and libccp's datapath are process-wide: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

extern "C" fn fake_now() -> u64 {
    FAKE_NOW_NS.load(Ordering::Relaxed)
}

extern "C" fn fake_since_usecs(then: u64) -> u64 {
    FAKE_NOW_NS.load(Ordering::Relaxed).wrapping_sub(then) / 1000
}

extern "C" fn fake_after_usecs(us: u64) -> u64 {
    FAKE_NOW_NS
        .load(Ordering::Relaxed)
        .wrapping_add(us.wrapping_mul(1000))
}

extern "C" {
    // the libccp crate's own clock shims (unmangled), to check the layout
    fn now() -> u64;
    fn since_usecs(then: u64) -> u64;
}

// ------------------------------------------------------------ libccp side

#[derive(Clone, Default)]
struct Outbox(Arc<Mutex<Vec<Vec<u8>>>>);

impl DatapathOps for Outbox {
    fn send_msg(&mut self, msg: &[u8]) {
        self.0.lock().unwrap().push(msg.to_vec());
    }
}

impl Outbox {
    fn take(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// The set_cwnd / set_rate_abs calls of one invocation.
#[derive(Default)]
struct Calls {
    cwnd: Vec<u32>,
    rate: Vec<u32>,
}

impl CongestionOps for Calls {
    fn set_cwnd(&mut self, cwnd: u32) {
        self.cwnd.push(cwnd);
    }
    fn set_rate_abs(&mut self, rate: u32) {
        self.rate.push(rate);
    }
}

/// libccp 1.2's `struct ccp_datapath` (128 bytes on 64-bit): word offsets
/// of the fields patched here, checked against the values the crate sets.
const DP_TIME_ZERO: usize = 32;
const DP_NOW: usize = 40;
const DP_SINCE_USECS: usize = 48;
const DP_AFTER_USECS: usize = 56;
const DP_MAX_CONNECTIONS: usize = 64;
const DP_CONNECTIONS: usize = 72;
const DP_FTO_US: usize = 80;
const DP_MAX_PROGRAMS: usize = 104;
/// sizeof(struct ccp_connection) in libccp 1.2 on 64-bit.
const CONN_SIZE: usize = 216;

/// A libccp datapath on the test clock, with its connection table zeroed
/// (the crate mallocs it without zeroing; see src/fold/userspace.rs).
fn libccp_datapath(outbox: Outbox) -> &'static Datapath {
    let mut dp = DatapathBuilder::default()
        .with_ops(outbox)
        .with_id(7)
        .init()
        .expect("libccp init");
    assert_eq!(
        std::mem::size_of::<Datapath>(),
        128,
        "libccp Datapath layout changed"
    );
    let base = &mut dp as *mut Datapath as *mut u8;
    // SAFETY: Datapath wraps `struct ccp_datapath` (128 bytes, checked); we
    // own it mutably, read/write aligned words inside it after checking the
    // neighbouring fields, and zero the connection table it owns before any
    // connection exists.
    unsafe {
        let word = |off: usize| (base.add(off) as *const usize).read();
        assert!(
            word(DP_MAX_CONNECTIONS) == 1024
                && word(DP_FTO_US) == 1000
                && word(DP_MAX_PROGRAMS) == LIBCCP_MAX_PROGRAMS as usize
                && word(DP_NOW) == now as *const () as usize
                && word(DP_SINCE_USECS) == since_usecs as *const () as usize,
            "unexpected libccp ccp_datapath layout: cannot put it on the test clock"
        );
        let put = |off: usize, v: usize| (base.add(off) as *mut usize).write(v);
        put(DP_NOW, fake_now as *const () as usize);
        put(DP_SINCE_USECS, fake_since_usecs as *const () as usize);
        put(DP_AFTER_USECS, fake_after_usecs as *const () as usize);
        put(DP_TIME_ZERO, EPOCH_NS as usize);
        let table = word(DP_CONNECTIONS) as *mut u8;
        assert!(
            !table.is_null()
                && libc::malloc_usable_size(table as *mut libc::c_void) >= 1024 * CONN_SIZE
        );
        std::ptr::write_bytes(table, 0, 1024 * CONN_SIZE);
    }
    // Connections point into the Datapath: it must never move again.
    Box::leak(Box::new(dp))
}

/// libccp's error code (ccp_error.h) of an error the crate returns;
/// positive return codes (e.g. change to an unknown program) are `OtherError`.
fn libccp_code(e: &LibccpError) -> i32 {
    use LibccpError::*;
    match e {
        OtherError(_) => 1,
        LibccpOk => 0,
        LibccpMissingArg => -11,
        LibccpNullArg => -12,
        LibccpBufsizeNegative => -21,
        LibccpBufsizeTooSmall => -22,
        LibccpMsgTooLong => -23,
        LibccpWriteInvalidHeaderType => -31,
        LibccpReadInvalidHeaderType => -32,
        LibccpReadInvalidOp => -33,
        LibccpReadRegNotAllowed => -34,
        LibccpReadInvalidReturnReg => -35,
        LibccpReadInvalidLeftReg => -36,
        LibccpReadInvalidRightReg => -37,
        LibccpInstallTypeMismatch => -41,
        LibccpInstallTooManyExpr => -42,
        LibccpInstallTooManyInstr => -43,
        LibccpUpdateTypeMismatch => -51,
        LibccpUpdateTooMany => -52,
        LibccpUpdateInvalidRegType => -53,
        LibccpChangeTypeMismatch => -61,
        LibccpChangeTooMany => -62,
        LibccpUnknownConnection => -71,
        LibccpCreatePending => -72,
        LibccpConnectionNotInitialized => -73,
        LibccpProgTableFull => -81,
        LibccpProgNotFound => -82,
        LibccpAddIntOverflow => -91,
        LibccpDivByZero => -92,
        LibccpMulIntOverflow => -93,
        LibccpSubIntUnderflow => -94,
        LibccpPrivIsNull => -95,
        LibccpProgIsNull => -96,
        LibccpFallbackTimedOut => -101,
    }
}

// ------------------------------------------------------------ kernel side

/// `struct fold_test_in` (bpf/fold_test.bpf.c).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, IntoBytes, Immutable)]
struct TestIn {
    flow: u32,
    repeat: u32,
    now_ns: u64,
    dp_time_zero_ns: u64,
    snd_rate: u64,
    snd_cwnd: u32,
    sid: u32,
    prims: [u64; 15],
}

/// `struct fold_test_out`.
#[repr(C)]
#[derive(Clone, Debug, FromBytes, Immutable, KnownLayout)]
struct TestOut {
    ret: i32,
    n_cwnd: u32,
    cwnd: [u32; 2],
    n_rate: u32,
    rate: [u32; 2],
    report: u32,
    report_uid: u32,
    n_fields: u32,
    steps: u32,
    _pad: u32,
    elapsed_ns: u64,
    report_record: FoldReport,
}

const _: () = assert!(std::mem::size_of::<TestIn>() == 160);
const _: () = assert!(std::mem::size_of::<TestOut>() == 56 + std::mem::size_of::<FoldReport>());

/// The BPF harness, loaded once per test.
struct Kernel {
    skel: skel::FoldTestSkel<'static>,
}

/// KernelFold's map writes on the harness: programs into `fold_progs`,
/// staging through fold_ccp.h's `fold_stage` syscall program (the production
/// merge under the lock), flows found by socket id.
struct HarnessMaps<'a> {
    k: &'a Kernel,
    flows: &'a [(u32, u32)],
}

impl FoldMaps for HarnessMaps<'_> {
    fn write_program(&mut self, slot: u32, prog: &FoldProg) -> Result<(), String> {
        assert!(slot < MAX_SLOTS, "program slot {slot} outside the map");
        Kernel::put(&self.k.skel.maps.fold_progs, slot, prog.as_bytes());
        Ok(())
    }

    fn stage(&mut self, sid: u32, delta: &FoldStaged) -> Result<(), String> {
        let flow = Sim::flow_of(self.flows, sid)
            .ok_or_else(|| format!("staged updates for unknown sid {sid}"))?;
        // struct fold_stage_in (fold_ccp.h): the delta, then the flow
        let mut ctx = delta.as_bytes().to_vec();
        ctx.extend_from_slice(&flow.to_ne_bytes());
        ctx.extend_from_slice(&[0; 4]);
        let rc = fold_harness::run_on(&self.k.skel.progs.fold_stage, &mut ctx, "fold_stage");
        if rc != 0 {
            return Err(format!("fold_stage returned {}", rc as i32));
        }
        Ok(())
    }
}

impl Kernel {
    fn load() -> Kernel {
        Kernel { skel: fold_harness::load("the fold differential test") }
    }

    fn put<M: MapCore>(map: &M, key: u32, val: &[u8]) {
        fold_harness::write(map, key, val)
    }

    fn reset_flow(&mut self, flow: u32) {
        let mut st = Box::new(FoldState::new_zeroed());
        st.regs[fold::OFF_TIME_ZERO as usize] = EPOCH_NS; // libccp: implicit_time_zero = datapath time_zero
        Self::put(&self.skel.maps.fold_states, flow, st.as_bytes());
        // nothing staged: no entry (fold_stage creates it)
        let _ = self.skel.maps.fold_staged.delete(&flow.to_ne_bytes());
    }

    fn invoke(&self, input: &TestIn) -> TestOut {
        let mut ctx = input.as_bytes().to_vec();
        let rc = fold_harness::run_on(&self.skel.progs.fold_test_invoke, &mut ctx, "fold_test_invoke");
        assert_eq!(rc, 0, "fold_test_invoke found its maps");
        let raw = fold_harness::read(&self.skel.maps.fold_out, input.flow);
        TestOut::read_from_bytes(&raw[..]).expect("fold_out layout")
    }
}

// ------------------------------------------------------------ shared driver

/// The 15 primitives in libccp's register order (ccp_priv.h).
#[derive(Clone, Copy, Debug, Default)]
struct Prims {
    v: [u64; 15],
    snd_cwnd: u32,
    snd_rate: u64,
}

const P_BYTES_ACKED: usize = 0;
const P_BYTES_MISORDERED: usize = 1;
const P_ECN_BYTES: usize = 2;
const P_ECN_PACKETS: usize = 3;
const P_LOST: usize = 4;
const P_PACKETS_ACKED: usize = 6;
const P_PACKETS_MISORDERED: usize = 7;
const P_BYTES_IN_FLIGHT: usize = 8;
const P_BYTES_PENDING: usize = 9;
const P_PACKETS_IN_FLIGHT: usize = 10;
const P_RATE_IN: usize = 11;
const P_RATE_OUT: usize = 12;
const P_RTT: usize = 13;
const P_TIMEOUT: usize = 14;
/// Primitives held in a C u32 (the rest are u64, was_timeout a bool).
const U32_PRIMS: [usize; 10] = [0, 1, 2, 3, 4, 6, 7, 8, 9, 10];

impl Prims {
    fn as_libccp(&self) -> Primitives {
        let u = |i: usize| self.v[i] as u32;
        Primitives::default()
            .with_bytes_acked(u(P_BYTES_ACKED))
            .with_bytes_misordered(u(P_BYTES_MISORDERED))
            .with_ecn_bytes(u(P_ECN_BYTES))
            .with_ecn_packets(u(P_ECN_PACKETS))
            .with_lost_pkts_sample(u(P_LOST))
            .with_packets_acked(u(P_PACKETS_ACKED))
            .with_packets_misordered(u(P_PACKETS_MISORDERED))
            .with_bytes_in_flight(u(P_BYTES_IN_FLIGHT))
            .with_bytes_pending(u(P_BYTES_PENDING))
            .with_packets_in_flight(u(P_PACKETS_IN_FLIGHT))
            .with_rate_incoming(self.v[P_RATE_IN])
            .with_rate_outgoing(self.v[P_RATE_OUT])
            .with_rtt_sample_us(self.v[P_RTT])
            .with_was_timeout(self.v[P_TIMEOUT] != 0)
            .with_snd_cwnd(self.snd_cwnd)
            .with_snd_rate(self.snd_rate)
    }
}

/// What one invocation did, on either side.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    ret: i32,
    cwnd: Vec<u32>,
    rate: Vec<u32>,
    /// (program uid, fields)
    report: Option<(u32, Vec<u64>)>,
}

struct Flow {
    conn: Connection<'static, Calls>,
    sid: u32,
    idx: u32,
    /// The cwnd / rate the datapath would report back (last set).
    cwnd: u32,
    rate: u64,
}

#[derive(Default, Debug)]
struct Tally {
    invokes: u64,
    aborts: u64,
    reports: u64,
    cwnd_calls: u64,
    messages: u64,
    refused: u64,
    no_program: u64,
}

/// libccp and the BPF interpreter side by side.
struct Sim {
    _serial: MutexGuard<'static, ()>,
    dp: &'static Datapath,
    outbox: Outbox,
    k: Kernel,
    kf: KernelFold,
    flows: Vec<(u32, u32)>, // (sid, kernel flow index)
    tally: Tally,
}

impl Sim {
    fn new() -> Sim {
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let k = Kernel::load();
        // each test starts its own libccp datapath at the same time: cases replay exactly
        FAKE_NOW_NS.store(EPOCH_NS, Ordering::Relaxed);
        let outbox = Outbox::default();
        let dp = libccp_datapath(outbox.clone());
        assert_eq!(
            outbox.take(),
            vec![fold::ready_msg(7)],
            "ready message as libccp's"
        );
        Sim {
            _serial: serial,
            dp,
            outbox,
            k,
            kf: KernelFold::default(),
            flows: vec![],
            tally: Tally::default(),
        }
    }

    fn flow_of(flows: &[(u32, u32)], sid: u32) -> Option<u32> {
        flows.iter().find(|(s, _)| *s == sid).map(|(_, i)| *i)
    }

    /// Send one Portus message to both sides; they must agree on it.
    fn send(&mut self, msg: &[u8], ctx: &dyn Fn() -> String) {
        let mut copy = msg.to_vec();
        let lib = self.dp.recv_msg(&mut copy[..]);
        let mut maps = HarnessMaps {
            k: &self.k,
            flows: &self.flows,
        };
        let ours = self.kf.on_portus_msg(msg, &mut maps);
        self.tally.messages += 1;
        match (&lib, &ours) {
            (Ok(()), Ok(())) => {}
            (Err(le), Err(FoldMsgError::Libccp { code, what })) => {
                assert_eq!(
                    libccp_code(le),
                    *code,
                    "{}: libccp {le:?}, kernel side {what}",
                    ctx()
                );
                self.tally.refused += 1;
            }
            (Err(le), Err(FoldMsgError::NoEffect(_))) if libccp_code(le) > 0 => {
                self.tally.refused += 1
            }
            _ => panic!(
                "{}: message {:?}: libccp {:?}, kernel side {:?}",
                ctx(),
                msg,
                lib,
                ours
            ),
        }
    }

    fn start_flow(&mut self, idx: u32, init_cwnd: u32) -> Flow {
        // libccp keeps a freed connection slot's last create time and holds
        // a new create back for 100 ms after it: let that pass.
        FAKE_NOW_NS.fetch_add(200_000_000, Ordering::Relaxed);
        let info = FlowInfo::default()
            .with_mss(1448)
            .with_init_cwnd(init_cwnd)
            .with_cong_alg("fold-diff")
            .unwrap();
        let conn = Connection::start(self.dp, Calls::default(), info).expect("libccp connection");
        let sent = self.outbox.take();
        let create = sent
            .iter()
            .find(|m| m.len() >= 8 && m[0] == 0)
            .expect("libccp sent a create message");
        let sid = u32::from_le_bytes(create[4..8].try_into().unwrap());
        let ours = self
            .kf
            .flow_created(sid, init_cwnd, 1448, (0, 0), (0, 0), "fold-diff")
            .unwrap();
        assert_eq!(create, &ours, "create message as libccp's");
        self.k.reset_flow(idx);
        self.flows.push((sid, idx));
        Flow {
            conn,
            sid,
            idx,
            cwnd: init_cwnd,
            rate: 0,
        }
    }

    fn end_flow(&mut self, f: Flow) {
        self.flows.retain(|(s, _)| *s != f.sid);
        let close = self.kf.flow_released(f.sid);
        drop(f.conn);
        assert_eq!(self.outbox.take(), vec![close], "close message as libccp's");
    }

    /// One ACK on both sides at `now_ns`; they must do the same.
    fn invoke(
        &mut self,
        f: &mut Flow,
        p: &Prims,
        now_ns: u64,
        ctx: &dyn Fn() -> String,
    ) -> Outcome {
        FAKE_NOW_NS.store(now_ns, Ordering::Relaxed);
        f.conn.load_primitives(p.as_libccp());
        let ret = f.conn.invoke().err().map_or(0, |e| libccp_code(&e));
        let calls = std::mem::take(&mut *f.conn);
        let raw_reports: Vec<Vec<u8>> = self
            .outbox
            .take()
            .into_iter()
            .filter(|m| m[0] == 1 && u32::from_le_bytes(m[4..8].try_into().unwrap()) == f.sid)
            .collect();
        let reports: Vec<(u32, Vec<u64>)> = raw_reports.iter().map(|m| parse_measure(m)).collect();
        assert!(
            reports.len() <= 1,
            "{}: libccp sent {} reports in one invocation",
            ctx(),
            reports.len()
        );
        let lib = Outcome {
            ret,
            cwnd: calls.cwnd,
            rate: calls.rate,
            report: reports.into_iter().next(),
        };

        let mut input = TestIn {
            flow: f.idx,
            now_ns,
            dp_time_zero_ns: EPOCH_NS,
            snd_rate: p.snd_rate,
            snd_cwnd: p.snd_cwnd,
            prims: p.v,
            sid: f.sid,
            ..Default::default()
        };
        input.prims[5] = 0; // Ack.now: computed from the clock on both sides
        let o = self.k.invoke(&input);
        // the report as the datapath would forward it to Portus
        let our_msg = (o.report != 0).then(|| {
            let (flow, msg) = self
                .kf
                .report_msg(o.report_record.as_bytes())
                .expect("report record");
            assert_eq!(flow, f.sid, "report record names the flow");
            msg
        });
        let ours = Outcome {
            ret: o.ret,
            cwnd: o.cwnd[..o.n_cwnd.min(2) as usize].to_vec(),
            rate: o.rate[..o.n_rate.min(2) as usize].to_vec(),
            report: our_msg.as_deref().map(parse_measure),
        };
        assert_eq!(
            lib,
            ours,
            "{}: prims {p:?} at {now_ns} ns: libccp (left) vs BPF interpreter (right)",
            ctx()
        );
        assert_eq!(
            raw_reports.first(),
            our_msg.as_ref(),
            "{}: report message bytes",
            ctx()
        );
        self.tally.invokes += 1;
        self.tally.aborts += u64::from((-94..=-91).contains(&ret));
        self.tally.no_program += u64::from(ret == -96);
        self.tally.reports += u64::from(lib.report.is_some());
        self.tally.cwnd_calls += lib.cwnd.len() as u64;
        if let Some(&c) = lib.cwnd.last() {
            f.cwnd = c;
        }
        if let Some(&r) = lib.rate.last() {
            f.rate = u64::from(r);
        }
        lib
    }
}

// ------------------------------------------------------------ messages

/// (program uid, fields) of a measure message.
fn parse_measure(m: &[u8]) -> (u32, Vec<u64>) {
    let n = u32::from_le_bytes(m[12..16].try_into().unwrap()) as usize;
    let fields = (0..n)
        .map(|i| u64::from_le_bytes(m[16 + 8 * i..24 + 8 * i].try_into().unwrap()))
        .collect();
    (u32::from_le_bytes(m[8..12].try_into().unwrap()), fields)
}

// ------------------------------------------------------------ randomness

fn edge_u32(r: &mut Rng) -> u64 {
    edge_u64(r) & u64::from(u32::MAX)
}

fn random_prims(r: &mut Rng, f: &Flow) -> Prims {
    let mut p = Prims::default();
    for i in 0..15 {
        p.v[i] = if U32_PRIMS.contains(&i) {
            edge_u32(r)
        } else {
            edge_u64(r)
        };
    }
    p.v[P_TIMEOUT] = u64::from(r.chance(10));
    p.snd_cwnd = if r.chance(80) {
        f.cwnd
    } else {
        edge_u32(r) as u32
    };
    p.snd_rate = if r.chance(80) { f.rate } else { edge_u64(r) };
    p
}

/// An ACK as a running flow sees it (for the suite's fold programs).
fn ack_prims(r: &mut Rng, f: &Flow, acks: u64) -> Prims {
    let mut p = Prims::default();
    let pkts = 1 + r.below(3);
    p.v[P_BYTES_ACKED] = 1448 * pkts;
    p.v[P_PACKETS_ACKED] = pkts;
    p.v[P_PACKETS_MISORDERED] = u64::from(r.chance(5)) * r.below(4);
    p.v[P_BYTES_MISORDERED] = 1448 * p.v[P_PACKETS_MISORDERED];
    p.v[P_LOST] = if r.chance(3) { 1 + r.below(3) } else { 0 };
    p.v[P_ECN_PACKETS] = u64::from(r.chance(2));
    p.v[P_ECN_BYTES] = 1448 * p.v[P_ECN_PACKETS];
    p.v[P_RTT] = if r.chance(30) {
        0
    } else {
        20_000 + r.below(10_000) + acks % 7
    };
    p.v[P_TIMEOUT] = u64::from(r.chance(1));
    p.v[P_PACKETS_IN_FLIGHT] = u64::from(f.cwnd / 1448);
    p.v[P_BYTES_IN_FLIGHT] = u64::from(f.cwnd);
    p.v[P_RATE_IN] = r.below(3_000_000);
    p.v[P_RATE_OUT] = r.below(3_000_000);
    p.v[P_BYTES_PENDING] = r.below(100_000);
    p.snd_cwnd = f.cwnd;
    p.snd_rate = f.rate;
    p
}

const OPS: [u8; 14] = [0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14];

fn imm(r: &mut Rng) -> (u8, u32) {
    let v = match r.below(6) {
        0 => r.pick(&[0, 1, 2, 3, 9, 10, 11, 1448]),
        1 => r.pick(&[0x3fff_ffff, u32::MAX, (1 << 31) - 1, 1 << 31]),
        2 => r.below(u64::from(u32::MAX)) as u32,
        _ => r.below(100) as u32,
    };
    (1, v)
}

/// A random operand to read, its immediates from [`imm`].
fn read_reg(r: &mut Rng) -> (u8, u32) {
    read_reg_with(r, imm)
}

fn random_instr(r: &mut Rng) -> WI {
    let op = if r.chance(2) { 2 } else { r.pick(&OPS) };
    WI {
        op,
        ret: write_reg(r),
        left: read_reg(r),
        right: read_reg(r),
    }
}

/// A random program in libccp's wire format within its limits: DEFs, then
/// 1-4 expressions laid out as Portus does (condition then body).
fn random_program(r: &mut Rng, uid: u32) -> Vec<u8> {
    let mut instrs = vec![];
    for _ in 0..r.below(6) {
        let reg = (r.pick(&[5, 6, 0, 8]), small_index(r, 6));
        let right = if r.chance(5) { (0, 1) } else { imm(r) };
        instrs.push(WI {
            op: 2,
            ret: reg,
            left: reg,
            right,
        });
    }
    let mut exprs = vec![];
    for _ in 0..1 + r.below(4) {
        let cond_start = instrs.len() as u32;
        let n_cond = 1 + r.below(3);
        for i in 0..n_cond {
            let mut ins = random_instr(r);
            if i + 1 == n_cond && r.chance(75) {
                ins.ret = (2, 0); // the expression flag
                if r.chance(30) {
                    ins = WI {
                        op: 1,
                        ret: (2, 0),
                        left: (2, 0),
                        right: (1, u32::from(r.chance(70))),
                    };
                }
            }
            instrs.push(ins);
        }
        let body_start = instrs.len() as u32;
        for _ in 0..r.below(7) {
            let ins = match r.below(10) {
                0 => WI {
                    op: 1,
                    ret: (2, 2),
                    left: (2, 2),
                    right: (1, 1),
                }, // (report)
                1 => WI {
                    op: 1,
                    ret: (2, 1),
                    left: (2, 1),
                    right: (1, 1),
                }, // (fallthrough)
                _ => random_instr(r),
            };
            instrs.push(ins);
        }
        let n_body = instrs.len() as u32 - body_start;
        let mut e = [cond_start, n_cond as u32, body_start, n_body];
        if r.chance(2) {
            e[2] = instrs.len() as u32 + r.below(4) as u32; // past the program: zeroed slot instructions
        }
        exprs.push(e);
    }
    install_msg(uid, &exprs, &instrs)
}

/// A body instruction shaped like what the compiler (src/fold/compile.rs, src/fold/optimise.rs) rewrites:
/// `OP tmp a b; BIND d tmp` and `OP tmp a b; IF d tmp v` pairs (aborting
/// ops, IF/NOTIF, tmps past
/// libccp's 8, Micros or the implicit registers as `d`), verbatim repeats
/// of an earlier instruction (recomputations, sometimes after one of its
/// inputs changed), reads of tmps and of the flag / fallthrough registers
/// into reports (what a wrong fusion, dropped repeat or dropped implicit
/// write would change), `(fallthrough)`, `(report)` and writes of 0/1 to
/// the implicit registers.
fn shaped_body_instrs(r: &mut Rng, out: &mut Vec<WI>, section_start: usize) {
    let tmp = |r: &mut Rng| (7u8, if r.chance(10) { 8 + r.below(8) as u32 } else { r.below(4) as u32 });
    match r.below(100) {
        0..=34 => {
            let t = tmp(r);
            out.push(WI {
                op: r.pick(&OPS),
                ret: t,
                left: read_reg(r),
                right: read_reg(r),
            });
            let d = match r.below(10) {
                0 => (2, r.pick(&[0, 1, 3])), // flag, fallthrough, Micros
                1 => t,
                _ => write_reg(r),
            };
            // BIND d t, or IF / NOTIF d t v
            out.push(match r.below(10) {
                0..=5 => WI {
                    op: 1,
                    ret: d,
                    left: d,
                    right: t,
                },
                _ => {
                    let other = match r.below(10) {
                        0 | 1 => t,
                        2..=4 => (2, r.pick(&[0, 1])),
                        _ => read_reg(r),
                    };
                    // the result as the condition or as the value
                    let (left, right) = if r.chance(50) { (t, other) } else { (other, t) };
                    WI {
                        op: r.pick(&[7, 7, 7, 13]),
                        ret: d,
                        left,
                        right,
                    }
                }
            });
        }
        35..=49 if out.len() > section_start => {
            let k = section_start + r.below((out.len() - section_start) as u64) as usize;
            let pair = k + 1 < out.len() && r.chance(50);
            if r.chance(30) {
                out.push(random_instr(r)); // may write one of its inputs
            } else if pair && matches!(out[k + 1].op, 7 | 13) && r.chance(50) {
                // change what an IF reads before the pair runs again
                let v = if r.chance(50) { out[k + 1].right } else { out[k + 1].left };
                if v.0 != 1 {
                    out.push(WI {
                        op: 1,
                        ret: v,
                        left: v,
                        right: imm(r),
                    });
                }
            }
            out.push(out[k]);
            if pair {
                out.push(out[k + 1]);
            }
        }
        50..=61 => {
            let src = if r.chance(50) { tmp(r) } else { (2, r.pick(&[0, 1, 2])) };
            out.push(WI {
                op: 1,
                ret: (5, r.below(6) as u32),
                left: (5, 0),
                right: src,
            });
        }
        62..=69 => out.push(WI {
            op: 1,
            ret: (2, 1),
            left: (2, 1),
            right: (1, 1),
        }),
        70..=74 => out.push(WI {
            op: 1,
            ret: (2, 2),
            left: (2, 2),
            right: (1, 1),
        }),
        75..=79 => {
            let reg = (2, r.pick(&[0, 1]));
            out.push(WI {
                op: 1,
                ret: reg,
                left: reg,
                right: (1, u32::from(r.chance(50))),
            })
        }
        _ => out.push(random_instr(r)),
    }
}

/// A random program in libccp's wire format shaped to hit the compiler's
/// rewrites (src/fold/compile.rs): constant-true / constant-false /
/// empty conditions (the flag left by the previous expression), conditions
/// ending in a fused pair, bodies of [`shaped_body_instrs`]; the first
/// body starts by reporting tmps and the implicit registers as the
/// previous invocation (or an abort in it) left them.
fn shaped_program(r: &mut Rng, uid: u32) -> Vec<u8> {
    let mut instrs = vec![];
    for k in 0..1 + r.below(5) as u32 {
        let reg = (r.pick(&[5, 6]), k);
        instrs.push(WI {
            op: 2,
            ret: reg,
            left: reg,
            right: (1, r.below(3) as u32),
        });
    }
    let mut exprs = vec![];
    let n_exprs = 1 + r.below(4);
    for e in 0..n_exprs {
        let cond_start = instrs.len();
        match r.below(100) {
            0..=39 => instrs.push(WI {
                op: 1,
                ret: (2, 0),
                left: (2, 0),
                right: (1, u32::from(!r.chance(10))),
            }),
            40..=49 => {} // empty: the flag as left before
            50..=69 => {
                let t = (7, r.below(3) as u32);
                instrs.push(WI {
                    op: r.pick(&[4, 6, 8, 0, 14, 12]),
                    ret: t,
                    left: read_reg(r),
                    right: read_reg(r),
                });
                instrs.push(WI {
                    op: 1,
                    ret: (2, 0),
                    left: (2, 0),
                    right: t,
                });
            }
            _ => {
                for i in 0..1 + r.below(2) {
                    let mut ins = random_instr(r);
                    if i == 0 || r.chance(70) {
                        ins.ret = (2, 0);
                    }
                    instrs.push(ins);
                }
            }
        }
        let body_start = instrs.len();
        if e == 0 {
            for (k, src) in [(7, 0), (7, 1), (2, 0), (2, 1)].into_iter().enumerate() {
                if r.chance(60) {
                    instrs.push(WI {
                        op: 1,
                        ret: (5, k as u32),
                        left: (5, k as u32),
                        right: src,
                    });
                }
            }
        }
        for _ in 0..r.below(9) {
            shaped_body_instrs(r, &mut instrs, body_start);
        }
        if e + 1 == n_exprs && r.chance(60) {
            instrs.push(WI {
                op: 1,
                ret: (2, 2),
                left: (2, 2),
                right: (1, 1),
            });
        }
        exprs.push([
            cond_start as u32,
            (body_start - cond_start) as u32,
            body_start as u32,
            (instrs.len() - body_start) as u32,
        ]);
    }
    install_msg(uid, &exprs, &instrs)
}

/// How often the compiler's rewrites fired on a set of install messages:
/// (fused pairs, fused JZs, programs shorter than the plain layout of
/// condition + JZ + body + BRK per expression, fused IFs among the pairs).
fn rewrites_fired(installs: &[Vec<u8>]) -> (u64, u64, u64, u64) {
    let mut t = (0, 0, 0, 0);
    for m in installs {
        let Ok(fold::PortusMsg::Install {
            uid,
            exprs,
            instrs,
            num_instructions,
            error: None,
        }) = fold::parse_message(m)
        else {
            continue;
        };
        let Ok(p) = fold::compile(1, uid, &exprs, &instrs, num_instructions) else {
            continue;
        };
        let main = &p.insns[..p.n_main as usize];
        t.0 += main.iter().filter(|i| i.wr2 != i.wr).count() as u64;
        t.3 += main
            .iter()
            .filter(|i| i.flags & (fold::F_IF | fold::F_IFV) != 0)
            .count() as u64;
        t.1 += main
            .iter()
            .filter(|i| i.flags & fold::F_JZ != 0)
            .count() as u64;
        let plain: u32 = exprs
            .iter()
            .map(|e| e.num_cond + e.num_body + 2)
            .sum::<u32>()
            - instrs.iter().filter(|i| i.op == 2).count() as u32;
        t.2 += u64::from(p.n_main < plain);
    }
    t
}

/// Break one instruction of an install message the way libccp checks them
/// (opcode, result type, left type, right type): libccp keeps the program
/// read so far in its slot.
fn corrupt_install(r: &mut Rng, mut m: Vec<u8>) -> Vec<u8> {
    let ne = u32::from_le_bytes(m[12..16].try_into().unwrap()) as usize;
    let ni = u32::from_le_bytes(m[16..20].try_into().unwrap()) as usize;
    if ni == 0 {
        return m;
    }
    let at = 20 + 16 * ne + 16 * r.below(ni as u64) as usize;
    match r.below(5) {
        0 => m[at] = 15 + r.below(200) as u8,
        1 => m[at + 1] = r.pick(&[1, 4]),
        2 => m[at + 1] = 9 + r.below(100) as u8,
        3 => m[at + 6] = 9 + r.below(100) as u8,
        _ => m[at + 11] = 9 + r.below(100) as u8,
    }
    m
}

fn random_updates(r: &mut Rng) -> Vec<(u8, u32, u64)> {
    (0..r.below(4))
        .map(|_| match r.below(6) {
            0 | 1 => (r.pick(&[0, 8]), r.below(8) as u32, edge_u64(r)),
            2 => (2, 4, edge_u32(r)),
            3 => (2, 5, edge_u32(r)),
            4 => (2, r.below(7) as u32, edge_u64(r)),
            _ => (r.pick(&[0, 8, 2, 5]), r.below(110) as u32, edge_u64(r)),
        })
        .collect()
}

// ------------------------------------------------------------ cases

/// Drive one case: programs `installs` (the first has uid 1, clearing the
/// table), 1-2 flows switched to a program, then `steps` random events:
/// mostly ACKs, plus field updates, program changes, new installs and
/// messages libccp refuses.
fn run_case(
    sim: &mut Sim,
    r: &mut Rng,
    installs: &[Vec<u8>],
    steps: u64,
    ack: &dyn Fn(&mut Rng, &Flow, u64) -> Prims,
    extra_program: &dyn Fn(&mut Rng, u32) -> Vec<u8>,
    ctx: &dyn Fn() -> String,
) {
    for (i, m) in installs.iter().enumerate() {
        sim.send(m, &|| format!("{} install #{i}", ctx()));
    }
    let mut next_uid = installs.len() as u32 + 1;
    // The clock only moves forward across cases (libccp keeps per-slot create times).
    FAKE_NOW_NS.fetch_add(r.below(1 << 40), Ordering::Relaxed);
    let mut flows: Vec<Flow> = (0..1 + r.below(2))
        .map(|i| sim.start_flow(i as u32, 10 * 1448))
        .collect();
    let mut now = FAKE_NOW_NS.load(Ordering::Relaxed);
    for f in &flows {
        let m = change_msg(
            f.sid,
            1 + r.below(installs.len() as u64) as u32,
            &random_updates(r),
        );
        sim.send(&m, &|| format!("{} first change", ctx()));
    }
    for step in 0..steps {
        let fi = r.below(flows.len() as u64) as usize;
        let sid = flows[fi].sid;
        let sctx = || format!("{} step {step}", ctx());
        now = now.wrapping_add(match r.below(20) {
            0 => 0,
            1 => r.below(1 << 30),
            _ => r.below(3_000_000),
        });
        match r.below(100) {
            0..=4 => sim.send(&update_msg(sid, &random_updates(r)), &sctx),
            5..=7 => sim.send(
                &change_msg(
                    sid,
                    1 + r.below(u64::from(next_uid)) as u32,
                    &random_updates(r),
                ),
                &sctx,
            ),
            8 => {
                // a new program (may fill libccp's table: -81 on both sides)
                sim.send(&extra_program(r, next_uid), &sctx);
                next_uid += 1;
            }
            9 => {
                let kind = r.below(8);
                let msg = match kind {
                    0 => install_msg(
                        next_uid,
                        &[],
                        &[WI {
                            op: 15,
                            ret: (7, 0),
                            left: (1, 0),
                            right: (1, 0),
                        }],
                    ),
                    1 => install_msg(
                        next_uid,
                        &[],
                        &[WI {
                            op: 0,
                            ret: (1, 0),
                            left: (1, 0),
                            right: (1, 0),
                        }],
                    ),
                    2 => {
                        let m = extra_program(r, next_uid);
                        corrupt_install(r, m)
                    }
                    3 => update_msg(sid, &[(0, 1, 5), (6, 0, 1), (0, 2, 6)]), // -53 after staging one
                    4 => update_msg(sid ^ 0x8000, &[(0, 1, 5)]),              // unknown flow
                    5 => {
                        let mut m = update_msg(sid, &[(0, 1, 5)]);
                        m[8] = 128 + r.below(128) as u8; // libccp reads a signed char: -52
                        m
                    }
                    6 => {
                        let mut m = change_msg(sid, 1, &[]);
                        m[12..16].copy_from_slice(&(223 + r.below(1000) as u32).to_le_bytes()); // -62
                        m
                    }
                    _ => {
                        // uid 1 again: libccp clears its table under running flows
                        next_uid = 1;
                        extra_program(r, 1)
                    }
                };
                if kind <= 2 || kind == 7 {
                    next_uid += 1; // installs take a slot, also failed ones
                }
                sim.send(&msg, &sctx);
            }
            _ => {
                let p = ack(r, &flows[fi], step);
                sim.invoke(&mut flows[fi], &p, now, &sctx);
            }
        }
    }
    for f in flows {
        sim.end_flow(f);
    }
}

fn print_tally(name: &str, cases: u64, t: &Tally) {
    println!(
        "{name}: {cases} cases, {} invocations ({} aborted by overflow/underflow/div0, {} without program), \
         {} reports, {} set_cwnd calls, {} messages ({} refused alike)",
        t.invokes, t.aborts, t.no_program, t.reports, t.cwnd_calls, t.messages, t.refused
    );
}

#[test]
fn random_programs_match_libccp() {
    let mut sim = Sim::new();
    let cases = env_u64("FOLD_DIFF_CASES", 10_000);
    let seed = env_u64("FOLD_DIFF_SEED", 0x00c0_ffee);
    for case in 0..cases {
        let mut r = Rng(seed ^ case.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let installs: Vec<Vec<u8>> = (1..=1 + r.below(3) as u32)
            .map(|uid| random_program(&mut r, uid))
            .collect();
        let ctx = || format!("random case {case} (FOLD_DIFF_SEED={seed}), programs {installs:?}");
        run_case(
            &mut sim,
            &mut r,
            &installs,
            30,
            &|r, f, _| random_prims(r, f),
            &|r, uid| random_program(r, uid),
            &ctx,
        );
    }
    print_tally("random programs", cases, &sim.tally);
    assert!(
        sim.tally.aborts > 0 && sim.tally.reports > 0,
        "random cases exercised aborts and reports"
    );
}

/// The compiler's rewrites (fused `OP t; BIND d t`, dropped JZ/BRK, fused
/// JZ, dropped recomputations and dead flag/fallthrough writes) against
/// libccp on programs shaped to hit them ([`shaped_program`]); also checks
/// that the rewrites fired, so a wrong one fails here.
#[test]
fn compiler_rewrites_match_libccp() {
    let mut sim = Sim::new();
    let cases = env_u64("FOLD_DIFF_CASES", 10_000) / 2;
    let seed = env_u64("FOLD_DIFF_SEED", 0x00c0_ffee) ^ 0x5a9e;
    let mut fired = (0, 0, 0, 0);
    for case in 0..cases {
        let mut r = Rng(seed ^ case.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let installs: Vec<Vec<u8>> = (1..=1 + r.below(2) as u32)
            .map(|uid| shaped_program(&mut r, uid))
            .collect();
        let f = rewrites_fired(&installs);
        fired = (fired.0 + f.0, fired.1 + f.1, fired.2 + f.2, fired.3 + f.3);
        let ctx = || format!("shaped case {case} (FOLD_DIFF_SEED={seed}), programs {installs:?}");
        let ack = mixed_prims;
        run_case(
            &mut sim,
            &mut r,
            &installs,
            30,
            &ack,
            &|r, uid| shaped_program(r, uid),
            &ctx,
        );
    }
    print_tally("shaped programs", cases, &sim.tally);
    println!(
        "rewrites: {} fused pairs ({} of them IFs), {} fused JZs, {} programs shortened",
        fired.0, fired.3, fired.1, fired.2
    );
    assert!(
        fired.0 > cases && fired.1 > cases / 10 && fired.2 > cases / 2 && fired.3 > cases / 4,
        "the shaped programs exercise the rewrites: {fired:?} in {cases} cases"
    );
    assert!(
        sim.tally.aborts > 0 && sim.tally.reports > cases,
        "shaped cases exercised aborts and reports"
    );
}

/// Fold programs written to hit one libccp rule each.
const EDGE_PROGRAMS: [&str; 8] = [
    // ewma (cur == 0 takes the sample), +infinity default, min against it
    "(def (Report (volatile e 0) (volatile minrtt +infinity) (volatile n 0)))
     (when true
        (:= Report.e (ewma 3 Flow.rtt_sample_us))
        (:= Report.minrtt (min Report.minrtt Flow.rtt_sample_us))
        (:= Report.n (+ Report.n 1))
        (fallthrough))
     (when (> Report.n 3) (report))",
    // subtraction underflow aborts: the later report never happens on that ACK
    "(def (Report (volatile d 0) (volatile acc 0)))
     (when true
        (:= Report.acc (+ Report.acc Ack.bytes_acked))
        (:= Report.d (- Ack.bytes_acked 3000))
        (:= Cwnd (+ Cwnd 1448))
        (report))",
    // division by zero aborts
    "(def (Report (volatile q 0)) (perAck 0))
     (when true
        (:= perAck (/ Ack.bytes_acked Ack.packets_acked))
        (:= Report.q (+ Report.q perAck))
        (:= Rate (* perAck 1000))
        (report))",
    // wrapped_max and non-volatile report fields that survive reports
    "(def (Report (wm 0) (volatile cnt 0)))
     (when true
        (:= Report.wm (wrapped_max Report.wm Ack.bytes_acked))
        (:= Report.cnt (+ Report.cnt 1))
        (fallthrough))
     (when (> Report.cnt 2) (report))",
    // volatile control registers reset on report; Micros written, not reset by (report)
    "(def (Report (volatile us 0)) (volatile ctl 7) (keep 5))
     (when true
        (:= ctl (+ ctl 1))
        (:= keep (+ keep 1))
        (:= Report.us Micros)
        (fallthrough))
     (when (> Micros 2000) (report) (:= Micros 0))
     (when (> ctl 9) (report))",
    // if / !if / comparisons / && || and Ack.now
    "(def (Report (volatile a 0) (volatile b 0) (volatile now 0)))
     (when true
        (:= Report.a (if (&& (> Flow.rtt_sample_us 0) (< Flow.rtt_sample_us 25000)) Flow.rtt_sample_us))
        (:= Report.b (!if (|| Flow.was_timeout (> Ack.lost_pkts_sample 0)) Flow.packets_in_flight))
        (:= Report.now Ack.now)
        (report))",
    // nested 9 deep: Portus uses tmp registers past libccp's 8
    "(def (Report (volatile deep 0)))
     (when true
        (:= Report.deep (+ 1 (+ 2 (+ 3 (+ 4 (+ 5 (+ 6 (+ 7 (+ 8 (+ 9 Ack.packets_acked))))))))))
        (report))",
    // overflow: multiplication and addition at the u64 edge
    "(def (Report (volatile m 1)))
     (when true
        (:= Report.m (* Report.m Flow.rate_outgoing))
        (:= Cwnd (max Cwnd (* Ack.bytes_acked 2)))
        (report))",
];

#[test]
fn edge_case_programs_match_libccp() {
    let mut sim = Sim::new();
    for (n, src) in EDGE_PROGRAMS.iter().enumerate() {
        let install = portus_install(src, 1);
        for case in 0..300u64 {
            let mut r = Rng(0xed9e ^ (n as u64) << 32 ^ case);
            let ctx = || format!("edge program {n} case {case}: {src}");
            let installs = [install.clone()];
            let ack = mixed_prims;
            run_case(
                &mut sim,
                &mut r,
                &installs,
                40,
                &ack,
                &|_, uid| portus_install(src, uid),
                &ctx,
            );
        }
    }
    print_tally(
        "edge-case programs",
        300 * EDGE_PROGRAMS.len() as u64,
        &sim.tally,
    );
    assert!(
        sim.tally.aborts > 0,
        "the underflow/div0/overflow programs aborted some invocations"
    );
}

#[test]
fn suite_fold_programs_match_libccp() {
    let programs = suite_programs();
    let mut sim = Sim::new();
    for (bin, src) in &programs {
        let install = portus_install(src, 1);
        for case in 0..300u64 {
            let mut r = Rng(0x5017e ^ case);
            let ctx = || format!("ccp-algorithms {bin} --dump-program, case {case}");
            let installs = [install.clone()];
            let ack = |r: &mut Rng, f: &Flow, i: u64| {
                if r.chance(90) {
                    ack_prims(r, f, i)
                } else {
                    random_prims(r, f)
                }
            };
            run_case(
                &mut sim,
                &mut r,
                &installs,
                60,
                &ack,
                &|_, uid| portus_install(src, uid),
                &ctx,
            );
        }
    }
    print_tally(
        &format!(
            "suite programs {:?}",
            programs.iter().map(|p| &p.0).collect::<Vec<_>>()
        ),
        300 * programs.len() as u64,
        &sim.tally,
    );
    assert!(sim.tally.reports > 0, "the suite's programs reported");
}

/// Cost figures (not a timed test): per invocation and per interpreter
/// step, from bpf_ktime_get_ns around `repeat` invocations in one test run.
#[test]
#[ignore = "benchmark: cargo test --release -p ccp-datapath --test fold_differential -- --ignored --nocapture"]
fn bench_fold_interpreter() {
    let mut programs: Vec<(String, String)> = suite_programs();
    programs.push(("edge: nested".into(), EDGE_PROGRAMS[6].into()));
    programs.push(("edge: ewma/min".into(), EDGE_PROGRAMS[0].into()));
    let mut sim = Sim::new();
    let repeat = 100_000u32;
    for (name, src) in &programs {
        sim.send(&portus_install(src, 1), &|| name.clone());
        let mut f = sim.start_flow(0, 14480);
        sim.send(&change_msg(f.sid, 1, &[]), &|| name.clone());
        let mut r = Rng(1);
        let p = ack_prims(&mut r, &f, 1);
        let t = FAKE_NOW_NS.load(Ordering::Relaxed);
        sim.invoke(&mut f, &p, t + 1000, &|| name.clone());
        let input = TestIn {
            flow: f.idx,
            repeat,
            now_ns: t + 2000,
            dp_time_zero_ns: EPOCH_NS,
            snd_rate: 0,
            snd_cwnd: f.cwnd,
            prims: p.v,
            ..Default::default()
        };
        let mut best = u64::MAX;
        let mut steps = 0;
        for _ in 0..5 {
            let o = sim.k.invoke(&input);
            best = best.min(o.elapsed_ns);
            steps = o.steps;
        }
        let per_inv = best as f64 / f64::from(repeat);
        println!(
            "fold interpreter, {name}: {per_inv:.0} ns per invocation, {steps} steps per invocation, {:.1} ns per step \
             (best of 5 x {repeat}, BPF_PROG_TEST_RUN, JIT)",
            per_inv / f64::from(steps.max(1))
        );
        sim.end_flow(f);
    }
}

/// `struct fold_test_prims_io`: fold_ack, fold_baseline, prims.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
struct PrimsIo {
    bytes_acked: u64,
    rtt_us: i64,
    interval_us: i64,
    delivered: i32,
    snd_interval_us: u32,
    rcv_interval_us: u32,
    acked_sacked: u32,
    sacked_out: u32,
    lost_out: u32,
    retrans_out: u32,
    packets_out: u32,
    write_seq: u32,
    snd_una: u32,
    ecn_bytes: u32,
    timeouts: u32,
    lost: u32,
    mss: u32,
    // struct fold_baseline
    b_bytes_acked: u64,
    b_rate_outgoing: u64,
    b_rate_incoming: u64,
    b_sacked_out: u32,
    b_ecn_bytes: u32,
    b_timeouts: u32,
    b_lost: u32,
    prims: [u64; 15],
    srtt_us: u32,
    rtt_held_us: u32,
}

const _: () = assert!(std::mem::size_of::<PrimsIo>() == 80 + 40 + 120 + 8);

/// fold_vm.h's fold_prims (what the kernel fold computes per ACK) against
/// src/primitives.rs compute() (what user space computes for libccp), on
/// random ACK sequences with edge values.
#[test]
fn kernel_primitives_match_user_space() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let k = Kernel::load();
    let mut r = Rng(env_u64("FOLD_DIFF_SEED", 0x00c0_ffee));
    let mut checked = 0u64;
    for flow in 0..2000u64 {
        let mut base = primitives::Baseline::default();
        let mut held = 0u32;
        let mut io = PrimsIo::default();
        let mut s = wire::AckSample {
            mss: 1448,
            ..Default::default()
        };
        for ack in 0..50 {
            // cumulative counters mostly grow; sometimes anything goes
            let wild = r.chance(10);
            let (e64, e32) = (edge_u64(&mut r), edge_u32(&mut r));
            let grow = |r: &mut Rng, v: u32, n: u64| {
                if wild {
                    edge_u32(r) as u32
                } else {
                    v.wrapping_add(r.below(n) as u32)
                }
            };
            s.mss = if r.chance(3) {
                edge_u32(&mut r) as u32
            } else {
                1448
            };
            s.bytes_acked = if wild {
                edge_u64(&mut r)
            } else {
                s.bytes_acked + 1448 * r.below(4)
            };
            s.rtt_us = r.pick(&[-1, 0, 1, 20_000, 123_456, i64::MAX, i64::MIN, e64 as i64]);
            s.interval_us = r.pick(&[-1, 0, 1, 20_000, e64 as i64]);
            s.delivered = r.pick(&[-1, 0, 1, 10, i32::MAX, e32 as i32]);
            s.snd_interval_us = r.pick(&[0, 1, 20_000, e32 as u32]);
            s.rcv_interval_us = r.pick(&[0, 1, 25_000, e32 as u32]);
            s.acked_sacked = grow(&mut r, 0, 4);
            s.sacked_out = grow(&mut r, s.sacked_out, 3);
            s.lost_out = if wild {
                edge_u32(&mut r) as u32
            } else {
                r.below(3) as u32
            };
            s.retrans_out = if wild {
                edge_u32(&mut r) as u32
            } else {
                r.below(3) as u32
            };
            s.packets_out = if wild {
                edge_u32(&mut r) as u32
            } else {
                10 + r.below(100) as u32
            };
            s.write_seq = grow(&mut r, s.write_seq, 100_000);
            s.snd_una = grow(&mut r, s.snd_una, 100_000);
            s.ecn_bytes = grow(&mut r, s.ecn_bytes, 3000);
            s.timeouts = grow(&mut r, s.timeouts, 2);
            s.lost = grow(&mut r, s.lost, 3);
            s.srtt_us = r.pick(&[0, 0, 1, 20_000, e32 as u32]);
            let mut want = primitives::compute(&mut base, &s, None, None);
            primitives::hold_rtt(&mut want, &mut held, s.srtt_us);
            if held != 0 || s.srtt_us != 0 {
                // ccp-kernel's contract: no missing RTT once one is known
                assert_ne!(want.rtt_sample_us, 0, "flow {flow} ack {ack}: a missing RTT reaches the fold");
            }
            io = PrimsIo {
                bytes_acked: s.bytes_acked,
                rtt_us: s.rtt_us,
                interval_us: s.interval_us,
                delivered: s.delivered,
                snd_interval_us: s.snd_interval_us,
                rcv_interval_us: s.rcv_interval_us,
                acked_sacked: s.acked_sacked,
                sacked_out: s.sacked_out,
                lost_out: s.lost_out,
                retrans_out: s.retrans_out,
                packets_out: s.packets_out,
                write_seq: s.write_seq,
                snd_una: s.snd_una,
                ecn_bytes: s.ecn_bytes,
                timeouts: s.timeouts,
                lost: s.lost,
                mss: s.mss,
                prims: [0; 15],
                srtt_us: s.srtt_us,
                ..io
            };
            let mut ctx = io.as_bytes().to_vec();
            fold_harness::run_on(&k.skel.progs.fold_test_prims, &mut ctx, "fold_test_prims");
            io = PrimsIo::read_from_bytes(&ctx[..]).unwrap();
            let u = |v: u32| u64::from(v);
            let expected = [
                u(want.bytes_acked),
                u(want.bytes_misordered),
                u(want.ecn_bytes),
                u(want.ecn_packets),
                u(want.lost_pkts_sample),
                0,
                u(want.packets_acked),
                u(want.packets_misordered),
                u(want.bytes_in_flight),
                u(want.bytes_pending),
                u(want.packets_in_flight),
                want.rate_incoming,
                want.rate_outgoing,
                want.rtt_sample_us,
                u64::from(want.was_timeout),
            ];
            assert_eq!(
                io.prims, expected,
                "flow {flow} ack {ack}: {s:?}: primitives.rs (left) vs fold_prims (right)"
            );
            let kb = (
                io.b_bytes_acked,
                io.b_sacked_out,
                io.b_ecn_bytes,
                io.b_timeouts,
                io.b_lost,
                io.b_rate_outgoing,
                io.b_rate_incoming,
            );
            let ub = (
                base.bytes_acked,
                base.sacked_out,
                base.ecn_bytes,
                base.timeouts,
                base.lost,
                base.rate_outgoing,
                base.rate_incoming,
            );
            assert_eq!(ub, kb, "flow {flow} ack {ack}: baseline after {s:?}");
            assert_eq!(io.rtt_held_us, held, "flow {flow} ack {ack}: held RTT after {s:?}");
            checked += 1;
        }
    }
    println!("fold_prims matched primitives.rs on {checked} ACKs");
}

/// Half plausible ACKs ([`ack_prims`]), half arbitrary primitives ([`random_prims`]).
fn mixed_prims(r: &mut Rng, f: &Flow, i: u64) -> Prims {
    if r.chance(50) {
        ack_prims(r, f, i)
    } else {
        random_prims(r, f)
    }
}
