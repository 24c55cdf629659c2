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

from a2acc.ir import Buf, Program, ProgramBuilder
from a2acc.planners import PlanRequest


def relay_index(a: int, b: int, m: int) -> int:
    return (b if a > b else b - 1) % m


def plan(req: PlanRequest) -> Program:
    counts = req.counts
    topo = req.topology
    m = topo.gpus_per_server
    n = topo.servers
    bld = ProgramBuilder(
        f"hierarchical-{n}x{m}", "hierarchical", counts, req.unit_bytes, req.traffic, topology=req.topology
    )
    for a in range(n):
        for i in range(m):
            for j in range(m):
                s, d = a * m + i, a * m + j
                c = int(counts[s, d])
                if c:
                    bld.add(
                        (s, Buf.INPUT, int(bld.in_off[s, d])),
                        (d, Buf.OUTPUT, int(bld.out_off[d, s])),
                        c,
                    )
    for a in range(n):
        for bb in range(n):
            if a == bb:
                continue
            ridx = relay_index(a, bb, m)
            relay, peer = a * m + ridx, bb * m + ridx
            total = int(counts[a * m : (a + 1) * m, bb * m : (bb + 1) * m].sum())
            if total == 0:
                continue
            base = bld.alloc_scratch(relay, total)
            land = bld.alloc_scratch(peer, total)
            gathers: list[int] = []
            pieces: list[tuple[int, int, int, int]] = []  # (src, dst, offset in block, cnt)
            at = 0
            for i in range(m):
                s = a * m + i
                for j in range(m):
                    d = bb * m + j
                    c = int(counts[s, d])
                    if not c:
                        continue
                    gathers.append(
                        bld.add(
                            (s, Buf.INPUT, int(bld.in_off[s, d])),
                            (relay, Buf.SCRATCH, base + at),
                            c,
                            stage=0,
                        )
                    )
                    pieces.append((s, d, at, c))
                    at += c
            cross = bld.add((relay, Buf.SCRATCH, base), (peer, Buf.SCRATCH, land), total, gathers, stage=1)
            for s, d, off, c in pieces:
                bld.add(
                    (peer, Buf.SCRATCH, land + off),
                    (d, Buf.OUTPUT, int(bld.out_off[d, s])),
                    c,
                    [cross],
                    stage=2,
                )
    bld.meta["stages"] = 3 if n > 1 else 1
    return bld.build()
