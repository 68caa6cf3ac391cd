"""transient: transient-performance analysis of congestion control on mahimahi-format links.

Reads mahimahi mm-link logs (ours and stock mahimahi's) and ccplab run
directories; computes the whole-run metrics of mahimahi's mm-throughput-graph
(capacity, throughput, utilization, p95 per-packet queueing delay, p95 signal
delay, power score) and, for every capacity step from the data flow's own
start, the transient: convergence, Normalized Area, second-order metrics
(rise time, overshoot, settling time, damping ratio, natural frequency) and
the delay side (peak and standing queue, drain time, drops).  Runs with
several flows sharing the link get per-flow tables, Jain's fairness index,
arrivals and departures scored as fair-share steps, and harm
(`transient.flows`).  Two methods:
"ccplab" (corrected, default) and "tpcca" (the TPCCA poster's reference
analysis, faults included).  The report (CSV tables, HTML, plots) is in
`transient.report`.

Main entry points::

    a = analyze_all("results/")                         # Analysis(runs, steps, series, errors, flows, ...)
    a = analyze_all("uplink.log", options=AnalysisOptions(method="tpcca", capacity_mbps=12))
    write_report("results/", a.runs, a.steps, a.series)

Command line: ``python -m transient PATH [--json] [--method M] [--step AT:FROM:TO] ...``
(also ``ccplab analyze``).
"""

# Every name is loaded from its module on first use (PEP 562): ``import transient`` (and the runner,
# which needs one function) costs no numpy/pandas/scipy/matplotlib import until an analysis runs.
_HOME = {
    **dict.fromkeys(['Analysis', 'AnalysisOptions', 'DEFAULT_RTT_MS', 'JSON_RUN_FIELDS', 'METHODS', 'RUN_COLUMNS', 'RunResult', 'STEP_COLUMNS', 'analyze_all', 'analyze_log', 'analyze_paths', 'analyze_results', 'analyze_run', 'find_run_dirs', 'load_metadata'], "analyze"),
    **dict.fromkeys(['write_atomic'], "atomic"),
    **dict.fromkeys(['ConvergenceParams'], "convergence"),
    **dict.fromkeys(['AnalysisError', 'LogFormatError', 'StepFormatError', 'TransientError'], "errors"),
    **dict.fromkeys(['FAIRNESS_COLUMNS', 'FLOW_COLUMNS', 'FLOW_STEP_COLUMNS', 'coexistence_matrix', 'delta_fair_convergence_time', 'harm', 'jain_index', 'smoothness_cv'], "flows"),
    **dict.fromkeys(['EVENT_KINDS', 'LinkLog', 'parse_link_log', 'read_link_log'], "mahimahi"),
    **dict.fromkeys(['LinkMetrics', 'link_metrics', 'mahimahi_percentile', 'signal_delay_series', 'window_link_metrics'], "metrics"),
    **dict.fromkeys(['write_report'], "report"),
    **dict.fromkeys(['SecondOrder', 'second_order_metrics', 'unit_step_response'], "secondorder"),
    **dict.fromkeys(['SERIES_COLUMNS', 'binned_series', 'rate_series'], "series"),
    **dict.fromkeys(['Step', 'parse_steps'], "steps"),
    **dict.fromkeys(['FLOW_START_MIN_BYTES', 'flow_bounds_s', 'flow_start_s'], "timezero"),
    **dict.fromkeys(['TPCCA_FAULTS', 'tpcca_analysis'], "tpcca"),
}


def __getattr__(name: str):
    mod = _HOME.get(name)
    if mod is None:
        raise AttributeError(f"module 'transient' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))


__all__ = [
    "DEFAULT_RTT_MS", "JSON_RUN_FIELDS", "METHODS", "RUN_COLUMNS", "STEP_COLUMNS", "SERIES_COLUMNS",
    "EVENT_KINDS", "FLOW_START_MIN_BYTES", "TPCCA_FAULTS", "FLOW_COLUMNS", "FAIRNESS_COLUMNS", "FLOW_STEP_COLUMNS",
    "jain_index", "delta_fair_convergence_time", "harm", "smoothness_cv", "coexistence_matrix",
    "Analysis", "AnalysisOptions", "RunResult", "Step", "LinkLog", "LinkMetrics", "ConvergenceParams",
    "SecondOrder", "TransientError", "LogFormatError", "AnalysisError", "StepFormatError",
    "analyze_all", "analyze_log", "analyze_paths", "analyze_results", "analyze_run", "find_run_dirs",
    "load_metadata", "read_link_log", "parse_link_log", "link_metrics", "window_link_metrics", "mahimahi_percentile",
    "signal_delay_series", "binned_series", "rate_series", "parse_steps", "flow_start_s", "flow_bounds_s",
    "write_atomic",
    "second_order_metrics", "unit_step_response", "tpcca_analysis", "write_report",
]
