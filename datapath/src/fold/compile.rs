//! The compiler: a parsed install message ([`super::msg::PortusMsg::Install`])
//! into the linear program the kernel runs ([`FoldProg`]). Per expression
//! the condition, a JZ over the body, the body, a BRK; register operands
//! resolved to offsets in the flat register file (see fold_vm.h for the
//! layout and why). The peephole passes live in `optimise.rs`.

use zerocopy::FromZeros;

use super::isa::*;
use super::msg::{unsupported, FoldMsgError, WireExpr, WireInstr, WireReg, ZERO_INSTR};
use super::optimise::{drop_dead_implicit_writes, drop_recomputations, fuse_binds, fuse_ifs, writes_always};

/// Offset read for register `r` (libccp read_reg on its flat register file).
/// Returns (is_immediate, immediate value or register offset).
pub(super) fn read_operand(r: WireReg) -> (bool, u32) {
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
pub(super) fn physical(f: u32) -> u32 {
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
pub(super) fn write_target(r: WireReg) -> (u16, bool) {
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
    let cur = if ins.op == Op::Ewma.code() {
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
        op: Op::Bind.code(),
        flags: F_RIMM,
        wr,
        cur: OFF_ZERO as u16,
        wr2: wr,
        left: 0,
        right: default,
    }
}

/// One expression's condition and body, each already encoded.
struct Expression {
    cond: Vec<FoldInsn>,
    body: Vec<FoldInsn>,
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
        let value = if i.op == Op::Bind.code() && i.flags & F_RIMM != 0 {
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
                Some(c) if !e.cond.is_empty() && c.op != Op::Ewma.code() && c.flags & F_FUSED_IF == 0 => {
                    c.flags |= F_JZ;
                }
                _ => out.push(FoldInsn {
                    op: Op::Jz.code(),
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
                op: Op::Brk.code(),
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
            if out[at].op == Op::Jz.code() {
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
                    .filter(|i| i.op != Op::Def.code())
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
        .take_while(|i| i.op == Op::Def.code())
        .collect();
    // the DEFs of registers of `classes` as binds at the end of `out`: (offset, length)
    let defs_of = |out: &mut Vec<FoldInsn>, classes: [u8; 2]| {
        let off = out.len() as u32;
        out.extend(defs.iter().filter(|i| classes.contains(&i.left.ty)).map(def_as_bind));
        (off, out.len() as u32 - off)
    };
    (p.reset_off, p.reset_len) = defs_of(&mut out, [REG_VOLATILE_REPORT, REG_VOLATILE_CONTROL]);
    (p.init_off, p.init_len) = defs_of(&mut out, [REG_NONVOLATILE_CONTROL, REG_NONVOLATILE_REPORT]);
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
