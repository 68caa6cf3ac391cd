"""A ccp run is a result of its algorithm only if the algorithm controlled its flows: the datapath's
evidence is read, a run driven by the kernel's cubic fallback fails (or is kept marked invalid), and the
analysis lists such a run apart instead of scoring it. No network: real runs record the same evidence."""

from __future__ import annotations

import json
import time
from pathlib import Path

import transient
from ccplab import scenario as sc
from ccplab.control import ValidityPolicy, control_evidence, datapath_counters

from netlab import synthetic_flow

SUMMARY = ("2026-11-27T05:57:14Z  INFO ccp_datapath: flows=0 (bpf ids 2) active=0 invokes=0 commands=0 bpf: "
           "command_acks={c} fallback_acks={f} dropped_events=0 guard_fallbacks={g} kernel fold: invocations=9\n")


def _log(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "datapath.log"
    path.write_text("".join(lines))
    return path


def test_a_run_its_algorithm_controlled_is_valid(tmp_path):
    log = _log(tmp_path, "starting\n", SUMMARY.format(c=15837, f=0, g=0))
    entry = control_evidence(log, ValidityPolicy())
    assert entry["valid"] and entry["fallback_share"] == 0 and entry["command_acks"] == 15837
    assert datapath_counters(log)["guard_fallbacks"] == 0


def test_a_run_the_fallback_drove_is_invalid_and_says_why(tmp_path):
    # the last summary counts (an earlier datapath of the same log, e.g. a restart, does not)
    log = _log(tmp_path, SUMMARY.format(c=9000, f=10, g=0), SUMMARY.format(c=0, f=5574, g=1))
    entry = control_evidence(log, ValidityPolicy())
    assert not entry["valid"] and entry["fallback_share"] == 1.0
    assert "command_acks=0 fallback_acks=5574" in entry["reason"] and "--max-fallback-share" in entry["reason"]
    assert control_evidence(log, ValidityPolicy(max_fallback_share=1.0))["valid"], "the threshold is the flag's"
    just_over = _log(tmp_path, SUMMARY.format(c=980, f=20, g=0))
    assert not control_evidence(just_over, ValidityPolicy())["valid"]  # 2 % > 1 %


SUMMARY_RTO = ("2026-11-27T05:57:14Z  INFO ccp_datapath: flows=0 (bpf ids 2) active=0 invokes=0 commands=0 bpf: "
               "command_acks={c} fallback_acks={f} rto_await_acks={r} guard_fallbacks=0 cwnd_clamped=0 "
               "rate_floored=0 dropped_events=0 kernel fold: invocations=9\n")


def test_acks_awaiting_the_answer_to_an_rto_are_left_out_of_the_share_and_reported(tmp_path):
    # fixed-window on a trace with outages: 300 of 27,000 ACKs on the fallback, 280 of them while the
    # datapath awaited the algorithm's answer to an RTO: 20 beyond it, 0.07 %
    entry = control_evidence(_log(tmp_path, SUMMARY_RTO.format(c=26700, f=300, r=280)), ValidityPolicy())
    assert entry["valid"], entry
    assert (entry["fallback_acks"], entry["rto_await_acks"], entry["fallback_share"]) == (300, 280, round(20 / 27000, 6))
    # without the await left out the same run would be invalid (1.1 %)
    assert not control_evidence(_log(tmp_path, SUMMARY_RTO.format(c=26700, f=300, r=0)), ValidityPolicy())["valid"]
    # the fallback beyond the await counts in full, and the reason names all three counters
    bad = control_evidence(_log(tmp_path, SUMMARY_RTO.format(c=9000, f=1000, r=250)), ValidityPolicy())
    assert not bad["valid"] and bad["fallback_share"] == 0.075
    assert "command_acks=9000 fallback_acks=1000 rto_await_acks=250" in bad["reason"], bad["reason"]
    # a count beyond the fallback's (never written by the datapath) cannot make the share negative
    odd = control_evidence(_log(tmp_path, SUMMARY_RTO.format(c=100, f=5, r=9)), ValidityPolicy())
    assert odd["rto_await_acks"] == 5 and odd["fallback_share"] == 0.0


def test_a_summary_without_rto_await_leaves_nothing_out(tmp_path):
    entry = control_evidence(_log(tmp_path, SUMMARY.format(c=980, f=20, g=0)), ValidityPolicy())
    assert entry["rto_await_acks"] == 0 and entry["fallback_share"] == 0.02 and not entry["valid"]


def test_a_datapath_without_a_summary_leaves_no_evidence(tmp_path):
    entry = control_evidence(_log(tmp_path, "started\nkilled\n"), ValidityPolicy())
    assert not entry["valid"] and "no exit summary" in entry["reason"]
    assert not control_evidence(tmp_path / "missing.log", ValidityPolicy())["valid"]


def test_the_analysis_lists_invalid_runs_apart(tmp_path):
    trace = tmp_path / "t.trace"
    trace.write_text("\n".join(str(t) for t in range(1, 6001)) + "\n")
    scenario = sc.scenario_for_trace("flat", trace, 10, 40, 4)
    synthetic_flow({"cca": "ccp:reno", "repetition": 1}, scenario, tmp_path / "res" / "ok")
    synthetic_flow({"cca": "ccp:reno", "repetition": 2}, scenario, tmp_path / "res" / "bad")
    meta_path = tmp_path / "res" / "bad" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta.update(valid=False, control={"valid": False, "reason": "the kernel's cubic fallback drove 100.0%"})
    meta_path.write_text(json.dumps(meta))
    a = transient.analyze_all(tmp_path / "res")
    assert list(a.runs["run_id"]) == ["ok"], "the invalid run is not scored"
    assert a.errors == [(str(tmp_path / "res" / "bad"),
                         "marked invalid by the runner: the kernel's cubic fallback drove 100.0%")]



CREATED = ("2026-11-27T08:41:15Z  INFO ccp_datapath: flow created flow={f} src=10.202.0.1:48180 "
           "dst=10.202.0.2:{port} mss=1448 init_cwnd_pkts=10 mark=0 cgroup_id=1 kernel_pacing=false algorithm={alg}\n")
RELEASED = "2026-11-27T08:41:35Z  INFO ccp_datapath: flow released flow={f} delivered_pkts={d} fallback_pkts={b}\n"


def test_each_ccp_flow_has_its_own_evidence_by_port(tmp_path):
    from ccplab.control import flow_evidence

    log = _log(tmp_path,
               CREATED.format(f=1, port=5201, alg="cubic"), CREATED.format(f=2, port=5201, alg="cubic"),
               CREATED.format(f=3, port=5202, alg="bbr"), CREATED.format(f=4, port=5203, alg="copa"),
               RELEASED.format(f=2, d=30000, b=0), RELEASED.format(f=1, d=3, b=3),  # iperf3's control connection
               RELEASED.format(f=3, d=20000, b=400))  # flow 4 never released: no evidence
    ev = flow_evidence(log, ValidityPolicy())
    assert set(ev) == {5201, 5202}
    assert ev[5201] == {"algorithm": "cubic", "delivered_pkts": 30000, "fallback_pkts": 0, "rto_await_pkts": 0,
                        "fallback_share": 0.0, "valid": True}
    assert ev[5202]["algorithm"] == "bbr" and ev[5202]["fallback_share"] == 0.02 and not ev[5202]["valid"]
    assert flow_evidence(log, ValidityPolicy(max_fallback_share=0.05))[5202]["valid"]


RELEASED_RTO = ("2026-11-27T08:41:35Z  INFO ccp_datapath: flow released flow={f} delivered_pkts={d} fallback_pkts={b} "
                "rto_await_pkts={r}\n")


def test_a_flows_packets_awaiting_the_answer_to_an_rto_are_left_out_of_its_share(tmp_path):
    from ccplab.control import flow_evidence

    log = _log(tmp_path,
               CREATED.format(f=1, port=5201, alg="fixed-window"), CREATED.format(f=2, port=5202, alg="fixed-window"),
               RELEASED_RTO.format(f=1, d=27000, b=310, r=290),   # answered its RTOs: 20 beyond, valid
               RELEASED_RTO.format(f=2, d=27000, b=5000, r=250))  # never answered: the bound cut the await
    ev = flow_evidence(log, ValidityPolicy())
    assert ev[5201]["rto_await_pkts"] == 290 and ev[5201]["fallback_share"] == round(20 / 27000, 6) and ev[5201]["valid"]
    assert ev[5202]["rto_await_pkts"] == 250 and ev[5202]["fallback_share"] == round(4750 / 27000, 6)
    assert not ev[5202]["valid"]


def test_one_flow_the_fallback_drove_makes_the_run_invalid_naming_it(tmp_path):
    from ccplab.flows import parse_flow
    from ccplab.run import _with_flow_control

    log = _log(tmp_path, CREATED.format(f=1, port=5201, alg="cubic"), CREATED.format(f=2, port=5202, alg="bbr"),
               RELEASED.format(f=1, d=30000, b=0), RELEASED.format(f=2, d=10000, b=9000),
               SUMMARY.format(c=31000, f=9000, g=0))
    flows = [parse_flow("kernel:cubic"), parse_flow("ccp:cubic@5"), parse_flow("ccp:bbr@10")]
    entries = [{**f.as_json(k), "port": 5200 + k} for k, f in enumerate(flows)]
    run_level = {**control_evidence(log, ValidityPolicy(max_fallback_share=0.5)), "valid": True}
    out, control = _with_flow_control(entries, flows, log, ValidityPolicy(), run_level)
    assert "control" not in out[0], "a kernel flow has no ccp evidence"
    assert out[1]["control"]["valid"] and out[1]["control"]["algorithm"] == "cubic"
    assert out[2]["control"]["fallback_share"] == 0.9
    assert not control["valid"] and "flow 2 (ccp:bbr, port 5202)" in control["reason"] and "9000 of 10000" in control["reason"]


def test_the_runner_waits_for_release_records_only_while_some_are_missing(tmp_path):
    from ccplab.control import unreleased_flows
    from ccplab.run import _wait_for_releases

    log = _log(tmp_path, CREATED.format(f=1, port=5201, alg="cubic"), CREATED.format(f=2, port=5202, alg="bbr"),
               RELEASED.format(f=2, d=10, b=0))
    assert unreleased_flows(log) == {1}
    assert unreleased_flows(tmp_path / "absent.log"), "an unreadable log shows no flow released"
    started = time.monotonic()
    assert not _wait_for_releases(log, 0.2)
    assert time.monotonic() - started >= 0.2, "waited the whole timeout for flow 1"
    with log.open("a") as f:
        f.write(RELEASED.format(f=1, d=20, b=0))
    assert unreleased_flows(log) == set()
    started = time.monotonic()
    assert _wait_for_releases(log, 5.0)
    assert time.monotonic() - started < 1.0, "no wait once every flow is released"
