"""``ccplab contest``: the sweep syntax, the trace lookup, the leaderboard, and a short real contest.

The real contest (two CCAs, a few seconds each) needs root, BPF and the built
binaries (it fails naming what is missing) and must run under the host lock:
``flock /tmp/ccplab-netlab.lock pytest experiments/tests/test_contest.py``.
"""

from __future__ import annotations

import csv
import json
import math
import shutil

import pytest

import transient
from ccplab import cli
from ccplab import contest as ct
from ccplab.errors import CcplabError

from netlab import require_binaries

PACKET_LOG_BYTES = 1504  # a trace opportunity in the mm-link log (1500 + mahimahi's 4-byte TUN header)


# ---------------------------------------------------------------- sweep syntax

def test_sweep_range_includes_stop_and_uses_exact_decimals():
    s = ct.parse_sweep("fixed-window:window=5..90:5")
    assert s.base == "ccp:fixed-window" and s.param == "window"
    assert s.values == tuple(str(v) for v in range(5, 91, 5))
    assert len(s.values) == 18
    assert s.cca_texts()[0] == "ccp:fixed-window:window=5"
    assert ct.parse_sweep("ccp:rocinante:ewma-weight=0.1..0.5:0.1").values == ("0.1", "0.2", "0.3", "0.4", "0.5")
    assert ct.parse_sweep("aimd:alpha=1..3").values == ("1", "2", "3"), "step defaults to 1"
    assert ct.parse_sweep("fixed-window:window=5..90:10").values[-1] == "85", "a range stops at or below STOP"


def test_sweep_list_and_fixed_parameters():
    s = ct.parse_sweep("delay-threshold:mode=aimd:theta-ms=60,80,120")
    assert s.base == "ccp:delay-threshold:mode=aimd"
    assert s.param == "theta-ms" and s.values == ("60", "80", "120")
    assert s.cca_texts()[1] == "ccp:delay-threshold:mode=aimd:theta-ms=80"


@pytest.mark.parametrize("spec, words", [
    ("fixed-window", "expected NAME:PARAM"),
    ("fixed-window:window=12", "exactly one parameter"),
    ("fixed-window:window=90..5:5", "empty"),
    ("fixed-window:window=5..90:0", "step must be > 0"),
    ("fixed-window:window=5..x", "not a number"),
    ("fixed-window:window=5,10:5", "only goes with a range"),
    ("fixed-window:window=5,,10", "empty value"),
    ("fixed-window:window=5,5", "repeats"),
    ("kernel:cubic:x=1..2", "only ccp:NAME"),
    ("aimd:alpha=1..2:1:beta=3", "before the swept one"),
    ("fixed-window:window=1..5000:1", "at most 1000"),
])
def test_sweep_errors_name_the_problem(spec, words):
    with pytest.raises(CcplabError, match=words):
        ct.parse_sweep(spec)


def test_sweep_parameters_are_checked_against_the_algorithm():
    require_binaries("ccp-algorithms")
    assert [str(c) for c in ct.sweep_ccas(ct.parse_sweep("fixed-window:window=5..15:5"))] == [
        "ccp:fixed-window:window=5", "ccp:fixed-window:window=10", "ccp:fixed-window:window=15"]
    with pytest.raises(CcplabError, match="nosuch"):
        ct.sweep_ccas(ct.parse_sweep("fixed-window:nosuch=1..2"))


# ---------------------------------------------------------------- traces and setup

def test_traces_by_name_or_path_with_their_ack_twin(tmp_path):
    down, up = ct.resolve_trace("TMobile-LTE-short")
    assert down == ct.CELLULAR_DIR / "TMobile-LTE-short.down" and up == ct.CELLULAR_DIR / "TMobile-LTE-short.up"
    assert ct.resolve_trace(str(down)) == (down, up)
    assert {"Verizon-LTE-short", "TMobile-LTE-short", "ATT-LTE-driving"} <= set(ct.available_traces())
    with pytest.raises(CcplabError, match="available: .*Verizon-LTE-short"):
        ct.resolve_trace("Nokia-5G")
    lone = tmp_path / "lone.down"
    lone.write_text("1\n2\n")
    with pytest.raises(CcplabError, match="lone.up is missing"):
        ct.resolve_trace(str(lone))
    assert ct.trace_length_s(ct.CELLULAR_DIR / "Verizon-LTE-short.down") == 140  # last timestamp 140000 ms


def test_setup_defaults_and_bad_input():
    require_binaries("ccp-algorithms")
    s = ct.make_setup()
    assert s.trace_name == "Verizon-LTE-short" and s.duration_s == 140 and s.one_way_delay_ms == 20
    names = [str(c) for c in s.ccas]
    assert names[-2:] == ["kernel:cubic", "kernel:bbr"]
    assert {"ccp:fixed-window", "ccp:exp3cc", "ccp:reno", "ccp:bbr"} <= set(names)
    scen = s.scenario()
    assert scen.downlink_trace == ct.CELLULAR_DIR / "Verizon-LTE-short.up"
    assert scen.queue_packets == ct.UNBOUNDED_QUEUE_PACKETS
    with pytest.raises(CcplabError, match="--duration-s must be in \\[1, 140\\]"):
        ct.make_setup(duration_s=141)
    with pytest.raises(CcplabError, match="--runs"):
        ct.make_setup(runs=0)
    with pytest.raises(CcplabError, match="either --sweep or --cca"):
        ct.make_setup(ccas=["kernel:cubic"], sweep="fixed-window:window=5..10:5")
    with pytest.raises(CcplabError, match="listed twice"):
        ct.make_setup(ccas=["kernel:cubic", "kernel:cubic"])


def test_leaderboard_medians_spread_and_order():
    def row(cca, run, thr, sig):
        return {"cca": cca, "run": run, "capacity_mbps": 10.0, "throughput_mbps": thr, "utilization": thr / 10,
                "p95_queueing_delay_ms": sig - 5, "p95_signal_delay_ms": sig, "power_score": thr / (sig / 1000)}
    rows = [row("a", 1, 5.0, 100.0), row("a", 2, 6.0, 100.0), row("a", 3, 4.0, 50.0),
            row("b", 1, 9.0, 900.0), row("c", 1, 0.0, float("nan")) | {"power_score": float("nan")}]
    board = ct.leaderboard(rows)
    assert [r["cca"] for r in board] == ["a", "b", "c"]
    a = board[0]
    assert a["runs"] == 3 and a["throughput_mbps"] == 5.0 and a["p95_signal_delay_ms"] == 100.0
    assert a["power_score"] == 60.0 and (a["score_min"], a["score_max"]) == (50.0, 80.0)
    assert math.isnan(board[2]["power_score"])


# ---------------------------------------------------------------- one scoring window, resume

TRACE_END_MS = 3000


def _trace_pair(tmp_path):
    """A 3 s trace pair (one opportunity per ms, 12 Mbit/s) with its .up twin."""
    down = tmp_path / "t3.down"
    down.write_text("".join(f"{t}\n" for t in range(1, TRACE_END_MS + 1)))
    down.with_suffix(".up").write_text(down.read_text())
    return down


def _log(flow_start_ms: int, queue_ms: int, tail_ms: int = 0) -> str:
    """An mm-link log of a flow from ``flow_start_ms`` keeping ``queue_ms`` of queue on a 1 packet/ms link
    up to the trace's end; ``tail_ms`` more of looped trace and departures after it, as a link that keeps
    delivering an end-of-test exchange would log."""
    lines = ["# mahimahi mm-link [uplink] > synthetic", "# base timestamp: 0", "0 + 100", "1 # 1504", "1 - 100 1"]
    for t in range(2, TRACE_END_MS + tail_ms + 1):
        if flow_start_ms <= t:
            lines.append(f"{t} + 1504")
        lines.append(f"{t} # 1504")
        if t >= flow_start_ms + queue_ms:
            lines.append(f"{t} - 1504 {queue_ms}")
    return "\n".join(lines) + "\n"


def _fake_run(run_dir, flow_start_s, log_text, per_ack=1.0):
    run_dir.mkdir(parents=True)
    (run_dir / "uplink.log").write_text(log_text)
    (run_dir / "metadata.json").write_text(json.dumps({"flow_start_s": flow_start_s,
                                                       "receiver": {"segments_per_ack": per_ack}}))


def test_score_window_from_flow_start_to_trace_end_or_duration():
    assert ct.score_window_ms(0.3, 140, 140_000) == (300, 140_000), "the trace's end comes first"
    assert ct.score_window_ms(0.3, 20, 140_000) == (300, 20_300), "a shorter flow: its duration"
    assert ct.score_window_ms(0.2994, 20, 140_000) == (299, 20_299)
    with pytest.raises(CcplabError, match="not before the trace's end"):
        ct.score_window_ms(140.0, 20, 140_000)


def test_every_cca_is_scored_over_the_same_window_whatever_its_log_adds(tmp_path):
    setup = ct.make_setup(str(_trace_pair(tmp_path)), ["kernel:cubic", "kernel:reno"], duration_s=3)
    assert setup.end_ms == TRACE_END_MS and setup.scenario().trace_once and setup.scenario().quickack
    # The same flow; one log stops at the trace's end, the other runs 2 s on (a looping trace delivering a
    # queued end-of-test exchange): the scores are the same, over [flow start, trace end].
    _fake_run(tmp_path / "a", 0.3, _log(300, 50))
    _fake_run(tmp_path / "b", 0.3, _log(300, 50, tail_ms=2000), per_ack=2.0)
    a, b = ct.run_metrics(tmp_path / "a", setup), ct.run_metrics(tmp_path / "b", setup)
    for m in ct.METRICS:
        assert a[m] == pytest.approx(b[m]), m
    assert (a["window_start_s"], a["window_end_s"]) == (0.3, 3.0) == (b["window_start_s"], b["window_end_s"])
    assert a["duration_s"] == pytest.approx(2.7)
    assert a["capacity_mbps"] == pytest.approx(1504 * 8 / 1000, rel=0.01), "one 1504-byte opportunity per ms"
    assert a["p95_queueing_delay_ms"] == 50
    assert (a["segments_per_ack"], b["segments_per_ack"]) == (1.0, 2.0)
    # mm-throughput-graph over each whole log would differ: the tail dilutes nothing only within the window.
    whole_a = transient.link_metrics(transient.parse_link_log(_log(300, 50)).events)
    whole_b = transient.link_metrics(transient.parse_link_log(_log(300, 50, tail_ms=2000)).events)
    assert whole_a.duration_s != pytest.approx(whole_b.duration_s)
    # A 2 s contest on the same trace stops scoring 2 s after the flow's start.
    short = ct.make_setup(str(_trace_pair(tmp_path)), ["kernel:cubic"], duration_s=2)
    assert ct.run_metrics(tmp_path / "b", short)["window_end_s"] == 2.3


def test_contest_resumes_runs_in_pieces_and_reports_the_spread(tmp_path, capsys):
    setup = ct.make_setup(str(_trace_pair(tmp_path)), ["kernel:cubic", "kernel:reno"], runs=2, duration_s=3)
    out = tmp_path / "contest"
    calls = []

    def runner(cca, scenario, run_dir, k):
        assert scenario.trace_once and scenario.quickack
        calls.append((str(cca), k))
        _fake_run(run_dir, 0.3, _log(300, 20 * k + (40 if cca.name == "reno" else 0)))

    rows = ct.run_contest(setup, out, max_new_runs=3, runner=runner)
    assert calls == [("kernel:cubic", 1), ("kernel:cubic", 2), ("kernel:reno", 1)]
    assert len(rows) == 3 and len(ct.pending_runs(setup, out)) == 1
    # The same command again: only the missing run runs; the tables cover all four.
    again = ct.resume_setup(ct.make_setup(str(_trace_pair(tmp_path)), [], runs=2, duration_s=3), out,
                            ccas_given=False)
    assert [str(c) for c in again.ccas] == ["kernel:cubic", "kernel:reno"]
    rows = ct.run_contest(again, out, runner=runner)
    assert calls[3:] == [("kernel:reno", 2)] and len(rows) == 4
    with open(out / "runs.csv") as f:
        assert len(list(csv.DictReader(f))) == 4
    board = ct.leaderboard(rows)
    assert [r["cca"] for r in board] == ["kernel:cubic", "kernel:reno"], "shorter queue, better score"
    cubic = board[0]
    assert cubic["runs"] == 2 and cubic["score_min"] < cubic["score_max"]
    assert (cubic["p95_signal_delay_min"], cubic["p95_signal_delay_max"]) != (None, None)
    text = ct.format_leaderboard(board, again)
    assert "receiver: ACK every segment" in text and "trace played once" in text
    assert f"{cubic['score_min']:.2f}..{cubic['score_max']:.2f}" in text
    # Nothing left: a third call runs nothing.
    ct.run_contest(again, out, runner=runner)
    assert len(calls) == 4
    # Another link setup cannot resume here; more CCAs can join.
    with pytest.raises(CcplabError, match="quickack"):
        ct.resume_setup(ct.make_setup(str(_trace_pair(tmp_path)), [], runs=2, duration_s=3, quickack=False), out,
                        ccas_given=False)
    more = ct.resume_setup(ct.make_setup(str(_trace_pair(tmp_path)), ["kernel:bbr"], duration_s=3), out,
                           ccas_given=True)
    assert [str(c) for c in more.ccas] == ["kernel:cubic", "kernel:reno", "kernel:bbr"] and more.runs == 2
    assert ct.pending_runs(more, out) == [(more.ccas[2], 1), (more.ccas[2], 2)]


def test_a_run_kept_invalid_stays_in_the_directory_but_out_of_the_tables(tmp_path, capsys):
    setup = ct.make_setup(str(_trace_pair(tmp_path)), ["kernel:cubic", "kernel:reno"], duration_s=3)
    out = tmp_path / "contest"
    reason = "the kernel's cubic fallback drove 40.0% of the ccp flows' ACKs (command_acks=6 fallback_acks=4)"

    def runner(cca, scenario, run_dir, k):
        _fake_run(run_dir, 0.3, _log(300, 20))
        if cca.name == "reno":  # saved by --keep-invalid, marked
            meta = json.loads((run_dir / "metadata.json").read_text())
            meta.update(valid=False, control={"valid": False, "reason": reason})
            (run_dir / "metadata.json").write_text(json.dumps(meta))

    rows = ct.run_contest(setup, out, runner=runner)
    assert [r["cca"] for r in rows] == ["kernel:cubic"] and ct.pending_runs(setup, out) == []
    assert f"kernel:reno run 1 is marked invalid, left out of the tables: {reason}" in capsys.readouterr().err
    with open(out / "runs.csv") as f:
        assert [r["cca"] for r in csv.DictReader(f)] == ["kernel:cubic"]


def test_every_declared_best_setting_sweep_is_valid_for_its_algorithm():
    require_binaries("ccp-algorithms")
    for name in ct.BEST_SETTING_SWEEPS:
        ccas = ct.sweep_ccas(ct.parse_sweep(ct.best_sweep(name)))
        assert len(ccas) >= 5 and all(c.name == name for c in ccas), name
    with pytest.raises(CcplabError, match="no declared sweep; one of fixed-window"):
        ct.best_sweep("vegas")


def _fake_sweep_dir(sw, setup, values, best, floor=20):
    """A sweep directory as --sweep writes it, with a fake parameter on a kernel CCA's runs; the queue
    is ``floor`` packets at ``best`` and grows with the distance from it."""
    sweep = ct.ContestSetup(setup.trace_name, setup.down, setup.up, 3, 1, (ct.parse_cca("kernel:cubic"),))
    fake = ct.Sweep("ccp:fake", "k", values)
    for v in values:
        _fake_run(sw / "runs" / f"ccp-fake-k-{v}" / "run-1", 0.3, _log(300, abs(int(v) - best) * 5 + floor))
    (sw / "contest.json").write_text(json.dumps({**sweep.to_json(), "sweep": {"base": fake.base, "param": "k",
                                                                                "values": list(values)}}))
    rows = [{"cca": f"ccp:fake:k={v}", "run": 1, "value": v,
             **ct.run_metrics(sw / "runs" / f"ccp-fake-k-{v}" / "run-1", sweep)} for v in values]
    ct._write_csv(sw / "runs.csv", rows, list(ct.RUN_COLUMNS))
    return sw


def _contest_doc_dirs(tmp_path):
    """Two leaderboards (delayed ACKs, ACK every segment) of kernel cubic and reno, and a sweep."""
    trace = str(_trace_pair(tmp_path))

    def runner(cca, scenario, run_dir, k):
        # ACK every segment halves the queue in this fake
        q = {"kernel:cubic": 80, "kernel:reno": 120}[str(cca)]
        _fake_run(run_dir, 0.3, _log(300, q // 2 if scenario.quickack else q))

    dirs = []
    for quick in (False, True):
        setup = ct.make_setup(trace, ["kernel:cubic", "kernel:reno"], duration_s=3, quickack=quick)
        d = tmp_path / f"board-{quick}"
        ct.run_contest(setup, d, runner=runner)
        dirs.append(d)
    sw = _fake_sweep_dir(tmp_path / "sweep", setup, ("5", "10", "20"), best=10)
    for k, run in enumerate(sorted((dirs[1] / "runs").glob("*/run-1"))):
        meta = json.loads((run / "metadata.json").read_text())
        meta.update(started_at=f"2026-01-02T10:0{k}:00+00:00", finished_at=f"2026-01-02T10:0{k}:30+00:00",
                    host={"ccplab_commit": "abc1234", "kernel": "6.18.0"})
        (run / "metadata.json").write_text(json.dumps(meta))
    return [*dirs, sw], setup


def test_contest_doc_page_has_both_receivers_best_settings_and_sweeps(tmp_path):
    from ccplab import contest_doc

    dirs, _ = _contest_doc_dirs(tmp_path)
    page = contest_doc.contest_doc_command(dirs, tmp_path / "page.md")
    assert (tmp_path / "page.md").read_text() == page
    assert "2 runs, 2026-01-02 10:00 to 10:01 UTC, ccplab commit abc1234, Linux 6.18.0." in page
    assert page.count(" runs, ") == 1, "a board whose runs carry no times says nothing"
    assert page.count("| # | CCA |") == 2, "a leaderboard per receiver"
    assert "t3, delayed ACKs, 3 s" in page and "t3, ACK every segment, 3 s" in page
    assert "--delayed-acks" in page, "the delayed-ACK board's command says so"
    # receivers compared: the fake halves the queue with quickack, so the score about doubles
    compared = page.split("## Receivers compared")[1].split("\n## ")[0]
    cubic = next(line for line in compared.splitlines() if line.startswith("| kernel:cubic"))
    assert float(cubic.split("|")[4].strip().rstrip("x")) > 1.5
    best = page.split("## Best settings")[1].split("## Sweeps")[0]
    assert "| ccp:fake | t3 | ACK every segment | 3 | k=10 |" in best
    assert "| 10 (best) |" in page.split("## Sweeps")[1]


def test_contest_doc_data_file_remakes_the_page_without_the_directories_and_grows_it(tmp_path):
    from ccplab import contest_doc

    dirs, setup = _contest_doc_dirs(tmp_path)
    data, page_path = tmp_path / "page.json", tmp_path / "page.md"
    page = contest_doc.contest_doc_command(dirs, page_path, data)
    kept = json.loads(data.read_text())
    assert sorted(r["name"] for r in kept["results"]) == ["board-False", "board-True", "sweep"]
    assert all("run_dir" not in row for r in kept["results"] for row in r["rows"]), "no machine's paths"
    assert str(tmp_path) not in data.read_text(), "no machine's paths"
    for d in dirs:
        shutil.rmtree(d)
    assert contest_doc.contest_doc_command([], None, data) == page, "the data file alone gives the same page"
    # A setup's note (where its numbers come from) is shown under its table.
    kept["results"][0]["setup"]["note"] = "Recovered from an earlier page."
    data.write_text(json.dumps(kept))
    noted = contest_doc.contest_doc_command([], None, data)
    assert noted.count("*Recovered from an earlier page.*") == 1 and noted.replace(
        "*Recovered from an earlier page.*\n\n", "") == page
    # A wider sweep of the same parameter joins the first: one table, the best over both.
    edge = _fake_sweep_dir(tmp_path / "sweep-edge", setup, ("20", "30", "40"), best=40, floor=10)
    edged = contest_doc.contest_doc_command([edge], None, None)
    assert "| k=40 (range's edge) |" in edged, "a best at the end of the range is marked"
    wide = _fake_sweep_dir(tmp_path / "sweep-wide", setup, ("20", "30", "40"), best=30, floor=10)
    grown = contest_doc.contest_doc_command([wide], page_path, data)
    assert page_path.read_text() == grown and len(json.loads(data.read_text())["results"]) == 4
    best = grown.split("## Best settings")[1].split("## Sweeps")[0]
    assert "| k=10 |" in page, "a best inside the range is not marked"
    assert best.count("| ccp:fake |") == 1 and "| k=30 |" in best
    sweeps = grown.split("## Sweeps")[1]
    assert sweeps.count("### ccp:fake") == 1 and "--out sweep`" in sweeps and "--out sweep-wide`" in sweeps
    values = [line.split("|")[1].strip() for line in sweeps.splitlines() if line.startswith("| ") and
              line[2].isdigit()]
    assert values == ["5", "10", "20", "30 (best)", "40"], "every value once, in numeric order"


def test_contest_doc_scores_the_default_from_the_sweep_when_it_swept_the_flags_default(tmp_path):
    from ccplab import contest_doc

    dirs, _ = _contest_doc_dirs(tmp_path)
    sweep = dirs[-1]
    setup = json.loads((sweep / "contest.json").read_text())
    setup["sweep"]["default"] = "20.0"  # compared as a number with the swept "20"
    (sweep / "contest.json").write_text(json.dumps(setup))
    page = contest_doc.contest_doc_command(dirs, None)
    row = next(line for line in page.split("## Best settings")[1].splitlines() if line.startswith("| ccp:fake"))
    at_20 = next(line for line in page.split("## Sweeps")[1].splitlines() if line.startswith("| 20 |"))
    assert row.endswith(f"| {at_20.split('|')[4].strip()} (k=20.0) |"), (row, at_20)
    assert "| k=10 |" in row, "the best is still the best"


def test_the_swept_flags_default_comes_from_the_registry():
    from ccplab.contest_doc import swept_default

    require_binaries("ccp-algorithms")
    assert swept_default("ccp:fixed-window", "window") == "12"
    assert swept_default("ccp:sprout-ewma:alpha=0.5", "target-delay-ms") == "60", "fixed flags do not matter"
    assert swept_default("ccp:fixed-window", "no-such-flag") is None
    assert swept_default("ccp:no-such-algorithm", "window") is None


def test_contest_doc_refuses_a_file_that_is_not_its_data(tmp_path):
    from ccplab import contest_doc

    bad = tmp_path / "page.json"
    bad.write_text(json.dumps({"results": []}))
    with pytest.raises(CcplabError, match="page.json: not a contest-doc data file"):
        contest_doc.contest_doc_command([], None, bad)
    with pytest.raises(CcplabError, match="no contest directory given"):
        contest_doc.contest_doc_command([], None, tmp_path / "missing.json")


# ---------------------------------------------------------------- legible plots

def _board_rows(n, lo_ms, hi_ms):
    """``n`` CCAs, two runs each, p95 signal delays spread log-evenly over [lo_ms, hi_ms]."""
    rows = []
    for i in range(n):
        sig = lo_ms * (hi_ms / lo_ms) ** (i / max(1, n - 1))
        for k in (1, 2):
            thr = 1.0 + 0.2 * i + 0.05 * k
            rows.append({"cca": f"ccp:algo{i:02d}", "run": k, "value": str(5 * (i + 1)), "capacity_mbps": 5.0,
                         "throughput_mbps": thr, "utilization": thr / 5, "p95_queueing_delay_ms": sig - 40,
                         "p95_signal_delay_ms": sig * (1 + 0.01 * k), "power_score": thr / (sig / 1000)})
    return rows


def _tick_label_boxes(fig):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t for t in axis.get_ticklabels(which="both") if t.get_visible() and t.get_text()]
            boxes.append([t.get_window_extent(renderer) for t in labels])
    return boxes


@pytest.mark.parametrize("lo_ms, hi_ms", [(80, 300), (101, 119), (60, 95), (20, 8000)])
def test_plot_tick_labels_never_overlap(lo_ms, hi_ms):
    from ccplab import contest_plots

    rows = _board_rows(17, lo_ms, hi_ms)
    board = ct.leaderboard(rows)
    sweep = ct.Sweep("ccp:algo", "window", tuple(r["value"] for r in board))
    for fig in (contest_plots.plane_figure(rows, board, "t"), contest_plots.sweep_figure(board, sweep)):
        for boxes in _tick_label_boxes(fig):
            for a, b in zip(boxes, boxes[1:]):
                assert not a.overlaps(b), f"tick labels overlap for delays {lo_ms}-{hi_ms} ms"
        x_labels = [t.get_text() for t in fig.axes[0].xaxis.get_ticklabels() if t.get_text()]
        assert len(x_labels) >= 2, f"the delay axis is labelled at least twice for {lo_ms}-{hi_ms} ms: {x_labels}"
        contest_plots.plt.close(fig)


def test_plane_gives_every_cca_its_own_colour_and_marker():
    from ccplab import contest_plots

    for n in (5, 17, 30):
        rows = _board_rows(n, 80, 300)
        board = ct.leaderboard(rows)
        fig = contest_plots.plane_figure(rows, board, "t")
        medians = [c for c in fig.axes[0].collections if not c.get_label().startswith("_")]
        assert len(medians) == n
        pairs = {(tuple(c.get_facecolor()[0]), c.get_paths()[0].vertices.tobytes()) for c in medians}
        assert len(pairs) == n, f"{n} CCAs share (colour, marker) pairs: {n - len(pairs)} repeated"
        contest_plots.plt.close(fig)


# ---------------------------------------------------------------- a real contest

@pytest.mark.network
def test_short_contest_prints_a_leaderboard_and_writes_plots(needs_root, tmp_path, capsys):
    out = tmp_path / "contest"
    status = cli.main(["contest", "--cca", "ccp:fixed-window:window=10", "--cca", "kernel:cubic",
                       "--duration-s", "4", "--out", str(out)])
    assert status == 0
    printed = capsys.readouterr().out
    with open(out / "runs.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["cca"] for r in rows] == ["ccp:fixed-window:window=10", "kernel:cubic"]
    verizon = (ct.CELLULAR_DIR / "Verizon-LTE-short.down").read_text().split()
    stamps = [int(x) for x in verizon]
    for r in rows:
        run_dir = out / "runs" / r["run_dir"].split("/runs/")[-1]
        meta = json.loads((run_dir / "metadata.json").read_text())
        assert meta["scenario"]["downlink_trace"].endswith("Verizon-LTE-short.up")
        assert meta["scenario"]["one_way_delay_ms"] == 20
        # The numbers are mm-throughput-graph's on this run's log over its scoring window: from the flow's
        # first packet to 4 s later (the --duration-s, before the trace's end) ...
        start_ms, end_ms = round(float(r["window_start_s"]) * 1000), round(float(r["window_end_s"]) * 1000)
        assert start_ms == round(meta["flow_start_s"] * 1000) and end_ms == start_ms + 4000
        ev = transient.read_link_log(run_dir / "uplink.log").events
        m = transient.window_link_metrics(ev, start_ms, end_ms)
        assert float(r["throughput_mbps"]) == pytest.approx(m.throughput_mbps)
        assert float(r["power_score"]) == pytest.approx(m.throughput_mbps / (m.p95_signal_delay_ms / 1000))
        # ... and the capacity is the Verizon trace's own over that window (trace time 0 = log time 0).
        offered = sum(1 for t in stamps if start_ms <= t <= end_ms) * PACKET_LOG_BYTES * 8 / 4.0 / 1e6
        assert float(r["capacity_mbps"]) == pytest.approx(offered, rel=0.01)
        assert meta["receiver"]["acks"] == "every-segment" and meta["scenario"]["trace_once"]
        assert 0 < float(r["utilization"]) <= 1.0
    # The fixed window of 10 packets keeps the queue short; cubic fills the unbounded queue.
    by = {r["cca"]: r for r in rows}
    assert float(by["ccp:fixed-window:window=10"]["p95_queueing_delay_ms"]) < \
        float(by["kernel:cubic"]["p95_queueing_delay_ms"])
    # The leaderboard is printed best score first.
    board = [line for line in printed.splitlines() if line[:3].strip().isdigit()]
    scores = [float(line.split()[-2]) for line in board]
    assert len(board) == 2 and scores == sorted(scores, reverse=True)
    for name in ("plane", "throughput-ccp-fixed-window-window-10", "throughput-kernel-cubic"):
        for ext in ("png", "pdf"):
            assert (out / "plots" / f"{name}.{ext}").stat().st_size > 1000
