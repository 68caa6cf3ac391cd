"""``ccplab fidelity``: the ratio statistics on known numbers, input checks, and a short
real run (kernel:reno vs ccp:reno on the fixed 12 Mbit/s link) that writes the table."""

from __future__ import annotations

import math
import statistics

import pandas as pd
import pytest

from ccplab import cli, fidelity
from ccplab.errors import CcplabError


def test_ratio_stats_pairwise_median_and_spread():
    r = fidelity.ratio_stats([10.0, 12.0], [11.0, 9.0])
    # pairwise ccp/kernel: 11/10, 11/12, 9/10, 9/12 -> sorted .75 .9 .9167 1.1
    assert r["kernel_median"] == 11.0 and r["ccp_median"] == 10.0
    assert r["ratio_median"] == pytest.approx((0.9 + 11 / 12) / 2)
    assert r["ratio_p25"] == pytest.approx(0.75 + 0.75 * (0.9 - 0.75))
    assert r["ratio_p75"] == pytest.approx(11 / 12 + 0.25 * (1.1 - 11 / 12))
    # Zero retransmits on both sides is a ratio of 1; NaN values are left out.
    z = fidelity.ratio_stats([0.0, math.nan], [0.0])
    assert (z["ratio_median"], z["kernel_runs"]) == (1.0, 1)
    assert math.isnan(fidelity.ratio_stats([], [1.0])["ratio_median"])
    # The kernel never retransmitted, the ccp flow did: an infinite ratio, a missed target.
    inf = fidelity.ratio_stats([0.0, 0.0], [171.0, 160.0])
    assert inf["ratio_median"] == math.inf and inf["ratio_p25"] == math.inf


def test_rows_from_analysis_tables_and_targets():
    runs = pd.DataFrame({
        "cca": ["kernel:cubic"] * 2 + ["ccp:cubic"] * 2, "run": [1, 2, 1, 2],
        "throughput_mbps": [11.0, 11.2, 10.9, 11.1], "p95_queueing_delay_ms": [40, 42, 60, 62],
        "retransmits": [10, 20, 30, 30],
    })
    steps = pd.DataFrame({
        "cca": ["kernel:cubic"] * 4 + ["ccp:cubic"] * 2, "run": [1, 1, 2, 2, 1, 2],
        "normalized_area": [4.0, 6.0, 5.0, 7.0, 5.5, 6.5], "convergence_s": [1.0, 3.0, 2.0, math.nan, 2.5, 3.0],
    })
    rows = {r["metric"]: r for r in fidelity.fidelity_rows("s", ["cubic"], runs, steps)}
    assert rows["throughput_mbps"]["meets_target"] is True
    assert rows["p95_queueing_delay_ms"]["meets_target"] is False  # ~1.5x the kernel's delay
    assert rows["retransmits"]["ratio_median"] == pytest.approx(2.25)  # 1.5, 1.5, 3, 3
    assert rows["retransmits"]["meets_target"] is False
    # NA per run = mean over the run's steps: kernel 5.0, 6.0 (spread 1.0); ccp 5.5, 6.5.
    assert rows["normalized_area"]["kernel_median"] == pytest.approx(5.5)
    assert rows["normalized_area"]["meets_target"] is True  # |6.0 - 5.5| <= 1.0
    assert rows["convergence_s"]["meets_target"] is None
    table = fidelity.format_table(list(rows.values()))
    assert "throughput_mbps" in table and "NO" in table


def test_targets_include_their_bounds_exactly():
    """A ratio on a bound meets the target: 17 ms / 20 ms is 0.85, inside "[0.85, 1.15]",
    though abs(0.85 - 1) > 0.15 in floating point; one step past a bound does not."""
    def p95_row(kernel_ms, ccp_ms):
        runs = pd.DataFrame({
            "cca": ["kernel:bbr"] * len(kernel_ms) + ["ccp:bbr"] * len(ccp_ms),
            "run": list(range(len(kernel_ms))) + list(range(len(ccp_ms))),
            "throughput_mbps": [12.0] * (len(kernel_ms) + len(ccp_ms)),
            "p95_queueing_delay_ms": kernel_ms + ccp_ms, "retransmits": [0] * (len(kernel_ms) + len(ccp_ms)),
        })
        steps = pd.DataFrame({"cca": ["kernel:bbr", "ccp:bbr"], "run": [0, 0], "normalized_area": [1.0, 1.0],
                              "convergence_s": [0.2, 0.2]})
        rows = {r["metric"]: r for r in fidelity.fidelity_rows("s", ["bbr"], runs, steps)}
        return rows["p95_queueing_delay_ms"]

    assert abs(17 / 20 - 1) > 0.15  # the floating-point trap itself
    on_bound = p95_row([20.0], [17.0])
    assert on_bound["ratio_median"] == 17 / 20 and on_bound["meets_target"] is True
    assert p95_row([20.0], [23.0])["meets_target"] is True  # 1.15
    assert p95_row([100.0], [84.0])["meets_target"] is False  # 0.84
    assert p95_row([100.0], [116.0])["meets_target"] is False  # 1.16
    assert fidelity.METRICS["retransmits"][2](1.5, [], []) is True
    assert fidelity.METRICS["throughput_mbps"][2](0.95, [], []) is True
    assert fidelity.METRICS["throughput_mbps"][2](0.949, [], []) is False


def test_bad_input_names_the_option(tmp_path):
    with pytest.raises(CcplabError, match="--scenarios: unknown scenario 'x'"):
        fidelity.parse_scenarios("fixed12-q1bdp,x")
    with pytest.raises(CcplabError, match="unknown kernel CCA .nosuch."):
        fidelity.parse_algorithms("reno,nosuch")
    assert cli.main(["fidelity", "--out", str(tmp_path / "o"), "--runs", "0"]) == 2
    assert not (tmp_path / "o").exists()
    assert fidelity.bdp_packets(12) == 50
    # A late step moves into a short run.
    down = fidelity.SCENARIOS["down24-6"].steps_for(8)
    assert down[1].at_s == 4.0 and down[1].to_mbps == 6


@pytest.mark.network
def test_short_fidelity_run_writes_the_table(tmp_path, needs_root, capsys):
    out = tmp_path / "fid"
    code = cli.main(["fidelity", "--out", str(out), "--runs", "1", "--duration-s", "6",
                     "--scenarios", "fixed12-q1bdp", "--algorithms", "reno"])
    assert code == 0
    table = pd.read_csv(out / "fidelity.csv")
    assert set(table["metric"]) == set(fidelity.METRICS)
    thr = table[table["metric"] == "throughput_mbps"].iloc[0]
    # Both flows moved data through a 12 Mbit/s link.
    assert 5 < thr["kernel_median"] <= 12.5 and 5 < thr["ccp_median"] <= 12.5
    assert thr["ratio_median"] == pytest.approx(thr["ccp_median"] / thr["kernel_median"])
    assert (out / "fidelity.html").read_text().count("<tr") == len(table) + 1
    assert (out / "fixed12-q1bdp" / "runs" / "ccp-reno" / "run-1" / "algorithm.log").exists()
    assert "throughput_mbps" in capsys.readouterr().out


def _chunk(root, scenario, cca, values):
    """A one-sided fidelity results directory: <root>/<scenario>/runs.csv and steps.csv."""
    d = root / scenario
    d.mkdir(parents=True)
    runs = [1, 2][:len(values)]
    pd.DataFrame({"cca": [cca] * len(values), "run": runs, "throughput_mbps": values,
                  "p95_queueing_delay_ms": [50.0] * len(values), "retransmits": [10] * len(values)}
                 ).to_csv(d / "runs.csv", index=False)
    pd.DataFrame({"cca": [cca] * len(values), "run": runs, "normalized_area": [1.0] * len(values),
                  "convergence_s": [2.0] * len(values)}).to_csv(d / "steps.csv", index=False)


def test_from_merges_one_sided_chunks_into_one_table(tmp_path, capsys):
    # Kernel and ccp halves of two scenarios, each in its own directory; two kernel
    # chunks of one scenario whose run numbers collide (both 1, 2) stay four runs.
    _chunk(tmp_path / "k1", "fixed12-q1bdp", "kernel:reno", [10.0, 12.0])
    _chunk(tmp_path / "k2", "fixed12-q1bdp", "kernel:reno", [14.0, 16.0])
    _chunk(tmp_path / "c1", "fixed12-q1bdp", "ccp:reno", [13.0])
    _chunk(tmp_path / "k1", "down24-6", "kernel:reno", [6.0])
    _chunk(tmp_path / "c1", "down24-6", "ccp:reno", [3.0])
    out = tmp_path / "merged"
    code = cli.main(["fidelity", "--from", str(tmp_path / "c1"), str(tmp_path / "k1"), str(tmp_path / "k2"),
                     "--out", str(out), "--algorithms", "reno"])
    assert code == 0
    table = pd.read_csv(out / "fidelity.csv")
    thr = table[table["metric"] == "throughput_mbps"].set_index("scenario")
    assert list(thr.index) == ["fixed12-q1bdp", "down24-6"], "suite order"
    assert thr.loc["fixed12-q1bdp", "kernel_runs"] == 4 and thr.loc["fixed12-q1bdp", "kernel_median"] == 13.0
    assert thr.loc["fixed12-q1bdp", "ratio_median"] == pytest.approx(statistics.median([13 / 10, 13 / 12, 13 / 14, 13 / 16]))
    assert thr.loc["down24-6", "ratio_median"] == pytest.approx(0.5)
    assert "fixed12-q1bdp" in capsys.readouterr().out
    # Bad sources name themselves; nothing is written over an existing table.
    with pytest.raises(CcplabError, match="holds no analysed scenario"):
        fidelity.merge_results([tmp_path / "merged"], ["reno"])
    with pytest.raises(CcplabError, match="is not a directory"):
        fidelity.merge_results([tmp_path / "nosuch"], ["reno"])
    assert cli.main(["fidelity", "--from", str(tmp_path / "k1"), "--out", str(out)]) == 2
    assert fidelity.parse_sides("ccp") == ("ccp",) and fidelity.parse_sides(None) == ("kernel", "ccp")
    with pytest.raises(CcplabError, match="--sides"):
        fidelity.parse_sides("kernel,linux")
