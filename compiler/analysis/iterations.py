"""Back-to-back iterations of a Program: what an all-to-all benchmark times, as one DAG for the simulator.

FAST's benchmark (FAST repository, ``amd/test_alltoall.cpp``, ``perf_spreadout`` / ``perf_fastalltoall``) and
nccl-tests (``common.cu``, ``BenchTime``) queue ``iters`` calls of the collective back to back on each rank's
stream after warm-up calls, with no barrier between them, and divide the elapsed time by ``iters``. A rank
starts its next call when its stream has finished the previous one, whatever its peers do; so a logged time is
the period of that steady state, not one call from a common start:

- the first exchange of every call waits for the receiver's previous call, as a later step of a call waits for
  the receiver's previous step: it pays the same pipeline fill and rendezvous (docs/simulator.md);
- a rank that finishes a call early starts the next one early, so a call's ragged end overlaps the next
  call's start.

:func:`back_to_back` builds ``k`` copies of a Program, each copy's first ops on a rank depending on that
rank's last ops of the copy before (stream order). The period is the makespan of two copies minus that of
one (:mod:`a2acc.studies.calibrate` uses it for the staged rows of a benchmark log). The result is a
simulation input, never a plan: every copy reads and writes the same buffers.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt

from a2acc.ir.program import OpTable, Program, replace_ops
from a2acc.segments import segment_indices

_I64 = npt.NDArray[np.int64]


def _rank_ends(t: OpTable) -> tuple[_I64, _I64, _I64, _I64]:
    """Where each op stands in its ranks' streams: (root op, its rank) pairs - ops involving a rank none of
    whose ancestors (transitively) involves that rank: the rank's first ops - and (sink op, its rank) pairs -
    ops involving a rank none of whose descendants involves it: the rank's last ops. One pass each way over
    the op ids (a topological order), ranks as bit sets."""
    n = len(t)
    src = t.src_rank.tolist()
    dst = t.dst_rank.tolist()
    ptr = t.dep_ptr.tolist()
    dep = t.dep_ids.tolist()
    own = [(1 << s) | (1 << d) for s, d in zip(src, dst)]
    before = [0] * n  # ranks involved in an op's ancestors
    for i in range(n):
        m = 0
        for d in dep[ptr[i] : ptr[i + 1]]:
            m |= before[d] | own[d]
        before[i] = m
    after = [0] * n  # ranks involved in an op's descendants
    for i in range(n - 1, -1, -1):
        m = after[i] | own[i]
        for d in dep[ptr[i] : ptr[i + 1]]:
            after[d] |= m
    root_op: list[int] = []
    root_rank: list[int] = []
    sink_op: list[int] = []
    sink_rank: list[int] = []
    for i in range(n):
        for r in (src[i], dst[i]) if src[i] != dst[i] else (src[i],):
            if not before[i] >> r & 1:
                root_op.append(i)
                root_rank.append(r)
            if not after[i] >> r & 1:
                sink_op.append(i)
                sink_rank.append(r)
    return (
        np.array(root_op, dtype=np.int64),
        np.array(root_rank, dtype=np.int64),
        np.array(sink_op, dtype=np.int64),
        np.array(sink_rank, dtype=np.int64),
    )


def back_to_back(prog: Program, k: int) -> Program:
    """``k`` calls of ``prog`` queued back to back on every rank's stream (module docstring)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    t = prog.table
    if t.ids is not None:
        raise ValueError("op ids other than 0..n-1 (a hand-made op list): verify the Program first")
    n = len(t)
    if k == 1 or n == 0:
        return prog
    root_op, root_rank, sink_op, sink_rank = _rank_ends(t)
    # every (root, rank) pair depends on all of that rank's sinks of the copy before
    order = np.argsort(sink_rank, kind="stable")
    sink_op, sink_rank = sink_op[order], sink_rank[order]
    lo = np.searchsorted(sink_rank, root_rank, side="left")
    hi = np.searchsorted(sink_rank, root_rank, side="right")
    cnt = hi - lo
    link_owner = np.repeat(root_op, cnt)
    link_dep = sink_op[segment_indices(lo, cnt)]
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(t.dep_ptr))
    owners, deps = [], []
    for c in range(k):
        owners.append(owner + c * n)
        deps.append(t.dep_ids + c * n)
        if c:
            owners.append(link_owner + c * n)
            deps.append(link_dep + (c - 1) * n)
    total = k * n
    key = np.unique(np.concatenate(owners) * total + np.concatenate(deps))  # sorted, de-duplicated per op
    own, dep = key // total, key % total
    ptr = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(np.bincount(own, minlength=total), out=ptr[1:])

    def tile(a: _I64) -> _I64:
        return np.ascontiguousarray(np.tile(a, k), dtype=np.int64)

    table = replace(
        t,
        src_rank=tile(t.src_rank),
        src_buf=tile(t.src_buf),
        src_off=tile(t.src_off),
        dst_rank=tile(t.dst_rank),
        dst_buf=tile(t.dst_buf),
        dst_off=tile(t.dst_off),
        cnt=tile(t.cnt),
        stage=tile(t.stage),
        link=np.ascontiguousarray(np.tile(t.link, k), dtype=np.uint8),
        dep_ptr=ptr,
        dep_ids=np.ascontiguousarray(dep, dtype=np.int64),
    )
    return replace_ops(prog, table)
