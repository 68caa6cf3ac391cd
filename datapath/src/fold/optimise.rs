//! Peephole optimisation of the compiled sections: fuse the instruction
//! pairs Portus emits for one assignment, drop recomputations and writes no
//! one can observe. Each pass keeps libccp's results exactly (same writes,
//! same aborts); tests/fold_differential.rs and tests/fold_jit.rs hold them
//! to it.

use super::isa::*;

/// Whether an instruction's write happens whenever it does not abort (IF
/// and NOTIF write only on their condition).
pub(super) fn writes_always(i: &FoldInsn) -> bool {
    i.op != Op::If.code() && i.op != Op::NotIf.code()
}

/// Fuse `OP t a b; BIND d t` into one instruction writing `t` and `d`
/// (`wr`, `wr2`): Portus compiles `(:= d (op a b))` that way. The pair
/// writes the same registers with the same value in the same order, and an
/// abort of OP leaves both unwritten in either form, so no liveness is
/// needed. Not when OP writes conditionally (IF/NOTIF: the BIND would copy
/// the old value), writes nowhere (an ignored write: the BIND then reads
/// whatever register its operand names), or is already fused.
pub(super) fn fuse_binds(section: Vec<FoldInsn>) -> Vec<FoldInsn> {
    let mut out: Vec<FoldInsn> = Vec::with_capacity(section.len());
    for i in section {
        if let Some(prev) = out.last_mut() {
            let fusable = i.op == Op::Bind.code()
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
pub(super) fn fuse_ifs(section: Vec<FoldInsn>) -> Vec<FoldInsn> {
    let mut out: Vec<FoldInsn> = Vec::with_capacity(section.len());
    for i in section {
        if let Some(prev) = out.last_mut() {
            let t = u32::from(prev.wr);
            let base = i.op == Op::If.code()
                && i.flags & (F_LIMM | F_RIMM | F_WTIME) == 0
                && writes_always(prev)
                && prev.op != Op::Ewma.code()
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
pub(super) fn operand_reads(i: &FoldInsn) -> impl Iterator<Item = u32> {
    let left = (i.flags & F_LIMM == 0).then_some(i.left);
    let right = (i.flags & F_RIMM == 0).then_some(i.right);
    let cur = (i.op == Op::Ewma.code() || i.flags & F_FUSED_IF != 0).then_some(u32::from(i.cur));
    [left, right, cur].into_iter().flatten()
}

/// Registers instruction `i` writes (one or two).
pub(super) fn writes(i: &FoldInsn) -> [u32; 2] {
    [u32::from(i.wr), u32::from(i.wr2)]
}

/// Drop an instruction that repeats an earlier one of the same straight-
/// line section when nothing it reads or writes was written in between:
/// it would write the values its registers already hold, and it cannot
/// abort where the earlier one did not (Portus recomputes e.g. `(<
/// Flow.rtt_sample_us +infinity)` into the same tmp for every `if`). Only
/// for instructions that write whenever they run, do not move Micros'
/// time zero and do not read what they write.
pub(super) fn drop_recomputations(section: Vec<FoldInsn>) -> Vec<FoldInsn> {
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
pub(super) fn may_abort(i: &FoldInsn) -> bool {
    matches!(Op::from_code(i.op), Some(Op::Add | Op::Sub | Op::Mul | Op::Div))
}

/// Drop writes to the expression flag and fallthrough registers that no
/// later instruction can observe. Both are zeroed when an invocation
/// starts (before anything reads them) and neither is reported, so a value
/// left at the end of an invocation or at an abort is never read: liveness
/// needs no look past the invocation. Reads are the operands, JZ and [`F_JZ`]
/// (the flag, after the instruction's write) and BRK (both). E.g. `(when
/// true ...)`'s `BIND flag 1` once no JZ or BRK is left to read it, and
/// `(fallthrough)` when no later BRK remains.
pub(super) fn drop_dead_implicit_writes(mut code: Vec<FoldInsn>) -> Vec<FoldInsn> {
    const TRACKED: [u32; 2] = [OFF_EXPR_FLAG, OFF_FALLTHROUGH];
    let bit = |r: u32| TRACKED.iter().position(|t| *t == r).map_or(0u8, |p| 1 << p);
    loop {
        // live[n]: tracked registers live before instruction n (code.len(): end)
        let mut live = vec![0u8; code.len() + 1];
        let mut dead = vec![false; code.len()];
        for n in (0..code.len()).rev() {
            let i = &code[n];
            let mut after = live[n + 1];
            match Op::from_code(i.op) {
                Some(Op::Jz) => after |= live[i.right as usize] | bit(OFF_EXPR_FLAG),
                Some(Op::Brk) => after |= bit(OFF_EXPR_FLAG) | bit(OFF_FALLTHROUGH),
                _ => {}
            }
            if i.flags & F_JZ != 0 {
                after |= live[usize::from(i.cur)] | bit(OFF_EXPR_FLAG);
            }
            let (is_jump, w) = (matches!(Op::from_code(i.op), Some(Op::Jz | Op::Brk)), writes(i));
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
                if i.op == Op::Jz.code() {
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
