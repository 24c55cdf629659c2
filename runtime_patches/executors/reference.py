"""Reference executor: run one rank's part of a Program with ``torch.distributed`` batched P2P and local copies.

The ops are taken level by level (the longest dependency path to each op, :func:`a2acc.ir.dag.levels`): ops of
one level do not depend on each other, so this rank's transfers of a level go out as one
``batch_isend_irecv`` group (what a GPU job runs over NCCL: one grouped launch per stage) after its local copies.
Before an op reads a range this rank waits for pending receives into that range; before it writes a range it
waits for pending sends from and receives into that range (read-after-write, write-after-read,
write-after-write on this rank). Those are exactly the hazards the verifier proves ordered, so the result
equals the Program's semantics whatever the interleaving; orderings between ranks only shape performance.
The last level's transfers are returned still pending: the caller waits for them (at once, or behind an async
``Work``). A real distributed execution (Gloo on CPU in the tests), the correctness oracle of the JIT path and
its portable executor.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from a2acc.ir import Buf, Program
from a2acc.ir.dag import levels
from a2acc.runtime.executors import Regions, bind_arena
from a2acc.runtime.launch.arena import ArenaLaunch
from a2acc.runtime.launch.post import Posted


def execute(
    prog: Program,
    rank: int,
    bufs: dict[int, Any],
    group: Any = None,
    ranks: Sequence[int] | None = None,
    posted: Posted | None = None,
) -> list[Any]:
    """Run rank ``rank``'s ops; ``bufs`` maps Buf -> 1-D uint8 tensors of capacity x unit bytes. Returns the
    works still pending (wait for them before reading the output).

    ``ranks`` maps Program ranks to the process group's global ranks used by P2P (identity when None)."""
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

    by_level: dict[int, list[int]] = defaultdict(list)
    lvl = levels(prog.ops)
    for op in prog.ops:
        if rank in (op.src_rank, op.dst_rank):
            by_level[lvl[op.id]].append(op.id)
    for level in sorted(by_level):
        batch: list[Any] = []
        ranges: list[tuple[int, int, int, bool]] = []
        for oid in by_level[level]:
            op = prog.ops[oid]
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
                batch.append(dist.P2POp(dist.isend, src, peer(op.dst_rank), group, op.id))
                ranges.append((op.src_buf, s_lo, s_hi, False))
            else:
                dst = bufs[op.dst_buf][d_lo * u : d_hi * u]
                batch.append(dist.P2POp(dist.irecv, dst, peer(op.src_rank), group, op.id))
                ranges.append((op.dst_buf, d_lo, d_hi, True))
        if batch:
            if posted is not None:
                nbytes = [int(op.tensor.numel()) * int(op.tensor.element_size()) for op in batch]
                sends = [op.op is dist.isend for op in batch]
                posted.add(
                    sum(sends),
                    len(batch) - sum(sends),
                    sum(b for b, s in zip(nbytes, sends) if s),
                    sum(b for b, s in zip(nbytes, sends) if not s),
                )
            works = dist.batch_isend_irecv(batch)
            for (b, lo, hi, is_recv), w in zip(ranges, works):
                pending.append((b, lo, hi, is_recv, w))
    return [p[4] for p in pending]


class ReferenceExecutor:
    """The Program over torch.distributed p2p, op by op (see module docstring)."""

    name = "reference"

    def unavailable(self, entry: Any, group: Any) -> str | None:
        return None

    def prepare(self, prog: Program, entry: Any = None) -> Program:
        return prog

    def regions(self, prog: Program, rank: int) -> Regions:
        u = prog.unit_bytes
        i, o = prog.input_chunks(rank) * u, prog.output_chunks(rank) * u
        return Regions((0, i), (i, i + o), i + o + prog.scratch[rank] * u)

    def bind(
        self,
        prog: Program,
        prepared: Program,
        position: int,
        ranks: Sequence[int] | None,
        row_bytes: int,
        device: Any,
        groups: tuple[Any, Any],
        global_ranks: Sequence[int],
        backend: str,
        stock: Any,
        posted: Posted,
        buffers: Any = None,
    ) -> ArenaLaunch:
        r = self.regions(prog, position)
        n = prog.nranks
        peers = [global_ranks[int(ranks[c]) if ranks is not None else c] for c in range(n)]

        def start(arena: Any, counter: Posted) -> Callable[[], None]:
            bufs = {
                int(Buf.INPUT): arena[r.input[0] : r.input[1]],
                int(Buf.OUTPUT): arena[r.output[0] : r.output[1]],
                int(Buf.SCRATCH): arena[r.output[1] : r.total],
            }
            pending = execute(prog, position, bufs, group=groups[0], ranks=peers, posted=counter)

            def tail() -> None:
                for w in pending:
                    w.wait()

            return tail

        return bind_arena(start, r, prog, position, ranks, row_bytes, device, posted)


EXECUTOR = ReferenceExecutor()
