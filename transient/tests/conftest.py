"""Synthetic mm-link logs and run directories with known answers."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

import numpy as np
import pytest

PKT = 1504  # mahimahi packet size incl. 4-byte TUN header


def simulate_link(opps_per_ms, sends_per_ms, queue_packets=1000, base=1732270000000) -> str:
    """A FIFO drop-tail link, one ms at a time: arrivals first, then delivery opportunities.

    Returns the text of an mm-link log (times relative to trace start).
    """
    lines = ["# mahimahi mm-link [uplink] > synthetic", "# queue: droptail [packets=%d]" % queue_packets,
             f"# base timestamp: {base}"]
    q: deque[int] = deque()
    for t in range(len(opps_per_ms)):
        dropped = 0
        for _ in range(int(sends_per_ms[t])):
            lines.append(f"{t} + {PKT}")
            if len(q) >= queue_packets:
                dropped += 1
            else:
                q.append(t)
        if dropped:
            lines.append(f"{t} d {dropped} {dropped * PKT}")
        for _ in range(int(opps_per_ms[t])):
            lines.append(f"{t} # {PKT}")
            if q:
                sent = q.popleft()
                lines.append(f"{t} - {PKT} {t - sent}")
    return "\n".join(lines) + "\n"


def write_run(run_dir: Path, cca: str, run: int, log_text: str, steps, owd_ms=25, name="step-0-12") -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "uplink.log").write_text(log_text)
    meta = {
        "schema": 1, "cca": cca, "run": run,
        "scenario": {"name": name, "trace": "/x.trace", "trace_kind": "step" if steps else "cellular",
                     "steps": steps, "sigma_mbps": 2.0, "seed": run, "one_way_delay_ms": owd_ms,
                     "queue_packets": 40, "duration_s": 3},
        "files": {"link_log": "uplink.log", "iperf3": "iperf3.json"},
        "started_at": "2026-11-22T10:00:00Z", "finished_at": "2026-11-22T10:00:03Z",
    }
    (run_dir / "metadata.json").write_text(json.dumps(meta))
    return run_dir


def ramp_then_full(n_ms: int, ramp_ms: int) -> np.ndarray:
    """Sender: rate grows linearly from 0 to 1 packet/ms over ramp_ms (slow-start-like), then 1/ms."""
    t = np.arange(n_ms + 1)
    sent = np.floor(np.where(t < ramp_ms, t * t / (2.0 * ramp_ms), t - ramp_ms / 2.0))
    return np.diff(sent).astype(int)


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    """Two CCAs x two runs, 3 s at 1 packet/ms (12.03 Mbit/s), step 0 -> 12 at t = 0, ramps of 0.5-1.2 s."""
    root = tmp_path / "results"
    steps = [{"at_s": 0.0, "from_mbps": 0.0, "to_mbps": 12.0}]
    n = 3000
    for cca, switches in (("ccp:reno", (1000, 1200)), ("ccp:cubic", (500, 600))):
        for k, sw in enumerate(switches, start=1):
            text = simulate_link(np.ones(n, int), ramp_then_full(n, sw))
            write_run(root / "runs" / cca.replace(":", "-") / f"run-{k}", cca, k, text, steps)
    return root
