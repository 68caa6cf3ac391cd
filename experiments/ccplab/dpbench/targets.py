"""The benchmark's targets for ``--fold kernel`` and its two tables (results, targets)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from .measure import Measurement
from .plan import FLOWS, FOLD_OF_MODE, MODES, REFERENCE_MODE, TARGET_MODE

MIN_THROUGHPUT_RATIO = 0.97
MAX_CPU_RATIO = 1.05
EQUAL_THROUGHPUT_TOLERANCE = 0.03  # "equal paced throughput": within 3%
MAX_BPF_NS_PER_ACK = 1500.0
MAX_MSGS_PER_RTT = 2.0


@dataclass(frozen=True)
class TargetRow:
    """One target check: what, the configuration, the figure, the bound, PASS or MISS (with why), and
    the 95% bootstrap interval of the figure's median over repetitions ("" with fewer than 3)."""

    what: str
    config: str
    figure: str
    bound: str
    verdict: str
    interval: str = ""


INTERVAL_CONFIDENCE = 0.95
"""Confidence level of the interval printed beside each target's median."""


def median_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """The ``INTERVAL_CONFIDENCE`` percentile-bootstrap interval of the median of ``values``
    (scipy.stats.bootstrap, 9999 resamples, a fixed seed so a saved run prints the same interval
    again); None with fewer than 3 values. On this VM one repetition's ratio spreads by +-15%
    (docs/datapath.md, "Performance"), so a median a few percent from a bound decides nothing: the interval
    says how far the repetitions let it move."""
    if len(values) < 3:
        return None
    if min(values) == max(values):
        return (values[0], values[0])
    import numpy as np
    from scipy.stats import bootstrap
    res = bootstrap((np.asarray(values, dtype=float),), np.median, confidence_level=INTERVAL_CONFIDENCE,
                    n_resamples=9999, method="percentile", rng=np.random.default_rng(0))
    return (float(res.confidence_interval.low), float(res.confidence_interval.high))


def _with_interval(verdict: str, interval: tuple[float, float] | None, bound: float) -> str:
    """``verdict``, noting when the median's interval reaches across ``bound``."""
    if interval is None or not interval[0] <= bound <= interval[1] or verdict.startswith("MISS ("):
        return verdict
    return f"{verdict} (the 95% interval spans the bound)"


def _interval_text(interval: tuple[float, float] | None, fmt: Callable[[float], str]) -> str:
    return "" if interval is None else f"{fmt(interval[0])}-{fmt(interval[1])}"


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _of(ms: Sequence[Measurement], mode: str, flows: int, paced: bool) -> list[Measurement]:
    return [m for m in ms if m.mode == mode and m.flows == flows and m.paced == paced]


def _verdict(ok: bool | None, why: str = "") -> str:
    if ok is None:
        return "MISS (no data)"
    return "PASS" if ok else ("MISS" + (f" ({why})" if why else ""))


def evaluate_targets(ms: Sequence[Measurement], flows: Sequence[int] = FLOWS) -> list[TargetRow]:
    """The four targets for ``ccp-kernel-fold`` against ``kernel`` (medians over repetitions).

    Throughput at full speed per flow count; CPU when paced per flow count (MISS when the paced
    throughputs differ by more than 3%, since the CPU ratio then compares unequal work); BPF time per
    ACK and messages per RTT per flow per flow count, the worse of full speed and paced. CPU is the
    run's own CPU over its steady window (``Measurement.own_cpu``, :func:`steady_window`): on a
    shared machine the host's busy share also counts whatever else runs. A ratio is the median over repetitions of ccp's figure over kernel cubic's in
    the same repetition (run back to back, so drift hits both), other figures the median over
    repetitions: one repetition's outlier (kernel cubic's own CPU at one paced flow ran 0.050 and
    0.062 of both cores in two repetitions of one run) moves a mean of few repetitions by more than
    the 5% the CPU target allows.
    """
    rows: list[TargetRow] = []
    for n in flows:
        ratios = _paired_ratios(ms, n, False, lambda m: m.gbps)
        ratio, ci = _median(ratios), median_interval(ratios)
        rows.append(TargetRow("throughput vs kernel cubic", f"{n} flows, full", _x(ratio),
                              f">= {MIN_THROUGHPUT_RATIO:.2f}x",
                              _with_interval(_verdict(None if ratio is None else ratio >= MIN_THROUGHPUT_RATIO),
                                             ci, MIN_THROUGHPUT_RATIO),
                              _interval_text(ci, _x)))
    for n in flows:
        kp, cp = _of(ms, "kernel", n, True), _of(ms, TARGET_MODE, n, True)
        kg, cg = _median([m.gbps for m in kp]), _median([m.gbps for m in cp])
        ratios = _paired_ratios(ms, n, True, lambda m: m.own_cpu)
        ratio, ci = _median(ratios), median_interval(ratios)
        equal = kg is not None and cg is not None and kg > 0 and abs(cg / kg - 1) <= EQUAL_THROUGHPUT_TOLERANCE
        why = "" if equal or ratio is None else f"throughput {cg:.3f} vs {kg:.3f} Gbit/s, not equal"
        ok = None if ratio is None else (ratio <= MAX_CPU_RATIO and equal)
        rows.append(TargetRow("own CPU vs kernel cubic", f"{n} flows, paced", _x(ratio),
                              f"<= {MAX_CPU_RATIO:.2f}x", _with_interval(_verdict(ok, why), ci, MAX_CPU_RATIO),
                              _interval_text(ci, _x)))
    for n in flows:
        # the worse of full speed and paced, by median; its interval
        per_load = [[m.bpf_ns_per_ack for m in _of(ms, TARGET_MODE, n, p) if m.bpf_ns_per_ack is not None]
                    for p in (False, True)]
        per_load = [v for v in per_load if v]
        worst_values = max(per_load, key=statistics.median) if per_load else []
        worst, ci = _median(worst_values), median_interval(worst_values)
        rows.append(TargetRow("BPF time per ACK", f"{n} flows", "n/a" if worst is None else f"{worst / 1000:.2f} us",
                              f"< {MAX_BPF_NS_PER_ACK / 1000:.1f} us",
                              _with_interval(_verdict(None if worst is None else worst < MAX_BPF_NS_PER_ACK),
                                             ci, MAX_BPF_NS_PER_ACK),
                              _interval_text(ci, lambda v: f"{v / 1000:.2f}")))
    for n in flows:
        worst = _worst([_median([m.msgs_per_rtt_per_flow for m in _of(ms, TARGET_MODE, n, p)]) for p in (False, True)])
        rows.append(TargetRow("user-space msgs per RTT per flow", f"{n} flows",
                              "n/a" if worst is None else f"{worst:.2f}", f"<= {MAX_MSGS_PER_RTT:g}",
                              _verdict(None if worst is None else worst <= MAX_MSGS_PER_RTT)))
    if any(m.mode == REFERENCE_MODE for m in ms):
        rows += evaluate_floor(ms, flows)
    return rows


def evaluate_floor(ms: Sequence[Measurement], flows: Sequence[int] = FLOWS) -> list[TargetRow]:
    """ccp-kernel-fold against ``bpf-cubic`` (the kernel's cubic behind the smallest BPF struct_ops, the
    floor of any BPF congestion control), per flow count: throughput at full speed (>= 0.97x) and own
    CPU when paced (<= 1.05x, equal paced throughput required), as against kernel cubic; BPF time per
    ACK as a ratio; and what the struct_ops shim itself costs: bpf-cubic's throughput over kernel
    cubic's. Ratios are medians of per-repetition ratios (:func:`_paired_ratios`); a row without a
    bound says "-" as its verdict."""
    rows: list[TargetRow] = []
    for n in flows:
        ratios = _paired_ratios(ms, n, False, lambda m: m.gbps, reference=REFERENCE_MODE)
        ratio, ci = _median(ratios), median_interval(ratios)
        rows.append(TargetRow("throughput vs bpf-cubic", f"{n} flows, full", _x(ratio),
                              f">= {MIN_THROUGHPUT_RATIO:.2f}x",
                              _with_interval(_verdict(None if ratio is None else ratio >= MIN_THROUGHPUT_RATIO),
                                             ci, MIN_THROUGHPUT_RATIO), _interval_text(ci, _x)))
    for n in flows:
        bg = _median([m.gbps for m in _of(ms, REFERENCE_MODE, n, True)])
        cg = _median([m.gbps for m in _of(ms, TARGET_MODE, n, True)])
        ratios = _paired_ratios(ms, n, True, lambda m: m.own_cpu, reference=REFERENCE_MODE)
        ratio, ci = _median(ratios), median_interval(ratios)
        equal = bg is not None and cg is not None and bg > 0 and abs(cg / bg - 1) <= EQUAL_THROUGHPUT_TOLERANCE
        why = "" if equal or ratio is None else f"throughput {cg:.3f} vs {bg:.3f} Gbit/s, not equal"
        ok = None if ratio is None else (ratio <= MAX_CPU_RATIO and equal)
        rows.append(TargetRow("own CPU vs bpf-cubic", f"{n} flows, paced", _x(ratio), f"<= {MAX_CPU_RATIO:.2f}x",
                              _with_interval(_verdict(ok, why), ci, MAX_CPU_RATIO), _interval_text(ci, _x)))
    for n in flows:
        ratios = [r for p in (False, True) for r in _paired_ratios(
            ms, n, p, lambda m: m.bpf_ns_per_ack or 0.0, reference=REFERENCE_MODE) if r]
        ratio, ci = _median(ratios), median_interval(ratios)
        rows.append(TargetRow("BPF time per ACK vs bpf-cubic", f"{n} flows", _x(ratio), "-", "-",
                              _interval_text(ci, _x)))
    for n in flows:
        ratios = _paired_ratios(ms, n, False, lambda m: m.gbps, mode=REFERENCE_MODE)
        ratio, ci = _median(ratios), median_interval(ratios)
        rows.append(TargetRow("bpf-cubic vs kernel cubic (shim)", f"{n} flows, full", _x(ratio), "-", "-",
                              _interval_text(ci, _x)))
    return rows


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _paired_ratios(ms: Sequence[Measurement], flows: int, paced: bool,
                   figure: Callable[[Measurement], float], mode: str = TARGET_MODE,
                   reference: str = "kernel") -> list[float]:
    """Per repetition, ``figure`` of ``mode`` (ccp-kernel-fold) over ``reference``'s (kernel cubic) in
    the same repetition (repetitions without both, or with the reference's figure 0, left out), in
    repetition order."""
    ref = {m.rep: figure(m) for m in _of(ms, reference, flows, paced)}
    mine = {m.rep: figure(m) for m in _of(ms, mode, flows, paced)}
    return [mine[r] / ref[r] for r in sorted(ref.keys() & mine.keys()) if ref[r]]


def _paired_ratio(ms: Sequence[Measurement], flows: int, paced: bool,
                  figure: Callable[[Measurement], float]) -> float | None:
    """Median of :func:`_paired_ratios`; None without a repetition that has both."""
    return _median(_paired_ratios(ms, flows, paced, figure))


def _worst(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _x(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.3f}x"


def _fmt(v: float | None, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def results_table(ms: Sequence[Measurement], flows: Sequence[int] = FLOWS) -> str:
    """The per-configuration table: one row per flow count x load x mode, figures as means over
    repetitions except Gbit/s, which lists each repetition in run order, then the mean."""
    head = (f"{'flows':>5} {'load':<6} {'mode':<19} {'Gbit/s (each run)':<24} {'mean':>6} {'busy%':>6} {'own%':>6} {'dmn%':>5} {'bpf%':>5} {'run%':>5} "
            f"{'cc ns':>6} {'bpf ns/ACK':>10} {'msg/s/flow':>11} {'msg/RTT':>8} {'RTT us':>8} "
            f"{'cmd lat p50/p99 us':>19} {'kACK/s':>7}")
    lines = [head, "-" * len(head)]
    for n in flows:
        for paced in (False, True):
            for mode in MODES:
                rs = _of(ms, mode, n, paced)
                if not rs:
                    continue
                runs = " ".join(f"{m.gbps:.2f}" for m in rs)
                busy, own = _mean([m.busy for m in rs]), _mean([m.own_cpu for m in rs])
                dmn = _mean([m.daemons_cpu for m in rs])
                bpf = _mean([m.bpf_cpu for m in rs])
                acks = _mean([m.acks_per_s for m in rs])
                run = _mean([m.own_cpu_run for m in rs])
                lat = (f"{_fmt(_mean([m.latency_p50_us for m in rs]), '.0f')}/"
                       f"{_fmt(_mean([m.latency_p99_us for m in rs]), '.0f')}") if mode in FOLD_OF_MODE else "-"
                lines.append(
                    f"{n:>5} {'1G' if paced else 'full':<6} {mode:<19} {runs:<24} "
                    f"{_fmt(_mean([m.gbps for m in rs]), '.2f'):>6} {_fmt(None if busy is None else 100 * busy, '.1f'):>6} "
                    f"{_fmt(None if own is None else 100 * own, '.1f'):>6} "
                    f"{'-' if dmn is None else f'{100 * dmn:.1f}':>5} "
                    f"{'-' if bpf is None else f'{100 * bpf:.2f}':>5} "
                    f"{'-' if run is None else f'{100 * run:.1f}':>5} "
                    f"{_fmt(_mean([m.cong_control_ns for m in rs]), '.0f'):>6} "
                    f"{_fmt(_mean([m.bpf_ns_per_ack for m in rs]), '.0f'):>10} "
                    f"{_fmt(_mean([m.msgs_per_s_per_flow for m in rs]), '.0f'):>11} "
                    f"{_fmt(_mean([m.msgs_per_rtt_per_flow for m in rs]), '.2f'):>8} "
                    f"{_fmt(_mean([m.rtt_us for m in rs]), '.0f'):>8} {lat:>19} "
                    f"{'-' if acks is None else f'{acks / 1000:.1f}':>7}")
    return "\n".join(lines)


def targets_table(rows: Sequence[TargetRow]) -> str:
    """The targets of ``--fold kernel`` as a table: what, configuration, figure, its 95% interval
    (:func:`median_interval`), bound, PASS/MISS."""
    head = f"{'target (--fold kernel)':<34} {'config':<16} {'figure':>10} {'95% interval':>15} {'bound':>10}  verdict"
    return "\n".join([head, "-" * len(head)] +
                     [f"{r.what:<34} {r.config:<16} {r.figure:>10} {r.interval:>15} {r.bound:>10}  {r.verdict}"
                      for r in rows])
