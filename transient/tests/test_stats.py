import math

import numpy as np
import pandas as pd
import pytest

from transient import stats


def test_quartiles_and_median_of_a_small_sample():
    e = stats.summarize([4.0, 1.0, 100.0, 3.0, 2.0])
    assert (e.n, e.n_valid, e.median, e.q1, e.q3) == (5, 5, 3.0, 2.0, 4.0)
    assert e.ci_low <= e.median <= e.ci_high


def test_ci_contains_the_true_median_of_a_large_sample():
    x = np.random.default_rng(11).lognormal(mean=2.0, sigma=0.5, size=400)  # true median e^2
    e = stats.summarize(x)
    assert e.ci_low < math.exp(2.0) < e.ci_high
    assert e.ci_high - e.ci_low < 1.5  # and it is informative, not [min, max]


def test_ci_covers_the_true_median_about_95_percent_of_the_time():
    rng = np.random.default_rng(5)
    hits = 0
    trials = 150
    for seed in range(trials):
        e = stats.summarize(rng.normal(10.0, 2.0, 40), n_resamples=999, seed=seed)
        hits += e.ci_low <= 10.0 <= e.ci_high
    assert 0.88 <= hits / trials <= 1.0, hits


def test_bootstrap_is_seeded():
    x = np.random.default_rng(3).normal(0, 1, 40)  # even n: bootstrap medians fall between data points
    assert stats.summarize(x, seed=1) == stats.summarize(x, seed=1)
    a, b = stats.summarize(x, seed=1, n_resamples=200), stats.summarize(x, seed=2, n_resamples=200)
    assert (a.ci_low, a.ci_high) != (b.ci_low, b.ci_high)


def test_nan_is_dropped_and_counted_never_averaged():
    e = stats.summarize([1.0, float("nan"), None, 3.0])
    assert (e.n, e.n_valid, e.median) == (4, 2, 2.0)
    empty = stats.summarize([float("nan")])
    assert (empty.n, empty.n_valid) == (1, 0) and math.isnan(empty.median) and math.isnan(empty.ci_low)


def test_one_value_has_no_interval_identical_values_a_point():
    one = stats.summarize([5.0])
    assert one.median == 5.0 and math.isnan(one.ci_low) and math.isnan(one.ci_high)
    same = stats.summarize([2.5, 2.5, 2.5])
    assert (same.ci_low, same.median, same.ci_high) == (2.5, 2.5, 2.5)


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="confidence"):
        stats.summarize([1.0, 2.0], confidence=95)
    with pytest.raises(ValueError):
        stats.summarize(["fast", "slow"])
    with pytest.raises(ValueError, match="scenario"):
        stats.step_summary(pd.DataFrame({"label": ["a"], "step": [0]}))


def _steps(rows):
    base = {"label": "ccp:reno", "scenario": "s", "step": 0, "kind": "start", "from_mbps": 0.0, "to_mbps": 12.0}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_convergence_uses_converged_runs_only_and_counts_the_others():
    steps = _steps([
        {"converged": True, "convergence_s": 1.0, "normalized_area": 0.2},
        {"converged": True, "convergence_s": 3.0, "normalized_area": 0.4},
        # not converged: its convergence value (here a made-up 40) must not count; its NA still does
        {"converged": False, "convergence_s": 40.0, "normalized_area": 0.9},
        {"converged": None, "convergence_s": float("nan"), "normalized_area": float("nan")},
    ])
    out = stats.step_summary(steps, metrics=["convergence_s", "normalized_area"], n_resamples=999)
    conv = out[out["metric"] == "convergence_s"].iloc[0]
    assert (conv["n"], conv["n_valid"], conv["median"]) == (4, 2, 2.0)
    assert (conv["n_converged"], conv["n_not_converged"]) == (2, 2)
    assert conv["ci_high"] <= 3.0
    na = out[out["metric"] == "normalized_area"].iloc[0]
    assert (na["n_valid"], na["median"]) == (3, 0.4)
    assert (conv["kind"], conv["to_mbps"]) == ("start", 12.0)


def test_step_summary_groups_by_label_scenario_step():
    rows = []
    for label, scen, step, v in [("a", "s1", 0, 1.0), ("a", "s1", 0, 2.0), ("a", "s1", 1, 5.0),
                                 ("b", "s1", 0, 7.0), ("a", "s2", 0, 9.0)]:
        rows.append({"label": label, "scenario": scen, "step": step, "converged": True, "drops": v})
    out = stats.step_summary(_steps(rows), metrics=["drops"])
    got = {(r.label, r.scenario, r.step): (r.n, r.median) for r in out.itertuples()}
    assert got == {("a", "s1", 0): (2, 1.5), ("a", "s1", 1): (1, 5.0), ("b", "s1", 0): (1, 7.0),
                   ("a", "s2", 0): (1, 9.0)}


def test_run_summary_falls_back_to_cca_without_label():
    runs = pd.DataFrame({"cca": ["x", "x", "y"], "scenario": ["s"] * 3, "throughput_mbps": [10.0, 12.0, 5.0]})
    out = stats.run_summary(runs, metrics=["throughput_mbps"])
    assert dict(zip(out["label"], out["median"])) == {"x": 11.0, "y": 5.0}


@pytest.mark.parametrize("value, low, high, expected", [
    (11.63, 11.52, 11.74, "11.6 [11.5, 11.7]"),                # width 0.22: one decimal
    (11.6, 11.59112, 11.60888, "11.600 [11.591, 11.609]"),    # width 0.0178: leading 1 -> two significant digits
    (11.6, 11.1, 12.1, "11.6 [11.1, 12.1]"),                   # width 1.0 -> 1 and 0.1: leading digit 1
    (11.6, 10.2, 13.4, "12 [10, 13]"),                         # width 3.2: units
    (1234.5, 1190.0, 1262.0, "1230 [1190, 1260]"),             # width 72: tens
    (0.0712, 0.0669, 0.0731, "0.071 [0.067, 0.073]"),
    (-0.001, -0.03, 0.02, "0.00 [-0.03, 0.02]"),               # no "-0.00"
    (12.0, 12.0, 12.0, "12.0 [12.0, 12.0]"),                   # identical runs: the value's 3 significant digits
    (3.14159, float("nan"), float("nan"), "3.14"),             # no interval
    (1234.5, float("nan"), float("nan"), "1234"),              # integer part never cut
    (float("nan"), 1.0, 2.0, "n/a"),
])
def test_format_estimate(value, low, high, expected):
    assert stats.format_estimate(value, low, high) == expected


def test_format_estimate_rejects_an_inverted_interval():
    with pytest.raises(ValueError, match="low > high"):
        stats.format_estimate(1.0, 2.0, 0.5)


def test_format_interval_uses_the_estimates_digits():
    assert stats.format_interval(11.412, 11.83, like=(11.63, 11.52, 11.74)) == "[11.4, 11.8]"
    assert stats.format_interval(1.0, float("nan")) == "n/a"


def test_normalized_area_label_follows_the_method():
    def na(methods):
        return dict(stats.step_metric_labels(methods))["normalized_area"]

    assert na(["ccplab"]) == "Normalized Area (s)"
    assert na(["tpcca", "tpcca"]) == "Normalized Area (TPCCA, no unit)"
    assert "ccplab: s" in na(["tpcca", "ccplab"]) and na([]) == "Normalized Area (s)"
    assert [c for c, _ in stats.step_metric_labels(["tpcca"])] == [c for c, _ in stats.STEP_METRICS]
