//! Portus's messages in libccp's wire format: the parser for what Portus
//! sends (install, update fields, change program) and the builders for what
//! a datapath sends back (ready, create, measure). Byte-exact with libccp
//! 1.2 so Portus cannot tell the kernel fold from libccp.
//!
//! Header: `u16 type, u16 len, u32 socket id`, little endian; type 2
//! install, 3 update fields, 4 change program.
//! - install: `u32 program_uid, num_expressions, num_instructions`, then
//!   16-byte expressions `{cond_start, num_cond, body_start, num_body}` and
//!   16-byte instructions `u8 op, (u8 type, u32 index) x 3 (result, left,
//!   right)`, packed.
//! - update fields: `u32 count` (libccp reads only its first byte, as a
//!   signed char), then 13-byte `{u8 type, u32 index, u64 value}`.
//! - change program: `u32 program_uid, u32 count` then updates as above.

use super::isa::*;

pub(super) const MSG_INSTALL: u16 = 2;
pub(super) const MSG_UPDATE_FIELDS: u16 = 3;
pub(super) const MSG_CHANGE_PROG: u16 = 4;
pub(super) const HDR_LEN: usize = 8;
/// libccp's BIGGEST_MSG_SIZE.
pub(super) const BIGGEST_MSG: usize = 32678;
/// libccp's MAX_MUTABLE_REG: most updates in one message.
pub(super) const MAX_UPDATES: u32 = 222;
pub(super) const MAX_EXPRESSIONS: u32 = 256;
pub(super) const MAX_INSTRUCTIONS: u32 = 256;
pub(super) const INSTR_BYTES: usize = 16;
pub(super) const EXPR_BYTES: usize = 16;
pub(super) const UPDATE_BYTES: usize = 13;

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
    /// Refused by the program table's guard ([`super::FoldTables::guarded`]): the
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

pub(super) fn libccp_err(code: i32, what: impl Into<String>) -> FoldMsgError {
    FoldMsgError::Libccp {
        code,
        what: what.into(),
    }
}

pub(super) fn unsupported(what: impl Into<String>) -> FoldMsgError {
    FoldMsgError::Unsupported(what.into())
}

pub(super) fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

pub(super) fn u64_at(b: &[u8], off: usize) -> u64 {
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

pub(super) fn read_updates(b: &[u8], n: u32) -> Result<Vec<Update>, FoldMsgError> {
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

pub(super) fn valid_reg_type(ty: u8) -> bool {
    ty <= REG_VOLATILE_CONTROL
}

/// libccp read_instruction: op, then result type, then each register in
/// turn. On error also returns what libccp left in the (zeroed) slot
/// instruction: the fields it had set before the failing check.
pub(super) fn read_instruction(b: &[u8], i: usize) -> Result<WireInstr, (FoldMsgError, WireInstr)> {
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
    if ins.op >= Op::WIRE_COUNT {
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

// ---- messages to Portus (what libccp would send; byte-exact) ----

pub(super) const MSG_CREATE: u16 = 0;
pub(super) const MSG_MEASURE: u16 = 1;
pub(super) const MSG_READY: u16 = 5;
/// libccp's MAX_CONG_ALG_SIZE (including the terminating NUL).
pub const CONG_ALG_BYTES: usize = 64;

pub(super) fn header(ty: u16, len: usize, sid: u32) -> Vec<u8> {
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

/// libccp executes slot instructions past num_instructions too: they are
/// zero bytes, i.e. `ADD control[0] + control[0] -> control[0]`.
pub(super) const ZERO_INSTR: WireInstr = WireInstr {
    op: Op::Add.code(),
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
