"""Counter-based 64-bit hashing with numpy: splitmix64's finaliser, shared by the simulator (order-free
signatures of dependency sets) and the workload generators (random draws addressed by (key, token, slot), so a
token's draw does not depend on which other tokens are drawn with it)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]
#: the golden-ratio increment of splitmix64 (Steele, Lea and Flood, OOPSLA 2014)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def mix64(x: npt.ArrayLike) -> U64:
    """splitmix64's finaliser (Steele, Lea and Flood, OOPSLA 2014): well-spread 64-bit values whose sums
    identify sets of small integers, and whose outputs pass as independent uniform draws for distinct inputs.
    Wrapping arithmetic, the same on every platform."""
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=np.uint64) + GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return np.asarray(z ^ (z >> np.uint64(31)), dtype=np.uint64)


def draws(key: int, index: npt.ArrayLike, slots: int) -> U64:
    """``[len(index), slots]`` 64-bit draws: draw ``j`` of item ``index[i]`` under ``key`` depends on (key,
    index[i], j) alone (two rounds of :func:`mix64`)."""
    idx = np.asarray(index, dtype=np.uint64)
    with np.errstate(over="ignore"):
        base = mix64(np.uint64(key & 0xFFFFFFFFFFFFFFFF) ^ (idx * GOLDEN))
        step = np.arange(1, slots + 1, dtype=np.uint64) * np.uint64(0xD1B54A32D192ED03)
        return mix64(base[:, None] + step[None, :])


def below(bits: U64, bound: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Integers in ``[0, bound)`` from 64-bit draws (the top 32 bits times the bound, Lemire's multiply-shift;
    ``bound`` at most 2**31): exact integer arithmetic, no float rounding at the top of the range."""
    hi = bits >> np.uint64(32)
    with np.errstate(over="ignore"):
        return np.asarray((hi * np.asarray(bound, dtype=np.uint64)) >> np.uint64(32), dtype=np.int64)


def fraction(bits: U64) -> npt.NDArray[np.float64]:
    """Floats in ``[0, 1)`` from 64-bit draws (their top 53 bits)."""
    return np.asarray((bits >> np.uint64(11)).astype(np.float64) * 2.0**-53, dtype=np.float64)
