"""The papers' own claims for Copa and Vegas, measured from a run's algorithm log.

Neither has a kernel twin here (the kernel offers reno, cubic, bbr), so each is
checked against what its paper says it does:

- Copa (Arun and Balakrishnan, NSDI 2018, §2): in default mode a flow keeps
  about 1/delta packets in the bottleneck queue (2 at delta = 0.5). Measured:
  the standing queueing delay d_q = RTT_standing - RTT_min of each report, in
  packets at the report's delivery rate (d_q x rate / MSS).
- Vegas (Brakmo and Peterson 1995): the flow holds alpha..beta packets queued
  (2..4). Measured: Vegas's own estimate diff = cwnd (rtt - baseRTT) / baseRTT
  per round, with rtt the round's minimum RTT and baseRTT the flow's minimum.

Both use the steady part of the run: reports after the first quarter.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from .errors import CcplabError

MSS_BYTES = 1448  # payload of a full-size segment on the emulated link (1500-byte MTU, timestamps)
_PAIR = re.compile(r"(\w+)=([-\w.]+)")


def report_lines(algorithm_log: Path) -> list[dict[str, str]]:
    """The ``report`` lines of an algorithm log as {key: value} (the log line format: docs/algorithms.md, "Command line (shared)")."""
    try:
        text = algorithm_log.read_text()
    except OSError as exc:
        raise CcplabError(f"cannot read {algorithm_log}: {exc}") from exc
    return [dict(_PAIR.findall(line)) for line in text.splitlines() if " report sid=" in line]


def _steady(rows: list[dict]) -> list[dict]:
    return rows[len(rows) // 4:]


def _summary(values: list[float]) -> dict:
    if not values:
        raise CcplabError("no usable reports in the log's steady part")
    s = sorted(values)
    return {"median": statistics.median(s), "p10": s[len(s) // 10], "p90": s[(9 * len(s)) // 10], "n": len(s)}


def copa_standing_queue_pkts(algorithm_log: Path) -> dict:
    """Copa's standing queue in packets per report (median, p10, p90, n)."""
    values = []
    for r in _steady(report_lines(algorithm_log)):
        try:
            dq_us = int(r["rtt_standing_us"]) - int(r["rtt_min_us"])
            rate = int(r["rate_bps"])
        except (KeyError, ValueError):
            continue
        if rate > 0 and r.get("phase") == "copa":
            values.append(dq_us / 1e6 * rate / MSS_BYTES)
    return _summary(values)


def vegas_queued_pkts(algorithm_log: Path) -> dict:
    """Vegas's per-round estimate of its queued packets (median, p10, p90, n)."""
    rows = report_lines(algorithm_log)
    mins = [int(r["min_rtt_us"]) for r in rows if r.get("min_rtt_us", "0").isdigit() and int(r["min_rtt_us"]) > 0]
    if not mins:
        raise CcplabError(f"{algorithm_log}: no RTT samples")
    base = min(mins)
    values = []
    for r in _steady(rows):
        rtt = int(r.get("min_rtt_us", "0") or 0)
        if rtt > 0 and r.get("phase") == "cong_avoid":
            values.append(float(r["cwnd_pkts"]) * (rtt - base) / base)
    return _summary(values)
