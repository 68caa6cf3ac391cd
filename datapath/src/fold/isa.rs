//! The fold instruction set as the kernel runs it: the register file
//! layout, the opcodes ([`Op`]), the instruction flags and the kernel's
//! program and state records. It mirrors bpf/fold_vm.h byte for byte (the
//! size checks below fail the build when the two drift apart), so it is
//! the one place the compiler, the JIT and the tests take them from.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

// ---- layout constants: mirror bpf/fold_vm.h ----
pub const MAX_REPORT: u32 = 110;
pub const MAX_CONTROL: u32 = 110;
pub const MAX_TMP: u32 = 8;
pub const MAX_LOCAL: u32 = 8;
/// libccp's flat register file (struct register_file): where each class
/// starts, and its size; operands index it (an index past a class reads
/// the next class, as in libccp).
pub(super) const FLAT_REPORT: u32 = 0;
pub(super) const FLAT_CONTROL: u32 = 110;
pub(super) const FLAT_IMPLICIT: u32 = 220;
pub(super) const FLAT_TMP: u32 = 226;
pub(super) const FLAT_LOCAL: u32 = 234;
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
/// Register slot where a compiled main section ([`super::jit`]) leaves its
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
pub(super) const F_FUSED_IF: u8 = F_IF | F_IFV;
/// Implicit registers the compiler tracks (flat offsets).
pub const OFF_EXPR_FLAG: u32 = OFF_IMPLICIT;
pub const OFF_FALLTHROUGH: u32 = OFF_IMPLICIT + 1;

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

pub(super) const IMPLICIT_MICROS: u32 = 3;
pub(super) const IMPLICIT_CWND: u32 = 4;
pub(super) const IMPLICIT_RATE: u32 = 5;
/// libccp's DEF default meaning "+infinity" (older Portus encoding).
pub(super) const DEF_INFINITY_MARK: u32 = 0x3fff_ffff;

/// A fold instruction's operation: libccp's opcodes 0..=14 as Portus sends
/// them (machine.c, fold_vm.h FOLD_OP_*), then the two the compiler adds to
/// lay the expressions out linearly. The one list the parser, the compiler,
/// the JIT and the tests share; [`FoldInsn::op`] holds its code.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Add = 0,
    Bind = 1,
    Def = 2,
    Div = 3,
    Equiv = 4,
    Ewma = 5,
    Gt = 6,
    If = 7,
    Lt = 8,
    Max = 9,
    MaxWrap = 10,
    Min = 11,
    Mul = 12,
    NotIf = 13,
    Sub = 14,
    /// Jump to `cur` if the expression flag is 0 (compiler only).
    Jz = 15,
    /// Stop the section if the expression flag is set and fallthrough is
    /// not (compiler only).
    Brk = 16,
}

impl Op {
    /// libccp's MAX_OP: codes below it are valid on the wire.
    pub const WIRE_COUNT: u8 = 15;

    /// Every operation, in code order.
    pub const ALL: [Op; 17] = [
        Op::Add,
        Op::Bind,
        Op::Def,
        Op::Div,
        Op::Equiv,
        Op::Ewma,
        Op::Gt,
        Op::If,
        Op::Lt,
        Op::Max,
        Op::MaxWrap,
        Op::Min,
        Op::Mul,
        Op::NotIf,
        Op::Sub,
        Op::Jz,
        Op::Brk,
    ];

    /// The code in [`FoldInsn::op`] and on the wire.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The operation with this code; None past [`Op::Brk`].
    pub fn from_code(code: u8) -> Option<Op> {
        Op::ALL.get(usize::from(code)).copied()
    }
}

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
const _: () = assert!(std::mem::size_of::<FoldState>() == 8 * NREGS);
