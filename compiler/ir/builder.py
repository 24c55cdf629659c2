""":class:`ProgramBuilder`: how planners emit a Program (ops get consecutive ids, dependencies first).

The builder knows the chunk layout (``in_off``/``out_off``), the topology's machine map (so :meth:`link`
labels a transfer ``local``, ``intra``, ``inter`` or ``direct`` from where its ranks live, not from a guess)
and owns the scratch allocator. Scratch can be reused: :meth:`release_scratch` returns a region together with
the ops that last touch it, and :meth:`alloc_scratch_reuse` hands that region out again with those ops, which
every write into the reused space must depend on (the verifier checks that it does).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from a2acc.errors import InternalError
from a2acc.ir.layout import ChunkLayout
from a2acc.ir.program import MachineMap, MetaValue, Op, Program

if TYPE_CHECKING:
    from a2acc.model.topology import Topology


class ProgramBuilder:
    """Mutable helper that planners use to emit a Program."""

    def __init__(
        self,
        name: str,
        algorithm: str,
        counts: npt.NDArray[np.int64],
        unit_bytes: int,
        traffic: npt.NDArray[np.int64] | None = None,
        *,
        topology: Topology | None = None,
    ) -> None:
        self.name = name
        self.algorithm = algorithm
        self.layout = ChunkLayout.of(counts)
        self.counts = self.layout.counts
        self.nranks = self.layout.nranks
        self.unit_bytes = int(unit_bytes)
        self.traffic = traffic
        self.scratch = [0] * self.nranks
        self.ops: list[Op] = []
        self.meta: dict[str, MetaValue] = {}
        self.in_off = self.layout.in_off
        self.out_off = self.layout.out_off
        self.machine = MachineMap.of(topology) if topology is not None else None
        self._direct = topology is not None and topology.direct is not None
        self.fingerprint = topology.fingerprint if topology is not None else ""
        if topology is not None and topology.nranks != self.nranks:
            raise InternalError(f"layout has {self.nranks} ranks but the topology {topology.nranks}")
        # free scratch regions per rank: (offset, chunks, ops that must finish before the space is rewritten)
        self._free: list[list[tuple[int, int, tuple[int, ...]]]] = [[] for _ in range(self.nranks)]

    # ------------------------------------------------------------------ links
    def link(self, src: int, dst: int) -> str:
        """Link class of a transfer between two ranks, from the machine map."""
        if src == dst:
            return "local"
        if self.machine is None:
            return ""
        if self._direct:
            return "direct"
        return "intra" if self.machine.same_node(src, dst) else "inter"

    # ------------------------------------------------------------------ scratch
    def alloc_scratch(self, rank: int, chunks: int) -> int:
        """Reserve ``chunks`` fresh scratch chunks on ``rank``; returns the offset."""
        off = self.scratch[rank]
        self.scratch[rank] += int(chunks)
        return off

    def release_scratch(self, rank: int, off: int, chunks: int, last_use: Iterable[int]) -> None:
        """Give ``[off, off+chunks)`` back; ``last_use`` are the ops that read or write it last."""
        if chunks < 1 or off < 0 or off + chunks > self.scratch[rank]:
            raise InternalError(f"release of scratch [{off}, {off + chunks}) on rank {rank} out of range")
        self._free[rank].append((int(off), int(chunks), tuple(sorted(set(int(x) for x in last_use)))))

    def alloc_scratch_reuse(self, rank: int, chunks: int) -> tuple[int, tuple[int, ...]]:
        """First-fit reuse of released scratch, else fresh space: (offset, ops every writer must wait for)."""
        free = self._free[rank]
        for i, (off, cnt, wait) in enumerate(free):
            if cnt >= chunks:
                if cnt == chunks:
                    free.pop(i)
                else:
                    free[i] = (off + chunks, cnt - chunks, wait)
                return off, wait
        return self.alloc_scratch(rank, chunks), ()

    # ------------------------------------------------------------------ ops
    def add(
        self,
        src: tuple[int, int, int],
        dst: tuple[int, int, int],
        cnt: int,
        deps: Iterable[int] = (),
        *,
        stage: int = 0,
        link: str | None = None,
    ) -> int:
        """Append an op; ``link`` defaults to the machine map's class for (src rank, dst rank)."""
        oid = len(self.ops)
        sr, dr = int(src[0]), int(dst[0])
        self.ops.append(
            Op(
                oid,
                sr,
                int(src[1]),
                int(src[2]),
                dr,
                int(dst[1]),
                int(dst[2]),
                int(cnt),
                tuple(sorted(set(int(d) for d in deps))),
                int(stage),
                self.link(sr, dr) if link is None else link,
            )
        )
        return oid

    def build(self) -> Program:
        return Program(
            name=self.name,
            algorithm=self.algorithm,
            nranks=self.nranks,
            unit_bytes=self.unit_bytes,
            counts=self.counts,
            scratch=tuple(self.scratch),
            ops=tuple(self.ops),
            traffic=self.traffic,
            meta=dict(self.meta),
            machine=self.machine,
            topology=self.fingerprint,
        )
