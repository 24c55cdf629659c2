"""FAST's stage plan: matrix in -> balancing decisions, server matrix and Birkhoff stages out.

This is the part of FAST that must be fast (it runs on every all-to-all when traffic changes); building the
full IR Program from it is separate (:mod:`a2acc.planners.fast`). Two implementations with identical results:

- the compiled core ``a2acc._stageplan`` (``compiler/native/stageplan.c``), used when it was built;
- :func:`stage_plan_py`, the pure-Python reference (same iteration orders and float expressions).

``tests/planners/test_stageplan.py`` checks they agree on random matrices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from a2acc.native import stageplan as _native
from a2acc.planners.birkhoff import METHODS, Decomposition, Stage, decompose

BALANCE_MODES = ("auto", "always", "never")


def native_available() -> bool:
    return _native is not None


@dataclass(frozen=True)
class StagePlan:
    server: npt.NDArray[np.int64]  # per-GPU load of each server pair after (optional) balancing
    balanced: npt.NDArray[np.bool_]  # which (A, B) tiles are balanced
    decomposition: Decomposition


def _balance_pays(
    excess: int, moved_max: int, unit: int, b_inter: float, b_intra: float, alpha: float
) -> bool:
    """Balancing pays when the scale-out seconds it saves exceed the scale-up seconds it costs."""
    if b_inter <= 0:
        return False
    saved = float(excess * unit) / (b_inter * 1e9)
    cost = alpha + float(moved_max * unit) / (b_intra * 1e9) if b_intra > 0 else float("inf")
    return saved > cost


def tile_shares(load: list[int]) -> list[int]:
    """Equal shares of a tile's total; the +1 remainders go to the most loaded GPUs (less to move)."""
    m = len(load)
    total = sum(load)
    base, extra = divmod(total, m)
    order = sorted(range(m), key=lambda k: (-load[k], k))
    share = [base] * m
    for k in order[:extra]:
        share[k] += 1
    return share


def stage_plan_py(
    counts: npt.NDArray[np.int64],
    m: int,
    method: str,
    balance: str,
    unit: int,
    b_inter: float,
    b_intra: float,
    alpha: float,
) -> StagePlan:
    n_ranks = counts.shape[0]
    n = n_ranks // m
    server = np.zeros((n, n), dtype=np.int64)
    balanced = np.zeros((n, n), dtype=bool)
    tiles = counts.reshape(n, m, n, m)
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            load = [int(x) for x in tiles[a, :, b, :].sum(axis=1)]
            if sum(load) == 0:
                continue
            share = tile_shares(load)
            excess = max(load) - max(share)
            moved_max = max(abs(load[k] - share[k]) for k in range(m))
            do = balance == "always" or (
                balance == "auto"
                and excess > 0
                and _balance_pays(excess, moved_max, unit, b_inter, b_intra, alpha)
            )
            if do and excess > 0:
                balanced[a, b] = True
                server[a, b] = max(share)
            else:
                server[a, b] = max(load)
    dec = decompose(server, method) if n > 1 else Decomposition(0, (), server.copy())
    return StagePlan(server, balanced, dec)


def stage_plan(
    counts: npt.NDArray[np.int64],
    m: int,
    method: str = "bottleneck",
    balance: str = "auto",
    unit: int = 1,
    b_inter: float = 1.0,
    b_intra: float = 1.0,
    alpha: float = 0.0,
    *,
    native: bool | None = None,
) -> StagePlan:
    """Compute FAST's stage plan (see module docstring). ``native=None`` uses the C core when available."""
    if method not in METHODS:
        raise ValueError(f"unknown Birkhoff method {method!r}")
    if balance not in BALANCE_MODES:
        raise ValueError(f"unknown balance mode {balance!r}")
    use_native = _native is not None if native is None else native
    if not use_native or _native is None:
        return stage_plan_py(counts, m, method, balance, unit, b_inter, b_intra, alpha)
    c = np.ascontiguousarray(counts, dtype=np.int64)
    n_ranks = c.shape[0]
    raw = _native.stage_plan(
        c,
        n_ranks,
        m,
        METHODS.index(method),
        BALANCE_MODES.index(balance),
        int(unit),
        float(b_inter),
        float(b_intra),
        float(alpha),
    )
    return _wrap(raw, n_ranks // m)


def _wrap(raw: tuple[bytes, bytes, int, bytes, list[tuple[int, tuple[int, ...]]]], n: int) -> StagePlan:
    srv, bal, big, padded, stages = raw
    server = np.frombuffer(srv, dtype=np.int64).reshape(n, n)  # read-only views over the returned bytes
    balanced = np.frombuffer(bal, dtype=np.bool_).reshape(n, n)
    pad = np.frombuffer(padded, dtype=np.int64).reshape(n, n)
    return StagePlan(server, balanced, Decomposition(big, tuple(map(Stage._make, stages)), pad))


def stage_plan_from_bytes(
    matrix: npt.NDArray[np.int64],
    m: int,
    method: str = "bottleneck",
    balance: str = "auto",
    target_chunks: int = 4096,
    align: int = 16,
    b_inter: float = 1.0,
    b_intra: float = 1.0,
    alpha: float = 0.0,
    *,
    native: bool | None = None,
) -> tuple[int, StagePlan]:
    """Bytes in -> (unit, stage plan): quantisation as :func:`a2acc.ir.quantize.choose_unit` + ``quantize``."""
    use_native = _native is not None if native is None else native
    if not use_native or _native is None:
        from a2acc.ir.quantize import choose_unit, quantize

        unit = choose_unit(matrix, target_chunks, align)
        return unit, stage_plan_py(quantize(matrix, unit), m, method, balance, unit, b_inter, b_intra, alpha)
    b = (
        matrix
        if (matrix.dtype == np.int64 and matrix.flags.c_contiguous)
        else np.ascontiguousarray(matrix, np.int64)
    )
    unit, raw = _native.stage_plan_bytes(
        b,
        b.shape[0],
        m,
        METHODS.index(method),
        BALANCE_MODES.index(balance),
        int(target_chunks),
        int(align),
        float(b_inter),
        float(b_intra),
        float(alpha),
    )
    return unit, _wrap(raw, b.shape[0] // m)
