"""Second-order step-response metrics against systems with known damping ratio and natural frequency."""

from __future__ import annotations

import math

import numpy as np
import pytest

from transient import second_order_metrics, unit_step_response
from transient.secondorder import classify

BIN_S = 0.05


def response(zeta, wn, n=200, dead=0.0, noise=0.0, seed=0, frm=0.0, to=12.0):
    t = (np.arange(n) + 0.5) * BIN_S
    y = frm + (to - frm) * unit_step_response(t - dead, zeta, wn)
    return y + np.random.default_rng(seed).normal(0, noise, n)


@pytest.mark.parametrize("zeta, wn", [(0.2, 8.0), (0.4, 6.0), (0.7, 3.0), (1.0, 5.0), (1.8, 10.0)])
def test_fit_gives_zeta_and_omega_back_within_5_percent(zeta, wn):
    m = second_order_metrics(response(zeta, wn, dead=0.1, noise=0.05), BIN_S, 0.0, 12.0)
    assert m.damping_ratio == pytest.approx(zeta, rel=0.05)
    assert m.natural_frequency_rad_s == pytest.approx(wn, rel=0.05)
    assert m.fit_r2 > 0.99


def test_measured_metrics_match_the_textbook_formulas():
    zeta, wn = 0.3, 5.0
    m = second_order_metrics(response(zeta, wn, n=400), BIN_S, 0.0, 12.0)
    root = math.sqrt(1 - zeta**2)
    assert m.overshoot_pct == pytest.approx(100 * math.exp(-zeta * math.pi / root), abs=1.0)
    assert m.peak_time_s == pytest.approx(math.pi / (wn * root), abs=BIN_S)
    # settling: the exact last exit from the 2 % / 5 % bands of a dense curve, to a bin
    dense_t = np.arange(0, 20, 1e-4)
    dense = unit_step_response(dense_t, zeta, wn)
    for pct, got in ((0.02, m.settling_time_s), (0.05, m.settling_time_5pct_s)):
        exact = dense_t[np.flatnonzero(np.abs(dense - 1) > pct)[-1]]
        assert abs(got - exact) <= 2 * BIN_S, (pct, got, exact)
    dense_rise = dense_t[np.argmax(dense >= 0.9)] - dense_t[np.argmax(dense >= 0.1)]
    assert m.rise_time_s == pytest.approx(dense_rise, abs=BIN_S)
    assert m.response_class == "underdamped"


def test_step_down_is_normalized_to_the_step():
    m = second_order_metrics(response(0.4, 6.0, frm=12.0, to=4.0), BIN_S, 12.0, 4.0)
    assert m.damping_ratio == pytest.approx(0.4, rel=0.05) and m.response_class == "underdamped"
    assert m.overshoot_pct == pytest.approx(100 * math.exp(-0.4 * math.pi / math.sqrt(1 - 0.16)), abs=1.5)


def test_classes():
    assert second_order_metrics(response(0.01, 8.0), BIN_S, 0, 12).response_class == "undamped"
    assert second_order_metrics(response(1.0, 5.0), BIN_S, 0, 12).response_class == "critically damped"
    assert second_order_metrics(response(2.5, 20.0), BIN_S, 0, 12).response_class == "overdamped"
    # a square wave around the level is a sustained oscillation: a limit cycle
    square = np.where((np.arange(200) // 7) % 2 == 0, 0.0, 12.0)
    assert second_order_metrics(square, BIN_S, 0, 12).response_class == "undamped"
    # noise explains nothing: R^2 far below 0.6
    noise = np.random.default_rng(1).uniform(0.0, 12.0, 200)
    m = second_order_metrics(noise, BIN_S, 0, 12)
    assert m.fit_r2 < 0.6 and m.response_class == "not second-order"
    assert classify(float("nan"), 0.99) == "not second-order"


def test_never_settling_and_flat_steps_give_nan():
    m = second_order_metrics(np.full(100, 6.0), BIN_S, 0.0, 12.0)  # stuck at half
    assert math.isnan(m.settling_time_s) and math.isnan(m.rise_time_s) and m.overshoot_pct == 0.0
    flat = second_order_metrics(np.full(100, 6.0), BIN_S, 6.0, 6.0)
    assert math.isnan(flat.damping_ratio) and flat.response_class == "not second-order"


def test_dead_time_before_the_first_sample_is_fitted_not_cut_off():
    # The response began at the input step, but the first sample comes 0.117 s later (a flow's first
    # full-size packet): fitted from the first sample, omega_n came back 2.28 (14 % high).
    t = (np.arange(200) + 0.5) * BIN_S
    y = 12.0 * unit_step_response(t + 0.117, 0.5, 2.0)
    m = second_order_metrics(y, BIN_S, 0.0, 12.0, lead_s=0.117)
    assert m.damping_ratio == pytest.approx(0.5, rel=0.03)
    assert m.natural_frequency_rad_s == pytest.approx(2.0, rel=0.03)
    assert m.dead_time_s == pytest.approx(0.0, abs=0.02)
    # the same samples of a response that only began at the first sample: dead time = the lead
    late = second_order_metrics(12.0 * unit_step_response(t, 0.5, 2.0), BIN_S, 0.0, 12.0, lead_s=0.117)
    assert late.natural_frequency_rad_s == pytest.approx(2.0, rel=0.03)
    assert late.dead_time_s == pytest.approx(0.117, abs=0.01)
    with pytest.raises(ValueError, match="lead_s"):
        second_order_metrics(y, BIN_S, 0.0, 12.0, lead_s=-0.1)


def test_dead_time_on_a_synthetic_log_whose_first_full_size_packet_comes_0117_s_after_the_step(tmp_path):
    # Sender rate 12.032 x g(t; zeta 0.5, omega_n 2) from the capacity step at 0 s; its packets come from a
    # fractional credit, so the first one arrives ~0.117 s after the step: the analysed "start" begins there.
    from transient import AnalysisOptions, Step, analyze_log

    from .conftest import simulate_link

    n_ms = 12000
    credit = np.floor(np.cumsum(unit_step_response(np.arange(n_ms) / 1000.0, 0.5, 2.0)))
    sends = np.diff(np.concatenate([[0.0], credit])).astype(int)
    log = tmp_path / "uplink.log"
    log.write_text(simulate_link(np.ones(n_ms, int), sends, queue_packets=100000))
    res = analyze_log(log, options=AnalysisOptions(steps=(Step(0.0, 0.0, 12.032),)))
    start = res.steps.iloc[0]
    assert start["kind"] == "start" and 0.10 <= start["at_s"] <= 0.13
    assert start["damping_ratio"] == pytest.approx(0.5, rel=0.05)
    assert start["natural_frequency_rad_s"] == pytest.approx(2.0, rel=0.05)
    assert 0.0 <= start["dead_time_s"] < start["at_s"]
    # the lone flow's own start in the per-flow table is timed from the same input
    flow_start = res.flow_tables.flow_steps.iloc[0]
    assert flow_start["natural_frequency_rad_s"] == pytest.approx(start["natural_frequency_rad_s"], rel=1e-3)
    assert flow_start["dead_time_s"] == pytest.approx(start["dead_time_s"], abs=1e-3)


@pytest.mark.parametrize("zeta", [0.3, 1.0, 2.5])
def test_impulse_response_and_jacobian_are_the_derivatives_of_the_step_response(zeta):
    from transient.secondorder import _model, _model_jacobian, unit_impulse_response

    t = np.linspace(0.0, 4.0, 81)
    h = 1e-6
    numeric = (unit_step_response(t + h, zeta, 3.0) - unit_step_response(t - h, zeta, 3.0)) / (2 * h)
    assert np.allclose(unit_impulse_response(t[1:], zeta, 3.0), numeric[1:], atol=1e-5)
    p = np.array([1.2, 0.3, zeta, 3.0])
    jac = _model_jacobian(t, p)
    for j in range(4):
        step = np.zeros(4)
        step[j] = 1e-6 * max(abs(p[j]), 1.0)
        fd = (_model(t, *(p + step)) - _model(t, *(p - step))) / (2 * step[j])
        # the kink at the dead time: its one sample is left out
        away = np.abs(t - p[1]) > 1e-3
        assert np.allclose(jac[away, j], fd[away], atol=1e-4), j
