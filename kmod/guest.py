"""Booting the guest: QEMU with the kernel's vmlinux, the initramfs, no network device and a
9p share for the results.

Acceleration: KVM where the host has hardware virtualization (vmx or svm in /proc/cpuinfo and
/dev/kvm), QEMU's software CPU (TCG, `-cpu max`) otherwise. A /dev/kvm without vmx/svm is a
software nested hypervisor (e.g. PVM), under which stock Debian kernels do not boot
(docs/ccp-kernel.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


def host_accel(cpuinfo: str | None = None, kvm_dev: Path = Path("/dev/kvm")) -> str:
    """"kvm" when the CPU flags show VT-x/AMD-V and /dev/kvm is usable, else "tcg"."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    hw = bool(flags & {"vmx", "svm"})
    return "kvm" if hw and kvm_dev.exists() and os.access(kvm_dev, os.R_OK | os.W_OK) else "tcg"


def qemu_command(vmlinux: Path, initrd: Path, share: Path, accel: str, smp: int = 2, mem: str = "2G") -> list[str]:
    """The qemu-system-x86_64 command line (console on stdio, no NIC, poweroff ends QEMU)."""
    if accel not in ("kvm", "tcg"):
        raise ValueError(f"--accel must be kvm or tcg, got {accel!r}")
    cpu = ["-accel", "kvm", "-cpu", "host"] if accel == "kvm" else ["-accel", "tcg", "-cpu", "max"]
    return [
        "qemu-system-x86_64", *cpu, "-smp", str(smp), "-m", mem,
        "-nographic", "-nic", "none", "-no-reboot",
        "-kernel", str(vmlinux), "-initrd", str(initrd),
        "-append", "console=ttyS0 panic=-1 quiet loglevel=4",
        "-virtfs", f"local,path={share},mount_tag=out,security_model=none",
    ]


@dataclass
class Boot:
    """One guest run: its exit status, wall time and whether /init finished its plan."""

    returncode: int
    seconds: float
    finished: bool
    console: Path


def boot(cmd: list[str], share: Path, timeout_s: float) -> Boot:
    """Run QEMU until the guest powers off or `timeout_s` passes (then it is killed).

    The console goes to share/console.log. `finished` is True when the guest wrote
    share/all-done (every case ran).
    """
    console = share / "console.log"
    t0 = time.monotonic()
    with console.open("wb") as out:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            rc = p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = -9
    return Boot(rc, time.monotonic() - t0, (share / "all-done").exists(), console)


def console_errors(text: str) -> list[str]:
    """Kernel panics and oopses in a console log."""
    return [ln.strip() for ln in text.splitlines()
            if re.search(r"Kernel panic|Oops|BUG:|general protection fault", ln)]
