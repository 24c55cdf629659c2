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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, Union

import numpy as np
import numpy.typing as npt

from a2acc.errors import InternalError
from a2acc.ir.layout import ChunkLayout

if TYPE_CHECKING:
    from a2acc.model.topology import Topology

from a2acc.native import verify as _native

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
        direct = topology.direct is not None  # every GPU of a direct-connect graph is its own host
        return _machine_map(topology.nranks, 1 if direct else topology.gpus_per_server)

    @cached_property
    def node_array(self) -> npt.NDArray[np.int64]:
        """``node`` as an array (link classes of many ops at once)."""
        return np.asarray(self.node, dtype=np.int64)

    def same_node(self, a: int, b: int) -> bool:
        return self.node[a] == self.node[b]


@lru_cache(maxsize=64)
def _machine_map(n: int, m: int) -> MachineMap:
    """The machine map of ``n`` ranks, ``m`` per host (the same object for every Program of a topology: a search
    builds many)."""
    return MachineMap(tuple(r // m for r in range(n)), tuple(r % m for r in range(n)))


I64 = npt.NDArray[np.int64]
_COLUMNS = ("src_rank", "src_buf", "src_off", "dst_rank", "dst_buf", "dst_off", "cnt", "stage")
_LINK_CODE = {name: k for k, name in enumerate(LINK_CLASSES)}


def _i64(a: npt.ArrayLike) -> I64:
    return np.ascontiguousarray(np.asarray(a, dtype=np.int64))


@dataclass(frozen=True, eq=False)
class OpTable:
    """A Program's ops as columns: one int64 array per :class:`Op` field, dependencies in CSR form.

    Op ``i`` is row ``i``; its dependencies are ``dep_ids[dep_ptr[i]:dep_ptr[i + 1]]`` (kept exactly as given:
    the builder and the plan reader store them sorted and de-duplicated). ``link`` holds codes into ``links``
    (``LINK_CLASSES`` first, then any other label in order of first use). ``ids`` is ``None`` when the op ids
    are ``0..n-1`` (always, for built or read Programs); a hand-made op list with other ids keeps them there,
    so the verifier can still report it. Columns instead of one Python object per op make building,
    verifying (:mod:`a2acc.ir.verify`, compiled core) and writing (:mod:`a2acc.ir.serial`) a Program cost a
    few array passes; :meth:`to_ops` gives the :class:`Op` view that backends iterate."""

    src_rank: I64
    src_buf: I64
    src_off: I64
    dst_rank: I64
    dst_buf: I64
    dst_off: I64
    cnt: I64
    stage: I64
    link: npt.NDArray[np.uint8]
    dep_ptr: I64
    dep_ids: I64
    links: tuple[str, ...] = LINK_CLASSES
    ids: I64 | None = None

    def __len__(self) -> int:
        return int(self.cnt.shape[0])

    @staticmethod
    def empty() -> OpTable:
        z = np.zeros(0, np.int64)
        return OpTable(z, z, z, z, z, z, z, z, np.zeros(0, np.uint8), np.zeros(1, np.int64), z)

    @staticmethod
    def from_rows(
        rows: npt.ArrayLike,
        link: npt.ArrayLike,
        ndeps: npt.ArrayLike,
        dep_ids: npt.ArrayLike,
        links: tuple[str, ...] = LINK_CLASSES,
    ) -> OpTable:
        """From integers in row order (``n x 8``, fields in ``_COLUMNS`` order, flat or not), link codes,
        per-op dependency counts and the concatenated dependency ids."""
        mat = np.asarray(rows, dtype=np.int64).reshape(-1, len(_COLUMNS))
        return OpTable.from_matrix(np.ascontiguousarray(mat.T), link, ndeps, dep_ids, links)

    @staticmethod
    def from_matrix(
        cols: npt.NDArray[np.int64],
        link: npt.ArrayLike,
        ndeps: npt.ArrayLike,
        dep_ids: npt.ArrayLike,
        links: tuple[str, ...] = LINK_CLASSES,
    ) -> OpTable:
        """From an ``8 x n`` int64 array (one row per field, ``_COLUMNS`` order); the columns are its rows."""
        col = np.ascontiguousarray(cols, dtype=np.int64)
        ptr = np.zeros(col.shape[1] + 1, np.int64)
        np.cumsum(np.asarray(ndeps, dtype=np.int64), out=ptr[1:])
        return OpTable(
            src_rank=col[0],
            src_buf=col[1],
            src_off=col[2],
            dst_rank=col[3],
            dst_buf=col[4],
            dst_off=col[5],
            cnt=col[6],
            stage=col[7],
            link=np.ascontiguousarray(np.asarray(link, dtype=np.uint8)),
            dep_ptr=ptr,
            dep_ids=_i64(dep_ids),
            links=links,
        )

    @staticmethod
    def from_ops(ops: Iterable[Op]) -> OpTable:
        """Columns of an op list (passes, tests that inject defects, Programs assembled by hand)."""
        flat: list[int] = []
        ndeps: list[int] = []
        dep_ids: list[int] = []
        codes: list[int] = []
        vocab = dict(_LINK_CODE)
        ids: list[int] = []
        for op in ops:
            ids.append(op.id)
            flat += (
                op.src_rank,
                op.src_buf,
                op.src_off,
                op.dst_rank,
                op.dst_buf,
                op.dst_off,
                op.cnt,
                op.stage,
            )
            ndeps.append(len(op.deps))
            dep_ids += op.deps
            code = vocab.get(op.link)
            if code is None:
                code = vocab[op.link] = len(vocab)
            codes.append(code)
        links = tuple(vocab)
        if len(links) > 255:
            raise InternalError(f"{len(links)} different link labels; at most 255")
        t = OpTable.from_rows(flat, codes, ndeps, dep_ids, links)
        if ids != list(range(len(ids))):
            t = replace(t, ids=_i64(ids))
        return t

    def reorder(self, order: npt.NDArray[np.int64], ndeps: npt.ArrayLike, dep_ids: npt.ArrayLike) -> OpTable:
        """Row ``order[i]`` of this table as row ``i``, with new dependencies (per-op counts and the
        concatenated ids, in the new numbering): a pass that renumbers ops (:func:`a2acc.planners.syccl.emit.
        rounds`)."""
        cols = np.stack([getattr(self, c)[order] for c in _COLUMNS])
        return OpTable.from_matrix(cols, self.link[order], ndeps, dep_ids, self.links)

    def deps(self, i: int) -> tuple[int, ...]:
        return tuple(self.dep_ids[int(self.dep_ptr[i]) : int(self.dep_ptr[i + 1])].tolist())

    def native_args(self) -> tuple[Any, ...]:
        """The columns in the order the compiled helpers (``a2acc._verify``) take them (contiguous int64,
        link codes uint8; a no-op for tables built here)."""
        cols = [_i64(getattr(self, c)) for c in _COLUMNS]
        link = np.ascontiguousarray(self.link, dtype=np.uint8)
        return (len(self), *cols, link, _i64(self.dep_ptr), _i64(self.dep_ids))

    def to_ops(self) -> tuple[Op, ...]:
        """The :class:`Op` view (one NamedTuple per op; what backends and executors iterate)."""
        if _native is not None and self.ids is None and len(OP_FIELDS) == 11:  # the helper fills 11 fields
            ops: tuple[Op, ...] = _native.op_tuples(Op, *self.native_args(), self.links)
            return ops
        return self.to_ops_py()

    def to_ops_py(self) -> tuple[Op, ...]:
        """:meth:`to_ops` in pure Python (the reference of the compiled helper)."""
        n = len(self)
        cols = [getattr(self, c).tolist() for c in _COLUMNS]
        ids = self.dep_ids.tolist()
        ptr = self.dep_ptr.tolist()
        deps = [tuple(ids[ptr[i] : ptr[i + 1]]) for i in range(n)]
        names = self.links
        link = [names[c] for c in self.link.tolist()]
        oid = range(n) if self.ids is None else self.ids.tolist()
        return tuple(map(Op._make, zip(oid, *cols[:7], deps, cols[7], link)))


def normalise_deps(
    ndeps_in: npt.ArrayLike, ids_in: npt.ArrayLike, k: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Per-op dependency lists (``ndeps`` per op, concatenated ``ids``) sorted and de-duplicated, vectorised
    (what :meth:`~a2acc.ir.builder.ProgramBuilder.add` does one op at a time)."""
    ndeps = np.broadcast_to(np.asarray(ndeps_in, dtype=np.int64), (k,))
    ids = np.asarray(ids_in, dtype=np.int64).reshape(-1)
    if (ndeps < 0).any() or int(ndeps.sum()) != ids.shape[0]:
        raise InternalError(f"{int(ndeps.sum())} dependencies announced, {ids.shape[0]} given")
    if ids.shape[0] == 0:
        return np.ascontiguousarray(ndeps), ids
    # already sorted and unique per op (the usual case: planners emit them so) when ids rise everywhere except
    # where one op's list ends and the next begins; tested without materialising per-entry op numbers
    rising = ids[1:] > ids[:-1]
    ends = np.cumsum(ndeps)
    rising[ends[(ends > 0) & (ends < ids.shape[0])] - 1] = True
    if bool(rising.all()):
        return np.ascontiguousarray(ndeps), np.ascontiguousarray(ids)
    seg = np.repeat(np.arange(k, dtype=np.int64), ndeps)
    order = np.lexsort((ids, seg))
    seg, ids = seg[order], ids[order]
    keep = np.ones(ids.shape[0], bool)
    keep[1:] = (seg[1:] != seg[:-1]) | (ids[1:] != ids[:-1])
    seg, ids = seg[keep], ids[keep]
    return np.bincount(seg, minlength=k).astype(np.int64), np.ascontiguousarray(ids)


@dataclass(frozen=True, eq=False, init=False)
class Program:
    """A complete, serialisable schedule. Build it with :class:`~a2acc.ir.builder.ProgramBuilder`.

    The ops live in ``table`` (:class:`OpTable`, columns); ``ops`` is the tuple of :class:`Op` views, built on
    first use and cached. The constructor takes either (``ops=`` an op sequence or an ``OpTable``, or
    ``table=``), so ``Program(..., ops)`` and ``dataclasses.replace(p, ops=...)`` keep working."""

    name: str
    algorithm: str
    nranks: int
    unit_bytes: int
    counts: npt.NDArray[np.int64]
    scratch: tuple[int, ...]
    table: OpTable
    traffic: npt.NDArray[np.int64] | None = None
    meta: Mapping[str, MetaValue] = field(default_factory=dict)
    machine: MachineMap | None = None
    topology: str = ""  # fingerprint of the topology the plan was built for ("" when unknown)

    def __init__(
        self,
        name: str,
        algorithm: str,
        nranks: int,
        unit_bytes: int,
        counts: npt.NDArray[np.int64],
        scratch: tuple[int, ...],
        ops: Sequence[Op] | OpTable | None = None,
        traffic: npt.NDArray[np.int64] | None = None,
        meta: Mapping[str, MetaValue] | None = None,
        machine: MachineMap | None = None,
        topology: str = "",
        *,
        table: OpTable | None = None,
    ) -> None:
        put = object.__setattr__
        if isinstance(ops, OpTable):
            table = ops
        elif ops is not None:
            given = tuple(ops)
            table = OpTable.from_ops(given)
            self.__dict__["ops"] = given  # the caller's own Op objects are the view
        elif table is None:
            table = OpTable.empty()
        put(self, "name", name)
        put(self, "algorithm", algorithm)
        put(self, "nranks", nranks)
        put(self, "unit_bytes", unit_bytes)
        put(self, "counts", counts)
        put(self, "scratch", scratch)
        put(self, "table", table)
        put(self, "traffic", traffic)
        put(self, "meta", {} if meta is None else meta)
        put(self, "machine", machine)
        put(self, "topology", topology)

    @cached_property
    def ops(self) -> tuple[Op, ...]:
        """The ops as :class:`Op` tuples, in id order (built from ``table`` once)."""
        return self.table.to_ops()

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


def replace_ops(p: Program, ops: Sequence[Op] | OpTable) -> Program:
    """A copy of ``p`` with another op list (passes and tests that inject defects)."""
    return replace(p, ops=ops)  # type: ignore[call-arg]  # Program.__init__ takes ops=


def max_peers(src: npt.NDArray[np.int64], dst: npt.NDArray[np.int64], n: int) -> int:
    """The most peers any rank exchanges data with (either direction), from op columns: what executors that
    give each peer its own resources (MSCCL's thread blocks) are limited by."""
    remote = src != dst
    if not remote.any():
        return 0
    a, b = np.minimum(src[remote], dst[remote]), np.maximum(src[remote], dst[remote])
    pairs = np.unique(a * n + b)
    deg = np.bincount(pairs // n, minlength=n) + np.bincount(pairs % n, minlength=n)
    return int(deg.max())


class PricedOps(Protocol):
    """The op columns that pricing a plan reads: an :class:`OpTable`, or a search's draft of one."""

    @property
    def src_rank(self) -> I64: ...
    @property
    def dst_rank(self) -> I64: ...
    @property
    def cnt(self) -> I64: ...
    @property
    def stage(self) -> I64: ...
    @property
    def dep_ptr(self) -> I64: ...
    @property
    def dep_ids(self) -> I64: ...
    @property
    def ids(self) -> I64 | None: ...
    def __len__(self) -> int: ...


class Priced(Protocol):
    """What pricing a plan reads - the ranking estimate, the link floor, the peer count: a :class:`Program`, or
    a search's draft of one (fast's candidates before it keeps one: ``a2acc.planners.fast.emit.Draft``)."""

    @property
    def nranks(self) -> int: ...
    @property
    def unit_bytes(self) -> int: ...
    @property
    def table(self) -> PricedOps: ...


def program_peers(prog: Priced) -> int:
    """:func:`max_peers` of a Program's ops (or a draft's)."""
    t = prog.table
    return max_peers(t.src_rank, t.dst_rank, prog.nranks)


def over_peer_limit(prog: Priced, limit: int | None) -> str | None:
    """Why a target with a peer limit (``max_peers``) cannot run ``prog``; None when it can (or has no limit)."""
    if limit is None:
        return None
    peers = program_peers(prog)
    return f"{peers} peers per rank; the target runs at most {limit}" if peers > limit else None
