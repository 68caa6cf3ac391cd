"""The registry comes from ``ccp-algorithms --list-json`` (the suite declared once, in
Rust), and CCA parameters are validated against each algorithm's own flags."""

from __future__ import annotations

import subprocess

import pytest

from ccplab import cli, registry
from ccplab.cca import parse_cca
from ccplab.errors import CcplabError


def test_registry_is_the_binarys_listing():
    algos = registry.load_registry()
    assert list(algos)[:5] == ["reno", "cubic", "bbr", "copa", "vegas"]  # the standard suite first
    bbr = algos["bbr"]
    assert bbr.controls == "cwnd+rate" and algos["reno"].controls == "cwnd+rate"  # reno paces as the kernel
    assert algos["vegas"].controls == "cwnd"
    assert bbr.command == ("ccp-algorithms", "bbr")
    assert "bw-window-rounds" in bbr.parameter_names()
    assert "ipc" not in bbr.parameter_names(), "the runner owns the IPC flags"
    # Each entry is exactly what the algorithm says about itself.
    own = subprocess.run(bbr.argv() + ["--describe-json"], capture_output=True, text=True, check=True)
    assert registry.json.loads(own.stdout) == bbr.describe()


def test_fold_program_follows_parameters():
    copa = registry.lookup("copa")
    text = copa.fold_program()
    assert "(/ Flow.rtt_sample_us 2)" in text, "two reports per RTT"
    assert "(report)" in text


def test_cca_parameters_parse_label_and_slug():
    cca = parse_cca("ccp:cubic:beta=0.8:hystart_detect=delay")
    assert str(cca) == "ccp:cubic:beta=0.8:hystart-detect=delay"
    assert cca.param_dict == {"beta": "0.8", "hystart-detect": "delay"}
    assert cca.slug == "ccp-cubic-beta-0.8-hystart-detect-delay"
    argv = registry.lookup("cubic").argv(cca.param_dict)
    assert argv[-4:] == ["--beta", "0.8", "--hystart-detect", "delay"]
    assert parse_cca("ccp:reno").params == ()
    assert cca.base == "ccp:cubic"


@pytest.mark.parametrize("text, fragments", [
    ("ccp:cubic:gamma=2", ["no parameter 'gamma'", "allowed: ", "beta", "hystart"]),
    ("ccp:cubic:beta=1.5", ["--beta must be a number in (0, 1)"]),
    ("ccp:copa:delta=abc", ["ccp:copa rejected its parameters", "delta"]),
    ("ccp:cubic:beta", ["expected NAME=VALUE"]),
    ("ccp:cubic:beta=0.8:beta=0.9", ["given twice"]),
    ("ccp:cubic:ipc=netlink", ["no parameter 'ipc'"]),
    ("kernel:cubic:beta=0.8", ["kernel CCAs take no parameters"]),
])
def test_bad_parameters_name_the_problem(text, fragments):
    with pytest.raises(CcplabError) as err:
        parse_cca(text)
    for f in fragments:
        assert f in str(err.value), str(err.value)


def test_algorithms_command_lists_the_suite(capsys):
    assert cli.main(["algorithms"]) == 0
    out = capsys.readouterr().out
    for name in ("ccp:reno", "ccp:cubic", "ccp:bbr", "ccp:copa", "ccp:vegas"):
        assert name in out
    assert "--delta" in out and "--bw-window-rounds" in out
    assert cli.main(["algorithms", "vegas", "--dump-program"]) == 0
    assert "Report.minrtt" in capsys.readouterr().out
