"""``direct`` (FanOut): every GPU sends to every peer at once; self-chunks are copied locally.

This is what NCCL/RCCL's grouped send/recv all-to-all does (FLASH §2.1 "FanOut"): one stage, all flows
concurrent. It is incast-prone on scale-out links (see :mod:`a2acc.analysis.simulate`), which is why it is the baseline.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from a2acc.ir import Buf, Program, ProgramBuilder
from a2acc.planners import PlanRequest


def plan(req: PlanRequest) -> Program:
    counts = req.counts
    n = req.nranks
    b = ProgramBuilder(f"direct-{n}", "direct", counts, req.unit_bytes, req.traffic, topology=req.topology)
    add_direct(b, counts)
    b.meta["stages"] = 1
    return b.build()


def add_direct(b: ProgramBuilder, counts: npt.NDArray[np.int64]) -> None:
    """All pairs at once, in (source, destination) order (also fast's one-step shape)."""
    src, dst = np.nonzero(counts)
    b.add_many(
        (src, int(Buf.INPUT), b.in_off[src, dst]),
        (dst, int(Buf.OUTPUT), b.out_off[dst, src]),
        counts[src, dst],
        stage=0,
    )
