"""``mcf``: max-concurrent multi-commodity flow schedules (Basu, Zhao et al., "Efficient All-to-All Collective
Communication Schedules for Direct-Connect Topologies", HPDC'24), for direct-connect graphs and server presets.

1. **Flow** (:mod:`a2acc.flows`): the chunk matrix is routed by an LP solved with HiGHS: ``link`` (link-based,
   source-aggregated; exact optimum), ``path`` (over k short paths per pair) or ``time`` (store-and-forward
   epochs, direct-connect graphs only). Past ``max_vars`` LP variables (or with ``groups`` set) the master
   LP + child LPs decomposition runs instead; its children go through ``workers`` (local processes or
   ``dask://HOST:PORT``). ``time_limit`` bounds every solve; a limit hit with no solution falls back to
   shortest-path routing, and the plan's metadata says it is not proven optimal.
2. **Paths**: each source's flow is peeled into paths exactly (:func:`a2acc.flows.paths.peel`); a pair's chunks
   are shared over its paths by the largest-remainder rule.
3. **Schedule**: a path's chunks are cut into up to ``pipeline`` pieces; each piece hops GPU to GPU along the
   path (switches and NICs are transit nodes, GPUs store and forward through scratch); a hop depends on the
   piece's previous hop, so pieces pipeline and every relay reads only what has arrived. Stage = hop number
   (time-stepped flows: the epoch). All pieces start at once: the LP already keeps every link's bytes within
   ``cap x T``, and the simulator shares links fairly among concurrent transfers.

``meta`` records the LP's completion time (``lp_time_us``), the lower bound (``lp_bound_us``: the LP optimum,
or the decomposition master's relaxation), ``optimal`` and the formulation used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from a2acc.errors import InputError, InternalError
from a2acc.flows.decompose import decomposed_mcf
from a2acc.flows.mcf import (
    LinkFlow,
    PathFlow,
    SteppedFlow,
    candidate_paths,
    hop_distances,
    link_mcf,
    path_mcf,
    time_stepped_mcf,
)
from a2acc.flows.network import FlowNetwork
from a2acc.flows.parallel import parse_workers
from a2acc.flows.paths import chunk_split, peel
from a2acc.ir.builder import ProgramBuilder
from a2acc.ir.program import Buf, Program
from a2acc.planners import PlanRequest


@dataclass(frozen=True)
class Options:
    formulation: Literal["link", "path", "time"] = field(
        default="link", metadata={"help": "link-based (exact), path-based (k short paths) or time-stepped"}
    )
    k: int = field(default=4, metadata={"help": "paths per pair for the path-based formulation"})
    epochs: int = field(default=0, metadata={"help": "time-stepped: epochs (0: search from the diameter)"})
    groups: int = field(
        default=0, metadata={"help": "decompose into this many source groups (0: only if large)"}
    )
    rounds: int = field(default=4, metadata={"help": "capacity-share rounds of the decomposition"})
    max_vars: int = field(default=600_000, metadata={"help": "decompose when the monolithic LP is larger"})
    workers: str = field(
        default="1", metadata={"help": "child LPs: 1, N local processes, or dask://HOST:PORT"}
    )
    time_limit: float = field(default=0.0, metadata={"help": "seconds per LP solve (0: none)"})
    pipeline: int = field(default=2, metadata={"help": "split a path's chunks into up to this many pieces"})

    def check(self) -> None:
        for name in ("k", "pipeline", "rounds"):
            if getattr(self, name) < 1:
                raise InputError("--opt", name, getattr(self, name), "must be an integer >= 1")
        for name in ("epochs", "groups", "max_vars"):
            if getattr(self, name) < 0:
                raise InputError("--opt", name, getattr(self, name), "must be an integer >= 0")
        if not self.time_limit >= 0:
            raise InputError("--opt", "time_limit", self.time_limit, "seconds >= 0")
        parse_workers(self.workers)


# a routed piece of a pair: (source rank, destination rank, node path as edge list, chunks, epochs or None)
Route = tuple[int, int, list[int], int, list[int] | None]


def plan(req: PlanRequest) -> Program:
    opts: Options = req.options if isinstance(req.options, Options) else Options()
    topo = req.topology
    net = FlowNetwork.of(topo)
    counts = req.counts
    n = req.nranks
    demand = counts.astype(np.float64) * req.unit_bytes  # route the layout's bytes (padding included)
    np.fill_diagonal(demand, 0.0)
    limit = opts.time_limit or None
    meta: dict[str, object] = {"formulation": opts.formulation}
    routes: list[Route] = []
    nsrc = int((demand.sum(axis=1) > 0).sum())
    optimal = True
    if opts.formulation == "time":
        if topo.direct is None:
            raise InputError(
                "--opt", "formulation", "time", "time-stepped flows need a direct-connect topology"
            )
        sf = _stepped(net, demand, opts.epochs, limit)
        if sf is None:
            routes, optimal = _fallback(net, counts), False
        else:
            routes = _stepped_routes(net, sf, counts, demand)
            meta.update(lp_time_us=sf.time_s * 1e6, lp_bound_us=sf.time_s * 1e6, epochs=sf.epochs)
            optimal = sf.status == "optimal"
    else:
        size = nsrc * net.nedges if opts.formulation == "link" else nsrc * n * opts.k
        if opts.groups or size > opts.max_vars:
            groups = opts.groups or max(2, -(-size // opts.max_vars))
            dc = decomposed_mcf(
                net,
                demand,
                groups=groups,
                formulation=opts.formulation,
                k=opts.k,
                rounds=opts.rounds,
                workers=opts.workers,
                time_limit=limit,
            )
            if dc is None:
                routes, optimal = _fallback(net, counts), False
            else:
                for child in dc.children:
                    routes += _routes(net, child, counts, demand)
                meta.update(lp_time_us=dc.time_s * 1e6, lp_bound_us=dc.bound_s * 1e6, groups=len(dc.groups))
                optimal = False  # feasible, within lp_time_us / lp_bound_us of the optimum
        else:
            flow: LinkFlow | PathFlow | None
            if opts.formulation == "link":
                flow = link_mcf(net, demand, time_limit=limit)
            else:
                flow = path_mcf(net, demand, k=opts.k, time_limit=limit)
            if flow is None:
                routes, optimal = _fallback(net, counts), False
            else:
                routes = _routes(net, flow, counts, demand)
                meta.update(lp_time_us=flow.time_s * 1e6, lp_bound_us=flow.time_s * 1e6)
                optimal = flow.status == "optimal" and opts.formulation == "link"
    meta["optimal"] = optimal
    if not optimal:
        meta["note"] = "not proven optimal" + (
            " (time limit: shortest-path routing)" if "lp_time_us" not in meta else ""
        )
    return _emit(req, net, routes, opts.pipeline, meta)


# ---------------------------------------------------------------------- flows -> routes
def _pair_routes(
    s: int, d: int, paths: list[tuple[list[int], float, list[int] | None]], count: int
) -> list[Route]:
    chunks = chunk_split(count, [a for _p, a, _t in paths])
    return [(s, d, p, c, t) for (p, _a, t), c in zip(paths, chunks) if c > 0]


def _routes(
    net: FlowNetwork,
    flow: LinkFlow | PathFlow,
    counts: npt.NDArray[np.int64],
    demand: npt.NDArray[np.float64],
) -> list[Route]:
    out: list[Route] = []
    if isinstance(flow, PathFlow):
        by_pair: dict[tuple[int, int], list[tuple[list[int], float, list[int] | None]]] = {}
        for (s, d), p, a in zip(flow.pairs.tolist(), flow.paths, flow.amount.tolist()):
            by_pair.setdefault((s, d), []).append((list(p), a, None))
        for (s, d), ps in sorted(by_pair.items()):
            out += _pair_routes(s, d, ps, int(counts[s, d]))
        return out
    for k, s in enumerate(flow.sources.tolist()):
        dem = np.zeros(net.nnodes)
        dem[net.rank_node] = demand[s]
        tol = 1e-9 * max(float(dem.sum()), 1.0)
        per: dict[int, list[tuple[list[int], float, list[int] | None]]] = {}
        for v, walk, amount in peel(
            net.nnodes, net.tail, net.head, flow.flow[k], int(net.rank_node[s]), dem, tol
        ):
            per.setdefault(int(net.node_rank[v]), []).append((walk, amount, None))
        for d, ps in sorted(per.items()):
            out += _pair_routes(s, d, ps, int(counts[s, d]))
    return out


def _stepped(
    net: FlowNetwork, demand: npt.NDArray[np.float64], epochs: int, limit: float | None
) -> SteppedFlow | None:
    """The time-stepped flow with ``epochs`` epochs, or the best of diameter .. diameter + 2 epochs."""
    if epochs:
        return time_stepped_mcf(net, demand, epochs, time_limit=limit)
    dist = hop_distances(net)
    diam = max(1, int(dist[np.ix_(net.rank_node, net.rank_node)].max()))
    best: SteppedFlow | None = None
    for k in range(diam, diam + 3):
        sf = time_stepped_mcf(net, demand, k, time_limit=limit)
        if sf is not None and (best is None or sf.time_s < best.time_s):
            best = sf
    return best


def _stepped_routes(
    net: FlowNetwork, sf: SteppedFlow, counts: npt.NDArray[np.int64], demand: npt.NDArray[np.float64]
) -> list[Route]:
    """Peel each source's time-expanded flow. Nodes (v, t), t = 0..K, are numbered v * (K + 1) + t; transfer
    (e, t) is edge e * K + t from (tail, t) to (head, t + 1); holdover (v, t) is edge E * K + v * K + t."""
    V, E, K = net.nnodes, net.nedges, sf.epochs
    tk = np.arange(K)[None, :]
    te_tail = np.concatenate(
        [(tk + net.tail[:, None] * (K + 1)).ravel(), (tk + np.arange(V)[:, None] * (K + 1)).ravel()]
    )
    te_head = te_tail + 1
    te_head[: E * K] = (tk + 1 + net.head[:, None] * (K + 1)).ravel()
    out: list[Route] = []
    for k, s in enumerate(sf.sources.tolist()):
        f = sf.flow[k]  # (E, K)
        src = int(net.rank_node[s])
        arrive = np.zeros((V, K + 1))  # arrive[v, t]: bytes reaching v at the start of t (sent in t - 1)
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
        per: dict[int, list[tuple[list[int], float, list[int] | None]]] = {}
        for v, walk, amount in peel(V * (K + 1), te_tail, te_head, flow_te, src * (K + 1), dem, tol):
            moves = [w for w in walk if w < E * K]
            per.setdefault(int(net.node_rank[v // (K + 1)]), []).append(
                ([w // K for w in moves], amount, [w % K for w in moves])
            )
        for d, ps in sorted(per.items()):
            out += _pair_routes(s, d, ps, int(counts[s, d]))
    return out


def _fallback(net: FlowNetwork, counts: npt.NDArray[np.int64]) -> list[Route]:
    """Shortest-path routing (no LP): always feasible."""
    dist = hop_distances(net)
    out: list[Route] = []
    n = counts.shape[0]
    for s in range(n):
        for d in range(n):
            if s != d and counts[s, d] > 0:
                (p,) = candidate_paths(net, dist, s, d, 1)
                out.append((s, d, list(p), int(counts[s, d]), None))
    return out


# ---------------------------------------------------------------------- routes -> Program
def _emit(
    req: PlanRequest, net: FlowNetwork, routes: list[Route], pipeline: int, meta: dict[str, object]
) -> Program:
    counts = req.counts
    n = req.nranks
    b = ProgramBuilder(f"mcf-{n}", "mcf", counts, req.unit_bytes, req.traffic, topology=req.topology)
    for r in range(n):
        c = int(counts[r, r])
        if c:
            b.add((r, Buf.INPUT, int(b.in_off[r, r])), (r, Buf.OUTPUT, int(b.out_off[r, r])), c)
    sent = np.zeros_like(counts)
    # pieces: (source, destination, input offset, output offset, chunks, hops [(rank, stage, edge)])
    pieces: list[tuple[int, int, int, int, int, list[tuple[int, int, int]]]] = []
    for s, d, edges, chunks, epochs in routes:
        hops = _gpu_hops(net, edges, epochs)
        base_in = int(b.in_off[s, d]) + int(sent[s, d])
        base_out = int(b.out_off[d, s]) + int(sent[s, d])
        sent[s, d] += chunks
        k = min(pipeline, chunks)
        at = 0
        for i in range(k):
            size = chunks // k + (1 if i < chunks % k else 0)
            pieces.append((s, d, base_in + at, base_out + at, size, hops))
            at += size
    if not np.array_equal(sent + np.diag(np.diag(counts)), counts):
        raise InternalError("mcf: the routes do not carry every chunk of the layout")
    if req.topology.direct is not None:
        order, link_prev = _list_schedule(net, pieces, req.unit_bytes, req.topology.direct.latency * 1e-6)
    else:
        order, link_prev = _piece_order(pieces), {}
    op_of: dict[tuple[int, int], int] = {}
    loc: dict[int, tuple[int, int, int]] = {}
    max_stage = 0
    for pid, h in order:
        s, d, off_in, off_out, size, hops = pieces[pid]
        rank, stage, _e = hops[h]
        src = loc.get(pid, (s, Buf.INPUT, off_in))
        dst = (
            (d, Buf.OUTPUT, off_out)
            if h == len(hops) - 1
            else (rank, Buf.SCRATCH, b.alloc_scratch(rank, size))
        )
        deps = [op_of[(pid, h - 1)]] if h else []
        before = link_prev.get((pid, h))
        if before is not None:
            deps.append(op_of[before])
        op_of[(pid, h)] = b.add(src, dst, size, deps, stage=stage)
        loc[pid] = dst
        max_stage = max(max_stage, stage)
    b.meta.update({k: v for k, v in meta.items() if isinstance(v, (int, float, str, bool))})
    b.meta["stages"] = max_stage + 1 if pieces else 0
    return b.build()


def _piece_order(
    pieces: list[tuple[int, int, int, int, int, list[tuple[int, int, int]]]],
) -> list[tuple[int, int]]:
    return [(pid, h) for pid, p in enumerate(pieces) for h in range(len(p[5]))]


def _list_schedule(
    net: FlowNetwork,
    pieces: list[tuple[int, int, int, int, int, list[tuple[int, int, int]]]],
    unit: int,
    alpha: float,
) -> tuple[list[tuple[int, int]], dict[tuple[int, int], tuple[int, int]]]:
    """Order the hops on every edge of a direct-connect graph by list scheduling, and chain them.

    Flows from the LP assume every hop of every path streams at a steady rate at once; a store-and-forward
    schedule with fair link sharing instead lets the first hops of long paths crawl alongside one-hop traffic,
    so relays start late and the last hops overrun (measured: 1.85x the LP time on a 4x4 torus). Here each
    edge serves, whenever it is free, the ready hop with the most hops still ahead (then the earliest ready,
    then the lowest piece id), at the edge's full rate; the resulting per-edge order becomes a chain of
    dependencies. Returns the hops in start order (a topological order) and each hop's predecessor on its edge.
    """
    import heapq

    queue: dict[int, list[tuple[int, float, int, int]]] = {}
    busy: dict[int, bool] = {}
    last_on: dict[int, tuple[int, int]] = {}
    prev_on: dict[tuple[int, int], tuple[int, int]] = {}
    order: list[tuple[int, int]] = []
    running: list[tuple[float, int, int, int]] = []

    def ready(pid: int, h: int, t: float) -> None:
        e = pieces[pid][5][h][2]
        heapq.heappush(queue.setdefault(e, []), (-(len(pieces[pid][5]) - h), t, pid, h))

    def start(e: int, now: float) -> None:
        q = queue.get(e)
        if busy.get(e) or not q:
            return
        _rem, _t, pid, h = heapq.heappop(q)
        busy[e] = True
        if e in last_on:
            prev_on[(pid, h)] = last_on[e]
        last_on[e] = (pid, h)
        order.append((pid, h))
        heapq.heappush(running, (now + alpha + pieces[pid][4] * unit / float(net.cap[e]), e, pid, h))

    for pid in range(len(pieces)):
        ready(pid, 0, 0.0)
    for e in sorted(queue):
        start(e, 0.0)
    while running:
        now, e, pid, h = heapq.heappop(running)
        busy[e] = False
        if h + 1 < len(pieces[pid][5]):
            ready(pid, h + 1, now)
            start(pieces[pid][5][h + 1][2], now)
        start(e, now)
    return order, prev_on


def _gpu_hops(net: FlowNetwork, edges: list[int], epochs: list[int] | None) -> list[tuple[int, int, int]]:
    """The GPU-to-GPU hops of a path: (rank reached, stage, last edge); transit nodes (switches, NICs) are
    skipped, so on server presets a hop may cross several edges (the simulator routes it)."""
    hops: list[tuple[int, int, int]] = []
    for i, e in enumerate(edges):
        r = int(net.node_rank[int(net.head[e])])
        if r >= 0:
            hops.append((r, epochs[i] if epochs is not None else len(hops), e))
    return hops
