"""Quantisation pass: bytes -> chunk counts of one plan-wide unit.

A Program is built for a chunk layout. ``choose_unit`` picks the unit so that the busiest rank moves about
``target_chunks`` chunks (fine enough that per-pair padding is small, coarse enough to keep plans small) and the
unit is a multiple of ``align`` bytes. ``quantize`` rounds every entry up to whole chunks; the difference is the
padding overhead, reported, never hidden.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from a2acc.errors import InputError

DEFAULT_TARGET_CHUNKS = 4096
DEFAULT_ALIGN = 16


def choose_unit(
    matrix: npt.NDArray[np.int64], target_chunks: int = DEFAULT_TARGET_CHUNKS, align: int = DEFAULT_ALIGN
) -> int:
    """Unit (bytes) so that max(row sum, column sum) is about ``target_chunks`` chunks; a multiple of ``align``."""
    if target_chunks < 1:
        raise InputError("", "target_chunks", target_chunks, "must be >= 1")
    if align < 1:
        raise InputError("", "align", align, "must be >= 1")
    peak = int(max(matrix.sum(axis=1).max(initial=0), matrix.sum(axis=0).max(initial=0)))
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
    max_chunks: int = 32767,
) -> int:
    """Largest unit (multiple of ``align``) whose padding is at most ``max_padding`` of the payload, while the
    busiest rank stays within ``max_chunks`` chunks (MSCCL offsets are int16)."""
    if not 0 < max_padding < 1:
        raise InputError("", "max_padding", max_padding, "must be a fraction in (0, 1)")
    m = np.asarray(matrix, dtype=np.int64)
    total = int(m.sum())
    if total == 0:
        return align
    peak = int(max(m.sum(axis=1).max(), m.sum(axis=0).max()))
    floor_unit = -(-peak // max_chunks)
    floor_unit = -(-floor_unit // align) * align
    nz = m[m > 0]
    u = max(align, int(max_padding * total / max(len(nz), 1)) // align * align)
    while True:
        pad = int((-(-nz // u) * u - nz).sum())
        if pad <= max_padding * total or u <= align:
            break
        u = max(align, int(u * 0.8) // align * align)
    return max(u, floor_unit)
