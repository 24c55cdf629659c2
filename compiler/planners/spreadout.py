"""``spreadout``: MPI's staged shifts at GPU level (Netterville et al., "A Visual Guide to MPI All-to-all").

Stage 0 copies the self-chunks; stage k = 1..N-1 has rank r send to (r + k) mod N. Each rank posts its stage-k
exchange only after its own stage k-1 send and receive completed, and a send waits for the receiver to have
finished its previous stage too (the synchronous pairwise exchange of MPI implementations), so every receiver
has exactly one sender per stage. Stage time is set by its largest transfer: with skew the network idles
while stragglers finish (FLASH §2.1, Figure 3b) - the behaviour FAST is measured against.
"""

from __future__ import annotations

from a2acc.ir import Buf, Program, ProgramBuilder
from a2acc.planners import PlanRequest


def plan(req: PlanRequest) -> Program:
    counts = req.counts
    n = req.nranks
    b = ProgramBuilder(
        f"spreadout-{n}", "spreadout", counts, req.unit_bytes, req.traffic, topology=req.topology
    )
    last: list[list[int]] = [[] for _ in range(n)]
    for r in range(n):
        c = int(counts[r, r])
        if c:
            oid = b.add((r, Buf.INPUT, int(b.in_off[r, r])), (r, Buf.OUTPUT, int(b.out_off[r, r])), c)
            last[r] = [oid]
    stages = 1 if any(last) else 0
    for k in range(1, n):
        new: list[list[int]] = [[] for _ in range(n)]
        any_op = False
        for r in range(n):
            d = (r + k) % n
            c = int(counts[r, d])
            if not c:
                continue
            deps = set(last[r]) | set(last[d])
            oid = b.add(
                (r, Buf.INPUT, int(b.in_off[r, d])),
                (d, Buf.OUTPUT, int(b.out_off[d, r])),
                c,
                deps,
                stage=k,
            )
            new[r].append(oid)
            new[d].append(oid)
            any_op = True
        for r in range(n):
            if new[r]:
                last[r] = new[r]
        stages += int(any_op)
    b.meta["stages"] = stages
    return b.build()
