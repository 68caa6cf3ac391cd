//! Portus messages built byte by byte, as libccp reads them (little-endian):
//! the fold tests and the fuzzer make ones Portus's serializer never would.

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
