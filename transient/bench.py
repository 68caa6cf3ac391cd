"""Benchmark of the log reader: ``make bench`` (``python -m transient.bench``).

Generates 100 synthetic runs x 60 s at 12 Mbit/s (mm-link logs: one
delivery opportunity, one arrival and one departure per ms, queueing delays
of a sawtooth, a header like ccplab-link's; about 2.5 MB each) in a
temporary directory, then times on the same files, in this run:

* baseline: a plain line-by-line Python parser (split each line, int() the
  fields, append to lists), the way a 20-line script would;
* ours, cold: `transient.read_link_log` without the cache (polars' CSV
  reader, checked with numpy), in one process and in one process per core;
* ours, cached: the same logs again through the Parquet cache beside them;
* end to end: `transient.analyze_all` on the tree (every run's whole-run
  metrics and step analysis), cold and then with the cache.

Prints seconds and MB/s (MB = 10^6 bytes of log) for each and the speed-up
over the baseline.  Targets: >= 100 MB/s end to end and >= 10x the baseline.

Then one big bare log (``--big-mb``, default 100 MB of the same synthetic
kind), each in a fresh process as a user runs it, with wall time and peak
RSS (from wait4: the largest of the process and the children it waited for,
so the compiled reducer ``ccplab-logreduce`` is counted): a 20-line Python
loop that bins the departures' bytes per 50 ms (`BIG_LOOP`); ``python -m
transient LOG --step 0:0:12 --rtt-ms 50`` cold (no cache: the reducer, when
built, writes the log's per-ms reduction while Python imports the analysis);
the same again from the cache it wrote (`transient.cache.arrays_cache_path`);
the reducer alone.  The analysis and the reducer overlap only while Python
starts, so the tree's peak is at most the reducer's plus the cached
analysis's (printed too).  Targets: the cold analysis in <= 1/5 of the
loop's time, peak RSS <= 2x the log's size.

With ``--flows MANY ONE`` (two run directories of equal duration, e.g. 16
staggered flows and one flow; ``make bench`` records both), the analysis of
each, in this process, warm, without the cache, alternating: CPU seconds per
analysis (median of ``--flow-repeats``) and per MB of log (uplink.log +
uplink.flows).  Target: the many-flow run within 2x the one-flow run per MB.

The cold parse and the big log's commands are repeated (``--repeats``, 3),
interleaved, and printed as the best with every run's figure beside it.

Options: ``--runs N`` (0: skip the corpus) ``--seconds S`` ``--keep DIR``
``--big-mb MB`` (0: skip) ``--repeats N`` ``--flows MANY ONE`` (only that
part) ``--flow-repeats N``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

VARIANTS = 4  # distinct synthetic logs; the runs cycle through them


def synthetic_log(seconds: int, seed: int) -> bytes:
    """60 s at 12 Mbit/s: per ms one '#', one '+' and one '-' of 1504 B; delays a noisy sawtooth."""
    n = seconds * 1000
    rng = np.random.default_rng(seed)
    t = np.arange(n).astype(str)
    delay = ((np.arange(n) % 2000) // 50 + rng.integers(0, 3, n)).astype(str)
    lines = np.empty(3 * n, dtype=object)
    lines[0::3] = np.char.add(t, " # 1504")
    lines[1::3] = np.char.add(t, " + 1504")
    lines[2::3] = np.char.add(np.char.add(t, " - 1504 "), delay)
    header = ("# mahimahi mm-link (ccplab-link) [bench.trace] > uplink.log\n# command line: ccplab-link (bench)\n"
              "# queue: droptail [packets=100]\n# init timestamp: 1795365488739\n# base timestamp: 0\n")
    return (header + "\n".join(lines.tolist()) + "\n").encode()


def make_runs(root: Path, runs: int, seconds: int) -> list[Path]:
    """Write ``runs`` run directories (metadata.json + uplink.log) under ``root``; returns the logs."""
    variants = [synthetic_log(seconds, seed) for seed in range(min(VARIANTS, runs))]
    logs = []
    for k in range(runs):
        d = root / f"run-{k + 1:03d}"
        d.mkdir(parents=True)
        (d / "uplink.log").write_bytes(variants[k % len(variants)])
        meta = {"schema": 2, "cca": "kernel:cubic", "run": k + 1, "flow_start_s": 0.0,
                "scenario": {"name": "bench", "trace_kind": "step", "one_way_delay_ms": 25, "queue_packets": 100,
                             "duration_s": seconds, "steps": [{"at_s": 0.0, "from_mbps": 0.0, "to_mbps": 12.0}]},
                "files": {"link_log": "uplink.log"}}
        (d / "metadata.json").write_text(json.dumps(meta))
        logs.append(d / "uplink.log")
    return logs


BIG_LOOP = """
import sys
from collections import defaultdict
bins = defaultdict(int)
with open(sys.argv[1]) as f:
    for line in f:
        if line.startswith("#"):
            continue
        fields = line.split()
        if fields[1] == "-":
            bins[int(fields[0]) // 50] += int(fields[2])
print(len(bins))
"""
"""The simple loop the big-log analysis is compared with: departures' bytes per 50 ms bin."""


_MEASURE = """
import os, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(proc.pid, 0)
print(time.perf_counter() - start, os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""
# A small interpreter starts the measured command: a child forked straight from this (big) process would
# count the parent's pages it started with in its peak RSS.


def timed_process(argv: list[str]) -> tuple[float, float]:
    """(wall s, peak RSS MB) of one child process run to its end (its own rusage, os.wait4).

    Raises RuntimeError with the command and its stderr when it fails.
    """
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True)
    try:
        wall, status, rss_kib = done.stdout.split()
    except ValueError:
        status = "?"
    if done.returncode != 0 or status != "0":
        raise RuntimeError(f"{' '.join(argv)} failed (status {status}): {done.stderr.strip()[-500:]}")
    return float(wall), int(rss_kib) / 1024.0  # Linux: ru_maxrss in KiB


def big_log(root: Path, megabytes: float, repeats: int = 3) -> None:
    """Write one synthetic bare log of about ``megabytes`` MB and print the loop vs our analysis
    (see the module docstring); each measured ``repeats`` times, the best wall time and its RSS."""
    import sys

    seconds = max(int(megabytes * 1e6 / 46.1 / 1000), 1)  # ~46 bytes of log per ms (3 lines)
    log = root / "big" / "uplink.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(synthetic_log(seconds, 0))
    mb = log.stat().st_size / 1e6
    loop = root / "big" / "loop.py"
    loop.write_text(BIG_LOOP)
    from transient.cache import arrays_cache_path, cache_path

    from transient.reducer import reducer_binary

    analyse = [sys.executable, "-m", "transient", str(log), "--step", "0:0:12", "--rtt-ms", "50"]
    binary = reducer_binary()
    rows = {"loop": [], "cold": [], "cached": [], **({"reducer": []} if binary else {})}
    for _ in range(repeats):  # interleaved, so a shared machine's drift hits each alike
        rows["loop"].append(timed_process([sys.executable, str(loop), str(log)]))
        for cache in (cache_path(log), arrays_cache_path(log)):
            cache.unlink(missing_ok=True)
        rows["cold"].append(timed_process(analyse))
        rows["cached"].append(timed_process(analyse))
        if binary:
            rows["reducer"].append(timed_process([str(binary), str(log), "--out", str(log.parent / "alone.ms.npz")]))
    print(f"one bare log of {mb:.0f} MB ({seconds} s at 12 Mbit/s), fresh process each, best of {repeats} "
          "(all runs' wall s in brackets):")
    if not binary:
        print("  (ccplab-logreduce is not built: the cold analysis reduces the log in Python)")
    best = {k: min(v) for k, v in rows.items()}
    names = {"loop": "baseline: 20-line loop binning bytes", "cold": "ours: python -m transient, cold",
             "cached": "ours: python -m transient, cached", "reducer": "ours: ccplab-logreduce alone"}
    for k, (wall, rss) in best.items():
        print(f"  {names[k]:<44} {wall:7.2f} s  {mb / wall:8.1f} MB/s  peak RSS {rss:6.0f} MB "
              f"({rss / mb:.1f}x the log)  [{_spread(w for w, _ in rows[k])}]")
    if binary:
        bound = max(r for _, r in rows["reducer"]) + max(r for _, r in rows["cached"])
        print(f"  peak RSS of the cold run's process tree <= reducer + cached analysis = {bound:.0f} MB "
              f"({bound / mb:.1f}x the log)")
    ratios = {k: sorted(w / l for (w, _), (l, _) in zip(rows[k], rows["loop"])) for k in ("cold", "cached")}
    print(f"cold analysis / loop: {best['cold'][0] / best['loop'][0]:.2f} (target <= 0.20; per repetition "
          f"{_spread(ratios['cold'], 2)}); cached / loop: {best['cached'][0] / best['loop'][0]:.2f} "
          f"(per repetition {_spread(ratios['cached'], 2)})")


def _spread(values, digits: int = 2) -> str:
    """The values, smallest first, as "a / b / c"."""
    return " / ".join(f"{v:.{digits}f}" for v in sorted(values))


def baseline_parse(path: Path) -> int:
    """The line-by-line Python parser the reader is compared with (returns the event count)."""
    times, kinds, sizes, delays = [], [], [], []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            fields = line.split()
            times.append(int(fields[0]))
            kinds.append(fields[1])
            sizes.append(int(fields[2]))
            delays.append(float(fields[3]) if len(fields) > 3 else float("nan"))
    return len(times)


def ours_parse(path: Path) -> int:
    """`transient.read_link_log` without the cache (returns the event count)."""
    from transient.mahimahi import read_link_log

    return len(read_link_log(path, cache=False).events)


def ours_cached(path: Path) -> int:
    from transient.mahimahi import read_link_log

    return len(read_link_log(path).events)


def _timed(fn, paths, workers: int = 1) -> float:
    start = time.perf_counter()
    if workers == 1:
        counts = [fn(p) for p in paths]
    else:
        ctx = multiprocessing.get_context("forkserver")  # as transient.analyze: pyarrow does not survive fork
        ctx.set_forkserver_preload(["transient.mahimahi", "polars", "pandas"])  # what reading a log imports
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            counts = list(pool.map(fn, paths, chunksize=max(len(paths) // (4 * workers), 1)))
    elapsed = time.perf_counter() - start
    assert all(c > 0 for c in counts)
    return elapsed


def flow_cost(many: Path, one: Path, repeats: int = 7) -> float:
    """Print the CPU cost of analysing run directory ``many`` against ``one`` per MB of log; returns the ratio.

    Each is analysed once to warm up, then ``repeats`` times alternating
    (`transient.analyze_all`, no Parquet cache); CPU time of this process
    (time.process_time, every thread).  Raises FileNotFoundError naming a
    run directory without an uplink.log.
    """
    import transient

    def log_mb(run: Path) -> float:
        logs = [run / "uplink.log", run / "uplink.flows"]
        if not logs[0].exists():
            raise FileNotFoundError(f"{run}: no uplink.log (a run directory of `ccplab run` is needed)")
        return sum(p.stat().st_size for p in logs if p.exists()) / 1e6

    opts = transient.AnalysisOptions(cache=False)
    cost: dict[Path, list[float]] = {many: [], one: []}
    for run in cost:
        transient.analyze_all(run, options=opts)
    for _ in range(repeats):
        for run in cost:
            start = time.process_time()
            transient.analyze_all(run, options=opts)
            cost[run].append(time.process_time() - start)
    per_mb = {}
    for run, xs in cost.items():
        xs.sort()
        flows = len(json.loads((run / "metadata.json").read_text()).get("flows") or [None])
        per_mb[run] = xs[len(xs) // 2] / log_mb(run)
        print(f"  {run.name}: {flows} flow(s), {log_mb(run):.2f} MB of log: CPU s per analysis median "
              f"{xs[len(xs) // 2]:.3f} (min {xs[0]:.3f}, max {xs[-1]:.3f}); {per_mb[run]:.3f} s/MB")
    ratio = per_mb[many] / per_mb[one]
    print(f"many-flow vs one-flow analysis per MB of log: {ratio:.2f}x (target: <= 2x)")
    return ratio


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m transient.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=100, help="runs of the corpus part (0: only the big log)")
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--keep", type=Path, help="generate into this (new) directory and keep it")
    p.add_argument("--big-mb", type=float, default=100.0, help="size of the one big log, MB (0: skip it)")
    p.add_argument("--flows", type=Path, nargs=2, metavar=("MANY", "ONE"),
                   help="only compare the analysis of two run directories (many flows, one flow) per MB of log")
    p.add_argument("--flow-repeats", type=int, default=7, help="analyses of each run for --flows (median)")
    p.add_argument("--repeats", type=int, default=3,
                   help="repetitions of the cold parse of the runs and of the big log's three commands (best "
                        "printed, and every run's figure)")
    args = p.parse_args(argv)
    if args.flows:
        flow_cost(*args.flows, repeats=args.flow_repeats)
        return 0
    import transient
    from transient.cache import arrays_cache_path, cache_path

    tmp = None
    if args.keep:
        root = args.keep
    else:
        tmp = tempfile.mkdtemp(prefix="transient-bench-")
        root = Path(tmp)
    try:
        if args.runs > 0:
            t0 = time.perf_counter()
            logs = make_runs(root, args.runs, args.seconds)
            mb = sum(p.stat().st_size for p in logs) / 1e6
            cores = len(os.sched_getaffinity(0))
            print(f"{args.runs} runs x {args.seconds} s at 12 Mbit/s: {mb:.0f} MB of logs "
                  f"(generated in {time.perf_counter() - t0:.1f} s); {cores} cores")
            rows = []

            def row(name, seconds, runs=None):
                rows.append((name, seconds))
                spread = f"  [{_spread(runs)}]" if runs and len(runs) > 1 else ""
                print(f"  {name:<44} {seconds:7.2f} s  {mb / seconds:8.1f} MB/s{spread}")

            cold = {"base": [], "one": [], "many": []}
            for _ in range(args.repeats):  # interleaved, so a shared machine's drift hits each alike
                cold["base"].append(_timed(baseline_parse, logs))
                cold["one"].append(_timed(ours_parse, logs))
                cold["many"].append(_timed(ours_parse, logs, cores))
            if args.repeats > 1:
                print(f"cold parse: best of {args.repeats}, interleaved (all runs' s in brackets):")
            base = min(cold["base"])
            row("baseline: line-by-line Python", base, cold["base"])
            row("ours: read_link_log, cold, 1 process", min(cold["one"]), cold["one"])
            row(f"ours: read_link_log, cold, {cores} processes", min(cold["many"]), cold["many"])
            _timed(ours_cached, logs, cores)  # writes the Parquet caches
            row("ours: read_link_log from the Parquet cache", _timed(ours_cached, logs))
            for name, workers in (("1 process", 1), (f"{cores} processes", cores)):
                for log in logs:  # both caches: the events' and the per-ms reduction's
                    for cache in (cache_path(log), arrays_cache_path(log)):
                        cache.unlink(missing_ok=True)
                start = time.perf_counter()
                transient.analyze_all(root, workers=workers)
                row(f"end to end: analyze_all, cold, {name}", time.perf_counter() - start)
                start = time.perf_counter()
                transient.analyze_all(root, workers=workers)
                row(f"end to end: analyze_all, cached, {name}", time.perf_counter() - start)
            best_cold = min(rows[1][1], rows[2][1])
            per_rep = [b / min(o, m) for b, o, m in zip(cold["base"], cold["one"], cold["many"])]
            print(f"speed-up over the baseline: cold parse {base / best_cold:.1f}x (per repetition "
                  f"{_spread(per_rep, 1)}), cached {base / rows[3][1]:.1f}x; "
                  f"end to end {mb / min(r[1] for r in rows[4:]):.0f} MB/s at best (targets: >= 100 MB/s, >= 10x)")
        if args.big_mb > 0:
            big_log(root, args.big_mb, args.repeats)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
