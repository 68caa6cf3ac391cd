"""Bad input to the runner gets a clear error, exit status 2, and writes nothing."""

from __future__ import annotations

import json
import subprocess

import pytest

import transient.steps
from ccplab import cli, run
from ccplab import scenario as sc
from ccplab.cca import parse_cca
from ccplab.compare import prepare_out_dir
from ccplab.errors import CcplabError
from ccplab.scenario import Step


def test_parse_cca_accepts_both_kinds():
    assert parse_cca("kernel:cubic").socket_cc == "cubic"
    ccp = parse_cca("ccp:reno")
    assert (ccp.kind, ccp.name, ccp.socket_cc, ccp.slug) == ("ccp", "reno", "ccp", "ccp-reno")


@pytest.mark.parametrize("text, fragment", [
    ("cubic", "expected kernel:NAME"),
    ("tcp:cubic", "expected kernel:NAME"),
    ("kernel:", "expected kernel:NAME"),
    ("kernel:nosuchcc", "this kernel offers"),
    ("ccp:nosuchalg", "the suite has: "),
    ("kernel:ccp", "datapath itself"),
])
def test_parse_cca_rejects(text, fragment):
    with pytest.raises(CcplabError, match=fragment):
        parse_cca(text)


def test_unknown_ccp_algorithm_lists_the_suite():
    with pytest.raises(CcplabError) as err:
        parse_cca("ccp:nosuchalg")
    assert "reno" in str(err.value) and "cubic" in str(err.value)


def test_the_runner_uses_the_one_step_parser():
    assert Step is transient.steps.Step  # scenario has no parser of its own
    assert sc.parse_step_args(["10:12:4", "0:0:12"]) == (Step(0, 0, 12), Step(10, 12, 4))


@pytest.mark.parametrize("texts, fragment", [
    (["0:12"], "expected AT_S:FROM_MBPS:TO_MBPS"),
    (["a:0:12"], "not a number"),
    (["0:-1:12"], ">= 0"),
    ([""], "bad step"),
    (["1:0:12", "1:12:4"], "two steps at 1 s"),
])
def test_step_args_rejected_with_the_option_named(texts, fragment):
    with pytest.raises(CcplabError, match=fragment) as err:
        sc.parse_step_args(texts)
    assert str(err.value).startswith("--step: ")


def test_cli_bad_step_exits_2(tmp_path, capsys):
    out = tmp_path / "cmp"
    code = cli.main(["compare", "--cca", "kernel:cubic", "--step", "0:12", "--out", str(out)])
    assert code == 2
    assert "--step: bad step '0:12'" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("extra, fragment", [
    (["--runs", "0"], "--runs must be >= 1, got 0"),
    (["--duration-s", "0"], "--duration-s must be >= 1"),
    (["--queue-packets", "0"], "--queue-packets must be >= 1"),
    (["--step", "0:0:12", "--step", "30:12:4"], "step 30:12:4 is at 30 s, not before the end of the 20 s run"),
])
def test_compare_refuses_bad_input_before_creating_anything(tmp_path, capsys, extra, fragment):
    """`compare --runs 0` is refused and leaves no output directory."""
    out = tmp_path / "new" / "cmp"
    code = cli.main(["compare", "--cca", "kernel:cubic", "--out", str(out), *extra])
    assert code == 2
    assert fragment in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_compare_step_whose_from_is_wrong_creates_nothing(tmp_path, capsys, needs_root):
    """ccplab-trace checks FROM against the rate in effect; the trace is generated before --out exists."""
    out = tmp_path / "cmp"
    code = cli.main(["compare", "--cca", "kernel:cubic", "--step", "0:0:12", "--step", "5:6:4",
                     "--duration-s", "10", "--out", str(out)])
    assert code == 2
    assert "the rate before 5 s is 12 Mbit/s, not 6" in capsys.readouterr().err
    assert not out.exists()


def test_generated_trace_has_every_step(tmp_path, needs_binaries):
    steps = sc.parse_step_args(["0:0:12", "2:12:4"])
    trace = sc.generate_step_trace(tmp_path / "t.trace", steps, duration_s=4, sigma_mbps=0.0, seed=1)
    stamps = [int(x) for x in trace.read_text().split()]
    first, second = sum(t <= 2000 for t in stamps), sum(t > 2000 for t in stamps)
    # 1 packet/ms at 12 Mbit/s, then 1/3 packet/ms to the end: the flow's 4 s plus the tail
    # that keeps a looping trace from jumping back to its first step during the flow
    assert max(stamps) == (4 + sc.TRACE_TAIL_S) * 1000
    assert first == 2000 and 665 * (2 + sc.TRACE_TAIL_S) // 2 <= second <= 668 * (2 + sc.TRACE_TAIL_S) // 2
    meta = json.loads(sc.sidecar_path(trace).read_text())
    assert meta["steps"] == [s.as_dict() for s in steps]
    assert sc.trace_annotations(trace)["steps"] == list(steps)


def test_demo_scenario_has_both_kinds_of_step():
    assert [s.kind for s in sc.DEMO_STEPS] == ["up", "down"]
    assert [str(s) for s in sc.DEMO_STEPS] == ["0:0:12", "6:12:4"]
    assert sc.DEMO_DURATION_S == 12


def test_cli_unknown_cca_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli.main(["run", "--cca", "ccp:nosuch", "--trace", str(tmp_path / "x"), "--one-way-delay-ms", "25",
                     "--queue-packets", "40", "--duration-s", "5", "--out", str(out)])
    assert code == 2
    assert "unknown CCP algorithm 'nosuch'" in capsys.readouterr().err
    assert not out.exists()


def test_out_dir_with_content_is_refused(tmp_path):
    (tmp_path / "keep.txt").write_text("earlier results")
    with pytest.raises(CcplabError, match="not empty"):
        prepare_out_dir(tmp_path)
    assert (tmp_path / "keep.txt").read_text() == "earlier results"


def test_preflight_no_root(monkeypatch):
    monkeypatch.setattr(run.os, "geteuid", lambda: 1000)
    with pytest.raises(CcplabError, match="needs root"):
        run.preflight(parse_cca("kernel:cubic"))


def test_preflight_missing_iperf3(monkeypatch, tmp_path, needs_binaries):
    monkeypatch.setattr(run.os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no iperf3 on PATH
    with pytest.raises(CcplabError, match="iperf3 is not installed"):
        run.preflight(parse_cca("kernel:cubic"))


def test_preflight_no_bpf(monkeypatch, tmp_path, needs_binaries):
    monkeypatch.setattr(run.os, "geteuid", lambda: 0)
    monkeypatch.setattr(run, "BTF_VMLINUX", tmp_path / "no-btf")
    with pytest.raises(CcplabError, match="no BPF"):
        run.preflight(parse_cca("ccp:reno"))


def test_preflight_datapath_already_running(monkeypatch, needs_binaries):
    monkeypatch.setattr(run.os, "geteuid", lambda: 0)
    monkeypatch.setattr(run, "kernel_ccs", lambda: ["reno", "cubic", "ccp"])
    with pytest.raises(CcplabError, match="already registered"):
        run.preflight(parse_cca("ccp:reno"))


def test_bad_trace_is_rejected_before_anything_runs(tmp_path, capsys, needs_root):
    trace = tmp_path / "bad.trace"
    trace.write_text("1\n2\nthree\n")
    out = tmp_path / "run"
    code = cli.main(["run", "--cca", "kernel:cubic", "--trace", str(trace), "--one-way-delay-ms", "25",
                     "--queue-packets", "40", "--duration-s", "5", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert "bad.trace" in err and "3" in err
    assert not out.exists() and not list(tmp_path.glob(".run.partial*"))


def test_existing_run_dir_is_not_overwritten(tmp_path, capsys, needs_root):
    trace = tmp_path / "t.trace"
    trace.write_text("1\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / "metadata.json").write_text("{}")
    code = cli.main(["run", "--cca", "kernel:cubic", "--trace", str(trace), "--one-way-delay-ms", "25",
                     "--queue-packets", "40", "--duration-s", "5", "--out", str(out)])
    assert code == 2
    assert "already exists" in capsys.readouterr().err
    assert (out / "metadata.json").read_text() == "{}"


NUMERIC_OPTIONS = {  # command line before the option, option: every command's numbers
    ("run", "--one-way-delay-ms"), ("run", "--queue-packets"), ("run", "--duration-s"),
    ("compare", "--runs"), ("compare", "--sigma-mbps"), ("compare", "--seed"), ("compare", "--duration-s"),
    ("compare", "--one-way-delay-ms"), ("compare", "--queue-packets"),
    ("demo", "--runs"), ("demo", "--duration-s"),
    ("sweep", "--workers"), ("fidelity", "--runs"), ("fidelity", "--duration-s"),
    ("contest", "--runs"), ("contest", "--duration-s"), ("contest", "--one-way-delay-ms"),
    ("coexist", "--runs"), ("coexist", "--second-start-s"), ("coexist", "--capacity-mbps"),
    ("coexist", "--one-way-delay-ms"), ("coexist", "--queue-bdp"), ("coexist", "--queue-packets"),
    ("coexist", "--duration-s"), ("analyze", "--rtt-ms"), ("analyze", "--capacity-mbps"),
    ("analyze", "--fair-delta"), ("analyze", "--workers"),
}
EXTREMES = ["-1", str(2**63), "nan", "inf", "1e9", "1000000000", "abc"]


def _base_args(command: str, tmp_path) -> list[str]:
    return {
        "run": ["run", "--cca", "kernel:cubic", "--trace", str(tmp_path / "t"), "--one-way-delay-ms", "1",
                "--queue-packets", "1", "--duration-s", "1", "--out", str(tmp_path / "out")],
        "compare": ["compare", "--cca", "kernel:cubic", "--out", str(tmp_path / "out")],
        "demo": ["demo", "--out", str(tmp_path / "out")],
        "sweep": ["sweep", str(tmp_path / "s.toml"), "--out", str(tmp_path / "out")],
        "fidelity": ["fidelity", "--out", str(tmp_path / "out")],
        "contest": ["contest", "--out", str(tmp_path / "out")],
        "coexist": ["coexist", "--cca", "kernel:cubic", "--out", str(tmp_path / "out")],
        "analyze": ["analyze", str(tmp_path / "log")],
    }[command]


@pytest.mark.parametrize("command, option", sorted(NUMERIC_OPTIONS))
@pytest.mark.parametrize("value", EXTREMES)
def test_every_number_at_its_extremes_gets_one_line_naming_it(tmp_path, capsys, command, option, value):
    """Every option meets values no run can use: exit 2, one line naming it, nothing written (0 where it is
    out of range is in test_compare_refuses_bad_input_before_creating_anything)."""
    if value == "-1" and option == "--queue-bdp":
        value = "0"  # the queue-bdp group refuses 0 as it refuses -1
    if option == "--seed" and value == "1000000000":
        pytest.skip("a seed of 1e9 is valid (seeds are 32-bit)")
    code = cli.main([*_base_args(command, tmp_path), option, value])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, (command, option, value, err)
    assert len(lines) == 1 and lines[0].startswith("ccplab: error: ") and option in lines[0], err
    assert list(tmp_path.iterdir()) == [], "nothing was written"


def test_a_second_ccp_run_is_refused_while_one_holds_the_host(tmp_path, capsys, needs_binaries):
    """Two ccp runs started together: the one that does not hold the claim is refused before it checks,
    creates or unlinks anything (the Portus socket of the other is left alone)."""
    from ccplab.plumbing.locks import ccp_host_claim

    trace = tmp_path / "t.trace"
    trace.write_text("1\n")
    out = tmp_path / "run"
    with ccp_host_claim():
        code = cli.main(["run", "--cca", "ccp:reno", "--trace", str(trace), "--one-way-delay-ms", "5",
                         "--queue-packets", "10", "--duration-s", "2", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "another ccp run" in err and "one ccp run per host at a time" in err, err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["t.trace"]
    with ccp_host_claim():  # released when the holder let go
        pass


def test_out_on_a_read_only_file_system_is_one_line(tmp_path, capsys, needs_root):
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], check=True)
    try:
        code = cli.main(["compare", "--cca", "kernel:cubic", "--runs", "1", "--duration-s", "2",
                         "--out", str(ro / "cmp")])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "Read-only file system" in err and str(ro) in err, err
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_analyze_names_a_log_cut_mid_line_and_no_report_writes_nothing(tmp_path, capsys):
    lines = ["# mahimahi mm-link (ccplab-link) [t] > log", "# base timestamp: 0"]
    lines += [f"{t} # 1504\n{t} + 1504\n{t} - 1504 1" for t in range(1, 400)]
    log = tmp_path / "uplink.log"
    log.write_text("\n".join(lines) + "\n")
    assert cli.main(["analyze", str(log), "--no-report"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["uplink.log"], "--no-report: no cache beside the log"
    capsys.readouterr()
    log.write_text("\n".join(lines) + "\n400 + 15")  # a killed run: the last line lost its end
    assert cli.main(["analyze", str(log), "--no-report"]) == 2
    err = capsys.readouterr().err
    assert f"{log}:{len(lines) + 2 * 399 + 1}: the last line has no newline" in err, err
    assert err.count("\n") == 1
