"""ProgramBuilder.add_rows (the compiled planners' bulk form) and normalise_deps against simple references."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.ir import Buf, ProgramBuilder
from a2acc.ir.program import normalise_deps
from a2acc.model.topology import load_topology


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 15), st.integers(0, 15), st.integers(1, 3)), max_size=30),
    st.integers(0, 5),
    st.data(),
)
def test_add_rows_matches_add(rows, before, data):
    """Rows with sorted unique dependencies give the same Program as the same ops added one at a time,
    with ops added singly before and after (op ids continue; link classes from the machine map)."""
    topo = load_topology("dgx-h100", 2)  # 16 ranks on two servers: local, intra and inter links
    counts = np.full((16, 16), 3, dtype=np.int64)
    one = ProgramBuilder("a", "t", counts, 16, topology=topo)
    bulk = ProgramBuilder("a", "t", counts, 16, topology=topo)
    for b in (one, bulk):
        for k in range(before):
            b.add((k, Buf.INPUT, 0), (k + 1, Buf.OUTPUT, 0), 1)
    deps = [
        sorted(set(data.draw(st.lists(st.integers(0, before + k - 1), max_size=4)))) if before + k else []
        for k in range(len(rows))
    ]
    mat = []
    for k, (s, d, c) in enumerate(rows):
        one.add((s, Buf.INPUT, 0), (d, Buf.OUTPUT, k % 3), c, deps[k], stage=k)
        mat.append((s, Buf.INPUT, 0, d, Buf.OUTPUT, k % 3, c, k))
    first = bulk.add_rows(
        np.array(mat, dtype=np.int64).reshape(-1, 8),
        np.array([len(x) for x in deps], dtype=np.int64),
        np.array([y for x in deps for y in x], dtype=np.int64),
    )
    assert first == before
    for b in (one, bulk):
        b.add((0, Buf.INPUT, 0), (15, Buf.OUTPUT, 0), 1, [0] if len(b) else [])
    assert one.build().to_json() == bulk.build().to_json()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 50), max_size=6), max_size=12), st.booleans())
def test_normalise_deps_sorts_and_deduplicates(lists, presorted):
    if presorted:
        lists = [sorted(set(x)) for x in lists]
    ndeps = [len(x) for x in lists]
    ids = [y for x in lists for y in x]
    got_n, got_ids = normalise_deps(np.array(ndeps, np.int64), np.array(ids, np.int64), len(lists))
    want = [sorted(set(x)) for x in lists]
    assert got_n.tolist() == [len(x) for x in want]
    assert got_ids.tolist() == [y for x in want for y in x]
