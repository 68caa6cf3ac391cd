import math

import numpy as np
import pytest

from transient import link_metrics, mahimahi_percentile, parse_link_log, signal_delay_series

from .conftest import PKT, simulate_link


def reference_signal_delays(departures):
    """mm-throughput-graph's signal delay, as a plain loop over a dict (ground truth)."""
    sig = {}
    for t, d in departures:
        s = int(t - d)
        sig[s] = min(d, sig.get(s, math.inf))
    keys = sorted(sig)
    for ts in range(keys[-1], keys[0] - 1, -1):
        if ts not in sig:
            sig[ts] = sig[ts + 1] + 1
    return [sig[k] for k in sorted(sig)]


def test_constant_rate_fixed_delay_by_hand():
    lines = ["# base timestamp: 0"]
    for t in range(1000):
        lines += [f"{t} # {PKT}", f"{t} + {PKT}"]
        if t >= 5:
            lines.append(f"{t} - {PKT} 5")
    m = link_metrics(parse_link_log("\n".join(lines)).events)
    duration = 0.999  # last event 999 ms - first 0 ms
    assert m.duration_s == pytest.approx(duration)
    assert m.capacity_mbps == pytest.approx(1000 * PKT * 8 / duration / 1e6)
    assert m.throughput_mbps == pytest.approx(995 * PKT * 8 / duration / 1e6)
    assert m.utilization == pytest.approx(995 / 1000)
    assert m.p95_queueing_delay_ms == 5
    assert m.p95_signal_delay_ms == 5
    assert m.power_score == pytest.approx(m.throughput_mbps / 0.005)


def test_gap_in_sending_exercises_walk_back():
    # Packets sent at 0..99 and 200..299, each delivered 5 ms later; nothing sent in 100..199.
    lines = ["# base timestamp: 0"]
    for s in list(range(100)) + list(range(200, 300)):
        lines.append(f"{s + 5} - {PKT} 5")
    events = parse_link_log("\n".join(lines)).events
    sig = signal_delay_series(events)
    assert sig.index[0] == 0 and sig.index[-1] == 299
    # A message created at t in the gap waits for the next send at 200, then 5 ms.
    assert sig.loc[150] == 200 - 150 + 5
    assert sig.loc[100] == 105 and sig.loc[199] == 6 and sig.loc[50] == 5
    # 300 ms: 200 values of 5, then 6..105; index int(0.95 * 300) = 285 -> 6 + 85.
    assert link_metrics(events).p95_signal_delay_ms == 91


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_vectorized_signal_delay_matches_reference_loop(seed):
    rng = np.random.default_rng(seed)
    n = 3000
    opps = rng.poisson(1.0, n)
    opps[1000:1300] = 0  # an outage: queue builds, then drains
    sends = rng.poisson(0.9, n)
    sends[2000:2200] = 0  # an idle sender: walk-back over empty ms
    events = parse_link_log(simulate_link(opps, sends, queue_packets=60)).events
    dep = events[events["kind"] == "departure"]
    ref = reference_signal_delays(zip(dep["time_ms"].tolist(), dep["delay_ms"].tolist()))
    got = signal_delay_series(events)
    assert got.tolist() == ref
    assert link_metrics(events).p95_signal_delay_ms == sorted(ref)[int(0.95 * len(ref))]


def test_non_fifo_delays_follow_mahimahi_not_running_min():
    # Sent at 10 with delay 50, at 11 with delay 1: mahimahi keeps 50 for ms 10.
    events = parse_link_log("60 - 1504 50\n12 - 1504 1\n").events
    assert signal_delay_series(events).tolist() == [50.0, 1.0]


def test_percentile_uses_mahimahi_index():
    v = np.arange(20, dtype=float)[::-1]
    assert mahimahi_percentile(v) == 19.0  # sorted[int(0.95 * 20)] = sorted[19]
    assert mahimahi_percentile(np.arange(10.0)) == 9.0
    assert math.isnan(mahimahi_percentile(np.array([])))


def test_no_departures_gives_nan_delays_and_zero_throughput():
    m = link_metrics(parse_link_log("0 # 1504\n10 # 1504\n").events)
    assert m.throughput_mbps == 0 and math.isnan(m.p95_signal_delay_ms) and math.isnan(m.power_score)
    assert m.capacity_mbps == pytest.approx(2 * PKT * 8 / 0.010 / 1e6)


def test_zero_duration_is_an_error():
    with pytest.raises(ValueError, match="zero duration"):
        link_metrics(parse_link_log("5 # 1504\n5 - 1504 0\n").events)


def test_window_metrics_cover_the_window_only():
    from transient import window_link_metrics

    opps = np.ones(3000, dtype=int)
    sends = np.r_[np.ones(2000, dtype=int), np.zeros(1000, dtype=int)]  # the flow stops at 2 s
    events = parse_link_log(simulate_link(opps, sends)).events
    whole = link_metrics(events)
    first, last = int(events["time_ms"].iloc[0]), int(events["time_ms"].max())
    same = window_link_metrics(events, first, last)
    assert same.as_dict() == pytest.approx(whole.as_dict(), nan_ok=True), "first event to last: mahimahi's span"
    # the first second only: capacity and throughput are the rates over that second
    head = window_link_metrics(events, 0, 1000)
    assert head.duration_s == 1.0
    assert head.capacity_mbps == pytest.approx(1001 * PKT * 8 / 1e6)
    assert head.throughput_mbps == pytest.approx(head.capacity_mbps, rel=0.01)
    # the idle last second adds capacity but no throughput
    tail = window_link_metrics(events, 2000, 3000)
    assert tail.throughput_mbps < 0.01 * tail.capacity_mbps
    with pytest.raises(ValueError, match="empty window"):
        window_link_metrics(events, 5, 5)
    with pytest.raises(ValueError, match="no events"):
        window_link_metrics(events, 10_000, 11_000)
