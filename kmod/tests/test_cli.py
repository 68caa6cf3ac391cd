"""`python -m kmod check` argument errors: one line naming the input, exit status 2, nothing run."""

import pytest

from kmod import cli
from kmod.tests.test_source import fake_tree


def run(capsys, *argv):
    code = cli.main(["check", *argv])
    return code, capsys.readouterr().err


def test_missing_source_is_named(capsys, monkeypatch):
    monkeypatch.delenv("CCP_KERNEL_SRC", raising=False)
    code, err = run(capsys)
    assert code == 2 and "CCP_KERNEL_SRC is not set" in err and err.count("\n") == 1


def test_bad_arguments_are_named_before_anything_runs(capsys, tmp_path):
    src = str(fake_tree(tmp_path / "k"))
    cases = [
        (["--kernels", "5.4"], "unknown kernel '5.4'"),
        (["--ccp", "cubic:beta"], "'beta' is not FLAG=VALUE"),
        (["--kernel-cca", "vegas"], "kernel CCA 'vegas'"),
        (["--rate", "fast"], "--rate 'fast'"),
        (["--cycles", "-1"], "--cycles must be >= 0"),
        (["--binary", str(tmp_path / "none")], "--binary"),
    ]
    for extra, msg in cases:
        code, err = run(capsys, "--ccp-kernel-src", src, *extra)
        assert code == 2 and msg in err, (extra, err)
    assert not (tmp_path / "results").exists()


def test_help_lists_the_defaults(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["check", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "window:window=37" in out and "--cycles" in out
