/* SPDX-License-Identifier: GPL-2.0 */
/*
 * fold_ccp.h: the struct_ops side of `--fold kernel`: per-flow fold state in
 * a preallocated array (one slot per flow, its index in icsk_ca_priv), the program table, staged updates, report records, and
 * one call per ACK (fold_on_ack, or its two halves) that does what the user-space libccp path
 * does with an ACK event (src/fold/userspace.rs on_ack + src/primitives.rs), without
 * leaving the kernel. Only reports (and create/release events) reach user
 * space.
 *
 * Include after vmlinux.h, bpf_helpers.h and fold_vm.h, once per object,
 * with FOLD_SLOT_PRIV_OFFSET defined: the byte offset in icsk_ca_priv of a
 * __u32 the includer leaves to fold_ccp.h (the flow's slot in fold_flows).
 * The includer calls:
 *   fold_flow_start(sk, flow_id, timeouts)        from init()
 *   ff = fold_ack_begin(sk, rs, flow_id, ecn_bytes, timeouts, now, hb)
 *                                                 from cong_control(), then, if
 *                                                 fold_flow_runs_program(ff), the
 *                                                 main section (a tail call into
 *                                                 its compiled form, or
 *                                                 fold_interpret_main), then
 *   fold_ack_end(ff, flow_id, err, compiled, mss, rate_floor, &cwnd, &rate)
 *                                                 1 = the algorithm's cwnd
 *                                                 (bytes) / rate (bytes/s) to
 *                                                 apply, 0 = no algorithm yet:
 *                                                 fall back
 *   fold_flow_end(sk, flow_id)                    from release()
 * User space (src/fold/kernel.rs KernelFold) writes `fold_progs`, stages
 * updates by running the `fold_stage` syscall program with
 * BPF_PROG_TEST_RUN (context: struct fold_stage_in), reads `fold_reports`,
 * sets `fold_time_zero_ns` (origin of Ack.now, libccp's datapath
 * time_zero) before load, and runs `fold_layout` once after it (the slot's
 * offset in the socket, for compiled sections).
 */
#ifndef CCP_FOLD_CCP_H
#define CCP_FOLD_CCP_H

#include <bpf/bpf_core_read.h>	/* bpf_core_field_offset */

/* The includer's control epoch (a global user space bumps when the algorithm
 * went away or a new one started): a flow that sees it change forgets what
 * the algorithm asked for before, as after an RTO. */
#ifndef FOLD_CTL_EPOCH
#define FOLD_CTL_EPOCH 0
#endif

/* Origin of Ack.now (CLOCK_MONOTONIC ns), set by user space before load. */
const volatile __u64 fold_time_zero_ns = 0;

/* The includer's own per-CPU counters (u64 fields), kept after ours in one
 * value: one cache line per ACK for all counters (on a paced ACK every line
 * touched is a miss). */
#ifndef FOLD_INCLUDER_COUNTERS
#define FOLD_INCLUDER_COUNTERS
#endif

/* The includer's one per-ACK counter a flow keeps until a flush (see
 * struct fold_unflushed): FOLD_FLUSH_INCLUDER(cnt, n) adds n to it. */
#ifndef FOLD_FLUSH_INCLUDER
#define FOLD_FLUSH_INCLUDER(cnt, n)
#endif

/* Counters read by user space (summed over CPUs). Per CPU: a shared
 * counter bumped atomically on every ACK bounces its cache line between the
 * cores (and shared the line with the daemon's heartbeat). */
struct fold_counters {
	__u64 invocations;
	__u64 aborts;		/* invocations aborted (overflow, underflow, div0) */
	__u64 reports_sent;
	__u64 reports_dropped;	/* report ring buffer full */
	__u64 compiled_runs;	/* invocations whose main section ran compiled (fold_jit) */
	__u64 no_state_flows;	/* flows that found no free fold_flows slot: fallback only */
	FOLD_INCLUDER_COUNTERS
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fold_counters);
} fold_counters SEC(".maps");

/* What the first half of an ACK (fold_ack_begin) leaves for the second
 * (fold_ack_end): with a compiled main section the two halves are
 * different BPF programs, a tail call apart, so nothing stays on the stack.
 * The ACK's time is the register FOLD_OFF_JIT_NOW, whether the report is
 * urgent the primitives' registers, and the heartbeat is read again:
 * nothing is kept twice (see struct fold_flow). */
struct fold_pending {
	struct fold_result res;
	__u32 seed;		/* the cwnd Cwnd was seeded with (bytes) */
};

/* Per-ACK counts a flow keeps in its own slot (a line the ACK touches
 * anyway) and adds to the per-CPU fold_counters only every
 * FOLD_FLUSH_EVERY invocations, with a report or an abort, and when the
 * flow ends: on a paced ACK the per-CPU value is a cache line and a TLB
 * entry of its own. The counters therefore lag by at most FOLD_FLUSH_EVERY
 * invocations per live flow. A byte each: none exceeds FOLD_FLUSH_EVERY. */
#define FOLD_FLUSH_EVERY 64
struct fold_unflushed {
	__u8 invocations;
	__u8 compiled_runs;
	__u8 includer;		/* the includer's counter (FOLD_FLUSH_INCLUDER) */
	__u8 _pad;
};
_Static_assert(FOLD_FLUSH_EVERY < 256, "fold_unflushed counts fit a byte");

/* Per-flow state: the interpreter's registers, which come first (a
 * compiled main section finds them at offset 0), and the datapath's own
 * bookkeeping (what src/fold/userspace.rs keeps per libccp connection) in the top
 * registers of the file, which no program uses (the compiler maps nothing
 * above the report registers). So a flow's whole state is one 4 KiB value,
 * and the map, mmapable, starts its values on a page boundary: a slot is
 * one page, and an ACK takes one TLB entry for it (on a paced ACK every
 * page touched is a TLB miss, docs/NOTES.md). What every ACK reads or
 * writes of the bookkeeping fills exactly the page's last 128 bytes, one
 * aligned pair of cache lines (x86 fetches a line's pair partner with it):
 * 168 bytes over three lines cost a paced ACK one more cold fetch. The
 * owner, which only claim, release and staging read, sits below it. */
#define FOLD_OFF_BOOK 495	/* register where the bookkeeping starts */
#define FOLD_HOT_BYTES 128

struct fold_flow {
	union {
		struct fold_state st;
		struct {
			__u64 _regs_in_use[FOLD_OFF_BOOK];
			__u32 owner;		/* flow id of the flow holding this slot, 0: free */
			__u32 last_report;	/* fold_ctl_clock of its last report | 1, 0: none (fold_report_prompt) */
			/* per ACK, FOLD_HOT_BYTES: */
			struct fold_baseline base;
			__u64 req_rate;		/* last set_rate (bytes/s), 0: none */
			struct fold_pending pend;
			__u32 req_cwnd;		/* last set_cwnd (bytes), 0: none */
			__u32 awaiting;		/* after an RTO or a change of algorithm: it has not answered yet */
			__u32 ctl_epoch;	/* FOLD_CTL_EPOCH when req_* were set */
			__u32 staged_gen;	/* bumped by fold_stage after each merge for this flow */
			__u32 staged_seen;	/* staged_gen when it last looked at fold_staged */
			struct fold_unflushed unflushed;
			__u32 rtt_held_us;	/* last valid RTT sample (fold_hold_rtt) */
			__u32 ctl_seen;		/* fold_ctl_clock of the last command | FOLD_CTL_* flags */
		};
	};
};
_Static_assert(sizeof(struct fold_flow) == 8 * FOLD_NREGS, "one page per slot: the bookkeeping fits the top registers");
_Static_assert(FOLD_OFF_BOOK >= FOLD_OFF_REPORT + FOLD_MAX_REPORT, "bookkeeping above every register in use");
_Static_assert(__builtin_offsetof(struct fold_flow, base) == sizeof(struct fold_flow) - FOLD_HOT_BYTES,
	       "the per-ACK bookkeeping is the page's last 128 bytes");
/* tests/fold_slots.rs reads these from the end of a slot's value */
_Static_assert(__builtin_offsetof(struct fold_flow, owner) == sizeof(struct fold_flow) - 136, "fold_flow tail");
_Static_assert(__builtin_offsetof(struct fold_flow, req_cwnd) == sizeof(struct fold_flow) - 32, "fold_flow tail");
_Static_assert(__builtin_offsetof(struct fold_flow, staged_gen) == sizeof(struct fold_flow) - 20, "fold_flow tail");
_Static_assert(__builtin_offsetof(struct fold_flow, staged_seen) == sizeof(struct fold_flow) - 16, "fold_flow tail");
_Static_assert(__builtin_offsetof(struct fold_flow, unflushed) == sizeof(struct fold_flow) - 12, "fold_flow tail");

/* The control guard's clock (ccp.bpf.c control_guard): when the flow was
 * last commanded, in units of 1024 ns (a shift, not a division), 32 bits
 * (wraps after 73 minutes; differences are taken modulo 2^32). Its two low
 * bits are the guard's flags: FOLD_CTL_GUARDED while the guard has taken
 * the flow from its program, FOLD_CTL_ALG_SPOKE once the algorithm sent
 * the flow something since (only that hands the flow back: a program that
 * holds a constant Cwnd by itself would otherwise take it back at once).
 * A command is: a staged update or program change from the algorithm, or
 * an invocation that completed and set a Cwnd other than the one it was
 * seeded with, or another Rate (an echo commands nothing). */
#define FOLD_CTL_GUARDED 1u
#define FOLD_CTL_ALG_SPOKE 2u
#define FOLD_CTL_FLAGS (FOLD_CTL_GUARDED | FOLD_CTL_ALG_SPOKE)
static __always_inline __u32 fold_ctl_clock(__u64 now)
{
	return (__u32)(now >> 10) & ~FOLD_CTL_FLAGS;
}

/* A command at `now`; `from_alg`: a message from the algorithm. */
static __always_inline void fold_ctl_commanded(struct fold_flow *ff, __u64 now, int from_alg)
{
	ff->ctl_seen = fold_ctl_clock(now) | (ff->ctl_seen & FOLD_CTL_FLAGS) | (from_alg ? FOLD_CTL_ALG_SPOKE : 0);
}

/* Slots of fold_flows. libccp keeps 1024 connections, fold_staged 4096:
 * a flow beyond this runs the fallback (counted: no_state_flows). */
#define FOLD_MAX_FLOWS 4096
#define FOLD_NO_SLOT 0xffffffffu

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FOLD_MAX_FLOWS);
	__uint(map_flags, BPF_F_MMAPABLE);	/* page-aligned values (see FOLD_OFF_BOOK) */
	__type(key, __u32);
	__type(value, struct fold_flow);
} fold_flows SEC(".maps");

static __always_inline __u32 *fold_slot_of(const struct sock *sk)
{
	return (void *)((char *)((struct inet_connection_sock *)sk)->icsk_ca_priv + FOLD_SLOT_PRIV_OFFSET);
}

/* The flow's state, NULL when it has none (no slot was free at init, or
 * the fold does not run in the kernel). */
static __always_inline struct fold_flow *fold_flow_of(const struct sock *sk)
{
	__u32 slot = *fold_slot_of(sk);

	return bpf_map_lookup_elem(&fold_flows, &slot);
}

/* A flow's home slot: the one it gets unless a flow FOLD_MAX_FLOWS ids
 * older still holds it (fold_alloc_slot). */
static __always_inline __u32 fold_home_slot(__u32 flow_id)
{
	return flow_id & (FOLD_MAX_FLOWS - 1);
}

/* Staging generations: fold_stage bumps the staged_gen of the flow's home
 * slot when the flow holds it, after every merge. The flow looks its
 * fold_staged entry up only when the generation moved since its last look
 * (a flow away from home looks on every ACK): most ACKs find nothing staged,
 * and the hash lookup of a cold entry is a sizeable part of a paced ACK's
 * BPF time (docs/NOTES.md). Kept in the flow's own state, next to what the
 * ACK reads anyway, rather than in a table of its own: one cache line less. */
static __always_inline __u32 fold_staged_gen_now(const struct fold_flow *ff, __u32 slot, __u32 flow_id)
{
	if (slot != fold_home_slot(flow_id))
		return ff->staged_seen + 1;
	return *(volatile const __u32 *)&ff->staged_gen;
}

/* Byte offset of the slot index from the socket (struct sock / tcp_sock)
 * pointer, for compiled sections (src/fold/jit.rs), which find the state
 * as fold_flow_of does. Set by fold_layout with the running kernel's
 * layout (CO-RE), not the build host's. */
__u32 fold_slot_sk_offset = 0;

SEC("syscall")
int fold_layout(void *ctx)
{
	fold_slot_sk_offset = bpf_core_field_offset(struct inet_connection_sock, icsk_ca_priv) +
			      FOLD_SLOT_PRIV_OFFSET;
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FOLD_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct fold_prog);
} fold_progs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);	/* flow id (= Portus socket id) */
	__type(value, struct fold_staged_entry);
} fold_staged SEC(".maps");

/* Per-CPU buffers too big for the 512-byte stack. `empty` is a zeroed
 * fold_staged_entry as bytes (a per-CPU map cannot hold a spin lock). */
struct fold_scratch_buf {
	struct fold_staged sg;
	__u8 empty[sizeof(struct fold_staged_entry)];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fold_scratch_buf);
} fold_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} fold_reports SEC(".maps");

static __always_inline struct fold_scratch_buf *fold_scratch_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&fold_scratch, &zero);
}

struct fold_claim {
	__u32 first;		/* where the search starts */
	__u32 flow_id;
	__u32 slot;		/* out: the slot claimed, FOLD_NO_SLOT: none free */
};

static int fold_claim_slot(__u32 i, struct fold_claim *c)
{
	__u32 slot = (c->first + i) & (FOLD_MAX_FLOWS - 1);
	struct fold_flow *ff = bpf_map_lookup_elem(&fold_flows, &slot);

	if (ff && __sync_val_compare_and_swap(&ff->owner, 0, c->flow_id) == 0) {
		c->slot = slot;
		return 1;
	}
	return 0;
}

/* bpf_loop's context must be on the stack: the slot, not its state */
static int fold_zero_reg(__u32 i, __u32 *slot)
{
	struct fold_flow *ff = bpf_map_lookup_elem(&fold_flows, slot);

	if (!ff)
		return 1;
	ff->st.regs[i & FOLD_REG_MASK] = 0;
	return 0;
}

/* A free slot for flow_id (> 0), FOLD_NO_SLOT when all are taken. Flow ids
 * are sequential, so the first probe (flow_id's own index) is free unless
 * a flow FOLD_MAX_FLOWS ids older still lives. */
static __always_inline __u32 fold_alloc_slot(__u32 flow_id)
{
	struct fold_claim c = { .first = fold_home_slot(flow_id), .flow_id = flow_id, .slot = FOLD_NO_SLOT };

	bpf_loop(FOLD_MAX_FLOWS, fold_claim_slot, &c, 0);
	return c.slot;
}

/* A slot for flow_id with its state zeroed but for the staging
 * generation (a slot's earlier flow left its registers behind; libccp
 * starts a connection's zeroed, as socket storage did). FOLD_NO_SLOT,
 * counted in no_state_flows, when every slot is taken. */
static __always_inline __u32 fold_flow_claim(__u32 flow_id)
{
	__u32 slot = fold_alloc_slot(flow_id);
	struct fold_flow *ff = bpf_map_lookup_elem(&fold_flows, &slot);

	if (!ff) {
		__u32 zero = 0;
		struct fold_counters *cnt = bpf_map_lookup_elem(&fold_counters, &zero);

		if (cnt)
			cnt->no_state_flows++;
		return FOLD_NO_SLOT;
	}
	bpf_loop(FOLD_OFF_BOOK, fold_zero_reg, &slot, 0);
	__builtin_memset(&ff->base, 0, sizeof(ff->base));
	ff->req_rate = 0;
	__builtin_memset(&ff->pend, 0, sizeof(ff->pend));
	ff->req_cwnd = 0;
	ff->awaiting = 0;
	ff->ctl_epoch = 0;
	__builtin_memset(&ff->unflushed, 0, sizeof(ff->unflushed));
	ff->last_report = 0;
	ff->rtt_held_us = 0;
	ff->ctl_seen = 0;
	/* differs from the flow's generation: its first ACK looks */
	ff->staged_seen = *(volatile __u32 *)&ff->staged_gen - 1;
	return slot;
}

/* Add the flow's unflushed counts to this CPU's counters. */
static __always_inline void fold_flush_counts(struct fold_flow *ff, struct fold_counters *cnt)
{
	cnt->invocations += ff->unflushed.invocations;
	cnt->compiled_runs += ff->unflushed.compiled_runs;
	FOLD_FLUSH_INCLUDER(cnt, ff->unflushed.includer);
	__builtin_memset(&ff->unflushed, 0, sizeof(ff->unflushed));
}

/* Give the slot back (FOLD_NO_SLOT: nothing to do). */
static __always_inline void fold_flow_release(__u32 slot)
{
	struct fold_flow *ff = bpf_map_lookup_elem(&fold_flows, &slot);
	struct fold_counters *cnt;
	__u32 zero = 0;

	if (!ff)
		return;
	cnt = bpf_map_lookup_elem(&fold_counters, &zero);
	if (cnt)
		fold_flush_counts(ff, cnt);
	__sync_lock_test_and_set(&ff->owner, 0);
}

/* A new flow: a slot claimed (without one the flow runs the fallback),
 * counters' baseline as the kernel has them now (libccp: registers zero,
 * Micros from the datapath's time zero). */
static __always_inline void fold_flow_start(struct sock *sk, __u32 flow_id, __u32 timeouts)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	__u32 slot = fold_flow_claim(flow_id);
	struct fold_flow *ff = bpf_map_lookup_elem(&fold_flows, &slot);

	*fold_slot_of(sk) = slot;
	if (!ff)
		return;
	ff->st.time_zero_ns = fold_time_zero_ns;
	ff->base.bytes_acked = tp->bytes_acked;
	ff->base.lost = tp->lost;
	ff->base.timeouts = timeouts;
	ff->ctl_epoch = FOLD_CTL_EPOCH;
}

/* The flow is gone: drop what user space staged for it, free its slot. */
static __always_inline void fold_flow_end(struct sock *sk, __u32 flow_id)
{
	bpf_map_delete_elem(&fold_staged, &flow_id);
	fold_flow_release(*fold_slot_of(sk));
	*fold_slot_of(sk) = FOLD_NO_SLOT;
}

static __always_inline void fold_fill_ack(struct fold_ack *a, const struct tcp_sock *tp,
					  const struct rate_sample *rs, __u32 ecn_bytes,
					  __u32 timeouts)
{
	a->bytes_acked = tp->bytes_acked;
	a->rtt_us = rs->rtt_us;
	a->interval_us = rs->interval_us;
	a->delivered = rs->delivered;
	a->snd_interval_us = rs->snd_interval_us;
	a->rcv_interval_us = rs->rcv_interval_us;
	a->acked_sacked = rs->acked_sacked;
	a->sacked_out = tp->sacked_out;
	a->lost_out = tp->lost_out;
	a->retrans_out = tp->retrans_out;
	a->packets_out = tp->packets_out;
	a->write_seq = tp->write_seq;
	a->snd_una = tp->snd_una;
	a->ecn_bytes = ecn_bytes;
	a->timeouts = timeouts;
	a->lost = tp->lost;
	a->mss = tp->mss_cache;
}

#ifndef FOLD_REPORT_WAKE_FLAGS
/* Ring-buffer flags for a report that is not urgent; `prompt`: the flow
 * reports several times per RTT (fold_report_prompt). A wakeup costs 7-20 us
 * here (docs/NOTES.md) and a program reporting once per RTT reports on almost
 * every ACK when the RTT is tens of us: the includer should rate-limit, e.g.
 * `#define FOLD_REPORT_WAKE_FLAGS(now, prompt) wake_flag(now)` before including. */
#define FOLD_REPORT_WAKE_FLAGS(now, prompt) BPF_RB_FORCE_WAKEUP
#endif

/* A flow whose reports come more than this many times per RTT reports per
 * ACK or on a timer short against its RTT: each report matters within a
 * fraction of an RTT (the algorithm answers it), so the includer may deliver
 * it sooner than a per-RTT program's (FOLD_REPORT_WAKE_FLAGS's `prompt`). A
 * per-RTT program reports at most about once per RTT, also on a veth whose
 * RTT is tens of us, so it is never prompt. */
#define FOLD_PROMPT_REPORTS_PER_RTT 4

/* Is this report one of a prompt flow's? Notes its time for the next one.
 * The RTT is the flow's last valid sample (fold_hold_rtt). Reports are
 * rarer than ACKs, so the slot's colder line (last_report sits by owner) is
 * touched only then. */
static __always_inline int fold_report_prompt(struct fold_flow *ff, __u64 now)
{
	__u32 clock = fold_ctl_clock(now), last = ff->last_report;
	__u64 gap_ns = (__u64)(__u32)(clock - (last & ~1u)) << 10;

	ff->last_report = clock | 1;
	return last && ff->rtt_held_us &&
	       gap_ns * FOLD_PROMPT_REPORTS_PER_RTT < (__u64)ff->rtt_held_us * 1000;
}

/* Send the report; one seen with a loss or timeout (urgent) wakes user
 * space at once, others as FOLD_REPORT_WAKE_FLAGS decides. */
static __always_inline void fold_send_report(struct fold_flow *ff, __u32 flow_id,
					     const struct fold_result *res, __u64 now, int urgent,
					     struct fold_counters *cnt)
{
	int prompt = fold_report_prompt(ff, now);
	__u64 flags = urgent ? BPF_RB_FORCE_WAKEUP : FOLD_REPORT_WAKE_FLAGS(now, prompt);
	int sent = 0;

	if (res->n_fields <= FOLD_SMALL_REPORT) {
		struct fold_report_small *rec = bpf_ringbuf_reserve(&fold_reports, sizeof(*rec), 0);

		if (rec) {
			fold_fill_report(rec, flow_id, &ff->st, res, now, FOLD_SMALL_REPORT);
			rec->prompt = prompt;
			bpf_ringbuf_submit(rec, flags);
			sent = 1;
		}
	} else {
		struct fold_report *rec = bpf_ringbuf_reserve(&fold_reports, sizeof(*rec), 0);

		if (rec) {
			fold_fill_report(rec, flow_id, &ff->st, res, now, FOLD_MAX_REPORT);
			rec->prompt = prompt;
			bpf_ringbuf_submit(rec, flags);
			sent = 1;
		}
	}
	if (sent)
		cnt->reports_sent++;
	else
		cnt->reports_dropped++;
	fold_finish_report(&ff->st, &fold_progs, now);
}

/*
 * One ACK: primitives, staged updates, the flow's fold program, its report,
 * in two halves around the program's main section (which runs interpreted
 * or compiled in between, see ccp.bpf.c).
 * Cwnd is seeded with the cwnd the algorithm last set (else the kernel's),
 * Rate with the rate it last set (libccp re-seeds both every invocation and
 * an asynchronous datapath must echo what it applied, docs/NOTES.md). After an
 * RTO the algorithm's earlier requests are stale: they are forgotten and the
 * kernel's loss window stands until the algorithm sets something other than
 * that seed (src/fold/userspace.rs awaiting_alg).
 */

/* The first half: returns the flow's state (NULL: none, run the fallback)
 * with ff->pend filled; fold_flow_runs_program(ff) tells whether a main
 * section is due (fold_ack_end runs either way). */
static __always_inline struct fold_flow *fold_ack_begin(struct sock *sk, const struct rate_sample *rs,
							__u32 flow_id, __u32 ecn_bytes, __u32 timeouts,
							__u64 now, __u64 ctl_silence_ns)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	__u32 slot = *fold_slot_of(sk);
	struct fold_flow *ff = bpf_map_lookup_elem(&fold_flows, &slot);
	struct fold_staged_entry *e = NULL;
	struct fold_scratch_buf *scratch;
	struct fold_staged *sg = NULL;
	struct fold_ack a;
	__u64 prims[FOLD_N_PRIM];
	__u32 gen;

	if (!ff)
		return NULL;
	/* No ACK for longer than ctl_silence_ns (an outage, an idle flow): no
	 * report asked the algorithm anything meanwhile, so the control guard's
	 * clock starts again here instead of charging the silence to it (an
	 * algorithm that skips repeated answers was taken right after an
	 * outage). Not under a commanded rate: the silence may be the rate's
	 * own doing (a fuzzed rate below the floor sent 12-packet bursts 1.5 s
	 * apart, and restarting at each held the flow for good). The register
	 * still holds the previous ACK's time. */
	if (!ff->req_rate && now - ff->st.regs[FOLD_OFF_JIT_NOW] > ctl_silence_ns)
		fold_ctl_commanded(ff, now, 0);
	fold_fill_ack(&a, tp, rs, ecn_bytes, timeouts);
	fold_prims(&a, &ff->base, prims);
	fold_hold_rtt(prims, &ff->rtt_held_us, tp->srtt_us >> 3);
	if (prims[14] || ff->ctl_epoch != FOLD_CTL_EPOCH) {	/* was_timeout, or a new algorithm */
		ff->ctl_epoch = FOLD_CTL_EPOCH;
		ff->awaiting = 1;
		ff->req_cwnd = 0;
		ff->req_rate = 0;
		/* an RTO is a new question to the algorithm: the guard's bound
		 * applies to its answer from this ACK (the first it can have
		 * heard of), not to the silence that led to the timeout */
		if (prims[14])
			fold_ctl_commanded(ff, now, 0);
	}
	ff->pend.seed = ff->req_cwnd ? ff->req_cwnd : fold_sat_mul(tp->snd_cwnd, a.mss ? a.mss : 1);
	gen = fold_staged_gen_now(ff, slot, flow_id);
	if (gen != ff->staged_seen) {
		/* read before the lookup: a merge after it bumps the generation
		 * again, so the next ACK looks once more */
		ff->staged_seen = gen;
		e = bpf_map_lookup_elem(&fold_staged, &flow_id);
	}
	/* the per-CPU scratch only when something may be staged: on a paced
	 * ACK every map value touched is a cache miss */
	if (e) {
		scratch = fold_scratch_get();
		if (scratch && fold_take_staged(e, &scratch->sg)) {
			sg = &scratch->sg;
			fold_ctl_commanded(ff, now, 1);
		}
	}
	fold_invoke_begin(&ff->st, &fold_progs, sg, prims, ff->pend.seed, ff->req_rate, now,
			  fold_time_zero_ns, &ff->pend.res);
	ff->st.regs[FOLD_OFF_JIT_NOW] = now;
	return ff;
}

/* The ACK's bpf_ktime_get_ns(), as fold_ack_begin left it for a compiled
 * section's Micros writes. */
static __always_inline __u64 fold_ack_now(const struct fold_flow *ff)
{
	return ff->st.regs[FOLD_OFF_JIT_NOW];
}

/* Does the ACK carry a loss or a timeout (its report wakes user space at
 * once)? From the primitives' registers, which programs cannot write and
 * fold_invoke_begin filled whenever a program ran (no report otherwise). */
static __always_inline int fold_report_urgent(const struct fold_flow *ff)
{
	return ff->st.regs[FOLD_OFF_PRIM + 4] || ff->st.regs[FOLD_OFF_PRIM + 14];	/* lost_pkts_sample, was_timeout */
}

/* Does the flow run a program (its main section is due after
 * fold_ack_begin)? */
static __always_inline int fold_flow_runs_program(const struct fold_flow *ff)
{
	return ff->pend.res.ret == FOLD_OK;
}

/* The main section, interpreted (a slot without a compiled one): its
 * error, 0 also when the slot turned out to hold no program (then
 * fold_flow_runs_program is false for fold_ack_end). */
static __always_inline int fold_interpret_main(struct fold_flow *ff)
{
	struct fold_prog *p = fold_main_program(&ff->st, &fold_progs, &ff->pend.res);

	if (!p)
		return 0;
	return fold_run_section(&ff->st, p, 0, p->n_main, fold_ack_now(ff), &ff->pend.res.steps);
}

/* The second half, after the main section returned `err` (ignored when
 * no program ran); `compiled`: it ran as compiled code; `mss`: the flow's,
 * bytes. Returns 1 with *cwnd_bytes / *rate (0 = leave) when the algorithm
 * controls the flow, 0 when the caller should run its fallback. A Cwnd the
 * program sets commands the flow only if it is another window in packets
 * than the one it was seeded with: the kernel applies whole packets, so a
 * program moving its Cwnd by bytes within one packet holds the flow where
 * it is (a fuzzed program held one at 1 packet for 0.9 s that way). Likewise
 * a Rate commands only if it is another rate once raised to `rate_floor`
 * (bytes/s, the lowest the caller applies; 0: none): a program moving its
 * Rate below the floor holds the flow at the floor. */
static __always_inline __u64 fold_rate_at_least(__u64 rate, __u64 floor)
{
	return rate > floor ? rate : floor;
}

static __always_inline int fold_ack_end(struct fold_flow *ff, __u32 flow_id, int err, int compiled,
					__u32 mss, __u64 rate_floor, __u32 *cwnd_bytes, __u64 *rate)
{
	struct fold_result *res = &ff->pend.res;
	__u32 seed_pkts, last_pkts;
	int aborted;
	__u32 last;

	if (!mss)
		mss = 1;
	seed_pkts = ff->pend.seed / mss;

	if (res->ret == FOLD_OK)
		fold_invoke_end(&ff->st, &fold_progs, err, res);
	aborted = res->ret >= FOLD_ERR_SUB_UNDERFLOW && res->ret <= FOLD_ERR_ADD_OVERFLOW;
	ff->unflushed.compiled_runs += compiled;
	ff->unflushed.invocations++;
	if (aborted || res->report || ff->unflushed.invocations >= FOLD_FLUSH_EVERY) {
		__u32 zero = 0;
		struct fold_counters *cnt = bpf_map_lookup_elem(&fold_counters, &zero);

		if (cnt) {
			fold_flush_counts(ff, cnt);
			/* per CPU, not atomic: a softirq interrupting a
			 * process-context ACK can lose a count */
			if (aborted)
				cnt->aborts++;
			if (res->report)
				fold_send_report(ff, flow_id, res, fold_ack_now(ff), fold_report_urgent(ff), cnt);
		}
	}
	if (res->n_cwnd) {
		last = res->n_cwnd > 1 ? res->cwnd[1] : res->cwnd[0];
		last_pkts = last / mss;
		if (!aborted && last_pkts != seed_pkts)
			fold_ctl_commanded(ff, fold_ack_now(ff), 0);
		ff->req_cwnd = last;
	}
	if (res->n_rate) {
		last = res->n_rate > 1 ? res->rate[1] : res->rate[0];
		if (!aborted && fold_rate_at_least(last, rate_floor) != fold_rate_at_least(ff->req_rate, rate_floor))
			fold_ctl_commanded(ff, fold_ack_now(ff), 0);
		ff->req_rate = last;
	}
	if (ff->awaiting) {
		/* libccp echoes the seed on every invocation: only another cwnd
		 * or a rate is the algorithm speaking again */
		if (!((res->n_cwnd && ff->req_cwnd / mss != seed_pkts) || ff->req_rate)) {
			ff->req_cwnd = 0;
			ff->req_rate = 0;
			return 0;
		}
		ff->awaiting = 0;
	}
	if (!ff->req_cwnd && !ff->req_rate)
		return 0;
	*cwnd_bytes = ff->req_cwnd;
	*rate = ff->req_rate;
	return 1;
}

/* One ACK with the main section interpreted: both halves in one call
 * (the test harness's; it runs no control guard, so no silence restarts
 * the guard's clock). */
static __always_inline int fold_on_ack(struct sock *sk, const struct rate_sample *rs, __u32 flow_id,
				       __u32 ecn_bytes, __u32 timeouts, __u64 now,
				       __u32 *cwnd_bytes, __u64 *rate)
{
	struct fold_flow *ff = fold_ack_begin(sk, rs, flow_id, ecn_bytes, timeouts, now, ~0ULL);
	int err = 0;

	if (!ff)
		return 0;
	if (fold_flow_runs_program(ff))
		err = fold_interpret_main(ff);
	return fold_ack_end(ff, flow_id, err, 0, ((const struct tcp_sock *)sk)->mss_cache, 0, cwnd_bytes, rate);
}

/* Staging from user space: one Portus message's updates for one flow
 * (src/fold/table.rs Effect::Stage). The delta comes first: the verifier
 * only allows context loads at fixed offsets from its start. */
struct fold_stage_in {
	struct fold_staged delta;
	__u32 flow_id;
	__u32 _pad;
};

SEC("syscall")
int fold_stage(struct fold_stage_in *in)
{
	__u32 flow_id = in->flow_id, home = fold_home_slot(flow_id);
	struct fold_scratch_buf *scratch = fold_scratch_get();
	struct fold_flow *ff = bpf_map_lookup_elem(&fold_flows, &home);
	struct fold_staged_entry *e;

	if (!scratch)
		return -1;
	__builtin_memcpy(&scratch->sg, in, sizeof(scratch->sg));
	e = bpf_map_lookup_elem(&fold_staged, &flow_id);
	if (!e) {
		__builtin_memset(scratch->empty, 0, sizeof(scratch->empty));
		bpf_map_update_elem(&fold_staged, &flow_id, scratch->empty, BPF_NOEXIST);
		e = bpf_map_lookup_elem(&fold_staged, &flow_id);
		if (!e)
			return -2;	/* map full */
	}
	fold_stage_merge(e, &scratch->sg);
	/* after the merge (a full barrier): a flow that sees the new
	 * generation finds the merged updates */
	if (ff && *(volatile __u32 *)&ff->owner == flow_id)
		__sync_fetch_and_add(&ff->staged_gen, 1);
	return 0;
}

#endif /* CCP_FOLD_CCP_H */
