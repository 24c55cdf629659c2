"""Back-to-back calls of a Program (what benchmarks time): stream order per rank, and the period it gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2acc import plan
from a2acc.analysis.iterations import back_to_back
from a2acc.analysis.levels import SoloBatch
from a2acc.analysis.model import CALIBRATED_ROCE, SimModel
from a2acc.analysis.simulate import routes
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.pipeline import Request, compile
from a2acc.studies.calibrate import PLANNED_AS

MiB = 1 << 20


def _ancestors(t, n):
    """Per op of an op table, the set of ops it waits for, transitively (ids are a topological order)."""
    anc: list[set[int]] = []
    for i in range(n):
        s: set[int] = set()
        for d in t.dep_ids[t.dep_ptr[i] : t.dep_ptr[i + 1]].tolist():
            s.add(d)
            s |= anc[d]
        anc.append(s)
    return anc


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    alg=st.sampled_from(["spreadout", "fast", "fast-as-FAST-runs-it", "direct", "hierarchical"]),
    kind=st.sampled_from(["uniform", "zipf", "balanced"]),
    seed=st.integers(0, 50),
    k=st.integers(2, 3),
)
def test_each_rank_starts_a_call_after_its_previous_call(alg, kind, seed, k):
    """Copy c of the Program is the Program shifted by c * n. A rank's first ops of copy c + 1 - those none of
    whose ancestors within the copy involves the rank - wait directly for exactly that rank's last ops of copy
    c (those none of whose descendants involves it), and no other op gets a dependency across copies; so every
    op of copy c + 1 waits, transitively, for every op of copy c that involves its sender or its receiver."""
    topo = load_topology("mi300x-100g", 2)
    m = generate(kind, topo.nranks, 2 * MiB, seed=seed)
    if alg == "fast-as-FAST-runs-it":  # its phases one after another: ops whose first rank-mate is transitive
        prog = compile(Request(topo, m, "fast", planner_options=PLANNED_AS["fast"])).program
    else:
        prog = plan(topo, m, alg)
    t, n = prog.table, len(prog.table)
    got = back_to_back(prog, k)
    g = got.table
    assert len(g) == k * n
    for col in ("src_rank", "dst_rank", "src_buf", "dst_buf", "src_off", "dst_off", "cnt", "stage", "link"):
        assert np.array_equal(getattr(g, col), np.tile(getattr(t, col), k))
    base = _ancestors(t, n)
    ranks = [{int(t.src_rank[i]), int(t.dst_rank[i])} for i in range(n)]
    later = [set() for _ in range(n)]  # descendants
    for i in range(n):
        for a in base[i]:
            later[a].add(i)
    firsts = {(i, x) for i in range(n) for x in ranks[i] if not any(x in ranks[a] for a in base[i])}
    lasts = {(i, x) for i in range(n) for x in ranks[i] if not any(x in ranks[d] for d in later[i])}
    for o in range(k * n):
        c, i = divmod(o, n)
        deps = g.dep_ids[g.dep_ptr[o] : g.dep_ptr[o + 1]].tolist()
        assert deps == sorted(set(deps)) and all(d < o for d in deps)
        own = {d - c * n for d in deps if d >= c * n}
        assert own == set(t.dep_ids[t.dep_ptr[i] : t.dep_ptr[i + 1]].tolist())  # within its copy, as given
        across = {d - (c - 1) * n for d in deps if d < c * n}
        want = {j for j, x in lasts for y in ranks[i] if x == y and (i, y) in firsts} if c else set()
        assert across == want
    anc = _ancestors(g, k * n)
    for c in range(1, k):
        for i in range(n):
            prev = {a - (c - 1) * n for a in anc[c * n + i] if (c - 1) * n <= a < c * n}
            assert {j for j in range(n) if ranks[j] & ranks[i]} <= prev


def test_one_call_is_the_program_itself():
    topo = load_topology("mi300x-100g", 2)
    prog = plan(topo, generate("uniform", topo.nranks, MiB, seed=1), "spreadout")
    assert back_to_back(prog, 1) is prog
    with pytest.raises(ValueError):
        back_to_back(prog, 0)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["uniform", "zipf"]),
    size=st.sampled_from([256 << 10, 3 * MiB, 48 * MiB]),
    seed=st.integers(0, 40),
)
def test_period_is_at_most_one_call_and_one_step(kind, size, seed):
    """A rank that ends a call early starts the next one early: the second of two back-to-back calls adds at
    most one call's time - exactly that without step costs, and at most the first step's fill and rendezvous
    more with them (a call's first step waits for its receiver's previous call; alone it waits for nothing).
    SpreadOut: exact longest paths."""
    topo = load_topology("mi300x-100g", 3)
    prog = plan(topo, generate(kind, topo.nranks, size, seed=seed), "spreadout")
    batch = SoloBatch([routes(prog, topo), routes(back_to_back(prog, 2), topo)])
    one, two = batch.makespans(SimModel())
    assert one < two <= 2 * one * (1 + 1e-12)
    m = CALIBRATED_ROCE
    one, two = batch.makespans(m)
    step = m.stage_s + m.fill_bytes / (12.5e9 * m.inter_efficiency)  # 100 Gb/s NICs: the slowest route
    assert one < two <= (2 * one + step) * (1 + 1e-12)


def test_lockstep_calls_follow_each_other_exactly():
    """Balanced SpreadOut without software costs: every rank ends a call at the same time, so the next one is
    the first again, shifted."""
    topo = load_topology("mi300x-100g", 2)
    prog = plan(topo, generate("balanced", topo.nranks, 8 * MiB, seed=0), "spreadout")
    ideal = SimModel()
    one, three = SoloBatch([routes(prog, topo), routes(back_to_back(prog, 3), topo)]).makespans(ideal)
    assert three == pytest.approx(3 * one, rel=1e-12)
