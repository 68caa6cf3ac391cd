import time

import numpy as np
import pandas as pd
import pytest

from transient import EVENT_KINDS, LogFormatError, parse_link_log, read_link_log

LOG = """# mahimahi mm-link [uplink] > uplink.log
# command line: mm-link up.trace down.trace --uplink-log=uplink.log
# queue: droptail [packets=40]
# base timestamp: 1732270000000
0 # 1504
0 + 1504
3 + 100
4 - 1504 4

7 d 2 3008
9 # 1504
"""


def test_parses_all_event_kinds_exactly(tmp_path):
    p = tmp_path / "uplink.log"
    p.write_text(LOG)
    log = read_link_log(p)
    assert log.base_timestamp_ms == 1732270000000
    assert log.time_origin == "relative"
    assert log.header["queue"] == "droptail [packets=40]"
    assert log.header["command line"].startswith("mm-link up.trace")
    expected = pd.DataFrame(
        {
            "time_ms": np.array([0, 0, 3, 4, 7, 9], dtype=np.int64),
            "kind": pd.Categorical(
                ["opportunity", "arrival", "arrival", "departure", "drop", "opportunity"], categories=list(EVENT_KINDS)
            ),
            "bytes": np.array([1504, 1504, 100, 1504, 3008, 1504], dtype=np.int64),
            "delay_ms": [np.nan, np.nan, np.nan, 4.0, np.nan, np.nan],
            "packets": np.array([1, 1, 1, 1, 2, 1], dtype=np.int64),
        }
    )
    pd.testing.assert_frame_equal(log.events, expected)


def test_original_mahimahi_clock_is_rebased():
    # Original mahimahi writes event times on the same clock as the base timestamp.
    log = parse_link_log("# base timestamp: 5000\n5000 # 1504\n5003 + 1504\n5010 - 1504 7\n")
    assert log.time_origin == "base-subtracted"
    assert log.events["time_ms"].tolist() == [0, 3, 10]


@pytest.mark.parametrize(
    "line, reason",
    [
        ("12 x 1504", "unknown event kind 'x'"),
        ("12 +", "missing size field"),
        ("12 - 1504", "missing delay field"),
        ("12 d 2", "missing byte count"),
        ("12.5 + 1504", "time '12.5' is not a non-negative integer"),
        ("abc + 1504", "time 'abc'"),
        ("12 + 15x4", "field '15x4' is not a non-negative integer"),
        ("12 + 1504 9", "unexpected extra field '9'"),
        ("12 - 1504 -3", "delay '-3' is not a non-negative number"),
        ("12 - 1504 4 1 2", "too many fields"),
    ],
)
def test_errors_name_file_and_line(tmp_path, line, reason):
    p = tmp_path / "bad.log"
    p.write_text(f"# base timestamp: 0\n0 # 1504\n\n{line}\n13 # 1504\n")
    with pytest.raises(LogFormatError) as err:
        read_link_log(p)
    assert err.value.line == 4
    assert str(err.value).startswith(f"{p}:4: ")
    assert reason in str(err.value)


def test_header_only_log_is_a_clear_error(tmp_path):
    p = tmp_path / "empty.log"
    p.write_text("# base timestamp: 0\n# queue: infinite\n")
    with pytest.raises(LogFormatError, match="no events"):
        read_link_log(p)


def test_duplicate_base_timestamp_is_rejected():
    with pytest.raises(LogFormatError, match="defined twice"):
        parse_link_log("# base timestamp: 0\n# base timestamp: 1\n0 # 1504\n")


def test_large_log_parses_in_seconds(tmp_path):
    # ~60 s at 100 Mbit/s is ~1.5 M lines; 600 k lines must take well under the budget.
    n = 200_000
    t = np.arange(n) // 8
    body = "\n".join(f"{a} # 1504\n{a} + 1504\n{a + 2} - 1504 2" for a in t)
    p = tmp_path / "big.log"
    p.write_text("# base timestamp: 1\n" + body + "\n")
    start = time.perf_counter()
    log = read_link_log(p)
    elapsed = time.perf_counter() - start
    assert len(log.events) == 3 * n
    assert (log.events["kind"] == "departure").sum() == n
    assert elapsed < 10.0


def test_parquet_cache_is_used_and_invalidated_when_the_log_changes(tmp_path):
    from transient.cache import cache_path

    p = tmp_path / "uplink.log"
    p.write_text(LOG)
    first = read_link_log(p)
    cache = cache_path(p)
    assert cache.name == "uplink.log.parquet" and cache.exists()
    again = read_link_log(p)  # from the cache
    pd.testing.assert_frame_equal(first.events, again.events)
    assert again.header == first.header and again.base_timestamp_ms == first.base_timestamp_ms
    # a changed log (other size and mtime) is parsed again, and the cache rewritten
    p.write_text(LOG + "12 # 1504\n")
    changed = read_link_log(p)
    assert len(changed.events) == len(first.events) + 1
    assert len(read_link_log(p).events) == len(changed.events)
    # a corrupt cache is ignored, not trusted
    cache.write_bytes(b"not parquet")
    assert len(read_link_log(p).events) == len(changed.events)


def test_unwritable_cache_directory_still_parses(tmp_path, monkeypatch):
    import transient.cache as c

    def refuse(path, table, metadata):
        raise PermissionError(f"{path}: read-only")

    monkeypatch.setattr(c, "_write_table", refuse)
    p = tmp_path / "uplink.log"
    p.write_text(LOG)
    assert len(read_link_log(p).events) == 6 and not c.cache_path(p).exists()


def test_reader_tolerates_tabs_crlf_and_padding():
    log = parse_link_log("# base timestamp: 0\r\n 0\t#  1504 \r\n\r\n3 -\t1504 2.5\r\n")
    assert log.events["kind"].tolist() == ["opportunity", "departure"]
    assert log.events["delay_ms"].iloc[1] == 2.5


def test_long_timestamps_and_first_line_event():
    log = parse_link_log("1795365488739 + 1504\n1795365488740 - 1504 1\n")
    assert log.events["time_ms"].tolist() == [1795365488739, 1795365488740]


def test_polars_and_numpy_readers_agree(tmp_path):
    import gzip
    from pathlib import Path

    from transient import mahimahi

    golden = Path(__file__).parent / "golden"
    texts = [LOG.encode()] + [gzip.decompress(p.read_bytes()) for p in sorted(golden.glob("*.log.gz"))]
    for k, raw in enumerate(texts):
        slow = mahimahi._parse(raw, "x")
        path = tmp_path / f"{k}.log"
        path.write_bytes(raw)
        for fast in (mahimahi._parse_polars(raw, "x"), mahimahi._parse_polars(path, "x")):
            assert fast is not None, "a well-formed log must take the fast path"
            fast = fast.to_log()
            pd.testing.assert_frame_equal(fast.events, slow.events)
            assert (fast.header, fast.base_timestamp_ms, fast.time_origin) == (slow.header, slow.base_timestamp_ms, slow.time_origin)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_line_census_is_the_same_in_chunks_of_any_size(size):
    from transient import mahimahi

    raw = b"# a: 1\n# base timestamp: 0\n0 # 1504\n\n1 + 1504\n2 - 1504 1\n#tail\n3 d 1 1504"
    whole = mahimahi._LineCensus.of_chunks([raw])
    parts = mahimahi._LineCensus.of_chunks(raw[i : i + size] for i in range(0, len(raw), size))
    assert whole.n_lines == parts.n_lines == 8 and whole.n_rows == parts.n_rows == 6  # '#tail' counts as a row
    assert whole.header_lines == parts.header_lines == [(1, b"# a: 1"), (2, b"# base timestamp: 0")]


def test_a_header_line_below_the_events_still_parses_with_its_line_numbers():
    log = parse_link_log("# base timestamp: 0\n0 # 1504\n# late: x\n1 + 1504\n2 - 1504 1\n")
    assert log.header == {"base timestamp": "0", "late": "x"} and len(log.events) == 3
    with pytest.raises(LogFormatError, match=r":5\b|line 5"):
        parse_link_log("# base timestamp: 0\n0 # 1504\n# late: x\n1 + 1504\n2 ? 1504 1\n")


@pytest.mark.parametrize("line", ["12 x 1504", "12 +", "12 - 1504", "-3 + 1504", "12 + 1504 9", "12 d 2 30.5", "12\t+ 1504"])
def test_polars_path_hands_bad_lines_to_the_numpy_reader(line):
    from transient import mahimahi

    assert mahimahi._parse_polars(f"0 # 1504\n{line}\n".encode(), "x") is None
