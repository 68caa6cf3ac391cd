"""Loss and timeout as the kernel does them, on a real flow: the link stops delivering
for 1.5 s (capacity 0), the flow's retransmission timer fires, and

- the timeout reaches the algorithm at once (a report with timeout=true);
- the datapath does not re-apply the algorithm's stale command: in that report
  the datapath's cwnd (libccp's Cwnd register, re-seeded from the kernel after
  an RTO) is the kernel's loss window, not the cwnd the algorithm had commanded;
- the algorithm's next command after the timeout is its loss window (1 packet
  for Reno), and the flow recovers (data flows again after the outage).
"""

from __future__ import annotations

import re

import pytest

from ccplab import cli

pytestmark = pytest.mark.network
_PAIR = re.compile(r"(\w+)=([-\w.]+)")


def _reports(log_text: str) -> list[dict[str, str]]:
    return [dict(_PAIR.findall(line)) for line in log_text.splitlines() if " report sid=" in line]


def test_rto_reaches_the_algorithm_and_the_stale_command_is_not_reapplied(tmp_path, needs_root):
    out = tmp_path / "rto"
    assert cli.main(["compare", "--cca", "ccp:reno", "--runs", "1", "--duration-s", "8",
                     "--step", "0:0:12", "--step", "3:12:0", "--step", "4.5:0:12", "--sigma-mbps", "0",
                     "--queue-packets", "100", "--out", str(out), "--no-analysis"]) == 0
    reports = _reports((out / "runs" / "ccp-reno" / "run-1" / "algorithm.log").read_text())
    first_rto = next((i for i, r in enumerate(reports) if r["timeout"] == "true"), None)
    assert first_rto is not None, "no report carried the retransmission timeout"
    before = [r for r in reports[:first_rto] if r["cwnd"] != "-"]
    assert before, "the algorithm commanded before the outage"
    stale = int(before[-1]["cwnd"])
    rto = reports[first_rto]
    # The algorithm had a large window; the datapath reports the kernel's loss window instead.
    assert stale >= 20 * 1448, f"the flow had not grown before the outage: cwnd {stale} bytes"
    assert int(rto["dp_cwnd"]) != stale, "the stale command was re-applied after the RTO"
    assert int(rto["cwnd"]) <= 1448 * 2, f"Reno's answer to an RTO is its loss window, got {rto['cwnd']}"
    # The flow recovered: reports with acknowledged data after the timeout.
    assert sum(int(r["acked"]) for r in reports[first_rto + 1:]) > 100 * 1448
