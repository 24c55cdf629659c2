from __future__ import annotations

import builtins
import csv
import json

import numpy as np
import pytest

from a2acc.cli import main
from a2acc.errors import InputError
from a2acc.ir.quantize import padding_bytes
from a2acc.model.topology import load_topology
from a2acc.studies.compare import _pattern, compare_rows, matrix_for, shared_layout, size_label

KEYS = {"time_s", "algbw_GBps", "busbw_GBps", "bound_s", "schedule_s", "stages", "algorithm", "size"}
ARGS = [
    "compare",
    "-t",
    "dgx-h100",
    "-n",
    "2",
    "--traffic",
    "zipf",
    "--sizes",
    "1M:4M:x4",
    "-a",
    "fast,spreadout",
]


def _table_rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line and not line.startswith("#")]


def test_json_and_csv_hold_the_rows_the_table_shows(tmp_path, capsys):
    js, cs = tmp_path / "out.json", tmp_path / "out.csv"
    assert main([*ARGS, "-J", str(js), "--csv", str(cs)]) == 0
    out = capsys.readouterr().out
    table = _table_rows(out)
    doc = json.loads(js.read_text())
    rows = doc["rows"]
    assert len(rows) == len(table) == 4
    for r, t in zip(rows, table):
        assert set(r) >= KEYS
        assert r["nwrong"] == 0 and r["time_s"] >= r["bound_s"] * (1 - 1e-9)
        assert r["out_of_place"]["alg_bw"] == r["algbw_GBps"]
        # the table's size, time, algbw, busbw are the JSON row's, as printed
        assert int(t[0]) == r["size"]
        assert float(t[5]) == pytest.approx(r["time_s"] * 1e6, rel=5e-3, abs=0.01)
        assert float(t[6]) == pytest.approx(r["algbw_GBps"], rel=5e-3, abs=0.01)
        assert float(t[7]) == pytest.approx(r["busbw_GBps"], rel=5e-3, abs=0.01)
    assert doc["simulated"] is True
    assert doc["a2acc_version"] and doc["topology_fingerprint"] and doc["model"]["transport"] == "ib"
    lines = cs.read_text().splitlines()
    data = list(csv.reader([line for line in lines if not line.startswith("#")]))
    assert data[0][:3] == ["algorithm", "size", "count"] and len(data) == 5
    assert [d[0] for d in data[1:]] == [r["algorithm"] for r in rows]
    assert "# simulated: true" in lines


def test_table_streams_in_nccl_tests_layout_and_labels_sched(capsys):
    assert main(ARGS) == 0
    out = capsys.readouterr().out
    assert "#       size         count      type   redop    root     time   algbw   busbw  #wrong" in out
    assert "# a2acc algorithm: fast" in out and "# Avg bus bandwidth" in out
    assert "sched = the planner's time" in out and "simulated, not measured" in out
    err = capsys.readouterr().err
    del err


def test_progress_lines_off_a_terminal(capsys):
    assert main(ARGS) == 0
    err = capsys.readouterr().err
    assert "[1/4] fast @ 1 MiB" in err and "[4/4] spreadout @ 4 MiB" in err


def test_nccl_tests_size_flags_and_alltoallv_bw(tmp_path, capsys):
    js = tmp_path / "o.json"
    base = ["compare", "-t", "dgx-h100", "-n", "2", "--traffic", "zipf", "-a", "direct"]
    assert main([*base, "-b", "1M", "-e", "8M", "-f", "2", "-J", str(js), "--bw", "alltoallv"]) == 0
    rows = json.loads(js.read_text())["rows"]
    assert [r["size"] for r in rows] == [1 << 20, 2 << 20, 4 << 20, 8 << 20]
    for r in rows:  # the busiest rank moves more than the mean rank under skew
        assert r["algbw_GBps"] == r["algbw_alltoallv_GBps"] > r["algbw_fast_GBps"]
    capsys.readouterr()
    assert main([*base, "-b", "1M", "-e", "3M", "-i", "1M", "-J", str(js)]) == 0
    assert [r["size"] for r in json.loads(js.read_text())["rows"]] == [1 << 20, 2 << 20, 3 << 20]
    assert main([*base, "--sizes", "1M", "-b", "1M"]) == 2


def test_a_matrix_at_its_own_size_needs_no_sizes(tmp_path, capsys):
    m = tmp_path / "m.npy"
    mat = np.random.default_rng(3).integers(0, 1 << 16, (16, 16)) * 16
    np.save(m, mat)
    js = tmp_path / "o.json"
    assert (
        main(["compare", "-t", "dgx-h100", "-n", "2", "--traffic", str(m), "-a", "fast", "-J", str(js)]) == 0
    )
    rows = json.loads(js.read_text())["rows"]
    assert len(rows) == 1 and rows[0]["size"] == round(mat.sum(axis=1).mean())
    assert "at its own size" in capsys.readouterr().out


def test_a_workload_at_tokens_times_bytes_per_token_or_at_given_sizes(tmp_path, capsys):
    """compare --traffic w3: one row at the workload's own size (tokens x top-k x bytes per token per GPU); with
    sizes, the same routing at more or fewer bytes per token."""
    from a2acc.model.workloads import EpLayout, Workload, traffic_matrix

    base = ["compare", "-t", "dgx-h100", "-n", "2", "--traffic", "w3", "-a", "fast,direct", "--tokens", "256"]
    js = tmp_path / "o.json"
    assert main([*base, "--top-k", "4", "--bytes-per-token", "2048", "-J", str(js), "--step", "2"]) == 0
    out = capsys.readouterr().out
    assert "w3 (spread hot experts), seed 0, step 2: 32 experts, top-4, 256 tokens/GPU, 2048 B/token" in out
    rows = json.loads(js.read_text())["rows"]
    assert {r["size"] for r in rows} == {256 * 4 * 2048}
    expect = traffic_matrix(Workload("w3", 32, 4, 256), 2, EpLayout(16), 2048)
    assert int(expect.sum(axis=1).mean()) == 256 * 4 * 2048
    assert main([*base, "--sizes", "1M,4M", "-J", str(js), "--force"]) == 0
    assert sorted({r["size"] for r in json.loads(js.read_text())["rows"]}) == [1 << 20, 4 << 20]
    assert "rescaled to each size" in capsys.readouterr().out
    assert main([*base, "--experts", "24"]) == 2  # not a multiple of the 16 EP ranks


def test_plot_busbw_from_zero_with_size_labels(tmp_path, capsys):
    png = tmp_path / "cmp.png"
    assert main([*ARGS, "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "plot written" in capsys.readouterr().out
    assert (
        size_label(1 << 20) == "1 MiB"
        and size_label(3 << 29) == "1.5 GiB"
        and size_label(512 << 10) == "512 KiB"
    )


def test_plot_without_matplotlib_fails_before_work(tmp_path, monkeypatch, capsys):
    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("no matplotlib")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    png = tmp_path / "x.png"
    assert main([*ARGS, "--plot", str(png)]) == 2
    cap = capsys.readouterr()
    assert "matplotlib" in cap.err and "pip install" in cap.err
    assert "a2acc algorithm" not in cap.out and not png.exists()


def test_model_file_and_incast_switch(tmp_path, capsys):
    params = tmp_path / "p.yaml"
    params.write_text(
        "version: 1\nname: mine\ntransport: ib\ninter_efficiency: 0.5\nalpha_us: 0\nstage_us: 0\n",
        encoding="utf-8",
    )
    js = tmp_path / "o.json"
    assert main([*ARGS, "--model", str(params), "-J", str(js)]) == 0
    doc = json.loads(js.read_text())
    assert doc["model"]["name"] == "mine" and doc["model"]["inter_efficiency"] == 0.5
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ntransport: ib\ninter_efficiency: 2\n", encoding="utf-8")
    assert main([*ARGS, "--model", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "inter_efficiency" in err and "[0.001, 1]" in err


def test_bounds_and_simulate_commands(tmp_path, capsys):
    m = tmp_path / "m.npy"
    plan = tmp_path / "p.json"
    assert main(["traffic", "gen", "uniform", "-t", "mi300x", "-n", "2", "--size", "4M", "-o", str(m)]) == 0
    assert main(["bounds", "-t", "mi300x", "-n", "2", "-m", str(m), "--mcf"]) == 0
    assert "<- binds" in capsys.readouterr().out
    assert main(["plan", "-t", "mi300x", "-n", "2", "-m", str(m), "-a", "fast", "-o", str(plan)]) == 0
    assert main(["simulate", str(plan), "-t", "mi300x", "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert "algbw" in out and "% of bound" in out and "simulated" in out
    assert (
        main(["simulate", str(plan), "-t", "mi300x", "-n", "2", "--engine", "reference", "--incast", "off"])
        == 0
    )
    assert main(["simulate", str(plan), "-t", "mi300x", "-n", "3"]) == 2


def test_syccl_joins_the_defaults_on_tiered_topologies_and_auto_runs_last():
    from a2acc.cli.compare import default_algorithms
    from a2acc.model.topology import load_topology, parse_topology

    assert default_algorithms(load_topology("dgx-a100", 2)) == [
        "fast",
        "spreadout",
        "direct",
        "hierarchical",
        "syccl",
        "auto",
    ]
    assert "syccl" not in default_algorithms(load_topology("dgx-h100", 9))  # 72 GPUs: ask with -a
    torus = parse_topology({"version": 1, "direct": {"kind": "torus", "dims": [2, 2], "bandwidth": 10}}, "t")
    assert "syccl" not in default_algorithms(torus)


def test_the_closing_table_marks_the_fastest_row_and_autos_pick(tmp_path, capsys):
    import json

    from a2acc.cli import main
    from a2acc.planners import PLANNERS

    out = tmp_path / "c.json"
    argv = ["compare", "-t", "dgx-h100", "-n", "2", "--traffic", "zipf", "--sizes", "1M,64M"]
    assert main([*argv, "-a", "direct,fast,auto", "-J", str(out)]) == 0
    text = capsys.readouterr().out
    assert "# fastest per size (simulated):" in text
    rows = json.loads(out.read_text())["rows"]
    for size in (1 << 20, 64 << 20):
        mine = [r for r in rows if r["size"] == size]
        best = min(mine, key=lambda r: r["time_s"])
        assert [r["fastest"] for r in mine].count(True) == 1 and best["fastest"]
        auto = next(r for r in mine if r["algorithm"] == "auto")
        # auto may pick a planner the comparison did not list (syccl runs within its budget at 16 GPUs)
        assert auto["pick"] in set(PLANNERS.names()) - {"auto"}
        assert auto["time_s"] <= best["time_s"] * (1 + 1e-9)
        line = next(ln for ln in text.splitlines() if ln.startswith("#") and f" {size} " in ln)
        assert best["algorithm"] in line and auto["pick"] in line


def test_outputs_never_destroy_inputs_or_foreign_files(tmp_path, capsys):
    """-J/--csv/--plot are checked before any work: not an input, not each other, not a file a2acc did not write
    (unless --force), not '-', and in an existing directory (nothing is created)."""
    m = tmp_path / "m.npy"
    np.save(m, np.full((16, 16), 1 << 20, dtype=np.int64))
    before = m.read_bytes()
    small = ["compare", "-t", "dgx-h100", "-n", "2", "--traffic", str(m), "-a", "direct"]
    foreign = tmp_path / "notes.json"
    foreign.write_text('{"mine": 1}\n', encoding="utf-8")
    cases = [
        (["-J", str(m)], "an input of this command"),
        (["-J", str(tmp_path / "o.out"), "--csv", str(tmp_path / "o.out")], "writes there too"),
        (["-J", str(foreign)], "cannot prove it wrote"),
        (["-J", "-"], "stdout"),
        (["--csv", str(tmp_path / "nodir" / "x.csv")], "does not exist"),
    ]
    for extra, why in cases:
        assert main([*small, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert why in err and "Traceback" not in err
    assert m.read_bytes() == before and foreign.read_text() == '{"mine": 1}\n'
    assert not (tmp_path / "nodir").exists() and not (tmp_path / "o.out").exists()
    js = tmp_path / "run.json"
    assert main([*small, "-J", str(js)]) == 0
    assert main([*small, "-J", str(js)]) == 0  # its own earlier output is replaced
    assert main([*small, "-J", str(foreign), "--force"]) == 0
    capsys.readouterr()


def test_a_partial_model_file_takes_its_transports_defaults(tmp_path):
    from a2acc.analysis.model import CALIBRATED_ROCE, load_model

    p = tmp_path / "m.yaml"
    p.write_text("version: 1\ntransport: roce\nalpha_us: 5\n", encoding="utf-8")
    m = load_model(p)
    assert m.alpha_s == pytest.approx(5e-6)
    assert m.inter_efficiency == CALIBRATED_ROCE.inter_efficiency
    assert m.incast.buffer_bytes == CALIBRATED_ROCE.incast.buffer_bytes and m.incast.enabled
    assert m.incast.rto_s == pytest.approx(CALIBRATED_ROCE.incast.rto_s)
    p.write_text("version: 1\ntransport: ib\n", encoding="utf-8")
    ib = load_model(p)
    assert ib.stage_s == pytest.approx(CALIBRATED_ROCE.stage_s) and not ib.incast.enabled


def test_worker_processes_give_the_rows_of_one_process(tmp_path, capsys):
    """``--jobs 2`` computes the rows in two worker processes (syccl's at every size in one task, fast's and
    direct's per size, mcf for auto only, then auto per size): the same rows (every figure but the planners' own
    timings), in the same table order, as ``--jobs 1``."""
    rows = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}.json"
        argv = ["compare", "-t", "dgx-h100", "-n", "2", "--traffic", "zipf", "--sizes", "1M,16M,64M"]
        assert main([*argv, "-a", "fast,direct,syccl,auto", "--jobs", jobs, "-J", str(out)]) == 0
        capsys.readouterr()
        rows[jobs] = [
            {k: v for k, v in r.items() if k not in ("schedule_s", "sched")}
            for r in json.loads(out.read_text())["rows"]
        ]
    assert rows["1"] == rows["2"] and len(rows["1"]) == 12
    assert [r["algorithm"] for r in rows["2"]] == ["fast"] * 3 + ["direct"] * 3 + ["syccl"] * 3 + ["auto"] * 3


def test_auto_in_another_process_reuses_the_plans_and_simulations_of_the_rows(monkeypatch):
    """What a worker's task made at a size (plans and simulations, by content) is handed to that size's auto
    task: in a process that planned nothing, auto then plans and simulates nothing again and picks the fastest
    row."""
    from a2acc import planners
    from a2acc.analysis import fastsim
    from a2acc.studies import compare

    topo = load_topology("dgx-h100", 2)
    sizes = (1 << 20, 1 << 24)
    common = compare._Inputs(topo, "zipf", None, 0, 0.8, False, "fast", _pattern("zipf", topo, sizes, 0, 0.8))
    quick = tuple(compare.Contender(a) for a in ("fast", "direct", "spreadout", "hierarchical"))
    rows, made = compare._task(quick, sizes[1:], common, [])
    # the searching ones as compare runs them for auto alone: with auto's budget as their time limit (not cut
    # short here, so each serves as the unlimited plan auto looks up)
    limit = (("time_limit", "30"),)
    searched, made2 = compare._task(
        (compare.Contender("syccl", limit), compare.Contender("mcf", limit)), sizes[1:], common, []
    )
    rows[0] += searched[0]
    made = [*made, *made2]
    planners.forget()
    fastsim.forget()  # as in another process

    def only_auto(name):
        if name != "auto":
            raise AssertionError(f"{name} planned again")
        return real(name)

    def no_simulation(*_a, **_k):
        raise AssertionError("simulated again")

    real, real_sim = planners.get_planner, fastsim.simulate_setup
    monkeypatch.setattr(planners, "get_planner", only_auto)
    monkeypatch.setattr(fastsim, "simulate_setup", no_simulation)
    auto = (compare.Contender("auto"),)
    (auto_rows,), _made = compare._task(auto, sizes[1:], common, made)
    assert auto_rows[0].time_s == min(r.time_s for r in rows[0])
    with pytest.raises(AssertionError, match="planned again"):  # without them it would plan
        compare._task(auto, sizes[:1], common, [])
    # a search its time limit cut short (a note in its meta) is not taken for the unlimited plan: auto plans it
    # again within its own budget, as in one process
    monkeypatch.setattr(planners, "get_planner", real)
    monkeypatch.setattr(fastsim, "simulate_setup", real_sim)
    _rows, cut = compare._task(
        (compare.Contender("syccl", (("time_limit", "0.001"),)),), sizes[:1], common, []
    )
    planners.forget()
    monkeypatch.setattr(
        planners,
        "get_planner",
        lambda n: (_ for _ in ()).throw(AssertionError(f"{n} again")) if n == "syccl" else real(n),
    )
    with pytest.raises(AssertionError, match="syccl again"):
        compare._task(auto, sizes[:1], common, cut)


def test_jobs_below_one_is_refused(capsys):
    assert main([*ARGS, "--jobs", "0"]) == 2
    assert "--jobs" in capsys.readouterr().err


def test_sizes_share_one_chunk_pattern_where_it_fits():
    topo = load_topology("dgx-h100", 8)
    sizes = [1 << 20, 1 << 26]
    pattern = _pattern("zipf", topo, sizes, 0, 0.8)
    assert pattern is not None and _pattern("zipf", topo, sizes[:1], 0, 0.8) is None
    m = matrix_for("zipf", topo, 1 << 20, 0, 0.8)
    layout = shared_layout(m, pattern)
    assert layout is not None
    counts, unit = layout
    assert counts is pattern and unit % 16 == 0
    assert (counts * unit >= m).all() and not (counts * (unit - 16) >= m).all()  # the smallest that covers
    rows = list(compare_rows(topo, "zipf", sizes, ["direct"]))
    assert rows[0].padding_bytes == padding_bytes(m, counts, unit)
    hole = m.copy()
    hole[pattern == 0] = 16  # (the diagonal: no chunks there in the pattern)
    assert shared_layout(hole, pattern) is None
    # the moe generator's shape changes with the size (whole tokens): small sizes take their own layout
    moe = _pattern("moe", topo, sizes, 0, 0.8)
    assert moe is not None and shared_layout(matrix_for("moe", topo, 1 << 20, 0, 0.8), moe) is None
    # so does a size the pattern would pad by more than a point of its payload over its own layout (16 ranks:
    # 2.6 % against 0.3 %)
    small = load_topology("dgx-h100", 2)
    pat16 = _pattern("zipf", small, sizes, 0, 0.8)
    assert pat16 is not None and shared_layout(matrix_for("zipf", small, 1 << 20, 0, 0.8), pat16) is None


def test_one_planner_twice_with_other_options_is_two_blocks_named_as_written(tmp_path, capsys):
    """``fast`` and ``fast[shape=staged]`` are two entries: each its own block and rows, labelled as listed
    (table, JSON), planned with its options (the staged one is FAST's sequence, one step per stage); worker
    processes give the same rows; auto, listed too, tries fast with its own options."""
    from a2acc.studies.compare import contenders

    algos = "fast,fast[shape=staged],fast[shape=grouped,groups=1,split=true],auto"
    assert [(c.label, c.option_map) for c in contenders([algos])] == [
        ("fast", None),
        ("fast[shape=staged]", {"shape": "staged"}),
        ("fast[shape=grouped,groups=1,split=true]", {"shape": "grouped", "groups": "1", "split": "true"}),
        ("auto", None),
    ]
    rows = {}
    argv = ["compare", "-t", "dgx-h100", "-n", "4", "--traffic", "zipf", "--sizes", "4M", "-a", algos]
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}.json"
        assert main([*argv, "--jobs", jobs, "-J", str(out)]) == 0
        table = capsys.readouterr().out
        assert "# a2acc algorithm: fast[shape=staged]" in table
        rows[jobs] = [
            {k: v for k, v in r.items() if k not in ("schedule_s", "sched")}
            for r in json.loads(out.read_text())["rows"]
        ]
    assert rows["1"] == rows["2"]
    labels = [r["algorithm"] for r in rows["1"]]
    assert labels == [c.label for c in contenders([algos])]
    by = {(r["algorithm"], r["size"]): r for r in rows["1"]}
    size = 4 << 20
    assert by[("fast[shape=staged]", size)]["stages"] > by[("fast", size)]["stages"]
    assert by[("auto", size)]["time_s"] <= by[("fast", size)]["time_s"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("fastt", "known planners"),
        ("fast[shap=staged]", "not an option here"),
        ("fast[shape=foo]", "allowed: auto, staged, grouped, direct"),
        ("fast[shape=staged", "a '[' without its ']'"),
        ("fast]", "a ']' without its '['"),
        ("fast[[shape=staged]]", "brackets do not nest"),
        ("fast[]", "options inside the brackets"),
        ("fast[staged]", "options as KEY=VALUE"),
        ("fast[shape=staged,shape=direct]", "given twice"),
        ("fast,fast", "each entry once"),
        ("fast,,direct", "an empty entry between commas"),
        ("fast[shape=staged]x", "NAME or NAME[KEY=VALUE,...]"),
        ("direct[groups=2]", "not an option here"),
        ("fast[groups=0]", "allowed 1 to 64"),
    ],
)
def test_bad_planner_entries_are_refused_with_the_rule(text, fragment):
    from a2acc.studies.compare import contenders

    with pytest.raises(InputError, match="--algorithms") as exc:
        contenders([text])
    assert fragment in str(exc.value), str(exc.value)
