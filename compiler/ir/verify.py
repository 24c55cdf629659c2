"""The shared verifier: symbolic execution of a Program.

Every planner's Program and every lowered file goes through this one checker (networkx's pattern: one validator
over every algorithm). It reports **every** problem, each naming the op ids involved:

- structural: ranks/buffers/offsets out of range, ``cnt`` < 1, writes into an input buffer, bad dependency ids;
- a dependency on a later op id (ops must be listed in a topological order, which every backend and executor
  relies on), and any dependency cycle it closes (printed as ``op a -> op b -> ... -> op a``: a deadlock);
- a read of scratch/output chunks that nothing has written yet ("uninitialised");
- races over the happens-before order of the DAG: a read not ordered after the write it reads (read races
  write), two writes to a chunk that are not ordered, a write not ordered after an earlier read of the old
  value (write races read);
- the postcondition: every output chunk holds exactly the right input chunk (all-to-all-v layout of the
  Program), and no output chunk is left unwritten.

Method: each input chunk gets a symbolic value (its global id); ops run in id order (a topological order, by
the invariant above); per chunk we track the last writer and the readers since that write. Every RAW/WAW/WAR pair found is
checked for reachability in the DAG, so a race is reported even when this particular order happens to give the
right answer. Reachability is a backward search pruned by op id, memoised per pair
(:class:`a2acc.ir.dag.HappensBefore`).

Two implementations give identical reports: the compiled core ``a2acc._verify`` (``compiler/native/verify.c``,
run on the Program's op columns, memory linear in ops and chunks; its docstring says why its happens-before
answers are exact) is used when it was built, and this module's pure-Python code is the reference and the
fallback. Structural and order problems are always worded here: the core declines such Programs and the
reference reports them. ``engine="python"`` or the environment variable ``A2ACC_VERIFY=python`` forces the
reference (tests compare the two).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from a2acc.errors import InternalError, VerificationError
from a2acc.ir.dag import HappensBefore, order_errors
from a2acc.ir.program import Buf, Op, Program
from a2acc.native import verify as _native
from a2acc.segments import segment_positions

_BUF_NAME = ("input", "output", "scratch")
ENGINE_ENV = "A2ACC_VERIFY"  # "python" forces the reference verifier
Engine = Literal["auto", "python", "native"]


def native_available() -> bool:
    """Whether the compiled verifier core was built."""
    return _native is not None


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of :func:`verify_program`: ``ok`` iff ``errors`` is empty."""

    ok: bool
    errors: tuple[str, ...]
    ops: int
    chunks_moved: int
    depth: int
    stats: dict[str, int] = field(default_factory=dict)


def _fmt_range(rank: int, buf: int, a: int, b: int) -> str:
    rng = f"chunk {a}" if b - a == 1 else f"chunks [{a},{b})"
    return f"rank {rank} {_BUF_NAME[buf]} {rng}"


def _msg_uninit(oid: int, rank: int, buf: int, a: int, b: int) -> str:
    return f"op {oid}: reads uninitialised {_fmt_range(rank, buf, a, b)} (nothing writes it before this op)"


def _msg_raw(oid: int, w: int, rank: int, buf: int, a: int, b: int) -> str:
    return (
        f"race: op {oid} reads {_fmt_range(rank, buf, a, b)} written by op {w}, "
        f"but op {w} is not ordered before op {oid} (missing dependency)"
    )


def _msg_waw(w: int, oid: int, rank: int, buf: int, a: int, b: int) -> str:
    return f"race: ops {w} and {oid} both write {_fmt_range(rank, buf, a, b)} and are not ordered"


def _msg_war(oid: int, rd: int, rank: int, buf: int, a: int, b: int) -> str:
    return (
        f"race: op {oid} overwrites {_fmt_range(rank, buf, a, b)} that op {rd} reads, "
        f"but op {rd} is not ordered before op {oid}"
    )


def _structural(p: Program, errors: list[str]) -> None:
    n = p.nranks
    nops = len(p.ops)
    if p.counts.shape != (n, n):
        errors.append(f"layout: counts has shape {p.counts.shape}, expected ({n}, {n})")
        return
    if len(p.scratch) != n:
        errors.append(f"layout: scratch sizes for {len(p.scratch)} ranks, expected {n}")
        return
    caps = [[p.input_chunks(r), p.output_chunks(r), p.scratch[r]] for r in range(n)]
    for k, op in enumerate(p.ops):
        if op.id != k:
            errors.append(f"op at position {k} has id {op.id}; ids must be 0..n-1 in order")
            continue
        bad = False
        for role, rank, buf, off in (
            ("source", op.src_rank, op.src_buf, op.src_off),
            ("destination", op.dst_rank, op.dst_buf, op.dst_off),
        ):
            if not 0 <= rank < n:
                errors.append(f"op {op.id}: {role} rank {rank} out of range 0..{n - 1}")
                bad = True
                continue
            if buf not in (0, 1, 2):
                errors.append(f"op {op.id}: {role} buffer {buf} is not input/output/scratch")
                bad = True
                continue
            cap = caps[rank][buf]
            if op.cnt < 1 or off < 0 or off + op.cnt > cap:
                errors.append(
                    f"op {op.id}: {role} {_fmt_range(rank, buf, off, off + op.cnt)} out of bounds "
                    f"({_BUF_NAME[buf]} of rank {rank} has {cap} chunks; cnt must be >= 1)"
                )
                bad = True
        if not bad and op.dst_buf == Buf.INPUT:
            errors.append(
                f"op {op.id}: writes the input buffer of rank {op.dst_rank}; programs are out-of-place"
            )
        for d in op.deps:
            if not 0 <= d < nops or d == op.id:
                errors.append(f"op {op.id}: dangling dependency {d} (must be another op id in 0..{nops - 1})")


def verify_program(p: Program, *, max_errors: int = 200, engine: Engine = "auto") -> VerifyReport:
    """Verify ``p`` and return a report listing every problem (see module docstring).

    ``engine``: ``auto`` (the compiled core when built, unless ``A2ACC_VERIFY=python``), ``python`` (the
    reference) or ``native`` (the compiled core; an error when it was not built)."""
    if engine == "native" or (
        engine == "auto" and _native is not None and os.environ.get(ENGINE_ENV, "") != "python"
    ):
        if _native is None:
            raise InternalError("the compiled verifier core (a2acc._verify) was not built")
        rep = _verify_native(p, max_errors)
        if rep is not None:
            return rep
    return _verify_python(p, max_errors)


def _verify_native(p: Program, max_errors: int) -> VerifyReport | None:
    """The compiled core on the op columns; None when the reference must word structural/order problems."""
    n = p.nranks
    t = p.table
    if p.counts.shape != (n, n) or len(p.scratch) != n or t.ids is not None or n < 1:
        return None
    counts = np.ascontiguousarray(p.counts, dtype=np.int64)
    out_sizes = counts.sum(axis=0)
    total_out = int(out_sizes.sum())
    spare = _take_out_buffers(total_out)
    try:
        return _verify_native_with(
            p, max_errors, counts, out_sizes, spare[0][:total_out], spare[1][:total_out]
        )
    finally:
        _give_out_buffers(spare)


#: output-state buffers (symbolic content, last writer per output chunk) of up to this many chunks are kept for
#: the next verification: fresh pages for them cost more than the compiled core's work on small plans
_SPARE_MAX_CHUNKS = 1 << 21
_spare: list[tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]] = []


def _take_out_buffers(total: int) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
    """Two int32 arrays of at least ``total`` entries: the kept pair when large enough (taken out of the free
    list, so a concurrent or nested verification allocates its own), else new ones."""
    try:
        pair = _spare.pop()
    except IndexError:
        pair = None
    if pair is None or pair[0].shape[0] < total:
        pair = (np.empty(max(total, 1), np.int32), np.empty(max(total, 1), np.int32))
    return pair


def _give_out_buffers(pair: tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]) -> None:
    """Keep ``pair`` for the next verification (one pair at most, small ones only)."""
    if pair[0].shape[0] <= _SPARE_MAX_CHUNKS and not _spare:
        _spare.append(pair)


def _verify_native_with(
    p: Program,
    max_errors: int,
    counts: npt.NDArray[np.int64],
    out_sizes: npt.NDArray[np.int64],
    out_content: npt.NDArray[np.int32],
    out_writer: npt.NDArray[np.int32],
) -> VerifyReport | None:
    """:func:`_verify_native` with its output-state buffers (``out_sizes.sum()`` entries each)."""
    n = p.nranks
    t = p.table
    nops, sr, sb, so, dr, db, do, cnt, _stage, _link, dep_ptr, dep_ids = t.native_args()
    res = _native.verify(
        n,
        nops,
        counts,
        np.asarray(p.scratch, dtype=np.int64),
        sr,
        sb,
        so,
        dr,
        db,
        do,
        cnt,
        dep_ptr,
        dep_ids,
        max_errors,
        out_content,
        out_writer,
    )
    if res is None:
        return None
    raw, moved, depth, races, post_bad = res
    errors: list[str] = []
    for kind, x, y, rank, buf, a, b in raw:
        if kind == 0:
            errors.append(_msg_uninit(x, rank, buf, a, b))
        else:
            errors.append((_msg_raw, _msg_waw, _msg_war)[kind - 1](x, y, rank, buf, a, b))
    if post_bad and len(errors) < max_errors:
        in_sizes = counts.sum(axis=1)
        in_base = np.concatenate([[0], np.cumsum(in_sizes)[:-1]]).astype(np.int64)
        cut = np.cumsum(out_sizes)[:-1]
        _postcondition(p, np.split(out_content, cut), np.split(out_writer, cut), in_base, errors, max_errors)
    return VerifyReport(
        ok=not errors,
        errors=tuple(errors[:max_errors]),
        ops=len(t),
        chunks_moved=int(moved),
        depth=int(depth),
        stats={"races": int(races)},
    )


def _verify_python(p: Program, max_errors: int) -> VerifyReport:
    """The reference: per-op symbolic execution over :class:`~a2acc.ir.program.Op` views."""
    errors: list[str] = []
    _structural(p, errors)
    if errors:
        return VerifyReport(False, tuple(errors[:max_errors]), len(p.ops), 0, 0)
    errors += order_errors(p.ops, max_errors)
    if errors:
        return VerifyReport(False, tuple(errors[:max_errors]), len(p.ops), 0, 0)
    n = p.nranks
    hb = HappensBefore(p.ops)
    in_sizes = np.array([p.input_chunks(r) for r in range(n)], dtype=np.int64)
    in_base = np.concatenate([[0], np.cumsum(in_sizes)[:-1]])
    chunks = _Chunks(p, in_sizes, in_base)
    depth = [0] * len(p.ops)
    moved = 0
    races = 0
    for oid in range(len(p.ops)):
        if len(errors) >= max_errors:
            break
        op = p.ops[oid]
        depth[oid] = 1 + max((depth[d] for d in op.deps), default=0)
        moved += op.cnt
        races += chunks.run(oid, op, hb, errors)
    if len(errors) < max_errors:
        _postcondition(
            p,
            [chunks.content[d][Buf.OUTPUT] for d in range(n)],
            [chunks.writer[d][Buf.OUTPUT] for d in range(n)],
            in_base,
            errors,
            max_errors,
        )
    return VerifyReport(
        ok=not errors,
        errors=tuple(errors[:max_errors]),
        ops=len(p.ops),
        chunks_moved=moved,
        depth=max(depth, default=0),
        stats={"races": races},
    )


def _live_ids(arr: npt.NDArray[np.int64]) -> list[int]:
    """The distinct op ids (>= 0) in a slice of a writer or reader column, sorted; fast when all are one."""
    first = int(arr[0])
    if arr.shape[0] == 1 or bool((arr == first).all()):
        return [first] if first >= 0 else []
    return [int(x) for x in np.unique(arr) if x >= 0]


class _Chunks:
    """The reference verifier's state, per rank and buffer (input, output, scratch) and chunk: its symbolic
    content (the global id of the input chunk it holds, -1 before any write), its last writer, and its readers
    since that write (the latest in ``reader``, earlier ones in ``extra_readers`` by chunk index)."""

    def __init__(self, p: Program, in_sizes: npt.NDArray[np.int64], in_base: npt.NDArray[np.int64]) -> None:
        self.content: list[list[npt.NDArray[np.int64]]] = []
        self.writer: list[list[npt.NDArray[np.int64]]] = []
        self.reader: list[list[npt.NDArray[np.int64]]] = []
        self.extra_readers: list[list[dict[int, list[int]]]] = []
        for r in range(p.nranks):
            sizes = [int(in_sizes[r]), p.output_chunks(r), p.scratch[r]]
            self.content.append(
                [
                    np.arange(in_base[r], in_base[r] + sizes[0], dtype=np.int64),
                    np.full(sizes[1], -1, np.int64),
                    np.full(sizes[2], -1, np.int64),
                ]
            )
            self.writer.append([np.full(s, -1, np.int64) for s in sizes])
            self.reader.append([np.full(s, -1, np.int64) for s in sizes])
            self.extra_readers.append([{}, {}, {}])

    def run(self, oid: int, op: Op, hb: HappensBefore, errors: list[str]) -> int:
        """Execute op ``oid``: check its read and its write against the happens-before order (appending to
        ``errors``), then move the content. Returns the races found."""
        sr, sb, so = op.src_rank, op.src_buf, op.src_off
        c = op.cnt
        src_vals = self.content[sr][sb][so : so + c]
        races = 0
        if sb != Buf.INPUT:
            races += self._read(oid, sr, sb, so, c, src_vals, hb, errors)
        dr, db, do = op.dst_rank, op.dst_buf, op.dst_off
        dst_w = self.writer[dr][db][do : do + c]
        races += self._write(oid, dr, db, do, c, dst_w, hb, errors)
        self.content[dr][db][do : do + c] = src_vals
        dst_w[:] = oid
        self.reader[dr][db][do : do + c] = -1
        return races

    def _read(
        self,
        oid: int,
        sr: int,
        sb: int,
        so: int,
        c: int,
        src_vals: npt.NDArray[np.int64],
        hb: HappensBefore,
        errors: list[str],
    ) -> int:
        """A read of scratch or output: initialised, ordered after the write it reads (read-after-write);
        records ``oid`` as the chunks' reader (the one before it kept as an extra reader)."""
        races = 0
        if (src_vals < 0).any():
            bad = np.flatnonzero(src_vals < 0)
            errors.append(_msg_uninit(oid, sr, sb, so + int(bad[0]), so + int(bad[-1]) + 1))
        for w in _live_ids(self.writer[sr][sb][so : so + c]):
            if not hb.before(w, oid):
                errors.append(_msg_raw(oid, w, sr, sb, so, so + c))
                races += 1
        rd = self.reader[sr][sb][so : so + c]
        if (rd >= 0).any():
            ex = self.extra_readers[sr][sb]
            for k in np.flatnonzero(rd >= 0):
                ex.setdefault(so + int(k), []).append(int(rd[k]))
        rd[:] = oid
        return races

    def _write(
        self,
        oid: int,
        dr: int,
        db: int,
        do: int,
        c: int,
        dst_w: npt.NDArray[np.int64],
        hb: HappensBefore,
        errors: list[str],
    ) -> int:
        """A write: ordered after the previous writer(s) (write-after-write) and after every reader of the old
        value (write-after-read); the extra readers of the chunks are dropped."""
        races = 0
        for w in _live_ids(dst_w):
            if not hb.before(w, oid):
                errors.append(_msg_waw(w, oid, dr, db, do, do + c))
                races += 1
        prev_readers = set(_live_ids(self.reader[dr][db][do : do + c]))
        ex = self.extra_readers[dr][db]
        if ex:
            for ch in range(do, do + c):
                lst = ex.pop(ch, None)
                if lst:
                    prev_readers.update(lst)
        prev_readers.discard(oid)
        for rd_op in sorted(prev_readers):
            if not hb.before(rd_op, oid):
                errors.append(_msg_war(oid, rd_op, dr, db, do, do + c))
                races += 1
        return races


def _postcondition(
    p: Program,
    out_content: Sequence[npt.NDArray[np.signedinteger]],
    out_writer: Sequence[npt.NDArray[np.signedinteger]],
    in_base: npt.NDArray[np.int64],
    errors: list[str],
    max_errors: int,
) -> None:
    n = p.nranks
    in_base_list = [int(x) for x in in_base]
    for d in range(n):
        col = p.counts[:, d]
        tot = int(col.sum())
        if tot == 0:
            continue
        src_of = np.repeat(np.arange(n), col)
        within = segment_positions(col)
        in_off_d = np.array([p.input_offset(s, d) for s in range(n)], dtype=np.int64)
        expected = in_base[src_of] + in_off_d[src_of] + within
        got = out_content[d]
        bad = np.flatnonzero(got != expected)
        if bad.size == 0:
            continue
        # group consecutive mismatches into runs for readable messages
        runs = np.split(bad, np.flatnonzero(np.diff(bad) != 1) + 1)
        for run in runs:
            if len(errors) >= max_errors:
                return
            a, b = int(run[0]), int(run[-1]) + 1
            s = int(src_of[a])
            exp_chunk = int(expected[a] - in_base[s])
            g = int(got[a])
            if g < 0:
                errors.append(
                    f"postcondition: {_fmt_range(d, Buf.OUTPUT, a, b)} (data from rank {s}) is never written; "
                    f"expected input chunk {exp_chunk} of rank {s}"
                )
            else:
                # the last rank whose input starts at or before g owns it (ranks with no input share its base)
                gs = int(np.searchsorted(in_base, g, side="right") - 1)
                w = int(out_writer[d][a])
                errors.append(
                    f"postcondition: {_fmt_range(d, Buf.OUTPUT, a, b)} should hold input chunk {exp_chunk} of "
                    f"rank {s} but holds input chunk {g - in_base_list[gs]} of rank {gs} (written by op {w})"
                )


def check_program(p: Program, what: str = "") -> VerifyReport:
    """Verify and raise :class:`VerificationError` listing every problem if the Program is wrong."""
    rep = verify_program(p)
    if not rep.ok:
        raise VerificationError(what or f"plan '{p.name}' ({p.algorithm})", list(rep.errors))
    return rep
