"""``auto``: the fastest verified plan of every planner that applies, under the model; deterministic."""

from __future__ import annotations

import json

import pytest

import a2acc
from a2acc.analysis.fastsim import simulate_fast
from a2acc.analysis.model import SimModel, default_model
from a2acc.errors import InputError
from a2acc.model.topology import load_topology, parse_topology
from a2acc.model.traffic import generate


@pytest.mark.parametrize(
    ("preset", "servers", "kind"), [("dgx-h100", 2, "zipf"), ("mi300x-100g", 2, "balanced")]
)
def test_auto_is_at_least_as_fast_as_every_candidate(preset, servers, kind):
    topo = load_topology(preset, servers)
    m = generate(kind, topo.nranks, 16 << 20, seed=2)
    prog = a2acc.plan(topo, m, "auto", budget_s="0")
    info = prog.meta["auto"]
    assert prog.algorithm == "auto" and info["pick"] in info["candidates_us"]
    assert set(info["skipped"]) == {"syccl", "mcf"}  # a zero budget runs only the quick planners
    mine = simulate_fast(prog, topo, model=default_model(topo)).time_s * 1e6
    timed = [t for t in info["candidates_us"].values() if t is not None]  # null: ruled out by its link floor
    assert mine == pytest.approx(min(timed), abs=1e-3)  # rounded to ns
    for name in ("fast", "direct", "spreadout", "hierarchical"):
        other = simulate_fast(a2acc.plan(topo, m, name), topo).time_s * 1e6
        assert mine <= other * (1 + 1e-9), name
    assert a2acc.verify(prog).ok


def test_link_floors_spare_simulations_and_keep_the_pick(monkeypatch):
    """A plan whose link floor is past the best simulated time so far is not simulated (null in the meta), and
    auto picks what simulating every plan picks (floors of 0 rule nothing out)."""
    from a2acc.planners import auto, forget

    topo = load_topology("dgx-h100", 4)
    m = generate("zipf", topo.nranks, 1 << 28, seed=1)
    picks = []
    for bound in (auto.link_bound, lambda *a: 0.0):
        monkeypatch.setattr(auto, "link_bound", bound)
        forget()  # plan afresh (the plan of a request is remembered)
        prog = a2acc.plan(topo, m, "auto", budget_s="0")
        picks.append((prog.to_json(), prog.meta["auto"]["candidates_us"]))
    (floored, some), (every, all_) = picks
    assert json.loads(floored)["ops"] == json.loads(every)["ops"]
    assert None in some.values() and None not in all_.values()
    assert {k: v for k, v in some.items() if v is not None} == {
        k: all_[k] for k, v in some.items() if v is not None
    }
    for k, v in some.items():  # what the floor spared was slower than the pick
        assert v is not None or all_[k] > min(all_.values())


def test_a_time_to_beat_for_syccl_keeps_the_pick(monkeypatch):
    """auto hands syccl the best time so far: where none of syccl's candidates beats it, syccl's entry is null
    (not simulated) and the pick and its ops are the ones auto makes when syccl times every candidate."""
    import dataclasses

    from a2acc import planners
    from a2acc.planners import syccl

    topo = load_topology("dgx-h100", 4)
    runs = []
    real = syccl._evaluate
    for seed in (1, 3):  # fast wins (syccl beaten) / syccl wins
        m = generate("zipf", topo.nranks, 1 << 28, seed=seed)
        picks = []
        for ignore in (False, True):
            if ignore:  # syccl as if auto had passed no time to beat
                monkeypatch.setattr(
                    syccl,
                    "_evaluate",
                    lambda req, sym, ch, opts, clock: real(
                        req, sym, ch, dataclasses.replace(opts, time_to_beat=0.0), clock
                    ),
                )
            planners._MEMO.clear()  # plan again (syccl's and mcf's own caches stay warm: only auto's choice is new)
            prog = a2acc.plan(topo, m, "auto")
            picks.append((json.loads(prog.to_json())["ops"], prog.meta["auto"]))
        monkeypatch.setattr(syccl, "_evaluate", real)
        (ops_beat, beat), (ops_all, every) = picks
        assert ops_beat == ops_all and beat["pick"] == every["pick"]
        runs.append(beat["candidates_us"]["syccl"])
        if beat["candidates_us"]["syccl"] is None:
            assert every["candidates_us"]["syccl"] > every["candidates_us"][every["pick"]]
        else:
            assert beat["candidates_us"] == every["candidates_us"]
    assert runs[0] is None and runs[1] is not None  # both cases were met


def test_auto_prices_under_the_model_it_is_given():
    topo = load_topology("dgx-h100", 2)
    m = generate("zipf", topo.nranks, 1 << 20, seed=1)
    ideal = a2acc.plan(topo, m, "auto", model=SimModel(), exclude="syccl,mcf")
    assert ideal.meta["auto"]["model"] == "ideal"
    calibrated = a2acc.plan(topo, m, "auto", exclude="syccl,mcf")
    assert calibrated.meta["auto"]["model"] == default_model(topo).name


def test_auto_is_deterministic_and_reports_why():
    topo = load_topology("dgx-h100", 2)
    m = generate("moe", topo.nranks, None, seed=4)
    a = a2acc.plan(topo, m, "auto", exclude="mcf")
    b = a2acc.plan(topo, m, "auto", exclude="mcf")
    assert a.to_json() == b.to_json()
    info = json.loads(a.to_json())["meta"]["auto"]
    assert "fastest of" in info["why"] and info["skipped"] == {"mcf": "excluded"}


def test_auto_skips_planners_that_do_not_apply_and_refuses_unknown_exclusions():
    torus = parse_topology({"version": 1, "direct": {"kind": "torus", "dims": [2, 3], "bandwidth": 10}}, "t")
    prog = a2acc.plan(torus, generate("zipf", 6, 1 << 20, seed=1), "auto", budget_s="30", exclude="mcf")
    assert "direct-connect" in prog.meta["auto"]["skipped"]["syccl"]
    # with no budget the searching planners are skipped before their modules are even looked at
    quick = a2acc.plan(torus, generate("zipf", 6, 1 << 20, seed=1), "auto", budget_s="0")
    assert quick.meta["auto"]["skipped"] == {"syccl": "budget of 0 s spent", "mcf": "budget of 0 s spent"}
    with pytest.raises(InputError, match="exclude"):
        a2acc.plan(torus, generate("zipf", 6, 1 << 20, seed=1), "auto", exclude="nope")


def test_plans_and_simulations_are_remembered_until_forgotten():
    from a2acc.analysis import fastsim
    from a2acc.planners import PlanRequest, forget, remembered, run

    topo = load_topology("dgx-h100", 2)
    m = generate("zipf", 16, 4 << 20, 3, skew=0.8)
    prog = a2acc.plan(topo, m, "direct")
    req = PlanRequest(topo, m, prog.counts, prog.unit_bytes)
    assert run("direct", req) is run("direct", req)  # the second is the remembered plan
    first = simulate_fast(prog, topo)
    assert simulate_fast(prog, topo) is first
    forget()
    fastsim.forget()
    assert remembered("direct", req) is None
    again = simulate_fast(prog, topo)
    assert again is not first and again.time_s == first.time_s


def test_auto_keeps_to_the_targets_peer_limit():
    from a2acc.ir.program import program_peers
    from a2acc.ir.quantize import quantize
    from a2acc.planners import PlanRequest
    from a2acc.planners.auto import Options, plan

    topo = load_topology("dgx-h100", 16)
    m = generate("zipf", 128, 64 << 20, 2, skew=0.8)
    unit = 1 << 16
    req = PlanRequest(topo, m, quantize(m, unit), unit, Options(budget_s=0.0), None, 63)
    prog = plan(req)
    assert program_peers(prog) <= 63
    assert any("peers per rank" in why for why in prog.meta["auto"]["skipped"].values())


def test_excluding_every_planner_is_refused_with_the_options():
    """Excluding every planner auto knows is wrong whatever the topology: refused when the options are read, so
    the JIT's A2ACC_PLANNER_OPTS is refused at activation too (what is left out by the topology is refused when
    planning: tests/cli/bad_inputs/test_plan.py)."""
    from a2acc.options import parse_options
    from a2acc.planners.auto import ORDER, Options
    from a2acc.runtime.settings import JitSettings

    every = ",".join(ORDER)
    with pytest.raises(InputError, match="exclude: value .* leave auto at least one planner .* is excluded"):
        parse_options(Options, {"exclude": every})
    assert parse_options(Options, {"exclude": ",".join(ORDER[1:])}).excluded() == ORDER[1:]
    env = {"A2ACC_TOPOLOGY": "alps:1", "A2ACC_ALGORITHM": "auto", "A2ACC_PLANNER_OPTS": f"exclude={every}"}
    settings, problems = JitSettings.from_env(env)
    assert settings is None and len(problems) == 1 and "A2ACC_PLANNER_OPTS" in problems[0]
