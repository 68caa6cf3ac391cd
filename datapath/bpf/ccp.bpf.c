// SPDX-License-Identifier: GPL-2.0
/*
 * ccp.bpf.c: an eBPF struct_ops `tcp_congestion_ops` named "ccp".
 *
 * The kernel half of the ccp-datapath daemon (see ../src/bpf.rs):
 *   - every flow gets a flow id from a global counter, kept in icsk_ca_priv
 *     (bpf_get_socket_cookie is not allowed in struct_ops);
 *   - flow created / per-ACK measurements / flow released go to user space
 *     over the `events` ring buffer (layouts mirrored in ../src/wire.rs);
 *   - user space answers with a command (cwnd in bytes, pacing rate in
 *     bytes/s) in the `commands` hash map keyed by flow id; cong_control
 *     applies it on every ACK, but only while its `epoch` equals the flow's
 *     RTO count: after a retransmission timeout the flow sends from the
 *     kernel's loss window (the fallback, as tcp_enter_loss left it)
 *     until the algorithm has answered the timeout with a new command, so a
 *     stale cwnd (or rate) is never re-applied in a burst (RFC 5681 §3.1);
 *   - entries into Recovery and Loss (set_state, incl. RTOs and RACK's
 *     reorder timer) are sent at once as EV_STATE snapshots, and every event
 *     carries tp->lost, so user space sees every packet the kernel marks
 *     lost, not only the per-ACK rs->losses;
 *   - without a command, or when the daemon's heartbeat is older than
 *     `stale_after_ns` (the daemon stops stamping it while the algorithm is
 *     away, and a dead daemon stamps nothing), the flow runs the kernel's own
 *     CUBIC (tcp_cubic.c through its kfuncs, its state in icsk_ca_priv) so it
 *     never freezes (the struct_ops program keeps running for existing
 *     sockets even after the daemon is gone);
 *   - every live flow is listed in the `flows` map (identity, and cwnd and
 *     counters refreshed while the fallback runs), so user space can announce
 *     flows again to a restarted algorithm and resynchronize after lost
 *     ring-buffer records.
 *
 * vmlinux.h is generated at build time by build.rs from the running kernel's
 * BTF (bpftool btf dump file /sys/kernel/btf/vmlinux format c).
 * Needs clang -mcpu=v3 for the atomic fetch-add on the flow-id counter.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "fold_vm.h"

char LICENSE[] SEC("license") = "GPL";

/* Event kinds (ccp_event.kind); mirrored in wire.rs. */
#define EV_CREATE 1
#define EV_ACK 2
#define EV_RELEASE 3
#define EV_STATE 4   /* entry into Recovery / Loss (no ACK): a snapshot without a rate sample */
#define EV_GUARD 5   /* --fold kernel: the control guard took a flow from its program, or gave it back */

/* EV_GUARD causes (ccp_event.flags; wire.rs GuardCause) */
#define GUARD_RESUMED 0      /* the algorithm commands the flow again: handed back */
#define GUARD_NO_PROGRAM 1   /* the flow's program slot is empty (evicted, never installed) */
#define GUARD_ABORTING 2     /* its program aborts (overflow, underflow, division by zero) */
#define GUARD_SILENT 3       /* its program runs but nothing commands the flow */

/* ccp_priv.flags */
#define PRIV_PACED 1     /* we set sk_pacing_rate from a command */
#define PRIV_CMD_SEEN 2  /* a command has been applied at least once */
#define PRIV_FALLBACK 4  /* the last ACK ran the fallback (kernel cubic) */
#define PRIV_KERNEL_PACING 8 /* the socket came with TCP-internal pacing on: keep it, at the kernel's rate */
#define PRIV_IDLE 16     /* the fallback's last ACK left nothing in flight (ccp_priv.idle_lsndtime) */
#define PRIV_RTO_AWAIT 32 /* the algorithm's answer to an RTO is awaited (count_rto_await) */
#define USEC_PER_SEC_X8 8000000ULL /* us per s, times 8 (srtt_us is SRTT << 3) */

/* Event record, one layout for all kinds (unused fields are zero).
 * 152 bytes; wire.rs mirrors it (checked at build time from BTF). A release
 * (EV_RELEASE) carries the flow's control evidence in three fields:
 * delivered = tp->delivered, acked_sacked = ccp_priv.fallback_pkts,
 * sacked_out = ccp_priv.rto_await_pkts. */
struct ccp_event {
	__u32 kind;            /*   0 */
	__u32 flow_id;         /*   4 */
	__u64 ts_ns;           /*   8  bpf_ktime_get_ns (CLOCK_MONOTONIC) */
	/* flow identity (create) */
	__u32 saddr;           /*  16  IPv4, network byte order as in the kernel */
	__u32 daddr;           /*  20 */
	__u16 sport;           /*  24  host byte order */
	__u16 dport;           /*  26  host byte order */
	__u32 mss;             /*  28  tp->mss_cache, bytes */
	/* per-ACK snapshot (cumulative counters are deltas'd in user space) */
	__u64 bytes_acked;     /*  32  tp->bytes_acked (RFC 4898), cumulative */
	__s64 rtt_us;          /*  40  rs->rtt_us, -1 if no sample */
	__s64 interval_us;     /*  48  rs->interval_us */
	__s32 delivered;       /*  56  rs->delivered, packets */
	__u32 snd_interval_us; /*  60 */
	__u32 rcv_interval_us; /*  64 */
	__s32 losses;          /*  68  rs->losses, packets */
	__u32 acked_sacked;    /*  72  rs->acked_sacked, packets */
	__u32 sacked_out;      /*  76  packets */
	__u32 lost_out;        /*  80 */
	__u32 retrans_out;     /*  84 */
	__u32 packets_out;     /*  88 */
	__u32 snd_cwnd;        /*  92  packets (kernel's current) */
	__u32 write_seq;       /*  96 */
	__u32 snd_una;         /* 100 */
	__u32 ecn_bytes;       /* 104  cumulative bytes acked with ECE */
	__u32 timeouts;        /* 108  cumulative entries into TCP_CA_Loss */
	__u32 ca_state;        /* 112 */
	__u32 flags;           /* 116  ccp_priv.flags */
	__u64 pacing_rate;     /* 120  sk->sk_pacing_rate, bytes/s */
	__u32 lost;            /* 128  tp->lost: cumulative packets marked lost (any path) */
	__u32 app_limited;     /* 132  rs->is_app_limited (1/0) */
	/* flow identity for the rule table (create) */
	__u32 mark;            /* 136  sk->sk_mark */
	__u32 srtt_us;         /* 140  tp->srtt_us >> 3: what a missing RTT sample is held at before the first */
	__u64 cgroup_id;       /* 144  cgroup v2 id of the socket (its directory's inode), 0 if none */
};
_Static_assert(sizeof(struct ccp_event) == 152, "ccp_event layout");
/* Referenced by a global so clang emits the struct's BTF: build.rs reads
 * its layout from the object and wire.rs asserts its mirror against it. */
struct ccp_event *ccp_event_btf __attribute__((unused));

/* Command from user space (wire.rs Command). cwnd_bytes == 0: leave cwnd;
 * rate_bytes_per_sec == 0: no pacing. epoch: the flow's RTO count
 * (ccp_priv.timeouts) the command was made for; applied only while equal. */
struct ccp_cmd {
	__u32 cwnd_bytes;
	__u32 epoch;
	__u64 rate_bytes_per_sec;
};
_Static_assert(sizeof(struct ccp_cmd) == 16, "ccp_cmd layout");

/* icsk_ca_priv (13 u64s) holds the kernel cubic's `struct bictcp` first,
 * where tcp_cubic.c's kfuncs look for it (inet_csk_ca), then ours: bictcp
 * is 60 bytes (15 u32s, checked below against the kernel's BTF), and ours
 * needs every 4-byte word after it. */
#define CUBIC_PRIV_BYTES 60

/* Per-flow state in icsk_ca_priv, after cubic's. */
struct ccp_priv {
	__u32 flow_id;
	__u16 ca_state;		/* TCP_CA_* (< 8) */
	__u16 flags;		/* PRIV_* */
	__u32 ecn_bytes;
	__u32 timeouts;
	__u32 last_snd_una;
	__u32 fold_slot;	/* --fold kernel: the flow's slot in fold_flows (fold_ccp.h's) */
	__u32 idle_lsndtime;	/* PRIV_IDLE: tp->lsndtime (jiffies) when the pipe emptied */
	__u32 max_packets_out;	/* most packets in flight before an ACK that a command saw: the cwnd ceiling's base */
	__u32 fallback_pkts;	/* packets ACKed (rs->acked_sacked) while the fallback ran: who controlled the flow */
	__u32 rto_await_pkts;	/* of fallback_pkts, those ACKed while the algorithm's answer to an RTO was awaited (count_rto_await) */
	__u32 rto_await_since;	/* PRIV_RTO_AWAIT: fold_ctl_clock of the await's first ACK | 1; 0: no ACK yet */
};
_Static_assert(sizeof(struct bictcp) <= CUBIC_PRIV_BYTES, "bictcp fits before ccp_priv");
_Static_assert(CUBIC_PRIV_BYTES % _Alignof(struct ccp_priv) == 0, "ccp_priv aligned after bictcp");
_Static_assert(CUBIC_PRIV_BYTES + sizeof(struct ccp_priv) <=
	       sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv), "icsk_ca_priv too small");

/* A live flow as user space needs it to announce it again (to a restarted
 * algorithm, or after its create record was lost). wire.rs mirrors it. */
struct ccp_flow_info {
	__u32 saddr;           /*  0  IPv4, network byte order */
	__u32 daddr;           /*  4 */
	__u16 sport;           /*  8  host byte order */
	__u16 dport;           /* 10  host byte order */
	__u32 mss;             /* 12  bytes */
	__u32 snd_cwnd;        /* 16  packets: at init, then refreshed on every fallback ACK */
	__u32 mark;            /* 20  sk->sk_mark */
	__u64 cgroup_id;       /* 24 */
	__u64 bytes_acked;     /* 32  as snd_cwnd */
	__u32 lost;            /* 40  as snd_cwnd */
	__u32 _pad;            /* 44 */
};
_Static_assert(sizeof(struct ccp_flow_info) == 48, "ccp_flow_info layout");
struct ccp_flow_info *ccp_flow_info_btf __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);	/* flow id */
	__type(value, struct ccp_flow_info);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct ccp_cmd);
} commands SEC(".maps");

/* Configuration, set by user space before load. */
const volatile __u64 wake_interval_ns = 200000;    /* force a wakeup at most this often */
const volatile __u64 stale_after_ns = 500000000;   /* heartbeat age that means "daemon gone" */
/* The control guard (--fold kernel, control_guard below): a flow not
 * commanded for max(CTL_GUARD_RTTS x SRTT, ctl_guard_floor_ns) runs the
 * fallback until the algorithm commands it again (--control-timeout-ms). */
const volatile __u64 ctl_guard_floor_ns = 250000000;

/* 1: fold programs run here, per ACK (--fold kernel, fold_ccp.h); only
 * create/release/state events and reports go to user space. 0: every ACK
 * goes to user space, where libccp runs them (--fold userspace). */
const volatile __u32 fold_in_kernel = 0;

/* Written by user space through the mmaped .bss (every few ms, not every
 * loop iteration: each write costs every CPU that reads it a cache miss)
 * while the algorithm is present; 0 while it is away. */
__u64 heartbeat_ns = 0;
/* Bumped by user space when the algorithm went away or a new one started:
 * what a flow's fold program was told before is stale (fold_ccp.h). */
__u32 ctl_epoch = 0;
__u32 next_flow_id = 0;
__u64 last_wake_ns = 0;

/* Statistics, read by user space (summed over CPUs): per CPU, in
 * fold_ccp.h's fold_counters value, after its own (one line per ACK). */
#define FOLD_INCLUDER_COUNTERS \
	__u64 dropped_events;	\
	__u64 fallback_acks;	\
	__u64 command_acks;	\
	__u64 stale_command_acks;	\
	__u64 guard_fallbacks;	\
	__u64 cwnd_clamped;	\
	__u64 rate_floored;	\
	__u64 rto_await_acks;

/* tcp_input.c's FLAG_ECE (a #define, not in BTF): the ACK carried ECE. */
#define TCP_ACK_FLAG_ECE 0x40

/* The kernel's CUBIC (net/ipv4/tcp_cubic.c), exported to struct_ops as kfuncs. */
extern void cubictcp_init(struct sock *sk) __ksym;
extern __u32 cubictcp_recalc_ssthresh(struct sock *sk) __ksym;
extern void cubictcp_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern void cubictcp_state(struct sock *sk, __u8 new_state) __ksym;
extern void cubictcp_acked(struct sock *sk, const struct ack_sample *sample) __ksym;

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct ccp_priv *ca_priv(const struct sock *sk)
{
	return (void *)((char *)((struct inet_connection_sock *)sk)->icsk_ca_priv + CUBIC_PRIV_BYTES);
}

static __always_inline struct bictcp *cubic_priv(const struct sock *sk)
{
	return (void *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

/* The socket's cgroup v2 id (the id `stat -c %i` shows for its directory). */
static __always_inline __u64 sk_cgroup_id(const struct sock *sk)
{
	struct cgroup *cg = sk->sk_cgrp_data.cgroup;

	return cg ? cg->kn->id : 0;
}

/* Wake the consumer at most every wake_interval_ns: per-ACK wakeups cost
 * 7-20 us each in this VM, BPF_RB_NO_WAKEUP 0.3-0.5 us (docs/NOTES.md); the
 * daemon also polls with a 1 ms timeout, which bounds the delay of records
 * submitted without a wakeup. */
static __always_inline __u64 wake_flag(__u64 now)
{
	if (now - last_wake_ns >= wake_interval_ns) {
		last_wake_ns = now;
		return BPF_RB_FORCE_WAKEUP;
	}
	return BPF_RB_NO_WAKEUP;
}

/* --fold kernel (fold_ccp.h): a non-urgent report wakes the daemon only
 * when the daemon has not promised to look anyway. A forced wakeup costs
 * 20-30 us of BPF time inside the ACK's program here (measured: 16 us per
 * cong_control on average when every report forced one at ~8k ACKs/s, a
 * per-RTT report being a per-ACK report on a veth). last_report_look_ns is
 * the promise "the daemon looks again by then + report_wake_ns"
 * (--report-wake-ms, src/wake.rs): the daemon stamps it when a look found
 * reports and zeroes it when one found none; a forced wakeup stamps it too,
 * so the reports right after it wait for the look it brings. Reports after
 * a loss or timeout always wake it. The stamp has a data section (a map) of
 * its own: it must not share the cache line every ACK reads the heartbeat
 * from. The read is an atomic add of 0, a full barrier: the daemon zeroes
 * the stamp, then looks at the ring once more (src/daemon.rs); with the
 * barrier on both sides a report either sees the zero or is seen by that
 * look. */
const volatile __u64 report_wake_ns = 20000000;
/* A prompt flow's report (one of several per RTT: a per-ACK program, or a
 * timer short against the RTT, fold_report_prompt) waits at most this long
 * for the promised look instead (--report-prompt-us): on a 50 ms path a
 * per-ACK reporter's reports used to wait for the 20 ms window (its
 * report-to-cwnd p99 was 17.2 ms), where ccp-kernel delivers each at once.
 * Forced wakeups stay at most one per this interval, whatever the number of
 * prompt flows (the wakeup stamps the promise); per-RTT programs are never
 * prompt and keep the window. */
const volatile __u64 report_prompt_ns = 1000000;
__u64 last_report_look_ns SEC(".data.report_wake") = 0;

static __always_inline __u64 report_wake_flag(__u64 now, int prompt)
{
	__u64 promised = __sync_fetch_and_add(&last_report_look_ns, 0);

	if (now - promised >= (prompt ? report_prompt_ns : report_wake_ns)) {
		last_report_look_ns = now;	/* racing CPUs may both wake it: harmless */
		return BPF_RB_FORCE_WAKEUP;
	}
	return BPF_RB_NO_WAKEUP;
}
#define FOLD_REPORT_WAKE_FLAGS(now, prompt) report_wake_flag(now, prompt)
#define FOLD_FLUSH_INCLUDER(cnt, n) ((cnt)->command_acks += (n))
#define FOLD_CTL_EPOCH ctl_epoch
#define FOLD_SLOT_PRIV_OFFSET (CUBIC_PRIV_BYTES + __builtin_offsetof(struct ccp_priv, fold_slot))
#include "fold_ccp.h"

static __always_inline struct fold_counters *counters(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&fold_counters, &zero);
}

static __always_inline struct ccp_event *reserve_event(__u32 kind, __u32 flow_id, __u64 now)
{
	struct ccp_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);

	if (!ev) {
		struct fold_counters *c = counters();

		if (c)
			c->dropped_events++;
		return NULL;
	}
	__builtin_memset(ev, 0, sizeof(*ev));
	ev->kind = kind;
	ev->flow_id = flow_id;
	ev->ts_ns = now;
	return ev;
}

/* What tcp_update_pacing_rate() does for CCAs without cong_control (which
 * TCP skips once cong_control is set): 200% of cwnd/SRTT in slow start, 120%
 * after, capped by SO_MAX_PACING_RATE. It only limits sending where pacing is
 * active: an fq qdisc, or TCP-internal pacing the socket came with
 * (PRIV_KERNEL_PACING). */
static __always_inline void kernel_like_pacing(struct sock *sk, struct tcp_sock *tp)
{
	__u64 srtt = tp->srtt_us;	/* SRTT << 3, in us */
	__u64 rate;

	if (!srtt)
		return;
	rate = (__u64)tp->mss_cache * USEC_PER_SEC_X8;
	rate *= tp->snd_cwnd < tp->snd_ssthresh / 2 ? 200 : 120;
	rate *= tp->snd_cwnd > tp->packets_out ? tp->snd_cwnd : tp->packets_out;
	rate /= 100 * srtt;
	if (rate > sk->sk_max_pacing_rate)
		rate = sk->sk_max_pacing_rate;
	sk->sk_pacing_rate = rate;
}

SEC("struct_ops")
void BPF_PROG(ccp_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct ccp_priv *ca = ca_priv(sk);
	__u64 now = bpf_ktime_get_ns();
	struct ccp_flow_info info = {};
	struct ccp_event *ev;
	__u32 id;

	ca->flow_id = __sync_fetch_and_add(&next_flow_id, 1) + 1;
	ca->ca_state = 0;
	ca->ecn_bytes = 0;
	ca->timeouts = 0;
	ca->last_snd_una = tp->snd_una;
	ca->flags = 0;
	ca->fold_slot = FOLD_NO_SLOT;
	ca->max_packets_out = 0;
	ca->fallback_pkts = 0;
	ca->rto_await_pkts = 0;
	ca->rto_await_since = 0;
	cubictcp_init(sk);	/* the fallback's state, ready whenever it is needed */
	/* A CA set before us (e.g. bbr, the namespace default, before iperf3's
	 * TCP_CONGESTION) may have left TCP-internal pacing on. The kernel keeps
	 * it for reno or cubic on such a socket and paces at
	 * tcp_update_pacing_rate's rate; so do we (kernel_like_pacing on every
	 * ACK without a commanded rate), from now on, not at the old CA's rate. */
	if (sk->sk_pacing_status == SK_PACING_NEEDED) {
		ca->flags |= PRIV_KERNEL_PACING;
		kernel_like_pacing(sk, tp);
	}
	if (fold_in_kernel)
		fold_flow_start(sk, ca->flow_id, ca->timeouts);

	info.saddr = sk->__sk_common.skc_rcv_saddr;
	info.daddr = sk->__sk_common.skc_daddr;
	info.sport = sk->__sk_common.skc_num;
	info.dport = bpf_ntohs(sk->__sk_common.skc_dport);
	info.mss = tp->mss_cache;
	info.snd_cwnd = tp->snd_cwnd;
	info.mark = sk->sk_mark;
	info.cgroup_id = sk_cgroup_id(sk);
	info.bytes_acked = tp->bytes_acked;
	info.lost = tp->lost;
	id = ca->flow_id;	/* map keys must be on the stack, not in the socket */
	bpf_map_update_elem(&flows, &id, &info, BPF_ANY);

	ev = reserve_event(EV_CREATE, ca->flow_id, now);
	if (!ev)
		return;
	ev->mark = info.mark;
	ev->cgroup_id = info.cgroup_id;
	ev->saddr = sk->__sk_common.skc_rcv_saddr;
	ev->daddr = sk->__sk_common.skc_daddr;
	ev->sport = sk->__sk_common.skc_num;
	ev->dport = bpf_ntohs(sk->__sk_common.skc_dport);
	ev->mss = tp->mss_cache;
	ev->snd_cwnd = tp->snd_cwnd;
	ev->bytes_acked = tp->bytes_acked;
	ev->write_seq = tp->write_seq;
	ev->snd_una = tp->snd_una;
	ev->lost = tp->lost;
	ev->flags = ca->flags;
	bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP);
}

SEC("struct_ops")
void BPF_PROG(ccp_release, struct sock *sk)
{
	struct ccp_priv *ca = ca_priv(sk);
	__u32 id = ca->flow_id;
	struct ccp_event *ev;

	bpf_map_delete_elem(&commands, &id);
	bpf_map_delete_elem(&flows, &id);
	fold_flow_end(sk, id);
	ev = reserve_event(EV_RELEASE, id, bpf_ktime_get_ns());
	if (ev) {
		/* the flow's control evidence: packets delivered in all,
		 * ACKed while the fallback ran, and of those, ACKed while the
		 * algorithm's answer to an RTO was awaited */
		ev->delivered = tcp_sk(sk)->delivered;
		ev->acked_sacked = ca->fallback_pkts;
		ev->sacked_out = ca->rto_await_pkts;
		bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP);
	}
}

/* Slow start threshold: under the fallback, kernel cubic's (beta 0.7, fast
 * convergence); under the algorithm half the cwnd, at least 2 (as Reno and
 * ccp-kernel; the algorithm sets cwnd itself after the loss report). */
SEC("struct_ops")
__u32 BPF_PROG(ccp_ssthresh, struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	__u32 half = tp->snd_cwnd >> 1;

	if (ca_priv(sk)->flags & PRIV_FALLBACK)
		return cubictcp_recalc_ssthresh(sk);
	return half > 2 ? half : 2;
}


/* Undo a spurious reduction: back to the cwnd before it (as tcp_reno_undo_cwnd). */
SEC("struct_ops")
__u32 BPF_PROG(ccp_undo_cwnd, struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	return tp->snd_cwnd > tp->prior_cwnd ? tp->snd_cwnd : tp->prior_cwnd;
}

static __always_inline void fill_snapshot(struct ccp_event *ev, struct sock *sk, struct tcp_sock *tp,
					  struct ccp_priv *ca)
{
	ev->mss = tp->mss_cache;
	ev->bytes_acked = tp->bytes_acked;
	ev->sacked_out = tp->sacked_out;
	ev->lost_out = tp->lost_out;
	ev->retrans_out = tp->retrans_out;
	ev->packets_out = tp->packets_out;
	ev->snd_cwnd = tp->snd_cwnd;
	ev->write_seq = tp->write_seq;
	ev->snd_una = tp->snd_una;
	ev->ecn_bytes = ca->ecn_bytes;
	ev->timeouts = ca->timeouts;
	ev->ca_state = ca->ca_state;
	ev->flags = ca->flags;
	ev->pacing_rate = sk->sk_pacing_rate;
	ev->lost = tp->lost;
	ev->srtt_us = tp->srtt_us >> 3;
}

/* An RTO makes the algorithm's cwnd/rate updates staged before it stale:
 * without ACKs during an outage they would otherwise be applied by the first
 * invocation after the RTO and taken for the algorithm's answer to it. */
static __always_inline void drop_staged_controls(__u32 flow_id)
{
	struct fold_staged_entry *e = bpf_map_lookup_elem(&fold_staged, &flow_id);

	if (!e)
		return;
	bpf_spin_lock(&e->lock);
	e->sg.flags &= ~(FOLD_STAGED_CWND | FOLD_STAGED_RATE);
	bpf_spin_unlock(&e->lock);
}

/* Entries into Recovery (fast retransmit, RACK) and Loss (RTO) reach user
 * space at once, without waiting for the next ACK (an RTO has none). */
SEC("struct_ops")
void BPF_PROG(ccp_set_state, struct sock *sk, __u8 new_state)
{
	struct ccp_priv *ca = ca_priv(sk);
	struct ccp_event *ev;
	__u8 old = ca->ca_state;

	cubictcp_state(sk, new_state);	/* an RTO resets cubic's epoch */
	if (new_state == TCP_CA_Loss && old != TCP_CA_Loss) {
		ca->timeouts++;
		/* the algorithm's answer is awaited if it commanded the flow
		 * until now, or if its answer to an earlier RTO still is
		 * (within that await's bound): a flow the fallback already ran
		 * for another reason, or that no command reached yet, awaits
		 * nothing new */
		if ((ca->flags & (PRIV_CMD_SEEN | PRIV_FALLBACK)) == PRIV_CMD_SEEN ||
		    (ca->flags & PRIV_RTO_AWAIT)) {
			ca->flags |= PRIV_RTO_AWAIT;
			ca->rto_await_since = 0;
		}
		if (ca->flow_id)
			drop_staged_controls(ca->flow_id);
	}
	ca->ca_state = new_state;
	if (!ca->flow_id || new_state == old ||
	    (new_state != TCP_CA_Loss && new_state != TCP_CA_Recovery))
		return;
	ev = reserve_event(EV_STATE, ca->flow_id, bpf_ktime_get_ns());
	if (!ev)
		return;
	fill_snapshot(ev, sk, tcp_sk(sk), ca);
	ev->rtt_us = -1;
	bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP);
}

/* ECN accounting like ccp-kernel's in_ack_event: bytes newly acked by an ACK
 * carrying ECE. Done in cong_control from tcp_ack's flag rather than in an
 * in_ack_event op: that op also runs for every data segment a receiving
 * socket gets (5x the ACKs in a bulk transfer), each call a BPF trampoline.
 * Every ACK that moves snd_una reaches cong_control. */
static __always_inline void account_ecn(const struct tcp_sock *tp, struct ccp_priv *ca, int flag)
{
	__u32 acked = tp->snd_una - ca->last_snd_una;

	ca->last_snd_una = tp->snd_una;
	if (flag & TCP_ACK_FLAG_ECE)
		ca->ecn_bytes += acked;
}

static __always_inline void emit_ack(struct sock *sk, struct tcp_sock *tp, struct ccp_priv *ca,
				     const struct rate_sample *rs, __u64 now)
{
	struct ccp_event *ev = reserve_event(EV_ACK, ca->flow_id, now);

	if (!ev)
		return;
	fill_snapshot(ev, sk, tp, ca);
	ev->rtt_us = rs->rtt_us;
	ev->interval_us = rs->interval_us;
	ev->delivered = rs->delivered;
	ev->snd_interval_us = rs->snd_interval_us;
	ev->rcv_interval_us = rs->rcv_interval_us;
	ev->losses = rs->losses;
	ev->acked_sacked = rs->acked_sacked;
	ev->app_limited = rs->is_app_limited ? 1 : 0;
	/* Losses, an RTO or a recovery entry: wake user space at once. */
	bpf_ringbuf_submit(ev, rs->losses > 0 ? BPF_RB_FORCE_WAKEUP : wake_flag(now));
}

/* The algorithm stopped commanding a rate (or went away): back to the
 * pacing the socket came with, the kernel's, or none. */
static __always_inline void stop_commanded_pacing(struct sock *sk, struct ccp_priv *ca)
{
	/* SO_MAX_PACING_RATE set later also asked for pacing (sock_setsockopt) */
	if ((ca->flags & PRIV_KERNEL_PACING) || sk->sk_max_pacing_rate != ~0UL)
		sk->sk_pacing_status = SK_PACING_NEEDED;
	else
		sk->sk_pacing_status = SK_PACING_NONE;
	ca->flags &= ~PRIV_PACED;
}

/* The largest cwnd a command may set, packets: twice the most packets the
 * flow has had in flight under commands (counted before each ACK: after it,
 * a flow whose every ACK covers half its window, as a receiver that reads in
 * big batches sends, never shows more than half, and twice that would hold
 * the window where it stands), and at least 256 (a flow that
 * paces itself or sends little never fills its cwnd: a fixed 40-packet
 * window with SO_MAX_PACING_RATE at a quarter of the link never had more
 * than 10 in flight, and 2x that overruled its algorithm for nothing). A cwnd beyond what the flow ever filled cannot be a measured
 * answer: nimbus, reading a missing RTT as 4294967295, once commanded
 * u32::MAX bytes and the socket's cwnd became 2,966,137 packets with 806
 * in flight. Twice lets an algorithm double its window per RTT, as slow
 * start does: the ceiling rises as the flow fills what it was given. */
#define CWND_CEILING_MIN_PKTS 256
static __always_inline __u32 cwnd_ceiling(__u32 max_packets_out)
{
	__u32 c = max_packets_out < 0x7fffffffU ? 2 * max_packets_out : 0xffffffffU;

	return c > CWND_CEILING_MIN_PKTS ? c : CWND_CEILING_MIN_PKTS;
}

/* The lowest pacing rate a command gets, bytes/s: one MSS per half the
 * control guard's floor. Everything here, the control guard included, runs
 * on ACKs; a commanded rate of a few bytes a second (a fold program can set
 * Rate to anything) would space them minutes apart, and with nothing in
 * flight no timer fires either: the flow would keep that rate for good. */
static __always_inline __u64 pacing_floor(__u32 mss)
{
	__u64 gap_ns = ctl_guard_floor_ns / 2;

	return gap_ns ? (__u64)mss * 1000000000ULL / gap_ns : 0;
}

static __always_inline void apply_command(struct sock *sk, struct tcp_sock *tp, struct ccp_priv *ca,
					  const struct rate_sample *rs, const struct ccp_cmd *cmd)
{
	__u32 mss = tp->mss_cache ? tp->mss_cache : 1;

	if (cmd->cwnd_bytes) {
		/* bytes -> packets, as ccp-kernel's do_set_cwnd; at least 1 */
		__u32 cwnd = cmd->cwnd_bytes / mss;
		/* in flight before this ACK (tcp_ack's prior_in_flight) */
		__u32 filled = rs->prior_in_flight > tp->packets_out ? rs->prior_in_flight : tp->packets_out;
		__u32 ceiling;

		if (filled > ca->max_packets_out)
			ca->max_packets_out = filled;
		ceiling = cwnd_ceiling(ca->max_packets_out);
		if (cwnd < 1)
			cwnd = 1;
		if (cwnd > ceiling) {
			struct fold_counters *c = counters();

			cwnd = ceiling;
			if (c)
				c->cwnd_clamped++;
		}
		if (cwnd > tp->snd_cwnd_clamp)
			cwnd = tp->snd_cwnd_clamp;
		tp->snd_cwnd = cwnd;
	}
	if (cmd->rate_bytes_per_sec) {
		__u64 rate = cmd->rate_bytes_per_sec, floor = pacing_floor(mss);

		if (rate < floor) {
			struct fold_counters *c = counters();

			rate = floor;
			if (c)
				c->rate_floored++;
		}
		/* cong_control owners must pace themselves: TCP-internal pacing */
		sk->sk_pacing_rate = rate;
		sk->sk_pacing_status = SK_PACING_NEEDED;
		ca->flags |= PRIV_PACED;
	} else {
		if (ca->flags & PRIV_PACED)
			stop_commanded_pacing(sk, ca);
		kernel_like_pacing(sk, tp);
	}
	ca->flags |= PRIV_CMD_SEEN;
	ca->flags &= ~PRIV_FALLBACK;
}

/* Keep the flow's `flows` entry current while nobody else knows its cwnd:
 * a restarted algorithm is told where the fallback left it. */
static __always_inline void refresh_flow_info(struct tcp_sock *tp, __u32 flow_id)
{
	struct ccp_flow_info *info = bpf_map_lookup_elem(&flows, &flow_id);

	if (!info)
		return;
	info->snd_cwnd = tp->snd_cwnd;
	info->bytes_acked = tp->bytes_acked;
	info->lost = tp->lost;
}

/* cubic's delay_min and HyStart (its pkts_acked), fed only while the
 * fallback runs (HyStart would otherwise move ssthresh under the
 * algorithm's feet). Called from cong_control rather than from a
 * pkts_acked op: tcp_clean_rtx_queue builds its ack_sample's RTT from the
 * same rate sample (sample.rtt_us = rs->rtt_us; cubictcp_acked reads
 * nothing else) just before cong_control runs, and an op costs every ACK a
 * trampoline call (40-70 ns measured) even when it returns at once. */
static __always_inline void feed_cubic_delay(struct sock *sk, const struct rate_sample *rs)
{
	struct ack_sample sample = { .rtt_us = rs->rtt_us };

	cubictcp_acked(sk, &sample);
}

/* CONFIG_HZ (jiffies per second), 0 when libbpf finds no kernel config. */
extern unsigned int CONFIG_HZ __kconfig __weak;

/* Packets in flight, as include/net/tcp.h's tcp_packets_in_flight. */
static __always_inline __u32 tcp_packets_in_flight(const struct tcp_sock *tp)
{
	return tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
}

/*
 * cubic's idle restart, without a cwnd_event op: an op costs every call a
 * trampoline (docs/NOTES.md), and a paced flow empties its pipe, and so
 * restarts, on many of its ACKs (the op cost 60-160 ns per ACK).
 * tcp_cubic.c (cubictcp_cwnd_event) moves the epoch on by the idle time
 * when the first packet after it is sent (CA_EVENT_TX_START: delta =
 * jiffies - lsndtime, the last send before the idle). Here the ACK that
 * leaves nothing in flight notes lsndtime, and the next ACK, which acks
 * what the restart sent, moves the epoch before cubic grows the window.
 * The restart is no later than either of two times this ACK knows: the
 * last send (lsndtime now) and the send time of the newest packet it acks
 * (now - its RTT); the earlier is taken. A restart right after the
 * emptying ACK, or an application's write of less than a window, makes it
 * the restart to within a jiffy.
 */
static __always_inline void cubic_note_idle(const struct tcp_sock *tp, struct ccp_priv *ca)
{
	if (tcp_packets_in_flight(tp) == 0) {
		ca->flags |= PRIV_IDLE;
		ca->idle_lsndtime = tp->lsndtime;
	}
}

static __always_inline void cubic_restart_after_idle(struct sock *sk, const struct tcp_sock *tp,
						     struct ccp_priv *ca, const struct rate_sample *rs)
{
	struct bictcp *cubic = cubic_priv(sk);
	__u32 now = (__u32)bpf_jiffies64();
	__u32 restart = tp->lsndtime;
	__s32 delta;

	ca->flags &= ~PRIV_IDLE;
	if (CONFIG_HZ && rs->rtt_us >= 0) {
		__u32 newest_sent = now - (__u32)((__u64)rs->rtt_us * CONFIG_HZ / 1000000);

		if ((__s32)(newest_sent - restart) < 0)
			restart = newest_sent;
	}
	delta = (__s32)(restart - ca->idle_lsndtime);
	if (cubic->epoch_start && delta > 0) {
		cubic->epoch_start += delta;
		if ((__s32)(cubic->epoch_start - now) > 0)	/* after(epoch_start, now) */
			cubic->epoch_start = now;
	}
}

/* The fallback: the kernel's own CUBIC. During a cwnd reduction
 * (Recovery/CWR) cwnd is held at ssthresh (the kernel's PRR is skipped when
 * cong_control is set), otherwise cubictcp_cong_avoid grows it, only while
 * cwnd-limited (it checks). Taking over from the algorithm, cubic starts a
 * fresh epoch at the algorithm's cwnd in congestion avoidance: no slow start
 * from a cwnd the algorithm already sized to the path. */
static __always_inline void fallback(struct sock *sk, struct tcp_sock *tp, struct ccp_priv *ca,
				     __u32 ack, const struct rate_sample *rs)
{
	ca->fallback_pkts += rs->acked_sacked;
	if (!(ca->flags & PRIV_FALLBACK)) {
		ca->flags |= PRIV_FALLBACK;
		ca->flags &= ~PRIV_IDLE;	/* noted by an earlier spell of the fallback */
		if (ca->flags & PRIV_CMD_SEEN) {
			cubic_priv(sk)->epoch_start = 0;
			if (tp->snd_ssthresh > tp->snd_cwnd)
				tp->snd_ssthresh = tp->snd_cwnd > 2 ? tp->snd_cwnd : 2;
		}
	}
	if (ca->flags & PRIV_PACED)
		stop_commanded_pacing(sk, ca);
	feed_cubic_delay(sk, rs);
	kernel_like_pacing(sk, tp);
	if (ca->flags & PRIV_IDLE)
		cubic_restart_after_idle(sk, tp, ca, rs);
	if (ca->ca_state == TCP_CA_Recovery || ca->ca_state == TCP_CA_CWR) {
		__u32 target = tp->snd_ssthresh > 2 ? tp->snd_ssthresh : 2;

		if (tp->snd_cwnd > target)
			tp->snd_cwnd = target;
	} else {
		cubictcp_cong_avoid(sk, ack, rs->acked_sacked);
	}
	cubic_note_idle(tp, ca);
	if (ca->flow_id)
		refresh_flow_info(tp, ca->flow_id);	/* by value: a stack key */
}

/* --fold kernel: compiled main sections (src/fold/jit.rs), one per program
 * slot, and at FOLD_JIT_POST the second half of cong_control
 * (ccp_fold_post), which every compiled section tail-calls when it is done.
 * A slot without a compiled section (none loaded, or the compiler declined
 * the program) makes the tail call fall through to the interpreter. */
#define FOLD_JIT_POST 0		/* slot 0 is never a program's */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, FOLD_MAX_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} fold_jit SEC(".maps");

/* Tail call into the flow's compiled main section, with a constant index
 * per program slot: the JIT turns a constant-index tail call into a direct
 * jump, which the kernel re-patches whenever the slot's entry changes, where
 * a computed index reads the program array and the target's bpf_prog first
 * (two cold lines and a page on a paced ACK). Returns only when the slot
 * has no compiled section. */
#define FOLD_JIT_CASE(n) case n: bpf_tail_call_static(ctx, &fold_jit, n); break
static __always_inline void fold_enter_compiled(void *ctx, __u32 slot)
{
	switch (slot) {
	FOLD_JIT_CASE(1); FOLD_JIT_CASE(2); FOLD_JIT_CASE(3); FOLD_JIT_CASE(4); FOLD_JIT_CASE(5);
	FOLD_JIT_CASE(6); FOLD_JIT_CASE(7); FOLD_JIT_CASE(8); FOLD_JIT_CASE(9); FOLD_JIT_CASE(10);
	FOLD_JIT_CASE(11); FOLD_JIT_CASE(12); FOLD_JIT_CASE(13); FOLD_JIT_CASE(14); FOLD_JIT_CASE(15);
	}
}
#undef FOLD_JIT_CASE
_Static_assert(FOLD_MAX_SLOTS == 16, "fold_enter_compiled has a case for every program slot");

/* The control guard (--fold kernel). The heartbeat proves the daemon and the
 * algorithm's process alive, not that anything still commands this flow: a
 * program evicted from the table, one that aborts on every invocation, or
 * one that only echoes the cwnd it was seeded with while its reports go
 * unanswered, would hold the flow at its last cwnd for good. So a flow whose
 * program has not been commanded (fold_ctl_commanded) for
 * max(CTL_GUARD_RTTS x SRTT, ctl_guard_floor_ns) runs the fallback, and the
 * daemon logs why at warn (EV_GUARD); the guard forgets what the algorithm
 * asked for, as after an RTO, so the flow is handed back when the algorithm
 * sends it something (FOLD_CTL_ALG_SPOKE) and commands anew (fold_ack_end's
 * `awaiting`); the program's own Cwnd alone does not (a program holding a
 * constant Cwnd took the flow back at once). CTL_GUARD_RTTS: the suite's
 * algorithms answer every report (one per RTT, or per two), but skip up to 7
 * repeated answers in a row (algorithms/src/repeats.rs): 8 reports, up to 16
 * RTTs. The floor covers an algorithm's own latency on short paths.
 * App-limited ACKs restart the clock: a flow that does not fill its cwnd is
 * not held by it, and its programs may report only once a second; unless a
 * pacing rate is commanded, which can hold a flow the kernel calls
 * app-limited (its whole send buffer sent, the retransmissions it waits on
 * paced at a fuzzed rate of 8 packets a second: held in Recovery at cwnd 25
 * for 3 s, the guard restarting at every ACK). So does the first ACK after
 * a silence longer than twice the floor (fold_ack_begin): without ACKs
 * there is no report to answer. */
#define CTL_GUARD_RTTS 16
static __always_inline void guard_event(struct tcp_sock *tp, __u32 flow_id, __u32 cause, __u64 bound_ns,
					__u64 now)
{
	struct ccp_event *ev = reserve_event(EV_GUARD, flow_id, now);

	if (!ev)
		return;
	ev->flags = cause;
	ev->snd_cwnd = tp->snd_cwnd;
	ev->interval_us = bound_ns / 1000;
	bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP);
}

/* The guard's bound for this flow, ns: max(CTL_GUARD_RTTS x SRTT, floor). */
static __always_inline __u64 ctl_guard_bound(const struct tcp_sock *tp)
{
	__u64 bound = (__u64)(tp->srtt_us >> 3) * 1000 * CTL_GUARD_RTTS;

	return bound < ctl_guard_floor_ns ? ctl_guard_floor_ns : bound;
}

/* 1: the algorithm keeps the flow; 0: run the fallback (the guard took it). */
static __always_inline int control_guard(struct tcp_sock *tp, struct ccp_priv *ca, struct fold_flow *ff,
					 const struct rate_sample *rs, __u64 now)
{
	__u32 seen = ff->ctl_seen, clock = fold_ctl_clock(now), cause;
	__u64 bound = ctl_guard_bound(tp);
	struct fold_counters *c;
	int ret;

	if (seen & FOLD_CTL_GUARDED) {
		if (!(seen & FOLD_CTL_ALG_SPOKE)) {
			/* the program's own Cwnd, not the algorithm: keep the flow */
			ff->awaiting = 1;
			ff->req_cwnd = 0;
			ff->req_rate = 0;
			return 0;
		}
		/* fold_ack_end gave control back: the algorithm commanded anew */
		ff->ctl_seen = clock;
		guard_event(tp, ca->flow_id, GUARD_RESUMED, bound, now);
		return 1;
	}
	if (rs->is_app_limited && !ff->req_rate) {
		ff->ctl_seen = clock | (seen & FOLD_CTL_ALG_SPOKE);
		return 1;
	}
	if (((__u64)(__u32)(clock - (seen & ~FOLD_CTL_FLAGS)) << 10) <= bound)
		return 1;
	ret = ff->pend.res.ret;
	if (ret == FOLD_ERR_PROG_IS_NULL)
		cause = GUARD_NO_PROGRAM;
	else if (ret >= FOLD_ERR_SUB_UNDERFLOW && ret <= FOLD_ERR_ADD_OVERFLOW)
		cause = GUARD_ABORTING;
	else
		cause = GUARD_SILENT;
	ff->ctl_seen = clock | FOLD_CTL_GUARDED;	/* and not FOLD_CTL_ALG_SPOKE */
	ff->awaiting = 1;
	ff->req_cwnd = 0;
	ff->req_rate = 0;
	c = counters();
	if (c)
		c->guard_fallbacks++;
	guard_event(tp, ca->flow_id, cause, bound, now);
	return 0;
}

/*
 * rto_await: a fallback ACK that came while the algorithm's answer to an RTO
 * was awaited (PRIV_RTO_AWAIT, set by ccp_set_state), with the algorithm
 * present. After an RTO the command made before it is stale, and the
 * kernel's loss window stands, grown by the fallback as the kernel would,
 * until the algorithm answers: what any datapath does (ccp-kernel too),
 * since no algorithm can answer an RTO before it hears of it. The ACKs that
 * arrive meanwhile (after an outage, a burst that lasts about the round
 * trip to the algorithm) are counted apart (rto_await_pkts, rto_await_acks)
 * so the runner can tell them from a fallback that ran for want of an
 * algorithm. Bounded: the await ends with the algorithm's first valid
 * command, and at the latest the control guard's bound (ctl_guard_bound)
 * after its first ACK; later ACKs on the fallback are plain fallback, so an
 * algorithm that never answers an RTO gets its flow counted as the
 * fallback's. Counts only: the caller has run the fallback either way.
 */
static __always_inline void count_rto_await(const struct tcp_sock *tp, struct ccp_priv *ca,
					    const struct rate_sample *rs, __u64 now, struct fold_counters *c)
{
	__u32 clock = fold_ctl_clock(now), since = ca->rto_await_since;

	if (!(ca->flags & PRIV_RTO_AWAIT))
		return;
	if (!since) {
		ca->rto_await_since = clock | 1;
	} else if (((__u64)(__u32)(clock - (since & ~FOLD_CTL_FLAGS)) << 10) > ctl_guard_bound(tp)) {
		ca->flags &= ~PRIV_RTO_AWAIT;
		return;
	}
	ca->rto_await_pkts += rs->acked_sacked;
	if (c)
		c->rto_await_acks++;
}

/* --fold kernel, after the flow's main section returned `err`: what the
 * algorithm set is applied while the daemon's heartbeat is fresh (it
 * forwards the reports) and the control guard keeps the flow with it, else
 * the fallback runs. */
static __always_inline void fold_cong_control_end(struct sock *sk, struct tcp_sock *tp, struct ccp_priv *ca,
						  __u32 ack, const struct rate_sample *rs,
						  struct fold_flow *ff, int err, int compiled)
{
	struct fold_counters *c;
	struct ccp_cmd cmd = {};
	int alg = 0, fresh = 0;
	__u64 now = 0, hb;

	if (ff) {
		alg = fold_ack_end(ff, ca->flow_id, err, compiled, tp->mss_cache, pacing_floor(tp->mss_cache),
				   &cmd.cwnd_bytes, &cmd.rate_bytes_per_sec);
		now = fold_ack_now(ff);
		hb = heartbeat_ns;
		fresh = hb && (hb > now || now - hb < stale_after_ns);
	}
	if (alg) {
		ca->flags &= ~PRIV_RTO_AWAIT;	/* the algorithm has answered */
		if (fresh && control_guard(tp, ca, ff, rs, now)) {
			apply_command(sk, tp, ca, rs, &cmd);
			ff->unflushed.includer++;	/* command_acks, flushed by fold_ccp.h */
			return;
		}
	}
	fallback(sk, tp, ca, ack, rs);
	c = counters();
	if (c)
		c->fallback_acks++;
	/* awaiting the algorithm (fold_ack_end's `awaiting`), which is there */
	if (!alg && fresh)
		count_rto_await(tp, ca, rs, now, c);
}

/* The second half of cong_control after a compiled main section: it left
 * its result in the register file (FOLD_OFF_JIT_RET). Entered only by tail
 * call (registered under no name: see ccp_fold_post_ops). */
SEC("struct_ops")
void BPF_PROG(ccp_fold_post, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct fold_flow *ff = fold_flow_of(sk);

	fold_cong_control_end(sk, tcp_sk(sk), ca_priv(sk), ack, rs, ff,
			      ff ? (int)ff->st.regs[FOLD_OFF_JIT_RET] : 0, 1);
}

SEC("struct_ops")
void BPF_PROG(ccp_cong_control, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct ccp_priv *ca = ca_priv(sk);
	__u64 now = bpf_ktime_get_ns();
	__u64 hb = heartbeat_ns;
	struct ccp_cmd *cmd = NULL;
	struct fold_counters *c;
	__u32 id = ca->flow_id;
	int fresh;

	account_ecn(tp, ca, flag);
	/* An active open's SYN-ACK is acked before init() ran (tcp_ack in
	 * SYN_SENT precedes tcp_finish_connect): no flow id yet, the fallback. */
	if (id == 0) {
		fallback(sk, tp, ca, ack, rs);
		return;
	}
	if (fold_in_kernel) {
		/* a silence is twice the guard's floor: a flow paced at the floor
		 * (pacing_floor) whose receiver delays its ACKs gets one a floor
		 * apart, and must not restart the clock with each */
		struct fold_flow *ff = fold_ack_begin(sk, rs, id, ca->ecn_bytes, ca->timeouts, now,
							  2 * ctl_guard_floor_ns);
		int err = 0;

		if (ff && fold_flow_runs_program(ff)) {
			/* the compiled main section, which goes on in ccp_fold_post;
			 * returns only if the slot has none */
			fold_enter_compiled(ctx, ff->st.slot);
			err = fold_interpret_main(ff);
		}
		fold_cong_control_end(sk, tp, ca, ack, rs, ff, err, 0);
		return;
	}
	emit_ack(sk, tp, ca, rs, now);

	/* hb > now can happen when user space stamped between our two reads */
	fresh = hb && (hb > now || now - hb < stale_after_ns);
	if (fresh)
		cmd = bpf_map_lookup_elem(&commands, &id);
	/* A command made before the last RTO is stale: the loss window stands
	 * (fallback grows it as the kernel would) until the algorithm answers. */
	c = counters();
	if (cmd && cmd->epoch != ca->timeouts) {
		cmd = NULL;
		if (c)
			c->stale_command_acks++;
	}
	if (cmd) {
		ca->flags &= ~PRIV_RTO_AWAIT;	/* the algorithm has answered */
		apply_command(sk, tp, ca, rs, cmd);
		if (c)
			c->command_acks++;
	} else {
		fallback(sk, tp, ca, ack, rs);
		if (c)
			c->fallback_acks++;
		/* the algorithm is there, its answer to the RTO is not yet (its
		 * command predates the RTO, or the guard took the flow): as
		 * fold_cong_control_end's `!alg && fresh` */
		if (fresh)
			count_rto_await(tp, ca, rs, now, c);
	}
}

SEC(".struct_ops.link")
struct tcp_congestion_ops ccp = {
	.init = (void *)ccp_init,
	.release = (void *)ccp_release,
	.ssthresh = (void *)ccp_ssthresh,
	.undo_cwnd = (void *)ccp_undo_cwnd,
	.set_state = (void *)ccp_set_state,
	.cong_control = (void *)ccp_cong_control,
	.name = "ccp",
};

/* Never registered: it makes libbpf load ccp_fold_post as a cong_control
 * program (the type a tail call from ccp_cong_control must land in). */
SEC(".struct_ops.link")
struct tcp_congestion_ops ccp_fold_post_ops = {
	.ssthresh = (void *)ccp_ssthresh,
	.undo_cwnd = (void *)ccp_undo_cwnd,
	.cong_control = (void *)ccp_fold_post,
	.name = "ccp_fold_post",
};
