"""Routes from flows: exact chunk sharing, and repair of a flow that misses demand."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.flows import routes as rt
from a2acc.flows.mcf import link_mcf
from a2acc.flows.network import FlowNetwork
from a2acc.flows.paths import chunk_split
from a2acc.model.topology import parse_topology
from a2acc.model.traffic import generate


def _net(dims):
    t = parse_topology(
        {"version": 1, "name": "t", "direct": {"kind": "torus", "dims": dims, "bandwidth": 1, "latency": 0}},
        "t",
    )
    return FlowNetwork.of(t)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 500), st.lists(st.floats(0, 1e6), min_size=1, max_size=6)),
        min_size=1,
        max_size=12,
    )
)
def test_vectorised_split_equals_the_per_pair_rule(pairs):
    pair = np.concatenate([np.full(len(a), i) for i, (_c, a) in enumerate(pairs)])
    amounts = np.concatenate([np.array(a) for _c, a in pairs])
    count = np.array([c for c, _a in pairs])
    got = rt.split_chunks(pair, amounts, count)
    want = np.concatenate([chunk_split(c, a) for c, a in pairs])
    assert got.tolist() == want.tolist()


def test_complete_reroutes_pairs_a_partial_flow_misses():
    """A time-limited LP point that routes only part of the demand still yields routes for every chunk."""
    net = _net([3, 3])
    counts = generate("zipf", 9, 9 * 64, 3) // 16
    np.fill_diagonal(counts, 0)
    demand = counts.astype(float)
    lf = link_mcf(net, demand)
    assert lf is not None
    partial = lf.flow.copy()
    partial[2] *= 0.5  # source 2's flow delivers half its bytes
    partial[5, :] = 0.0  # source 5's flow is missing
    bad = type(lf)(lf.time_s, lf.sources, partial, "time_limit", 0.0)
    routes = rt.from_link_flow(net, bad, counts, demand)
    assert not np.array_equal(routes.carried(9), counts)
    fixed, n_fixed = rt.complete(net, routes, counts)
    assert np.array_equal(fixed.carried(9), counts)
    assert n_fixed >= int((counts[5] > 0).sum())
    # every route is a walk from its source to its destination
    for r in range(len(fixed)):
        e = fixed.edges[fixed.ptr[r] : fixed.ptr[r + 1]]
        assert (
            net.tail[e[0]] == net.rank_node[fixed.src[r]] and net.head[e[-1]] == net.rank_node[fixed.dst[r]]
        )
        assert (net.head[e[:-1]] == net.tail[e[1:]]).all()
