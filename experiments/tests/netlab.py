"""Helpers of the runner's tests: the missing-resource policy and waits on real signals.

The project's one policy for tests that need something of the machine (root,
BPF, network namespaces, a built binary, a system tool): the test FAILS with a
message naming what is missing, via ``require``. It never skips and never
passes without having tested. CI runs as root with everything built, so
nothing is missing there.

Tests that run real flows must be run under the host's netlab lock
(``flock /tmp/ccplab-netlab.lock pytest ...``): the ``ccp`` congestion control
can be registered once per host, and concurrent emulations distort each other.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ccplab.binaries import REPO_ROOT, bin_dir, project_binary

SWEEPS = REPO_ROOT / "experiments" / "sweeps"
PACKET_BYTES = 1500

PROJECT_BINARIES = ("ccplab-trace", "ccplab-link", "ccp-datapath", "ccp-algorithms", "ccp-reno", "ccp-cubic")
NETLAB_TOOLS = ("iperf3", "ip", "ss")
BTF_VMLINUX = Path("/sys/kernel/btf/vmlinux")


def require(ok: bool, missing: str) -> None:
    """Fail the calling test with ``missing: <what>`` unless ``ok`` (the one policy, see module doc)."""
    if not ok:
        pytest.fail(f"missing: {missing}", pytrace=False)


def require_binaries(*names: str) -> None:
    """The project's built binaries ``names`` (default: all of them) are in ``bin_dir()``."""
    absent = [n for n in (names or PROJECT_BINARIES) if not (bin_dir() / n).is_file()]
    require(not absent, f"binaries {', '.join(absent)} not built in {bin_dir()}: run `make build`")


def require_netlab() -> None:
    """Root, BPF struct_ops (kernel BTF), the system tools and every project binary: a real flow can run."""
    require(os.geteuid() == 0, "root (network namespaces and BPF struct_ops need it): run the tests as root")
    require(BTF_VMLINUX.exists(), f"BPF: {BTF_VMLINUX} (kernel BTF, needed by struct_ops)")
    absent = [t for t in NETLAB_TOOLS if shutil.which(t) is None]
    require(not absent, f"tools {', '.join(absent)} on PATH (apt-get install iperf3 iproute2)")
    require_binaries()


def namespaces() -> set[str]:
    """Names of the host's network namespaces (``ip netns list``)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def wait_for(condition, timeout_s: float, what: str, interval_s: float = 0.05):
    """Poll ``condition()`` until it returns a true value (returned); fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval_s)  # poll interval of a bounded wait, not a synchronisation
    pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}", pytrace=False)


def step_trace_file(path: Path, mbps: float, duration_s: int, sigma_mbps: float, seed: int) -> Path:
    """A seeded mahimahi trace at ``path``: 0 -> ``mbps`` at t = 0, noise ``sigma_mbps``, ``duration_s`` long
    (``ccplab-trace step``)."""
    subprocess.run([str(project_binary("ccplab-trace")), "step", "--before-mbps", "0", "--after-mbps", str(mbps),
                    "--at-s", "0", "--duration-s", str(duration_s), "--sigma-mbps", str(sigma_mbps),
                    "--seed", str(seed), "--out", str(path)], check=True, capture_output=True)
    return path


def link_ready(run_partial_dir: Path) -> dict | None:
    """ccplab-link's ready file of a run in progress (its namespaces and addresses), or None if not there yet."""
    path = run_partial_dir / ".link-ready.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # not written yet (the link writes it atomically)
        return None


def data_socket_acked_bytes(ready: dict, socket_ca: str, port: int = 5201) -> int:
    """Bytes acked so far on the sender's TCP socket to ``port`` that uses congestion control ``socket_ca``.

    Reads ``ss -tin`` inside the sender namespace; 0 when no such socket is
    established yet (iperf3's control connection uses the namespace default CA,
    so it is not mistaken for the data socket).
    """
    done = subprocess.run(["ip", "netns", "exec", ready["sender_netns"], "ss", "-Htin", "state", "established",
                           "dst", f"{ready['receiver_ip']}:{port}"], capture_output=True, text=True)
    best = 0
    for line in done.stdout.splitlines():
        fields = line.split()
        if socket_ca in fields:
            acked = [f for f in fields if f.startswith("bytes_acked:")]
            if acked:
                best = max(best, int(acked[0].split(":", 1)[1]))
    return best


def write_sweep(tmp_path: Path, text: str, name: str = "sweep.toml") -> Path:
    """An experiment file with ``text`` in ``tmp_path``."""
    path = tmp_path / name
    path.write_text(text)
    return path


def simulated_log(opportunities_ms: list[int], duration_ms: int, ramp_ms: int = 300, queue: int = 40) -> str:
    """An mm-link log of a FIFO droptail link replaying ``opportunities_ms`` (trace timestamps, ms) for a
    sender that ramps up linearly to 2 packets/ms over ``ramp_ms`` (enough to fill the link)."""
    opps = [0] * (duration_ms + 1)
    for t in opportunities_ms:
        if t <= duration_ms:
            opps[t] += 1
    lines = ["# mahimahi mm-link [uplink] > synthetic (ccplab tests)", f"# queue: droptail [packets={queue}]",
             "# base timestamp: 0"]
    queue_ms: list[int] = []
    credit = 0.0
    for t in range(duration_ms + 1):
        credit += min(2.0, 2.0 * t / ramp_ms)
        dropped = 0
        while credit >= 1.0:
            credit -= 1.0
            lines.append(f"{t} + {PACKET_BYTES}")
            if len(queue_ms) >= queue:
                dropped += 1
            else:
                queue_ms.append(t)
        if dropped:
            lines.append(f"{t} d {dropped} {dropped * PACKET_BYTES}")
        for _ in range(opps[t]):
            lines.append(f"{t} # {PACKET_BYTES}")
            if queue_ms:
                lines.append(f"{t} - {PACKET_BYTES} {t - queue_ms.pop(0)}")
    return "\n".join(lines) + "\n"


def synthetic_flow(p: dict, scenario, run_dir: Path) -> None:
    """A stand-in for ``ccplab.sweep.real_flow`` without root: the run directory of a simulated flow
    through the scenario's real trace, with the metadata the runner writes."""
    opportunities = [int(x) for x in Path(scenario.trace).read_text().split()]
    run_dir.mkdir(parents=True)
    (run_dir / "uplink.log").write_text(simulated_log(opportunities, scenario.duration_s * 1000,
                                                      queue=scenario.queue_packets))
    meta = {"schema": 1, "cca": p["cca"], "run": p["repetition"], "scenario": scenario.to_json(),
            "flow_start_s": 0.0, "files": {"link_log": "uplink.log"}, "synthetic": True}
    (run_dir / "metadata.json").write_text(json.dumps(meta, indent=2))
