"""Copa and Vegas against their papers' claims (no kernel twin): a synthetic log for
the parsing, and a short real run of each through a fixed 12 Mbit/s link."""

from __future__ import annotations

import pytest

from ccplab import claims, cli


def _line(**kv) -> str:
    return "2026-01-01T00:00:00Z  INFO ccp: report sid=1 " + " ".join(f"{k}={v}" for k, v in kv.items())


def test_measures_from_report_lines(tmp_path):
    log = tmp_path / "algorithm.log"
    # 8 reports: the first quarter (2) is warm-up and left out.
    copa = [_line(rate_bps=1_448_000, rtt_standing_us=50_000 + dq, rtt_min_us=50_000, phase="copa")
            for dq in (9000, 9000, 9000, 9000, 1000, 2000, 3000, 2000)]
    log.write_text("\n".join(["ready alg=copa", *copa]) + "\n")
    q = claims.copa_standing_queue_pkts(log)
    # 1448000 B/s = 1000 packets/s, so d_q in ms = packets: median of 9, 9, 1, 2, 3, 2.
    assert q["n"] == 6 and q["median"] == pytest.approx(2.5)
    vegas = [_line(min_rtt_us=rtt, cwnd_pkts=cw, phase=ph) for rtt, cw, ph in
             ((40_000, 10, "slow_start"), (44_000, 20, "cong_avoid"), (42_000, 20, "cong_avoid"),
              (46_000, 20, "recovery"))]
    log.write_text("\n".join(vegas) + "\n")
    v = claims.vegas_queued_pkts(log)
    # base 40 ms; steady CA rounds: 20 x 4/40 = 2, 20 x 2/40 = 1 (the recovery round is left out)
    assert v["n"] == 2 and v["median"] == pytest.approx(1.5)


@pytest.mark.network
def test_copa_and_vegas_hold_the_queues_their_papers_claim(tmp_path, needs_root):
    out = tmp_path / "cv"
    assert cli.main(["compare", "--cca", "ccp:copa", "--cca", "ccp:vegas", "--runs", "1", "--duration-s", "12",
                     "--step", "0:0:12", "--sigma-mbps", "0", "--queue-packets", "100", "--out", str(out),
                     "--no-analysis"]) == 0
    copa = claims.copa_standing_queue_pkts(out / "runs" / "ccp-copa" / "run-1" / "algorithm.log")
    vegas = claims.vegas_queued_pkts(out / "runs" / "ccp-vegas" / "run-1" / "algorithm.log")
    # Copa: about 1/delta = 2 packets; Vegas: alpha..beta = 2..4 packets (medians, a
    # packet of slack for the per-report measurement).
    assert 1.0 <= copa["median"] <= 4.0, copa
    assert 1.0 <= vegas["median"] <= 5.0, vegas
