//! Differential test of the fold JIT (`src/fold/jit.rs`) against the
//! in-kernel interpreter (`bpf/fold_vm.h` fold_run_section, itself checked
//! against libccp 1.2 by tests/fold_differential.rs): the main section of a
//! program, compiled to BPF and run with BPF_PROG_TEST_RUN on a register
//! file (JitTarget::TestRun), must leave the same 512 registers and the same
//! result code as the interpreter run on the same program and registers
//! (`fold_test_main` in bpf/fold_test.bpf.c).
//!
//! Programs: the fold program of every algorithm of the suite (compiled by
//! Portus, then by fold::compile), random libccp programs in wire
//! format shaped like fold_differential.rs's (if/!if, ewma, division by
//! zero, underflow, overflow, Micros writes, fallthrough, report, fused
//! pairs) run through fold::compile (FOLD_JIT_CASES (program, state)
//! cases, default 100,000; FOLD_JIT_SEED picks the seed), and random linear
//! programs that use every opcode and flag combination the instruction
//! format allows (FOLD_JIT_CASES / 2). Hand-written programs pin concrete
//! values, so a mistake shared by the interpreter and the JIT still fails.
//! The struct_ops target (what the datapath loads) must pass the verifier
//! for every suite program.
//!
//! Needs root (loading BPF) and syscall-type BPF programs with bpf_loop;
//! fails naming what is missing. Registers no struct_ops: no host lock.

use ccp_datapath::fold::{self, jit as fold_jit};

mod fold_harness;
use fold_harness::skel;

mod common;
use common::msg::{install_msg, read_reg_with, write_reg, IMPLICIT_REG, TMP_REG, WI};
use common::suite::{portus_install, suite_programs};
use common::{edge_u64, env_u64, Rng};

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Instant;

use fold_jit::{compile_main, load, JitError, JitTarget};
use fold::{
    FoldInsn, FoldProg, FoldState, F_IF, F_IFV, F_JZ, F_LIMM, F_RIMM, F_WTIME, NREGS,
    OFF_EXPR_FLAG, OFF_FALLTHROUGH, OFF_IMPLICIT, OFF_JIT_NOW, OFF_JIT_RET, OFF_REPORT,
    OFF_TIME_ZERO, Op,
};
use libbpf_rs::{MapCore, MapFlags};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

const OFF_MICROS: u32 = OFF_IMPLICIT + 3;
/// fold_progs slot the programs under test use.
const SLOT: u32 = 1;

// ------------------------------------------------------------ harness

/// The BPF side: the interpreter's harness (fold_test.bpf.c) and the
/// compiled programs.
struct Kernel {
    skel: skel::FoldTestSkel<'static>,
}

impl Kernel {
    fn load() -> Kernel {
        Kernel { skel: fold_harness::load("the fold JIT test") }
    }

    /// The program under test into fold_progs[SLOT] (for the interpreter).
    fn put_prog(&self, p: &FoldProg) {
        fold_harness::write(&self.skel.maps.fold_progs, SLOT, p.as_bytes());
    }

    /// The interpreter's main section on `st` (fold_test_main, on
    /// fold_states[0]).
    fn interpret(&self, st: &FoldState) -> FoldState {
        const FLOW: u32 = 0;
        let states = &self.skel.maps.fold_states;
        fold_harness::write(states, FLOW, st.as_bytes());
        // struct fold_test_main_in: slot, flow
        let mut ctx = [SLOT.to_ne_bytes(), FLOW.to_ne_bytes()].concat();
        let rc = fold_harness::run_on(&self.skel.progs.fold_test_main, &mut ctx, "fold_test_main");
        assert_eq!(rc, 0, "fold_test_main found its maps");
        FoldState::read_from_bytes(&fold_harness::read(states, FLOW)[..]).expect("register file")
    }
}

/// Run a TestRun-target program on a copy of `st`; the kernel copies the
/// context (the register file) back.
fn run_jit(fd: &OwnedFd, st: &FoldState) -> FoldState {
    let mut out = st.clone();
    let buf = out.as_mut_bytes();
    let mut opts = libbpf_rs::libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_test_run_opts>() as _,
        ctx_in: buf.as_ptr().cast(),
        ctx_size_in: buf.len() as u32,
        ..Default::default()
    };
    // SAFETY: a valid program fd; ctx_in points to ctx_size_in bytes we own,
    // which the kernel writes back for syscall programs.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_prog_test_run_opts(fd.as_raw_fd(), &mut opts) };
    assert_eq!(rc, 0, "BPF_PROG_TEST_RUN of a compiled section: {}", std::io::Error::last_os_error());
    assert_eq!(opts.retval, 0, "compiled section's return value");
    out
}

fn jit_load(p: &FoldProg, what: &dyn Fn() -> String) -> OwnedFd {
    let insns = compile_main(p, &JitTarget::TestRun)
        .unwrap_or_else(|e| panic!("{}: compile_main: {e}", what()));
    load(&insns, &JitTarget::TestRun, "fold_jit_test").unwrap_or_else(|e| panic!("{}: {e}", what()))
}

/// The main section, for messages.
fn main_of(p: &FoldProg) -> &[FoldInsn] {
    &p.insns[..p.n_main as usize]
}

/// Outcome tally, to show what the cases exercised.
#[derive(Default, Debug)]
struct Tally {
    cases: u64,
    programs: u64,
    ok: u64,
    /// -91, -92, -93, -94
    aborts: [u64; 4],
    bpf_insns: u64,
}

impl Tally {
    fn add(&mut self, ret: u64) {
        self.cases += 1;
        match ret as i64 {
            0 => self.ok += 1,
            c @ -94..=-91 => self.aborts[(-91 - c) as usize] += 1,
            c => panic!("unexpected result code {c}"),
        }
    }
}

/// The interpreter and the JIT on the same program and registers: same
/// 512 registers (result code included).
fn check_same(k: &Kernel, fd: &OwnedFd, st: &FoldState, t: &mut Tally, what: &dyn Fn() -> String) {
    let want = k.interpret(st);
    let got = run_jit(fd, st);
    if want.regs != got.regs {
        let diffs: Vec<String> = (0..NREGS)
            .filter(|&i| want.regs[i] != got.regs[i])
            .map(|i| format!("reg {i}: in {:#x}, interpreter {:#x}, JIT {:#x}", st.regs[i], want.regs[i], got.regs[i]))
            .collect();
        panic!("{}: interpreter and JIT differ:\n{}", what(), diffs.join("\n"));
    }
    t.add(want.regs[OFF_JIT_RET as usize]);
}

// ------------------------------------------------------------ randomness

fn edge_u32(r: &mut Rng) -> u32 {
    match r.below(6) {
        0 => r.pick(&[0, 1, 2, 3, 9, 10, 11, 1448]),
        1 => r.pick(&[0x3fff_ffff, u32::MAX, (1 << 31) - 1, 1 << 31]),
        2 => r.next() as u32,
        _ => r.below(100) as u32,
    }
}

/// A register file: every register random (edge values), `small` percent
/// of them below 100,000 (so ACK-like programs run through), the flag and
/// fallthrough 0/1 mostly, now_ns anywhere.
fn random_state(r: &mut Rng, small: u64) -> Box<FoldState> {
    let mut st = Box::new(FoldState::new_zeroed());
    for v in st.regs.iter_mut() {
        *v = if r.chance(small) { r.below(100_000) } else { edge_u64(r) };
    }
    for off in [OFF_EXPR_FLAG, OFF_FALLTHROUGH] {
        st.regs[off as usize] = match r.below(10) {
            0..=3 => 0,
            4..=7 => 1,
            _ => edge_u64(r),
        };
    }
    st.regs[OFF_JIT_NOW as usize] = edge_u64(r);
    st
}

// ------------------------------------------------------------ wire programs

/// libccp's opcodes except DEF (2).
const OPS: [u8; 14] = [0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14];
const FLAG: (u8, u32) = (IMPLICIT_REG, 0);
const FALLTHROUGH: (u8, u32) = (IMPLICIT_REG, 1);
const REPORT_BIT: (u8, u32) = (IMPLICIT_REG, 2);
const MICROS: (u8, u32) = (IMPLICIT_REG, 3);

/// A random operand to read, its immediates edge-heavy.
fn read_reg(r: &mut Rng) -> (u8, u32) {
    read_reg_with(r, |r| (1, edge_u32(r)))
}

fn random_instr(r: &mut Rng) -> WI {
    WI {
        op: r.pick(&OPS),
        ret: write_reg(r),
        left: read_reg(r),
        right: read_reg(r),
    }
}

fn bind(d: (u8, u32), v: (u8, u32)) -> WI {
    WI {
        op: 1,
        ret: d,
        left: d,
        right: v,
    }
}

/// Body instructions: plain random ones, `(report)`, `(fallthrough)`,
/// Micros writes, and the pairs fold::compile fuses (`OP t a b;
/// BIND d t`, `OP t a b; IF d t v` / `IF d v t`).
fn body_instrs(r: &mut Rng, out: &mut Vec<WI>) {
    match r.below(100) {
        0..=7 => out.push(bind(REPORT_BIT, (1, 1))),
        8..=14 => out.push(bind(FALLTHROUGH, (1, u32::from(r.chance(70))))),
        15..=21 => out.push(bind(MICROS, read_reg(r))),
        22..=54 => {
            let t = (TMP_REG, r.below(4) as u32);
            out.push(WI {
                op: r.pick(&OPS),
                ret: t,
                left: read_reg(r),
                right: read_reg(r),
            });
            let d = match r.below(10) {
                0 => (IMPLICIT_REG, r.pick(&[0, 1, 3])),
                _ => write_reg(r),
            };
            out.push(if r.chance(50) {
                bind(d, t)
            } else {
                let other = if r.chance(30) { FLAG } else { read_reg(r) };
                let (left, right) = if r.chance(50) { (t, other) } else { (other, t) };
                WI {
                    op: r.pick(&[7, 7, 13]),
                    ret: d,
                    left,
                    right,
                }
            });
        }
        _ => out.push(random_instr(r)),
    }
}

/// A random program in libccp's wire format within its limits: DEFs, then
/// 1-5 expressions laid out as Portus does (condition ending in a write of
/// the expression flag, then the body).
fn random_program(r: &mut Rng) -> Vec<u8> {
    let mut instrs = vec![];
    for k in 0..r.below(5) as u32 {
        let reg = (r.pick(&[5, 6, 0, 8]), k);
        instrs.push(WI {
            op: 2,
            ret: reg,
            left: reg,
            right: (1, edge_u32(r)),
        });
    }
    let mut exprs = vec![];
    for _ in 0..1 + r.below(5) {
        let cond_start = instrs.len() as u32;
        match r.below(10) {
            0..=2 => instrs.push(bind(FLAG, (1, u32::from(!r.chance(20))))),
            3 => {} // empty: the flag as left before
            _ => {
                for i in 0..1 + r.below(2) {
                    let mut ins = random_instr(r);
                    if i == 0 || r.chance(70) {
                        ins.ret = FLAG;
                    }
                    instrs.push(ins);
                }
            }
        }
        let body_start = instrs.len() as u32;
        for _ in 0..r.below(8) {
            body_instrs(r, &mut instrs);
        }
        exprs.push([
            cond_start,
            body_start - cond_start,
            body_start,
            instrs.len() as u32 - body_start,
        ]);
    }
    install_msg(1, &exprs, &instrs)
}

/// An install message through the fold parser and compiler (the
/// datapath's path); None when it refuses the program.
fn compile_install(msg: &[u8]) -> Option<Box<FoldProg>> {
    let fold::PortusMsg::Install {
        uid,
        exprs,
        instrs,
        num_instructions,
        error: None,
    } = fold::parse_message(msg).ok()?
    else {
        return None;
    };
    fold::compile(SLOT, uid, &exprs, &instrs, num_instructions).ok()
}

/// Which instruction forms a set of programs used (each must occur).
#[derive(Default, Debug)]
struct Forms {
    fused_if: u64,
    fused_ifv: u64,
    fused_jz: u64,
    micros: u64,
    pairs: u64,
    jz: u64,
    brk: u64,
    by_op: [u64; 17],
}

impl Forms {
    fn add(&mut self, p: &FoldProg) {
        for i in &p.insns[..p.n_main as usize] {
            self.fused_if += u64::from(i.flags & F_IF != 0);
            self.fused_ifv += u64::from(i.flags & F_IFV != 0);
            self.fused_jz += u64::from(i.flags & F_JZ != 0);
            self.micros += u64::from(i.flags & F_WTIME != 0);
            self.pairs += u64::from(i.wr2 != i.wr);
            self.jz += u64::from(i.op == Op::Jz.code());
            self.brk += u64::from(i.op == Op::Brk.code());
            if let Some(n) = self.by_op.get_mut(usize::from(i.op)) {
                *n += 1;
            }
        }
    }

    fn assert_all(&self, what: &str) {
        let used: Vec<u64> = [0usize, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
            .iter()
            .map(|&o| self.by_op[o])
            .collect();
        assert!(
            self.fused_if > 0
                && self.fused_ifv > 0
                && self.fused_jz > 0
                && self.micros > 0
                && self.pairs > 0
                && self.jz > 0
                && self.brk > 0
                && used.iter().all(|&n| n > 0),
            "{what}: some instruction form never occurred: {self:?}"
        );
    }
}

// ------------------------------------------------------------ tests

#[test]
fn random_compiled_programs_match_interpreter() {
    let k = Kernel::load();
    let cases = env_u64("FOLD_JIT_CASES", 100_000);
    let seed = env_u64("FOLD_JIT_SEED", 0x0f01_d717);
    let per_prog = 4;
    let (mut t, mut forms, mut refused) = (Tally::default(), Forms::default(), 0u64);
    let t0 = Instant::now();
    let mut n = 0u64;
    while t.cases < cases {
        let mut r = Rng(seed ^ n.wrapping_mul(0x2545_f491_4f6c_dd1d));
        n += 1;
        let msg = random_program(&mut r);
        let Some(p) = compile_install(&msg) else {
            refused += 1;
            continue;
        };
        forms.add(&p);
        let what = || format!("random program {} (FOLD_JIT_SEED={seed}): {:?}", n - 1, main_of(&p));
        let fd = jit_load(&p, &what);
        t.programs += 1;
        k.put_prog(&p);
        for s in 0..per_prog {
            let st = random_state(&mut r, 30 * s);
            check_same(&k, &fd, &st, &mut t, &|| format!("{}, state {s}", what()));
        }
    }
    println!(
        "fold JIT vs interpreter, random compiled programs: {} cases, {} programs ({refused} refused by compile) in {:.1} s: {t:?}",
        t.cases,
        t.programs,
        t0.elapsed().as_secs_f64()
    );
    forms.assert_all("random compiled programs");
    assert!(
        t.ok > 0 && t.aborts.iter().all(|&a| a > 0),
        "random cases ended OK and in every abort: {t:?}"
    );
}

/// Random linear programs straight in the fold instruction format (src/fold/isa.rs):
/// every opcode (unknown ones too), any mix of flags, forward jumps
/// anywhere (past the end too), any registers except the JIT's own slots.
fn random_linear(r: &mut Rng, lens: std::ops::RangeInclusive<u64>) -> Box<FoldProg> {
    let mut p = Box::new(FoldProg::new_zeroed());
    p.index = SLOT;
    let n = (lens.start() + r.below(lens.end() - lens.start() + 1)) as usize;
    p.n_main = n as u32;
    let reg = |r: &mut Rng| -> u16 {
        match r.below(10) {
            0 => OFF_EXPR_FLAG as u16,
            1 => OFF_FALLTHROUGH as u16,
            2 => OFF_TIME_ZERO as u16,
            3..=7 => (OFF_REPORT + r.below(8) as u32) as u16,
            _ => loop {
                let v = r.below(NREGS as u64) as u16;
                if u32::from(v) != OFF_JIT_NOW && u32::from(v) != OFF_JIT_RET {
                    break v;
                }
            },
        }
    };
    for i in 0..n {
        let op = match r.below(20) {
            0 => r.pick(&[2u8, 17, 200, 255]),
            _ => r.below(17) as u8,
        };
        let flags = (r.next() as u8) & 0x3f;
        // up to 3 past the end (the end, as the interpreter masks with 1023)
        let forward = |r: &mut Rng| (i + 1 + r.below((n - i + 3) as u64) as usize).min(1023) as u32;
        let operand = |r: &mut Rng, imm: bool| if imm { edge_u32(r) } else { u32::from(reg(r)) };
        let mut ins = FoldInsn {
            op,
            flags,
            wr: reg(r),
            cur: reg(r),
            wr2: if r.chance(50) { 0 } else { reg(r) },
            left: operand(r, flags & F_LIMM != 0),
            right: operand(r, flags & F_RIMM != 0),
        };
        if ins.wr2 == 0 {
            ins.wr2 = ins.wr;
        }
        if flags & F_JZ != 0 && (op != Op::Jz.code() && op != Op::Brk.code() && op <= 14) {
            ins.cur = forward(r) as u16;
            if usize::from(ins.cur) >= NREGS {
                // cur cannot name a register too: keep only the jump
                ins.flags &= !(F_IF | F_IFV);
                if op == Op::Ewma.code() {
                    ins.flags &= !F_JZ;
                    ins.cur = reg(r);
                }
            }
        }
        if op == Op::Jz.code() {
            ins.right = forward(r);
        }
        p.insns[i] = ins;
    }
    p
}

#[test]
fn random_linear_programs_match_interpreter() {
    let k = Kernel::load();
    let cases = env_u64("FOLD_JIT_CASES", 100_000) / 2;
    let seed = env_u64("FOLD_JIT_SEED", 0x0f01_d717) ^ 0x11ea;
    let (mut t, mut forms) = (Tally::default(), Forms::default());
    let t0 = Instant::now();
    let mut n = 0u64;
    while t.cases < cases {
        let mut r = Rng(seed ^ n.wrapping_mul(0x2545_f491_4f6c_dd1d));
        n += 1;
        let p = random_linear(&mut r, 1..=40);
        forms.add(&p);
        let what = || format!("random linear program {} (FOLD_JIT_SEED={seed}): {:?}", n - 1, main_of(&p));
        let fd = jit_load(&p, &what);
        t.programs += 1;
        k.put_prog(&p);
        for s in 0..4 {
            let st = random_state(&mut r, 25 * s);
            check_same(&k, &fd, &st, &mut t, &|| format!("{}, state {s}", what()));
        }
    }
    println!(
        "fold JIT vs interpreter, random linear programs: {} cases, {} programs in {:.1} s: {t:?}",
        t.cases,
        t.programs,
        t0.elapsed().as_secs_f64()
    );
    forms.assert_all("random linear programs");
    assert!(
        t.ok > 0 && t.aborts.iter().all(|&a| a > 0),
        "random cases ended OK and in every abort: {t:?}"
    );
}

/// The longest main sections (1023 instructions, fold_vm.h's limit) pass
/// the verifier, jumps included, and still match the interpreter.
#[test]
fn longest_programs_load_and_match() {
    let k = Kernel::load();
    let mut t = Tally::default();
    for n in 0..8u64 {
        let mut r = Rng(0x1023 ^ n);
        let p = random_linear(&mut r, 1023..=1023);
        let what = || format!("long program {n}");
        let insns = compile_main(&p, &JitTarget::TestRun).unwrap();
        t.bpf_insns += insns.len() as u64;
        let fd = jit_load(&p, &what);
        t.programs += 1;
        k.put_prog(&p);
        for s in 0..16 {
            let st = random_state(&mut r, 6 * s);
            check_same(&k, &fd, &st, &mut t, &|| format!("{}, state {s}", what()));
        }
    }
    println!("longest programs: {t:?}");
}

/// Run time the kernel accounted to program `fd` (BPF_ENABLE_STATS run
/// time): (ns, runs) so far.
fn run_stats(fd: i32) -> (u64, u64) {
    let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: info is a bpf_prog_info of len bytes we own.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
    assert_eq!(rc, 0, "bpf_prog_get_info_by_fd: {}", std::io::Error::last_os_error());
    (info.run_time_ns, info.run_cnt)
}

/// Cost figures (not a timed test): in-kernel run time per main section,
/// JIT vs interpreter, for each suite program on ACK-like register files,
/// from the kernel's BPF run-time statistics. Warm caches (back-to-back
/// test runs); the interpreter's figure includes fold_test_main's two map
/// lookups.
#[test]
#[ignore = "benchmark: cargo test --release -p ccp-datapath --test fold_jit -- --ignored --nocapture"]
fn bench_jit_vs_interpreter() {
    let k = Kernel::load();
    // SAFETY: no pointers; returns an fd that keeps statistics on while open.
    let stats = unsafe { libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME) };
    assert!(stats >= 0, "BPF_ENABLE_STATS: {}", std::io::Error::last_os_error());
    // SAFETY: a new fd nobody else owns
    let _stats = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(stats) };
    let runs = env_u64("FOLD_JIT_BENCH_RUNS", 20_000);
    let interp_fd = k.skel.progs.fold_test_main.as_fd().as_raw_fd();
    println!("{:<22} {:>6} {:>6} {:>10} {:>12}", "program", "fold", "bpf", "JIT ns", "interp ns");
    for (name, p) in suite_compiled() {
        let insns = compile_main(&p, &JitTarget::TestRun).unwrap();
        let fd = jit_load(&p, &|| name.clone());
        k.put_prog(&p);
        let states: Vec<Box<FoldState>> = (0..16).map(|s| random_state(&mut Rng(s), 97)).collect();
        let (j0, i0) = (run_stats(fd.as_raw_fd()), run_stats(interp_fd));
        for n in 0..runs {
            let st = &states[(n % 16) as usize];
            run_jit(&fd, st);
            k.interpret(st);
        }
        let (j1, i1) = (run_stats(fd.as_raw_fd()), run_stats(interp_fd));
        let per = |a: (u64, u64), b: (u64, u64)| (b.0 - a.0) as f64 / (b.1 - a.1).max(1) as f64;
        println!(
            "{name:<22} {:>6} {:>6} {:>10.1} {:>12.1}",
            p.n_main,
            insns.len(),
            per(j0, j1),
            per(i0, i1)
        );
    }
}

fn suite_compiled() -> Vec<(String, Box<FoldProg>)> {
    suite_programs()
        .into_iter()
        .map(|(name, src)| {
            let p = compile_install(&portus_install(&src, 1))
                .unwrap_or_else(|| panic!("the fold compiler compiles {name}'s program"));
            (name, p)
        })
        .collect()
}

#[test]
fn suite_programs_match_interpreter() {
    let k = Kernel::load();
    let programs = suite_compiled();
    let mut t = Tally::default();
    let t0 = Instant::now();
    for (name, p) in &programs {
        let what = || format!("ccp-algorithms {name} --dump-program");
        let fd = jit_load(p, &what);
        t.programs += 1;
        t.bpf_insns += compile_main(p, &JitTarget::TestRun).unwrap().len() as u64;
        k.put_prog(p);
        let ok_before = t.ok;
        for s in 0..500u64 {
            let mut r = Rng(0x5017e ^ s);
            // mostly ACK-sized values, so the programs run through
            let st = random_state(&mut r, if s % 4 == 0 { 20 } else { 97 });
            check_same(&k, &fd, &st, &mut t, &|| format!("{}, state {s}", what()));
        }
        assert!(t.ok > ok_before, "{}: no state ran through without an abort", what());
    }
    println!(
        "fold JIT vs interpreter, suite programs {:?}: {} cases in {:.1} s: {t:?}",
        programs.iter().map(|p| &p.0).collect::<Vec<_>>(),
        t.cases,
        t0.elapsed().as_secs_f64()
    );
    assert!(t.ok > t.cases / 4, "the suite's programs mostly ran through: {t:?}");
}

/// The production target: every suite program and a longest random one,
/// compiled for the struct_ops `cong_control` (the flow's slot read from the
/// socket, array lookup, tail call), pass the verifier.
#[test]
fn struct_ops_target_loads() {
    let k = Kernel::load();
    k.skel
        .progs
        .fold_layout
        .test_run(libbpf_rs::ProgramInput::default())
        .expect("running fold_layout");
    let slot_sk_offset = k.skel.maps.bss_data.as_deref().expect("fold_test has a .bss").fold_slot_sk_offset;
    assert!(slot_sk_offset > 0, "fold_layout left the slot offset at 0");
    let target = JitTarget::StructOps {
        flows_map_fd: k.skel.maps.fold_flows.as_fd().as_raw_fd(),
        slot_sk_offset,
        jit_map_fd: k.skel.maps.fold_jit_test.as_fd().as_raw_fd(),
        post_index: 0,
    };
    let mut programs = suite_compiled();
    programs.push(("a 1023-instruction random program".into(), random_linear(&mut Rng(7), 1023..=1023)));
    for (name, p) in &programs {
        let insns = compile_main(p, &target).unwrap_or_else(|e| panic!("{name}: {e}"));
        let fd = load(&insns, &target, "fold_jit_so")
            .unwrap_or_else(|e| panic!("{name}'s section for the struct_ops target: {e}"));
        // It is a program the tail-call table takes.
        k.skel
            .maps
            .fold_jit_test
            .update(&1u32.to_ne_bytes(), &fd.as_raw_fd().to_ne_bytes(), MapFlags::ANY)
            .unwrap_or_else(|e| panic!("{name}: into the prog array: {e}"));
    }
    assert!(!programs.is_empty());
}

// ------------------------------------------------------------ hand-written

fn insn(op: u8, wr: u32, left: Option<u32>, right: Option<u32>) -> FoldInsn {
    // None: an immediate given by the caller afterwards; Some: a register
    FoldInsn {
        op,
        flags: 0,
        wr: wr as u16,
        cur: 0,
        wr2: wr as u16,
        left: left.unwrap_or(0),
        right: right.unwrap_or(0),
    }
}

fn imm(mut i: FoldInsn, left: Option<u32>, right: Option<u32>) -> FoldInsn {
    if let Some(v) = left {
        i.flags |= F_LIMM;
        i.left = v;
    }
    if let Some(v) = right {
        i.flags |= F_RIMM;
        i.right = v;
    }
    i
}

fn prog(insns: &[FoldInsn]) -> Box<FoldProg> {
    let mut p = Box::new(FoldProg::new_zeroed());
    p.index = SLOT;
    p.n_main = insns.len() as u32;
    p.insns[..insns.len()].copy_from_slice(insns);
    p
}

/// Run `p` on `st` in the JIT and the interpreter; both results.
fn both(k: &Kernel, p: &FoldProg, st: &FoldState) -> [FoldState; 2] {
    let fd = jit_load(p, &|| "hand-written program".into());
    k.put_prog(p);
    [run_jit(&fd, st), k.interpret(st)]
}

const R: fn(u32) -> usize = |i| (OFF_REPORT + i) as usize;

#[test]
fn hand_written_programs_give_known_registers() {
    let k = Kernel::load();
    let rep = |i: u32| OFF_REPORT + i;
    // arithmetic, ewma, wrapped max, then an underflow: -94, earlier writes kept
    let mut ewma = imm(insn(5, rep(2), None, None), Some(2), Some(100));
    ewma.cur = rep(3) as u16;
    let p = prog(&[
        imm(insn(1, rep(0), None, None), None, Some(5)), // r0 = 5
        imm(insn(0, rep(1), Some(rep(0)), None), None, Some(7)), // r1 = r0 + 7
        ewma,                                           // (2*50 + 8*100)/10
        imm(insn(10, rep(4), None, None), Some(0xffff_fff0), Some(5)), // wrapped max: 5
        imm(insn(14, rep(5), None, None), Some(3), Some(7)), // 3 - 7: underflow
        imm(insn(1, rep(6), None, None), None, Some(9)), // not reached
    ]);
    let mut st = Box::new(FoldState::new_zeroed());
    st.regs[R(3)] = 50;
    st.regs[R(5)] = 0xdead;
    st.regs[R(6)] = 0xbeef;
    for (side, out) in ["JIT", "interpreter"].iter().zip(both(&k, &p, &st)) {
        assert_eq!(out.regs[OFF_JIT_RET as usize] as i64, -94, "{side}: SUB underflow aborts");
        assert_eq!(
            [out.regs[R(0)], out.regs[R(1)], out.regs[R(2)], out.regs[R(4)]],
            [5, 12, 90, 5],
            "{side}: writes before the abort"
        );
        assert_eq!([out.regs[R(5)], out.regs[R(6)]], [0xdead, 0xbeef], "{side}: nothing after");
    }

    // a fused JZ skipping a body, if / !if, a Micros write, BRK with and without fallthrough
    let mut gt = imm(insn(6, OFF_EXPR_FLAG, None, None), Some(3), Some(5));
    gt.flags |= F_JZ;
    gt.cur = 3;
    let mut micros = imm(insn(1, OFF_MICROS, None, None), None, Some(1000));
    micros.flags |= F_WTIME;
    let p = prog(&[
        gt,                                                              // flag = 3 > 5 = 0: to 3
        imm(insn(1, rep(0), None, None), None, Some(1)),                 // skipped
        insn(Op::Brk.code(), 0, None, None),                                     // skipped
        imm(insn(7, rep(1), None, None), Some(0), Some(8)),              // if 0: no write
        imm(insn(13, rep(2), None, None), Some(0), Some(9)),             // !if 0: 9
        micros,                                                          // time zero = now - 1000
        imm(insn(1, OFF_EXPR_FLAG, None, None), None, Some(1)),
        imm(insn(1, OFF_FALLTHROUGH, None, None), None, Some(1)),
        insn(Op::Brk.code(), 0, None, None),                                     // fallthrough: go on
        imm(insn(1, OFF_FALLTHROUGH, None, None), None, Some(0)),
        insn(Op::Brk.code(), 0, None, None),                                     // stop
        imm(insn(1, rep(3), None, None), None, Some(1)),                 // not reached
    ]);
    let mut st = Box::new(FoldState::new_zeroed());
    st.regs[OFF_JIT_NOW as usize] = 1_000_000;
    st.regs[R(1)] = 0xaa;
    for (side, out) in ["JIT", "interpreter"].iter().zip(both(&k, &p, &st)) {
        assert_eq!(out.regs[OFF_JIT_RET as usize], 0, "{side}: ends OK");
        assert_eq!(
            [out.regs[R(0)], out.regs[R(1)], out.regs[R(2)], out.regs[R(3)]],
            [0, 0xaa, 9, 0],
            "{side}: JZ skip, if / !if, BRK stop"
        );
        assert_eq!(out.regs[OFF_FALLTHROUGH as usize], 0, "{side}: ran past the first BRK");
        assert_eq!(out.regs[OFF_MICROS as usize], 1000, "{side}: Micros written");
        assert_eq!(out.regs[OFF_TIME_ZERO as usize], 999_000, "{side}: time zero moved");
    }

    // libccp's partial MUL check: 2^63 * 3 wraps to 2^63, not below a: passes;
    // then a division by zero. 2^63 * 2 wraps to 0 < a with b > 0: aborts.
    let p = prog(&[
        imm(insn(12, rep(0), Some(rep(7)), None), None, Some(3)), // 2^63 * 3 = 2^63: not < a
        imm(insn(3, rep(1), None, Some(rep(6))), Some(10), None), // 10 / 0
    ]);
    let mut st = Box::new(FoldState::new_zeroed());
    st.regs[R(7)] = 1 << 63;
    for (side, out) in ["JIT", "interpreter"].iter().zip(both(&k, &p, &st)) {
        assert_eq!(out.regs[OFF_JIT_RET as usize] as i64, -92, "{side}: division by zero");
        assert_eq!(out.regs[R(0)], 1 << 63, "{side}: wrapped product kept (libccp's check)");
    }
    let p = prog(&[imm(insn(12, rep(0), Some(rep(7)), None), None, Some(2))]);
    for (side, out) in ["JIT", "interpreter"].iter().zip(both(&k, &p, &st)) {
        assert_eq!(out.regs[OFF_JIT_RET as usize] as i64, -93, "{side}: MUL overflow");
        assert_eq!(out.regs[R(0)], 0, "{side}: nothing written");
    }
}

#[test]
fn compile_refuses_backward_jumps_and_bad_registers() {
    let mut back = imm(insn(1, OFF_EXPR_FLAG, None, None), None, Some(0));
    back.flags |= F_JZ;
    back.cur = 0;
    let p = prog(&[back]);
    match compile_main(&p, &JitTarget::TestRun) {
        Err(JitError::Insn { index: 0, what }) => assert!(what.contains("back"), "{what}"),
        other => panic!("a jump to itself: {other:?}"),
    }
    let p = prog(&[
        imm(insn(1, OFF_REPORT, None, None), None, Some(0)),
        insn(0, OFF_REPORT, Some(NREGS as u32), Some(OFF_REPORT)),
    ]);
    match compile_main(&p, &JitTarget::TestRun) {
        Err(JitError::Insn { index: 1, what }) => assert!(what.contains("512"), "{what}"),
        other => panic!("left register 512: {other:?}"),
    }
    // a target past the end is the end: fine
    let mut end = insn(Op::Jz.code(), 0, None, None);
    end.right = 999;
    assert!(compile_main(&prog(&[end]), &JitTarget::TestRun).is_ok());
}
