//! Portus messages built byte by byte, as libccp reads them (little-endian):
//! the fold tests and the fuzzer make ones Portus's serializer never would,
//! from random operands ([`read_reg_with`], [`write_reg`]) among others.

use super::Rng;

/// The 8-byte header: type, length of the whole message, socket id.
pub fn hdr(typ: u16, len: usize, sid: u32) -> Vec<u8> {
    let mut b = typ.to_le_bytes().to_vec();
    b.extend_from_slice(&(len as u16).to_le_bytes());
    b.extend_from_slice(&sid.to_le_bytes());
    b
}

/// One wire instruction: op, then (type, index) for result, left, right.
#[derive(Clone, Copy, Debug)]
pub struct WI {
    pub op: u8,
    pub ret: (u8, u32),
    pub left: (u8, u32),
    pub right: (u8, u32),
}

/// An install message (type 2) of program `uid`: its event expressions
/// (4 words each) and instructions.
pub fn install_msg(uid: u32, exprs: &[[u32; 4]], instrs: &[WI]) -> Vec<u8> {
    let mut b = hdr(2, 8 + 12 + 16 * (exprs.len() + instrs.len()), 0);
    for v in [uid, exprs.len() as u32, instrs.len() as u32] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for e in exprs {
        e.iter().for_each(|v| b.extend_from_slice(&v.to_le_bytes()));
    }
    for i in instrs {
        b.push(i.op);
        for (t, x) in [i.ret, i.left, i.right] {
            b.push(t);
            b.extend_from_slice(&x.to_le_bytes());
        }
    }
    b
}

/// Register updates (type, index, value) as the update and change messages carry them.
fn updates_bytes(updates: &[(u8, u32, u64)]) -> Vec<u8> {
    let mut b = vec![];
    for &(t, i, v) in updates {
        b.push(t);
        b.extend_from_slice(&i.to_le_bytes());
        b.extend_from_slice(&v.to_le_bytes());
    }
    b
}

/// An update-field message (type 3) for flow `sid`.
pub fn update_msg(sid: u32, updates: &[(u8, u32, u64)]) -> Vec<u8> {
    let mut b = hdr(3, 12 + 13 * updates.len(), sid);
    b.extend_from_slice(&(updates.len() as u32).to_le_bytes());
    b.extend(updates_bytes(updates));
    b
}

/// A change-program message (type 4): flow `sid` to program `uid`, with updates.
pub fn change_msg(sid: u32, uid: u32, updates: &[(u8, u32, u64)]) -> Vec<u8> {
    let mut b = hdr(4, 16 + 13 * updates.len(), sid);
    b.extend_from_slice(&uid.to_le_bytes());
    b.extend_from_slice(&(updates.len() as u32).to_le_bytes());
    b.extend(updates_bytes(updates));
    b
}

// ------------------------------------------------------------ random operands

/// Operand type of libccp's implicit registers (the flag, fallthrough,
/// report bit, Micros, ...).
pub const IMPLICIT_REG: u8 = 2;
/// Operand type of libccp's temporaries.
pub const TMP_REG: u8 = 7;

/// An index below `n` mostly; 3% of the time one up to 129, past libccp's
/// arrays (writes there are ignored, reads alias).
pub fn small_index(r: &mut Rng, n: u64) -> u32 {
    if r.chance(3) {
        r.below(130) as u32 // past libccp's arrays: writes ignored, reads alias
    } else {
        r.below(n) as u32
    }
}

/// A random operand to read: an immediate (`imm` draws it: a quarter of
/// the time), a primitive, a report or control register, a temporary, a
/// local or an implicit register.
pub fn read_reg_with(r: &mut Rng, imm: impl FnOnce(&mut Rng) -> (u8, u32)) -> (u8, u32) {
    match r.below(12) {
        0..=2 => imm(r),
        3..=5 => (4, r.below(16) as u32),
        6 => (r.pick(&[5, 6]), small_index(r, 6)),
        7 => (r.pick(&[0, 8]), small_index(r, 6)),
        8 => (TMP_REG, r.below(16) as u32),
        9 => (3, r.below(10) as u32),
        _ => (IMPLICIT_REG, r.below(7) as u32),
    }
}

/// A random register to write: a report or control register, a
/// temporary, a local, or one of the implicit registers a program may set.
pub fn write_reg(r: &mut Rng) -> (u8, u32) {
    match r.below(10) {
        0 | 1 => (r.pick(&[5, 6]), small_index(r, 6)),
        2 | 3 => (r.pick(&[0, 8]), small_index(r, 6)),
        4 | 5 => (TMP_REG, r.below(16) as u32),
        6 => (3, r.below(10) as u32),
        _ => (IMPLICIT_REG, r.pick(&[0, 0, 1, 2, 3, 4, 4, 5, 6])),
    }
}
