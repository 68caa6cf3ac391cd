/* SPDX-License-Identifier: GPL-2.0 */
/*
 * fold_ccp.h: the struct_ops side of `--fold kernel`: per-flow fold state in
 * socket storage, the program table, staged updates, report records, and
 * one call per ACK (fold_on_ack, or its two halves) that does what the user-space libccp path
 * does with an ACK event (src/fold.rs on_ack + src/primitives.rs), without
 * leaving the kernel. Only reports (and create/release events) reach user
 * space.
 *
 * Include after vmlinux.h, bpf_helpers.h and fold_vm.h, once per object.
 * The includer calls:
 *   fold_flow_start(sk, flow_id, timeouts)        from init()
 *   ff = fold_ack_begin(sk, rs, flow_id, ecn_bytes, timeouts, now, hb, &prog)
 *                                                 from cong_control(), then the
 *                                                 main section of `prog` (if any:
 *                                                 fold_run_section, or a tail call
 *                                                 into its compiled form), then
 *   fold_ack_end(ff, flow_id, err, &cwnd, &rate)  1 = the algorithm's cwnd
 *                                                 (bytes) / rate (bytes/s) to
 *                                                 apply, 0 = no algorithm yet:
 *                                                 fall back
 *   fold_flow_end(flow_id)                        from release()
 * User space (src/fold_kernel.rs KernelFold) writes `fold_progs`, stages
 * updates by running the `fold_stage` syscall program with
 * BPF_PROG_TEST_RUN (context: struct fold_stage_in), reads `fold_reports`,
 * and sets `fold_time_zero_ns` (origin of Ack.now, libccp's datapath
 * time_zero) before load.
 */
#ifndef CCP_FOLD_CCP_H
#define CCP_FOLD_CCP_H

/* The includer's control epoch (a global user space bumps when the algorithm
 * went away or a new one started): a flow that sees it change forgets what
 * the algorithm asked for before, as after an RTO. */
#ifndef FOLD_CTL_EPOCH
#define FOLD_CTL_EPOCH 0
#endif

/* Origin of Ack.now (CLOCK_MONOTONIC ns), set by user space before load. */
const volatile __u64 fold_time_zero_ns = 0;

/* Counters read by user space (summed over CPUs). Per CPU: a shared
 * counter bumped atomically on every ACK bounces its cache line between the
 * cores (and shared the line with the daemon's heartbeat). */
struct fold_counters {
	__u64 invocations;
	__u64 aborts;		/* invocations aborted (overflow, underflow, div0) */
	__u64 reports_sent;
	__u64 reports_dropped;	/* report ring buffer full */
	__u64 compiled_runs;	/* invocations whose main section ran compiled (fold_jit) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fold_counters);
} fold_counters SEC(".maps");

/* What the first half of an ACK (fold_ack_begin) leaves for the second
 * (fold_ack_end): with a compiled main section the two halves are
 * different BPF programs, a tail call apart, so nothing stays on the stack. */
struct fold_pending {
	struct fold_result res;
	__u64 now;		/* the ACK's bpf_ktime_get_ns() */
	__u64 hb;		/* the daemon's heartbeat as read at that time */
	__u32 seed;		/* the cwnd Cwnd was seeded with (bytes) */
	__u32 urgent;		/* a loss or timeout: a report wakes user space */
};

/* Per-flow state: the interpreter's registers plus the datapath's own
 * bookkeeping (what src/fold.rs keeps per libccp connection). The registers
 * come first: a compiled main section finds them at offset 0. */
struct fold_flow {
	struct fold_state st;
	struct fold_pending pend;
	struct fold_baseline base;
	__u64 req_rate;		/* last set_rate (bytes/s), 0: none */
	__u32 req_cwnd;		/* last set_cwnd (bytes), 0: none */
	__u32 awaiting;		/* after an RTO or a change of algorithm: it has not answered yet */
	__u32 ctl_epoch;	/* FOLD_CTL_EPOCH when req_* were set */
	__u32 _pad;
	__u32 staged_seen;	/* its fold_staged_gens entry when it last looked at fold_staged */
	__u32 _pad2;
};

/* Staging generations: fold_stage bumps entry flow_id % FOLD_STAGED_GENS
 * after every merge for that flow. A flow looks its fold_staged entry up
 * only when its generation moved since its last look: most ACKs find
 * nothing staged, and the hash lookup of a cold entry is a sizeable part of
 * a paced ACK's BPF time (docs/NOTES.md). Per flow (flow ids are sequential;
 * ids sharing an entry only cost a lookup more), so one flow's commands do
 * not send every other flow to the hash map. */
#define FOLD_STAGED_GENS 4096
__u32 fold_staged_gens[FOLD_STAGED_GENS] = {};

static __always_inline __u32 *fold_staged_gen(__u32 flow_id)
{
	return &fold_staged_gens[flow_id & (FOLD_STAGED_GENS - 1)];
}

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct fold_flow);
} fold_flows SEC(".maps");

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

/* A new flow: state zeroed, counters' baseline as the kernel has them now
 * (libccp: registers zero, Micros from the datapath's time zero). */
static __always_inline void fold_flow_start(struct sock *sk, __u32 flow_id, __u32 timeouts)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	struct fold_flow *ff = bpf_sk_storage_get(&fold_flows, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);

	if (!ff)
		return;
	__builtin_memset(&ff->base, 0, sizeof(ff->base));
	ff->st.slot = 0;
	ff->st.time_zero_ns = fold_time_zero_ns;
	ff->base.bytes_acked = tp->bytes_acked;
	ff->base.lost = tp->lost;
	ff->base.timeouts = timeouts;
	ff->req_cwnd = 0;
	ff->req_rate = 0;
	ff->awaiting = 0;
	ff->ctl_epoch = FOLD_CTL_EPOCH;
	/* differs from the flow's generation: its first ACK looks */
	ff->staged_seen = *(volatile __u32 *)fold_staged_gen(flow_id) - 1;
}

/* The flow is gone: drop what user space staged for it. */
static __always_inline void fold_flow_end(__u32 flow_id)
{
	bpf_map_delete_elem(&fold_staged, &flow_id);
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
/* Ring-buffer flags for a report that is not urgent. A wakeup costs 7-20 us
 * here (FIELD-NOTES) and a program reporting once per RTT reports on almost
 * every ACK when the RTT is tens of us: the includer should rate-limit, e.g.
 * `#define FOLD_REPORT_WAKE_FLAGS(now) wake_flag(now)` before including. */
#define FOLD_REPORT_WAKE_FLAGS(now) BPF_RB_FORCE_WAKEUP
#endif

/* Send the report; one seen with a loss or timeout (urgent) wakes user
 * space at once, others as FOLD_REPORT_WAKE_FLAGS decides. */
static __always_inline void fold_send_report(struct fold_flow *ff, __u32 flow_id,
					     const struct fold_result *res, __u64 now, int urgent,
					     struct fold_counters *cnt)
{
	__u64 flags = urgent ? BPF_RB_FORCE_WAKEUP : FOLD_REPORT_WAKE_FLAGS(now);
	int sent = 0;

	if (res->n_fields <= FOLD_SMALL_REPORT) {
		struct fold_report_small *rec = bpf_ringbuf_reserve(&fold_reports, sizeof(*rec), 0);

		if (rec) {
			fold_fill_report(rec, flow_id, &ff->st, res, now, FOLD_SMALL_REPORT);
			bpf_ringbuf_submit(rec, flags);
			sent = 1;
		}
	} else {
		struct fold_report *rec = bpf_ringbuf_reserve(&fold_reports, sizeof(*rec), 0);

		if (rec) {
			fold_fill_report(rec, flow_id, &ff->st, res, now, FOLD_MAX_REPORT);
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
 * an asynchronous datapath must echo what it applied, FIELD-NOTES). After an
 * RTO the algorithm's earlier requests are stale: they are forgotten and the
 * kernel's loss window stands until the algorithm sets something other than
 * that seed (src/fold.rs awaiting_alg).
 */

/* The first half: returns the flow's state (NULL: none, run the fallback)
 * with ff->pend filled and *prog the program whose main section is due
 * (NULL: none is installed; fold_ack_end still runs). */
static __always_inline struct fold_flow *fold_ack_begin(struct sock *sk, const struct rate_sample *rs,
							__u32 flow_id, __u32 ecn_bytes, __u32 timeouts,
							__u64 now, __u64 hb, struct fold_prog **prog)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	struct fold_flow *ff = bpf_sk_storage_get(&fold_flows, sk, 0, 0);
	struct fold_staged_entry *e = NULL;
	struct fold_scratch_buf *scratch;
	struct fold_staged *sg = NULL;
	struct fold_ack a;
	__u64 prims[FOLD_N_PRIM];
	__u32 gen;

	*prog = NULL;
	if (!ff)
		return NULL;
	fold_fill_ack(&a, tp, rs, ecn_bytes, timeouts);
	fold_prims(&a, &ff->base, prims);
	if (prims[14] || ff->ctl_epoch != FOLD_CTL_EPOCH) {	/* was_timeout, or a new algorithm */
		ff->ctl_epoch = FOLD_CTL_EPOCH;
		ff->awaiting = 1;
		ff->req_cwnd = 0;
		ff->req_rate = 0;
	}
	ff->pend.now = now;
	ff->pend.hb = hb;
	ff->pend.urgent = prims[4] || prims[14];	/* lost_pkts_sample, was_timeout */
	ff->pend.seed = ff->req_cwnd ? ff->req_cwnd : fold_sat_mul(tp->snd_cwnd, a.mss ? a.mss : 1);
	gen = *(volatile __u32 *)fold_staged_gen(flow_id);
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
		if (scratch && fold_take_staged(e, &scratch->sg))
			sg = &scratch->sg;
	}
	*prog = fold_invoke_begin(&ff->st, &fold_progs, sg, prims, ff->pend.seed, ff->req_rate, now,
				  fold_time_zero_ns, &ff->pend.res);
	ff->st.regs[FOLD_OFF_JIT_NOW] = now;
	return ff;
}

/* The second half, after the main section returned `err` (ignored when
 * begin found no program); `compiled`: it ran as compiled code. Returns 1 with *cwnd_bytes / *rate (0 = leave)
 * when the algorithm controls the flow, 0 when the caller should run its
 * fallback. */
static __always_inline int fold_ack_end(struct fold_flow *ff, __u32 flow_id, int err, int compiled,
					__u32 *cwnd_bytes, __u64 *rate)
{
	struct fold_result *res = &ff->pend.res;
	struct fold_counters *cnt;
	__u32 last, zero = 0;

	cnt = bpf_map_lookup_elem(&fold_counters, &zero);
	if (!cnt)
		return 0;
	if (res->ret == FOLD_OK)
		fold_invoke_end(&ff->st, err, res);
	cnt->compiled_runs += compiled;
	cnt->invocations++;	/* per CPU, not atomic: a softirq interrupting a process-context ACK can lose a count */
	if (res->ret >= FOLD_ERR_SUB_UNDERFLOW && res->ret <= FOLD_ERR_ADD_OVERFLOW)
		cnt->aborts++;
	if (res->n_cwnd) {
		last = res->n_cwnd > 1 ? res->cwnd[1] : res->cwnd[0];
		ff->req_cwnd = last;
	}
	if (res->n_rate) {
		last = res->n_rate > 1 ? res->rate[1] : res->rate[0];
		ff->req_rate = last;
	}
	if (res->report)
		fold_send_report(ff, flow_id, res, ff->pend.now, ff->pend.urgent, cnt);
	if (ff->awaiting) {
		/* libccp echoes the seed on every invocation: only another cwnd
		 * or a rate is the algorithm speaking again */
		if (!((res->n_cwnd && ff->req_cwnd != ff->pend.seed) || ff->req_rate)) {
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

/* One ACK with the main section interpreted: both halves in one call. */
static __always_inline int fold_on_ack(struct sock *sk, const struct rate_sample *rs, __u32 flow_id,
				       __u32 ecn_bytes, __u32 timeouts, __u64 now, __u64 hb,
				       __u32 *cwnd_bytes, __u64 *rate)
{
	struct fold_prog *p;
	struct fold_flow *ff = fold_ack_begin(sk, rs, flow_id, ecn_bytes, timeouts, now, hb, &p);
	int err = 0;

	if (!ff)
		return 0;
	if (p)
		err = fold_run_section(&ff->st, p, 0, p->n_main, now, &ff->pend.res.steps);
	return fold_ack_end(ff, flow_id, err, 0, cwnd_bytes, rate);
}

/* Staging from user space: one Portus message's updates for one flow
 * (src/fold_kernel.rs Effect::Stage). The delta comes first: the verifier
 * only allows context loads at fixed offsets from its start. */
struct fold_stage_in {
	struct fold_staged delta;
	__u32 flow_id;
	__u32 _pad;
};

SEC("syscall")
int fold_stage(struct fold_stage_in *in)
{
	__u32 flow_id = in->flow_id;
	struct fold_scratch_buf *scratch = fold_scratch_get();
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
	__sync_fetch_and_add(fold_staged_gen(flow_id), 1);
	return 0;
}

#endif /* CCP_FOLD_CCP_H */
