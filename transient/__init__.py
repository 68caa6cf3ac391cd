"""transient: transient-performance analysis of congestion control on mahimahi-format links.

Reads mahimahi mm-link logs and ccplab run directories, computes the
whole-run metrics of mahimahi's mm-throughput-graph (capacity, throughput,
utilization, p95 per-packet queueing delay, p95 signal delay, power score)
and the TPCCA transient metrics of every capacity step (convergence, time to
converge, Normalized Area, steady throughput), and writes CSV tables and an
HTML report with figures.

Main entry points::

    runs, steps = analyze_results("results/")          # tables
    a = analyze_all("results/")                        # + per-run rate series
    write_report("results/", a.runs, a.steps, a.series)

Command line: ``python -m transient PATH [--json] [--rtt-ms MS] [--out DIR]``.
"""

from .analyze import (
    DEFAULT_RTT_MS,
    RUN_COLUMNS,
    STEP_COLUMNS,
    Analysis,
    RunResult,
    analyze_all,
    analyze_log,
    analyze_results,
    analyze_run,
    find_run_dirs,
    load_metadata,
)
from .atomic import write_atomic
from .errors import AnalysisError, LogFormatError, StepFormatError, TransientError
from .mahimahi import EVENT_KINDS, LinkLog, parse_link_log, read_link_log
from .metrics import LinkMetrics, link_metrics, mahimahi_percentile, signal_delay_series
from .report import write_report
from .series import rate_series
from .steps import Step, parse_steps
from .timezero import FLOW_START_MIN_BYTES, flow_start_s
from .tpcca import (
    SteadyState,
    SteadyStateParams,
    StepTransient,
    find_steady_state,
    normalized_area,
    step_transient,
)

__all__ = [
    "DEFAULT_RTT_MS", "RUN_COLUMNS", "STEP_COLUMNS", "EVENT_KINDS",
    "Analysis", "RunResult", "Step", "LinkLog", "LinkMetrics",
    "SteadyState", "SteadyStateParams", "StepTransient",
    "TransientError", "LogFormatError", "AnalysisError",
    "analyze_all", "analyze_log", "analyze_results", "analyze_run", "find_run_dirs", "load_metadata",
    "read_link_log", "parse_link_log", "link_metrics", "mahimahi_percentile", "signal_delay_series",
    "rate_series", "parse_steps", "flow_start_s", "FLOW_START_MIN_BYTES", "write_atomic", "StepFormatError", "find_steady_state", "normalized_area", "step_transient", "write_report",
]
