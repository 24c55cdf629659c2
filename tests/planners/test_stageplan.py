"""The compiled stage-plan core and the pure-Python reference give identical results."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.model.traffic import generate
from a2acc.planners.stageplan import native_available, stage_plan, stage_plan_from_bytes


def test_native_core_was_built():
    # the build machine and CI have a C compiler; without one a2acc falls back to Python (same results)
    assert native_available()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 6),
    m=st.integers(1, 4),
    seed=st.integers(0, 10_000),
    method=st.sampled_from(["bottleneck", "kuhn"]),
    balance=st.sampled_from(["auto", "always", "never"]),
    sparsity=st.floats(0, 0.9),
)
def test_native_equals_python(n, m, seed, method, balance, sparsity):
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 50, (n * m, n * m)) * (rng.random((n * m, n * m)) >= sparsity)
    args = (c.astype(np.int64), m, method, balance, 4096, 50.0, 450.0, 1e-6)
    a = stage_plan(*args, native=True)
    b = stage_plan(*args, native=False)
    np.testing.assert_array_equal(a.server, b.server)
    np.testing.assert_array_equal(a.balanced, b.balanced)
    assert a.decomposition.line_sum == b.decomposition.line_sum
    assert a.decomposition.stages == b.decomposition.stages
    np.testing.assert_array_equal(a.decomposition.padded, b.decomposition.padded)


@pytest.mark.parametrize("servers", [4, 12])
def test_native_on_zipf(servers):
    c = generate("zipf", servers * 8, 1 << 20, 3) // 256
    a = stage_plan(c, 8, native=True, unit=256, b_inter=50, b_intra=450, alpha=7e-7)
    b = stage_plan(c, 8, native=False, unit=256, b_inter=50, b_intra=450, alpha=7e-7)
    assert a.decomposition.stages == b.decomposition.stages


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 5),
    m=st.integers(1, 4),
    seed=st.integers(0, 10_000),
    target=st.sampled_from([1, 7, 64, 4096]),
)
def test_bytes_entry_point_quantises_like_python(n, m, seed, target):
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 1 << 30, (n * m, n * m)).astype(np.int64)
    ua, a = stage_plan_from_bytes(
        b, m, target_chunks=target, native=True, b_inter=50, b_intra=450, alpha=1e-6
    )
    ub, c = stage_plan_from_bytes(
        b, m, target_chunks=target, native=False, b_inter=50, b_intra=450, alpha=1e-6
    )
    assert ua == ub
    np.testing.assert_array_equal(a.server, c.server)
    assert a.decomposition.stages == c.decomposition.stages
