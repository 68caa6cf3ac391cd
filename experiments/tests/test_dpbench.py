"""The datapath benchmark's pure parts: /proc/stat deltas, bpftool JSON, the datapath's summary line,
iperf3 JSON, per-flow message rates, the target verdicts and the run order (no root needed)."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from ccplab.dpbench import cli, host, measure, targets
from ccplab.dpbench import plan as runs
from ccplab.errors import CcplabError

DATA = Path(__file__).parent / "data"
# What `ccp-datapath --stats-file` writes at exit (the figures of its exit summary line), one run per fold mode.
STATS_USERSPACE = DATA / "datapath-stats-userspace.json"
STATS_KERNEL = DATA / "datapath-stats-kernel.json"

PROC_STAT = """cpu  100 10 50 800 40 5 5 0 7 0
cpu0 50 5 25 400 20 2 3 0 3 0
cpu1 50 5 25 400 20 3 2 0 4 0
intr 12345
"""


def test_cpu_counters_busy_excludes_idle_and_iowait_and_guest_is_not_counted_twice():
    c = measure.cpu_counters(PROC_STAT)
    assert c.total == 100 + 10 + 50 + 800 + 40 + 5 + 5 + 0
    assert c.busy == c.total - 800 - 40


def test_own_fraction_is_the_processes_ticks_over_all_ticks():
    before = measure.CpuCounters(busy=1000, total=5000)
    after = measure.CpuCounters(busy=1900, total=6000)
    assert measure.own_fraction(before, after, process_ticks=300) == pytest.approx(0.3)
    with pytest.raises(CcplabError, match="did not advance"):
        measure.own_fraction(after, after, 1)


def test_run_time_ns_is_the_first_schedstat_field():
    # sum_exec_runtime (ns) run_delay (ns) timeslices
    assert measure.run_time_ns("924001 35000 17\n") == 924001
    for bad in ("", "924001 0", "x 0 1", "1 2 3 4"):
        with pytest.raises(CcplabError, match="not a /proc/PID/task/TID/schedstat"):
            measure.run_time_ns(bad)


def test_cpu_ticks_of_a_live_process_grow_with_its_threads_work_and_a_gone_one_is_an_error():
    before = measure.cpu_ticks_of([os.getpid()])
    start = time.thread_time()
    while time.thread_time() - start < 0.05:  # 50 ms of CPU in this thread: 5 ticks at 100 Hz
        pass
    grown = measure.cpu_ticks_of([os.getpid()]) - before
    assert 0.05 * os.sysconf("SC_CLK_TCK") <= grown <= 0.5 * os.sysconf("SC_CLK_TCK")
    child = subprocess.Popen(["true"])
    child.wait()
    with pytest.raises(CcplabError, match=f"process {child.pid} .* exited"):
        measure.cpu_ticks_of([child.pid])


SNMP = """Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 22907
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 2 0 0 0 0 15335 694255 0 0 0 0
Udp: InDatagrams NoPorts
Udp: 0 0
"""


def test_tcp_segments_reads_the_tcp_lines_and_differences_subtract():
    segs = measure.tcp_segments(SNMP)
    assert (segs.in_segs, segs.out_segs) == (15335, 694255)
    assert segs - measure.TcpSegments(335, 4255) == measure.TcpSegments(15000, 690000)
    with pytest.raises(CcplabError, match="no Tcp: header"):
        measure.tcp_segments("Ip: a b\nIp: 1 2\n")
    with pytest.raises(CcplabError, match="InSegs or OutSegs"):
        measure.tcp_segments("Tcp: RtoMin InErrs\nTcp: 200 0\n")


def test_bpf_cpu_share_is_ns_per_ack_times_acks_over_all_cores():
    # 1,900 ACKs/s at 600 ns: 1.14 ms of BPF per second, 0.057 % of two cores
    assert measure.bpf_cpu_share(600.0, 1900.0, 2) == pytest.approx(0.00057)
    assert measure.bpf_cpu_share(None, 1900.0, 2) is None and measure.bpf_cpu_share(600.0, None, 2) is None


def test_busy_fraction_of_two_samples():
    before = measure.CpuCounters(busy=1000, total=5000)
    after = measure.CpuCounters(busy=1600, total=6000)
    assert measure.busy_fraction(before, after) == pytest.approx(0.6)
    with pytest.raises(CcplabError, match="did not advance"):
        measure.busy_fraction(after, after)


def test_cpu_counters_bad_input_names_the_problem():
    with pytest.raises(CcplabError, match="no aggregate 'cpu' line"):
        measure.cpu_counters("cpu0 1 2 3 4\n")
    with pytest.raises(CcplabError, match="at least 4"):
        measure.cpu_counters("cpu 1 2 3\n")


BPFTOOL = json.dumps([
    {"id": 40, "type": "struct_ops", "name": "ccp_cong_contro", "run_time_ns": 999, "run_cnt": 1},  # older instance
    {"id": 51, "type": "struct_ops", "name": "ccp_init", "run_time_ns": 5000, "run_cnt": 10,
     "pids": [{"pid": 777, "comm": "ccp-datapath"}]},
    {"id": 52, "type": "struct_ops", "name": "ccp_cong_control", "run_time_ns": 1_200_000, "run_cnt": 1000,
     "pids": [{"pid": 777, "comm": "ccp-datapath"}]},
    {"id": 53, "type": "struct_ops", "name": "ccp_in_ack_even", "run_time_ns": 300_000, "run_cnt": 1000,
     "pids": [{"pid": 777, "comm": "ccp-datapath"}]},
    {"id": 54, "type": "struct_ops", "name": "ccp_set_state", "pids": [{"pid": 777, "comm": "ccp-datapath"}]},
    {"id": 55, "type": "struct_ops", "name": "ccp_cong_contro", "run_time_ns": 7, "run_cnt": 7,
     "pids": [{"pid": 888, "comm": "other"}]},
    {"id": 56, "type": "tracing", "name": "ccp_something", "run_time_ns": 1, "run_cnt": 1},
])


def test_ccp_prog_costs_selects_this_datapaths_struct_ops_programs():
    costs = measure.ccp_prog_costs(BPFTOOL, after_id=50, pid=777)
    assert [c.name for c in costs] == ["ccp_init", "ccp_cong_control", "ccp_in_ack_even", "ccp_set_state"]
    assert costs[-1] == measure.ProgCost("ccp_set_state", 0, 0), "bpftool omits zero counters"
    cc_ns, all_ns = measure.bpf_ns_per_ack(costs)
    assert cc_ns == pytest.approx(1200.0)
    assert all_ns == pytest.approx((1_200_000 + 300_000) / 1000), "per-flow ccp_init left out"
    by_prog = measure.bpf_ns_per_ack_by_prog(costs)
    assert by_prog == {"ccp_init": pytest.approx(5.0), "ccp_cong_control": pytest.approx(1200.0),
                       "ccp_in_ack_even": pytest.approx(300.0)}, "per cong_control call; idle ones left out"
    assert sum(by_prog.values()) - by_prog["ccp_init"] == pytest.approx(all_ns)
    assert measure.bpf_ns_per_ack_by_prog([measure.ProgCost("ccp_init", 10, 1)]) is None


def test_ccp_prog_costs_without_pids_uses_ids_only():
    progs = json.loads(BPFTOOL)
    for p in progs:
        p.pop("pids", None)
    costs = measure.ccp_prog_costs(json.dumps(progs), after_id=51, pid=777)
    assert [c.run_cnt for c in costs if c.name.startswith("ccp_cong")] == [1000, 7]
    _, all_ns = measure.bpf_ns_per_ack(costs)
    assert all_ns == pytest.approx((1_200_000 + 300_000 + 7) / 1007), "full and 15-character names both count"
    assert measure.max_prog_id(BPFTOOL) == 56
    assert measure.max_prog_id("[]") == 0


def test_bpf_ns_per_ack_none_when_cong_control_never_ran_and_bad_json_is_an_error():
    assert measure.bpf_ns_per_ack([measure.ProgCost("ccp_init", 10, 1)]) == (None, None)
    with pytest.raises(CcplabError, match="no JSON"):
        measure.ccp_prog_costs("Error: no", after_id=0)
    with pytest.raises(CcplabError, match="JSON list"):
        measure.ccp_prog_costs("{}", after_id=0)


def test_crossing_messages_and_latency_per_fold_mode():
    user, kernel = measure.datapath_stats(STATS_USERSPACE), measure.datapath_stats(STATS_KERNEL)
    assert measure.crossing_messages(user, "userspace") == 420000 + 30
    assert measure.crossing_messages(kernel, "kernel") == 16000
    assert measure.command_latency_us(user, "userspace") == (pytest.approx(96.0), pytest.approx(2700.5))
    assert measure.command_latency_us(kernel, "kernel") == (pytest.approx(55.125), pytest.approx(812.0))
    assert measure.command_latency_us(user, "kernel") == (None, None), "null: no sample"
    assert measure.command_latency_us(kernel, "userspace") == (None, None)


def test_datapath_stats_name_the_file_and_the_key_that_is_missing_or_wrong(tmp_path):
    stats = json.loads(STATS_KERNEL.read_text())
    path = tmp_path / "stats.json"
    with pytest.raises(CcplabError, match=f"{path} is missing .*exits cleanly"):
        measure.datapath_stats(path)
    path.write_text("{")
    with pytest.raises(CcplabError, match=f"{path}: not JSON"):
        measure.datapath_stats(path)
    path.write_text("[]")
    with pytest.raises(CcplabError, match=f"{path}: the file is not a JSON object"):
        measure.datapath_stats(path)
    for key, broken, why in (
            ("invokes", None, "no key 'invokes'"),
            ("kernel_fold", {k: v for k, v in stats["kernel_fold"].items() if k != "reports"},
             "no key 'kernel_fold.reports'"),
            ("kernel_fold", 3, "kernel_fold is not a JSON object"),
            ("invokes", 1.5, "invokes is 1.5, not a whole number"),
            ("invokes", True, "invokes is True, not a whole number"),
            ("commands", None, "commands is None, not a whole number"),
            ("report_to_cwnd_us", {**stats["report_to_cwnd_us"], "p99": "812"},
             "report_to_cwnd_us.p99 is '812', not a number of us or null")):
        changed = {**stats, key: broken}
        if broken is None and why.startswith("no key"):
            del changed[key]
        path.write_text(json.dumps(changed))
        with pytest.raises(CcplabError, match=f"{path}: ") as err:
            measure.datapath_stats(path)
        assert why in str(err.value), (why, str(err.value))
    path.write_text(json.dumps({**stats, "added_later": 1}))
    assert measure.datapath_stats(path)["kernel_fold"]["reports"] == 16000, "keys beyond the schema are allowed"


def test_the_fixtures_have_exactly_the_schemas_keys():
    def keys(d, where=""):
        return {f"{where}{k}" for k in d} | {
            k for key, v in d.items() if isinstance(v, dict) for k in keys(v, f"{where}{key}.")}
    for path in (STATS_USERSPACE, STATS_KERNEL):
        assert keys(json.loads(path.read_text())) == keys(measure.STATS_SCHEMA), path


def test_each_ccp_run_asks_the_datapath_for_its_stats_file(tmp_path, needs_binaries):
    argv = host.datapath_argv("ccp-kernel-interp", tmp_path / "ready.json", tmp_path / "s.json")
    assert argv[argv.index("--stats-file") + 1] == str(tmp_path / "s.json")
    assert argv[argv.index("--ready-file") + 1] == str(tmp_path / "ready.json")
    assert argv[1:5] == ["--fold", "kernel", "--fold-jit", "false"]


def test_per_flow_rates():
    per_s, per_rtt = measure.per_flow_rates(16000, 8.0, 10, 250.0)
    assert per_s == pytest.approx(200.0)
    assert per_rtt == pytest.approx(0.05)
    assert measure.per_flow_rates(8, 8.0, 1, None) == (1.0, None)
    with pytest.raises(CcplabError):
        measure.per_flow_rates(1, 0.0, 1, 100.0)


def _iperf(bps: float, rtts: list[int], cc: str = "ccp") -> dict:
    return {"end": {"sum_received": {"bits_per_second": bps, "seconds": 8.01},
                    "streams": [{"sender": {"mean_rtt": r}} for r in rtts], "sender_tcp_congestion": cc}}


def test_iperf_figures():
    f = measure.iperf_figures(_iperf(21.5e9, [100, 300]))
    assert (f.gbps, f.seconds, f.streams, f.mean_rtt_us, f.sender_cc) == (21.5, 8.01, 2, 200.0, "ccp")
    with pytest.raises(CcplabError, match="unable to connect"):
        measure.iperf_figures({"error": "unable to connect"})
    with pytest.raises(CcplabError, match="sum_received"):
        measure.iperf_figures({"end": {}})


def _m(mode: str, flows: int, paced: bool, gbps: float, own: float, bpf: float | None = None,
       per_rtt: float | None = None, rep: int = 1) -> measure.Measurement:
    """A measurement whose host busy share (1.0: a loaded machine) differs from its own CPU share."""
    return measure.Measurement(mode, flows, paced, rep, gbps, 1.0, own, 100.0, bpf_ns_per_ack=bpf,
                         msgs_per_rtt_per_flow=per_rtt, daemons_cpu=None if mode == "kernel" else own / 4)


def test_targets_pass_and_miss_at_the_bounds():
    ms = [
        _m("kernel", 1, False, 20.0, 0.8), _m("ccp-kernel-fold", 1, False, 19.4, 0.8, 1400, 1.0),  # 0.97x: PASS
        _m("kernel", 1, True, 1.0, 0.20), _m("ccp-kernel-fold", 1, True, 0.99, 0.21, 1499, 2.0),  # 1.05x: PASS
        _m("ccp-userspace-fold", 1, False, 1.0, 1.0, 9999, 99),  # not the target mode: ignored
    ]
    rows = targets.evaluate_targets(ms, flows=[1])
    assert [r.verdict for r in rows] == ["PASS"] * 4
    assert rows[0].figure == "0.970x" and rows[2].figure == "1.50 us"
    ms = [
        _m("kernel", 1, False, 20.0, 0.8), _m("ccp-kernel-fold", 1, False, 19.3, 0.8, 1000, 0.5),
        _m("kernel", 1, True, 1.0, 0.20), _m("ccp-kernel-fold", 1, True, 1.0, 0.22, 1500, 2.1),
    ]
    assert [r.verdict for r in targets.evaluate_targets(ms, flows=[1])] == ["MISS"] * 4, "worst of full/paced counts"


def test_with_bpf_cubic_measured_every_ccp_figure_is_also_judged_against_that_floor():
    ms = [
        _m("kernel", 1, False, 20.0, 0.8), _m("bpf-cubic", 1, False, 18.0, 0.8, 400),
        _m("ccp-kernel-fold", 1, False, 17.6, 0.8, 1200, 1.0),  # 0.88x kernel: MISS; 0.978x bpf-cubic: PASS
        _m("kernel", 1, True, 1.0, 0.20), _m("bpf-cubic", 1, True, 1.0, 0.20, 500),
        _m("ccp-kernel-fold", 1, True, 1.0, 0.22, 1500, 1.0),  # 1.10x bpf-cubic's CPU: MISS
    ]
    rows = {r.what: r for r in targets.evaluate_targets(ms, flows=[1])}
    assert rows["throughput vs kernel cubic"].verdict.startswith("MISS")
    assert (rows["throughput vs bpf-cubic"].figure, rows["throughput vs bpf-cubic"].verdict) == ("0.978x", "PASS")
    assert (rows["own CPU vs bpf-cubic"].figure, rows["own CPU vs bpf-cubic"].verdict) == ("1.100x", "MISS")
    assert rows["BPF time per ACK vs bpf-cubic"].figure == "3.000x", "median of 1200/400 and 1500/500"
    assert rows["bpf-cubic vs kernel cubic (shim)"].figure == "0.900x"
    assert "bpf-cubic vs kernel cubic (shim)" in targets.targets_table(list(rows.values()))
    without = targets.evaluate_targets([m for m in ms if m.mode != "bpf-cubic"], flows=[1])
    assert not [r for r in without if "bpf-cubic" in r.what], "no floor rows when bpf-cubic did not run"


def test_cpu_target_needs_equal_paced_throughput_and_missing_data_is_a_miss():
    ms = [_m("kernel", 10, True, 1.0, 0.30), _m("ccp-kernel-fold", 10, True, 0.90, 0.20)]
    cpu = [r for r in targets.evaluate_targets(ms, flows=[10]) if r.what.startswith("own CPU")][0]
    assert cpu.figure == "0.667x"
    assert cpu.verdict.startswith("MISS (throughput 0.900 vs 1.000")
    rows = targets.evaluate_targets([], flows=[100])
    assert all(r.verdict == "MISS (no data)" for r in rows) and len(rows) == 4


def test_targets_take_medians_so_one_outlier_repetition_does_not_decide():
    # kernel cubic's own CPU came out 25% low in one of three repetitions: by the ratio of means
    # ccp would miss the 1.05x bound (1.091x), by the median of per-repetition ratios it does not
    kernel_own, ccp_own = [0.20, 0.20, 0.15], [0.20, 0.205, 0.20]
    bpf = [1400, 1450, 3000]
    ms = [m for rep in (1, 2, 3) for m in (
        _m("kernel", 1, True, 1.0, kernel_own[rep - 1], rep=rep),
        _m("ccp-kernel-fold", 1, True, 1.0, ccp_own[rep - 1], bpf[rep - 1], 1.0, rep=rep))]
    cpu, bpf_row = [r for r in targets.evaluate_targets(ms, flows=[1]) if r.config.endswith("paced") or "BPF" in r.what][:2]
    assert (cpu.figure, cpu.verdict) == ("1.025x", "PASS (the 95% interval spans the bound)"), \
        "ratios 1.0, 1.025, 1.333: the median passes, the repetitions would let it miss"
    assert cpu.interval == "1.000x-1.333x"
    assert bpf_row.figure == "1.45 us", "the median repetition's BPF time"
    assert bpf_row.verdict.startswith("PASS (the 95% interval spans"), "1400-3000 ns reaches across 1500"
    ratio_of_means = sum(ccp_own) / sum(kernel_own)
    assert ratio_of_means > targets.MAX_CPU_RATIO, "the outlier would have decided a ratio of means"
    # a ratio only pairs repetitions that have both modes
    assert targets._paired_ratio(ms[:3], 1, True, lambda m: m.own_cpu) == 1.0


def test_run_plan_alternates_modes_within_each_configuration():
    plan = runs.run_plan([1, 10], reps=2)
    assert len(plan) == 2 * 2 * 2 * len(runs.DEFAULT_MODES)
    n = len(runs.DEFAULT_MODES)
    assert [m for *_, m in plan[:2 * n]] == list(runs.DEFAULT_MODES) + list(runs.DEFAULT_MODES)[::-1], \
        "every second repetition in reverse order"
    every = runs.run_plan([1], reps=1, modes=runs.MODES)
    assert [m for *_, m in every[:5]] == ["kernel", "bpf-cubic", "ccp-kernel-fold", "ccp-kernel-interp",
                                          "ccp-userspace-fold"]
    assert set(runs.DATAPATH_ARGS_OF_MODE) == set(runs.FOLD_OF_MODE) == set(runs.MODES) - {"kernel", runs.REFERENCE_MODE}
    assert plan[0][:3] == (1, False, 1) and plan[n][:3] == (1, False, 2) and plan[2 * n][:2] == (1, True)


def test_paced_rate_splits_one_gigabit_over_the_streams_and_tables_render():
    assert [runs.paced_stream_rate(n) for n in (1, 10, 100)] == ["1000000000", "100000000", "10000000"]
    ms = [_m("kernel", 1, False, 20.0, 0.8), _m("ccp-kernel-fold", 1, False, 19.0, 0.85, 1200, 0.3)]
    table = targets.results_table(ms, flows=[1])
    assert "20.00" in table and "ccp-kernel-fold" in table and "ccp-userspace-fold" not in table
    kernel_row, ccp_row = table.splitlines()[2:4]
    assert " 85.0 " in ccp_row and " 21.2 " in ccp_row, "own% and dmn% (own / 4) of the ccp row"
    assert kernel_row.split()[-1] == ccp_row.split()[-1] == "-", "no ACK count in these measurements"
    counted = [dataclasses.replace(m, acks_per_s=1900.0, bpf_cpu=measure.bpf_cpu_share(m.bpf_ns_per_ack, 1900.0, 2))
               for m in ms]
    kernel_row, ccp_row = targets.results_table(counted, flows=[1]).splitlines()[2:4]
    assert ccp_row.split()[-1] == kernel_row.split()[-1] == "1.9", "kACK/s"
    assert " 0.11 " in ccp_row and " 0.11 " not in kernel_row, "bpf% of the ccp row only (1200 ns x 1900/s / 2)"
    assert "MISS" in targets.targets_table(targets.evaluate_targets(ms, flows=[1]))


def test_run_plan_subsets_of_loads_and_modes_keep_the_order():
    plan = runs.run_plan([1], reps=1, modes=["ccp-kernel-fold", "kernel"], loads=["paced"])
    assert plan == [(1, True, 1, "kernel"), (1, True, 1, "ccp-kernel-fold")]
    args = cli.build_parser().parse_args(["--loads", "paced", "--modes", "ccp-kernel-fold,kernel",
                                        "--algorithm-param", "min-report-interval-us=20000"])
    assert (args.loads, args.modes) == (["paced"], ["kernel", "ccp-kernel-fold"])
    assert args.algorithm_param == [("min-report-interval-us", "20000")]
    for bad in (["--loads", "half"], ["--modes", "kernel,bbr"], ["--algorithm-param", "--pacing=true"],
                ["--algorithm-param", "novalue"]):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(bad)


def test_cli_rejects_bad_flow_counts():
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--flows", "1,200"])
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--flows", "x"])
    assert cli.build_parser().parse_args(["--flows", "1,10"]).flows == [1, 10]


def test_reference_cca_costs_per_ack_are_its_programs_over_pkts_acked_calls():
    progs = [
        {"id": 60, "type": "struct_ops", "name": "kc_init", "run_time_ns": 2400, "run_cnt": 10},
        {"id": 61, "type": "struct_ops", "name": "kc_cong_avoid", "run_time_ns": 110_000, "run_cnt": 1000},
        {"id": 62, "type": "struct_ops", "name": "kc_pkts_acked", "run_time_ns": 140_000, "run_cnt": 1000},
        {"id": 63, "type": "struct_ops", "name": "kc_cwnd_event", "run_time_ns": 80_000, "run_cnt": 500},
        {"id": 64, "type": "struct_ops", "name": "kc_set_state"},
        {"id": 40, "type": "struct_ops", "name": "kc_pkts_acked", "run_time_ns": 9, "run_cnt": 9},
        {"id": 65, "type": "struct_ops", "name": "ccp_cong_control", "run_time_ns": 5, "run_cnt": 5},
        {"id": 66, "type": "tracing", "name": "kc_other", "run_time_ns": 7, "run_cnt": 7},
    ]
    costs = measure.reference_costs(json.dumps(progs), after_id=50)
    assert [c.name for c in costs] == ["kc_init", "kc_cong_avoid", "kc_pkts_acked", "kc_cwnd_event", "kc_set_state"]
    assert measure.reference_ns_per_ack(costs) == pytest.approx((110_000 + 140_000 + 80_000) / 1000), \
        "per pkts_acked call, kc_init left out"
    assert measure.reference_ns_per_ack([measure.ProgCost("kc_init", 10, 1)]) is None
    with pytest.raises(CcplabError, match="JSON list"):
        measure.reference_costs("{}", after_id=0)


def test_reference_mode_runs_by_default_before_the_ccp_modes():
    assert runs.REFERENCE_MODE in runs.DEFAULT_MODES
    assert runs.REFERENCE_SOURCE.is_file(), "the reference CCA's source ships with the repository"
    plan = runs.run_plan([1], 1, ["kernel", "bpf-cubic", "ccp-kernel-fold"], ["paced"])
    assert [mode for *_, mode in plan] == ["kernel", "bpf-cubic", "ccp-kernel-fold"]


def test_median_interval_is_reproducible_and_narrows_with_agreeing_repetitions():
    assert targets.median_interval([1.0, 1.1]) is None, "fewer than 3 repetitions: no interval"
    assert targets.median_interval([1.02] * 5) == (1.02, 1.02)
    spread = [0.98, 1.10, 0.92, 0.79, 0.88, 0.92, 0.90, 1.11]  # throughput ratios of one real run
    lo, hi = targets.median_interval(spread)
    assert lo <= statistics.median(spread) <= hi and 0.79 <= lo < 0.97 < hi <= 1.11
    assert targets.median_interval(spread) == (lo, hi), "a fixed seed: a saved run prints the same interval"
    tight = [1.01, 1.012, 1.009, 1.011, 1.010, 1.013, 1.008, 1.012]
    tlo, thi = targets.median_interval(tight)
    assert thi - tlo < (hi - lo) / 10


def test_a_clear_pass_is_not_flagged_and_a_borderline_one_is():
    ms = [m for rep in range(1, 6) for m in (
        _m("kernel", 1, True, 1.0, 0.20, rep=rep), _m("ccp-kernel-fold", 1, True, 1.0, 0.20 * (1.0 + rep / 1000), 900, 0.5, rep=rep))]
    cpu = [r for r in targets.evaluate_targets(ms, flows=[1]) if r.what.startswith("own CPU")][0]
    assert cpu.verdict == "PASS" and cpu.interval.endswith("x")
    ms = [m for rep in range(1, 6) for m in (
        _m("kernel", 1, True, 1.0, 0.20, rep=rep), _m("ccp-kernel-fold", 1, True, 1.0, 0.20 * (0.98 + rep / 50), 900, 0.5, rep=rep))]
    cpu = [r for r in targets.evaluate_targets(ms, flows=[1]) if r.what.startswith("own CPU")][0]
    assert cpu.verdict == "PASS (the 95% interval spans the bound)", cpu
    assert "95% interval" in targets.targets_table([cpu])


def test_a_saved_run_prints_again_and_bad_files_are_named(tmp_path, capsys):
    ms = [m for rep in (1, 2, 3) for m in (_m("kernel", 1, False, 20.0, 0.8, rep=rep),
                                           _m("ccp-kernel-fold", 1, False, 19.0 + rep, 0.8, 1000, 0.5, rep=rep))]
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps([dataclasses.asdict(m) for m in ms]))
    assert measure.load_measurements(saved) == ms
    assert cli.main(["--from", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "6 measurements, 3 repetitions" in out and "throughput vs kernel cubic" in out and "1.000x" in out
    for text, why in (("{", "not JSON"), ('{"mode": 1}', "expected a list"), ('[{"nope": 1}]', "entry 0 is not a measurement")):
        saved.write_text(text)
        assert cli.main(["--from", str(saved)]) == 2
        err = capsys.readouterr().err
        assert str(saved) in err and why in err, err
    assert cli.main(["--from", str(tmp_path / "missing.json")]) == 2
    assert "cannot read it" in capsys.readouterr().err


def test_steady_window_leaves_out_the_start_and_the_last_second():
    assert runs.steady_window(8, 2) == (2.0, 7.0)
    assert runs.steady_window(8, 0) == (0.0, 7.0)
    with pytest.raises(CcplabError, match=r"--duration-s 3 with --omit-s 2 leaves a CPU window of 0 s"):
        runs.steady_window(3, 2)


def test_cli_omit_takes_whole_seconds_and_a_window_too_short_fails_before_anything_runs(capsys):
    assert cli.build_parser().parse_args([]).omit_s == runs.OMIT_S
    assert cli.build_parser().parse_args(["--omit-s", "0"]).omit_s == 0
    for bad in ("-1", "x"):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(["--omit-s", bad])
    # checked before the preflight (root, binaries): exit 2 naming both flags, nothing started
    assert cli.main(["--duration-s", "4", "--omit-s", "3"]) == 2
    err = capsys.readouterr().err
    assert "--duration-s 4 with --omit-s 3" in err and "at least 1 s" in err


def test_a_run_saved_before_the_steady_window_loads_with_no_whole_run_figure(tmp_path, capsys):
    old = dataclasses.asdict(_m("kernel", 1, True, 1.0, 0.05, rep=1))
    del old["own_cpu_run"], old["daemons_cpu_run"]
    saved = tmp_path / "old.json"
    saved.write_text(json.dumps([old]))
    (m,) = measure.load_measurements(saved)
    assert m.own_cpu_run is None and m.own_cpu == 0.05
    assert cli.main(["--from", str(saved)]) == 0
    assert "run%" in capsys.readouterr().out


def test_pin_cpu_takes_one_of_this_hosts_cpus_and_is_free_by_default(capsys):
    assert cli.build_parser().parse_args([]).pin_cpu is None
    mine = sorted(os.sched_getaffinity(0))
    assert cli.build_parser().parse_args(["--pin-cpu", str(mine[-1])]).pin_cpu == mine[-1]
    for bad, why in (("-1", "is not a CPU number"), ("x", "is not a CPU number"),
                     (str(max(mine) + 1), "is not one this process may run on")):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(["--pin-cpu", bad])
        assert why in capsys.readouterr().err
