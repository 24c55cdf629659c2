"""The fast simulator agrees with the event-driven reference (same model) within 1 % on random Programs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from a2acc import plan
from a2acc.analysis.fastsim import exclusive_links, max_min, simulate_fast
from a2acc.analysis.incast import ROCE_RTO_S, IncastModel
from a2acc.analysis.model import CALIBRATED_ROCE, SimModel
from a2acc.analysis.simulate import _max_min_rates, prepare, simulate
from a2acc.ir import Op, Program
from a2acc.model.topology import load_topology, parse_topology
from a2acc.model.traffic import generate

MiB = 1 << 20


def _topo(servers: int, gpus: int, fabric: str, wiring: str, transport: str, nics: int):
    data = {
        "version": 1,
        "name": "rand",
        "servers": servers,
        "gpus_per_server": gpus,
        "memory_bandwidth": 2000,
        "intra": {"fabric": fabric if gpus > 1 else "switch", "bandwidth": 100, "latency": 0.7},
    }
    if servers > 1:
        data["inter"] = {
            "nics_per_server": nics,
            "bandwidth": 12.5,
            "latency": 2.0,
            "wiring": wiring,
            "transport": transport,
        }
    return parse_topology(data, "rand")


def _fabric_of(prog: Program, wiring: str = "single_switch"):
    """A RoCE topology for a random program's ranks: two GPUs (and NICs) per server when they pair up."""
    gpus = 2 if prog.nranks % 2 == 0 else 1
    return _topo(prog.nranks // gpus, gpus, "switch", wiring, "roce", gpus)


def _model(
    alpha: float, stage: float, eager: int, eff: float, incast: bool, buffer: int, onset: int = 0
) -> SimModel:
    inc = (
        IncastModel("roce", float(buffer), 4.0 * MiB, 1.0, 1.0, ROCE_RTO_S, 0.05, 4.0)
        if incast
        else IncastModel.off()
    )
    return SimModel(
        "t", "roce", eff, 1.0, alpha * 1e-6, stage * 1e-6, float(eager), inc, "test", onset_bytes=float(onset)
    )


def _agree(prog: Program, topo, model: SimModel) -> None:
    ref = simulate(prog, topo, model=model, record_timeline=False)
    fast = simulate_fast(prog, topo, model=model)
    assert fast.makespan_s == pytest.approx(ref.makespan_s, rel=0.01)
    assert fast.time_s == pytest.approx(ref.time_s, rel=0.01)
    assert fast.timeout_probability == pytest.approx(ref.timeout_probability, abs=0.02)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    servers=st.integers(1, 3),
    gpus=st.sampled_from([1, 2, 4]),
    fabric=st.sampled_from(["switch", "full_mesh", "ring"]),
    wiring=st.sampled_from(["rail_optimized", "single_switch"]),
    algorithm=st.sampled_from(["fast", "spreadout", "direct", "hierarchical"]),
    kind=st.sampled_from(["uniform", "zipf", "balanced"]),
    size=st.sampled_from([256 << 10, 4 * MiB, 64 * MiB]),
    seed=st.integers(0, 50),
    alpha=st.sampled_from([0.0, 5.0, 40.0]),
    stage=st.sampled_from([0.0, 150.0]),
    eager=st.sampled_from([64 << 10, 2 * MiB]),
    eff=st.sampled_from([1.0, 0.9]),
    incast=st.booleans(),
    buffer=st.sampled_from([1 * MiB, 16 * MiB]),
    onset=st.sampled_from([0, 2 * MiB]),
)
def test_fast_engine_agrees_with_reference_on_planned_programs(
    servers,
    gpus,
    fabric,
    wiring,
    algorithm,
    kind,
    size,
    seed,
    alpha,
    stage,
    eager,
    eff,
    incast,
    buffer,
    onset,
):
    if servers * gpus < 2:
        servers = 2
    topo = _topo(servers, gpus, fabric, wiring, "roce", gpus)
    m = generate(kind, topo.nranks, size, seed)
    prog = plan(topo, m, algorithm)
    _agree(prog, topo, _model(alpha, stage, eager, eff, incast, buffer, onset))


@st.composite
def random_programs(draw):
    """Arbitrary DAGs of transfers and copies (not all-to-alls: the simulator needs no valid layout)."""
    n = draw(st.integers(2, 6))
    n_ops = draw(st.integers(1, 40))
    ops = []
    for i in range(n_ops):
        s = draw(st.integers(0, n - 1))
        d = draw(st.integers(0, n - 1))
        cnt = draw(st.integers(0, 64))
        deps = tuple(sorted(set(draw(st.lists(st.integers(0, i - 1), max_size=3)) if i else [])))
        stage = max([ops[x].stage for x in deps], default=0) + draw(st.integers(0, 1))
        ops.append(Op(i, s, 0, 0, d, 1, 0, cnt, deps, stage))
    counts = np.ones((n, n), dtype=np.int64)
    return Program("random", "random", n, 256 << 10, counts, (0,) * n, tuple(ops))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prog=random_programs(),
    alpha=st.sampled_from([0.0, 10.0]),
    stage=st.sampled_from([0.0, 100.0]),
    incast=st.booleans(),
    onset=st.sampled_from([0, 1 * MiB]),
)
def test_fast_engine_agrees_with_reference_on_random_dags(prog, alpha, stage, incast, onset):
    topo = _fabric_of(prog)
    _agree(prog, topo, _model(alpha, stage, 1 * MiB, 0.95, incast, 1 * MiB, onset))


def test_local_bottleneck_max_min_equals_progressive_filling(rng):
    for _ in range(20):
        nl, nf = 12, 40
        cap = rng.uniform(1, 10, nl)
        rows = np.stack([rng.integers(0, nl, nf), rng.integers(0, nl + 1, nf)], axis=1)
        rows[rows[:, 0] == rows[:, 1], 1] = nl  # a flow crosses a link once
        ref_flow = np.repeat(np.arange(nf), (rows != nl).sum(axis=1))
        ref = _max_min_rates(nf, ref_flow, rows[rows != nl], cap)
        np.testing.assert_allclose(max_min(rows, cap), ref, rtol=1e-9)


def test_staged_transfers_are_solo_and_fan_out_is_fluid():
    """SpreadOut's shifts and FAST's stage transfers never share a NIC: they need no fair-share solve."""
    topo = _topo(4, 2, "switch", "rail_optimized", "ib", 2)
    m = generate("uniform", 8, 4 * MiB, 3)
    for alg, solo_expected in (("spreadout", True), ("direct", False)):
        st_ = prepare(plan(topo, m, alg), topo, SimModel())
        excl = exclusive_links(st_)
        nic = [i for i, n in enumerate(st_.names) if "nic" in n.split("->")[0] and "->g" not in n]
        assert bool(excl[nic].all()) is solo_expected


def test_incast_off_and_ideal_model_keep_exact_alpha_beta():
    topo = _topo(2, 1, "switch", "single_switch", "roce", 1)
    ops = (Op(0, 0, 0, 0, 1, 1, 0, 4, ()), Op(1, 1, 0, 0, 0, 1, 0, 4, (0,), 1))
    prog = Program("p", "t", 2, 1 << 30, np.ones((2, 2), dtype=np.int64), (0, 0), ops)
    model = replace(CALIBRATED_ROCE, inter_efficiency=1.0, alpha_s=0.0, stage_s=0.0)
    for sim in (simulate(prog, topo, model=model), simulate_fast(prog, topo, model=model)):
        assert sim.time_s == pytest.approx(2 * (4 * (1 << 30) / 12.5e9 + 2e-6), rel=1e-9)


def test_weighted_max_min_equals_the_expanded_flows(rng):
    """A row of weight w (w flows on the same links) gets the rate each of the w flows gets."""
    for _ in range(20):
        nl, nr = 10, 15
        cap = rng.uniform(1, 10, nl)
        rows = np.stack([rng.integers(0, nl, nr), rng.integers(0, nl + 1, nr)], axis=1)
        rows[rows[:, 0] == rows[:, 1], 1] = nl
        rows = np.unique(rows, axis=0)
        weight = rng.integers(1, 6, len(rows))
        expanded = np.repeat(rows, weight, axis=0)
        np.testing.assert_allclose(
            np.repeat(max_min(rows, cap, weight.astype(np.float64)), weight),
            max_min(expanded, cap),
            rtol=1e-9,
        )


@st.composite
def grouped_programs(draw):
    """Bursts of equal, simultaneous flows between few pairs (identical routes: one weighted max-min row),
    mixed with odd-sized ones and chained bursts."""
    n = draw(st.integers(2, 6))
    ops: list[Op] = []
    for _ in range(draw(st.integers(1, 6))):
        s = draw(st.integers(0, n - 1))
        d = draw(st.integers(0, n - 1))
        cnt = draw(st.integers(1, 64))
        deps = tuple(sorted(set(draw(st.lists(st.integers(0, len(ops) - 1), max_size=2)) if ops else [])))
        stage = max([ops[x].stage for x in deps], default=0)
        for _r in range(draw(st.integers(1, 12))):
            ops.append(Op(len(ops), s, 0, 0, d, 1, 0, cnt + draw(st.sampled_from([0, 0, 0, 5])), deps, stage))
    counts = np.ones((n, n), dtype=np.int64)
    return Program("grouped", "grouped", n, 256 << 10, counts, (0,) * n, tuple(ops))


def _equal_flows_on_one_link() -> Program:
    """Found by hypothesis: nine equal flows and five longer ones on one link; a retirement window of 4
    tolerances moved a hand-over by 1.18 %."""
    src = [0, 0, 0, *[1] * 9, 2, 2, *[1] * 5]
    cnt = [1, 1, 1, *[20] * 9, 41, 46, 29, 29, 29, 34, 34]
    ops = tuple(Op(i, s, 0, 0, 0, 1, 0, c, (), 0) for i, (s, c) in enumerate(zip(src, cnt)))
    return Program("grouped", "grouped", 3, 256 << 10, np.ones((3, 3), dtype=np.int64), (0,) * 3, ops)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prog=grouped_programs(), incast=st.booleans(), wiring=st.sampled_from(["rail_optimized", "single_switch"])
)
@example(prog=_equal_flows_on_one_link(), incast=False, wiring="rail_optimized")
def test_fast_engine_agrees_on_equal_flow_groups(prog, incast, wiring):
    topo = _fabric_of(prog, wiring)
    _agree(prog, topo, _model(5.0, 0.0, 1 * MiB, 0.95, incast, 1 * MiB))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=random_programs(), incast=st.booleans())
def test_fast_engine_is_exact_without_tolerance(prog, incast):
    """With ``tolerance=0`` every event is taken on time: the skipped solves (bottlenecks still saturated),
    the route groups and the solo ops change nothing."""
    topo = _fabric_of(prog)
    model = _model(10.0, 100.0, 1 * MiB, 0.95, incast, 1 * MiB)
    ref = simulate(prog, topo, model=model, record_timeline=False)
    fast = simulate_fast(prog, topo, model=model, tolerance=0.0)
    np.testing.assert_allclose(fast.op_end, ref.op_end, rtol=1e-6, atol=1e-12)
    assert fast.time_s == pytest.approx(ref.time_s, rel=1e-6)


@pytest.mark.parametrize("algorithm", ["fast", "spreadout", "direct", "hierarchical"])
@pytest.mark.parametrize("kind", ["zipf", "balanced"])
def test_fast_engine_agrees_on_the_roce_preset_with_incast(algorithm, kind):
    """mi300x-100g (RoCE, calibrated incast model) at 2 x 8 GPUs, sizes where fan-out overloads the ports."""
    topo = load_topology("mi300x-100g", 2)
    prog = plan(topo, generate(kind, topo.nranks, 64 * MiB, 3), algorithm)
    ref = simulate(prog, topo, record_timeline=False)
    fast = simulate_fast(prog, topo)
    assert fast.makespan_s == pytest.approx(ref.makespan_s, rel=0.01)
    assert fast.time_s == pytest.approx(ref.time_s, rel=0.01)
    assert fast.timeout_probability == pytest.approx(ref.timeout_probability, abs=0.02)


@settings(max_examples=200, deadline=None)
@given(
    nl=st.integers(1, 30),
    nf=st.integers(1, 40),
    k=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
    weighted=st.booleans(),
    ties=st.booleans(),
)
def test_compiled_max_min_gives_the_reference_floats(nl, nf, k, seed, weighted, ties):
    """The compiled core (a2acc._maxmin) runs the reference's arithmetic: the very same rates."""
    from a2acc.analysis.fastsim import max_min, max_min_py
    from a2acc.native import maxmin

    if maxmin is None:
        pytest.skip("a2acc._maxmin was not built (no C compiler)")
    rng = np.random.default_rng(seed)
    cap = rng.uniform(0.1, 10.0, nl)
    if ties:
        cap = np.round(cap) + 1.0
    bind = rng.integers(0, nl + 1, (nf, k))
    bind[:, 0] = rng.integers(0, nl, nf)  # every flow crosses a link
    w = rng.integers(1, 5, nf).astype(np.float64) if weighted else None
    assert np.array_equal(max_min(bind, cap, w), max_min_py(bind, cap, w))


# ------------------------------------------------------------------ the compiled event loop (a2acc._fastsim)
def _both_loops(prog: Program, topo, model: SimModel, tolerance: float) -> None:
    """The compiled loop and the Python loop give the same floats: every op's start and end, the time."""
    from a2acc.analysis.fastsim import simulate_setup
    from a2acc.native import fastsim

    if fastsim is None:
        pytest.skip("a2acc._fastsim was not built (no C compiler)")
    st_ = prepare(prog, topo, model)
    py = simulate_setup(st_, tolerance=tolerance, native=False)
    c = simulate_setup(st_, tolerance=tolerance, native=True)
    assert np.array_equal(py.op_start, c.op_start, equal_nan=True)
    assert np.array_equal(py.op_end, c.op_end, equal_nan=True)
    assert py.time_s == c.time_s
    assert py.episodes == c.episodes and py.timeout_probability == c.timeout_probability


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prog=st.one_of(random_programs(), grouped_programs()),
    alpha=st.sampled_from([0.0, 10.0]),
    stage=st.sampled_from([0.0, 100.0]),
    tolerance=st.sampled_from([0.0, 3e-3, 3e-2]),
    incast=st.booleans(),
    buffer=st.sampled_from([256 << 10, 1 * MiB, 16 * MiB]),
    onset=st.sampled_from([0, 1 * MiB]),
)
def test_compiled_event_loop_gives_the_reference_floats(prog, alpha, stage, tolerance, incast, buffer, onset):
    """Incast included: the capacities that step with the active set, and the overload episodes; incast onset
    at step boundaries."""
    topo = _fabric_of(prog)
    _both_loops(prog, topo, _model(alpha, stage, 1 * MiB, 0.95, incast, buffer, onset), tolerance)


@pytest.mark.parametrize(
    ("preset", "servers", "kind", "algorithm"),
    [
        ("dgx-h100", 4, "zipf", "fast"),  # route groups, large fluid components (grouped max-min rows)
        ("dgx-h100", 4, "moe", "direct"),  # fan-out: one fluid component of every pair
        ("dgx-h100", 2, "zipf", "hierarchical"),
        ("mi300x", 2, "balanced", "spreadout"),  # xGMI mesh: solo shifts
        ("dgx-a100", 2, "zipf", "fast"),
        ("mi300x-100g", 3, "zipf", "direct"),  # RoCE: incast steps the capacities, overload episodes
        ("mi300x-100g", 2, "moe", "fast"),
    ],
)
@pytest.mark.parametrize("tolerance", [0.0, 3e-3, 3e-2])
def test_compiled_event_loop_gives_the_reference_floats_on_planned_programs(
    preset, servers, kind, algorithm, tolerance
):
    topo = load_topology(preset, servers)
    prog = plan(topo, generate(kind, topo.nranks, 64 * MiB, 1), algorithm)
    from a2acc.analysis.model import default_model

    _both_loops(prog, topo, default_model(topo), tolerance)


@pytest.mark.parametrize(
    ("preset", "servers", "kind", "algorithm"),
    [("dgx-h100", 4, "zipf", "fast"), ("dgx-h100", 2, "zipf", "syccl"), ("mi300x", 2, "moe", "hierarchical")],
)  # fast: FAST's staged sequence (route groups after the stages before)
def test_compiled_dependency_searches_give_the_reference_classes(
    monkeypatch, preset, servers, kind, algorithm
):
    """The op classes (exclusive links, route groups) come out the same with the compiled searches
    (``a2acc._fastsim.clear_unreached``) and with the Python ones."""
    from a2acc.analysis import fastsim as fs
    from a2acc.analysis.model import default_model

    if fs._native_fastsim is None:
        pytest.skip("a2acc._fastsim was not built (no C compiler)")
    topo = load_topology(preset, servers)
    opts = {"shape": "staged"} if algorithm == "fast" else {}
    prog = plan(topo, generate(kind, topo.nranks, 64 * MiB, 2), algorithm, **opts)

    def classes():
        st_ = prepare(prog, topo, default_model(topo))
        excl = fs.exclusive_links(st_)
        solo = np.asarray(excl[st_.bind].all(axis=1) | (st_.size <= 0), dtype=bool)
        return excl, fs.route_groups(st_, solo)

    c_excl, c_groups = classes()
    monkeypatch.setattr(fs, "_native_fastsim", None)
    py_excl, py_groups = classes()
    assert np.array_equal(c_excl, py_excl)
    assert np.array_equal(c_groups, py_groups)
    assert (c_groups >= 0).any() or algorithm != "fast"  # the searches had work to do


def test_simulations_in_threads_give_the_sequential_results():
    """The compiled loop runs without the GIL (a JIT's background compile simulates while the main thread may
    too): concurrent simulations of different Programs give exactly what one thread gives."""
    import threading

    from a2acc.analysis.fastsim import simulate_setup
    from a2acc.analysis.model import default_model

    topo = load_topology("dgx-h100", 4)
    setups = []
    for seed, algorithm in ((1, "fast"), (2, "direct"), (3, "fast"), (4, "hierarchical")):
        opts = {"shape": "grouped"} if algorithm == "fast" else {}  # one group: large fluid components
        prog = plan(topo, generate("zipf", topo.nranks, 64 * MiB, seed), algorithm, **opts)
        setups.append(prepare(prog, topo, default_model(topo)))
    alone = [simulate_setup(s).op_end for s in setups]
    got: dict[int, list[np.ndarray]] = {i: [] for i in range(len(setups))}

    def work(i: int) -> None:
        for _ in range(3):
            got[i].append(simulate_setup(setups[i]).op_end)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(setups))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, ends in got.items():
        assert all(np.array_equal(e, alone[i], equal_nan=True) for e in ends)


def test_remembered_simulations_are_shared_safely_between_threads():
    """Background compiles simulate in several threads: the memo of simulations and routes is locked, and every
    thread gets the result one thread alone gets (memo hits, misses and evictions interleaved)."""
    import threading

    from a2acc.analysis.fastsim import forget

    topo = load_topology("dgx-h100", 2)
    progs = [plan(topo, generate("zipf", topo.nranks, 16 * MiB, seed), "direct") for seed in range(1, 9)]
    forget()
    alone = [simulate_fast(p, topo).time_s for p in progs]
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(40):
                k = (i + offset) % len(progs)
                if i % 13 == 0:
                    forget()
                assert simulate_fast(progs[k], topo).time_s == alone[k]
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(o,)) for o in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@settings(max_examples=100, deadline=None)
@given(
    deps=st.lists(st.lists(st.integers(0, 11), max_size=4), min_size=1, max_size=12),
    pairs=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=30),
)
def test_dependency_membership_by_slots_matches_the_lists(deps, pairs):
    """``_has_dep`` (is a a direct dependency of b: a binary search among the sorted edge keys) and ``_two_hop``
    (a -> d -> b, over b's dependency slots) answer as the lists themselves do (unsorted and repeated
    dependencies, and ops without any, included)."""
    from types import SimpleNamespace

    from a2acc.analysis.fastsim import _dep_keys, _has_dep, _two_hop

    n = len(deps)
    pairs = [(a % n, b % n) for a, b in pairs]
    ptr = np.concatenate([[0], np.cumsum([len(d) for d in deps])]).astype(np.int64)
    ids = np.array([x % n for d in deps for x in d], dtype=np.int64)
    dag = SimpleNamespace(dep_ptr=ptr, dep_ids=ids, n_ops=n)
    keys = _dep_keys(dag)
    lists = [[x % n for x in d] for d in deps]
    a = np.array([p[0] for p in pairs], dtype=np.int64)
    b = np.array([p[1] for p in pairs], dtype=np.int64)
    assert _has_dep(dag, keys, b, a).tolist() == [x in lists[y] for x, y in pairs]
    assert _two_hop(a, b, dag, keys).tolist() == [any(x in lists[d] for d in lists[y]) for x, y in pairs]


def test_forgetting_a_programs_routes_keeps_its_result():
    """``forget(prog, routes_only=True)`` (the mcf planner after simulating its final Program) drops the
    prepared routes and keeps the result: the caller's simulation is the remembered one, no new preparation."""
    from a2acc.analysis import fastsim

    topo = load_topology("dgx-h100", 2)
    prog = plan(topo, generate("zipf", topo.nranks, 16 * MiB, 3), "direct")
    fastsim.forget()
    first = simulate_fast(prog, topo)
    assert len(fastsim._ROUTES) == 1
    fastsim.forget(prog, routes_only=True)
    assert not fastsim._ROUTES
    assert simulate_fast(prog, topo) is first and not fastsim._ROUTES
    fastsim.forget(prog)
    assert simulate_fast(prog, topo) is not first
