"""The list scheduler models the simulator exactly, cuts routes into exact ramps, and improvement never hurts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import a2acc
from a2acc.analysis.fastsim import simulate_fast
from a2acc.analysis.simulate import simulate
from a2acc.flows.schedule import cut_pieces, fluid_keys, improve, list_schedule, ramp
from a2acc.model.topology import parse_topology
from a2acc.model.traffic import generate

GRAPHS = [
    {"kind": "torus", "dims": [3, 3]},
    {"kind": "torus", "dims": [5]},
    {"kind": "genkautz", "n": 12, "degree": 3},
    {"kind": "hypercube", "dimension": 3},
]


def _topo(direct, latency=1.0, bandwidth=50):
    return parse_topology(
        {"version": 1, "name": "g", "direct": {**direct, "bandwidth": bandwidth, "latency": latency}}, "g"
    )


@settings(max_examples=12, deadline=None)
@given(
    st.sampled_from(GRAPHS),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["zipf", "uniform"]),
    st.sampled_from([0.2, 1.0, 5.0]),
    st.sampled_from([1 << 20, 8 << 20]),
)
def test_planned_schedule_is_what_the_simulator_reports(direct, seed, kind, latency, size):
    """The plan's own makespan (meta schedule_us) equals both simulator engines' completion time."""
    topo = _topo(direct, latency)
    m = generate(kind, topo.nranks, size, seed)
    prog = a2acc.plan(topo, m, "mcf")
    ref = simulate(prog, topo, record_timeline=False).time_s
    assert prog.meta["schedule_us"] * 1e-6 == pytest.approx(ref, rel=1e-9)
    assert simulate_fast(prog, topo).time_s == pytest.approx(ref, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5000), st.integers(1, 300))
def test_ramp_sizes_cover_the_route(chunks, mid):
    sizes = ramp(chunks, mid)
    assert sum(sizes) == chunks and min(sizes) >= 1
    k = 0
    while k < len(sizes) // 2 and sizes[k] < mid and sizes[k] == 2**k:
        k += 1
    assert sizes[:k] == sizes[::-1][:k]  # the head ramp is mirrored at the tail
    assert max(sizes) <= max(mid, chunks if len(sizes) == 1 else 2 * mid)


def test_cut_pieces_tile_every_route():
    chunks = np.array([1, 7, 40, 3, 500])
    lens = np.array([2, 1, 3, 4, 2])
    ptr = np.concatenate([[0], np.cumsum(lens)])
    edges = np.arange(int(lens.sum())) + 100
    pc = cut_pieces(chunks, ptr, edges, 8)
    for r in range(len(chunks)):
        mine = np.flatnonzero(pc.route == r)
        assert pc.off[mine[0]] == 0 and pc.off[mine[-1]] + pc.cnt[mine[-1]] == chunks[r]
        assert (pc.off[mine[1:]] == pc.off[mine[:-1]] + pc.cnt[mine[:-1]]).all()
        for p in mine:
            assert (
                pc.hop_edge[pc.hop_ptr[p] : pc.hop_ptr[p + 1]].tolist() == edges[ptr[r] : ptr[r + 1]].tolist()
            )
    assert np.allclose(pc.done[pc.route == 4][-1], 1.0)


def test_forward_backward_improvement_keeps_the_best():
    rng = np.random.default_rng(7)
    chunks = rng.integers(1, 60, 40)
    lens = rng.integers(1, 4, 40)
    ptr = np.concatenate([[0], np.cumsum(lens)])
    edges = rng.integers(0, 6, int(lens.sum()))
    pc = cut_pieces(chunks, ptr, edges, 8)
    cap, alpha = np.full(6, 1e9), np.full(6, 1e-6)
    nbytes = pc.cnt * 4096.0
    first = list_schedule(pc, nbytes, fluid_keys(pc), cap, alpha, 2, 2 * alpha * cap)
    better = improve(pc, nbytes, cap, alpha, 2 * alpha * cap, first, 3)
    assert better.makespan <= first.makespan
    assert sorted(better.order.tolist()) == list(range(pc.nhops))
    # every op is admitted after its piece's previous hop ends, and its trigger ended when it was admitted
    hop_of = np.arange(pc.nhops)
    starts = pc.hop_ptr[np.repeat(np.arange(len(pc.cnt)), np.diff(pc.hop_ptr))]
    later = hop_of > starts
    assert (better.ready[later] >= better.end[hop_of[later] - 1] - 1e-15).all()
    trig = better.after >= 0
    assert np.allclose(better.ready[trig], better.end[better.after[trig]])


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    routes=st.integers(1, 60),
    links=st.integers(1, 8),
    window=st.integers(1, 4),
    mid=st.sampled_from([2, 8, 64]),
    latency=st.sampled_from([0.0, 1e-6, 5e-6]),
    inflight=st.booleans(),
)
def test_compiled_list_scheduler_gives_the_reference_schedule(
    seed, routes, links, window, mid, latency, inflight
):
    """``a2acc._listsched`` and the Python loop admit the same hops in the same order, after the same ops, at
    the same times (reversed instances included, as the forward-backward improvement runs them)."""
    from a2acc.native import listsched

    if listsched is None:
        pytest.skip("a2acc._listsched was not built (no C compiler)")
    rng = np.random.default_rng(seed)
    chunks = rng.integers(1, 200, routes)
    lens = rng.integers(1, 5, routes)
    ptr = np.concatenate([[0], np.cumsum(lens)])
    edges = rng.integers(0, links, int(lens.sum()))
    pc = cut_pieces(chunks, ptr, edges, mid)
    cap = rng.choice([1e9, 2e9, 5e10], links)
    alpha = np.full(links, latency)
    nbytes = pc.cnt * 4096.0
    keys = fluid_keys(pc)
    budget = 2 * alpha * cap if inflight else None
    rev = np.asarray(
        np.repeat(pc.hop_ptr[:-1], np.diff(pc.hop_ptr))
        + np.repeat(np.diff(pc.hop_ptr), np.diff(pc.hop_ptr))
        - 1
        - (np.arange(pc.nhops) - np.repeat(pc.hop_ptr[:-1], np.diff(pc.hop_ptr))),
        dtype=np.int64,
    )
    for k, e in ((keys, None), (-keys[rev], pc.hop_edge[rev])):
        py = list_schedule(pc, nbytes, k, cap, alpha, window, budget, e, native=False)
        c = list_schedule(pc, nbytes, k, cap, alpha, window, budget, e, native=True)
        for f in ("order", "after", "ready", "end"):
            assert np.array_equal(getattr(py, f), getattr(c, f)), f
