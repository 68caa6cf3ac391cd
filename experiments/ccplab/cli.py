"""The ``ccplab`` command: run, compare, coexist, demo, sweep, contest, contest-doc, fidelity, clean, algorithms,
analyze, report.

Exit status: 0 on success, 2 on bad input or an unusable machine (the message
names what is wrong), 130 when interrupted (after cleaning up).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import signal
import sys
from pathlib import Path

from . import scenario as sc
from .argtypes import MAX_DELAY_MS, MAX_DURATION_S, MAX_QUEUE_PACKETS, MAX_RATE_MBPS, Parser, UsageError, number, whole
from .binaries import REPO_ROOT
from .cca import parse_cca, split_cca_list
from .errors import CcplabError


# The command line's numbers, each with its bounds (ccplab.argtypes).
DELAY_MS = whole(0, MAX_DELAY_MS)
QUEUE_PACKETS = whole(1, MAX_QUEUE_PACKETS)
DURATION_S = whole(1, MAX_DURATION_S)
RUNS = whole(1, 100_000)
SEED = whole(0, 2**32 - 1)
WORKERS = whole(1, 256)
RATE_MBPS = number(0.0, MAX_RATE_MBPS, lo_open=True)
NOISE_MBPS = number(0.0, MAX_RATE_MBPS)

FLOW_METAVAR = "CCA[@START_S[:STOP_S]][+DELAY_MS]"
FLOW_HELP = ("a flow of several sharing the link (repeat): its CCA, when it starts and stops (whole s after the "
             "first flow's start; default 0 and the run's end) and an extra RTT in ms, e.g. --flow kernel:cubic "
             "--flow ccp:bbr@10 --flow ccp:cubic:beta=0.8@20:40+30; an external algorithm's suffix follows its "
             "command: --flow 'portus:r=/opt/gca/bin/reno@10'")
CCA_HELP = ("kernel:NAME (the kernel's own, e.g. kernel:cubic), ccp:NAME[:flag=value...] (an algorithm of the "
            "suite, e.g. ccp:cubic:beta=0.8) or portus:NAME=COMMAND (any Portus algorithm binary with its own "
            "arguments, split as a shell would, e.g. 'portus:upstream-reno=/opt/gca/bin/reno --per_ack'; "
            "leading VAR=VALUE words set its environment; it binds /tmp/ccp/portus, or /tmp/ccp/X given "
            "--ipc-name X, over unix sockets; labelled portus:NAME and recorded as external; it shares a run "
            "only with kernel flows and itself)")


def _link_args(p: argparse.ArgumentParser, defaults: bool) -> None:
    p.add_argument("--one-way-delay-ms", type=DELAY_MS, default=sc.DEMO_ONE_WAY_DELAY_MS if defaults else None,
                   required=not defaults, help="fixed one-way delay each way, ms (RTT = 2x)")
    p.add_argument("--queue-packets", type=QUEUE_PACKETS, default=sc.DEMO_QUEUE_PACKETS if defaults else None,
                   required=not defaults, help="droptail queue limit of the bottleneck, packets")
    p.add_argument("--duration-s", type=DURATION_S, default=sc.DEFAULT_DURATION_S if defaults else None,
                   required=not defaults, help="flow duration, s")
    p.add_argument("--quickack", action="store_true",
                   help="the receiver acknowledges every segment at once (a quickack route in its namespace, as "
                        "the cellular contest's receiver) instead of Linux's delayed ACKs (about one ACK per two "
                        "segments); recorded in metadata.json")


def _datapath_args(p: argparse.ArgumentParser, sweep: bool = False) -> None:
    """The datapath settings of `scenario.DATAPATH_SETTINGS`, each ``--FLAG N`` (default None: the
    datapath's own); in a sweep, the value of every scenario whose table does not give the key."""
    for s in sc.DATAPATH_SETTINGS:
        where = (f"; the value of every scenario that does not give {s.field}" if sweep else "")
        p.add_argument(s.flag, dest=s.field, type=whole(s.lo, s.hi), default=None, metavar="N",
                       help=s.help + where)


def _datapath(args) -> dict[str, int]:
    """The datapath settings given on the command line, by `Scenario` field (the ones not given: none)."""
    return {s.field: getattr(args, s.field) for s in sc.DATAPATH_SETTINGS if getattr(args, s.field) is not None}


def _validity_args(p: argparse.ArgumentParser) -> None:
    from .control import DEFAULT_MAX_FALLBACK_SHARE

    p.add_argument("--max-fallback-share", type=number(0.0, 1.0), default=DEFAULT_MAX_FALLBACK_SHARE,
                   help="largest share of the ccp flows' ACKs the datapath's kernel-cubic fallback may drive for "
                        "the run to count as a result of its algorithm, leaving out the ACKs that came while the "
                        "datapath awaited the algorithm's answer to an RTO (within the control guard's bound) "
                        "(default %(default)s)")
    p.add_argument("--keep-invalid", action="store_true",
                   help="save a ccp run beyond --max-fallback-share marked invalid (listed apart by the "
                        "analysis) instead of failing it")


def _policy(args):
    from .control import ValidityPolicy

    return ValidityPolicy(args.max_fallback_share, args.keep_invalid)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="ccplab",
        description="Run congestion-control experiments through an emulated bottleneck and "
                    "score the CCAs' transient behaviour. CCAs: kernel:NAME (the kernel's own, "
                    "e.g. kernel:cubic), ccp:NAME (a Portus algorithm of the suite through ccp-datapath) "
                    "or portus:NAME=COMMAND (an external Portus binary through ccp-datapath).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="one flow of one CCA (or several competing flows, --flow) through the "
                         "emulated link")
    who = run.add_mutually_exclusive_group(required=True)
    who.add_argument("--cca", help="one flow for the whole run: " + CCA_HELP)
    who.add_argument("--flow", action="append", metavar=FLOW_METAVAR, help=FLOW_HELP)
    run.add_argument("--trace", required=True, type=Path, help="mahimahi trace of the uplink (data direction)")
    run.add_argument("--step", action="append", default=[], metavar="AT_S:FROM_MBPS:TO_MBPS",
                     help="a capacity step in the trace, for the analysis (default: the trace's sidecar)")
    _link_args(run, defaults=False)
    _datapath_args(run)
    _validity_args(run)
    run.add_argument("--out", required=True, type=Path, help="run directory to create (must not exist)")

    cmp_ = sub.add_parser("compare", help="several CCAs (or one set of competing flows) x several runs of one "
                          "scenario, then the report")
    who = cmp_.add_mutually_exclusive_group(required=True)
    who.add_argument("--cca", action="append", help="a CCA; repeat for each (or comma-separate; "
                     "portus:NAME=COMMAND one per --cca): " + CCA_HELP)
    who.add_argument("--flow", action="append", metavar=FLOW_METAVAR,
                     help=FLOW_HELP + "; --runs repeats the whole set of flows")
    cmp_.add_argument("--runs", type=RUNS, default=sc.DEMO_RUNS, help="runs per CCA (default %(default)s)")
    src = cmp_.add_mutually_exclusive_group()
    src.add_argument("--trace", type=Path, help="an existing mahimahi trace (e.g. a cellular one)")
    src.add_argument("--step", action="append", default=None, metavar="AT_S:FROM_MBPS:TO_MBPS",
                     help="a capacity step of the generated trace (s, Mbit/s, Mbit/s); repeat for several, "
                          "e.g. --step 0:0:12 --step 10:12:4; each FROM is the rate before it (default 0:0:12)")
    cmp_.add_argument("--sigma-mbps", type=NOISE_MBPS, default=sc.DEMO_SIGMA_MBPS,
                      help="per-ms capacity noise of a generated trace, Mbit/s (default %(default)s)")
    cmp_.add_argument("--seed", type=SEED, default=sc.DEMO_SEED, help="seed of a generated trace")
    _link_args(cmp_, defaults=True)
    _datapath_args(cmp_)
    _validity_args(cmp_)
    cmp_.add_argument("--out", type=Path, required=True, help="comparison directory (new or empty)")
    cmp_.add_argument("--no-analysis", action="store_true", help="only run; analyse later with ccplab analyze")

    demo = sub.add_parser("demo", help="compare on the built-in default: steps 0->12 Mbit/s at 0 s and "
                          "12->4 Mbit/s at 6 s, sigma 2, 25 ms one way, droptail 40, "
                          "kernel:cubic kernel:bbr ccp:reno ccp:cubic, 3 x 12 s; takes the host's netlab lock")
    demo.add_argument("--out", type=Path, help="default: results/demo-<timestamp>")
    demo.add_argument("--runs", type=RUNS, default=sc.DEMO_RUNS)
    demo.add_argument("--duration-s", type=DURATION_S, default=sc.DEMO_DURATION_S)

    swp = sub.add_parser("sweep", help="run an experiment file (TOML: CCAs x scenarios x repetitions), "
                         "resumable, on Dask workers; results in a Parquet store")
    swp.add_argument("file", type=Path, help="experiment file, e.g. experiments/sweeps/small.toml")
    swp.add_argument("--out", type=Path, help="sweep directory; rerun with the same --out to resume "
                     "(default: results/sweep-<name>)")
    swp.add_argument("--dry-run", action="store_true", help="print the plan and its estimated time; run nothing")
    swp.add_argument("--scheduler", metavar="tcp://HOST:8786",
                     help="a Dask scheduler whose workers were started with `--resources netlab=1` "
                          "(default: a local cluster)")
    swp.add_argument("--workers", type=WORKERS, default=1,
                     help="worker processes of the local cluster (default 1: one run at a time on this host)")
    swp.add_argument("--no-dask", action="store_true", help="run in this process, one run at a time")
    swp.add_argument("--retry-failed", action="store_true", help="run again the runs recorded as failed")
    swp.add_argument("--dest", metavar="URL", help="where raw run directories go (a path or an fsspec URL; "
                     "default OUT/runs)")
    _datapath_args(swp, sweep=True)
    _validity_args(swp)

    clean = sub.add_parser("clean", help="remove what killed runs left: their processes, the link's network "
                           "namespaces, a registered 'ccp' with no datapath, the Portus socket, partial run dirs")
    clean.add_argument("dirs", nargs="*", type=Path, metavar="DIR",
                       help="results directories to search for partial run directories (default: results/)")
    clean.add_argument("--dry-run", action="store_true", help="only list what would be removed")

    fid = sub.add_parser("fidelity", help="kernel:X vs ccp:X (reno, cubic, bbr) through the same links "
                         "(fixed 12 Mbit/s at 1 and 4 BDP, steps 0->12, 0->48, 24->6, Verizon LTE); ratios ccp/kernel with "
                         "median and spread; fidelity.csv + fidelity.html")
    fid.add_argument("--out", type=Path, required=True, help="results directory (new or empty)")
    fid.add_argument("--runs", type=RUNS, default=5, help="runs per CCA and scenario (default %(default)s)")
    fid.add_argument("--duration-s", type=DURATION_S, default=30, help="flow duration, s (default %(default)s)")
    fid.add_argument("--scenarios", default=None, metavar="A,B",
                     help="comma-separated subset of: fixed12-q1bdp, fixed12-q4bdp, step0-12, step0-48, "
                          "down24-6, verizon-lte (default: all)")
    fid.add_argument("--algorithms", default=None, metavar="X,Y", help="default: reno,cubic,bbr")
    fid.add_argument("--sides", default=None, metavar="kernel|ccp",
                     help="run only kernel:X or only ccp:X (default both; merge the pieces with --from)")
    fid.add_argument("--from", dest="from_dirs", type=Path, nargs="+", default=None, metavar="DIR",
                     help="run nothing: merge these earlier --out directories (per scenario, both sides) "
                          "into the table in --out")

    algs = sub.add_parser("algorithms", help="list the suite's algorithms and their flags")
    algs.add_argument("name", nargs="?", help="one algorithm")
    algs.add_argument("--dump-program", action="store_true", help="print its fold program")
    algs.add_argument("--json", action="store_true", help="machine-readable output")

    ana = sub.add_parser("analyze", help="analyse link logs, run directories or results directories: "
                         "per-step transient metrics (--method ccplab|tpcca), --json for one object per run")
    from .analysis import add_analyze_arguments

    add_analyze_arguments(ana)
    _add_report_parser(sub)
    _add_contest_parser(sub)
    _add_contest_doc_parser(sub)
    _add_coexist_parser(sub)
    return parser


def _interrupt_on_sigterm() -> None:
    """Treat SIGTERM like Ctrl-C, so that a killed run also stops its daemons and removes its partial files."""
    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        print(f"ccplab: error: {exc}", file=sys.stderr)
        return 2
    _interrupt_on_sigterm()
    try:
        return COMMANDS[args.command](args)
    except CcplabError as exc:
        print(f"ccplab: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file the user named cannot be written or read (read-only file system, ...)
        where = exc.filename if exc.filename is not None else "a file"
        print(f"ccplab: error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ccplab: interrupted; daemons stopped and partial results removed", file=sys.stderr)
        return 130


def _flows_of(args):
    """The flows of ``run``/``compare``: ``--flow`` values, or one flow of ``--cca``."""
    from .flows import parse_flows, single_flow

    return parse_flows(args.flow) if args.flow else single_flow(parse_cca(args.cca))


def cmd_run(args) -> int:
    from .flows import check_flows, flows_label
    from .run import run_flows

    flows = _flows_of(args)
    steps = sc.parse_step_args(args.step)
    scenario = sc.scenario_for_trace(args.trace.stem, args.trace, args.one_way_delay_ms,
                                     args.queue_packets, args.duration_s, steps, quickack=args.quickack,
                                     **_datapath(args))
    scenario.validate()
    check_flows(flows, scenario.duration_s)
    print(f"running {flows_label(flows)} for {scenario.duration_s} s through {scenario.trace.name} ...",
          file=sys.stderr, flush=True)
    result = run_flows(flows, scenario, args.out, policy=_policy(args))
    print(f"{result.describe(flows)} (iperf3); run saved in {result.run_dir}")
    return 0


def _comparison(ccas, trace, steps, sigma, seed, owd, queue, duration, runs, out, analyze=True,
                policy=None, quickack=False, datapath=None) -> int:
    from .compare import compare, setup_comparison

    out, scenario = setup_comparison(ccas, runs, out, owd, queue, duration, trace=trace, steps=steps,
                                     sigma_mbps=sigma, seed=seed, quickack=quickack, **(datapath or {}))
    report = compare(ccas, scenario, runs, out, analyze=analyze, **({"policy": policy} if policy else {}))
    print(f"results in {out}" + (f"; report: {report}" if report != out else ""))
    return 0


def cmd_compare(args) -> int:
    if args.flow:
        ccas = [_flows_of(args)]
    else:
        ccas = [parse_cca(n) for n in split_cca_list(args.cca)]
    steps = () if args.trace else sc.parse_step_args(args.step or ["0:0:12"])
    return _comparison(ccas, args.trace, steps, args.sigma_mbps, args.seed, args.one_way_delay_ms,
                       args.queue_packets, args.duration_s, args.runs, args.out, not args.no_analysis,
                       policy=_policy(args), quickack=args.quickack, datapath=_datapath(args))


def cmd_demo(args) -> int:
    """``ccplab demo``: the built-in comparison, under the host's netlab lock (waits for it; no wait when
    this process runs under ``flock`` on it already)."""
    from .plumbing.locks import netlab_lock

    out = args.out or REPO_ROOT / "results" / f"demo-{dt.datetime.now():%Y%m%d-%H%M%S}"
    ccas = [parse_cca(n) for n in sc.DEMO_CCAS]
    with netlab_lock():
        code = _comparison(ccas, None, sc.DEMO_STEPS, sc.DEMO_SIGMA_MBPS, sc.DEMO_SEED, sc.DEMO_ONE_WAY_DELAY_MS,
                           sc.DEMO_QUEUE_PACKETS, args.duration_s, args.runs, out)
    latest = REPO_ROOT / "results" / "demo-latest"
    if args.out is None:
        latest.unlink(missing_ok=True)
        latest.symlink_to(out.name)
    return code


def cmd_sweep(args) -> int:
    """``ccplab sweep``: plan (--dry-run) or run an experiment file; prints a summary line."""
    from .sweepfile import format_plan, load_sweep

    sweep = load_sweep(args.file, defaults=_datapath(args))
    if args.dry_run:
        print(format_plan(sweep))
        return 0
    if args.workers < 1:
        raise CcplabError(f"--workers must be >= 1, got {args.workers}")
    if args.scheduler and args.no_dask:
        raise CcplabError("--scheduler and --no-dask exclude each other")
    from .sweep import execute

    out = args.out or REPO_ROOT / "results" / f"sweep-{sweep.name}"
    s = execute(sweep, out, scheduler=args.scheduler, workers=args.workers, retry_failed=args.retry_failed,
                dest=args.dest, use_dask=not args.no_dask, policy=_policy(args))
    # (wall - time inside the runs) / runs is the scheduling overhead only when runs do not overlap
    timing = (f"scheduling overhead {s.overhead_per_run_s:.2f} s/run" if args.workers == 1 and not args.scheduler
              else f"{s.run_s / s.wall_s if s.wall_s else 0:.2f} runs in parallel on average")
    print(f"sweep {sweep.name}: {s.finished} run(s) finished, {len(s.failed)} failed, {s.skipped} already done "
          f"of {s.planned}; {s.wall_s:.1f} s, {timing}; store: {out.resolve() / 'store'}")
    for run_id, error in s.failed:
        print(f"  FAILED {run_id}: {error.splitlines()[0] if error else ''}", file=sys.stderr)
    return 1 if s.failed else 0


def cmd_clean(args) -> int:
    """``ccplab clean``: list (and unless --dry-run remove) what killed runs left; needs root."""
    import os

    from .cleanup import clean, find_leftovers

    if os.geteuid() != 0:
        raise CcplabError("ccplab clean needs root (other processes' environments, namespaces, BPF)")
    left = find_leftovers(args.dirs or [REPO_ROOT / "results"])
    lines = left.describe()
    if not lines:
        print("nothing left behind by killed runs")
        return 0
    if args.dry_run:
        print("\n".join(f"would remove: {line}" for line in lines))
        return 0
    print("\n".join(clean(left)))
    return 0


def cmd_algorithms(args) -> int:
    from .registry import load_registry, lookup

    if args.dump_program:
        if not args.name:
            raise CcplabError("--dump-program needs an algorithm name: ccplab algorithms NAME --dump-program")
        print(lookup(args.name).fold_program(), end="")
        return 0
    algos = [lookup(args.name)] if args.name else list(load_registry().values())
    described = [a.describe() for a in algos]
    if args.json:
        print(json.dumps(described, indent=2))
        return 0
    for algo, desc in zip(algos, described):
        print(f"ccp:{algo.name}  ({algo.binary}; {desc.get('source') or algo.source})")
        print(f"    {desc.get('summary') or algo.summary}")
        for flag in desc.get("flags", []):
            default = flag.get("default")
            shown = f" [default: {default}]" if default not in (None, "") else ""
            print(f"    {flag['flag']:<28} {flag.get('help', '')}{shown}")
    return 0


def cmd_fidelity(args) -> int:
    from .fidelity import fidelity_command

    return fidelity_command(args)


def cmd_analyze(args) -> int:
    from .analysis import analyze_command

    return analyze_command(args)


def _add_report_parser(sub) -> None:
    rep = sub.add_parser(
        "report", help="analyse results / run directories and write ONE HTML page comparing the CCAs across "
        "scenarios: tables (median, IQR, bootstrap 95%% CI), zoomed step plots, NA violins, throughput/delay "
        "plane; every figure as PNG and PDF")
    rep.add_argument("dirs", nargs="+", type=Path, metavar="DIR",
                     help="a results directory or a run directory; several are analysed and compared together")
    rep.add_argument("--out", type=Path, help="where report.html, the CSV tables and plots/ go (default: the "
                     "first DIR)")
    rep.add_argument("--method", choices=("ccplab", "tpcca"), default=None,
                     help="analysis method passed to the analysis (default: its own default, ccplab)")


def cmd_report(args) -> int:
    """``ccplab report DIR... [--out OUT] [--method M]``: `transient.report.report_paths` (exit 2 on bad input)."""
    import transient
    from transient.report import report_paths

    try:
        page = report_paths(args.dirs, args.out, method=args.method)
    except (transient.TransientError, ValueError) as exc:
        raise CcplabError(f"report: {exc}") from exc
    print(f"report: {page}")
    return 0



def _add_contest_parser(sub) -> None:
    """``ccplab contest``: the cellular contest setup as one command."""
    from . import contest as ct

    con = sub.add_parser(
        "contest", help="the cellular contest: a trace's .down for the data and .up for the ACKs, 20 ms each way, "
        "unbounded queue, the trace played once; leaderboard by power score = throughput / p95 signal delay",
        description="Run each CCA on the contest link and print a leaderboard (average capacity, throughput with "
        "utilization, p95 per-packet queueing delay, p95 signal delay as mahimahi's mm-throughput-graph, and "
        "power score = throughput (Mbit/s) / p95 signal delay (s)), sorted by score; write runs.csv, "
        "leaderboard.csv and plots (throughput/delay plane, throughput over time per CCA; PNG + PDF).")
    con.add_argument("--cca", action="append", default=[], help="a CCA (repeat; see `ccplab run --help`, "
                     "portus:NAME=COMMAND included); default: every algorithm of the "
                     "suite plus kernel:cubic and kernel:bbr")
    con.add_argument("--trace", default=ct.DEFAULT_TRACE, metavar="NAME|PATH",
                     help="a cellular trace of traces/cellular by name (Verizon-LTE-short, TMobile-LTE-short, "
                          "ATT-LTE-driving, ...) or a path to a .down file with its .up beside it "
                          "(default %(default)s)")
    con.add_argument("--duration-s", type=DURATION_S, default=None, help="flow length, s (default: the trace's length)")
    con.add_argument("--runs", type=RUNS, default=1, help="runs per CCA; > 1 gives the median and spread")
    con.add_argument("--sweep", metavar="NAME:PARAM=START..STOP[:STEP]",
                     help="run one algorithm over a parameter range instead of --cca, e.g. "
                          "fixed-window:window=5..90:5 (STOP included) or aimd:beta=1.5,2,4; plots/sweep marks "
                          "the best value")
    con.add_argument("--best", metavar="NAME",
                     help="the declared sweep for NAME's best setting (" + ", ".join(
                         f"{k}: {v}" for k, v in ct.BEST_SETTING_SWEEPS.items()) + ")")
    con.add_argument("--one-way-delay-ms", type=DELAY_MS, default=ct.CONTEST_ONE_WAY_DELAY_MS,
                     help="one-way delay each way, ms (default %(default)s)")
    con.add_argument("--delayed-acks", action="store_true",
                     help="the receiver keeps Linux's delayed ACKs (about one ACK per two segments) instead of "
                          "acknowledging every segment at once as the contest's receiver did")
    _datapath_args(con)
    _validity_args(con)
    con.add_argument("--max-new-runs", type=RUNS, default=None, metavar="N",
                     help="stop after N new runs; run the same command again to go on (a long leaderboard in "
                          "pieces)")
    con.add_argument("--out", type=Path, help="results directory: new or empty, or an earlier contest's to resume "
                     "(its finished runs are kept; without --cca its CCAs run) "
                     "(default: results/contest-<trace>-<timestamp>)")


def cmd_contest(args) -> int:
    from . import contest as ct

    if args.best and args.sweep:
        raise CcplabError("give either --best or --sweep, not both")
    sweep = ct.best_sweep(args.best) if args.best else args.sweep
    setup = ct.make_setup(args.trace, args.cca, args.runs, args.duration_s, sweep, args.one_way_delay_ms,
                          quickack=not args.delayed_acks, **_datapath(args))
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out or REPO_ROOT / "results" / f"contest-{setup.trace_name}-{stamp}"
    setup = ct.resume_setup(setup, out, ccas_given=bool(args.cca))
    rows = ct.run_contest(setup, out, max_new_runs=args.max_new_runs, policy=_policy(args))
    print(ct.format_leaderboard(ct.leaderboard(rows), setup))
    left = len(ct.pending_runs(setup, out.resolve()))
    if left:
        print(f"{left} run(s) still to do: run the same command again to go on")
    print(f"results: {out}")
    return 0


def _add_contest_doc_parser(sub) -> None:
    doc = sub.add_parser(
        "contest-doc", help="one Markdown page from finished contest directories: leaderboards, the two "
        "receivers compared, each swept algorithm's best setting, every sweep's curve",
        description="Read contest directories (contest.json + runs.csv of `ccplab contest`) and write one Markdown "
        "page: a leaderboard per trace and receiver, the scores under both receivers side by side, the best "
        "value of each sweep (with the default's score when a leaderboard holds it or the sweep ran the default "
        "value; marked when it is the first or last value swept) and every sweep's values, each table with the "
        "command that reproduces it; sweeps of one parameter under one setup show as one.")
    doc.add_argument("dirs", nargs="*", type=Path, metavar="DIR", help="a finished `ccplab contest` directory")
    doc.add_argument("--data", type=Path, metavar="FILE", help="the page's data file (JSON): the results kept there "
                     "are rendered with the DIRs given (a DIR replaces the kept result of the same directory name) "
                     "and all of them are written back, so the page grows without the earlier directories "
                     "(docs/results/contest.json for docs/results/contest.md); created when missing")
    doc.add_argument("--out", type=Path, help="the page to write (default: print it)")


def cmd_contest_doc(args) -> int:
    from .contest_doc import contest_doc_command

    page = contest_doc_command(args.dirs, args.out, args.data)
    print(f"page: {args.out}" if args.out else page, end="\n" if args.out else "")
    return 0


def _add_coexist_parser(sub) -> None:
    from . import coexist as cx

    co = sub.add_parser(
        "coexist", help="every ordered pair of the CCAs given (each against itself too) sharing one link, the "
        "second flow arriving later, plus each CCA alone; a matrix of share, Jain's index and harm",
        description="For CCAs A, B, ...: runs every ordered pair (a flow of the row CCA from 0, one of the column "
        "CCA from --second-start-s) and each CCA alone on a constant-capacity link, --runs times each, then "
        "writes coexist.csv (the row flow's share while both run, Jain's fairness index, throughput and delay "
        "harm done to the row flow, Ware et al. HotNets 2019), heatmaps and the report.")
    co.add_argument("--cca", action="append", required=True, help="a CCA (repeat, or comma-separate; "
                    "portus:NAME=COMMAND one per --cca, and it meets kernel CCAs and itself only): " + CCA_HELP)
    co.add_argument("--runs", type=RUNS, default=3, help="runs of each pair and each CCA alone (default %(default)s)")
    co.add_argument("--second-start-s", type=DURATION_S, default=cx.DEFAULT_SECOND_START_S,
                    help="when the second flow starts, s after the first (default %(default)s)")
    co.add_argument("--capacity-mbps", type=RATE_MBPS, default=cx.DEFAULT_CAPACITY_MBPS,
                    help="the link's constant capacity, Mbit/s (default %(default)s)")
    co.add_argument("--one-way-delay-ms", type=DELAY_MS, default=cx.DEFAULT_ONE_WAY_DELAY_MS,
                    help="one-way delay each way, ms (default %(default)s)")
    queue = co.add_mutually_exclusive_group()
    queue.add_argument("--queue-bdp", type=number(0.0, 1000.0, lo_open=True), default=None,
                       help="droptail queue in bandwidth-delay products of the link (default 1)")
    queue.add_argument("--queue-packets", type=QUEUE_PACKETS, default=None, help="droptail queue, packets")
    co.add_argument("--duration-s", type=DURATION_S, default=cx.DEFAULT_DURATION_S, help="run length, s (default "
                    "%(default)s)")
    _datapath_args(co)
    _validity_args(co)
    co.add_argument("--out", type=Path, required=True, help="results directory (new or empty)")


def cmd_coexist(args) -> int:
    from . import coexist as cx

    ccas = [parse_cca(n) for n in split_cca_list(args.cca)]
    plan = cx.make_plan(ccas, args.second_start_s, args.duration_s)
    queue = args.queue_packets if args.queue_packets is not None else cx.queue_packets_for(
        1.0 if args.queue_bdp is None else args.queue_bdp, args.capacity_mbps, args.one_way_delay_ms)
    report = cx.run_coexist(plan, args.runs, args.out, args.capacity_mbps, args.one_way_delay_ms, queue,
                            args.duration_s, policy=_policy(args), **_datapath(args))
    print(f"coexistence matrix: {args.out / 'coexist.csv'}; report: {report}")
    return 0


COMMANDS = {"run": cmd_run, "compare": cmd_compare, "demo": cmd_demo, "clean": cmd_clean, "sweep": cmd_sweep,
            "algorithms": cmd_algorithms, "fidelity": cmd_fidelity, "analyze": cmd_analyze, "report": cmd_report,
            "contest": cmd_contest, "contest-doc": cmd_contest_doc, "coexist": cmd_coexist}

if __name__ == "__main__":
    sys.exit(main())
