"""``mcf``: max-concurrent multi-commodity flow schedules (Basu, Zhao et al., "Efficient All-to-All Collective
Communication Schedules for Direct-Connect Topologies", HPDC'24), for direct-connect graphs and server presets.

1. **Flow** (:mod:`a2acc.flows`): the chunk matrix is routed by a flow. While the LP fits ``max_vars``
   variables it is solved exactly with HiGHS: ``link`` (link-based, source-aggregated; exact optimum), ``path``
   (over k short paths per pair) or ``time`` (store-and-forward epochs, direct-connect graphs only). Larger
   instances (N ~ 1000) take the first-order path flow of :mod:`a2acc.flows.scale`, with a certified lower
   bound; ``groups=G`` asks for the master LP + child LPs decomposition instead (:mod:`a2acc.flows.decompose`).
   ``time_limit`` bounds every solve: an LP without a usable point falls back to shortest-path routing and the
   plan's metadata says it is not proven optimal.
2. **Routes** (:mod:`a2acc.flows.routes`): flows are peeled into paths, a pair's chunks shared over its paths
   by the largest-remainder rule; a pair the flow does not carry in full (a time-limited LP point) is routed on
   a shortest path, so every plan carries every chunk.
3. **Schedule**: on direct-connect graphs :mod:`a2acc.flows.schedule` cuts routes into pieces and list-schedules
   every link under the simulator's model (slots per link, fluid due times, forward-backward improvement);
   each op depends on its piece's previous hop and on the op whose end admitted it. That Program is simulated;
   where it does not reproduce its schedule (at scale: see :func:`_robust`) the hop-only form (each op after
   its piece's previous hop only) is simulated too and the faster kept (``meta.deps``). On server presets a
   route's chunks are cut into up to ``pipeline`` pieces that hop GPU to GPU (switches and NICs are transit
   nodes) with no link order: the simulator shares those multi-link routes fairly. Stage = hop number
   (time-stepped flows: the epoch).

``meta`` records the flow's completion time (``lp_time_us``), the lower bound (``lp_bound_us``: the LP optimum,
the certified bound at scale, or the decomposition master's relaxation), the schedule's makespan under the
ideal model (``schedule_us``), the kept Program's simulated time (``simulated_us``; direct-connect graphs) and
its form (``deps``), ``optimal`` and the formulation used.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from a2acc.errors import InputError, InternalError
from a2acc.flows import routes as rt
from a2acc.flows.decompose import decomposed_mcf
from a2acc.flows.mcf import LinkFlow, SteppedFlow, hop_distances, link_mcf, path_mcf, time_stepped_mcf
from a2acc.flows.mcf import forget as forget
from a2acc.flows.network import FlowNetwork
from a2acc.flows.parallel import executor, parse_workers, probe
from a2acc.flows.scale import ascent_weights, dual_bound, path_flow
from a2acc.flows.schedule import Pieces, Timed, cut_pieces, route_pieces, schedule
from a2acc.ir.builder import ProgramBuilder
from a2acc.ir.program import Buf, Program
from a2acc.planners import PlanRequest
from a2acc.segments import segment_indices, segment_positions

I64 = npt.NDArray[np.int64]
log = logging.getLogger("a2acc.planners.mcf")

#: option limits (value, why), checked before any allocation
LIMITS: dict[str, tuple[int, str]] = {
    "k": (64, "paths per pair: one per first hop, so more than a node's out-degree adds nothing"),
    "epochs": (64, "the time-stepped LP has one variable per source, edge and epoch"),
    "groups": (4096, "one child LP per group, at most one group per GPU"),
    "rounds": (32, "each round re-solves every child LP"),
    "pipeline": (64, "pieces per route on server presets, each an op per hop"),
    "iterations": (10_000, "first-order iterations at scale, each ~1 s at 1024 GPUs"),
    "max_vars": (
        2_000_000,
        "monolithic LPs beyond this take hours and many GiB in HiGHS (524k variables: over 20 minutes here)",
    ),
}
#: the largest time-stepped LP built (sources x edges x epochs variables)
MAX_STEPPED_VARS = 300_000


@dataclass(frozen=True)
class Options:
    formulation: Literal["link", "path", "time"] = field(
        default="link",
        metadata={"help": "link-based (exact), path-based (k short paths) or time-stepped (direct graphs)"},
    )
    k: int = field(default=4, metadata={"help": f"paths per pair for formulation=path (1..{LIMITS['k'][0]})"})
    epochs: int = field(
        default=0,
        metadata={
            "help": f"time-stepped: epochs (0: search from the diameter; at most {LIMITS['epochs'][0]})"
        },
    )
    groups: int = field(
        default=0, metadata={"help": "decompose into this many source groups (master + child LPs; 0: never)"}
    )
    rounds: int = field(default=4, metadata={"help": "capacity-share rounds of the decomposition"})
    max_vars: int = field(
        default=600_000, metadata={"help": "largest monolithic LP; beyond it the first-order flow at scale"}
    )
    iterations: int = field(default=200, metadata={"help": "first-order iterations of the flow at scale"})
    workers: str = field(
        default="1",
        metadata={"help": "child LPs and bound blocks: 1, N local processes, or dask://HOST:PORT"},
    )
    time_limit: float = field(default=0.0, metadata={"help": "seconds per LP solve (0: none)"})
    pipeline: int = field(
        default=2, metadata={"help": "server presets: split a route's chunks into up to this many pieces"}
    )

    def check(self) -> None:
        for name in ("k", "pipeline", "rounds", "iterations"):
            if getattr(self, name) < 1:
                raise InputError("--opt", name, getattr(self, name), "must be an integer >= 1")
        for name in ("epochs", "groups", "max_vars"):
            if getattr(self, name) < 0:
                raise InputError("--opt", name, getattr(self, name), "must be an integer >= 0")
        for name, (limit, why) in LIMITS.items():
            if getattr(self, name) > limit:
                raise InputError("--opt", name, getattr(self, name), f"at most {limit:,}: {why}")
        if not 0 <= self.time_limit < 1e7:
            raise InputError(
                "--opt", "time_limit", self.time_limit, "seconds from 0 (no limit) to less than 1e7"
            )
        parse_workers(self.workers)


def plan(req: PlanRequest) -> Program:
    opts: Options = req.options if isinstance(req.options, Options) else Options()
    topo = req.topology
    net = FlowNetwork.of(topo)
    if opts.formulation == "time" and topo.direct is None:
        raise InputError("--opt", "formulation", "time", "time-stepped flows need a direct-connect topology")
    demand = req.counts.astype(np.float64) * req.unit_bytes  # route the layout's bytes (padding included)
    np.fill_diagonal(demand, 0.0)
    nsrc = int((demand.sum(axis=1) > 0).sum())
    _check_size(opts, net, req.nranks, nsrc)
    probe(opts.workers)  # a Dask scheduler that does not answer fails now, not after the LP
    with _Steps() as steps:
        with steps.step(f"flow, formulation={opts.formulation}"):
            routes, meta = _flow(req, net, opts, demand, nsrc)
        routes, repaired = rt.complete(net, routes, req.counts)
        if repaired:
            meta["optimal"] = False
            meta["rerouted_pairs"] = repaired
        if not meta["optimal"]:
            meta["note"] = "not proven optimal" + (
                " (time limit: shortest-path routing)" if "lp_time_us" not in meta else ""
            )
        return _emit(req, net, routes, opts, meta, steps)


# ---------------------------------------------------------------------- limits before work
def _lp_vars(opts: Options, net: FlowNetwork, n: int, nsrc: int) -> int:
    return nsrc * net.nedges if opts.formulation == "link" else nsrc * (n - 1) * opts.k


def _check_size(opts: Options, net: FlowNetwork, n: int, nsrc: int) -> None:
    """Refuse work whose size the options scale past what fits (checked before any LP is built)."""
    if opts.formulation == "time":
        epochs = opts.epochs or int(hop_distances(net).max()) + 2
        size = nsrc * net.nedges * epochs
        if size > MAX_STEPPED_VARS:
            raise InputError(
                "--opt",
                "epochs" if opts.epochs else "formulation",
                opts.epochs or "time",
                f"the time-stepped LP would have {size:,} variables ({nsrc} sources x {net.nedges} edges x "
                f"{epochs} epochs); at most {MAX_STEPPED_VARS:,} fit: use fewer epochs or formulation=link",
            )
    if opts.groups > max(nsrc, 1):
        raise InputError("--opt", "groups", opts.groups, f"at most one group per sending GPU ({nsrc} here)")


# ---------------------------------------------------------------------- flows
def _flow(
    req: PlanRequest, net: FlowNetwork, opts: Options, demand: npt.NDArray[np.float64], nsrc: int
) -> tuple[rt.Routes, dict[str, object]]:
    counts = req.counts
    limit = opts.time_limit or None
    meta: dict[str, object] = {"formulation": opts.formulation, "optimal": False}
    if opts.formulation == "time":
        return _stepped(net, opts, demand, counts, limit, meta)
    if opts.groups:
        dc = decomposed_mcf(
            net,
            demand,
            groups=opts.groups,
            formulation=opts.formulation,
            k=opts.k,
            rounds=opts.rounds,
            workers=opts.workers,
            time_limit=limit,
        )
        if dc is None:
            return rt.shortest(net, counts), meta
        parts = [
            rt.from_link_flow(net, c, counts, demand)
            if isinstance(c, LinkFlow)
            else rt.from_path_flow(c, counts)
            for c in dc.children
        ]
        meta.update(lp_time_us=dc.time_s * 1e6, lp_bound_us=dc.bound_s * 1e6, groups=len(dc.groups))
        return rt.concat(parts), meta
    if _lp_vars(opts, net, req.nranks, nsrc) > opts.max_vars:
        return _at_scale(net, opts, demand, counts, limit, meta)
    if opts.formulation == "link":
        lf = link_mcf(net, demand, time_limit=limit)
        if lf is None:
            return rt.shortest(net, counts), meta
        meta.update(lp_time_us=lf.time_s * 1e6, lp_bound_us=lf.time_s * 1e6, optimal=lf.status == "optimal")
        return rt.from_link_flow(net, lf, counts, demand), meta
    pf = path_mcf(net, demand, k=opts.k, time_limit=limit)
    if pf is None:
        return rt.shortest(net, counts), meta
    meta.update(lp_time_us=pf.time_s * 1e6, lp_bound_us=pf.time_s * 1e6)
    return rt.from_path_flow(pf, counts), meta


def _stepped(
    net: FlowNetwork,
    opts: Options,
    demand: npt.NDArray[np.float64],
    counts: I64,
    limit: float | None,
    meta: dict[str, object],
) -> tuple[rt.Routes, dict[str, object]]:
    """The time-stepped flow with ``epochs`` epochs, or the best of diameter .. diameter + 2 epochs."""
    if opts.epochs:
        tries = [opts.epochs]
    else:
        dist = hop_distances(net)
        diam = max(1, int(dist[np.ix_(net.rank_node, net.rank_node)].max()))
        tries = list(range(diam, diam + 3))
    best: SteppedFlow | None = None
    for k in tries:
        sf = time_stepped_mcf(net, demand, k, time_limit=limit)
        if sf is not None and (best is None or sf.time_s < best.time_s):
            best = sf
    if best is None:
        return rt.shortest(net, counts), meta
    meta.update(
        lp_time_us=best.time_s * 1e6,
        lp_bound_us=best.time_s * 1e6,
        epochs=best.epochs,
        optimal=best.status == "optimal",
    )
    return rt.from_stepped_flow(net, best, counts, demand), meta


def _at_scale(
    net: FlowNetwork,
    opts: Options,
    demand: npt.NDArray[np.float64],
    counts: I64,
    limit: float | None,
    meta: dict[str, object],
) -> tuple[rt.Routes, dict[str, object]]:
    """The first-order path flow over candidate paths and its certified bound (:mod:`a2acc.flows.scale`)."""
    k = max(opts.k, int(np.bincount(net.tail, minlength=net.nnodes).max()))  # one path per first hop
    # the bound's ascent needs no flow: with workers it runs in one of them while this process finds the flow
    # (at 1024 GPUs each takes minutes); the weights are the same wherever they are computed
    with executor(opts.workers) as ex:
        pending = None if ex is None else ex.submit(ascent_weights, net, demand, k)
        flow = path_flow(net, demand, k=k, iterations=opts.iterations, time_limit=limit)
        ascent = ascent_weights(net, demand, k) if pending is None else pending.result()
    bound, how = dual_bound(net, demand, flow, k=k, workers=opts.workers, ascent=ascent)
    npair = flow.cand.pairs.shape[0]
    pc = counts[flow.cand.pairs[:, 0], flow.cand.pairs[:, 1]]
    chunks = rt.split_chunks(flow.cand.pair, flow.amount, pc)
    sp, dp = flow.cand.pairs[flow.cand.pair, 0], flow.cand.pairs[flow.cand.pair, 1]
    routes = rt.Routes(sp, dp, chunks, flow.cand.ptr, flow.cand.edges).select(chunks > 0)
    meta.update(
        formulation="scale",
        lp_time_us=flow.time_s * 1e6,
        lp_bound_us=bound * 1e6,
        bound="certified (" + how + ")",
        iterations=flow.iterations,
        pairs=npair,
    )
    return routes, meta


# ---------------------------------------------------------------------- routes -> Program
def _gpu_routes(net: FlowNetwork, routes: rt.Routes) -> rt.Routes:
    """Routes cut to their GPU-to-GPU hops: on server presets a hop's transit nodes (switches, NICs) drop out
    and the hop is labelled by its last edge (the simulator routes it through the fabric)."""
    keep = net.node_rank[net.head[routes.edges]] >= 0
    if keep.all():
        return routes
    owner = np.repeat(np.arange(len(routes)), np.diff(routes.ptr))
    lens = np.bincount(owner[keep], minlength=len(routes))
    ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    ep = None if routes.epochs is None else routes.epochs[keep]
    return rt.Routes(routes.src, routes.dst, routes.chunks, ptr, routes.edges[keep], ep)


def _even_pieces(routes: rt.Routes, k: int) -> Pieces:
    """Up to ``k`` equal pieces per route (server presets)."""
    c = routes.chunks
    npieces = np.minimum(c, k)
    route = np.repeat(np.arange(len(routes), dtype=np.int64), npieces)
    i = segment_positions(npieces)
    kk = npieces[route]
    cnt = c[route] // kk + (i < c[route] % kk)
    off = i * (c[route] // kk) + np.minimum(i, c[route] % kk)
    return route_pieces(route, off, cnt, c, routes.ptr, routes.edges)


def _emit(
    req: PlanRequest,
    net: FlowNetwork,
    routes: rt.Routes,
    opts: Options,
    meta: dict[str, object],
    steps: _Steps,
) -> Program:
    topo = req.topology
    routes = _gpu_routes(net, routes)
    if topo.direct is None:
        pc = _even_pieces(routes, opts.pipeline)
        tm = Timed(np.arange(pc.nhops), np.full(pc.nhops, -1), np.zeros(pc.nhops), np.zeros(pc.nhops))
        return _build(req, net, routes, pc, tm, _stages(routes, pc), meta)
    alpha = topo.direct.latency * 1e-6
    mid = max(1, int(4 * alpha * float(net.cap.min())) // req.unit_bytes)
    pc = cut_pieces(routes.chunks, routes.ptr, routes.edges, mid)
    nbytes = pc.cnt.astype(np.float64) * req.unit_bytes
    with steps.step(f"list schedule of {pc.nhops:,} hops"):
        tm = schedule(pc, nbytes, net.cap, np.full(net.nedges, alpha))
    meta.update(schedule_us=tm.makespan * 1e6, window=tm.window, passes=tm.passes, piece_chunks=mid)
    return _robust(req, net, routes, pc, tm, _stages(routes, pc), meta, steps)


#: how often the progress thread looks at the clock (it redraws only when the shown second changes)
TICK_S = 0.1


class _Steps:
    """Progress of the planner's long steps (the flow: an exact LP can take minutes; on direct-connect graphs
    the list schedule and the simulations, minutes each at 1024 GPUs): a ``tqdm`` status on standard error when
    it is a terminal, its elapsed time redrawn as each second passes while a step runs, and a log line
    (``a2acc.planners.mcf``, INFO) per step with its wall time. Times go to the log only: a plan's metadata
    stays the same in every run."""

    def __enter__(self) -> _Steps:
        from tqdm import tqdm

        self.bar: Any = tqdm(
            desc="mcf", file=sys.stderr, disable=None, leave=False, bar_format="{desc} {elapsed}"
        )
        self.done = threading.Event()
        self.ticker: threading.Thread | None = None
        if not self.bar.disable:  # a step's solve or loop updates nothing: a thread refreshes the clock
            self.ticker = threading.Thread(target=self._tick, name="a2acc-mcf-progress", daemon=True)
            self.ticker.start()
        return self

    def _tick(self) -> None:
        """Redraw the clock within a tenth of a second of each new whole second of the step (a step's start
        resets the clock, so a fixed one-second period, out of phase with it, could show a second late)."""
        shown = -1
        while not self.done.wait(TICK_S):
            second = int(self.bar.format_dict["elapsed"])
            if second != shown:
                shown = second
                self.bar.refresh()

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        if self.ticker is not None:
            self.ticker.join()
        self.bar.close()

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        self.bar.reset()  # the clock shows this step's time
        self.bar.set_description_str(f"mcf: {what}")
        t0 = time.perf_counter()
        yield
        log.info("mcf: %s: %.1f s", what, time.perf_counter() - t0)


#: how far above the list schedule's makespan a Program may simulate before the hop-only form is tried
ROBUST_SLACK = 0.02


def _robust(
    req: PlanRequest,
    net: FlowNetwork,
    routes: rt.Routes,
    pc: Pieces,
    tm: Timed,
    stage: I64,
    meta: dict[str, object],
    steps: _Steps,
) -> Program:
    """The Program of a direct-connect schedule, in the form that simulates faster.

    Its admission form (each op after its piece's previous hop and after the op whose end admitted it)
    reproduces the list schedule when every op ends exactly when the schedule says. At scale it does not:
    the admissions chain ops across links, and the dynamics amplify differences as small as rounding (a 1e-13
    change of the link capacities moved a 199 k-op torus Program's simulated time by 1.6 us; on the 16x8x8
    torus the Program simulated 1.5x its schedule). An executor's timing noise is far larger. So the Program
    is simulated (the ideal model, as ``a2acc simulate`` times direct-connect graphs; the result is remembered
    for the caller's own simulation) and, when it comes out more than :data:`ROBUST_SLACK` above the
    schedule, the hop-only form (each op after its piece's previous hop only: every link serves whatever has
    arrived, shared fairly) is built and simulated too; the faster is kept. ``meta.deps`` says which."""
    from a2acc.analysis.fastsim import forget, simulate_fast

    def form(admission: bool) -> Program:
        timed = tm if admission else replace(tm, after=np.full(pc.nhops, -1))  # no admitters: hop-only
        deps = "admission" if admission else "hop"
        with steps.step(f"Program, {deps} form"):
            return _build(req, net, routes, pc, timed, stage, {**meta, "deps": deps})

    def simulated(prog: Program) -> float:
        with steps.step(f"simulation, {prog.meta['deps']} form"):
            got = simulate_fast(prog, req.topology).time_s
        forget(prog, routes_only=True)  # the result stays remembered for the caller; its routes are GBs
        return got

    def kept(prog: Program, **times: float) -> Program:
        return replace(prog, meta={**prog.meta, **{k: v * 1e6 for k, v in times.items()}})

    prog = form(admission=True)
    first = simulated(prog)
    if first <= tm.makespan * (1 + ROBUST_SLACK):
        return kept(prog, simulated_us=first)
    # one candidate in memory at a time: at 1024 GPUs a Program, its routes and its simulation are GBs
    forget(prog)
    del prog
    alt = form(admission=False)
    second = simulated(alt)
    if second < first:
        return kept(alt, simulated_us=second, admission_us=first)
    forget(alt)
    del alt
    return kept(form(admission=True), simulated_us=first, hop_only_us=second)  # the same Program again


def _stages(routes: rt.Routes, pc: Pieces) -> I64:
    """Stage of every hop: the hop number (time-stepped flows: the epoch)."""
    counts = np.diff(pc.hop_ptr)
    if routes.epochs is not None:
        return np.asarray(routes.epochs[segment_indices(routes.ptr[:-1][pc.route], counts)], dtype=np.int64)
    return segment_positions(counts)


def _route_base(routes: rt.Routes, n: int) -> I64:
    """Per route: chunks of the same pair's earlier routes (its offset within the pair's chunks)."""
    key = routes.src * n + routes.dst
    order = np.argsort(key, kind="stable")
    c = routes.chunks[order]
    cum = np.cumsum(c) - c
    first = np.concatenate([[True], key[order][1:] != key[order][:-1]])
    start = np.maximum.accumulate(np.where(first, np.arange(len(c)), 0))
    base = np.empty(len(c), dtype=np.int64)
    base[order] = cum - cum[start]
    return base


def _build(
    req: PlanRequest,
    net: FlowNetwork,
    routes: rt.Routes,
    pc: Pieces,
    tm: Timed,
    stage: I64,
    meta: dict[str, object],
) -> Program:
    """The Program: self copies, then one op per hop in admission order (vectorised). A hop writes to scratch
    on its relay (allocated in admission order) or to the destination's output; it depends on the piece's
    previous hop and on the op whose end admitted it (none where ``tm.after`` is -1: the hop-only form)."""
    counts, n = req.counts, req.nranks
    b = ProgramBuilder(f"mcf-{n}", "mcf", counts, req.unit_bytes, req.traffic, topology=req.topology)
    diag = np.flatnonzero(np.diag(counts) > 0)
    b.add_many(
        (diag, Buf.INPUT, b.in_off[diag, diag]), (diag, Buf.OUTPUT, b.out_off[diag, diag]), counts[diag, diag]
    )
    if not np.array_equal(routes.carried(n) + np.diag(np.diag(counts)), counts):
        raise InternalError("mcf: the routes do not carry every chunk of the layout")
    nh = pc.nhops
    hops_per = np.diff(pc.hop_ptr)
    piece = np.repeat(np.arange(len(pc.cnt)), hops_per)
    h = np.arange(nh) - pc.hop_ptr[:-1][piece]
    last = h == hops_per[piece] - 1
    r = pc.route[piece]
    src, dst = routes.src[r], routes.dst[r]
    at = _route_base(routes, n)[r] + pc.off[piece]
    size = pc.cnt[piece]
    rank = net.node_rank[net.head[pc.hop_edge]]  # the GPU each hop reaches
    # scratch on relays, allocated in admission order
    scratch = np.zeros(nh, dtype=np.int64)
    relay = tm.order[~last[tm.order]]
    if len(relay):
        grp = np.argsort(rank[relay], kind="stable")
        rr, sz = rank[relay][grp], size[relay][grp]
        cum = np.cumsum(sz) - sz
        first = np.concatenate([[True], rr[1:] != rr[:-1]])
        start = np.maximum.accumulate(np.where(first, np.arange(len(rr)), 0))
        scratch[relay[grp]] = cum - cum[start]
        total = np.bincount(rr, weights=sz, minlength=n).astype(np.int64)
        for q in np.flatnonzero(total).tolist():
            b.alloc_scratch(q, int(total[q]))
    # every column is put in admission order as soon as it is made, and what it was made from is dropped: at
    # 17.6 M hops (a 16x8x8 torus) each hop-sized array is 141 MB
    o = tm.order
    first_hop = h == 0
    prev = np.maximum(np.arange(nh) - 1, 0)
    dst_buf = np.where(last, int(Buf.OUTPUT), int(Buf.SCRATCH))[o]
    dst_off = np.where(last, b.out_off[dst, src] + at, scratch)[o]
    src_rank = np.where(first_hop, src, rank[prev])[o]
    src_buf = np.where(first_hop, int(Buf.INPUT), int(Buf.SCRATCH))[o]
    src_off = np.where(first_hop, b.in_off[src, dst] + at, scratch[prev])[o]
    del dst, src, at, scratch, last, r, piece
    op = np.empty(nh, dtype=np.int64)
    op[o] = len(b) + np.arange(nh)
    dep_prev = np.where(h > 0, op[prev], -1)
    del prev
    dep_slot = np.where(tm.after >= 0, op[np.maximum(tm.after, 0)], -1)
    del op
    dep_slot = np.where(dep_slot == dep_prev, -1, dep_slot)
    deps = np.stack([dep_prev[o], dep_slot[o]], axis=1)
    del dep_prev, dep_slot
    ndeps = (deps >= 0).sum(axis=1)
    deps = deps[deps >= 0]
    b.add_many(
        (src_rank, src_buf, src_off),
        (rank[o], dst_buf, dst_off),
        size[o],
        stage=stage[o],
        deps=(ndeps, deps),
    )
    del src_rank, src_buf, src_off, dst_buf, dst_off, ndeps, deps
    b.meta.update({k: v for k, v in meta.items() if isinstance(v, (int, float, str, bool))})
    b.meta["stages"] = int(stage.max()) + 1 if nh else 0
    return b.build()
