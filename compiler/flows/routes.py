"""Routes: which path each of a pair's chunks takes, as arrays (CSR of edge lists), from any flow.

A route is ``(source rank, destination rank, chunks, edges[, epochs])``; the routes of a pair carry exactly its
``counts[s][d]`` chunks (:func:`complete` guarantees it). Flows become routes by peeling (:mod:`.paths`) and
sharing each pair's chunks over its paths by the largest-remainder rule (:func:`split_chunks`, vectorised over
all pairs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from a2acc.flows.mcf import LinkFlow, PathFlow, SteppedFlow, candidate_paths, hop_distances
from a2acc.flows.network import FlowNetwork
from a2acc.flows.paths import peel
from a2acc.segments import segment_positions

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Routes:
    src: I64
    dst: I64
    chunks: I64
    ptr: I64  # route r crosses edges[ptr[r]:ptr[r + 1]]
    edges: I64
    epochs: I64 | None = None  # per edge entry: the epoch it is crossed in (time-stepped flows)

    def __len__(self) -> int:
        return int(self.src.shape[0])

    @staticmethod
    def empty() -> Routes:
        z = np.zeros(0, dtype=np.int64)
        return Routes(z, z, z, np.zeros(1, dtype=np.int64), z)

    def select(self, keep: npt.NDArray[np.bool_]) -> Routes:
        """The routes where ``keep`` is true (in order)."""
        lens = np.diff(self.ptr)
        entry = np.repeat(keep, lens)
        ptr = np.concatenate([[0], np.cumsum(lens[keep])]).astype(np.int64)
        ep = None if self.epochs is None else self.epochs[entry]
        return Routes(self.src[keep], self.dst[keep], self.chunks[keep], ptr, self.edges[entry], ep)

    def carried(self, n: int) -> I64:
        """(n, n) chunks the routes carry per pair."""
        return (
            np.bincount(self.src * n + self.dst, weights=self.chunks, minlength=n * n)
            .astype(np.int64)
            .reshape(n, n)
        )


def concat(parts: list[Routes]) -> Routes:
    if not parts:
        return Routes.empty()
    lens = np.concatenate([np.diff(p.ptr) for p in parts])
    stepped = all(p.epochs is not None for p in parts)
    return Routes(
        np.concatenate([p.src for p in parts]),
        np.concatenate([p.dst for p in parts]),
        np.concatenate([p.chunks for p in parts]),
        np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
        np.concatenate([p.edges for p in parts]),
        np.concatenate([p.epochs for p in parts if p.epochs is not None]) if stepped else None,
    )


def split_chunks(pair: I64, amounts: F64, count: I64) -> I64:
    """Chunks per path: path ``i`` belongs to pair ``pair[i]`` (paths of a pair consecutive), which has
    ``count[pair[i]]`` chunks, shared in proportion to ``amounts`` by the largest remainder (ties to the first
    path); a pair whose amounts are all zero shares equally."""
    a = np.asarray(amounts, dtype=np.float64)
    npair = int(count.shape[0])
    tot = np.bincount(pair, weights=a, minlength=npair)
    flat = tot[pair] <= 0
    a = np.where(flat, 1.0, a)
    tot = np.bincount(pair, weights=a, minlength=npair)
    exact = a / tot[pair] * count[pair]
    base = np.floor(exact).astype(np.int64)
    rest = count - np.bincount(pair, weights=base, minlength=npair).astype(np.int64)
    order = np.lexsort((np.arange(len(a)), -(exact - base), pair))
    first = np.searchsorted(pair[order], np.arange(npair))
    rank = np.arange(len(a)) - first[pair[order]]
    base[order[rank < rest[pair[order]]]] += 1
    return base


def _from_paths(
    rows: Sequence[tuple[int, int, list[int], float, list[int] | None]], counts: I64, stepped: bool
) -> Routes:
    """Routes from ``(s, d, edges, bytes, epochs)`` paths grouped by pair (each pair's paths consecutive)."""
    if not rows:
        return Routes.empty()
    n = counts.shape[0]
    s = np.array([r[0] for r in rows], dtype=np.int64)
    d = np.array([r[1] for r in rows], dtype=np.int64)
    key = s * n + d
    brk = np.concatenate([[True], key[1:] != key[:-1]])
    pair = np.cumsum(brk) - 1
    chunks = split_chunks(pair, np.array([r[3] for r in rows]), counts[s[brk], d[brk]])
    lens = np.array([len(r[2]) for r in rows], dtype=np.int64)
    edges = np.fromiter((e for r in rows for e in r[2]), dtype=np.int64, count=int(lens.sum()))
    ep = None
    if stepped:
        ep = np.fromiter((t for r in rows for t in (r[4] or ())), dtype=np.int64, count=int(lens.sum()))
    out = Routes(s, d, chunks, np.concatenate([[0], np.cumsum(lens)]).astype(np.int64), edges, ep)
    return out.select(chunks > 0)


def from_path_flow(flow: PathFlow, counts: I64) -> Routes:
    rows = [
        (int(s), int(d), list(p), float(a), None)
        for (s, d), p, a in zip(flow.pairs.tolist(), flow.paths, flow.amount.tolist())
    ]
    rows.sort(key=lambda r: (r[0], r[1]))  # stable: a pair's paths keep their order
    return _from_paths(rows, counts, False)


def from_link_flow(net: FlowNetwork, flow: LinkFlow, counts: I64, demand: F64) -> Routes:
    """Peel each source's flow into paths (exact up to the solver's residue)."""
    rows: list[tuple[int, int, list[int], float, list[int] | None]] = []
    for k, s in enumerate(flow.sources.tolist()):
        dem = np.zeros(net.nnodes)
        dem[net.rank_node] = demand[s]
        tol = 1e-9 * max(float(dem.sum()), 1.0)
        per: dict[int, list[tuple[list[int], float]]] = {}
        for v, walk, amount in peel(
            net.nnodes, net.tail, net.head, flow.flow[k], int(net.rank_node[s]), dem, tol
        ):
            per.setdefault(int(net.node_rank[v]), []).append((walk, amount))
        for d, ps in sorted(per.items()):
            rows += [(s, d, w, a, None) for w, a in ps]
    return _from_paths(rows, counts, False)


def from_stepped_flow(net: FlowNetwork, sf: SteppedFlow, counts: I64, demand: F64) -> Routes:
    """Peel each source's time-expanded flow. Nodes (v, t), t = 0..K, are numbered v * (K + 1) + t; transfer
    (e, t) is edge e * K + t from (tail, t) to (head, t + 1); holdover (v, t) is edge E * K + v * K + t."""
    V, E, K = net.nnodes, net.nedges, sf.epochs
    tk = np.arange(K)[None, :]
    te_tail = np.concatenate(
        [(tk + net.tail[:, None] * (K + 1)).ravel(), (tk + np.arange(V)[:, None] * (K + 1)).ravel()]
    )
    te_head = te_tail + 1
    te_head[: E * K] = (tk + 1 + net.head[:, None] * (K + 1)).ravel()
    rows: list[tuple[int, int, list[int], float, list[int] | None]] = []
    for k, s in enumerate(sf.sources.tolist()):
        f = sf.flow[k]  # (E, K)
        src = int(net.rank_node[s])
        arrive = np.zeros((V, K + 1))  # bytes reaching v at the start of t (sent in t - 1)
        leave = np.zeros((V, K))
        np.add.at(arrive, (np.repeat(net.head, K), np.tile(np.arange(1, K + 1), E)), f.ravel())
        np.add.at(leave, (np.repeat(net.tail, K), np.tile(np.arange(K), E)), f.ravel())
        hold = np.zeros((V, K))  # bytes that wait at v from t to t + 1
        stock = np.zeros(V)
        stock[src] = float(demand[s].sum())
        for t in range(K):
            stock = stock + arrive[:, t] - leave[:, t]
            hold[:, t] = np.maximum(stock, 0.0)
        flow_te = np.concatenate([f.ravel(), hold.ravel()])
        dem = np.zeros(V * (K + 1))
        dem[net.rank_node * (K + 1) + K] = demand[s]
        tol = 1e-9 * max(float(dem.sum()), 1.0)
        per: dict[int, list[tuple[list[int], float, list[int]]]] = {}
        for v, walk, amount in peel(V * (K + 1), te_tail, te_head, flow_te, src * (K + 1), dem, tol):
            moves = [w for w in walk if w < E * K]
            per.setdefault(int(net.node_rank[v // (K + 1)]), []).append(
                ([w // K for w in moves], amount, [w % K for w in moves])
            )
        for d, ps in sorted(per.items()):
            rows += [(s, d, w, a, t) for w, a, t in ps]
    return _from_paths(rows, counts, True)


def shortest(net: FlowNetwork, counts: I64, pairs: list[tuple[int, int]] | None = None) -> Routes:
    """One shortest path per pair (of ``pairs``, default every pair with chunks): always feasible."""
    dist = hop_distances(net)
    n = counts.shape[0]
    if pairs is None:
        pairs = [(s, d) for s in range(n) for d in range(n) if s != d and counts[s, d] > 0]
    rows = [(s, d, list(candidate_paths(net, dist, s, d, 1)[0]), 1.0, None) for s, d in pairs]
    return _from_paths(rows, counts, False)


def complete(net: FlowNetwork, routes: Routes, counts: I64) -> tuple[Routes, int]:
    """``routes`` with every pair's chunk total equal to ``counts`` (off the diagonal): a pair the routes do
    not carry in full (a time-limited LP point that misses some demand) is routed on one shortest path
    instead. Returns the routes and how many pairs were re-routed."""
    n = counts.shape[0]
    want = counts.copy()
    np.fill_diagonal(want, 0)
    got = routes.carried(n)
    bad = np.argwhere(got != want)
    if not len(bad):
        return routes, 0
    bad_key = set((bad[:, 0] * n + bad[:, 1]).tolist())
    keep = np.array([k not in bad_key for k in (routes.src * n + routes.dst).tolist()], dtype=bool)
    fix = [(int(s), int(d)) for s, d in bad.tolist() if want[s, d] > 0]
    kept = routes.select(keep)
    extra = shortest(net, counts, fix)
    if kept.epochs is not None:  # a stepped plan re-routes a pair without epochs: give its hops in order
        ep = segment_positions(np.diff(extra.ptr))
        extra = Routes(extra.src, extra.dst, extra.chunks, extra.ptr, extra.edges, ep)
    return concat([kept, extra]), len(fix)
