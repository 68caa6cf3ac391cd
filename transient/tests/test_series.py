import numpy as np
import pytest

from transient import parse_link_log, rate_series

from .conftest import PKT, simulate_link


def test_rates_per_bin_by_hand():
    # 20 ms bins. Departures: 3 packets in [0, 20), 1 in [20, 40); last event at 45 ms,
    # so the partial bin [40, 60) is left out.
    text = "0 # 1504\n1 - 1504 0\n5 - 1504 0\n19 - 1504 0\n20 + 1000\n39 - 1504 2\n45 # 1504\n"
    s = rate_series(parse_link_log(text).events, 20)
    assert s.index.tolist() == [0.0, 0.02]
    to_mbps = 8 / (0.020 * 1e6)
    assert s["throughput_mbps"].tolist() == pytest.approx([3 * PKT * to_mbps, PKT * to_mbps])
    assert s["capacity_mbps"].tolist() == pytest.approx([PKT * to_mbps, 0.0])
    assert s["sending_mbps"].tolist() == pytest.approx([0.0, 1000 * to_mbps])
    assert s["reference_mbps"].tolist() == s["capacity_mbps"].tolist()  # same bins, no extra smoothing
    # queueing delay = mean delay - base (smallest delay of the log, 0 here)
    assert s["queueing_delay_ms"].tolist() == pytest.approx([0.0, 2.0])
    assert s.attrs["bin_s"] == 0.02


def test_queue_occupancy_and_drops():
    # 3 arrivals at 0 ms, one departure each 10 ms from 10 ms, one drop of 2 packets at 5 ms
    text = "0 + 1504\n0 + 1504\n0 + 1504\n0 + 1504\n0 + 1504\n5 d 2 3008\n10 - 1504 10\n20 - 1504 20\n30 - 1504 30\n39 # 1504\n"
    s = rate_series(parse_link_log(text).events, 10)
    # queue at the end of each ms: 5 (0-4 ms), 3 (5-9), 2 (10-19), 1 (20-29), 0 (30-39)
    assert s["queue_packets"].tolist() == pytest.approx([(5 * 5 + 3 * 5) / 10, 2, 1, 0])
    assert s["drops"].tolist() == [2, 0, 0, 0]
    # base delay 10 ms: queueing delays 0, 10, 20
    assert s["queueing_delay_ms"].tolist()[1:] == pytest.approx([0.0, 10.0, 20.0])
    assert np.isnan(s["queueing_delay_ms"].iloc[0])


def test_one_packet_per_ms_is_12_mbps_and_sums_match():
    n = 1000
    events = parse_link_log(simulate_link(np.ones(n, int), np.ones(n, int))).events
    s = rate_series(events, 50)
    assert len(s) == 20
    assert np.allclose(s["capacity_mbps"], PKT * 8 / 1e3)  # 12032 bit/ms = 12.032 Mbit/s
    assert np.allclose(s["throughput_mbps"], 12.032)
    # bins conserve bytes: sum(rate * width) == total bytes * 8
    dep_bits = 8 * events.loc[events["kind"] == "departure", "bytes"].sum()
    assert (s["throughput_mbps"] * 0.05 * 1e6).sum() == pytest.approx(dep_bits)


def test_non_integer_bin_and_bad_width():
    events = parse_link_log("0 # 1504\n99 # 1504\n").events
    assert len(rate_series(events, 33.3)) == 3
    with pytest.raises(ValueError, match="positive"):
        rate_series(events, 0)
