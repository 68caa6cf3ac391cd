// SPDX-License-Identifier: GPL-2.0
/*
 * kfunc_cubic.bpf.c: the smallest BPF congestion control that runs the
 * kernel's own CUBIC: a struct_ops `tcp_congestion_ops` named "kfcubic"
 * whose every op calls tcp_cubic.c's kfunc of the same op, nothing else.
 *
 * Not part of the datapath. It is the benchmark's floor (`python -m
 * ccplab.dpbench --modes ...,bpf-cubic`): the BPF time per ACK that any
 * struct_ops CCA pays on this machine (trampolines, cold caches on a paced
 * ACK) with kernel cubic's own work inside, against which `ccp`'s BPF time
 * per ACK is read. dpbench compiles it against the running kernel's BTF
 * and registers it with `bpftool struct_ops register` (a plain
 * `.struct_ops` map: it stays registered after bpftool exits, until
 * `bpftool struct_ops unregister name kfcubic`).
 *
 * Per ACK the kernel calls pkts_acked and cong_avoid (it has no
 * cong_control, so PRR and the pacing rate stay the kernel's), cwnd_event
 * on transmit starts and delayed-ACK events.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

extern void cubictcp_init(struct sock *sk) __ksym;
extern __u32 cubictcp_recalc_ssthresh(struct sock *sk) __ksym;
extern void cubictcp_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern void cubictcp_state(struct sock *sk, __u8 new_state) __ksym;
extern void cubictcp_cwnd_event(struct sock *sk, enum tcp_ca_event event) __ksym;
extern void cubictcp_acked(struct sock *sk, const struct ack_sample *sample) __ksym;

SEC("struct_ops")
void BPF_PROG(kc_init, struct sock *sk)
{
	cubictcp_init(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(kc_ssthresh, struct sock *sk)
{
	return cubictcp_recalc_ssthresh(sk);
}

SEC("struct_ops")
void BPF_PROG(kc_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	cubictcp_cong_avoid(sk, ack, acked);
}

SEC("struct_ops")
void BPF_PROG(kc_set_state, struct sock *sk, __u8 new_state)
{
	cubictcp_state(sk, new_state);
}

SEC("struct_ops")
void BPF_PROG(kc_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	cubictcp_cwnd_event(sk, event);
}

SEC("struct_ops")
void BPF_PROG(kc_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	cubictcp_acked(sk, sample);
}

/* tcp_cubic.c has no undo_cwnd of its own: tcp_reno_undo_cwnd's rule */
SEC("struct_ops")
__u32 BPF_PROG(kc_undo_cwnd, struct sock *sk)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;

	return tp->snd_cwnd > tp->prior_cwnd ? tp->snd_cwnd : tp->prior_cwnd;
}

SEC(".struct_ops")
struct tcp_congestion_ops kfcubic = {
	.init = (void *)kc_init,
	.ssthresh = (void *)kc_ssthresh,
	.cong_avoid = (void *)kc_cong_avoid,
	.set_state = (void *)kc_set_state,
	.cwnd_event = (void *)kc_cwnd_event,
	.pkts_acked = (void *)kc_pkts_acked,
	.undo_cwnd = (void *)kc_undo_cwnd,
	.name = "kfcubic",
};
