"""FAST's compiled op emission and its pure-Python reference build byte-identical Programs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.ir.verify import verify_program
from a2acc.model.topology import load_topology, parse_topology
from a2acc.model.traffic import generate
from a2acc.planners import PlanRequest, fast
from a2acc.planners.fast import Options


def _both(topo, traffic, counts, unit, opts):
    req = PlanRequest(topo, traffic, counts, unit, opts)
    a = fast.plan(req, native=True)
    b = fast.plan(req, native=False)
    return a, b


def _same(topo, traffic, counts, unit=1, opts=None):
    a, b = _both(topo, traffic, counts, unit, opts or Options())
    assert a.to_json() == b.to_json()
    return a


def test_native_emission_was_built():
    # the build machine and CI have a C compiler; without one fast uses the reference (same Programs)
    from a2acc.planners.fast import emit

    assert emit._native_emit is not None


# emission is checked shape by shape (the search itself only picks among these Programs)
OPTIONS = [
    Options(shape="staged"),
    Options(shape="staged", order="ascending"),
    Options(shape="staged", balance="always"),
    Options(shape="grouped", groups=1, balance="never"),
    Options(shape="grouped", groups=2, birkhoff="kuhn"),
    Options(shape="grouped", groups=3),
    Options(shape="grouped", groups=1, split=True),
    Options(shape="grouped", groups=2, split=True, balance="always"),
]


@pytest.mark.parametrize("preset", ["dgx-h100", "mi300x-100g"])
def test_the_search_picks_the_same_program_on_both_paths(monkeypatch, preset):
    """Emission and ranking both have a compiled core and a reference: any mix gives the same Program, its
    meta (every candidate's estimate, the bound's stops) included."""
    from a2acc.analysis import estimate

    topo = load_topology(preset, 3)
    m = generate("zipf", topo.nranks, 1 << 24, 3)
    unit = max(1, int(m.sum(axis=1).max()) // 512)
    prog = _same(topo, m, -(-m // unit), unit, Options())
    assert prog.meta["candidates_us"] and verify_program(prog).ok
    monkeypatch.setattr(estimate, "_native", None)  # as on a machine without a C compiler
    a, b = _both(topo, m, -(-m // unit), unit, Options())
    assert a.to_json() == b.to_json() == prog.to_json()


@pytest.mark.parametrize(
    ("preset", "servers"),
    [("dgx-h100", 1), ("dgx-h100", 4), ("dgx2", 2), ("ndv2", 3), ("mi300x-100g", 2), ("alps", 3)],
)
@pytest.mark.parametrize("kind", ["zipf", "moe", "uniform", "balanced"])
@pytest.mark.parametrize("opt", range(len(OPTIONS)))
def test_presets_identical(preset, servers, kind, opt):
    topo = load_topology(preset, servers)
    m = generate(kind, topo.nranks, None if kind == "moe" else 1 << 24, 3)
    unit = max(1, int(m.sum(axis=1).max()) // 512)
    counts = -(-m // unit)
    prog = _same(topo, m, counts, unit, OPTIONS[opt])
    assert verify_program(prog).ok


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 5),
    m=st.sampled_from([1, 2, 3, 4, 8]),
    nics=st.sampled_from([1, 2, 0]),
    seed=st.integers(0, 10_000),
    sparsity=st.floats(0, 0.95),
    hi=st.sampled_from([2, 9, 200]),
    opt=st.integers(0, len(OPTIONS) - 1),
)
def test_random_matrices_identical(n, m, nics, seed, sparsity, hi, opt):
    nic = m if nics == 0 else math.gcd(nics, m)  # NICs per server divide the GPUs per server
    doc = {
        "version": 1,
        "name": "t",
        "servers": n,
        "gpus_per_server": m,
        "memory_bandwidth": 1000,
        "intra": {"fabric": "switch", "bandwidth": 100, "latency": 0.5},
        "inter": {"nics_per_server": nic, "bandwidth": 10, "latency": 2.0},
    }
    topo = parse_topology(doc, "t")
    rng = np.random.default_rng(seed)
    counts = (rng.integers(0, hi, (n * m, n * m)) * (rng.random((n * m, n * m)) >= sparsity)).astype(np.int64)
    _same(topo, counts * 4096, counts, 4096, OPTIONS[opt])


@pytest.mark.parametrize("dims", [[4, 4], [2, 3]])
def test_direct_connect_identical(dims):
    doc = {
        "version": 1,
        "name": "torus",
        "direct": {"kind": "torus", "dims": dims, "bandwidth": 50, "latency": 1},
    }
    topo = parse_topology(doc, "torus")
    m = generate("zipf", topo.nranks, 1 << 20, 5)
    for opts in OPTIONS:
        _same(topo, m, m // 1024, 1024, opts)
