"""Shared fixtures and helpers for the a2acc test suite."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import settings

from a2acc.ir import Buf, Program, ProgramBuilder

# Property tests draw the same examples in every run of `make test` (a failure reproduces; CI cannot fail on a
# draw no one can repeat), with no example database written into the tree. `HYPOTHESIS_PROFILE=explore`
# draws fresh examples (and remembers failures) when hunting for new cases.
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def staged_relay_program(counts: np.ndarray, unit: int = 16) -> Program:
    """A plan with dependencies: every pair is staged through the sender's scratch (copy, then send)."""
    n = counts.shape[0]
    b = ProgramBuilder("relay", "test-relay", counts, unit)
    for s in range(n):
        for d in range(n):
            c = int(counts[s, d])
            if not c:
                continue
            off = b.alloc_scratch(s, c)
            a = b.add((s, Buf.INPUT, int(b.in_off[s, d])), (s, Buf.SCRATCH, off), c, link="local")
            b.add((s, Buf.SCRATCH, off), (d, Buf.OUTPUT, int(b.out_off[d, s])), c, deps=[a], stage=1)
    return b.build()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
