"""MCF formulations against closed forms, exact path decomposition, the decomposition's bounds."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.flows.decompose import decomposed_mcf
from a2acc.flows.mcf import hop_distances, link_mcf, path_mcf, time_stepped_mcf
from a2acc.flows.network import FlowNetwork
from a2acc.flows.paths import chunk_split, peel
from a2acc.model.topology import parse_topology
from a2acc.model.traffic import generate

B = 1e9  # 1 GB/s links
M = 1e9  # 1 GB per pair


def _topo(direct: dict) -> FlowNetwork:
    t = parse_topology({"version": 1, "name": "t", "direct": {**direct, "bandwidth": 1, "latency": 0}}, "t")
    return FlowNetwork.of(t)


def _uniform(n: int) -> np.ndarray:
    d = np.full((n, n), int(M))
    np.fill_diagonal(d, 0)
    return d


# optimal all-to-all time for uniform demand M on edge-transitive graphs: sum of distances over capacity
CLOSED_FORMS = [
    ("ring 8", {"kind": "torus", "dims": [8]}, M * 16 / (2 * B)),  # sum_k min(k, 8-k) = 16 over 2 links
    ("ring 7", {"kind": "torus", "dims": [7]}, M * 12 / (2 * B)),
    ("torus 4x4", {"kind": "torus", "dims": [4, 4]}, M * 4**3 / (8 * B)),  # k^3/2 hop-bytes over 4 links
    ("hypercube 4", {"kind": "hypercube", "dimension": 4}, M * 16 / (2 * B)),  # N/2 per node
    (
        "complete 6",
        {"kind": "edges", "nodes": 6, "edges": [[a, b] for a in range(6) for b in range(a + 1, 6)]},
        M / B,
    ),
]


@pytest.mark.parametrize(("name", "direct", "expect"), CLOSED_FORMS, ids=[c[0] for c in CLOSED_FORMS])
def test_closed_forms(name, direct, expect):
    net = _topo(direct)
    d = _uniform(len(net.rank_node))
    assert link_mcf(net, d).time_s == pytest.approx(expect, rel=1e-6)
    assert path_mcf(net, d, k=4).time_s == pytest.approx(expect, rel=1e-6)  # shortest paths suffice here
    diam = int(hop_distances(net).max())
    stepped = time_stepped_mcf(net, d, diam + 1)
    assert stepped is not None and stepped.time_s >= expect * (1 - 1e-6)
    assert time_stepped_mcf(net, d, diam - 1) is None or diam == 1  # fewer epochs than hops: infeasible


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([[3, 3], [4, 2], [5]]))
def test_peeling_conserves_flow_exactly(seed, dims):
    net = _topo({"kind": "torus", "dims": dims})
    n = len(net.rank_node)
    d = np.random.default_rng(seed).integers(0, 10**6, (n, n))
    np.fill_diagonal(d, 0)
    lf = link_mcf(net, d)
    for k, s in enumerate(lf.sources.tolist()):
        dem = np.zeros(net.nnodes)
        dem[net.rank_node] = d[s]
        tol = 1e-9 * dem.sum()
        used = np.zeros(net.nedges)
        got = np.zeros(net.nnodes)
        for v, walk, amount in peel(
            net.nnodes, net.tail, net.head, lf.flow[k], int(net.rank_node[s]), dem, tol
        ):
            assert int(net.tail[walk[0]]) == net.rank_node[s] and int(net.head[walk[-1]]) == v
            assert all(int(net.head[a]) == int(net.tail[b]) for a, b in itertools.pairwise(walk))
            used[walk] += amount
            got[v] += amount
        assert np.allclose(got, dem, rtol=1e-6, atol=1.0)
        assert np.allclose(used, lf.flow[k], rtol=1e-6, atol=1.0)


def test_chunk_split_is_exact():
    assert chunk_split(10, [1, 1, 1]) == [4, 3, 3]
    assert chunk_split(5, [0.7, 0.2, 0.1]) == [4, 1, 0]
    assert sum(chunk_split(997, np.random.default_rng(1).random(13))) == 997


def _moore_bound(n: int, d: int) -> float:
    """Fewest total hops from one node to all others in any d-regular digraph: d at 1 hop, d^2 at 2, ..."""
    left, k, hops = n - 1, 1, 0
    while left > 0:
        take = min(left, d**k)
        hops += take * k
        left -= take
        k += 1
    return float(hops)


@pytest.mark.parametrize(("n", "deg"), [(16, 2), (32, 3), (27, 3)])
def test_genkautz_meets_the_degree_bound(n, deg):
    """The N log_d N lower bound (Moore bound on distances) holds, and GenKautz comes close to it."""
    net = _topo({"kind": "genkautz", "n": n, "degree": deg})
    t = link_mcf(net, _uniform(n)).time_s
    lower = M * n * _moore_bound(n, deg) / (n * deg * B)  # all hop-bytes over all link capacity
    assert t >= lower * (1 - 1e-6)
    assert t <= 1.45 * lower  # measured 1.35 (16, 2), closer at higher degree
    assert lower >= M * (n - 1) * (math.log(n, deg) - 2) / (deg * B)  # Omega(N log_d N) shape


def test_decomposition_brackets_the_optimum():
    net = _topo({"kind": "torus", "dims": [4, 4]})
    d = np.random.default_rng(3).integers(1, 10**6, (16, 16))
    opt = link_mcf(net, d).time_s
    for formulation in ("link", "path"):
        dc = decomposed_mcf(net, d, groups=4, formulation=formulation, rounds=3)
        assert dc is not None
        assert dc.bound_s <= opt * (1 + 1e-6) <= dc.time_s * (1 + 1e-6)
        assert dc.time_s <= 1.6 * opt


def test_a_multiple_of_a_matrix_is_one_lp_solved_once():
    """The link LP is normalised in bytes and in time, so a matrix and 7 times it are the same LP: the second
    is looked up, and gives exactly what solving it afresh gives."""
    from a2acc.flows import mcf as mcf_mod

    net = _topo({"kind": "torus", "dims": [4, 4]})
    d = np.random.default_rng(3).integers(0, 50, (16, 16)).astype(np.float64)
    mcf_mod._SOLVED.clear()
    a = link_mcf(net, d)
    assert a is not None and len(mcf_mod._SOLVED) == 1
    b = link_mcf(net, 7 * d)
    assert b is not None and len(mcf_mod._SOLVED) == 1
    assert b.time_s == pytest.approx(7 * a.time_s, rel=1e-12)
    np.testing.assert_allclose(b.flow, 7 * a.flow, rtol=1e-12, atol=1e-9)
    mcf_mod._SOLVED.clear()
    c = link_mcf(net, 7 * d)
    assert c is not None and c.time_s == b.time_s and np.array_equal(c.flow, b.flow)


def _one_iteration_second_phase(statuses: list[str]):
    """A ``Solver.reoptimize`` that checks it is given the cap, then runs the simplex (small LPs finish in the
    crossover) with a cap of one iteration, recording each second phase's status."""
    from a2acc.flows import mcf as mcf_module
    from a2acc.flows.lp import Solver

    reopt = Solver.reoptimize

    def one_iteration(self, cost, col, hi, *, simplex_iterations=None):
        assert simplex_iterations == mcf_module.PHASE2_SIMPLEX_ITERATIONS
        self.h.setOptionValue("solver", "simplex")
        self.h.setOptionValue("presolve", "off")
        got = reopt(self, cost, col, hi, simplex_iterations=1)
        statuses.append(got.status)
        return got

    return one_iteration


def test_a_second_phase_past_its_iteration_cap_keeps_the_first_phases_optimum(monkeypatch):
    """The second phase (fewest bytes among optimal flows) may stop at PHASE2_SIMPLEX_ITERATIONS: the first
    phase's point is used, with its proven optimal time."""
    from collections import OrderedDict

    from a2acc.flows import mcf as mcf_module
    from a2acc.flows.lp import Solver

    net = _topo({"kind": "torus", "dims": [4, 4]})
    demand = generate("zipf", 16, 1 << 30, 3)
    monkeypatch.setattr(mcf_module, "_SOLVED", OrderedDict())  # solve, do not look up
    full = link_mcf(net, demand)  # both phases
    seen: list[str] = []
    monkeypatch.setattr(Solver, "reoptimize", _one_iteration_second_phase(seen))
    monkeypatch.setattr(mcf_module, "_SOLVED", OrderedDict())
    capped = link_mcf(net, demand)
    assert seen == ["time_limit"]  # the cap was reached
    assert full is not None and capped is not None and capped.status == "optimal"
    assert capped.time_s == pytest.approx(full.time_s, rel=1e-6)


def test_a_capped_second_phase_is_remembered_like_a_finished_one(monkeypatch):
    """The cap counts iterations: a solve it stopped is the same in every run, so a comparison's sizes (one LP)
    solve it once."""
    from collections import OrderedDict

    from a2acc.flows import mcf as mcf_module
    from a2acc.flows.lp import Solver

    seen: list[str] = []
    monkeypatch.setattr(Solver, "reoptimize", _one_iteration_second_phase(seen))
    monkeypatch.setattr(mcf_module, "_SOLVED", OrderedDict())
    net = _topo({"kind": "torus", "dims": [4, 4]})
    demand = generate("zipf", 16, 1 << 30, 3)
    first = link_mcf(net, demand)
    again = link_mcf(net, demand * 2)  # the same LP, normalised
    assert seen == ["time_limit"] and first is not None and again is not None  # solved once
    assert again.time_s == pytest.approx(2 * first.time_s, rel=1e-9)
