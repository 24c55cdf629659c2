from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from a2acc.planners.birkhoff import decompose, pad_to_line_sum, stage_bound

SLIDES = np.array([[0, 0, 3, 2], [5, 0, 0, 4], [4, 2, 0, 3], [0, 7, 2, 0]])


@pytest.mark.parametrize("method", ["bottleneck", "kuhn"])
def test_fast_slides_matrix_three_stages_sum_to_nine(method):
    d = decompose(SLIDES, method)
    assert d.line_sum == 9
    assert sorted(s.weight for s in d.stages) == [2, 3, 4]
    # every stage is a permutation; together they cover the matrix exactly (padding is extra)
    total = np.zeros_like(SLIDES)
    for s in d.stages:
        assert sorted(s.perm) == [0, 1, 2, 3]
        for i, j in enumerate(s.perm):
            total[i, j] += s.weight
    np.testing.assert_array_equal(total, d.padded)
    assert (d.padded >= SLIDES).all()


@settings(max_examples=60, deadline=None)
@given(
    arrays(
        np.int64,
        st.tuples(st.integers(1, 7), st.just(0)).map(lambda t: (t[0], t[0])),
        elements=st.integers(0, 50),
    )
)
def test_decomposition_invariants(m):
    for method in ("bottleneck", "kuhn"):
        d = decompose(m, method)
        p, big = pad_to_line_sum(m)
        assert (p.sum(axis=0) == big).all() and (p.sum(axis=1) == big).all()
        assert d.total_weight == d.line_sum == big
        assert len(d.stages) <= stage_bound(m.shape[0]) or big == 0
        acc = np.zeros_like(m)
        for s in d.stages:
            assert s.weight > 0 and sorted(s.perm) == list(range(m.shape[0]))
            for i, j in enumerate(s.perm):
                acc[i, j] += s.weight
        np.testing.assert_array_equal(acc, d.padded)


def test_bottleneck_uses_fewer_stages_than_fast_method():
    rng = np.random.default_rng(7)
    fewer = 0
    for n in (8, 12, 16):
        m = rng.integers(0, 10000, (n, n))
        np.fill_diagonal(m, 0)
        kuhn = len(decompose(m, "kuhn").stages)
        ours = len(decompose(m, "bottleneck").stages)
        assert ours <= kuhn
        fewer += ours < kuhn
    assert fewer == 3
