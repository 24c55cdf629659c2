"""Birkhoff-von Neumann decomposition of a server-level traffic matrix into incast-free stages.

FLASH §4.2 / FAST: pad the n x n server matrix to equal row and column sums L (the scale-out bound, FLASH
Theorem 1), then repeatedly take a perfect matching of the positive entries, use its smallest entry as the stage
weight and subtract it. Each stage is a (partial, after dropping padding) permutation: every server sends to at
most one server and receives from at most one, all with the same per-GPU amount, so stages are straggler- and
incast-free and the weights sum to exactly L.

Two ways to pick the matchings:

- ``method="kuhn"``: FAST's reference behaviour (its code calls it "hungarian" but it is Kuhn's unweighted
  augmenting-path matching recomputed from scratch every stage). It tends to the n^2 - 2n + 2 stage maximum.
- ``method="bottleneck"`` (default): each stage uses a perfect matching that **maximises its smallest entry**
  (threshold search over the sorted entry values, each threshold tested with Hopcroft-Karp warm-started from the
  previous stage's matching). Heavier stages remove more weight and zero more entries at once, which cuts the
  stage count substantially on skewed matrices (see ``benchmarks/fast_scheduling.py``); minimising the count
  exactly is NP-hard (Dufossé & Uçar 2016, FLASH ref [20]).

Padding fills the largest deficits first on the diagonal (a server "sending to itself" is idle time), then on
pairs that already carry traffic, so it adds as few new support entries as possible (fewer stages).

References: G. Birkhoff, "Three observations on linear algebra", 1946; C.-S. Chang et al., "Birkhoff-von
Neumann input buffered crossbar switches", INFOCOM 2000; FLASH/FAST arXiv 2505.09764 §4.2-4.4.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from a2acc.errors import InternalError

METHODS = ("bottleneck", "kuhn")


class Stage(NamedTuple):
    """One incast-free stage: server ``i`` sends ``weight`` units per GPU to server ``perm[i]``."""

    weight: int
    perm: tuple[int, ...]


@dataclass(frozen=True)
class Decomposition:
    line_sum: int
    stages: tuple[Stage, ...]
    padded: npt.NDArray[np.int64]

    @property
    def total_weight(self) -> int:
        return sum(s.weight for s in self.stages)


def stage_bound(n: int) -> int:
    """Birkhoff's bound on the number of stages for an n x n matrix: n^2 - 2n + 2."""
    return n * n - 2 * n + 2 if n > 1 else 1


def pad_to_line_sum(s: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], int]:
    """Add dummy traffic so every row and column sums to L = max line sum (FAST's scaled doubly-stochastic step)."""
    p = np.array(s, dtype=np.int64, copy=True)
    n = p.shape[0]
    big = int(max(p.sum(axis=1).max(initial=0), p.sum(axis=0).max(initial=0)))
    r = big - p.sum(axis=1)
    c = big - p.sum(axis=0)
    for i in range(n):  # idle time first
        x = min(int(r[i]), int(c[i]))
        if x:
            p[i, i] += x
            r[i] -= x
            c[i] -= x
    # then pairs with existing support, largest deficits first, then anything
    for support_only in (True, False):
        for i in sorted(range(n), key=lambda k: (-int(r[k]), k)):
            if r[i] == 0:
                continue
            for j in sorted(range(n), key=lambda k: (-int(c[k]), k)):
                if r[i] == 0:
                    break
                if c[j] == 0 or (support_only and p[i, j] == 0):
                    continue
                x = min(int(r[i]), int(c[j]))
                p[i, j] += x
                r[i] -= x
                c[j] -= x
    return p, big


def _hopcroft_karp(adj: list[list[int]], n: int, match_r: list[int], match_c: list[int]) -> int:
    """Maximum bipartite matching (rows -> cols) warm-started from ``match_r``/``match_c``; returns its size."""
    inf = 1 << 30
    size = sum(1 for x in match_r if x >= 0)
    while True:
        dist = [inf] * n
        queue = [i for i in range(n) if match_r[i] < 0]
        for i in queue:
            dist[i] = 0
        found = False
        head = 0
        while head < len(queue):
            i = queue[head]
            head += 1
            for j in adj[i]:
                k = match_c[j]
                if k < 0:
                    found = True
                elif dist[k] == inf:
                    dist[k] = dist[i] + 1
                    queue.append(k)
        if not found:
            return size

        for i in range(n):
            if match_r[i] < 0 and _hk_dfs(i, adj, dist, match_r, match_c, inf):
                size += 1


def _hk_dfs(
    i: int, adj: list[list[int]], dist: list[int], match_r: list[int], match_c: list[int], inf: int
) -> bool:
    for j in adj[i]:
        k = match_c[j]
        if k < 0 or (dist[k] == dist[i] + 1 and _hk_dfs(k, adj, dist, match_r, match_c, inf)):
            match_r[i] = j
            match_c[j] = i
            return True
    dist[i] = inf
    return False


def _kuhn_from_scratch(p: npt.NDArray[np.int64]) -> list[int]:
    n = p.shape[0]
    adj = [[j for j in range(n) if p[i, j] > 0] for i in range(n)]
    match_c = [-1] * n

    def try_row(i: int, seen: list[bool]) -> bool:
        for j in adj[i]:
            if not seen[j]:
                seen[j] = True
                if match_c[j] < 0 or try_row(match_c[j], seen):
                    match_c[j] = i
                    return True
        return False

    for i in range(n):
        try_row(i, [False] * n)
    perm = [-1] * n
    for j, i in enumerate(match_c):
        if i >= 0:
            perm[i] = j
    return perm


def _bottleneck_matching(p: npt.NDArray[np.int64], warm: list[int], prev: int = 0) -> tuple[list[int], int]:
    """Perfect matching of positive entries maximising the smallest matched entry; returns (perm, value).

    Subtracting a stage never increases an entry, so the bottleneck value never increases from one stage to the
    next: if the previous value ``prev`` is still feasible it is optimal (one matching attempt), otherwise the
    search runs over the values below it.
    """
    n = p.shape[0]
    vals = np.unique(p[p > 0])
    rows_nz = [np.flatnonzero(p[i] > 0) for i in range(n)]

    def attempt(tau: int) -> list[int] | None:
        adj = [[int(j) for j in rows_nz[i] if p[i, j] >= tau] for i in range(n)]
        match_r = [-1] * n
        match_c = [-1] * n
        for i in range(n):  # warm start with still-valid edges of the previous matching
            j = warm[i] if warm else -1
            if j >= 0 and p[i, j] >= tau and match_c[j] < 0:
                match_r[i] = j
                match_c[j] = i
        if _hopcroft_karp(adj, n, match_r, match_c) == n:
            return match_r
        return None

    # Upper bound: every row and column must keep an entry >= the bottleneck. The result depends only on the
    # final threshold (same warm start, deterministic Hopcroft-Karp), so the search order is free: try the
    # bound first (it is the answer in ~2/3 of stages), gallop downwards, then binary-search the bracket.
    ub = int(min(p.max(axis=1).min(), p.max(axis=0).min()))
    if prev > 0:
        ub = min(ub, prev)  # the bottleneck never increases between stages
    hi = int(np.searchsorted(vals, ub, side="right")) - 1  # index of the largest value <= ub
    fail = hi + 1
    step = 1
    idx = hi
    while True:
        res = attempt(int(vals[idx]))
        if res is not None:
            best, best_v = res, int(vals[idx])
            break
        if idx == 0:  # pragma: no cover - a padded matrix always has a perfect matching (Birkhoff/König)
            raise InternalError("no perfect matching on a padded matrix")
        fail = idx
        idx = max(0, idx - step)
        step *= 2
    lo, top = idx + 1, fail - 1
    while lo <= top:
        mid = (lo + top) // 2
        res = attempt(int(vals[mid]))
        if res is not None:
            best, best_v = res, int(vals[mid])
            lo = mid + 1
        else:
            top = mid - 1
    return best, best_v


def decompose(s: npt.NDArray[np.int64], method: str = "bottleneck") -> Decomposition:
    """Decompose a non-negative integer n x n matrix into weighted permutation stages summing to L."""
    if method not in METHODS:
        raise ValueError(f"unknown Birkhoff method {method!r}; use one of {METHODS}")
    p, big = pad_to_line_sum(np.asarray(s, dtype=np.int64))
    padded = p.copy()
    n = p.shape[0]
    stages: list[Stage] = []
    remaining = big
    warm: list[int] = []
    prev = 0
    while remaining > 0:
        if method == "kuhn":
            perm = _kuhn_from_scratch(p)
        else:
            perm, prev = _bottleneck_matching(p, warm, prev)
        w = int(min(p[i, perm[i]] for i in range(n)))
        for i in range(n):
            p[i, perm[i]] -= w
        remaining -= w
        stages.append(Stage(w, tuple(perm)))
        warm = perm
    return Decomposition(big, tuple(stages), padded)
