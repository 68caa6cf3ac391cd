//! Portus's install / update-field / change-program messages turned into the
//! map entries of the in-kernel fold interpreter (`bpf/fold_vm.h`).
//!
//! libccp 1.2 is the reference for every rule here (read in its ccp.c,
//! machine.c, serialize.c; re-implemented, not copied):
//! - message header: `u16 type, u16 len, u32 socket id`, little endian;
//!   type 2 install, 3 update fields, 4 change program.
//! - install: `u32 program_uid, num_expressions, num_instructions`, then
//!   16-byte expressions `{cond_start, num_cond, body_start, num_body}` and
//!   16-byte instructions `u8 op, (u8 type, u32 index) x 3 (result, left,
//!   right)`, packed. A program with uid 1 first clears the program table
//!   (libccp's "a new Portus started" rule); programs take the first free of
//!   [`LIBCCP_MAX_PROGRAMS`] slots and a uid resolves to the first slot that
//!   holds it.
//! - update fields: `u32 count` (libccp reads only its first byte, as a
//!   signed char), then 13-byte `{u8 type, u32 index, u64 value}`; control
//!   registers and the implicit Cwnd (4) / Rate (5) can be updated; the
//!   updates are staged and applied at the flow's next invocation.
//! - change program: `u32 program_uid, u32 count` then updates as above; it
//!   drops updates staged earlier.
//!
//! The compiled form ([`FoldProg`]) is linear: per expression the condition,
//! a JZ over the body, the body, a BRK; register operands resolved to
//! offsets in the flat register file (see fold_vm.h for the layout and why).
//!
//! Where libccp has undefined behaviour (indices past its arrays, more than
//! 256 instructions or expressions, instruction ranges reaching index 256,
//! which makes its u8 loop counter wrap forever) the message is refused with
//! [`FoldMsgError::Unsupported`] instead (its slot stays empty in the
//! kernel). An install refused for a bad instruction still takes its slot
//! with the half-read program, as in libccp (the bad instruction partly
//! filled in, the rest zero), and the kernel gets that same program.

use std::collections::{HashMap, HashSet};

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use crate::stats::{monotonic_ns, Samples};

// ---- layout constants: mirror bpf/fold_vm.h ----
pub const MAX_REPORT: u32 = 110;
pub const MAX_CONTROL: u32 = 110;
pub const MAX_TMP: u32 = 8;
pub const MAX_LOCAL: u32 = 8;
/// libccp's flat register file (struct register_file): where each class
/// starts, and its size; operands index it (an index past a class reads
/// the next class, as in libccp).
const FLAT_REPORT: u32 = 0;
const FLAT_CONTROL: u32 = 110;
const FLAT_IMPLICIT: u32 = 220;
const FLAT_TMP: u32 = 226;
const FLAT_LOCAL: u32 = 234;
pub const N_FILE: u32 = 242;
// Physical offsets in fold_state.regs (fold_vm.h explains the layout).
/// Control register i is at `OFF_CONTROL_END - i`.
pub const OFF_CONTROL_END: u32 = 109;
pub const OFF_IMPLICIT: u32 = 110;
pub const OFF_TMP: u32 = 116;
pub const OFF_LOCAL: u32 = 124;
pub const OFF_PRIM: u32 = 132;
pub const N_PRIM: u32 = 15;
pub const OFF_ZERO: u32 = 147;
pub const OFF_DISCARD: u32 = 148;
/// fold_state.time_zero_ns and .slot (only the BPF side and tests use them).
pub const OFF_TIME_ZERO: u32 = 149;
pub const OFF_SLOT: u32 = 150;
/// Register slot where a compiled main section (`fold_jit`) leaves its
/// result (0 or a libccp abort code, as i64); never an operand.
pub const OFF_JIT_RET: u32 = 151;
/// Register slot holding the invocation's now_ns for a compiled main section
/// (a write to Micros sets time zero = now_ns - value); never an operand.
pub const OFF_JIT_NOW: u32 = 152;
pub const OFF_REPORT: u32 = 153;
pub const NREGS: usize = 512;
pub const MAX_LINEAR: usize = 1024;
/// Entries of the kernel program map (slot 0 unused).
pub const MAX_SLOTS: u32 = 16;
/// libccp's program table size as the `libccp` crate sets it.
pub const LIBCCP_MAX_PROGRAMS: u32 = 10;

pub const OP_ADD: u8 = 0;
pub const OP_BIND: u8 = 1;
pub const OP_DEF: u8 = 2;
pub const OP_DIV: u8 = 3;
pub const OP_EWMA: u8 = 5;
pub const OP_IF: u8 = 7;
pub const OP_MUL: u8 = 12;
pub const OP_NOTIF: u8 = 13;
pub const OP_SUB: u8 = 14;
/// libccp's MAX_OP: opcodes 0..15 are valid on the wire.
pub const OP_COUNT: u8 = 15;
pub const OP_JZ: u8 = 15;
pub const OP_BRK: u8 = 16;
pub const F_LIMM: u8 = 1;
pub const F_RIMM: u8 = 2;
pub const F_WTIME: u8 = 4;
/// After the instruction, jump to `cur` if the expression flag is 0 (a JZ
/// fused into the condition's last instruction; never on EWMA, whose `cur`
/// is an operand).
pub const F_JZ: u8 = 8;
/// A fused `IF wr2 wr cur`: after writing the result to `wr`, if it is
/// non-zero, `wr2` = register `cur` (never with [`F_JZ`], [`F_WTIME`] or on
/// EWMA, which use `cur` or move Micros).
pub const F_IF: u8 = 16;
/// A fused `IF wr2 cur wr`: after writing the result to `wr`, if register
/// `cur` is non-zero, `wr2` = the result too (same exclusions as [`F_IF`]).
pub const F_IFV: u8 = 32;
/// Flags that make `wr2` a conditional write and `cur` an operand.
const F_FUSED_IF: u8 = F_IF | F_IFV;
/// Implicit registers the compiler tracks (flat offsets).
pub const OFF_EXPR_FLAG: u32 = OFF_IMPLICIT;
pub const OFF_FALLTHROUGH: u32 = OFF_IMPLICIT + 1;

pub const STAGED_CHANGE: u32 = 1;
pub const STAGED_CWND: u32 = 2;
pub const STAGED_RATE: u32 = 4;
pub const STAGED_CONTROL: u32 = 8;

// libccp register types (ccp_priv.h)
pub const REG_NONVOLATILE_CONTROL: u8 = 0;
pub const REG_IMMEDIATE: u8 = 1;
pub const REG_IMPLICIT: u8 = 2;
pub const REG_LOCAL: u8 = 3;
pub const REG_PRIMITIVE: u8 = 4;
pub const REG_VOLATILE_REPORT: u8 = 5;
pub const REG_NONVOLATILE_REPORT: u8 = 6;
pub const REG_TMP: u8 = 7;
pub const REG_VOLATILE_CONTROL: u8 = 8;

const IMPLICIT_MICROS: u32 = 3;
const IMPLICIT_CWND: u32 = 4;
const IMPLICIT_RATE: u32 = 5;
/// libccp's DEF default meaning "+infinity" (older Portus encoding).
const DEF_INFINITY_MARK: u32 = 0x3fff_ffff;

const MSG_INSTALL: u16 = 2;
const MSG_UPDATE_FIELDS: u16 = 3;
const MSG_CHANGE_PROG: u16 = 4;
const HDR_LEN: usize = 8;
/// libccp's BIGGEST_MSG_SIZE.
const BIGGEST_MSG: usize = 32678;
/// libccp's MAX_MUTABLE_REG: most updates in one message.
const MAX_UPDATES: u32 = 222;
const MAX_EXPRESSIONS: u32 = 256;
const MAX_INSTRUCTIONS: u32 = 256;
const INSTR_BYTES: usize = 16;
const EXPR_BYTES: usize = 16;
const UPDATE_BYTES: usize = 13;

/// One compiled instruction (`struct fold_insn`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct FoldInsn {
    pub op: u8,
    pub flags: u8,
    pub wr: u16,
    /// EWMA: the register read as the current value; with [`F_JZ`]: the
    /// jump target.
    pub cur: u16,
    /// A second register written with the same result (a fused `BIND wr2
    /// wr` after it); `wr` when there is none.
    pub wr2: u16,
    pub left: u32,
    pub right: u32,
}

/// One program table entry (`struct fold_prog`), the value of the kernel's
/// program map at key `index` (the libccp slot number).
#[repr(C)]
#[derive(Clone, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct FoldProg {
    pub index: u32,
    pub uid: u32,
    pub n_main: u32,
    pub reset_off: u32,
    pub reset_len: u32,
    pub init_off: u32,
    pub init_len: u32,
    pub num_to_return: u32,
    /// Reports send this many: 0 until the program's first volatile reset
    /// (libccp computes num_to_return lazily); the BPF side sets it.
    pub num_to_return_live: u32,
    pub _pad: u32,
    pub insns: [FoldInsn; MAX_LINEAR],
}

/// Staged updates of one flow (`struct fold_staged`).
#[repr(C)]
#[derive(Clone, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct FoldStaged {
    pub flags: u32,
    pub change_slot: u32,
    pub cwnd: u64,
    pub rate: u64,
    pub control_mask: [u64; 2],
    pub control: [u64; MAX_CONTROL as usize],
}

/// Per-flow interpreter state (`struct fold_state`): the registers, with
/// Micros' time zero at [`OFF_TIME_ZERO`] and the program slot in the low
/// half of [`OFF_SLOT`]. User space only zeroes it (tests set the time zero).
#[repr(C)]
#[derive(Clone, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct FoldState {
    pub regs: [u64; NREGS],
}

const _: () = assert!(std::mem::size_of::<FoldInsn>() == 16);
const _: () = assert!(std::mem::size_of::<FoldProg>() == 40 + 16 * MAX_LINEAR);
const _: () = assert!(std::mem::size_of::<FoldStaged>() == 40 + 8 * MAX_CONTROL as usize);
const _: () = assert!(std::mem::size_of::<FoldState>() == 8 * NREGS);

/// A Portus message the datapath refused, with libccp's error code where
/// libccp refuses it too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FoldMsgError {
    /// libccp rejects the message with this code (ccp_error.h), e.g. -33 for
    /// an unknown opcode; `what` says which part.
    Libccp { code: i32, what: String },
    /// libccp accepts it without effect (change to an unknown program uid:
    /// its ccp_read_msg returns a positive count, which the crate reports as
    /// an error too).
    NoEffect(String),
    /// Outside what libccp handles safely (its behaviour is undefined there)
    /// or past the kernel program's capacity.
    Unsupported(String),
    /// Refused by the program table's guard ([`FoldTables::guarded`]): the
    /// install would evict the program a live flow runs.
    Evicts(String),
}

impl std::fmt::Display for FoldMsgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FoldMsgError::Libccp { code, what } => write!(f, "{what} (libccp error {code})"),
            FoldMsgError::NoEffect(what) => write!(f, "{what} (ignored, as libccp does)"),
            FoldMsgError::Unsupported(what) => {
                write!(f, "{what} (unsupported: beyond libccp's limits)")
            }
            FoldMsgError::Evicts(what) => {
                write!(f, "{what} (refused: it would evict a live flow's program)")
            }
        }
    }
}

impl std::error::Error for FoldMsgError {}

fn libccp_err(code: i32, what: impl Into<String>) -> FoldMsgError {
    FoldMsgError::Libccp {
        code,
        what: what.into(),
    }
}

fn unsupported(what: impl Into<String>) -> FoldMsgError {
    FoldMsgError::Unsupported(what.into())
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

/// A `(type, index)` register reference as it appears on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireReg {
    pub ty: u8,
    pub index: u32,
}

/// One instruction as it appears on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireInstr {
    pub op: u8,
    pub ret: WireReg,
    pub left: WireReg,
    pub right: WireReg,
}

/// One expression (`when` clause) as it appears on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireExpr {
    pub cond_start: u32,
    pub num_cond: u32,
    pub body_start: u32,
    pub num_body: u32,
}

/// One field update as it appears on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Update {
    pub reg_type: u8,
    pub reg_index: u32,
    pub value: u64,
}

/// A decoded message from Portus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortusMsg {
    /// Install a program (for all flows; the socket id is ignored).
    /// `instrs` are those libccp read: on a bad instruction (`error`) it
    /// stops there, leaving that one partly filled in and the rest zero,
    /// but the program of `num_instructions` stays in its slot.
    Install {
        uid: u32,
        exprs: Vec<WireExpr>,
        instrs: Vec<WireInstr>,
        num_instructions: u32,
        error: Option<FoldMsgError>,
    },
    /// Stage field updates for flow `sid`.
    UpdateFields { sid: u32, updates: Vec<Update> },
    /// Switch flow `sid` to program `uid` and stage `updates`.
    ChangeProg {
        sid: u32,
        uid: u32,
        updates: Vec<Update>,
    },
}

/// Decode one message (libccp ccp_read_msg's checks, in its order; plus
/// bounds checks libccp lacks).
///
/// Errors: [`FoldMsgError::Libccp`] with libccp's code (-32 unknown type,
/// -22 length beyond the buffer, -23 too long, -52/-62 too many updates);
/// [`FoldMsgError::Unsupported`] for truncated bodies and counts past libccp's
/// arrays. Instruction errors of an install are kept per instruction because
/// libccp consumes a program slot before it reads them.
pub fn parse_message(buf: &[u8]) -> Result<PortusMsg, FoldMsgError> {
    if buf.len() < HDR_LEN {
        return Err(unsupported(format!(
            "message of {} bytes is shorter than its 8-byte header",
            buf.len()
        )));
    }
    let ty = u16::from_le_bytes([buf[0], buf[1]]);
    let len = u16::from_le_bytes([buf[2], buf[3]]) as usize;
    let sid = u32_at(buf, 4);
    if !matches!(ty, MSG_INSTALL | MSG_UPDATE_FIELDS | MSG_CHANGE_PROG) {
        return Err(libccp_err(
            -32,
            format!("message type {ty} is not install/update/change"),
        ));
    }
    if len > buf.len() {
        return Err(libccp_err(
            -22,
            format!(
                "header length {len} exceeds the {} bytes received",
                buf.len()
            ),
        ));
    }
    if len > BIGGEST_MSG {
        return Err(libccp_err(
            -23,
            format!("header length {len} exceeds {BIGGEST_MSG}"),
        ));
    }
    let body = &buf[HDR_LEN.min(len)..len.max(HDR_LEN)];
    let need = |n: usize, what: &str| -> Result<(), FoldMsgError> {
        if body.len() < n {
            Err(unsupported(format!(
                "{what}: needs {n} body bytes, message has {}",
                body.len()
            )))
        } else {
            Ok(())
        }
    };
    match ty {
        MSG_INSTALL => {
            need(12, "install header")?;
            let (uid, ne, ni) = (u32_at(body, 0), u32_at(body, 4), u32_at(body, 8));
            if ne > MAX_EXPRESSIONS || ni > MAX_INSTRUCTIONS {
                return Err(unsupported(format!(
                    "program {uid}: {ne} expressions / {ni} instructions (libccp holds 256 of each)"
                )));
            }
            need(
                12 + ne as usize * EXPR_BYTES + ni as usize * INSTR_BYTES,
                "install body",
            )?;
            let exprs = (0..ne as usize)
                .map(|i| {
                    let o = 12 + i * EXPR_BYTES;
                    WireExpr {
                        cond_start: u32_at(body, o),
                        num_cond: u32_at(body, o + 4),
                        body_start: u32_at(body, o + 8),
                        num_body: u32_at(body, o + 12),
                    }
                })
                .collect();
            let base = 12 + ne as usize * EXPR_BYTES;
            let mut instrs = Vec::with_capacity(ni as usize);
            let mut error = None;
            for i in 0..ni as usize {
                match read_instruction(
                    &body[base + i * INSTR_BYTES..base + (i + 1) * INSTR_BYTES],
                    i,
                ) {
                    Ok(ins) => instrs.push(ins),
                    Err((e, partial)) => {
                        instrs.push(partial);
                        error = Some(e);
                        break;
                    }
                }
            }
            Ok(PortusMsg::Install {
                uid,
                exprs,
                instrs,
                num_instructions: ni,
                error,
            })
        }
        MSG_UPDATE_FIELDS => {
            need(4, "update-fields count")?;
            // libccp: *num_updates = (u32)*buf, a signed char
            let n = body[0] as i8 as i32 as u32;
            if n > MAX_UPDATES {
                return Err(libccp_err(
                    -52,
                    format!("update-fields count byte {} (> {MAX_UPDATES})", body[0]),
                ));
            }
            let updates = read_updates(&body[4..], n)?;
            Ok(PortusMsg::UpdateFields { sid, updates })
        }
        _ => {
            need(8, "change-program header")?;
            let (uid, n) = (u32_at(body, 0), u32_at(body, 4));
            if n > MAX_UPDATES {
                return Err(libccp_err(
                    -62,
                    format!("change-program with {n} updates (> {MAX_UPDATES})"),
                ));
            }
            let updates = read_updates(&body[8..], n)?;
            Ok(PortusMsg::ChangeProg { sid, uid, updates })
        }
    }
}

fn read_updates(b: &[u8], n: u32) -> Result<Vec<Update>, FoldMsgError> {
    let n = n as usize;
    if b.len() < n * UPDATE_BYTES {
        return Err(unsupported(format!(
            "{n} updates need {} bytes, message has {}",
            n * UPDATE_BYTES,
            b.len()
        )));
    }
    Ok((0..n)
        .map(|i| {
            let o = i * UPDATE_BYTES;
            Update {
                reg_type: b[o],
                reg_index: u32_at(b, o + 1),
                value: u64_at(b, o + 5),
            }
        })
        .collect())
}

fn valid_reg_type(ty: u8) -> bool {
    ty <= REG_VOLATILE_CONTROL
}

/// libccp read_instruction: op, then result type, then each register in
/// turn. On error also returns what libccp left in the (zeroed) slot
/// instruction: the fields it had set before the failing check.
fn read_instruction(b: &[u8], i: usize) -> Result<WireInstr, (FoldMsgError, WireInstr)> {
    let reg = |o: usize| WireReg {
        ty: b[o],
        index: u32_at(b, o + 1),
    };
    let ins = WireInstr {
        op: b[0],
        ret: reg(1),
        left: reg(6),
        right: reg(11),
    };
    let mut partial = ZERO_INSTR;
    if ins.op >= OP_COUNT {
        return Err((
            libccp_err(-33, format!("instruction {i}: opcode {}", ins.op)),
            partial,
        ));
    }
    partial.op = ins.op;
    if ins.ret.ty == REG_IMMEDIATE || ins.ret.ty == REG_PRIMITIVE {
        return Err((
            libccp_err(
                -34,
                format!("instruction {i}: result register type {}", ins.ret.ty),
            ),
            partial,
        ));
    }
    for (n, (code, r, name)) in [
        (-35, ins.ret, "result"),
        (-36, ins.left, "left"),
        (-37, ins.right, "right"),
    ]
    .into_iter()
    .enumerate()
    {
        if !valid_reg_type(r.ty) {
            return Err((
                libccp_err(
                    code,
                    format!("instruction {i}: {name} register type {}", r.ty),
                ),
                partial,
            ));
        }
        match n {
            0 => partial.ret = r,
            1 => partial.left = r,
            _ => partial.right = r,
        }
    }
    Ok(ins)
}

// ---- compilation into the linear kernel form ----

/// Offset read for register `r` (libccp read_reg on its flat register file).
/// Returns (is_immediate, immediate value or register offset).
fn read_operand(r: WireReg) -> (bool, u32) {
    let flat = |base: u32| {
        // libccp indexes with a C int: huge u32 indices are negative
        let i = i64::from(base) + i64::from(r.index as i32);
        if (0..i64::from(N_FILE)).contains(&i) {
            physical(i as u32)
        } else {
            OFF_ZERO
        }
    };
    match r.ty {
        REG_IMMEDIATE => (true, r.index),
        REG_VOLATILE_REPORT | REG_NONVOLATILE_REPORT => (false, flat(FLAT_REPORT)),
        REG_NONVOLATILE_CONTROL | REG_VOLATILE_CONTROL => (false, flat(FLAT_CONTROL)),
        REG_IMPLICIT => (false, flat(FLAT_IMPLICIT)),
        REG_TMP => (false, flat(FLAT_TMP)),
        REG_LOCAL => (false, flat(FLAT_LOCAL)),
        REG_PRIMITIVE if r.index < N_PRIM => (false, OFF_PRIM + r.index),
        _ => (false, OFF_ZERO),
    }
}

/// Offset in fold_state.regs of index `f` (< [`N_FILE`]) of libccp's flat
/// register file.
fn physical(f: u32) -> u32 {
    match f {
        _ if f < FLAT_CONTROL => OFF_REPORT + f,
        _ if f < FLAT_IMPLICIT => OFF_CONTROL_END - (f - FLAT_CONTROL),
        _ if f < FLAT_TMP => OFF_IMPLICIT + (f - FLAT_IMPLICIT),
        _ if f < FLAT_LOCAL => OFF_TMP + (f - FLAT_TMP),
        _ => OFF_LOCAL + (f - FLAT_LOCAL),
    }
}

/// Offset written for register `r` and whether the write moves Micros'
/// time zero (libccp write_reg: out-of-bounds writes are ignored).
fn write_target(r: WireReg) -> (u16, bool) {
    let within = |base: u32, n: u32| {
        if r.index < n {
            physical(base + r.index) as u16
        } else {
            OFF_DISCARD as u16
        }
    };
    match r.ty {
        REG_VOLATILE_REPORT | REG_NONVOLATILE_REPORT => (within(FLAT_REPORT, MAX_REPORT), false),
        REG_TMP => (within(FLAT_TMP, MAX_TMP), false),
        REG_LOCAL => (within(FLAT_LOCAL, MAX_LOCAL), false),
        REG_NONVOLATILE_CONTROL | REG_VOLATILE_CONTROL => {
            (within(FLAT_CONTROL, MAX_CONTROL), false)
        }
        REG_IMPLICIT => match r.index {
            0 | 1 | 2 | IMPLICIT_CWND | IMPLICIT_RATE => ((OFF_IMPLICIT + r.index) as u16, false),
            IMPLICIT_MICROS => ((OFF_IMPLICIT + IMPLICIT_MICROS) as u16, true),
            _ => (OFF_DISCARD as u16, false),
        },
        _ => (OFF_DISCARD as u16, false),
    }
}

fn encode(ins: &WireInstr) -> FoldInsn {
    let (limm, left) = read_operand(ins.left);
    let (rimm, right) = read_operand(ins.right);
    let (wr, wtime) = write_target(ins.ret);
    let cur = if ins.op == OP_EWMA {
        read_operand(ins.ret).1
    } else {
        OFF_ZERO
    };
    let flags = (limm as u8 * F_LIMM) | (rimm as u8 * F_RIMM) | (wtime as u8 * F_WTIME);
    FoldInsn {
        op: ins.op,
        flags,
        wr,
        cur: cur as u16,
        wr2: wr,
        left,
        right,
    }
}

/// A DEF's default written as a bind of an immediate (libccp reset_state /
/// init_register_state: 0x3fffffff means +infinity; a non-immediate default
/// reads the zeroed value field of a fresh program slot, 0).
fn def_as_bind(ins: &WireInstr) -> FoldInsn {
    let default = match ins.right.ty {
        REG_IMMEDIATE if ins.right.index == DEF_INFINITY_MARK => u32::MAX,
        REG_IMMEDIATE => ins.right.index,
        _ => 0,
    };
    let (wr, _) = write_target(ins.left);
    FoldInsn {
        op: OP_BIND,
        flags: F_RIMM,
        wr,
        cur: OFF_ZERO as u16,
        wr2: wr,
        left: 0,
        right: default,
    }
}

/// libccp executes slot instructions past num_instructions too: they are
/// zero bytes, i.e. `ADD control[0] + control[0] -> control[0]`.
const ZERO_INSTR: WireInstr = WireInstr {
    op: OP_ADD,
    ret: WireReg {
        ty: REG_NONVOLATILE_CONTROL,
        index: 0,
    },
    left: WireReg {
        ty: REG_NONVOLATILE_CONTROL,
        index: 0,
    },
    right: WireReg {
        ty: REG_NONVOLATILE_CONTROL,
        index: 0,
    },
};

/// One expression's condition and body, each already encoded.
struct Expression {
    cond: Vec<FoldInsn>,
    body: Vec<FoldInsn>,
}

/// Whether an instruction's write happens whenever it does not abort (IF
/// and NOTIF write only on their condition).
fn writes_always(i: &FoldInsn) -> bool {
    i.op != OP_IF && i.op != OP_NOTIF
}

/// Fuse `OP t a b; BIND d t` into one instruction writing `t` and `d`
/// (`wr`, `wr2`): Portus compiles `(:= d (op a b))` that way. The pair
/// writes the same registers with the same value in the same order, and an
/// abort of OP leaves both unwritten in either form, so no liveness is
/// needed. Not when OP writes conditionally (IF/NOTIF: the BIND would copy
/// the old value), writes nowhere (an ignored write: the BIND then reads
/// whatever register its operand names), or is already fused.
fn fuse_binds(section: Vec<FoldInsn>) -> Vec<FoldInsn> {
    let mut out: Vec<FoldInsn> = Vec::with_capacity(section.len());
    for i in section {
        if let Some(prev) = out.last_mut() {
            let fusable = i.op == OP_BIND
                && i.flags & F_RIMM == 0
                && writes_always(prev)
                && prev.flags & F_FUSED_IF == 0
                && prev.wr2 == prev.wr
                && u32::from(prev.wr) != OFF_DISCARD
                && i.right == u32::from(prev.wr);
            if fusable {
                prev.wr2 = i.wr;
                prev.flags |= i.flags & F_WTIME;
                continue;
            }
        }
        out.push(i);
    }
    out
}

/// Fuse `OP t a b; IF d t v` into one instruction ([`F_IF`]: `t` = the
/// result, then `d` = `v` if it is non-zero; Portus's `(:= d (if (< a b)
/// v))`) and `OP t a b; IF d c t` into one ([`F_IFV`]: `t` = the result,
/// then `d` = it if `c` is non-zero; `(:= d (if c (+ a b)))`). The IF reads
/// its operands right after OP wrote `t`, as the fused form does; an abort
/// of OP leaves both unwritten either way. Only when the IF's other operand
/// is a register (it goes in `cur`), OP writes `t` whenever it does not
/// abort and is not EWMA (its `cur`), and neither moves Micros.
fn fuse_ifs(section: Vec<FoldInsn>) -> Vec<FoldInsn> {
    let mut out: Vec<FoldInsn> = Vec::with_capacity(section.len());
    for i in section {
        if let Some(prev) = out.last_mut() {
            let t = u32::from(prev.wr);
            let base = i.op == OP_IF
                && i.flags & (F_LIMM | F_RIMM | F_WTIME) == 0
                && writes_always(prev)
                && prev.op != OP_EWMA
                && prev.flags & (F_WTIME | F_FUSED_IF) == 0
                && prev.wr2 == prev.wr
                && t != OFF_DISCARD;
            let fused = if base && i.left == t {
                Some((F_IF, i.right))
            } else if base && i.right == t {
                Some((F_IFV, i.left))
            } else {
                None
            };
            if let Some((flag, cur)) = fused {
                prev.flags |= flag;
                prev.wr2 = i.wr;
                prev.cur = cur as u16;
                continue;
            }
        }
        out.push(i);
    }
    out
}

/// Registers instruction `i` reads as operands (not the implicit reads of
/// JZ, BRK and [`F_JZ`]).
fn operand_reads(i: &FoldInsn) -> impl Iterator<Item = u32> {
    let left = (i.flags & F_LIMM == 0).then_some(i.left);
    let right = (i.flags & F_RIMM == 0).then_some(i.right);
    let cur = (i.op == OP_EWMA || i.flags & F_FUSED_IF != 0).then_some(u32::from(i.cur));
    [left, right, cur].into_iter().flatten()
}

/// Registers instruction `i` writes (one or two).
fn writes(i: &FoldInsn) -> [u32; 2] {
    [u32::from(i.wr), u32::from(i.wr2)]
}

/// Drop an instruction that repeats an earlier one of the same straight-
/// line section when nothing it reads or writes was written in between:
/// it would write the values its registers already hold, and it cannot
/// abort where the earlier one did not (Portus recomputes e.g. `(<
/// Flow.rtt_sample_us +infinity)` into the same tmp for every `if`). Only
/// for instructions that write whenever they run, do not move Micros'
/// time zero and do not read what they write.
fn drop_recomputations(section: Vec<FoldInsn>) -> Vec<FoldInsn> {
    let mut out: Vec<FoldInsn> = Vec::with_capacity(section.len());
    for i in section {
        let eligible = writes_always(&i)
            && i.flags & F_WTIME == 0
            && operand_reads(&i).all(|r| !writes(&i).contains(&r));
        let touched = |k: &FoldInsn| {
            writes(k)
                .iter()
                .any(|w| writes(&i).contains(w) || operand_reads(&i).any(|r| r == *w))
        };
        let repeat = eligible
            && out
                .iter()
                .rev()
                .find(|k| **k == i || touched(k))
                .is_some_and(|k| *k == i);
        if !repeat {
            out.push(i);
        }
    }
    out
}

/// Whether instruction `i` can abort the invocation (libccp's checks).
fn may_abort(i: &FoldInsn) -> bool {
    [OP_ADD, OP_SUB, OP_MUL, OP_DIV].contains(&i.op)
}

/// Drop writes to the expression flag and fallthrough registers that no
/// later instruction can observe. Both are zeroed when an invocation
/// starts (before anything reads them) and neither is reported, so a value
/// left at the end of an invocation or at an abort is never read: liveness
/// needs no look past the invocation. Reads are the operands, JZ and [`F_JZ`]
/// (the flag, after the instruction's write) and BRK (both). E.g. `(when
/// true ...)`'s `BIND flag 1` once no JZ or BRK is left to read it, and
/// `(fallthrough)` when no later BRK remains.
fn drop_dead_implicit_writes(mut code: Vec<FoldInsn>) -> Vec<FoldInsn> {
    const TRACKED: [u32; 2] = [OFF_EXPR_FLAG, OFF_FALLTHROUGH];
    let bit = |r: u32| TRACKED.iter().position(|t| *t == r).map_or(0u8, |p| 1 << p);
    loop {
        // live[n]: tracked registers live before instruction n (code.len(): end)
        let mut live = vec![0u8; code.len() + 1];
        let mut dead = vec![false; code.len()];
        for n in (0..code.len()).rev() {
            let i = &code[n];
            let mut after = live[n + 1];
            match i.op {
                OP_JZ => after |= live[i.right as usize] | bit(OFF_EXPR_FLAG),
                OP_BRK => after |= bit(OFF_EXPR_FLAG) | bit(OFF_FALLTHROUGH),
                _ => {}
            }
            if i.flags & F_JZ != 0 {
                after |= live[usize::from(i.cur)] | bit(OFF_EXPR_FLAG);
            }
            let (is_jump, w) = (matches!(i.op, OP_JZ | OP_BRK), writes(i));
            let kills = if is_jump || !writes_always(i) {
                0
            } else if i.flags & F_FUSED_IF != 0 {
                bit(w[0]) // wr2 only on the fused IF's condition
            } else {
                bit(w[0]) | bit(w[1])
            };
            let written: u8 = if is_jump { 0 } else { bit(w[0]) | bit(w[1]) };
            // removable: writes only tracked registers, none of them live,
            // cannot abort, carries no fused JZ
            dead[n] = !is_jump
                && w.iter().all(|r| bit(*r) != 0)
                && written & after == 0
                && !may_abort(i)
                && i.flags & (F_WTIME | F_JZ) == 0;
            let reads = operand_reads(i).fold(0u8, |m, r| m | bit(r));
            live[n] = if dead[n] { after } else { reads | (after & !kills) };
        }
        if !dead.contains(&true) {
            return code;
        }
        // renumber jump targets: a removed instruction's index goes to the next kept one
        let mut new_index = vec![0u32; code.len() + 1];
        let mut kept = 0u32;
        for n in 0..=code.len() {
            new_index[n] = kept;
            if n < code.len() && !dead[n] {
                kept += 1;
            }
        }
        code = code
            .iter()
            .zip(&dead)
            .filter(|(_, d)| !**d)
            .map(|(i, _)| {
                let mut i = *i;
                if i.op == OP_JZ {
                    i.right = new_index[i.right as usize];
                }
                if i.flags & F_JZ != 0 {
                    i.cur = new_index[usize::from(i.cur)] as u16;
                }
                i
            })
            .collect();
    }
}

/// What the compiler knows of an implicit register at a point of the
/// linear program (the expression flag and the fallthrough register decide
/// JZ and BRK; both are 0 when an invocation starts, fold_vm.h fold_invoke).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    Zero,
    NonZero,
    Unknown,
}

impl Known {
    fn merge(self, other: Known) -> Known {
        if self == other {
            self
        } else {
            Known::Unknown
        }
    }
}

/// The expression flag and fallthrough register as far as known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Implicit {
    flag: Known,
    fallthrough: Known,
}

impl Implicit {
    const START: Implicit = Implicit {
        flag: Known::Zero,
        fallthrough: Known::Zero,
    };

    fn merge(self, o: Implicit) -> Implicit {
        Implicit {
            flag: self.flag.merge(o.flag),
            fallthrough: self.fallthrough.merge(o.fallthrough),
        }
    }

    /// After instruction `i` ran without aborting (an abort ends the
    /// invocation: that path needs no state).
    fn after(mut self, i: &FoldInsn) -> Implicit {
        let value = if i.op == OP_BIND && i.flags & F_RIMM != 0 {
            if i.right == 0 {
                Known::Zero
            } else {
                Known::NonZero
            }
        } else {
            Known::Unknown
        };
        for (off, reg) in [
            (OFF_EXPR_FLAG, &mut self.flag),
            (OFF_FALLTHROUGH, &mut self.fallthrough),
        ] {
            if u32::from(i.wr) == off || u32::from(i.wr2) == off {
                // a conditional write may leave the old value
                *reg = if writes_always(i) { value } else { Known::Unknown };
            }
        }
        self
    }
}

/// Lay out the main section: per expression its condition, a JZ over the
/// body, the body and a BRK (stop when flag && !fallthrough), as libccp
/// runs expressions; but a JZ or BRK whose outcome is known from the
/// implicit registers' known values is left out (`(when true ...)` needs no
/// JZ; a body that set fallthrough, or any expression after one whose body
/// always sets it, needs no BRK; the last expression needs none), a body
/// behind a condition known 0 is left out, and a remaining JZ is fused into
/// the condition's last instruction ([`F_JZ`]) where it can be.
fn emit_main(exprs: &[Expression]) -> Vec<FoldInsn> {
    let mut out: Vec<FoldInsn> = Vec::new();
    let mut st = Implicit::START;
    for (n, e) in exprs.iter().enumerate() {
        let last = n + 1 == exprs.len();
        for i in &e.cond {
            st = st.after(i);
            out.push(*i);
        }
        if st.flag == Known::Zero {
            continue; // the body never runs: JZ would always jump past it
        }
        // where the JZ sits (None: flag known non-zero, no JZ)
        let jz = (st.flag == Known::Unknown).then(|| {
            match out.last_mut() {
                Some(c) if !e.cond.is_empty() && c.op != OP_EWMA && c.flags & F_FUSED_IF == 0 => {
                    c.flags |= F_JZ;
                }
                _ => out.push(FoldInsn {
                    op: OP_JZ,
                    ..Default::default()
                }),
            }
            out.len() - 1
        });
        let skipped = Implicit {
            flag: Known::Zero,
            ..st
        };
        let mut body = Implicit {
            flag: Known::NonZero,
            ..st
        };
        for i in &e.body {
            body = body.after(i);
            out.push(*i);
        }
        let brk_never = body.flag == Known::Zero || body.fallthrough == Known::NonZero;
        let brk_always = body.flag == Known::NonZero && body.fallthrough == Known::Zero;
        // the state after the expression on the path past a BRK that did not stop
        let ran = if brk_never || last {
            Some(body)
        } else {
            out.push(FoldInsn {
                op: OP_BRK,
                ..Default::default()
            });
            (!brk_always).then(|| Implicit {
                flag: if body.fallthrough == Known::Zero {
                    Known::Zero
                } else {
                    body.flag
                },
                fallthrough: if body.flag == Known::NonZero {
                    Known::NonZero
                } else {
                    body.fallthrough
                },
            })
        };
        st = match (jz, ran) {
            (Some(_), Some(r)) => skipped.merge(r),
            (Some(_), None) => skipped,
            (None, Some(r)) => r,
            (None, None) => break, // the BRK always stops: nothing after it runs
        };
        if let Some(at) = jz {
            let target = out.len() as u16;
            if out[at].op == OP_JZ {
                out[at].right = u32::from(target);
            } else {
                out[at].cur = target;
            }
        }
        if out.len() > MAX_LINEAR {
            break;
        }
    }
    out
}

/// Compile a decoded program into its kernel form for table slot `slot`.
///
/// Errors: [`FoldMsgError::Unsupported`] when an instruction range reaches
/// index 256 (libccp would loop forever) or the linear form exceeds
/// [`MAX_LINEAR`] - 1 instructions.
/// `instrs` may be shorter than `num_instructions` (a failed install):
/// missing instructions are libccp's zeroed slot entries.
pub fn compile(
    slot: u32,
    uid: u32,
    exprs: &[WireExpr],
    instrs: &[WireInstr],
    num_instructions: u32,
) -> Result<Box<FoldProg>, FoldMsgError> {
    let mut p = Box::new(FoldProg::new_zeroed());
    p.index = slot;
    p.uid = uid;
    let at = |i: u32| -> WireInstr { instrs.get(i as usize).copied().unwrap_or(ZERO_INSTR) };
    let mut sections: Vec<Expression> = Vec::with_capacity(exprs.len());
    let mut size = 0;
    for (n, e) in exprs.iter().enumerate() {
        for (start, count) in [(e.cond_start, e.num_cond), (e.body_start, e.num_body)] {
            if u64::from(start) + u64::from(count) > 255 {
                return Err(unsupported(format!(
                    "program {uid}, expression {n}: instructions {start}..{} reach index 256 (libccp's u8 loop never ends)",
                    u64::from(start) + u64::from(count)
                )));
            }
        }
        let section = |start: u32, count: u32| -> Vec<FoldInsn> {
            fuse_ifs(drop_recomputations(fuse_binds(
                (start..start + count)
                    .map(at)
                    .filter(|i| i.op != OP_DEF)
                    .map(|i| encode(&i))
                    .collect(),
            )))
        };
        let ex = Expression {
            cond: section(e.cond_start, e.num_cond),
            body: section(e.body_start, e.num_body),
        };
        size += ex.cond.len() + ex.body.len() + 2;
        sections.push(ex);
        if size > MAX_LINEAR {
            break; // refused below; no need to read the rest
        }
    }
    let mut out = drop_dead_implicit_writes(emit_main(&sections));
    p.n_main = out.len() as u32;
    // DEF prefix: resets (volatile report/control), then initialisation
    // (non-volatile control/report); only the leading DEFs count (libccp
    // stops at the first other instruction).
    let defs: Vec<WireInstr> = (0..num_instructions)
        .map(at)
        .take_while(|i| i.op == OP_DEF)
        .collect();
    p.reset_off = out.len() as u32;
    out.extend(
        defs.iter()
            .filter(|i| matches!(i.left.ty, REG_VOLATILE_REPORT | REG_VOLATILE_CONTROL))
            .map(def_as_bind),
    );
    p.reset_len = out.len() as u32 - p.reset_off;
    p.init_off = out.len() as u32;
    out.extend(
        defs.iter()
            .filter(|i| matches!(i.left.ty, REG_NONVOLATILE_CONTROL | REG_NONVOLATILE_REPORT))
            .map(def_as_bind),
    );
    p.init_len = out.len() as u32 - p.init_off;
    // libccp sets num_to_return (a u8) when its reset loop meets the first
    // non-DEF; a program of DEFs only keeps the zeroed slot's 0.
    let reports = defs
        .iter()
        .filter(|i| matches!(i.left.ty, REG_VOLATILE_REPORT | REG_NONVOLATILE_REPORT))
        .count();
    p.num_to_return = if defs.len() < num_instructions as usize {
        (reports % 256) as u32
    } else {
        0
    };
    // at most MAX_LINEAR - 1: fold_vm.h masks pc + 1 with MAX_LINEAR - 1
    if out.len() >= MAX_LINEAR {
        return Err(unsupported(format!(
            "program {uid} compiles to more than {} kernel instructions",
            MAX_LINEAR - 1
        )));
    }
    if defs.len() == 256 {
        return Err(unsupported(format!(
            "program {uid}: 256 DEFs (libccp's u8 reset loop never ends)"
        )));
    }
    p.insns[..out.len()].copy_from_slice(&out);
    Ok(p)
}

// ---- program table and staged updates (libccp's bookkeeping) ----

#[derive(Clone, Debug)]
enum Slot {
    Free,
    /// Taken by program `uid`; `ok` false when the kernel slot is empty
    /// (the program was past what the kernel supports).
    Taken {
        uid: u32,
                ok: bool,
    },
}

/// What a handled message asks the kernel side to do, in order.
#[derive(Debug)]
pub enum Effect {
    /// Empty every program slot (write index 0): a program with uid 1 arrived.
    ClearPrograms,
    /// Write `prog` at key `slot` of the program map.
    WriteProgram { slot: u32, prog: Box<FoldProg> },
    /// Empty slot `slot`: libccp took it for an install that failed.
    EmptySlot { slot: u32 },
    /// Merge `delta` into flow `sid`'s staged updates (fold_vm.h
    /// fold_stage_merge: a delta with STAGED_CHANGE replaces what was
    /// staged, others overwrite register by register); the flow's next
    /// invocation applies them.
    Stage { sid: u32, delta: Box<FoldStaged> },
}

/// The result of [`FoldTables::handle`]: effects to apply even when the
/// message failed (libccp keeps what it did before the failure: a cleared
/// table, a taken slot, updates staged before a bad one).
#[derive(Debug)]
pub struct Handled {
    pub effects: Vec<Effect>,
    pub result: Result<(), FoldMsgError>,
}

/// One message's staged updates (libccp staged_update and
/// staged_program_index), before the kernel merges them.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
struct Staged {
    change_slot: Option<u32>,
    control: HashMap<u32, u64>,
    cwnd: Option<u64>,
    rate: Option<u64>,
}

impl Staged {
    /// libccp stage_update.
    fn stage(&mut self, u: &Update) -> Result<(), FoldMsgError> {
        match u.reg_type {
            REG_NONVOLATILE_CONTROL | REG_VOLATILE_CONTROL => {
                self.control.insert(u.reg_index, u.value);
            }
            REG_IMPLICIT if u.reg_index == IMPLICIT_CWND => self.cwnd = Some(u.value),
            REG_IMPLICIT if u.reg_index == IMPLICIT_RATE => self.rate = Some(u.value),
            REG_IMPLICIT => {}
            t => {
                return Err(libccp_err(
                    -53,
                    format!("update of register type {t} (only control, Cwnd, Rate)"),
                ))
            }
        }
        Ok(())
    }

    fn stage_all(&mut self, updates: &[Update]) -> Result<(), FoldMsgError> {
        updates.iter().try_for_each(|u| self.stage(u))
    }

    fn to_kernel(&self) -> Box<FoldStaged> {
        let mut s = Box::new(FoldStaged::new_zeroed());
        if let Some(slot) = self.change_slot {
            s.flags |= STAGED_CHANGE;
            s.change_slot = slot;
        }
        if let Some(v) = self.cwnd {
            s.flags |= STAGED_CWND;
            s.cwnd = v;
        }
        if let Some(v) = self.rate {
            s.flags |= STAGED_RATE;
            s.rate = v;
        }
        for (&i, &v) in &self.control {
            s.flags |= STAGED_CONTROL;
            s.control_mask[(i / 64) as usize] |= 1 << (i % 64);
            s.control[i as usize] = v;
        }
        s
    }
}

/// Refuse control updates past libccp's 110 control registers (libccp
/// writes past its array).
fn check_update_bounds(updates: &[Update]) -> Result<(), FoldMsgError> {
    match updates.iter().find(|u| {
        matches!(u.reg_type, REG_NONVOLATILE_CONTROL | REG_VOLATILE_CONTROL)
            && u.reg_index >= MAX_CONTROL
    }) {
        Some(u) => Err(unsupported(format!(
            "update of control register {} (libccp has {MAX_CONTROL})",
            u.reg_index
        ))),
        None => Ok(()),
    }
}

/// The datapath side of Portus's messages for the kernel fold: libccp's
/// program table and the known flows (their staged updates live in the
/// kernel, see [`Effect::Stage`]).
#[derive(Debug)]
pub struct FoldTables {
    slots: Vec<Slot>,
    flows: HashSet<u32>,
    /// The guard ([`FoldTables::guarded`]): on in the datapath, off for the
    /// libccp-exact table the differential tests compare.
    guard: bool,
    /// Guarded: the program slot each live flow was last changed to, since
    /// the current algorithm appeared ([`FoldTables::forget_bindings`]).
    bindings: HashMap<u32, u32>,
    /// Guarded: install sequence number of each slot (the oldest unused
    /// program is the one replaced when the table is full).
    installed_at: Vec<u64>,
    installs_seen: u64,
    /// Installs refused because they would have evicted a live flow's program.
    pub evictions_refused: u64,
    /// Installs that replaced a program no live flow ran (table full).
    pub replaced_unused: u64,
}

impl FoldTables {
    /// A table of `capacity` program slots (libccp: [`LIBCCP_MAX_PROGRAMS`];
    /// at most `MAX_SLOTS - 1`).
    pub fn new(capacity: u32) -> Self {
        assert!(
            (1..MAX_SLOTS).contains(&capacity),
            "program table capacity {capacity} not in 1..{MAX_SLOTS}"
        );
        FoldTables {
            slots: vec![Slot::Free; capacity as usize],
            flows: HashSet::new(),
            guard: false,
            bindings: HashMap::new(),
            installed_at: vec![0; capacity as usize],
            installs_seen: 0,
            evictions_refused: 0,
            replaced_unused: 0,
        }
    }

    /// As [`FoldTables::new`], with the datapath's guard on: libccp lets any
    /// sender evict every program (a program with uid 1 clears the table)
    /// and fill the table (-81 for every later install), which left a flow
    /// without the program it ran, its last cwnd applied for good. Guarded,
    /// an install never evicts a program a live flow runs (refused,
    /// [`FoldMsgError::Evicts`], counted in `evictions_refused`): uid 1
    /// clears the table only when no live flow runs any of its programs;
    /// and a full table takes the new program in place of the oldest one no
    /// live flow runs (`replaced_unused`), so no sender can fill it. A flow
    /// runs the slot of its last program change from the current algorithm;
    /// when a new algorithm appears the datapath forgets these
    /// ([`FoldTables::forget_bindings`]): its first install (uid 1) clears
    /// the table as in libccp.
    pub fn guarded(capacity: u32) -> Self {
        FoldTables { guard: true, ..Self::new(capacity) }
    }

    /// A new algorithm appeared (or the old one went away): the programs the
    /// flows run are the old algorithm's, and no longer protected.
    pub fn forget_bindings(&mut self) {
        self.bindings.clear();
    }

    /// Guarded: the slots live flows run, sorted.
    fn live_slots(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.bindings.values().copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// A flow (libccp socket id `sid`) now exists; messages may address it.
    pub fn add_flow(&mut self, sid: u32) {
        self.flows.insert(sid);
    }

    /// The flow is gone.
    pub fn remove_flow(&mut self, sid: u32) {
        self.flows.remove(&sid);
        self.bindings.remove(&sid);
    }

    /// Slot holding program `uid` (libccp: the first slot with that uid).
    pub fn slot_of(&self, uid: u32) -> Option<u32> {
        self.slots
            .iter()
            .position(|s| matches!(s, Slot::Taken { uid: u, .. } if *u == uid))
            .map(|i| i as u32 + 1)
    }

    /// Handle one message from Portus: the kernel map writes it implies and
    /// whether libccp would accept it.
    ///
    /// Errors (in `result`): as [`parse_message`]; -81 program table full;
    /// -71 unknown flow; -53 an update of a register that cannot be updated
    /// (earlier updates of the same message stay staged, as in libccp); a
    /// failed install still takes its slot (and, for uid 1, still clears the
    /// table).
    pub fn handle(&mut self, buf: &[u8]) -> Handled {
        let mut effects = vec![];
        let result = self.handle_into(buf, &mut effects);
        Handled { effects, result }
    }

    fn handle_into(&mut self, buf: &[u8], fx: &mut Vec<Effect>) -> Result<(), FoldMsgError> {
        // libccp looks the flow up before it reads an update/change body.
        if buf.len() >= HDR_LEN
            && matches!(
                u16::from_le_bytes([buf[0], buf[1]]),
                MSG_UPDATE_FIELDS | MSG_CHANGE_PROG
            )
        {
            let sid = u32_at(buf, 4);
            let len = usize::from(u16::from_le_bytes([buf[2], buf[3]]));
            if len <= buf.len() && len <= BIGGEST_MSG && !self.flows.contains(&sid) {
                return Err(libccp_err(-71, format!("unknown flow {sid}")));
            }
        }
        match parse_message(buf)? {
            PortusMsg::Install {
                uid,
                exprs,
                instrs,
                num_instructions,
                error,
            } => {
                self.install(uid, &exprs, &instrs, num_instructions, fx)?;
                error.map_or(Ok(()), Err)
            }
            PortusMsg::UpdateFields { sid, updates } => {
                check_update_bounds(&updates)?;
                self.known(sid)?;
                let mut delta = Staged::default();
                let r = delta.stage_all(&updates);
                fx.push(Effect::Stage {
                    sid,
                    delta: delta.to_kernel(),
                });
                r
            }
            PortusMsg::ChangeProg { sid, uid, updates } => {
                check_update_bounds(&updates)?;
                self.known(sid)?;
                let Some(slot) = self.slot_of(uid) else {
                    return Err(FoldMsgError::NoEffect(format!(
                        "change to unknown program uid {uid}"
                    )));
                };
                if self.guard {
                    self.bindings.insert(sid, slot);
                }
                let mut delta = Staged {
                    change_slot: Some(slot),
                    ..Staged::default()
                };
                let r = delta.stage_all(&updates);
                fx.push(Effect::Stage {
                    sid,
                    delta: delta.to_kernel(),
                });
                r
            }
        }
    }

    fn known(&self, sid: u32) -> Result<(), FoldMsgError> {
        if self.flows.contains(&sid) {
            Ok(())
        } else {
            Err(libccp_err(-71, format!("unknown flow {sid}")))
        }
    }

    fn install(
        &mut self,
        uid: u32,
        exprs: &[WireExpr],
        instrs: &[WireInstr],
        num_instructions: u32,
        fx: &mut Vec<Effect>,
    ) -> Result<(), FoldMsgError> {
        if uid == 1 {
            let live = self.live_slots();
            if self.guard && !live.is_empty() {
                self.evictions_refused += 1;
                return Err(FoldMsgError::Evicts(format!(
                    "install of program uid 1 would clear the program table while live flows run slot(s) {live:?}"
                )));
            }
            self.slots.iter_mut().for_each(|s| *s = Slot::Free);
            fx.push(Effect::ClearPrograms);
        }
        let free = self.slots.iter().position(|s| matches!(s, Slot::Free));
        let i = match free {
            Some(i) => i,
            None if self.guard => {
                let live = self.live_slots();
                let oldest_unused = (0..self.slots.len())
                    .filter(|&i| !live.contains(&(i as u32 + 1)))
                    .min_by_key(|&i| self.installed_at[i]);
                let Some(i) = oldest_unused else {
                    self.evictions_refused += 1;
                    return Err(FoldMsgError::Evicts(format!(
                        "program table full ({} programs) and live flows run every one",
                        self.slots.len()
                    )));
                };
                self.replaced_unused += 1;
                i
            }
            None => {
                return Err(libccp_err(
                    -81,
                    format!("program table full ({} programs)", self.slots.len()),
                ))
            }
        };
        self.installs_seen += 1;
        self.installed_at[i] = self.installs_seen;
        let slot = i as u32 + 1;
        self.slots[i] = Slot::Taken { uid, ok: false };
        match compile(slot, uid, exprs, instrs, num_instructions) {
            Ok(prog) => {
                self.slots[i] = Slot::Taken { uid, ok: true };
                fx.push(Effect::WriteProgram { slot, prog });
                Ok(())
            }
            Err(e) => {
                fx.push(Effect::EmptySlot { slot });
                Err(e)
            }
        }
    }

    /// Whether the kernel holds slot `slot`'s program.
    pub fn slot_ok(&self, slot: u32) -> bool {
        matches!(
            self.slots.get(slot.wrapping_sub(1) as usize),
            Some(Slot::Taken { ok: true, .. })
        )
    }
}

// ---- messages to Portus (what libccp would send; byte-exact) ----

const MSG_CREATE: u16 = 0;
const MSG_MEASURE: u16 = 1;
const MSG_READY: u16 = 5;
/// libccp's MAX_CONG_ALG_SIZE (including the terminating NUL).
pub const CONG_ALG_BYTES: usize = 64;

fn header(ty: u16, len: usize, sid: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(len);
    b.extend_from_slice(&ty.to_le_bytes());
    b.extend_from_slice(&(len as u16).to_le_bytes());
    b.extend_from_slice(&sid.to_le_bytes());
    b
}

/// The ready message a datapath sends once at start (libccp
/// write_ready_msg): header (type 5, length 12, socket 0) and `id`.
pub fn ready_msg(id: u32) -> Vec<u8> {
    let mut b = header(MSG_READY, 12, 0);
    b.extend_from_slice(&id.to_le_bytes());
    b
}

/// A new flow's create message (libccp write_create_msg, 96 bytes):
/// `init_cwnd` in bytes, `mss` in bytes, IPv4 addresses and ports as the
/// datapath stores them, `cong_alg` the algorithm asked for.
///
/// Errors: `cong_alg` longer than 63 bytes (libccp's limit).
#[allow(clippy::too_many_arguments)]
pub fn create_msg(
    sid: u32,
    init_cwnd: u32,
    mss: u32,
    src_ip: u32,
    src_port: u32,
    dst_ip: u32,
    dst_port: u32,
    cong_alg: &str,
) -> Result<Vec<u8>, FoldMsgError> {
    if cong_alg.len() >= CONG_ALG_BYTES {
        return Err(unsupported(format!(
            "congestion control name {cong_alg:?} longer than 63 bytes"
        )));
    }
    let mut b = header(MSG_CREATE, 8 + 24 + CONG_ALG_BYTES, sid);
    for v in [init_cwnd, mss, src_ip, src_port, dst_ip, dst_port] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    let mut name = [0u8; CONG_ALG_BYTES];
    name[..cong_alg.len()].copy_from_slice(cong_alg.as_bytes());
    b.extend_from_slice(&name);
    Ok(b)
}

/// A report (libccp write_measure_msg): program uid, field count, fields.
/// A flow's close message is `measure_msg(sid, 0, &[])`.
pub fn measure_msg(sid: u32, program_uid: u32, fields: &[u64]) -> Vec<u8> {
    let fields = &fields[..fields.len().min(MAX_REPORT as usize)];
    let mut b = header(MSG_MEASURE, 16 + 8 * fields.len(), sid);
    b.extend_from_slice(&program_uid.to_le_bytes());
    b.extend_from_slice(&(fields.len() as u32).to_le_bytes());
    fields
        .iter()
        .for_each(|f| b.extend_from_slice(&f.to_le_bytes()));
    b
}

// ---- the user-space half of `--fold kernel` ----

/// A report record from the kernel (`struct fold_report`).
#[repr(C)]
#[derive(Clone, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct FoldReport {
    pub flow_id: u32,
    pub uid: u32,
    pub n_fields: u32,
    pub _pad: u32,
    pub ts_ns: u64,
    pub fields: [u64; MAX_REPORT as usize],
}

const _: () = assert!(std::mem::size_of::<FoldReport>() == 24 + 8 * MAX_REPORT as usize);

/// Fields a `struct fold_report_small` holds: the kernel sends a report of a
/// program with at most this many report fields in that shorter record.
pub const SMALL_REPORT: usize = 32;

/// The header both report records share (`struct fold_report` without its fields).
#[repr(C)]
#[derive(Clone, Debug, FromBytes, Immutable, KnownLayout)]
struct FoldReportHeader {
    flow_id: u32,
    uid: u32,
    n_fields: u32,
    /// 1: the flow reports several times per RTT (fold_ccp.h `fold_report_prompt`).
    prompt: u32,
    ts_ns: u64,
}

/// Whether a report record (`struct fold_report` or `fold_report_small`) comes from a flow that
/// reports several times per RTT: the daemon then looks for its next reports within
/// `--report-prompt-us` instead of the report window. False for a record too short to say.
pub fn report_is_prompt(record: &[u8]) -> bool {
    FoldReportHeader::read_from_prefix(record).is_ok_and(|(h, _)| h.prompt != 0)
}

/// Where [`KernelFold`] writes: the BPF side's program map and staging
/// (implemented over the loaded skeleton by the datapath, over the test
/// harness by tests/fold_differential.rs).
pub trait FoldMaps {
    /// Write `prog` at key `slot` of the program map (array of struct fold_prog).
    fn write_program(&mut self, slot: u32, prog: &FoldProg) -> Result<(), String>;
    /// Merge `delta` into flow `flow_id`'s staged updates (fold_stage_merge).
    fn stage(&mut self, flow_id: u32, delta: &FoldStaged) -> Result<(), String>;
}

/// Counters of [`KernelFold`].
#[derive(Debug, Default, Clone, Copy)]
pub struct KernelFoldStats {
    pub installs: u64,
    /// Installs refused because they would evict a live flow's program.
    pub evictions_refused: u64,
    /// Installs that took the slot of a program no live flow ran (table full).
    pub replaced_unused: u64,
    pub staged: u64,
    pub refused: u64,
    pub reports: u64,
    /// Report-to-cwnd latency, ns: from a report's kernel timestamp
    /// (`ts_ns`, CLOCK_MONOTONIC) to the moment the first cwnd or rate
    /// update for that flow after it was staged into the kernel maps; the
    /// nearest-rank median and 99th percentile over the last
    /// [`REPORT_TO_CWND_KEPT`] samples (None before the first), and how
    /// many samples there were in all.
    pub report_to_cwnd_p50_ns: Option<u64>,
    pub report_to_cwnd_p99_ns: Option<u64>,
    pub report_to_cwnd_n: u64,
}

/// Report-to-cwnd latency samples kept for the percentiles.
pub const REPORT_TO_CWND_KEPT: usize = 1 << 16;

/// The datapath's side of Portus's protocol when fold functions run in the
/// kernel: what libccp does in user space, minus the per-ACK invocation.
/// Socket ids are the BPF side's flow ids.
#[derive(Debug)]
pub struct KernelFold {
    tables: FoldTables,
    written: std::collections::BTreeSet<u32>,
    stats: KernelFoldStats,
    /// Per flow: `ts_ns` of its last report not yet answered by a cwnd or
    /// rate update (taken by the first such update, so a report counts once
    /// and updates Portus sends on its own timers are not measured).
    unanswered_report_ns: HashMap<u32, u64>,
    report_to_cwnd: Samples,
    /// CLOCK_MONOTONIC ns (a parameter so tests can drive time).
    clock: fn() -> u64,
}

impl Default for KernelFold {
    fn default() -> Self {
        Self::with_clock(monotonic_ns)
    }
}

impl KernelFold {
    /// As `default()`, reading time (CLOCK_MONOTONIC ns, the clock of the
    /// kernel's report timestamps) from `clock`.
    pub fn with_clock(clock: fn() -> u64) -> Self {
        KernelFold {
            tables: FoldTables::new(LIBCCP_MAX_PROGRAMS),
            written: Default::default(),
            stats: KernelFoldStats::default(),
            unanswered_report_ns: HashMap::new(),
            report_to_cwnd: Samples::new(REPORT_TO_CWND_KEPT),
            clock,
        }
    }

    /// As `default()`, with the program table's guard on
    /// ([`FoldTables::guarded`]): what the datapath runs.
    pub fn guarded() -> Self {
        KernelFold { tables: FoldTables::guarded(LIBCCP_MAX_PROGRAMS), ..Self::default() }
    }

    /// Installs refused so far because they would evict a live flow's program.
    pub fn evictions_refused(&self) -> u64 {
        self.tables.evictions_refused
    }

    /// A new algorithm appeared or the old one went away: the flows' programs
    /// are no longer protected from eviction ([`FoldTables::forget_bindings`]).
    pub fn algorithm_changed(&mut self) {
        self.tables.forget_bindings();
    }

    /// A flow switched to `ccp`: returns its create message for Portus
    /// (`init_cwnd` and `mss` in bytes; addresses and ports as the datapath
    /// keeps them; `cong_alg` the algorithm asked for).
    ///
    /// Errors: `cong_alg` longer than 63 bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn flow_created(
        &mut self,
        flow_id: u32,
        init_cwnd: u32,
        mss: u32,
        src: (u32, u32),
        dst: (u32, u32),
        cong_alg: &str,
    ) -> Result<Vec<u8>, FoldMsgError> {
        let msg = create_msg(
            flow_id, init_cwnd, mss, src.0, src.1, dst.0, dst.1, cong_alg,
        )?;
        self.tables.add_flow(flow_id);
        Ok(msg)
    }

    /// The flow is gone: returns its close message for Portus.
    pub fn flow_released(&mut self, flow_id: u32) -> Vec<u8> {
        self.tables.remove_flow(flow_id);
        self.unanswered_report_ns.remove(&flow_id);
        measure_msg(flow_id, 0, &[])
    }

    /// Handle one message from Portus: program installs go to the program
    /// map, field updates and program changes to the flow's staging.
    ///
    /// Errors: the message is refused (as libccp refuses it; what libccp
    /// applies before refusing is applied too), or a map write failed
    /// ([`FoldMsgError::Unsupported`] naming it).
    pub fn on_portus_msg(
        &mut self,
        buf: &[u8],
        maps: &mut dyn FoldMaps,
    ) -> Result<(), FoldMsgError> {
        let handled = self.tables.handle(buf);
        for e in &handled.effects {
            let r = match e {
                Effect::ClearPrograms => {
                    let empty = FoldProg::new_zeroed();
                    std::mem::take(&mut self.written)
                        .into_iter()
                        .try_for_each(|slot| maps.write_program(slot, &empty))
                }
                Effect::WriteProgram { slot, prog } => {
                    self.written.insert(*slot);
                    self.stats.installs += 1;
                    maps.write_program(*slot, prog)
                }
                Effect::EmptySlot { slot } => maps.write_program(*slot, &FoldProg::new_zeroed()),
                Effect::Stage { sid, delta } => {
                    self.stats.staged += 1;
                    let r = maps.stage(*sid, delta);
                    if r.is_ok() && delta.flags & (STAGED_CWND | STAGED_RATE) != 0 {
                        self.answered(*sid);
                    }
                    r
                }
            };
            r.map_err(|e| unsupported(format!("writing the kernel fold maps: {e}")))?;
        }
        if handled.result.is_err() {
            self.stats.refused += 1;
        }
        handled.result
    }

    /// The measure message for a report record from the kernel, and the
    /// flow it belongs to.
    ///
    /// Errors: the record is neither a `struct fold_report` nor a `struct
    /// fold_report_small` (wrong size), or claims more fields than it holds.
    pub fn report_msg(&mut self, record: &[u8]) -> Result<(u32, Vec<u8>), FoldMsgError> {
        const HEADER: usize = std::mem::size_of::<FoldReportHeader>();
        let capacity = match record.len().checked_sub(HEADER).map(|b| b / 8) {
            Some(n) if n == SMALL_REPORT || n == MAX_REPORT as usize => n,
            _ => {
                return Err(unsupported(format!(
                    "report record of {} bytes (struct fold_report has {}, fold_report_small {})",
                    record.len(),
                    std::mem::size_of::<FoldReport>(),
                    HEADER + 8 * SMALL_REPORT
                )))
            }
        };
        let (h, rest) = FoldReportHeader::read_from_prefix(record).expect("length checked");
        let n = h.n_fields as usize;
        if n > capacity {
            return Err(unsupported(format!("report record claims {n} fields and holds {capacity}")));
        }

        let fields: Vec<u64> = rest[..8 * n].chunks_exact(8).map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes"))).collect();
        self.stats.reports += 1;
        self.unanswered_report_ns.insert(h.flow_id, h.ts_ns);
        Ok((h.flow_id, measure_msg(h.flow_id, h.uid, &fields)))
    }

    /// [`KernelFold::report_msg`] for sending to Portus: a report without
    /// fields is refused, since Portus reads a measure without fields as the
    /// flow's close. A report of a program replaced under a running section
    /// (a new algorithm's first install clears the table) has none: Portus
    /// dropped the live flow it had just been told about. (libccp would send
    /// it; the differential tests compare [`KernelFold::report_msg`].)
    ///
    /// Errors: as [`KernelFold::report_msg`], or a report without fields.
    pub fn report_msg_for_portus(&mut self, record: &[u8]) -> Result<(u32, Vec<u8>), FoldMsgError> {
        let (flow, msg) = self.report_msg(record)?;
        // measure_msg: header, program uid, field count, fields
        if msg.len() <= HDR_LEN + 8 {
            return Err(unsupported(format!("report of flow {flow} without fields: Portus would take it for a close")));
        }
        Ok((flow, msg))
    }

    /// A cwnd or rate update for `flow` reached the kernel maps: one
    /// report-to-cwnd sample if a report of it is waiting for its answer.
    fn answered(&mut self, flow: u32) {
        if let Some(ts) = self.unanswered_report_ns.remove(&flow) {
            // a report stamped after our clock read (other CPU) counts as 0
            self.report_to_cwnd.push((self.clock)().saturating_sub(ts));
        }
    }

    /// The counters and the report-to-cwnd percentiles (see [`KernelFoldStats`]).
    pub fn stats(&self) -> KernelFoldStats {
        KernelFoldStats {
            report_to_cwnd_p50_ns: self.report_to_cwnd.percentile(50),
            report_to_cwnd_p99_ns: self.report_to_cwnd.percentile(99),
            report_to_cwnd_n: self.report_to_cwnd.count,
            evictions_refused: self.tables.evictions_refused,
            replaced_unused: self.tables.replaced_unused,
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(p.insns[0].op, OP_ADD);
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
        assert_eq!(t.slot_of(199).is_some(), true, "the newest install is in the table");
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
}
