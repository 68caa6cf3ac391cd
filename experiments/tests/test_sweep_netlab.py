"""``ccplab sweep`` with real flows on Dask LocalClusters (root, namespaces; run under the netlab lock).

experiments/sweeps/small.toml: 2 kernel CCAs x 2 scenarios x 2 runs of 3 s. Kernel CCAs
only, so the two-worker cluster may run two flows on this host at once (``ccp`` can be
registered once per host).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter

import psutil
import pytest

from ccplab import cli, store
from ccplab.plumbing.processes import RUNNER_ENV
from ccplab.sweepfile import load_sweep

from netlab import SWEEPS, link_ready, namespaces, wait_for

pytestmark = pytest.mark.network

SMALL = SWEEPS / "small.toml"


@pytest.fixture(scope="module")
def one_worker_sweep(tmp_path_factory):
    """The small sweep on the default local cluster (one worker): its directory."""
    from netlab import require_netlab

    require_netlab()
    out = tmp_path_factory.mktemp("sweep1") / "sw"
    assert cli.main(["sweep", str(SMALL), "--out", str(out)]) == 0
    return out


def _tables(out):
    st = out / "store"
    return store.read(st, "runs"), store.read(st, "steps"), store.read(st, "failed")


def test_small_sweep_on_a_local_cluster(one_worker_sweep):
    runs, steps, failed = _tables(one_worker_sweep)
    plan = [r.run_id for r in load_sweep(SMALL).plan()]
    assert sorted(runs["sweep_run_id"]) == sorted(plan) and failed.empty
    assert (runs["utilization"] > 0.6).all(), runs[["sweep_run_id", "utilization"]]
    assert set(steps.groupby("sweep_run_id").size()) == {1, 2}  # start only; start and step down
    assert all((one_worker_sweep / "runs" / rid / "metadata.json").is_file() for rid in plan)


def _worker_link(sweep_pid: int):
    """(worker pid, ccplab-link pid) of a run in progress under the sweep process ``sweep_pid``, or None."""
    workers = {p.pid for p in psutil.Process(sweep_pid).children(recursive=True)}
    for p in psutil.process_iter(["pid", "name", "environ"]):
        runner = (p.info.get("environ") or {}).get(RUNNER_ENV)
        if p.info["name"] == "ccplab-link" and runner and int(runner) in workers:
            return int(runner), p.pid
    return None


def test_worker_killed_mid_run_is_rerun_and_tables_match_one_worker(one_worker_sweep, tmp_path):
    """Two workers; one is SIGKILLed while its flow runs: the run is redone elsewhere, nothing lost or doubled,
    and the tables have the same rows and columns as the one-worker sweep's."""
    before = namespaces()
    out, scratch = tmp_path / "sw", tmp_path / "scratch"
    proc = subprocess.Popen([sys.executable, "-m", "ccplab.cli", "sweep", str(SMALL), "--out", str(out),
                             "--workers", "2"], env={**os.environ, "CCPLAB_SCRATCH": str(scratch)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        worker, link = wait_for(lambda: _worker_link(proc.pid), 60, "a worker's run with a live ccplab-link")
        wait_for(lambda: any(link_ready(p) for p in scratch.rglob(f".run.partial-{worker}")), 30,
                 f"the link of worker {worker}'s run to be ready")
        os.kill(worker, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "8 run(s) finished, 0 failed" in stdout
    runs, steps, failed = _tables(out)
    one_runs, one_steps, _ = _tables(one_worker_sweep)
    assert Counter(runs["sweep_run_id"]) == Counter(one_runs["sweep_run_id"])  # each run exactly once
    assert list(runs.columns) == list(one_runs.columns) and list(steps.columns) == list(one_steps.columns)
    assert steps.groupby("sweep_run_id").size().to_dict() == one_steps.groupby("sweep_run_id").size().to_dict()
    assert failed.empty
    # the killed worker's daemons died with it
    wait_for(lambda: namespaces() <= before, 20, "the killed worker's namespaces to go")
    assert not [p.pid for p in psutil.process_iter(["environ"])
                if (p.info.get("environ") or {}).get(RUNNER_ENV) == str(worker)]
