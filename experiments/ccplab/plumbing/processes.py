"""Start a daemon with its output in a log file, wait until it is ready, stop it; run a tool.

Every daemon of a run (the link, the algorithm, the datapath, iperf3's server)
is a ``Daemon`` used as a context manager, so a failure or Ctrl-C anywhere
stops all of them in reverse order and nothing is left running.

When the runner is killed outright (SIGKILL: no cleanup code runs), its
children still stop: each is started through ``setpriv --pdeathsig TERM``
(util-linux), so the kernel sends it SIGTERM when the runner's thread that
started it dies, and each handles SIGTERM by cleaning up (the link deletes
its namespaces, the datapath unregisters ``ccp``). Every child also carries
``CCPLAB_RUNNER_PID`` in its environment, so ``ccplab clean`` can recognise
the processes of a dead runner should one survive anyway.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

from ..errors import CcplabError

RUNNER_ENV = "CCPLAB_RUNNER_PID"
"""Environment variable naming the runner's pid in every child (see ``ccplab.cleanup``)."""
READY_TIMEOUT_S = 30.0
"""How long a daemon may take to become ready (`started`) before it is a failure, s."""


def wait_exit(procs: Sequence[subprocess.Popen], timeout_s: float) -> bool:
    """Block until one of ``procs`` exits or ``timeout_s`` passes; True when one has exited.

    Woken by the kernel at the exit (a pidfd per process, poll(2)), not by
    polling: ``Popen.wait(timeout)`` sleeps in steps of up to 50 ms, which a
    run pays once per daemon it stops. Does not reap (call ``poll``/``wait`` after).
    """
    fds = []
    try:
        for proc in procs:
            try:
                fds.append(os.pidfd_open(proc.pid))
            except ProcessLookupError:
                return True  # already gone
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        return bool(poller.poll(max(timeout_s, 0.0) * 1000.0))
    finally:
        for fd in fds:
            os.close(fd)


def supervised(argv: Sequence[str]) -> list[str]:
    """``argv`` wrapped so the process gets SIGTERM when its parent (this runner's thread) dies.

    Uses ``setpriv --pdeathsig TERM`` instead of a ``preexec_fn`` calling
    prctl(PR_SET_PDEATHSIG): preexec_fn is unsafe in a process with threads
    (a Dask worker). setpriv execs ``argv``, so the child's pid is its own.
    """
    return ["setpriv", "--pdeathsig", "TERM", "--", *(str(a) for a in argv)]


def child_env() -> dict[str, str]:
    """Environment of a run's child: plain-text logs and the runner's pid (for leftover detection)."""
    return {**os.environ, "NO_COLOR": "1", RUNNER_ENV: str(os.getpid())}


class Daemon:
    """A background process whose stdout and stderr go to ``log_path``.

    ``name`` is used in error messages. ``stop_timeout_s``: seconds to wait
    after SIGTERM before SIGKILL. ``env``: variables set for this daemon only,
    over the runner's environment.
    """

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, stop_timeout_s: float = 10.0,
                 env: dict[str, str] | None = None):
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self.stop_timeout_s = stop_timeout_s
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self._terminated = False

    def __enter__(self) -> "Daemon":
        if self.proc is None:  # a daemon started (and waited for) before ``with`` is not started twice
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if self.proc is not None:
            raise RuntimeError(f"{self.name} was already started")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                supervised(self.argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # our Ctrl-C reaches it through stop(), in order
                env={**child_env(), **self.env},
            )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, is_ready: Callable[[], bool], timeout_s: float) -> None:
        """Poll ``is_ready`` every 5 ms (a ready file is a stat, and each poll period adds half of it to
        the run on average); CcplabError if the daemon exits or time runs out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if is_ready():
                return
            if not self.running():
                raise CcplabError(
                    f"{self.name} exited with status {self.proc.returncode} before it was ready:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.005)
        raise CcplabError(f"{self.name} was not ready after {timeout_s:.0f} s:\n{self.log_tail()}")

    def terminate(self) -> None:
        """Send SIGTERM once (a second SIGTERM makes some daemons exit at once, skipping their cleanup);
        `stop` then waits. Nothing when it is not running."""
        if self.proc is not None and not self._terminated and self.proc.poll() is None:
            self._terminated = True
            self._signal(signal.SIGTERM)

    def stop(self) -> int | None:
        """SIGTERM (unless `terminate` sent it), then SIGKILL after ``stop_timeout_s``; returns the exit
        status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.terminate()
            if not wait_exit([self.proc], self.stop_timeout_s) and self.proc.poll() is None:
                self._signal(signal.SIGKILL)
            self.proc.wait()
        return self.proc.returncode

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return f"  (no log at {self.log_path})"
        return "\n".join(f"  {self.name}| {line}" for line in text[-lines:])


def stop_together(daemons: Sequence[Daemon]) -> list[int | None]:
    """Stop ``daemons`` at once: SIGTERM to each, then wait for each (`Daemon.stop`), so their clean-ups
    overlap instead of adding up. Returns each one's exit status, in order."""
    for d in daemons:
        d.terminate()
    return [d.stop() for d in daemons]


def started(daemon: Daemon, is_ready: Callable[[], bool], timeout_s: float = READY_TIMEOUT_S) -> Daemon:
    """Start ``daemon`` and wait until ``is_ready()`` (`Daemon.wait_ready`); stop it again if it never
    gets there (CcplabError) or the wait is interrupted. Returns the daemon, for ``with``."""
    daemon.start()
    try:
        daemon.wait_ready(is_ready, timeout_s)
    except BaseException:
        daemon.stop()
        raise
    return daemon


def appears(path: Path) -> Callable[[], bool]:
    """A readiness check for a daemon that creates ``path`` (a socket, a ready file): removes ``path``
    now, so that its appearance means the daemon about to start created it, and returns ``path.exists``."""
    path.unlink(missing_ok=True)
    return path.exists


def run_tool(argv: Sequence[object], what: str, timeout_s: float = 30) -> str:
    """Run a short-lived tool (``ip``, ``bpftool``, ``clang``) to its end; its stdout. CcplabError
    naming ``what`` with the tool's status and message when it fails; subprocess.TimeoutExpired after
    ``timeout_s`` seconds."""
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise CcplabError(f"{what} failed (status {done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout

