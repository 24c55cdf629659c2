"""Routed flows to a timed store-and-forward schedule on a direct-connect graph.

The flow (:mod:`.mcf`, :mod:`.scale`) says how many bytes each path carries; a Program moves them as ops, each
a run of chunks over one link, relayed through scratch. Where the time above the flow's optimum ``T`` goes, and
what this module does about it (measured on 64-GPU tori, hypercubes and GenKautz graphs, ``benchmarks/mcf.py``):

- **Latency per op.** The simulator (and an executor) pays the link latency ``alpha`` between an op's
  dependencies ending and its first byte. One op at a time per link would idle the link ``alpha`` before every
  op (8-9 % of ``T`` with 60-80 ops per link). Each link therefore has ``window`` *slots*: an op holds one from
  its assignment to its end, so the next op's latency runs while others stream. A link also admits beyond its
  slots while the bytes in flight are under ``inflight`` (two bandwidth-delay products), so tiny pieces do not
  starve it.
- **Fill and drain.** A relay can forward only what has arrived. Pieces are cut from each path's chunks with
  sizes 1, 2, 4, ... chunks up to ``piece_bytes`` and back down at the end (:func:`cut_pieces`), so every path
  reaches its relays within a few chunk times, and the last bytes of every path cross their hops quickly.
- **Order.** When a slot frees, the link takes its ready op of lowest *key*. Keys follow the fluid schedule
  (:func:`fluid_keys`): the LP streams every path at a steady rate during ``[0, T]``, so a piece is due at its
  share of the path's bytes, one piece-share later per hop (the slot pipeline of that path). Serving the
  longest remaining route first instead starves the links that carry last hops (1.35x ``T`` on GenKautz 64).
- **Forward-backward improvement** (:func:`improve`; the justification technique of project scheduling, Valls
  et al. 2005): the reversed instance (pieces travel their paths backwards in time) is list-scheduled with the
  forward ends as keys, latest first; its starts, read forwards, become the next forward keys. Every pass is
  simulated, the best is kept.

:func:`list_schedule` runs the simulator's ideal model of a direct-connect link (:mod:`a2acc.analysis.fastsim`:
an op waits ``alpha``, then streams; the ops streaming on a link share it equally), so its makespan is what the
simulator reports for the Program built from it (tested). Each op depends on its piece's previous hop and on
the op whose end admitted it, which reproduces the schedule exactly. It runs in the compiled core
``a2acc._listsched`` (``compiler/native/listsched.c``) when that was built: the same operations in the same
order, so the same schedule as the Python loop, the reference (tested on random instances, reversed ones
included).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from a2acc.native import carray
from a2acc.native import listsched as _native_listsched
from a2acc.segments import segment_indices, segment_positions

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: scheduling hop-passes allowed in all: every window and both forward-backward rounds (7 passes) up to 9.1 M
#: hops; 3 passes (window 3, one round) up to 21 M. A hop-pass of the compiled scheduler costs ~0.4 us at 64 GPUs
#: but ~4 us at 17.6 M hops (a 16x8x8 torus; measured on a 2-core machine): the hops in flight are spread over
#: arrays of GBs and nearly every access misses the cache. 64 M hop-passes keep the schedule near 4 minutes at
#: that size, inside the planner's 15-minute goal at 1024 GPUs. The passes depend only on the hop count, never
#: on which one runs, so plans are the same with or without a C compiler.
PASS_BUDGET = 64_000_000
#: slot counts tried per link (the planner keeps the best), and forward-backward rounds
WINDOWS = (2, 3, 4)
ROUNDS = 2


@dataclass(frozen=True)
class Pieces:
    """Pieces of routes: piece ``p`` carries chunks ``[off[p], off[p] + cnt[p])`` of route ``route[p]`` over the
    route's edges ``hop_edge[hop_ptr[p]:hop_ptr[p + 1]]``; ``done[p]`` is the fraction of the route's chunks up
    to the piece's end and ``share[p]`` the piece's own fraction."""

    route: I64
    off: I64
    cnt: I64
    hop_ptr: I64
    hop_edge: I64
    done: F64
    share: F64

    @property
    def nhops(self) -> int:
        return int(self.hop_edge.shape[0])


@dataclass(frozen=True)
class Timed:
    """A list schedule: hops in the order they were admitted (a topological order of the resulting DAG), the
    op whose end admitted each hop (-1: admitted at time 0), admission and end times under the model."""

    order: I64
    after: I64
    ready: F64
    end: F64
    window: int = 0
    passes: int = 1

    @property
    def makespan(self) -> float:
        return float(self.end.max()) if len(self.end) else 0.0


def ramp(chunks: int, mid: int) -> list[int]:
    """Piece sizes (chunks) of a route: 1, 2, 4, ... below ``mid``, then pieces of about ``mid``, then the head
    sizes mirrored, as long as the route is long enough to hold both ramps and one middle piece."""
    head: list[int] = []
    p, left = 1, chunks
    while p < mid and left >= 2 * p + mid:
        head.append(p)
        left -= 2 * p
        p *= 2
    k = max(1, -(-left // mid))
    middle = [left // k + (1 if i < left % k else 0) for i in range(k)]
    return head + middle + head[::-1]


def cut_pieces(route_chunks: I64, route_ptr: I64, route_edges: I64, mid: int) -> Pieces:
    """Cut every route into :func:`ramp` pieces of about ``mid`` chunks (routes of at most ``mid`` chunks stay
    whole, without a Python loop)."""
    c = np.asarray(route_chunks, dtype=np.int64)
    nr = len(c)
    npieces = np.ones(nr, dtype=np.int64)
    big = np.flatnonzero(c > mid)
    sizes_big = [ramp(int(c[r]), mid) for r in big.tolist()]
    npieces[big] = [len(s) for s in sizes_big]
    route = np.repeat(np.arange(nr, dtype=np.int64), npieces)
    cnt = c[route].copy()
    first = np.concatenate([[0], np.cumsum(npieces)[:-1]]).astype(np.int64)
    if len(big):
        pos = np.concatenate([first[r] + np.arange(len(s)) for r, s in zip(big.tolist(), sizes_big)])
        cnt[pos] = np.concatenate([np.asarray(s, dtype=np.int64) for s in sizes_big])
    end = np.cumsum(cnt) - np.repeat(np.cumsum(c) - c, npieces)
    return route_pieces(route, end - cnt, cnt, c, route_ptr, route_edges)


def route_pieces(
    route: I64, off: I64, cnt: I64, route_chunks: I64, route_ptr: I64, route_edges: I64
) -> Pieces:
    """The :class:`Pieces` whose piece ``p`` carries chunks ``[off[p], off[p] + cnt[p])`` of route ``route[p]``
    (pieces of a route consecutive, in chunk order): each piece's hops are its route's edges."""
    hops = np.diff(route_ptr)[route]
    hop_ptr = np.concatenate([[0], np.cumsum(hops)]).astype(np.int64)
    edges = route_edges[segment_indices(route_ptr[:-1][route], hops)]
    total = np.maximum(np.asarray(route_chunks)[route], 1).astype(np.float64)
    return Pieces(route, off, cnt, hop_ptr, edges, (off + cnt) / total, cnt / total)


def fluid_keys(pc: Pieces) -> F64:
    """Per hop: the piece's fluid due time (``done``) plus one piece share per hop before it."""
    counts = np.diff(pc.hop_ptr)
    piece = np.repeat(np.arange(len(counts)), counts)
    h = segment_positions(counts)
    return np.asarray(pc.done[piece] + h * pc.share[piece], dtype=np.float64)


class _Links:
    """Per-link state of :func:`list_schedule`: ready ops by key, admitted count, bytes waiting for their
    latency, and processor sharing (virtual time ``v`` as of ``t``: bytes served to each streaming op; the
    streaming ops' finishing virtual times and their sum; the version of the link's departure event)."""

    def __init__(self, ne: int) -> None:
        self.waiting: list[list[tuple[float, int]]] = [[] for _ in range(ne)]
        self.count = [0] * ne
        self.pend = [0.0] * ne
        self.v = [0.0] * ne
        self.t = [0.0] * ne
        self.n = [0] * ne
        self.fins: list[list[tuple[float, int]]] = [[] for _ in range(ne)]
        self.sumfin = [0.0] * ne
        self.ver = [0] * ne


def list_schedule(
    pc: Pieces,
    nbytes: F64,
    key: F64,
    cap: F64,
    alpha: F64,
    window: int,
    inflight: F64 | None = None,
    edges: I64 | None = None,
    *,
    native: bool | None = None,
) -> Timed:
    """Schedule ``pc`` (``nbytes[p]`` bytes per piece; ``edges`` replaces ``pc.hop_edge``, for the reversed
    instance) on links of ``cap`` bytes/s and ``alpha`` s latency, ``window`` slots per link, admitting beyond
    them while fewer than ``inflight[e]`` bytes are in flight (module docstring).

    The compiled core ``a2acc._listsched`` runs the same operations when it was built (the same schedule);
    ``native=False`` runs this Python loop, the reference."""
    hop_edge = pc.hop_edge if edges is None else edges
    nh = pc.nhops
    ne = int(cap.shape[0])
    counts = np.diff(pc.hop_ptr)
    is_last = np.zeros(nh, dtype=bool)
    is_last[pc.hop_ptr[1:][counts > 0] - 1] = True
    if native is None:
        native = _native_listsched is not None
    if native:
        return _list_schedule_native(pc, nbytes, key, cap, alpha, window, inflight, hop_edge, is_last, counts)
    edge: list[int] = hop_edge.tolist()
    keys: list[float] = key.tolist()
    size: list[float] = np.repeat(nbytes, counts).tolist()
    last: list[bool] = is_last.tolist()
    lat: list[float] = alpha.tolist()
    rate: list[float] = cap.tolist()
    budget: list[float] = (inflight if inflight is not None else np.zeros(ne)).tolist()
    after = [-1] * nh
    ready_t = [0.0] * nh
    end = [0.0] * nh
    order: list[int] = []
    lk = _Links(ne)
    events: list[
        tuple[float, int, int, int]
    ] = []  # (time, 0: hop starts streaming | 1: link departure, id, ver)

    def admit(e: int, now: float, trigger: int) -> None:
        q = lk.waiting[e]
        while q:
            if lk.count[e] >= window:
                busy = lk.pend[e] + lk.sumfin[e]
                if lk.n[e]:
                    busy -= lk.n[e] * (lk.v[e] + (now - lk.t[e]) * rate[e] / lk.n[e])
                if busy >= budget[e]:
                    return
            j = heapq.heappop(q)[1]
            after[j] = trigger
            ready_t[j] = now
            order.append(j)
            lk.count[e] += 1
            lk.pend[e] += size[j]
            heapq.heappush(events, (now + lat[e], 0, j, 0))

    for j in pc.hop_ptr[:-1][counts > 0].tolist():
        heapq.heappush(lk.waiting[edge[j]], (keys[j], j))
    for e in range(ne):
        admit(e, 0.0, -1)
    while events:
        now, kind, x, ver = heapq.heappop(events)
        e = edge[x] if kind == 0 else x
        if kind == 1 and ver != lk.ver[e]:
            continue
        if lk.n[e]:
            lk.v[e] += (now - lk.t[e]) * rate[e] / lk.n[e]
        lk.t[e] = now
        fe = lk.fins[e]
        if kind == 0:
            heapq.heappush(fe, (lk.v[e] + size[x], x))
            lk.sumfin[e] += lk.v[e] + size[x]
            lk.pend[e] -= size[x]
            lk.n[e] += 1
        else:
            lk.v[e] = max(lk.v[e], fe[0][0])
            trig = -1
            while fe and fe[0][0] <= lk.v[e] * (1.0 + 1e-12) + 1e-9:
                fv, j = heapq.heappop(fe)
                lk.sumfin[e] -= fv
                lk.n[e] -= 1
                lk.count[e] -= 1
                end[j] = now
                trig = j
                if not last[j]:
                    e2 = edge[j + 1]
                    heapq.heappush(lk.waiting[e2], (keys[j + 1], j + 1))
                    admit(e2, now, j)
            admit(e, now, trig)
        if fe:
            lk.ver[e] += 1
            t_next = now + (fe[0][0] - lk.v[e]) * lk.n[e] / rate[e]
            heapq.heappush(events, (t_next, 1, e, lk.ver[e]))
    if len(order) != nh:  # pragma: no cover - every hop is admitted once its predecessor ends
        raise RuntimeError(f"list schedule admitted {len(order)} of {nh} hops")
    return Timed(
        np.array(order, dtype=np.int64),
        np.array(after, dtype=np.int64),
        np.array(ready_t, dtype=np.float64),
        np.array(end, dtype=np.float64),
        window,
    )


def _list_schedule_native(
    pc: Pieces,
    nbytes: F64,
    key: F64,
    cap: F64,
    alpha: F64,
    window: int,
    inflight: F64 | None,
    hop_edge: I64,
    is_last: npt.NDArray[np.bool_],
    counts: I64,
) -> Timed:
    """:func:`list_schedule` in the compiled core (its arguments laid out as arrays; ``counts``: hops per
    piece)."""
    if _native_listsched is None:
        raise RuntimeError("the compiled list scheduler is not built")
    ne = int(cap.shape[0])

    order, after, ready, end = _native_listsched.run(
        carray(hop_edge, np.int64),
        carray(key, np.float64),
        carray(np.repeat(nbytes, counts), np.float64),
        carray(is_last, np.uint8),
        carray(pc.hop_ptr[:-1][counts > 0], np.int64),
        carray(alpha, np.float64),
        carray(cap, np.float64),
        carray(inflight if inflight is not None else np.zeros(ne), np.float64),
        int(window),
    )
    return Timed(
        np.frombuffer(order, dtype=np.int64).copy(),
        np.frombuffer(after, dtype=np.int64).copy(),
        np.frombuffer(ready, dtype=np.float64).copy(),
        np.frombuffer(end, dtype=np.float64).copy(),
        window,
    )


def _reversal(pc: Pieces) -> I64:
    """Hop index permutation that reverses every piece's hop list."""
    counts = np.diff(pc.hop_ptr)
    base = np.repeat(pc.hop_ptr[:-1], counts)
    h = np.arange(pc.nhops) - base
    return np.asarray(base + np.repeat(counts, counts) - 1 - h, dtype=np.int64)


def improve(pc: Pieces, nbytes: F64, cap: F64, alpha: F64, inflight: F64, first: Timed, rounds: int) -> Timed:
    """Forward-backward improvement of ``first`` (module docstring): ``rounds`` backward + forward passes, the
    best forward schedule kept (ties: the earlier)."""
    rev = _reversal(pc)
    best, cur = first, first
    for _ in range(rounds):
        back = list_schedule(pc, nbytes, -cur.end[rev], cap, alpha, first.window, inflight, pc.hop_edge[rev])
        keys = (back.makespan - back.end)[rev]
        cur = list_schedule(pc, nbytes, keys, cap, alpha, first.window, inflight)
        if cur.makespan < best.makespan:
            best = cur
    return best


def schedule(pc: Pieces, nbytes: F64, cap: F64, alpha: F64, budget: int = PASS_BUDGET) -> Timed:
    """The best list schedule the pass budget allows: every window of :data:`WINDOWS` with fluid keys, then
    forward-backward rounds on the best. Large instances (more hops than ``budget / passes``) try fewer
    windows and rounds; the choice depends only on the hop count, so plans stay deterministic."""
    inflight = 2.0 * alpha * cap
    passes = max(1, budget // max(pc.nhops, 1))
    windows = WINDOWS if passes >= len(WINDOWS) + 2 * ROUNDS else (3,)
    rounds = min(ROUNDS, (passes - len(windows)) // 2)
    keys = fluid_keys(pc)
    best: Timed | None = None
    for w in windows:
        t = list_schedule(pc, nbytes, keys, cap, alpha, w, inflight)
        if best is None or t.makespan < best.makespan:
            best = t
    if best is None:  # pragma: no cover - WINDOWS is not empty
        raise RuntimeError("no window to schedule with")
    if rounds > 0:
        best = improve(pc, nbytes, cap, alpha, inflight, best, rounds)
    return Timed(best.order, best.after, best.ready, best.end, best.window, len(windows) + 2 * max(rounds, 0))
