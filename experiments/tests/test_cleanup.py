"""A killed runner leaves nothing running, and ``ccplab clean`` finds and removes what could be left.

These tests use plain processes (no root or network needed): the kill test
with real flows is in test_end_to_end.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import psutil
import pytest

from ccplab import cleanup
from ccplab.plumbing.processes import RUNNER_ENV

from netlab import wait_for

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _dead_pid() -> int:
    """The pid of a process that has exited (a runner that is gone)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_daemons_die_with_a_sigkilled_runner(tmp_path):
    """The runner starts a Daemon and is SIGKILLed: no cleanup code runs, yet the daemon stops (pdeathsig)."""
    runner = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from ccplab.plumbing.processes import Daemon
        d = Daemon("sleeper", {SLEEPER!r}, Path({str(tmp_path / 'log')!r}))
        d.start()
        print(d.proc.pid, flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", runner], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(proc.stdout.readline())
        assert psutil.pid_exists(child)
        # Kill the runner only once setpriv has exec'd the daemon's own program: setpriv sets the
        # parent-death signal just before that exec, and a runner killed earlier (while the child
        # is still setpriv) would leave an orphan that no signal reaches.
        wait_for(lambda: psutil.Process(child).cmdline()[:1] == [sys.executable], 10,
                 f"setpriv to exec the daemon {child}")
        assert psutil.Process(child).environ().get(RUNNER_ENV) == str(proc.pid), "daemon carries its runner's pid"
        proc.kill()
        proc.wait(10)
        wait_for(lambda: not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE,
                 10, f"the daemon {child} of the killed runner to stop")
    finally:
        proc.kill()
        if child is not None and psutil.pid_exists(child):  # a failed test must not leave it for the next runs
            psutil.Process(child).kill()


def test_orphan_of_a_dead_runner_is_found_and_stopped():
    orphan = subprocess.Popen(SLEEPER, env={**os.environ, RUNNER_ENV: str(_dead_pid())})
    alive = subprocess.Popen(SLEEPER, env={**os.environ, RUNNER_ENV: str(os.getpid())})  # its runner lives
    try:
        left = cleanup.find_leftovers()
        pids = {p.pid for p in left.processes}
        assert orphan.pid in pids and alive.pid not in pids
        assert any(f"process {orphan.pid}" in line for line in left.host_state())
        actions = cleanup.clean(cleanup.Leftovers(processes=[p for p in left.processes if p.pid == orphan.pid]))
        assert len(actions) == 1 and actions[0].startswith(f"stopped process {orphan.pid} (")
        # clean() waited for it (and so reaped our child): it is gone, the other is untouched
        assert not psutil.pid_exists(orphan.pid)
        assert alive.poll() is None
    finally:
        orphan.kill()
        alive.kill()
        orphan.wait()
        alive.wait()


def test_stale_partial_dirs_are_found_and_removed(tmp_path):
    stale = tmp_path / "cmp" / "runs" / "ccp-reno" / f".run-1.partial-{_dead_pid()}"
    live = tmp_path / "cmp" / "runs" / "ccp-reno" / f".run-2.partial-{os.getpid()}"
    finished = tmp_path / "cmp" / "runs" / "ccp-reno" / "run-3"
    for d in (stale, live, finished):
        d.mkdir(parents=True)
        (d / "uplink.log").write_text("# a log\n")
    assert cleanup.stale_partial_dirs(tmp_path) == [stale]
    assert cleanup.find_leftovers([tmp_path]).partial_dirs == [stale]
    assert cleanup.remove_stale_partials(stale.parent) == [stale]
    assert not stale.exists() and live.exists() and finished.exists()


def test_link_namespace_pattern():
    for name in ("ns-left-a1B2c3", "ns-rattan-zzzzzz", "ns-right-000000"):
        assert cleanup.LINK_NETNS.match(name)
    for name in ("ns-left-abc", "ns-other-abcdef", "left-abcdef", "ns-left-abcdefg"):
        assert not cleanup.LINK_NETNS.match(name)


def test_clean_cli_needs_root(monkeypatch, capsys):
    from ccplab import cli

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert cli.main(["clean", "--dry-run"]) == 2
    assert "ccplab clean needs root" in capsys.readouterr().err


def test_clean_cli_dry_run_lists_and_keeps(tmp_path, capsys, needs_root):
    """Dry run only: a real `ccplab clean` acts on the whole host, so it runs in the end-to-end tests
    (under the netlab lock); here the removal goes through the same ``clean`` on the partial dir alone."""
    stale = tmp_path / f".run-1.partial-{_dead_pid()}"
    stale.mkdir()
    from ccplab import cli

    assert cli.main(["clean", "--dry-run", str(tmp_path)]) == 0
    assert f"would remove: partial run directory {stale}" in capsys.readouterr().out
    assert stale.exists()
    left = cleanup.find_leftovers([tmp_path])
    assert cleanup.clean(cleanup.Leftovers(partial_dirs=left.partial_dirs)) == [
        f"removed partial run directory {stale}"]
    assert not stale.exists()


@pytest.fixture(autouse=True)
def _no_leftover_sleepers():
    """Whatever a test here starts is gone when it ends."""
    yield
    mine = [p for p in psutil.Process().children(recursive=True)]
    for p in mine:
        p.kill()
    psutil.wait_procs(mine, timeout=5)


def test_stale_datapath_sockets_are_found_and_removed(tmp_path):
    """A datapath killed outright leaves its bound socket; clean removes it, a live one's stays."""
    import socket

    dead, alive = tmp_path / f"ccp-datapath-{_dead_pid()}", tmp_path / f"ccp-datapath-{os.getpid()}"
    socks = []
    for path in (dead, alive):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(str(path))
        socks.append(s)
    (tmp_path / "ccp-datapath-notapid").write_text("")
    try:
        assert cleanup.stale_datapath_sockets(tmp_path) == [dead]
        left = cleanup.Leftovers(datapath_sockets=[dead])
        assert left.describe() == [f"datapath socket {dead} of a ccp-datapath that is gone"]
        assert cleanup.clean(left) == [f"removed {dead}"]
        assert not dead.exists() and alive.exists()
    finally:
        for s in socks:
            s.close()
