"""Second-order step-response metrics of one step (control-theory view of a CCA's transient).

Signal.  The sender's rate (arrivals ``+`` per RTT bin, `transient.series`
``sending_mbps``), with the trace's noise taken out: y_k = s_k - (r_k - B),
r = offered capacity per bin, B = the step's nominal new rate.  Departures
cannot exceed the offered capacity, so they can show neither overshoot nor
ringing after a step up; the sender's rate is the variable the CCA controls
(it is also what TPCCA calls throughput).  The response is normalized to the
step, u = (y - A) / (B - A) (A = the rate before), so 0 = old level, 1 =
new level, for steps up and down alike.  Sample k stands at the bin's centre
(k + 1/2) x width after the step, and u(0) = 0.

Measured on u (standard definitions, e.g. Ogata, Modern Control
Engineering, 5th ed., 5.3):

* rise time: from the first crossing of 0.1 to the first of 0.9
  (linear interpolation between samples); NaN if 0.9 is never reached;
* peak time: time of the largest u; percent overshoot: 100 x (max u - 1),
  0 when u never exceeds 1;
* settling time (2 % and 5 %): end of the last bin where |y - B| exceeds
  2 % (5 %) of B, i.e. the band the report draws around the new capacity;
  0 when never outside, NaN when still outside in the span's last bin (it
  never settled) or B = 0.

Fitted: second order plus dead time (SOPDT), u(t) = K g(t - theta; zeta,
omega_n), g the unit step response of a second-order system (underdamped,
critically damped or overdamped form), with gain K, dead time theta >= 0,
damping ratio zeta and natural frequency omega_n (rad/s), by
scipy.optimize.curve_fit (trust region, bounded) from several starting
points, keeping the best; R^2 = 1 - SS_res / SS_tot over the fitted
samples (the second-order-plus-dead-time model fitted to a step test:
Seborg, Edgar & Mellichamp, Process Dynamics and Control, chapter
"Development of Empirical Models from Process Data").

Time origin of the fit.  t is measured from the *input* step (the capacity
change, or for a flow's start the capacity step in force then), not from the
first sample: the samples start ``lead_s`` after the input (a flow's first
full-size packet comes after its first small ones, so its analysed span starts
when its response is already rising).  Sample k stands at lead_s + (k + 1/2)
x width.  Fitting from the first sample instead would cut the response's
slow beginning off and read the rest as a faster system: a response with zeta
0.5 and omega_n 2 rad/s whose first sample comes 0.117 s after the input
came back with omega_n 2.28 (14 % high).  The fitted theta, from the input,
is reported as ``dead_time_s``.  At most `FIT_HORIZON_S` after the step are fitted,
so a long steady tail does not swamp the transient.  Class:

* "not second-order" when R^2 < `MIN_R2` (the fit explains too little);
* "undamped" when zeta < 0.05 (a sustained oscillation / limit cycle);
* "underdamped" when zeta < 0.9, "critically damped" when 0.9 <= zeta <=
  1.1, "overdamped" above.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np

FIT_HORIZON_S = 10.0
"""Longest stretch after a step that the fit sees, s."""

MIN_R2 = 0.6
"""Below this R^2 a response is classed "not second-order"."""

UNDAMPED_ZETA = 0.05
CRITICAL_BAND = (0.9, 1.1)


@dataclass(frozen=True)
class SecondOrder:
    """Second-order metrics of one step (s, %, rad/s; NaN where undefined)."""

    rise_time_s: float
    peak_time_s: float
    overshoot_pct: float
    settling_time_s: float
    settling_time_5pct_s: float
    damping_ratio: float
    natural_frequency_rad_s: float
    fit_r2: float
    response_class: str
    dead_time_s: float = math.nan

    def as_dict(self) -> dict:
        return asdict(self)


NAN_SECOND_ORDER = SecondOrder(*(math.nan,) * 8, response_class="not second-order")


def unit_step_response(t: np.ndarray, zeta: float, wn: float) -> np.ndarray:
    """Unit step response of wn^2 / (s^2 + 2 zeta wn s + wn^2) at times t (0 for t < 0)."""
    t = np.maximum(np.asarray(t, np.float64), 0.0)
    if abs(zeta - 1.0) < 1e-6:
        return 1.0 - np.exp(-wn * t) * (1.0 + wn * t)
    if zeta < 1.0:
        root = math.sqrt(1.0 - zeta * zeta)
        wd = wn * root
        return 1.0 - np.exp(-zeta * wn * t) * (np.cos(wd * t) + zeta / root * np.sin(wd * t))
    root = math.sqrt(zeta * zeta - 1.0)
    p1, p2 = wn * (zeta - root), wn * (zeta + root)  # slow and fast poles
    return 1.0 + (p1 * np.exp(-p2 * t) - p2 * np.exp(-p1 * t)) / (p2 - p1)


def _model(t, gain, dead, zeta, wn):
    return gain * unit_step_response(t - dead, zeta, wn)


def fit_second_order(t: np.ndarray, u: np.ndarray, bin_s: float) -> tuple[float, float, float, float]:
    """Fit the SOPDT model K g(t - theta) to samples (t, u); returns (zeta, omega_n rad/s, R^2, theta s).

    ``t``: sample times from the input step (s), increasing; ``u``: the
    normalized response.  NaNs when the fit fails or the data are flat.
    """
    t = np.asarray(t, np.float64)
    u = np.asarray(u, np.float64)
    ok = np.isfinite(u)
    t, u = t[ok], u[ok]
    ss_tot = float(((u - u.mean()) ** 2).sum()) if u.size else 0.0
    if u.size < 6 or ss_tot <= 0:
        return math.nan, math.nan, math.nan, math.nan
    from scipy.optimize import OptimizeWarning, curve_fit  # here: scipy.optimize alone takes 0.5-1 s to import
    span = float(t[-1])
    lead = max(float(t[0]) - bin_s / 2, 0.0)  # the input came this long before the first bin
    wn_max = math.pi / bin_s  # faster than Nyquist cannot be seen in the bins
    wn_min = 0.1 / max(span, bin_s)
    bounds = ([0.0, 0.0, 1e-3, wn_min], [5.0, lead + max((span - lead) / 2, bin_s), 10.0, wn_max])
    # Starting points: natural frequency from the 10-90 % rise time (about
    # 1.8 / omega_n for moderate damping), damping low, critical and high.
    rise = _first_crossing(t, u, 0.9) - _first_crossing(t, u, 0.1)
    wn_est = 1.8 / rise if math.isfinite(rise) and rise > 0 else 4.0 / span
    # A lightly damped or sustained oscillation: its dominant frequency (the
    # spectrum's peak; omega_d ~ omega_n at low damping) is a far better start
    # than the rise time, which a square-ish oscillation makes one bin long.
    # Dead time: from 0 (the response began at the input) and, when the
    # samples start late, from the first sample (it began only then).
    starts = [(0.3, wn_est), (1.0, 1.5 * wn_est), (2.5, 3.0 * wn_est), (0.05, _dominant_omega(u, bin_s))]
    starts = [(z, w, d) for d in sorted({0.0, lead}) for z, w in starts]
    best = None
    for zeta0, wn_start, dead0 in starts:
        wn0 = min(max(wn_start, wn_min * 1.01), wn_max * 0.99)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OptimizeWarning)
                popt, _ = curve_fit(_model, t, u, p0=[1.0, dead0, zeta0, wn0], bounds=bounds, method="trf",
                                    maxfev=400)
        except (RuntimeError, ValueError):
            continue
        ss_res = float(((u - _model(t, *popt)) ** 2).sum())
        if best is None or ss_res < best[0]:
            best = (ss_res, popt)
        if ss_res <= 1e-6 * ss_tot:
            break  # an exact fit cannot be improved
    if best is None:
        return math.nan, math.nan, math.nan, math.nan
    ss_res, popt = best
    # the dead time to the microsecond: below that it is the optimizer's noise around 0, not a delay
    return float(popt[2]), float(popt[3]), 1.0 - ss_res / ss_tot, round(float(popt[1]), 6)


def classify(zeta: float, r2: float) -> str:
    """Response class from the fitted damping ratio and the fit's R^2 (see module docstring)."""
    if not (math.isfinite(r2) and math.isfinite(zeta)) or r2 < MIN_R2:
        return "not second-order"
    if zeta < UNDAMPED_ZETA:
        return "undamped"
    if zeta < CRITICAL_BAND[0]:
        return "underdamped"
    if zeta <= CRITICAL_BAND[1]:
        return "critically damped"
    return "overdamped"


def _dominant_omega(u: np.ndarray, bin_s: float) -> float:
    """Angular frequency (rad/s) of the largest non-zero bin of the spectrum of ``u`` (samples
    ``bin_s`` apart; numpy's real FFT of the deviations from the mean)."""
    spectrum = np.abs(np.fft.rfft(u - u.mean()))
    freqs = np.fft.rfftfreq(u.size, d=bin_s)
    return float(2 * math.pi * freqs[1 + int(np.argmax(spectrum[1:]))])


def _first_crossing(t: np.ndarray, u: np.ndarray, level: float) -> float:
    above = np.flatnonzero(u >= level)
    if above.size == 0:
        return math.nan
    k = int(above[0])
    if k == 0:
        return float(t[0])
    t0, t1, u0, u1 = t[k - 1], t[k], u[k - 1], u[k]
    return float(t0 + (level - u0) * (t1 - t0) / (u1 - u0)) if u1 != u0 else float(t1)


def _settling(y: np.ndarray, target: float, pct: float, bin_s: float) -> float:
    if not target > 0 or y.size == 0:
        return math.nan
    outside = np.flatnonzero(np.abs(y - target) > pct * target)
    if outside.size == 0:
        return 0.0
    last = int(outside[-1])
    if last == y.size - 1:
        return math.nan  # still outside at the end: never settled in this span
    return (last + 1) * bin_s


def second_order_metrics(y: np.ndarray, bin_s: float, from_mbps: float, to_mbps: float,
                         lead_s: float = 0.0) -> SecondOrder:
    """Second-order metrics of one step's response ``y`` (Mbit/s per bin from the step; see module docstring).

    Args:
        y: the response per bin, noise-corrected sending rate (Mbit/s).
        bin_s: bin width (s).
        from_mbps, to_mbps: nominal rate before and after the step.
        lead_s: how long before the first bin the input step came (s, >= 0;
            the fit's time origin, see the module docstring).  The measured
            times (rise, peak, settling) stay counted from the first bin.

    Raises:
        ValueError: lead_s negative or not finite.

    Returns:
        `SecondOrder`; all NaN ("not second-order") when the step has no
        change (from = to) or fewer than 6 bins.
    """
    if not (math.isfinite(lead_s) and lead_s >= 0):
        raise ValueError(f"lead_s must be a finite number >= 0, got {lead_s!r} s")
    y = np.asarray(y, np.float64)
    delta = to_mbps - from_mbps
    if delta == 0 or y.size < 6:
        return NAN_SECOND_ORDER
    u = (y - from_mbps) / delta
    t = (np.arange(u.size) + 0.5) * bin_s
    tt = np.concatenate([[0.0], t])
    uu = np.concatenate([[0.0], u])
    rise = _first_crossing(tt, uu, 0.9) - _first_crossing(tt, uu, 0.1)
    k = int(np.nanargmax(u))
    overshoot = 100.0 * max(float(u[k]) - 1.0, 0.0)
    n_fit = min(u.size, max(int(round(FIT_HORIZON_S / bin_s)), 6))
    zeta, wn, r2, dead = fit_second_order(lead_s + t[:n_fit], u[:n_fit], bin_s)
    return SecondOrder(
        rise_time_s=rise,
        peak_time_s=float(t[k]),
        overshoot_pct=overshoot,
        settling_time_s=_settling(y, to_mbps, 0.02, bin_s),
        settling_time_5pct_s=_settling(y, to_mbps, 0.05, bin_s),
        damping_ratio=zeta,
        natural_frequency_rad_s=wn,
        fit_r2=r2,
        response_class=classify(zeta, r2),
        dead_time_s=dead,
    )
