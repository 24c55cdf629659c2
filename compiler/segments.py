"""Index arithmetic over the segments of a flat array (CSR layout: segment ``i`` holds ``counts[i]`` entries,
back to back), vectorised with numpy: the expansions the planners, the verifier and the simulator share."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def segment_positions(counts: npt.ArrayLike) -> I64:
    """Every entry's position within its segment, for segments of lengths ``counts``: ``[2, 3] -> [0, 1, 0, 1,
    2]``."""
    c = np.asarray(counts, dtype=np.int64)
    return np.arange(int(c.sum()), dtype=np.int64) - np.repeat(np.cumsum(c) - c, c)


def segment_indices(starts: npt.ArrayLike, counts: npt.ArrayLike) -> I64:
    """The indices ``starts[i], ..., starts[i] + counts[i] - 1`` of every segment, concatenated: ``([5, 1], [2,
    3]) -> [5, 6, 1, 2, 3]`` (gathering segments of another array)."""
    c = np.asarray(counts, dtype=np.int64)
    return np.repeat(np.asarray(starts, dtype=np.int64), c) + segment_positions(c)
