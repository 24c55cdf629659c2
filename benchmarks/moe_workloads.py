"""The MoE routing workloads the JIT benchmarks share (``jit_workloads.py`` runs them on real processes,
``jit_online.py`` in one process): per call, how many rows each source routes to each expert (one per rank).

- ``balanced``: uniform over experts;
- ``zipf``: Zipf(0.8) popularity over a fixed random order of experts;
- ``rotating``: one hot expert (4x the weight of the others), moving to the next rank every call;
- ``jumping``: one hot expert (4x) at a random rank every call;
- ``bursts``: balanced, with two-call bursts every eight calls where a random expert gets 8x the weight;
- ``layer``: one MoE layer's dispatch and combine, alternating: call 2k routes Zipf(0.8) popularity (a fresh
  draw every dispatch), call 2k + 1 sends the tokens back (the transpose of call 2k's matrix).

Seeded, so every rank (and both benchmarks) draws the same matrix for a call.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

WORKLOADS = ("balanced", "zipf", "rotating", "jumping", "bursts", "layer")


def weights(name: str, i: int, world: int) -> npt.NDArray[np.float64]:
    """Call ``i``'s expert popularity (sums to 1)."""
    p = np.ones(world)
    if name in ("zipf", "layer"):
        p = 1.0 / (1.0 + np.random.default_rng(11).permutation(world)) ** 0.8
    elif name == "rotating":
        p[i % world] = 4.0
    elif name == "jumping":
        p[np.random.default_rng([23, i]).integers(world)] = 4.0
    elif name == "bursts" and i % 8 in (5, 6):
        p[np.random.default_rng([29, i // 8]).integers(world)] = 8.0
    return np.asarray(p / p.sum(), dtype=np.float64)


def rows_of(name: str, i: int, world: int, tokens: int) -> npt.NDArray[np.int64]:
    """Call ``i``'s matrix: row ``s`` holds the rows source ``s`` sends to each expert (``tokens`` per source)."""
    if name == "layer" and i % 2:  # the combine: the dispatch's tokens come back
        return rows_of(name, i - 1, world, tokens).T.copy()
    rng = np.random.default_rng([7, i, WORKLOADS.index(name)])
    p = weights(name, i, world)
    return np.stack([rng.multinomial(tokens, p) for _ in range(world)])
