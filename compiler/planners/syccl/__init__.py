"""``syccl``: a SyCCL-style all-to-all synthesiser (Cao, Shi et al., "SyCCL: Exploiting Symmetry for Efficient
Collective Communication Scheduling", SIGCOMM'25), for server topologies.

The workflow of the SyCCL slides ("Overview: SyCCL workflow"), one module per step:

1. **Symmetry** (:mod:`.symmetry`): dimensions (intra-server fabric, rails, cross-rail/scale-out), the
   isomorphic groups inside each (Observation 1) and automorphisms verified edge by edge on ``topo.graph``.
2. **Sketch search** (:mod:`.sketch`): scatter trees for one source GPU (all-to-all = N isomorphic one-to-all
   demands, Observation 2), enumerated by stage over dimensions and groups, with the slides' three prunings.
3. **Combination** (:mod:`.combine`): each sketch replicated over its symmetric images, then mixed with split
   ratios so every dimension's load matches its bandwidth (an LP).
4. **Synthesis** (:mod:`.synth`): every sub-demand (stage x dimension x group) is a small epoch-based
   time-expanded LP solved with HiGHS; coarse epochs rank the candidates, the top K are solved again with fine
   epochs; isomorphic sub-demands are solved once and mapped; independent LPs run through
   :func:`a2acc.flows.parallel.run_all` (``workers``: 1, N processes or ``dask://HOST:PORT``).
5. **Evaluation** (:mod:`.emit` + a2acc's simulator): the best candidates become Programs for the request's
   actual chunk counts (with free ordering and with NIC transfers chained in rounds) and are timed by the
   simulator; the fastest is returned.

Skewed matrices: SyCCL assumes symmetric demand (its stated limitation). Steps 1-4 depend on the topology only
(they are computed for one unit of data per pair and cached per topology); the matrix enters in step 5, where
the symmetric sketches carry the actual per-pair sizes, are re-ranked and re-mixed under them (our extension),
and the simulator picks among them.

``time_limit`` bounds the whole synthesis (search, LPs, simulations): when it runs out the best plan found so
far is returned and ``meta["note"]`` says it is not proven best. ``time_to_beat`` (seconds; ``auto`` passes
the best time of the planners before syccl) spares the simulation of every candidate whose link floor is past
it: when the fastest candidate beats it the plan is the one without it (tested); when none does,
``meta["time_to_beat_us"]`` and ``meta["note"]`` say so and the plan is the best one timed (or the first
candidate, untimed), not proven syccl's best. Direct-connect graphs are refused (no server dimensions). What
came from the slides and what is our design: ``docs/syccl.md``.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from a2acc.analysis.estimate import link_bound
from a2acc.analysis.fastsim import simulate_fast
from a2acc.analysis.model import SimModel
from a2acc.errors import InputError, InternalError, PlannerError
from a2acc.flows.parallel import parse_workers, run_all
from a2acc.ir.builder import ProgramBuilder
from a2acc.ir.program import Buf, MetaValue, Program
from a2acc.model.topology import Topology
from a2acc.options import bounded
from a2acc.planners import PlanRequest
from a2acc.planners.syccl import combine as comb
from a2acc.planners.syccl.emit import Route, SubRoutes, build, rounds
from a2acc.planners.syccl.sketch import Pruning, SearchStats, Sketch, search
from a2acc.planners.syccl.symmetry import Symmetry, invert
from a2acc.planners.syccl.synth import GroupNet, SubSolution, direct_solution, group_net, hop_distance, solve

__all__ = ["Options", "Pruning", "applies", "plan", "sketch_times", "symmetry"]


@dataclass(frozen=True)
class Options:
    """``--opt KEY=VALUE`` options of the planner (``--time-limit S`` sets ``time_limit``)."""

    time_limit: float = field(
        default=0.0,
        metadata={
            "help": "seconds for the whole synthesis (0: none); past it the best plan so far is returned"
        },
    )
    workers: str = field(
        default="1",
        metadata={"help": "sub-demand LPs and simulations: 1, N local processes, or dask://HOST:PORT"},
    )
    time_to_beat: float = field(
        default=0.0,
        metadata={
            "help": "seconds a plan must beat (0: none): a candidate whose link floor is past it is not "
            "simulated; auto passes the best time so far"
        },
    )
    candidates: int = bounded(
        6,
        1,
        64,
        "sketches (besides the LP mix) whose sub-demands get coarse-epoch LPs",
        "an LP per sub-demand each",
    )
    evaluate: int = bounded(
        3,
        1,
        16,
        "top-K candidates solved with fine epochs, emitted and simulated (+ the direct tree)",
        "each is a fine-epoch LP, a Program and a simulation",
    )
    epoch_ratio: float = bounded(
        0.2,
        1e-3,
        1.0,
        "fine epoch length / coarse epoch length (the slides' E)",
        "a share of the coarse epoch",
    )
    max_epochs: int = bounded(
        8, 1, 64, "at most this many fine epochs per sub-demand", "epochs multiply the fine LP's variables"
    )
    pipeline: int = bounded(
        1,
        1,
        64,
        "cut each relayed route's chunks into up to this many pipeline pieces",
        "pieces multiply ops",
    )
    max_depth: int = bounded(
        0, 0, 16, "relay depth limit (Pruning 3); 0: the number of dimensions", "sketch trees grow with depth"
    )
    prune: bool = field(default=True, metadata={"help": "Prunings 1 and 2 (isomorphism, ratio consistency)"})
    search_limit: int = bounded(
        20000, 1, 1_000_000, "partial sketches the search may expand", "each is held in memory"
    )
    image_cap: int = bounded(
        512, 1, 65536, "most symmetric images replicated per sketch", "images multiply LP columns"
    )
    eval_ops: int = bounded(
        24000,
        1,
        10_000_000,
        "simulate further candidates only while their ops total at most this",
        "simulation time grows with ops",
    )

    def check(self) -> None:
        if not self.time_limit >= 0:
            raise InputError("--opt", "time_limit", self.time_limit, "seconds >= 0")
        if not (self.time_to_beat >= 0 and math.isfinite(self.time_to_beat)):
            raise InputError("--opt", "time_to_beat", self.time_to_beat, "seconds >= 0 (0: none)")
        parse_workers(self.workers)


# ---------------------------------------------------------------------- data of one synthesis
@dataclass(frozen=True)
class Column:
    """One sketch replicated in one GPU orbit, with its loads for one byte per pair."""

    orbit: int
    sketch: int
    replica: comb.Replica
    load: comb.Load
    index: comb.LoadIndex  # what loads under another matrix reuse


@dataclass(frozen=True)
class Candidate:
    """A sketch combination: (column, weight) parts, the weights summing to 1 per GPU orbit."""

    name: str
    parts: tuple[tuple[int, float], ...]
    describe: str


@dataclass(frozen=True)
class Solved:
    """A candidate with its sub-demand routes (rank space), stage offsets and estimate."""

    cand: Candidate
    subs: dict[tuple[int, int, int], SubRoutes]
    level_offset: tuple[int, ...]
    estimate: float  # seconds per byte-per-pair: stage times summed per dimension, the worst dimension
    statuses: tuple[str, ...]


@dataclass(frozen=True)
class Synthesis:
    """What depends on the topology only (cached per topology and options): sketches, replicas, the ranking
    for symmetric demand, and every sub-demand LP solved so far, keyed by canonical form (isomorphic
    sub-demands are solved once, also across candidates and calls)."""

    stats: SearchStats
    sketches: tuple[Sketch, ...]
    describe: tuple[str, ...]
    columns: tuple[Column, ...]
    resources: comb.Resources
    ranked: tuple[Candidate, ...] = ()
    lp: dict[tuple[object, ...], SubSolution] = field(default_factory=dict)
    #: per (dimension, class group): its net and, where it relays, the most GPU-to-GPU hops between two of its GPUs
    nets: dict[tuple[int, int], tuple[GroupNet, int]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)  # sub-demands / distinct LPs of the ranking
    #: per column, every hop of its images from every source of its orbit: (level, sender, receiver, units)
    hops: dict[int, npt.NDArray[np.float64]] = field(default_factory=dict)
    #: a proven LP solution's routes in rank space, per (LP key, the group's ranks by position)
    mapped: dict[tuple[object, ...], SubRoutes] = field(default_factory=dict)
    #: per column (while they stay small: :data:`_ROUTES_KEPT`), its images' routes from every source of its orbit
    routes: dict[int, tuple[tuple[int, tuple[tuple[Route, ...], ...]], ...]] = field(default_factory=dict)
    truncated: bool = False
    depth_limit: int = 0  # Pruning 3 for the symmetric synthesis; deeper sketches serve skewed matrices only


class _Clock:
    def __init__(self, limit: float) -> None:
        self.deadline = time.monotonic() + limit if limit > 0 else None
        self.hit = False

    def left(self) -> float | None:
        if self.deadline is None:
            return None
        return max(self.deadline - time.monotonic(), 1e-3)

    def over(self) -> bool:
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.hit = True
        return self.hit


_SYM: dict[str, Symmetry] = {}
_SYN: dict[tuple[object, ...], Synthesis] = {}
#: the candidates chosen for a chunk layout, before simulation (:func:`_choose`), per synthesis and layout
_CHOSEN: dict[tuple[object, ...], _Chosen] = {}
_CACHE_SIZE = 16
_K = TypeVar("_K")
_V = TypeVar("_V")


def forget() -> None:
    """Drop the remembered symmetries, syntheses and chosen candidates (:func:`a2acc.planners.forget` calls it:
    a time-limited search is then as cold as in a new process)."""
    for memo in (_SYM, _SYN, _CHOSEN):
        memo.clear()


def symmetry(topo: Topology) -> Symmetry:
    """The verified symmetry of ``topo``, cached per topology fingerprint (shared with ``compare``'s default list)."""
    sym = _SYM.get(topo.fingerprint)
    if sym is None:
        sym = Symmetry(topo)
        _remember(_SYM, topo.fingerprint, sym)
    return sym


# ---------------------------------------------------------------------- plan
def applies(topo: Topology) -> str | None:
    """SyCCL's symmetry is the server/rail structure of scale-up + scale-out clusters (tiered topologies)."""
    if topo.direct is not None:
        return (
            f"'{topo.name}' is a direct-connect graph ({topo.direct.kind}); SyCCL's symmetry is the server/rail "
            "structure of scale-up + scale-out clusters: use mcf for direct-connect topologies"
        )
    return None


def plan(req: PlanRequest) -> Program:
    opts: Options = req.options if isinstance(req.options, Options) else Options()
    topo = req.topology
    why = applies(topo)
    if why is not None:
        raise PlannerError(f"syccl: {why}")
    clock = _Clock(opts.time_limit)
    sym = symmetry(topo)
    if topo.nranks == 1:
        return _trivial(req, sym)
    key: tuple[object, ...] = (topo.fingerprint, opts.candidates, opts.evaluate, opts.epoch_ratio)
    key += (opts.max_epochs, opts.max_depth, opts.prune, opts.search_limit, opts.image_cap)
    counts = np.ascontiguousarray(req.counts, dtype=np.int64)
    ckey = (*key, opts.eval_ops, opts.pipeline, hashlib.sha256(counts.tobytes()).hexdigest())
    chosen = _CHOSEN.get(ckey)
    if chosen is None:
        syn = _SYN.get(key)
        if syn is None:
            syn = _synthesize(topo, sym, opts, clock)
            if not syn.truncated:
                _remember(_SYN, key, syn)
        chosen = _choose(req, sym, syn, opts, clock)
        if not clock.hit:
            _remember(_CHOSEN, ckey, chosen)
    return _evaluate(req, sym, chosen, opts, clock)


@dataclass(frozen=True)
class _Chosen:
    """The candidates a layout's evaluation times: (free order, estimate) each; whether each is also timed
    with its NIC transfers chained in rounds (``chain``: more than one server, and the time limit not hit while
    choosing); and whether the synthesis they came from was cut short by its search limit. A candidate's
    chained Program is made when it is first timed (:meth:`chained`) and kept with the rest: the evaluation
    does not time a candidate whose link floor is past the best so far, and then never needs it."""

    cands: tuple[tuple[Program, float], ...]
    chain: bool
    truncated: bool
    _rounds: dict[int, Program] = field(default_factory=dict, compare=False, repr=False)

    def chained(self, i: int, topo: Topology) -> Program:
        """Candidate ``i`` with its scale-out transfers chained per NIC in rounds (:func:`.emit.rounds`)."""
        if i not in self._rounds:
            self._rounds[i] = rounds(self.cands[i][0], topo)
        return self._rounds[i]


def _remember(cache: dict[_K, _V], key: _K, value: _V) -> None:
    """Keep ``value`` in a per-process cache of at most :data:`_CACHE_SIZE` entries (the oldest goes first)."""
    if len(cache) >= _CACHE_SIZE:
        cache.pop(next(iter(cache)))
    cache[key] = value


def _trivial(req: PlanRequest, sym: Symmetry) -> Program:
    b = ProgramBuilder("syccl-1x1", "syccl", req.counts, req.unit_bytes, req.traffic, topology=req.topology)
    c = int(req.counts[0, 0])
    if c:
        b.add((0, Buf.INPUT, 0), (0, Buf.OUTPUT, 0), c)
    b.meta.update({"stages": 1 if c else 0, "symmetry": sym.describe(), "sketch": "none (one GPU)"})
    return b.build()


# ---------------------------------------------------------------------- synthesis (topology only)
def _explore(topo: Topology, sym: Symmetry, pruning: Pruning, opts: Options, clock: _Clock) -> Synthesis:
    """Search the sketches from the first GPU orbit's representative and replicate each in every orbit."""
    rep0 = sym.gpu_orbits[0][0]
    res = search(
        sym, rep0, pruning=pruning, limit=opts.search_limit, deadline=clock.deadline, image_cap=opts.image_cap
    )
    sketches = list(res.sketches)
    if not any(sk.height == 1 for sk in sketches):  # the direct tree is always valid: keep it as a fallback
        sketches.insert(0, _direct_tree(sym, rep0))
    rsc = comb.resources(topo, sym)
    unit = np.ones((sym.nranks, sym.nranks))
    columns: list[Column] = []
    for oi, orbit in enumerate(sym.gpu_orbits):
        g = sym.coord_carry((), rep0, orbit[0])  # the same sketch, rooted at this orbit's representative
        for k, sk in enumerate(sketches):
            rep = comb.replicate(sym, sk.mapped(g), orbit, opts.image_cap)
            ix = comb.load_index(sym, rsc, rep)
            columns.append(Column(oi, k, rep, comb.loads(ix, unit), ix))
    return Synthesis(
        stats=res.stats,
        sketches=tuple(sketches),
        describe=tuple(sk.describe(sym) for sk in sketches),
        columns=tuple(columns),
        resources=rsc,
        truncated=res.stats.truncated,
    )


def _synthesize(topo: Topology, sym: Symmetry, opts: Options, clock: _Clock) -> Synthesis:
    """Search, replicate, combine, and rank the candidates for symmetric demand with coarse-epoch LPs.

    Pruning 3 (relay depth <= number of dimensions) bounds the symmetric synthesis. With fewer than three
    dimensions (single-switch scale-out, one server) the search also keeps the trees one relay deeper (the
    gather / cross / scatter shape), which only the skewed-matrix extension of :func:`_evaluation_pool` may
    use: measured, it is what balances NICs under skew there (docs/syccl.md)."""
    limit = opts.max_depth or max(len(sym.dims), 1)
    deeper = opts.max_depth == 0 and len(sym.dims) < 3
    pruning = Pruning(isomorphism=opts.prune, consistency=opts.prune, max_depth=limit + (1 if deeper else 0))
    syn = replace(_explore(topo, sym, pruning, opts, clock), depth_limit=limit)
    res_stats = syn.stats
    sketches = syn.sketches
    columns = syn.columns
    loads = [c.load for c in columns]
    pure = [k for k in _ranked_sketches(syn, loads) if sketches[k].height <= limit]
    chosen = pure[: opts.candidates]
    direct = next(k for k, sk in enumerate(sketches) if sk.height == 1)
    if direct not in chosen:
        chosen.append(direct)
    cands = [_pure(syn, k) for k in chosen]
    mixed = None if clock.over() else _mix(syn, loads, "mix", clock, limit)
    if mixed is not None and all(mixed.parts != c.parts for c in cands):
        cands.append(mixed)
    coarse = _solve(topo, sym, syn, cands, opts, clock, fine=False)
    stats = [_cand_stats(syn, c, loads) for c in cands]
    best = min((s.estimate for s in coarse), default=1.0) or 1.0
    order = sorted(
        range(len(cands)),
        key=lambda i: (round(coarse[i].estimate / best, 3), stats[i][1], round(stats[i][2], 6), i),
    )
    ranked = tuple(cands[i] for i in order)
    return replace(syn, ranked=ranked, truncated=res_stats.truncated or clock.hit)


def _direct_tree(sym: Symmetry, root: int) -> Sketch:
    n = sym.nranks
    parent = tuple(-1 if r == root else root for r in range(n))
    return Sketch(root, parent, tuple(0 if r == root else 1 for r in range(n)), (root,))


def _cand_stats(syn: Synthesis, cand: Candidate, loads: list[comb.Load]) -> tuple[float, int, float]:
    """(bound on the busiest port, NIC fan-in, bytes moved) of a candidate under ``loads``."""
    vec = np.sum([w * loads[i].vector for i, w in cand.parts], axis=0)
    fan = max(syn.columns[i].load.fan_in for i, _w in cand.parts)
    return comb.bound(vec, syn.resources.cap), fan, float(sum(w * loads[i].volume for i, w in cand.parts))


def _ranked_sketches(syn: Synthesis, loads: list[comb.Load]) -> list[int]:
    """Sketches by the bound of their busiest port, then scale-out fan-in (incast, which LPs do not see), then
    bytes moved (fewer relays), then index."""
    info = [_cand_stats(syn, _pure(syn, k), loads) for k in range(len(syn.sketches))]
    best = min(b for b, _f, _v in info) or 1.0
    return sorted(
        range(len(info)), key=lambda k: (round(info[k][0] / best, 3), info[k][1], round(info[k][2], 6), k)
    )


def _pure(syn: Synthesis, k: int) -> Candidate:
    parts = tuple((i, 1.0) for i, c in enumerate(syn.columns) if c.sketch == k)
    return Candidate(f"sketch {k}", parts, syn.describe[k])


def _mix(
    syn: Synthesis, loads: list[comb.Load], name: str, clock: _Clock, depth: int = 0
) -> Candidate | None:
    """The combination LP over every replicated sketch (weights per GPU orbit); ``depth`` > 0 leaves out the
    sketches deeper than that."""
    cols = syn.columns
    allowed = np.array([depth == 0 or syn.sketches[c.sketch].height <= depth for c in cols], dtype=bool)
    out = comb.combine(
        [x.vector for x in loads],
        [x.volume for x in loads],
        [c.orbit for c in cols],
        syn.resources.cap,
        clock.left(),
        allowed,
    )
    if out is None:
        return None
    w, _t = out
    used = [i for i in range(len(cols)) if w[i] > 0]
    desc = " + ".join(f"{w[i]:.3g} x [{syn.describe[cols[i].sketch]}]" for i in used if cols[i].orbit == 0)
    return Candidate(name, tuple((i, float(w[i])) for i in used), desc)


def _demands(
    sym: Symmetry, syn: Synthesis, cand: Candidate
) -> dict[tuple[int, int, int], dict[tuple[int, int], float]]:
    """Sub-demands of a candidate for one unit per pair: (level, dim, group) -> (a, b) -> units."""
    rows: list[npt.NDArray[np.float64]] = []
    n = sym.nranks
    for ci, w in cand.parts:
        hops = _column_hops(sym, syn, ci)
        rows.append(np.stack([hops[:, 0], hops[:, 1], hops[:, 2], hops[:, 3] * w], axis=1))
    allr = np.concatenate(rows)
    key = (allr[:, 0].astype(np.int64) * n + allr[:, 1].astype(np.int64)) * n + allr[:, 2].astype(np.int64)
    uk, inv = np.unique(key, return_inverse=True)
    vol = np.bincount(inv, weights=allr[:, 3])
    kept = vol > 1e-12
    uk, vol = uk[kept], vol[kept]
    lvl, rest = np.divmod(uk, n * n)
    a, b = np.divmod(rest, n)
    dims, groups = sym.hop_tables()
    dim = dims[a, b]
    out: dict[tuple[int, int, int], dict[tuple[int, int], float]] = {}
    for lv, d, g, x, y, v in zip(
        lvl.tolist(), dim.tolist(), groups[dim, a].tolist(), a.tolist(), b.tolist(), vol.tolist()
    ):
        out.setdefault((lv, d, g), {})[(x, y)] = v
    return out


def _column_hops(sym: Symmetry, syn: Synthesis, ci: int) -> npt.NDArray[np.float64]:
    """Every hop of column ``ci``'s images from every source of its orbit, as rows (level, sender, receiver,
    units per pair), sources in orbit order; kept in the synthesis (they depend on the topology only)."""
    hops = syn.hops.get(ci)
    if hops is None:
        rep = syn.columns[ci].replica
        a0, b0, v0 = comb.hop_arrays(rep.trees)
        lv = np.array([lvl for t in rep.trees for lvl, _p, _c, _s in t.hops()], dtype=np.float64)
        root = rep.trees[0].root
        per_source = []
        for s in rep.orbit:
            g = np.array(sym.to_source(root, s), dtype=np.int64)
            per_source.append(np.stack([lv, g[a0].astype(np.float64), g[b0].astype(np.float64), v0], axis=1))
        hops = syn.hops[ci] = np.concatenate(per_source)
    return hops


def _canonical(sym: Symmetry, dim: int, gi: int) -> tuple[int, tuple[int, ...]]:
    """(class group, rank at each position): the members of group ``gi`` in the order of the reference group
    they map to under a verified automorphism; a group with no verified map to it is its own class."""
    p = sym.group_perm(dim, gi)
    if p is None:
        return gi, sym.dims[dim].groups[gi]
    pinv = invert(p)
    return 0, tuple(pinv[x] for x in sym.dims[dim].groups[0])


#: a sub-demand LP's key: (dimension, class group, epochs, demand in positions of the class group)
_LpKey = tuple[object, ...]
#: per candidate: every sub-demand's slot (level, dimension, group), its ranks by position, its LP key
_SubRows = list[tuple[tuple[int, int, int], tuple[int, ...], _LpKey]]


def _solve(
    topo: Topology,
    sym: Symmetry,
    syn: Synthesis,
    cands: list[Candidate],
    opts: Options,
    clock: _Clock,
    *,
    fine: bool,
) -> list[Solved]:
    """Sub-demand LPs of every candidate (isomorphic ones solved once, missing ones in parallel), mapped back
    to ranks, with each candidate's estimate."""
    todo: dict[_LpKey, tuple[GroupNet, tuple[tuple[int, int, float], ...], int]] = {}
    plan_of = [_subdemand_rows(topo, sym, syn, cand, opts, todo, fine=fine) for cand in cands]
    fresh = _run_lps(syn, todo, opts, clock, fine=fine)
    label = "fine" if fine else "coarse"
    syn.counters[f"{label}_subdemands"] = sum(len(r) for r in plan_of)
    syn.counters[f"{label}_lps"] = len({key for r in plan_of for _slot, _ranks, key in r})
    return [_solved(sym, syn, cand, rows, fresh) for cand, rows in zip(cands, plan_of)]


def _subdemand_rows(
    topo: Topology,
    sym: Symmetry,
    syn: Synthesis,
    cand: Candidate,
    opts: Options,
    todo: dict[_LpKey, tuple[GroupNet, tuple[tuple[int, int, float], ...], int]],
    *,
    fine: bool,
) -> _SubRows:
    """The sub-demands of ``cand``, each keyed by its canonical form on its class group; the LPs neither
    solved before (``syn.lp``) nor already in ``todo`` are added to it as (group net, demand, epochs).
    Fine epochs: relays on GPU-to-GPU links get more, shorter epochs (at most ``max_epochs``)."""
    rows: _SubRows = []
    for (lvl, dim, gi), dem in sorted(_demands(sym, syn, cand).items()):
        cls, ranks = _canonical(sym, dim, gi)
        pos = {r: i for i, r in enumerate(ranks)}
        if (dim, cls) not in syn.nets:
            made = group_net(topo, sym, dim, cls)
            syn.nets[(dim, cls)] = (made, max(1, hop_distance(made)) if made.relays else 1)
        net, k = syn.nets[(dim, cls)]
        if fine and net.relays and net.nnodes == net.ngpus:  # GPU-to-GPU links: relays can pay
            k = min(opts.max_epochs, max(k + 1, math.ceil(k / opts.epoch_ratio)))
        demand = tuple(sorted((pos[a], pos[b], round(u, 9)) for (a, b), u in dem.items()))
        key: _LpKey = (dim, cls, k, demand)
        if key not in syn.lp and key not in todo:
            todo[key] = (net, demand, k)
        rows.append(((lvl, dim, gi), ranks, key))
    return rows


def _run_lps(
    syn: Synthesis,
    todo: dict[_LpKey, tuple[GroupNet, tuple[tuple[int, int, float], ...], int]],
    opts: Options,
    clock: _Clock,
    *,
    fine: bool,
) -> dict[_LpKey, SubSolution]:
    """Solve the LPs of ``todo`` (in parallel per ``workers``; direct hops when no time is left); proven
    solutions are kept in ``syn.lp`` for later calls."""
    keys: list[_LpKey] = list(todo)
    fresh: dict[_LpKey, SubSolution] = {}
    if keys:
        if clock.over():  # no time left for LPs: direct hops inside every group (always valid)
            sols = [direct_solution(todo[key][1]) for key in keys]
        else:
            left = clock.left()
            args = [(*todo[key], left) for key in keys]
            desc = "syccl fine-epoch LPs" if fine else "syccl coarse-epoch LPs"
            sols = run_all(solve, args, opts.workers, desc=desc)
        fresh = dict(zip(keys, sols))
        for key, sol in fresh.items():
            if sol.status == "optimal":  # only proven solutions are reused by later calls
                syn.lp[key] = sol
    return fresh


def _solved(
    sym: Symmetry, syn: Synthesis, cand: Candidate, rows: _SubRows, fresh: dict[_LpKey, SubSolution]
) -> Solved:
    """A candidate's sub-demand solutions mapped back to ranks, each level's first epoch, and its estimate:
    per dimension the sum over levels of its slowest sub-demand, the worst dimension."""
    subs: dict[tuple[int, int, int], SubRoutes] = {}
    per_level: dict[int, dict[int, float]] = {}
    epochs: dict[int, int] = {}
    statuses: set[str] = set()
    for (lvl, dim, gi), ranks, key in rows:
        proven = key in syn.lp
        sol = syn.lp[key] if proven else fresh[key]
        statuses.add(sol.status)
        mapped = syn.mapped.get((key, ranks)) if proven else None
        if mapped is None:
            mapped = {
                (ranks[i], ranks[j]): tuple(
                    (f, tuple((ranks[u], ranks[v], t) for u, v, t in hops)) for f, hops in paths
                )
                for i, j, paths in sol.routes
            }
            if proven:
                syn.mapped[(key, ranks)] = mapped
        subs[(lvl, dim, gi)] = mapped
        t = sol.time_s if math.isfinite(sol.time_s) else math.inf
        per_level.setdefault(lvl, {})
        per_level[lvl][dim] = max(per_level[lvl].get(dim, 0.0), t)
        epochs[lvl] = max(epochs.get(lvl, 1), sol.epochs)
    est = max((sum(per_level[lv].get(d, 0.0) for lv in per_level) for d in range(len(sym.dims))), default=0.0)
    offs = [0]
    for lv in range(1, max(per_level, default=0) + 1):
        offs.append(offs[-1] + epochs.get(lv, 1))
    return Solved(cand, subs, tuple(offs), est, tuple(sorted(statuses)))


# ---------------------------------------------------------------------- evaluation (the actual matrix)
def _source_routes(
    sym: Symmetry, syn: Synthesis, cand: Candidate
) -> list[list[tuple[float, Sequence[Route]]]]:
    """Per source: the combination's images carried to it, as (weight, route to every destination)."""
    out: list[list[tuple[float, Sequence[Route]]]] = [[] for _ in range(sym.nranks)]
    for ci, w in cand.parts:
        per_source = _column_routes(sym, syn, ci)
        share = w / len(syn.columns[ci].replica.trees)
        for s, per_tree in per_source:
            out[s] += [(share, rts) for rts in per_tree]
    return out


#: a synthesis keeps its columns' routes while their sources x trees x ranks total at most this (~12 MB; 8x8
#: keeps the ~57k its candidates use)
_ROUTES_KEPT = 1 << 16


def _column_routes(
    sym: Symmetry, syn: Synthesis, ci: int
) -> tuple[tuple[int, tuple[tuple[Route, ...], ...]], ...]:
    """Column ``ci``'s images carried to every source of its orbit, in orbit order: (source, per tree the route
    to every destination). They depend on the topology only, so the synthesis keeps them (up to a budget)."""
    got = syn.routes.get(ci)
    if got is not None:
        return got
    n = sym.nranks
    rep = syn.columns[ci].replica
    root = rep.trees[0].root
    paths = [[t.path(d) for d in range(n)] for t in rep.trees]
    out = []
    for s in rep.orbit:
        g = sym.to_source(root, s)
        ginv = invert(g)
        out.append((s, tuple(tuple(tuple(g[x] for x in tp[ginv[d]]) for d in range(n)) for tp in paths)))
    done = tuple(out)
    kept = sum(len(src) * len(src[0][1]) for src in syn.routes.values() if src) * n  # (orbits are not empty)
    if kept + len(rep.orbit) * len(paths) * n <= _ROUTES_KEPT:
        syn.routes[ci] = done
    return done


def sketch_times(
    topo: Topology, traffic: npt.NDArray[np.int64], pruning: Pruning, options: Options | None = None
) -> list[tuple[str, float]]:
    """Every sketch the search finds under ``pruning``, replicated over its symmetric images and used alone,
    timed by the simulator on ``traffic``: (description, seconds). The ablation of the slides' prunings
    (tests check that pruning never drops the best sketch where exhaustive search is feasible)."""
    from a2acc.ir.quantize import choose_unit, quantize

    opts = options if options is not None else Options()
    sym = symmetry(topo)
    clock = _Clock(0.0)
    syn = _explore(topo, sym, pruning, opts, clock)
    unit = choose_unit(traffic)
    req = PlanRequest(topo, traffic, quantize(traffic, unit), unit, opts)
    cands = [_pure(syn, k) for k in range(len(syn.sketches))]
    out: list[tuple[str, float]] = []
    for sv in _solve(topo, sym, syn, cands, opts, clock, fine=True):
        routes = _source_routes(sym, syn, sv.cand)
        prog = build(req, sym, routes, sv.subs, sv.level_offset, opts.pipeline, {})
        out.append((sv.cand.describe, _simulate(prog, topo)))
    return out


def _simulate(prog: Program, topo: Topology, model: SimModel | None = None) -> float:
    """Completion time under the request's simulator model (None: the topology's default), with the fast
    engine (the reference engine's model, organised for speed)."""
    return simulate_fast(prog, topo, model=model).time_s


def _evaluation_pool(
    sym: Symmetry, syn: Synthesis, req: PlanRequest, opts: Options, clock: _Clock
) -> tuple[list[Candidate], list[comb.Load]]:
    """The synthesis' top K for symmetric demand and the direct tree, plus, for a skewed matrix, the sketches
    re-ranked and re-mixed under the actual per-pair sizes, the one-relay-deeper ones included where the
    synthesis kept them (SyCCL assumes symmetric demand: this is our extension); and every column's loads
    under the actual matrix."""
    pool = list(syn.ranked[: opts.evaluate])
    direct = _pure(syn, next(k for k, sk in enumerate(syn.sketches) if sk.height == 1))
    if direct not in pool:  # latency-bound sizes favour the fewest hops: always consider the direct tree
        pool.append(direct)
    demand = req.counts.astype(np.float64)  # in chunks: the choice is the same at every chunk size
    np.fill_diagonal(demand, 0.0)
    off = demand[~np.eye(sym.nranks, dtype=bool)]
    if off.size == 0 or float(off.max()) == float(off.min()) or clock.over():
        return pool, [c.load for c in syn.columns]
    loads = [comb.loads(c.index, demand) for c in syn.columns]
    extra = [_pure(syn, k) for k in _ranked_sketches(syn, loads)[: opts.evaluate]]
    mixed = _mix(syn, loads, "mix for this matrix", clock)
    if mixed is not None:
        extra.insert(0, mixed)
    for c in extra:
        if all(c.parts != p.parts for p in pool):
            pool.append(c)
    return pool, loads


def _choose(req: PlanRequest, sym: Symmetry, syn: Synthesis, opts: Options, clock: _Clock) -> _Chosen:
    """The candidates to time for the request's chunk counts, emitted (and chained in NIC rounds).

    They depend on the chunk counts only (the matrix enters in chunks, the sizes in bytes only through the
    simulation), so :func:`plan` keeps them per synthesis and layout (:data:`_CHOSEN`, unless a time limit cut
    them short): the same counts at another chunk size (``compare``'s sizes share one pattern) reuse them with
    their bytes rescaled, and only the simulations run again. The Programs are the ones emitting them afresh
    would give (tested)."""
    topo = req.topology
    pool, loads = _evaluation_pool(sym, syn, req, opts, clock)
    solved = _solve(topo, sym, syn, pool, opts, clock, fine=True)
    direct = _pure(syn, next(k for k, sk in enumerate(syn.sketches) if sk.height == 1))
    tally = {  # this layout's sub-demands and LPs (the counters are the last _solve's)
        "subdemands": syn.counters.get("coarse_subdemands", 0) + syn.counters.get("fine_subdemands", 0),
        "subdemand_lps": syn.counters.get("coarse_lps", 0) + syn.counters.get("fine_lps", 0),
    }
    free = [
        (replace(p, meta={**p.meta, **tally}), solved[i].estimate)
        for i, p in _emit_chosen(req, sym, syn, solved, loads, direct, opts, clock)
    ]
    return _Chosen(tuple(free), topo.servers > 1 and not clock.over(), syn.truncated)


def _evaluate(req: PlanRequest, sym: Symmetry, chosen: _Chosen, opts: Options, clock: _Clock) -> Program:
    """Time the chosen candidates (:func:`_choose`) with the simulator at the request's sizes, keep the best.

    Candidates are chosen in order of their busiest port under the actual matrix (5 % buckets; within a bucket
    fewer ops first, then less scale-out fan-in): at most ``evaluate`` of them and, past the first, only while
    their ops stay within ``eval_ops`` (a deterministic budget: the simulator's cost grows with the ops of
    concurrent transfers). The direct tree is always timed (at latency-bound sizes the bandwidth ranking
    misleads). Each chosen candidate is timed twice: with free ordering, and with its scale-out transfers
    chained per NIC in rounds (:func:`a2acc.planners.syccl.emit.build`, ``order="rounds"``: no incast on
    lossy fabrics, and cheap to simulate); ties go to the earlier one.

    With one worker the candidates are timed in turn, and one whose link floor
    (:func:`a2acc.analysis.estimate.link_bound`: its busiest link's bytes over that link's capacity, which no
    run of it beats) is past the best time so far is not timed, nor is its chained form made (both have the
    same ops, so the same floor): it could not win, and ties go to the earlier candidate, so the choice is the
    one timing every candidate gives (tested). With several workers every candidate is timed at once.

    ``time_to_beat`` lowers that bar from the start. The candidate with the fastest time has its floor below
    it, so when that time beats ``time_to_beat`` the candidate is timed and kept as without the option: every
    candidate the option spared is slower. When no time beats it, the plan says so
    (:func:`_with_outcome`)."""
    topo = req.topology
    pair_bytes = _pair_bytes(req)
    todo: list[tuple[int, bool]] = []  # (candidate, chained) in the order ties are broken
    for i in range(len(chosen.cands)):
        todo.append((i, False))
        if chosen.chain and not clock.over():
            todo.append((i, True))

    def program(i: int, chained: bool) -> Program:
        prog0, estimate = chosen.cands[i]
        return _for_request(chosen.chained(i, topo) if chained else prog0, estimate * pair_bytes, req)

    if len(todo) < 2 or clock.over():
        return _with_outcome(program(*todo[0]), sym, chosen.truncated, clock, [], 0)
    beat = opts.time_to_beat if opts.time_to_beat > 0 else math.inf
    if parse_workers(opts.workers) != 1:
        every = [program(i, c) for i, c in todo]
        times = run_all(_simulate, [(p, topo, req.model) for p in every], opts.workers, desc="syccl simulate")
        best = int(np.argmin(times))
        return _with_outcome(every[best], sym, chosen.truncated, clock, times, best, beat)
    times = [math.inf] * len(todo)  # a candidate the floor rules out keeps inf
    progs: list[Program | None] = [None] * len(todo)
    floors: dict[int, float] = {}
    for k, (i, chained) in enumerate(todo):
        if i not in floors:  # both forms have the same ops, so the same floor
            floors[i] = link_bound(program(i, False), topo, req.model)
        if floors[i] > min(min(times), beat) * (1.0 + 1e-9):  # past the best so far or the time to beat
            continue
        progs[k] = prog = program(i, chained)
        times[k] = _simulate(prog, topo, req.model)
    best = int(np.argmin(times))
    kept = progs[best]
    if kept is None:  # every floor was past the time to beat (without one, the first candidate is timed)
        if math.isfinite(beat):
            return _with_outcome(program(*todo[0]), sym, chosen.truncated, clock, times, best, beat)
        raise InternalError("syccl: the evaluation kept a candidate it did not time")
    return _with_outcome(kept, sym, chosen.truncated, clock, times, best, beat)


def _for_request(prog: Program, estimate_s: float, req: PlanRequest) -> Program:
    """A chosen candidate's Program (emitted for the same counts) with the request's chunk size and matrix, and
    its estimate (seconds) at the request's sizes."""
    return replace(
        prog,
        unit_bytes=req.unit_bytes,
        traffic=req.traffic,
        meta={**prog.meta, "estimate_us": estimate_s * 1e6},
    )


def _pair_bytes(req: PlanRequest) -> float:
    """The mean bytes of a pair that sends (the scale of a candidate's per-byte estimate)."""
    off = req.traffic.astype(np.float64).copy()
    np.fill_diagonal(off, 0.0)
    return float(off.sum()) / max(int((off > 0).sum()), 1)


def _emit_chosen(
    req: PlanRequest,
    sym: Symmetry,
    syn: Synthesis,
    solved: list[Solved],
    loads: list[comb.Load],
    direct: Candidate,
    opts: Options,
    clock: _Clock,
) -> list[tuple[int, Program]]:
    """The Programs to time, as (index in ``solved``, Program), best first.

    Candidates are taken in order of (5 % bucket of their busiest-port bound, ops, scale-out fan-in, index):
    at most ``evaluate`` of them and, past the first, only while their ops total at most ``eval_ops``; then
    the direct tree's if it was left out. A Program's ops are known only once it is emitted, and emitting is
    most of a size's planning time, so candidates are emitted a bucket at a time and the buckets after the
    one that fills the selection are never emitted (the selection is the one emitting them all would give).
    Past the first emitted candidate, none is emitted once the time limit is hit."""
    base: dict[str, MetaValue] = {
        "symmetry": sym.describe(),
        "sketches": len(syn.sketches),
        "search_explored": syn.stats.explored,
        "pruned_isomorphic": syn.stats.pruned_isomorphic,
        "pruned_ratio": syn.stats.pruned_ratio,
        "pruned_depth": syn.stats.pruned_depth,
    }
    stats = [_cand_stats(syn, sv.cand, loads) for sv in solved]
    best_bound = min((st[0] for st in stats), default=1.0) or 1.0
    bucket = [math.floor(math.log(max(st[0] / best_bound, 1.0)) / math.log(1.05) + 1e-9) for st in stats]
    emitted: dict[int, Program] = {}

    def emit(i: int) -> Program | None:
        if i not in emitted:
            if emitted and clock.over():
                return None
            sv = solved[i]
            meta = dict(base)
            meta["sketch"] = f"{sv.cand.name}: {sv.cand.describe}"
            meta["lp_status"] = ",".join(sv.statuses)
            routes = _source_routes(sym, syn, sv.cand)
            emitted[i] = build(req, sym, routes, sv.subs, sv.level_offset, opts.pipeline, meta)
        return emitted[i]

    chosen: list[tuple[int, Program]] = []
    total = 0
    for b in sorted(set(bucket)):
        if len(chosen) >= opts.evaluate:
            break
        progs = [(i, p) for i in range(len(solved)) if bucket[i] == b and (p := emit(i)) is not None]
        for i, prog in sorted(progs, key=lambda ip: (len(ip[1].table), stats[ip[0]][1], ip[0])):
            if len(chosen) >= opts.evaluate or (chosen and total + len(prog.table) > opts.eval_ops):
                continue
            chosen.append((i, prog))
            total += len(prog.table)
    for i, sv in enumerate(solved):
        if sv.cand == direct and all(j != i for j, _p in chosen) and (dprog := emit(i)) is not None:
            chosen.append((i, dprog))
    return chosen


def _with_outcome(
    prog: Program,
    sym: Symmetry,
    truncated: bool,
    clock: _Clock,
    times: list[float],
    best: int,
    beat: float = math.inf,
) -> Program:
    """The chosen Program with what the evaluation found in its meta: candidates evaluated (timed, or ruled out
    by their link floor), sub-demands and LPs, its simulated time (when it was timed), and a note when a limit
    was hit, when no candidate beat the time to beat ``beat`` (``time_to_beat_us``: the plan is then not
    proven syccl's best) or when the topology is only partly symmetric."""
    meta2 = dict(prog.meta)
    meta2["evaluated"] = len(times)
    if times and math.isfinite(times[best]):
        meta2["sim_us"] = times[best] * 1e6
    notes = []
    if times and math.isfinite(beat) and not times[best] < beat:
        meta2["time_to_beat_us"] = beat * 1e6
        notes.append(f"no candidate beats the time to beat ({beat * 1e6:.1f} us): not proven best")
    if truncated or clock.hit:
        notes.append("time/search limit hit: best plan found so far, not proven best")
    if not sym.transitive:
        notes.append(
            f"topology only partly symmetric ({len(sym.gpu_orbits)} GPU orbits): one search per orbit"
        )
    if notes:
        meta2["note"] = "; ".join(notes)
    return replace(prog, meta=meta2)
