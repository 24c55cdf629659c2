"""Plan JSON: the stable, versioned file form of a :class:`~a2acc.ir.program.Program`.

Version 2 (written): a header object, then one op per line (``op_fields`` names the columns), no floats in the
op table, keys in a fixed order, so the same Program always serialises to the same bytes::

    {"format":"a2acc.program","version":2,"name":...,"algorithm":...,"nranks":N,"unit_bytes":U,
     "topology":"<fingerprint>","machine":{"node":[...],"local":[...]},"counts":[[...]],
     "traffic_bytes":[[...]]|null,"scratch_chunks":[...],"meta":{...},"op_fields":[...],"ops":[
    [0,src_rank,"i",src_off,dst_rank,"o",dst_off,cnt,[deps],stage,"link"],
    ...
    ]}

Version 1 (still read) had no ``topology``/``machine`` and a twelfth op column, ``channel``, that nothing set or
read; it is dropped on reading. See ``docs/ir.md``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from a2acc.errors import PlanFormatError
from a2acc.fileio import TooLarge, atomic_write_text, loads_json, read_text, size_words
from a2acc.ir.layout import MAX_LAYOUT_CHUNKS, MAX_LAYOUT_RANKS
from a2acc.ir.program import (
    LINK_CLASSES,
    OP_FIELDS,
    Buf,
    MachineMap,
    OpTable,
    Program,
    normalise_deps,
)
from a2acc.native import verify as _native

IR_FORMAT = "a2acc.program"
IR_VERSION = 2
READ_VERSIONS = (1, 2)
_V1_FIELDS = (*OP_FIELDS, "channel")


def program_to_json(p: Program) -> str:
    """Stable JSON: fixed key order, one op per line, no floats in the op table."""
    head: dict[str, Any] = {
        "format": IR_FORMAT,
        "version": IR_VERSION,
        "name": p.name,
        "algorithm": p.algorithm,
        "nranks": p.nranks,
        "unit_bytes": p.unit_bytes,
        "topology": p.topology,
        "machine": None
        if p.machine is None
        else {"node": list(p.machine.node), "local": list(p.machine.local)},
        "counts": p.counts.tolist(),
        "traffic_bytes": None if p.traffic is None else p.traffic.tolist(),
        "scratch_chunks": list(p.scratch),
        "meta": _jsonable(p.meta),
        "op_fields": list(OP_FIELDS),
    }
    parts = [json.dumps(head, sort_keys=False, separators=(",", ":"))[:-1], ',"ops":[\n']
    parts.append(",\n".join(_op_lines(p.table)))
    parts.append("\n]}\n")
    return "".join(parts)


def _op_lines(t: OpTable) -> list[str]:
    """One JSON row per op, from the columns; the same bytes as ``json.dumps(row, separators=(",", ":"))``
    (integers, one-letter buffer names, a list of integers and a label string written by ``json.dumps``).
    The compiled helper writes them when it was built (one string, split here only if asked for rows)."""
    if _native is None or t.ids is not None:
        return op_lines_py(t)
    block = _native.op_lines(*t.native_args(), tuple(json.dumps(x) for x in t.links))
    if block is None:
        return op_lines_py(t)
    return [block] if block else []


def op_lines_py(t: OpTable) -> list[str]:
    """:func:`_op_lines` in pure Python, one string per op (the reference of the compiled helper)."""
    n = len(t)
    if n == 0:
        return []
    letters = ['"i"', '"o"', '"s"']
    links = [json.dumps(x) for x in t.links]
    sb = [letters[b] for b in t.src_buf.tolist()]
    db = [letters[b] for b in t.dst_buf.tolist()]
    lk = [links[c] for c in t.link.tolist()]
    ptr = t.dep_ptr.tolist()
    ids = list(map(str, t.dep_ids.tolist()))
    deps = [",".join(ids[ptr[i] : ptr[i + 1]]) if ptr[i + 1] > ptr[i] else "" for i in range(n)]
    oid = range(n) if t.ids is None else t.ids.tolist()
    return [
        f"[{i},{a},{b},{c},{d},{e},{f},{g},[{h}],{j},{k}]"
        for i, a, b, c, d, e, f, g, h, j, k in zip(
            oid,
            t.src_rank.tolist(),
            sb,
            t.src_off.tolist(),
            t.dst_rank.tolist(),
            db,
            t.dst_off.tolist(),
            t.cnt.tolist(),
            deps,
            t.stage.tolist(),
            lk,
        )
    ]


def save_program(p: Program, path: str | Path) -> None:
    atomic_write_text(path, program_to_json(p))


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


# ---------------------------------------------------------------------- reading
MAX_BYTES = 2**50  # bytes per entry or unit, as traffic matrices


def _int(v: Any, src: str, fld: str, lo: int | None = None, hi: int = MAX_LAYOUT_CHUNKS) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or (lo is not None and v < lo) or abs(v) > hi:
        raise PlanFormatError(
            src, fld, v, f"must be an integer{'' if lo is None else f' >= {lo}'} and at most {hi}"
        )
    return v


def _matrix(v: Any, n: int, src: str, fld: str, hi: int = MAX_LAYOUT_CHUNKS) -> npt.NDArray[np.int64]:
    if not isinstance(v, list) or len(v) != n or any(not isinstance(r, list) or len(r) != n for r in v):
        rows = len(v) if isinstance(v, list) else type(v).__name__
        raise PlanFormatError(src, fld, f"{rows} rows", f"an {n} x {n} list of lists (nranks is {n})")
    for i, row in enumerate(v):
        for j, x in enumerate(row):
            _int(x, src, f"{fld}[{i}][{j}]", 0, hi)
    return np.asarray(v, dtype=np.int64).reshape(n, n)


def _machine(v: Any, n: int, src: str) -> MachineMap | None:
    if v is None:
        return None
    if not isinstance(v, dict) or set(v) != {"node", "local"}:
        raise PlanFormatError(src, "machine", v, 'must be {"node": [...], "local": [...]} or null')
    cols = []
    for key in ("node", "local"):
        col = v[key]
        if not isinstance(col, list) or len(col) != n:
            raise PlanFormatError(src, f"machine.{key}", col, f"must be a list of {n} integers >= 0")
        cols.append(tuple(_int(x, src, f"machine.{key}[{i}]", 0, n - 1) for i, x in enumerate(col)))
    return MachineMap(cols[0], cols[1])


def program_from_json(text: str, source: str = "<plan>") -> Program:
    """Parse and validate a plan JSON (version 1 or 2); raises :class:`PlanFormatError` naming the field."""
    src = source
    doc, version = _plan_doc(text, src)
    n, unit, counts, traffic, scratch = _plan_layout(doc, src)
    want_fields = list(OP_FIELDS) if version == 2 else list(_V1_FIELDS)
    fields = doc.get("op_fields")
    if fields != want_fields:
        raise PlanFormatError(src, "op_fields", fields, f"expected {want_fields}")
    machine = _machine(doc.get("machine"), n, src) if version == 2 else None
    if (
        version == 2 and "topology" not in doc
    ):  # every version-2 plan records it ("" when planned without one)
        raise PlanFormatError(src, "topology", None, "a version-2 plan records its topology's fingerprint")
    topo = doc.get("topology", "") if version == 2 else ""
    if not isinstance(topo, str):
        raise PlanFormatError(src, "topology", topo, "must be a topology fingerprint string")
    if topo:
        from a2acc.model.topology import split_fingerprint  # (networkx: only when a plan records one)

        try:
            split_fingerprint(topo)
        except ValueError:
            raise PlanFormatError(
                src,
                "topology",
                topo,
                "a topology fingerprint: 16 hex digits, after 'v<N>-' since definition 2",
            ) from None
    raw_ops = doc.get("ops")
    if not isinstance(raw_ops, list):
        raise PlanFormatError(src, "ops", type(raw_ops).__name__, "must be a list of op rows")
    table = _ops_fast(raw_ops, len(want_fields))
    if table is None:  # a problem somewhere: the row-by-row reading below names it
        table = _ops_by_row(raw_ops, want_fields, version, src)
    stages = np.asarray(table.stage)
    if stages.size and int(stages.min()) < 0:
        i = int(np.argmax(stages < 0))
        raise PlanFormatError(src, f"ops[{i}].stage", int(stages[i]), "a stage number >= 0")
    meta = doc.get("meta") or {}
    if not isinstance(meta, dict):
        raise PlanFormatError(src, "meta", meta, "must be a JSON object")
    for key in ("name", "algorithm"):
        if not isinstance(doc.get(key, ""), str):
            raise PlanFormatError(src, key, doc.get(key), "must be a string")
    return Program(
        name=str(doc.get("name", "")),
        algorithm=str(doc.get("algorithm", "")),
        nranks=n,
        unit_bytes=unit,
        counts=counts,
        scratch=scratch,
        table=table,
        traffic=traffic,
        meta=meta,
        machine=machine,
        topology=topo,
    )


def _plan_doc(text: str, src: str) -> tuple[dict[str, Any], int]:
    """The JSON object of an a2acc plan and its version (one this a2acc reads)."""
    try:
        doc = loads_json(text, unique_keys=True)  # "nranks" twice in a hand-edited plan: the last would win
    except json.JSONDecodeError as exc:
        raise PlanFormatError(src, "", "JSON", f"not valid JSON (truncated or corrupt?): {exc}") from exc
    if not isinstance(doc, dict):
        raise PlanFormatError(src, "", type(doc).__name__, "a plan file is a JSON object")
    if doc.get("format") != IR_FORMAT:
        raise PlanFormatError(src, "format", doc.get("format"), f"expected '{IR_FORMAT}'")
    version = doc.get("version")
    if isinstance(version, bool) or version not in READ_VERSIONS:  # (True == 1 in Python)
        raise PlanFormatError(
            src, "version", version, f"this a2acc reads plan versions {list(READ_VERSIONS)}"
        )
    return doc, version


def _plan_layout(
    doc: dict[str, Any], src: str
) -> tuple[int, int, npt.NDArray[np.int64], npt.NDArray[np.int64] | None, tuple[int, ...]]:
    """(ranks, unit bytes, chunk counts, traffic bytes or None, scratch chunks per rank), each within the
    layout limits (checked before the op rows are read)."""
    n = _int(doc.get("nranks"), src, "nranks", 1)
    if n > MAX_LAYOUT_RANKS:
        raise PlanFormatError(src, "nranks", n, f"at most {MAX_LAYOUT_RANKS}")
    unit = _int(doc.get("unit_bytes"), src, "unit_bytes", 1, MAX_BYTES)
    counts = _matrix(doc.get("counts"), n, src, "counts")
    if int(counts.sum()) > MAX_LAYOUT_CHUNKS:
        raise PlanFormatError(src, "counts", int(counts.sum()), f"at most {MAX_LAYOUT_CHUNKS} chunks in all")
    traffic = (
        None
        if doc.get("traffic_bytes") is None
        else _matrix(doc["traffic_bytes"], n, src, "traffic_bytes", MAX_BYTES)
    )
    if traffic is not None and (over := traffic > counts * unit).any():
        s, d = (int(x) for x in np.argwhere(over)[0])
        raise PlanFormatError(
            src,
            f"traffic_bytes[{s}][{d}]",
            int(traffic[s, d]),
            f"at most what the layout carries: counts[{s}][{d}] x unit_bytes = {int(counts[s, d]) * unit}",
        )
    scratch_raw = doc.get("scratch_chunks")
    if not isinstance(scratch_raw, list) or len(scratch_raw) != n:
        raise PlanFormatError(src, "scratch_chunks", scratch_raw, f"must be a list of {n} integers >= 0")
    scratch = tuple(_int(x, src, f"scratch_chunks[{i}]", 0) for i, x in enumerate(scratch_raw))
    if sum(scratch) > MAX_LAYOUT_CHUNKS:
        raise PlanFormatError(
            src, "scratch_chunks", sum(scratch), f"at most {MAX_LAYOUT_CHUNKS} chunks in all"
        )
    return n, unit, counts, traffic, scratch


_LETTER = {"i": 0, "o": 1, "s": 2}
_LINK_CODE = {name: k for k, name in enumerate(LINK_CLASSES)}


def _ops_fast(raw_ops: list[Any], width: int) -> OpTable | None:
    """The op table of well-formed rows, checked column by column; None when any row breaks a rule (the caller
    then reads row by row, which names the first problem exactly as before)."""
    nops = len(raw_ops)
    if not all(type(r) is list and len(r) == width for r in raw_ops):
        return None
    if nops == 0:
        return OpTable.empty()
    cols = list(zip(*raw_ops))
    # an unknown letter or label, an unhashable value or an integer beyond 64 bits: the row path reports it
    try:
        ints: dict[int, npt.NDArray[np.int64]] = {}
        for c in (0, 1, 3, 4, 6, 7, 9, *range(11, width)):
            if not all(type(x) is int for x in cols[c]):
                return None
            ints[c] = np.array(cols[c], dtype=np.int64)
        bufs = [np.array([_LETTER[x] for x in cols[c]], dtype=np.int64) for c in (2, 5)]
        codes = np.array([_LINK_CODE[x] for x in cols[10]], dtype=np.uint8)
    except (KeyError, TypeError, OverflowError):
        return None
    deps = cols[8]
    if not all(type(d) is list for d in deps):
        return None
    flat = [x for d in deps for x in d]
    if not all(type(x) is int for x in flat):
        return None
    try:
        dep_ids = np.array(flat, dtype=np.int64)
    except OverflowError:
        return None
    ndeps = np.fromiter(map(len, deps), np.int64, nops)
    own = np.repeat(np.arange(nops, dtype=np.int64), ndeps)
    hi = MAX_LAYOUT_CHUNKS
    lo = {0: 0, 1: 0, 3: 0, 4: 0, 6: 0, 7: 1, 9: -hi, **{c: -1 for c in range(11, width)}}
    if (
        (ints[0] != np.arange(nops)).any()
        or any(((ints[c] < lo[c]) | (np.abs(ints[c]) > hi)).any() for c in ints)
        or ((dep_ids < 0) | (dep_ids >= nops) | (dep_ids == own)).any()
    ):
        return None
    ndeps, dep_ids = normalise_deps(ndeps, dep_ids, nops)
    rows = np.stack([ints[1], bufs[0], ints[3], ints[4], bufs[1], ints[6], ints[7], ints[9]])
    return OpTable.from_matrix(rows, codes, ndeps, dep_ids)


def _ops_by_row(raw_ops: list[Any], want_fields: list[str], version: int, src: str) -> OpTable:
    """Row-by-row reading with a :class:`PlanFormatError` naming the first bad field."""
    nops = len(raw_ops)
    flat: list[int] = []
    ndeps: list[int] = []
    dep_ids: list[int] = []
    codes: list[int] = []
    link_code = {name: k for k, name in enumerate(LINK_CLASSES)}
    for k, row in enumerate(raw_ops):
        fld = f"ops[{k}]"
        if not isinstance(row, list) or len(row) != len(want_fields):
            raise PlanFormatError(src, fld, row, f"each op row has {len(want_fields)} fields: {want_fields}")
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
            if dep >= nops or dep == oid:
                raise PlanFormatError(
                    src,
                    f"op {oid} deps",
                    dep,
                    f"dangling dependency: must name another op id in 0..{nops - 1}",
                )
        if row[10] not in LINK_CLASSES:
            raise PlanFormatError(src, f"{fld}.link", row[10], f"allowed: {LINK_CLASSES}")
        if version == 1:
            _int(row[11], src, f"{fld}.channel", -1)
        flat += (
            _int(row[1], src, f"{fld}.src_rank", 0),
            int(bufs[0]),
            _int(row[3], src, f"{fld}.src_off", 0),
            _int(row[4], src, f"{fld}.dst_rank", 0),
            int(bufs[1]),
            _int(row[6], src, f"{fld}.dst_off", 0),
            _int(row[7], src, f"{fld}.cnt", 1),
            _int(row[9], src, f"{fld}.stage"),
        )
        uniq = sorted(set(deps))
        ndeps.append(len(uniq))
        dep_ids += uniq
        codes.append(link_code[row[10]])
    return OpTable.from_rows(flat, codes, ndeps, dep_ids)


#: the largest plan file read: ten million op rows, far past any plan a2acc writes (a 64-GPU syccl plan is
#: ~0.5 MB); reading one takes ~12x its size in memory, so the limit is checked while reading, not after
MAX_PLAN_FILE_BYTES = 1 << 30


def read_plan_text(path: str | Path, what: str = "a plan a2acc writes") -> str:
    """A file's text, refused past :data:`MAX_PLAN_FILE_BYTES` while it is read (``what``: what such a file is
    not). ``OSError`` and ``UnicodeDecodeError`` are the caller's to report."""
    try:
        return read_text(path, MAX_PLAN_FILE_BYTES)
    except TooLarge:
        raise PlanFormatError(
            str(path), "", Path(path).name, f"larger than {size_words(MAX_PLAN_FILE_BYTES)}: not {what}"
        ) from None


def load_program(path: str | Path) -> Program:
    p = Path(path)
    try:
        text = read_plan_text(p)
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.reason if isinstance(exc, UnicodeDecodeError) else exc.strerror
        raise PlanFormatError(
            str(p), "", str(p), f"cannot read the plan file ({exc.__class__.__name__}: {why})"
        ) from exc
    return program_from_json(text, str(p))


def is_plan_json(head: str) -> bool:
    """Content detection for ``a2acc verify``: a JSON object whose format is a2acc's plan format (anywhere in its
    head: a hand-edited plan may reorder its keys)."""
    s = head.lstrip()
    return s.startswith("{") and f'"format":"{IR_FORMAT}"' in s.replace(" ", "")[:400]


_OWN_PLAN = re.compile(r'\A\s*\{\s*"format"\s*:\s*"' + re.escape(IR_FORMAT) + '"')


def is_own_plan_json(head: str) -> bool:
    """Whether a file's head is a plan as :func:`program_to_json` writes it: the format is the object's first key.
    What ``plan -o`` may replace without ``--force`` (a user's JSON that merely mentions the format somewhere,
    e.g. in a nested object, is not a2acc's)."""
    return _OWN_PLAN.match(head) is not None
