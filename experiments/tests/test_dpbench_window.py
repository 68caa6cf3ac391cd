"""One pinned flow of the datapath benchmark, its window read with ``ss`` while it runs.

With iperf3's client and server on one CPU (``--pin-cpu``) the receiver runs only when the
sender yields, reads in big batches, and each ACK covers a large part of the window. The
datapath's cwnd ceiling (docs/datapath.md, "The commanded cwnd has a ceiling": twice the
packets in flight before an ACK, at least 256) must still let cubic's window grow: counted
after the ACK, it held such a flow at exactly 256 packets with nearly every ACK clamped.
Needs root, BPF struct_ops and the built binaries (fails naming what is missing).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import threading
import time
from contextlib import ExitStack

import pytest

from ccplab.cca import DATAPATH_CA, kernel_ccs
from ccplab.dpbench.host import RECEIVER_IP, Bench, preflight
from ccplab.dpbench.plan import ALGORITHM_PARAMS
from ccplab.plumbing.locks import netlab_lock

CEILING_MIN_PKTS = 256  # CWND_CEILING_MIN_PKTS in datapath/bpf/ccp.bpf.c
SAMPLE_EVERY_S = 0.1


def _largest_cwnd(ss_output: str) -> int | None:
    """The largest ``cwnd:`` of ``ss -tin`` output (the data connection's; iperf3's control one idles)."""
    cwnds = [int(c) for c in re.findall(r"\bcwnd:(\d+)", ss_output)]
    return max(cwnds) if cwnds else None


def _sample_cwnd(netns: str, stop: threading.Event, samples: list[tuple[float, int]]) -> None:
    began = time.monotonic()
    while not stop.wait(SAMPLE_EVERY_S):
        out = subprocess.run(["ip", "netns", "exec", netns, "ss", "-tinH", "state", "established", "dst", RECEIVER_IP],
                             capture_output=True, text=True).stdout
        cwnd = _largest_cwnd(out)
        if cwnd is not None:
            samples.append((time.monotonic() - began, cwnd))


def test_largest_cwnd_reads_the_data_connection_of_ss_output():
    out = ("0 0 10.203.0.1:5201 10.203.0.2:40000\n\t cubic wscale:7,7 rto:201 rtt:0.05/0.02 mss:1448 cwnd:10\n"
           "0 0 10.203.0.1:5202 10.203.0.2:40002\n\t ccp wscale:7,7 rto:201 rtt:0.04/0.01 mss:1448 cwnd:5432 "
           "ssthresh:20\n")
    assert _largest_cwnd(out) == 5432 and _largest_cwnd("") is None


def test_a_pinned_ccp_flow_grows_past_twice_the_ceilings_minimum(tmp_path, needs_root):
    preflight(["ccp-kernel-fold"])
    cpu = max(os.sched_getaffinity(0))
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    with netlab_lock(), ExitStack() as stack:
        if DATAPATH_CA in kernel_ccs():
            pytest.fail(f"congestion control '{DATAPATH_CA}' is already registered outside the netlab lock")
        bench = Bench(stack, tmp_path, duration_s=4, algorithm_params=dict(ALGORITHM_PARAMS), omit_s=1, pin_cpu=cpu)
        sampler = threading.Thread(target=_sample_cwnd, args=(bench.snd, stop, samples))
        sampler.start()
        try:
            m = bench.measure("ccp-kernel-fold", 1, False, 1)
        finally:
            stop.set()
            sampler.join()
    # from a second on: the kernel's cubic runs the first ACKs, before cubic's program is installed
    held = [c for t, c in samples if t >= 1.0]
    assert len(held) >= 10, f"ss saw the flow {len(held)} times in its last 3 s: {samples}"
    assert statistics.median(held) > 2 * CEILING_MIN_PKTS, (
        f"one pinned ccp flow held cwnd {held} packets ({m.gbps:.1f} Gbit/s): the ceiling did not follow "
        f"what it had in flight")
