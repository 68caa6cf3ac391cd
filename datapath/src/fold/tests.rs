//! Unit tests of the kernel fold's parser, compiler, program table and
//! report path, against libccp's rules (the module docs cite them).

use std::collections::HashSet;

use zerocopy::{FromZeros, IntoBytes};

use super::compile::{physical, read_operand, write_target};
use super::isa::*;
use super::kernel::*;
use super::msg::*;
use super::table::*;

fn instr_bytes(op: u8, ret: (u8, u32), left: (u8, u32), right: (u8, u32)) -> Vec<u8> {
    let mut b = vec![op];
    for (t, i) in [ret, left, right] {
        b.push(t);
        b.extend_from_slice(&i.to_le_bytes());
    }
    b
}

fn install_msg(uid: u32, exprs: &[[u32; 4]], instrs: &[Vec<u8>]) -> Vec<u8> {
    let len = 8 + 12 + 16 * exprs.len() + 16 * instrs.len();
    let mut b = vec![2, 0];
    b.extend_from_slice(&(len as u16).to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    for v in [uid, exprs.len() as u32, instrs.len() as u32] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for e in exprs {
        e.iter().for_each(|v| b.extend_from_slice(&v.to_le_bytes()));
    }
    instrs.iter().for_each(|i| b.extend_from_slice(i));
    b
}

#[test]
fn register_layout_is_one_to_one_and_clear_of_special_registers() {
    let special = [OFF_ZERO, OFF_DISCARD, OFF_TIME_ZERO, OFF_SLOT];
    let mut seen = HashSet::new();
    for f in 0..N_FILE {
        let p = physical(f);
        assert!((p as usize) < NREGS, "flat {f} -> {p} outside the register array");
        assert!(!special.contains(&p), "flat {f} -> {p} is a special register");
        assert!(!(OFF_PRIM..OFF_PRIM + N_PRIM).contains(&p), "flat {f} -> {p} is a primitive");
        assert!(seen.insert(p), "flat {f} -> {p} taken twice");
    }
    // a report copies report registers 0.. as one block
    for i in 0..MAX_REPORT {
        assert_eq!(physical(FLAT_REPORT + i), OFF_REPORT + i);
    }
    // tmp 8..15 reads local 0..7, as in libccp's flat file
    let tmp9 = WireReg { ty: REG_TMP, index: 9 };
    let local1 = WireReg { ty: REG_LOCAL, index: 1 };
    assert_eq!(read_operand(tmp9), read_operand(local1));
    assert_eq!(write_target(tmp9).0 as u32, OFF_DISCARD, "tmp 9 is not writable");
}

#[test]
fn install_compiles_defs_and_expressions() {
    // (def (Report (volatile foo 0)) (bar +infinity)) (when true (:= Report.foo (+ Report.foo Ack.bytes_acked)))
    let msg = install_msg(
        1,
        &[[2, 1, 3, 2]],
        &[
            instr_bytes(2, (5, 0), (5, 0), (1, 0)),
            instr_bytes(2, (0, 0), (0, 0), (1, 0x3fff_ffff)),
            instr_bytes(1, (2, 0), (2, 0), (1, 1)),
            instr_bytes(0, (7, 0), (5, 0), (4, 0)),
            instr_bytes(1, (5, 0), (5, 0), (7, 0)),
        ],
    );
    let mut t = FoldTables::new(LIBCCP_MAX_PROGRAMS);
    let h = t.handle(&msg);
    h.result.unwrap();
    assert!(matches!(h.effects[0], Effect::ClearPrograms));
    let Effect::WriteProgram { slot: 1, prog: p } = &h.effects[1] else {
        panic!("{:?}", h.effects)
    };
    // (when true ...): no JZ, and then nothing reads the flag its
    // condition sets; ADD tmp + BIND Report.foo fused; last expression:
    // no BRK
    assert_eq!(p.n_main, 1, "the fused body alone");
    assert_eq!(p.insns[0].op, Op::Add.code());
    assert_eq!(p.insns[0].flags & F_JZ, 0, "no JZ after a constant-true condition");
    assert_eq!(p.insns[0].left, OFF_REPORT);
    assert_eq!(p.insns[0].right, OFF_PRIM);
    assert_eq!(p.insns[0].wr as u32, OFF_TMP);
    assert_eq!(p.insns[0].wr2 as u32, OFF_REPORT, "BIND Report.foo tmp fused");
    assert_eq!(
        (p.reset_off, p.reset_len, p.init_off, p.init_len),
        (1, 1, 2, 1)
    );
    assert_eq!(
        p.insns[2].right,
        u32::MAX,
        "0x3fffffff default is +infinity"
    );
    assert_eq!(p.num_to_return, 1);
    assert_eq!(t.slot_of(1), Some(1));
}

#[test]
fn bad_opcode_takes_slot_and_is_refused_with_libccps_code() {
    let msg = install_msg(3, &[], &[instr_bytes(15, (7, 0), (1, 0), (1, 0))]);
    let mut t = FoldTables::new(2);
    let h = t.handle(&msg);
    assert!(matches!(
        h.result,
        Err(FoldMsgError::Libccp { code: -33, .. })
    ));
    let [Effect::WriteProgram { slot: 1, prog }] = &h.effects[..] else {
        panic!("{:?}", h.effects)
    };
    assert_eq!(
        (prog.uid, prog.n_main, prog.num_to_return),
        (3, 0, 0),
        "half-read program, as libccp keeps it"
    );
    assert_eq!(t.slot_of(3), Some(1));
    assert!(t.slot_ok(1));
    // an instruction range reaching index 256 is refused and leaves the kernel slot empty
    let msg = install_msg(9, &[[250, 6, 0, 0]], &[]);
    let h = t.handle(&msg);
    assert!(matches!(h.result, Err(FoldMsgError::Unsupported(_))));
    assert!(matches!(h.effects[..], [Effect::EmptySlot { slot: 2 }]));
    assert!(!t.slot_ok(2));
    assert!(matches!(
        t.handle(&install_msg(5, &[], &[])).result,
        Err(FoldMsgError::Libccp { code: -81, .. })
    ));
}

#[test]
fn updates_stage_and_change_program_drops_earlier_ones() {
    let mut t = FoldTables::new(LIBCCP_MAX_PROGRAMS);
    t.handle(&install_msg(1, &[], &[])).result.unwrap();
    t.add_flow(7);
    let mut upd = vec![3, 0, 0, 0, 7, 0, 0, 0, 2, 0, 0, 0];
    for (ty, idx, v) in [(0u8, 3u32, 42u64), (2, 4, 9000)] {
        upd.push(ty);
        upd.extend_from_slice(&idx.to_le_bytes());
        upd.extend_from_slice(&v.to_le_bytes());
    }
    let len = upd.len() as u16;
    upd[2..4].copy_from_slice(&len.to_le_bytes());
    let h = t.handle(&upd);
    h.result.unwrap();
    let [Effect::Stage {
        sid: 7,
        delta: staged,
    }] = &h.effects[..]
    else {
        panic!("{:?}", h.effects)
    };
    assert_eq!(staged.flags, STAGED_CONTROL | STAGED_CWND);
    assert_eq!(
        (staged.control_mask[0], staged.control[3], staged.cwnd),
        (1 << 3, 42, 9000)
    );
    let change = [4u8, 0, 16, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0];
    let h = t.handle(&change);
    h.result.unwrap();
    let [Effect::Stage { delta: staged, .. }] = &h.effects[..] else {
        panic!("{:?}", h.effects)
    };
    assert_eq!((staged.flags, staged.change_slot), (STAGED_CHANGE, 1));
    let unknown = [4u8, 0, 16, 0, 7, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0];
    assert!(matches!(
        t.handle(&unknown).result,
        Err(FoldMsgError::NoEffect(_))
    ));
    let other_flow = [4u8, 0, 16, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0];
    assert!(matches!(
        t.handle(&other_flow).result,
        Err(FoldMsgError::Libccp { code: -71, .. })
    ));
}

#[derive(Default)]
struct Recorded {
    progs: Vec<(u32, u32)>,  // (slot, index written)
    staged: Vec<(u32, u32)>, // (flow, flags)
}

impl FoldMaps for Recorded {
    fn write_program(&mut self, slot: u32, prog: &FoldProg) -> Result<(), String> {
        self.progs.push((slot, prog.index));
        Ok(())
    }
    fn stage(&mut self, flow_id: u32, delta: &FoldStaged) -> Result<(), String> {
        self.staged.push((flow_id, delta.flags));
        Ok(())
    }
}

#[test]
fn kernel_fold_routes_messages_to_maps_and_reports_to_portus() {
    let mut k = KernelFold::default();
    let mut maps = Recorded::default();
    let create = k
        .flow_created(5, 14480, 1448, (1, 2), (3, 4), "reno")
        .unwrap();
    assert_eq!(
        (create.len(), create[0], &create[4..8]),
        (96, 0, &5u32.to_le_bytes()[..])
    );
    k.on_portus_msg(&install_msg(1, &[], &[]), &mut maps)
        .unwrap();
    k.on_portus_msg(&install_msg(2, &[], &[]), &mut maps)
        .unwrap();
    let change = [4u8, 0, 16, 0, 5, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0];
    k.on_portus_msg(&change, &mut maps).unwrap();
    assert_eq!(maps.staged, vec![(5, STAGED_CHANGE)]);
    // uid 1 again: both written slots are emptied before slot 1 is rewritten
    k.on_portus_msg(&install_msg(1, &[], &[]), &mut maps)
        .unwrap();
    assert_eq!(maps.progs, vec![(1, 1), (2, 2), (1, 0), (2, 0), (1, 1)]);
    let mut rec = FoldReport::new_zeroed();
    (rec.flow_id, rec.uid, rec.n_fields) = (5, 2, 2);
    rec.fields[..3].copy_from_slice(&[7, 8, 9]);
    let (flow, msg) = k.report_msg(rec.as_bytes()).unwrap();
    assert_eq!((flow, msg), (5, measure_msg(5, 2, &[7, 8])));
    // the short record the kernel sends for programs with <= 32 fields
    let small = &rec.as_bytes()[..24 + 8 * SMALL_REPORT];
    assert_eq!(k.report_msg(small).unwrap(), (5, measure_msg(5, 2, &[7, 8])));
    rec.n_fields = 33;
    assert!(k.report_msg(&rec.as_bytes()[..24 + 8 * SMALL_REPORT]).is_err(), "more fields than it holds");
    assert!(k.report_msg(&[0; 10]).is_err());
    assert_eq!(k.flow_released(5), measure_msg(5, 0, &[]));
    assert!(matches!(
        k.on_portus_msg(&change, &mut maps),
        Err(FoldMsgError::Libccp { code: -71, .. })
    ));
}

static FAKE_NOW_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
fn fake_now() -> u64 {
    FAKE_NOW_NS.load(std::sync::atomic::Ordering::SeqCst)
}

fn report(flow: u32, ts_ns: u64) -> FoldReport {
    let mut rec = FoldReport::new_zeroed();
    (rec.flow_id, rec.uid, rec.ts_ns) = (flow, 1, ts_ns);
    rec
}

fn update_msg(sid: u32, reg_type: u8, reg_index: u32) -> Vec<u8> {
    let mut m = vec![3, 0, 0, 0];
    m.extend_from_slice(&sid.to_le_bytes());
    m.extend_from_slice(&1u32.to_le_bytes());
    m.push(reg_type);
    m.extend_from_slice(&reg_index.to_le_bytes());
    m.extend_from_slice(&14480u64.to_le_bytes());
    let len = m.len() as u16;
    m[2..4].copy_from_slice(&len.to_le_bytes());
    m
}

/// A one-instruction program with this uid: (when true (:= Report.foo (+ Report.foo Ack.bytes_acked))).
fn tiny_install(uid: u32) -> Vec<u8> {
    install_msg(
        uid,
        &[[0, 1, 1, 1]],
        &[instr_bytes(2, (5, 0), (5, 0), (1, 0)), instr_bytes(0, (5, 0), (5, 0), (4, 0))],
    )
}

fn change_msg(sid: u32, uid: u32) -> Vec<u8> {
    let mut m = vec![4, 0, 0, 0];
    m.extend_from_slice(&sid.to_le_bytes());
    m.extend_from_slice(&uid.to_le_bytes());
    m.extend_from_slice(&0u32.to_le_bytes());
    let len = m.len() as u16;
    m[2..4].copy_from_slice(&len.to_le_bytes());
    m
}

#[test]
fn guarded_table_keeps_live_programs_and_cannot_be_filled() {
    let mut t = FoldTables::guarded(LIBCCP_MAX_PROGRAMS);
    t.add_flow(7);
    t.handle(&tiny_install(1)).result.unwrap();
    t.handle(&tiny_install(2)).result.unwrap();
    t.handle(&change_msg(7, 2)).result.unwrap();
    // uid 1 again would clear slot 2, which flow 7 runs: refused, nothing written
    let h = t.handle(&tiny_install(1));
    assert!(matches!(h.result, Err(FoldMsgError::Evicts(_))), "{:?}", h.result);
    assert!(h.effects.is_empty(), "{:?}", h.effects);
    assert_eq!((t.slot_of(2), t.evictions_refused), (Some(2), 1));
    // one sender installs 100 programs: the table never refuses, and
    // never touches flow 7's slot
    for uid in 100..200 {
        let h = t.handle(&tiny_install(uid));
        h.result.unwrap_or_else(|e| panic!("install {uid}: {e}"));
        for e in &h.effects {
            if let Effect::WriteProgram { slot, .. } | Effect::EmptySlot { slot } = e {
                assert_ne!(*slot, 2, "live flow's slot overwritten by uid {uid}");
            }
        }
    }
    assert_eq!(t.slot_of(2), Some(2));
    assert!(t.slot_of(199).is_some(), "the newest install is in the table");
    assert_eq!(t.replaced_unused, 100 - 8, "table full after 8 more installs, then replaced in place");
    // the flow gone (or a new algorithm): uid 1 clears as in libccp
    t.forget_bindings();
    let h = t.handle(&tiny_install(1));
    h.result.unwrap();
    assert!(matches!(h.effects[0], Effect::ClearPrograms));
    // libccp's own table: uid 1 clears regardless, and a full table refuses
    let mut l = FoldTables::new(LIBCCP_MAX_PROGRAMS);
    l.add_flow(7);
    l.handle(&tiny_install(1)).result.unwrap();
    l.handle(&change_msg(7, 1)).result.unwrap();
    for uid in 2..=10 {
        l.handle(&tiny_install(uid)).result.unwrap();
    }
    assert!(matches!(l.handle(&tiny_install(11)).result, Err(FoldMsgError::Libccp { code: -81, .. })));
    assert!(matches!(l.handle(&tiny_install(1)).effects[0], Effect::ClearPrograms));
}

#[test]
fn a_report_without_fields_never_reaches_portus_as_a_close() {
    let mut k = KernelFold::with_clock(fake_now);
    let mut rec = report(5, 1);
    assert!(k.report_msg_for_portus(rec.as_bytes()).is_err(), "0 fields: Portus's close");
    assert_eq!(k.report_msg(rec.as_bytes()).unwrap().1, measure_msg(5, 1, &[]), "libccp's bytes kept for the oracle");
    rec.n_fields = 1;
    assert_eq!(k.report_msg_for_portus(rec.as_bytes()).unwrap(), (5, measure_msg(5, 1, &[0])));
}

#[test]
fn report_to_cwnd_latency_counts_each_report_once_per_flow() {
    let mut k = KernelFold::with_clock(fake_now);
    let mut maps = Recorded::default();
    k.on_portus_msg(&install_msg(1, &[], &[]), &mut maps).unwrap();
    for flow in [5, 6] {
        k.flow_created(flow, 14480, 1448, (1, 2), (3, 4), "cubic").unwrap();
    }
    assert_eq!(k.stats().report_to_cwnd_p50_ns, None, "no sample yet");
    FAKE_NOW_NS.store(1_000_000, std::sync::atomic::Ordering::SeqCst);
    k.report_msg(report(5, 900_000).as_bytes()).unwrap(); // answered 100 us later
    k.report_msg(report(6, 400_000).as_bytes()).unwrap(); // answered 600 us later
    let cwnd = update_msg(5, REG_IMPLICIT, IMPLICIT_CWND);
    k.on_portus_msg(&cwnd, &mut maps).unwrap();
    k.on_portus_msg(&cwnd, &mut maps).unwrap(); // no new report: not a sample
    let control_only = update_msg(6, REG_NONVOLATILE_CONTROL, 3);
    k.on_portus_msg(&control_only, &mut maps).unwrap(); // not a cwnd/rate: not a sample
    assert_eq!(k.stats().report_to_cwnd_n, 1);
    k.on_portus_msg(&update_msg(6, REG_IMPLICIT, IMPLICIT_RATE), &mut maps).unwrap();
    let s = k.stats();
    assert_eq!(s.report_to_cwnd_n, 2);
    assert_eq!((s.report_to_cwnd_p50_ns, s.report_to_cwnd_p99_ns), (Some(100_000), Some(600_000)));
    assert_eq!((s.reports, s.staged), (2, 4));
    // a released flow's waiting report is forgotten
    k.report_msg(report(5, 950_000).as_bytes()).unwrap();
    k.flow_released(5);
    k.flow_created(5, 14480, 1448, (1, 2), (3, 4), "cubic").unwrap();
    k.on_portus_msg(&cwnd, &mut maps).unwrap();
    assert_eq!(k.stats().report_to_cwnd_n, 2);
}

#[test]
fn malformed_headers_are_refused() {
    assert!(matches!(
        parse_message(&[1, 2, 3]),
        Err(FoldMsgError::Unsupported(_))
    ));
    assert!(matches!(
        parse_message(&[9, 0, 8, 0, 0, 0, 0, 0]),
        Err(FoldMsgError::Libccp { code: -32, .. })
    ));
    assert!(matches!(
        parse_message(&[3, 0, 99, 0, 0, 0, 0, 0]),
        Err(FoldMsgError::Libccp { code: -22, .. })
    ));
    // truncated install body: header says 40 bytes of instructions, none present
    let msg = [
        2u8, 0, 20, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0,
    ];
    assert!(matches!(
        parse_message(&msg),
        Err(FoldMsgError::Unsupported(_))
    ));
}

#[test]
fn opcodes_are_fold_vm_h_s() {
    // the interpreter's FOLD_OP_* defines, read from its source: a code
    // changed on one side only fails here, not in a differential run
    let header = include_str!("../../bpf/fold_vm.h");
    let mut defined = 0;
    for line in header.lines() {
        let Some(rest) = line.strip_prefix("#define FOLD_OP_") else { continue };
        let mut words = rest.split_whitespace();
        let (name, code) = (words.next().unwrap(), words.next().unwrap().parse::<u8>().unwrap());
        let op = Op::from_code(code).unwrap_or_else(|| panic!("FOLD_OP_{name} = {code} has no Op"));
        assert_eq!(format!("{op:?}").to_uppercase(), name, "FOLD_OP_{name} = {code}");
        defined += 1;
    }
    assert_eq!(defined, 16, "fold_vm.h defines every opcode but DEF (compiled away)");
    for (code, op) in Op::ALL.iter().enumerate() {
        assert_eq!(usize::from(op.code()), code);
        assert_eq!(Op::from_code(op.code()), Some(*op));
    }
    assert_eq!(Op::from_code(Op::ALL.len() as u8), None);
    assert_eq!(Op::WIRE_COUNT, Op::Jz.code(), "the compiler's own opcodes follow libccp's");
}
