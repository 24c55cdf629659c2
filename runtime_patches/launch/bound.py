"""A launch program bound to its buffers: made once per (plan, position, row size, device, groups), replayed
per call.

Binding does everything that depends only on those: the buffers (``data``: the input region, the receive
blocks and a row of zeros; ``staging``: the send blocks that are gathered), their views, every exchange's
blocks, sizes and posting form (:class:`a2acc.runtime.launch.post.ExchangePost`), the gather indices, and the
packing indices (:class:`a2acc.runtime.launch.slots.Slots`), all on the data's device. A replay
(:meth:`BoundLaunch.run`) is then a fixed list of launches:

1. the split sizes to the device (pinned, non-blocking) and the caller's rows gathered into the input region;
2. per exchange: wait for the exchanges whose received rows it sends, gather its send block, post it;
3. wait for the rest, gather the caller's output (rows beyond the regions from the zero row);
4. rows beyond the regions (a skew bucket's residual) as point-to-point messages straight from the caller's
   input into the peer's output (:mod:`a2acc.runtime.launch.residual`); decided from this rank's own split
   sizes, so no rank needs to know another's.

A plan that is the caller's own all-to-all (:attr:`LaunchProgram.direct`) replays as one ``all_to_all_single``
of the caller's tensors. Everything is enqueued on the current stream and ordered against the previous call on
the same buffers (:mod:`a2acc.runtime.launch.streams`); nothing here reads a device value on the host.

Anchors for the shape: MSCCL++'s executor (``src/executor/executor.cc``: an execution context made once per
plan, buffers and device plan cached, then launched per call) and DeepEP's per-group buffer handle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from a2acc.runtime.launch.call import Call
from a2acc.runtime.launch.post import ExchangePost, Posted, collective, form
from a2acc.runtime.launch.program import LaunchProgram
from a2acc.runtime.launch.residual import post_residual
from a2acc.runtime.launch.slots import RegionMap, Slots, word_bytes, words
from a2acc.runtime.launch.streams import HostToDevice, StreamOrder, completed_work


def _rows(buf: Any, unit: int) -> Any:
    """A uint8 buffer as rows of one chunk: int64 words when the chunk allows, else bytes."""
    import torch

    if unit % 8 == 0:
        return buf.view(torch.int64).view(-1, unit // 8)
    return buf.view(-1, unit)


class Buffers:
    """The ``data`` and ``staging`` buffers the launches of one process group share on one device, grown to the
    largest any of them needs (calls on a group run one after another, ordered on the stream by
    :class:`StreamOrder`, which the buffers carry), so a job pays for one plan's buffers, not one per plan.
    ``generation`` changes when a buffer is replaced: a launch re-slices its views then. ``owner`` is the launch
    that used them last (the next one re-zeroes its row of zeros)."""

    def __init__(self, device: Any) -> None:
        import torch

        self.device = device
        self.data = torch.empty(0, dtype=torch.uint8, device=device)
        self.staging = torch.empty(0, dtype=torch.uint8, device=device)
        self.generation = 0
        self.owner: Any = None
        self.order = StreamOrder(device)

    def fit(self, data_bytes: int, staging_bytes: int) -> None:
        import torch

        grown = False
        if data_bytes > self.data.numel():
            self.data = torch.empty(data_bytes, dtype=torch.uint8, device=self.device)
            grown = True
        if staging_bytes > self.staging.numel():
            self.staging = torch.empty(staging_bytes, dtype=torch.uint8, device=self.device)
            grown = True
        if grown:
            self.generation += 1
            self.owner = None


class BoundLaunch:
    """See module docstring. ``groups``: the (main, intra-server) process groups of the two lanes (the same
    group twice without overlap); ``ranks``: global rank of each group rank; ``backend``: the group's backend
    name (what decides each exchange's posting form); ``stock``: the unpatched ``all_to_all_single``;
    ``buffers``: the group's shared :class:`Buffers` on the device (None: buffers of its own, fixed for the
    launch's life, as a CUDA graph that captured them needs)."""

    def __init__(
        self,
        lp: LaunchProgram,
        row_bytes: int,
        device: Any,
        groups: tuple[Any, Any],
        ranks: Sequence[int],
        backend: str,
        stock: Any,
        posted: Posted,
        buffers: Buffers | None = None,
    ) -> None:
        import torch

        self.lp = lp
        self.row_bytes = row_bytes
        self.device = device
        self.group = groups[0]
        self.ranks = list(ranks)
        self.stock = stock
        self.collective = collective(stock, groups[0])
        self.posted = posted
        self.buffers = buffers if buffers is not None else Buffers(device)
        self.order = self.buffers.order
        self.residual = 0  # messages of rows beyond the layout the last call sent or received
        unit = lp.unit
        self.cap_in = np.asarray((lp.in_cap * unit) // row_bytes, dtype=np.int64)
        self.cap_out = np.asarray((lp.out_cap * unit) // row_bytes, dtype=np.int64)
        if lp.direct:
            return
        w = lp.world
        self.h2d = HostToDevice(device, 2 * w, posted)
        g = word_bytes(row_bytes, unit)
        self.g = g
        self.zero_word = lp.zero_row * (unit // g)
        self.slots = Slots(
            RegionMap(lp.in_off, lp.in_cap, lp.in_rows),
            RegionMap(lp.out_off, lp.out_cap, int(lp.out_rows.size), lp.out_rows),
            row_bytes,
            unit,
            device,
        )
        self.gathers = [
            None if ex.send_at >= 0 else torch.as_tensor(ex.gather).to(device) for ex in lp.exchanges
        ]
        self.hows = [form(backend, ex.peers, w) for ex in lp.exchanges]
        self.lanes = groups
        self._generation = -1
        self.buffers.fit(lp.data_rows * unit, lp.staging_rows * unit)
        self._views()

    def _views(self) -> None:
        """Views of the (shared) buffers: the data rows, their words, each exchange's blocks and posts."""
        lp, unit, g = self.lp, self.lp.unit, self.g
        buf = self.buffers
        data = buf.data[: lp.data_rows * unit]
        data2d, stage2d = _rows(data, unit), _rows(buf.staging[: lp.staging_rows * unit], unit)
        self.data2d = data2d
        # the buffer as words: 8-byte copies when the caller's tensors allow them too, else bytes
        self.data_words = {wide: words(data, g, wide) for wide in ({False, True} if g % 8 == 0 else {False})}
        self.steps: list[tuple[tuple[int, ...], Any, Any, ExchangePost]] = []
        for x, ex in enumerate(lp.exchanges):
            if ex.send_at >= 0:
                send = data2d[ex.send_at : ex.send_at + ex.send_rows]
            else:
                send = stage2d[ex.stage_at : ex.stage_at + ex.send_rows]
            recv = data2d[ex.recv_at : ex.recv_at + ex.recv_rows]
            post = ExchangePost(
                self.hows[x],
                send,
                recv,
                ex.send,
                ex.recv,
                unit,
                self.lanes[ex.lane],
                self.ranks,
                self.stock,
                self.posted,
                x,
            )
            self.steps.append((ex.waits, self.gathers[x], send, post))
        self._generation = buf.generation

    def _claim(self) -> None:
        """Take the shared buffers for this call: re-slice after they grew, re-zero the row of zeros after
        another launch used them."""
        buf = self.buffers
        if self._generation != buf.generation:
            buf.fit(self.lp.data_rows * self.lp.unit, self.lp.staging_rows * self.lp.unit)
            self._views()
        if buf.owner is not self:
            self.data2d[self.lp.zero_row].zero_()
            buf.owner = self

    # ------------------------------------------------------------------ replay
    def run(self, call: Call, matrix: Any = None) -> Any:
        """Replay for one call (``matrix``, the call's full matrix when known, is not needed: every rank moves
        its residual from its own split sizes); returns the call's ``Work`` when ``call.async_op``."""
        self.order.begin()
        if self.lp.direct:
            return self._direct(call)
        w = self.lp.world
        splits = self.h2d.put(call.in_splits, call.out_splits)
        self.replay(call.input, call.output, splits[:w], splits[w:])
        self.residual = post_residual(call, self.cap_in, self.cap_out, self.ranks, self.posted)
        self.order.end()
        return completed_work(call.output) if call.async_op else None

    def replay(
        self, input: Any, output: Any, s_in: Any, s_out: Any, cap_in: Any = None, cap_out: Any = None
    ) -> Any:
        """The fixed part of a call: pack ``input`` by ``s_in`` (rows per peer, an int64 tensor on the device),
        run the exchanges, gather ``output`` by ``s_out``; ``cap_in``/``cap_out``: rows per peer to move at most,
        when fewer than the plan's regions hold. Every launch and every shape depends on the buffers alone, never
        on the sizes' values: nothing reads a device value on the host, so a CUDA graph can capture it. Returns
        the rows that fitted per source (a device tensor)."""
        import torch

        self._claim()
        g = self.g
        wide = True in self.data_words and input.data_ptr() % 8 == 0 and output.data_ptr() % 8 == 0
        buf = self.data_words[wide]
        self.slots.pack(words(input, g, wide), s_in, buf, cap_in)
        works: dict[int, list[Any]] = {}
        data2d = self.data2d
        for x, (waits, gather, send, post) in enumerate(self.steps):
            for y in waits:
                for wk in works.pop(y, ()):
                    wk.wait()
            if gather is not None:
                torch.index_select(data2d, 0, gather, out=send)
            works[x] = post.post()
        for ws in works.values():
            for wk in ws:
                wk.wait()
        return self.slots.unpack(buf, s_out, words(output, g, wide), self.zero_word, cap_out)

    def _direct(self, call: Call) -> Any:
        """The caller's own all-to-all, posted as it is (what FLASH's direct step and the stock call run)."""
        ins, outs, rb, me = call.in_splits, call.out_splits, call.row_bytes, call.rank
        sent, got = (sum(ins) - ins[me]) * rb, (sum(outs) - outs[me]) * rb
        self.posted.add(
            len(ins) - ins.count(0) - (ins[me] > 0), len(outs) - outs.count(0) - (outs[me] > 0), sent, got
        )
        even = call.even
        work = self.collective(call.output, call.input, [] if even else outs, [] if even else ins)
        self.order.end()
        if call.async_op:
            return work
        if work is not None:
            work.wait()
        return None
