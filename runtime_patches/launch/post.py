"""Posting an exchange to ``torch.distributed``, and counting what was posted.

An exchange (:class:`a2acc.runtime.launch.program.Exchange`) is posted in one of two forms, chosen from the
Program and the group's backend alone, so every rank chooses alike:

- ``a2a``: one ``all_to_all_single`` over the exchange's send and receive blocks, zero sizes for the peers it
  skips. torch posts the per-peer loop in C++; NCCL and RCCL (``all2all_single_unequal_split``) leave the zero
  sizes out, so this costs one grouped launch whatever the world size;
- ``p2p``: the exchange's messages as one ``batch_isend_irecv`` of ``P2POp`` objects made once at bind time.
  Gloo's ``alltoallv`` sends a message to every peer, empty or not (measured: an all-zero ``all_to_all_single``
  of 4 ranks costs what a full one does), so on Gloo an exchange that only a few peers take part in is cheaper
  this way.

:class:`Posted` counts what was handed to torch.distributed, at the moment it is posted: collectives, messages
sent and received (the non-zero sizes of a collective; the ops of a batch) and bytes. The engine's counters read
nothing else, so a call whose data were moved some other way would not count as the plan's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

A2A, P2P = "a2a", "p2p"


@dataclass
class Posted:
    """What this process posted (plain ints; read by ``a2acc.runtime.stats()``)."""

    collectives: int = 0  # all_to_all_single and batch_isend_irecv calls
    sends: int = 0
    recvs: int = 0
    sent_bytes: int = 0
    recv_bytes: int = 0
    host_waits: int = 0  # times the launch layer made the host wait for a device (a pinned staging slot)

    def snapshot(self) -> tuple[int, int, int, int, int]:
        return (self.collectives, self.sends, self.recvs, self.sent_bytes, self.recv_bytes)

    def add(self, sends: int, recvs: int, sent: int, received: int) -> None:
        self.collectives += 1
        self.sends += sends
        self.recvs += recvs
        self.sent_bytes += sent
        self.recv_bytes += received


def collective(stock: Callable[..., Any], group: Any) -> Callable[..., Any]:
    """``post(out, inp, out_sizes, in_sizes) -> Work``: an asynchronous ``all_to_all_single`` on ``group``.

    When ``stock`` is torch's own function, the process group's method is called directly with options made once
    (``ProcessGroup.alltoall_base``, what ``torch.distributed.all_to_all_single`` calls after its argument
    checks and logging wrapper, about 15-30 us of Python per call): a2acc's own buffers and plain tensors need
    neither. Anything else (a test double, a wrapper the job installed) is called as it is."""
    import torch
    import torch.distributed as dist

    if getattr(stock, "__module__", "") != "torch.distributed.distributed_c10d":
        return lambda out, inp, osz, isz: stock(out, inp, osz, isz, group=group, async_op=True)
    from torch.distributed.distributed_c10d import _get_default_group

    pg = group if group is not None else _get_default_group()
    opts = dist.AllToAllOptions()
    opts.asyncOp = True
    method = pg.alltoall_base
    plain = torch.Tensor

    def post(out: Any, inp: Any, osz: Any, isz: Any) -> Any:
        if type(out) is not plain or type(inp) is not plain or inp.is_complex():
            return stock(out, inp, osz, isz, group=group, async_op=True)
        return method(out, inp, osz, isz, opts)

    return post


def skips_empty(backend: str) -> bool:
    """Whether the backend's ``all_to_all_single`` leaves zero-size peers out (NCCL, RCCL and most others; not
    Gloo, whose ``alltoallv`` exchanges a message with every peer)."""
    return "gloo" not in backend


def form(backend: str, peers: int, world: int) -> str:
    """How an exchange in which at most ``peers`` peers of any rank take part is posted on ``backend``."""
    return A2A if skips_empty(backend) or 2 * peers >= world else P2P


class ExchangePost:
    """One exchange bound to its blocks: ``post()`` hands it to torch.distributed and returns its works.

    ``send``/``recv``: the blocks (tensors whose first dimension is rows), ``send_sizes``/``recv_sizes``: rows
    per group rank, ``row_bytes`` of a block row, ``ranks``: global rank of each group rank (P2P ops name global
    ranks), ``tag``: the exchange's index (Gloo matches by tag; NCCL by order, which both sides keep)."""

    def __init__(
        self,
        how: str,
        send: Any,
        recv: Any,
        send_sizes: Sequence[int],
        recv_sizes: Sequence[int],
        row_bytes: int,
        group: Any,
        ranks: Sequence[int],
        stock: Callable[..., Any],
        posted: Posted,
        tag: int,
    ) -> None:
        self.how = how
        self.send, self.recv = send, recv
        self.send_sizes, self.recv_sizes = list(send_sizes), list(recv_sizes)
        self.group, self.stock, self.posted = group, stock, posted
        self._post = collective(stock, group) if how == A2A else None
        self.counts = (
            sum(1 for k in send_sizes if k),
            sum(1 for k in recv_sizes if k),
            sum(send_sizes) * row_bytes,
            sum(recv_sizes) * row_bytes,
        )
        self.ops: list[Any] = []
        if how == P2P:
            import torch.distributed as dist

            at = 0
            for q, k in enumerate(send_sizes):
                if k:
                    self.ops.append(dist.P2POp(dist.isend, send[at : at + k], ranks[q], group, tag))
                at += k
            at = 0
            for q, k in enumerate(recv_sizes):
                if k:
                    self.ops.append(dist.P2POp(dist.irecv, recv[at : at + k], ranks[q], group, tag))
                at += k

    def post(self) -> list[Any]:
        self.posted.add(*self.counts)
        if self._post is not None:
            work = self._post(self.recv, self.send, self.recv_sizes, self.send_sizes)
            return [work] if work is not None else []
        if not self.ops:  # nothing of this rank's in the exchange
            self.posted.collectives -= 1
            return []
        import torch.distributed as dist

        return list(dist.batch_isend_irecv(self.ops))


def post_messages(
    messages: Sequence[tuple[bool, Any, int]], group: Any, posted: Posted, tag: int
) -> list[Any]:
    """Messages outside a plan (``(send?, tensor, global peer)``, e.g. the residual) as one batch."""
    import torch.distributed as dist

    if not messages:
        return []
    ops = [dist.P2POp(dist.isend if s else dist.irecv, t, p, group, tag) for s, t, p in messages]
    sent = sum(int(t.numel()) * int(t.element_size()) for s, t, _p in messages if s)
    got = sum(int(t.numel()) * int(t.element_size()) for s, t, _p in messages if not s)
    posted.add(sum(1 for s, _t, _p in messages if s), sum(1 for s, _t, _p in messages if not s), sent, got)
    return list(dist.batch_isend_irecv(ops))
