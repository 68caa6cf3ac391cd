"""Competing flows: per-flow metrics, fairness, and arrivals/departures scored as transients.

A multi-flow run (metadata.json schema 3) has several flows, each its own
CCA, sharing one bottleneck; the link's flow attribution file
(`transient.flowlog`) gives every packet of the mm-link log its flow.  A
single-flow run is a run of one flow (flow 0, every packet), so lone flows
get the same per-flow metrics (smoothness, and the "alone" side of harm).

Bins.  One RTT wide, aligned with the first flow's start as the run's series
(`transient.series`).  Rates are departures (bytes incl. mahimahi's 4-byte
TUN header x 8 / bin width).  A flow is *active* in a bin when its measured
span [flow_start_s, flow_end_s] (metadata; else its first and last arrival of
>= 1000 bytes on the log) covers the whole bin; a bin that a start or an end
cuts belongs to no interval (its rates are partial).

Definitions (one each; units in the names):

* per flow (`FLOW_COLUMNS`): ``throughput_mbps`` = its departed bytes x 8 /
  (flow_end_s - flow_start_s), over its span; ``share`` = its departed bytes /
  all the link's departed bytes over its span (a packet of no flow counts
  here: it took capacity too); ``p95_queueing_delay_ms`` =
  ``sorted(q)[int(0.95 N)]`` (mahimahi's percentile) of q = delay - base over
  its departures, base = the run's smallest departure delay (as the series'
  queueing delay); ``drops`` = its dropped packets (``d`` lines);
  ``delivered_bytes`` = its departed bytes (the link's count, headers
  included); ``retransmits`` = iperf3's ``end.sum_sent.retransmits`` and
  ``iperf3_receiver_bytes`` = ``end.sum_received.bytes`` of its iperf3 JSON;
  ``smoothness_cv`` = the median over its intervals of the flow-step
  ``smoothness_cv`` (below); ``start_*`` = its own arrival's flow-step
  metrics (its start scored against its fair share).
* Jain's fairness index per bin over the flows active in it,
  J = (sum x_i)^2 / (n sum x_i^2) (Jain, Chiu & Hawe, DEC-TR-301, 1984; RFC
  5166, "Fairness and Convergence"): 1 when all get the same, 1/n when one
  gets all.  Table ``fairness`` (`FAIRNESS_COLUMNS`): one row per interval
  in which the set of active flows does not change (between consecutive flow
  starts and ends): its median J over the interval's bins and each active
  flow's share there, ``share_flow<k>`` = its departed bytes / all the link's
  departed bytes in the interval's bins.
* every change of the active set (an *event*: a flow's arrival or
  departure) is a step of each active flow's fair share f = offered
  capacity / n active (per bin: the link's ``#`` bytes, smoothed like the
  throughput, / n), and each active flow's response is scored like a
  capacity step (`transient.convergence`, `transient.secondorder`,
  `transient.delayside`) -> table ``flow_steps`` (`FLOW_STEP_COLUMNS`):
  ``from_mbps`` = its fair share before (mean offered capacity of the
  previous interval / n before; 0 for the flow that arrives), ``to_mbps``
  = after; convergence to within the band of f, Normalized Area against f,
  the second-order fit on its sending rate (arrivals, the trace's noise
  taken out as for a capacity step) for the arriving flow, and for every
  flow while at most two are active (fitting each of n incumbents at every
  event took 97 % of a 16-flow run's analysis: one scipy fit per event and
  flow), the delay side of the shared queue.
  ``smoothness_cv`` = std / mean (population std) of the flow's per-RTT
  throughput over the interval after its convergence point, over the whole
  interval when it did not converge (RFC 5166 discusses smoothness as the
  variation of a flow's rate over successive RTTs; the coefficient of
  variation per RTT bin is our measure of it).
* delta-fair convergence time (RFC 5166, "Fairness and Convergence", after
  Floyd, Handley & Padhye, "A Comparison of Equation-Based and AIMD
  Congestion Control", 2000): for two flows, the time from the second
  flow's start until both flows hold shares within (1 - delta)/2 and
  (1 + delta)/2 of the link bandwidth, i.e. each throughput in [(1 - delta)
  f, (1 + delta) f], f = half the offered capacity of the bin; here the
  start of the first RTT bin in which both are, from the second flow's
  start (``delta_fair_convergence_s`` of each flow's row of an arrival that
  leaves two flows active; NaN when never, or for other events).
* harm (Ware, Mukerjee, Seshan & Sherry, "Beyond Jain's Fairness Index:
  Setting the Bar for the Deployment of Congestion Control Algorithms",
  HotNets 2019): `harm` below.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ._lazy import lazy_module

pd = lazy_module("pandas")  # loaded when a table is first made (transient._lazy)

from .convergence import ConvergenceParams, step_convergences
from .delayside import delay_sides
from .errors import AnalysisError
from .metrics import mahimahi_percentile
from .secondorder import NAN_SECOND_ORDER, second_order_metrics
from .series import LogArrays, _smooth, bin_positions, binned_series, binned_sum, n_complete_bins

FLOW_COLUMNS = [
    "run_id", "run", "scenario", "flow", "cca", "cca_params", "label", "port", "start_s", "stop_s",
    "flow_start_s", "flow_end_s", "extra_delay_ms", "n_flows",
    "throughput_mbps", "share", "p95_queueing_delay_ms", "drops", "retransmits", "delivered_bytes",
    "iperf3_receiver_bytes", "smoothness_cv",
    "start_converged", "start_convergence_s", "start_normalized_area", "start_overshoot_pct", "start_dead_time_s",
]
"""Columns of the per-flow table (flows.csv; TRANSIENT-CONTRACT.md)."""

FAIRNESS_COLUMNS = ["run_id", "scenario", "interval", "from_s", "to_s", "active_flows", "n", "n_bins",
                    "jain_median"]
"""Columns of the fairness table (fairness.csv), followed by one ``share_flow<k>`` per flow index."""

FLOW_STEP_COLUMNS = [
    "run_id", "run", "scenario", "event", "event_kind", "event_flows", "flow", "cca", "cca_params", "label",
    "at_s", "end_s", "n_before", "n_after", "from_mbps", "to_mbps",
    "converged", "convergence_s", "convergence_point_s", "normalized_area", "area_mbit",
    "steady_throughput_mbps", "steady_share_ratio", "smoothness_cv",
    "rise_time_s", "peak_time_s", "overshoot_pct", "settling_time_s", "settling_time_5pct_s",
    "damping_ratio", "natural_frequency_rad_s", "fit_r2", "response_class", "dead_time_s",
    "peak_queueing_delay_ms", "standing_queue_packets", "standing_queue_ms", "drain_time_s", "drops",
    "delta_fair_convergence_s",
]
"""Columns of the per-(run, event, flow) table (flow_steps.csv; TRANSIENT-CONTRACT.md)."""

DEFAULT_FAIR_DELTA = 0.1
"""delta of the delta-fair convergence time (RFC 5166's example)."""


# ---------------------------------------------------------------- metadata


@dataclass(frozen=True)
class FlowSpec:
    """One flow of a run (metadata ``flows[k]``; times s, NaN when unknown).

    ``flow_start_s`` / ``flow_end_s``: measured on the link log's clock (the
    arrival of its first full-size packet / of its last packet); NaN ->
    computed from the attributed log.  ``port``: its TCP destination port
    (None for a single-flow run without a flow log: every packet is its).
    """

    index: int
    cca: str | None
    cca_params: str
    port: int | None
    start_s: float
    stop_s: float
    flow_start_s: float
    flow_end_s: float
    extra_delay_ms: float
    iperf3: str | None
    given_label: str | None = None

    @property
    def label(self) -> str | None:
        """The grouping key of reports: metadata's ``label``, else cca and params as the runs table's."""
        if self.given_label:
            return self.given_label
        return f"{self.cca} {self.cca_params}".strip() if self.cca else None


def params_text(p: Any) -> str:
    """``cca_params`` as ``k=v,...`` (sorted) from a dict, or the string as given."""
    if isinstance(p, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(p.items()))
    return str(p) if p else ""


def _num(v: Any, where: str, *, allow_none: bool = True) -> float:
    if v is None and allow_none:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise AnalysisError(f"{where}: expected a finite number{' or null' if allow_none else ''}, got {v!r}")
    return float(v)


def flows_from_metadata(meta: dict[str, Any], where: str) -> list[FlowSpec]:
    """The run's flows: metadata ``flows`` (schema 3), else one flow from the top-level keys.

    Args:
        meta: the parsed metadata.json; where: its path, for errors.

    Raises:
        AnalysisError: ``flows`` is not a non-empty list of objects, an index
            is not its position, a port is missing, not 1-65535 or repeated,
            or a field has the wrong type (the key is named, e.g.
            ``flows[1].port``).
    """
    raw = meta.get("flows")
    files = meta.get("files", {}) or {}
    if raw is None:
        fs = meta.get("flow_start_s")
        return [FlowSpec(0, meta.get("cca"), params_text(meta.get("cca_params")), None, 0.0, math.nan,
                         _num(fs, f"{where}: flow_start_s"), math.nan, 0.0, files.get("iperf3", "iperf3.json"))]
    if not isinstance(raw, list) or not raw:
        raise AnalysisError(f"{where}: 'flows' must be a non-empty list of flow objects, got {raw!r}")
    out, ports = [], {}
    for k, f in enumerate(raw):
        key = f"{where}: flows[{k}]"
        if not isinstance(f, dict):
            raise AnalysisError(f"{key}: expected an object, got {f!r}")
        if f.get("index", k) != k:
            raise AnalysisError(f"{key}.index is {f.get('index')!r}; flows must be listed in index order from 0")
        port = f.get("port")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise AnalysisError(f"{key}.port: expected the flow's TCP destination port 1-65535, got {port!r}")
        if port in ports:
            raise AnalysisError(f"{key}.port {port} is also flows[{ports[port]}].port: flows need distinct ports")
        ports[port] = k
        cca = f.get("cca")
        if cca is not None and not isinstance(cca, str):
            raise AnalysisError(f"{key}.cca: expected a string, got {cca!r}")
        iperf3 = f.get("iperf3")
        if iperf3 is not None and not isinstance(iperf3, str):
            raise AnalysisError(f"{key}.iperf3: expected a file name, got {iperf3!r}")
        label = f.get("label")
        if label is not None and not isinstance(label, str):
            raise AnalysisError(f"{key}.label: expected a string, got {label!r}")
        out.append(FlowSpec(
            k, cca, params_text(f.get("cca_params")), port,
            _num(f.get("start_s", 0.0), f"{key}.start_s"), _num(f.get("stop_s"), f"{key}.stop_s"),
            _num(f.get("flow_start_s"), f"{key}.flow_start_s"), _num(f.get("flow_end_s"), f"{key}.flow_end_s"),
            _num(f.get("extra_delay_ms", 0.0), f"{key}.extra_delay_ms"), iperf3, label))
    return out


def iperf3_figures(path: Path | None) -> tuple[float, float]:
    """(retransmits, receiver bytes) of an iperf3 client JSON; NaN for what it lacks or when absent."""
    if path is None:
        return math.nan, math.nan
    try:
        end = json.loads(path.read_text(encoding="utf-8"))["end"]
    except (OSError, TypeError, KeyError, ValueError):
        return math.nan, math.nan  # no iperf3 record: unknown, not zero

    def get(section: str, key: str) -> float:
        try:
            return float(end[section][key])
        except (TypeError, KeyError, ValueError):
            return math.nan

    return get("sum_sent", "retransmits"), get("sum_received", "bytes")


# ---------------------------------------------------------------- measures


def jain_index(x: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """Jain's fairness index J = (sum x)^2 / (n sum x^2) along ``axis`` (Jain, Chiu & Hawe 1984).

    NaN entries are not counted (n = the finite values); NaN when n = 0 or
    every value is 0.  In [1/n, 1] for non-negative x.
    """
    x = np.asarray(x, np.float64)
    ok = np.isfinite(x)
    xs = np.where(ok, x, 0.0)
    n = ok.sum(axis=axis)
    s1, s2 = xs.sum(axis=axis), (xs * xs).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        j = np.where((n > 0) & (s2 > 0), s1 * s1 / (n * s2), np.nan)
    return float(j) if np.ndim(j) == 0 else j


def delta_fair_convergence_time(x1: np.ndarray, x2: np.ndarray, capacity: np.ndarray, bin_s: float,
                                delta: float = DEFAULT_FAIR_DELTA) -> float:
    """RFC 5166's delta-fair convergence time of two flows, s (see the module docstring).

    Args:
        x1, x2: the two flows' throughput per bin (Mbit/s), bin 0 starting
            at the second flow's start.
        capacity: the link bandwidth per bin (Mbit/s); fair share = half.
        bin_s: bin width (s).
        delta: the tolerance, in (0, 1).

    Returns:
        start of the first bin in which both throughputs are within
        [(1 - delta) C/2, (1 + delta) C/2], s from bin 0; NaN if none.

    Raises:
        ValueError: delta outside (0, 1), or arrays of different lengths.
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    x1, x2, c = (np.asarray(a, np.float64) for a in (x1, x2, capacity))
    if not x1.shape == x2.shape == c.shape:
        raise ValueError(f"x1, x2 and capacity need the same length, got {x1.size}, {x2.size}, {c.size}")
    fair = c / 2.0
    lo, hi = (1 - delta) * fair, (1 + delta) * fair
    inside = (x1 >= lo) & (x1 <= hi) & (x2 >= lo) & (x2 <= hi) & (fair > 0)
    hit = np.flatnonzero(inside)
    return float(hit[0] * bin_s) if hit.size else math.nan


def smoothness_cv(x: np.ndarray) -> float:
    """Coefficient of variation std / mean (population std) of per-RTT rates; NaN when empty or mean 0."""
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x)]
    if x.size < 2 or not x.mean() > 0:
        return math.nan
    return round(float(x.std() / x.mean()), 9)  # a constant rate's std is float noise (~1e-16), not jitter


def harm(flows: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Throughput and delay harm of every flow of a multi-flow run (Ware et al., HotNets 2019).

    For a flow of CCA A (its ``label``) sharing the link with flows of other
    CCAs B: its "alone" figures are the medians over the runs in the same
    scenario with one flow, of A; then, per the paper's definition for a
    metric where more is better (throughput) and one where less is better
    (p95 queueing delay):

        throughput_harm = (alone - with) / alone,
        delay_harm      = (with - alone) / with,

    each clamped to [0, 1]: 0 when "with" is no worse than alone.  NaN when
    no alone run exists (or a figure is missing / zero).

    Args:
        flows: the per-flow table (`FLOW_COLUMNS`: run_id, scenario, flow,
            label, n_flows, throughput_mbps, p95_queueing_delay_ms).
        runs: unused but accepted (the runs table), so callers can pass
            both tables of an `Analysis`.

    Returns:
        one row per flow of a run with more than one flow: run_id, scenario,
        flow, label, with_labels (the others' labels, comma-separated),
        n_alone_runs, throughput_alone_mbps, throughput_with_mbps,
        throughput_harm, delay_alone_ms, delay_with_ms, delay_harm.

    Raises:
        ValueError: a needed column is missing from ``flows``.
    """
    need = ["run_id", "scenario", "flow", "label", "n_flows", "throughput_mbps", "p95_queueing_delay_ms"]
    missing = [c for c in need if c not in flows.columns]
    if missing:
        raise ValueError(f"flows table lacks column(s) {missing}; has {list(flows.columns)}")
    cols = ["run_id", "scenario", "flow", "label", "with_labels", "n_alone_runs", "throughput_alone_mbps",
            "throughput_with_mbps", "throughput_harm", "delay_alone_ms", "delay_with_ms", "delay_harm"]
    df = flows.assign(scenario=flows["scenario"].astype(str), label=flows["label"].astype(str))
    alone = (df[df["n_flows"] == 1].groupby(["scenario", "label"])
             .agg(n_alone_runs=("run_id", "nunique"), throughput_alone_mbps=("throughput_mbps", "median"),
                  delay_alone_ms=("p95_queueing_delay_ms", "median")).reset_index())
    multi = df[df["n_flows"] > 1]
    if multi.empty:
        return pd.DataFrame(columns=cols)
    others = multi.groupby("run_id")["label"].agg(list)
    multi = multi.assign(with_labels=[
        ",".join(lab for i, lab in enumerate(others[r]) if i != pos)
        for r, pos in zip(multi["run_id"], multi.groupby("run_id").cumcount())])
    out = multi.merge(alone, on=["scenario", "label"], how="left")
    out["n_alone_runs"] = out["n_alone_runs"].fillna(0).astype(int)
    out = out.rename(columns={"throughput_mbps": "throughput_with_mbps", "p95_queueing_delay_ms": "delay_with_ms"})
    with np.errstate(invalid="ignore", divide="ignore"):
        t_alone, t_with = out["throughput_alone_mbps"].to_numpy(float), out["throughput_with_mbps"].to_numpy(float)
        d_alone, d_with = out["delay_alone_ms"].to_numpy(float), out["delay_with_ms"].to_numpy(float)
        out["throughput_harm"] = np.where(t_alone > 0, np.clip((t_alone - t_with) / t_alone, 0, 1), np.nan)
        out["delay_harm"] = np.where(d_with > 0, np.clip((d_with - d_alone) / d_with, 0, 1),
                                     np.where(d_with == 0, 0.0, np.nan))
    out.loc[~np.isfinite(d_alone) | ~np.isfinite(d_with), "delay_harm"] = np.nan
    return out.reindex(columns=cols)


def coexistence_matrix(table: pd.DataFrame, metric: str, flow: int = 0) -> pd.DataFrame:
    """A CCA x CCA matrix of one metric over two-flow runs (for `transient.plots.plot_coexistence_heatmap`).

    Args:
        table: a per-flow table with ``run_id``, ``flow``, ``label`` and
            ``metric`` (the flows table, or `harm`'s output).
        metric: the column to show, e.g. ``share`` or ``throughput_harm``.
        flow: whose value a cell holds: 0 = the first flow's, 1 = the second's.

    Returns:
        rows = the first flow's label, columns = the second flow's, values =
        the median of ``metric`` of flow ``flow`` over the runs with exactly
        those two flows (NaN values dropped); runs with other than two flows
        are left out.

    Raises:
        ValueError: a needed column is missing, or flow is not 0 or 1.
    """
    missing = [c for c in ("run_id", "flow", "label", metric) if c not in table.columns]
    if missing:
        raise ValueError(f"table lacks column(s) {missing}; has {list(table.columns)}")
    if flow not in (0, 1):
        raise ValueError(f"flow must be 0 or 1, got {flow!r}")
    sizes = table.groupby("run_id")["flow"].transform("nunique")
    pairs = table[sizes == 2]
    if pairs.empty:
        return pd.DataFrame()
    wide = pairs.pivot_table(index="run_id", columns="flow", values="label", aggfunc="first")
    value = pairs[pairs["flow"] == flow].set_index("run_id")[metric]
    frame = pd.DataFrame({"first": wide[0], "second": wide[1], "value": pd.to_numeric(value, errors="coerce")})
    return frame.pivot_table(index="first", columns="second", values="value", aggfunc="median").rename_axis(
        index="first flow's CCA", columns="second flow's CCA")


COEXISTENCE_METRICS = (
    ("first_share", "first flow's share while both run", 0.0, 1.0),
    ("jain", "Jain's fairness index while both run", 0.5, 1.0),
    ("throughput_harm", "throughput harm the first flow does to the second", 0.0, 1.0),
    ("delay_harm", "delay harm the first flow does to the second", 0.0, 1.0),
)
"""(column, meaning, colour scale low, high) of each coexistence matrix (`coexistence_pairs`)."""


def coexistence_pairs(flows: pd.DataFrame, fairness: pd.DataFrame) -> pd.DataFrame:
    """One row per two-flow run, for the coexistence matrix of ``ccplab coexist``.

    Columns: run_id, scenario, ``first`` and ``second`` (the flows' labels,
    flow 0 and flow 1), and `COEXISTENCE_METRICS`: ``first_share`` and ``jain``
    over the longest interval in which both flows are active (the fairness
    table's ``share_flow0`` and ``jain_median`` there), ``throughput_harm`` and
    ``delay_harm`` done to the second flow, whose whole life is shared, by the
    first (`harm`: its figures against its CCA alone in the same scenario).
    NaN where a figure is unknown.

    Args:
        flows, fairness: the tables of `transient.analyze_all` (`FLOW_COLUMNS`,
            `FAIRNESS_COLUMNS` + share_flow<k>).
    """
    cols = ["run_id", "scenario", "first", "second", *(m for m, *_ in COEXISTENCE_METRICS)]
    two = flows[flows["n_flows"] == 2] if len(flows) else flows
    if two.empty or fairness is None or fairness.empty or "share_flow0" not in fairness.columns:
        return pd.DataFrame(columns=cols)
    labels = two.pivot_table(index="run_id", columns="flow", values="label", aggfunc="first")
    both = fairness[fairness["active_flows"].astype(str) == "0,1"]
    longest = (both.assign(span=both["to_s"] - both["from_s"]).sort_values("span")
               .groupby("run_id").tail(1).set_index("run_id"))
    hurt = harm(flows)
    hurt = hurt[hurt["flow"] == 1].set_index("run_id")
    out = pd.DataFrame({
        "scenario": two.groupby("run_id")["scenario"].first().reindex(labels.index),
        "first": labels[0], "second": labels[1],
        "first_share": longest["share_flow0"].reindex(labels.index),
        "jain": longest["jain_median"].reindex(labels.index),
        "throughput_harm": hurt["throughput_harm"].reindex(labels.index),
        "delay_harm": hurt["delay_harm"].reindex(labels.index),
    })
    return out.rename_axis("run_id").reset_index().reindex(columns=cols)


def coexistence_summary(pairs: pd.DataFrame, **summarize_kw: Any) -> pd.DataFrame:
    """Per (scenario, first, second): ``runs`` and each of `COEXISTENCE_METRICS` as its median with a
    bootstrap 95% CI (`transient.stats.summarize`; columns ``<m>``, ``<m>_ci_low``, ``<m>_ci_high``)."""
    from .stats import summarize

    rows = []
    for (scenario, first, second), g in pairs.groupby(["scenario", "first", "second"], sort=True):
        row: dict[str, Any] = {"scenario": scenario, "first": first, "second": second, "runs": len(g)}
        for metric, *_ in COEXISTENCE_METRICS:
            est = summarize(g[metric], **summarize_kw)
            row.update({metric: est.median, f"{metric}_ci_low": est.ci_low, f"{metric}_ci_high": est.ci_high})
        rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- one run


@dataclass
class FlowTables:
    """A run's per-flow analysis: the three tables' rows and the per-flow series.

    ``series``: index ``t_s`` (the run's bins), columns ``flow<k>`` (departure
    throughput of flow k, Mbit/s), ``capacity_mbps``, ``n_active``, ``jain``
    (NaN where no flow is active), ``attrs["bin_s"]`` and
    ``attrs["events"]`` [(t_s, kind, flows)].
    """

    flows: pd.DataFrame
    fairness: pd.DataFrame
    flow_steps: pd.DataFrame
    series: pd.DataFrame


def _spans(arrays: LogArrays, flow: np.ndarray | None, specs: Sequence[FlowSpec]) -> list[tuple[float, float]]:
    """Each flow's [start, end) on the log clock, s: metadata's measured times, else its data arrivals.

    ``flow`` is unused (the flows are the ones ``arrays`` was built with); kept for the callers' shape."""
    spans = []
    for s in specs:
        data = arrays.flow_data_ms.get(s.index)
        start = s.flow_start_s if math.isfinite(s.flow_start_s) else (data[0] / 1000.0 if data else math.nan)
        end = s.flow_end_s + 0.001 if math.isfinite(s.flow_end_s) else ((data[1] + 1) / 1000.0 if data else math.nan)
        spans.append((float(start), float(end)))
    return spans


def _per_flow_bins(arrays: LogArrays, n_flows: int, origin_s: float, n: int, bin_s: float, kind: str,
                   with_no_flow: bool = False) -> np.ndarray:
    """(n bins x n_flows) Mbit/s of one event kind's bytes per flow, bins from ``origin_s``
    (with_no_flow: n_flows + 1 columns, column 0 the packets of no flow)."""
    per_ms = arrays.flow_ms_bytes(kind)
    pos = bin_positions(arrays, origin_s, bin_s, n)
    rows = range(0, n_flows + 1) if with_no_flow else range(1, n_flows + 1)
    cols = [binned_sum(per_ms[r], pos, n, arrays) if r < len(per_ms) else np.zeros(n) for r in rows]
    out = np.stack(cols, axis=1) if cols else np.zeros((n, 0))
    return out * 8.0 / (bin_s * 1e6)


def _intervals(spans: list[tuple[float, float]], run_start: float, run_end: float) -> list[tuple[float, float, tuple]]:
    """(from, to, active flows) of every span between consecutive flow starts / ends with a flow active."""
    cuts = sorted({run_start, run_end, *(t for sp in spans for t in sp if math.isfinite(t) and run_start < t < run_end)})
    out = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        active = tuple(k for k, (s, e) in enumerate(spans) if s <= a + 1e-9 and e >= b - 1e-9)
        if active and b - a > 1e-9:
            out.append((a, b, active))
    return out


def analyze_flows(arrays: LogArrays, flow: np.ndarray, specs: Sequence[FlowSpec], *, run_id: str,
                  info: dict[str, Any], bin_s: float, origin_s: float, run_end: float,
                  params: ConvergenceParams = ConvergenceParams(), smooth_bins: int = 1,
                  fair_delta: float = DEFAULT_FAIR_DELTA, run_dir: Path | None = None,
                  first_input_s: float | None = None) -> FlowTables:
    """The per-flow tables of one run (see the module docstring for every definition).

    Args:
        arrays: the log (`LogArrays`); flow: each event's flow index
            (`transient.flowlog.attribute_flows`; -1 = none).
        specs: the run's flows (`flows_from_metadata`).
        run_id, info: the run's id and descriptive fields (run, scenario).
        bin_s: bin width = RTT (s); origin_s: start of the run's bins (s).
        run_end: end of the analysed span (s on the log clock).
        params, smooth_bins: the convergence detector and smoothing, as for
            capacity steps.
        fair_delta: delta of the delta-fair convergence time.
        run_dir: where the flows' iperf3 JSON files are (None: no iperf3).
        first_input_s: the input of the first flow's start (the capacity
            step in force then, as for the steps table's ``start``; default
            its first full-size packet): the time origin of its second-order
            fit.  A later flow's own start is timed from its scheduled start,
            first flow's start + ``start_s``; a flow answering another's
            arrival or departure from that event.
    """
    nf = len(specs)
    spans = _spans(arrays, flow, specs)
    n = n_complete_bins(origin_s, run_end, bin_s)
    t0 = origin_s + np.arange(n) * bin_s
    # column 0: packets of no flow (unknown port), so a bin's total is every departure of the link
    dep_all = _per_flow_bins(arrays, nf, origin_s, n, bin_s, "departure", with_no_flow=True)
    dep = dep_all[:, 1:]
    link = binned_series(arrays, origin_s, run_end, bin_s, smooth_bins)
    active = np.stack([(t0 >= s - 1e-9) & (t0 + bin_s <= e + 1e-9) for s, e in spans], axis=1) if n else \
        np.zeros((0, nf), bool)
    jain = jain_index(np.where(active, dep, np.nan), axis=1) if n else np.zeros(0)
    intervals = _intervals(spans, origin_s, run_end)
    ident = {"run_id": run_id, "run": info.get("run"), "scenario": info.get("scenario")}
    inputs = _start_inputs(specs, spans, first_input_s)

    fair_rows, step_rows = [], []
    prev: tuple[float, float, tuple] | None = None
    link_series: dict[tuple[float, float], pd.DataFrame] = {}  # an interval is the next event's "before"

    def link_of(a: float, b: float) -> pd.DataFrame:
        if (a, b) not in link_series:
            link_series[a, b] = binned_series(arrays, a, b, bin_s, smooth_bins)
        return link_series[a, b]

    for i, (a, b, act) in enumerate(intervals):
        inside = (t0 >= a - 1e-9) & (t0 + bin_s <= b + 1e-9)
        x = dep[inside][:, list(act)]
        total = dep_all[inside].sum()
        row = {**ident, "interval": i, "from_s": a, "to_s": b, "active_flows": ",".join(map(str, act)),
               "n": len(act), "n_bins": int(inside.sum()),
               "jain_median": float(np.nanmedian(jain[inside])) if inside.any() and np.isfinite(jain[inside]).any()
               else math.nan}
        for j, k in enumerate(act):
            row[f"share_flow{k}"] = float(x[:, j].sum() / total) if total > 0 else math.nan
        fair_rows.append(row)
        step_rows += _event_rows(arrays, flow, specs, ident, i, prev, (a, b, act), bin_s, params, smooth_bins,
                                 fair_delta, inputs, link_of)
        prev = (a, b, act)

    steps_df = pd.DataFrame(step_rows, columns=FLOW_STEP_COLUMNS)
    flows_df = _flow_rows(arrays, flow, specs, spans, ident, steps_df, run_dir)
    fairness = pd.DataFrame(fair_rows)
    fairness = fairness.reindex(columns=FAIRNESS_COLUMNS + sorted(
        [c for c in fairness.columns if c.startswith("share_flow")], key=lambda c: int(c[10:])))
    series = pd.DataFrame({f"flow{k}": dep[:, k] for k in range(nf)}, index=pd.Index(t0, name="t_s"))
    series["capacity_mbps"] = link["capacity_mbps"].to_numpy()
    series["n_active"] = active.sum(axis=1)
    series["jain"] = jain
    series.attrs["bin_s"] = bin_s
    series.attrs["events"] = [(a, "change", act) for a, _, act in intervals]
    return FlowTables(flows_df, fairness, steps_df, series)


def _start_inputs(specs: Sequence[FlowSpec], spans: list[tuple[float, float]],
                  first_input_s: float | None) -> list[float]:
    """When each flow's own start was asked for, s on the log clock (never after its first full-size packet)."""
    first = spans[0][0] if spans else math.nan
    base = first_input_s if first_input_s is not None and math.isfinite(first_input_s) else first
    out = []
    for s, (start, _) in zip(specs, spans):
        want = base if s.index == 0 else first + s.start_s
        out.append(min(want, start) if math.isfinite(want) else start)
    return out


def _event_rows(arrays, flow, specs, ident, i, prev, cur, bin_s, params, smooth_bins, fair_delta,
                inputs, link_of) -> list[dict]:
    """flow_steps rows of the event that opens interval ``cur`` (one per flow active in it);
    ``link_of(from_s, to_s)``: the link's `binned_series` of a span."""
    a, b, act = cur
    before = set(prev[2]) if prev is not None and abs(prev[1] - a) < 1e-9 else set()
    arrived, left = sorted(set(act) - before), sorted(before - set(act))
    kind = "+".join(k for k, v in (("arrival", arrived), ("departure", left)) if v) or "change"
    n = n_complete_bins(a, b, bin_s)
    if n == 0:
        return []
    link = link_of(a, b)
    cap_after = float(link["reference_mbps"].mean())
    if before:
        prev_link = link_of(prev[0], prev[1])
        cap_before = float(prev_link["reference_mbps"].mean()) if len(prev_link) else cap_after
    dep = _per_flow_bins(arrays, len(specs), a, n, bin_s, "departure")
    arr = _per_flow_bins(arrays, len(specs), a, n, bin_s, "arrival")
    r = link["reference_mbps"].to_numpy() / len(act)
    to = cap_after / len(act)
    dfc = math.nan
    if arrived and len(act) == 2:
        dfc = delta_fair_convergence_time(dep[:, act[0]], dep[:, act[1]], link["reference_mbps"].to_numpy(), bin_s,
                                          fair_delta)
    froms = [cap_before / len(before) if k in before else 0.0 for k in act]
    xs = np.stack([_smooth(dep[:, k], smooth_bins) for k in act], axis=1)
    convs = step_convergences(xs, r, bin_s, [to - frm for frm in froms], params)
    points = [a + c.index * bin_s if c.converged else math.nan for c in convs]
    sides = delay_sides(arrays, link, a, b, points)
    rows = []
    for j, k in enumerate(act):
        frm, x, conv, point = froms[j], xs[:, j], convs[j], points[j]
        steady = x[conv.index:] if conv.converged else x
        steady_t = float(steady.mean()) if conv.converged and steady.size else math.nan
        ref = float(r[conv.index:].mean()) if conv.converged and steady.size else math.nan
        y = arr[:, k] - (r - to)  # the trace's noise taken out, as for a capacity step
        lead = max(a - inputs[k], 0.0) if k in arrived and math.isfinite(inputs[k]) else 0.0
        fitted = (k in arrived or len(act) <= 2) and math.isfinite(to) and to != frm
        so = second_order_metrics(y, bin_s, frm, to, lead_s=lead) if fitted else NAN_SECOND_ORDER
        ds = sides[j]
        s = specs[k]
        rows.append({
            **ident, "event": i, "event_kind": kind, "event_flows": ",".join(map(str, arrived + left)), "flow": k,
            "cca": s.cca, "cca_params": s.cca_params, "label": s.label, "at_s": a, "end_s": b,
            "n_before": len(before), "n_after": len(act), "from_mbps": frm, "to_mbps": to,
            "converged": conv.converged, "convergence_s": round(point - a, 9) if conv.converged else math.nan,
            "convergence_point_s": round(point, 9) if conv.converged else math.nan,
            "normalized_area": conv.normalized_area, "area_mbit": conv.area_mbit,
            "steady_throughput_mbps": steady_t, "steady_share_ratio": steady_t / ref if ref > 0 else math.nan,
            "smoothness_cv": smoothness_cv(steady),
            **so.as_dict(), **ds.as_dict(), "delta_fair_convergence_s": dfc,
        })
    return rows


def _flow_rows(arrays, flow, specs, spans, ident, steps_df, run_dir) -> pd.DataFrame:
    dep_ms = arrays.flow_ms_bytes("departure")
    all_ms = arrays.ms_sum("departure", "bytes")  # every departure of the link, a packet of no flow too
    # each flow's departures' queueing delays, and its rows of the steps table, found once
    # (the delays, not delay - base: the percentile of (delay - base) is the percentile's delay - base)
    delays = np.asarray(arrays.dep_delay_ms)
    if arrays.dep_flow.any():
        order = np.argsort(arrays.dep_flow, kind="stable")
        cuts = np.searchsorted(arrays.dep_flow[order], np.arange(len(specs) + 1))  # flow k: cuts[k]:cuts[k + 1]
        delays = delays[order]
        del order
    else:  # every departure is flow 0's: already in flow order
        cuts = np.array([0] + [delays.size] * len(specs))
    smoothness = steps_df.groupby("flow")["smoothness_cv"].median().to_dict() if len(steps_df) else {}
    own_arrival = [str(f) in ev.split(",") and "arrival" in kind
                   for f, ev, kind in zip(steps_df["flow"], steps_df["event_flows"], steps_df["event_kind"])]
    own_of = steps_df[np.array(own_arrival, bool)].drop_duplicates("flow").set_index("flow").to_dict("index") \
        if len(steps_df) else {}
    rows = []
    for s, (start, end) in zip(specs, spans):
        mine_ms = dep_ms[s.index + 1] if s.index + 1 < len(dep_ms) else np.zeros(arrays.n_ms)
        win = arrays.ms_window(start * 1000.0, end * 1000.0) if math.isfinite(start) and math.isfinite(end) \
            else slice(0, 0)
        bytes_span = float(mine_ms[win].sum())
        all_span = float(all_ms[win].sum())
        dur = end - start
        q = delays[cuts[s.index]:cuts[s.index + 1]]
        drops = arrays.flow_drops.get(s.index, 0)
        retx, recv = iperf3_figures(run_dir / s.iperf3 if run_dir is not None and s.iperf3 else None)
        own = own_of.get(s.index)
        cv = smoothness.get(s.index, math.nan)
        rows.append({
            **ident, "flow": s.index, "cca": s.cca, "cca_params": s.cca_params, "label": s.label, "port": s.port,
            "start_s": s.start_s, "stop_s": s.stop_s, "flow_start_s": start, "flow_end_s": round(end - 0.001, 9),
            "extra_delay_ms": s.extra_delay_ms, "n_flows": len(specs),
            "throughput_mbps": bytes_span * 8 / dur / 1e6 if dur > 0 else math.nan,
            "share": bytes_span / all_span if all_span > 0 else math.nan,
            "p95_queueing_delay_ms": mahimahi_percentile(q) - arrays.base_delay_ms, "drops": drops, "retransmits": retx,
            "delivered_bytes": int(mine_ms.sum()), "iperf3_receiver_bytes": recv,
            "smoothness_cv": float(cv) if cv is not None and pd.notna(cv) else math.nan,
            "start_converged": bool(own["converged"]) if own is not None else pd.NA,
            "start_convergence_s": own["convergence_s"] if own is not None else math.nan,
            "start_normalized_area": own["normalized_area"] if own is not None else math.nan,
            "start_overshoot_pct": own["overshoot_pct"] if own is not None else math.nan,
            "start_dead_time_s": own["dead_time_s"] if own is not None else math.nan,
        })
    return pd.DataFrame(rows, columns=FLOW_COLUMNS)
