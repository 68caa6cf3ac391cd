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
  the best median score (marked when it is the first or last value swept:
  the best may lie beyond), its throughput and delay, and the score at the
  algorithm's default (from a leaderboard of the same trace, receiver and
  duration, else from the sweep's run at the flag's default value).
* **Sweeps**: every swept value's score (the fixed-window curve, ...).

Each table says the command that reproduces it (from ``contest.json``), and
its ``note`` when the setup carries one. The numbers are those of
``runs.csv``: the page adds no measurement of its own.
Sweeps of one algorithm's parameter on the same trace, receiver and duration
(a declared range, then a wider one) are one sweep on the page: their values
together, the best among all of them.

The page's data file (``--data``, JSON) keeps what the page was made from:
each directory's setup, runs and provenance, without its logs. The page can
then be made again, and grown by a new directory, without the directories of
earlier measurements (results/ is not kept in the repository).
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
    kept_provenance: str | None = None
    """The provenance line, when the result comes from a data file (its rows name no run directory)."""

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
    return ContestResult(path, with_swept_default(setup), rows)


def with_swept_default(setup: dict) -> dict:
    """``setup`` with ``sweep["default"]`` set, when it is a sweep that lacks it: the swept flag's default
    from the suite's registry (``ccp-algorithms --list-json``), None when the registry does not answer
    (binaries not built) or has no such flag. Kept in the data file, so a page made from it alone does
    not ask the registry again."""
    sw = setup.get("sweep")
    if not sw or "default" in sw:
        return setup
    return {**setup, "sweep": {**sw, "default": swept_default(sw["base"], sw["param"])}}


def swept_default(base: str, param: str) -> str | None:
    """The default of ``--PARAM`` of the algorithm of ``base`` (``ccp:NAME[:fixed=value...]``)."""
    from . import registry

    name = base.removeprefix("ccp:").split(":")[0]
    try:
        flags = registry.lookup(name).flags
    except CcplabError:
        return None
    return next((str(f["default"]) for f in flags if f.get("flag") == f"--{param}" and f.get("default") is not None),
                None)


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
    runs' metadata.json (`started_at`, `finished_at`, `host`), or the line kept in a data file;
    "" when no run has them."""
    if res.kept_provenance is not None:
        return res.kept_provenance
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
    receiver and duration holding ``ccp:NAME``, else from the sweep's own run at the swept flag's
    default value (``sweep["default"]``, compared as numbers) when it swept that value (None: neither)."""
    name = res.setup["sweep"]["base"]
    for o in others:
        if o.key == res.key and not o.setup.get("sweep"):
            for r in leaderboard(o.rows):
                if r["cca"] == name:
                    return r["power_score"]
    default = res.setup["sweep"].get("default")
    if default is None:
        return None
    return next((r["power_score"] for r in leaderboard(res.rows) if _numeric(str(r["value"])) == _numeric(default)),
                None)


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
                    *_note(res), *leaderboard_table(res), ""]
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
    groups = sweep_groups(sweeps)
    if groups:
        out += ["## Best settings", "", "| algorithm | trace | receiver | duration (s) | best setting | throughput "
                "(Mbit/s) | p95 signal delay (ms) | score | score at the default |", "|---|---|---|---|---|---|---|---|---|"]
        for res in groups:
            best = best_of(res)
            if best is None:
                continue
            sw = res.setup["sweep"]
            dflt = default_score(res, boards)
            at = f" ({sw['param']}={sw['default']})" if dflt is not None and sw.get("default") is not None else ""
            # a best at either end of the range may lie beyond it: the reader should sweep wider
            edge = " (range's edge)" if best["value"] in (sw["values"][0], sw["values"][-1]) else ""
            out.append(f"| {sw['base']} | {res.setup['trace']} | {res.receiver} | {res.setup['duration_s']} | "
                       f"{sw['param']}={best['value']}{edge} | {_f(best['throughput_mbps'], '.2f')} | "
                       f"{_f(best['p95_signal_delay_ms'], '.0f')} | **{_f(best['power_score'], '.2f')}** | "
                       f"{_f(dflt, '.2f') + at if dflt is not None else 'n/a'} |")
        out += ["", "## Sweeps", ""]
        for res in groups:
            sw = res.setup["sweep"]
            board = {r["value"]: r for r in leaderboard(res.rows)}
            best = best_of(res)
            commands = [f"`{c}`" for c in res.setup["commands"]]
            out += [f"### {sw['base']}: {sw['param']} on {_head(res)}", "", "<br>\n".join(commands), "", *_note(res),
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


def sweep_groups(sweeps: Sequence[ContestResult]) -> list[ContestResult]:
    """Sweeps of the same algorithm and parameter under the same key (trace, receiver, duration,
    datapath settings), each group as one result: values of all (numeric order), rows of all, and in
    ``setup["commands"]`` the command of each; sorted by algorithm, then key."""
    by: dict = {}
    for res in sweeps:
        sw = res.setup["sweep"]
        by.setdefault((sw["base"], sw["param"], res.key), []).append(res)
    merged = []
    for (base, param, _), group in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        values = sorted({v for g in group for v in g.setup["sweep"]["values"]}, key=_numeric)
        notes = list(dict.fromkeys(g.setup["note"] for g in group if g.setup.get("note")))
        setup = {**group[0].setup, "sweep": {"base": base, "param": param, "values": values,
                                             "default": group[0].setup["sweep"].get("default")},
                 "commands": [g.command() for g in group], "note": " ".join(notes)}
        merged.append(ContestResult(group[0].path, setup, [r for g in group for r in g.rows],
                                    "; ".join(p for p in (provenance(g) for g in group) if p) or None))
    return merged


def _numeric(value: str):
    """Sort and comparison key of a swept value: numbers by value ("20" == "20.0"), then other text."""
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def _note(res: ContestResult) -> list[str]:
    """The setup's ``note`` (what a reader must know about where the numbers come from), as page lines."""
    return [f"*{res.setup['note']}*", ""] if res.setup.get("note") else []


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


DATA_FORMAT = "ccplab contest-doc data 1"
MACHINE_PATHS = ("down", "up")
"""contest.json's keys that hold a path of the machine that ran it (the page shows the trace by name)."""


def to_record(res: ContestResult) -> dict:
    """One result as the data file keeps it: name (the directory's), setup, provenance line and runs;
    without what names this machine's paths (the setup's trace files, the runs' ``run_dir``); NaN as
    null."""
    rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items() if k != "run_dir"}
            for r in res.rows]
    setup = {k: v for k, v in res.setup.items() if k not in MACHINE_PATHS}
    return {"name": res.path.name, "setup": setup, "provenance": provenance(res), "rows": rows}


def from_record(rec: dict, source: Path) -> ContestResult:
    """A result of the data file ``source``; CcplabError names the file and what is missing."""
    try:
        rows = [{**r, **{m: float("nan") if r.get(m) is None else float(r[m]) for m in (*NUMERIC, "segments_per_ack")}}
                for r in rec["rows"]]
        return ContestResult(Path(rec["name"]), with_swept_default(rec["setup"]), rows, rec.get("provenance") or "")
    except (KeyError, TypeError, ValueError) as exc:
        raise CcplabError(f"{source}: a result without a valid name, setup or runs ({exc!r})") from exc


def load_data(path: Path) -> list[ContestResult]:
    """The results kept in the data file ``path`` ([] when it does not exist); CcplabError when it is
    not one."""
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CcplabError(f"{path}: not a contest-doc data file ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != DATA_FORMAT:
        raise CcplabError(f"{path}: not a contest-doc data file (no \"format\": \"{DATA_FORMAT}\")")
    return [from_record(rec, path) for rec in data.get("results", [])]


def save_data(path: Path, results: Sequence[ContestResult]) -> None:
    """Write ``results`` to the data file ``path`` (atomically), sorted by name."""
    data = {"format": DATA_FORMAT, "results": [to_record(r) for r in sorted(results, key=lambda r: r.path.name)]}
    write_atomic(path, json.dumps(data, indent=1) + "\n")


def contest_doc_command(dirs: Sequence[Path], out: Path | None, data: Path | None = None) -> str:
    """Render the page of ``dirs`` and, with ``data``, of the results kept there (a directory replaces the
    kept result of its name); write the page to ``out`` and all results back to ``data`` (each
    atomically) when given. Returns the page. CcplabError: a directory or the data file is not readable,
    or there is nothing to render."""
    results = {r.path.name: r for r in (load_data(data) if data is not None else [])}
    for d in dirs:
        res = load(d)
        results[res.path.name] = res
    if not results:
        raise CcplabError("contest-doc: no contest directory given and no result kept in the data file "
                          f"{data}" if data is not None else "contest-doc: no contest directory given")
    page = render(list(results.values()))
    if out is not None:
        write_atomic(out, page)
    if data is not None:
        save_data(data, list(results.values()))
    return page
