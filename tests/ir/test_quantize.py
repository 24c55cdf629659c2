"""Unit policy: every rule that turns bytes into chunks, and the target limit it must respect."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.ir.quantize import (
    UnitPolicy,
    choose_unit,
    ladder_unit,
    min_unit,
    peak_chunks,
    quantize,
    unit_for_padding,
)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 12), st.integers(0, 2**31 - 1), st.integers(1, 5000))
def test_min_unit_respects_the_target_limit(n, seed, max_chunks):
    m = np.random.default_rng(seed).integers(0, 1 << 20, size=(n, n))
    u = min_unit(m, max_chunks)
    assert u % 16 == 0
    if int((m > 0).sum(axis=1).max()) <= max_chunks and int((m > 0).sum(axis=0).max()) <= max_chunks:
        assert peak_chunks(m, u) <= max_chunks
    for label, unit in UnitPolicy(max_padding="auto").candidates(m, max_chunks):
        assert label.startswith("--max-padding")
        assert unit >= u


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 10), st.integers(0, 2**31 - 1), st.sampled_from([0.02, 0.05, 0.2]))
def test_padding_budget_is_met_without_a_limit(n, seed, budget):
    m = np.random.default_rng(seed).integers(0, 1 << 22, size=(n, n))
    u = unit_for_padding(m, budget)
    pad = int(quantize(m, u).sum()) * u - int(m.sum())
    assert pad <= budget * int(m.sum()) or u == 16


def test_other_policies():
    m = np.full((4, 4), 1 << 20, dtype=np.int64)
    assert peak_chunks(m, choose_unit(m, 4096)) <= 4096
    assert ladder_unit(m) == ladder_unit(m * 1.3) and ladder_unit(m * 4) == 4 * ladder_unit(m)
    assert UnitPolicy(unit=4096).candidates(m, None) == [("unit 4096 B", 4096)]
