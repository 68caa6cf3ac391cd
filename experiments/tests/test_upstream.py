"""The CCP project's own algorithms, not of this repository, run through the runner as external algorithms.

generic_cong_avoid 0.4.0 (crates.io; reno and cubic binaries with ``--features bin``, built on portus 0.7,
which addresses its replies the old way) is installed by ``make upstream-algs`` into
``target/upstream-gca``. Each runs a real flow (root, BPF, namespaces; hold /tmp/ccplab-netlab.lock) as
``portus:upstream-NAME=...``, and the test checks what a researcher needs to trust the result: the run is
saved as valid with the datapath's evidence that the algorithm commanded the flow, it is labelled
external, and the socket's cwnd (``ss``, sampled during the run) follows the cwnd the algorithm decided
(its own debug log, read as it is written).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ccplab.binaries import REPO_ROOT
from ccplab.control import DEFAULT_MAX_FALLBACK_SHARE

from netlab import link_ready, require, step_trace_file

pytestmark = pytest.mark.network

GCA_BIN = REPO_ROOT / "target" / "upstream-gca" / "bin"
LINK_MBPS = 12
DURATION_S = 10
SAMPLE_S = 0.05  # how often the socket's cwnd is read (a measurement's period, not a synchronisation)
WINDOW_S = 0.3  # a cwnd the algorithm decided this long before an ss sample may still be the socket's
FOLLOW_SHARE = 0.8  # samples whose cwnd is one the algorithm decided around then
# Both start in congestion avoidance at 40 packets (their own --ss_thresh, bytes). From slow start, their
# loss-deficit rule can keep them silent through the overshoot's losses for longer than the datapath's
# control guard allows (docs/upstream-algorithms.md), and the run is then rightly invalid: this test is
# of control, not of that rule.
SS_THRESH_BYTES = 40 * 1448
_DECISION = re.compile(r"got ack.*?curr_cwnd_pkts=(\d+)")
_CWND = re.compile(r"\bcwnd:(\d+)\b")


def _socket_cwnd(ready: dict) -> int | None:
    """The cwnd (packets) of the run's data socket (congestion control ``ccp``, port 5201), or None."""
    done = subprocess.run(["ip", "netns", "exec", ready["sender_netns"], "ss", "-Htin", "state", "established",
                           "dst", f"{ready['receiver_ip']}:5201"], capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if " ccp " in f" {line} " and (m := _CWND.search(line)):
            return int(m.group(1))
    return None


def _follows(samples: list[tuple[float, int]], decisions: list[tuple[float, int]], lag_s: float) -> float:
    """Share of ``samples`` (time, cwnd) whose cwnd is within one packet of a decision (time read, cwnd)
    from ``WINDOW_S`` before the sample (or the last one before that) to ``lag_s`` after it (the log is
    read once a sampling period, so a decision already applied may be read just after the sample)."""
    hits = 0
    for t, cwnd in samples:
        earlier = [v for ts, v in decisions if ts <= t - WINDOW_S]
        near = [v for ts, v in decisions if t - WINDOW_S < ts <= t + lag_s]
        candidates = near + earlier[-1:]
        hits += any(abs(cwnd - v) <= 1 for v in candidates)
    return hits / len(samples) if samples else 0.0


@pytest.mark.parametrize("alg", ["reno", "cubic"])
def test_upstream_algorithm_runs_as_an_external_one_and_controls_its_flow(alg, tmp_path, needs_root):
    binary = GCA_BIN / alg
    require(binary.is_file(), f"generic_cong_avoid 0.4.0's {alg} binary at {binary}: run `make upstream-algs`")
    trace = step_trace_file(tmp_path / "flat.trace", LINK_MBPS, duration_s=DURATION_S + 2, sigma_mbps=0, seed=1)
    out = tmp_path / "run"
    label = f"portus:upstream-{alg}"
    # RUST_LOG=debug: the algorithm logs each cwnd it decides ("got ack ... curr_cwnd_pkts=N")
    command = f"RUST_LOG=debug {binary} --ss_thresh {SS_THRESH_BYTES}"
    proc = subprocess.Popen([sys.executable, "-m", "ccplab.cli", "run", "--cca", f"{label}={command}",
                             "--trace", str(trace), "--one-way-delay-ms", "25", "--queue-packets", "50",
                             "--duration-s", str(DURATION_S), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    partial = tmp_path / f".run.partial-{proc.pid}"
    samples: list[tuple[float, int]] = []
    decisions: list[tuple[float, int]] = []
    offset = 0
    ready = None
    try:
        while proc.poll() is None:
            ready = ready or link_ready(partial)
            log = partial / "algorithm.log"
            if log.exists():
                with open(log, "rb") as f:
                    f.seek(offset)
                    chunk = f.read()
                complete = chunk[:chunk.rfind(b"\n") + 1]
                offset += len(complete)
                now = time.monotonic()
                decisions += [(now, int(m.group(1))) for m in _DECISION.finditer(complete.decode(errors="replace"))]
            if ready is not None:
                cwnd = _socket_cwnd(ready)
                if cwnd is not None:
                    samples.append((time.monotonic(), cwnd))
            time.sleep(SAMPLE_S)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"ccplab run of {label} failed (status {proc.returncode}): {stderr.strip()}"

    meta = json.loads((out / "metadata.json").read_text())
    assert meta["cca"] == label and meta["label"] == label, f"the run is labelled {meta['cca']!r}, not {label!r}"
    assert meta["external"][label]["command"] == [str(binary), "--ss_thresh", str(SS_THRESH_BYTES)], (
        f"metadata's external record: {meta['external']}")
    assert meta["external"][label]["env"] == {"RUST_LOG": "debug"}
    assert meta["flows"][0]["external"]["kind"] == "external"
    assert meta["socket_congestion_control"] == "ccp", "iperf3's socket did not use the datapath"
    control = meta["control"]
    assert meta["valid"] and control["valid"], f"the run is not valid: {control.get('reason')}"
    assert control["command_acks"] > 1000, f"the algorithm commanded only {control['command_acks']} ACKs: {control}"
    assert control["fallback_share"] <= DEFAULT_MAX_FALLBACK_SHARE, f"the kernel's cubic fallback drove it: {control}"

    assert len(decisions) >= 50, (f"{label} logged {len(decisions)} cwnd decisions (\"got ack ... curr_cwnd_pkts\") "
                                  f"in {out / 'algorithm.log'}: is it answering the datapath's reports?")
    flowing = [(t, c) for t, c in samples if t >= samples[0][0] + 1.0] if samples else []
    assert len(flowing) >= 50, f"only {len(flowing)} ss samples of the ccp data socket during the run"
    assert len({c for _, c in flowing}) >= 5, f"the socket's cwnd hardly moved: {sorted({c for _, c in flowing})}"
    share = _follows(flowing, decisions, lag_s=2 * SAMPLE_S)
    assert share >= FOLLOW_SHARE, (
        f"the socket's cwnd followed {label}'s decisions in only {share:.0%} of {len(flowing)} ss samples "
        f"(at least {FOLLOW_SHARE:.0%} expected); e.g. samples {flowing[:5]}, decisions {decisions[:5]}")
    print(f"{label}: cwnd followed its decisions in {share:.0%} of {len(flowing)} ss samples; "
          f"{len(decisions)} decisions; {control}")
    assert meta["iperf3_receiver_mbps"] > 0.6 * LINK_MBPS, f"{label} reached {meta['iperf3_receiver_mbps']:.2f} Mbit/s"
