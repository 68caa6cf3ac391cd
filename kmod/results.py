"""Reading a guest's results back: one row per case, and the verdict.

Per case directory (kmod/guest_init.sh): `case`, `status`, `iperf.json` (iperf3 -J of the
client), `ss.txt` (`ss -tinH` of the sender every 0.2 s, each round after a `t <uptime>` line),
`daemon.log` (ccp-algorithms), `dmesg.txt` (the kernel's log during the case), `killed`.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from kmod.plan import KERNEL_CCAS, Case, parse_line

#: Kernel log lines that mean ccp-kernel lost control of a flow or failed: libccp's
#: "Could not find datapath program" (a change-program naming a program the kernel lacks), a
#: refused message ("[ccp] [nl] message read failed: N") other than -71
#: (LIBCCP_UNKNOWN_CONNECTION: an answer to a flow freed meanwhile, normal at every close),
#: the fallback timer, a failed install, and oopses/warnings. Not errors: "no datapath program
#: set" / "Datapath program is null", logged for ACKs a new flow gets before the daemon's
#: change-program arrives, and "could not send ready message: -3" (no daemon listening yet).
MODULE_ERRORS = re.compile(
    r"Could not find datapath program|message read failed: -(?!71\b)\d+|fallback|"
    r"could not install|table is full|BUG:|WARNING:|Oops|general protection",
    re.I,
)

#: The kernel's side of installs lost before libccp had its program table (the start-order
#: race): the refused install and every change-program naming the missing program. The daemon
#: recovers from these by installing again (algorithms/src/reinstall.rs, its log line below).
LOST_INSTALL = re.compile(r"Could not find datapath program|message read failed: -96\b")
REINSTALLED = "installing them again"

_REPORT = re.compile(r"\breport sid=(\d+) acked=(\d+)")
_FLOW = re.compile(r"\bflow sid=(\d+) alg=(\S+)")


@dataclass
class Row:
    """One case's figures."""

    kernel: str
    case: Case
    status: str
    throughput_mbps: float | None = None
    retransmits: int | None = None
    cwnd: list[int] = field(default_factory=list)
    reports: int = 0
    flows: int = 0
    module_errors: list[str] = field(default_factory=list)
    controlled: bool | None = None  # None: a kernel CCA (nothing to control)
    #: Lost-install errors the daemon recovered from (it installed again, then the flow reported).
    recovered: list[str] = field(default_factory=list)
    why: str = ""
    after_kill_mbps: float | None = None
    after_kill_cwnd: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The case ran, and for ccp: the daemon controlled its flow and the module logged no error."""
        if self.status != "ok" or self.throughput_mbps is None:
            return False
        if self.case.kind == "ccp":
            return bool(self.controlled) and not self.module_errors
        return True


def iperf_figures(doc: dict) -> tuple[float, int]:
    """(receiver throughput in Mbit/s, sender retransmits) of an iperf3 -J client document.

    Raises ValueError when the document has no end summary (e.g. iperf3 failed: its "error").
    """
    end = doc.get("end") or {}
    if "sum_received" not in end:
        raise ValueError(f"iperf3 has no result: {doc.get('error', 'no end summary')}")
    return end["sum_received"]["bits_per_second"] / 1e6, int(end.get("sum_sent", {}).get("retransmits", 0))


def interval_mbps(doc: dict, start_s: float) -> float | None:
    """Mean sender throughput (Mbit/s) over the iperf3 intervals that start at or after `start_s`."""
    xs = [iv["sum"] for iv in doc.get("intervals", []) if iv["sum"]["start"] >= start_s - 1e-6]
    if not xs:
        return None
    return sum(x["bytes"] for x in xs) * 8 / sum(x["seconds"] for x in xs) / 1e6


def parse_ss(text: str) -> list[tuple[float, dict[str, dict]]]:
    """Rounds of `ss -tinH` output: [(uptime s, {local address: {"cca", "cwnd", "bytes_acked"}})]."""
    rounds: list[tuple[float, dict[str, dict]]] = []
    local = None
    for line in text.splitlines():
        if line.startswith("t "):
            rounds.append((float(line.split()[1]), {}))
            local = None
        elif not rounds or not line.strip():
            continue
        elif not line[0].isspace():
            cols = line.split()
            # Recv-Q Send-Q Local Peer (no State column with a state filter).
            local = cols[2] if len(cols) >= 4 else None
        elif local is not None:
            info = line.split()
            d = {"cca": info[0] if info and ":" not in info[0] else ""}
            for key in ("cwnd", "bytes_acked"):
                m = re.search(rf"\b{key}:(\d+)", line)
                d[key] = int(m.group(1)) if m else 0
            rounds[-1][1][local] = d
    return rounds


def data_flow_cwnd(rounds: list[tuple[float, dict[str, dict]]], until: float | None = None,
                   since: float | None = None) -> list[int]:
    """cwnd samples of the data connection (the one with the most bytes acked; iperf3's control
    connection carries a few hundred bytes), optionally only in [since, until)."""
    acked: dict[str, int] = {}
    for _, socks in rounds:
        for local, d in socks.items():
            acked[local] = max(acked.get(local, 0), d["bytes_acked"])
    if not acked:
        return []
    data = max(acked, key=acked.get)
    return [socks[data]["cwnd"] for t, socks in rounds
            if data in socks and (until is None or t < until) and (since is None or t >= since)]


def daemon_figures(log: str) -> tuple[int, int]:
    """(flows created, reports of data: `report sid=.. acked=N` with N > 0) in a daemon log."""
    flows = len(_FLOW.findall(log))
    reports = sum(1 for _, acked in _REPORT.findall(log) if int(acked) > 0)
    return flows, reports


def fixed_window(case: Case) -> int | None:
    """The window of a fixed-window case (its --window flag, default 10 as the suite's), else None."""
    if case.cca != "fixed-window":
        return None
    for f in case.flags:
        if f.startswith("--window="):
            return int(float(f.split("=", 1)[1]))
    return 10


def read_case(kernel: str, d: Path) -> Row:
    """The row of one case directory. A case the guest never finished has its status saying so."""
    case = parse_line(d.name + " " + (d / "case").read_text().strip())
    status = (d / "status").read_text().strip() if (d / "status").exists() else "did not finish"
    row = Row(kernel, case, status)
    doc = None
    try:
        doc = json.loads((d / "iperf.json").read_text())
        row.throughput_mbps, row.retransmits = iperf_figures(doc)
    except (OSError, ValueError) as e:
        row.why = f"no throughput: {e}"
    rounds = parse_ss((d / "ss.txt").read_text()) if (d / "ss.txt").exists() else []
    killed_at = None
    if (d / "killed").exists():
        killed_at = float((d / "killed").read_text().split()[1])
    row.cwnd = data_flow_cwnd(rounds, until=killed_at)
    dmesg = (d / "dmesg.txt").read_text(errors="replace") if (d / "dmesg.txt").exists() else ""
    if case.kind == "kernel":
        return row
    log = (d / "daemon.log").read_text(errors="replace") if (d / "daemon.log").exists() else ""
    row.flows, row.reports = daemon_figures(log)
    errors = [ln.strip() for ln in dmesg.splitlines() if MODULE_ERRORS.search(ln)]
    row.controlled, row.why = judge(case, row.flows, row.reports, row.cwnd)
    if case.kind == "ccp-dies" and killed_at is not None:
        row.after_kill_cwnd = data_flow_cwnd(rounds, since=killed_at + 1.0)
        if doc is not None:
            row.after_kill_mbps = interval_mbps(doc, case.seconds / 2 + 1)
    else:
        if row.controlled and REINSTALLED in log:
            row.recovered = [e for e in errors if LOST_INSTALL.search(e)]
        row.module_errors = [e for e in errors if e not in row.recovered]
    return row


def judge(case: Case, flows: int, reports: int, cwnd: list[int]) -> tuple[bool, str]:
    """Whether the daemon controlled the flow, and why not: the daemon saw the flow and got at
    least one report with data acked per second of the flow (its fold reports per RTT), and a
    fixed window is what `ss` shows in at least 90 % of the samples."""
    if flows == 0:
        return False, "the daemon saw no flow"
    if reports < case.seconds:
        return False, f"{reports} reports in {case.seconds} s"
    w = fixed_window(case)
    if w is not None and cwnd:
        held = sum(1 for c in cwnd if c == w) / len(cwnd)
        if held < 0.9:
            return False, f"cwnd {w} in {held:.0%} of the ss samples"
    return True, ""


def read_run(kernel: str, share: Path, cases: list[Case]) -> list[Row]:
    """Rows for `cases` in plan order (a case without a directory reads "did not run")."""
    rows = []
    for c in cases:
        d = share / c.id
        if d.is_dir() and (d / "case").exists():
            rows.append(read_case(kernel, d))
        else:
            rows.append(Row(kernel, c, "did not run"))
    return rows


def cwnd_summary(cwnd: list[int]) -> str:
    """"n=49 median 37 [35-40]" or "-"."""
    if not cwnd:
        return "-"
    return f"n={len(cwnd)} median {statistics.median(cwnd):g} [{min(cwnd)}-{max(cwnd)}]"


def table(rows: list[Row]) -> str:
    """A Markdown table: kernel, CCA, throughput, retransmits, cwnd samples, controlled, reports."""
    head = "| kernel | CCA | throughput (Mbit/s) | retransmits | cwnd samples (packets) | controlled | reports | note |"
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        ctl = "-" if r.controlled is None else ("yes" if r.controlled else "NO")
        tp = f"{r.throughput_mbps:.1f}" if r.throughput_mbps is not None else "-"
        note = r.why if r.status == "ok" else r.status
        if r.module_errors:
            note = (note + "; " if note else "") + f"module: {r.module_errors[0][:80]}"
        if r.recovered:
            note = (note + "; " if note else "") + \
                f"installs lost ({len(r.recovered)} kernel errors), daemon installed again, flow controlled"
        if r.case.kind == "ccp-dies":
            ak = f"{r.after_kill_mbps:.1f}" if r.after_kill_mbps is not None else "-"
            note = (note + "; " if note else "") + \
                f"daemon killed at {r.case.seconds // 2} s: after it {ak} Mbit/s, cwnd {cwnd_summary(r.after_kill_cwnd)}"
        lines.append(f"| {r.kernel} | {r.case.label} | {tp} | {r.retransmits if r.retransmits is not None else '-'} | "
                     f"{cwnd_summary(r.cwnd)} | {ctl} | {r.reports if r.case.kind != 'kernel' else '-'} | {note} |")
    return "\n".join(lines)


def kernel_reference(case: Case) -> str | None:
    """The label of the kernel row a ccp case's throughput is judged against: the kernel's own
    CCA of the same name (reno, cubic, bbr), paced as the ccp flow's socket is: the kernel's row
    with iperf3's `--fq-rate` (TCP-internal pacing) for `--socket-pacing=kernel`, the unpaced
    row otherwise. None for a kernel case and for algorithms the kernel lacks."""
    if case.kind != "ccp" or case.cca not in KERNEL_CCAS:
        return None
    paced = any(f.startswith("--socket-pacing=kernel") for f in case.flags)
    return f"kernel:{case.cca} --fq-rate=1G" if paced and case.cca != "bbr" else f"kernel:{case.cca}"


def median_table(rows: list[Row]) -> str:
    """Per (kernel, CCA) over repeated rows: runs, median throughput [min-max], median
    retransmits, how many runs the daemon controlled, and for ccp:X the ratio of its median
    throughput to the kernel's own X (`kernel_reference`) on the same kernel (Markdown)."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.kernel, r.case.label), []).append(r)
    medians = {key: statistics.median(tps) for key, rs in groups.items()
               if (tps := [r.throughput_mbps for r in rs if r.throughput_mbps is not None])}
    lines = ["| kernel | CCA | runs | throughput (Mbit/s), median [min-max] | retransmits, median | controlled "
             "| vs the kernel's own |", "|" + "---|" * 7]
    for (kernel, label), rs in groups.items():
        tps = [r.throughput_mbps for r in rs if r.throughput_mbps is not None]
        rts = [r.retransmits for r in rs if r.retransmits is not None]
        tp = f"{statistics.median(tps):.1f} [{min(tps):.1f}-{max(tps):.1f}]" if tps else "-"
        rt = f"{statistics.median(rts):g}" if rts else "-"
        ctl = "-" if rs[0].controlled is None else f"{sum(1 for r in rs if r.controlled)} of {len(rs)}"
        ref = kernel_reference(rs[0].case)
        mine, theirs = medians.get((kernel, label)), medians.get((kernel, ref))
        vs = f"{mine / theirs:.2f} x {ref}" if ref and mine is not None and theirs else "-"
        lines.append(f"| {kernel} | {label} | {len(rs)} | {tp} | {rt} | {ctl} | {vs} |")
    return "\n".join(lines)

