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
 *   fold_progs  [FOLD_MAX_SLOTS]  struct fold_prog, keyed by libccp slot
 *   fold_states [FOLD_TEST_FLOWS] struct fold_state
 *   fold_staged [FOLD_TEST_FLOWS] struct fold_staged_entry: written only by
 *               fold_test_stage (a message's updates merged under the lock),
 *               taken by fold_test_invoke (the production path)
 *   fold_scratch per-CPU struct fold_staged (taken updates; too big for the stack)
 *   fold_out    [FOLD_TEST_FLOWS] struct fold_test_out
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "fold_vm.h"

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
	__uint(max_entries, FOLD_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct fold_prog);
} fold_progs SEC(".maps");

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
	__type(value, struct fold_staged_entry);
} fold_staged SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fold_staged);
} fold_scratch SEC(".maps");

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
		fold_fill_report(&out->report, t->sid, st, &out->res, t->now_ns);
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
	__u32 flow = in->flow, zero = 0;
	struct fold_staged_entry *e;
	struct fold_staged *scratch;
	__u64 t0;

	t.st = bpf_map_lookup_elem(&fold_states, &flow);
	e = bpf_map_lookup_elem(&fold_staged, &flow);
	scratch = bpf_map_lookup_elem(&fold_scratch, &zero);
	t.out = bpf_map_lookup_elem(&fold_out, &flow);
	if (!t.st || !e || !scratch || !t.out)
		return -1;
	t.sg = fold_take_staged(e, scratch) ? scratch : NULL;
	__builtin_memcpy(t.prims, in->prims, sizeof(t.prims));
	t0 = bpf_ktime_get_ns();
	bpf_loop(in->repeat ? in->repeat : 1, fold_test_once, &t, 0);
	t.out->elapsed_ns = bpf_ktime_get_ns() - t0;
	return 0;
}

/* Stage one Portus message's updates for a flow (what the datapath daemon
 * does per update-fields / change-program message). The delta comes first:
 * the verifier only allows context loads at fixed offsets from its start. */
struct fold_test_stage_in {
	struct fold_staged delta;
	__u32 flow;
	__u32 _pad;
};

SEC("syscall")
int fold_test_stage(struct fold_test_stage_in *in)
{
	__u32 flow = in->flow, zero = 0;
	struct fold_staged_entry *e = bpf_map_lookup_elem(&fold_staged, &flow);
	struct fold_staged *d = bpf_map_lookup_elem(&fold_scratch, &zero);

	if (!e || !d)
		return -1;
	__builtin_memcpy(d, in, sizeof(*d));
	fold_stage_merge(e, d);
	return 0;
}

/* Primitives from one ACK (fold_prims), in and out through the context. */
struct fold_test_prims_io {
	struct fold_ack ack;
	struct fold_baseline base;	/* in: previous; out: updated */
	__u64 prims[FOLD_N_PRIM];	/* out */
};

SEC("syscall")
int fold_test_prims(struct fold_test_prims_io *io)
{
	struct fold_ack a;
	struct fold_baseline b;
	__u64 prims[FOLD_N_PRIM];

	__builtin_memcpy(&a, &io->ack, sizeof(a));
	__builtin_memcpy(&b, &io->base, sizeof(b));
	fold_prims(&a, &b, prims);
	__builtin_memcpy(&io->base, &b, sizeof(b));
	__builtin_memcpy(io->prims, prims, sizeof(prims));
	return 0;
}
