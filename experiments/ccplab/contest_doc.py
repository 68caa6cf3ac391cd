"""``ccplab contest-doc``: one Markdown page from finished contest directories.

Input: directories written by ``ccplab contest`` (each with ``contest.json`` and
``runs.csv``): leaderboards (``--cca`` or the default set) and sweeps
(``--sweep``/``--best``), on any trace, with either receiver. Output, in this
order:

* **Leaderboards**: one table per (trace, receiver, duration), rank by median
  power score, with each CCA's capacity, throughput (utilization), p95
  queueing delay, p95 signal delay, score, the receiver's data segments per
  ACK and, over several runs, the score's min..max.
* **Receivers compared**: for a trace run with both receivers (delayed ACKs
  and ACK every segment), each CCA's score under both and their ratio.
* **Best settings**: per swept algorithm, trace and receiver, the value with
  the best median score, its throughput and delay, and the score at the
  algorithm's default (when the sweep's directory or a leaderboard of the
  same trace and receiver holds it).
* **Sweeps**: every swept value's score (the fixed-window curve, ...).

Each table says the command that reproduces it (from ``contest.json``). The
numbers are those of ``runs.csv``: the page adds no measurement of its own.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ccplab_util.atomic import write_atomic

from .contest import leaderboard
from .errors import CcplabError
from .scenario import DATAPATH_SETTINGS

NUMERIC = ("capacity_mbps", "throughput_mbps", "utilization", "p95_queueing_delay_ms", "p95_signal_delay_ms",
           "power_score")


@dataclass
class ContestResult:
    """One contest directory: its setup (contest.json) and per-run rows (runs.csv, numbers as floats)."""

    path: Path
    setup: dict
    rows: list[dict]

    @property
    def receiver(self) -> str:
        return self.setup.get("receiver") or ("ACK every segment" if self.setup.get("quickack") else "delayed ACKs")

    @property
    def key(self) -> tuple:
        """What makes two results comparable: trace, receiver, duration, the datapath's settings (0: its
        defaults)."""
        return (self.setup["trace"], self.receiver, self.setup["duration_s"],
                *(self.setup.get(s.field) or 0 for s in DATAPATH_SETTINGS))

    def command(self) -> str:
        """The ``ccplab contest`` command line that runs this directory again (resuming it)."""
        s = self.setup
        parts = ["ccplab contest", f"--trace {s['trace']}", f"--duration-s {s['duration_s']}"]
        if s.get("runs", 1) > 1:
            parts.append(f"--runs {s['runs']}")
        if not s.get("quickack", False):
            parts.append("--delayed-acks")
        parts += [f"{d.flag} {s[d.field]}" for d in DATAPATH_SETTINGS if s.get(d.field) is not None]
        if s.get("sweep"):
            sw = s["sweep"]
            values = sw["values"]
            parts.append(f"--sweep {sw['base'].removeprefix('ccp:')}:{sw['param']}={','.join(values)}")
        elif s.get("ccas"):
            parts += [f"--cca {c}" for c in s["ccas"]]
        parts.append(f"--out {self.path.name}")
        return " ".join(parts)


def load(path: Path) -> ContestResult:
    """Read one contest directory; CcplabError names what is missing or malformed."""
    path = Path(path)
    try:
        setup = json.loads((path / "contest.json").read_text())
        with open(path / "runs.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, ValueError) as exc:
        raise CcplabError(f"{path}: not a finished contest directory ({exc})") from exc
    for r in rows:
        for m in (*NUMERIC, "segments_per_ack"):
            r[m] = float(r[m]) if r.get(m) not in (None, "") else float("nan")
    if not rows:
        raise CcplabError(f"{path}: runs.csv has no finished run")
    return ContestResult(path, setup, rows)


def _f(x: float, fmt: str) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _head(res: ContestResult) -> str:
    s = res.setup
    window = "flow start to the trace's end" if s["duration_s"] * 1000 >= s.get("trace_end_ms", 0) else \
        f"the first {s['duration_s']} s of each flow"
    return (f"{s['trace']}, {res.receiver}, {s['duration_s']} s, {s['one_way_delay_ms']} ms each way, "
            f"unbounded queue, trace played once, scored over {window}; {s.get('runs', 1)} run(s) per CCA")


def provenance(res: ContestResult) -> str:
    """"N runs, YYYY-MM-DD HH:MM to HH:MM UTC, ccplab commit C, Linux K" from the
    runs' metadata.json (`started_at`, `finished_at`, `host`); "" when no run has them."""
    metas = []
    for r in res.rows:
        try:
            metas.append(json.loads((Path(r["run_dir"]) / "metadata.json").read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    starts = sorted(m["started_at"] for m in metas if m.get("started_at"))
    ends = sorted(m["finished_at"] for m in metas if m.get("finished_at"))
    if not starts or not ends:
        return ""
    commits = sorted({str((m.get("host") or {}).get("ccplab_commit")) for m in metas} - {"None"})
    kernels = sorted({str((m.get("host") or {}).get("kernel")) for m in metas} - {"None"})
    first, last = starts[0].replace("T", " ")[:16], ends[-1].replace("T", " ")[:16]
    text = f"{len(res.rows)} runs, {first} to {last[11:] if last[:10] == first[:10] else last} UTC"
    if commits:
        text += f", ccplab commit {', '.join(commits)}"
    if kernels:
        text += f", Linux {', '.join(kernels)}"
    return text


def leaderboard_table(res: ContestResult) -> list[str]:
    """A leaderboard as Markdown lines."""
    board = leaderboard(res.rows)
    spread = any(r["runs"] > 1 for r in board)
    lines = ["| # | CCA | capacity (Mbit/s) | throughput (Mbit/s, util) | p95 queueing delay (ms) | "
             "p95 signal delay (ms) | score | segments per ACK" + (" | score min..max |" if spread else " |"),
             "|---|---|---|---|---|---|---|---|" + ("---|" if spread else "")]
    for i, r in enumerate(board, 1):
        line = (f"| {i} | {r['cca']} | {_f(r['capacity_mbps'], '.2f')} | {_f(r['throughput_mbps'], '.2f')} "
                f"({_f(100 * r['utilization'], '.0f')} %) | {_f(r['p95_queueing_delay_ms'], '.0f')} | "
                f"{_f(r['p95_signal_delay_ms'], '.0f')} | **{_f(r['power_score'], '.2f')}** | "
                f"{_f(r['segments_per_ack'], '.2f')} |")
        if spread:
            line += f" {_f(r['score_min'], '.2f')}..{_f(r['score_max'], '.2f')} |"
        lines.append(line)
    return lines


def best_of(res: ContestResult) -> dict | None:
    """A sweep's best value: the leaderboard row with the largest median score (None: no finite score)."""
    board = [r for r in leaderboard(res.rows) if not math.isnan(r["power_score"])]
    return board[0] if board else None


def default_score(res: ContestResult, others: Sequence[ContestResult]) -> float | None:
    """The swept algorithm's median score at its default flags: from a leaderboard of the same trace,
    receiver and duration holding ``ccp:NAME`` (None: none does)."""
    name = res.setup["sweep"]["base"]
    for o in others:
        if o.key == res.key and not o.setup.get("sweep"):
            for r in leaderboard(o.rows):
                if r["cca"] == name:
                    return r["power_score"]
    return None


def render(results: Sequence[ContestResult]) -> str:
    """The page (see the module docstring)."""
    boards = [r for r in results if not r.setup.get("sweep")]
    sweeps = [r for r in results if r.setup.get("sweep")]
    out = ["# The cellular contest: leaderboards and best settings", "",
           "Power score = throughput (Mbit/s) / p95 signal delay (s), as mahimahi's mm-throughput-graph "
           "computes them; every CCA of a table is scored over the same window of the trace.", ""]
    if boards:
        out += ["## Leaderboards", ""]
        for res in sorted(boards, key=lambda r: r.key):
            when = provenance(res)
            out += [f"### {_head(res)}", "", f"`{res.command()}`", "", *([f"{when}.", ""] if when else []),
                    *leaderboard_table(res), ""]
    pairs = _receiver_pairs(boards)
    if pairs:
        out += ["## Receivers compared", ""]
        for (trace, duration), (delayed, every) in sorted(pairs.items()):
            d = {r["cca"]: r for r in leaderboard(delayed.rows)}
            e = {r["cca"]: r for r in leaderboard(every.rows)}
            out += [f"### {trace}, {duration} s", "",
                    "| CCA | score, delayed ACKs | score, ACK every segment | ratio |", "|---|---|---|---|"]
            for cca in sorted(set(d) & set(e), key=lambda c: -_nz(e[c]["power_score"])):
                sd, se = d[cca]["power_score"], e[cca]["power_score"]
                ratio = se / sd if sd and not math.isnan(sd) and not math.isnan(se) else float("nan")
                out.append(f"| {cca} | {_f(sd, '.2f')} | {_f(se, '.2f')} | {_f(ratio, '.2f')}x |")
            out.append("")
    if sweeps:
        out += ["## Best settings", "", "| algorithm | trace | receiver | duration (s) | best setting | throughput "
                "(Mbit/s) | p95 signal delay (ms) | score | score at the default |", "|---|---|---|---|---|---|---|---|---|"]
        for res in sorted(sweeps, key=lambda r: (r.setup["sweep"]["base"], r.key)):
            best = best_of(res)
            if best is None:
                continue
            sw = res.setup["sweep"]
            dflt = default_score(res, boards)
            out.append(f"| {sw['base']} | {res.setup['trace']} | {res.receiver} | {res.setup['duration_s']} | "
                       f"{sw['param']}={best['value']} | {_f(best['throughput_mbps'], '.2f')} | "
                       f"{_f(best['p95_signal_delay_ms'], '.0f')} | **{_f(best['power_score'], '.2f')}** | "
                       f"{_f(dflt, '.2f') if dflt is not None else 'n/a'} |")
        out += ["", "## Sweeps", ""]
        for res in sorted(sweeps, key=lambda r: (r.setup["sweep"]["base"], r.key)):
            sw = res.setup["sweep"]
            board = {r["value"]: r for r in leaderboard(res.rows)}
            best = best_of(res)
            out += [f"### {sw['base']}: {sw['param']} on {_head(res)}", "", f"`{res.command()}`", "",
                    f"| {sw['param']} | throughput (Mbit/s) | p95 signal delay (ms) | score |", "|---|---|---|---|"]
            for v in sw["values"]:
                r = board.get(v)
                if r is None:
                    continue
                mark = " (best)" if best is not None and best["value"] == v else ""
                out.append(f"| {v}{mark} | {_f(r['throughput_mbps'], '.2f')} | {_f(r['p95_signal_delay_ms'], '.0f')} "
                           f"| {_f(r['power_score'], '.2f')} |")
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def _nz(x: float) -> float:
    return -math.inf if math.isnan(x) else x


def _receiver_pairs(boards: Sequence[ContestResult]) -> dict:
    """(trace, duration) -> (delayed-ACK result, every-segment result) where both exist (the first of each)."""
    by: dict = {}
    for res in boards:
        slot = by.setdefault((res.setup["trace"], res.setup["duration_s"]), [None, None])
        i = 1 if res.setup.get("quickack") else 0
        if slot[i] is None:
            slot[i] = res
    return {k: tuple(v) for k, v in by.items() if v[0] is not None and v[1] is not None}


def contest_doc_command(dirs: Sequence[Path], out: Path | None) -> str:
    """Render the page of ``dirs``; write it to ``out`` (atomically) when given. Returns the page."""
    page = render([load(d) for d in dirs])
    if out is not None:
        write_atomic(out, page)
    return page
