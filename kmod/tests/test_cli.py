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


def test_a_guest_that_dies_before_init_is_booted_again_once(tmp_path, monkeypatch, capsys):
    from kmod import guest, initramfs, kernels, plan

    calls = []

    def fake_boot(cmd, share, timeout_s):
        calls.append(cmd)
        (share / "console.log").write_text("Oops: int3: 0000 [#1]\nKernel panic - not syncing\n" if len(calls) == 1
                                           else "ok\n")
        if len(calls) > 1:
            (share / "guest.log").write_text("kmod-guest: all cases done\n")
        return guest.Boot(0, 1.0, len(calls) > 1, share / "console.log")

    monkeypatch.setattr(guest, "boot", fake_boot)
    u = kernels.Unpacked(kernels.KERNELS["6.12"], tmp_path / "k")
    share = tmp_path / "out" / "cycles" / "daemon-first-06"
    b, rows = cli.run_guest(initramfs.Tree(), u, [plan.Case("cycle", "ccp", "reno", 3)], plan.Link(), share, "tcg")
    assert len(calls) == 2 and b.finished
    assert (tmp_path / "out" / "cycles" / "daemon-first-06-boot-failed-1" / "console.log").exists()
    assert "died before /init (Oops: int3" in capsys.readouterr().out
    assert rows[0].status == "did not run"  # the fake guest wrote no case files
    assert not list((tmp_path / "out" / "cycles").glob("*.cpio")), "the initramfs is removed"
