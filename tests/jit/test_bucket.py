from __future__ import annotations

import numpy as np
import pytest

from a2acc.ir.quantize import ladder_unit as unit_for
from a2acc.jit.bucket import BucketIndex, bucket_key, fit
from a2acc.model.topology import load_topology
from a2acc.model.traffic import moe_stream

TOPO = load_topology("dgx-h100", servers=1)


def test_unit_ladder_is_stable_and_aligned():
    m = np.full((8, 8), 1 << 20, dtype=np.int64)
    u = unit_for(m)
    assert u % 16 == 0 and (u & (u - 1)) == 0
    assert unit_for(m * 1.3) == u  # small volume changes keep the unit
    assert unit_for(m * 4) == 4 * u


def test_fit_accounts_padding_and_overflow():
    lay = np.array([[2, 1], [0, 3]])
    m = np.array([[20, 17], [5, 30]])
    assert fit(lay, m, 10) == (0, 7 + 5)  # capacity [[20, 10], [0, 30]]: 7 and 5 bytes do not fit
    assert fit(lay, np.array([[15, 5], [0, 25]]), 10) == (5 + 5 + 5, 0)


@pytest.mark.parametrize("symmetric", [False, True])
def test_same_sequence_gives_same_buckets_and_hits_after_warmup(symmetric):
    """A drifting MoE stream: both forms hit after warm-up (the canonical one keeps the frame it last used while
    it serves, so noise among similar ranks does not reshuffle the layout)."""
    seq = list(moe_stream(8, 120, 3, tokens=4096))
    a = BucketIndex(TOPO, "fast", "reference", symmetric=symmetric)
    b = BucketIndex(TOPO, "fast", "reference", symmetric=symmetric)
    ka = [a.lookup(m).key for m in seq]
    kb = [b.lookup(m).key for m in seq]
    assert ka == kb
    late = [a.lookup(m) for m in moe_stream(8, 60, 4, tokens=4096)]
    hits = sum(x.hit for x in late[20:]) / len(late[20:])
    assert hits >= 0.8
    assert all(x.padding_fraction <= 0.10 + 1e-9 for x in late if x.hit)


def test_key_changes_with_every_ingredient():
    lay = np.ones((8, 8), dtype=np.int64)
    fp = TOPO.fingerprint
    base = bucket_key(lay, 16, "fast", "reference", fp)
    assert bucket_key(lay, 32, "fast", "reference", fp) != base
    assert bucket_key(lay, 16, "spreadout", "reference", fp) != base
    assert bucket_key(lay, 16, "fast", "msccl-xml", fp) != base
    assert bucket_key(lay, 16, "fast", "reference", load_topology("mi300x", 1).fingerprint) != base
    lay2 = lay.copy()
    lay2[0, 1] = 2
    assert bucket_key(lay2, 16, "fast", "reference", fp) != base
