"""``make bench`` keeps working (a smoke run on tiny logs; the figures themselves are not asserted)."""

from transient import bench


def test_bench_runs_and_compares_like_with_like(tmp_path, capsys):
    logs = bench.make_runs(tmp_path / "runs", 2, 2)
    # the baseline and our reader see the same events
    assert [bench.baseline_parse(p) for p in logs] == [bench.ours_parse(p) for p in logs] == [6000, 6000]
    assert bench.main(["--runs", "2", "--seconds", "1", "--big-mb", "0.1"]) == 0
    out = capsys.readouterr().out
    for row in ("baseline: line-by-line Python", "ours: read_link_log, cold, 1 process", "from the Parquet cache",
                "end to end: analyze_all, cold", "speed-up over the baseline: cold parse",
                "baseline: 20-line loop binning bytes", "ours: python -m transient, cold", "cold analysis / loop"):
        assert row in out, row
    from transient.reducer import reducer_binary

    # the compiled reducer's own row when it is built, else the note that Python reduced the log
    assert ("ccplab-logreduce alone" in out) == (reducer_binary() is not None) != ("is not built" in out)
