/* SPDX-License-Identifier: GPL-2.0 */
/*
 * fold_vm.h: an interpreter of libccp 1.2's fold-program instruction set for
 * BPF programs, so a Portus datapath program (fold function) runs per ACK in
 * the kernel. libccp is the oracle: tests/fold_differential.rs requires the
 * same reports, cwnd and rate for the same ACK sequences.
 *
 * Semantics follow libccp 1.2 (machine.c, ccp.c), read and re-implemented:
 *   - u64 arithmetic; ADD aborts when the sum wraps (sum < left), MUL aborts
 *     only when (product < left && right > 0) (libccp's partial check: some
 *     wrapped products pass), SUB aborts on underflow (result > left), DIV on
 *     a zero divisor. An abort ends the invocation at once: no set_cwnd,
 *     no set_rate, no report, but registers written before it stay written.
 *   - ewma(a, cur, v) = cur == 0 ? v : (a*cur + (10-a)*v) / 10, u64 wrapping.
 *   - wrapped_max compares the low 32 bits on a circle (0 = "unset").
 *   - if / !if write only when the condition is non-zero / zero.
 *   - writes outside a register class's bounds are ignored; reads index the
 *     flat register file [report 110 | control 110 | implicit 6 | tmp 8 |
 *     local 8] like libccp's struct register_file (a tmp index 8..15, which
 *     Portus emits for expressions nested 9+ deep, reads local 0..7);
 *     anything past the file reads 0 (libccp reads its zeroed staging area).
 *   - each invocation: Cwnd/Rate re-seeded from the primitives, a staged
 *     program change resets volatile registers, initialises non-volatile
 *     ones and restarts Micros, staged field updates apply (cwnd/rate
 *     updates call set_cwnd/set_rate at once), then the expressions run in
 *     order until one whose condition holds has no (fallthrough); a non-zero
 *     Cwnd calls set_cwnd, a non-zero Rate set_rate; (report) sends the first
 *     num_to_return report registers and then resets the volatile ones.
 *   - Micros = (now_ns - time_zero_ns) / 1000; writing Micros sets
 *     time_zero_ns = now_ns - value (libccp subtracts the us value from a ns
 *     clock; kept as is). Ack.now = (now_ns - datapath_time_zero_ns) / 1000.
 *     Flow.rtt_sample_us 0 reads as 4294967295.
 *
 * The program text is compiled by user space (src/fold/compile.rs) from
 * Portus's install message into a linear form (whose main section
 * src/fold/jit.rs compiles on to BPF; the interpreter then runs only the
 * resets and the initialisation, and any main section not compiled): per expression its condition
 * instructions, FOLD_OP_JZ (skip the body when the expression flag is 0), the
 * body, FOLD_OP_BRK (stop when flag && !fallthrough). The compiler leaves
 * out a JZ or BRK whose outcome it knows, fuses a remaining JZ into the
 * condition's last instruction (FOLD_F_JZ), `OP t a b; BIND d t` into
 * one instruction writing both (wr, wr2) and `OP t a b; IF d t v` /
 * `OP t a b; IF d c t` into one (FOLD_F_IF / FOLD_F_IFV), so most ACKs run
 * fewer steps
 * than libccp runs instructions. DEF instructions become
 * two extra sections of plain binds: the volatile resets (after a report and
 * on a program change) and the non-volatile initialisation (program change).
 * Register operands are pre-resolved to offsets in fold_state.regs, so the
 * interpreter never branches on register classes.
 *
 * Layouts are mirrored byte for byte in src/fold/isa.rs (checked by size
 * asserts on both sides). Names carry a fold_/FOLD_ prefix: vmlinux.h
 * already defines OP_GT, struct insn, NONE ...
 *
 * The includer provides vmlinux.h and bpf_helpers.h before this file. Maps
 * stay with the includer; functions take the program table map as argument.
 */
#ifndef CCP_FOLD_VM_H
#define CCP_FOLD_VM_H

/* ---- register file (offsets into fold_state.regs) ----
 * libccp's flat register file [report 110 | control 110 | implicit 6 |
 * tmp 8 | local 8] (FOLD_FLAT_*) is laid out so that what an ACK touches
 * sits in a few adjacent cache lines: control registers backwards from
 * FOLD_OFF_CONTROL_END (control 0 last), then implicit, tmp, local, the
 * primitives, the zero and discard registers, Micros' time zero, the
 * program slot and the compiled section's two slots, then report registers
 * forwards (contiguous: a report copies them). The first ~16 of each class, all programs of the suite
 * use, span ~75 registers (10 lines) instead of ~13 lines spread over 4 KiB.
 * The compiler (src/fold/compile.rs) maps flat indices to these offsets. */
#define FOLD_MAX_REPORT 110
#define FOLD_MAX_CONTROL 110
#define FOLD_N_IMPLICIT 6
#define FOLD_MAX_TMP 8
#define FOLD_MAX_LOCAL 8
#define FOLD_N_FILE 242		/* size of libccp's flat register_file */
#define FOLD_OFF_CONTROL_END 109	/* control register i at FOLD_OFF_CONTROL_END - i */
#define FOLD_CTL(i) (FOLD_OFF_CONTROL_END - (i))
#define FOLD_OFF_IMPLICIT 110
#define FOLD_OFF_TMP 116
#define FOLD_OFF_LOCAL 124	/* right after tmp: tmp 8..15 reads local 0..7 either way */
#define FOLD_OFF_PRIM 132	/* the 15 primitives, libccp's index order */
#define FOLD_N_PRIM 15
#define FOLD_OFF_ZERO 147	/* always 0: reads outside the file */
#define FOLD_OFF_DISCARD 148	/* sink for ignored writes, never read */
#define FOLD_OFF_TIME_ZERO 149	/* fold_state.time_zero_ns */
#define FOLD_OFF_SLOT 150	/* fold_state.slot */
/* Never an operand: what a compiled main section (src/fold/jit.rs, entered
 * by a tail call) reads and leaves behind, in the cache line of the slot
 * and the time zero (a cold ACK fetches it anyway). */
#define FOLD_OFF_JIT_RET 151	/* its result: FOLD_OK or an abort code (as s64) */
#define FOLD_OFF_JIT_NOW 152	/* the invocation's now_ns (Micros writes move time zero) */
#define FOLD_OFF_REPORT 153	/* report register i at FOLD_OFF_REPORT + i */
#define FOLD_NREGS 512		/* power of two: offsets are masked */
#define FOLD_REG_MASK (FOLD_NREGS - 1)

/* implicit registers (libccp ccp_priv.h) */
#define FOLD_R_EXPR_FLAG (FOLD_OFF_IMPLICIT + 0)
#define FOLD_R_FALLTHROUGH (FOLD_OFF_IMPLICIT + 1)
#define FOLD_R_REPORT (FOLD_OFF_IMPLICIT + 2)
#define FOLD_R_MICROS (FOLD_OFF_IMPLICIT + 3)
#define FOLD_R_CWND (FOLD_OFF_IMPLICIT + 4)
#define FOLD_R_RATE (FOLD_OFF_IMPLICIT + 5)

/* primitive indices (libccp ccp_priv.h) that need a transform */
#define FOLD_PRIM_ACK_NOW 5
#define FOLD_PRIM_RTT_SAMPLE_US 13

/* ---- opcodes: libccp's numbers; DEF never reaches the kernel ---- */
#define FOLD_OP_ADD 0
#define FOLD_OP_BIND 1
#define FOLD_OP_DIV 3
#define FOLD_OP_EQUIV 4
#define FOLD_OP_EWMA 5
#define FOLD_OP_GT 6
#define FOLD_OP_IF 7
#define FOLD_OP_LT 8
#define FOLD_OP_MAX 9
#define FOLD_OP_MAXWRAP 10
#define FOLD_OP_MIN 11
#define FOLD_OP_MUL 12
#define FOLD_OP_NOTIF 13
#define FOLD_OP_SUB 14
#define FOLD_OP_JZ 15	/* expression flag == 0: pc = right */
#define FOLD_OP_BRK 16	/* flag && !fallthrough: stop */

/* fold_insn.flags */
#define FOLD_F_LIMM 1	/* left is an immediate, not a register offset */
#define FOLD_F_RIMM 2	/* right is an immediate */
#define FOLD_F_WTIME 4	/* the write goes to Micros: move time_zero_ns too */
#define FOLD_F_JZ 8	/* afterwards, expression flag == 0: pc = cur (a fused JZ) */
#define FOLD_F_IF 16	/* wr2 = regs[cur] only if the result is non-zero (a fused IF) */
#define FOLD_F_IFV 32	/* wr2 = the result only if regs[cur] is non-zero (a fused IF) */

/* return codes: libccp's (ccp_error.h) */
#define FOLD_OK 0
#define FOLD_ERR_ADD_OVERFLOW (-91)
#define FOLD_ERR_DIV_BY_ZERO (-92)
#define FOLD_ERR_MUL_OVERFLOW (-93)
#define FOLD_ERR_SUB_UNDERFLOW (-94)
#define FOLD_ERR_PROG_IS_NULL (-96)

#define FOLD_MAX_LINEAR 1024	/* instruction slots per program; programs use at most 1023 */
#define FOLD_INSN_MASK (FOLD_MAX_LINEAR - 1)
#define FOLD_MAX_SLOTS 16	/* program table entries (slot 0 unused) */

#define FOLD_INFINITY 4294967295ULL
#define READ_ONCE_FLAGS(x) (*(volatile __u32 *)&(x))

struct fold_insn {
	__u8 op;
	__u8 flags;
	__u16 wr;	/* register written (FOLD_OFF_DISCARD: ignored) */
	__u16 cur;	/* ewma: register read as the current value; FOLD_F_JZ: jump
			 * target; FOLD_F_IF: the register copied to wr2;
			 * FOLD_F_IFV: the fused IF's condition */
	__u16 wr2;	/* written too, with the same value (a fused BIND) or
			 * FOLD_F_IF's copy; else == wr */
	__u32 left;	/* immediate or register offset (FOLD_F_LIMM) */
	__u32 right;	/* immediate or register offset (FOLD_F_RIMM); JZ target */
};
_Static_assert(sizeof(struct fold_insn) == 16, "fold_insn layout");

/* One installed program, stored at its libccp slot number (1-based) in an
 * array map; index == slot when valid, 0 when the slot is empty. */
struct fold_prog {
	__u32 index;
	__u32 uid;		/* Portus program_uid, sent with reports */
	__u32 n_main;		/* main section: [0, n_main) */
	__u32 reset_off;	/* volatile resets: [reset_off, reset_off + reset_len) */
	__u32 reset_len;
	__u32 init_off;		/* non-volatile init: [init_off, init_off + init_len) */
	__u32 init_len;
	__u32 num_to_return;	/* report registers sent with a report */
	/* What reports send: 0 until the first volatile reset of this program
	 * (libccp computes num_to_return lazily, in reset_state: a flow left on
	 * a slot whose program was replaced reports 0 fields once). Written by
	 * the BPF side; every writer stores the same value. */
	__u32 num_to_return_live;
	__u32 _pad;
	struct fold_insn insns[FOLD_MAX_LINEAR];
};
_Static_assert(sizeof(struct fold_prog) == 40 + 16 * FOLD_MAX_LINEAR, "fold_prog layout");

/* Per-flow interpreter state (libccp ccp_priv_state without the staging).
 * Micros' time zero and the slot live inside the register array, next to
 * the registers an ACK touches (never an operand: the compiler maps no
 * register there). */
struct fold_state {
	union {
		__u64 regs[FOLD_NREGS];
		struct {
			__u64 _below[FOLD_OFF_TIME_ZERO];
			__u64 time_zero_ns;	/* Micros counts from here */
			__u32 slot;		/* running program's slot, 0 = none */
			__u32 _pad;
		};
	};
};
_Static_assert(sizeof(struct fold_state) == 8 * FOLD_NREGS, "fold_state layout");
_Static_assert(__builtin_offsetof(struct fold_state, time_zero_ns) == 8 * FOLD_OFF_TIME_ZERO, "time zero");
_Static_assert(__builtin_offsetof(struct fold_state, slot) == 8 * FOLD_OFF_SLOT, "slot");
_Static_assert(FOLD_OFF_REPORT + FOLD_MAX_REPORT <= FOLD_NREGS, "report registers fit");
_Static_assert(FOLD_OFF_JIT_NOW < FOLD_OFF_REPORT, "compiled-section slots before the reports");

/* fold_staged.flags */
#define FOLD_STAGED_CHANGE 1
#define FOLD_STAGED_CWND 2
#define FOLD_STAGED_RATE 4
#define FOLD_STAGED_CONTROL 8

/* Updates staged by Portus messages, applied at the next invocation
 * (libccp staged_update + staged_program_index). */
struct fold_staged {
	__u32 flags;
	__u32 change_slot;
	__u64 cwnd;
	__u64 rate;
	__u64 control_mask[2];	/* bit i: control register i is pending */
	__u64 control[FOLD_MAX_CONTROL];
};
_Static_assert(sizeof(struct fold_staged) == 40 + 8 * FOLD_MAX_CONTROL, "fold_staged layout");

/* A flow's staged updates as kept between invocations: user space merges
 * each Portus message's updates in (fold_stage_merge, from a syscall
 * program it runs with BPF_PROG_TEST_RUN), the flow's next invocation takes
 * them (fold_take_staged); the lock keeps the two apart. */
struct fold_staged_entry {
	struct bpf_spin_lock lock;
	__u32 _pad;
	struct fold_staged sg;
};

/* What one invocation did (libccp's callbacks and its return code). */
struct fold_result {
	__s32 ret;		/* FOLD_OK or a libccp error code */
	__u32 n_cwnd;		/* set_cwnd calls (0..2) */
	__u32 cwnd[2];		/* their arguments (u32, as libccp passes them) */
	__u32 n_rate;		/* set_rate_abs calls (0..2) */
	__u32 rate[2];
	__u32 report;		/* 1: a report is due; call fold_finish_report after sending */
	__u32 report_uid;
	__u32 n_fields;		/* report fields: report registers 0 .. n_fields */
	__u32 steps;		/* interpreter steps (bpf_loop iterations), for cost figures */
};

/* A due report, for user space to forward to Portus as a measure message
 * (src/fold/kernel.rs KernelFold::report_msg). Fixed size: ring-buffer
 * reservations need a constant size. */
struct fold_report {
	__u32 flow_id;		/* the Portus socket id */
	__u32 uid;		/* program uid */
	__u32 n_fields;		/* fields[0 .. n_fields) are sent */
	__u32 prompt;		/* 1: its flow reports several times per RTT (fold_report_prompt) */
	__u64 ts_ns;
	__u64 fields[FOLD_MAX_REPORT];
};
_Static_assert(sizeof(struct fold_report) == 24 + 8 * FOLD_MAX_REPORT, "fold_report layout");

/* The same record for programs that report at most FOLD_SMALL_REPORT
 * fields (every algorithm of the suite): a report copies 256 bytes of
 * registers instead of 880, and the ring buffer carries 280-byte records.
 * User space tells the two apart by the record's length. */
#define FOLD_SMALL_REPORT 32
struct fold_report_small {
	__u32 flow_id;
	__u32 uid;
	__u32 n_fields;
	__u32 prompt;
	__u64 ts_ns;
	__u64 fields[FOLD_SMALL_REPORT];
};
_Static_assert(sizeof(struct fold_report_small) == 24 + 8 * FOLD_SMALL_REPORT, "fold_report_small layout");

/* Fill a report record (struct fold_report or fold_report_small: the same
 * header, `cap` fields) from an invocation whose result has report set
 * (before fold_finish_report resets the volatile registers). A macro: the
 * copy's size must be a constant for the verifier. */
#define fold_fill_report(rec, flow_id_, st, res, now_ns, cap)					\
	do {											\
		(rec)->flow_id = (flow_id_);							\
		(rec)->uid = (res)->report_uid;							\
		(rec)->n_fields = (res)->n_fields < (cap) ? (res)->n_fields : (cap);		\
		(rec)->prompt = 0;								\
		(rec)->ts_ns = (now_ns);							\
		__builtin_memcpy((rec)->fields, &(st)->regs[FOLD_OFF_REPORT], sizeof((rec)->fields)); \
	} while (0)

/* ---- primitives (the datapath's measurements, per ACK) ---- */

/* One ACK's snapshot of the socket (the per-ACK part of ccp.bpf.c's struct
 * ccp_event; units as there). */
struct fold_ack {
	__u64 bytes_acked;	/* tp->bytes_acked, cumulative bytes */
	__s64 rtt_us;		/* rs->rtt_us, < 0: no sample */
	__s64 interval_us;	/* rs->interval_us */
	__s32 delivered;	/* rs->delivered, packets */
	__u32 snd_interval_us;
	__u32 rcv_interval_us;
	__u32 acked_sacked;	/* rs->acked_sacked, packets */
	__u32 sacked_out;	/* packets */
	__u32 lost_out;
	__u32 retrans_out;
	__u32 packets_out;
	__u32 write_seq;
	__u32 snd_una;
	__u32 ecn_bytes;	/* cumulative bytes acked with ECE */
	__u32 timeouts;		/* cumulative RTOs */
	__u32 lost;		/* tp->lost, cumulative packets */
	__u32 mss;		/* tp->mss_cache, bytes */
};
_Static_assert(sizeof(struct fold_ack) == 80, "fold_ack layout");

/* Counters at the previous invocation (src/primitives.rs Baseline). */
struct fold_baseline {
	__u64 bytes_acked;
	__u64 rate_outgoing;
	__u64 rate_incoming;
	__u32 sacked_out;
	__u32 ecn_bytes;
	__u32 timeouts;
	__u32 lost;
};
_Static_assert(sizeof(struct fold_baseline) == 40, "fold_baseline layout");

static __always_inline __u32 fold_sat_sub(__u32 a, __u32 b)
{
	return a > b ? a - b : 0;
}

static __always_inline __u32 fold_sat_add(__u32 a, __u32 b)
{
	__u32 s = a + b;

	return s < a ? 0xffffffffU : s;
}

static __always_inline __u32 fold_sat_mul(__u32 a, __u32 b)
{
	__u64 p = (__u64)a * b;

	return p > 0xffffffffULL ? 0xffffffffU : (__u32)p;
}

/* delivered * mss per interval, bytes/s; `none` when the sample has no rate */
static __always_inline __u64 fold_rate(__s32 delivered, __u32 mss, __u32 interval_us, __u64 none)
{
	if (delivered <= 0 || interval_us == 0)
		return none;
	return (__u64)delivered * mss * 1000000ULL / interval_us;
}

/*
 * The 15 primitives in libccp's register order from one ACK, as
 * src/primitives.rs compute() does in user space (the differential test
 * checks the two agree): per-ACK deltas of cumulative counters against
 * `b` (updated), rates from the rate sample (the last valid one when this
 * ACK has none), the RTT only from a valid rate sample (else 0: none).
 * Ack.now is left 0 (fold_invoke fills it). Cwnd and Rate are not
 * primitives here: the caller seeds them (snd_cwnd / snd_rate).
 */
static __always_inline void fold_prims(const struct fold_ack *a, struct fold_baseline *b, __u64 *prims)
{
	__u32 mss = a->mss ? a->mss : 1;
	__u32 misordered = fold_sat_sub(a->sacked_out, b->sacked_out);
	__u32 ecn = a->ecn_bytes - b->ecn_bytes;
	__u64 rout = fold_rate(a->delivered, mss, a->snd_interval_us, b->rate_outgoing);
	__u64 rin = fold_rate(a->delivered, mss, a->rcv_interval_us, b->rate_incoming);
	__u32 pif = fold_sat_add(fold_sat_sub(a->packets_out, fold_sat_add(a->sacked_out, a->lost_out)),
				 a->retrans_out);
	__u64 acked = a->bytes_acked > b->bytes_acked ? a->bytes_acked - b->bytes_acked : 0;
	int valid = a->delivered > 0 && a->interval_us > 0 && a->rtt_us > 0;

	prims[0] = acked > 0xffffffffULL ? 0xffffffffULL : acked;	/* bytes_acked */
	prims[1] = fold_sat_mul(misordered, mss);			/* bytes_misordered */
	prims[2] = ecn;							/* ecn_bytes */
	prims[3] = ecn / mss;						/* ecn_packets */
	prims[4] = a->lost - b->lost;					/* lost_pkts_sample */
	prims[5] = 0;							/* now: fold_invoke */
	prims[6] = fold_sat_sub(a->acked_sacked, misordered);		/* packets_acked */
	prims[7] = misordered;						/* packets_misordered */
	prims[8] = fold_sat_mul(pif, mss);				/* bytes_in_flight */
	prims[9] = a->write_seq - a->snd_una;				/* bytes_pending */
	prims[10] = pif;						/* packets_in_flight */
	prims[11] = rin;						/* rate_incoming */
	prims[12] = rout;						/* rate_outgoing */
	prims[13] = valid ? (__u64)a->rtt_us : 0;			/* rtt_sample_us */
	prims[14] = a->timeouts != b->timeouts;				/* was_timeout */
	b->bytes_acked = a->bytes_acked;
	b->sacked_out = a->sacked_out;
	b->ecn_bytes = a->ecn_bytes;
	b->timeouts = a->timeouts;
	b->lost = a->lost;
	b->rate_outgoing = rout;
	b->rate_incoming = rin;
}

/* ccp-kernel's input contract for Flow.rtt_sample_us: it invokes the fold
 * only on ACKs with a valid rate sample, so programs never see a missing RTT
 * (upstream programs copy it into reports, or compare Micros with it; a
 * missing one read as 4294967295 once made nimbus command a cwnd of
 * u32::MAX bytes). This datapath invokes the fold on every ACK so that the
 * losses an ACK without a sample carries still reach the algorithm; such an
 * ACK gets the last valid sample instead (held in *held), or the socket's
 * SRTT (us) before the first. Only with neither (no RTT measured at all)
 * does the 0 stay, which fold_invoke_begin turns into +infinity as libccp
 * does. src/primitives.rs hold_rtt is the user-space twin. */
static __always_inline void fold_hold_rtt(__u64 *prims, __u32 *held, __u32 srtt_us)
{
	__u64 rtt = prims[FOLD_PRIM_RTT_SAMPLE_US];

	if (rtt) {
		*held = rtt > 0xffffffffULL ? 0xffffffffU : (__u32)rtt;
		return;
	}
	prims[FOLD_PRIM_RTT_SAMPLE_US] = *held ? *held : srtt_us;
}

/* ---- staging (libccp stage_update / change_prog rules) ---- */

/* The next pending control register of word `w` of a control_mask, `m`
 * the bits of that word not visited yet (m != 0): its lowest set bit, as a
 * register index (0..127). Staged updates set a few of the FOLD_MAX_CONTROL
 * registers, so taking and applying them visits the set bits only: a pass
 * over all 110 (a bpf_loop callback each) cost ~1.5 us per ACK that took
 * staged updates, ~0.1 us per ACK averaged over a paced flow's ACKs
 * (docs/NOTES.md). BPF has no count-trailing-zeros instruction (and
 * clang 14 crashes expanding __builtin_ctzll for it): the lowest set bit is
 * found by halving. */
static __always_inline __u32 fold_pending_control(__u32 w, __u64 m)
{
	__u32 i = 0;

	m &= -m;
	if (!(m & 0x00000000ffffffffULL)) i += 32;
	if (!(m & 0x0000ffff0000ffffULL)) i += 16;
	if (!(m & 0x00ff00ff00ff00ffULL)) i += 8;
	if (!(m & 0x0f0f0f0f0f0f0f0fULL)) i += 4;
	if (!(m & 0x3333333333333333ULL)) i += 2;
	if (!(m & 0x5555555555555555ULL)) i += 1;
	return (w << 6) | i;
}

/* Run `stmt` for each pending control register `i` (< FOLD_MAX_CONTROL)
 * of `sg`'s control_mask, lowest first. `bpf_for` rather than a plain
 * bounded loop: that one took ccp_cong_control past the verifier's limit
 * (E2BIG). `stmt` must not break or continue. */
#define fold_for_each_pending_control(sg, i, stmt)					\
	do {										\
		__u32 w_;								\
		for (w_ = 0; w_ < 2; w_++) {						\
			__u64 m_ = (sg)->control_mask[w_];				\
			int n_;								\
			bpf_for(n_, 0, 64) {						\
				if (!m_)						\
					break;						\
				(i) = fold_pending_control(w_, m_);			\
				if ((i) < FOLD_MAX_CONTROL)				\
					stmt;						\
				m_ &= m_ - 1;						\
			}								\
		}									\
	} while (0)

/* Copy the pending control registers of `from` (its control_mask) into
 * `to`; the other registers of `to` are left as they are (never read). */
static __always_inline void fold_copy_pending_controls(struct fold_staged *to, const struct fold_staged *from)
{
	__u32 i;

	fold_for_each_pending_control(from, i, to->control[i] = from->control[i]);
}

/* Write the pending control registers of `sg` into the register file. */
static __always_inline void fold_apply_controls(struct fold_state *st, const struct fold_staged *sg)
{
	__u32 i;

	fold_for_each_pending_control(sg, i, st->regs[FOLD_CTL(i)] = sg->control[i]);
}

/* Merge one message's staged updates `d` into entry `e`. A program change
 * drops what was staged before it (libccp clears pending updates); other
 * updates overwrite register by register. */
static __always_inline void fold_stage_merge(struct fold_staged_entry *e, const struct fold_staged *d)
{
	int i;

	bpf_spin_lock(&e->lock);
	if (d->flags & FOLD_STAGED_CHANGE) {
		e->sg = *d;
	} else {
		if (d->flags & FOLD_STAGED_CWND)
			e->sg.cwnd = d->cwnd;
		if (d->flags & FOLD_STAGED_RATE)
			e->sg.rate = d->rate;
#pragma unroll
		for (i = 0; i < FOLD_MAX_CONTROL; i++)
			if (d->control_mask[i >> 6] & (1ULL << (i & 63)))
				e->sg.control[i] = d->control[i];
		e->sg.control_mask[0] |= d->control_mask[0];
		e->sg.control_mask[1] |= d->control_mask[1];
		e->sg.flags |= d->flags;
	}
	bpf_spin_unlock(&e->lock);
}

/* Take the flow's staged updates into `out` (e.g. a per-CPU scratch map
 * value: too big for the stack); returns 1 if there were any. A lock-free
 * look first keeps the common case (nothing staged) cheap; an update it
 * misses is taken on the next ACK. Of the control registers only the
 * pending ones are copied (fold_copy_pending_controls), and only when a
 * program change or a control update is staged: the common update, after
 * nearly every report, is a cwnd and/or rate alone. */
static __always_inline int fold_take_staged(struct fold_staged_entry *e, struct fold_staged *out)
{
	__u32 flags;

	if (!READ_ONCE_FLAGS(e->sg.flags))
		return 0;
	bpf_spin_lock(&e->lock);
	flags = e->sg.flags;
	if (flags) {
		out->flags = flags;
		out->change_slot = e->sg.change_slot;
		out->cwnd = e->sg.cwnd;
		out->rate = e->sg.rate;
		out->control_mask[0] = e->sg.control_mask[0];
		out->control_mask[1] = e->sg.control_mask[1];
		if (flags & (FOLD_STAGED_CHANGE | FOLD_STAGED_CONTROL))
			fold_copy_pending_controls(out, &e->sg);
		e->sg.flags = 0;
		e->sg.control_mask[0] = 0;
		e->sg.control_mask[1] = 0;
	}
	bpf_spin_unlock(&e->lock);
	return flags != 0;
}

/* ---- arithmetic helpers (libccp machine.c semantics) ---- */

static __always_inline __u64 fold_ewma(__u64 a, __u64 cur, __u64 v)
{
	if (cur == 0)
		return v;
	return (a * cur + (10 - a) * v) / 10;
}

/* libccp dif32: distance walking from left to right on the u32 circle */
static __always_inline __u32 fold_dif32(__u32 left, __u32 right)
{
	if (right > left)
		return right - left;
	return (0xffffffffU - left) + right;
}

static __always_inline __u64 fold_max_wrap(__u64 a, __u64 b)
{
	__u32 a32 = (__u32)a, b32 = (__u32)b;

	if (a == 0)
		return b;
	if (b == 0)
		return a;
	if (fold_dif32(b32, a32) < fold_dif32(a32, b32))
		return a32;
	return b32;
}

/* ---- the instruction loop (bpf_loop callback) ---- */

struct fold_run {
	struct fold_state *st;
	struct fold_prog *prog;
	__u64 now_ns;
	__u32 pc;
	__u32 end;
	__s32 err;
};

static __always_inline __u64 fold_operand(const struct fold_state *st, __u32 v, int imm)
{
	return imm ? (__u64)v : st->regs[v & FOLD_REG_MASK];
}

/* One instruction per call; returns 1 to stop the loop. The instruction is
 * copied to locals first: stores to st->regs would otherwise make the
 * compiler reload its fields (it cannot tell the two maps apart). */
static long fold_step(__u32 i, void *arg)
{
	struct fold_run *r = arg;
	struct fold_state *st = r->st;
	const struct fold_insn in = r->prog->insns[r->pc & FOLD_INSN_MASK];
	/* Masked so the verifier sees pc within [0, 1023] on every iteration
	 * and its bpf_loop check converges (an unmasked u16 jump target plus 1
	 * per iteration widens forever: "sequence of 8193 jumps is too
	 * complex"). Programs have at most FOLD_MAX_LINEAR - 1 instructions, so
	 * the mask never wraps a real pc. */
	__u32 next = (r->pc + 1) & FOLD_INSN_MASK;
	__u64 a, b, res;

	a = fold_operand(st, in.left, in.flags & FOLD_F_LIMM);
	b = fold_operand(st, in.right, in.flags & FOLD_F_RIMM);
	switch (in.op) {
	case FOLD_OP_ADD:
		res = a + b;
		if (res < a) {
			r->err = FOLD_ERR_ADD_OVERFLOW;
			return 1;
		}
		break;
	case FOLD_OP_BIND:
		res = b;
		break;
	case FOLD_OP_DIV:
		if (b == 0) {
			r->err = FOLD_ERR_DIV_BY_ZERO;
			return 1;
		}
		res = a / b;
		break;
	case FOLD_OP_EQUIV:
		res = a == b;
		break;
	case FOLD_OP_EWMA:
		res = fold_ewma(a, st->regs[in.cur & FOLD_REG_MASK], b);
		break;
	case FOLD_OP_GT:
		res = a > b;
		break;
	case FOLD_OP_IF:
		if (!a)
			goto jz;
		res = b;
		break;
	case FOLD_OP_LT:
		res = a < b;
		break;
	case FOLD_OP_MAX:
		res = a > b ? a : b;
		break;
	case FOLD_OP_MAXWRAP:
		res = fold_max_wrap(a, b);
		break;
	case FOLD_OP_MIN:
		res = a < b ? a : b;
		break;
	case FOLD_OP_MUL:
		res = a * b;
		if (res < a && b > 0) {
			r->err = FOLD_ERR_MUL_OVERFLOW;
			return 1;
		}
		break;
	case FOLD_OP_NOTIF:
		if (a)
			goto jz;
		res = b;
		break;
	case FOLD_OP_SUB:
		res = a - b;
		if (res > a) {
			r->err = FOLD_ERR_SUB_UNDERFLOW;
			return 1;
		}
		break;
	case FOLD_OP_JZ:
		if (!st->regs[FOLD_R_EXPR_FLAG])
			next = in.right & FOLD_INSN_MASK;
		goto out;
	case FOLD_OP_BRK:
		if (st->regs[FOLD_R_EXPR_FLAG] && !st->regs[FOLD_R_FALLTHROUGH])
			return 1;
		goto out;
	default:
		goto out;
	}
	st->regs[in.wr & FOLD_REG_MASK] = res;
	if (!(in.flags & (FOLD_F_IF | FOLD_F_IFV | FOLD_F_WTIME | FOLD_F_JZ))) {
		/* the common case: one flags test */
		st->regs[in.wr2 & FOLD_REG_MASK] = res;
		goto out;
	}
	if (in.flags & FOLD_F_IF) {
		if (res)
			st->regs[in.wr2 & FOLD_REG_MASK] = st->regs[in.cur & FOLD_REG_MASK];
	} else if (in.flags & FOLD_F_IFV) {
		if (st->regs[in.cur & FOLD_REG_MASK])
			st->regs[in.wr2 & FOLD_REG_MASK] = res;
	} else {
		st->regs[in.wr2 & FOLD_REG_MASK] = res;
	}
	if (in.flags & FOLD_F_WTIME)
		st->time_zero_ns = r->now_ns - res;
jz:
	if ((in.flags & FOLD_F_JZ) && !st->regs[FOLD_R_EXPR_FLAG])
		next = in.cur & FOLD_INSN_MASK;
out:
	r->pc = next;
	/* stop here rather than in one more call */
	return next >= r->end;
}

/* Run instructions [off, off + len) of prog; returns FOLD_OK or an abort code. */
static __always_inline int fold_run_section(struct fold_state *st, struct fold_prog *prog,
					    __u32 off, __u32 len, __u64 now_ns, __u32 *steps)
{
	long n;

	struct fold_run r = {
		.st = st, .prog = prog, .now_ns = now_ns, .pc = off, .end = off + len, .err = 0,
	};

	if (len == 0)
		return FOLD_OK;
	/* Jumps only go forward: at most len steps. */
	n = bpf_loop(len, fold_step, &r, 0);
	if (n > 0)
		*steps += n;
	return r.err;
}

static __always_inline struct fold_prog *fold_lookup(void *progs, __u32 slot)
{
	struct fold_prog *p;

	if (slot == 0)
		return NULL;
	p = bpf_map_lookup_elem(progs, &slot);
	if (!p || p->index != slot)
		return NULL;
	return p;
}

static __always_inline void fold_called(__u32 *n, __u32 *vals, __u64 v)
{
	if (*n < 2)
		vals[*n & 1] = (__u32)v;
	*n += 1;
}

/* libccp reset_state + init_register_state + reset_time for a program change */
static __always_inline void fold_change_program(struct fold_state *st, void *progs, __u32 slot,
						__u64 now_ns, __u32 *steps)
{
	struct fold_prog *p;

	st->slot = slot;
	p = fold_lookup(progs, slot);
	if (p) {
		p->num_to_return_live = p->num_to_return;
		fold_run_section(st, p, p->reset_off, p->reset_len, now_ns, steps);
		fold_run_section(st, p, p->init_off, p->init_len, now_ns, steps);
	}
	st->time_zero_ns = now_ns;
	st->regs[FOLD_R_MICROS] = 0;
}

/*
 * One libccp invocation (ccp_invoke after the create message went out), in
 * two halves around the main section so that the section can also run as
 * compiled code (src/fold/jit.rs, entered by a tail call): fold_invoke_begin
 * up to it, fold_invoke_end after it. fold_invoke runs all three here.
 *
 * st: the flow's state; progs: the program table (array map of struct
 * fold_prog keyed by slot); sg: staged updates or NULL (consumed: the caller
 * clears them afterwards); prims: the 15 primitives in libccp's order
 * (raw: rtt 0 = no sample, ACK_NOW ignored); snd_cwnd (bytes) and snd_rate
 * (bytes/s) re-seed Cwnd/Rate; now_ns and dp_time_zero_ns drive Micros and
 * Ack.now. On out->report the caller sends report registers [0, n_fields) and then
 * calls fold_finish_report.
 */

/* Everything before the main section. Returns 1 when the flow runs a
 * program (its slot is set: the main section comes next), 0 with out->ret =
 * FOLD_ERR_PROG_IS_NULL when it has none (no section, no fold_invoke_end).
 * The program itself is not read: a compiled section needs nothing of it,
 * and on a paced ACK its header is a cache line and a TLB entry of its own
 * (docs/NOTES.md); the interpreter looks it up (fold_main_program), and
 * what a report sends of it fold_invoke_end reads when a report is due. */
static __always_inline int fold_invoke_begin(struct fold_state *st, void *progs,
					     struct fold_staged *sg, const __u64 *prims,
					     __u32 snd_cwnd, __u64 snd_rate, __u64 now_ns,
					     __u64 dp_time_zero_ns, struct fold_result *out)
{
	int k;

	__builtin_memset(out, 0, sizeof(*out));
	st->regs[FOLD_R_CWND] = snd_cwnd;
	st->regs[FOLD_R_RATE] = snd_rate;
	if (sg && sg->flags) {
		if (sg->flags & FOLD_STAGED_CHANGE)
			fold_change_program(st, progs, sg->change_slot, now_ns, &out->steps);
		if (sg->flags & FOLD_STAGED_CONTROL)
			fold_apply_controls(st, sg);
		if (sg->flags & FOLD_STAGED_CWND) {
			st->regs[FOLD_R_CWND] = sg->cwnd;
			if (sg->cwnd)
				fold_called(&out->n_cwnd, out->cwnd, sg->cwnd);
		}
		if (sg->flags & FOLD_STAGED_RATE) {
			st->regs[FOLD_R_RATE] = sg->rate;
			if (sg->rate)
				fold_called(&out->n_rate, out->rate, sg->rate);
		}
	}

	if (st->slot == 0) {
		out->ret = FOLD_ERR_PROG_IS_NULL;
		return 0;
	}
	st->regs[FOLD_R_EXPR_FLAG] = 0;
	st->regs[FOLD_R_FALLTHROUGH] = 0;
	st->regs[FOLD_R_REPORT] = 0;
	st->regs[FOLD_R_MICROS] = (now_ns - st->time_zero_ns) / 1000;
	for (k = 0; k < FOLD_N_PRIM; k++)
		st->regs[FOLD_OFF_PRIM + k] = prims[k];
	if (prims[FOLD_PRIM_RTT_SAMPLE_US] == 0)
		st->regs[FOLD_OFF_PRIM + FOLD_PRIM_RTT_SAMPLE_US] = FOLD_INFINITY;
	st->regs[FOLD_OFF_PRIM + FOLD_PRIM_ACK_NOW] = (now_ns - dp_time_zero_ns) / 1000;
	return 1;
}

/* The program whose main section the interpreter runs after
 * fold_invoke_begin returned 1; NULL, with out->ret = FOLD_ERR_PROG_IS_NULL
 * (no section, no fold_invoke_end), when the slot holds none. */
static __always_inline struct fold_prog *fold_main_program(struct fold_state *st, void *progs,
							   struct fold_result *out)
{
	struct fold_prog *p = fold_lookup(progs, st->slot);

	if (!p)
		out->ret = FOLD_ERR_PROG_IS_NULL;
	return p;
}

/* Everything after the main section, which returned `err`: the set_cwnd /
 * set_rate calls and whether a report is due, with the program's uid and
 * report size (a program change or a report moves them, both outside the
 * section, so they are what they were when the section ran). */
static __always_inline void fold_invoke_end(struct fold_state *st, void *progs, int err,
					    struct fold_result *out)
{
	struct fold_prog *p;

	if (err) {
		out->ret = err;
		return;
	}
	if (st->regs[FOLD_R_CWND] > 0)
		fold_called(&out->n_cwnd, out->cwnd, st->regs[FOLD_R_CWND]);
	if (st->regs[FOLD_R_RATE] != 0)
		fold_called(&out->n_rate, out->rate, st->regs[FOLD_R_RATE]);
	if (!st->regs[FOLD_R_REPORT])
		return;
	p = fold_lookup(progs, st->slot);
	if (p) {
		out->report = 1;
		out->report_uid = p->uid;
		out->n_fields = p->num_to_return_live;
	}
}

static __always_inline void fold_invoke(struct fold_state *st, void *progs, struct fold_staged *sg,
					const __u64 *prims, __u32 snd_cwnd, __u64 snd_rate,
					__u64 now_ns, __u64 dp_time_zero_ns, struct fold_result *out)
{
	struct fold_prog *p;

	if (!fold_invoke_begin(st, progs, sg, prims, snd_cwnd, snd_rate, now_ns, dp_time_zero_ns, out))
		return;
	p = fold_main_program(st, progs, out);
	if (!p)
		return;
	fold_invoke_end(st, progs, fold_run_section(st, p, 0, p->n_main, now_ns, &out->steps), out);
}

/* After a report was sent: reset the volatile registers (libccp reset_state). */
static __always_inline void fold_finish_report(struct fold_state *st, void *progs, __u64 now_ns)
{
	struct fold_prog *p = fold_lookup(progs, st->slot);
	__u32 steps = 0;

	if (p) {
		p->num_to_return_live = p->num_to_return;
		fold_run_section(st, p, p->reset_off, p->reset_len, now_ns, &steps);
	}
}

#endif /* CCP_FOLD_VM_H */
