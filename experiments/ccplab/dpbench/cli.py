"""``python -m ccplab.dpbench``: its options, a run of the benchmark, ``--from`` a saved one."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

from ccplab_util.atomic import write_atomic

from ..binaries import REPO_ROOT, bin_dir
from ..cca import DATAPATH_CA, kernel_ccs
from ..errors import CcplabError
from ..plumbing.locks import netlab_lock
from .host import MTU, STATS_SUFFIX, Bench, bpf_stats_enabled, offloads, preflight, remove_stale_namespaces, unregister_reference
from .measure import Measurement, background_busy, load_measurements
from .plan import (ALGORITHM, ALGORITHM_LOG_FILTER, ALGORITHM_PARAMS, DEFAULT_MODES, FLOWS, LOADS, MODES, OMIT_S,
                   PACED_TOTAL_MBPS, REFERENCE_CA, WINDOW_TAIL_S, run_plan, steady_window)
from .targets import evaluate_targets, results_table, targets_table

def _commit() -> str:
    done = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (done.stdout.strip() or "unknown") + ("+dirty" if dirty else "")


def _raise_on_signal(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run_bench(args: argparse.Namespace) -> int:
    window = steady_window(args.duration_s, args.omit_s)  # a bad pair fails before anything runs
    preflight(args.modes)
    plan = run_plan(args.flows, args.reps, args.modes, args.loads)
    params = {**ALGORITHM_PARAMS, **dict(args.algorithm_param)}
    with netlab_lock(), ExitStack() as stack:
        if DATAPATH_CA in kernel_ccs():  # checked under the lock: whoever held it is done
            raise CcplabError(f"congestion control '{DATAPATH_CA}' is already registered: a ccp-datapath runs "
                              "outside the netlab lock (or a killed one left it: `ccplab clean`)")
        if unregister_reference():
            print(f"unregistered {REFERENCE_CA}, left registered by a killed benchmark", file=sys.stderr)
        stale = remove_stale_namespaces()
        if stale:
            print(f"removed namespaces of a killed benchmark: {', '.join(stale)}", file=sys.stderr)
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ccplab-dpbench-")))
        if args.keep_logs:
            stack.callback(_copy_logs, workdir, args.keep_logs)
        stack.enter_context(bpf_stats_enabled())
        bench = Bench(stack, workdir, args.duration_s, params, args.omit_s, args.pin_cpu)
        idle = background_busy()
        print(f"datapath benchmark: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {_commit()}"
              f"{'' if bin_dir() == REPO_ROOT / 'target' / 'release' else f' (binaries from {bin_dir()})'}, "
              f"{os.cpu_count()} cores, veth MTU {MTU} ({offloads(bench.snd)}), iperf3 -t {args.duration_s} "
              f"(CPU over {window[0]:g}-{window[1]:g} s of each run), "
              f"algorithm ccp-algorithms {ALGORITHM} {params} (RUST_LOG={ALGORITHM_LOG_FILTER}); "
              f"{'' if args.pin_cpu is None else f'iperf3 client and server on CPU {args.pin_cpu}, '}"
              f"paced = iperf3 -b per stream, "
              f"{PACED_TOTAL_MBPS / 1000:g} Gbit/s in total; background busy {100 * idle:.1f}% before the runs",
              flush=True)
        measurements: list[Measurement] = []
        for i, (flows, paced, rep, mode) in enumerate(plan, 1):
            m = bench.measure(mode, flows, paced, rep)
            measurements.append(m)
            print(f"  [{i}/{len(plan)}] {flows:>3} flows {'paced' if paced else 'full '} {mode:<19} "
                  f"{m.gbps:6.2f} Gbit/s busy {100 * m.busy:5.1f}%", file=sys.stderr, flush=True)
    print()
    print(results_table(measurements, args.flows))
    print()
    print(targets_table(evaluate_targets(measurements, args.flows)))
    print("\nbusy% = share of both cores (/proc/stat) over the steady window of each run; own% = the part of it "
          "used by iperf3 client and server, ccp-datapath, the algorithm and ksoftirqd (scheduler run time; busy% is "
          "tick-sampled), dmn% = ccp-datapath + algorithm; bpf% = BPF time (bpf ns/ACK x ACKs/s) on the same "
          "scale; run% = own% over the whole run, setup and teardown "
          "included; cc ns = BPF ns per ccp_cong_control call "
          "(what it tail-calls included); bpf ns/ACK = BPF ns of the ccp programs that run per ACK (all but "
          "init and release) per cong_control call; msg = kernel-to-user records "
          "(userspace fold: per-ACK snapshots; kernel fold: reports); cmd lat = report->cwnd (kernel fold) or "
          "event->command (userspace fold), us; kACK/s = TCP segments the senders received per second "
          "(/proc/net/snmp InSegs).")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.json, json.dumps([asdict(m) for m in measurements], indent=1))
        print(f"measurements: {args.json}")
    return 0


def _copy_logs(workdir: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for p in [*workdir.glob("*.log"), *workdir.glob(f"*-{STATS_SUFFIX}")]:
        (dest / p.name).write_bytes(p.read_bytes())


def _flow_counts(text: str) -> list[int]:
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--flows {text!r}: expected comma-separated integers, e.g. 1,10,100")
    if not counts or any(c < 1 or c > 128 for c in counts):
        raise argparse.ArgumentTypeError(f"--flows {text!r}: each count must be 1..128 (iperf3's -P limit)")
    return counts


def _names(flag: str, allowed: Sequence[str]):
    """argparse type: a comma-separated subset of ``allowed``, in ``allowed``'s order."""
    def parse(text: str) -> list[str]:
        names = text.split(",")
        bad = [n for n in names if n not in allowed]
        if bad or not text:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected a comma-separated subset of "
                                             f"{','.join(allowed)}")
        return [a for a in allowed if a in names]
    return parse


def _param(text: str) -> tuple[str, str]:
    """argparse type: ``FLAG=VALUE`` (FLAG without ``--``) for the algorithm's command line."""
    flag, sep, value = text.partition("=")
    if not sep or not flag or not value or flag.startswith("-"):
        raise argparse.ArgumentTypeError(f"--algorithm-param {text!r}: expected FLAG=VALUE without --, "
                                         "e.g. min-report-interval-us=20000")
    return flag, value


def _whole_number(minimum: int, what: str) -> Callable[[str], int]:
    """argparse type: an integer >= ``minimum``, refused as not being ``what``."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = minimum - 1
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return v
    return parse


def _cpu(text: str) -> int:
    """argparse type of --pin-cpu: the number of one of this host's CPUs."""
    cpu = _whole_number(0, "a CPU number")(text)
    if cpu not in os.sched_getaffinity(0):
        raise argparse.ArgumentTypeError(f"CPU {cpu} is not one this process may run on "
                                         f"({', '.join(map(str, sorted(os.sched_getaffinity(0))))})")
    return cpu


_positive = _whole_number(1, "a positive integer")
_non_negative = _whole_number(0, "a whole number of seconds >= 0")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ccplab.dpbench",
        description="Datapath benchmark: kernel cubic vs ccp-datapath (cubic) with the fold in "
                    "the kernel and in user space, alternating, over a veth pair; prints throughput, busy CPU, BPF "
                    "cost per ACK, user-space messages per flow, command latency and the targets. "
                    "Needs root; runs under the netlab lock.")
    p.add_argument("--duration-s", type=_positive, default=8, help="seconds per iperf3 run (default %(default)s)")
    p.add_argument("--omit-s", type=_non_negative, default=OMIT_S,
                   help="seconds at the start of each run left out of the CPU figures (connection setup, slow "
                        f"start; as iperf3 --omit); the window closes {WINDOW_TAIL_S} s before the run's end "
                        "(default %(default)s)")
    p.add_argument("--reps", type=_positive, default=4,
                   help="repetitions of the alternation (default %(default)s; the targets take medians over them)")
    p.add_argument("--flows", type=_flow_counts, default=list(FLOWS),
                   help="parallel flow counts, comma-separated (default 1,10,100)")
    p.add_argument("--loads", type=_names("--loads", list(LOADS)), default=list(LOADS),
                   help="loads to run, comma-separated subset of full,paced (default: both)")
    p.add_argument("--modes", type=_names("--modes", MODES), default=list(DEFAULT_MODES),
                   help=f"modes to alternate, comma-separated subset of {','.join(MODES)} (default: "
                        f"{','.join(DEFAULT_MODES)}; ccp-kernel-interp interprets the fold programs instead "
                        "of compiling them; the targets compare ccp-kernel-fold with kernel)")
    p.add_argument("--algorithm-param", type=_param, action="append", default=[], metavar="FLAG=VALUE",
                   help=f"a flag of ccp-algorithms {ALGORITHM} (without --) over ALGORITHM_PARAMS "
                        f"{ALGORITHM_PARAMS}; repeatable; printed in the header")
    p.add_argument("--pin-cpu", type=_cpu, metavar="N",
                   help="run every iperf3 client and its server's side of the test on CPU N (iperf3 -A N,N; the "
                        "veth's softirq work follows the sender): a run then measures the stack's cost per byte "
                        "on one core, not where the scheduler put sender, receiver and softirq (one flow's "
                        "throughput spreads by a third between runs with placement left free). Default: free")
    p.add_argument("--json", type=Path, help="also write every measurement to this JSON file")
    p.add_argument("--keep-logs", type=Path, metavar="DIR",
                   help="copy the daemons' logs and the datapath's stats files into DIR")
    p.add_argument("--from", dest="from_json", type=Path, metavar="JSON",
                   help="run nothing: print the tables and targets of a run saved with --json")
    return p


def print_saved(path: Path) -> int:
    """Print the results and targets tables of a saved run (``--from``); no root, no network."""
    ms = load_measurements(path)
    flows = sorted({m.flows for m in ms})
    print(f"saved run {path}: {len(ms)} measurements, {max((m.rep for m in ms), default=0)} repetitions")
    print(results_table(ms, flows))
    print()
    print(targets_table(evaluate_targets(ms, flows)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (see the module doc)."""
    args = build_parser().parse_args(argv)
    if args.from_json is not None:
        try:
            return print_saved(args.from_json)
        except CcplabError as exc:
            print(f"dpbench: error: {exc}", file=sys.stderr)
            return 2
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_on_signal)
    try:
        return run_bench(args)
    except CcplabError as exc:
        print(f"dpbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dpbench: interrupted; cleaned up", file=sys.stderr)
        return 130
