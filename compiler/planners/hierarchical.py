"""``hierarchical``: the MSCCL relay all-to-all (msccl-tools ``alltoall_a100_two_step/three_step``).

For every ordered server pair (A, B), one GPU of A is the relay for B: local index
``(B if A > B else B - 1) % m`` (the msccl-tools rule, so with n - 1 <= m every relay serves one remote server).
1. gather: every GPU of A copies its data for server B into the relay's scratch (the relay copies its own);
2. cross: the relay sends the whole gathered block in one scale-out transfer to the GPU with the same local
   index on B (rail-aligned), into scratch;
3. scatter: that GPU forwards each piece to its final GPU's output.
Intra-server traffic and self-chunks go directly. Aggregation makes few large scale-out flows (good against
incast) but a single NIC per server pair carries all of A->B, so it cannot balance skew.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from a2acc.ir import Buf, Program, ProgramBuilder
from a2acc.planners import PlanRequest


def relay_index(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64], m: int) -> npt.NDArray[np.int64]:
    """Local index of server ``a``'s relay GPU for server ``b`` (msccl-tools' rule, elementwise)."""
    return np.asarray(np.where(a > b, b, b - 1) % m, dtype=np.int64)


def plan(req: PlanRequest) -> Program:
    counts = req.counts
    topo = req.topology
    m = topo.gpus_per_server
    n = topo.servers
    bld = ProgramBuilder(
        f"hierarchical-{n}x{m}", "hierarchical", counts, req.unit_bytes, req.traffic, topology=req.topology
    )
    in_off, out_off = bld.in_off, bld.out_off
    # intra-server traffic and self-chunks: direct copies, in (source, destination) order
    server = np.arange(n * m) // m
    s, d = np.nonzero((server[:, None] == server[None, :]) & (counts > 0))
    bld.add_many((s, int(Buf.INPUT), in_off[s, d]), (d, int(Buf.OUTPUT), out_off[d, s]), counts[s, d])
    # cross-server pairs (a, b) in order, each: gathers (one per nonzero GPU pair), one cross, scatters
    tile = counts.reshape(n, m, n, m)
    total = tile.sum(axis=(1, 3))
    np.fill_diagonal(total, 0)
    pa, pb = np.nonzero(total)
    npairs = int(pa.shape[0])
    if npairs == 0:
        bld.meta["stages"] = 3 if n > 1 else 1
        return bld.build()
    ridx = relay_index(pa, pb, m)
    relay, peer, tot = pa * m + ridx, pb * m + ridx, total[pa, pb]
    base, land = _alloc_pairs(bld, relay, peer, tot)
    # pieces (pair, i, j) with chunks, in the order the gathers are issued
    pp, pi, pj = np.nonzero(tile[pa, :, pb, :])
    src, dst = pa[pp] * m + pi, pb[pp] * m + pj
    c = counts[src, dst]
    g = np.bincount(pp, minlength=npairs)  # gathers per pair (>= 1: every pair has traffic)
    first = np.concatenate([[0], np.cumsum(g)[:-1]])  # first piece of each pair
    q = np.arange(pp.shape[0]) - first[pp]  # piece index within its pair
    csum = np.cumsum(c) - c
    at = csum - csum[first][pp]  # chunk offset of the piece in the pair's block
    # op ids: per pair g gathers, the cross, g scatters
    start = len(bld) + np.concatenate([[0], np.cumsum(2 * g + 1)[:-1]])
    gather, cross, scatter = start[pp] + q, start + g, start[pp] + g[pp] + 1 + q
    k0, k = len(bld), int(2 * g.sum() + npairs)
    col = np.zeros((8, k), dtype=np.int64)  # src rank, buf, off, dst rank, buf, off, cnt, stage
    ndeps = np.zeros(k, dtype=np.int64)
    for ids, rows in (
        (gather, (src, Buf.INPUT, in_off[src, dst], relay[pp], Buf.SCRATCH, base[pp] + at, c, 0)),
        (cross, (relay, Buf.SCRATCH, base, peer, Buf.SCRATCH, land, tot, 1)),
        (scatter, (peer[pp], Buf.SCRATCH, land[pp] + at, dst, Buf.OUTPUT, out_off[dst, src], c, 2)),
    ):
        for f, v in enumerate(rows):
            col[f, ids - k0] = v
    ndeps[cross - k0] = g
    ndeps[scatter - k0] = 1
    dep_ids = np.empty(2 * pp.shape[0], dtype=np.int64)  # per pair: the cross's gathers, each scatter's cross
    dep_ids[2 * first[pp] + q] = gather
    dep_ids[2 * first[pp] + g[pp] + q] = cross[pp]
    bld.add_many(
        (col[0], col[1], col[2]), (col[3], col[4], col[5]), col[6], stage=col[7], deps=(ndeps, dep_ids)
    )
    bld.meta["stages"] = 3 if n > 1 else 1
    return bld.build()


def _alloc_pairs(
    bld: ProgramBuilder,
    relay: npt.NDArray[np.int64],
    peer: npt.NDArray[np.int64],
    size: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Fresh scratch for every pair, allocated in pair order (the relay's block, then the peer's landing
    block), as :meth:`ProgramBuilder.alloc_scratch` would hand it out one call at a time."""
    rank = np.stack([relay, peer], axis=1).reshape(-1)
    amount = np.repeat(size, 2)
    order = np.argsort(rank, kind="stable")
    r_sorted, a_sorted = rank[order], amount[order]
    excl = np.cumsum(a_sorted) - a_sorted
    head = np.concatenate([[True], r_sorted[1:] != r_sorted[:-1]])
    group = np.cumsum(head) - 1
    start = np.asarray(bld.scratch, dtype=np.int64)[r_sorted]
    off = np.empty_like(excl)
    off[order] = excl - excl[head][group] + start
    grown = np.zeros(len(bld.scratch), dtype=np.int64)
    np.add.at(grown, rank, amount)
    for r in np.flatnonzero(grown).tolist():
        bld.scratch[r] += int(grown[r])
    return off[0::2], off[1::2]
