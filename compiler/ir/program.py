"""The common IR: a :class:`Program` is the only thing planners hand to passes and backends.

A Program describes one all-to-all(-v) for a **chunk layout** (:class:`~a2acc.ir.layout.ChunkLayout`):
``counts[s][d]`` chunks of ``unit_bytes`` each go from rank ``s`` to rank ``d``. Every rank has three buffers,
all measured in chunks of the plan-wide unit:

- ``input`` (``i``): ``sum(counts[r])`` chunks; peer ``d``'s region starts at ``input_offset(r, d)``;
- ``output`` (``o``): ``sum(counts[:, r])`` chunks; source ``s``'s region starts at ``output_offset(r, s)``;
- ``scratch`` (``s``): ``scratch[r]`` chunks for relays and staging.

The operations form a DAG: an :class:`Op` moves ``cnt`` consecutive chunks from (rank, buffer, offset) to
(rank, buffer, offset) after every op in ``deps`` has completed; an op within one rank is a local copy. Ops
carry hints (``stage``, ``link`` class) that backends and the simulator may use.

Invariants (checked by :mod:`a2acc.ir.verify`, relied on by every backend and executor):

- op ids are ``0..n-1`` in list order, and **every dependency names a smaller op id**: the op list is itself a
  topological order, so executors walk it front to back (:mod:`a2acc.ir.passes.toposort` renumbers a DAG
  built in another order);
- programs are out-of-place: no op writes an input buffer.

The Program also records where its ranks live (:class:`MachineMap`: rank -> node, local GPU index) and the
fingerprint of the topology it was planned for, so a backend can choose intra- or inter-node channels and a
simulation on another topology is refused. The JSON form lives in :mod:`a2acc.ir.serial`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Union

import numpy as np
import numpy.typing as npt

from a2acc.ir.layout import ChunkLayout

if TYPE_CHECKING:
    from a2acc.model.topology import Topology

LINK_CLASSES = ("local", "intra", "inter", "direct", "")

# plan metadata: JSON-like values only (planners record stage counts, methods, bounds)
MetaValue = Union[int, float, str, bool, None, Sequence["MetaValue"], Mapping[str, "MetaValue"]]  # noqa: UP007


class Buf(IntEnum):
    """Buffer kinds; the letters match MSCCL XML (``i``/``o``/``s``)."""

    INPUT = 0
    OUTPUT = 1
    SCRATCH = 2

    @property
    def letter(self) -> str:
        return "ios"[self.value]

    @staticmethod
    def from_letter(letter: str) -> Buf:
        return Buf("ios".index(letter))


class Op(NamedTuple):
    """One transfer (or local copy when ``src_rank == dst_rank``) of ``cnt`` consecutive chunks.

    ``stage`` is the planner's stage (simulator and reports); ``link`` the link class the transfer uses
    (``local`` copy, ``intra`` scale-up, ``inter`` scale-out, ``direct`` a direct-connect graph edge)."""

    id: int
    src_rank: int
    src_buf: int
    src_off: int
    dst_rank: int
    dst_buf: int
    dst_off: int
    cnt: int
    deps: tuple[int, ...] = ()
    stage: int = 0
    link: str = ""


OP_FIELDS = Op._fields


@dataclass(frozen=True)
class MachineMap:
    """Where each rank lives: ``node[r]`` (server / host index) and ``local[r]`` (GPU index within it)."""

    node: tuple[int, ...]
    local: tuple[int, ...]

    @staticmethod
    def of(topology: Topology) -> MachineMap:
        n = topology.nranks
        if topology.direct is not None:  # every GPU of a direct-connect graph is its own host
            return MachineMap(tuple(range(n)), (0,) * n)
        m = topology.gpus_per_server
        return MachineMap(tuple(r // m for r in range(n)), tuple(r % m for r in range(n)))

    def same_node(self, a: int, b: int) -> bool:
        return self.node[a] == self.node[b]


@dataclass(frozen=True, eq=False)
class Program:
    """A complete, serialisable schedule. Build it with :class:`~a2acc.ir.builder.ProgramBuilder`."""

    name: str
    algorithm: str
    nranks: int
    unit_bytes: int
    counts: npt.NDArray[np.int64]
    scratch: tuple[int, ...]
    ops: tuple[Op, ...]
    traffic: npt.NDArray[np.int64] | None = None
    meta: Mapping[str, MetaValue] = field(default_factory=dict)
    machine: MachineMap | None = None
    topology: str = ""  # fingerprint of the topology the plan was built for ("" when unknown)

    # ---------------------------------------------------------------- layout
    @cached_property
    def layout(self) -> ChunkLayout:
        return ChunkLayout.of(self.counts)

    def input_offset(self, rank: int, dst: int) -> int:
        return int(self.layout.in_off[rank, dst])

    def output_offset(self, rank: int, src: int) -> int:
        return int(self.layout.out_off[rank, src])

    def input_chunks(self, rank: int) -> int:
        return self.layout.input_chunks(rank)

    def output_chunks(self, rank: int) -> int:
        return self.layout.output_chunks(rank)

    def capacity(self, rank: int, buf: int) -> int:
        if buf == Buf.INPUT:
            return self.input_chunks(rank)
        if buf == Buf.OUTPUT:
            return self.output_chunks(rank)
        return self.scratch[rank]

    @property
    def padded_bytes(self) -> int:
        """Bytes the layout moves (chunks x unit), padding included."""
        return int(self.counts.sum()) * self.unit_bytes

    @property
    def padding_bytes(self) -> int:
        """Padding overhead against the matrix the plan was built for (0 when unknown)."""
        if self.traffic is None:
            return 0
        return self.padded_bytes - int(self.traffic.sum())

    # ---------------------------------------------------------------- serialisation (a2acc.ir.serial)
    def to_json(self) -> str:
        from a2acc.ir.serial import program_to_json

        return program_to_json(self)

    def save(self, path: str | Path) -> None:
        from a2acc.ir.serial import save_program

        save_program(self, path)


def replace_ops(p: Program, ops: Sequence[Op]) -> Program:
    """A copy of ``p`` with another op list (passes and tests that inject defects)."""
    return replace(p, ops=tuple(ops))
