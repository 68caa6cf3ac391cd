"""The project's step syntax, atomic write and flow time zero."""

from __future__ import annotations

import os

import pytest

from transient import FLOW_START_MIN_BYTES, AnalysisError, Step, StepFormatError, flow_start_s, parse_steps, write_atomic
from transient.mahimahi import parse_link_log



def test_step_parse_round_trip():
    s = Step.parse("10:12:4")
    assert (s.at_s, s.from_mbps, s.to_mbps) == (10.0, 12.0, 4.0)
    assert s.kind == "down" and Step.parse("0:0:12").kind == "up"
    assert str(s) == "10:12:4" and Step.parse(str(s)) == s


@pytest.mark.parametrize("text,needle", [
    ("10:12", "3 fields"), ("1:2:3:4", "3 fields"), ("a:0:12", "AT_S 'a' is not a number"),
    ("0:-1:12", "FROM_MBPS must be a finite number >= 0"), ("0:0:nan", "TO_MBPS must be a finite"),
    ("", "3 fields"),
])
def test_step_parse_errors_quote_the_text(text, needle):
    with pytest.raises(StepFormatError, match=needle) as info:
        Step.parse(text)
    assert isinstance(info.value, ValueError)
    assert repr(text) in str(info.value)


def test_parse_steps_sorts_and_rejects_duplicates():
    assert parse_steps(["10:12:4", "0:0:12"]) == [Step(0, 0, 12), Step(10, 12, 4)]
    with pytest.raises(StepFormatError, match="two steps at 3 s"):
        parse_steps(["3:0:1", "3:1:2"])


def test_step_from_dict_names_the_field():
    with pytest.raises(StepFormatError, match=r"meta\.steps\[0\]\.at_s"):
        Step.from_dict({"at_s": "soon", "from_mbps": 0, "to_mbps": 1}, "meta.steps[0]")


def test_write_atomic_replaces_and_keeps_old_on_error(tmp_path):
    p = tmp_path / "f.txt"
    write_atomic(p, "one")
    write_atomic(p, b"two")
    assert p.read_bytes() == b"two"
    with pytest.raises(TypeError):
        write_atomic(p, 3)  # type: ignore[arg-type]
    with pytest.raises(OSError):
        write_atomic(tmp_path / "missing-dir" / "g.txt", "x")
    assert p.read_text() == "two"
    assert os.listdir(tmp_path) == ["f.txt"], "no temporary file may be left behind"


def test_flow_start_is_first_full_size_arrival():
    log = parse_link_log("# base timestamp: 0\n" + "".join(f"{t} + 90\n" for t in (0, 20, 250))
                         + "".join(f"{t} + 1504\n{t} # 1504\n{t} - 1504 0\n" for t in range(300, 400)))
    assert FLOW_START_MIN_BYTES == 1000
    assert flow_start_s(log) == pytest.approx(0.300)
    assert flow_start_s(log.events) == pytest.approx(0.300)


def test_flow_start_from_path_and_missing_flow(tmp_path):
    p = tmp_path / "up.log"
    p.write_text("# base timestamp: 0\n5 + 100\n7 + 1504\n")
    assert flow_start_s(p) == pytest.approx(0.007)
    p.write_text("# base timestamp: 0\n5 + 100\n7 # 1504\n")
    with pytest.raises(AnalysisError, match=r"up\.log: no data flow"):
        flow_start_s(str(p))


@pytest.mark.parametrize("base", [0, 1795365488000])
def test_flow_bounds_by_line_scan_equal_the_columnar_readers(tmp_path, monkeypatch, base):
    import numpy as np

    from transient import flow_bounds_s, timezero

    rng = np.random.default_rng(7)
    lines, ports = [f"# base timestamp: {base}"], []
    for t in range(400):
        lines.append(f"{base + t} # 1504")
        for _ in range(int(rng.integers(0, 3))):
            port = int(rng.choice([5201, 5202, 0, 5203]))
            kind = str(rng.choice(["+", "-", "d"]))
            size = int(rng.choice([60, 1504]))
            lines.append({"+": f"{base + t} + {size}", "-": f"{base + t} - {size} {int(rng.integers(0, 40))}",
                          "d": f"{base + t} d 1 {size}"}[kind])
            ports.append(port)
    log, flows = tmp_path / "uplink.log", tmp_path / "uplink.flows"
    log.write_text("\n".join(lines) + "\n")
    flows.write_text("".join(f"{p}\n" for p in ports))
    assert timezero._flow_bounds_small(log, flows, [5201, 5202, 5204]) is not None  # the scan takes this log
    by_scan = flow_bounds_s(log, flows, [5201, 5202, 5204])
    monkeypatch.setattr(timezero, "SMALL_LOG_BYTES", 0)  # the columnar reader for every size
    assert by_scan == flow_bounds_s(log, flows, [5201, 5202, 5204])
    assert by_scan[2] == (None, None) and by_scan[0][0] is not None


def test_flow_bounds_of_a_mismatched_flow_log_fail_by_the_columnar_readers_words(tmp_path):
    from transient import flow_bounds_s

    log, flows = tmp_path / "uplink.log", tmp_path / "uplink.flows"
    log.write_text("# base timestamp: 0\n0 # 1504\n1 + 1504\n2 - 1504 1\n")
    flows.write_text("5201\n")
    with pytest.raises(AnalysisError, match="has 1 lines but .* has 2 arrival/departure/drop"):
        flow_bounds_s(log, flows, [5201])
