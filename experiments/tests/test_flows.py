"""Several flows in one run: the --flow syntax, what is refused before anything starts, and how the
daemons are told which flow is whose (no network; the real runs are in test_competing_flows.py)."""

from __future__ import annotations

import re

import pytest

from ccplab import cli
from ccplab.cca import parse_cca
from ccplab.errors import CcplabError
from ccplab.flows import (BASE_PORT, MAX_FLOWS, FlowSpec, check_flows, flows_label, flows_slug, parse_flow,
                          parse_flows)
from ccplab.run import algorithm_argv, datapath_argv


def test_a_flow_has_a_cca_and_optional_timing_and_delay():
    f = parse_flow("kernel:cubic")
    assert (str(f.cca), f.start_s, f.stop_s, f.extra_delay_ms) == ("kernel:cubic", 0, None, 0)
    f = parse_flow("kernel:cubic@10")
    assert (f.start_s, f.stop_s) == (10, None)
    f = parse_flow("kernel:reno@20:40")
    assert (f.start_s, f.stop_s, f.length_s(60)) == (20, 40, 20)
    f = parse_flow("kernel:cubic@5+40")
    assert (f.start_s, f.extra_delay_ms) == (5, 40)
    f = parse_flow("kernel:cubic+40")
    assert (f.start_s, f.extra_delay_ms, f.length_s(30)) == (0, 40, 30)


def test_ccp_flows_keep_their_parameters(needs_binaries):
    f = parse_flow("ccp:cubic:beta=0.8@20:40+10")
    assert (f.cca.name, f.cca.param_dict, f.start_s, f.stop_s, f.extra_delay_ms) == (
        "cubic", {"beta": "0.8"}, 20, 40, 10)
    assert str(f) == "ccp:cubic:beta=0.8@20:40+10", "a flow prints as it is written"


@pytest.mark.parametrize("text, fragment", [
    ("kernel:cubic@-1", "@START_S"),
    ("kernel:cubic@1.5", "whole seconds"),
    ("kernel:cubic@20:10", "STOP_S 10 must be after START_S 20"),
    ("kernel:cubic@5:5", "must be after"),
    ("kernel:cubic+x", "+DELAY_MS must be a whole number"),
    ("kernel:cubic+20000", "at most 10000"),
    ("kernel:nosuchcc@5", "unknown kernel CCA"),
    ("cubic@5", "expected kernel:NAME"),
])
def test_bad_flows_are_refused_naming_the_flow(text, fragment):
    with pytest.raises(CcplabError, match=re.escape(fragment)) as err:
        parse_flow(text)
    assert f"--flow {text!r}" in str(err.value)


def test_unknown_algorithm_flag_in_a_flow_is_refused(needs_binaries):
    with pytest.raises(CcplabError, match="has no parameter 'nosuch'") as err:
        parse_flow("ccp:cubic:nosuch=1@10")
    assert "ccp:cubic:nosuch=1@10" in str(err.value)


def test_sets_of_flows_are_checked_together(needs_binaries):
    cubic = parse_cca("kernel:cubic")
    with pytest.raises(CcplabError, match="no flow given"):
        check_flows([])
    with pytest.raises(CcplabError, match=f"at most {MAX_FLOWS}"):
        check_flows([FlowSpec(cubic)] * (MAX_FLOWS + 1))
    with pytest.raises(CcplabError, match="no flow starts at 0"):
        check_flows([FlowSpec(cubic, start_s=3)])
    with pytest.raises(CcplabError, match="starts at 30 s, not before the end of the 30 s run"):
        check_flows([FlowSpec(cubic), FlowSpec(cubic, start_s=30)], duration_s=30)
    with pytest.raises(CcplabError, match="stops at 40 s, after the end of the 30 s run"):
        check_flows([FlowSpec(cubic), FlowSpec(cubic, start_s=10, stop_s=40)], duration_s=30)
    with pytest.raises(CcplabError, match="cannot tell two tunings of ccp:cubic apart") as err:
        parse_flows(["ccp:cubic", "ccp:cubic:beta=0.8@10"])
    assert "ccp:cubic:beta=0.8@10" in str(err.value), "the message names the flows"
    check_flows([FlowSpec(cubic)] * MAX_FLOWS, duration_s=30)  # the most a run holds is fine


def test_one_daemon_hosts_every_ccp_algorithm_and_the_datapath_routes_by_port(needs_binaries, tmp_path):
    flows = parse_flows(["kernel:cubic", "ccp:cubic:beta=0.8@10", "ccp:bbr@20", "ccp:cubic:beta=0.8@25"])
    _, argv = algorithm_argv(flows)
    assert argv[1:4] == ["cubic", "--beta", "0.8"], argv
    assert argv[argv.index("--also") + 1] == "bbr"
    assert argv.count("--also") == 1, "each algorithm is hosted once"
    dp = datapath_argv(flows, tmp_path / "ready.json")
    rules = [dp[k + 1] for k, a in enumerate(dp) if a == "--rule"]
    assert rules == [f"dport={BASE_PORT + 1}:cubic", f"dport={BASE_PORT + 2}:bbr", f"dport={BASE_PORT + 3}:cubic"]
    assert dp[dp.index("--congalg") + 1] == "cubic"


def test_one_ccp_flow_runs_its_algorithm_as_before(needs_binaries, tmp_path):
    _, argv = algorithm_argv(parse_flows(["ccp:reno"]))
    assert "--also" not in argv and argv[-2:] == ["--ipc", "unix"]


def test_labels_and_directory_names():
    one = parse_flows(["kernel:cubic"])
    assert (flows_label(one), flows_slug(one)) == ("kernel:cubic", "kernel-cubic")
    two = parse_flows(["kernel:cubic", "kernel:reno@10:20+30"])
    assert flows_label(two) == "kernel:cubic vs kernel:reno@10:20+30"
    assert flows_slug(two) == "kernel-cubic__kernel-reno@10-20+30"


def test_run_refuses_bad_flows_before_creating_anything(tmp_path, capsys, needs_binaries):
    trace = tmp_path / "t.trace"
    trace.write_text("1\n")
    out = tmp_path / "run"
    code = cli.main(["run", "--flow", "kernel:cubic", "--flow", "kernel:cubic@40", "--trace", str(trace),
                     "--one-way-delay-ms", "10", "--queue-packets", "40", "--duration-s", "30", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "flow kernel:cubic@40: starts at 40 s" in err, err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.trace"], "nothing was written"


def test_run_takes_either_cca_or_flows(tmp_path, capsys):
    code = cli.main(["run", "--cca", "kernel:cubic", "--flow", "kernel:reno", "--trace", "x", "--one-way-delay-ms",
                     "1", "--queue-packets", "1", "--duration-s", "1", "--out", str(tmp_path / "o")])
    assert code == 2
    assert capsys.readouterr().err == "ccplab: error: argument --flow: not allowed with argument --cca\n"


def test_sweep_files_take_sets_of_competing_flows(tmp_path):
    from ccplab.sweepfile import load_sweep
    from netlab import write_sweep

    path = write_sweep(tmp_path, 'name = "mix"\nccas = ["kernel:cubic"]\n'
                                 'flows = [["kernel:cubic", "kernel:reno@10"], ["kernel:reno", "kernel:cubic@5:15"]]\n'
                                 '[scenario]\nduration_s = 20\n')
    sweep = load_sweep(path)
    assert sweep.ccas == ("kernel:cubic", "kernel:cubic kernel:reno@10", "kernel:reno kernel:cubic@5:15")
    run_ids = {r.run_id for r in sweep.plan()}
    assert "step-0-12-at-0s-sigma2_owd25_q40_d20/kernel-cubic-kernel-reno-10/run-1" in run_ids, run_ids


@pytest.mark.parametrize("flows, fragment", [
    ('"kernel:cubic"', "must be a list of flow sets"),
    ('[[]]', "must be a list of flow sets"),
    ('[["kernel:cubic kernel:reno"]]', "must be a list of flow sets"),
])
def test_bad_flow_sets_in_a_sweep_file_are_refused(tmp_path, flows, fragment):
    from ccplab.sweepfile import load_sweep
    from netlab import write_sweep

    with pytest.raises(CcplabError, match=fragment) as err:
        load_sweep(write_sweep(tmp_path, f'name = "mix"\nflows = {flows}\n[scenario]\nduration_s = 20\n'))
    assert "flows" in str(err.value)


def test_coexist_plan_and_queue_in_bdp(needs_binaries):
    from ccplab.coexist import make_plan, queue_packets_for

    cubic, reno = parse_cca("kernel:cubic"), parse_cca("kernel:reno")
    plan = make_plan([cubic, reno], second_start_s=10, duration_s=30)
    assert [flows_label(e) for e in plan.entries()] == [
        "kernel:cubic", "kernel:reno", "kernel:cubic vs kernel:cubic@10", "kernel:cubic vs kernel:reno@10",
        "kernel:reno vs kernel:cubic@10", "kernel:reno vs kernel:reno@10"]
    # 24 Mbit/s x 50 ms = 150 kB = 100 packets of 1500 B
    assert queue_packets_for(1, 24, 25) == 100 and queue_packets_for(8, 24, 25) == 800
    with pytest.raises(CcplabError, match="--queue-bdp must be a number > 0"):
        queue_packets_for(float("nan"), 24, 25)
    with pytest.raises(CcplabError, match="given twice"):
        make_plan([cubic, cubic], 10, 30)
    with pytest.raises(CcplabError, match="before the end of the 30 s run"):
        make_plan([cubic], 30, 30)
