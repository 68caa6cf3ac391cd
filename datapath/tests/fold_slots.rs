//! Per-flow fold state slots (bpf/fold_ccp.h `fold_flows`): each flow
//! claims a slot of a preallocated array at init and gives it back at
//! release. Checked through bpf/fold_test.bpf.c's `fold_test_claim` /
//! `fold_test_release` (the same code init() and release() run) with
//! BPF_PROG_TEST_RUN:
//! - a flow gets its home slot (flow id mod FOLD_MAX_FLOWS) while it is
//!   free; with every slot taken the next flow gets none (it runs the
//!   fallback) and `no_state_flows` counts it;
//! - a flow whose home slot is held probes on to a free one, and finds its
//!   registers and bookkeeping zeroed whatever the slot's earlier flow left;
//! - `fold_stage` bumps the staging generation of the flow's home slot only
//!   while that flow holds it (a flow away from home looks every ACK).
//!
//! Needs root (loading BPF). Registers no struct_ops: no host lock.

mod fold_harness;
use fold_harness::skel;

use libbpf_rs::{MapCore, MapFlags};

/// bpf/fold_ccp.h FOLD_MAX_FLOWS and FOLD_NO_SLOT.
const MAX_FLOWS: u32 = 4096;
const NO_SLOT: u32 = u32::MAX;
/// bpf/fold_vm.h FOLD_NREGS: a slot's value is the register file, one page.
const NREGS: usize = 512;
/// Byte offsets from the end of a `struct fold_flow` (asserted in fold_ccp.h):
/// the owner, then the 128 bytes every ACK touches, which end with the
/// staging generations and the unflushed counts (a byte each).
const TAIL_OWNER: usize = 136;
const TAIL_REQ_CWND: usize = 32;
const TAIL_STAGED_GEN: usize = 20;
const TAIL_STAGED_SEEN: usize = 16;
/// struct fold_unflushed: invocations, compiled_runs, includer, pad (u8 each).
const TAIL_UNFLUSHED: usize = 12;

struct Kernel {
    skel: skel::FoldTestSkel<'static>,
}

impl Kernel {
    fn load() -> Kernel {
        Kernel { skel: fold_harness::load("fold_slots") }
    }

    /// Run fold_test_claim (`claim`) or fold_test_release on a
    /// `struct fold_test_slot_io` and return it as (flow id, slot).
    fn run_io(&self, claim: bool, flow_id: u32, slot: u32) -> (u32, u32) {
        // a syscall program's context is copied back into context_in
        let mut ctx = [flow_id.to_ne_bytes(), slot.to_ne_bytes()].concat();
        let progs = &self.skel.progs;
        let rc = if claim {
            fold_harness::run_on(&progs.fold_test_claim, &mut ctx, "fold_test_claim")
        } else {
            fold_harness::run_on(&progs.fold_test_release, &mut ctx, "fold_test_release")
        };
        assert_eq!(rc, 0);
        (u32::from_ne_bytes(ctx[0..4].try_into().unwrap()), u32::from_ne_bytes(ctx[4..8].try_into().unwrap()))
    }

    fn claim(&self, flow_id: u32) -> u32 {
        self.run_io(true, flow_id, 0).1
    }

    fn release(&self, slot: u32) {
        self.run_io(false, 0, slot);
    }

    fn slot_value(&self, slot: u32) -> Vec<u8> {
        // an array slot always has a value
        fold_harness::read(&self.skel.maps.fold_flows, slot)
    }

    fn put_slot_value(&self, slot: u32, value: &[u8]) {
        fold_harness::write(&self.skel.maps.fold_flows, slot, value);
    }

    /// `fold_stage` for `flow_id` with nothing in the delta.
    fn stage_nothing(&self, flow_id: u32) {
        // struct fold_stage_in: struct fold_staged (40 + 8 * 110 bytes), flow id, pad
        let mut ctx = vec![0u8; 40 + 8 * 110];
        ctx.extend_from_slice(&flow_id.to_ne_bytes());
        ctx.extend_from_slice(&[0; 4]);
        let rc = fold_harness::run_on(&self.skel.progs.fold_stage, &mut ctx, "fold_stage");
        assert_eq!(rc, 0, "fold_stage for flow {flow_id}");
    }

    /// fold_counters' u64 number `index`, summed over CPUs.
    fn counter(&self, index: usize) -> u64 {
        self.skel
            .maps
            .fold_counters
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .expect("reading fold_counters")
            .expect("a per-CPU array always has a value")
            .iter()
            .map(|v| u64::from_ne_bytes(v[8 * index..8 * index + 8].try_into().unwrap()))
            .sum()
    }

    /// fold_counters.no_state_flows (the sixth u64).
    fn no_state_flows(&self) -> u64 {
        self.counter(5)
    }
}

fn tail_u32(v: &[u8], from_end: usize) -> u32 {
    let at = v.len() - from_end;
    u32::from_ne_bytes(v[at..at + 4].try_into().unwrap())
}

fn set_tail_u32(v: &mut [u8], from_end: usize, x: u32) {
    let at = v.len() - from_end;
    v[at..at + 4].copy_from_slice(&x.to_ne_bytes());
}

#[test]
fn flows_get_home_slots_until_full_then_none_and_are_counted() {
    let k = Kernel::load();
    for flow in 1..=MAX_FLOWS {
        let slot = k.claim(flow);
        assert_eq!(slot, flow % MAX_FLOWS, "flow {flow} should get its home slot");
        assert_eq!(tail_u32(&k.slot_value(slot), TAIL_OWNER), flow, "slot {slot} names its owner");
    }
    assert_eq!(k.no_state_flows(), 0);
    assert_eq!(k.claim(MAX_FLOWS + 1), NO_SLOT, "every slot is taken");
    assert_eq!(k.no_state_flows(), 1, "the flow without a slot is counted");
}

#[test]
fn a_flow_away_from_home_gets_a_free_slot_with_its_state_zeroed() {
    let k = Kernel::load();
    for flow in 1..=MAX_FLOWS {
        k.claim(flow);
    }
    // flow 5 ends; its slot keeps what it left behind (here: junk in every
    // byte but the owner and the staging generations)
    k.release(5);
    let mut left = k.slot_value(5);
    assert_eq!(tail_u32(&left, TAIL_OWNER), 0, "a released slot is free");
    assert_eq!(left.len(), 8 * NREGS, "one page per slot");
    let len = left.len();
    let kept = |i: usize| {
        let from_end = len - i;
        [TAIL_OWNER, TAIL_STAGED_GEN, TAIL_STAGED_SEEN].iter().any(|&t| from_end <= t && from_end > t - 4)
    };
    for (i, b) in left.iter_mut().enumerate() {
        if !kept(i) {
            *b = (i % 251) as u8 + 1;
        }
    }
    set_tail_u32(&mut left, TAIL_REQ_CWND, 123_456);
    k.put_slot_value(5, &left);

    // flow 4097's home (slot 1) is held by flow 1: it probes on to slot 5
    let slot = k.claim(MAX_FLOWS + 1);
    assert_eq!(slot, 5);
    let v = k.slot_value(slot);
    assert_eq!(tail_u32(&v, TAIL_OWNER), MAX_FLOWS + 1);
    let dirty: Vec<usize> = (0..v.len()).filter(|&i| !kept(i) && v[i] != 0).collect();
    assert!(dirty.is_empty(), "registers and bookkeeping zeroed for the new flow; not at bytes {dirty:?}");
    assert_eq!(tail_u32(&v, TAIL_REQ_CWND), 0, "no cwnd request carried over");
    assert_eq!(
        tail_u32(&v, TAIL_STAGED_SEEN),
        tail_u32(&v, TAIL_STAGED_GEN).wrapping_sub(1),
        "its first ACK looks for staged updates"
    );
}

#[test]
fn staging_bumps_the_generation_only_in_a_home_slot_its_flow_holds() {
    let k = Kernel::load();
    assert_eq!(k.claim(2), 2);
    let gen = |slot| tail_u32(&k.slot_value(slot), TAIL_STAGED_GEN);
    let before = gen(2);
    k.stage_nothing(2);
    assert_eq!(gen(2), before.wrapping_add(1), "flow 2 holds its home slot: generation moves");

    // flow 4098's home is slot 2, held by flow 2: its staging must not move
    // flow 2's generation (it would only cost flow 2 a lookup, but shows the
    // owner check works)
    let before = gen(2);
    k.stage_nothing(MAX_FLOWS + 2);
    assert_eq!(gen(2), before, "another flow's staging leaves the slot's generation");

    k.release(2);
    let before = gen(2);
    k.stage_nothing(2);
    assert_eq!(gen(2), before, "a released slot's generation stays");
}

#[test]
fn a_released_flow_adds_its_unflushed_counts_to_the_counters() {
    // fold_counters: invocations is the first u64, compiled_runs the fifth
    let k = Kernel::load();
    let slot = k.claim(7);
    let mut v = k.slot_value(slot);
    let unflushed = v.len() - TAIL_UNFLUSHED;
    assert_eq!(v[unflushed..unflushed + 3], [0, 0, 0], "a claimed slot starts with nothing unflushed");
    v[unflushed] = 41; // invocations
    v[unflushed + 1] = 40; // compiled_runs
    k.put_slot_value(slot, &v);
    let (inv, comp) = (k.counter(0), k.counter(4));
    k.release(slot);
    assert_eq!((k.counter(0) - inv, k.counter(4) - comp), (41, 40), "the ACKs the flow had not flushed are counted");
    let v = k.slot_value(slot);
    assert_eq!(v[unflushed..unflushed + 3], [0, 0, 0], "and not counted twice");
}
