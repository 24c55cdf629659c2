"""Index arithmetic over CSR segments equals its definition, entry by entry."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from a2acc.segments import segment_indices, segment_positions


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 6)), max_size=12))
def test_positions_and_indices_follow_their_definition(segs):
    starts = [s for s, _c in segs]
    counts = [c for _s, c in segs]
    pos = segment_positions(counts)
    idx = segment_indices(starts, counts)
    assert pos.dtype == np.int64 and idx.dtype == np.int64
    assert pos.tolist() == [j for c in counts for j in range(c)]
    assert idx.tolist() == [s + j for s, c in segs for j in range(c)]


def test_empty_segments_give_empty_arrays():
    assert segment_positions([]).tolist() == [] and segment_indices([], []).tolist() == []
    assert segment_positions(np.zeros(3, dtype=np.int64)).tolist() == []
