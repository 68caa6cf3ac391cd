"""The streaming reduction of a one-flow log (`transient.stream`) against the event reader it replaces.

Every `LogArrays` figure streamed in pieces must be the one `LogArrays.from_columns` computes from the
events of `parse_link_file`; a log the pieces cannot vouch for must go to the event reader (None), and
the analysis must give the same tables and errors either way, through the cache or not.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import transient.analyze as analyze
from transient import AnalysisError, AnalysisOptions, LogFormatError, Step, analyze_log
from transient.cache import arrays_cache_path, cache_path, cached_log_arrays
from transient.mahimahi import parse_link_file
from transient.series import LogArrays
from transient.stream import stream_log_arrays

from .conftest import simulate_link

GOLDEN = Path(__file__).parent / "golden"

ALL_KINDS = """# mahimahi mm-link [uplink] > uplink.log
# command line: mm-link up.trace down.trace --uplink-log=uplink.log
# a header line without a colon
#
# queue: droptail [packets=40]
# base timestamp: 1732270000000
1732270000000 # 1504
1732270000000 + 1504
1732270000003 + 100
1732270000004 - 1504 4

1732270000007 d 2 3008
1732270000007 d 0 0
1732270000009 # 1504
1732270000250 + 1504
1732270000251 - 1504 1
1732270000251 - 100 248
1732270000900 # 1504
"""
"""Every line kind, odd header lines, a blank line, a drop of no packets, stock mahimahi's clock (the
base is subtracted) and long stretches without events (empty bins)."""


def _reference(path: Path) -> LogArrays:
    c = parse_link_file(path)
    return LogArrays.from_columns(c.time_ms, c.code, c.nbytes, c.delay_ms, c.packets, None)


def _state(a: LogArrays, sort_delays: bool = False) -> dict:
    state = dict(vars(a))
    if sort_delays:  # the cache keeps the departures' delays as a histogram (only percentiles use them)
        state["dep_delay_ms"] = np.sort(a.dep_delay_ms)
    state["_flow_sums"] = {k: list(v) for k, v in a._flow_sums.items()}
    return state


def _assert_same(got, want, where="") -> None:
    if isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for k in want:
            _assert_same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype, (where, getattr(got, "dtype", got), want.dtype)
        np.testing.assert_array_equal(got, want, err_msg=where)
    elif isinstance(want, float) and np.isnan(want):
        assert isinstance(got, float) and np.isnan(got), where
    else:
        assert got == want and type(got) is type(want), (where, got, want)


def _golden(tmp_path: Path, name: str) -> Path:
    log = tmp_path / name.removesuffix(".gz")
    log.write_bytes(gzip.decompress((GOLDEN / name).read_bytes()))
    return log


def _synthetic(tmp_path: Path) -> Path:
    opps = np.tile([1, 0, 1, 0, 0], 2000)  # 4.8 Mbit/s offered
    sends = np.zeros(opps.size, int)
    sends[1000:8000:2] = 1  # 6 Mbit/s for 7 s: a queue, then drops
    log = tmp_path / "synthetic.log"
    log.write_text(simulate_link(opps, sends, queue_packets=30))
    return log


@pytest.mark.parametrize("chunk", [64, 1000, 1 << 20])
def test_all_line_kinds_streamed_in_pieces_as_the_events_give_them(tmp_path, chunk):
    log = tmp_path / "uplink.log"
    log.write_text(ALL_KINDS)
    got = stream_log_arrays(log, chunk_bytes=chunk)
    assert got is not None
    _assert_same(_state(got), _state(_reference(log)))
    assert got.first_ms == 0 and got.n_ms == 901 and got.ms_sum("drop", "packets").sum() == 2


@pytest.mark.parametrize("name", ["cubic-step.log.gz", "cubic-step-stockclock.log.gz", "bbr-cell.log.gz"])
def test_golden_logs_streamed_as_the_events_give_them(tmp_path, name):
    log = _golden(tmp_path, name)
    _assert_same(_state(stream_log_arrays(log, chunk_bytes=300_000)), _state(_reference(log)))


def test_drops_queue_and_no_drop_logs(tmp_path):
    log = _synthetic(tmp_path)
    want = _reference(log)
    assert want.ms_sum("drop", "packets").sum() > 0 and np.nanmax(want.peak_delay_ms) > 10
    _assert_same(_state(stream_log_arrays(log, chunk_bytes=4096)), _state(want))
    bare = tmp_path / "bare.log"  # no drops, no departures: numpy's zero sums of no events are int64
    bare.write_text("0 # 1504\n0 + 1504\n5 + 1504\n")
    _assert_same(_state(stream_log_arrays(bare, chunk_bytes=10)), _state(_reference(bare)))


def test_events_out_of_time_order_grow_the_span(tmp_path):
    log = tmp_path / "uplink.log"
    log.write_text("500 # 1504\n500 + 1504\n503 - 1504 3\n20 + 1504\n30 - 1504 10\n2000 # 1504\n900 + 1504\n")
    _assert_same(_state(stream_log_arrays(log, chunk_bytes=16)), _state(_reference(log)))


@pytest.mark.parametrize("text", [
    "0 # 1504\n# a comment below the header\n1 + 1504\n",  # a '#' line polars would skip
    "0 + 1504\n3 - 1504 2.5\n",  # a delay with a fraction
    "0 + 1504\n3\t- 1504 2\n",  # a tab
    "0 + 1504\n3 x 1504\n",  # malformed
    "# base timestamp: 1\n# base timestamp: 2\n0 + 1504\n",  # a bad header
    "# only a header\n",
])
def test_what_the_pieces_cannot_vouch_for_goes_to_the_event_reader(tmp_path, text):
    log = tmp_path / "uplink.log"
    log.write_text(text)
    assert stream_log_arrays(log) is None


def test_a_cut_last_line_is_reported_as_the_event_reader_does(tmp_path):
    log = tmp_path / "uplink.log"
    log.write_text("0 # 1504\n0 + 1504\n1 - 1504 1\n2 + 15")
    with pytest.raises(LogFormatError) as streamed:
        stream_log_arrays(log)
    with pytest.raises(LogFormatError) as read:
        parse_link_file(log)
    assert str(streamed.value) == str(read.value) and "uplink.log:4:" in str(read.value)
    with pytest.raises(AnalysisError, match="cut mid-line"):
        analyze_log(log, options=AnalysisOptions(cache=False), rtt_ms=50)


@pytest.mark.parametrize("text", ["0 + 1504\n3 x 1504\n", "0 + 1504\n3 - 1504 -2\n"])
def test_a_malformed_log_is_worded_as_before(tmp_path, monkeypatch, text):
    log = tmp_path / "uplink.log"
    log.write_text(text)
    with pytest.raises(AnalysisError) as streamed:
        analyze_log(log, options=AnalysisOptions(cache=False))
    monkeypatch.setattr(analyze, "_one_flow_arrays", lambda spec, opts: None)
    with pytest.raises(AnalysisError) as events:
        analyze_log(log, options=AnalysisOptions(cache=False))
    assert str(streamed.value) == str(events.value) and "uplink.log:2:" in str(events.value)


def _tables(result) -> tuple:
    return result.steps, result.series, result.metrics, result.flow_tables.flows if result.flow_tables else None


@pytest.mark.parametrize("name", ["cubic-step.log.gz", "bbr-cell.log.gz", "synthetic"])
def test_analysis_is_the_same_streamed_cached_and_from_events(tmp_path, monkeypatch, name):
    log = _synthetic(tmp_path) if name == "synthetic" else _golden(tmp_path, name)
    opts = AnalysisOptions(rtt_ms=50, steps=(Step(0.0, 0.0, 12.0), Step(5.0, 12.0, 4.0)))
    streamed = analyze_log(log, options=opts)
    assert arrays_cache_path(log).exists() and not cache_path(log).exists()
    cached = analyze_log(log, options=opts)
    monkeypatch.setattr(analyze, "_one_flow_arrays", lambda spec, o: None)
    events = analyze_log(log, options=AnalysisOptions(rtt_ms=50, steps=opts.steps, cache=False))
    for got in (streamed, cached):
        for g, w in zip(_tables(got), _tables(events)):
            if isinstance(w, pd.DataFrame):
                pd.testing.assert_frame_equal(g, w)
            else:
                assert g == w or (g.__dict__.keys() == w.__dict__.keys() and all(
                    a == b or (a != a and b != b) for a, b in zip(vars(g).values(), vars(w).values())))


def test_the_cache_is_read_when_fresh_and_redone_when_the_log_changes(tmp_path, monkeypatch):
    import transient.stream as stream

    log = _synthetic(tmp_path)
    first = cached_log_arrays(log)
    _assert_same(_state(cached_log_arrays(log), sort_delays=True), _state(first, sort_delays=True))
    monkeypatch.setattr(stream, "stream_log_arrays", lambda path: pytest.fail("a fresh cache was not used"))
    cached_log_arrays(log)
    monkeypatch.undo()
    log.write_text("0 # 1504\n0 + 1504\n2 - 1504 2\n")  # a new log: the cache is stale
    _assert_same(_state(cached_log_arrays(log)), _state(_reference(log)))
    arrays_cache_path(log).write_bytes(b"not parquet")
    _assert_same(_state(cached_log_arrays(log)), _state(_reference(log)))


def test_without_the_cache_nothing_is_written_beside_the_log(tmp_path):
    log = _synthetic(tmp_path)
    analyze_log(log, options=AnalysisOptions(cache=False, rtt_ms=50))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["synthetic.log"]


def test_a_small_log_with_a_fresh_event_cache_is_reduced_from_it(tmp_path, monkeypatch):
    import transient.stream as stream
    from transient import read_link_log

    log = _synthetic(tmp_path)
    read_link_log(log)  # as the runner does after a run: the event cache beside the log
    monkeypatch.setattr(stream, "stream_log_arrays", lambda path: pytest.fail("the event cache was not used"))
    _assert_same(_state(cached_log_arrays(log)), _state(_reference(log)))
    assert not arrays_cache_path(log).exists()
