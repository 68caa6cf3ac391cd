"""External Portus algorithms (``portus:NAME=COMMAND``): parsing, refusal of bad input before anything
starts, the daemon and datapath command lines, sweep files, and the labels in metadata and reports.
No network: test_upstream.py runs real upstream binaries through the runner."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ccplab import cli, coexist
from ccplab.cca import parse_cca, split_cca_list
from ccplab.errors import CcplabError
from ccplab.flows import FlowSpec, flow_label_text, parse_flow, parse_flows
from ccplab.run import algorithm_argv, datapath_argv
from ccplab.sweepfile import load_sweep

from netlab import write_sweep


@pytest.fixture
def program(tmp_path) -> Path:
    """An executable file standing in for a Portus binary (never run here)."""
    path = tmp_path / "bin" / "my-alg"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_an_external_algorithm_is_labelled_by_its_name_and_keeps_its_command(program):
    cca = parse_cca(f"portus:my-alg=RUST_LOG=debug {program} --per_ack -i 10")
    assert (str(cca), cca.base, cca.slug, cca.socket_cc) == ("portus:my-alg", "portus:my-alg", "portus-my-alg", "ccp")
    assert cca.external and cca.uses_datapath and cca.params == ()
    assert cca.command == (str(program), "--per_ack", "-i", "10") and dict(cca.env) == {"RUST_LOG": "debug"}
    assert cca.external_json() == {"kind": "external", "command": [str(program), "--per_ack", "-i", "10"],
                                   "env": {"RUST_LOG": "debug"}, "portus_socket": "/tmp/ccp/portus"}
    assert parse_cca(cca.spec) == cca, "the spec parses back to the same algorithm"
    assert parse_cca("kernel:cubic").external_json() is None


def test_a_relative_program_is_made_absolute_and_a_bare_name_is_looked_up_on_path(program, monkeypatch):
    monkeypatch.chdir(program.parent.parent)
    assert parse_cca("portus:a=bin/my-alg").command == (str(program),)
    monkeypatch.setenv("PATH", f"{program.parent}{os.pathsep}{os.environ['PATH']}")
    assert parse_cca("portus:a=my-alg --x").command == (str(program), "--x")


@pytest.mark.parametrize("text, says", [
    ("portus:x", "no COMMAND"),
    ("portus:x=", "no COMMAND"),
    ("portus:x=   ", "no COMMAND"),
    ("portus:x=RUST_LOG=debug", "names no program"),
    ("portus:=PROGRAM", "NAME ''"),
    ("portus:a b=PROGRAM", "NAME 'a b'"),
    ("portus:-x=PROGRAM", "NAME '-x'"),
    ("portus:x=/nonexistent/alg", "not found"),
    ("portus:x=no-such-program-anywhere", "not found on PATH"),
    ("portus:x=NOTEXEC", "is not executable"),
    ("portus:x='unclosed", "cannot be split"),
])
def test_bad_external_algorithms_are_refused_in_one_line(text, says, program, tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("not a program\n")
    text = text.replace("NOTEXEC", str(plain)).replace("PROGRAM", str(program))
    with pytest.raises(CcplabError) as err:
        parse_cca(text)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_name_of_the_suite_is_refused(program, needs_binaries):
    with pytest.raises(CcplabError, match=r"portus:reno: 'reno' is an algorithm of the suite \(ccp:reno\)"):
        parse_cca(f"portus:reno={program}")


def test_the_cli_refuses_bad_input_before_creating_anything(program, tmp_path, capsys):
    out = tmp_path / "out"
    trace = tmp_path / "t.trace"
    trace.write_text("1\n")
    for cca, says in [("portus:x", "no COMMAND"), (f"portus:x={tmp_path}/missing", "not found")]:
        assert cli.main(["run", "--cca", cca, "--trace", str(trace), "--one-way-delay-ms", "25",
                         "--queue-packets", "40", "--duration-s", "5", "--out", str(out)]) == 2
        assert cli.main(["compare", "--cca", cca, "--runs", "1", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 2 and all(line.startswith("ccplab: error: ") and says in line for line in err), err
    assert not out.exists()


def test_a_command_with_commas_is_one_cca():
    assert split_cca_list(["kernel:cubic,ccp:reno", "portus:a=/x/alg --list=1,2", " portus:b=/y "]) == [
        "kernel:cubic", "ccp:reno", "portus:a=/x/alg --list=1,2", "portus:b=/y"]


def test_flow_suffixes_follow_the_command(program):
    f = parse_flow(f"portus:a={program} --per_ack@10:20+30")
    assert (str(f), f.start_s, f.stop_s, f.extra_delay_ms) == ("portus:a@10:20+30", 10, 20, 30)
    assert f.cca.command == (str(program), "--per_ack")
    assert flow_label_text(f"portus:a={program} --x@5") == "portus:a@5"
    assert parse_flow(f"portus:a={program}").start_s == 0
    assert parse_flow(f"portus:a={program}").as_json(0)["external"]["command"] == [str(program)]


def test_an_external_algorithm_shares_a_run_only_with_kernel_flows_and_itself(program, tmp_path):
    other = tmp_path / "bin" / "other"
    other.write_bytes(program.read_bytes())
    other.chmod(0o755)
    flows = parse_flows([f"portus:a={program}", "kernel:cubic@5", f"portus:a={program}@8"])
    assert [str(f) for f in flows] == ["portus:a", "kernel:cubic@5", "portus:a@8"]
    for second in ["ccp:reno@5", f"portus:b={program}@5", f"portus:a={other}@5"]:
        with pytest.raises(CcplabError, match="each needs its own Portus daemon"):
            parse_flows([f"portus:a={program}", second])


def test_coexist_refuses_a_pair_that_cannot_share_a_run_before_creating_anything(program, tmp_path):
    from ccplab.compare import setup_comparison

    plan = coexist.make_plan([parse_cca(f"portus:a={program}"), parse_cca("kernel:cubic")], 5, 10)
    assert ["portus:a", "kernel:cubic", "portus:a vs portus:a@5", "portus:a vs kernel:cubic@5"] == [
        " vs ".join(map(str, e)) for e in plan.entries()[:4]]
    with pytest.raises(CcplabError, match="flows portus:a and ccp:reno@5: each needs its own Portus daemon"):
        coexist.make_plan([parse_cca(f"portus:a={program}"), parse_cca("ccp:reno")], 5, 10)
    out = tmp_path / "co"
    with pytest.raises(CcplabError, match="flows portus:a and ccp:reno@5: each needs its own Portus daemon"):
        setup_comparison([plan.entries()[0], (FlowSpec(parse_cca(f"portus:a={program}")),
                                              FlowSpec(parse_cca("ccp:reno"), start_s=5))], 1, out, 25, 40, 10)
    assert not out.exists()


def test_the_daemon_is_the_command_and_the_datapath_finds_its_socket(program):
    flows = parse_flows([f"portus:up=RUST_LOG=debug {program} --per_ack", "kernel:cubic@5"])
    assert algorithm_argv(flows) == ("portus:up", [str(program), "--per_ack"])
    argv = datapath_argv(flows, Path("/run/x.json"))
    assert argv[1:] == ["--congalg", "up", "--rule", "dport=5201:up", "--ready-file", "/run/x.json"]
    named = parse_flows([f"portus:up={program} --ipc-name mine"])
    assert named[0].cca.portus_socket == Path("/tmp/ccp/mine")
    assert datapath_argv(named, Path("/r"))[-4:] == ["--portus-socket", "/tmp/ccp/mine", "--ready-file", "/r"]
    assert parse_cca(f"portus:up={program} --ipc-name=eq").portus_socket == Path("/tmp/ccp/eq")


def test_a_sweep_file_runs_external_algorithms_with_their_commands(program, tmp_path):
    rel = os.path.relpath(program, tmp_path)
    path = write_sweep(tmp_path, f"""
name = "ext"
ccas = ["kernel:cubic", "portus:mine=RUST_LOG=debug {rel} --per_ack"]
flows = [["kernel:cubic", "portus:mine={rel}@5"]]
[scenario]
duration_s = 10
""")
    sweep = load_sweep(path)
    assert sweep.ccas == ("kernel:cubic", "portus:mine", "kernel:cubic portus:mine@5")
    runs = {r.cca: r for r in sweep.plan()}
    assert runs["portus:mine"].cca_slug == "portus-mine"
    # a relative program is taken from the sweep file's directory, as its traces are
    assert runs["portus:mine"].flow_texts == (f"portus:mine=RUST_LOG=debug {program} --per_ack",)
    assert runs["kernel:cubic portus:mine@5"].flow_texts == ("kernel:cubic", f"portus:mine={program}@5")
    from ccplab.sweep import parse_entry, payload

    p = payload(sweep, tmp_path / "out", runs["kernel:cubic portus:mine@5"], "dest")
    assert p["cca"] == "kernel:cubic portus:mine@5"
    flows = parse_entry(p["flows"])
    assert [str(f) for f in flows] == ["kernel:cubic", "portus:mine@5"] and flows[1].cca.command == (str(program),)
    assert [str(f) for f in parse_entry("kernel:cubic kernel:reno@5")] == ["kernel:cubic", "kernel:reno@5"]


def test_the_report_names_external_algorithms(tmp_path):
    from transient import write_report
    from transient.tests.synthetic import synthetic_analysis

    a = synthetic_analysis(labels=["kernel:cubic", "ccp:reno"], runs=2)
    runs, steps = a.runs.copy(), a.steps.copy()
    for frame in (runs, steps):
        frame.loc[frame["cca"] == "ccp:reno", ["cca", "label"]] = "portus:upstream-reno"
    text = write_report(tmp_path / "r", runs, steps, None, n_resamples=499).read_text()
    assert "External algorithms: <b>portus:upstream-reno</b>" in text
    plain = write_report(tmp_path / "p", a.runs, a.steps, None, n_resamples=499).read_text()
    assert "External algorithms" not in plain


def test_the_docs_table_is_the_summary_of_the_analysis(tmp_path):
    from ccplab.mdtable import main, markdown_table

    rows = []
    for label, (thr, rtx) in {"portus:upstream-reno": (22.81, 310.0), "ccp:reno": (22.5, 120.0)}.items():
        rows += [(label, "s", "throughput_mbps", 3, 3, thr, thr - 0.1, thr + 0.1),
                 (label, "s", "p95_queueing_delay_ms", 3, 3, 48.0, 47.0, 49.0),
                 (label, "s", "retransmits", 3, 3, rtx, rtx - 10, rtx + 10)]
    import pandas as pd

    pd.DataFrame(rows, columns=["label", "scenario", "metric", "n", "n_valid", "median", "q1", "q3"]).to_csv(
        tmp_path / "summary_runs.csv", index=False)
    table = markdown_table(tmp_path, labels=["portus:upstream-reno", "ccp:reno"]).splitlines()
    assert table[0] == "| CCA | throughput (Mbit/s) | p95 queueing delay (ms) | retransmits | runs |"
    assert table[2] == "| portus:upstream-reno | 22.8 [22.7-22.9] | 48 [47-49] | 310 [300-320] | 3 |"
    assert table[3].startswith("| ccp:reno | 22.5 ")
    assert main([str(tmp_path), "--label", "kernel:reno"]) == 2
    with pytest.raises(CcplabError, match="has no metric power"):
        markdown_table(tmp_path, metrics=["power"])


def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_an_algorithm_that_never_binds_its_socket_is_named_with_the_socket_it_should_bind(tmp_path, monkeypatch):
    import ccplab.run as run

    monkeypatch.setattr(run, "READY_TIMEOUT_S", 0.5)
    silent = _script(tmp_path, "silent", "exec sleep 30")
    ipc = f"ccplab-test-{os.getpid()}"  # its own name: the host's /tmp/ccp/portus is left alone
    flows = parse_flows([f"portus:silent={silent} --ipc-name {ipc}"])
    with pytest.raises(CcplabError) as err:
        run._start_algorithm(flows, tmp_path)
    assert f"never bound its Portus socket /tmp/ccp/{ipc}" in str(err.value)
    assert "was not ready after" in str(err.value)


def test_an_algorithm_that_exits_before_it_is_ready_is_named_with_its_status_and_log(tmp_path):
    import ccplab.run as run

    failing = _script(tmp_path, "failing", "echo 'error: bad argument --nope' >&2; exit 3")
    flows = parse_flows([f"portus:failing={failing} --nope --ipc-name ccplab-test-{os.getpid()}"])
    with pytest.raises(CcplabError) as err:
        run._start_algorithm(flows, tmp_path)
    assert "portus:failing exited with status 3 before it was ready" in str(err.value)
    assert "error: bad argument --nope" in str(err.value)
