"""From flows to per-(source, destination) paths, and from byte amounts to whole chunks.

**Peeling** (:func:`peel`): a source's flow is acyclic (the second LP phase minimised it), so it decomposes
into paths, exact up to the solver's rounding residue (edges left with less than ``tol`` bytes, or leading
into a dead end of such residue, are dropped): walk from the source along edges that still carry flow and stop at the first node whose
demand from this source is not yet served; take the bottleneck (or the remaining demand) off every edge of the
walk and the node's demand; repeat. Every peel zeroes an edge or a demand, so a source with E edges of flow
yields at most E + N paths, and the amounts conserve flow exactly up to the tolerance (checked by tests).
Time-stepped flows peel the same way over the time-expanded graph (nodes (v, t); transfer edges
(u, t) -> (v, t + 1); holdover edges (v, t) -> (v, t + 1) carry what waits in a buffer).

**Chunks** (:func:`chunk_split`): a pair's ``counts[s][d]`` chunks are shared over its paths in proportion to
their bytes by the largest-remainder rule; a path that gets no chunk disappears (its bytes go to the others).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt


def peel(
    nnodes: int,
    tail: npt.NDArray[np.int64],
    head: npt.NDArray[np.int64],
    flow: npt.NDArray[np.float64],
    source: int,
    demand: npt.NDArray[np.float64],
    tol: float,
) -> list[tuple[int, list[int], float]]:
    """Paths ``(sink node, edge list, bytes)`` whose sum is ``flow`` and whose sinks receive ``demand``."""
    f = np.array(flow, dtype=np.float64)
    need = np.array(demand, dtype=np.float64)
    out: list[list[int]] = [[] for _ in range(nnodes)]
    for e in np.flatnonzero(f > tol).tolist():
        out[int(tail[e])].append(e)
    ptr = [0] * nnodes
    paths: list[tuple[int, list[int], float]] = []
    total = float(need.sum())
    served = 0.0
    guard = 4 * (len(f) + nnodes) + 16
    while served < total - tol * max(1, len(f)) and guard > 0:
        guard -= 1
        v = source
        walk: list[int] = []
        seen = {v}
        while need[v] <= tol:
            lst = out[v]
            i = ptr[v]
            while i < len(lst) and f[lst[i]] <= tol:
                i += 1
            ptr[v] = i
            if i == len(lst):
                break
            e = lst[i]
            walk.append(e)
            v = int(head[e])
            if v in seen:  # a cycle of rounding residue: drop its closing edge and walk again
                f[e] = 0.0
                break
            seen.add(v)
        if not walk:
            break  # nothing leaves the source any more
        if need[v] <= tol:  # a dead end of rounding residue (or a cycle): drop the last edge, walk again
            f[walk[-1]] = 0.0
            continue
        amount = min(float(need[v]), float(f[walk].min()))
        f[walk] -= amount
        need[v] -= amount
        served += amount
        paths.append((v, walk, amount))
    return paths


def chunk_split(count: int, amounts: Sequence[float]) -> list[int]:
    """``count`` chunks over paths in proportion to ``amounts`` (largest remainder, ties to the first)."""
    a = np.asarray(amounts, dtype=np.float64)
    if count <= 0 or a.size == 0:
        return [0] * len(a)
    if a.sum() <= 0:
        a = np.ones_like(a)
    exact = a / a.sum() * count
    base = np.floor(exact).astype(np.int64)
    rest = count - int(base.sum())
    order = np.argsort(-(exact - base), kind="stable")
    base[order[:rest]] += 1
    return base.tolist()


def chunk_split_rows(counts: Sequence[int], amounts: Sequence[float]) -> list[list[int]]:
    """:func:`chunk_split` of each of ``counts`` over the same ``amounts``, in one vectorised pass: the same
    floats in the same order (the shares are ``amounts / sum``, then times each count), so the same lists."""
    a = np.asarray(amounts, dtype=np.float64)
    rows = len(counts)
    if a.size == 0:
        return [[] for _ in range(rows)]
    if a.sum() <= 0:
        a = np.ones_like(a)
    c = np.asarray(counts, dtype=np.int64).reshape(rows)
    exact = (a / a.sum())[None, :] * c.astype(np.float64)[:, None]
    base = np.floor(exact).astype(np.int64)
    rest = c - base.sum(axis=1)
    order = np.argsort(-(exact - base), axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(a.size), order.shape), axis=1)
    base += rank < rest[:, None]
    base[c <= 0] = 0
    return base.tolist()
