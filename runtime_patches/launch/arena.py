"""A plan run by an executor that works on one buffer per rank: ``reference`` (op by op), ``msccl`` and
``mscclpp`` (a uniform buffer the stock executor runs its file over).

The buffer (the *arena*) holds the executor's input region at its start and its output region further on, in
the chunk layout every manifest describes, then one chunk of zeros. A replay packs the caller's rows into the
input region (:class:`a2acc.runtime.launch.slots.Slots`), runs the executor, gathers the output, then moves rows
beyond the layout with one stock ``all_to_all_single`` of the residual: these executors do not carry it in
their own messages, so they are served only on calls whose matrix every rank knows (exchanged ones), and every
rank calls the residual exchange exactly when some pair has one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from a2acc.runtime.launch.call import Call
from a2acc.runtime.launch.post import Posted
from a2acc.runtime.launch.slots import RegionMap, Slots, word_bytes, words
from a2acc.runtime.launch.streams import HostToDevice, StreamOrder, completed_work

I64 = npt.NDArray[np.int64]
#: ``start(arena, posted) -> tail``: the executor's part of one call over the arena
Start = Callable[[Any, Posted], Callable[[], None]]


class ArenaLaunch:
    """Bound once per (plan, position, row size, device). ``inputs``: the input region's chunks (it starts the
    arena) and per group rank the first chunk and chunks of each peer's region in it; ``outputs``: the output
    region's first byte and chunks, and the same per source; ``total``: the arena's bytes (the zero chunk is
    added after it); ``fit``: whole rows of every pair (group ranks) that fit the layout (:func:`fit_table`)."""

    def __init__(
        self,
        start: Start,
        unit: int,
        inputs: tuple[int, I64, I64],
        outputs: tuple[int, int, I64, I64],
        total: int,
        fit: I64,
        row_bytes: int,
        device: Any,
        posted: Posted,
    ) -> None:
        import torch

        self.start_fn = start
        self.unit = unit
        self.row_bytes = row_bytes
        self.posted = posted
        self.fit = fit
        in_chunks, in_off, in_cap = inputs
        out_lo, out_chunks, out_off, out_cap = outputs
        zero = -(-total // unit)  # the zero chunk, after everything the executor uses
        self.arena = torch.empty((zero + 1) * unit, dtype=torch.uint8, device=device)
        self.arena[zero * unit :].zero_()
        g = word_bytes(row_bytes, unit)
        self.g = g
        self.zero_word = zero * (unit // g)
        where = out_lo // unit + np.arange(out_chunks, dtype=np.int64)
        self.slots = Slots(
            RegionMap(in_off, in_cap, in_chunks),
            RegionMap(out_off, out_cap, out_chunks, where),
            row_bytes,
            unit,
            device,
        )
        self.words = words(self.arena, g, False)
        self.h2d = HostToDevice(device, 2 * in_off.size, posted)
        self.order = StreamOrder(device)
        self.view = self.arena[:total]

    def run(self, call: Call, matrix: I64 | None) -> Any:
        """Replay for one call whose full matrix (rows per pair, the caller's ranks) is ``matrix``."""
        self.order.begin()
        n = call.world
        splits = self.h2d.put(call.in_splits, call.out_splits)
        g = self.g
        self.slots.pack(words(call.input, g, False), splits[:n], self.words)
        self.start_fn(self.view, self.posted)()
        self.slots.unpack(self.words, splits[n:], words(call.output, g, False), self.zero_word)
        if matrix is not None:
            exchange_residual(call, matrix, np.minimum(matrix, self.fit), self.posted)
        self.order.end()
        return completed_work(call.output) if call.async_op else None


def exchange_residual(call: Call, rows: I64, fit: I64, posted: Posted) -> None:
    """Rows beyond the layout (``rows - fit`` per pair, ``fit <= rows``; every rank knows both): one stock exchange with split
    sizes, made by every rank exactly when some pair has a residual."""
    import torch

    if not bool((rows > fit).any()):
        return
    r, n = call.rank, call.world
    inp, out = call.input, call.output
    in_off = np.cumsum(rows[r]) - rows[r]
    out_off = np.cumsum(rows[:, r]) - rows[:, r]
    send_rows = (rows[r] - fit[r]).tolist()
    recv_rows = (rows[:, r] - fit[:, r]).tolist()
    parts = [inp[int(in_off[d] + fit[r, d]) : int(in_off[d] + rows[r, d])] for d in range(n)]
    send = torch.cat(parts).contiguous()
    recv = torch.empty((sum(recv_rows), *inp.shape[1:]), dtype=inp.dtype, device=inp.device)
    rb = call.row_bytes
    posted.add(
        sum(1 for k in send_rows if k),
        sum(1 for k in recv_rows if k),
        sum(send_rows) * rb,
        sum(recv_rows) * rb,
    )
    call.stock(recv, send, recv_rows, send_rows, group=call.group)
    at = 0
    for s in range(n):
        k = recv_rows[s]
        if k:
            lo = int(out_off[s] + fit[s, r])
            out[lo : lo + k].copy_(recv[at : at + k])
            at += k


def fit_table(counts: I64, unit: int, row_bytes: int, ranks: Sequence[int] | None) -> I64:
    """Whole rows of each (sender, receiver) pair of group ranks that fit the layout ``counts`` (program ranks;
    ``ranks[c]`` plays program rank ``c``)."""
    cap = (np.asarray(counts, dtype=np.int64) * unit) // row_bytes
    if ranks is None:
        return cap
    out = np.zeros_like(cap)
    p = np.asarray(ranks, dtype=np.int64)
    out[np.ix_(p, p)] = cap
    return out
