"""The common IR: a :class:`Program` is the only thing planners hand to passes and backends.

A Program describes one all-to-all(-v) for a **chunk layout**: ``counts[s][d]`` chunks of ``unit_bytes`` each go
from rank ``s`` to rank ``d``. Every rank has three buffers, all measured in chunks of the plan-wide unit:

- ``input`` (``i``): ``sum(counts[r])`` chunks; peer ``d``'s region starts at ``input_offset(r, d)``,
  i.e. the standard contiguous all-to-all-v layout (``sdispls``), self included;
- ``output`` (``o``): ``sum(counts[:, r])`` chunks; source ``s``'s region starts at ``output_offset(r, s)``;
- ``scratch`` (``s``): ``scratch[r]`` chunks for relays and staging.

The operations form a DAG: an :class:`Op` moves ``cnt`` consecutive chunks from (rank, buffer, offset) to
(rank, buffer, offset) after every op in ``deps`` has completed; an op within one rank is a local copy. Ops
carry hints (``stage``, ``link`` class, preferred ``channel``) that backends and the simulator may use.

Programs are out-of-place: no op writes an input buffer. The JSON form (``to_json``/``from_json``) is stable and
versioned (``"version": 1``); see ``docs/ir.md``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from a2acc.errors import PlanFormatError
from a2acc.fileio import atomic_write_text

IR_FORMAT = "a2acc.program"
IR_VERSION = 1
LINK_CLASSES = ("local", "intra", "inter", "")


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
    """One transfer (or local copy when ``src_rank == dst_rank``) of ``cnt`` consecutive chunks."""

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
    channel: int = -1


OP_FIELDS = Op._fields


@dataclass(frozen=True, eq=False)
class Program:
    """A complete, serialisable schedule. Build it with :class:`ProgramBuilder`."""

    name: str
    algorithm: str
    nranks: int
    unit_bytes: int
    counts: npt.NDArray[np.int64]
    scratch: tuple[int, ...]
    ops: tuple[Op, ...]
    traffic: npt.NDArray[np.int64] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    # ---------------------------------------------------------------- layout
    @cached_property
    def _in_offsets(self) -> npt.NDArray[np.int64]:
        c = self.counts
        return np.concatenate([np.zeros((c.shape[0], 1), np.int64), np.cumsum(c, axis=1)[:, :-1]], axis=1)

    @cached_property
    def _out_offsets(self) -> npt.NDArray[np.int64]:
        c = self.counts
        # out[d][s] = sum of counts[:s, d]
        cs = np.concatenate([np.zeros((1, c.shape[1]), np.int64), np.cumsum(c, axis=0)[:-1, :]], axis=0)
        return np.ascontiguousarray(cs.T)

    def input_offset(self, rank: int, dst: int) -> int:
        return int(self._in_offsets[rank, dst])

    def output_offset(self, rank: int, src: int) -> int:
        return int(self._out_offsets[rank, src])

    def input_chunks(self, rank: int) -> int:
        return int(self.counts[rank].sum())

    def output_chunks(self, rank: int) -> int:
        return int(self.counts[:, rank].sum())

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

    # ---------------------------------------------------------------- JSON
    def to_json(self) -> str:
        """Stable JSON: fixed key order, one op per line, no floats in the op table."""
        head: dict[str, Any] = {
            "format": IR_FORMAT,
            "version": IR_VERSION,
            "name": self.name,
            "algorithm": self.algorithm,
            "nranks": self.nranks,
            "unit_bytes": self.unit_bytes,
            "counts": self.counts.tolist(),
            "traffic_bytes": None if self.traffic is None else self.traffic.tolist(),
            "scratch_chunks": list(self.scratch),
            "meta": _jsonable(self.meta),
            "op_fields": list(OP_FIELDS),
        }
        parts = [json.dumps(head, sort_keys=False, separators=(",", ":"))[:-1], ',"ops":[\n']
        lines = []
        for op in self.ops:
            row = [
                op.id,
                op.src_rank,
                Buf(op.src_buf).letter,
                op.src_off,
                op.dst_rank,
                Buf(op.dst_buf).letter,
                op.dst_off,
                op.cnt,
                list(op.deps),
                op.stage,
                op.link,
                op.channel,
            ]
            lines.append(json.dumps(row, separators=(",", ":")))
        parts.append(",\n".join(lines))
        parts.append("\n]}\n")
        return "".join(parts)

    def save(self, path: str | Path) -> None:
        atomic_write_text(path, self.to_json())


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    return x


# ---------------------------------------------------------------------- loading
def _int(v: Any, src: str, fld: str, lo: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or (lo is not None and v < lo):
        raise PlanFormatError(src, fld, v, f"must be an integer{'' if lo is None else f' >= {lo}'}")
    return v


def _matrix(v: Any, n: int, src: str, fld: str) -> npt.NDArray[np.int64]:
    if not isinstance(v, list) or len(v) != n or any(not isinstance(r, list) or len(r) != n for r in v):
        raise PlanFormatError(src, fld, "shape", f"must be an {n} x {n} list of lists")
    for i, row in enumerate(v):
        for j, x in enumerate(row):
            _int(x, src, f"{fld}[{i}][{j}]", 0)
    return np.asarray(v, dtype=np.int64).reshape(n, n)


def program_from_json(text: str, source: str = "<plan>") -> Program:
    """Parse and validate a plan JSON (see :meth:`Program.to_json`)."""
    src = source
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanFormatError(src, "", "JSON", f"not valid JSON (truncated or corrupt?): {exc}") from exc
    if not isinstance(doc, dict):
        raise PlanFormatError(src, "", type(doc).__name__, "a plan file is a JSON object")
    if doc.get("format") != IR_FORMAT:
        raise PlanFormatError(src, "format", doc.get("format"), f"expected '{IR_FORMAT}'")
    if doc.get("version") != IR_VERSION:
        raise PlanFormatError(
            src, "version", doc.get("version"), f"this a2acc reads plan version {IR_VERSION}"
        )
    n = _int(doc.get("nranks"), src, "nranks", 1)
    unit = _int(doc.get("unit_bytes"), src, "unit_bytes", 1)
    counts = _matrix(doc.get("counts"), n, src, "counts")
    traffic = (
        None if doc.get("traffic_bytes") is None else _matrix(doc["traffic_bytes"], n, src, "traffic_bytes")
    )
    scratch_raw = doc.get("scratch_chunks")
    if not isinstance(scratch_raw, list) or len(scratch_raw) != n:
        raise PlanFormatError(src, "scratch_chunks", scratch_raw, f"must be a list of {n} integers >= 0")
    scratch = tuple(_int(x, src, f"scratch_chunks[{i}]", 0) for i, x in enumerate(scratch_raw))
    fields = doc.get("op_fields")
    if fields != list(OP_FIELDS):
        raise PlanFormatError(src, "op_fields", fields, f"expected {list(OP_FIELDS)}")
    raw_ops = doc.get("ops")
    if not isinstance(raw_ops, list):
        raise PlanFormatError(src, "ops", type(raw_ops).__name__, "must be a list of op rows")
    ops: list[Op] = []
    for k, row in enumerate(raw_ops):
        fld = f"ops[{k}]"
        if not isinstance(row, list) or len(row) != len(OP_FIELDS):
            raise PlanFormatError(
                src, fld, row, f"each op row has {len(OP_FIELDS)} fields: {list(OP_FIELDS)}"
            )
        oid = _int(row[0], src, f"{fld}.id", 0)
        if oid != k:
            raise PlanFormatError(src, f"{fld}.id", oid, f"op ids must be 0..n-1 in order (expected {k})")
        bufs = []
        for pos in (2, 5):
            if row[pos] not in ("i", "o", "s"):
                raise PlanFormatError(src, f"{fld}.{OP_FIELDS[pos]}", row[pos], "must be 'i', 'o' or 's'")
            bufs.append(Buf.from_letter(row[pos]))
        deps = row[8]
        if not isinstance(deps, list):
            raise PlanFormatError(src, f"{fld}.deps", deps, "must be a list of op ids")
        for dep in deps:
            _int(dep, src, f"{fld}.deps", 0)
            if dep >= len(raw_ops) or dep == oid:
                raise PlanFormatError(
                    src,
                    f"op {oid} deps",
                    dep,
                    f"dangling dependency: must name another op id in 0..{len(raw_ops) - 1}",
                )
        if row[10] not in LINK_CLASSES:
            raise PlanFormatError(src, f"{fld}.link", row[10], f"allowed: {LINK_CLASSES}")
        ops.append(
            Op(
                oid,
                _int(row[1], src, f"{fld}.src_rank", 0),
                int(bufs[0]),
                _int(row[3], src, f"{fld}.src_off", 0),
                _int(row[4], src, f"{fld}.dst_rank", 0),
                int(bufs[1]),
                _int(row[6], src, f"{fld}.dst_off", 0),
                _int(row[7], src, f"{fld}.cnt", 1),
                tuple(int(d) for d in deps),
                _int(row[9], src, f"{fld}.stage"),
                str(row[10]),
                _int(row[11], src, f"{fld}.channel", -1),
            )
        )
    meta = doc.get("meta") or {}
    if not isinstance(meta, dict):
        raise PlanFormatError(src, "meta", meta, "must be a JSON object")
    return Program(
        name=str(doc.get("name", "")),
        algorithm=str(doc.get("algorithm", "")),
        nranks=n,
        unit_bytes=unit,
        counts=counts,
        scratch=scratch,
        ops=tuple(ops),
        traffic=traffic,
        meta=meta,
    )


def load_program(path: str | Path) -> Program:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanFormatError(
            str(p), "", str(p), f"cannot read the plan file ({exc.__class__.__name__})"
        ) from exc
    return program_from_json(text, str(p))


# ---------------------------------------------------------------------- building
class ProgramBuilder:
    """Mutable helper that planners use to emit a Program (ops get consecutive ids)."""

    def __init__(
        self,
        name: str,
        algorithm: str,
        counts: npt.NDArray[np.int64],
        unit_bytes: int,
        traffic: npt.NDArray[np.int64] | None = None,
    ) -> None:
        self.name = name
        self.algorithm = algorithm
        self.counts = np.ascontiguousarray(counts, dtype=np.int64)
        self.nranks = int(self.counts.shape[0])
        self.unit_bytes = int(unit_bytes)
        self.traffic = traffic
        self.scratch = [0] * self.nranks
        self.ops: list[Op] = []
        self.meta: dict[str, Any] = {}
        c = self.counts
        self.in_off = np.concatenate(
            [np.zeros((c.shape[0], 1), np.int64), np.cumsum(c, axis=1)[:, :-1]], axis=1
        )
        cs = np.concatenate([np.zeros((1, c.shape[1]), np.int64), np.cumsum(c, axis=0)[:-1, :]], axis=0)
        self.out_off = np.ascontiguousarray(cs.T)

    def alloc_scratch(self, rank: int, chunks: int) -> int:
        """Reserve ``chunks`` scratch chunks on ``rank``; returns the offset."""
        off = self.scratch[rank]
        self.scratch[rank] += int(chunks)
        return off

    def add(
        self,
        src: tuple[int, int, int],
        dst: tuple[int, int, int],
        cnt: int,
        deps: Iterable[int] = (),
        *,
        stage: int = 0,
        link: str = "",
        channel: int = -1,
    ) -> int:
        oid = len(self.ops)
        self.ops.append(
            Op(
                oid,
                int(src[0]),
                int(src[1]),
                int(src[2]),
                int(dst[0]),
                int(dst[1]),
                int(dst[2]),
                int(cnt),
                tuple(sorted(set(int(d) for d in deps))),
                int(stage),
                link,
                int(channel),
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
        )


def link_class(src_rank: int, dst_rank: int, gpus_per_server: int) -> str:
    if src_rank == dst_rank:
        return "local"
    return "intra" if src_rank // gpus_per_server == dst_rank // gpus_per_server else "inter"


def replace_ops(p: Program, ops: Sequence[Op]) -> Program:
    """A copy of ``p`` with another op list (used by tests that inject defects)."""
    return Program(
        p.name, p.algorithm, p.nranks, p.unit_bytes, p.counts, p.scratch, tuple(ops), p.traffic, p.meta
    )
