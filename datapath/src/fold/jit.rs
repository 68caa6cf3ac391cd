//! Fold JIT: the main section of a compiled fold program ([`FoldProg`]
//! instructions `[0, n_main)`, the linear form [`crate::fold::compile`]
//! makes of a Portus install message) translated into raw BPF instructions,
//! loaded as a program of its own, so an ACK runs the fold function as
//! straight-line BPF instead of one `bpf_loop` step of the interpreter
//! (`bpf/fold_vm.h` `fold_step`) per instruction.
//!
//! Semantics: exactly those of `fold_step` / `fold_run_section` (which follow
//! libccp 1.2's machine.c): the same register file, the same return codes
//! (0, -91 ADD overflow, -92 DIV by zero, -93 MUL overflow (libccp's partial
//! check), -94 SUB underflow), the same order of writes (an abort leaves
//! earlier writes in place; a fused IF/IFV reads `cur` after `wr` was
//! written; a Micros write moves time zero after `wr2`). The oracle chain:
//! libccp -> interpreter (tests/fold_differential.rs) -> JIT
//! (tests/fold_jit.rs, bit-identical register files and return codes).
//! `wrapped_max` (MAXWRAP) is compiled too (`fold_max_wrap`).
//!
//! Register conventions of the generated code: r6 = base of the register
//! file (`struct fold_state`, u64 `regs[512]`; callee-saved, so helper calls
//! keep it), r7 = the program's context (StructOps: kept for the tail call),
//! r0-r5 scratch (r1 = left operand a, r2 = right operand b, r3 = result,
//! r4/r5 temporaries). No stack. Before leaving, the result code is stored
//! as a u64 (the sign-extended i32) at `regs[OFF_JIT_RET]`; a Micros write
//! reads now_ns from `regs[OFF_JIT_NOW]` (the caller puts it there).
//!
//! Control flow: jumps only go forward (a target at or past `n_main` ends the
//! section with 0), so the output is one block per instruction with forward
//! jumps, patched once every block's start is known; a backward jump is
//! refused ([`JitError`]), as is a register offset >= [`NREGS`] (the
//! interpreter masks; the compiler never emits either).
//!
//! Targets ([`JitTarget`]):
//! - `TestRun`: a BPF_PROG_TYPE_SYSCALL program (sleepable) whose context IS
//!   the register file (4096 bytes): run with BPF_PROG_TEST_RUN, the kernel
//!   copies the context back, result code included.
//! - `StructOps`: a `tcp_congestion_ops.cong_control` struct_ops program,
//!   entered by tail call from the `ccp` struct_ops: it finds the flow's
//!   registers at `flows_map[slot]`, where `slot` is the u32 at
//!   `slot_sk_offset` bytes from the socket (bpf/fold_ccp.h `fold_flow_of`;
//!   the value starts with `struct fold_state`), runs the section and
//!   tail-calls `jit_map[post_index]` (the rest of the ACK's work). No state
//!   (no slot): straight to the tail call.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys::{self, bpf_insn};

use super::bpf_asm::*;

use super::isa::{
    FoldInsn, FoldProg, Op, F_IF, F_IFV, F_JZ, F_LIMM, F_RIMM, F_WTIME, MAX_LINEAR, NREGS, OFF_EXPR_FLAG,
    OFF_FALLTHROUGH, OFF_JIT_NOW, OFF_JIT_RET, OFF_TIME_ZERO,
};

// fold_vm.h return codes (libccp ccp_error.h)
const ERR_ADD_OVERFLOW: i32 = -91;
const ERR_DIV_BY_ZERO: i32 = -92;
const ERR_MUL_OVERFLOW: i32 = -93;
const ERR_SUB_UNDERFLOW: i32 = -94;

/// Where the compiled code runs (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JitTarget {
    /// BPF_PROG_TYPE_SYSCALL, context = the 4096-byte register file.
    /// Only tests/fold_jit.rs builds it (the differential test's vehicle).
    TestRun,
    /// BPF_PROG_TYPE_STRUCT_OPS `cong_control`: registers from
    /// `flows_map_fd[*(u32 *)(sk + slot_sk_offset)]` (an array map), then a
    /// tail call into `jit_map_fd[post_index]` (a BPF_MAP_TYPE_PROG_ARRAY).
    StructOps {
        flows_map_fd: i32,
        slot_sk_offset: u32,
        jit_map_fd: i32,
        post_index: u32,
    },
}

/// Why a program was not compiled or not loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JitError {
    /// Instruction `index` of the main section cannot be compiled: `what`.
    /// The program keeps running in the interpreter.
    Insn { index: usize, what: String },
    /// The program as a whole (its size, a jump too long).
    Program(String),
    /// bpf_prog_load failed: errno, and the verifier log (log level 1).
    Load { name: String, errno: i32, log: String },
}

impl std::fmt::Display for JitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JitError::Insn { index, what } => write!(f, "fold JIT: instruction {index}: {what}"),
            JitError::Program(what) => write!(f, "fold JIT: {what}"),
            JitError::Load { name, errno, log } => write!(
                f,
                "fold JIT: loading {name:?} failed: {} (errno {errno}); verifier log:\n{log}",
                std::io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

impl std::error::Error for JitError {}

/// Compile the main section `[0, prog.n_main)` of `prog` for `target`.
///
/// Returns the BPF instructions, for [`load`]. Errors ([`JitError::Insn`]):
/// a register offset >= [`NREGS`] (left/right without their immediate flag,
/// wr, wr2, cur where it names a register), a jump (JZ's `right`,
/// [`F_JZ`]'s `cur`, both masked with MAX_LINEAR - 1 as the interpreter
/// does) to the instruction itself or before it; ([`JitError::Program`])
/// `n_main` >= MAX_LINEAR, or a jump farther than 32767 BPF instructions.
/// Opcodes other than libccp's and JZ/BRK do nothing, as in the interpreter.
pub fn compile_main(prog: &FoldProg, target: &JitTarget) -> Result<Vec<bpf_insn>, JitError> {
    let n = prog.n_main as usize;
    if n >= MAX_LINEAR {
        return Err(JitError::Program(format!(
            "main section of {n} instructions (at most {})",
            MAX_LINEAR - 1
        )));
    }
    let mut a = Asm::new();
    // labels 0..=n: the start of each instruction's block; n is "section done, OK"
    let blocks: Vec<Label> = (0..=n).map(|_| a.label()).collect();
    let store = a.label();
    let tail = a.label();
    let aborts: Vec<(i32, Label)> = [ERR_ADD_OVERFLOW, ERR_DIV_BY_ZERO, ERR_MUL_OVERFLOW, ERR_SUB_UNDERFLOW]
        .into_iter()
        .map(|c| (c, a.label()))
        .collect();
    let abort = |code: i32| aborts.iter().find(|(c, _)| *c == code).unwrap().1;

    match *target {
        JitTarget::TestRun => a.mov64(R6, R1),
        JitTarget::StructOps {
            flows_map_fd,
            slot_sk_offset,
            ..
        } => {
            let off = i16::try_from(slot_sk_offset).map_err(|_| {
                JitError::Program(format!("slot offset {slot_sk_offset} in the socket does not fit a load"))
            })?;
            a.mov64(R7, R1);
            a.emit(raw(BPF_LDX | BPF_MEM | BPF_DW, R1, R1, 0, 0)); // sk: the first argument
            a.emit(raw(BPF_LDX | BPF_MEM | BPF_W, R1, R1, off, 0)); // the flow's slot
            a.emit(raw(BPF_STX | BPF_MEM | BPF_W, R10, R1, -4, 0)); // the key on the stack
            a.mov64(R2, R10);
            a.alu64_imm(ADD, R2, -4);
            a.ld_map_fd(R1, flows_map_fd);
            a.call(libbpf_sys::BPF_FUNC_map_lookup_elem);
            a.jmp_imm(JEQ, R0, 0, tail);
            a.mov64(R6, R0);
        }
    }
    for (i, ins) in prog.insns[..n].iter().enumerate() {
        a.bind(blocks[i]);
        let target_of = |v: u32, what: &str| -> Result<Label, JitError> {
            let t = (v as usize) & (MAX_LINEAR - 1);
            if t <= i {
                return Err(JitError::Insn {
                    index: i,
                    what: format!("{what} jumps back to instruction {t} (jumps only go forward)"),
                });
            }
            Ok(blocks[t.min(n)])
        };
        emit_insn(&mut a, i, ins, &target_of, blocks[n], &abort)?;
    }
    a.bind(blocks[n]);
    a.mov64_imm(R1, 0);
    a.ja(store);
    // only the abort stubs some jump uses: the verifier refuses unreachable code
    for &(code, l) in &aborts {
        if !a.used(l) {
            continue;
        }
        a.bind(l);
        a.mov64_imm(R1, code);
        a.ja(store);
    }
    a.bind(store);
    a.store_reg(OFF_JIT_RET, R1);
    a.bind(tail);
    match *target {
        JitTarget::TestRun => {}
        JitTarget::StructOps {
            jit_map_fd,
            post_index,
            ..
        } => {
            a.mov64(R1, R7);
            a.ld_map_fd(R2, jit_map_fd);
            a.mov_u32(R3, post_index);
            a.call(libbpf_sys::BPF_FUNC_tail_call);
        }
    }
    a.mov64_imm(R0, 0);
    a.exit();
    a.finish()
}

/// A register offset of instruction `i`, checked against the file's size.
fn reg(i: usize, v: u32, what: &str) -> Result<u32, JitError> {
    if (v as usize) < NREGS {
        Ok(v)
    } else {
        Err(JitError::Insn {
            index: i,
            what: format!("{what} register offset {v} outside the {NREGS}-register file"),
        })
    }
}

/// dst = operand (an immediate, zero-extended, or a register)
fn operand(a: &mut Asm, i: usize, dst: u8, v: u32, imm: bool, what: &str) -> Result<(), JitError> {
    if imm {
        a.mov_u32(dst, v);
    } else {
        a.load_reg(dst, reg(i, v, what)?);
    }
    Ok(())
}

/// One instruction's block: fold_step's switch, then its writes.
fn emit_insn(
    a: &mut Asm,
    i: usize,
    ins: &FoldInsn,
    target_of: &dyn Fn(u32, &str) -> Result<Label, JitError>,
    done: Label,
    abort: &dyn Fn(i32) -> Label,
) -> Result<(), JitError> {
    let next = a.label();
    // IF/NOTIF with a zero (non-zero) condition skip the writes to here
    let jz = a.label();
    let (limm, rimm) = (ins.flags & F_LIMM != 0, ins.flags & F_RIMM != 0);
    let left = |a: &mut Asm| operand(a, i, R1, ins.left, limm, "left");
    let right = |a: &mut Asm| operand(a, i, R2, ins.right, rimm, "right");
    match Op::from_code(ins.op) {
        Some(Op::Jz) => {
            let t = target_of(ins.right, "JZ")?;
            a.load_reg(R4, OFF_EXPR_FLAG);
            a.jmp_imm(JEQ, R4, 0, t);
            a.bind(next);
            a.bind(jz);
            return Ok(());
        }
        Some(Op::Brk) => {
            a.load_reg(R4, OFF_EXPR_FLAG);
            a.jmp_imm(JEQ, R4, 0, next);
            a.load_reg(R4, OFF_FALLTHROUGH);
            a.jmp_imm(JEQ, R4, 0, done);
            a.bind(next);
            a.bind(jz);
            return Ok(());
        }
        Some(Op::Bind) => {
            right(a)?;
            a.mov64(R3, R2);
        }
        Some(Op::Add) => {
            left(a)?;
            right(a)?;
            a.mov64(R3, R1);
            a.alu64(ADD, R3, R2);
            a.jmp(JLT, R3, R1, abort(ERR_ADD_OVERFLOW));
        }
        Some(Op::Sub) => {
            left(a)?;
            right(a)?;
            a.mov64(R3, R1);
            a.alu64(SUB, R3, R2);
            a.jmp(JGT, R3, R1, abort(ERR_SUB_UNDERFLOW));
        }
        Some(Op::Mul) => {
            left(a)?;
            right(a)?;
            a.mov64(R3, R1);
            a.alu64(MUL, R3, R2);
            // libccp: abort only if (res < a && b > 0)
            let ok = a.label();
            a.jmp(JGE, R3, R1, ok);
            a.jmp_imm(JNE, R2, 0, abort(ERR_MUL_OVERFLOW));
            a.bind(ok);
        }
        Some(Op::Div) => {
            left(a)?;
            right(a)?;
            a.jmp_imm(JEQ, R2, 0, abort(ERR_DIV_BY_ZERO));
            a.mov64(R3, R1);
            a.alu64(DIV, R3, R2); // BPF_DIV with off 0: unsigned
        }
        Some(Op::Equiv | Op::Gt | Op::Lt) => {
            left(a)?;
            right(a)?;
            let op = match Op::from_code(ins.op) {
                Some(Op::Equiv) => JEQ,
                Some(Op::Gt) => JGT,
                _ => JLT,
            };
            let t = a.label();
            a.mov64_imm(R3, 1);
            a.jmp(op, R1, R2, t);
            a.mov64_imm(R3, 0);
            a.bind(t);
        }
        Some(Op::Max | Op::Min) => {
            left(a)?;
            right(a)?;
            // res = a > b ? a : b  (min: a < b ? a : b)
            let t = a.label();
            a.mov64(R3, R1);
            a.jmp(if ins.op == Op::Max.code() { JGT } else { JLT }, R1, R2, t);
            a.mov64(R3, R2);
            a.bind(t);
        }
        Some(Op::Ewma) => {
            left(a)?;
            right(a)?;
            // fold_ewma(a, regs[cur], b): cur == 0 ? b : (a*cur + (10-a)*b) / 10, wrapping
            let t = a.label();
            a.load_reg(R4, reg(i, u32::from(ins.cur), "EWMA's current-value")?);
            a.mov64(R3, R2);
            a.jmp_imm(JEQ, R4, 0, t);
            a.mov64(R3, R1);
            a.alu64(MUL, R3, R4);
            a.mov64_imm(R5, 10);
            a.alu64(SUB, R5, R1);
            a.alu64(MUL, R5, R2);
            a.alu64(ADD, R3, R5);
            a.alu64_imm(DIV, R3, 10);
            a.bind(t);
        }
        Some(Op::MaxWrap) => {
            left(a)?;
            right(a)?;
            emit_max_wrap(a);
        }
        Some(Op::If | Op::NotIf) => {
            left(a)?;
            right(a)?;
            a.jmp_imm(if ins.op == Op::If.code() { JEQ } else { JNE }, R1, 0, jz);
            a.mov64(R3, R2);
        }
        _ => {
            // fold_step's default: nothing, not even the F_JZ check
            a.bind(next);
            a.bind(jz);
            return Ok(());
        }
    }
    emit_writes(a, i, ins, target_of, jz)?;
    a.bind(next);
    Ok(())
}

/// fold_max_wrap(a = r1, b = r2) into r3: a == 0 ? b : b == 0 ? a :
/// (dif32(b32, a32) < dif32(a32, b32) ? a32 : b32), where dif32(l, r) =
/// r > l ? r - l : (0xffffffff - l) + r in u32, i.e. r - l - 1 mod 2^32.
fn emit_max_wrap(a: &mut Asm) {
    let done = a.label();
    a.mov64(R3, R2);
    a.jmp_imm(JEQ, R1, 0, done);
    a.mov64(R3, R1);
    a.jmp_imm(JEQ, R2, 0, done);
    a.alu32(MOV, R1, R1); // a32, zero-extended
    a.alu32(MOV, R2, R2); // b32
    // r4 = dif32(b32, a32)
    let k1 = a.label();
    a.alu32(MOV, R4, R1);
    a.alu32(SUB, R4, R2);
    a.jmp(JGT, R1, R2, k1);
    a.alu32_imm(SUB, R4, 1);
    a.bind(k1);
    // r5 = dif32(a32, b32)
    let k2 = a.label();
    a.alu32(MOV, R5, R2);
    a.alu32(SUB, R5, R1);
    a.jmp(JGT, R2, R1, k2);
    a.alu32_imm(SUB, R5, 1);
    a.bind(k2);
    a.mov64(R3, R1);
    a.jmp(JLT, R4, R5, done);
    a.mov64(R3, R2);
    a.bind(done);
}

/// The result (r3) written as fold_step writes it: wr, then wr2 (plain, or
/// a fused IF / IFV), then Micros' time zero, then the fused JZ (`jz` is
/// bound before it: IF/NOTIF without a write land there).
fn emit_writes(
    a: &mut Asm,
    i: usize,
    ins: &FoldInsn,
    target_of: &dyn Fn(u32, &str) -> Result<Label, JitError>,
    jz: Label,
) -> Result<(), JitError> {
    let wr = reg(i, u32::from(ins.wr), "wr")?;
    let wr2 = reg(i, u32::from(ins.wr2), "wr2")?;
    a.store_reg(wr, R3);
    if ins.flags & F_IF != 0 {
        let skip = a.label();
        a.jmp_imm(JEQ, R3, 0, skip);
        a.load_reg(R4, reg(i, u32::from(ins.cur), "fused IF's source")?);
        a.store_reg(wr2, R4);
        a.bind(skip);
    } else if ins.flags & F_IFV != 0 {
        let skip = a.label();
        a.load_reg(R4, reg(i, u32::from(ins.cur), "fused IF's condition")?);
        a.jmp_imm(JEQ, R4, 0, skip);
        a.store_reg(wr2, R3);
        a.bind(skip);
    } else if wr2 != wr {
        a.store_reg(wr2, R3);
    }
    if ins.flags & F_WTIME != 0 {
        // time_zero_ns = now_ns - res
        a.load_reg(R4, OFF_JIT_NOW);
        a.alu64(SUB, R4, R3);
        a.store_reg(OFF_TIME_ZERO, R4);
    }
    a.bind(jz);
    if ins.flags & F_JZ != 0 {
        let t = target_of(u32::from(ins.cur), "fused JZ")?;
        a.load_reg(R4, OFF_EXPR_FLAG);
        a.jmp_imm(JEQ, R4, 0, t);
    }
    Ok(())
}

/// Size of the verifier log buffer kept on a failed load.
const LOG_BYTES: usize = 1 << 20;

/// The BTF id of `struct tcp_congestion_ops` in vmlinux and the member index
/// of `cong_control` (the struct_ops program's expected attach type); read
/// once per process (parsing vmlinux's BTF takes milliseconds).
fn cong_control_attach() -> Result<(u32, u32), JitError> {
    static ATTACH: std::sync::OnceLock<Result<(u32, u32), JitError>> = std::sync::OnceLock::new();
    ATTACH.get_or_init(read_cong_control_attach).clone()
}

fn read_cong_control_attach() -> Result<(u32, u32), JitError> {
    use libbpf_rs::btf::types::Struct;
    let err = |what: String| JitError::Program(format!("struct_ops target: {what}"));
    let btf = libbpf_rs::btf::Btf::from_vmlinux()
        .map_err(|e| err(format!("reading the kernel's BTF (/sys/kernel/btf/vmlinux): {e}")))?;
    let ops: Struct = btf
        .type_by_name("tcp_congestion_ops")
        .ok_or_else(|| err("vmlinux BTF has no struct tcp_congestion_ops".into()))?;
    let idx = ops
        .iter()
        .position(|m| m.name.is_some_and(|n| n == "cong_control"))
        .ok_or_else(|| err("struct tcp_congestion_ops has no member cong_control".into()))?;
    Ok((u32::from(ops.type_id()), idx as u32))
}

/// Load `insns` (from [`compile_main`] for the same `target`) as a BPF
/// program named `name` (at most 15 characters kept; letters, digits, `_`
/// and `.`), license GPL. TestRun: BPF_PROG_TYPE_SYSCALL, sleepable.
/// StructOps: BPF_PROG_TYPE_STRUCT_OPS with attach_btf_id = vmlinux's
/// `struct tcp_congestion_ops` and expected_attach_type = the member index
/// of `cong_control` (the fds inside `insns` must still be open).
///
/// Returns the program's fd (closing it unloads the program unless a map
/// holds it). Errors: [`JitError::Load`] with errno and the verifier's log
/// (the load is retried with log level 1 and a 1 MiB buffer to get it);
/// [`JitError::Program`] for a name with a NUL or a kernel without the BTF
/// the struct_ops target needs.
pub fn load(insns: &[bpf_insn], target: &JitTarget, name: &str) -> Result<OwnedFd, JitError> {
    let cname = CString::new(name)
        .map_err(|_| JitError::Program(format!("program name {name:?} contains a NUL byte")))?;
    let license = c"GPL";
    let mut opts = libbpf_sys::bpf_prog_load_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
        ..Default::default()
    };
    let prog_type = match target {
        JitTarget::TestRun => {
            opts.prog_flags = libbpf_sys::BPF_F_SLEEPABLE;
            libbpf_sys::BPF_PROG_TYPE_SYSCALL
        }
        JitTarget::StructOps { .. } => {
            let (btf_id, member) = cong_control_attach()?;
            opts.attach_btf_id = btf_id;
            opts.expected_attach_type = member;
            libbpf_sys::BPF_PROG_TYPE_STRUCT_OPS
        }
    };
    let try_load = |opts: &mut libbpf_sys::bpf_prog_load_opts| -> Result<OwnedFd, i32> {
        // SAFETY: name and license are NUL-terminated and live across the
        // call; insns points to insns.len() instructions; opts is a valid
        // bpf_prog_load_opts with sz set and, when log_buf is set, a buffer
        // of log_size bytes.
        let fd = unsafe {
            libbpf_sys::bpf_prog_load(
                prog_type,
                cname.as_ptr(),
                license.as_ptr(),
                insns.as_ptr(),
                insns.len() as _,
                opts,
            )
        };
        if fd < 0 {
            Err(-fd)
        } else {
            // SAFETY: a new fd that nothing else owns
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        }
    };
    // Without a log first: logging slows the verifier down.
    match try_load(&mut opts) {
        Ok(fd) => Ok(fd),
        Err(_) => {
            let mut log = vec![0u8; LOG_BYTES];
            opts.log_level = 1;
            opts.log_size = LOG_BYTES as u32;
            opts.log_buf = log.as_mut_ptr().cast();
            match try_load(&mut opts) {
                Ok(fd) => Ok(fd), // passed with a log: take it
                Err(errno) => {
                    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                    Err(JitError::Load {
                        name: name.to_string(),
                        errno,
                        log: String::from_utf8_lossy(&log[..end]).into_owned(),
                    })
                }
            }
        }
    }
}
