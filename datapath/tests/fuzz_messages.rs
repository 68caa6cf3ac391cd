//! Fuzzer of the datapath's Portus message handling (docs/datapath.md, "Security"): random
//! and mutated-valid Portus messages (install, update-field, change-program,
//! malformed headers, truncated, oversized, over libccp's limits) go into
//! - `--fold kernel`: `KernelFold::on_portus_msg` (src/fold/kernel.rs) over an
//!   in-memory `FoldMaps` that checks every map write is in bounds, and
//! - `--fold userspace` is NOT fuzzed yet: driving libccp 1.2 with these
//!   inputs hung (a mutated program looping in libccp's state_machine, and
//!   a run hanging before its first report); the datapath now screens every
//!   message with the kernel fold's parser before libccp
//!   (`ipc::deliver_to_libccp`), but that still needs a fuzz run.
//!
//! No case may panic or crash; refusals are fine (the datapath logs and
//! drops them). Needs neither root nor BPF.
//!
//! Cases per path: 100,000 by default, `CCPLAB_FUZZ_CASES=N` to change it
//! (`make bench` runs 1,000,000); seed `CCPLAB_FUZZ_SEED` (default fixed, so a
//! failure reproduces). A panicking case is printed as hex.

use ccp_datapath::fold;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use fold::{FoldMaps, FoldProg, FoldStaged, KernelFold, MAX_SLOTS};

mod common;
use common::msg::hdr;
use common::{env_u64, Rng};

/// Flow (socket) ids the fuzzer announces; messages also name others.
const FLOWS: [u32; 3] = [1, 2, 7];

/// Cases per path: `CCPLAB_FUZZ_CASES`, 100,000 by default.
fn cases() -> u64 {
    env_u64("CCPLAB_FUZZ_CASES", 100_000)
}

/// `CCPLAB_FUZZ_SEED`; a fixed default, so a failure reproduces.
fn seed() -> u64 {
    env_u64("CCPLAB_FUZZ_SEED", 0x00cc_f022)
}

/// What this fuzzer draws beyond [`Rng`]'s own.
trait EdgyU32 {
    fn edgy_u32(&mut self) -> u32;
}

impl EdgyU32 for Rng {
    /// A value biased to the edges that break parsers.
    fn edgy_u32(&mut self) -> u32 {
        match self.below(8) {
            0 => 0,
            1 => 1,
            2 => u32::MAX,
            3 => i32::MAX as u32 + 1,
            4 => self.below(300) as u32,
            5 => 1024 + self.below(8) as u32 - 4,
            _ => self.next() as u32,
        }
    }
}

// ------------------------------------------------------------ valid seeds

/// Fold programs of the shapes the suite uses (reports, volatile fields,
/// control registers, Cwnd/Rate writes, timers, urgent events).
const PROGRAMS: [&str; 4] = [
    "(def (Report (volatile acked 0) (volatile rtt 0) (volatile cwnd 0)))
     (when true
        (:= Report.acked (+ Report.acked Ack.bytes_acked))
        (:= Report.rtt Flow.rtt_sample_us)
        (:= Report.cwnd Cwnd)
        (fallthrough))
     (when (> Micros Flow.rtt_sample_us) (report) (:= Micros 0))",
    "(def (Report (volatile loss 0) (volatile timeout false)))
     (when true
        (:= Report.loss (+ Report.loss Ack.lost_pkts_sample))
        (:= Report.timeout (|| Report.timeout Flow.was_timeout))
        (fallthrough))
     (when (|| Report.timeout (> Report.loss 0)) (report))",
    "(def (Report (volatile q 0)) (perAck 0) (target 14480))
     (when true
        (:= perAck (/ Ack.bytes_acked Ack.packets_acked))
        (:= Report.q (+ Report.q perAck))
        (:= Cwnd target)
        (:= Rate (* perAck 1000))
        (report))",
    "(def (Report (volatile e 0) (volatile minrtt +infinity)))
     (when true
        (:= Report.e (ewma 3 Flow.rtt_sample_us))
        (:= Report.minrtt (min Report.minrtt Flow.rtt_sample_us))
        (fallthrough))
     (when (> Micros 10000) (report) (:= Micros 0))",
];

/// Valid messages made by Portus itself: installs of [`PROGRAMS`] (several
/// uids), change-program and update-field messages naming their registers.
fn seeds(sids: &[u32]) -> Vec<Vec<u8>> {
    use portus::serialize::{changeprog, install, serialize, update_field};
    let mut out = vec![];
    for (i, src) in PROGRAMS.iter().enumerate() {
        let (bin, sc) = portus::lang::compile(src.as_bytes(), &[]).unwrap_or_else(|e| panic!("Portus compiles {src}: {e:?}"));
        for uid in [i as u32 + 1, i as u32 + 20] {
            let msg = install::Msg {
                sid: 0,
                program_uid: uid,
                num_events: bin.events.len() as u32,
                num_instrs: bin.instrs.len() as u32,
                instrs: bin.clone(),
            };
            out.push(serialize(&msg).expect("serialize install"));
            for &sid in sids {
                let fields: Vec<_> = ["Cwnd", "Rate"].iter().filter_map(|n| sc.get(n).cloned().map(|r| (r, 14480u64))).collect();
                let change = changeprog::Msg { sid, program_uid: uid, num_fields: fields.len() as u32, fields: fields.clone() };
                out.push(serialize(&change).expect("serialize change"));
                let upd = update_field::Msg { sid, num_fields: fields.len() as u8, fields };
                out.push(serialize(&upd).expect("serialize update"));
            }
        }
    }
    assert!(out.len() > 20, "seed corpus built");
    out
}

/// One fuzz input: pure noise, a header-shaped message, or a mutated seed.
fn input(rng: &mut Rng, seeds: &[Vec<u8>], sids: &[u32]) -> Vec<u8> {
    match rng.below(10) {
        // random bytes, lengths 0..2 KiB
        0 => (0..rng.below(2048)).map(|_| rng.next() as u8).collect(),
        // a plausible header (type 0..7, any length field, known sid) + noise
        1 => {
            let typ = rng.below(8) as u16;
            let len = rng.edgy_u32() as usize;
            let sid = if rng.chance(70) { sids[rng.below(sids.len() as u64) as usize] } else { rng.edgy_u32() };
            let mut b = hdr(typ, len, sid);
            b.extend((0..rng.below(600)).map(|_| rng.next() as u8));
            b
        }
        // oversized: a valid seed padded far past any limit (up to 64 KiB,
        // the datapath's receive buffer)
        2 => {
            let mut b = seeds[rng.below(seeds.len() as u64) as usize].clone();
            let extra = rng.below(65536 - b.len() as u64);
            b.extend((0..extra).map(|_| rng.next() as u8));
            b
        }
        _ => {
            let seed = seeds[rng.below(seeds.len() as u64) as usize].clone();
            mutate(rng, seed, sids)
        }
    }
}

/// 1-4 mutations of a valid message: flip/set bytes, truncate, extend,
/// rewrite the header's type/length/sid, or the counts after it.
fn mutate(rng: &mut Rng, mut b: Vec<u8>, sids: &[u32]) -> Vec<u8> {
    for _ in 0..1 + rng.below(4) {
        let n = b.len() as u64;
        match rng.below(9) {
            0 if n > 0 => {
                let i = rng.below(n) as usize;
                b[i] ^= 1 << rng.below(8);
            }
            1 if n > 0 => {
                let i = rng.below(n) as usize;
                b[i] = rng.next() as u8;
            }
            2 => b.truncate(rng.below(n + 1) as usize),
            3 => b.extend((0..1 + rng.below(64)).map(|_| rng.next() as u8)),
            4 if n >= 2 => b[0..2].copy_from_slice(&(rng.below(8) as u16).to_le_bytes()),
            5 if n >= 4 => b[2..4].copy_from_slice(&(rng.edgy_u32() as u16).to_le_bytes()),
            6 if n >= 8 => {
                let sid = if rng.chance(50) { sids[rng.below(sids.len() as u64) as usize] } else { rng.edgy_u32() };
                b[4..8].copy_from_slice(&sid.to_le_bytes());
            }
            // the u32 counts after the header: program uid, num_events, num_instrs / num_fields
            7 if n >= 12 => {
                let at = 8 + 4 * rng.below((n - 8) / 4).min(3) as usize;
                if at + 4 <= b.len() {
                    b[at..at + 4].copy_from_slice(&rng.edgy_u32().to_le_bytes());
                }
            }
            // a register type / index inside the body
            _ if n > 12 => {
                let i = 12 + rng.below(n - 12) as usize;
                b[i] = rng.below(8) as u8;
            }
            _ => {}
        }
    }
    b
}

fn run_case(what: &str, i: u64, msg: &[u8], f: impl FnOnce()) {
    if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
        let hex: String = msg.iter().map(|b| format!("{b:02x}")).collect();
        eprintln!("{what}: case {i} (seed {}) panicked on a {}-byte message: {hex}", seed(), msg.len());
        std::panic::resume_unwind(p);
    }
}

// ------------------------------------------------------------ --fold kernel

/// In-memory program map and staging with the BPF maps' bounds.
#[derive(Default)]
struct Maps {
    writes: u64,
    stages: u64,
    flows: Vec<u32>,
}

impl FoldMaps for Maps {
    fn write_program(&mut self, slot: u32, _prog: &FoldProg) -> Result<(), String> {
        assert!(slot < MAX_SLOTS, "program written to slot {slot} (map has {MAX_SLOTS})");
        self.writes += 1;
        Ok(())
    }
    fn stage(&mut self, flow_id: u32, _delta: &FoldStaged) -> Result<(), String> {
        assert!(self.flows.contains(&flow_id), "staged an update for flow {flow_id}, which was never announced");
        self.stages += 1;
        Ok(())
    }
}

#[test]
fn kernel_fold_survives_random_and_mutated_messages() {
    let n = cases();
    let mut rng = Rng(seed());
    let sids = FLOWS.to_vec();
    let seeds = seeds(&sids);
    let mut kf = KernelFold::default();
    let mut maps = Maps { flows: sids.clone(), ..Default::default() };
    for &f in &FLOWS {
        kf.flow_created(f, 14480, 1448, (1, 2), (3, 4), "reno").expect("create");
    }
    // the valid seeds are accepted (else the mutations start from nothing)
    for s in &seeds {
        kf.on_portus_msg(s, &mut maps).unwrap_or_else(|e| panic!("valid Portus message refused: {e}"));
    }
    let t0 = Instant::now();
    let (mut ok, mut refused) = (0u64, 0u64);
    for i in 0..n {
        let msg = input(&mut rng, &seeds, &sids);
        run_case("kernel fold", i, &msg, || match kf.on_portus_msg(&msg, &mut maps) {
            Ok(()) => ok += 1,
            Err(_) => refused += 1,
        });
        // flows come and go, as they do under Portus
        if rng.chance(1) {
            let f = FLOWS[rng.below(FLOWS.len() as u64) as usize];
            kf.flow_released(f);
            maps.flows.retain(|&x| x != f);
            kf.flow_created(f, 14480, 1448, (1, 2), (3, 4), "reno").expect("create");
            maps.flows.push(f);
        }
    }
    println!(
        "kernel fold fuzz: {n} cases in {:.2} s: accepted {ok}, refused {refused}; map writes {}, staged {}",
        t0.elapsed().as_secs_f64(),
        maps.writes,
        maps.stages
    );
    assert_eq!(ok + refused, n);
    assert!(refused > n / 4 && ok > n / 100, "the inputs reach both outcomes (accepted {ok}, refused {refused})");
}
