""":class:`ProgramBuilder`: how planners emit a Program (ops get consecutive ids, dependencies first).

The builder knows the chunk layout (``in_off``/``out_off``), the topology's machine map (so :meth:`link`
labels a transfer ``local``, ``intra``, ``inter`` or ``direct`` from where its ranks live, not from a guess)
and owns the scratch allocator (fresh regions only: every planner sizes its scratch up front, and the verifier
would catch a write into scratch still being read).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from a2acc.errors import InternalError
from a2acc.ir.layout import ChunkLayout
from a2acc.ir.program import LINK_CLASSES, MachineMap, MetaValue, Op, OpTable, Program, normalise_deps

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
        layout: ChunkLayout | None = None,
    ) -> None:
        """``layout``: ``counts``' chunk layout when the caller has it already (a search that builds several
        Programs of one request computes its offsets once)."""
        self.name = name
        self.algorithm = algorithm
        self.layout = layout if layout is not None else ChunkLayout.of(counts)
        self.counts = self.layout.counts
        self.nranks = self.layout.nranks
        self.unit_bytes = int(unit_bytes)
        self.traffic = traffic
        self.scratch = [0] * self.nranks
        # ops added one by one (flat columns, see OpTable) and blocks of finished columns, in op order
        self._flat: list[int] = []
        self._codes: list[int] = []
        self._ndeps: list[int] = []
        self._dep_ids: list[int] = []
        self._blocks: list[
            tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.int64]]
        ] = []
        self._n = 0
        self._vocab = {name: k for k, name in enumerate(LINK_CLASSES)}
        self.meta: dict[str, MetaValue] = {}
        self.in_off = self.layout.in_off
        self.out_off = self.layout.out_off
        self.machine = MachineMap.of(topology) if topology is not None else None
        self._direct = topology is not None and topology.direct is not None
        self._node = self.machine.node if self.machine is not None else None
        self.fingerprint = topology.fingerprint if topology is not None else ""
        if topology is not None and topology.nranks != self.nranks:
            raise InternalError(f"layout has {self.nranks} ranks but the topology {topology.nranks}")
        # free scratch regions per rank: (offset, chunks, ops that must finish before the space is rewritten)

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

    # ------------------------------------------------------------------ ops
    def _code_of(self, link: str) -> int:
        code = self._vocab.get(link)
        if code is None:
            if len(self._vocab) >= 255:
                raise InternalError("more than 255 different link labels")
            code = self._vocab[link] = len(self._vocab)
        return code

    def __len__(self) -> int:
        """Ops added so far (the next op's id)."""
        return self._n

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
        """Append an op; ``link`` defaults to the machine map's class for (src rank, dst rank).

        Fields are integers (Python or numpy); ``deps`` any iterable of op ids (stored sorted, de-duplicated)."""
        oid = self._n
        sr = src[0]
        dr = dst[0]
        self._flat += (sr, src[1], src[2], dr, dst[1], dst[2], cnt, stage)
        if link is not None:
            self._codes.append(self._code_of(link))
        elif sr == dr:
            self._codes.append(0)
        elif self._node is None:
            self._codes.append(4)
        elif self._direct:
            self._codes.append(3)
        else:
            self._codes.append(1 if self._node[sr] == self._node[dr] else 2)
        if (type(deps) is tuple or type(deps) is list) and not deps:
            self._ndeps.append(0)
        else:  # any iterable (sets, generators, numpy arrays)
            ds = sorted(deps) if type(deps) is set else sorted(set(deps))
            self._ndeps.append(len(ds))
            self._dep_ids += ds
        self._n = oid + 1
        return oid

    def add_many(
        self,
        src: tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike],
        dst: tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike],
        cnt: npt.ArrayLike,
        *,
        stage: npt.ArrayLike = 0,
        deps: tuple[npt.ArrayLike, npt.ArrayLike] | None = None,
        link: str | None = None,
    ) -> npt.NDArray[np.int64]:
        """Append ``k`` ops at once (columns, broadcast like numpy); returns their ids (consecutive).

        ``deps`` is ``(ndeps, dep_ids)``: op ``t`` of the batch depends on the next ``ndeps[t]`` entries of
        ``dep_ids`` (op ids, any order, duplicates allowed: they are sorted and de-duplicated per op as
        :meth:`add` does). ``link`` defaults to the machine map's class of each (src rank, dst rank)."""
        srk, sbf, sof, drk, dbf, dof, cn, stg = np.broadcast_arrays(
            *(np.asarray(x, dtype=np.int64) for x in (*src, *dst, cnt, stage))
        )
        k = int(cn.reshape(-1).shape[0])
        if k == 0:
            return np.zeros(0, np.int64)
        self._flush()
        rows = np.stack([a.reshape(-1) for a in (srk, sbf, sof, drk, dbf, dof, cn, stg)])
        codes = self._link_codes(rows[0], rows[3], link)
        if deps is None:
            ndeps = np.zeros(k, np.int64)
            ids = np.zeros(0, np.int64)
        else:
            ndeps, ids = normalise_deps(deps[0], deps[1], k)
        self._blocks.append((rows, codes, ndeps, ids))
        first = self._n
        self._n += k
        return np.arange(first, first + k, dtype=np.int64)

    def add_rows(
        self, rows: npt.NDArray[np.int64], ndeps: npt.NDArray[np.int64], dep_ids: npt.NDArray[np.int64]
    ) -> int:
        """Append ``k`` ops given as a ``k x 8`` int64 array (fields ``src_rank, src_buf, src_off, dst_rank,
        dst_buf, dst_off, cnt, stage``) whose dependency lists (``ndeps[t]`` consecutive entries of
        ``dep_ids`` for op ``t``) are already sorted and de-duplicated; returns the first op's id.

        For compiled planner cores, which emit ops in exactly this form: unlike :meth:`add_many` it neither
        broadcasts nor re-normalises the dependencies (only their total is checked), so its cost is one
        transpose. Link classes come from the machine map."""
        mat = np.asarray(rows, dtype=np.int64).reshape(-1, 8)
        k = mat.shape[0]
        nd = np.ascontiguousarray(ndeps, dtype=np.int64)
        ids = np.ascontiguousarray(dep_ids, dtype=np.int64)
        if nd.shape != (k,) or int(nd.sum()) != ids.shape[0]:
            raise InternalError(f"add_rows: {k} ops, {nd.shape[0]} dependency counts, {ids.shape[0]} ids")
        first = self._n
        if k == 0:
            return first
        self._flush()
        cols = np.ascontiguousarray(mat.T)
        self._blocks.append((cols, self._link_codes(cols[0], cols[3], None), nd, ids))
        self._n += k
        return first

    def _link_codes(
        self, s_r: npt.NDArray[np.int64], d_r: npt.NDArray[np.int64], link: str | None
    ) -> npt.NDArray[np.uint8]:
        """Link codes of ops from ``s_r`` to ``d_r`` (all ``link`` when given, else the machine map's class)."""
        if link is not None:
            return np.full(s_r.shape[0], self._code_of(link), np.uint8)
        if self.machine is None:
            return np.where(s_r == d_r, 0, 4).astype(np.uint8)
        if self._direct:
            return np.where(s_r == d_r, 0, 3).astype(np.uint8)
        node = self.machine.node_array
        return np.where(s_r == d_r, 0, np.where(node[s_r] == node[d_r], 1, 2)).astype(np.uint8)

    def _flush(self) -> None:
        """Move the ops added one by one into a numpy block (keeps op order across add/add_many)."""
        if not self._codes:
            return
        self._blocks.append(
            (
                np.ascontiguousarray(np.fromiter(self._flat, np.int64, len(self._flat)).reshape(-1, 8).T),
                np.fromiter(self._codes, np.uint8, len(self._codes)),
                np.fromiter(self._ndeps, np.int64, len(self._ndeps)),
                np.fromiter(self._dep_ids, np.int64, len(self._dep_ids)),
            )
        )
        self._flat, self._codes, self._ndeps, self._dep_ids = [], [], [], []

    def table(self) -> OpTable:
        """The ops added so far, as columns."""
        self._flush()
        if not self._blocks:
            return replace(OpTable.empty(), links=tuple(self._vocab))
        if len(self._blocks) > 1:
            merged = tuple(np.concatenate([blk[k] for blk in self._blocks], axis=-1) for k in range(4))
            self._blocks = [merged]  # type: ignore[list-item]
        rows, codes, ndeps, ids = self._blocks[0]
        return OpTable.from_matrix(rows, codes, ndeps, ids, tuple(self._vocab))

    @property
    def ops(self) -> tuple[Op, ...]:
        """The ops added so far as :class:`Op` views (builds them: for inspection, not hot loops)."""
        return self.table().to_ops()

    def build(self) -> Program:
        return Program(
            name=self.name,
            algorithm=self.algorithm,
            nranks=self.nranks,
            unit_bytes=self.unit_bytes,
            counts=self.counts,
            scratch=tuple(self.scratch),
            table=self.table(),
            traffic=self.traffic,
            meta=dict(self.meta),
            machine=self.machine,
            topology=self.fingerprint,
        )
