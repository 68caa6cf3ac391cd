"""`python -m kmod check`: the suite on the real ccp-kernel module in QEMU guests.

For each kernel: fetch and unpack Debian's packages (cached), pick the ccp-kernel branch whose
cong_control fits, build ccp-cong.ko, boot a guest that runs the kernel's own CCAs and this
project's algorithms (ccp-algorithms --ipc netlink) through a netem bottleneck, and print a
table. With --cycles N it then boots N short guests per start order (module first, daemon
first) and counts flows the daemon did not control.

Exit status: 0 when every case ran and every daemon controlled its flow with no module error;
1 otherwise; 2 on bad arguments (one line naming the argument).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from kmod import build, guest, initramfs, kernels, modinfo, plan, results, source

#: Modules the guest loads before anything else (with their dependencies): veths and netem for
#: the bottleneck, inet/tcp_diag for `ss -i`, tcp_bbr for kernel:bbr, 9p over virtio for the share.
GUEST_MODULES = ["virtio_pci", "9pnet_virtio", "9p", "veth", "sch_netem", "inet_diag", "tcp_diag", "tcp_bbr"]
#: Host programs the guest runs, as /host/bin/NAME.
HOST_PROGRAMS = ["ip", "ss", "tc", "ethtool", "iperf3"]
#: Seconds a guest may take beyond its flows (boot, setup, insmod/rmmod per case).
BOOT_SLACK_S = 90
PER_CASE_SLACK_S = 20


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kmod", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="build ccp-cong.ko per kernel and run the suite beside it in QEMU guests")
    c.add_argument("--ccp-kernel-src", default=os.environ.get("CCP_KERNEL_SRC"),
                   help="ccp-kernel checkout with its libccp submodule (default: $CCP_KERNEL_SRC)")
    c.add_argument("--kernels", default="6.1,6.12", help="comma-separated: " + ", ".join(kernels.KERNELS))
    c.add_argument("--cache", type=Path, default=Path("target/kmod"),
                   help="where packages, unpacked kernels and builds are kept (default target/kmod)")
    c.add_argument("--out", type=Path, default=None, help="results directory (default results/kmod-<time>)")
    c.add_argument("--binary", type=Path, default=Path("target/release/ccp-algorithms"),
                   help="the ccp-algorithms binary to put in the guest")
    c.add_argument("--seconds", type=int, default=10, help="length of each table flow, s (default 10)")
    c.add_argument("--kernel-cca", default=",".join(plan.DEFAULT_KERNEL),
                   help="the kernel's own CCAs to compare with, comma-separated (default reno,cubic,bbr)")
    c.add_argument("--ccp", action="append", default=None, metavar="NAME[:FLAG=VALUE...]",
                   help="a suite algorithm to run under ccp-kernel (repeatable; default: "
                        + ", ".join(plan.DEFAULT_CCP) + ")")
    c.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run the table N times in one guest, round after round, and print the "
                        "median of each row (default 1)")
    c.add_argument("--order", choices=plan.ORDERS, default="module-first",
                   help="start order of the table's ccp flows (default module-first)")
    c.add_argument("--dies", default="reno", metavar="NAME|none",
                   help="also run this algorithm and kill its daemon halfway through (default reno)")
    c.add_argument("--cycles", type=int, default=0,
                   help="then boot this many guests per start order, one short flow each (default 0)")
    c.add_argument("--cycle-seconds", type=int, default=3, help="flow length in a cycle, s (default 3)")
    c.add_argument("--cycle-ccp", default="reno", metavar="NAME[:FLAG=VALUE...]",
                   help="the algorithm of the cycles (default reno)")
    c.add_argument("--cycle-drop-installs", type=int, default=0, metavar="N",
                   help="fault injection: the cycles' daemons drop their first N install messages "
                        "(CCPLAB_DROP_INSTALLS), as the kernel refuses installs that come too early; "
                        "a controlled flow then shows the daemon's recovery (default 0)")
    c.add_argument("--skip-table", action="store_true", help="run only the cycles")
    c.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto",
                   help="QEMU acceleration (auto: kvm with VT-x/AMD-V, else tcg)")
    c.add_argument("--rate", default="20mbit", help="netem rate of the bottleneck (tc units, default 20mbit)")
    c.add_argument("--delay", default="20ms", help="netem delay on the bottleneck (default 20ms)")
    c.add_argument("--limit", type=int, default=100, help="netem queue limit, packets (default 100)")
    return p


def fail(msg: str) -> int:
    print(f"kmod: error: {msg}", file=sys.stderr)
    return 2


def prepare(kernel: kernels.Kernel, src: Path, cache: Path) -> tuple[kernels.Unpacked, Path, str]:
    """Unpacked kernel, its ccp-cong.ko, and which version of the source it was built from."""
    debs = kernels.download(kernel, cache / "debs")
    u = kernels.unpack(kernel, debs, cache / "kernels" / kernel.release)
    tcp_h = (u.common_headers / "include" / "net" / "tcp.h").read_text(errors="replace")
    want = source.headers_cong_control_params(tcp_h)
    cand = source.pick(source.candidates(src), want, kernel.release)
    tree = source.export(src, cand, cache / "build" / kernel.release / "ccp-kernel")
    ko = build.build_module(u, tree, cache / "build" / kernel.release / "build.log")
    return u, ko, f"{cand.label} (cong_control with {want} parameters)"


def base_tree(u: kernels.Unpacked, ko: Path, binary: Path) -> initramfs.Tree:
    """The initramfs without its plan."""
    t = initramfs.Tree()
    for d in ("proc", "sys", "dev", "run", "tmp", "out", "bin", "sbin", "usr/bin", "usr/sbin"):
        t.add_dir(d)
    t.add_file("bin/busybox", initramfs.which("busybox"), 0o755)
    t.add_file("init", Path(__file__).parent / "guest_init.sh", 0o755)
    for prog in HOST_PROGRAMS:
        t.add_program(f"host/bin/{prog}", initramfs.which(prog))
    t.add_program("host/bin/ccp-algorithms", binary)
    mods = modinfo.index(u.modules / "kernel")
    order = modinfo.load_order(GUEST_MODULES, mods, modinfo.builtin_names(u.modules / "modules.builtin"))
    for m in order:
        t.add_bytes(f"modules/{modinfo.module_name(m)}.ko", modinfo.module_bytes(m))
    t.add_bytes("modules.list", "".join(modinfo.module_name(m) + ".ko\n" for m in order).encode())
    t.add_file("ccp-cong.ko", ko, 0o644)
    return t


#: Boots of a guest whose kernel dies before /init starts are retried this often. Seen once in
#: about 50 TCG boots of 6.12: an int3 oops in sched_clock_idle_wakeup_event at 4.4 s (no
#: module loaded yet), which is the emulator's, not the module's.
BOOT_RETRIES = 1


def run_guest(tree: initramfs.Tree, u: kernels.Unpacked, cases: list[plan.Case], link: plan.Link,
              share: Path, accel: str) -> tuple[guest.Boot, list[results.Row]]:
    """Boot one guest with `cases`; its rows. A guest whose /init never started (its kernel
    died during boot, share/guest.log absent) is booted again, up to BOOT_RETRIES times; the
    failed attempt's files are kept in <share>-boot-failed-N."""
    tree.add_bytes("plan.txt", plan.plan_text(cases).encode())
    tree.add_bytes("plan.env", link.env().encode())
    initrd = share.parent / f"{share.name}.initramfs.cpio"
    share.parent.mkdir(parents=True, exist_ok=True)
    initrd.write_bytes(tree.archive())
    timeout = BOOT_SLACK_S + sum(c.seconds + PER_CASE_SLACK_S for c in cases)
    for attempt in range(BOOT_RETRIES + 1):
        share.mkdir(parents=True, exist_ok=True)
        b = guest.boot(guest.qemu_command(u.vmlinux, initrd, share.resolve(), accel), share, timeout)
        if (share / "guest.log").exists() or attempt == BOOT_RETRIES:
            break
        errs = guest.console_errors(b.console.read_text(errors="replace"))
        failed = share.parent / f"{share.name}-boot-failed-{attempt + 1}"
        share.rename(failed)
        print(f"kmod: {u.kernel.short}: the guest died before /init ({errs[0] if errs else 'no console error'}); "
              f"booting again (console kept in {failed})", flush=True)
    initrd.unlink()
    rows = results.read_run(u.kernel.short, share, cases)
    return b, rows


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        src = source.check_tree(a.ccp_kernel_src)
        ks = kernels.select(a.kernels)
        link = plan.Link(a.rate, a.delay, a.limit)
        link.env()
        kccas = [c.strip() for c in a.kernel_cca.split(",") if c.strip()]
        dies = None if a.dies in ("", "none") else a.dies
        cases = [] if a.skip_table else plan.table_cases(kccas, a.ccp or list(plan.DEFAULT_CCP), a.seconds, a.order, dies)
        if not 1 <= a.repeat <= 20:
            raise ValueError(f"--repeat must be in 1..20, got {a.repeat}")
        cases = plan.rounds(cases, a.repeat)
        if a.cycles < 0:
            raise ValueError(f"--cycles must be >= 0, got {a.cycles}")
        cyc_name, cyc_flags = plan.parse_ccp_spec(a.cycle_ccp)
        if a.cycle_drop_installs < 0:
            raise ValueError(f"--cycle-drop-installs must be >= 0, got {a.cycle_drop_installs}")
        if a.cycle_drop_installs:
            cyc_flags += (f"CCPLAB_DROP_INSTALLS={a.cycle_drop_installs}",)
        cycle_cases = {o: plan.Case("cycle", "ccp", cyc_name, a.cycle_seconds, o, cyc_flags) for o in plan.ORDERS}
    except (source.SourceError, ValueError) as e:
        return fail(str(e))
    if not a.binary.is_file():
        return fail(f"--binary {a.binary}: no such file (cargo build --release -p ccp-algorithms)")
    accel = guest.host_accel() if a.accel == "auto" else a.accel
    a.cache = a.cache.resolve()
    out = a.out or Path("results") / time.strftime("kmod-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    print(f"kmod: results in {out}, QEMU accel {accel}", flush=True)

    all_rows: list[results.Row] = []
    cycles: dict[str, dict[str, list[bool]]] = {}
    recovered: dict[str, dict[str, list[bool]]] = {}
    problems: list[str] = []
    for k in ks:
        try:
            u, ko, which = prepare(k, src, a.cache)
        except (source.SourceError, RuntimeError, ValueError) as e:
            print(f"kmod: {k.release}: {e}", file=sys.stderr)
            problems.append(f"{k.release}: not built")
            continue
        print(f"kmod: {k.release}: ccp-cong.ko from {which}", flush=True)
        tree = base_tree(u, ko, a.binary)
        if cases:
            b, rows = run_guest(tree, u, cases, link, out / k.short / "table", accel)
            print(f"kmod: {k.release}: guest ran {b.seconds:.0f} s, finished={b.finished}", flush=True)
            errs = guest.console_errors(b.console.read_text(errors="replace"))
            if not b.finished or errs:
                problems.append(f"{k.release}: guest did not finish its plan" + (f" ({errs[0]})" if errs else ""))
            all_rows += rows
            print(results.table(rows), flush=True)
            if a.repeat > 1:
                print(results.median_table(rows), flush=True)
        for order, case in cycle_cases.items():
            if a.cycles == 0:
                break
            got = cycles.setdefault(k.short, {}).setdefault(order, [])
            for i in range(a.cycles):
                b, rows = run_guest(tree, u, [case], link, out / k.short / "cycles" / f"{order}-{i + 1:02d}", accel)
                r = rows[0]
                got.append(r.ok)
                rec = recovered.setdefault(k.short, {}).setdefault(order, [])
                rec.append(bool(r.recovered))
                state = "controlled" if r.ok else "NOT controlled"
                if r.recovered:
                    state += f" after installing again ({len(r.recovered)} kernel errors of lost installs)"
                print(f"kmod: {k.short} {order} cycle {i + 1}/{a.cycles}: {state} ({r.reports} reports, "
                      f"{r.throughput_mbps or 0:.1f} Mbit/s, guest {b.seconds:.1f} s){'' if r.ok else ' ' + (r.why or r.status)}",
                      flush=True)
    report = out / "summary.md"
    text = results.table(all_rows) + "\n"
    if a.repeat > 1:
        text += "\n" + results.median_table(all_rows) + "\n"
    for kshort, per in cycles.items():
        for order, oks in per.items():
            text += (f"\n{kshort} {order}: {sum(oks)} of {len(oks)} cycles controlled, {len(oks) - sum(oks)} not"
                     f" ({sum(recovered[kshort][order])} after lost installs were installed again)")
    report.write_text(text + "\n")
    (out / "rows.json").write_text(json.dumps([{**asdict(r), "ok": r.ok} for r in all_rows], indent=1, default=str))
    bad = [r for r in all_rows if not r.ok and r.case.kind != "ccp-dies"]
    bad_cycles = sum(len(o) - sum(o) for per in cycles.values() for o in per.values())
    print("\n" + text)
    for r in bad:
        problems.append(f"{r.kernel} {r.case.label}: {r.why or r.status}"
                        + (f"; module: {r.module_errors[0]}" if r.module_errors else ""))
    if bad_cycles:
        problems.append(f"{bad_cycles} start-order cycles not controlled")
    for p_ in problems:
        print(f"kmod: FAIL {p_}", file=sys.stderr)
    return 1 if problems else 0
