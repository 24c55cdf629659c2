"""``fast``: the FAST/FLASH skew-aware planner (arXiv 2505.09764, FLASH §4) on the common IR.

1. **Intra-server load balancing** (§4.1, §4.3 "preparation"). For every (source server A, destination server
   B) tile, GPUs of A exchange data over the scale-up fabric so each holds an equal share of the tile
   (shares differ by at most one chunk). Data moved to GPU j' is preferably data destined to GPU j' of B
   ("pack by destination", FAST slides), so it later lands without redistribution. Balancing a tile is skipped
   when it does not pay: when the scale-out time it saves is smaller than the scale-up time it costs (FAST's
   implementation skips by a beta/alpha ratio test in ``check_balance_dispatch``; ours compares the two times).
2. **Birkhoff stages** (§4.2). The server matrix S[A][B] = the largest per-GPU share of tile (A, B) is padded
   and decomposed into incast-free one-to-one stages (:mod:`a2acc.planners.birkhoff`); in each stage GPU i of a
   sender talks only to GPU i of its receiver.
3. **Pipelined redistribution** (§4.3). Data that arrives at the wrong GPU of B goes to scratch and is
   redistributed over the scale-up fabric as soon as it lands, concurrently with the next stage's scale-out
   transfer; data already at its final GPU is written straight into the output. The stages become network
   *steps* (:func:`order_steps`): heaviest first and lightest last, not FAST's ascending order (Theorem 2's
   proof), because here only the last step's redistribution is exposed; stages shorter than two link latencies
   are folded into other steps; the last step is split when its redistribution would still show. Each GPU's
   bundle sends its own data first and data balanced in from peers last, so balancing overlaps the first steps
   instead of delaying them, and the tail carries data that needs no redistribution (beyond FAST, whose
   pipeline does not overlap balancing). The intra-server part of the matrix has no dependencies, so it runs
   concurrently with balancing and the first step.

Step synchronisation is pairwise, not a global barrier: a step-k transfer from GPU A_i to B_i waits for
A_i's previous sends and B_i's previous receives, which is exactly what keeps every receiver incast-free. GPUs
that share a NIC (dgx2, ndv2) are synchronised as one: a transfer waits for all of their previous sends
(receives), so no GPU runs ahead and starves its sibling of the NIC's fair share.

Options (:class:`Options`, ``--opt KEY=VALUE``): ``birkhoff`` = ``bottleneck`` (default) | ``kuhn`` (FAST's
method); ``balance`` = ``auto`` (default) | ``always`` | ``never``; ``compare_kuhn=true`` also records how many
stages FAST's own Kuhn method would need (``meta["birkhoff_stages_kuhn"]``), next to ``meta["stage_bound"]``;
``order`` = ``tail`` (default, :func:`order_steps`; direct-connect graphs keep FAST's order) | ``ascending``
(FAST's order, every stage its own step).
``meta["stages"]`` counts the network steps run, ``meta["birkhoff_stages"]`` the decomposition's stages.

The ops are emitted by the compiled core ``a2acc._stageplan`` (``fast_prepare``: intra-server part, balancing
and bundles; ``fast_steps``: the network steps) when it was built, in one columnar block; the pure-Python
:func:`_prepare_py` and :func:`_steps_py` are the reference (``plan(req, native=False)``) and build
byte-identical Programs (``tests/planners/test_fast_native.py``). Per op the Python path costs microseconds,
the compiled one tens of nanoseconds, which is what keeps ``a2acc plan`` at 64 x 8 GPUs well under a second.

Works for every intra fabric (the simulator routes scale-up ops over switch, mesh, ring or cube-mesh), any
non-negative matrix, one server (no stages), zero rows and servers with no cross traffic. On a direct-connect
topology each node is a one-GPU "server": balancing vanishes and the stages are GPU-level BvN stages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from a2acc.errors import InternalError
from a2acc.ir import Buf, Program, ProgramBuilder
from a2acc.model.topology import Topology
from a2acc.native import stageplan as _native_emit
from a2acc.planners import PlanRequest
from a2acc.planners.birkhoff import Stage, decompose, stage_bound
from a2acc.planners.stageplan import stage_plan, tile_shares


@dataclass
class _Piece:
    """Chunks ``[off, off+cnt)`` of ``src``'s input region for ``dst``, currently at (rank, buf, at)."""

    src: int
    dst: int
    off: int  # offset within the (src -> dst) region
    cnt: int
    rank: int
    buf: int
    at: int
    dep: int  # op that put it there, or -1


def _split(p: _Piece, k: int) -> tuple[_Piece, _Piece]:
    a = _Piece(p.src, p.dst, p.off, k, p.rank, p.buf, p.at, p.dep)
    b = _Piece(p.src, p.dst, p.off + k, p.cnt - k, p.rank, p.buf, p.at + k, p.dep)
    return a, b


@dataclass(frozen=True)
class Options:
    birkhoff: Literal["bottleneck", "kuhn"] = field(
        default="bottleneck",
        metadata={"help": "stage decomposition: bottleneck (fewer stages) or kuhn (FAST's)"},
    )
    balance: Literal["auto", "always", "never"] = field(
        default="auto", metadata={"help": "intra-server balancing: when it pays (auto), always, never"}
    )
    compare_kuhn: bool = field(
        default=False, metadata={"help": "also count the stages FAST's Kuhn method needs (report only)"}
    )
    order: Literal["tail", "ascending"] = field(
        default="tail",
        metadata={
            "help": "network step order: tail (heavy first, tiny stages folded, last step split) "
            "or ascending (FAST's)"
        },
    )


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


def plan(req: PlanRequest, *, native: bool | None = None) -> Program:
    """Build FAST's Program. ``native=None`` emits the ops with the compiled core when it was built (the
    ``a2acc._stageplan`` extension), ``False`` with the pure-Python reference; both give identical Programs."""
    opts: Options = req.options if isinstance(req.options, Options) else Options()
    topo = req.topology
    counts = req.counts
    n_ranks = req.nranks
    m = topo.gpus_per_server
    n = topo.servers
    method: str = opts.birkhoff
    summary = topo.summary()
    alpha_intra = (topo.intra.latency * 1e-6) if topo.intra is not None else 0.0
    b = ProgramBuilder(f"fast-{n}x{m}", "fast", counts, req.unit_bytes, req.traffic, topology=req.topology)
    # ---- 1. stage plan (compiled core when built): balancing decisions, server matrix, Birkhoff stages
    sp = stage_plan(
        counts, m, method, opts.balance, req.unit_bytes, summary.b_inter, summary.b_intra_link, alpha_intra
    )
    server = sp.server
    dec = sp.decomposition if n > 1 else None
    stages = list(dec.stages) if dec is not None else []
    # GPUs sharing a NIC step together: otherwise one with many small pieces takes the NIC's fair share from
    # a sibling with one large piece, runs ahead into its next steps and keeps starving it
    nic_group = [[r] for r in range(n_ranks)]
    if topo.inter is not None and topo.inter.nics_per_server < m:
        nic_group = [
            [x for x in range(r - r % m, r - r % m + m) if topo.nic_of(x) == topo.nic_of(r)]
            for r in range(n_ranks)
        ]
    # direct-connect graphs redistribute nothing and route steps over several hops: FAST's order stays
    # (measured on a 4x4 torus: the tail order moved time / bound by -6 % to +5 %, noise around 7x)
    tail = opts.order == "tail" and topo.direct is None
    use_native = _native_emit is not None if native is None else native and _native_emit is not None
    if use_native:
        # intra-server part, balancing ops and bundles in C; own/whole (see below) from the bundles' pieces
        prep = _prepare_native(b, counts, sp.balanced, n, m)
        moved_chunks = prep.moved
        own, whole = (prep.own, prep.whole) if tail else (None, None)
    else:
        moved_chunks, bundles = _prepare_py(b, counts, sp.balanced, n, m)
        own, whole = _own_whole_py(bundles, n, m) if tail else (None, None)
    if not np.array_equal(prep.biggest if use_native else _biggest_py(bundles, n, m), server):
        raise InternalError("fast: stage plan and balancing disagree")  # pragma: no cover
    # ---- 2. Birkhoff stages of the server matrix -> network steps (order, folding, tail split)
    alpha_inter, r_redist = _step_costs(topo)
    t_chunk = req.unit_bytes / (summary.b_inter * 1e9) if summary.b_inter > 0 else 0.0
    steps: list[Step] = []
    if tail:
        # own: per (sender server, receiver server, GPU) chunks of the GPU's own input in its bundle (usable
        # at once); whole: the whole bundle. The first step should not wait for data balanced in from peers
        steps = order_steps(stages, server, t_chunk, alpha_inter, r_redist, own, whole)
    else:  # FAST's order (Theorem 2)
        steps = [Step(st.perm, (st.weight,) * n) for st in sorted(stages, key=lambda st: st.weight)]
    # ---- 3. stage transfers + pipelined redistribution
    if use_native:
        real_stages, leftovers = _steps_native(b, prep, steps, nic_group, n, m)
    else:
        real_stages, leftovers = _steps_py(b, bundles, steps, nic_group, n, m)
    if leftovers:  # pragma: no cover - Birkhoff weights always cover every server-matrix entry
        raise InternalError(f"fast: {leftovers} pieces were not scheduled")
    kuhn_stages = None
    if opts.compare_kuhn and n > 1:  # FAST's own method, for the stage-count report only
        kuhn_stages = len(stages) if method == "kuhn" else len(decompose(server, "kuhn").stages)
    weights = [max(st.caps) for st in steps]
    b.meta.update(
        {
            "stages": real_stages,
            "birkhoff_method": method,
            "birkhoff_stages": len(stages),
            "birkhoff_stages_kuhn": kuhn_stages,
            "stage_bound": stage_bound(n),
            "stage_weights": weights,
            "server_line_sum": dec.line_sum if dec is not None else 0,
            "balanced_tiles": int(sp.balanced.sum()),
            "balance_moved_chunks": moved_chunks,
            "server_matrix": server.tolist(),
        }
    )
    return b.build()


# ---------------------------------------------------------------------------------------------- compiled path
_I64 = npt.NDArray[np.int64]


@dataclass
class _Prepared:
    """The compiled core's first half: its ops (intra-server part, balancing), scratch used, the bundles
    (pieces in send order, one queue per (sender server, receiver server, GPU)), the largest bundle per
    server pair and the chunks balancing moved."""

    ops: tuple[bytes, bytes, bytes]  # rows of the 8 op fields, dependency counts, dependency ids (int64)
    scratch: bytes
    pieces: bytes  # rows of (src, dst, off, cnt, rank, buf, at, dep), int64
    queue_ptr: bytes  # queue q = (A*n + B)*m + i owns pieces[queue_ptr[q]:queue_ptr[q+1]]
    biggest: _I64
    moved: int
    out_off: _I64
    own: _I64  # per (sender server, receiver server, GPU): chunks of the bundle that are the GPU's own input
    whole: _I64  # and all chunks of the bundle

    @property
    def nops(self) -> int:
        return len(self.ops[1]) // 8


def _prepare_native(
    b: ProgramBuilder, counts: _I64, balanced: npt.NDArray[np.bool_], n: int, m: int
) -> _Prepared:
    """Intra-server ops, balancing ops and bundles, in C (:func:`_prepare_py` is the reference); the ops are
    added to ``b`` by :func:`_steps_native`, together with the steps' ops."""
    assert _native_emit is not None
    c = np.ascontiguousarray(counts, dtype=np.int64)
    in_off = np.ascontiguousarray(b.in_off, dtype=np.int64)
    out_off = np.ascontiguousarray(b.out_off, dtype=np.int64)
    bal = np.ascontiguousarray(balanced, dtype=np.uint8)
    ops, scratch, moved, pieces, qptr, big, own, whole = _native_emit.fast_prepare(
        c, in_off, out_off, c.shape[0], m, bal, len(b)
    )
    return _Prepared(
        ops,
        scratch,
        pieces,
        qptr,
        np.frombuffer(big, np.int64).reshape(n, n),
        int(moved),
        out_off,
        np.frombuffer(own, np.int64).reshape(n, n, m),
        np.frombuffer(whole, np.int64).reshape(n, n, m),
    )


def _steps_native(
    b: ProgramBuilder, prep: _Prepared, steps: list[Step], nic_group: list[list[int]], n: int, m: int
) -> tuple[int, int]:
    """The network steps in C (:func:`_steps_py` is the reference); adds the prepared ops and the steps' ops
    to ``b`` in one block. Returns (steps that sent data, pieces left unscheduled)."""
    assert _native_emit is not None
    n_ranks = n * m
    perms = np.array([st.perm for st in steps], dtype=np.int64).reshape(-1)
    caps = np.array([st.caps for st in steps], dtype=np.int64).reshape(-1)
    gptr = np.zeros(n_ranks + 1, np.int64)
    np.cumsum([len(g) for g in nic_group], out=gptr[1:])
    groups = np.array([x for g in nic_group for x in g], dtype=np.int64)
    (raw, ndeps, ids), scratch, real, left = _native_emit.fast_steps(
        prep.pieces,
        prep.queue_ptr,
        prep.out_off,
        n_ranks,
        m,
        perms,
        caps,
        gptr,
        groups,
        len(b) + prep.nops,
        prep.scratch,
    )
    # both halves in one block (bytearrays: the Program's columns stay writable like any other Program's)
    b.add_rows(
        np.frombuffer(bytearray(prep.ops[0]) + raw, np.int64),
        np.frombuffer(bytearray(prep.ops[1]) + ndeps, np.int64),
        np.frombuffer(bytearray(prep.ops[2]) + ids, np.int64),
    )
    b.scratch[:] = np.frombuffer(scratch, np.int64).tolist()
    return int(real), int(left)


# ---------------------------------------------------------------------------------------------- reference path
def _prepare_py(
    b: ProgramBuilder, counts: _I64, balanced: npt.NDArray[np.bool_], n: int, m: int
) -> tuple[int, list[list[list[list[_Piece]]]]]:
    """Intra-server ops and balancing ops; returns (chunks moved, bundles[a][bb][j] = pieces GPU j of server
    a sends to server bb, in send order)."""

    def rank(server: int, j: int) -> int:
        return server * m + j

    # intra-server part and self copies: no dependencies, run from t=0 alongside balancing/stage 0
    for a in range(n):
        for i in range(m):
            for j in range(m):
                s, d = rank(a, i), rank(a, j)
                c = int(counts[s, d])
                if c:
                    b.add(
                        (s, Buf.INPUT, int(b.in_off[s, d])),
                        (d, Buf.OUTPUT, int(b.out_off[d, s])),
                        c,
                        stage=0,
                    )
    bundles: list[list[list[list[_Piece]]]] = [[[[] for _ in range(m)] for _ in range(n)] for _ in range(n)]
    moved_chunks = 0
    for a in range(n):
        for bb in range(n):
            if a == bb:
                continue
            rows: list[list[_Piece]] = []
            for i in range(m):
                s = rank(a, i)
                row = []
                for j in range(m):
                    d = rank(bb, j)
                    c = int(counts[s, d])
                    if c:
                        row.append(_Piece(s, d, 0, c, s, Buf.INPUT, int(b.in_off[s, d]), -1))
                rows.append(row)
            load = [sum(p.cnt for p in r) for r in rows]
            if sum(load) == 0:
                continue
            if balanced[a, bb]:
                moved_chunks += _balance_tile(b, rows, load, tile_shares(load), a, bb, m)
            for i in range(m):
                bundles[a][bb][i] = _order_bundle(rows[i], rank(bb, i))
    return moved_chunks, bundles


def _own_whole_py(bundles: list[list[list[list[_Piece]]]], n: int, m: int) -> tuple[_I64, _I64]:
    """Per (sender server, receiver server, GPU): chunks of the GPU's own input in its bundle, whole bundle."""
    own = np.zeros((n, n, m), dtype=np.int64)
    whole = np.zeros((n, n, m), dtype=np.int64)
    for a in range(n):
        for bb in range(n):
            for i in range(m):
                for p in bundles[a][bb][i]:
                    whole[a, bb, i] += p.cnt
                    if p.dep < 0:
                        own[a, bb, i] += p.cnt
    return own, whole


def _biggest_py(bundles: list[list[list[list[_Piece]]]], n: int, m: int) -> _I64:
    """The largest bundle (chunks) of every server pair: the stage plan's server matrix, by construction."""
    out = np.zeros((n, n), dtype=np.int64)
    for a in range(n):
        for bb in range(n):
            out[a, bb] = max((sum(p.cnt for p in q) for q in bundles[a][bb]), default=0)
    return out


def _steps_py(
    b: ProgramBuilder,
    bundles: list[list[list[list[_Piece]]]],
    steps: list[Step],
    nic_group: list[list[int]],
    n: int,
    m: int,
) -> tuple[int, int]:
    """Stage transfers and pipelined redistribution: (steps that sent data, pieces left unscheduled)."""
    n_ranks = n * m
    last_send: list[list[int]] = [[] for _ in range(n_ranks)]
    last_recv: list[list[int]] = [[] for _ in range(n_ranks)]
    stage_no = 0
    real_stages = 0
    for st in steps:
        stage_no += 1
        sent: dict[int, list[int]] = {}
        recvd: dict[int, list[int]] = {}
        for a in range(n):
            bb = st.perm[a]
            if bb == a:
                continue
            for i in range(m):
                queue = bundles[a][bb][i]
                cap = st.caps[a]
                s_rank, d_rank = a * m + i, bb * m + i
                # what every transfer of this queue waits for (last_send/last_recv change only between steps)
                wait = {x for r in nic_group[s_rank] for x in last_send[r]}
                wait.update(x for r in nic_group[d_rank] for x in last_recv[r])
                while cap > 0 and queue:
                    p = queue[0]
                    if p.cnt > cap:
                        p, queue[0] = _split(p, cap)
                    else:
                        queue.pop(0)
                    cap -= p.cnt
                    deps = wait if p.dep < 0 else wait | {p.dep}
                    out_at = int(b.out_off[p.dst, p.src]) + p.off
                    # data for the aligned GPU lands in its output; the rest lands in scratch and is forwarded
                    land = -1 if p.dst == d_rank else b.alloc_scratch(d_rank, p.cnt)
                    target = (d_rank, Buf.OUTPUT, out_at) if land < 0 else (d_rank, Buf.SCRATCH, land)
                    oid = b.add((p.rank, p.buf, p.at), target, p.cnt, deps, stage=stage_no)
                    if land >= 0:
                        b.add(
                            (d_rank, Buf.SCRATCH, land),
                            (p.dst, Buf.OUTPUT, out_at),
                            p.cnt,
                            [oid],
                            stage=stage_no,
                        )
                    sent.setdefault(s_rank, []).append(oid)
                    recvd.setdefault(d_rank, []).append(oid)
        if sent:
            real_stages += 1
        for r, ops in sent.items():
            last_send[r] = ops
        for r, ops in recvd.items():
            last_recv[r] = ops
    leftovers = sum(len(bundles[a][bb][i]) for a in range(n) for bb in range(n) for i in range(m))
    return real_stages, leftovers


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
    n = server.shape[0]
    real = server > 0
    ordered = sorted(stages, key=lambda st: -st.weight)
    if own is not None and load is not None and len(ordered) > 1:
        # first step: the heaviest whose GPUs can send their share from their own input (balancing runs
        # meanwhile); failing that, the one that needs the least balanced-in data
        # starve[k]: the most balanced-in data a GPU needs before step k can send (0 if none); all steps at once
        rows = np.arange(n)
        perm = np.array([st.perm for st in ordered], dtype=np.int64)  # [steps, n]
        weight = np.array([st.weight for st in ordered], dtype=np.int64)
        need = np.minimum(load[rows, perm], weight[:, None, None]) - own[rows, perm]  # [steps, n, m]
        need[perm == rows] = 0  # servers that keep their data this step wait for nothing
        starve = np.maximum(need.reshape(len(ordered), -1).max(axis=1, initial=0), 0)
        first = int(np.argmin(starve))  # the first of the least starved, as min() over (starve, k)
        ordered.insert(0, ordered.pop(first))
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
    steps = [Step(perms[k], tuple(caps[k])) for k in range(len(ordered)) if keep[k]]
    for _ in range(MAX_TAIL_SPLITS):
        if not steps or r <= 0 or r * max(steps[-1].caps) * t_chunk <= SPLIT_LATENCIES * alpha:
            break
        last = steps.pop()
        tail = tuple(min(c - 1, math.ceil(c * r / (1 + r))) if c > 1 else 0 for c in last.caps)
        steps.append(Step(last.perm, tuple(c - x for c, x in zip(last.caps, tail))))
        steps.append(Step(last.perm, tail))
    return steps


def _order_bundle(pieces: list[_Piece], aligned_rank: int) -> list[_Piece]:
    """Order a GPU's bundle for one destination server.

    Pieces already in the GPU's input go first (no wait), pieces balanced in from peers last (they arrive when
    balancing finishes, and being mostly destined to the aligned GPU they need no redistribution, which keeps
    the pipeline tail short). Within each group, data needing redistribution travels before data that does not.
    Measured: 1.108 -> 1.045 x the bound on Zipf(0.8), dgx-h200-fast 4x8, 512 MiB/GPU.
    """
    return sorted(pieces, key=lambda p: (p.dep >= 0, p.dst == aligned_rank, p.dst, p.src, p.off))


def _balance_tile(
    b: ProgramBuilder, rows: list[list[_Piece]], load: list[int], share: list[int], a: int, bb: int, m: int
) -> int:
    """Move pieces from surplus to deficit GPUs of server ``a`` for tile (a, bb); returns chunks moved."""
    surplus = {k: load[k] - share[k] for k in range(m) if load[k] > share[k]}
    deficit = {k: share[k] - load[k] for k in range(m) if load[k] < share[k]}
    moved = 0

    def take(i: int, pred_dst: int | None, want: int) -> list[_Piece]:
        """Remove up to ``want`` chunks from GPU i's row, preferring pieces to ``pred_dst``."""
        out: list[_Piece] = []
        row = rows[i]
        aligned = bb * m + i
        cands = [p for p in row if (pred_dst is None and p.dst != aligned) or p.dst == pred_dst]
        if pred_dst is None:  # second choice: even aligned pieces
            cands += [p for p in row if p.dst == aligned]
        for p in cands:
            if want == 0:
                break
            if p.cnt > want:
                head, tail = _split(p, want)
                row[row.index(p)] = tail
                p = head
            else:
                row.remove(p)
            out.append(p)
            want -= p.cnt
        return out

    for pass_no in (0, 1):
        for j in sorted(deficit):
            for i in sorted(surplus):
                need = min(deficit[j], surplus[i])
                if need == 0:
                    continue
                got = take(i, bb * m + j if pass_no == 0 else None, need)
                for p in got:
                    dst_rank = a * m + j
                    off = b.alloc_scratch(dst_rank, p.cnt)
                    deps = [p.dep] if p.dep >= 0 else []
                    oid = b.add(
                        (p.rank, p.buf, p.at),
                        (dst_rank, Buf.SCRATCH, off),
                        p.cnt,
                        deps,
                        stage=0,
                    )
                    rows[j].append(_Piece(p.src, p.dst, p.off, p.cnt, dst_rank, Buf.SCRATCH, off, oid))
                    deficit[j] -= p.cnt
                    surplus[i] -= p.cnt
                    moved += p.cnt
    return moved
