import math

import numpy as np
import pandas as pd
import pytest

from transient import SteadyStateParams, find_steady_state, normalized_area, step_transient

W_S = 0.05  # 1-RTT bins at RTT 50 ms


def reference_detector(x, window=10, shift=4, n_windows=3, thr_mean=0.02, thr_var=0.02):
    """TPCCA's rule written as a plain loop over candidate starts (ground truth)."""
    span = shift * (n_windows - 1) + window
    for i in range(len(x) - span + 1):
        wins = [x[i + k * shift : i + k * shift + window] for k in range(n_windows)]
        means = [np.mean(w) for w in wins]
        variances = [np.var(w) for w in wins]
        if np.var(means) <= thr_mean and np.var(variances) <= thr_var:
            return i + shift * (n_windows // 2) + window // 2
    return None


def series(x):
    return pd.Series(np.asarray(x, float), index=np.arange(len(x)) * W_S)


def test_ramp_then_plateau_converges_where_the_rule_says():
    rng = np.random.default_rng(7)
    B = 12.0
    ramp = np.linspace(0, B, 40, endpoint=False)  # 2 s ramp in 40 bins
    plateau = B + rng.normal(0, 0.01, 160)
    x = np.r_[ramp, plateau]
    tr = step_transient(series(x), W_S, 0.0, B)
    ref = reference_detector(x)
    assert tr.converged and ref is not None
    assert tr.convergence_bin == ref
    assert tr.convergence_time_s == pytest.approx(ref * W_S)
    # Near the end of the ramp: within a window (10 bins) of the 2 s plateau start,
    # and never before the middle of the ramp.
    assert 1.0 <= tr.convergence_time_s <= 2.0 + 10 * W_S
    assert tr.steady_level_mbps == pytest.approx(B, abs=0.3)


@pytest.mark.parametrize(
    "x",
    [
        12 + 5 * np.sin(np.arange(400) * 2 * np.pi / 7.3),  # oscillates forever
        0.1 * np.arange(400),  # grows forever: window means differ by 0.4 Mbit/s
    ],
    ids=["oscillation", "linear-ramp"],
)
def test_never_steady_is_not_converged_and_nan(x):
    assert reference_detector(x) is None
    assert find_steady_state(x) is None
    tr = step_transient(series(x), W_S, 0.0, 12.0)
    assert tr.converged is False
    assert math.isnan(tr.convergence_time_s) and math.isnan(tr.normalized_area)
    assert math.isnan(tr.convergence_point_s)


@pytest.mark.parametrize("B, t0", [(12.0, 7), (48.0, 11)])
def test_normalized_area_of_dead_time_then_exact_rate(B, t0):
    # Nothing delivered for t0 bins, then exactly B: the first all-plateau candidate is
    # bin t0, so convergence is at bin t0 + 4 + 5 and the area is B * t0 bins.
    x = np.r_[np.zeros(t0), np.full(100, B)]
    tr = step_transient(series(x), W_S, 0.0, B)
    conv_bins = t0 + 9
    assert tr.convergence_bin == conv_bins
    assert tr.convergence_time_s == pytest.approx(conv_bins * W_S)
    area = B * t0 * W_S
    assert tr.area_mbit == pytest.approx(area)
    assert tr.normalized_area == pytest.approx((12 / B) * area / (conv_bins * W_S))


def test_step_later_in_run_and_windows_stop_at_span_end():
    # Step at 2 s; the series only becomes steady after 4 s, when the next step starts.
    x = np.r_[np.full(40, 5.0), 0.3 * np.arange(40), np.full(100, 12.0)]
    s = series(x)
    assert not step_transient(s, W_S, 2.0, 12.0, end_s=4.0).converged
    tr = step_transient(s, W_S, 2.0, 12.0)  # no next step: may use the plateau
    assert tr.converged and tr.first_bin == 40
    assert tr.convergence_point_s == pytest.approx(2.0 + tr.convergence_time_s)
    assert tr.convergence_point_s >= 4.0


def test_step_down_to_zero_has_area_but_no_normalized_area():
    x = np.r_[np.full(5, 3.0), np.zeros(100)]
    tr = step_transient(series(x), W_S, 0.0, 0.0)
    assert tr.converged
    assert math.isnan(tr.normalized_area)
    assert tr.area_mbit == pytest.approx(5 * 3.0 * W_S)


def test_thresholds_and_windows_are_parameters():
    x = 12 + np.tile([0.5, -0.5], 200)  # window variance 0.25, constant
    assert find_steady_state(x) is not None
    rng = np.random.default_rng(3)
    noisy = 12 + rng.normal(0, 1.0, 400)
    strict = SteadyStateParams(mean_var_threshold=1e-6, var_var_threshold=1e-6)
    assert find_steady_state(noisy, strict) is None
    params = SteadyStateParams(window_bins=6, shift_bins=2, n_windows=5)
    got = find_steady_state(noisy, SteadyStateParams(window_bins=6, shift_bins=2, n_windows=5, mean_var_threshold=0.5, var_var_threshold=0.5))
    ref = reference_detector(noisy, 6, 2, 5, 0.5, 0.5)
    assert ref is not None and got is not None
    assert got.convergence_index == ref
    assert params.span_bins == 14 and params.convergence_offset_bins == 2 * 2 + 3
    with pytest.raises(ValueError):
        SteadyStateParams(n_windows=1)


def test_short_series_cannot_converge():
    assert find_steady_state(np.full(17, 12.0)) is None  # needs 18 bins
    assert find_steady_state(np.full(18, 12.0)).convergence_index == 9


def test_normalized_area_edge_cases():
    assert all(math.isnan(v) for v in normalized_area(np.array([]), W_S, 12.0))
    na, area = normalized_area(np.array([6.0, 18.0]), 0.1, 12.0)
    assert area == pytest.approx(1.2) and na == pytest.approx(1.2 / 0.2)
