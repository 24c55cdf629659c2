"""The mcf planner: verified plans on direct-connect graphs (punctured too) and presets, schedules that reach the
LP optimum, the flow at scale, time limits and option limits that fall back or refuse cleanly, identical plans
from local and Dask workers."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import a2acc
from a2acc.analysis.fastsim import simulate_fast
from a2acc.cli import main
from a2acc.errors import InputError
from a2acc.flows.mcf import LinkFlow
from a2acc.model.topology import load_topology, parse_topology
from a2acc.model.traffic import generate
from a2acc.planners import mcf as mcf_planner

TORUS_YAML = "version: 1\ndirect: {kind: torus, dims: [4, 4], bandwidth: 50, latency: 1}\n"


def _torus(dims, removed=None):
    direct = {"kind": "torus", "dims": dims, "bandwidth": 50, "latency": 1}
    if removed:
        direct["removed"] = removed
    return parse_topology({"version": 1, "name": "torus", "direct": direct}, "torus")


@pytest.mark.parametrize("formulation", ["link", "path", "time"])
def test_plans_reach_the_lp_optimum_on_a_skewed_torus(formulation):
    t = _torus([4, 4])
    m = generate("zipf", t.nranks, 16 << 20, 1)
    prog = a2acc.plan(t, m, "mcf", formulation=formulation)  # verified by the pipeline
    lp = prog.meta["lp_time_us"] * 1e-6
    sim = simulate_fast(prog, t).time_s
    assert sim == pytest.approx(prog.meta["schedule_us"] * 1e-6, rel=1e-9)
    assert sim <= 1.05 * lp  # measured 1.003-1.012 (ideal model, 1 us links)
    assert sim < 0.6 * simulate_fast(a2acc.plan(t, m, "direct"), t).time_s
    assert {op.link for op in prog.ops if op.src_rank != op.dst_rank} == {"direct"}


def test_a_schedule_its_program_does_not_reproduce_is_replaced_by_the_hop_only_form(monkeypatch):
    """Where the admission form simulates more than ROBUST_SLACK above the list schedule (at scale: the
    16x4x4 torus 1.09x, the 16x8x8 one 1.5x), the hop-only form is built and simulated too and the faster
    kept. Forced here with a negative slack on a small torus: both forms verify (the pipeline checks the
    kept one), the kept one is the faster, and its meta says which it is and what it simulated to."""
    t = _torus([8, 2])
    m = generate("zipf", t.nranks, 4 << 20, 3)
    kept = a2acc.plan(t, m, "mcf")
    assert kept.meta["deps"] == "admission"  # small: the Program reproduces its schedule
    assert kept.meta["simulated_us"] == pytest.approx(kept.meta["schedule_us"], rel=1e-9)
    monkeypatch.setattr(mcf_planner, "ROBUST_SLACK", -1.0)
    forced = a2acc.plan(t, generate("zipf", t.nranks, 4 << 20, 4), "mcf")  # another matrix: not remembered
    sim = simulate_fast(forced, t).time_s * 1e6
    assert sim == pytest.approx(forced.meta["simulated_us"], rel=1e-12)
    if forced.meta["deps"] == "hop":
        assert sim < forced.meta["admission_us"]
        assert np.diff(forced.table.dep_ptr).max() <= 1  # each op waits for its piece's previous hop only
    else:
        assert forced.meta["deps"] == "admission" and forced.meta["hop_only_us"] >= sim


def test_the_hop_only_form_is_kept_when_it_simulates_faster(monkeypatch):
    """The choice itself, with the admission form's simulation made 3x slower (what the dynamics did to it at
    scale): the hop-only form is kept, verified, and says what the other form simulated to."""
    import dataclasses

    from a2acc.analysis import fastsim

    real = fastsim.simulate_fast

    def chaotic(prog, topo, **kw):
        res = real(prog, topo, **kw)
        slow = prog.meta.get("deps") == "admission"
        return dataclasses.replace(res, time_s=res.time_s * 3) if slow else res

    monkeypatch.setattr(fastsim, "simulate_fast", chaotic)
    t = _torus([8, 2])
    prog = a2acc.plan(t, generate("zipf", t.nranks, 4 << 20, 7), "mcf")  # verified by the pipeline
    assert prog.meta["deps"] == "hop" and np.diff(prog.table.dep_ptr).max() <= 1
    assert prog.meta["simulated_us"] == pytest.approx(real(prog, t).time_s * 1e6, rel=1e-12)
    assert prog.meta["admission_us"] > prog.meta["simulated_us"]


def test_each_step_logs_its_time_and_the_plan_does_not_carry_it(monkeypatch, caplog):
    """The flow and the steps after it (minutes each at 1024 GPUs) say what they are doing and how long they
    took, in the log only: two runs give the same Program."""
    import logging

    monkeypatch.setattr(mcf_planner, "ROBUST_SLACK", -1.0)  # both forms built and simulated
    t = _torus([4, 2])
    m = generate("zipf", t.nranks, 1 << 20, 5)
    with caplog.at_level(logging.INFO, logger="a2acc.planners.mcf"):
        first = a2acc.plan(t, m, "mcf")
    steps = [r.getMessage().split(":")[1].strip() for r in caplog.records if r.name == "a2acc.planners.mcf"]
    forms = [
        "Program, admission form",
        "simulation, admission form",
        "Program, hop form",
        "simulation, hop form",
    ]
    assert steps[0] == "flow, formulation=link"
    assert steps[1].startswith("list schedule of ") and steps[2:6] == forms
    # the admission form, when it is the faster, is built once more (one candidate in memory at a time)
    assert steps[6:] == ([] if first.meta["deps"] == "hop" else ["Program, admission form"])
    assert all(r.getMessage().endswith(" s") for r in caplog.records if r.name == "a2acc.planners.mcf")
    assert a2acc.plan(t, m, "mcf").table.cnt.tobytes() == first.table.cnt.tobytes()
    assert dict(a2acc.plan(t, m, "mcf").meta) == dict(first.meta)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_long_step_shows_its_elapsed_time_on_a_terminal(monkeypatch):
    """A step that updates nothing (an LP inside HiGHS) still shows its clock moving."""
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    with mcf_planner._Steps() as steps, steps.step("flow, formulation=link"):
        time.sleep(2.6)  # each second is drawn within a tenth of a second of it: half a second to spare
    shown = term.getvalue()
    assert "mcf: flow, formulation=link 00:01" in shown and "mcf: flow, formulation=link 00:02" in shown
    assert not any(t.name == "a2acc-mcf-progress" for t in threading.enumerate())


def test_punctured_torus_still_plans():
    t = _torus([3, 3], removed=[[0, 1], [4, 5]])
    prog = a2acc.plan(t, generate("uniform", 9, 1 << 20, 2), "mcf")
    edges = {(u, v) for u, v, _w in t.direct.edges}
    assert (0, 1) not in edges and (1, 0) not in edges
    assert all((op.src_rank, op.dst_rank) in edges for op in prog.ops if op.src_rank != op.dst_rank)


def test_presets_lower_to_verified_xml():
    topo = load_topology("dgx-h100", 2)
    m = generate("zipf", 16, 32 << 20, 4)
    res = a2acc.compile(topo, m, "mcf", backend="msccl-xml")
    assert res.check is not None and res.check.ok


def test_flow_at_scale_plans_a_verified_program_with_a_certified_bound():
    """Past max_vars the first-order flow runs; its plan verifies, its bound is below the LP optimum."""
    t = parse_topology(
        {"version": 1, "name": "gk", "direct": {"kind": "genkautz", "n": 16, "degree": 3, "bandwidth": 50}},
        "gk",
    )
    m = generate("zipf", 16, 8 << 20, 3)
    exact = a2acc.plan(t, m, "mcf")
    big = a2acc.plan(t, m, "mcf", max_vars=0, iterations=100)
    assert big.meta["formulation"] == "scale" and big.meta["bound"].startswith("certified")
    assert big.meta["lp_bound_us"] <= exact.meta["lp_time_us"] * (1 + 1e-7) <= big.meta["lp_time_us"] * 1.0001
    assert big.meta["lp_time_us"] <= 1.03 * exact.meta["lp_time_us"]
    assert simulate_fast(big, t).time_s <= 1.06 * big.meta["lp_time_us"] * 1e-6


def test_an_lp_point_that_misses_demand_still_gives_a_verified_plan(monkeypatch):
    """A time-limited HiGHS point may route only part of the demand (the 128-GPU case of 'a2acc plan -a mcf
    --time-limit' reported 'routes do not carry every chunk'): pairs it misses go on shortest paths."""
    real = mcf_planner.link_mcf

    def partial(net, demand, **kw):
        lf = real(net, demand, **kw)
        flow = lf.flow.copy()
        flow[1] *= 0.6  # what an interrupted interior point can look like
        flow[3] = 0.0
        return LinkFlow(lf.time_s, lf.sources, flow, "time_limit", lf.seconds)

    monkeypatch.setattr(mcf_planner, "link_mcf", partial)
    t = _torus([3, 3])
    prog = a2acc.plan(t, generate("zipf", 9, 2 << 20, 5), "mcf")  # the pipeline verifies it
    assert prog.meta["rerouted_pairs"] >= 8 and prog.meta["optimal"] is False
    assert "not proven optimal" in prog.meta["note"]


def test_time_limit_falls_back_and_says_so(tmp_path, capsys):
    np.save(tmp_path / "m.npy", generate("zipf", 16, 1 << 20, 1))
    topo_file = tmp_path / "t.yaml"
    topo_file.write_text(TORUS_YAML)
    argv = ["plan", "-t", str(topo_file), "-m", str(tmp_path / "m.npy"), "-a", "mcf"]
    assert main([*argv, "--time-limit", "1e-6", "-o", str(tmp_path / "p.json")]) == 0
    assert "not proven optimal" in capsys.readouterr().out
    assert main(["verify", str(tmp_path / "p.json")]) == 0


def test_decomposed_plan_verifies_and_is_deterministic():
    t = _torus([4, 4])
    m = generate("zipf", 16, 8 << 20, 5)
    a = a2acc.plan(t, m, "mcf", groups=4, rounds=2)
    b = a2acc.plan(t, m, "mcf", groups=4, rounds=2)
    assert a.to_json() == b.to_json() and a.meta["lp_bound_us"] <= a.meta["lp_time_us"]


def test_byte_identical_across_hash_seeds(tmp_path):
    """The same plan from separate interpreters (different hash seeds), at scale and exact."""
    np.save(tmp_path / "m.npy", generate("zipf", 16, 4 << 20, 8))
    (tmp_path / "t.yaml").write_text(TORUS_YAML)
    outs = []
    for seed, opt in (("1", "max_vars=0"), ("2", "max_vars=0"), ("3", "max_vars=600000")):
        out = tmp_path / f"p{seed}.json"
        cmd = [
            sys.executable,
            "-m",
            "a2acc",
            "plan",
            "-t",
            str(tmp_path / "t.yaml"),
            "-m",
            str(tmp_path / "m.npy"),
        ]
        run = subprocess.run(
            [*cmd, "-a", "mcf", "--opt", opt, "-o", str(out)],
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stderr
        outs.append(out.read_text())
    assert outs[0] == outs[1] and outs[0] != outs[2]


@pytest.mark.slow
def test_local_processes_and_dask_give_byte_identical_plans():
    distributed = pytest.importorskip("distributed")
    t = _torus([4, 4])
    m = generate("zipf", 16, 8 << 20, 6)
    for opts in ({"groups": 4, "rounds": 2}, {"max_vars": 0, "iterations": 60}):
        inline = a2acc.plan(t, m, "mcf", **opts).to_json()
        assert a2acc.plan(t, m, "mcf", workers="2", **opts).to_json() == inline
        with distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cl:
            addr = cl.scheduler_address.removeprefix("tcp://")
            assert a2acc.plan(t, m, "mcf", workers=f"dask://{addr}", **opts).to_json() == inline


def test_bad_options_are_refused():
    t = _torus([3, 3])
    m = generate("uniform", 9, 1 << 20, 1)
    for opts, frag in (
        ({"workers": "lots"}, "workers"),
        ({"pipeline": "0"}, "pipeline"),
        ({"formulation": "x"}, "allowed"),
        ({"groups": "10"}, "one group per sending GPU"),
    ):
        with pytest.raises(InputError, match=frag):
            a2acc.plan(t, m, "mcf", **opts)
    with pytest.raises(InputError, match="direct-connect"):
        a2acc.plan(
            load_topology("dgx-h100", 1), generate("uniform", 8, 1 << 20, 1), "mcf", formulation="time"
        )


# ---------------------------------------------------------------------- the command line refuses before work
LIMIT_CASES = [
    ("formulation=time,epochs=1000000000", "epochs: value 1000000000", "at most 64"),
    ("k=100000", "k: value 100000", "at most 64"),
    ("groups=1000000", "groups: value 1000000", "at most 4,096"),
    ("rounds=500", "rounds: value 500", "at most 32"),
    ("pipeline=1000", "pipeline: value 1000", "at most 64"),
    ("iterations=99999999", "iterations: value 99999999", "at most 10,000"),
    ("max_vars=999999999", "max_vars: value 999999999", "at most 2,000,000"),
    ("formulation=time,epochs=64", "epochs: value 64", "variables"),
    ("workers=100000", "workers: value 100000", "at most 256"),
    ("workers=dask://unreachable:1", "workers: value 'dask://unreachable:1'", "unreachable:1"),
    ("workers=dask://127.0.0.1:1", "workers: value 'dask://127.0.0.1:1'", "127.0.0.1:1"),
]


@pytest.mark.parametrize(("opt", "names", "why"), LIMIT_CASES, ids=[c[0] for c in LIMIT_CASES])
def test_option_limits_refuse_before_work(tmp_path, capsys, opt, names, why):
    """Exit 2, one line naming the option, the value and the limit, no traceback, no file, within seconds."""
    np.save(tmp_path / "m.npy", generate("zipf", 64, 1 << 20, 1))
    topo = tmp_path / "t.yaml"
    topo.write_text("version: 1\ndirect: {kind: torus, dims: [4, 4, 4], bandwidth: 50, latency: 1}\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    t0 = time.perf_counter()
    rc = main(
        [
            "plan",
            "-t",
            str(topo),
            "-m",
            str(tmp_path / "m.npy"),
            "-a",
            "mcf",
            "--opt",
            opt,
            "-o",
            str(tmp_path / "p.json"),
        ]
    )
    dt = time.perf_counter() - t0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("a2acc: error: --opt: ") and names in lines[0] and why in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert dt < 8.0
