"""Schedule synthesis of one sub-demand: an epoch-based time-expanded flow LP on one group, solved with HiGHS.

SyCCL (SIGCOMM'25) slides, "Design 2: Schedule Synthesis": each sub-demand of a sketch combination (who sends
what to whom inside one group of one dimension, at one stage) is solved on its own, on the group's small
subgraph instead of the whole topology, with a TE-CCL-like latency-bandwidth model in which time is cut into
epochs ("bin packing": the data in flight on a link in epoch t is at most its bandwidth times the epoch).
Speed-ups on the slides, all here: **two-step synthesis** (coarse epochs rank the candidates, the top K are
solved again with fine epochs), an **auxiliary variable for the epoch length** (``tau`` below, so the epoch
adapts to the demand), **isomorphic sub-demands solved once** (the caller keys sub-demands by their
canonical form on the dimension's reference group) and **parallel solves** (the caller runs
:func:`solve` through :func:`a2acc.flows.parallel.run_all`).

Formulation (our reading of the slides; all-to-all sub-demands are LPs, not MILPs, as SyCCL's code does for
all-to-all): group graph with GPUs and transit nodes (NVSwitch, NICs, rail and spine switches); K epochs of
unknown length ``tau``. Commodity = source GPU. Time-expanded nodes: a GPU has a state at every epoch
boundary 0..K (it stores and forwards: what arrives in epoch t leaves at t+1 at the earliest), a transit node
one state per epoch (cut-through inside an epoch). Arcs: a link in epoch t, and a hold-over arc per GPU and
epoch. Conservation per commodity and time-expanded node (supply at (source, 0), demand at (dest, K));
capacity per link and epoch ``sum_a f[a, e, t] <= cap[e] * tau``; minimise ``tau`` (completion ``K tau``),
then, with ``tau`` held, minimise the bytes moved (no circulation, so flows peel into paths exactly). GPU
relays inside a group are allowed only in the ``intra`` dimension (NVLink meshes and rings need them);
scale-out relays are what sketches express, so in rail/net groups only the source sends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from a2acc.flows.lp import INF, Lp, Solver
from a2acc.flows.paths import peel
from a2acc.model.topology import Topology
from a2acc.planners.syccl.symmetry import INTRA, RAIL, Symmetry

BIG_BW = 1e14  # links at least this fast (GPU <-> NIC attachments) are not capacity constraints
INTRA_KINDS: tuple[str, ...] = ("intra",)
NET_KINDS: tuple[str, ...] = ("pcie", "nic_tx", "nic_rx", "net")

Hop = tuple[int, int, int]  # (from position, to position, epoch)


@dataclass(frozen=True, eq=False)
class GroupNet:
    """One group's subgraph: nodes 0..P-1 are the group's GPUs (sorted ranks), then transit nodes."""

    ranks: tuple[int, ...]
    nnodes: int
    tail: npt.NDArray[np.int64]
    head: npt.NDArray[np.int64]
    cap: npt.NDArray[np.float64]  # bytes/s
    relays: bool

    @property
    def ngpus(self) -> int:
        return len(self.ranks)


@dataclass(frozen=True)
class SubSolution:
    """Routes of a sub-demand on its reference group: for each (i, j) position pair, the GPU paths
    (hops with epochs) and the fraction of the pair's data on each; ``time_s`` is ``K * tau`` for one byte
    per demand unit (scale by the bytes of one unit)."""

    epochs: int
    time_s: float
    status: str  # "optimal", "time_limit", "direct" (no LP solution: one direct hop per pair)
    routes: tuple[tuple[int, int, tuple[tuple[float, tuple[Hop, ...]], ...]], ...]
    lp_size: int


def group_net(topo: Topology, sym: Symmetry, dim: int, gi: int) -> GroupNet:
    """The subgraph of group ``gi`` of dimension ``dim`` (GPUs first, then the transit nodes it uses)."""
    name = sym.dims[dim].name
    ranks = sym.dims[dim].groups[gi]
    g = topo.graph
    gpus = [f"g{r}" for r in ranks]
    if name == INTRA:
        kinds: tuple[str, ...] = INTRA_KINDS
        allowed = set(gpus) | {f"sw{ranks[0] // sym.m}"}
    elif name == RAIL:
        kinds = NET_KINDS
        k = sym.nic_local[ranks[0] % sym.m]
        allowed = set(gpus) | {f"nic{s}.{k}" for s in range(sym.n)} | {f"rail{k}"}
    else:
        kinds = NET_KINDS
        allowed = {str(v) for v in g.nodes}
    edges = [
        (str(u), str(v), float(d["bw"]))
        for u, v, d in g.edges(data=True)
        if str(d["kind"]) in kinds and str(u) in allowed and str(v) in allowed
    ]
    transit = sorted({x for u, v, _b in edges for x in (u, v)} - set(gpus))
    index = {x: i for i, x in enumerate(gpus)}
    for i, x in enumerate(transit):
        index[x] = len(gpus) + i
    kept = sorted((index[u], index[v], bw) for u, v, bw in edges)
    return GroupNet(
        ranks=tuple(ranks),
        nnodes=len(ranks) + len(transit),
        tail=np.array([u for u, _v, _b in kept], dtype=np.int64),
        head=np.array([v for _u, v, _b in kept], dtype=np.int64),
        cap=np.array([b for _u, _v, b in kept], dtype=np.float64),
        relays=name == INTRA,
    )


def hop_distance(net: GroupNet) -> int:
    """The largest number of GPU-to-GPU hops between two of the group's GPUs (transit nodes are free)."""
    p = net.ngpus
    if p <= 1:
        return 1
    adj: list[set[int]] = [set() for _ in range(net.nnodes)]
    for u, v in zip(net.tail.tolist(), net.head.tolist()):
        adj[u].add(v)
    worst = 1
    for s in range(p):
        # 0-1 BFS: entering a GPU costs one hop, entering a transit node is free
        dist = [math.inf] * net.nnodes
        dist[s] = 0
        dq = [s]
        while dq:
            u = dq.pop(0)
            for v in sorted(adj[u]):
                w = dist[u] + (1 if v < p else 0)
                if w < dist[v]:
                    dist[v] = w
                    if v < p:
                        dq.append(v)
                    else:
                        dq.insert(0, v)
        reach = [dist[v] for v in range(p) if v != s]
        if any(math.isinf(x) for x in reach):
            return 0  # disconnected: no route inside the group
        worst = max(worst, int(max(reach)))
    return worst


def direct_solution(
    demand: tuple[tuple[int, int, float], ...], status: str = "direct", lp_size: int = 0
) -> SubSolution:
    """One direct hop per pair in epoch 0: always valid (no LP, or no usable LP solution)."""
    routes = tuple((i, j, ((1.0, ((i, j, 0),)),)) for i, j, _u in demand)
    return SubSolution(1, float("nan"), status, routes, lp_size)


Demand = tuple[tuple[int, int, float], ...]  # (from position, to position, units)
PairRoutes = tuple[int, int, tuple[tuple[float, tuple[Hop, ...]], ...]]  # (i, j, (fraction, GPU path) ...)


def solve(net: GroupNet, demand: Demand, epochs: int, time_limit: float | None) -> SubSolution:
    """The time-expanded LP of the module docstring for ``demand`` ((i, j, units) over positions)."""
    K = max(1, int(epochs))
    if not demand:
        return SubSolution(K, 0.0, "optimal", (), 0)
    te = _TimeExpanded.of(net, K)
    cref = float(net.cap[net.cap < BIG_BW].max()) if (net.cap < BIG_BW).any() else 1.0
    dmax = max(u for _i, _j, u in demand)
    srcs = sorted({i for i, _j, _u in demand})
    lp, col_arcs = _build_lp(net, te, demand, srcs, dmax, cref)
    tau = lp.ncols - 1
    got = _minimise(lp, time_limit, col_arcs, te.n_mv)
    if got is None:
        return direct_solution(demand, "direct", lp.ncols)
    x, status = got
    t_units = float(x[tau]) * K  # in units of dmax bytes / cref
    time_s = t_units * dmax / cref
    routes: list[PairRoutes] = []
    off = 0
    for a, arcs in zip(srcs, col_arcs):
        flow = np.zeros(te.narcs)
        flow[arcs] = np.maximum(x[off : off + arcs.size], 0.0)
        off += arcs.size
        got_routes = _source_routes(net, te, demand, a, flow, dmax)
        if got_routes is None:  # numerically unusable: fall back, still valid
            return direct_solution(demand, "direct", lp.ncols)
        routes += got_routes
    return SubSolution(K, time_s, status, tuple(routes), lp.ncols)


@dataclass(frozen=True)
class _TimeExpanded:
    """A group's graph over ``K`` epochs. Nodes: GPU ``v`` at epoch boundary ``t`` (0..K) is
    ``v * (K + 1) + t``; transit node ``u`` in epoch ``t`` is ``base + (u - P) * K + t``. Arcs: link ``e`` in
    epoch ``t`` is arc ``e * K + t`` (the first ``n_mv``), then a hold-over arc per GPU and epoch (GPU
    ``hv[i]``, in GPU-major order)."""

    P: int
    K: int
    nte: int  # time-expanded nodes
    n_mv: int  # link arcs (the rest hold over)
    ee: npt.NDArray[np.int64]  # the link of each link arc
    hv: npt.NDArray[np.int64]  # the GPU of each hold-over arc
    arc_tail: npt.NDArray[np.int64]
    arc_head: npt.NDArray[np.int64]

    @property
    def narcs(self) -> int:
        return int(self.arc_tail.shape[0])

    @staticmethod
    def of(net: GroupNet, K: int) -> _TimeExpanded:
        P, V = net.ngpus, net.nnodes
        E = int(net.tail.shape[0])
        base = P * (K + 1)

        def node(v: npt.NDArray[np.int64], t: npt.NDArray[np.int64], end: bool) -> npt.NDArray[np.int64]:
            gpu = v < P
            return np.where(gpu, v * (K + 1) + t + (1 if end else 0), base + (v - P) * K + t)

        tt = np.tile(np.arange(K, dtype=np.int64), E)
        ee = np.repeat(np.arange(E, dtype=np.int64), K)
        hv = np.repeat(np.arange(P, dtype=np.int64), K)
        ht = np.tile(np.arange(K, dtype=np.int64), P)
        ho_tail = hv * (K + 1) + ht
        return _TimeExpanded(
            P=P,
            K=K,
            nte=base + (V - P) * K,
            n_mv=E * K,
            ee=ee,
            hv=hv,
            arc_tail=np.concatenate([node(net.tail[ee], tt, False), ho_tail]),
            arc_head=np.concatenate([node(net.head[ee], tt, True), ho_tail + 1]),
        )


def _build_lp(
    net: GroupNet, te: _TimeExpanded, demand: Demand, srcs: list[int], dmax: float, cref: float
) -> tuple[Lp, list[npt.NDArray[np.int64]]]:
    """The LP (columns: every source's usable arcs, then ``tau``; demands in units of ``dmax``, capacities
    relative to ``cref``) and the arcs of each source's columns."""
    P, K, nte, n_mv, narcs = te.P, te.K, te.nte, te.n_mv, te.narcs
    cols: list[npt.NDArray[np.int64]] = []
    rows: list[npt.NDArray[np.int64]] = []
    vals: list[npt.NDArray[np.float64]] = []
    rhs = np.zeros(len(srcs) * nte)
    col_arcs: list[npt.NDArray[np.int64]] = []
    ncol = 0
    # conservation per source (commodity) and time-expanded node
    for k, a in enumerate(srcs):
        ok = np.ones(narcs, dtype=bool)
        gpu_tail = np.concatenate([net.tail[te.ee] < P, np.ones(P * K, dtype=bool)])
        tail_v = np.concatenate([net.tail[te.ee], te.hv])
        head_v = np.concatenate([net.head[te.ee], te.hv])
        is_mv = np.arange(narcs) < n_mv
        ok &= ~(is_mv & (head_v == a))  # nothing flows back into the source
        if not net.relays:
            ok &= ~(is_mv & gpu_tail & (tail_v != a))  # only the source sends
        arcs = np.flatnonzero(ok)
        c = np.arange(ncol, ncol + arcs.size)
        ncol += arcs.size
        col_arcs.append(arcs)
        cols += [c, c]
        rows += [k * nte + te.arc_tail[arcs], k * nte + te.arc_head[arcs]]
        vals += [np.ones(arcs.size), -np.ones(arcs.size)]
        rhs[k * nte + a * (K + 1)] += sum(u for i, _j, u in demand if i == a) / dmax
        for i, j, u in demand:
            if i == a:
                rhs[k * nte + j * (K + 1) + K] -= u / dmax
    nrows_cap = _capacity_rows(net, te, col_arcs, len(srcs) * nte, ncol, cref, cols, rows, vals)
    nrows = len(srcs) * nte + nrows_cap
    lp = Lp(
        ncols=ncol + 1,
        nrows=nrows,
        cols=np.concatenate(cols),
        rows=np.concatenate(rows),
        vals=np.concatenate(vals),
        cost=np.concatenate([np.zeros(ncol), [1.0]]),
        row_lo=np.concatenate([rhs, np.full(nrows_cap, -INF)]),
        row_hi=np.concatenate([rhs, np.zeros(nrows_cap)]),
        col_lo=np.zeros(ncol + 1),
        col_hi=np.full(ncol + 1, INF),
    )
    return lp, col_arcs


def _capacity_rows(
    net: GroupNet,
    te: _TimeExpanded,
    col_arcs: list[npt.NDArray[np.int64]],
    first_cap: int,
    tau: int,
    cref: float,
    cols: list[npt.NDArray[np.int64]],
    rows: list[npt.NDArray[np.int64]],
    vals: list[npt.NDArray[np.float64]],
) -> int:
    """Append the capacity rows (from row ``first_cap``) to the triples: per capped link and epoch, the flow of
    every source on it minus ``cap / cref`` times ``tau`` (column ``tau``) is at most 0. Returns their number."""
    K, n_mv = te.K, te.n_mv
    E = int(net.tail.shape[0])
    capped = np.flatnonzero(net.cap < BIG_BW)
    cap_row = {int(e): first_cap + i for i, e in enumerate(capped.tolist())}
    crow = np.full(E, -1, dtype=np.int64)
    for e, r in cap_row.items():
        crow[e] = r
    for arcs, start in zip(col_arcs, np.cumsum([0] + [x.size for x in col_arcs[:-1]])):
        mv = arcs < n_mv
        e_of = arcs[mv] // K
        t_of = arcs[mv] % K
        keep = crow[e_of] >= 0
        rr = first_cap + (crow[e_of[keep]] - first_cap) * K + t_of[keep]
        cols.append(np.arange(start, start + arcs.size)[mv][keep])
        rows.append(rr)
        vals.append(np.ones(int(keep.sum())))
    for i, e in enumerate(capped.tolist()):
        cols.append(np.full(K, tau))
        rows.append(first_cap + i * K + np.arange(K))
        vals.append(np.full(K, -float(net.cap[e]) / cref))
    return len(capped) * K


def _minimise(
    lp: Lp, time_limit: float | None, col_arcs: list[npt.NDArray[np.int64]], n_mv: int
) -> tuple[npt.NDArray[np.float64], str] | None:
    """Solve for the least ``tau`` (the last column); when proven optimal, solve again with ``tau`` held
    (a hair of slack) for the least bytes on links, so no circulation is left and the flow peels into paths.
    Returns (solution, status of the first phase), or None when HiGHS gave no point."""
    tau = lp.ncols - 1
    solver = Solver(lp, time_limit)
    first = solver.run()
    if first.x is None:
        return None
    x = first.x
    status = first.status
    if status == "optimal":
        cost = np.zeros(lp.ncols)
        off = 0
        for arcs in col_arcs:
            cost[off : off + arcs.size] = (arcs < n_mv).astype(np.float64)
            off += arcs.size
        second = solver.reoptimize(cost, tau, float(x[tau]) * (1 + 1e-7) + 1e-12)
        if second.status == "optimal" and second.x is not None:
            x = second.x
    return x, status


def _source_routes(
    net: GroupNet, te: _TimeExpanded, demand: Demand, a: int, flow: npt.NDArray[np.float64], dmax: float
) -> list[PairRoutes] | None:
    """Source ``a``'s flow (per arc) peeled into GPU paths, per destination in order: the fraction of the
    pair's data on each path and the earliest epoch of each hop (epochs of one path merged). None when the
    paths do not add up to the demand (numerically unusable)."""
    P, K, n_mv = te.P, te.K, te.n_mv
    dem = np.zeros(te.nte)
    want = {j: u / dmax for i, j, u in demand if i == a}
    for j, u in want.items():
        dem[j * (K + 1) + K] = u
    tol = 1e-9 * max(float(dem.sum()), 1.0)
    per: dict[int, dict[tuple[tuple[int, int], ...], tuple[float, tuple[int, ...]]]] = {}
    for sink, walk, amount in peel(te.nte, te.arc_tail, te.arc_head, flow, a * (K + 1), dem, tol):
        j = int(sink) // (K + 1)
        hops: list[Hop] = []
        at = a
        for arc in walk:
            if arc >= n_mv:
                continue
            e, t = divmod(int(arc), K)
            h = int(net.head[e])
            if h < P:
                hops.append((at, h, t))
                at = h
        # one entry per GPU path (epochs of the same path merged: the earliest epoch of each hop)
        key = tuple((u, v) for u, v, _t in hops)
        cur = per.setdefault(j, {}).get(key)
        ep = tuple(t for _u, _v, t in hops)
        if cur is not None:
            ep = tuple(min(x, y) for x, y in zip(cur[1], ep))
            amount += cur[0]
        per[j][key] = (amount, ep)
    out: list[PairRoutes] = []
    for j in sorted(want):
        paths = per.get(j, {})
        total = sum(amt for amt, _ep in paths.values())
        if total <= 0 or abs(total - want[j]) > 1e-6 * max(want[j], 1e-12) + 1e-9:
            return None
        merged = [
            (amt / total, tuple((u, v, t) for (u, v), t in zip(gp, ep)))
            for gp, (amt, ep) in sorted(paths.items())
        ]
        out.append((a, j, tuple(merged)))
    return out
