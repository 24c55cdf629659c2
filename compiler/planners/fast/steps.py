"""FAST's network steps: Birkhoff stages ordered, folded and split (:func:`order_steps`), then grouped.

A step is one permutation of servers (:class:`Step`); steps run one after another, synchronised pairwise, which
keeps every receiver incast-free (FLASH §4.2). A *group* of consecutive steps runs concurrently instead
(:func:`group_ends`): each server then sends to several servers at once - fewer per-step costs (a message's
software cost, a rendezvous) for fan-in at the receivers. Which grouping is fastest depends on the fabric's
costs; :mod:`a2acc.planners.fast.search` asks the simulator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from a2acc.model.topology import Topology
from a2acc.planners.birkhoff import Stage


class Step(NamedTuple):
    """One network step: server ``a`` sends up to ``caps[a]`` chunks per GPU to server ``perm[a]``."""

    perm: tuple[int, ...]
    caps: tuple[int, ...]


#: a stage is folded into another one carrying the same server pairs when its transfer takes at most this many
#: link latencies (the per-step cost it saves); the last step is split while its redistribution after the last
#: network byte would take more than this many link latencies (each split costs one)
FOLD_LATENCIES = 2.0
SPLIT_LATENCIES = 4.0
MAX_TAIL_SPLITS = 3


def _step_costs(topo: Topology) -> tuple[float, float]:
    """(latency of one scale-out transfer in seconds, redistribution time per second of scale-out transfer).

    The second is the worst case, a whole step's data landing on the wrong GPU and destined to one peer: a
    GPU's scale-out share over one scale-up path (on a switch, the GPU's port; on a mesh, one link). 0 on
    direct-connect graphs, where nothing is redistributed."""
    s = topo.summary()
    if topo.inter is not None:
        alpha = topo.inter.latency * 1e-6
    elif topo.direct is not None:
        alpha = topo.direct.latency * 1e-6
    else:  # pragma: no cover - a topology has an inter tier or a direct graph
        alpha = 0.0
    r = s.b_inter / s.b_intra_link if s.m > 1 and s.b_intra_link > 0 else 0.0
    return alpha, r


def order_steps(
    stages: list[Stage],
    server: npt.NDArray[np.int64],
    t_chunk: float,
    alpha: float,
    r: float,
    own: npt.NDArray[np.int64] | None = None,
    load: npt.NDArray[np.int64] | None = None,
) -> list[Step]:
    """Turn Birkhoff stages into network steps: order, fold tiny stages, split the last step.

    **Order: heaviest first.** FAST runs stages in ascending weight (arXiv 2505.09764 §4.3, Theorem 2): in its
    pipeline a stage starts only when the previous stage's redistribution has finished, and ascending weights
    keep every redistribution shorter than the next transfer. Here steps are synchronised pairwise and a
    redistribution never delays a later transfer (the scale-up fabric runs it beside the next steps), so the
    only redistribution that costs time is the one after the last network byte - the last step's. Ascending
    order makes that the heaviest stage (measured: 1.5-4 % of the bound on dgx-h100 4x8 and 8x8); descending
    order makes it the lightest.

    **Folding.** Every step costs one link latency on the busiest server's path (its sends are chained), so a
    stage whose transfer is shorter than :data:`FOLD_LATENCIES` latencies is dissolved: each server pair of it
    that also appears in an earlier step (not the first, see below) sends its share there instead (the
    pair's total is unchanged; the step becomes uneven, which pairwise synchronisation tolerates). Pairs found
    nowhere else keep the step. Folding more (4-16 latencies) was measured no better on dgx-h100 8x8 Zipf(0.8): the
    uneven steps delay the partners of the grown pairs, and the delays add up along the step chains.

    **First step.** Balancing (§4.1) moves data between the GPUs of a server before it can leave, so the first
    step is the heaviest one every GPU can serve from its own input (``own`` per sender server, receiver
    server and GPU, ``load`` the whole bundle); failing that, the one needing the least balanced-in data. On dgx-h100
    8x8 Zipf(0.8) a heavy first step waited for balancing up to 1.4 % of the bound.

    **Tail split.** When the last step's redistribution (``r`` x its transfer time, worst case) would still
    exceed :data:`SPLIT_LATENCIES` latencies, the step is cut in two steps with the same permutation, the
    second holding a fraction r/(1+r): its transfer then hides the first part's redistribution, and only its
    own small redistribution is left after the last network byte. Repeated at most :data:`MAX_TAIL_SPLITS` times.

    Deterministic: stable sort over the decomposition order, fixed scans, integer weights.
    """
    ordered = sorted(stages, key=lambda st: -st.weight)
    if own is not None and load is not None and len(ordered) > 1:
        ordered.insert(0, ordered.pop(_first_step(ordered, server.shape[0], own, load)))
    steps = _fold(ordered, server > 0, t_chunk, alpha)
    return _split_tail(steps, t_chunk, alpha, r)


def _first_step(ordered: list[Stage], n: int, own: npt.NDArray[np.int64], load: npt.NDArray[np.int64]) -> int:
    """Index into ``ordered`` (heaviest first) of the first step: the heaviest whose GPUs can send their share
    from their own input (balancing runs meanwhile); failing that, the one that needs the least balanced-in
    data. All steps at once: ``starve[k]``, the most balanced-in data a GPU needs before step ``k`` can send
    (0 if none)."""
    rows = np.arange(n)
    perm = np.array([st.perm for st in ordered], dtype=np.int64)  # [steps, n]
    weight = np.array([st.weight for st in ordered], dtype=np.int64)
    need = np.minimum(load[rows, perm], weight[:, None, None]) - own[rows, perm]  # [steps, n, m]
    need[perm == rows] = 0  # servers that keep their data this step wait for nothing
    starve = np.maximum(need.reshape(len(ordered), -1).max(axis=1, initial=0), 0)
    return int(np.argmin(starve))  # the first of the least starved, as min() over (starve, k)


def _fold(ordered: list[Stage], real: npt.NDArray[np.bool_], t_chunk: float, alpha: float) -> list[Step]:
    """The stages as steps (a server keeping its data sends nothing), the light tail folded: from the lightest
    up, while a stage's transfer takes at most :data:`FOLD_LATENCIES` latencies, each of its real server pairs
    that also appears in an earlier step (not the first) sends its share there; a stage keeps its step only
    for the pairs found nowhere else. ``real``: the server matrix's non-zero entries."""
    n = real.shape[0]
    perms = [st.perm for st in ordered]
    caps = [[st.weight if st.perm[a] != a else 0 for a in range(n)] for st in ordered]
    keep = [True] * len(ordered)
    if alpha > 0 and t_chunk > 0:
        for k in range(len(ordered) - 1, 0, -1):
            if ordered[k].weight * t_chunk > FOLD_LATENCIES * alpha:
                break  # descending: every earlier stage is heavier
            stuck = False
            for a in range(n):
                b = perms[k][a]
                if caps[k][a] == 0 or not real[a, b]:
                    continue
                host = next((j for j in range(1, k) if keep[j] and perms[j][a] == b), -1)
                if host < 0:
                    stuck = True
                    continue
                caps[host][a] += caps[k][a]
                caps[k][a] = 0
            keep[k] = stuck
    return [Step(perms[k], tuple(caps[k])) for k in range(len(ordered)) if keep[k]]


def _split_tail(steps: list[Step], t_chunk: float, alpha: float, r: float) -> list[Step]:
    """Cut the last step in two (same permutation, the second holding r/(1+r)) while its redistribution would
    take more than :data:`SPLIT_LATENCIES` latencies, at most :data:`MAX_TAIL_SPLITS` times (in place)."""
    for _ in range(MAX_TAIL_SPLITS):
        if not steps or r <= 0 or r * max(steps[-1].caps) * t_chunk <= SPLIT_LATENCIES * alpha:
            break
        last = steps.pop()
        tail = tuple(min(c - 1, math.ceil(c * r / (1 + r))) if c > 1 else 0 for c in last.caps)
        steps.append(Step(last.perm, tuple(c - x for c, x in zip(last.caps, tail))))
        steps.append(Step(last.perm, tail))
    return steps


def group_ends(steps: list[Step], groups: int | None, weights: Sequence[int] | None = None) -> list[bool]:
    """Which steps close a group when the steps run as ``groups`` concurrent groups (None: every step its own,
    FAST's sequence). Groups are contiguous runs of roughly equal weight (a step's weight is its largest cap;
    ``weights`` when the caller has them), so each carries a similar share of the scale-out time."""
    k = len(steps)
    if groups is None or groups >= k:
        return [True] * k
    w = np.array(weights if weights is not None else [max(st.caps) for st in steps], dtype=np.float64)
    before = np.concatenate([[0.0], np.cumsum(w)[:-1]])
    total = float(w.sum())
    gid = (
        np.minimum((before * groups / total).astype(np.int64), groups - 1)
        if total > 0
        else np.zeros(k, np.int64)
    )
    return [bool(i == k - 1 or gid[i + 1] != gid[i]) for i in range(k)]
