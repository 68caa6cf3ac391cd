"""A run is saved as its algorithm's result only if the algorithm controlled its flow (root, BPF, namespaces).

Two Portus "algorithms" that a researcher could write by mistake, run as external algorithms on a real
flow: one binds its socket and never answers (the datapath's kernel-cubic fallback drives every ACK),
one exits about two seconds after the datapath first wrote to it (the flow runs by then). Neither run
may be saved as a valid result; with ``--keep-invalid`` the silent one is kept, marked invalid, with
the datapath's evidence for the run and for its flow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ccplab.cca import kernel_ccs

from netlab import namespaces, step_trace_file, wait_for

pytestmark = pytest.mark.network

# Binds the unix datagram socket the runner waits for (/tmp/ccp/NAME, NAME after --ipc-name) and reads
# what the datapath sends without ever answering; with --exit-after S it exits S seconds after the
# datapath's first message.
MUTE = '''
import socket, sys, time
name = sys.argv[sys.argv.index("--ipc-name") + 1]
exit_after = float(sys.argv[sys.argv.index("--exit-after") + 1]) if "--exit-after" in sys.argv else None
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/tmp/ccp/" + name)
first = None
while True:
    s.recv(65536)
    first = first or time.monotonic()
    if exit_after is not None and time.monotonic() - first > exit_after:
        sys.exit(3)
'''


def _run(tmp_path: Path, tag: str, extra_cmd: str, *flags: str) -> tuple[subprocess.CompletedProcess, Path]:
    script = tmp_path / "mute.py"
    script.write_text(MUTE)
    trace = step_trace_file(tmp_path / "flat.trace", 12, duration_s=10, sigma_mbps=0, seed=1)
    out = tmp_path / f"run-{tag}"
    cca = f"portus:mute=python3 {script} --ipc-name ccplab-mute-{tag}-{id(out)} {extra_cmd}".strip()
    done = subprocess.run([sys.executable, "-m", "ccplab.cli", "run", "--cca", cca, "--trace", str(trace),
                           "--one-way-delay-ms", "10", "--queue-packets", "50", "--duration-s", "5",
                           "--out", str(out), *flags], capture_output=True, text=True, timeout=120)
    return done, out


def test_an_algorithm_that_never_answers_is_not_saved_as_its_result(tmp_path, needs_root):
    before = namespaces()
    done, out = _run(tmp_path, "silent", "")
    assert done.returncode == 2, done.stderr
    assert "fallback drove" in done.stderr and "not a valid result of portus:mute" in done.stderr, done.stderr
    assert not out.exists(), "an invalid run was saved"

    kept, out = _run(tmp_path, "kept", "", "--keep-invalid")
    assert kept.returncode == 0, kept.stderr
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["valid"] is False and meta["control"]["fallback_share"] > 0.99, meta["control"]
    assert meta["control"]["command_acks"] == 0, meta["control"]
    flow = meta["flows"][0]["control"]
    assert flow["fallback_share"] > 0.99 and flow["delivered_pkts"] > 1000, flow
    assert meta["daemons"]["portus:mute"]["alive_at_end"], meta["daemons"]  # silent, not dead
    assert meta["daemons"]["ccp-datapath"] == {"alive_at_end": True, "exit_status": 0}, meta["daemons"]
    wait_for(lambda: namespaces() <= before and "ccp" not in kernel_ccs(), 20, "the run's namespaces and ccp to go")


def test_an_algorithm_that_exits_mid_run_fails_the_run_naming_it(tmp_path, needs_root):
    done, out = _run(tmp_path, "dies", "--exit-after 2")
    assert done.returncode == 2, done.stderr
    assert "exited (status 3) while the flows ran" in done.stderr, done.stderr
    assert not out.exists(), "a run whose algorithm died was saved"
