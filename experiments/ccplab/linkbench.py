"""Link capacity benchmark: ``make bench`` runs ``python -m ccplab.linkbench`` (under the host lock).

How fast can the emulated link go on this host? For each constant trace rate
(``--rates``, Mbit/s; default 12, 100, 300, 600, 1000, 2000) it offers that
rate through ``ccplab-link`` and measures what one kernel cubic flow
(iperf3) achieves, with the runner's own machinery: ``ccplab run --cca
kernel:cubic --trace T --one-way-delay-ms 10 --queue-packets 1000`` (each
run's directory is kept under ``--keep DIR`` if given). Beside it, in the
same session, the kernel alone: two namespaces routed through a third (IP
forwarding, no emulator process), the middle one shaping the data direction
to the same rate with the same queue (``tbf``; no added delay, as netem is
not in every kernel), so the row shows what the host's kernel forwards at
that rate while the machine is as loaded as it is. Offloads (TSO, GSO, GRO)
are off on every veth of that path, as ccplab-link's namespaces have them,
so both carry MTU-sized packets.

What "achieved" means: the rate the bottleneck delivered, in the units the
trace offers, once slow start is over (``STEADY_SKIP_S`` after the flow's
first packet). Through ccplab-link it is mahimahi's throughput measure: the
bytes of the link log's departures (1504 per full packet, as a delivery
opportunity counts them) from that time to the flow's last packet, over
that span. Through the kernel path it is what the shaper sent: iperf3's
receiver goodput with ``--omit`` of the same seconds, scaled from TCP
payload (1448 bytes) to the frames tbf counts (1514). Each run also records
iperf3's receiver goodput: over the whole flow through ccplab-link (slow
start included), after the omitted seconds through the kernel path.

For ccplab-link each run records its process's CPU: user + system time of
all its threads (psutil, /proc/PID/stat), sampled every 0.25 s from 2 s
after the link appeared (slow start excluded) to its last sample, over the
same wall time: 1.0 = one core busy. The link's send threads also run the receiving
namespace's TCP work (a veth delivers in the sender's softirq), so that work
is counted in the link's CPU.

``--variant LABEL=COMMAND`` (repeatable) compares links: COMMAND is a
ccplab-link binary and extra arguments, e.g. ``--variant
"2w=target/release/ccplab-link --workers 2"``; default one variant
``link`` = ``<bin dir>/ccplab-link`` (see ``ccplab.binaries``). Variants,
the kernel path and rates run in rotating order, repetition by repetition,
so a shared machine's drift hits all alike.

Output: a table per rate with the median achieved rate and its spread
(min..max over ``--reps``), the ratio to the offered rate, the link's CPU,
and the target check: achieved >= 0.95 x offered up to 1000 Mbit/s
(PASS/MISS per variant and rate); ``--json FILE`` writes every run.
Anything that runs flows must hold the host lock:
``flock /tmp/ccplab-netlab.lock python -m ccplab.linkbench``. Exit status
0 when every run completed (whatever the targets), 2 on an error.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from .binaries import REPO_ROOT, bin_dir, project_binary, system_binary
from .errors import CcplabError
from .plumbing.netns import listening, netns_exec, remove_namespace
from .plumbing.processes import run_tool

DEFAULT_RATES = (12, 100, 300, 600, 1000, 2000)
ONE_WAY_DELAY_MS = 10
QUEUE_PACKETS = 1000
TARGET_RATIO = 0.95
TARGET_UP_TO_MBPS = 1000
CPU_SKIP_S = 2.0
"""Seconds after the link appears before its CPU is counted (setup, slow start)."""
STEADY_SKIP_S = 2
"""Seconds after a flow's first packet left out of its achieved rate (slow start)."""
MAHIMAHI_PACKET_BYTES = 1504
"""Bytes of a full packet in a link log (1500 IP + 4 TUN), as mahimahi logs it. A trace's rate counts
1500 bytes per delivery opportunity, so a saturated link reads 1504/1500 = 1.003 of its offered rate."""
TCP_PAYLOAD_BYTES = 1448
"""TCP payload of a full-size segment (1500 MTU less IP, TCP and timestamp headers)."""
KERNEL_FRAME_BYTES = 1514
"""Bytes tbf counts for a full-size segment on a veth (the IP packet and its Ethernet header)."""
KERNEL = "kernel"
"""Label of the kernel-forwarding path in the table and the JSON."""
IPERF_PORT = 5201


@dataclass
class Sample:
    """One run: ``variant`` (a link's label or ``kernel``), the offered rate, the achieved rate after slow
    start and iperf3's receiver goodput over the whole flow (Mbit/s), the link's CPU in cores (None for
    the kernel path), the repetition (0-based)."""

    variant: str
    offered_mbps: float
    achieved_mbps: float
    goodput_mbps: float
    link_cpu: float | None
    rep: int


@dataclass(frozen=True)
class Variant:
    """A link to measure: its label and the command line (binary + extra arguments)."""

    label: str
    argv: tuple[str, ...]


def parse_variant(text: str) -> Variant:
    """``LABEL=COMMAND`` as a Variant; argparse.ArgumentTypeError when malformed or the binary is missing."""
    label, sep, command = text.partition("=")
    argv = tuple(shlex.split(command))
    if not sep or not label or not argv:
        raise argparse.ArgumentTypeError(f"expected LABEL=COMMAND, got {text!r}")
    if label == KERNEL:
        raise argparse.ArgumentTypeError(f"{KERNEL!r} names the kernel path; give the variant another label")
    binary = Path(argv[0])
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        raise argparse.ArgumentTypeError(f"variant {label}: {binary} is not an executable file")
    return Variant(label, (str(binary.resolve()), *argv[1:]))


def parse_rates(text: str) -> list[float]:
    """``12,100,...`` as rates in Mbit/s (each > 0); argparse.ArgumentTypeError otherwise."""
    try:
        rates = [float(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated Mbit/s, got {text!r}") from None
    if not rates or any(r <= 0 for r in rates):
        raise argparse.ArgumentTypeError(f"rates must be > 0 Mbit/s, got {text!r}")
    return rates


def variant_bin_dir(variant: Variant, where: Path) -> Path:
    """A directory for ``CCPLAB_BIN_DIR`` where ``ccplab-link`` runs ``variant`` (a script that execs
    its command with the runner's arguments, so the link's pid is the script's) and every other
    project binary is the default one (a symbolic link)."""
    where.mkdir(parents=True, exist_ok=True)
    for entry in bin_dir().iterdir():
        if entry.is_file() and os.access(entry, os.X_OK) and entry.name != "ccplab-link":
            (where / entry.name).symlink_to(entry.resolve())
    script = where / "ccplab-link"
    script.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in variant.argv[:1]) + ' "$@" '
                      + " ".join(shlex.quote(a) for a in variant.argv[1:]) + "\n")
    script.chmod(0o755)
    return where


def cpu_cores(samples: Sequence[tuple[float, float]], skip_s: float = CPU_SKIP_S) -> float | None:
    """Cores busy from (wall s, CPU s) samples of one process: CPU time over wall time between the first
    sample ``skip_s`` after the first one and the last sample; None with fewer than two such samples."""
    if not samples:
        return None
    start = samples[0][0] + skip_s
    window = [s for s in samples if s[0] >= start]
    if len(window) < 2 or window[-1][0] <= window[0][0]:
        return None
    return (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])


def _link_cpu_time(runner_pid: int):
    """(psutil process of the run's ccplab-link, or None while it has not started)."""
    import psutil

    try:
        for child in psutil.Process(runner_pid).children(recursive=True):
            if child.name() == "ccplab-link":
                return child
    except psutil.NoSuchProcess:
        pass
    return None


def link_run(variant_dir: Path, trace: Path, duration_s: int, out: Path) -> tuple[float, float, float | None]:
    """One ``ccplab run --cca kernel:cubic`` through the link in ``variant_dir``: (achieved Mbit/s after
    slow start, `link_delivered_mbps`; the iperf3 receiver's Mbit/s; link CPU in cores or None).
    CcplabError with the runner's stderr when the run fails."""
    import psutil

    argv = [sys.executable, "-m", "ccplab.cli", "run", "--cca", "kernel:cubic", "--trace", str(trace),
            "--one-way-delay-ms", str(ONE_WAY_DELAY_MS), "--queue-packets", str(QUEUE_PACKETS),
            "--duration-s", str(duration_s), "--out", str(out)]
    env = {**os.environ, "CCPLAB_BIN_DIR": str(variant_dir)}
    samples: list[tuple[float, float]] = []
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env)
        link = None
        while proc.poll() is None:
            time.sleep(0.25)  # sampling period of the CPU counters (no event to wait on)
            link = link or _link_cpu_time(proc.pid)
            if link is not None:
                try:
                    t = link.cpu_times()
                    samples.append((time.monotonic(), t.user + t.system))
                except psutil.NoSuchProcess:
                    pass
        if proc.returncode != 0:
            err.seek(0)
            raise CcplabError(f"ccplab run through {variant_dir} failed (status {proc.returncode}):\n"
                              f"{err.read().decode(errors='replace').strip()}")
    meta = json.loads((out / "metadata.json").read_text())
    mbps = meta["flows"][0]["iperf3_receiver_mbps"]
    if mbps is None:
        raise CcplabError(f"run {out}: iperf3 reported no receiver throughput")
    return link_delivered_mbps(out), float(mbps), cpu_cores(samples)


def link_delivered_mbps(run_dir: Path, skip_s: float = STEADY_SKIP_S) -> float:
    """What the link delivered in a run directory's ``uplink.log``, Mbit/s: the bytes of its departures
    from ``skip_s`` after the flow's first packet to its last one (metadata.json's ``flow_start_s``,
    ``flow_end_s``), over that span, as mm-throughput-graph counts throughput. CcplabError when the
    flow is shorter than ``skip_s`` plus one second."""
    from transient.mahimahi import EVENT_KINDS, read_link_columns

    flow = json.loads((run_dir / "metadata.json").read_text())["flows"][0]
    start_s, end_s = flow["flow_start_s"] + skip_s, flow["flow_end_s"]
    if end_s - start_s < 1.0:
        raise CcplabError(f"run {run_dir}: the flow lasted {flow['flow_end_s'] - flow['flow_start_s']:.1f} s, "
                          f"too short to leave out its first {skip_s:g} s")
    cols = read_link_columns(run_dir / "uplink.log", cache=False)
    t_s = cols.time_ms / 1000.0
    departed = (cols.code == EVENT_KINDS.index("departure")) & (t_s >= start_s) & (t_s < end_s)
    return float(cols.nbytes[departed].sum()) * 8 / (end_s - start_s) / 1e6


def tbf_args(rate_mbps: float) -> list[str]:
    """``tc`` arguments of the kernel path's shaper: a token bucket at ``rate_mbps`` whose bucket holds
    one timer tick (4 ms) of the rate, at least 64 KiB, and whose queue holds ``QUEUE_PACKETS``
    MTU-sized frames."""
    burst = max(int(rate_mbps * 1e6 / 8 * 0.004), 65536)
    return ["tbf", "rate", f"{rate_mbps:g}mbit", "burst", str(burst), "limit", str(QUEUE_PACKETS * 1514)]


def kernel_run(rate_mbps: float, duration_s: int) -> tuple[float, float]:
    """One kernel cubic flow through three namespaces routed by the kernel (no emulator process), the
    middle one shaping the data direction to ``rate_mbps`` (`tbf_args`): (achieved Mbit/s, the frames
    tbf sent after slow start: iperf3's receiver goodput with ``--omit STEADY_SKIP_S`` scaled from TCP
    payload to frame bytes; that goodput, Mbit/s). No added delay: this needs no netem, which not
    every kernel has. Namespaces are removed on exit, also after an error."""
    tag = f"{os.getpid()}"
    snd, mid, rcv = f"lb-snd-{tag}", f"lb-mid-{tag}", f"lb-rcv-{tag}"
    try:
        for ns in (snd, mid, rcv):
            run_tool(["ip", "netns", "add", ns], f"ip netns add {ns}")
            run_tool(["ip", "-n", ns, "link", "set", "lo", "up"], f"lo up in {ns}")
        run_tool(netns_exec(mid, "sysctl", "-qw", "net.ipv4.ip_forward=1"), "ip_forward in the middle")
        run_tool(["ip", "-n", snd, "link", "add", "v0", "type", "veth", "peer", "name", "vs", "netns", mid],
                 "sender veth pair")
        run_tool(["ip", "-n", rcv, "link", "add", "v0", "type", "veth", "peer", "name", "vr", "netns", mid],
                 "receiver veth pair")
        for ns, dev, ip in ((snd, "v0", "10.211.1.1/24"), (mid, "vs", "10.211.1.2/24"),
                            (mid, "vr", "10.211.2.2/24"), (rcv, "v0", "10.211.2.1/24")):
            run_tool(["ip", "-n", ns, "addr", "add", ip, "dev", dev], f"address of {dev} in {ns}")
            run_tool(["ip", "-n", ns, "link", "set", dev, "up"], f"{dev} up in {ns}")
            run_tool(netns_exec(ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off"),
                     f"offloads of {dev} in {ns}")
        run_tool(["ip", "-n", snd, "route", "add", "default", "via", "10.211.1.2"], "sender route")
        run_tool(["ip", "-n", rcv, "route", "add", "default", "via", "10.211.2.2"], "receiver route")
        run_tool(["tc", "-n", mid, "qdisc", "add", "dev", "vr", "root", *tbf_args(rate_mbps)],
                 "tbf on the data direction")
        goodput = _kernel_iperf(snd, rcv, duration_s - STEADY_SKIP_S, ["--omit", str(STEADY_SKIP_S)])
        return goodput * KERNEL_FRAME_BYTES / TCP_PAYLOAD_BYTES, goodput
    finally:
        for ns in (snd, mid, rcv):
            remove_namespace(ns)


def _kernel_iperf(snd: str, rcv: str, duration_s: int, extra: list[str]) -> float:
    """One iperf3 cubic flow of ``duration_s`` (plus ``extra`` client arguments) from namespace ``snd``
    to a one-shot server in ``rcv``: the receiver's goodput, Mbit/s."""
    server = subprocess.Popen(netns_exec(rcv, system_binary("iperf3"), "-s", "-1", "-p", IPERF_PORT),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not listening(rcv, IPERF_PORT, server.pid):
            if time.monotonic() > deadline or server.poll() is not None:
                raise CcplabError("the kernel path's iperf3 server did not start listening")
            time.sleep(0.05)  # ss offers no event to wait on
        done = subprocess.run(netns_exec(snd, "iperf3", "-c", "10.211.2.1", "-p", IPERF_PORT, "-C", "cubic",
                                         "-t", duration_s, *extra, "-J"), capture_output=True, text=True,
                              timeout=duration_s + 30)
    finally:
        server.kill()
        server.wait()
    try:
        return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"] / 1e6
    except (json.JSONDecodeError, KeyError) as exc:
        raise CcplabError(f"kernel path: iperf3 gave no result ({exc}): "
                          f"{(done.stderr or done.stdout).strip()[:300]}") from None


def spread(values: Sequence[float]) -> str:
    """``median [min..max]`` of values (one decimal place)."""
    return f"{statistics.median(values):.1f} [{min(values):.1f}..{max(values):.1f}]"


def results_table(samples: Sequence[Sample], labels: Sequence[str]) -> str:
    """A Markdown table: one row per offered rate and path (variants, then the kernel), with the median
    achieved Mbit/s [min..max], its ratio to the offered rate, the link's median CPU (cores) and the
    target verdict (PASS/MISS for offered rates up to TARGET_UP_TO_MBPS, else ``-``)."""
    rows = ["| offered Mbit/s | path | achieved Mbit/s, median [min..max] | achieved / offered "
            "| iperf3 goodput Mbit/s | link CPU (cores) | runs | target >= 0.95x |",
            "|---:|---|---:|---:|---:|---:|---:|---|"]
    for rate in sorted({s.offered_mbps for s in samples}):
        for label in [*labels, KERNEL]:
            mine = [s for s in samples if s.offered_mbps == rate and s.variant == label]
            if not mine:
                continue
            achieved = [s.achieved_mbps for s in mine]
            ratio = statistics.median(achieved) / rate
            cpus = [s.link_cpu for s in mine if s.link_cpu is not None]
            cpu = f"{statistics.median(cpus):.2f}" if cpus else "-"
            verdict = ("PASS" if ratio >= TARGET_RATIO else "MISS") if rate <= TARGET_UP_TO_MBPS else "-"
            goodput = spread([s.goodput_mbps for s in mine])
            rows.append(f"| {rate:g} | {label} | {spread(achieved)} | {ratio:.3f} | {goodput} | {cpu} | {len(mine)} "
                        f"| {verdict} |")
    return "\n".join(rows)


def _shown_path(arg: str) -> str:
    """A variant's argument as printed: a path inside the repository relative to it (the output goes
    into a results page, which names no machine's directories), anything else unchanged."""
    try:
        return str(Path(arg).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return arg


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ccplab.linkbench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Run under the host lock: flock /tmp/ccplab-netlab.lock python -m "
                                       "ccplab.linkbench ...")
    p.add_argument("--rates", type=parse_rates, default=list(DEFAULT_RATES),
                   help="offered rates, Mbit/s, comma-separated (default "
                        + ",".join(str(r) for r in DEFAULT_RATES) + ")")
    p.add_argument("--reps", type=int, default=3, help="repetitions of every rate and path (default %(default)s)")
    p.add_argument("--duration-s", type=int, default=10, help="each flow's duration, s (default %(default)s)")
    p.add_argument("--variant", type=parse_variant, action="append", default=None, metavar="LABEL=COMMAND",
                   help="a link to measure: label and ccplab-link command line (repeat; default "
                        "link=<bin dir>/ccplab-link)")
    p.add_argument("--no-kernel", action="store_true", help="leave out the kernel-forwarding path")
    p.add_argument("--keep", type=Path, metavar="DIR", help="keep every run directory under DIR")
    p.add_argument("--json", type=Path, metavar="FILE", help="write every run's figures to FILE (a JSON list)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.reps < 1 or args.duration_s < 3:
        print("linkbench: error: --reps must be >= 1 and --duration-s >= 3", file=sys.stderr)
        return 2
    try:
        variants = args.variant or [Variant("link", (str(project_binary("ccplab-link")),))]
        system_binary("iperf3")
        system_binary("ethtool")
        from transient.steps import Step

        from .scenario import generate_step_trace

        tmp = Path(tempfile.mkdtemp(prefix="ccplab-linkbench-"))
        samples: list[Sample] = []
        try:
            dirs = {v.label: variant_bin_dir(v, tmp / f"bin-{k}") for k, v in enumerate(variants)}
            traces = {r: generate_step_trace(tmp / f"const-{r:g}.trace", [Step(0.0, 0.0, r)], args.duration_s,
                                             0.0, 0) for r in args.rates}
            paths = [v.label for v in variants] + ([] if args.no_kernel else [KERNEL])
            for rep in range(args.reps):
                for i, rate in enumerate(args.rates):
                    shift = (rep + i) % len(paths)
                    for label in paths[shift:] + paths[:shift]:
                        if label == KERNEL:
                            (mbps, goodput), cpu = kernel_run(rate, args.duration_s), None
                        else:
                            out = (args.keep or tmp / "runs") / f"{label}-{rate:g}-{rep}"
                            out.parent.mkdir(parents=True, exist_ok=True)
                            mbps, goodput, cpu = link_run(dirs[label], traces[rate], args.duration_s, out)
                            if not args.keep:
                                shutil.rmtree(out, ignore_errors=True)
                        samples.append(Sample(label, rate, mbps, goodput, cpu, rep))
                        cpu_text = f", link CPU {cpu:.2f} cores" if cpu is not None else ""
                        print(f"  rep {rep + 1} {rate:g} Mbit/s {label:<10} {mbps:8.1f} Mbit/s achieved, "
                              f"{goodput:8.1f} goodput{cpu_text}", flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except CcplabError as exc:
        print(f"linkbench: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps([asdict(s) for s in samples], indent=2) + "\n")
    print(f"kernel cubic through the link: {ONE_WAY_DELAY_MS} ms each way, {QUEUE_PACKETS}-packet queue, "
          f"{args.duration_s} s flows, {args.reps} repetitions; the kernel path: routed namespaces, tbf at "
          "the same rate and queue, no added delay")
    print(f"achieved: what the bottleneck delivered from {STEADY_SKIP_S} s after the flow's first packet (link: "
          f"the link log's departures, {MAHIMAHI_PACKET_BYTES} bytes per full packet; kernel: iperf3 --omit "
          f"{STEADY_SKIP_S} goodput x {KERNEL_FRAME_BYTES}/{TCP_PAYLOAD_BYTES}); iperf3 goodput: the receiver's, "
          "whole flow (kernel: after the omitted seconds)")
    for v in variants:
        print(f"  {v.label}: {' '.join(_shown_path(a) for a in v.argv)}")
    print(results_table(samples, [v.label for v in variants]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
