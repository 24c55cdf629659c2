"""Shared fixtures and helpers for the a2acc test suite."""

from __future__ import annotations

import numpy as np
import pytest

from a2acc.ir import Buf, Program, ProgramBuilder


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
