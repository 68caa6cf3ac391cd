"""The compiled per-ms reducer (``ccplab-logreduce``) against the Python streaming reader it stands in for.

On every log the Python reader reduces, the reducer's cache must hold the same arrays, dtypes and
header, byte for byte; on every log the Python reader declines, the reducer declines too (the event
reader then words the error).  And the analysis of one bare log, cold or cached, imports neither pandas
nor scipy, and prints the step table pandas would.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from transient import reducer
from transient.bench import synthetic_log
from transient.cache import _stamp, _store_arrays, arrays_cache_path
from transient.stream import stream_log_arrays
from transient.textable import format_rows

from .conftest import simulate_link
from .test_lean_reading import ODD
from .test_stream import ALL_KINDS, GOLDEN, _golden

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(reducer.reducer_binary() is None,
                                reason="ccplab-logreduce is not built (cargo build --release -p ccplab-logreduce)")


def _python_cache(log: Path, out: Path) -> bool:
    """The Python streaming reader's cache of ``log`` at ``out``; False when it declines the log."""
    arrays = stream_log_arrays(log)
    if arrays is None:
        return False
    with open(log, "rb") as f:
        _store_arrays(out, arrays, _stamp(os.fstat(f.fileno())))
    return True


def _assert_same_archive(got: Path, want: Path) -> None:
    with np.load(got, allow_pickle=False) as g, np.load(want, allow_pickle=False) as w:
        assert g.files == w.files
        for name in w.files:
            assert g[name].dtype == w[name].dtype, (name, g[name].dtype, w[name].dtype)
            assert g[name].tobytes() == w[name].tobytes(), name  # NaN and inf bit for bit too
        assert json.loads(g["meta"].tobytes()) == json.loads(w["meta"].tobytes())


def _unordered(n: int = 3000) -> str:
    rng = np.random.default_rng(11)
    lines = []
    for t in rng.permutation(n):
        lines += [f"{t} # 1504", f"{t} + 1504", f"{t + int(rng.integers(1, 30))} - 1504 {int(rng.integers(1, 300))}"]
    return "\n".join(lines) + "\n"


def _simulated() -> str:
    opps = np.tile([1, 0, 1, 0, 0], 2000)
    sends = np.zeros(opps.size, int)
    sends[1000:8000:2] = 1  # a queue, then drops
    return simulate_link(opps, sends, queue_packets=30)


LOGS = {
    "all kinds, stock clock": ALL_KINDS,
    "odd header and blank lines": ODD,
    "simulated queue with drops": _simulated(),
    "out of time order": _unordered(),
    "bench's synthetic kind": synthetic_log(3, 0).decode(),
    "sending ms before the first event": "0 # 1504\n0 + 1504\n1 - 1504 40\n",
    "a base after the first event": "# base timestamp: 10\n5 + 1504\n12 - 1504 3\n",
    "delays needing 32 bits": "0 + 1504\n70000 - 1504 69999\n70001 - 1504 3\n",
}


@pytest.mark.parametrize("name", sorted(LOGS) + ["golden:" + p.name for p in sorted(GOLDEN.glob("*.log.gz"))])
def test_the_reducer_writes_the_python_readers_cache(tmp_path, name):
    if name.startswith("golden:"):
        log = _golden(tmp_path, name.removeprefix("golden:"))
    else:
        log = tmp_path / "uplink.log"
        log.write_text(LOGS[name])
    want = tmp_path / "python.ms.npz"
    assert _python_cache(log, want), "the Python reader takes this log"
    got = tmp_path / "rust.ms.npz"
    assert reducer.reduce_to(log, got)
    _assert_same_archive(got, want)


@pytest.mark.parametrize("text, line", [
    ("0 # 1504\n0 + 1504 7\n", 2),  # an extra field
    ("0 # 1504\n0 -\n", 2),  # a missing field
    ("0 # 1504\n 0 + 1504\n", 2),  # a blank in front
    ("0 # 1504\n0 + -4\n", 2),
    ("0 # 1504\n0 - 1504 nan\n", 2),
    ("0 # 1504\n0 d 1 1504.5\n", 2),
    ("0 # 1504\n0 ? 1504\n", 2),
    ("0 # 1504\n3 - 1504 2.5\n", 2),  # a delay with a fraction: the event reader takes it
    ("0 # 1504\n0 +\t1504\n", 2),
    ("0 # 1504\r\n1 - 1504 2\r\n", 1),
    ("0 # 1504\n# a comment below the header\n1 - 1504 2\n", 2),
    ("0 # 1504\n9007199254740992 - 1504 2\n", 2),  # 2**53 ms
    ("# base timestamp: 12x\n0 - 1504 2\n", 1),
    ("# base timestamp: 1\n# base timestamp: 1\n5 - 1504 2\n", 2),
    ("0 # 1504\n0 + 1504\n", None),  # no departure
    ("0 # 1504\n1 - 1504 2", 2),  # cut mid-line
])
def test_the_reducer_declines_what_the_python_reader_declines(tmp_path, text, line):
    log = tmp_path / "uplink.log"
    log.write_text(text)
    try:
        python_takes = stream_log_arrays(log) is not None
    except Exception:  # noqa: BLE001 - the cut log: the reader raises (the analysis words it)
        python_takes = False
    binary = reducer.reducer_binary()
    done = subprocess.run([str(binary), str(log), "--out", str(tmp_path / "x.npz")], capture_output=True, text=True)
    assert done.returncode == reducer.DECLINED, done.stderr
    assert not (tmp_path / "x.npz").exists()
    assert done.stderr.startswith(f"ccplab-logreduce: {log}{f':{line}' if line else ''}: not reduced here"), done.stderr
    if line is None:
        assert python_takes  # no departure: the Python reader reduces it, the reducer leaves it to it
    else:
        assert not python_takes


def test_a_missing_or_failing_reducer_leaves_the_log_to_python(tmp_path, monkeypatch):
    log = tmp_path / "uplink.log"
    log.write_text(ALL_KINDS)
    monkeypatch.setattr(reducer, "reducer_binary", lambda: None)
    assert not reducer.reduce_to(log, tmp_path / "x.npz")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / reducer.BINARY).write_text("#!/bin/sh\necho broken >&2\nexit 1\n")
    (fake / reducer.BINARY).chmod(0o755)
    monkeypatch.undo()
    monkeypatch.setenv("CCPLAB_BIN_DIR", str(fake))
    with pytest.warns(RuntimeWarning, match="broken"):
        assert not reducer.reduce_to(log, tmp_path / "x.npz")


def _modules_after_cli(log: Path) -> tuple[set[str], str]:
    code = ("import sys\nfrom transient.__main__ import main\n"
            f"assert main([{str(log)!r}, '--step', '0:0:12', '--rtt-ms', '50']) == 0\n"
            "print('MODULES', ' '.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'experiments'}"})
    table, _, modules = out.stdout.partition("MODULES ")
    return set(modules.split()), table


def test_a_bare_log_is_analysed_without_pandas_or_scipy_cold_and_cached(tmp_path):
    log = tmp_path / "uplink.log"
    log.write_bytes(synthetic_log(20, 1))
    printed = []
    for state in ("cold", "cached"):
        modules, table = _modules_after_cli(log)
        assert not modules & {"pandas", "scipy", "polars", "pyarrow", "matplotlib"}, state
        assert arrays_cache_path(log).exists()
        printed.append(table)
    assert printed[0] == printed[1] and "uplink.log" in printed[0]
    from transient import analyze_log
    from transient.__main__ import SUMMARY_COLUMNS

    steps = analyze_log(log, rtt_ms=50, steps=[__import__("transient").Step(0.0, 0.0, 12.0)]).steps
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.precision", 3):
        assert printed[0] == steps[SUMMARY_COLUMNS].to_string(index=False) + "\n"


def _pandas_text(rows, columns, int_columns=()):
    df = pd.DataFrame(rows, columns=columns)
    for c in int_columns:
        df[c] = df[c].astype("Int64")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.precision", 3):
        return df.to_string(index=False)


@pytest.mark.parametrize("rows", [
    [{"name": "a", "n": 0, "x": 0.0, "y": 1.23456, "ok": True, "k": "start", "d": 0}],
    [{"name": "uplink.log", "n": 0, "x": 0.0, "y": -2.5, "ok": True, "k": None, "d": None},
     {"name": "runs/ccp-reno/run-12", "n": 12, "x": 41.0, "y": math.nan, "ok": False, "k": "second-order", "d": 7}],
    [{"name": "a" * 60, "n": -3, "x": math.nan, "y": 999999.0, "ok": True, "k": "x", "d": 12345}],
    [{"name": "b", "n": 1, "x": 0.5, "y": 0.25, "ok": True, "k": "", "d": 1},
     {"name": "c", "n": 2, "x": 10.125, "y": 0.001, "ok": True, "k": "y", "d": 2}],
])
def test_the_table_is_printed_as_pandas_prints_it(rows):
    columns = ["name", "n", "x", "y", "ok", "k", "d"]
    assert format_rows(rows, columns) == _pandas_text(rows, columns, int_columns=("d",))


@pytest.mark.parametrize("values", [[1e7, 1.0], [0.0001, 1.0], [math.inf, 1.0], [1.0, None], [1.0, "a"]])
def test_what_pandas_prints_otherwise_is_left_to_pandas(values):
    assert format_rows([{"v": v} for v in values], ["v"]) is None


def test_a_reducer_started_ahead_is_waited_for_even_when_the_command_stops_first(tmp_path):
    log = tmp_path / "uplink.log"
    log.write_bytes(synthetic_log(40, 2))  # no event cache beside it: the reducer is started
    code = ("import sys\nfrom transient import reducer\nfrom pathlib import Path\n"
            f"assert reducer.start_for_cache(Path({str(log)!r}))\n"
            "pid = next(iter(reducer._STARTED.values())).pid\nprint(pid)\nsys.exit(0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'experiments'}"})
    pid = int(out.stdout.split()[0])
    assert not Path(f"/proc/{pid}").exists(), "the reducer outlived the command"
    assert arrays_cache_path(log).exists()  # it finished its cache
    assert not reducer.start_for_cache(log)  # a cache there: nothing to start
