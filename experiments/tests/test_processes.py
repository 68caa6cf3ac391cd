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


@pytest.mark.network
def test_listening_sees_a_listener_only_in_its_namespace(needs_root, tmp_path):
    # a server's readiness from its /proc TCP table: not before it listens, not in the host's namespace
    import os
    import socket

    from ccplab.plumbing.netns import listening, netns_exec, remove_namespace
    from ccplab.plumbing.processes import run_tool

    ns = f"ccplab-test-listen-{os.getpid()}"
    with socket.socket() as host_listener:  # the same port listening outside ``ns`` does not count
        host_listener.bind(("127.0.0.1", 0))
        host_listener.listen()
        port = host_listener.getsockname()[1]
        server = [sys.executable, "-c", f"import socket, time, sys; s = socket.socket(); sys.stdin.readline(); "
                  f"s.bind(('0.0.0.0', {port})); s.listen(); print('up', flush=True); time.sleep(60)"]
        run_tool(["ip", "netns", "add", ns], f"ip netns add {ns}")
        try:
            import subprocess

            proc = subprocess.Popen(netns_exec(ns, *server), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                assert not listening(ns, port, os.getpid()), "this process is not in the namespace"
                assert not listening(ns, port, proc.pid), "nothing listens in the namespace yet"
                proc.stdin.write("go\n")
                proc.stdin.flush()
                assert proc.stdout.readline().strip() == "up"
                assert listening(ns, port, proc.pid)
                assert not listening(ns, port + 1 if port < 65535 else port - 1, proc.pid)
            finally:
                proc.kill()
                proc.wait()
            assert not listening(ns, port, proc.pid), "a process that is gone"
        finally:
            remove_namespace(ns)


@pytest.mark.network
def test_the_ccp_daemons_exit_within_a_fifth_of_a_second_of_sigterm(needs_root, tmp_path):
    # every run stops them: an exit that waits out a receive timeout or a poll period costs each run
    # that long. 100 ms is the goal; the bound leaves room for a loaded 2-core machine.
    import time

    from ccplab.cca import PORTUS_SOCKET
    from ccplab.plumbing.locks import ccp_host_claim
    from ccplab.plumbing.processes import appears, started, wait_exit
    from ccplab.registry import SUITE_BINARY
    from ccplab.binaries import project_binary

    with ccp_host_claim():
        algorithm = started(Daemon("ccp-algorithms", [project_binary(SUITE_BINARY), "cubic", "--ipc", "unix"],
                                   tmp_path / "algorithm.log"), appears(PORTUS_SOCKET))
        ready = tmp_path / "ready.json"
        datapath = started(Daemon("ccp-datapath", [project_binary("ccp-datapath"), "--congalg", "cubic",
                                                    "--ready-file", ready], tmp_path / "datapath.log"), ready.exists)
        took = {}
        with algorithm, datapath:
            for d in (datapath, algorithm):
                sent = time.monotonic()
                d.terminate()
                assert wait_exit([d.proc], 5.0), f"{d.name} still runs 5 s after SIGTERM:\n{d.log_tail()}"
                took[d.name] = time.monotonic() - sent
                assert d.proc.wait() == 0, f"{d.name} exit status {d.proc.returncode}:\n{d.log_tail()}"
    print("seconds from SIGTERM to exit:", {n: round(t, 3) for n, t in took.items()})
    assert all(t < 0.2 for t in took.values()), f"seconds from SIGTERM to exit: {took}"
    assert not PORTUS_SOCKET.exists(), "the algorithm removed its socket"
