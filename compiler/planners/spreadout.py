"""``spreadout``: MPI's staged shifts at GPU level (Netterville et al., "A Visual Guide to MPI All-to-all").

Stage 0 copies the self-chunks; stage k = 1..N-1 has rank r send to (r + k) mod N. Each rank posts its stage-k
exchange only after its own stage k-1 send and receive completed, and a send waits for the receiver to have
finished its previous stage too (the synchronous pairwise exchange of MPI implementations), so every receiver
has exactly one sender per stage. Stage time is set by its largest transfer: with skew the network idles
while stragglers finish (FLASH §2.1, Figure 3b) - the behaviour FAST is measured against.
"""

from __future__ import annotations

import numpy as np

from a2acc.ir import Buf, Program, ProgramBuilder
from a2acc.planners import PlanRequest


def plan(req: PlanRequest) -> Program:
    counts = req.counts
    n = req.nranks
    b = ProgramBuilder(
        f"spreadout-{n}", "spreadout", counts, req.unit_bytes, req.traffic, topology=req.topology
    )
    # every op at once, stage-major: op (k, r) sends counts[r, (r + k) % n] chunks (k = 0: the self copy)
    ranks = np.arange(n)
    peer = (ranks[None, :] + ranks[:, None]) % n  # peer[k, r]
    cnt = counts[ranks[None, :], peer]
    send = cnt > 0
    oid = np.cumsum(send.reshape(-1)).reshape(n, n) - 1  # op id of (k, r) where send[k, r]
    back = (ranks[None, :] - ranks[:, None]) % n  # the rank that sends to r at stage k
    recv = send[ranks[:, None], back]
    recv_id = oid[ranks[:, None], back]
    # an op waits for the ops of its sender's and its receiver's latest earlier stage (their send and receive)
    seen = np.where(send | recv, ranks[:, None], -1)
    latest = np.maximum.accumulate(seen, axis=0)  # latest[k, x]: x's last stage <= k
    ks, rs = np.nonzero(send)
    ds = peer[ks, rs]
    wait = np.full((ks.shape[0], 4), -1, dtype=np.int64)
    later = ks > 0
    for col, x in ((0, rs), (2, ds)):
        last = np.where(later, latest[np.maximum(ks - 1, 0), x], -1)
        ok = last >= 0
        lk = np.maximum(last, 0)
        wait[:, col] = np.where(ok & send[lk, x], oid[lk, x], -1)
        wait[:, col + 1] = np.where(ok & recv[lk, x], recv_id[lk, x], -1)
    wait.sort(axis=1)  # sorted and de-duplicated per op here is cheaper than the builder's general path
    wait[:, 1:][wait[:, 1:] == wait[:, :-1]] = -1
    has = wait >= 0
    b.add_many(
        (rs, int(Buf.INPUT), b.in_off[rs, ds]),
        (ds, int(Buf.OUTPUT), b.out_off[ds, rs]),
        cnt[ks, rs],
        stage=ks,
        deps=(has.sum(axis=1), wait[has]),
    )
    stages = int(send.any(axis=1).sum())
    b.meta["stages"] = stages
    return b.build()
