"""Unit policy: bytes -> chunk counts of one plan-wide unit. Every rule that picks a unit lives here.

A Program is built for a chunk layout. Three policies pick the unit (bytes per chunk):

- :func:`choose_unit` (``a2acc plan``): the busiest rank moves about ``target_chunks`` chunks, fine enough that
  per-pair padding is small and coarse enough to keep plans small;
- :func:`unit_for_padding` (``a2acc compile``): the largest unit whose padding stays within a budget, never so
  fine that the busiest rank needs more chunks than the target executor can address (``max_chunks`` is the
  target's limit, passed in by the target, e.g. MSCCL's int16 offsets);
- :func:`ladder_unit` (the JIT's skew buckets): a power-of-two multiple of ``align`` so the mean pair holds
  about ``pair_chunks`` chunks; the unit changes only when the traffic volume doubles or halves.

:func:`quantize` rounds every entry up to whole chunks; the difference is padding, reported, never hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from a2acc.defaults import AUTO_PADDING as AUTO_PADDING
from a2acc.defaults import DEFAULT_TARGET_CHUNKS as DEFAULT_TARGET_CHUNKS
from a2acc.errors import InputError

DEFAULT_ALIGN = 16
DEFAULT_PAIR_CHUNKS = 32


def _peak(matrix: npt.NDArray[np.int64]) -> int:
    return int(max(matrix.sum(axis=1).max(initial=0), matrix.sum(axis=0).max(initial=0)))


def choose_unit(
    matrix: npt.NDArray[np.int64], target_chunks: int = DEFAULT_TARGET_CHUNKS, align: int = DEFAULT_ALIGN
) -> int:
    """Unit (bytes) so that max(row sum, column sum) is about ``target_chunks`` chunks; a multiple of ``align``."""
    if target_chunks < 1:
        raise InputError("", "target_chunks", target_chunks, "must be >= 1")
    if align < 1:
        raise InputError("", "align", align, "must be >= 1")
    peak = _peak(matrix)
    if peak == 0:
        return align
    unit = -(-peak // target_chunks)
    return int(-(-unit // align) * align)


def quantize(matrix: npt.NDArray[np.int64], unit: int) -> npt.NDArray[np.int64]:
    """Chunk counts ``ceil(bytes / unit)`` per (src, dst) pair."""
    if unit < 1:
        raise InputError("", "unit", unit, "must be >= 1 byte")
    return np.asarray(-(-np.asarray(matrix, dtype=np.int64) // unit), dtype=np.int64)


def padding_bytes(matrix: npt.NDArray[np.int64], counts: npt.NDArray[np.int64], unit: int) -> int:
    return int(counts.sum()) * unit - int(matrix.sum())


def unit_for_padding(
    matrix: npt.NDArray[np.int64],
    max_padding: float = 0.03,
    align: int = DEFAULT_ALIGN,
    max_chunks: int | None = None,
) -> int:
    """Largest unit (multiple of ``align``) whose padding is at most ``max_padding`` of the payload, while the
    busiest rank stays within ``max_chunks`` chunks (the target's addressing limit; None = no limit)."""
    if not 0 < max_padding < 1:
        raise InputError("", "max_padding", max_padding, "must be a fraction in (0, 1)")
    m = np.asarray(matrix, dtype=np.int64)
    total = int(m.sum())
    if total == 0:
        return align
    floor_unit = min_unit(m, max_chunks, align)
    nz = m[m > 0]
    u = max(align, int(max_padding * total / max(len(nz), 1)) // align * align)
    while True:
        pad = int((-(-nz // u) * u - nz).sum())
        if pad <= max_padding * total or u <= align:
            break
        u = max(align, int(u * 0.8) // align * align)
    return max(u, floor_unit)


def peak_chunks(matrix: npt.NDArray[np.int64], unit: int) -> int:
    """Chunks of the busiest rank (largest input or output) after quantising with ``unit``."""
    c = quantize(matrix, unit)
    return int(max(c.sum(axis=1).max(initial=0), c.sum(axis=0).max(initial=0)))


def min_unit(matrix: npt.NDArray[np.int64], max_chunks: int | None, align: int = DEFAULT_ALIGN) -> int:
    """A unit (multiple of ``align``, near the smallest) whose quantised layout keeps every rank within ``max_chunks``
    chunks (each pair rounds up, so bytes / max_chunks alone is not enough). When even one chunk per pair
    exceeds the limit, the unit that gives one chunk per pair is returned and the target refuses it."""
    if max_chunks is None:
        return align
    m = np.asarray(matrix, dtype=np.int64)
    floor = -(-_peak(m) // max_chunks)  # ceil(peak bytes / max_chunks)
    u = max(align, -(-floor // align) * align)
    top = max(align, -(-int(m.max(initial=0)) // align) * align)
    for _ in range(64):
        need = peak_chunks(m, u)
        if need <= max_chunks or u >= top:
            return min(u, top) if need <= max_chunks else top
        u = max(u + align, -(-(u * need // max_chunks) // align) * align)
    return top


def ladder_unit(
    matrix: npt.NDArray[np.int64], pair_chunks: int = DEFAULT_PAIR_CHUNKS, align: int = DEFAULT_ALIGN
) -> int:
    """Power-of-two multiple of ``align`` so the mean non-zero pair holds about ``pair_chunks`` chunks."""
    nz = int(np.count_nonzero(matrix))
    if nz == 0:
        return align
    mean = float(matrix.sum()) / nz
    k = int(np.floor(np.log2(max(mean / (pair_chunks * align), 1.0))))
    return align << k


@dataclass(frozen=True)
class UnitPolicy:
    """How the pipeline picks the unit: an explicit ``unit``; else a padding budget (``max_padding``, a
    fraction, or "auto" for the :data:`AUTO_PADDING` ladder); else ``target_chunks`` per busiest rank."""

    unit: int | None = None
    max_padding: float | str | None = None
    target_chunks: int = DEFAULT_TARGET_CHUNKS

    def candidates(
        self, matrix: npt.NDArray[np.int64], max_chunks: int | None, align: int = DEFAULT_ALIGN
    ) -> list[tuple[str, int]]:
        """Units to try in order, each with a label for messages ("--max-padding 0.05", ...); every unit the
        policy chooses is a multiple of ``align`` (the target's, see :func:`selection_align`)."""
        if self.unit is not None:
            if self.unit < 1:
                raise InputError("", "--unit", self.unit, "must be >= 1 byte")
            return [(f"unit {self.unit} B", self.unit)]
        if self.max_padding is not None:
            if self.max_padding == "auto":
                budgets: tuple[float, ...] = AUTO_PADDING
            elif isinstance(self.max_padding, float) and 0 < self.max_padding < 1:
                budgets = (self.max_padding,)
            else:
                raise InputError(
                    "", "--max-padding", self.max_padding, "a fraction in (0, 1) like 0.03, or auto"
                )
            out: list[tuple[str, int]] = []
            for b in budgets:
                u = unit_for_padding(matrix, b, align=align, max_chunks=max_chunks)
                if all(u != x for _l, x in out):
                    out.append((f"--max-padding {b:g}", u))
            return out
        u = max(choose_unit(matrix, self.target_chunks, align), min_unit(matrix, max_chunks, align))
        return [(f"--target-chunks {self.target_chunks}", u)]


# element sizes of the types a collective call may use (NCCL/RCCL ``ncclDataType_t``; fp8 types are 1 byte)
DTYPE_BYTES = {
    "int8": 1,
    "uint8": 1,
    "float8": 1,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "float32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
}


def selection_align(nranks: int, dtypes: tuple[str, ...], align: int = DEFAULT_ALIGN) -> int:
    """The unit granularity under which a packed all-to-all call of any of ``dtypes`` selects a file by every
    rule the MSCCL executors use: msccl-executor-nccl's ``(count * ngpus) % nchunksperloop``, RCCL's (up to
    2024-10) and msccl-scheduler's ``count % nChunksPerLoop``, RCCL's later ``(count * sizeMultiplier) %
    nChunksPerLoop`` (count = elements per peer). With C chunks of u bytes per rank, count = C * u / (N * s)
    for an element of s bytes, and the strictest rule holds for every C exactly when u is a multiple of N * s:
    the unit is a multiple of ``lcm(align, N * largest element)``."""
    import math

    largest = max((DTYPE_BYTES[d] for d in dtypes), default=1)
    return math.lcm(align, nranks * largest)


def selecting_dtypes(unit: int, nranks: int, dtypes: tuple[str, ...]) -> tuple[str, ...]:
    """The types of ``dtypes`` whose packed call (``unit``-byte chunks) satisfies every selection rule."""
    return tuple(d for d in dtypes if unit % (nranks * DTYPE_BYTES[d]) == 0)
