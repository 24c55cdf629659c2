"""From a synthesised sketch combination to a Program: per-pair routes, relays through scratch, dependencies.

SyCCL (SIGCOMM'25) slides, "Design 3: Schedule Evaluation": the sub-schedules are merged into one schedule;
adding stage times is inaccurate because stages pipeline, so candidates are timed by a simulator (SyCCL's is
built on ASTRA-sim; we use a2acc's flow-level simulator, which also models incast). This module builds the
Program the simulator times and the pipeline verifies.

Our design where the slides stop:

- **Split ratios**: a source's images of the combination (trees carried to it, weight = combination weight
  x 1/number of images) share its data by weight. The split is made per *block* - the source's chunks for one
  destination server, contiguous in its input buffer - cut into one contiguous range per image by the
  largest-remainder rule; a range follows its image's path to every destination it covers. The ratios are
  exact per block (what balances the NICs and relays) and a pair is cut at most where a range boundary falls,
  so the plan has about one transfer per image and block instead of one per image and pair. Routes of two
  hops or more can be cut further into ``pipeline`` pieces so a relay forwards the first while the next
  arrives.
- **Hops**: every tree edge of a route is a hop of a sub-demand (level, dimension, group); the sub-demand's LP
  solution shares the piece over its GPU paths inside the group (one path on switches; relays on meshes and
  rings) and gives each GPU-to-GPU transfer its epoch.
- **Bundles** (aggregation at relays): what a relay b receives at one level and forwards to the same next GPU
  c (same pipeline piece) lands in one contiguous scratch region, ordered by the rest of its route and its
  place in the final output; a transfer then moves every run of pieces that is contiguous at both ends in one
  op (depending on every op that delivered a piece of it). A relay's forward is one op per bundle and next
  bundle instead of one per pair: fewer, larger transfers, as a real executor wants (each message costs a
  software alpha), and fewer events to simulate. Only routes of two hops or more are cut into pipeline pieces.
- **Ops**: every op reads where the previous transfer of its pieces wrote (input buffer at the source, a
  bundle at every relay, fresh scratch inside a group's relay path, the output buffer at the destination) and
  depends on those transfers; nothing else orders ops, so the simulator's fair sharing decides the overlap.
  ``stage`` = the level's first epoch + the hop's epoch. Ops are emitted level by level, so every dependency
  has a smaller id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from a2acc.errors import InternalError
from a2acc.flows.paths import chunk_split, chunk_split_rows
from a2acc.ir.builder import ProgramBuilder
from a2acc.ir.dag import kahn_order, table_levels
from a2acc.ir.program import Buf, MetaValue, Program, replace_ops
from a2acc.model.topology import Topology
from a2acc.planners import PlanRequest
from a2acc.planners.syccl.symmetry import Symmetry

Route = tuple[int, ...]  # ranks from source to destination
SubRoutes = Mapping[tuple[int, int], Sequence[tuple[float, tuple[tuple[int, int, int], ...]]]]
"""Per hop (a, b) of one sub-demand: (fraction, GPU transfers (u, v, epoch)) in rank space."""


def build(
    req: PlanRequest,
    sym: Symmetry,
    routes: Sequence[Sequence[tuple[float, Sequence[Route]]]],
    subs: Mapping[tuple[int, int, int], SubRoutes],
    level_offset: Sequence[int],
    pipeline: int,
    meta: Mapping[str, MetaValue],
    order: str = "free",
) -> Program:
    """The Program for ``routes[s]`` = the images of the combination as seen from source s (weight, route to
    every destination) and the sub-demand routes ``subs`` keyed (level, dim, group)."""
    counts = req.counts
    n = req.nranks
    topo = req.topology
    b = ProgramBuilder(
        f"syccl-{topo.servers}x{topo.gpus_per_server}",
        "syccl",
        counts,
        req.unit_bytes,
        req.traffic,
        topology=topo,
    )
    for r in range(n):
        c = int(counts[r, r])
        if c:
            b.add((r, Buf.INPUT, int(b.in_off[r, r])), (r, Buf.OUTPUT, int(b.out_off[r, r])), c)
    segs: list[_Seg] = []
    for s in range(n):
        segs += _source_segments(b, topo, counts, s, routes[s], pipeline)
    max_stage = 0
    while segs:
        segs, top = _level(b, sym, segs, subs, level_offset)
        max_stage = max(max_stage, top)
    b.meta.update(meta)
    b.meta["stages"] = max_stage + 1 if len(b.ops) else 0
    b.meta["order"] = "free"
    prog = b.build()
    return rounds(prog, topo) if order == "rounds" else prog


def _source_segments(
    b: ProgramBuilder,
    topo: Topology,
    counts: npt.NDArray[np.int64],
    s: int,
    images: Sequence[tuple[float, Sequence[Route]]],
    pipeline: int,
) -> list[_Seg]:
    """Source ``s``'s first-level segments: per destination server, the block of its chunks for that server
    (contiguous in its input buffer) cut by the image weights into contiguous ranges (largest remainder), each
    range following its image's route to every destination it covers; routes of two hops or more are cut into
    up to ``pipeline`` pieces."""
    m = topo.gpus_per_server
    weights = [w for w, _r in images]
    segs: list[_Seg] = []
    row = counts[s].tolist()  # (Python integers: this loop runs per chunk range)
    in_off, out_off = b.in_off[s].tolist(), b.out_off[:, s].tolist()
    inp = int(Buf.INPUT)
    blocks = [
        dests
        for srv in range(topo.servers)
        if (dests := [d for d in range(srv * m, (srv + 1) * m) if d != s and row[d] > 0])
    ]
    splits = chunk_split_rows([sum(row[d] for d in dests) for dests in blocks], weights)
    for dests, split in zip(blocks, splits):
        di, used = 0, 0
        for (_w, rts), k in zip(images, split):
            while k > 0:
                d = dests[di]
                take = min(row[d] - used, k)
                route = rts[d]
                pieces = min(pipeline, take) if len(route) > 2 else 1
                at = used
                for i in range(pieces):
                    size = take // pieces + (1 if i < take % pieces else 0)
                    segs.append(_Seg(route, 0, i, size, (s, inp, in_off[d] + at), (), out_off[d] + at))
                    at += size
                used += take
                k -= take
                if used == row[d]:
                    di, used = di + 1, 0
    return segs


def rounds(prog: Program, topo: Topology) -> Program:
    """Chain the scale-out transfers of every NIC, send and receive side, in rounds: round r pairs server s
    with server s + r (mod n), and within a round NIC i first serves NIC i + t (mod NICs) at step t, so a
    receiving NIC hears one sender at a time (no incast) and a sending NIC feeds one transfer at a time. The
    chain order is (dependency depth, round, step, sender, receiver), which every original dependency already
    respects, so the result is acyclic; ops are then renumbered in topological order (Kahn, smallest id
    first: deterministic). Works on the op columns (the same Program as chaining :class:`Op` objects and
    running :mod:`a2acc.ir.passes.toposort`, tested)."""
    t = prog.table
    m, n = topo.gpus_per_server, topo.servers
    nics = max(topo.inter.nics_per_server if topo.inter is not None else 1, 1)
    nic = np.array([topo.nic_of(r) for r in range(topo.nranks)], dtype=np.int64)
    src, dst = t.src_rank, t.dst_rank
    ss, ds = src // m, dst // m
    inter = np.flatnonzero(ss != ds)
    depth = table_levels(t)
    keys = (inter, dst[inter], src[inter], (nic[dst[inter]] - nic[src[inter]]) % nics)
    chain = inter[np.lexsort((*keys, (ds[inter] - ss[inter]) % n, depth[inter]))]
    nops = len(t)
    op_of = np.repeat(np.arange(nops, dtype=np.int64), np.diff(t.dep_ptr))
    edges = [op_of * nops + t.dep_ids]  # op * nops + dependency
    for port in (ss * nics + nic[src], ds * nics + nic[dst]):  # a NIC's sends, then its receives
        by_port = chain[np.argsort(port[chain], kind="stable")]  # each port's ops in chain order
        same = port[by_port[1:]] == port[by_port[:-1]]
        edges.append(by_port[1:][same] * nops + by_port[:-1][same])  # each on the one before it
    key = np.unique(np.concatenate(edges))  # sorted by op, then dependency; duplicates merged
    op, dep = key // nops, key % nops
    found = kahn_order(nops, op, dep)
    if found is None:
        raise InternalError("syccl: chaining the NIC rounds closed a dependency cycle")
    order = np.asarray(found, dtype=np.int64)
    if not np.array_equal(order, np.arange(nops)):
        new_id = np.empty(nops, np.int64)
        new_id[order] = np.arange(nops, dtype=np.int64)
        key = np.sort(new_id[op] * nops + new_id[dep])
        op, dep = key // nops, key % nops
    table = t.reorder(order, np.bincount(op, minlength=nops), dep)
    return replace(replace_ops(prog, table), meta={**prog.meta, "order": "rounds"})


class _Seg:
    """A run of chunks of one route at one level: where it is now and which ops delivered it."""

    __slots__ = ("deps", "final", "h", "land", "loc", "out_at", "piece", "route", "size")

    def __init__(
        self,
        route: Route,
        h: int,
        piece: int,
        size: int,
        loc: tuple[int, int, int],
        deps: tuple[int, ...],
        out_at: int,
    ) -> None:
        self.route = route
        self.h = h
        self.piece = piece
        self.size = size
        self.loc = loc
        self.deps = deps
        self.out_at = out_at
        self.final = h + 2 == len(route)  # this level's hop ends at the destination
        self.land: tuple[int, int, int] = (-1, -1, -1)  # where it lands at this level (:func:`_landing`)


def _level(
    b: ProgramBuilder,
    sym: Symmetry,
    segs: list[_Seg],
    subs: Mapping[tuple[int, int, int], SubRoutes],
    level_offset: Sequence[int],
) -> tuple[list[_Seg], int]:
    """Emit one level's transfers; returns the segments of the next level and the highest stage used.

    Single direct paths are gathered by (sender, receiver, source buffer, stage) and merged into runs (emitted
    last); paths through relays inside a group are emitted piece by piece as they come."""
    _landing(b, segs)
    nxt: list[_Seg] = []
    top = 0
    simple: dict[tuple[int, int, int, int], list[_Seg]] = {}
    dims, groups = sym.hop_lists()
    for sg in segs:
        a, bb = sg.route[sg.h], sg.route[sg.h + 1]
        dim = dims[a][bb]
        table = subs.get((sg.h + 1, dim, groups[dim][a]))
        paths = table.get((a, bb)) if table is not None else None
        if paths is None:
            paths = ((1.0, ((a, bb, 0),)),)
        if len(paths) == 1 and len(paths[0][1]) == 1:
            stage = level_offset[sg.h] + paths[0][1][0][2]
            simple.setdefault((a, bb, sg.loc[1], stage), []).append(sg)
            continue
        top = max(top, _emit_paths(b, sg, paths, level_offset[sg.h], nxt))
    for (_a, _bb, _buf, stage), items in sorted(simple.items()):
        nxt += _emit_runs(b, items, stage)
        top = max(top, stage)
    return nxt, top


def _landing(b: ProgramBuilder, segs: list[_Seg]) -> None:
    """Set where each segment lands at this level (``land``): the output at its destination, or its slot of
    the bundle at the relay. A bundle is what one relay receives and forwards to the same next GPU (same
    pipeline piece): one contiguous scratch region, ordered by the rest of the route and the place in the
    output."""
    bundles: dict[tuple[int, int, int, int], list[_Seg]] = {}
    out = int(Buf.OUTPUT)
    for sg in segs:
        if sg.final:
            sg.land = (sg.route[-1], out, sg.out_at)
        else:
            key = (sg.route[sg.h + 1], sg.route[sg.h + 2], sg.route[sg.h], sg.piece)
            bundles.setdefault(key, []).append(sg)
    scratch = int(Buf.SCRATCH)
    for key in sorted(bundles):
        rank = key[0]
        members = sorted(bundles[key], key=lambda x: (x.route[x.h + 3 :], x.route[-1], x.out_at))
        off = b.alloc_scratch(rank, sum(x.size for x in members))
        for x in members:
            x.land = (rank, scratch, off)
            off += x.size


def _emit_paths(
    b: ProgramBuilder,
    sg: _Seg,
    paths: Sequence[tuple[float, tuple[tuple[int, int, int], ...]]],
    first_epoch: int,
    nxt: list[_Seg],
) -> int:
    """Segment ``sg``'s hop over its sub-demand's GPU paths: its chunks split by the paths' fractions, each
    part sent transfer by transfer (through fresh scratch at relays inside the group) to where ``sg`` lands;
    the parts that go on are appended to ``nxt``. Returns the highest stage used (0 if none)."""
    a, bb = sg.route[sg.h], sg.route[sg.h + 1]
    top = 0
    split = chunk_split(sg.size, [f for f, _p in paths])
    off = 0
    for (_f, hops), k in zip(paths, split):
        if k == 0:
            continue
        here = (sg.loc[0], sg.loc[1], sg.loc[2] + off)
        dst_end = sg.land
        deps = sg.deps
        for i, (u, v, t) in enumerate(hops):
            if u != here[0]:
                raise InternalError(f"syccl: sub-demand path of hop {a}->{bb} starts at {u}")
            if i == len(hops) - 1:
                dst = (dst_end[0], dst_end[1], dst_end[2] + off)
            else:
                dst = (v, int(Buf.SCRATCH), b.alloc_scratch(v, k))
            stage = first_epoch + t
            top = max(top, stage)
            deps = (b.add(here, dst, k, deps, stage=stage),)
            here = dst
        if not sg.final:
            nxt.append(_Seg(sg.route, sg.h + 1, sg.piece, k, here, deps, sg.out_at + off))
        off += k
    return top


def _emit_runs(b: ProgramBuilder, items: list[_Seg], stage: int) -> list[_Seg]:
    """The single-hop segments of one (sender, receiver, source buffer, stage), in landing order, as one op per
    run of segments contiguous at both ends; returns the segments that go on."""
    nxt: list[_Seg] = []
    items.sort(key=lambda sg: (sg.land, sg.loc))
    run: list[_Seg] = []
    for sg in items:
        if run:
            last = run[-1]
            sl, dl, dn = last.loc, last.land, sg.land
            src_ok = sg.loc[0] == sl[0] and sg.loc[1] == sl[1] and sg.loc[2] == sl[2] + last.size
            dst_ok = dn[0] == dl[0] and dn[1] == dl[1] and dn[2] == dl[2] + last.size
            if not (src_ok and dst_ok):
                nxt += _emit_run(b, run, stage)
                run = []
        run.append(sg)
    if run:
        nxt += _emit_run(b, run, stage)
    return nxt


def _emit_run(b: ProgramBuilder, run: list[_Seg], stage: int) -> list[_Seg]:
    """One op for a run of segments contiguous at both ends; the segments that go on, now delivered by it
    (moved on to their next hop in place: a level's segments are not read again)."""
    first = run[0]
    if len(run) == 1:
        op = b.add(first.loc, first.land, first.size, first.deps, stage=stage)
    else:
        deps = {d for sg in run for d in sg.deps}
        op = b.add(first.loc, first.land, sum(sg.size for sg in run), deps, stage=stage)
    by = (op,)
    nxt = []
    for sg in run:
        if not sg.final:
            sg.h += 1
            sg.loc = sg.land
            sg.deps = by
            sg.final = sg.h + 2 == len(sg.route)
            nxt.append(sg)
    return nxt
