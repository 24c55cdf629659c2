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
3. **Pipelined redistribution** (§4.3). Stages run in ascending weight order (Theorem 2's proof). Data that
   arrives at the wrong GPU of B goes to scratch and is redistributed over the scale-up fabric as soon as it
   lands, concurrently with the next stage's scale-out transfer; data already at its final GPU is written
   straight into the output. Each GPU's bundle sends its own data first and data balanced in from peers last,
   so balancing overlaps the first stages instead of delaying them, and the tail carries data that needs no
   redistribution (beyond FAST, whose pipeline does not overlap balancing). The intra-server part of the matrix has no
   dependencies, so it runs concurrently with balancing and the first stage.

Stage synchronisation is pairwise, not a global barrier: a stage-k transfer from GPU A_i to B_i waits for
A_i's previous sends and B_i's previous receives, which is exactly what keeps every receiver incast-free.

Options (:class:`Options`, ``--opt KEY=VALUE``): ``birkhoff`` = ``bottleneck`` (default) | ``kuhn`` (FAST's
method); ``balance`` = ``auto`` (default) | ``always`` | ``never``; ``compare_kuhn=true`` also records how many
stages FAST's own Kuhn method would need (``meta["birkhoff_stages_kuhn"]``), next to ``meta["stage_bound"]``.

Works for every intra fabric (the simulator routes scale-up ops over switch, mesh, ring or cube-mesh), any
non-negative matrix, one server (no stages), zero rows and servers with no cross traffic. On a direct-connect
topology each node is a one-GPU "server": balancing vanishes and the stages are GPU-level BvN stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from a2acc.errors import InternalError
from a2acc.ir import Buf, Program, ProgramBuilder
from a2acc.planners import PlanRequest
from a2acc.planners.birkhoff import decompose, stage_bound
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


def plan(req: PlanRequest) -> Program:
    opts: Options = req.options if isinstance(req.options, Options) else Options()
    topo = req.topology
    counts = req.counts
    n_ranks = req.nranks
    m = topo.gpus_per_server
    n = topo.servers
    method: str = opts.birkhoff
    balance: str = opts.balance
    summary = topo.summary()
    alpha_intra = (topo.intra.latency * 1e-6) if topo.intra is not None else 0.0
    b = ProgramBuilder(f"fast-{n}x{m}", "fast", counts, req.unit_bytes, req.traffic, topology=req.topology)

    def rank(server: int, j: int) -> int:
        return server * m + j

    # ---- intra-server part and self copies: no dependencies, run from t=0 alongside balancing/stage 0
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
    # ---- 1. stage plan (compiled core when built): balancing decisions, server matrix, Birkhoff stages
    sp = stage_plan(
        counts, m, method, balance, req.unit_bytes, summary.b_inter, summary.b_intra_link, alpha_intra
    )
    server = sp.server
    # ---- balancing ops: bundles[a][bb][j] = pieces GPU j of server a sends to server bb
    bundles: list[list[list[list[_Piece]]]] = [[[[] for _ in range(m)] for _ in range(n)] for _ in range(n)]
    balanced_tiles = int(sp.balanced.sum())
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
            if sp.balanced[a, bb]:
                moved_chunks += _balance_tile(b, rows, load, tile_shares(load), a, bb, m)
            for i in range(m):
                bundles[a][bb][i] = _order_bundle(rows[i], rank(bb, i))
            if int(server[a, bb]) != max(sum(p.cnt for p in r) for r in rows):  # pragma: no cover
                raise InternalError("fast: stage plan and balancing disagree")
    # ---- 2. Birkhoff stages of the server matrix, ascending weight
    dec = sp.decomposition if n > 1 else None
    stages = sorted(dec.stages, key=lambda st: st.weight) if dec is not None else []
    # ---- 3. stage transfers + pipelined redistribution
    last_send: list[list[int]] = [[] for _ in range(n_ranks)]
    last_recv: list[list[int]] = [[] for _ in range(n_ranks)]
    stage_no = 0
    real_stages = 0
    for st in stages:
        stage_no += 1
        sent: dict[int, list[int]] = {}
        recvd: dict[int, list[int]] = {}
        for a in range(n):
            bb = st.perm[a]
            if bb == a:
                continue
            for i in range(m):
                queue = bundles[a][bb][i]
                cap = st.weight
                s_rank, d_rank = rank(a, i), rank(bb, i)
                while cap > 0 and queue:
                    p = queue[0]
                    if p.cnt > cap:
                        p, queue[0] = _split(p, cap)
                    else:
                        queue.pop(0)
                    cap -= p.cnt
                    deps = set(last_send[s_rank]) | set(last_recv[d_rank])
                    if p.dep >= 0:
                        deps.add(p.dep)
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
    leftovers = [p for a in range(n) for bb in range(n) for i in range(m) for p in bundles[a][bb][i]]
    if leftovers:  # pragma: no cover - Birkhoff weights always cover every server-matrix entry
        raise InternalError(f"fast: {len(leftovers)} pieces were not scheduled")
    kuhn_stages = None
    if opts.compare_kuhn and n > 1:  # FAST's own method, for the stage-count report only
        kuhn_stages = len(stages) if method == "kuhn" else len(decompose(server, "kuhn").stages)
    b.meta.update(
        {
            "stages": real_stages,
            "birkhoff_method": method,
            "birkhoff_stages": len(stages),
            "birkhoff_stages_kuhn": kuhn_stages,
            "stage_bound": stage_bound(n),
            "stage_weights": [st.weight for st in stages],
            "server_line_sum": dec.line_sum if dec is not None else 0,
            "balanced_tiles": balanced_tiles,
            "balance_moved_chunks": moved_chunks,
            "server_matrix": server.tolist(),
        }
    )
    return b.build()


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
