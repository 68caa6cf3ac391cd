//! Loading and driving the eBPF struct_ops congestion control `ccp`
//! (`bpf/ccp.bpf.c`): registration, the event ring buffer, the command map
//! and the heartbeat that keeps the BPF side out of its fallback (kernel cubic).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::rc::Rc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, RingBuffer, RingBufferBuilder};

use crate::fold::jit::{self, JitTarget};
use crate::fold::{FoldMaps, FoldProg, FoldStaged};
use crate::wire::{decode_event, Command, Event, RawFlowInfo};

mod skel {
    #![allow(clippy::all, unused_imports, dead_code, non_camel_case_types, non_upper_case_globals)]
    include!(concat!(env!("OUT_DIR"), "/ccp.skel.rs"));
}
use skel::{CcpSkel, CcpSkelBuilder};

/// Name the struct_ops registers under (`struct tcp_congestion_ops.name`).
pub const CA_NAME: &str = "ccp";

/// Index of `ccp_fold_post` in the `fold_jit` program array (ccp.bpf.c
/// FOLD_JIT_POST); program slots start at 1.
const FOLD_JIT_POST: u32 = 0;
/// Flows read per BPF_MAP_LOOKUP_BATCH of the `flows` hash map: more than
/// any one bucket holds (a bucket larger than the batch is ENOSPC).
const FLOWS_BATCH: u32 = 256;

/// Tunables baked into the BPF object's .rodata before load.
#[derive(Debug, Clone, Copy)]
pub struct BpfConfig {
    /// Force a ring-buffer wakeup at most this often; other per-ACK records
    /// are submitted without a wakeup (the daemon polls at least every 1 ms).
    pub wake_interval: Duration,
    /// If the daemon's heartbeat is older than this, commands are ignored and
    /// flows run the fallback (kernel cubic).
    pub stale_after: Duration,
    /// `--fold kernel`: the daemon's report window: after a look that found
    /// reports it looks again this much later, and a report forces a wakeup
    /// only when no such look is promised (src/wake.rs).
    pub report_wake: Duration,
    /// `--fold kernel`: how long a report of a flow reporting several times
    /// per RTT may wait for the promised look (ccp.bpf.c report_prompt_ns).
    pub report_prompt: Duration,
    /// Run the fold programs in the kernel (`--fold kernel`, bpf/fold_ccp.h)
    /// instead of sending every ACK to libccp in user space.
    pub fold_in_kernel: bool,
    /// With `fold_in_kernel`: compile each installed program's main section
    /// to BPF (src/fold/jit.rs) instead of interpreting it per ACK.
    pub fold_jit: bool,
    /// With `fold_in_kernel`: the control guard's floor; a flow its program
    /// has not commanded for max(16 x SRTT, this) runs the fallback
    /// (ccp.bpf.c control_guard).
    pub control_floor: Duration,
}

impl Default for BpfConfig {
    fn default() -> Self {
        BpfConfig {
            wake_interval: Duration::from_micros(200),
            stale_after: Duration::from_millis(500),
            report_wake: Duration::from_millis(20),
            report_prompt: Duration::from_millis(1),
            fold_in_kernel: true,
            fold_jit: true,
            control_floor: Duration::from_millis(250),
        }
    }
}

/// Counters kept by the BPF side (.bss).
#[derive(Debug, Clone, Copy, Default)]
pub struct BpfStats {
    /// Ring-buffer records lost because the buffer was full.
    pub dropped_events: u64,
    /// cong_control calls that ran the fallback (kernel cubic).
    pub fallback_acks: u64,
    /// Of `fallback_acks`, those while the algorithm's answer to an RTO
    /// was awaited, within the control guard's bound (ccp.bpf.c
    /// count_rto_await): the kernel's RTO response, not the algorithm's absence.
    pub rto_await_acks: u64,
    /// cong_control calls that applied a command.
    pub command_acks: u64,
    /// Flows seen (ids handed out).
    pub flows: u32,
    /// --fold kernel: fold invocations, aborted ones, reports sent/dropped.
    pub fold_invocations: u64,
    pub fold_aborts: u64,
    pub fold_reports: u64,
    pub fold_reports_dropped: u64,
    /// Of the invocations, those whose main section ran compiled.
    pub fold_compiled_runs: u64,
    /// Flows that found every fold_flows slot taken: they ran the fallback.
    pub fold_no_state_flows: u64,
    /// Times the control guard took a flow from a program that stopped
    /// commanding it (ccp.bpf.c control_guard).
    pub guard_fallbacks: u64,
    /// ACKs whose commanded cwnd was above the ceiling (twice the most
    /// packets in flight) and was clamped to it.
    pub cwnd_clamped: u64,
    /// ACKs whose commanded pacing rate was below the floor (one MSS per
    /// half the guard's floor, ccp.bpf.c pacing_floor) and was raised to it.
    pub rate_floored: u64,
}

/// The loaded BPF object; the congestion control is registered while
/// `link` is held. Dropping this unregisters `ccp` and closes all maps;
/// nothing is pinned.
pub struct BpfDatapath {
    link: Option<Link>,
    /// The skeleton's mmaped .bss (heartbeat and counters), shared with the
    /// kernel; valid as long as `skel` lives.
    bss: *mut skel::types::bss,
    /// The mmaped `.data.report_wake` (the report-look promise), as `bss`.
    report_wake: *mut skel::types::data_report_wake,
    skel: CcpSkel<'static>,
    /// The last heartbeat written, and how often it is refreshed.
    last_heartbeat_ns: Cell<u64>,
    heartbeat_refresh_ns: u64,
    /// Compiled main sections by program slot (`--fold kernel` with
    /// `fold_jit`); None when programs are interpreted.
    jit: Option<JitSlots>,
    /// Byte offset of a flow's fold_flows slot from its socket pointer
    /// (bpf/fold_ccp.h `fold_layout`), for compiled sections.
    slot_sk_offset: u32,
}

/// The compiled main sections the `fold_jit` program array points at: the
/// fds keep each program alive until its slot is rewritten.
#[derive(Default)]
struct JitSlots {
    loaded: HashMap<u32, OwnedFd>,
    /// Programs compiled and loaded, and programs left to the interpreter
    /// (the compiler or the verifier refused them; logged).
    compiled: u64,
    declined: u64,
}

/// How often a live heartbeat is rewritten: at most every 5 ms and at least
/// 10 times per fallback timeout. Every write costs each CPU that reads the
/// heartbeat on an ACK a cache miss, so it is not rewritten on every loop.
fn heartbeat_refresh_ns(stale_after: Duration) -> u64 {
    (stale_after.as_nanos() as u64 / 10).clamp(1, 5_000_000)
}

/// CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns().
pub use crate::stats::monotonic_ns;

impl BpfDatapath {
    /// Open and load (verify) the BPF object with `cfg`. Does not register
    /// the congestion control yet (see [`BpfDatapath::register`]).
    ///
    /// Errors: the kernel rejects the object (no BPF, no struct_ops
    /// support, missing BTF, verifier failure); libbpf's log is printed to
    /// stderr in that case.
    pub fn load(cfg: BpfConfig) -> Result<Self> {
        // The skeleton borrows its OpenObject for its whole life; one per
        // process, so leaking it is the simplest sound way to get 'static.
        let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = CcpSkelBuilder::default()
            .open(storage)
            .context("opening the BPF object (libbpf)")?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .context("BPF object has no .rodata")?;
        rodata.wake_interval_ns = cfg.wake_interval.as_nanos() as u64;
        rodata.stale_after_ns = cfg.stale_after.as_nanos() as u64;
        rodata.ctl_guard_floor_ns = cfg.control_floor.as_nanos() as u64;
        rodata.report_wake_ns = cfg.report_wake.as_nanos() as u64;
        rodata.report_prompt_ns = cfg.report_prompt.as_nanos() as u64;
        rodata.fold_in_kernel = u32::from(cfg.fold_in_kernel);
        // origin of the fold programs' Ack.now (libccp: datapath time zero)
        rodata.fold_time_zero_ns = monotonic_ns();
        let mut skel = open.load().context(
            "loading the BPF struct_ops object into the kernel failed \
             (needs root/CAP_BPF, a kernel with BPF struct_ops for tcp_congestion_ops and BTF)",
        )?;
        let bss: *mut skel::types::bss = match skel.maps.bss_data.as_deref_mut() {
            Some(b) => b,
            None => bail!("BPF object has no mmapable .bss"),
        };
        let report_wake: *mut skel::types::data_report_wake = match skel.maps.data_report_wake_data.as_deref_mut() {
            Some(d) => d,
            None => bail!("BPF object has no mmapable .data.report_wake"),
        };
        // Every compiled main section tail-calls the second half of
        // cong_control, at slot 0 of the program array.
        let post = skel.progs.ccp_fold_post.as_fd().as_raw_fd();
        skel.maps
            .fold_jit
            .update(&FOLD_JIT_POST.to_ne_bytes(), &post.to_ne_bytes(), MapFlags::ANY)
            .context("putting ccp_fold_post into the fold_jit program array")?;
        let slot_sk_offset = fold_slot_sk_offset(&skel, bss)?;
        Ok(BpfDatapath {
            link: None,
            bss,
            report_wake,
            skel,
            last_heartbeat_ns: Cell::new(0),
            heartbeat_refresh_ns: heartbeat_refresh_ns(cfg.stale_after),
            jit: (cfg.fold_in_kernel && cfg.fold_jit).then(JitSlots::default),
            slot_sk_offset,
        })
    }

    /// Register the congestion control `ccp` (attach the struct_ops map;
    /// plain `attach()` would not register it).
    ///
    /// Errors: `ccp` already registered by another process (EEXIST), or the
    /// kernel refuses the struct_ops.
    pub fn register(&mut self) -> Result<()> {
        let link = self.skel.maps.ccp.attach_struct_ops().with_context(|| {
            format!("registering tcp congestion control `{CA_NAME}` (is another ccp-datapath running?)")
        })?;
        self.link = Some(link);
        Ok(())
    }

    /// Unregister `ccp`. Sockets already using it keep running its BPF code
    /// (which falls back to kernel cubic once the heartbeat goes stale).
    pub fn unregister(&mut self) {
        self.link.take();
    }

    /// Build a ring-buffer consumer that appends decoded events to `queue`.
    /// Undecodable records are counted in `bad`.
    pub fn event_reader(&self, queue: Rc<RefCell<Vec<Event>>>, bad: Rc<RefCell<u64>>) -> Result<RingBuffer<'static>> {
        let mut b = RingBufferBuilder::new();
        b.add(&self.skel.maps.events, move |data: &[u8]| {
            match decode_event(data) {
                Ok(ev) => queue.borrow_mut().push(ev),
                Err(_) => *bad.borrow_mut() += 1,
            }
            0
        })?;
        b.build().context("creating the ring-buffer consumer")
    }

    /// A ring-buffer consumer for `--fold kernel` reports (raw `struct
    /// fold_report` records, see fold::KernelFold::report_msg).
    pub fn report_reader(&self, queue: Rc<RefCell<Vec<Vec<u8>>>>) -> Result<RingBuffer<'static>> {
        let mut b = RingBufferBuilder::new();
        b.add(&self.skel.maps.fold_reports, move |data: &[u8]| {
            queue.borrow_mut().push(data.to_vec());
            0
        })?;
        b.build().context("creating the report ring-buffer consumer")
    }

    /// Write (insert or replace) the command for `flow_id`; the BPF side
    /// applies it on the flow's next ACK.
    pub fn set_command(&self, flow_id: u32, cmd: Command) -> Result<()> {
        self.skel
            .maps
            .commands
            .update(&flow_id.to_ne_bytes(), &cmd.to_bytes(), MapFlags::ANY)
            .with_context(|| format!("writing command for flow {flow_id}"))
    }

    /// Remove the command of a released flow (the BPF release hook also does).
    pub fn delete_command(&self, flow_id: u32) {
        let _ = self.skel.maps.commands.delete(&flow_id.to_ne_bytes());
    }

    /// `--fold kernel`: promise to look at the report ring again within the
    /// report window from `now_ns` (CLOCK_MONOTONIC), or withdraw the
    /// promise (0): reports then force a wakeup (src/wake.rs). A store into
    /// the mmaped section, then a full fence: after withdrawing, the loop
    /// looks at the ring once more, and a report submitted before the BPF
    /// side could see the 0 must be seen by that look.
    pub fn promise_report_look(&self, now_ns: u64) {
        // SAFETY: report_wake points into the object's mmaped data section
        // for the life of self; the kernel reads it concurrently, hence volatile.
        unsafe { std::ptr::addr_of_mut!((*self.report_wake).last_report_look_ns).write_volatile(now_ns) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// Stamp the heartbeat (CLOCK_MONOTONIC ns) the BPF side checks before
    /// applying commands; 0 = the algorithm is away. A plain store into the
    /// mmaped .bss (no syscall), made only when the value changes from or to
    /// 0 or the stamp is older than the refresh interval.
    pub fn heartbeat(&self, now_ns: u64) {
        let last = self.last_heartbeat_ns.get();
        let due = if now_ns == 0 || last == 0 { now_ns != last } else { now_ns.saturating_sub(last) >= self.heartbeat_refresh_ns };
        if !due {
            return;
        }
        self.last_heartbeat_ns.set(now_ns);
        let bss = self.bss;
        // SAFETY: bss points into the object's mmaped .bss for the life of
        // self; the kernel reads it concurrently, hence volatile.
        unsafe { std::ptr::addr_of_mut!((*bss).heartbeat_ns).write_volatile(now_ns) };
    }

    /// Tell every flow that what the algorithm asked for before is stale (the
    /// algorithm went away, or a new one started): bumps `ctl_epoch`, which
    /// the kernel fold checks per ACK (the user-space fold forgets its own).
    pub fn bump_ctl_epoch(&self) {
        let bss = self.bss;
        // SAFETY: as in heartbeat().
        unsafe {
            let p = std::ptr::addr_of_mut!((*bss).ctl_epoch);
            p.write_volatile(p.read_volatile().wrapping_add(1));
        }
    }

    /// Every live flow (the `flows` map: id and what announcing it needs; its
    /// cwnd and counters are current while the fallback runs).
    /// One batch lookup per [`FLOWS_BATCH`] flows (a syscall per flow and
    /// per key before: 400 a second with 200 flows, polled every second).
    pub fn live_flows(&self) -> Vec<(u32, RawFlowInfo)> {
        use zerocopy::FromBytes;
        let map = &self.skel.maps.flows;
        let decode = |k: &[u8], v: &[u8]| Some((u32::from_ne_bytes(k.try_into().ok()?), RawFlowInfo::read_from_bytes(v).ok()?));
        match map.lookup_batch(FLOWS_BATCH, MapFlags::ANY, MapFlags::ANY) {
            Ok(batches) => batches.filter_map(|(k, v)| decode(&k, &v)).collect(),
            Err(_) => map
                .keys()
                .filter_map(|k| decode(&k, &map.lookup(&k, MapFlags::ANY).ok()??))
                .collect(),
        }
    }

    /// Remove every flow's command (user-space fold): nothing an earlier
    /// algorithm asked for is applied once another takes over.
    pub fn clear_commands(&self) {
        let map = &self.skel.maps.commands;
        let keys: Vec<Vec<u8>> = map.keys().collect();
        for k in keys {
            let _ = map.delete(&k);
        }
    }

    /// Compile `prog`'s main section and point `fold_jit[slot]` at it. A
    /// program the compiler or the verifier refuses stays interpreted
    /// (logged, counted); only a failed map write is an error.
    fn compile_slot(&mut self, slot: u32, prog: &FoldProg) -> std::result::Result<(), String> {
        let target = JitTarget::StructOps {
            flows_map_fd: self.skel.maps.fold_flows.as_fd().as_raw_fd(),
            slot_sk_offset: self.slot_sk_offset,
            jit_map_fd: self.skel.maps.fold_jit.as_fd().as_raw_fd(),
            post_index: FOLD_JIT_POST,
        };
        let loaded = jit::compile_main(prog, &target)
            .map_err(|e| e.to_string())
            .and_then(|insns| jit::load(&insns, &target, &format!("ccp_fold_{slot}")).map_err(|e| e.to_string()));
        let jit = self.jit.as_mut().expect("compile_slot with the compiler on");
        match loaded {
            Ok(fd) => {
                self.skel
                    .maps
                    .fold_jit
                    .update(&slot.to_ne_bytes(), &fd.as_raw_fd().to_ne_bytes(), MapFlags::ANY)
                    .map_err(|e| format!("fold_jit[{slot}]: {e}"))?;
                jit.loaded.insert(slot, fd);
                jit.compiled += 1;
            }
            Err(e) => {
                tracing::warn!("program uid {} (slot {slot}) stays interpreted: {e}", prog.uid);
                jit.declined += 1;
            }
        }
        Ok(())
    }

    /// Main sections compiled and loaded, and left to the interpreter, so far.
    pub fn jit_counts(&self) -> (u64, u64) {
        self.jit.as_ref().map_or((0, 0), |j| (j.compiled, j.declined))
    }

    /// Read the BPF side's counters (the per-CPU ones summed).
    pub fn stats(&self) -> BpfStats {
        let bss = self.bss;
        // SAFETY: as in heartbeat().
        let flows = unsafe { std::ptr::addr_of!((*bss).next_flow_id).read_volatile() };
        // struct fold_counters: its u64 fields in order, then ccp.bpf.c's
        // (FOLD_INCLUDER_COUNTERS)
        let [fold_invocations, fold_aborts, fold_reports, fold_reports_dropped, fold_compiled_runs, fold_no_state_flows, dropped_events, fallback_acks, command_acks, _stale, guard_fallbacks, cwnd_clamped, rate_floored, rto_await_acks] =
            sum_per_cpu::<14>(&self.skel.maps.fold_counters);
        BpfStats {
            dropped_events,
            fallback_acks,
            rto_await_acks,
            command_acks,
            flows,
            fold_invocations,
            fold_aborts,
            fold_reports,
            fold_reports_dropped,
            fold_compiled_runs,
            fold_no_state_flows,
            guard_fallbacks,
            cwnd_clamped,
            rate_floored,
        }
    }
}

/// Run bpf/fold_ccp.h's `fold_layout` (it writes the running kernel's
/// offset of the flow's slot, CO-RE) and read the offset from `.bss`.
/// Errors: the program does not run, or leaves 0 (no offset can be 0:
/// icsk_ca_priv is deep inside the socket).
fn fold_slot_sk_offset(skel: &CcpSkel<'static>, bss: *mut skel::types::bss) -> Result<u32> {
    skel.progs
        .fold_layout
        .test_run(libbpf_rs::ProgramInput::default())
        .context("running fold_layout (BPF_PROG_TEST_RUN)")?;
    // SAFETY: bss points into the object's mmaped .bss for the life of skel.
    let off = unsafe { std::ptr::addr_of!((*bss).fold_slot_sk_offset).read_volatile() };
    if off == 0 {
        bail!("fold_layout left the slot offset at 0");
    }
    Ok(off)
}

/// The `N` u64 fields of a one-entry per-CPU array map, summed over CPUs
/// (zeros if the map cannot be read).
fn sum_per_cpu<const N: usize>(map: &impl MapCore) -> [u64; N] {
    let mut sum = [0u64; N];
    let Ok(Some(per_cpu)) = map.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY) else {
        return sum;
    };
    for value in per_cpu {
        for (i, word) in value.chunks_exact(8).take(N).enumerate() {
            sum[i] += u64::from_ne_bytes(word.try_into().expect("chunks of 8"));
        }
    }
    sum
}

/// `--fold kernel`: Portus's programs and staged updates go to the BPF maps
/// of bpf/fold_ccp.h.
impl FoldMaps for BpfDatapath {
    /// Writes the program table entry; with the compiler on, the slot's
    /// compiled main section is withdrawn first (its flows interpret the
    /// new program meanwhile) and the new one's put in after.
    fn write_program(&mut self, slot: u32, prog: &FoldProg) -> std::result::Result<(), String> {
        use zerocopy::IntoBytes;
        if let Some(jit) = self.jit.as_mut() {
            if jit.loaded.remove(&slot).is_some() {
                self.skel
                    .maps
                    .fold_jit
                    .delete(&slot.to_ne_bytes())
                    .map_err(|e| format!("fold_jit[{slot}]: {e}"))?;
            }
        }
        self.skel
            .maps
            .fold_progs
            .update(&slot.to_ne_bytes(), prog.as_bytes(), MapFlags::ANY)
            .map_err(|e| format!("fold_progs[{slot}]: {e}"))?;
        if self.jit.is_some() && prog.index == slot && slot != FOLD_JIT_POST {
            self.compile_slot(slot, prog)?;
        }
        Ok(())
    }

    fn stage(&mut self, flow_id: u32, delta: &FoldStaged) -> std::result::Result<(), String> {
        use zerocopy::IntoBytes;
        // struct fold_stage_in: the delta, then the flow id
        let mut ctx = delta.as_bytes().to_vec();
        ctx.extend_from_slice(&flow_id.to_ne_bytes());
        ctx.extend_from_slice(&[0; 4]);
        let run = libbpf_rs::ProgramInput { context_in: Some(&mut ctx[..]), ..Default::default() };
        let out = self.skel.progs.fold_stage.test_run(run).map_err(|e| format!("fold_stage: {e}"))?;
        match out.return_value as i32 {
            0 => Ok(()),
            r => Err(format!("fold_stage for flow {flow_id} returned {r}")),
        }
    }
}

/// True if `name` is listed in /proc/sys/net/ipv4/tcp_available_congestion_control.
pub fn ca_available(name: &str) -> Result<bool> {
    let p = "/proc/sys/net/ipv4/tcp_available_congestion_control";
    let s = std::fs::read_to_string(p).with_context(|| format!("reading {p}"))?;
    Ok(s.split_whitespace().any(|n| n == name))
}
