//! A small BPF assembler for the fold JIT ([`super::jit`]): the
//! instruction encoding of include/uapi/linux/bpf.h and bpf_common.h, the
//! register roles the generated code keeps, and [`Asm`], which emits
//! instructions with labels and patches the forward jumps once every
//! label is bound (the JIT only jumps forward).

use libbpf_rs::libbpf_sys::{self, bpf_insn};

use super::jit::JitError;

pub(super) const BPF_LD: u8 = 0x00;
pub(super) const BPF_LDX: u8 = 0x01;
pub(super) const BPF_STX: u8 = 0x03;
pub(super) const BPF_ALU: u8 = 0x04;
pub(super) const BPF_JMP: u8 = 0x05;
pub(super) const BPF_ALU64: u8 = 0x07;
pub(super) const BPF_W: u8 = 0x00;
pub(super) const BPF_DW: u8 = 0x18;
pub(super) const BPF_IMM: u8 = 0x00;
pub(super) const BPF_MEM: u8 = 0x60;
pub(super) const BPF_K: u8 = 0x00;
pub(super) const BPF_X: u8 = 0x08;
pub(super) const ADD: u8 = 0x00;
pub(super) const SUB: u8 = 0x10;
pub(super) const MUL: u8 = 0x20;
pub(super) const DIV: u8 = 0x30;
pub(super) const MOV: u8 = 0xb0;
pub(super) const JA: u8 = 0x00;
pub(super) const JEQ: u8 = 0x10;
pub(super) const JGT: u8 = 0x20;
pub(super) const JGE: u8 = 0x30;
pub(super) const JNE: u8 = 0x50;
pub(super) const JLT: u8 = 0xa0;
pub(super) const CALL: u8 = 0x80;
pub(super) const EXIT: u8 = 0x90;

pub(super) const R0: u8 = 0;
pub(super) const R1: u8 = 1;
pub(super) const R2: u8 = 2;
pub(super) const R3: u8 = 3;
pub(super) const R4: u8 = 4;
pub(super) const R5: u8 = 5;
/// Register file base (callee-saved).
pub(super) const R6: u8 = 6;
/// Program context (StructOps: the tail call's ctx).
pub(super) const R7: u8 = 7;
/// Frame pointer (read-only): the stack below it.
pub(super) const R10: u8 = 10;

pub(super) fn raw(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> bpf_insn {
    let mut i = bpf_insn {
        code,
        off,
        imm,
        ..Default::default()
    };
    i.set_dst_reg(dst);
    i.set_src_reg(src);
    i
}

/// A jump destination: labels are allocated, then bound to a position.
pub(super) type Label = usize;

/// Instructions being emitted, with forward jumps patched at the end.
pub(super) struct Asm {
    out: Vec<bpf_insn>,
    /// position of each label, once bound
    at: Vec<Option<usize>>,
    /// (jump position, label)
    fixups: Vec<(usize, Label)>,
}

impl Asm {
    pub(super) fn new() -> Asm {
        Asm {
            out: Vec::new(),
            at: Vec::new(),
            fixups: Vec::new(),
        }
    }
    pub(super) fn label(&mut self) -> Label {
        self.at.push(None);
        self.at.len() - 1
    }
    pub(super) fn bind(&mut self, l: Label) {
        debug_assert!(self.at[l].is_none(), "label bound twice");
        self.at[l] = Some(self.out.len());
    }
    /// Whether some jump goes to `l`.
    pub(super) fn used(&self, l: Label) -> bool {
        self.fixups.iter().any(|&(_, to)| to == l)
    }
    pub(super) fn emit(&mut self, i: bpf_insn) {
        self.out.push(i);
    }
    /// dst = imm (64-bit, imm sign-extended)
    pub(super) fn mov64_imm(&mut self, dst: u8, imm: i32) {
        self.emit(raw(BPF_ALU64 | MOV | BPF_K, dst, 0, 0, imm));
    }
    /// dst = imm as u32, zero-extended (a 32-bit move clears the upper half)
    pub(super) fn mov_u32(&mut self, dst: u8, imm: u32) {
        self.emit(raw(BPF_ALU | MOV | BPF_K, dst, 0, 0, imm as i32));
    }
    pub(super) fn mov64(&mut self, dst: u8, src: u8) {
        self.emit(raw(BPF_ALU64 | MOV | BPF_X, dst, src, 0, 0));
    }
    pub(super) fn alu64(&mut self, op: u8, dst: u8, src: u8) {
        self.emit(raw(BPF_ALU64 | op | BPF_X, dst, src, 0, 0));
    }
    pub(super) fn alu64_imm(&mut self, op: u8, dst: u8, imm: i32) {
        self.emit(raw(BPF_ALU64 | op | BPF_K, dst, 0, 0, imm));
    }
    pub(super) fn alu32(&mut self, op: u8, dst: u8, src: u8) {
        self.emit(raw(BPF_ALU | op | BPF_X, dst, src, 0, 0));
    }
    pub(super) fn alu32_imm(&mut self, op: u8, dst: u8, imm: i32) {
        self.emit(raw(BPF_ALU | op | BPF_K, dst, 0, 0, imm));
    }
    /// dst = regs[off] (u64 load from the register file)
    pub(super) fn load_reg(&mut self, dst: u8, off: u32) {
        self.emit(raw(BPF_LDX | BPF_MEM | BPF_DW, dst, R6, (off * 8) as i16, 0));
    }
    /// regs[off] = src. A register store, never an immediate one: BPF_ST
    /// into a syscall program's context is refused by the verifier.
    pub(super) fn store_reg(&mut self, off: u32, src: u8) {
        self.emit(raw(BPF_STX | BPF_MEM | BPF_DW, R6, src, (off * 8) as i16, 0));
    }
    /// if (dst op src) goto l   (64-bit unsigned compare)
    pub(super) fn jmp(&mut self, op: u8, dst: u8, src: u8, l: Label) {
        self.fixups.push((self.out.len(), l));
        self.emit(raw(BPF_JMP | op | BPF_X, dst, src, 0, 0));
    }
    /// if (dst op imm) goto l
    pub(super) fn jmp_imm(&mut self, op: u8, dst: u8, imm: i32, l: Label) {
        self.fixups.push((self.out.len(), l));
        self.emit(raw(BPF_JMP | op | BPF_K, dst, 0, 0, imm));
    }
    pub(super) fn ja(&mut self, l: Label) {
        self.fixups.push((self.out.len(), l));
        self.emit(raw(BPF_JMP | JA, 0, 0, 0, 0));
    }
    /// 16-byte load of a map fd (BPF_PSEUDO_MAP_FD): two instruction slots.
    pub(super) fn ld_map_fd(&mut self, dst: u8, fd: i32) {
        self.emit(raw(BPF_LD | BPF_DW | BPF_IMM, dst, libbpf_sys::BPF_PSEUDO_MAP_FD as u8, 0, fd));
        self.emit(raw(0, 0, 0, 0, 0));
    }
    pub(super) fn call(&mut self, helper: u32) {
        self.emit(raw(BPF_JMP | CALL, 0, 0, 0, helper as i32));
    }
    pub(super) fn exit(&mut self) {
        self.emit(raw(BPF_JMP | EXIT, 0, 0, 0, 0));
    }
    /// Patch every jump; offsets count instructions after the jump.
    pub(super) fn finish(mut self) -> Result<Vec<bpf_insn>, JitError> {
        for &(pos, l) in &self.fixups {
            let to = self.at[l].expect("every label a jump uses is bound");
            let off = to as i64 - pos as i64 - 1;
            self.out[pos].off = i16::try_from(off).map_err(|_| {
                JitError::Program(format!(
                    "a jump of {off} instructions does not fit BPF's 16-bit offset ({} instructions in all)",
                    self.out.len()
                ))
            })?;
        }
        Ok(self.out)
    }
}
