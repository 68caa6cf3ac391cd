"""``--method tpcca``: TPCCA's reference analysis on hand-computed small cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from transient import TPCCA_FAULTS, AnalysisOptions, analyze_log, parse_link_log
from transient.tpcca import tpcca_analysis, tpcca_bins, tpcca_stable_index

from .conftest import simulate_link


def test_bins_strict_rule_gap_divisor_and_last_bin_dropped():
    t = np.array([0.0, 0.01, 0.03, 0.05, 0.052, 0.06, 0.11, 0.2])
    b = np.full(t.size, 1000)
    starts, rates = tpcca_bins(t, b, 0.05, end_s=100)
    # 0.05 is not > 0 + 0.05: it stays in bin 0, which 0.052 closes (4 events / 0.052 s);
    # the bin from 0.052 holds 2 events and is closed by 0.11 (> 0.102); 0.2 closes the
    # bin from 0.11 (1 event); the bin opened by 0.2 is never emitted.
    assert starts.tolist() == [0.0, 0.052, 0.11]
    assert rates == pytest.approx([4 * 8000 / 0.052 / 1e6, 2 * 8000 / (0.11 - 0.052) / 1e6, 8000 / (0.2 - 0.11) / 1e6])


def test_bins_stop_at_the_horizon():
    t = np.array([0.0, 0.01, 0.03, 0.05, 0.052, 0.06, 0.11, 0.2])
    starts, rates = tpcca_bins(t, np.full(t.size, 1000), 0.05, end_s=0.1)
    assert starts.tolist() == [0.0] and rates == pytest.approx([4 * 8000 / 0.052 / 1e6])


def _bins(values, width=0.0625):
    return np.arange(len(values)) * width, np.asarray(values, float)


def test_detector_marks_the_middle_of_the_middle_window():
    # RTT 0.0625 s, bins of 0.0625 s: W = 10 bins, S = 4 bins; windows are inclusive
    # (11 bins).  x = 0 for 10 bins, 6 for 10, then 12.  i = 20 is the first candidate
    # whose windows hold only 12s (i = 19: means 11.45, 12, 12 -> variance 0.066 > 0.02;
    # earlier windows mix two or three levels), and its middle window spans bins
    # 24..34: s = int((24 + 34) / 2) = 29, 9 bins after the first steady bin.
    t, x = _bins([0.0] * 10 + [6.0] * 10 + [12.0] * 60)
    assert tpcca_stable_index(t, x, 0.0625) == (29, False)


def test_area_by_hand_and_the_flat_at_the_wrong_level_fault():
    t, x = _bins([0.0] * 10 + [6.0] * 10 + [12.0] * 60)
    s, _ = tpcca_stable_index(t, x, 0.0625)
    area = float((np.abs(12.0 - x[:s]) * np.diff(t[: s + 1])).sum())
    assert area == pytest.approx(10 * 12 * 0.0625 + 10 * 6 * 0.0625)
    assert (12 / 12.0) * area / t[s] == pytest.approx(11.25 / 1.8125)
    # A flat stretch at 0 is "steady" for TPCCA: 20 silent bins converge at i = 0,
    # s = int((4 + 14) / 2) = 9 (kept fault, listed in TPCCA_FAULTS).
    t, x = _bins([0.0] * 20 + [12.0] * 60)
    assert tpcca_stable_index(t, x, 0.0625) == (9, False)


def test_never_steady_gives_up_with_bin_index_40():
    # alternating 0 / 12 every 3 bins: never steady
    x = np.tile([0.0, 0.0, 0.0, 12.0, 12.0, 12.0], 200)
    t, x = _bins(x, 0.05)  # 1200 bins up to 60 s
    assert tpcca_stable_index(t, x, 0.05) == (40, True)
    # too few bins (TPCCA's own code would raise IndexError on time_list[40])
    t2, x2 = _bins(x[:30], 0.05)
    assert tpcca_stable_index(t2, x2, 0.05) == (40, True)


def test_bare_log_step_is_zero_to_capacity_at_time_zero(tmp_path):
    # 0.5 s of silence, then 1 packet/ms: TPCCA's bins at 12 Mbit/s, RTT 50 ms are
    # 0.05 s wide (closed by the next arrival).
    n = 3000
    sends = (np.arange(n) >= 500).astype(int)
    p = tmp_path / "uplink.log"
    p.write_text(simulate_link(np.ones(n, int), sends))
    res = analyze_log(p, options=AnalysisOptions(method="tpcca", capacity_mbps=12.0))
    (step,) = res.steps.to_dict("records")
    assert (step["at_s"], step["from_mbps"], step["to_mbps"], step["kind"]) == (0.0, 0.0, 12.0, "start")
    ev = parse_link_log(p.read_text()).events
    arr = ev["kind"] == "arrival"
    direct = tpcca_analysis(ev.loc[arr, "time_ms"].to_numpy() / 1000, ev.loc[arr, "bytes"].to_numpy(), 12.0, 25.0, 2.999)
    assert step["convergence_s"] == direct.convergence_s and step["normalized_area"] == direct.normalized_area
    # the first bin [0, 0.501) closed by the first arrival at 0.5 s holds no bits
    assert direct.bins_t[:2].tolist() == [0.0, 0.5] and direct.bins_mbps[0] == 0.0
    # the silence counts: at least 0.5 s x 12 Mbit/s of area
    assert step["area_mbit"] >= 0.5 * 12
    assert step["tpcca_gave_up"] is False or step["tpcca_gave_up"] == False  # noqa: E712
    # the other metrics are not TPCCA's: NaN, not made up
    assert math.isnan(step["overshoot_pct"]) and math.isnan(step["peak_queueing_delay_ms"])


def test_tpcca_needs_a_capacity(tmp_path):
    p = tmp_path / "uplink.log"
    p.write_text(simulate_link(np.ones(300, int), np.ones(300, int)))
    with pytest.raises(Exception, match="--capacity-mbps"):
        analyze_log(p, options=AnalysisOptions(method="tpcca"))


def test_faults_are_listed_for_the_report():
    text = " ".join(TPCCA_FAULTS)
    for fault in ("arrivals", "40", "absolute", "wrong level", "rewards long transients", "handshake"):
        assert fault in text


def test_horizon_is_twice_the_one_way_delay_in_ms_read_as_seconds():
    # one-way delay 1 ms -> horizon min(duration 5 s, 2 "s"): arrivals after 2 s are ignored
    t = np.arange(0, 5000) / 1000.0
    res = tpcca_analysis(t, np.full(t.size, 1504), 12.0, 1.0, 5.0)
    assert res.bins_t.max() < 2.0 and res.bins_t.max() > 1.9
    res = tpcca_analysis(t, np.full(t.size, 1504), 12.0, 1.0, 1.5)  # the duration wins when shorter
    assert res.bins_t.max() < 1.5
