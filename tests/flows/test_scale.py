"""The flow at scale: candidate paths, a first-order flow near the LP optimum, and a bound that is valid."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.flows.mcf import candidate_paths, hop_distances, link_mcf, path_mcf
from a2acc.flows.network import FlowNetwork
from a2acc.flows.scale import candidates, certify, distances, dual_bound, path_flow
from a2acc.model.topology import parse_topology
from a2acc.model.traffic import generate

GRAPHS = {
    "torus 4x4": {"kind": "torus", "dims": [4, 4]},
    "torus 4x2x2": {"kind": "torus", "dims": [4, 2, 2]},
    "genkautz 16 d2": {"kind": "genkautz", "n": 16, "degree": 2},
    "genkautz 20 d3": {"kind": "genkautz", "n": 20, "degree": 3},
    "hypercube 4": {"kind": "hypercube", "dimension": 4},
}


def _net(direct):
    t = parse_topology({"version": 1, "name": "t", "direct": {**direct, "bandwidth": 1, "latency": 0}}, "t")
    return FlowNetwork.of(t)


@pytest.mark.parametrize("name", ["torus 4x4", "genkautz 20 d3"])
def test_candidates_equal_the_per_pair_construction(name):
    net = _net(GRAPHS[name])
    n = len(net.rank_node)
    d = generate("uniform", n, n * 1000, 1).astype(float)
    np.fill_diagonal(d, 0)
    c = candidates(net, d, 3)
    dist = hop_distances(net)
    for q, (s, t) in enumerate(c.pairs.tolist()):
        mine = np.flatnonzero(c.pair == q)
        got = [tuple(c.edges[c.ptr[p] : c.ptr[p + 1]].tolist()) for p in mine]
        assert sorted(got) == sorted(candidate_paths(net, dist, s, t, 3))


@settings(max_examples=5, deadline=None)  # (each example solves two LPs, a flow and a bound: ~2.5 s)
@given(st.sampled_from(sorted(GRAPHS)), st.integers(0, 2**31 - 1), st.sampled_from(["zipf", "uniform"]))
def test_flow_and_bound_bracket_the_lp_optimum(name, seed, kind):
    """bound <= LP optimum <= first-order flow, the flow within 1 % of the path LP over its candidates and
    routing every byte."""
    net = _net(GRAPHS[name])
    n = len(net.rank_node)
    d = generate(kind, n, n << 20, seed).astype(float)
    opt = link_mcf(net, d)
    assert opt is not None
    f = path_flow(net, d, k=8, iterations=150)
    lb, _how = dual_bound(net, d, f, iterations=60)
    assert lb <= opt.time_s * (1 + 1e-7) <= f.time_s * (1 + 2e-7)
    # the flow reaches the path LP over its own candidates; the candidates themselves may cost a few % (one path
    # per first hop: GenKautz 16 d=2, Zipf seed 4194304, path LP 3.4 % above the link LP)
    over = path_mcf(net, d, k=8)
    assert over is not None and f.time_s <= 1.01 * over.time_s
    np.fill_diagonal(d, 0)
    got = np.bincount(f.cand.pair, weights=f.amount)
    assert np.allclose(got, d[f.cand.pairs[:, 0], f.cand.pairs[:, 1]], rtol=1e-9)


def test_bound_of_uniform_lengths_is_the_hop_bytes_bound():
    net = _net(GRAPHS["genkautz 16 d2"])
    d = generate("zipf", 16, 1 << 20, 2).astype(float)
    np.fill_diagonal(d, 0)
    hops = hop_distances(net)[np.ix_(net.rank_node, net.rank_node)]
    assert certify(net, d, net.cap.copy()) == pytest.approx((d * hops).sum() / net.cap.sum(), rel=1e-6)
    unit = distances(net, np.ones(net.nedges), net.rank_node)
    assert np.array_equal(unit[:, net.rank_node], hops)


def test_bound_is_the_same_from_worker_processes():
    net = _net(GRAPHS["torus 4x4"])
    d = generate("zipf", 16, 1 << 20, 4).astype(float)
    w = np.random.default_rng(1).random(net.nedges)
    assert certify(net, d, w, workers=2) == certify(net, d, w)


@settings(max_examples=60, deadline=None)
@given(
    lens=st.lists(st.integers(0, 6), min_size=1, max_size=40),
    nedges=st.integers(1, 12),
    seed=st.integers(0, 2**31 - 1),
    cut=st.tuples(st.integers(0, 40), st.integers(0, 40)),
)
def test_compiled_path_edge_sums_give_the_reference_floats(lens, nedges, seed, cut):
    """The compiled path-edge sums (``a2acc._pathflow``) add the same terms in the same order as the
    reference's ``np.bincount``: bit-identical per-path and per-edge sums over any slice of paths (empty paths
    and slices included)."""
    from a2acc.flows.scale import Candidates, _Incidence
    from a2acc.native import pathflow

    if pathflow is None:
        pytest.skip("the compiled path-edge sums are not built")
    rng = np.random.default_rng(seed)
    npaths = len(lens)
    ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    cand = Candidates(
        np.zeros((npaths, 2), dtype=np.int64),
        np.arange(npaths, dtype=np.int64),
        ptr,
        rng.integers(0, nedges, int(ptr[-1])).astype(np.int64),
        np.asarray(lens, dtype=np.int64),
    )
    net = type("Net", (), {"nedges": nedges, "cap": rng.random(nedges) + 0.5})()
    demand = np.zeros((1, 1))
    p0, p1 = sorted(c % (npaths + 1) for c in cut)
    a, b = rng.standard_normal(nedges) * 1e3, rng.random(nedges) ** 7
    w = rng.standard_normal(p1 - p0)
    got, ref = _Incidence(net, cand, demand, native=True), _Incidence(net, cand, demand, native=False)  # type: ignore[arg-type]
    for paths in (slice(p0, p1), None):
        mine, theirs = got.path_sums(a, b, a, paths=paths), ref.path_sums(a, b, a, paths=paths)
        assert all(x.tobytes() == y.tobytes() for x, y in zip(mine, theirs)) and len(mine) == 3
    assert got.edge_sums(w, slice(p0, p1)).tobytes() == ref.edge_sums(w, slice(p0, p1)).tobytes()
    x = rng.random(npaths)
    assert got.loads(x).tobytes() == ref.loads(x).tobytes()
    with pytest.raises(ValueError, match="bad arguments"):
        pathflow.edge_sums(ptr, cand.edges, 0, npaths + 1, np.zeros(npaths + 1), nedges)
    if len(cand.edges):  # an edge id outside [0, E), found while summing
        bad = cand.edges.copy()
        bad[-1] = nedges
        with pytest.raises(ValueError, match="bad arguments"):
            pathflow.edge_sums(ptr, bad, 0, npaths, np.zeros(npaths), nedges)
        with pytest.raises(ValueError, match="bad arguments"):
            pathflow.path_sums(ptr, bad, 0, npaths, a, None)


def test_the_flow_is_the_same_without_the_compiled_sums(monkeypatch):
    """The first-order flow and the ascent's weights are the same floats with the Python reference sums."""
    import a2acc.flows.scale as scale

    if scale._native_pathflow is None:
        pytest.skip("the compiled path-edge sums are not built")
    net = _net(GRAPHS["genkautz 20 d3"])
    d = generate("zipf", 20, 20 << 20, 3).astype(float)
    f1, w1 = path_flow(net, d, k=8, iterations=40), scale.ascent_weights(net, d, 8, 30)
    monkeypatch.setattr(scale, "_native_pathflow", None)
    f2, w2 = path_flow(net, d, k=8, iterations=40), scale.ascent_weights(net, d, 8, 30)
    assert f1.amount.tobytes() == f2.amount.tobytes() and f1.time_s == f2.time_s
    assert [w.tobytes() for w in w1] == [w.tobytes() for w in w2]
