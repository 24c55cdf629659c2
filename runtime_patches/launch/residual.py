"""Rows beyond a plan's regions (a skew bucket's residual), moved straight from the caller's input into the
peer's output.

A bucket's layout serves a family of matrices (:mod:`a2acc.jit.bucket`); a call may carry a few rows more for
a pair than the pair's chunks hold. Those rows travel as point-to-point messages after the plan, at most one
per peer and direction, from the caller's input tensor into the peer's output tensor (no staging). Each rank
decides from its own split sizes and the layout alone: rank ``r`` sends ``in_splits[q] - cap_in[q]`` rows to
``q`` and receives ``out_splits[q] - cap_out[q]`` rows from ``q``, and in a valid call those are the same
numbers on both ends, so no rank needs to know another's. The messages are posted after the output was
gathered (whose words for those rows came from the zero row), so they land last; on a GPU the communicator's
stream waits for that gather. Rows beyond the rank's own region are one copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from a2acc.runtime.launch.call import Call
from a2acc.runtime.launch.post import Posted, post_messages

#: the residual's tag (Gloo matches by tag; NCCL by order, which both sides keep)
TAG = 1 << 20


def residual_messages(
    call: Call, cap_in: npt.NDArray[np.int64], cap_out: npt.NDArray[np.int64], ranks: Sequence[int]
) -> list[tuple[bool, Any, int]]:
    """``(send?, row view, global peer)`` for this rank's residual (sends then receives, peers ascending: the
    same order on both ends of every pair); the self rows beyond the region are copied here."""
    ins, outs = np.asarray(call.in_splits, np.int64), np.asarray(call.out_splits, np.int64)
    over_in, over_out = ins > cap_in, outs > cap_out
    if not (over_in.any() or over_out.any()):
        return []
    r = call.rank
    x, y = call.input, call.output
    in_off = np.cumsum(ins) - ins
    out_off = np.cumsum(outs) - outs
    msgs: list[tuple[bool, Any, int]] = []
    for q in np.flatnonzero(over_in).tolist():
        if q != r:
            msgs.append((True, x[int(in_off[q] + cap_in[q]) : int(in_off[q] + ins[q])], ranks[q]))
    for q in np.flatnonzero(over_out).tolist():
        if q != r:
            msgs.append((False, y[int(out_off[q] + cap_out[q]) : int(out_off[q] + outs[q])], ranks[q]))
    if over_in[r]:
        k = int(ins[r] - cap_in[r])
        a, b = int(in_off[r] + cap_in[r]), int(out_off[r] + cap_out[r])
        y[b : b + k].copy_(x[a : a + k])
    return msgs


def post_residual(
    call: Call,
    cap_in: npt.NDArray[np.int64],
    cap_out: npt.NDArray[np.int64],
    ranks: Sequence[int],
    posted: Posted,
) -> int:
    """Move this rank's residual (see module docstring) and wait for it; returns its messages."""
    msgs = residual_messages(call, cap_in, cap_out, ranks)
    for w in post_messages(msgs, call.group, posted, TAG):
        w.wait()
    return len(msgs)
