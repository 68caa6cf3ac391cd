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
damping ratio zeta and natural frequency omega_n (rad/s), by least squares
(scipy.optimize.least_squares: MINPACK's Levenberg-Marquardt, the bounds
kept by a change of variables) from the best point of a grid of zeta,
omega_n and two dead times (0, and the lead of the first sample);
R^2 = 1 - SS_res / SS_tot over the fitted samples (the
second-order-plus-dead-time model fitted to a step test: Seborg, Edgar & Mellichamp, Process Dynamics and Control, chapter
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

import functools
import math
from dataclasses import dataclass

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
        return dict(vars(self))


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


def unit_impulse_response(t: np.ndarray, zeta: float, wn: float) -> np.ndarray:
    """Impulse response (d/dt of `unit_step_response`) of wn^2 / (s^2 + 2 zeta wn s + wn^2), 1/s (0 for t < 0)."""
    t = np.maximum(np.asarray(t, np.float64), 0.0)
    if abs(zeta - 1.0) < 1e-6:
        return wn * wn * t * np.exp(-wn * t)
    if zeta < 1.0:
        root = math.sqrt(1.0 - zeta * zeta)
        return wn / root * np.exp(-zeta * wn * t) * np.sin(wn * root * t)
    root = math.sqrt(zeta * zeta - 1.0)
    p1, p2 = wn * (zeta - root), wn * (zeta + root)
    return p1 * p2 / (p2 - p1) * (np.exp(-p1 * t) - np.exp(-p2 * t))


def _model_jacobian(t: np.ndarray, p) -> np.ndarray:
    """d model / d (gain, dead, zeta, omega_n) at the samples: (len(t), 4).  The response depends on
    omega_n only through omega_n (t - theta), so its omega_n and theta columns come from the impulse
    response; the zeta column is a central difference."""
    gain, dead, zeta, wn = p
    tau = t - dead
    g = unit_step_response(tau, zeta, wn)
    h = np.where(tau > 0, unit_impulse_response(tau, zeta, wn), 0.0)
    dz = 1e-6 * max(zeta, 1e-3)
    dg_dzeta = (unit_step_response(tau, zeta + dz, wn) - unit_step_response(tau, max(zeta - dz, 1e-9), wn)) \
        / (zeta + dz - max(zeta - dz, 1e-9))
    return np.column_stack([g, -gain * h, gain * dg_dzeta, gain * np.maximum(tau, 0.0) * h / wn])


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
    from scipy.optimize import least_squares  # here: scipy.optimize alone takes 0.5-1 s to import
    span = float(t[-1])
    lead = max(float(t[0]) - bin_s / 2, 0.0)  # the input came this long before the first bin
    bounds = _Bounds(
        gain=(0.0, 5.0),
        dead=(0.0, lead + max((span - lead) / 2, bin_s)),
        zeta=(1e-3, 10.0),
        wn=(0.1 / max(span, bin_s), math.pi / bin_s),  # faster than Nyquist cannot be seen in the bins
    )
    x0 = bounds.to_free(_grid_start(t, u, bounds, lead, bin_s))
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            fit = least_squares(lambda x: _model(t, *bounds.from_free(x)) - u, x0, method="lm", max_nfev=600,
                                jac=lambda x: _model_jacobian(t, bounds.from_free(x)) * bounds.slopes(x))
    except ValueError:  # residuals not finite at the start
        return math.nan, math.nan, math.nan, math.nan
    popt = bounds.from_free(fit.x)
    ss_res = float(((u - _model(t, *popt)) ** 2).sum())
    if not math.isfinite(ss_res):
        return math.nan, math.nan, math.nan, math.nan
    # the dead time to the microsecond: below that it is the optimizer's noise around 0, not a delay
    return float(popt[2]), float(popt[3]), 1.0 - ss_res / ss_tot, round(float(popt[1]), 6)


@dataclass(frozen=True)
class _Bounds:
    """Box bounds of (gain, dead time s, zeta, omega_n rad/s) and the change of variables that lets an
    unbounded least-squares solver (MINPACK's Levenberg-Marquardt) respect them: p = lo + (hi - lo)
    (sin x + 1) / 2, on a log scale for zeta and omega_n (the bounded-parameter transform of MINUIT:
    James, MINUIT Reference Manual, CERN D506, "Parameter limits")."""

    gain: tuple[float, float]
    dead: tuple[float, float]
    zeta: tuple[float, float]
    wn: tuple[float, float]

    def _ranges(self):
        return (self.gain, self.dead, (math.log(self.zeta[0]), math.log(self.zeta[1])),
                (math.log(self.wn[0]), math.log(self.wn[1])))

    def from_free(self, x) -> list[float]:
        p = [lo + (hi - lo) * (math.sin(xi) + 1.0) / 2.0 for xi, (lo, hi) in zip(x, self._ranges())]
        return [p[0], p[1], math.exp(p[2]), math.exp(p[3])]

    def slopes(self, x) -> np.ndarray:
        """d p / d x of each parameter at the free variables ``x`` (the chain rule's factor)."""
        out = []
        for i, (xi, (lo, hi)) in enumerate(zip(x, self._ranges())):
            d = (hi - lo) * math.cos(xi) / 2.0
            if i >= 2:  # log scale: p = exp(q)
                d *= math.exp(lo + (hi - lo) * (math.sin(xi) + 1.0) / 2.0)
            out.append(d)
        return np.array(out)

    def to_free(self, p) -> np.ndarray:
        q = (p[0], p[1], math.log(p[2]), math.log(p[3]))
        x = []
        for qi, (lo, hi) in zip(q, self._ranges()):
            frac = (qi - lo) / (hi - lo) if hi > lo else 0.5
            x.append(math.asin(min(max(2.0 * frac - 1.0, -1.0 + 1e-9), 1.0 - 1e-9)))
        return np.array(x)


def _grid_start(t: np.ndarray, u: np.ndarray, bounds: _Bounds, lead: float, bin_s: float) -> tuple[float, ...]:
    """Starting point for the local fit: the best (gain, dead, zeta, omega_n) of a log-spaced grid of
    zeta and omega_n, with dead time 0 or ``lead`` (the response began at the input, or only at the
    first sample) and the gain in closed form (linear least squares of u on g).
    A grid start instead of a handful of guesses: one local fit from it lands in the global basin for
    responses from sustained oscillations to heavily overdamped ones.  On samples ``bin_s`` apart the
    grid's responses are shared by every fit of that bin width (their first sample's delay after the
    dead time rounded to a quarter bin: a start, not the fit)."""
    stride = max(1, t.size // GRID_SAMPLES)  # a start needs the response's shape, not every sample
    ts, us = t[::stride], u[::stride]
    regular = np.allclose(np.diff(t), bin_s, rtol=1e-6, atol=1e-9)
    best = None
    for dead in sorted({0.0, lead}):
        if regular:
            quarter = max(int(round((ts[0] - dead) / bin_s * 4)), 0)
            wns, g = _grid_responses(float(bin_s), quarter, stride, ts.size)
        else:
            wns = _grid_omegas(bin_s)
            g = _grid_family(wns[:, None] * np.maximum(ts - dead, 0.0)[None, :])
        gg = (g * g).sum(axis=2)
        gain = np.clip((g @ us) / np.where(gg > 0, gg, 1.0), *bounds.gain)
        sse = ((us - gain[..., None] * g) ** 2).sum(axis=2)
        iz, iw = np.unravel_index(int(np.argmin(sse)), sse.shape)
        if best is None or sse[iz, iw] < best[0]:
            best = (float(sse[iz, iw]), (float(gain[iz, iw]) or 1.0, dead, float(GRID_ZETAS[iz]), float(wns[iw])))
    return best[1]


def _grid_omegas(bin_s: float) -> np.ndarray:
    return np.geomspace(0.05, 0.95 * math.pi / bin_s, GRID_OMEGAS)


def _grid_family(wt: np.ndarray) -> np.ndarray:
    """Unit step responses at dimensionless times omega_n t (omega_n x samples) for every grid zeta:
    (zeta, omega_n, samples)."""
    return np.stack([unit_step_response(wt, float(z), 1.0) for z in GRID_ZETAS])


@functools.lru_cache(maxsize=128)
def _grid_responses(bin_s: float, quarter_bins: int, stride: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The grid's omega_n and responses at samples quarter_bins / 4 + k stride bins after the dead time."""
    wns = _grid_omegas(bin_s)
    tau = (quarter_bins / 4.0 + stride * np.arange(n)) * bin_s
    g = _grid_family(wns[:, None] * tau[None, :])
    g.setflags(write=False)
    return wns, g


GRID_ZETAS = np.geomspace(0.02, 5.0, 18)
"""Damping ratios of the starting grid."""
GRID_OMEGAS = 28
"""Natural frequencies of the starting grid, log-spaced over the fit's bounds."""
GRID_SAMPLES = 100
"""About this many samples (every k-th) score the grid's points."""


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
