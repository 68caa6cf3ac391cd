"""A daemon that dies under `ccplab run` fails the run within a second, naming it (root, BPF, namespaces).

The runner watches the link, the algorithm and the datapath while the flows run; a death must not
be noticed only when iperf3 gives up, and the run must not be saved as if nothing happened.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import psutil
import pytest

from ccplab.cca import kernel_ccs
from ccplab.plumbing.processes import RUNNER_ENV

from netlab import namespaces as _namespaces, wait_for
from test_end_to_end import _start_ccp_reno_run, _wait_for_ccp_data_flow, step_trace  # noqa: F401 (fixture)

pytestmark = pytest.mark.network


def _daemon_pid(runner_pid: int, partial, daemon: str) -> int:
    """The pid of one of the run's daemons: the link and the datapath from their ready files, the
    algorithm by its name among the runner's children."""
    if daemon == "ccplab-link":
        return json.loads((partial / ".link-ready.json").read_text())["pid"]
    if daemon == "ccp-datapath":
        return wait_for(lambda: (partial / ".datapath-ready.json").exists()
                        and json.loads((partial / ".datapath-ready.json").read_text())["pid"], 10, "datapath pid")
    for p in psutil.process_iter(["pid", "name", "environ"]):
        if p.info["name"] == "ccp-algorithms" and (p.info.get("environ") or {}).get(RUNNER_ENV) == str(runner_pid):
            return p.pid
    pytest.fail("no ccp-algorithms process of the run")


@pytest.mark.parametrize("daemon, named", [("ccplab-link", "ccplab-link"), ("ccp-datapath", "ccp-datapath"),
                                           ("ccp-algorithms", "ccp-algorithms")])
def test_a_daemon_killed_mid_run_fails_the_run_within_a_second(step_trace, tmp_path, daemon, named):
    before = _namespaces()
    out = tmp_path / "run"
    proc = _start_ccp_reno_run(step_trace, out)
    partial = tmp_path / f".run.partial-{proc.pid}"
    lines: list[tuple[float, str]] = []
    try:
        _wait_for_ccp_data_flow(proc, partial, min_acked=100_000)
        victim = _daemon_pid(proc.pid, partial, daemon)
        reader = threading.Thread(target=lambda: lines.extend((time.monotonic(), line) for line in proc.stderr),
                                  daemon=True)
        reader.start()
        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        proc.wait(60)
        exited = time.monotonic()
        reader.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        wait_for(lambda: _namespaces() <= before, 20, "the run's namespaces to go")
    err = "".join(line for _, line in lines)
    assert proc.returncode == 2, err
    notice = [t for t, line in lines if f"{named} exited" in line and "stopping the run" in line]
    assert notice, err
    print(f"{daemon} killed: the runner said so {notice[0] - killed:.3f} s later, exited "
          f"{exited - killed:.3f} s later")
    assert notice[0] - killed < 1.0, f"noticed {notice[0] - killed:.2f} s after the kill"
    assert any(line.startswith(f"ccplab: error: {named} exited") for _, line in lines), err
    assert not out.exists() and not partial.exists(), "a failed run is not saved"
    wait_for(lambda: "ccp" not in kernel_ccs(), 20, "ccp to be unregistered")
