"""A synthetic `transient.Analysis` of the contract's shape (TRANSIENT-CONTRACT), for report and plot tests.

No log is parsed: each label is a second-order system with a known damping
ratio and natural frequency, its throughput follows the capacity steps of
the scenario, and a step down builds a queue that drains.  The step table
carries the metrics that system implies (so plots and tables have sensible,
known numbers); one run of ``ccp:reno`` never converges after the first
step (converged False, convergence NaN), to exercise how the report counts
it.
"""

from __future__ import annotations

import json
import math
from collections import deque
from pathlib import Path

import numpy as np
import pandas as pd

from transient import Analysis

BIN_S = 0.05
"""Series bin width (1 RTT at 25 ms one way), s."""

LABELS = {
    # label: (cca, params, damping ratio, natural frequency rad/s, standing queue ms)
    "kernel:cubic": ("kernel:cubic", "", 0.35, 6.0, 28.0),
    "ccp:reno": ("ccp:reno", "", 1.4, 3.0, 22.0),
    "ccp:cubic beta=0.8": ("ccp:cubic", "beta=0.8", 0.6, 8.0, 30.0),
    "kernel:bbr": ("kernel:bbr", "", 0.9, 10.0, 6.0),
}

SCENARIOS = {
    # name: (duration s, steps as (at_s, from, to))
    "step-0-12-4": (20.0, [(0.0, 0.0, 12.0), (10.0, 12.0, 4.0)]),
    "step-0-24": (12.0, [(0.0, 0.0, 24.0)]),
}


def step_response(t: np.ndarray, zeta: float, wn: float) -> np.ndarray:
    """Unit step response of a second-order system (t >= 0), dimensionless (Ogata, Modern Control Eng., 5.3)."""
    t = np.maximum(t, 0.0)
    if zeta < 1:
        wd = wn * math.sqrt(1 - zeta**2)
        phi = math.acos(zeta)
        return 1 - np.exp(-zeta * wn * t) / math.sqrt(1 - zeta**2) * np.sin(wd * t + phi)
    if zeta == 1:
        return 1 - np.exp(-wn * t) * (1 + wn * t)
    s = math.sqrt(zeta**2 - 1)
    p1, p2 = wn * (zeta - s), wn * (zeta + s)
    return 1 + (p1 * np.exp(-p2 * t) - p2 * np.exp(-p1 * t)) / (p2 - p1)


def _settling(zeta: float, wn: float, band: float) -> float:
    """Settling time into +-band of a second-order step response, s (from the response itself)."""
    t = np.arange(0, 30, 0.001)
    outside = np.nonzero(np.abs(step_response(t, zeta, wn) - 1) > band)[0]
    return float(t[outside[-1] + 1]) if len(outside) else 0.0


def synthetic_analysis(labels=None, scenarios=None, runs: int = 3, seed: int = 7,
                       method: str = "ccplab") -> Analysis:
    """The Analysis of ``runs`` runs of every label in every scenario (contract columns only)."""
    labels = labels or list(LABELS)
    scenarios = scenarios or dict(SCENARIOS)
    rng = np.random.default_rng(seed)
    run_rows, step_rows, series = [], [], {}
    for scen, (duration, steps) in scenarios.items():
        t = np.arange(0, duration, BIN_S)
        nominal = np.zeros_like(t)
        for at, _, to in steps:
            nominal[t >= at] = to
        for label in labels:
            cca, params, zeta, wn, standing_ms = LABELS[label]
            for run in range(1, runs + 1):
                run_id = f"{scen}/{cca.replace(':', '-')}{'-' + params if params else ''}/run-{run}"
                cap = np.maximum(nominal + rng.normal(0, 0.3, t.size), 0)
                ref = pd.Series(cap).rolling(5, min_periods=1, center=True).mean().to_numpy()
                wn_r = wn * (1 + rng.normal(0, 0.05))
                thr = np.zeros_like(t)
                qd = np.full_like(t, standing_ms * 0.2)
                for k, (at, frm, to) in enumerate(steps):
                    end = steps[k + 1][0] if k + 1 < len(steps) else duration
                    m = (t >= at) & (t < end)
                    if to >= frm:
                        thr[m] = frm + (to - frm) * step_response(t[m] - at, zeta, wn_r)
                    else:  # a saturated link departs at its capacity; the step down shows in the queue
                        thr[m] = to
                        qd[m] += 150.0 * np.exp(-(t[m] - at) * wn_r / 2)
                    qd[m] += standing_ms * (1 - np.exp(-(t[m] - at) * 2))
                thr = np.clip(np.minimum(thr, cap * 1.02) + rng.normal(0, 0.2, t.size), 0, None)
                drops = (rng.random(t.size) < 0.02).astype(int)
                s = pd.DataFrame({"throughput_mbps": thr, "capacity_mbps": cap, "reference_mbps": ref,
                                  "queueing_delay_ms": qd, "drops": drops},
                                 index=pd.Index(t + 0.26, name="t_s"))  # log clock: flow starts at 0.26 s
                s.attrs["bin_s"] = BIN_S
                series[run_id] = s
                base = {"run_id": run_id, "cca": cca, "cca_params": params, "label": label, "run": run,
                        "scenario": scen, "method": method}
                for k, (at, frm, to) in enumerate(steps):
                    step_rows.append({**base, **_step_metrics(k, at + 0.26, frm, to, steps, duration + 0.26,
                                                              zeta, wn_r, standing_ms, rng,
                                                              never=(label == "ccp:reno" and run == 1 and k == 0))})
                tput = float(thr.mean())
                p95q = float(np.percentile(qd, 95))
                p95s = p95q + 25.0
                run_rows.append({
                    **{k: v for k, v in base.items() if k != "method"},
                    "trace_kind": "step", "queue_packets": 100, "rtt_ms": 50.0, "duration_s": duration,
                    "flow_start_s": 0.26, "method": method, "capacity_mbps": float(cap.mean()),
                    "throughput_mbps": tput, "utilization": tput / float(cap.mean()),
                    "p95_queueing_delay_ms": p95q, "p95_signal_delay_ms": p95s,
                    "power_score": tput / (p95s / 1000), "retransmits": math.nan if run == 2 else float(run * 3),
                    "path": f"/synthetic/{run_id}",
                })
    return Analysis(pd.DataFrame(run_rows), pd.DataFrame(step_rows), series, [])


def _step_metrics(k, at, frm, to, steps, run_end, zeta, wn, standing_ms, rng, never) -> dict:
    end = steps[k + 1][0] + 0.26 if k + 1 < len(steps) else run_end
    kind = "start" if k == 0 else ("up" if to > frm else "down")
    ts2, ts5 = _settling(zeta, wn, 0.02), _settling(zeta, wn, 0.05)
    conv = ts5 * (1 + rng.normal(0, 0.08))
    under = zeta < 1
    row = {
        "step": k, "kind": kind, "at_s": at, "end_s": end, "from_mbps": frm, "to_mbps": to,
        "converged": not never, "convergence_s": math.nan if never else conv,
        "convergence_point_s": math.nan if never else at + conv,
        "normalized_area": (0.4 / wn + 0.1 * (1 - zeta) ** 2) * (1 + rng.normal(0, 0.1)),
        "area_mbit": abs(to - frm) * 0.4 / wn, "steady_throughput_mbps": to * (0.97 + rng.normal(0, 0.01)),
        "steady_utilization": 0.97 + rng.normal(0, 0.01),
        "rise_time_s": (1.8 / wn) * (1 + rng.normal(0, 0.05)),
        "peak_time_s": math.pi / (wn * math.sqrt(1 - zeta**2)) if under else math.nan,
        "overshoot_pct": 100 * math.exp(-zeta * math.pi / math.sqrt(1 - zeta**2)) if under else 0.0,
        "settling_time_s": math.nan if never else ts2, "settling_time_5pct_s": math.nan if never else ts5,
        "damping_ratio": zeta * (1 + rng.normal(0, 0.03)), "natural_frequency_rad_s": wn,
        "fit_r2": 0.95 + rng.normal(0, 0.01),
        "response_class": "underdamped" if under else "overdamped",
        "peak_queueing_delay_ms": (150.0 if kind == "down" else 40.0) + rng.normal(0, 5),
        "standing_queue_packets": standing_ms * to / 12.0, "standing_queue_ms": standing_ms,
        "drain_time_s": (2 / wn) * (1 + rng.normal(0, 0.1)), "drops": int(rng.integers(0, 30)),
    }
    if kind == "down":  # departures cannot show a step down: no throughput transient, scored by the queue
        for c in ("normalized_area", "area_mbit", "rise_time_s", "peak_time_s", "overshoot_pct",
                  "damping_ratio", "natural_frequency_rad_s", "fit_r2"):
            row[c] = math.nan
        row["response_class"] = "not second-order"
    return row


# ------------------------------------------------------------------ multi-flow logs and run directories

PKT = 1504
"""mahimahi packet size incl. the 4-byte TUN header, bytes."""


def credit_sends(rate_pkts_per_ms: np.ndarray) -> np.ndarray:
    """Whole packets per ms of a fractional rate (packets/ms) by accumulated credit."""
    credit = np.floor(np.cumsum(np.asarray(rate_pkts_per_ms, float)) + 1e-9)
    return np.diff(np.concatenate([[0.0], credit])).astype(int)


def simulate_flows(opps_per_ms, sends_per_ms, ports, queue_packets: int = 1000,
                   control_at_ms=None) -> tuple[str, str]:
    """A FIFO drop-tail link shared by several flows, one ms at a time (arrivals of flow 0, 1, ... then
    delivery opportunities), as ccplab-link logs it.

    Args:
        opps_per_ms: delivery opportunities per ms.
        sends_per_ms: per flow, packets (1504 B) sent per ms.
        ports: per flow, its destination port.
        queue_packets: drop-tail limit.
        control_at_ms: per flow, the ms of one small control packet (90 B, delivered at once, as iperf3's
            control connection before its data), or None.

    Returns:
        (mm-link log text, flow attribution text): one port line per +, - and d line of the log, in order.
    """
    lines = ["# mahimahi mm-link [uplink] > synthetic multi-flow", f"# queue: droptail [packets={queue_packets}]",
             "# base timestamp: 0"]
    flow_lines: list[str] = []
    q: deque = deque()
    n = len(opps_per_ms)
    for t in range(n):
        for f, port in enumerate(ports):
            if control_at_ms is not None and control_at_ms[f] == t:
                lines += [f"{t} + 90", f"{t} - 90 0"]
                flow_lines += [str(port), str(port)]
            for _ in range(int(sends_per_ms[f][t])):
                lines.append(f"{t} + {PKT}")
                flow_lines.append(str(port))
                if len(q) >= queue_packets:
                    lines.append(f"{t} d 1 {PKT}")
                    flow_lines.append(str(port))
                else:
                    q.append((t, port))
        for _ in range(int(opps_per_ms[t])):
            lines.append(f"{t} # {PKT}")
            if q:
                sent, port = q.popleft()
                lines.append(f"{t} - {PKT} {t - sent}")
                flow_lines.append(str(port))
    return "\n".join(lines) + "\n", "\n".join(flow_lines) + "\n"


def write_multiflow_run(run_dir: Path, flows: list[dict], log_text: str, flows_text: str, *, run: int = 1,
                        scenario: str = "two-flows", steps=None, owd_ms: float = 25, duration_s: float = 10,
                        schema: int = 3) -> Path:
    """A schema-3 run directory: metadata.json with ``flows``, uplink.log, uplink.flows, iperf3-flowK.json.

    ``flows``: per flow a dict with at least cca and port; optional cca_params, start_s, stop_s,
    flow_start_s, flow_end_s, extra_delay_ms, retransmits, receiver_bytes (written to its iperf3 JSON).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "uplink.log").write_text(log_text)
    (run_dir / "uplink.flows").write_text(flows_text)
    listed = []
    for k, f in enumerate(flows):
        name = f"iperf3-flow{k}.json"
        (run_dir / name).write_text(json.dumps({"end": {
            "sum_sent": {"retransmits": f.get("retransmits", 3 * k + 1)},
            "sum_received": {"bytes": f.get("receiver_bytes", 1_000_000 * (k + 1))}}}))
        listed.append({"index": k, "cca": f["cca"], "cca_params": f.get("cca_params", {}),
                       "label": f["cca"], "port": f["port"], "start_s": f.get("start_s", 0.0),
                       "stop_s": f.get("stop_s"), "extra_delay_ms": f.get("extra_delay_ms", 0),
                       "iperf3": name, "flow_start_s": f.get("flow_start_s"), "flow_end_s": f.get("flow_end_s")})
    meta = {
        "schema": schema, "cca": flows[0]["cca"], "cca_params": flows[0].get("cca_params", {}), "run": run,
        "scenario": {"name": scenario, "trace_kind": "step", "steps": steps or [],
                     "one_way_delay_ms": owd_ms, "queue_packets": 1000, "duration_s": duration_s},
        "files": {"link_log": "uplink.log", "iperf3": "iperf3-flow0.json", "flow_log": "uplink.flows"},
        "flows": listed,
    }
    (run_dir / "metadata.json").write_text(json.dumps(meta))
    return run_dir


def two_flow_rates(n_ms: int, second_start_ms: int, ramp_ms: int = 500, second_stop_ms: int | None = None):
    """Sending rates (packets/ms) of two ideal flows on a 1 packet/ms link: flow 0 alone at the capacity,
    then, from ``second_start_ms``, flow 1 ramps linearly to half the capacity over ``ramp_ms`` while flow 0
    gives up as much (their sum stays at the capacity); after ``second_stop_ms`` flow 0 alone again."""
    t = np.arange(n_ms)
    r1 = np.clip((t - second_start_ms) / ramp_ms, 0, 1) * 0.5
    r1[t < second_start_ms] = 0.0
    if second_stop_ms is not None:
        r1[t >= second_stop_ms] = 0.0
    return 1.0 - r1, r1
