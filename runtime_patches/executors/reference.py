"""Reference executor: run one rank's part of a Program with ``torch.distributed`` isend/irecv and local copies.

Every rank walks the ops in the same topological order (op id order; builders emit dependencies first) and
handles the ops it takes part in: a local copy runs at once; as sender it posts ``isend`` of the chunk range, as
receiver ``irecv`` into the destination range (tag = op id). Before an op reads a range it waits for pending
receives into that range; before it writes a range it waits for pending sends from and receives into that range
(read-after-write, write-after-read, write-after-write on this rank). Those are exactly the hazards the
verifier proves ordered, so the result equals the Program's semantics whatever the interleaving. Orderings
between ranks only shape performance and are not needed here.

This is a real distributed execution (Gloo on CPU in the tests; any backend with point-to-point support), used
as the correctness oracle of the JIT path and as its portable executor. It is not tuned for speed.
"""

from __future__ import annotations

from typing import Any

from a2acc.ir import Program


def execute(
    prog: Program, rank: int, bufs: dict[int, Any], group: Any = None, ranks: list[int] | None = None
) -> None:
    """Run rank ``rank``'s ops; ``bufs`` maps Buf -> 1-D uint8 tensors of capacity x unit bytes.

    ``ranks`` maps Program ranks to ranks of the process group's numbering used by isend/irecv (identity when
    None; ``torch.distributed`` p2p takes global ranks).
    """
    import torch.distributed as dist

    u = prog.unit_bytes
    # pending transfers on this rank: (buf, lo, hi, is_recv, work)
    pending: list[tuple[int, int, int, bool, Any]] = []

    def settle(buf: int, lo: int, hi: int, writes: bool) -> None:
        keep = []
        for p in pending:
            pb, plo, phi, is_recv, work = p
            if pb == buf and plo < hi and lo < phi and (is_recv or writes):
                work.wait()
            else:
                keep.append(p)
        pending[:] = keep

    def peer(r: int) -> int:
        return r if ranks is None else ranks[r]

    for op in prog.ops:
        if rank != op.src_rank and rank != op.dst_rank:
            continue
        s_lo, s_hi = op.src_off, op.src_off + op.cnt
        d_lo, d_hi = op.dst_off, op.dst_off + op.cnt
        if rank == op.src_rank:
            settle(op.src_buf, s_lo, s_hi, writes=False)
        if rank == op.dst_rank:
            settle(op.dst_buf, d_lo, d_hi, writes=True)
        src = bufs[op.src_buf][s_lo * u : s_hi * u]
        if op.src_rank == op.dst_rank:
            bufs[op.dst_buf][d_lo * u : d_hi * u].copy_(src)
        elif rank == op.src_rank:
            w = dist.isend(src, dst=peer(op.dst_rank), group=group, tag=op.id)
            pending.append((op.src_buf, s_lo, s_hi, False, w))
        else:
            dst = bufs[op.dst_buf][d_lo * u : d_hi * u]
            w = dist.irecv(dst, src=peer(op.src_rank), group=group, tag=op.id)
            pending.append((op.dst_buf, d_lo, d_hi, True, w))
    for p in pending:
        p[4].wait()


class ReferenceExecutor:
    """The Program over torch.distributed p2p (see module docstring)."""

    name = "reference"
    buffers = "program"

    def unavailable(self, entry: Any, group: Any) -> str | None:
        return None

    def run(self, prog: Program, entry: Any, rank: int, bufs: dict[int, Any], group: Any, stock: Any) -> None:
        import torch.distributed as dist

        world = prog.nranks
        ranks = [dist.get_global_rank(group, r) for r in range(world)] if group is not None else None
        execute(prog, rank, bufs, group=group, ranks=ranks)


EXECUTOR = ReferenceExecutor()
