"""``direct`` (FanOut): every GPU sends to every peer at once; self-chunks are copied locally.

This is what NCCL/RCCL's grouped send/recv all-to-all does (FLASH §2.1 "FanOut"): one stage, all flows
concurrent. It is incast-prone on scale-out links (see :mod:`a2acc.analysis.simulate`), which is why it is the baseline.
"""

from __future__ import annotations

from a2acc.ir import Buf, Program, ProgramBuilder
from a2acc.planners import PlanRequest


def plan(req: PlanRequest) -> Program:
    counts = req.counts
    n = req.nranks
    b = ProgramBuilder(f"direct-{n}", "direct", counts, req.unit_bytes, req.traffic, topology=req.topology)
    for s in range(n):
        for d in range(n):
            c = int(counts[s, d])
            if c == 0:
                continue
            b.add(
                (s, Buf.INPUT, int(b.in_off[s, d])),
                (d, Buf.OUTPUT, int(b.out_off[d, s])),
                c,
                stage=0,
            )
    b.meta["stages"] = 1
    return b.build()
