"""Reading the guest's results back (synthetic case directories in the guest's format)."""

import json

from kmod import plan, results

SS = """t 29.28
t 29.71
0      0      10.0.1.1:36500 10.0.2.2:5201
\t cubic wscale:7,7 rto:228 rtt:24.386/8.966 mss:1448 cwnd:10 bytes_sent:184 bytes_acked:185
0      218648 10.0.1.1:36506 10.0.2.2:5201
\t ccp wscale:7,7 rto:228 rtt:29.882/6.732 mss:1448 cwnd:37 bytes_sent:90000 bytes_acked:80000
t 29.95
0      0      10.0.1.1:36500 10.0.2.2:5201
\t cubic wscale:7,7 cwnd:10 bytes_acked:185
0      218648 10.0.1.1:36506 10.0.2.2:5201
\t ccp wscale:7,7 cwnd:36 bytes_acked:160000
t 31.00
0      218648 10.0.1.1:36506 10.0.2.2:5201
\t ccp wscale:7,7 cwnd:10 bytes_acked:260000
"""


def iperf_doc(mbps=19.5, retrans=12, seconds=4):
    ivs = [{"sum": {"start": float(i), "seconds": 1.0, "bytes": int(mbps * 1e6 / 8), "bits_per_second": mbps * 1e6}}
           for i in range(seconds)]
    return {"intervals": ivs, "end": {"sum_received": {"bits_per_second": mbps * 1e6},
                                      "sum_sent": {"retransmits": retrans}}}


def write_case(d, line, status="ok", doc=None, ss=SS, daemon="", dmesg="", killed=None):
    d.mkdir(parents=True)
    cid, rest = line.split(" ", 1)
    (d / "case").write_text(rest + "\n")
    (d / "status").write_text(status + "\n")
    (d / "iperf.json").write_text(json.dumps(doc if doc is not None else iperf_doc()))
    (d / "ss.txt").write_text(ss)
    (d / "daemon.log").write_text(daemon)
    (d / "dmesg.txt").write_text(dmesg)
    if killed is not None:
        (d / "killed").write_text(f"t {killed}\n")
    return d


def daemon_log(reports, acked=2896):
    lines = ["INFO ccp: ready alg=fixed-window ipc=netlink",
             "INFO ccp: flow sid=1 alg=fixed-window mss=1448 dp_init_cwnd=14480 -> cwnd=53576 bytes"]
    lines += [f"INFO ccp::report: report sid=1 acked={acked} sacked=0 loss=0 timeout=false rtt_us=2" for _ in range(reports)]
    return "\n".join(lines) + "\n"


def test_ss_rounds_pick_the_data_connection():
    rounds = results.parse_ss(SS)
    assert [t for t, _ in rounds] == [29.28, 29.71, 29.95, 31.0]
    assert rounds[1][1]["10.0.1.1:36506"] == {"cca": "ccp", "cwnd": 37, "bytes_acked": 80000}
    assert results.data_flow_cwnd(rounds) == [37, 36, 10]
    assert results.data_flow_cwnd(rounds, until=30.0) == [37, 36]
    assert results.data_flow_cwnd(rounds, since=30.0) == [10]
    assert results.data_flow_cwnd([]) == []


def test_iperf_figures_and_a_failed_iperf():
    assert results.iperf_figures(iperf_doc(19.5, 7)) == (19.5, 7)
    try:
        results.iperf_figures({"error": "unable to connect to server"})
    except ValueError as e:
        assert "unable to connect" in str(e)
    else:
        raise AssertionError("no end summary must be refused")
    assert results.interval_mbps(iperf_doc(8.0, 0, 6), 3.0) == 8.0


def test_a_controlled_fixed_window_and_a_kernel_row(tmp_path):
    ok = results.read_case("6.12", write_case(tmp_path / "ccp-fixed-window",
                                              "ccp-fixed-window ccp module-first 2 fixed-window --window=37",
                                              ss=SS.replace("cwnd:10 bytes_acked:260000", "cwnd:37 bytes_acked:260000")
                                                   .replace("cwnd:36", "cwnd:37"),
                                              daemon=daemon_log(20),
                                              dmesg="[ 36.4] [ccp] [nl] message read failed: -71.\n"
                                                    "[ 31.1] Datapath program is null\n"))
    assert ok.controlled and ok.ok and ok.module_errors == [], ok
    assert (ok.throughput_mbps, ok.retransmits, ok.reports, ok.cwnd) == (19.5, 12, 20, [37, 37, 37])
    k = results.read_case("6.12", write_case(tmp_path / "kernel-cubic", "kernel-cubic kernel - 2 cubic"))
    assert k.controlled is None and k.ok
    text = results.table([ok, k])
    assert "| 6.12 | ccp:fixed-window --window=37 | 19.5 | 12 | n=3 median 37 [37-37] | yes | 20 |" in text
    assert "| 6.12 | kernel:cubic | 19.5 | 12 |" in text


def test_uncontrolled_flows_and_module_errors_fail(tmp_path):
    lost = results.read_case("6.1", write_case(
        tmp_path / "a", "a ccp daemon-first 10 reno", daemon=daemon_log(0),
        dmesg="[ 5.0] [ccp] [nl] message read failed: -96.\n[ 6.0] Could not find datapath program with program uid: -82\n"))
    assert lost.controlled is False and "0 reports in 10 s" in lost.why and not lost.ok
    assert len(lost.module_errors) == 2
    drift = results.read_case("6.1", write_case(tmp_path / "b", "b ccp module-first 2 fixed-window --window=37",
                                                daemon=daemon_log(30)))
    assert drift.controlled is False and "cwnd 37 in 33% of the ss samples" in drift.why
    none = results.read_case("6.1", write_case(tmp_path / "c", "c ccp module-first 2 vegas", daemon=""))
    assert none.why == "the daemon saw no flow"
    failed = results.read_case("6.1", write_case(tmp_path / "d", "d ccp module-first 2 vegas", status="insmod failed",
                                                 daemon=daemon_log(30)))
    assert not failed.ok


def test_a_killed_daemon_is_reported_not_failed(tmp_path):
    r = results.read_case("6.12", write_case(tmp_path / "dies-reno", "dies-reno ccp-dies module-first 4 reno",
                                             doc=iperf_doc(9.0, 3, 4), daemon=daemon_log(10), killed=29.9,
                                             dmesg="[ 40.0] ccp fallback (1000000 since last msg)\n"))
    assert r.module_errors == [] and r.controlled
    assert r.after_kill_mbps == 9.0 and r.after_kill_cwnd == [10]
    assert "| ccp:reno (daemon killed) |" in results.table([r])
    assert "daemon killed at 2 s: after it 9.0 Mbit/s, cwnd n=1 median 10 [10-10]" in results.table([r])


def test_a_case_the_guest_never_ran(tmp_path):
    rows = results.read_run("6.1", tmp_path, [plan.Case("x", "ccp", "reno", 3)])
    assert rows[0].status == "did not run" and not rows[0].ok


def test_lost_installs_the_daemon_recovered_from_are_not_failures(tmp_path):
    dmesg = ("[ 12.29] no datapath program set\n[ 12.31] Could not find datapath program with program uid: 1\n"
             "[ 12.40] [ccp] [nl] message read failed: -96.\n[ 13.0] WARNING: something else\n")
    log = daemon_log(30).replace("INFO ccp: flow sid=1",
                                 "WARN ccp: flows [1] sent no report since the fold programs were installed: "
                                 "installing them again (3 messages)\nINFO ccp: flow sid=1")
    r = results.read_case("6.12", write_case(tmp_path / "cycle", "cycle ccp daemon-first 3 reno", daemon=log, dmesg=dmesg))
    assert r.controlled and len(r.recovered) == 2
    assert r.module_errors == ["[ 13.0] WARNING: something else"] and not r.ok
    assert "installs lost (2 kernel errors), daemon installed again" in results.table([r])
    # Without the daemon's reinstall the same kernel errors fail the case.
    r2 = results.read_case("6.12", write_case(tmp_path / "c2", "c2 ccp daemon-first 3 reno", daemon=daemon_log(30),
                                              dmesg=dmesg.replace("[ 13.0] WARNING: something else\n", "")))
    assert r2.recovered == [] and len(r2.module_errors) == 2 and not r2.ok


def test_median_table_groups_repeated_rows(tmp_path):
    rows = []
    for i, mbps in enumerate([10.0, 14.0, 12.0]):
        rid = "ccp-reno" if i == 0 else f"ccp-reno.r{i + 1}"
        rows.append(results.read_case("6.12", write_case(tmp_path / rid, f"{rid} ccp module-first 2 reno",
                                                         doc=iperf_doc(mbps, i), daemon=daemon_log(5))))
    rows.append(results.read_case("6.12", write_case(tmp_path / "kernel-reno", "kernel-reno kernel - 2 reno",
                                                     doc=iperf_doc(16.0, 4))))
    rows.append(results.read_case("6.12", write_case(tmp_path / "ccp-reno-2",
                                                     "ccp-reno-2 ccp module-first 2 reno --socket-pacing=kernel",
                                                     doc=iperf_doc(9.0, 0), daemon=daemon_log(5))))
    rows.append(results.read_case("6.12", write_case(tmp_path / "kernel-reno-2",
                                                     "kernel-reno-2 kernel - 2 reno --fq-rate=1G",
                                                     doc=iperf_doc(10.0, 0))))
    text = results.median_table(rows)
    assert "| 6.12 | ccp:reno | 3 | 12.0 [10.0-14.0] | 1 | 3 of 3 | 0.75 x kernel:reno |" in text
    assert "| 6.12 | kernel:reno | 1 | 16.0 [16.0-16.0] | 4 | - | - |" in text
    assert "| ccp:reno --socket-pacing=kernel | 1 | 9.0 [9.0-9.0] | 0 | 1 of 1 | 0.90 x kernel:reno --fq-rate=1G |" in text


def test_a_ccp_row_is_judged_against_the_kernels_own_cca_paced_as_its_socket():
    from kmod.plan import Case
    assert results.kernel_reference(Case("c", "ccp", "cubic", 2)) == "kernel:cubic"
    assert results.kernel_reference(Case("c", "ccp", "cubic", 2, flags=("--socket-pacing=kernel",))) == \
        "kernel:cubic --fq-rate=1G"
    assert results.kernel_reference(Case("c", "ccp", "aimd", 2)) is None, "the kernel has no aimd"
    assert results.kernel_reference(Case("c", "kernel", "reno", 2)) is None
