// SPDX-License-Identifier: GPL-2.0
/*
 * fold_test.bpf.c: test harness for the fold interpreter (fold_vm.h), run
 * from user space with BPF_PROG_TEST_RUN (tests/fold_differential.rs). No
 * struct_ops, no socket: a syscall-type program reads its inputs from the
 * test-run context, runs one libccp-style invocation (or `repeat` of them,
 * for timing) on flow state kept in an array map, and leaves the result
 * (and a report's fields, copied before the volatile reset) in `fold_out`.
 *
 * Maps (user space writes progs/staged/states, reads out):
 *   fold_progs, fold_staged, fold_scratch: fold_ccp.h's (the production
 *               maps; staged updates go through its fold_stage program,
 *               keyed here by flow index)
 *   fold_states [FOLD_TEST_FLOWS] struct fold_state (fold_flows in production)
 *   fold_out    [FOLD_TEST_FLOWS] struct fold_test_out
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "fold_vm.h"
#define FOLD_SLOT_PRIV_OFFSET 0	/* fold_check's icsk_ca_priv holds the slot only */
#include "fold_ccp.h"

char LICENSE[] SEC("license") = "GPL";

#define FOLD_TEST_FLOWS 8

/* Test-run context (mirrored in tests/fold_differential.rs). */
struct fold_test_in {
	__u32 flow;		/* index into the per-flow maps */
	__u32 repeat;		/* timing: run the invocation this many times (0 = 1) */
	__u64 now_ns;
	__u64 dp_time_zero_ns;
	__u64 snd_rate;
	__u32 snd_cwnd;
	__u32 sid;		/* the flow's Portus socket id, for its reports */
	__u64 prims[FOLD_N_PRIM];
};
_Static_assert(sizeof(struct fold_test_in) == 40 + 8 * FOLD_N_PRIM, "fold_test_in layout");

struct fold_test_out {
	struct fold_result res;
	__u32 _pad;
	__u64 elapsed_ns;	/* ktime around the (repeated) invocations */
	struct fold_report report;	/* the last report, as the struct_ops side emits it */
};
_Static_assert(sizeof(struct fold_test_out) == 56 + sizeof(struct fold_report), "fold_test_out layout");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FOLD_TEST_FLOWS);
	__type(key, __u32);
	__type(value, struct fold_state);
} fold_states SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FOLD_TEST_FLOWS);
	__type(key, __u32);
	__type(value, struct fold_test_out);
} fold_out SEC(".maps");

struct fold_test_run {
	__u64 now_ns;
	__u64 dp_time_zero_ns;
	__u64 snd_rate;
	__u32 snd_cwnd;
	__u32 sid;
	struct fold_state *st;
	struct fold_staged *sg;
	struct fold_test_out *out;
	__u64 prims[FOLD_N_PRIM];
};

/* One invocation, as the struct_ops program would run it per ACK. */
static long fold_test_once(__u32 i, void *arg)
{
	struct fold_test_run *t = arg;
	struct fold_state *st = t->st;
	struct fold_test_out *out = t->out;

	fold_invoke(st, &fold_progs, t->sg, t->prims, t->snd_cwnd, t->snd_rate, t->now_ns,
		    t->dp_time_zero_ns, &out->res);
	t->sg = NULL;	/* staged updates apply once */
	if (out->res.report) {
		/* libccp sends the report, then resets the volatile registers */
		fold_fill_report(&out->report, t->sid, st, &out->res, t->now_ns, FOLD_MAX_REPORT);
		fold_finish_report(st, &fold_progs, t->now_ns);
	}
	return 0;
}

SEC("syscall")
int fold_test_invoke(struct fold_test_in *in)
{
	struct fold_test_run t = {
		.now_ns = in->now_ns,
		.dp_time_zero_ns = in->dp_time_zero_ns,
		.snd_rate = in->snd_rate,
		.snd_cwnd = in->snd_cwnd,
		.sid = in->sid,
	};
	__u32 flow = in->flow;
	struct fold_staged_entry *e;
	struct fold_scratch_buf *scratch;
	__u64 t0;

	t.st = bpf_map_lookup_elem(&fold_states, &flow);
	scratch = fold_scratch_get();
	t.out = bpf_map_lookup_elem(&fold_out, &flow);
	if (!t.st || !scratch || !t.out)
		return -1;
	/* staged updates: the production path (fold_ccp.h), keyed by flow index here */
	e = bpf_map_lookup_elem(&fold_staged, &flow);
	t.sg = e && fold_take_staged(e, &scratch->sg) ? &scratch->sg : NULL;
	__builtin_memcpy(t.prims, in->prims, sizeof(t.prims));
	t0 = bpf_ktime_get_ns();
	bpf_loop(in->repeat ? in->repeat : 1, fold_test_once, &t, 0);
	t.out->elapsed_ns = bpf_ktime_get_ns() - t0;
	return 0;
}

/* Primitives from one ACK (fold_prims), in and out through the context. */
struct fold_test_prims_io {
	struct fold_ack ack;
	struct fold_baseline base;	/* in: previous; out: updated */
	__u64 prims[FOLD_N_PRIM];	/* out */
	__u32 srtt_us;			/* in: the socket's SRTT, us (fold_hold_rtt) */
	__u32 rtt_held_us;		/* in: previous; out: updated (fold_hold_rtt) */
};

SEC("syscall")
int fold_test_prims(struct fold_test_prims_io *io)
{
	struct fold_ack a;
	struct fold_baseline b;
	__u64 prims[FOLD_N_PRIM];
	__u32 held;

	__builtin_memcpy(&a, &io->ack, sizeof(a));
	__builtin_memcpy(&b, &io->base, sizeof(b));
	fold_prims(&a, &b, prims);
	held = io->rtt_held_us;
	fold_hold_rtt(prims, &held, io->srtt_us);
	io->rtt_held_us = held;
	__builtin_memcpy(&io->base, &b, sizeof(b));
	__builtin_memcpy(io->prims, prims, sizeof(prims));
	return 0;
}

/* fold_ccp.h's per-ACK path in a struct_ops congestion control that is
 * loaded (so the verifier checks it in the context it will run in) but
 * never registered. */
SEC("struct_ops")
void BPF_PROG(fold_check_init, struct sock *sk)
{
	fold_flow_start(sk, 1, 0);
}

SEC("struct_ops")
void BPF_PROG(fold_check_cong_control, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u32 cwnd = 0;
	__u64 rate = 0;

	if (fold_on_ack(sk, rs, 1, 0, 0, bpf_ktime_get_ns(), &cwnd, &rate) && cwnd)
		tp->snd_cwnd = cwnd / (tp->mss_cache ? tp->mss_cache : 1) ?: 1;
}

SEC("struct_ops")
void BPF_PROG(fold_check_release, struct sock *sk)
{
	fold_flow_end(sk, 1);
}

SEC("struct_ops")
__u32 BPF_PROG(fold_check_ssthresh, struct sock *sk)
{
	return 2;
}

SEC("struct_ops")
__u32 BPF_PROG(fold_check_undo_cwnd, struct sock *sk)
{
	return ((struct tcp_sock *)sk)->snd_cwnd;
}

SEC(".struct_ops.link")
struct tcp_congestion_ops fold_check = {
	.init = (void *)fold_check_init,
	.release = (void *)fold_check_release,
	.cong_control = (void *)fold_check_cong_control,
	.ssthresh = (void *)fold_check_ssthresh,
	.undo_cwnd = (void *)fold_check_undo_cwnd,
	.name = "ccp_fold_check",
};

/* ---- per-flow slots (tests/fold_slots.rs) ---- */

/* Test-run context of fold_test_claim / fold_test_release. */
struct fold_test_slot_io {
	__u32 flow_id;	/* in (claim) */
	__u32 slot;	/* out (claim), in (release) */
};

/* fold_flow_claim as init() runs it, without a socket. */
SEC("syscall")
int fold_test_claim(struct fold_test_slot_io *io)
{
	io->slot = fold_flow_claim(io->flow_id);
	return 0;
}

/* fold_flow_release as release() runs it. */
SEC("syscall")
int fold_test_release(struct fold_test_slot_io *io)
{
	fold_flow_release(io->slot);
	return 0;
}

/* ---- fold JIT reference (tests/fold_jit.rs) ---- */

/* Test-run context of fold_test_main (mirrored in tests/fold_jit.rs). */
struct fold_test_main_in {
	__u32 slot;	/* the program: fold_progs[slot] */
	__u32 flow;	/* the register file: fold_states[flow] */
};

/* The interpreter on the main section [0, n_main) of fold_progs[slot],
 * with the registers of fold_states[flow] (user space writes and reads
 * them: a 4 KiB copy through the context needs pointer arithmetic on it,
 * which the verifier refuses) and now_ns = regs[FOLD_OFF_JIT_NOW]; the
 * result code goes to regs[FOLD_OFF_JIT_RET], as a compiled section
 * (src/fold/jit.rs) leaves it. Returns -1 when a map entry is missing. */
SEC("syscall")
int fold_test_main(struct fold_test_main_in *in)
{
	__u32 slot = in->slot, flow = in->flow, steps = 0;
	struct fold_state *st = bpf_map_lookup_elem(&fold_states, &flow);
	struct fold_prog *p = bpf_map_lookup_elem(&fold_progs, &slot);
	int ret;

	if (!st || !p)
		return -1;
	ret = fold_run_section(st, p, 0, p->n_main, st->regs[FOLD_OFF_JIT_NOW], &steps);
	st->regs[FOLD_OFF_JIT_RET] = (__s64)ret;
	return 0;
}

/* A tail-call table for loading compiled sections for the struct_ops target
 * (tests/fold_jit.rs: the production target must pass the verifier). */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} fold_jit_test SEC(".maps");
