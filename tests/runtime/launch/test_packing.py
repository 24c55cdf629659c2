"""Pack/unpack of a caller's tensors per a manifest (the JIT's code), and the offline example that uses it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.errors import InputError
from a2acc.ir.layout import ChunkLayout, fitting_rows, manifest_for
from a2acc.runtime.launch.packing import LayoutCall, ManifestCall

torch = pytest.importorskip("torch")
EXAMPLE = Path(__file__).parents[3] / "examples" / "offline_pack_gloo.py"


def _manifest(rows: np.ndarray, row_bytes: int, unit: int):
    counts = -(-(rows * row_bytes) // unit)
    return manifest_for(counts, unit, rows * row_bytes, target="msccl-xml", file="x.xml", algo_name="x")


def _run_layout(man, packed):
    """What any plan for the layout does: region (s -> d) of s's input to region (from s) of d's output."""
    n, u, lay = man.ngpus, man.chunk_bytes, man.chunk_layout
    outs = [torch.zeros(man.buffer_bytes, dtype=torch.uint8) for _ in range(n)]
    for s in range(n):
        for d in range(n):
            k = int(lay.counts[s, d]) * u
            a, b = int(lay.in_off[s, d]) * u, int(lay.out_off[d, s]) * u
            outs[d][b : b + k] = packed[s][a : a + k]
    return outs


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(0, 2**31 - 1),
    st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.uint8]),
    st.sampled_from([16, 48, 256]),
)
def test_pack_executor_unpack_is_all_to_all_single(n, seed, dtype, unit):
    rng = np.random.default_rng(seed)
    hidden = int(rng.integers(1, 5))
    rows = rng.integers(0, 6, size=(n, n))
    elem = torch.empty(0, dtype=dtype).element_size()
    man = _manifest(rows, hidden * elem, unit)
    inputs = [torch.randint(0, 100, (int(rows[r].sum()), hidden)).to(dtype) for r in range(n)]
    packed = [ManifestCall(man, r).pack(inputs[r], rows[r].tolist()) for r in range(n)]
    assert all(p.numel() == man.buffer_bytes and p.dtype == torch.uint8 for p in packed)
    recv = _run_layout(man, packed)
    for d in range(n):
        out = torch.empty(int(rows[:, d].sum()), hidden, dtype=dtype)
        ManifestCall(man, d).unpack(recv[d], out, rows[:, d].tolist())
        want = torch.cat([inputs[s][int(rows[s, :d].sum()) : int(rows[s, : d + 1].sum())] for s in range(n)])
        assert torch.equal(out.view(torch.uint8), want.view(torch.uint8))


def test_splits_beyond_the_layout_are_refused_before_any_copy():
    rows = np.array([[2, 3], [1, 4]])
    man = _manifest(rows, 8, 16)
    call = ManifestCall(man, 0)
    x = torch.zeros(6, 2, dtype=torch.float32)  # 8 bytes per row
    with pytest.raises(InputError, match="exceed its 16-byte chunks"):
        call.pack(x, [1, 5])  # peer 1 gets 5 rows = 40 B > 2 chunks of 16 B
    with pytest.raises(InputError, match="summing to the tensor's 6 rows"):
        call.pack(x, [1, 1])
    with pytest.raises(InputError, match="exactly"):
        call.pack(torch.zeros(5, 2), [2, 3], out=torch.empty(3, dtype=torch.uint8))
    with pytest.raises(InputError, match="ranks 0..1"):
        ManifestCall(man, 2).pack(torch.zeros(5, 2), [2, 3])


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 6), st.integers(0, 2**31 - 1))
def test_relabelled_layout_packs_each_peer_into_its_canonical_region(n, seed):
    """With ``ranks`` (rank ranks[c] plays layout rank c), a peer's rows go to its canonical region and come back
    from the source's canonical region: the numpy and torch forms agree, and residual rows are left out."""
    from a2acc.ir.layout import pack

    rng = np.random.default_rng(seed)
    ranks = rng.permutation(n)
    rows = rng.integers(0, 5, size=(n, n))
    counts = rng.integers(0, 4, size=(n, n))  # in layout (canonical) order
    lay = ChunkLayout.of(counts)
    r = int(rng.integers(n))
    src = rng.integers(0, 256, size=int(rows[r].sum()) * 8, dtype=np.uint8)
    want = pack(lay, src, rows, 8, 16, r, ranks)
    call = LayoutCall(lay, 16, r, ranks)
    seg = call.send_segments(rows[r], 8)
    got = np.zeros_like(want)
    for a, b, k in seg:
        got[b : b + k] = src[a : a + k]
    assert np.array_equal(got, want)
    fit = fitting_rows(counts, rows, 8, 16, ranks)
    inv = np.argsort(ranks)
    assert (fit <= (counts[np.ix_(inv, inv)] * 16) // 8).all() and (fit <= rows).all()
    assert seg.total == int(fit[r].sum()) * 8


@pytest.mark.slow
def test_offline_example_runs_byte_identical(tmp_path):
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "(verified)" in out.stdout and ": OK" in out.stdout
    assert "byte-identical to torch's all_to_all_single on all 4 ranks" in out.stdout
    assert "'dtype': 'torch.uint8'" in out.stdout
