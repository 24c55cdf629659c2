"""One chunk layout: offsets, buffer size, pack/unpack (property-tested against a plain all-to-all-v)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.errors import PlanFormatError
from a2acc.ir.layout import ChunkLayout, fitting_rows, manifest_for, manifest_from_json, pack, unpack


def test_offsets_are_the_contiguous_alltoallv_layout():
    lay = ChunkLayout.of([[1, 2, 0], [3, 0, 1], [0, 4, 2]])
    assert lay.in_off.tolist() == [[0, 1, 3], [0, 3, 3], [0, 0, 4]]
    assert lay.out_off.tolist() == [[0, 1, 4], [0, 2, 2], [0, 0, 1]]
    assert lay.buffer_chunks == 3 * 2  # need 6 (rank 1 receives 6) -> 3 * ceil(6 / 3)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(0, 2**31 - 1), st.sampled_from([1, 3, 16]), st.sampled_from([16, 48]))
def test_pack_run_unpack_equals_alltoallv(n, seed, row_bytes, unit):
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, 6, size=(n, n))
    # a layout that fits most pairs and truncates some (the residual rows are left out of pack/unpack)
    need = -(-(rows * row_bytes) // unit)
    counts = np.maximum(need - rng.integers(0, 2, size=(n, n)), 0)
    lay = ChunkLayout.of(counts)
    fit = fitting_rows(counts, rows, row_bytes, unit)
    data = [rng.integers(0, 256, size=int(rows[r].sum()) * row_bytes, dtype=np.uint8) for r in range(n)]
    packed = [pack(lay, data[r], rows, row_bytes, unit, r) for r in range(n)]
    # what any correct plan does: move region (s -> d) of s's input to region (from s) of d's output
    outs = [np.zeros(lay.output_chunks(r) * unit, dtype=np.uint8) for r in range(n)]
    for s in range(n):
        for d in range(n):
            nb = int(counts[s, d]) * unit
            a, b = int(lay.in_off[s, d]) * unit, int(lay.out_off[d, s]) * unit
            outs[d][b : b + nb] = packed[s][a : a + nb]
    for d in range(n):
        got = unpack(lay, outs[d], rows, row_bytes, unit, d)
        at = 0
        for s in range(n):
            src_off = int(rows[s, :d].sum()) * row_bytes
            k = int(fit[s, d]) * row_bytes
            assert (got[at : at + k] == data[s][src_off : src_off + k]).all()
            at += int(rows[s, d]) * row_bytes


def test_manifest_round_trip_and_tampered_offsets_are_refused():
    counts = np.array([[1, 2], [3, 4]], dtype=np.int64)
    man = manifest_for(counts, 64, counts * 60, target="msccl-xml", file="x.xml", algo_name="x")
    back = manifest_from_json(man.to_json())
    assert back.counts == man.counts and back.chunk_bytes == 64 and back.buffer_chunks == man.buffer_chunks
    bad = man.to_json().replace('"input": [\n    [\n     0,', '"input": [\n    [\n     1,', 1)
    assert bad != man.to_json()
    with pytest.raises(PlanFormatError, match="contiguous layout"):
        manifest_from_json(bad)
