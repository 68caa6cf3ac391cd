"""``ccplab sweep``'s machinery: experiment files, order, resume, retries and the Parquet store.

The flow of each run here is synthetic (a simulated FIFO link written as an
mm-link log, analysed by the real ``transient``), so these tests need no root;
real flows through a two-worker Dask cluster are in test_sweep_netlab.py.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from ccplab import cli, store
from ccplab.errors import CcplabError
from ccplab.sweep import execute, pending, run_task
from ccplab.sweepfile import load_sweep

from netlab import SWEEPS, synthetic_flow, write_sweep

SMALL = SWEEPS / "small.toml"


def test_small_and_tpcca_files_expand_their_cross_products():
    small = load_sweep(SMALL)
    assert (len(small.scenarios), len(small.ccas), small.repetitions, len(small.plan())) == (2, 2, 2, 8)
    assert [str(s) for s in small.scenarios[1].steps] == ["0:0:12", "2:12:4"]
    tpcca = load_sweep(SWEEPS / "tpcca.toml")
    assert len(tpcca.plan()) == 3 * 2 * 2 * 100  # the poster's grid
    assert {(s.queue_packets, s.steps[0].to_mbps) for s in tpcca.scenarios} == {(40, 12), (40, 48), (100, 12),
                                                                                 (100, 48)}
    assert tpcca.estimate_s() == pytest.approx(1200 * (60 + 2.5))


def test_order_is_seeded_shuffled_and_blocked_by_repetition(tmp_path):
    sweep = load_sweep(SMALL)
    plan = sweep.plan()
    assert [r.run_id for r in plan] == [r.run_id for r in load_sweep(SMALL).plan()]  # same seed, same order
    combos = {(r.scenario.name, r.cca) for r in plan}
    for rep in (1, 2):  # every combination once per repetition block
        block = plan[(rep - 1) * 4: rep * 4]
        assert {(r.scenario.name, r.cca) for r in block} == combos and {r.repetition for r in block} == {rep}
    other = write_sweep(tmp_path, SMALL.read_text().replace("seed = 7", "seed = 8", 1))
    assert [r.run_id for r in load_sweep(other).plan()] != [r.run_id for r in plan]
    unshuffled = [(s.name, c) for s in sweep.scenarios for c in sweep.ccas]
    assert [(r.scenario.name, r.cca) for r in plan[:4]] != unshuffled or \
           [(r.scenario.name, r.cca) for r in plan[4:]] != unshuffled


@pytest.mark.parametrize("text, fragment", [
    ('name = "x"\nccas = ["kernel:cubic"]\nrepeats = 3\n', "unknown key(s) repeats"),
    ('name = "x"\nccas = []\n', "ccas must be a non-empty list"),
    ('name = "x y"\nccas = ["kernel:cubic"]\n', "name must be letters"),
    ('name = "x"\nccas = ["kernel:cubic"]\n[scenario]\nsteps = ["0:12"]\n', "bad step '0:12'"),
    ('name = "x"\nccas = ["kernel:cubic"]\n[scenario]\nsteps = "0:0:12 30:12:4"\nduration_s = 20\n',
     "not before the end of the 20 s run"),
    ('name = "x"\nccas = ["kernel:cubic"]\n[scenario]\nqueue_packets = 0\n', "queue_packets must be a whole number >= 1"),
    ('name = "x"\nccas = ["kernel:cubic"]\n[scenario]\ntrace = "none.trace"\n', "none.trace does not exist"),
    ('name = "x"\nccas = ["kernel:cubic"\n', "not valid TOML"),
    ('name = "x"\nccas = ["kernel:cubic"]\n[scenario]\nquickack = 1\n', "quickack must be true or false"),
])
def test_bad_experiment_file_names_file_and_key(tmp_path, text, fragment):
    path = write_sweep(tmp_path, text)
    with pytest.raises(CcplabError, match=fragment.replace("(", r"\(").replace(")", r"\)")) as err:
        load_sweep(path)
    assert str(path) in str(err.value)


def test_dry_run_prints_plan_and_estimate(capsys):
    assert cli.main(["sweep", str(SMALL), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 scenario(s) x 2 CCA(s) x 2 repetition(s) = 8 runs" in out
    assert "estimated time at one run at a time: 0h00m44s" in out


def test_quickack_key_crosses_and_reaches_the_run(tmp_path):
    from ccplab.sweep import payload

    path = write_sweep(tmp_path, 'name = "x"\nccas = ["kernel:cubic"]\n[scenario]\nquickack = [false, true]\n')
    sweep = load_sweep(path)
    assert [s.quickack for s in sweep.scenarios] == [False, True]
    names = [s.name for s in sweep.scenarios]
    assert names[1] == names[0] + "_quickack", "the two receivers are two scenarios"
    assert "receiver ACKs every segment" in sweep.scenarios[1].describe()
    p = payload(sweep, tmp_path / "sw", sweep.plan()[0], "dest")
    assert "quickack" in p and isinstance(p["quickack"], bool)


@pytest.fixture(autouse=True)
def _own_scratch(tmp_path, monkeypatch):
    """Workers' scratch directories in this test's tmp_path (also for spawned Dask workers)."""
    monkeypatch.setenv("CCPLAB_SCRATCH", str(tmp_path / "scratch"))


def _run(tmp_path, flow=synthetic_flow, **kw):
    return execute(load_sweep(SMALL), tmp_path / "sw", use_dask=False, progress=False,
                   run_fn=functools.partial(run_task, flow=flow), **kw)


def test_sweep_fills_the_store_and_keeps_raw_runs(tmp_path, needs_binaries):
    summary = _run(tmp_path)
    assert (summary.finished, summary.failed, summary.skipped) == (8, [], 0)
    st = tmp_path / "sw" / "store"
    runs, steps = store.read(st, "runs"), store.read(st, "steps")
    plan_ids = sorted(r.run_id for r in load_sweep(SMALL).plan())
    assert sorted(runs["sweep_run_id"]) == plan_ids
    assert set(runs["sweep"]) == {"small"} and set(runs["scenario"]) == {s.name for s in load_sweep(SMALL).scenarios}
    assert (runs["utilization"] > 0.9).all()  # the synthetic sender fills its link
    # one row per step: the two-step scenario has two per run
    per_run = steps.groupby("sweep_run_id").size()
    assert sorted(per_run.unique()) == [1, 2]
    # raw logs are kept beside the store, one directory per run
    assert all((tmp_path / "sw" / "runs" / rid / "uplink.log").is_file() for rid in plan_ids)
    # the store is a plain hive-partitioned Parquet dataset
    assert len(pd.read_parquet(st / "runs", filters=[("scenario", "=", runs["scenario"][0])])) == 4
    # a second invocation finds everything done
    again = _run(tmp_path)
    assert (again.finished, again.skipped) == (0, 8)


def test_dask_local_cluster_gives_the_same_rows(tmp_path, needs_binaries):
    """Two worker processes (traces scattered once): the same rows and columns as the in-process run."""
    local = _run(tmp_path / "a")
    dask = execute(load_sweep(SMALL), tmp_path / "b" / "sw", use_dask=True, workers=2, progress=False,
                   run_fn=functools.partial(run_task, flow=synthetic_flow))
    assert (local.finished, dask.finished, dask.failed) == (8, 8, [])
    assert not any((tmp_path / "scratch").rglob("uplink.log"))  # scratch directories are removed
    a, b = (store.read(t / "sw" / "store", "runs").sort_values("sweep_run_id") for t in (tmp_path / "a", tmp_path / "b"))
    assert list(a.columns) == list(b.columns)
    cols = ["sweep_run_id", "throughput_mbps", "p95_queueing_delay_ms"]  # a synthetic flow is deterministic
    assert a[cols].reset_index(drop=True).equals(b[cols].reset_index(drop=True))


def test_raw_runs_go_to_an_fsspec_destination(tmp_path, needs_binaries):
    """--dest takes any fsspec URL (here fsspec's in-memory filesystem): the run directories land there."""
    import fsspec

    dest = f"memory://ccplab-test-{tmp_path.name}"
    summary = _run(tmp_path, dest=dest)
    assert summary.finished == 8
    fs = fsspec.filesystem("memory")
    root = dest.removeprefix("memory://")
    logs = fs.glob(f"{root}/**/uplink.log")
    assert len(logs) == 8 and not (tmp_path / "sw" / "runs").exists()
    fs.rm(root, recursive=True)


class Interrupt:
    """A synthetic flow that is interrupted (Ctrl-C) at its ``at``-th call, after writing half a run."""

    def __init__(self, at: int):
        self.at, self.calls = at, 0

    def __call__(self, p, scenario, run_dir):
        self.calls += 1
        if self.calls == self.at:
            run_dir.mkdir(parents=True)
            (run_dir / "uplink.log").write_text("# interrupted\n")
            raise KeyboardInterrupt
        synthetic_flow(p, scenario, run_dir)


def test_interrupted_sweep_resumes_without_losing_or_repeating_runs(tmp_path, needs_binaries):
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, flow=Interrupt(at=4))
    st = tmp_path / "sw" / "store"
    assert len(store.read(st, "runs")) == 3
    todo, done = pending(load_sweep(SMALL), tmp_path / "sw")
    assert (len(todo), done) == (5, 3)
    summary = _run(tmp_path)
    assert (summary.finished, summary.skipped) == (5, 3)
    runs = store.read(st, "runs")
    assert Counter(runs["sweep_run_id"]) == Counter(r.run_id for r in load_sweep(SMALL).plan())  # once each


class Flaky:
    """Fails every attempt of ``always`` and the first attempt of ``once``; else synthetic."""

    def __init__(self, always: str, once: str):
        self.always, self.once, self.seen = always, once, set()

    def __call__(self, p, scenario, run_dir):
        if p["run_id"] == self.always:
            raise CcplabError("the emulated link died during the run")
        if p["run_id"] == self.once and p["run_id"] not in self.seen:
            self.seen.add(p["run_id"])
            raise CcplabError("iperf3 client failed: unable to connect")
        synthetic_flow(p, scenario, run_dir)


def test_failed_run_is_retried_once_then_recorded(tmp_path, needs_binaries):
    plan = load_sweep(SMALL).plan()
    bad, flaky = plan[2].run_id, plan[5].run_id
    summary = _run(tmp_path, flow=Flaky(always=bad, once=flaky))
    assert summary.finished == 7 and summary.failed == [(bad, "the emulated link died during the run")]
    st = tmp_path / "sw" / "store"
    failed = store.read(st, "failed")
    assert failed[["sweep_run_id", "attempts", "error"]].to_dict("records") == [
        {"sweep_run_id": bad, "attempts": 2, "error": "the emulated link died during the run"}]
    runs = store.read(st, "runs").set_index("sweep_run_id")
    assert runs.loc[flaky, "attempts"] == 2 and bad not in runs.index
    # a resume leaves the failed run recorded; --retry-failed runs it again
    assert _run(tmp_path).skipped == 8
    retried = _run(tmp_path, retry_failed=True)
    assert retried.finished == 1 and bad in set(store.read(st, "runs")["sweep_run_id"])


def test_resume_refuses_a_different_experiment_file(tmp_path, needs_binaries):
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "sweep.toml").write_text("name = 'other'\n")
    with pytest.raises(CcplabError, match="holds a different sweep"):
        _run(tmp_path)


def test_sweep_on_this_host_checks_it_before_creating_anything(tmp_path, monkeypatch):
    from ccplab import run

    monkeypatch.setattr(run.os, "geteuid", lambda: 1000)
    with pytest.raises(CcplabError, match="needs root"):
        execute(load_sweep(SMALL), tmp_path / "sw", use_dask=False, progress=False)
    assert not (tmp_path / "sw").exists()


def test_store_schema_is_the_same_when_a_column_is_all_null(tmp_path):
    st = tmp_path / "store"
    store.append(st, "steps", "s", "scn", "a", 1, pd.DataFrame({"convergence_s": [1.5], "converged": [True],
                                                                "response_class": ["underdamped"]}))
    store.append(st, "steps", "s", "scn", "a", 2, pd.DataFrame({"convergence_s": [None], "converged": [None],
                                                                "response_class": [None]}))
    frame = store.read(st, "steps").sort_values("convergence_s")
    assert frame["convergence_s"].tolist()[0] == 1.5 and pd.isna(frame["convergence_s"].tolist()[1])
    assert json.loads(frame[["converged"]].to_json(orient="values")) == [[True], [None]]
