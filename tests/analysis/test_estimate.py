"""The ranking estimate: the compiled core gives the reference's floats, its bound stops exactly the candidates
the reference would rank behind, it is exact where processor sharing is, and close to the simulator on fast's
shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2acc import plan
from a2acc.analysis.estimate import estimate, link_bound
from a2acc.analysis.fastsim import simulate_fast
from a2acc.analysis.model import SimModel, default_model
from a2acc.analysis.simulate import routes, routes_by_pair
from a2acc.ir import Op, Program
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.native import estimate as native_core
from tests.analysis.test_fastsim import _fabric_of, _model, random_programs

MiB = 1 << 20
compiled = pytest.mark.skipif(native_core is None, reason="the compiled estimate is not built")


def _both(prog: Program, topo, model: SimModel | None = None, above: float = math.inf) -> float:
    ref = estimate(prog, topo, model, above=above, native=False)
    if native_core is not None:
        assert estimate(prog, topo, model, above=above, native=True) == ref
    return ref


@pytest.mark.parametrize(
    ("preset", "servers", "kind", "size"),
    [
        ("dgx-h100", 3, "zipf", 64 * MiB),
        ("mi300x-100g", 3, "moe", 16 * MiB),  # incast
        ("dgx2", 2, "zipf", 4 * MiB),  # two GPUs per NIC
        ("mi300x", 2, "uniform", 1 * MiB),  # xGMI mesh
    ],
)
@pytest.mark.parametrize("shape", ["staged", "grouped:1", "grouped:2+split", "direct"])
def test_compiled_estimate_gives_the_reference_floats_on_fast_shapes(preset, servers, kind, size, shape):
    topo = load_topology(preset, servers)
    m = generate(kind, topo.nranks, size, 1)
    name, _, groups = shape.partition(":")
    opts: dict[str, object] = {"shape": name}
    if groups:
        g, _, split = groups.partition("+")
        opts.update(groups=int(g), split=bool(split))
    prog = plan(topo, m, "fast", **opts)
    t = _both(prog, topo)
    assert 0 < t < math.inf


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prog=random_programs(),
    alpha=st.sampled_from([0.0, 10.0]),
    stage=st.sampled_from([0.0, 100.0]),
    incast=st.booleans(),
    fraction=st.sampled_from([0.5, 0.99, 1.0, 2.0]),
)
def test_compiled_estimate_gives_the_reference_floats_on_random_dags(prog, alpha, stage, incast, fraction):
    """Arbitrary DAGs (copies, zero-byte ops, synchronised steps), with and without incast, and the bound at,
    below and above the estimate: the same float, and inf exactly when the estimate is past the bound."""
    topo = _fabric_of(prog)
    model = _model(alpha, stage, 1 * MiB, 0.95, incast, 1 * MiB)
    full = _both(prog, topo, model)
    bounded = _both(prog, topo, model, above=full * fraction)
    assert bounded == (full if full <= full * fraction else math.inf)


@st.composite
def grouped_programs(draw):
    """DAGs like fast's grouped shapes: ops wait for one of a few shared lists of earlier ops (at least ten
    each: four or more edges per op, where the compiled core groups ops with the same pair and list into
    classes), some with one more."""
    n = draw(st.integers(2, 5))
    ops: list[Op] = []
    for i in range(draw(st.integers(10, 12))):  # the first group: no dependencies
        ops.append(Op(i, i % n, 0, 0, (i + 1) % n, 1, 0, draw(st.integers(0, 64)), (), 1))
    waits = [tuple(sorted(draw(st.sets(st.integers(0, len(ops) - 1), min_size=10)))) for _ in range(2)]
    for _ in range(draw(st.integers(30, 50))):  # >= 10 x 30 edges over <= 62 ops: past the class threshold
        i = len(ops)
        s, d = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        deps = set(draw(st.sampled_from(waits)))
        if draw(st.booleans()):
            deps.add(draw(st.integers(0, i - 1)))
        ops.append(Op(i, s, 0, 0, d, 1, 0, draw(st.integers(0, 64)), tuple(sorted(deps)), 2))
    return Program("grouped", "random", n, 256 << 10, np.ones((n, n), dtype=np.int64), (0,) * n, tuple(ops))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prog=grouped_programs(),
    alpha=st.sampled_from([0.0, 10.0]),
    stage=st.sampled_from([0.0, 100.0]),
    incast=st.booleans(),
    fraction=st.sampled_from([0.5, 1.0, 2.0]),
)
def test_compiled_estimate_gives_the_reference_floats_when_ops_share_their_dependencies(
    prog, alpha, stage, incast, fraction
):
    """Many ops with one pair and one dependency list (the compiled core keeps their successors once per class
    of them): the reference's floats, and the bound's, still."""
    topo = _fabric_of(prog)
    model = _model(alpha, stage, 1 * MiB, 0.95, incast, 1 * MiB)
    assert len(prog.table.dep_ids) >= 4 * len(prog.table)
    full = _both(prog, topo, model)
    assert _both(prog, topo, model, above=full * fraction) == (full if full <= full * fraction else math.inf)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prog=random_programs(),
    alpha=st.sampled_from([0.0, 10.0]),
    stage=st.sampled_from([0.0, 100.0]),
    incast=st.booleans(),
)
def test_the_link_floor_is_never_above_the_simulated_time(prog, alpha, stage, incast):
    """The floor a search skips a plan's shapes by is a floor under the simulator: arbitrary DAGs, with and
    without incast, per-message and per-stage costs."""
    topo = _fabric_of(prog)
    model = _model(alpha, stage, 1 * MiB, 0.95, incast, 1 * MiB)
    floor = link_bound(prog, topo, model)
    assert 0.0 <= floor <= simulate_fast(prog, topo, model=model).makespan_s * (1 + 1e-9)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=random_programs(), incast=st.booleans())
def test_the_compiled_link_floor_is_the_reference_float(prog, incast):
    """The compiled core sums the links' loads in numpy's order: the same float, bit for bit."""
    if native_core is None:
        pytest.skip("the compiled estimate is not built")
    topo = _fabric_of(prog)
    model = _model(0.0, 0.0, 1 * MiB, 0.95, incast, 1 * MiB)
    assert link_bound(prog, topo, model, native=None) == link_bound(prog, topo, model, native=False)


def test_the_link_floor_is_the_busiest_links_time():
    """One transfer across servers: the floor is its bytes over its slowest link (the NIC, after goodput), what
    the simulator takes less the latencies; the ops' dependencies do not change it."""
    topo = load_topology("dgx-h100", 2)
    model = default_model(topo)
    ops = (Op(0, 0, 0, 0, 8, 1, 0, 64, (), 1), Op(1, 0, 0, 64, 8, 1, 64, 64, (0,), 2))
    prog = Program("pair", "test", 16, 1 << 20, np.ones((16, 16), np.int64), (0,) * 16, ops)
    alone = Program("pair", "test", 16, 1 << 20, np.ones((16, 16), np.int64), (0,) * 16, ops[:1])
    sim = simulate_fast(prog, topo, model=model).makespan_s
    floor = link_bound(prog, topo, model)
    assert floor == pytest.approx(2 * link_bound(alone, topo, model), rel=1e-12)
    assert floor <= sim and sim - floor < 1e-3 * sim + 50e-6  # latencies and step costs only
    unchained = Program(
        "pair", "test", 16, 1 << 20, prog.counts, (0,) * 16, (ops[0], ops[1]._replace(deps=()))
    )
    assert link_bound(unchained, topo, model) == floor


def test_an_op_alone_on_its_links_is_timed_exactly():
    """Processor sharing is exact when no two ops share a link at once: a chain of transfers and copies is
    the simulator's time to the last float (latencies, per-message cost, rendezvous included)."""
    topo = load_topology("dgx-h100", 2)
    ops = (
        Op(0, 0, 0, 0, 8, 1, 0, 64, (), 1),
        Op(1, 8, 1, 0, 9, 1, 0, 32, (0,), 2),
        Op(2, 9, 1, 0, 9, 1, 64, 16, (1,), 2),
    )
    prog = Program("chain", "test", 16, 1 << 20, np.ones((16, 16), np.int64), (0,) * 16, ops)
    model = default_model(topo)
    assert _both(prog, topo, model) == pytest.approx(
        simulate_fast(prog, topo, model=model).makespan_s, rel=1e-12
    )


def test_the_estimate_is_close_to_the_simulator_on_fast_shapes():
    """On dgx-h100 4x8 (the InfiniBand defaults), Zipf 64 MiB/GPU: every shape fast ranks is estimated within
    6 % of the simulator, and the shape ranked first simulates within 1 % of the fastest one."""
    topo = load_topology("dgx-h100", 4)
    m = generate("zipf", topo.nranks, 64 * MiB, 2)
    est, sim = {}, {}
    for opts in (
        {"shape": "staged"},
        {"shape": "direct"},
        *({"shape": "grouped", "groups": g, "split": s} for g in (1, 2, 4) for s in (False, True)),
    ):
        prog = plan(topo, m, "fast", **opts)
        label = str(prog.meta["shape"])
        est[label] = _both(prog, topo)
        sim[label] = simulate_fast(prog, topo).time_s
        assert est[label] == pytest.approx(sim[label], rel=0.06), label
    pick = min(est, key=est.__getitem__)
    assert sim[pick] <= min(sim.values()) * 1.01, (pick, est, sim)


def test_routes_by_pair_are_the_routes_without_paths():
    """The pair table gives every op the binding links, latency, receive link and DAG the full routes give."""
    for preset, servers in (("dgx-h100", 2), ("mi300x-100g", 2), ("ndv2", 2), ("mi300x", 2)):
        topo = load_topology(preset, servers)
        prog = plan(topo, generate("zipf", topo.nranks, 4 * MiB, 1), "fast")
        full, fast = routes(prog, topo), routes_by_pair(prog, topo)
        for field in (
            "bind",
            "rx",
            "route_alpha",
            "rx_switch",
            "raw_cap",
            "eff_class",
            "succ_ptr",
            "succ_ids",
        ):
            assert np.array_equal(getattr(full, field), getattr(fast, field)), (preset, field)


def test_an_empty_program_takes_no_time():
    topo = load_topology("dgx-h100", 1)
    prog = Program("empty", "test", 8, 16, np.zeros((8, 8), np.int64), (0,) * 8, ())
    assert _both(prog, topo) == 0.0
