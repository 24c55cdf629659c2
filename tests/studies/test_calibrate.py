"""``a2acc calibrate``: log readers, clear errors, and recovery of known parameters from synthetic logs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.analysis.model import load_model
from a2acc.cli import main
from a2acc.errors import InputError
from a2acc.model.topology import load_topology
from a2acc.studies.calibrate import Batch, build_cases, get_param, set_params, start_model
from a2acc.studies.logs import (
    FAST_ITERATIONS,
    LogFormatError,
    Measurement,
    Traffic,
    fast_zipf_weights,
    matrix_for,
    read_logs,
    servers_named,
)

SHARED = Path(os.environ.get("A2ACC_SHARED", Path(__file__).resolve().parents[3] / "shared"))
FAST_LOGS = SHARED / "reference" / "peers" / "FAST" / "amd-result"
MiB = 1 << 20

TOPO_YAML = """\
version: 1
name: syn
servers: 2
gpus_per_server: 4
memory_bandwidth: 2000
intra: {fabric: full_mesh, bandwidth: 64, latency: 0.7}
inter: {nics_per_server: 4, bandwidth: 12.5, latency: 1.0, wiring: single_switch, transport: roce}
"""


def _fast_line(total: float, skew: float, flash_ms: float, fan_ms: float, spread_ms: float, n: int) -> str:
    algbw = [total / n / (t * 1e-3) / 1e9 for t in (flash_ms, fan_ms, flash_ms, spread_ms)]
    vals = [
        total,
        skew,
        *algbw,
        flash_ms,
        0.0,
        flash_ms,
        0.0,
        fan_ms,
        flash_ms,
        0.0,
        flash_ms,
        0.0,
        spread_ms,
    ]
    return " ".join(f"{v:.9g}" for v in vals)


def test_reads_fasts_published_logs():
    if not FAST_LOGS.is_dir():
        pytest.fail(f"FAST's logs not found under {FAST_LOGS} (CI must have ../shared beside the clone)")
    topo = load_topology("mi300x-100g", 3)
    meas = read_logs([str(FAST_LOGS / "3n_fixed_sz_1736528199.txt")], topo)
    assert {m.algorithm for m in meas} == {"fast", "direct", "spreadout"}
    assert len(meas) == 33 and all(m.runs == 2 and m.traffic.kind == "fixed" for m in meas)
    smallest = min(m.size for m in meas)
    assert smallest == 144703488 // 24  # total bytes / 24 GPUs: 23 x 256 KiB
    with pytest.raises(LogFormatError, match="3 servers .* topology has 4"):
        read_logs([str(FAST_LOGS / "3n_fixed_sz_1736528199.txt")], load_topology("mi300x-100g", 4))


def test_fast_traffic_like_the_runs_and_nccl_tests_balanced():
    m = matrix_for(Traffic("fixed"), 4, 3 * 2048)
    assert m[0, 0] == 0 and m[0, 1] == 2048  # FAST: diagonal 0, entries aligned up to 512 int32 (2 KiB)
    assert matrix_for(Traffic("fixed"), 4, 3 * 1024)[0, 1] == 2048
    for tr in (Traffic("uniform"), Traffic("zipf", 0.8)):
        u = matrix_for(tr, 24, 64 * MiB, seed=3)
        assert abs(u.sum(axis=1).mean() / (64 * MiB) - 1) < 0.01 and (u.diagonal() == 0).all()
        assert (u % 2048 == 0).all()
    b = matrix_for(Traffic("balanced"), 8, 8 * MiB)
    assert (b == MiB).all()


@settings(max_examples=20, deadline=None)
@given(skew=st.sampled_from([0.1, 0.5, 0.8, 0.99, 1.0, 1.3]))
def test_fasts_zipf_weights_follow_its_inverse_cdf(skew):
    """FAST's ``zipf_inverse_cdf_fast`` inverts an Euler-Maclaurin estimate of the Zipf sum: the weights it draws
    are close to k^-s over 1..1023 (and never outside 1..1024)."""
    w = fast_zipf_weights(skew, np.random.default_rng(0).random(200_000))
    assert w.min() >= 1 and w.max() <= 1024
    k = np.arange(1, 11)
    zipf = k**-skew / (np.arange(1, 1024) ** -skew).sum()
    got = np.bincount(w, minlength=11)[1:11] / len(w)
    np.testing.assert_allclose(got, zipf, rtol=0.08)


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("3n_fixed_sz_x.txt", "1 2 3\n", r"line 1: .* 16 numbers per line"),
        ("3n_fixed_sz_x.txt", " ".join(["1"] * 15 + ["x"]) + "\n", "every column must be a number"),
        ("3n_fixed_sz_x.txt", " ".join(["-5"] + ["1"] * 15) + "\n", "column 1 is total bytes in"),
        ("3n_fixed_sz_x.txt", " ".join(["100", "0"] + ["1"] * 13 + ["-1"]) + "\n", "times are ms in"),
        ("3n_fixed_sz_x.txt", " ".join(["100", "0"] + ["1"] * 13 + ["1e99"]) + "\n", "times are ms in"),
        ("3n_mystery.txt", " ".join(["100", "0"] + ["1"] * 14) + "\n", "cannot tell the traffic"),
        ("3n_fixed_sz_x.txt", "", "no measurements"),
    ],
)
def test_malformed_fast_logs_name_file_field_and_value(tmp_path, name, text, match):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    with pytest.raises(LogFormatError, match=match) as exc:
        read_logs([str(p)], load_topology("mi300x-100g", 3))
    assert str(p) in str(exc.value)


def test_zero_times_in_fast_logs_are_left_out_with_a_warning(tmp_path):
    p = tmp_path / "3n_fixed_sz_x.txt"
    cols = ["100", "0"] + ["1"] * 14
    cols[15] = "0"  # SpreadOut's time
    p.write_text(" ".join(cols) + "\n", encoding="utf-8")
    said: list[str] = []
    meas = read_logs([str(p)], load_topology("mi300x-100g", 3), warn=said.append)
    assert {m.algorithm for m in meas} == {"fast", "direct"}
    assert len(said) == 1 and "line 1" in said[0] and "spreadout time is 0" in said[0]
    cols[6] = cols[10] = "0"
    p.write_text(" ".join(cols) + "\n", encoding="utf-8")
    with pytest.raises(LogFormatError, match="no measurements"):
        read_logs([str(p)], load_topology("mi300x-100g", 3))


def _nccl_tests_log(ranks: int, rows: list[tuple[int, float]]) -> str:
    head = [
        "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20",
        "#",
    ]
    head += ["# Using devices"] + [
        f"#  Rank {r:2d} Group  0 Pid  {1000 + r} on host0 device  {r % 8} [0x00] NVIDIA H100"
        for r in range(ranks)
    ]
    head += [
        "#",
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
    ]
    body = [
        f"{s:>12d} {s // 4 // ranks:>13d}     float    none      -1  {t:7.2f}  1.00  0.90      0  {t:7.2f}  1.00  0.90      0"
        for s, t in rows
    ]
    return "\n".join([*head, *body, "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 0.9", ""])


def test_reads_nccl_tests_alltoall_and_checks_the_rank_count(tmp_path):
    log = tmp_path / "alltoall_perf.txt"
    log.write_text(_nccl_tests_log(16, [(1 << 20, 50.0), (4 << 20, 120.0)]), encoding="utf-8")
    topo = load_topology("dgx-h100", 2)
    meas = read_logs([str(log)], topo)
    assert [(m.algorithm, m.traffic.kind, m.size, m.time_s) for m in meas] == [
        ("direct", "balanced", 1 << 20, pytest.approx(50e-6)),
        ("direct", "balanced", 4 << 20, pytest.approx(120e-6)),
    ]
    with pytest.raises(LogFormatError, match="16 ranks, the topology has 32"):
        read_logs([str(log)], load_topology("dgx-h100", 4))
    v = tmp_path / "alltoallv_perf.txt"
    v.write_text(_nccl_tests_log(16, [(1 << 20, 50.0)]), encoding="utf-8")
    with pytest.raises(LogFormatError, match="--traffic"):
        read_logs([str(v)], topo)


def test_calibrate_cli_errors_leave_nothing_written(tmp_path, capsys):
    bad = tmp_path / "3n_fixed_sz_bad.txt"
    bad.write_text("1 2 3\n", encoding="utf-8")
    out = tmp_path / "p.yaml"
    assert main(["calibrate", str(bad), "-t", "mi300x-100g", "-n", "3", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "line 1" in err and not out.exists()
    assert (
        main(["calibrate", str(bad), "-t", "mi300x-100g", "-n", "3", "-o", str(out), "--fit", "speed"]) == 2
    )
    assert "--fit" in capsys.readouterr().err and not out.exists()


@pytest.mark.slow
def test_calibration_recovers_known_parameters_from_synthetic_logs(tmp_path, capsys):
    """Logs generated by the model itself (FAST's format, fixed-size traffic on 2 x 4 GPUs): the fit returns the
    parameters that generated them."""
    topo_file = tmp_path / "syn.yaml"
    topo_file.write_text(TOPO_YAML, encoding="utf-8")
    topo = load_topology(str(topo_file))
    true = set_params(
        start_model("roce"),
        {
            "inter_efficiency": 0.85,
            "intra_efficiency": 0.6,
            "alpha_us": 15.0,
            "stage_us": 120.0,
            "fill_bytes": 600e3,
            "buffer_bytes": 24.0 * MiB,
            "retransmit": 1.5,
            "storm_ms": 400.0,
        },
    )
    n = topo.nranks
    pairs = [
        128 << 10,
        256 << 10,
        512 << 10,
        1 * MiB,
        2 * MiB,
        4 * MiB,
        8 * MiB,
        16 * MiB,
        64 * MiB,
        256 * MiB,
    ]
    lines = []
    for pair in pairs:
        total = pair * n * (n - 1)
        times = {}
        for alg in ("fast", "direct", "spreadout"):
            # as FAST logs it: the median over runs of each run's mean over its 10 iterations
            meas = Measurement("syn", alg, Traffic("fixed"), total // n, 1.0, 1, FAST_ITERATIONS)
            times[alg] = float(Batch(build_cases([meas], topo)).predict(true)[0]) * 1e3
        lines.append(_fast_line(total, 0.0, times["fast"], times["direct"], times["spreadout"], n))
    log = tmp_path / "2n_fixed_sz_synthetic.txt"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "params.yaml"
    fitted = "inter_efficiency,intra_efficiency,alpha_us,stage_us,fill_bytes,buffer_bytes,retransmit,storm_ms"
    assert main(["calibrate", str(log), "-t", str(topo_file), "-o", str(out), "--fit", fitted]) == 0
    got = load_model(out)
    assert get_param(got, "inter_efficiency") == pytest.approx(0.85, rel=0.02)
    assert get_param(got, "intra_efficiency") == pytest.approx(0.6, rel=0.1)
    assert get_param(got, "alpha_us") == pytest.approx(15, rel=0.25)
    assert get_param(got, "stage_us") == pytest.approx(120, rel=0.15)
    assert get_param(got, "fill_bytes") == pytest.approx(600e3, rel=0.15)
    assert get_param(got, "buffer_bytes") == pytest.approx(24 * MiB, rel=0.3)
    assert get_param(got, "retransmit") == pytest.approx(1.5, rel=0.3)
    assert get_param(got, "storm_ms") == pytest.approx(400, rel=0.3)
    captured = capsys.readouterr()
    assert "median |pred/meas - 1|" in captured.out and "calibrated in" in captured.err


def test_calibrate_refuses_to_overwrite_a_log_or_hold_back_a_fitted_one(tmp_path, capsys):
    log = tmp_path / "3n_fixed_sz_a.txt"
    log.write_text("1 2 3\n", encoding="utf-8")
    before = log.read_bytes()
    base = ["calibrate", str(log), "-t", "mi300x-100g", "-n", "3"]
    assert main([*base, "-o", str(log)]) == 2
    assert "an input of this command" in capsys.readouterr().err and log.read_bytes() == before
    assert main([*base, "--test", str(log), "-o", str(tmp_path / "p.yaml")]) == 2
    assert "held-back log" in capsys.readouterr().err
    assert main([*base, "--fit", "", "-o", str(tmp_path / "p.yaml")]) == 2
    assert "--fit" in capsys.readouterr().err and not (tmp_path / "p.yaml").exists()


def test_rows_timed_back_to_back_are_predicted_as_their_period(tmp_path):
    """FAST's benchmark and nccl-tests queue their timed calls back to back: a staged row with its iteration
    count is predicted as two calls' makespan minus one's (per draw of a random row, then the median over the
    draws); a row of unknown iteration count, and fan-out's rows (a per-call timeout hazard), as one call."""
    from a2acc.analysis.fastsim import simulate_setup
    from a2acc.analysis.iterations import back_to_back  # its stream order: tests/analysis/test_iterations.py
    from a2acc.analysis.simulate import routes
    from a2acc.pipeline import Request, compile
    from a2acc.studies.calibrate import (
        HOST_LAUNCHED,
        PLANNED_AS,
        RANDOM_DRAWS,
        _config_seed,
        timed_back_to_back,
    )

    topo_file = tmp_path / "syn.yaml"
    topo_file.write_text(TOPO_YAML, encoding="utf-8")
    topo = load_topology(str(topo_file))
    model = start_model("roce")

    size = 6 * MiB
    for alg, traffic in (
        ("fast", Traffic("fixed")),
        ("spreadout", Traffic("uniform")),
        ("direct", Traffic("fixed")),
    ):
        for iters in (FAST_ITERATIONS, 0):
            meas = Measurement("syn", alg, traffic, size, 1.0, 1, iters)
            case = build_cases([meas], topo)[0]
            got = float(Batch([case]).predict(model, tolerance=0.0)[0])
            draws = RANDOM_DRAWS[alg] if traffic.kind == "uniform" else 1
            want = []
            for j in range(draws):
                mat = matrix_for(traffic, topo.nranks, size, _config_seed(meas, 0) + j)
                prog = compile(Request(topo, mat, alg, planner_options=PLANNED_AS.get(alg))).program
                host = alg in HOST_LAUNCHED  # FAST's FLASH: every step launched from the host
                one = simulate_setup(
                    routes(prog, topo, host_launched=host).setup(model), tolerance=0.0
                ).time_s
                pair = routes(back_to_back(prog, 2), topo, host_launched=host)
                two = simulate_setup(pair.setup(model), tolerance=0.0).time_s
                want.append(two - one if (alg != "direct" and iters) else one)
            assert len(case.draws) == draws
            if alg != "direct" and iters:
                assert timed_back_to_back(meas) and len(case.periods) == draws
            else:
                assert not timed_back_to_back(meas) and not case.periods
            assert got == pytest.approx(float(np.median(want)), rel=1e-9) and got > 0


def test_held_parameters_are_kept_and_bad_holds_refused(tmp_path, capsys):
    """--hold keeps a parameter at its value and out of the fit; unknown names, values outside the search
    range, and a parameter both fitted and held are refused before anything is written."""
    topo_file = tmp_path / "syn.yaml"
    topo_file.write_text(TOPO_YAML, encoding="utf-8")
    topo = load_topology(str(topo_file))
    n = topo.nranks
    lines = []
    for pair in (256 << 10, 1 * MiB, 4 * MiB, 16 * MiB):
        total = pair * n * (n - 1)
        meas = Measurement("syn", "spreadout", Traffic("fixed"), total // n, 1.0, 1, FAST_ITERATIONS)
        t = float(Batch(build_cases([meas], topo)).predict(start_model("roce"))[0]) * 1e3
        lines.append(_fast_line(total, 0.0, t, t, t, n))
    log = tmp_path / "2n_fixed_sz_synthetic.txt"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    base = ["calibrate", str(log), "-t", str(topo_file), "--fit-on", "spreadout"]
    out = tmp_path / "p.yaml"
    assert main([*base, "-o", str(out), "--fit", "inter_efficiency,stage_us", "--hold", "alpha_us=7.5"]) == 0
    got = load_model(out)
    assert get_param(got, "alpha_us") == pytest.approx(7.5)
    assert "held: alpha_us=7.5" in got.source
    capsys.readouterr()
    # without --fit: the parameters the logs identify, less the held one
    out2 = tmp_path / "p2.yaml"
    assert main([*base, "-o", str(out2), "--hold", "alpha_us=7.5"]) == 0
    got2 = load_model(out2)
    assert get_param(got2, "alpha_us") == pytest.approx(7.5)
    assert "alpha_us" not in got2.source.split("fitted: ")[1].split(";")[0]
    assert "alpha_us" in capsys.readouterr().out.split("(held)")[0].splitlines()[-1]
    for hold, fit_list, why in (
        ("alpha=1", None, "NAME=VALUE"),
        ("alpha_us=5_0", None, "a number"),
        ("alpha_us=5,", None, "NAME=VALUE"),
        ("alpha_us=abc", None, "a number"),
        ("alpha_us=0.001", None, "between"),
        ("inter_efficiency=1.5", None, "between"),
        ("alpha_us=3,alpha_us=4", None, "each parameter once"),
        ("alpha_us=3", "alpha_us,stage_us", "does not also list"),
    ):
        bad = tmp_path / "bad.yaml"
        argv = [*base, "-o", str(bad), "--hold", hold, *(["--fit", fit_list] if fit_list else [])]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "--hold" in err and why in err and "Traceback" not in err
        assert not bad.exists()


def test_a_held_incast_parameter_survives_the_switch_to_a_lossy_model():
    """Fitting incast parameters on a lossless start swaps in RoCE's incast model; what is held stays held."""
    from a2acc.studies.calibrate import fit

    res = fit(
        [], start_model("ib"), ["buffer_bytes", "storm_ms"], hold={"retransmit": 0.5, "fanin_power": 3.0}
    )
    assert get_param(res.model, "retransmit") == pytest.approx(0.5)
    assert get_param(res.model, "fanin_power") == pytest.approx(3.0)
    with pytest.raises(InputError, match="does not also list"):
        fit([], start_model("roce"), ["alpha_us"], hold={"alpha_us": 3.0})


def test_one_fit_spans_the_server_counts_fast_logs_name(tmp_path, capsys):
    """Without -n, a preset is scaled to each FAST log's ``<n>n_``: SpreadOut logs made by a known model on 2 and
    3 servers give that model back from one fit, the report has a row per server count, the parameter file names
    both topologies; with -n, a log of another count is refused."""
    true = set_params(start_model("roce"), {"inter_efficiency": 0.8, "stage_us": 150.0})
    logs = []
    for servers in (2, 3):
        topo = load_topology("mi300x-100g", servers)
        n = topo.nranks
        lines = []
        for pair in (1 * MiB, 3 * MiB, 12 * MiB):
            total = pair * n * (n - 1)
            meas = Measurement("syn", "spreadout", Traffic("fixed"), total // n, 1.0, 1, FAST_ITERATIONS)
            t = float(Batch(build_cases([meas], topo)).predict(true)[0]) * 1e3
            lines.append(_fast_line(total, 0.0, t, t, t, n))
        log = tmp_path / f"{servers}n_fixed_sz_syn.txt"
        log.write_text("\n".join(lines) + "\n", encoding="utf-8")
        logs.append(str(log))
    out = tmp_path / "p.yaml"
    args = [
        "calibrate",
        *logs,
        "-t",
        "mi300x-100g",
        "--fit-on",
        "spreadout",
        "--fit",
        "inter_efficiency,stage_us",
    ]
    assert main([*args, "-o", str(out)]) == 0
    got = load_model(out)
    assert get_param(got, "inter_efficiency") == pytest.approx(0.8, rel=0.01)
    assert get_param(got, "stage_us") == pytest.approx(150.0, rel=0.05)
    text = capsys.readouterr().out
    assert "(16, 24 GPUs" in text and "servers" in text
    assert re.search(r"^# fit x2 +spreadout", text, re.M) and re.search(r"^# fit x3 +spreadout", text, re.M)
    head = out.read_text(encoding="utf-8")
    assert "mi300x-100g (16 GPUs)" in head and "mi300x-100g (24 GPUs)" in head
    other = tmp_path / "q.yaml"
    assert main([*args, "-n", "3", "-o", str(other)]) == 2
    err = capsys.readouterr().err
    assert "2n_fixed_sz_syn.txt" in err and "give --servers 2" in err and not other.exists()
    # fan-out rows of two counts fitted together: said on stderr before the fit
    fan = ["calibrate", *logs, "-t", "mi300x-100g", "--fit-on", "direct", "--fit", "inter_efficiency"]
    assert main([*fan, "-o", str(other)]) == 0
    assert "fan-out rows of 2 servers, 3 servers are fitted together" in capsys.readouterr().err


def test_only_fast_logs_are_read_on_the_count_their_name_gives(tmp_path):
    """nccl-tests output keeps its ``#  Rank`` count whatever its file is called."""
    fast = tmp_path / "4n_random_sz_a.txt"
    fast.write_text(_fast_line(1 << 30, 0.0, 10.0, 10.0, 10.0, 32) + "\n", encoding="utf-8")
    nccl = tmp_path / "alltoall_3n_run.txt"
    nccl.write_text(
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n"
        "#       size         count      type   redop    root     time   algbw   busbw #wrong\n",
        encoding="utf-8",
    )
    assert servers_named(str(fast)) == 4
    assert servers_named(str(nccl)) is None
    assert servers_named(str(tmp_path / "plain.txt")) is None
