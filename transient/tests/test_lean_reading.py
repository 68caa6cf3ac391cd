"""What lets one big log be analysed in little time and memory, against the plain computation it replaces.

The per-ms arrays in their narrowest exact dtype (`transient.series.compact`), bins found from their
edges (`transient.series.bin_positions`), bin sums in a wide dtype a block at a time, the signal-delay
walk-back and percentiles without float64 copies, the stream's pieces combined exactly however they
overlap, polars' raw columns checked as strictly as the numpy reader, and pandas / polars imported only
when first used.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import transient.stream as stream
from transient import mahimahi
from transient.metrics import _signal_delays, _walk_back, mahimahi_percentile
from transient.series import LogArrays, bin_positions, binned_sum, compact

from .test_stream import ALL_KINDS, _assert_same, _reference, _state

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("values, dtype", [
    ([0, 1, 255], np.uint8),
    ([0, 256], np.uint16),
    ([-1, 0, 127], np.int16),
    ([-1, 40000], np.int32),
    ([0, 2**32], np.int64),
    ([0.0, 3.0, 1504.0], np.uint16),  # whole floats without NaN or inf: integers
    ([np.nan, 2.0, 41.0], np.float32),  # whole with NaN: float32 keeps the NaN
    ([np.inf, 2.0], np.float32),
    ([np.nan, 2.0**24], np.float64),  # float32 would round beyond 2**24
    ([0.5, 1.0], np.float64),  # a fraction: unchanged
])
def test_compact_picks_the_narrowest_exact_dtype(values, dtype):
    src = np.array(values, dtype=np.float64 if any(isinstance(v, float) for v in values) else np.int64)
    got = compact(src)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.astype(np.float64), src.astype(np.float64))


def test_compact_of_a_long_float_array_checks_every_block():
    values = np.zeros(3 * (1 << 18) + 5)
    values[-1] = 0.5  # a fraction in the last block only
    assert compact(values).dtype == np.float64
    values[-1] = np.nan
    assert compact(values).dtype == np.float32


class _Span:
    """Just what `bin_positions` reads of a `LogArrays`."""

    ms_window = LogArrays.ms_window

    def __init__(self, first_ms: int, n_ms: int) -> None:
        self.first_ms, self.n_ms = first_ms, n_ms


def _positions_by_every_ms(arrays, origin_s, bin_s, n):
    """The bins of every ms by the formula, and each bin's first ms (what `bin_positions` must find)."""
    origin_ms, bin_ms = origin_s * 1000.0, bin_s * 1000.0
    span = arrays.ms_window(np.floor(origin_ms) - 1, np.ceil(origin_ms + n * bin_ms) + 2)
    ms = np.arange(arrays.first_ms + span.start, arrays.first_ms + span.stop)
    idx = np.floor((ms - origin_ms) / bin_ms + 1e-9).astype(np.int64)
    edges = span.start + np.searchsorted(idx, np.arange(n + 1), side="left")
    lo, hi = int(edges[0]), int(edges[-1])
    return slice(lo, hi), idx[lo - span.start : hi - span.start], edges


def test_bin_edges_are_those_of_binning_every_ms():
    rng = np.random.default_rng(7)
    for _ in range(3000):
        first, n_ms = int(rng.integers(0, 5000)), int(rng.integers(1, 20000))
        arrays = _Span(first, n_ms)
        bin_s = float(rng.choice([0.05, 0.1, 0.02, 0.001, 0.0333, 0.0125, rng.uniform(0.001, 0.5)]))
        origin = float(rng.choice([first / 1000, rng.uniform(-1, 30), round(rng.uniform(0, 20), 3), 0.0]))
        n = int(rng.integers(0, 400))
        want = _positions_by_every_ms(arrays, origin, bin_s, n)
        got = bin_positions(arrays, origin, bin_s, n)
        assert got[0] == want[0], (first, n_ms, bin_s, origin, n)
        np.testing.assert_array_equal(got[2], want[2])
        np.testing.assert_array_equal(got[1], want[1])


def test_bin_sums_of_narrow_arrays_do_not_wrap_and_match_float64(monkeypatch):
    import transient.series as series

    monkeypatch.setattr(series, "_SUM_BLOCK", 7)  # many blocks of bins
    per_ms = np.full(1000, 250, np.uint8)  # a bin of 50 ms holds 12500: far beyond uint8
    arrays = _Span(0, per_ms.size)
    arrays.is_whole = lambda a: True
    pos = bin_positions(arrays, 0.0123, 0.05, 19)
    got = binned_sum(per_ms, pos, 19, arrays)
    want = np.bincount(pos[1], weights=per_ms[pos[0]].astype(np.float64), minlength=19)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.uint16])
def test_signal_delays_are_the_walk_back_values(dtype):
    rng = np.random.default_rng(3)
    direct = rng.integers(1, 300, 5000).astype(np.float64)
    if dtype != np.uint16:
        direct[rng.random(direct.size) < 0.4] = np.inf  # sending ms without a direct sample
    direct[-1] = 5.0  # the last sending ms always has its sample
    want = _walk_back(direct)
    got = _signal_delays(direct.astype(dtype))
    np.testing.assert_array_equal(got.astype(np.float64), want)
    assert mahimahi_percentile(got) == mahimahi_percentile(want)


def test_percentile_in_an_arrays_own_dtype_is_the_float_one():
    values = np.random.default_rng(1).integers(0, 1000, 10001)
    for dtype in (np.uint16, np.int32, np.float32):
        assert mahimahi_percentile(values.astype(dtype)) == mahimahi_percentile(values.astype(np.float64))
    assert mahimahi_percentile([3, 1, 2]) == 3.0 and np.isnan(mahimahi_percentile([]))


ODD = """# mahimahi mm-link [uplink] > uplink.log
#no space after the hash
#    queue:   droptail [packets=40]
# key: value: with a colon
# base timestamp: 0
0 # 1504

5 # 1504
5 + 1504
5 + 40
9 - 1504 4


9 - 40 3
12 d 3 4512
3000 # 1504
3001 + 1504
3003 - 1504 2
"""
"""Odd header lines, blank lines among the events (also two in a row), drops, and 3 s without events."""


@pytest.mark.parametrize("chunk", [8, 100, 1 << 20])
def test_odd_logs_streamed_as_the_events_give_them(tmp_path, chunk):
    log = tmp_path / "uplink.log"
    log.write_text(ODD)
    got = stream.stream_log_arrays(log, chunk_bytes=chunk)
    assert got is not None
    _assert_same(_state(got), _state(_reference(log)))
    assert got.n_ms == 3004 and got.ms_sum("drop", "packets").sum() == 3 and got.ms_sum("arrival", "count")[100:2990].sum() == 0


def test_pieces_far_out_of_time_order_are_merged_exactly(tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "_MERGE_SLACK_MS", 0)  # merge the parts as soon as they outgrow the span
    rng = np.random.default_rng(5)
    lines = []
    for t in rng.permutation(4000):
        lines += [f"{t} # 1504", f"{t} + 1504", f"{t + int(rng.integers(1, 30))} - 1504 {int(rng.integers(1, 30))}"]
    log = tmp_path / "uplink.log"
    log.write_text("\n".join(lines) + "\n")
    merges = []
    original = stream._Reduction._merge
    monkeypatch.setattr(stream._Reduction, "_merge", lambda self: (merges.append(1), original(self)))
    got = stream.stream_log_arrays(log, chunk_bytes=2000)
    assert merges, "the parts of an unordered log were never merged"
    _assert_same(_state(got), _state(_reference(log)))


@pytest.mark.parametrize("text", [
    "0 + 1504 7\n",  # an extra field
    "0 -\n",  # a missing field
    " 0 + 1504\n",  # a blank in front
    "0 + -4\n",  # a negative size
    "0 - 1504 nan\n",
    "0 + 1504 nan\n",
    "0 d 1 1504.5\n",  # a drop's bytes with a fraction
    "0 ? 1504\n",
])
def test_raw_columns_hand_what_the_numpy_reader_must_word_to_it(tmp_path, text):
    raw = ("0 # 1504\n" + text).encode()
    assert mahimahi._parse_polars(raw, "x") is None
    log = tmp_path / "uplink.log"
    log.write_bytes(raw)
    assert stream.stream_log_arrays(log) is None


@pytest.mark.parametrize("text", [ALL_KINDS, ODD, "0 + 1504\n3 - 1504 2.5\n4 - 1504 1e1\n5 d 2 3008\n"])
def test_raw_columns_give_the_numpy_readers_events(tmp_path, text):
    raw = text.encode()
    fast = mahimahi._parse_polars(raw, "x")
    assert fast is not None
    slow = mahimahi._parse(raw, "x")
    pd.testing.assert_frame_equal(fast.to_log().events, slow.events)
    assert (fast.header, fast.base_timestamp_ms, fast.time_origin) == (slow.header, slow.base_timestamp_ms,
                                                                       slow.time_origin)


def _imported_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PYTHONPATH": f"{ROOT}:{ROOT / 'experiments'}", "PATH": "/usr/bin:/bin"})
    return set(out.stdout.split())


def test_the_command_line_and_the_stream_import_neither_pandas_nor_polars():
    for code in ("import transient.__main__", "import transient.analyze, transient.stream, transient.cache"):
        heavy = _imported_after(code) & {"pandas", "polars", "pyarrow", "scipy", "matplotlib"}
        assert not heavy, (code, heavy)


def test_a_one_flow_log_is_reduced_with_numpy_alone(tmp_path):
    log = tmp_path / "uplink.log"
    log.write_text(ALL_KINDS)
    code = (f"import sys, transient.stream as s\nfrom pathlib import Path\n"
            f"assert s.stream_log_arrays(Path({str(log)!r})) is not None")
    loaded = _imported_after(code)
    assert not loaded & {"pandas", "polars", "pyarrow"}, "the stream needs numpy alone"


def test_analysis_tables_default_to_empty_ones():
    from transient import Analysis
    from transient.flows import FAIRNESS_COLUMNS, FLOW_COLUMNS

    a = Analysis(pd.DataFrame(), pd.DataFrame(), {}, [])
    assert list(a.flows.columns) == FLOW_COLUMNS and list(a.fairness.columns) == FAIRNESS_COLUMNS
    assert len(a.flow_steps) == 0 and a.flow_series == {} and not a.multi_flow
    assert a._replace(errors=[("x", "y")]).errors == [("x", "y")] and isinstance(a, tuple) and len(a) == 8


def test_the_cache_archive_is_read_as_numpy_reads_it(tmp_path):
    from transient.cache import _read_npz

    arrays = {"u8": np.arange(7, dtype=np.uint8), "f32": np.array([np.nan, np.inf, 2.0], np.float32),
              "i64": np.arange(-3, 3), "empty": np.empty(0), "c2d": np.arange(6).reshape(2, 3),
              "f2d": np.asfortranarray(np.arange(6.0).reshape(2, 3)), "meta": np.frombuffer(b'{"a": 1}', np.uint8)}
    path = tmp_path / "x.npz"
    np.savez(path, **arrays)
    got = _read_npz(path)
    assert got.keys() == arrays.keys()
    for name, want in arrays.items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        np.testing.assert_array_equal(got[name], want)
        assert got[name].flags.writeable
    got["u8"][0] = 99  # a private copy: the file keeps its value
    assert np.load(path)["u8"][0] == 0
    np.savez_compressed(tmp_path / "z.npz", a=np.arange(3))
    with pytest.raises(ValueError, match="not a stored member"):
        _read_npz(tmp_path / "z.npz")
