"""Bad input to the runner gets a clear error, exit status 2, and writes nothing."""

from __future__ import annotations

import pytest

from ccplab import cca as cca_mod
from ccplab import cli, run
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


@pytest.mark.parametrize("text", ["0:12", "a:0:12", "0:-1:12", ""])
def test_step_parse_rejects(text):
    with pytest.raises(CcplabError, match="bad step"):
        Step.parse(text)


def test_step_parse():
    assert Step.parse("2.5:12:48") == Step(2.5, 12.0, 48.0)


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
