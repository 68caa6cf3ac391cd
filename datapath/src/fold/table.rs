//! libccp's bookkeeping for the kernel fold: the program table (which uid
//! holds which of the kernel's program slots, the guard that keeps a live
//! flow's program from being evicted) and the per-flow staged updates that
//! the kernel applies at the flow's next invocation.

use std::collections::{HashMap, HashSet};

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use super::compile::compile;
use super::isa::*;
use super::msg::{
    libccp_err, parse_message, unsupported, FoldMsgError, PortusMsg, Update, u32_at, WireExpr, WireInstr, BIGGEST_MSG, HDR_LEN, MSG_CHANGE_PROG,
    MSG_UPDATE_FIELDS,
};

pub const STAGED_CHANGE: u32 = 1;
pub const STAGED_CWND: u32 = 2;
pub const STAGED_RATE: u32 = 4;
pub const STAGED_CONTROL: u32 = 8;

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

const _: () = assert!(std::mem::size_of::<FoldStaged>() == 40 + 8 * MAX_CONTROL as usize);

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
