"""Datapath benchmark: ``make bench`` runs ``python -m ccplab.dpbench``.

What it measures, on this host, in one run:

* a veth pair (MTU 1500, the kernel's default offloads: TSO/GSO on) between
  two network namespaces it creates, iperf3 flows from one to the other;
* four modes ALTERNATING back to back for every configuration (so drift of a
  shared machine hits all of them alike; every second repetition in reverse
  order, so no mode always follows the same one, ``run_plan``): ``kernel`` (the kernel's cubic),
  ``bpf-cubic`` (the kernel's cubic behind the smallest BPF struct_ops,
  datapath/bench/kfunc_cubic.bpf.c, compiled with clang and registered with
  bpftool for each run: the floor of BPF time per ACK, its programs' time per
  ``pkts_acked`` call), ``ccp-kernel-fold`` (``ccp-datapath --fold kernel`` + the Portus
  ``ccp-algorithms cubic``) and ``ccp-userspace-fold`` (``--fold userspace``:
  libccp folds every ACK in user space), each ``--reps`` times; ``--modes`` can add
  ``ccp-kernel-interp`` (``--fold kernel --fold-jit false``: the fold programs interpreted in
  BPF instead of compiled to it), to measure what the compiler saves;
* 1, 10 and 100 parallel flows (``iperf3 -P``), at full speed and paced to
  1 Gbit/s in total. Pacing is iperf3's own ``-b RATE`` per stream
  (1 Gbit/s / flows), not ``--fq-rate``: ``--fq-rate`` is SO_MAX_PACING_RATE,
  which only caps the rate the congestion control sets, at a level of its
  own. ``-b`` limits the application's writes the same way under every
  congestion control, which "equal paced throughput" needs.
* with ``--pin-cpu N``, every iperf3 client and the server's side of its test
  on CPU N (``iperf3 -A N,N``; the veth's softirq work runs where the sender
  does): the runs then compare the stacks' cost per byte on one core, while
  with placement left free (the default) one flow's throughput also depends
  on where the scheduler put sender, receiver and softirq.

Per run it records: throughput (iperf3 receiver, Gbit/s); busy CPU of the
host's cores over the run's steady window (``--omit-s`` seconds after the
client starts, 2 by default, to 1 s before its end: connection setup, flow
creation and slow start left out, as iperf3's ``--omit`` leaves them out of
its own figures; /proc/stat: everything but idle and iowait, as a fraction of
all cores, 1.0 = both cores busy) and, since the machine may be shared, the
part of it the run itself used ("own": CPU time of the iperf3 client and
server, ccp-datapath, the algorithm and the ksoftirqd threads
(/proc/PID/task/*/schedstat, ns; not /proc/PID/stat's utime+stime, which come
in whole 10 ms ticks) over the same window and on the same scale;
ccp-datapath + algorithm alone as "dmn"); "own" and "dmn" over the client's
whole lifetime too (``own_cpu_run``, ``daemons_cpu_run``; the client's part
from getrusage of the reaped child), which counts what each flow's setup and
teardown cost.
schedstat gives a task's scheduler run time (exact, ns), while
/proc/stat's busy share is sampled by the tick (HZ 250 here): a paced, 1 ms
periodic load can alias with the tick, so "own" can exceed "busy". Without
CONFIG_IRQ_TIME_ACCOUNTING (this kernel) a softirq runs on the time of the
task it interrupts: the veth's packet processing runs in the softirq of the
sending task (or in ksoftirqd) and is counted; softirq work done inside
another task or the idle task is not. For ccp, the BPF
cost per ACK (``kernel.bpf_stats_enabled=1`` during the benchmark, restored
after; ``run_time_ns / run_cnt`` of the datapath's ``ccp_cong_control``
from ``bpftool -j prog show``, and the time of its struct_ops programs
that run per ACK, i.e. all but ``init`` and ``release``, per ``cong_control`` call; the JSON also
has each program's share, those two included); messages crossing from the kernel to user
space (the JSON the datapath writes at exit with ``--stats-file``, ``measure.STATS_SCHEMA``:
per-ACK snapshots ``invokes`` + ``unknown_flow_acks`` in ``--fold userspace``,
``kernel_fold.reports`` in ``--fold kernel``; create/release/state events are not counted) per
second per flow and per RTT per flow (RTT: mean of iperf3's per-stream sender ``mean_rtt``); and
the latency from kernel record to command: ``report_to_cwnd_us`` p50 and p99 of the stats in
``--fold kernel`` and ``event_to_command_us`` in ``--fold userspace`` (n/a without a sample).

Targets for ``--fold kernel``, shown as ratios with PASS/MISS (medians over the
repetitions; a ratio is the median of the per-repetition ratios, see ``evaluate_targets``):
throughput >= 0.97x kernel cubic at full speed at 1, 10 and 100 flows; own
CPU <= 1.05x kernel cubic's when paced (and only when the paced throughputs
are equal within 3%: otherwise MISS); BPF time per ACK (all programs) under
1.5 us; at most 2 user-space messages per RTT per flow. Beside each median: its 95% bootstrap
interval over the repetitions (``median_interval``, scipy.stats.bootstrap), and a verdict whose
interval reaches across the bound says so: on a VM whose repetitions spread by +-15% such a
PASS or MISS is the noise's to decide. ``--from JSON`` prints the tables of a run saved with
``--json`` again (no root, nothing run).

Needs root, kernel BTF, iperf3, ip, ss, bpftool, clang (``bpf-cubic``) and the built binaries
(``cargo build --release -p ccp-datapath -p ccp-algorithms``). Runs under the
host's netlab lock (``flock /tmp/ccplab-netlab.lock``); started without it,
it takes the lock itself. Everything it starts, the namespaces and the
sysctl are undone on exit, on an error and on SIGINT/SIGTERM/SIGHUP;
namespaces of a benchmark that was SIGKILLed are removed by the next one.
Exit status 0 after printing (a MISS is a figure, not a failure), 2 when the
machine cannot run it (the message names what is missing), 130 when
interrupted.

Modules:
    plan      the modes, flow counts, loads and algorithm settings; the order of the runs; the CPU window
    measure   each figure from /proc, bpftool, iperf3 and the datapath; `Measurement`, ``--json`` files read back
    targets   the targets of ``--fold kernel`` and the two tables
    host      preflight, namespaces, the reference CCA, the daemons: `Bench` runs one measurement
    cli       the command line (``python -m ccplab.dpbench``, ``make bench``)
"""
