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
over the baseline.  Targets (issue 6): >= 100 MB/s end to end and >= 10x
the baseline.  Options: ``--runs N`` ``--seconds S`` ``--keep DIR``.
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
        ctx.set_forkserver_preload(["transient.mahimahi"])
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            counts = list(pool.map(fn, paths, chunksize=max(len(paths) // (4 * workers), 1)))
    elapsed = time.perf_counter() - start
    assert all(c > 0 for c in counts)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m transient.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--keep", type=Path, help="generate into this (new) directory and keep it")
    args = p.parse_args(argv)
    import transient

    tmp = None
    if args.keep:
        root = args.keep
    else:
        tmp = tempfile.mkdtemp(prefix="transient-bench-")
        root = Path(tmp)
    try:
        t0 = time.perf_counter()
        logs = make_runs(root, args.runs, args.seconds)
        mb = sum(p.stat().st_size for p in logs) / 1e6
        cores = len(os.sched_getaffinity(0))
        print(f"{args.runs} runs x {args.seconds} s at 12 Mbit/s: {mb:.0f} MB of logs "
              f"(generated in {time.perf_counter() - t0:.1f} s); {cores} cores")
        rows = []

        def row(name, seconds):
            rows.append((name, seconds))
            print(f"  {name:<44} {seconds:7.2f} s  {mb / seconds:8.1f} MB/s")

        base = _timed(baseline_parse, logs)
        row("baseline: line-by-line Python", base)
        row("ours: read_link_log, cold, 1 process", _timed(ours_parse, logs))
        row(f"ours: read_link_log, cold, {cores} processes", _timed(ours_parse, logs, cores))
        _timed(ours_cached, logs, cores)  # writes the Parquet caches
        row("ours: read_link_log from the Parquet cache", _timed(ours_cached, logs))
        for name, workers in (("1 process", 1), (f"{cores} processes", cores)):
            for cache in root.rglob("*.parquet"):
                cache.unlink()
            start = time.perf_counter()
            transient.analyze_all(root, workers=workers)
            row(f"end to end: analyze_all, cold, {name}", time.perf_counter() - start)
            start = time.perf_counter()
            transient.analyze_all(root, workers=workers)
            row(f"end to end: analyze_all, cached, {name}", time.perf_counter() - start)
        cold = min(rows[1][1], rows[2][1])
        print(f"speed-up over the baseline: cold parse {base / cold:.1f}x, cached {base / rows[3][1]:.1f}x; "
              f"end to end {mb / min(r[1] for r in rows[4:]):.0f} MB/s at best (targets: >= 100 MB/s, >= 10x)")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
