"""One shared check over every registered planner (networkx's validate-every-algorithm pattern)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2acc import plan
from a2acc.ir.verify import verify_program
from a2acc.planners import available
from tests.helpers import tiered

PLANNERS = [i.name for i in available()]


@st.composite
def topologies(draw):
    servers = draw(st.integers(1, 4))
    fabric = draw(st.sampled_from(["switch", "full_mesh", "ring", "hybrid_cube_mesh", "links"]))
    gpus = 8 if fabric == "hybrid_cube_mesh" else draw(st.integers(1, 6))
    links = None
    if fabric == "links":
        if gpus < 2:
            fabric = "switch"
        else:  # a random spanning chain plus random extra links
            order = draw(st.permutations(list(range(gpus))))
            links = [[order[i], order[i + 1]] for i in range(gpus - 1)]
            links += [
                [a, b]
                for a, b in draw(
                    st.lists(st.tuples(st.integers(0, gpus - 1), st.integers(0, gpus - 1)), max_size=4)
                )
                if a != b
            ]
    if fabric in ("ring", "full_mesh") and gpus < 2:
        fabric = "switch"
    return tiered(servers, gpus, fabric=fabric, intra_bw=100.0, nic_bw=10.0, latency=1.0, links=links)


@st.composite
def problems(draw):
    topo = draw(topologies())
    n = topo.nranks
    cells = draw(st.lists(st.integers(0, 4000), min_size=n * n, max_size=n * n))
    m = np.array(cells, dtype=np.int64).reshape(n, n)
    zero_rows = draw(st.lists(st.integers(0, n - 1), max_size=2))
    m[zero_rows, :] = 0
    return topo, m


@pytest.mark.parametrize("algorithm", PLANNERS)
@settings(max_examples=18, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems(), unit=st.sampled_from([16, 64, 1000]))
def test_every_planner_verifies(algorithm, problem, unit):
    topo, m = problem
    prog = plan(topo, m, algorithm, unit=unit, verify=False)
    rep = verify_program(prog)
    assert rep.ok, rep.errors[:5]
    assert prog.algorithm == algorithm
    assert (prog.counts == -(-m // unit)).all()


@pytest.mark.parametrize("algorithm", PLANNERS)
def test_plans_are_deterministic_bytes(algorithm):
    topo = tiered(3, 4, fabric="full_mesh")
    m = np.random.default_rng(3).integers(0, 1 << 20, (12, 12))
    a = plan(topo, m, algorithm).to_json()
    b = plan(topo, m, algorithm).to_json()
    assert a == b


def test_hierarchical_relays_follow_the_msccl_tools_rule():
    """With n - 1 <= m every relay GPU of a server serves exactly one remote server (msccl-tools' rule)."""
    import numpy as np

    from a2acc.planners.hierarchical import relay_index

    for n, m in ((2, 8), (4, 8), (9, 8), (3, 2)):
        a, b = np.array([(x, y) for x in range(n) for y in range(n) if x != y]).T
        r = relay_index(a, b, m)
        assert ((r >= 0) & (r < m)).all()
        for x in range(n):
            used = r[a == x]
            assert len(set(used.tolist())) == min(n - 1, m) or n - 1 > m
