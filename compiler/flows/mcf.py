"""Max-concurrent multi-commodity flow formulations of an all-to-all(-v), solved with HiGHS.

Notation: ranks r have nodes n(r); edges e = (u, v) carry at most ``cap[e]`` bytes/s; ``D[s][d]`` bytes go from
rank s to rank d (self traffic excluded: it never touches a link). All formulations minimise the completion time
``T`` of the whole demand at full rate (the inverse of the max-concurrent throughput lambda*).

1. **Link-based, source-aggregated** (:func:`link_mcf`; the commodity of a source is all its data, whatever the
   destination, as in TE-CCL's all-to-all LP): variables ``f[s, e] >= 0`` (bytes of s's data on e) and ``T``;
   conservation ``out_s(v) - in_s(v) = supply_s(v)`` at every node (``sum_d D[s][d]`` at n(s), ``-D[s][d]`` at
   n(d), 0 at transit nodes); capacity ``sum_s f[s, e] <= cap[e] T``. A second phase minimises ``sum f`` with
   ``T`` held at its optimum, so every source's flow is acyclic (a circulation would only add cost) and can be
   decomposed into paths exactly (:mod:`.paths`).
2. **Path-based** (:func:`path_mcf`): for every pair, up to k shortest paths (hop count); variables ``x[p]``;
   ``sum_p x[p] = D[s][d]`` per pair; ``sum_{p through e} x[p] <= cap[e] T``. Paths come out directly.
3. **Time-stepped** (:func:`time_stepped_mcf`, store-and-forward epochs, for fabrics where only hosts forward):
   ``K`` epochs of length ``tau``; ``f[s, e, t]`` bytes cross e during epoch t; a node forwards in epoch t only
   what reached it in earlier epochs (``sum_{t'<=t} out_s(v, t') <= sum_{t'<t} in_s(v, t')`` for v != n(s));
   over all epochs ``in - out = D[s][v]``; capacity ``sum_s f[s, e, t] <= cap[e] tau``. Minimise ``tau``; the
   completion time is ``K tau``, at least the link-based ``T``.

Coefficients are scaled (bytes in units of the largest entry) so the LPs stay well conditioned.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from a2acc.flows.lp import INF, Lp, LpResult, Solver
from a2acc.flows.network import FlowNetwork


@dataclass(frozen=True)
class LinkFlow:
    time_s: float
    sources: npt.NDArray[np.int64]  # ranks (rows of ``flow``)
    flow: npt.NDArray[np.float64]  # (sources, edges) bytes
    status: str  # "optimal" or "time_limit" (feasible, not proven optimal)
    seconds: float


@dataclass(frozen=True)
class PathFlow:
    time_s: float
    pairs: npt.NDArray[np.int64]  # (P, 2) source, destination rank of each path
    paths: tuple[tuple[int, ...], ...]  # edge indices of each path
    amount: npt.NDArray[np.float64]  # bytes on each path
    status: str
    seconds: float


@dataclass(frozen=True)
class SteppedFlow:
    time_s: float  # K * tau
    epochs: int
    tau: float
    sources: npt.NDArray[np.int64]
    flow: npt.NDArray[np.float64]  # (sources, edges, epochs) bytes
    status: str
    seconds: float


def _offdiag(demand: npt.NDArray[np.float64] | npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    d = np.asarray(demand, dtype=np.float64).copy()
    np.fill_diagonal(d, 0.0)
    return d


def supplies(
    net: FlowNetwork, demand: npt.NDArray[np.float64], sources: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """(S, V) net supply of each source's commodity at each node."""
    sup = np.zeros((len(sources), net.nnodes))
    for k, s in enumerate(sources):
        np.add.at(sup[k], net.rank_node, -demand[s])
        sup[k, net.rank_node[s]] += demand[s].sum()
    return sup


#: simplex iterations the second (polishing) phase may take. The first phase proves the optimal time; the second
#: only picks, among optimal flows, the one that moves the fewest bytes (no cycles, no detours). Where HiGHS's
#: interior point hands that second LP to a simplex clean-up it can run far longer than the first: on a 150-node
#: random 3-regular graph (Pareto traffic), 227,604 iterations and 352 s against 10 s
#: for the first phase. Past this many the first phase's point is used (there: +0.14 % simulated). The limit
#: counts iterations, so the plan is the same on every machine; HiGHS's crossover is not counted (the
#: 64-GPU cases' second phases take 223-6,692 crossover and no simplex iterations)
PHASE2_SIMPLEX_ITERATIONS = 10_000


def _solve_two_phase(lp: Lp, t_col: int, time_limit: float | None) -> tuple[LpResult, LpResult | None]:
    solver = Solver(lp, time_limit)
    first = solver.run()
    if first.status != "optimal" or first.x is None:
        return first, None
    t_opt = first.x[t_col]
    cost = np.ones(lp.ncols)
    cost[t_col] = 0.0
    second = solver.reoptimize(
        cost, t_col, t_opt * (1 + 1e-9) + 1e-15, simplex_iterations=PHASE2_SIMPLEX_ITERATIONS
    )
    return first, second if second.status == "optimal" else None


def aggregated_mcf(
    net: FlowNetwork,
    sup: npt.NDArray[np.float64],
    *,
    cap: npt.NDArray[np.float64] | None = None,
    time_limit: float | None = None,
    acyclic: bool = True,
) -> tuple[LpResult, npt.NDArray[np.float64] | None, float]:
    """Min-time flow of K commodities with net supplies ``sup`` (K, V) in bytes: (first-phase result,
    (K, E) flows in bytes or None, T). The engine of :func:`link_mcf` and of the decomposition's master."""
    c = net.cap if cap is None else np.asarray(cap, dtype=np.float64)
    scale = float(np.abs(sup).max()) or 1.0
    cmax = float(c.max()) if c.size else 1.0
    cmax = cmax if cmax > 0 else 1.0
    S, E, V = sup.shape[0], net.nedges, net.nnodes
    k = np.repeat(np.arange(S), E)
    e = np.tile(np.arange(E), S)
    col = np.arange(S * E)
    t_col = S * E
    rows = np.concatenate([k * V + net.tail[e], k * V + net.head[e], S * V + e, S * V + np.arange(E)])
    cols = np.concatenate([col, col, col, np.full(E, t_col)])
    # T in units of scale / cmax seconds: with supplies and capacities both normalised, the LP of a matrix and
    # of any multiple of it are the same LP (solved once, :data:`_SOLVED`)
    vals = np.concatenate([np.ones(S * E), -np.ones(S * E), np.ones(S * E), -c / cmax])
    rhs = (sup / scale).ravel()
    lp = Lp(
        ncols=S * E + 1,
        nrows=S * V + E,
        cols=cols,
        rows=rows,
        vals=vals,
        cost=np.concatenate([np.zeros(S * E), [1.0]]),
        row_lo=np.concatenate([rhs, np.full(E, -INF)]),
        row_hi=np.concatenate([rhs, np.zeros(E)]),
        col_lo=np.zeros(S * E + 1),
        col_hi=np.full(S * E + 1, INF),
    )
    key = _lp_key(lp, acyclic)
    done = _SOLVED.get(key)
    if done is not None:
        _SOLVED.move_to_end(key)
        first, second = done
    else:
        if acyclic:
            first, second = _solve_two_phase(lp, t_col, time_limit)
        else:
            first, second = Solver(lp, time_limit).run(), None
        # without a clock limit an unfinished second phase stopped at its iteration cap: the same in every run
        if first.status == "optimal" and (second is not None or not acyclic or time_limit is None):
            _SOLVED[key] = (first, second)
            while len(_SOLVED) > _SOLVED_SIZE:
                _SOLVED.popitem(last=False)
    best = second if second is not None else first
    if best.x is None:
        return first, None, float("nan")
    flow = np.maximum(best.x[: S * E].reshape(S, E), 0.0) * scale
    if best.status != "optimal" and not _conserves(net, flow, sup):
        return first, None, float("nan")  # a time-limited interior point that does not route the demand
    return first, flow, max(float(best.x[t_col]) * scale / cmax, float((flow.sum(axis=0) / c).max()))


#: proven (first, second phase) solutions of :func:`aggregated_mcf`'s LPs, by content: a comparison's sizes
#: share one chunk pattern, so their LPs are one LP (the solution is the same whether it is looked up or solved)
_SOLVED: OrderedDict[str, tuple[LpResult, LpResult | None]] = OrderedDict()
_SOLVED_SIZE = 8


def forget() -> None:
    """Drop the remembered LP solutions (:func:`a2acc.planners.forget`, through the mcf planner)."""
    _SOLVED.clear()


def _lp_key(lp: Lp, acyclic: bool) -> str:
    h = hashlib.sha256(repr((lp.ncols, lp.nrows, acyclic)).encode())
    for a in (lp.rows, lp.cols, lp.vals, lp.cost, lp.row_lo, lp.row_hi, lp.col_lo, lp.col_hi):
        arr = np.ascontiguousarray(a)
        h.update(arr.dtype.str.encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _conserves(net: FlowNetwork, flow: npt.NDArray[np.float64], sup: npt.NDArray[np.float64]) -> bool:
    """Does every commodity's flow (K, E) meet its net supplies (K, V) to within 1e-6 of the largest?"""
    out = np.zeros_like(sup)
    for k in range(flow.shape[0]):
        out[k] = np.bincount(net.tail, weights=flow[k], minlength=net.nnodes) - np.bincount(
            net.head, weights=flow[k], minlength=net.nnodes
        )
    return bool(np.abs(out - sup).max() <= 1e-6 * max(float(np.abs(sup).max()), 1.0))


def link_mcf(
    net: FlowNetwork,
    demand: npt.NDArray[np.float64] | npt.NDArray[np.int64],
    *,
    sources: npt.NDArray[np.int64] | None = None,
    cap: npt.NDArray[np.float64] | None = None,
    time_limit: float | None = None,
    acyclic: bool = True,
) -> LinkFlow | None:
    """Link-based source-aggregated MCF (see module docstring); None when HiGHS finds no solution in time."""
    d = _offdiag(demand)
    srcs = np.flatnonzero(d.sum(axis=1) > 0) if sources is None else np.asarray(sources, dtype=np.int64)
    srcs = srcs[d[srcs].sum(axis=1) > 0]
    if srcs.size == 0:
        return LinkFlow(0.0, srcs, np.zeros((0, net.nedges)), "optimal", 0.0)
    first, flow, t = aggregated_mcf(
        net, supplies(net, d, srcs), cap=cap, time_limit=time_limit, acyclic=acyclic
    )
    if flow is None:
        return None
    status = "optimal" if first.status == "optimal" else first.status
    return LinkFlow(t, srcs, flow, status, first.seconds)


# ---------------------------------------------------------------------- paths
def hop_distances(net: FlowNetwork) -> npt.NDArray[np.int64]:
    """All-pairs hop distances between nodes (BFS over the edge arrays; -1 when unreachable)."""
    V = net.nnodes
    adj: list[list[int]] = [[] for _ in range(V)]
    for u, v in zip(net.tail.tolist(), net.head.tolist()):
        adj[u].append(v)
    dist = np.full((V, V), -1, dtype=np.int64)
    for s in range(V):
        row = dist[s]
        row[s] = 0
        q = deque([s])
        while q:
            u = q.popleft()
            for v in adj[u]:
                if row[v] < 0:
                    row[v] = row[u] + 1
                    q.append(v)
    return dist


def candidate_paths(
    net: FlowNetwork, dist: npt.NDArray[np.int64], s: int, d: int, k: int
) -> list[tuple[int, ...]]:
    """Up to k short paths s -> d (edge indices): one per first hop, each continued along a shortest path, the
    shortest first. At a tie between next hops the choice rotates with (d, node), so the pairs spread over
    equal-cost paths instead of all taking the lowest-numbered edge (measured on GenKautz n=1024, d=8: 10x
    the bound with lowest-index ties). Deterministic, no Yen enumeration."""
    src, dst = int(net.rank_node[s]), int(net.rank_node[d])
    out_edges = net.out_edges
    cands: list[tuple[int, tuple[int, ...]]] = []
    for e0 in out_edges[src]:
        w = int(net.head[e0])
        if dist[w, dst] < 0:
            continue
        path = [e0]
        x = w
        ok = True
        while x != dst:
            options = [e for e in out_edges[x] if dist[int(net.head[e]), dst] == dist[x, dst] - 1]
            if not options:  # pragma: no cover - dist says a shortest path exists
                ok = False
                break
            nxt = options[(d + x) % len(options)]  # the rotation of a2acc.flows.decompose.next_hops
            path.append(nxt)
            x = int(net.head[nxt])
        if (
            ok
            and len(set(int(net.head[e]) for e in path)) == len(path)
            and src not in {int(net.head[e]) for e in path}
        ):
            cands.append((len(path), tuple(path)))
    cands.sort()
    return [p for _l, p in cands[:k]]


def path_mcf(
    net: FlowNetwork,
    demand: npt.NDArray[np.float64] | npt.NDArray[np.int64],
    *,
    k: int = 4,
    sources: npt.NDArray[np.int64] | None = None,
    cap: npt.NDArray[np.float64] | None = None,
    time_limit: float | None = None,
    dist: npt.NDArray[np.int64] | None = None,
) -> PathFlow | None:
    """Path-based MCF over up to k short paths per pair (see module docstring)."""
    d = _offdiag(demand)
    n = d.shape[0]
    srcs = np.arange(n) if sources is None else np.asarray(sources, dtype=np.int64)
    c = net.cap if cap is None else np.asarray(cap, dtype=np.float64)
    dist = hop_distances(net) if dist is None else dist
    pairs: list[tuple[int, int]] = []
    paths: list[tuple[int, ...]] = []
    pair_of: list[int] = []
    for s in srcs.tolist():
        for t in np.flatnonzero(d[s] > 0).tolist():
            ps = candidate_paths(net, dist, s, t, k)
            if not ps:
                return None  # unreachable: no schedule exists
            for p in ps:
                pair_of.append(len(pairs))
                paths.append(p)
            pairs.append((s, t))
    if not pairs:
        return PathFlow(0.0, np.zeros((0, 2), np.int64), (), np.zeros(0), "optimal", 0.0)
    scale = float(d.max())
    P, E, Q = len(paths), net.nedges, len(pairs)
    plen = np.array([len(p) for p in paths])
    t_col = P
    path_cols = np.repeat(np.arange(P), plen)
    path_edges = np.fromiter((e for p in paths for e in p), dtype=np.int64, count=int(plen.sum()))
    rows = np.concatenate([np.array(pair_of), Q + path_edges, Q + np.arange(E)])
    cols = np.concatenate([np.arange(P), path_cols, np.full(E, t_col)])
    vals = np.concatenate([np.ones(P), np.ones(path_edges.size), -c / scale])
    dem = np.array([d[s, t] for s, t in pairs]) / scale
    lp = Lp(
        ncols=P + 1,
        nrows=Q + E,
        cols=cols,
        rows=rows,
        vals=vals,
        cost=np.concatenate([np.zeros(P), [1.0]]),
        row_lo=np.concatenate([dem, np.full(E, -INF)]),
        row_hi=np.concatenate([dem, np.zeros(E)]),
        col_lo=np.zeros(P + 1),
        col_hi=np.full(P + 1, INF),
    )
    first, second = _solve_two_phase(lp, t_col, time_limit)
    best = second if second is not None else first
    if best.x is None:
        return None
    x = best.x
    amount = np.maximum(x[:P], 0.0)
    if best.status != "optimal":  # a time-limited point: usable only if it routes every pair's demand
        got = np.bincount(np.array(pair_of), weights=amount, minlength=Q)
        if np.abs(got - dem).max() > 1e-6 * max(float(dem.max()), 1.0):
            return None
    load = np.bincount(path_edges, weights=np.repeat(amount, plen), minlength=E) * scale
    pair_arr = np.array(pairs, dtype=np.int64)[np.array(pair_of)]
    return PathFlow(
        max(float(x[t_col]), float((load / c).max())),
        pair_arr,
        tuple(paths),
        amount * scale,
        "optimal" if first.status == "optimal" else first.status,
        first.seconds + (second.seconds if second else 0.0),
    )


# ---------------------------------------------------------------------- time-stepped
def time_stepped_mcf(
    net: FlowNetwork,
    demand: npt.NDArray[np.float64] | npt.NDArray[np.int64],
    epochs: int,
    *,
    time_limit: float | None = None,
) -> SteppedFlow | None:
    """Store-and-forward MCF over ``epochs`` epochs (see module docstring); None if infeasible in K epochs."""
    d = _offdiag(demand)
    srcs = np.flatnonzero(d.sum(axis=1) > 0)
    K = int(epochs)
    if srcs.size == 0:
        return SteppedFlow(0.0, K, 0.0, srcs, np.zeros((0, net.nedges, K)), "optimal", 0.0)
    scale = float(d.max())
    S, E, V = len(srcs), net.nedges, net.nnodes
    nf = S * E * K
    tau_col = nf
    # index of f[k, e, t] = (k * E + e) * K + t
    kk, ee, tt = (a.ravel() for a in np.meshgrid(np.arange(S), np.arange(E), np.arange(K), indexing="ij"))
    col = (kk * E + ee) * K + tt
    tail, head = net.tail[ee], net.head[ee]
    src_node = net.rank_node[srcs][kk]
    r_caus = S * V * K  # causality rows: (k, v, t) -> (k * V + v) * K + t
    r_final = r_caus + S * V  # final rows: (k, v)
    parts_r: list[npt.NDArray[np.int64]] = []
    parts_c: list[npt.NDArray[np.int64]] = []
    parts_v: list[npt.NDArray[np.float64]] = []
    # causality: out of v at t' <= t counts +1 (rows t >= t'); into v at t' < t counts -1 (rows t > t')
    for shift in range(K):
        t_row = tt + shift
        ok = (t_row < K) & (tail != src_node)
        parts_r.append(((kk * V + tail) * K + t_row)[ok])
        parts_c.append(col[ok])
        parts_v.append(np.ones(int(ok.sum())))
        t_row2 = tt + shift + 1
        ok2 = (t_row2 < K) & (head != src_node)
        parts_r.append(((kk * V + head) * K + t_row2)[ok2])
        parts_c.append(col[ok2])
        parts_v.append(-np.ones(int(ok2.sum())))
    # final balance in - out = demand (or out - in = supply at the source: same row, sign folded in the bound)
    parts_r += [r_caus + kk * V + head, r_caus + kk * V + tail]
    parts_c += [col, col]
    parts_v += [np.ones(nf), -np.ones(nf)]
    # capacity per (e, t)
    parts_r.append(r_final + ee * K + tt)
    parts_c.append(col)
    parts_v.append(np.ones(nf))
    parts_r.append(r_final + np.arange(E * K))
    parts_c.append(np.full(E * K, tau_col))
    parts_v.append(-np.repeat(net.cap, K) / scale)
    sup = supplies(net, d, srcs) / scale  # out - in = sup  <=>  in - out = -sup
    final = (-sup).ravel()
    nrows = r_final + E * K
    lp = Lp(
        ncols=nf + 1,
        nrows=nrows,
        cols=np.concatenate(parts_c),
        rows=np.concatenate(parts_r),
        vals=np.concatenate(parts_v),
        cost=np.concatenate([np.zeros(nf), [1.0]]),
        row_lo=np.concatenate([np.full(S * V * K, -INF), final, np.full(E * K, -INF)]),
        row_hi=np.concatenate([np.zeros(S * V * K), final, np.zeros(E * K)]),
        col_lo=np.zeros(nf + 1),
        col_hi=np.full(nf + 1, INF),
    )
    first, second = _solve_two_phase(lp, tau_col, time_limit)
    best = second if second is not None else first
    if best.x is None or first.status != "optimal":  # epochs make a partial point hard to repair: refuse it
        return None
    x = best.x
    tau = float(x[tau_col])
    flow = np.maximum(x[:nf].reshape(S, E, K), 0.0) * scale
    status = "optimal" if first.status == "optimal" else first.status
    return SteppedFlow(
        K * tau, K, tau, srcs, flow, status, first.seconds + (second.seconds if second else 0.0)
    )
