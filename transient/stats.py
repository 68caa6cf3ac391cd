"""Statistics across runs: median, IQR and a bootstrap 95% CI per label x scenario (x step).

A *label* is a CCA with its parameters (the ``label`` column of the
analysis, e.g. ``"ccp:cubic beta=0.8"``).  For every metric the summary
gives the number of runs, how many of them have a value, the median, the
interquartile range (25th and 75th percentile, linear interpolation, numpy's
default) and a bootstrap confidence interval of the median.

Bootstrap: `scipy.stats.bootstrap` on the median, 9999 resamples, seeded
(``seed``, default 0: the same data always give the same interval), the
*percentile* method.  Not BCa: BCa's acceleration comes from the jackknife,
which is inconsistent for the median, and with the few runs of an
experiment (3-20) the median's bootstrap distribution is so discrete that
BCa often fails outright (scipy returns NaN and a DegenerateDataWarning).
With fewer than 2 values there is no interval (NaN); with identical values
the interval is that value.

Missing values are never averaged in: a NaN is dropped and counted (``n``
minus ``n_valid``).  Convergence time uses only the runs that converged
(``converged`` true and a finite ``convergence_s``); ``n_not_converged``
says how many did not.

Rounding (`format_estimate`): a figure is printed only to the decimal place
its spread can support.  The width of the interval (high - low) fixes the
last printed digit: its first significant digit, or its second when that
first digit is 1 (a width of 0.14 printed as 0.1 would be off by 30%).  So
median 11.63 with CI [11.55, 11.71] prints ``11.6 [11.6, 11.7]``, never
``11.6 +- 0.00888``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

CONFIDENCE = 0.95
"""Confidence level of the bootstrap interval of the median."""

N_RESAMPLES = 9999
"""Bootstrap resamples per interval (scipy's default)."""

CI_METHOD = "percentile"
"""scipy.stats.bootstrap method; see the module docstring for why not BCa."""

STEP_METRICS: list[tuple[str, str]] = [
    ("convergence_s", "convergence time (s)"),
    ("normalized_area", "Normalized Area (s)"),
    ("area_mbit", "gap area (Mbit)"),
    ("steady_throughput_mbps", "steady throughput (Mbit/s)"),
    ("steady_utilization", "steady utilization"),
    ("rise_time_s", "rise time 10-90% (s)"),
    ("peak_time_s", "peak time (s)"),
    ("overshoot_pct", "overshoot (%)"),
    ("settling_time_s", "settling time 2% (s)"),
    ("settling_time_5pct_s", "settling time 5% (s)"),
    ("damping_ratio", "damping ratio"),
    ("natural_frequency_rad_s", "natural frequency (rad/s)"),
    ("fit_r2", "second-order fit R²"),
    ("dead_time_s", "dead time (s)"),
    ("peak_queueing_delay_ms", "peak queueing delay (ms)"),
    ("standing_queue_packets", "standing queue (packets)"),
    ("standing_queue_ms", "standing queue (ms)"),
    ("drain_time_s", "queue drain time (s)"),
    ("drops", "drops (packets)"),
]
"""(column, label with unit) of the per-step metrics summarised (contract names)."""

NA_LABELS = {
    "ccplab": "Normalized Area (s)",           # gap area / |delta B|: seconds of the whole step lost
    "tpcca": "Normalized Area (TPCCA, no unit)",  # (12 / B) x area / (t_s - t_0): Mbit/s over Mbit/s
}
"""Axis / table label of normalized_area per analysis method (the two methods' NA differ in unit)."""


def step_metric_labels(methods: Iterable[str] = ("ccplab",)) -> list[tuple[str, str]]:
    """`STEP_METRICS` with the Normalized Area label of the methods used (both named if mixed)."""
    methods = sorted({str(m) for m in methods} & set(NA_LABELS)) or ["ccplab"]
    na = NA_LABELS[methods[0]] if len(methods) == 1 else \
        "Normalized Area (ccplab: s; TPCCA: no unit)"
    return [(c, na if c == "normalized_area" else label) for c, label in STEP_METRICS]


RUN_METRICS: list[tuple[str, str]] = [
    ("throughput_mbps", "throughput (Mbit/s)"),
    ("utilization", "utilization"),
    ("p95_queueing_delay_ms", "p95 queueing delay (ms)"),
    ("p95_signal_delay_ms", "p95 signal delay (ms)"),
    ("power_score", "power score (Mbit/s / s)"),
    ("retransmits", "retransmits"),
]
"""(column, label with unit) of the per-run metrics summarised (contract names)."""

FLOW_METRICS: list[tuple[str, str]] = [
    ("throughput_mbps", "throughput over its span (Mbit/s)"),
    ("share", "share of the departures over its span"),
    ("p95_queueing_delay_ms", "p95 queueing delay (ms)"),
    ("drops", "drops (packets)"),
    ("retransmits", "retransmits"),
    ("smoothness_cv", "smoothness (CV of per-RTT throughput)"),
    ("start_convergence_s", "own start: convergence to its fair share (s)"),
    ("start_normalized_area", "own start: Normalized Area (s)"),
    ("start_dead_time_s", "own start: dead time (s)"),
]
"""(column, label with unit) of the per-flow metrics summarised (`transient.flows.FLOW_COLUMNS` names)."""

CONVERGENCE_METRIC = "convergence_s"
"""The metric taken from converged runs only."""

SUMMARY_COLUMNS = ["n", "n_valid", "median", "q1", "q3", "ci_low", "ci_high"]
"""Columns every summary row has (besides its keys, ``metric`` and the convergence counts)."""


@dataclass(frozen=True)
class Estimate:
    """Summary of one sample.

    n: values given (NaN included); n_valid: finite values used; median, q1,
    q3: median and quartiles of the finite values; ci_low, ci_high: bootstrap
    CI of the median (NaN with fewer than 2 values).  All NaN when n_valid
    is 0.
    """

    n: int
    n_valid: int
    median: float
    q1: float
    q3: float
    ci_low: float
    ci_high: float

    def as_dict(self) -> dict:
        return {c: getattr(self, c) for c in SUMMARY_COLUMNS}


def summarize(
    values: Iterable[float] | np.ndarray | pd.Series,
    *,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> Estimate:
    """Median, quartiles and a seeded percentile-bootstrap CI of the median.

    Args:
        values: numbers (NaN / None are dropped and counted, never used).
        confidence: level of the interval, in (0, 1).
        n_resamples: bootstrap resamples.
        seed: seed of the resampling (numpy default_rng).

    Raises:
        ValueError: confidence outside (0, 1) or a value that is not a number.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    raw = pd.to_numeric(pd.Series(list(values), dtype=object), errors="raise").astype(float).to_numpy()
    x = raw[np.isfinite(raw)]
    n, k = len(raw), len(x)
    if k == 0:
        return Estimate(n, 0, *([math.nan] * 5))
    median = float(np.median(x))
    q1, q3 = (float(v) for v in np.percentile(x, [25, 75]))
    if k < 2:
        lo = hi = math.nan
    elif np.all(x == x[0]):  # every resample has the same median; scipy would warn
        lo = hi = float(x[0])
    else:
        res = sps.bootstrap((x,), np.median, n_resamples=n_resamples, confidence_level=confidence,
                            method=CI_METHOD, vectorized=True, axis=-1, rng=np.random.default_rng(seed))
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return Estimate(n, k, median, q1, q3, lo, hi)


def _converged(df: pd.DataFrame) -> pd.Series:
    """converged as bool (missing = not converged)."""
    if "converged" not in df.columns:
        return pd.Series(False, index=df.index)
    return df["converged"].map(lambda v: bool(v) if v is not None and v == v else False).astype(bool)


def _summary_rows(groups, metrics: Sequence[str], keys: list[str], with_convergence: bool, **kw) -> list[dict]:
    rows = []
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        conv = _converged(g)
        base = dict(zip(keys, key))
        if with_convergence:
            base["n_converged"] = int(conv.sum())
            base["n_not_converged"] = int(len(g) - conv.sum())
        for metric in metrics:
            if metric not in g.columns:
                continue
            col = g[metric]
            if metric == CONVERGENCE_METRIC:
                # A non-converged run has no convergence time: drop it (and count it), never use a NaN or a cap.
                col = col.where(conv)
            est = summarize(col, **kw)
            rows.append({**base, "metric": metric, **est.as_dict()})
    return rows


def _label_key(df: pd.DataFrame) -> pd.Series:
    if "label" in df.columns:
        return df["label"].astype(str)
    return df["cca"].astype(str)


def step_summary(steps: pd.DataFrame, metrics: Sequence[str] | None = None, **kw) -> pd.DataFrame:
    """Per label x scenario x step: `summarize` of each step metric.

    Args:
        steps: the analysis' steps frame (contract columns: label, scenario,
            step, kind, from_mbps, to_mbps, converged, and the metrics).
        metrics: columns to summarise (default `STEP_METRICS`; absent ones are
            skipped).
        **kw: passed to `summarize` (confidence, n_resamples, seed).

    Returns:
        Long frame, one row per (label, scenario, step, metric): label,
        scenario, step, kind, from_mbps, to_mbps, n_converged,
        n_not_converged, metric, n, n_valid, median, q1, q3, ci_low, ci_high.

    Raises:
        ValueError: a key column (scenario, step, label or cca) is missing.
    """
    metrics = [m for m, _ in STEP_METRICS] if metrics is None else list(metrics)
    _require(steps, ["scenario", "step"], "steps")
    keys = ["label", "scenario", "step"]
    cols = keys + ["kind", "from_mbps", "to_mbps", "n_converged", "n_not_converged", "metric", *SUMMARY_COLUMNS]
    if steps.empty:
        return pd.DataFrame(columns=cols)
    df = steps.assign(label=_label_key(steps), scenario=steps["scenario"].astype(str))
    rows = _summary_rows(df.groupby(keys, sort=True), metrics, keys, True, **kw)
    out = pd.DataFrame(rows)
    # The step's description (kind, nominal rates) is the same in every run of a scenario: take the first.
    desc = df.groupby(["scenario", "step"])[[c for c in ("kind", "from_mbps", "to_mbps") if c in df]].first()
    out = out.join(desc, on=["scenario", "step"])
    return out.reindex(columns=cols)


def run_summary(runs: pd.DataFrame, metrics: Sequence[str] | None = None, **kw) -> pd.DataFrame:
    """Per label x scenario: `summarize` of each run metric.

    Returns a long frame: label, scenario, metric, n, n_valid, median, q1,
    q3, ci_low, ci_high.  Raises ValueError when ``scenario`` (or both
    ``label`` and ``cca``) is missing.
    """
    metrics = [m for m, _ in RUN_METRICS] if metrics is None else list(metrics)
    _require(runs, ["scenario"], "runs")
    keys = ["label", "scenario"]
    cols = keys + ["metric", *SUMMARY_COLUMNS]
    if runs.empty:
        return pd.DataFrame(columns=cols)
    df = runs.assign(label=_label_key(runs), scenario=runs["scenario"].astype(str))
    return pd.DataFrame(_summary_rows(df.groupby(keys, sort=True), metrics, keys, False, **kw)).reindex(columns=cols)


def _require(df: pd.DataFrame, cols: list[str], name: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if "label" not in df.columns and "cca" not in df.columns:
        missing.append("label (or cca)")
    if missing:
        raise ValueError(f"{name} frame lacks column(s) {missing}; has {list(df.columns)}")


# ------------------------------------------------------------------ rounding

SIGNIFICANT_WITHOUT_SPREAD = 3
"""Significant digits of a value printed without any interval."""


def _decimals(spread: float) -> int:
    """Decimal places that show ``spread`` (> 0) to 1 significant digit, 2 when its first digit is 1."""
    exp = math.floor(math.log10(spread))
    lead = int(round(spread / 10.0 ** exp, 6))  # guard 9.99999 -> 10 float noise
    if lead >= 10:
        exp, lead = exp + 1, 1
    return -exp + (1 if lead == 1 else 0)


def _fixed(v: float, decimals: int) -> str:
    """``v`` rounded to ``decimals`` places (negative: to tens, hundreds, ...); never ``-0``."""
    s = f"{v:.{decimals}f}" if decimals >= 0 else f"{round(v, decimals):.0f}"
    return s.lstrip("-") if float(s) == 0 else s


def decimals_for(value: float, low: float, high: float) -> int:
    """Decimal places (negative: tens, hundreds ...) to print ``value`` with interval [low, high].

    The rounding rule of the module docstring: the interval's width fixes
    the last digit; a zero or missing width falls back to the value's own 3
    significant digits (never cutting the integer part).
    """
    have = all(v is not None and math.isfinite(v) for v in (low, high))
    spread = (high - low) if have else 0.0
    scale = max(abs(value), abs(low), abs(high), 1e-300) if have else abs(value)
    if spread > 1e-9 * scale:
        return _decimals(spread)
    return _sig_decimals(value)


def format_estimate(value: float, low: float = math.nan, high: float = math.nan) -> str:
    """A value with its interval, rounded to what the interval allows: ``"11.6 [11.5, 11.7]"``.

    The width high - low fixes the last digit printed (`decimals_for`, see
    the module docstring).  Without an interval (NaN bounds) only the value
    is printed, with 3 significant digits; with a zero-width one (identical
    runs) the value's 3 significant digits fix the place.  NaN value ->
    ``"n/a"``.

    Args:
        value: the estimate (e.g. the median).
        low, high: the interval (e.g. the bootstrap CI).

    Raises:
        ValueError: low > high.
    """
    if value is None or not math.isfinite(value):
        return "n/a"
    if not all(v is not None and math.isfinite(v) for v in (low, high)):
        return _sig(value)
    if low > high:
        raise ValueError(f"interval [{low}, {high}] has low > high")
    d = decimals_for(value, low, high)
    return f"{_fixed(value, d)} [{_fixed(low, d)}, {_fixed(high, d)}]"


def format_interval(low: float, high: float, like: tuple[float, float, float] | None = None) -> str:
    """``"[low, high]"`` rounded like ``format_estimate(*like)`` (default: like its own width).

    Used for a second interval of the same quantity (the IQR beside the CI),
    so both are printed to the same digits.  NaN bounds -> ``"n/a"``.
    """
    if not all(v is not None and math.isfinite(v) for v in (low, high)):
        return "n/a"
    d = decimals_for(*like) if like is not None and like[0] is not None and math.isfinite(like[0]) \
        else decimals_for((low + high) / 2, low, high)
    return f"[{_fixed(low, d)}, {_fixed(high, d)}]"


def _sig_decimals(v: float) -> int:
    if v == 0:
        return 0
    return max(SIGNIFICANT_WITHOUT_SPREAD - 1 - math.floor(math.log10(abs(v))), 0)


def _sig(v: float) -> str:
    """``v`` with `SIGNIFICANT_WITHOUT_SPREAD` significant digits (integer part never cut; exponent if tiny)."""
    if v != 0 and abs(v) < 1e-4:
        return f"{v:.{SIGNIFICANT_WITHOUT_SPREAD - 1}e}"
    return _fixed(v, _sig_decimals(v))
