"""Chunk sharing by the largest-remainder rule: the vectorised rows are the per-count rule."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.flows.paths import chunk_split, chunk_split_rows


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-2, 5000), min_size=0, max_size=8),
    st.lists(st.one_of(st.just(0.0), st.floats(0, 1e3), st.just(1 / 3)), min_size=0, max_size=40),
)
def test_rows_equal_the_rule_count_by_count(counts, amounts):
    assert chunk_split_rows(counts, amounts) == [chunk_split(c, amounts) for c in counts]


def test_rows_of_equal_weights_break_ties_to_the_first():
    assert chunk_split_rows([10, 2], [1.0, 1.0, 1.0]) == [[4, 3, 3], [1, 1, 0]]
