"""Daemon: started once, stopped for sure, readiness errors carry the log tail."""

from __future__ import annotations

import sys

import pytest

from ccplab.errors import CcplabError
from ccplab.plumbing.processes import Daemon

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]


def test_started_daemon_is_not_started_again_by_with(tmp_path):
    daemon = Daemon("sleeper", SLEEPER, tmp_path / "log")
    daemon.start()
    first = daemon.proc
    with daemon as d:
        assert d.proc is first and d.running()
    assert not daemon.running()
    with pytest.raises(RuntimeError, match="already started"):
        daemon.start()


def test_stop_terminates_and_reports_status(tmp_path):
    with Daemon("sleeper", SLEEPER, tmp_path / "log") as daemon:
        daemon.wait_ready(lambda: "up" in (tmp_path / "log").read_text(), timeout_s=10)
    assert daemon.proc.returncode == -15  # SIGTERM


def test_wait_ready_fails_when_daemon_exits(tmp_path):
    argv = [sys.executable, "-c", "print('bad flag --x'); raise SystemExit(3)"]
    with Daemon("quitter", argv, tmp_path / "log") as daemon:
        with pytest.raises(CcplabError, match=r"quitter exited with status 3 before it was ready(.|\n)*bad flag"):
            daemon.wait_ready(lambda: False, timeout_s=10)


def test_wait_ready_times_out(tmp_path):
    with Daemon("sleeper", SLEEPER, tmp_path / "log") as daemon:
        with pytest.raises(CcplabError, match="not ready after"):
            daemon.wait_ready(lambda: False, timeout_s=0.2)


def test_env_reaches_only_that_daemon_over_the_runner_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CCPLAB_TEST_KEPT", "runner")
    argv = [sys.executable, "-c",
            "import os; print(os.environ['RUST_LOG'], os.environ['CCPLAB_TEST_KEPT'], flush=True); import time; time.sleep(60)"]
    log = tmp_path / "log"
    with Daemon("printer", argv, log, env={"RUST_LOG": "info,ccp::report=off"}) as daemon:
        daemon.wait_ready(lambda: "runner" in log.read_text(), timeout_s=10)
    assert log.read_text().split() == ["info,ccp::report=off", "runner"]
    plain = Daemon("sleeper", SLEEPER, tmp_path / "log2")
    assert plain.env == {}, "no extra variables unless asked"


def test_wait_exit_wakes_at_the_exit_and_times_out_without_one():
    import subprocess
    import time

    from ccplab.plumbing.processes import wait_exit

    quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    start = time.monotonic()
    assert wait_exit([quick], 30.0)
    assert time.monotonic() - start < 15.0  # woken by the exit, not at the 30 s timeout
    assert quick.wait() == 0
    sleeper = subprocess.Popen(SLEEPER, stdout=subprocess.DEVNULL)
    try:
        start = time.monotonic()
        assert not wait_exit([sleeper], 0.2)
        assert time.monotonic() - start >= 0.19
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_daemon_ignoring_sigterm_is_killed_after_its_stop_timeout(tmp_path):
    argv = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('up', flush=True); time.sleep(60)"]
    with Daemon("stubborn", argv, tmp_path / "log", stop_timeout_s=0.5) as daemon:
        daemon.wait_ready(lambda: "up" in (tmp_path / "log").read_text(), timeout_s=10)
    assert daemon.proc.returncode == -9  # SIGKILL
