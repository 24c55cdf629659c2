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

_I64 = npt.NDArray[np.int64]


def _rank_ends(t: OpTable) -> tuple[_I64, _I64, _I64, _I64]:
    """Per rank, where each op stands in that rank's stream: (root op, its rank) pairs - ops involving a rank
    none of whose dependencies involve that rank - and (sink op, its rank) pairs - ops involving a rank no op
    involving that rank depends on."""
    n = len(t)
    src, dst = t.src_rank, t.dst_rank
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(t.dep_ptr))
    dep = t.dep_ids
    so, do, sd, dd = src[owner], dst[owner], src[dep], dst[dep]
    remote = dst != src
    # a root: no dependency involves the op's sender (receiver)
    src_root = np.bincount(owner[(so == sd) | (so == dd)], minlength=n) == 0
    dst_root = (np.bincount(owner[(do == sd) | (do == dd)], minlength=n) == 0) & remote
    # a sink: no op depends on it that involves its sender (receiver)
    src_sink = np.bincount(dep[(sd == so) | (sd == do)], minlength=n) == 0
    dst_sink = (np.bincount(dep[(dd == so) | (dd == do)], minlength=n) == 0) & remote
    ids = np.arange(n, dtype=np.int64)
    root_op = np.concatenate([ids[src_root], ids[dst_root]])
    root_rank = np.concatenate([src[src_root], dst[dst_root]])
    sink_op = np.concatenate([ids[src_sink], ids[dst_sink]])
    sink_rank = np.concatenate([src[src_sink], dst[dst_sink]])
    return root_op, root_rank, sink_op, sink_rank


def back_to_back(prog: Program, k: int) -> Program:
    """``k`` calls of ``prog`` queued back to back on every rank's stream (module docstring)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    t = prog.table
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
    link_dep = sink_op[np.repeat(lo, cnt) + np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)]
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
        ids=None,
    )
    return replace_ops(prog, table)
