"""Compile one rank's part of a Program into a short program of stages (what the ``p2p`` executor runs).

FLASH's own implementation (Lei et al., "FAST: An Efficient Scheduler for All-to-All GPU Communication",
NSDI'26, section 5) bundles the data of one destination into one transfer, moves data within a GPU with
``memcpy`` and runs intra- and inter-server transfers on two communicators and two streams. This module turns a
verified Program into that shape, once per plan and rank; nothing here runs per call.

**Steps (the same on every rank).** Every op gets a step from its dependencies: a transfer comes one step after
every transfer it depends on and no earlier than the local copies it depends on; a local copy runs *before* the
transfers of the step after the transfers it depends on, at a depth one more than the local copies of that step
it depends on. Every dependency edge therefore goes forward in the order (step, copies by depth, transfers),
so running each rank's part in that order respects every ordering the verifier proved (read-after-write,
write-after-read, write-after-write, also through other ranks). The step function depends on the Program only,
so all ranks agree on it without talking.

**Messages.** The transfers of one step between one pair of ranks become one message (ops in id order on both
sides, so the bytes line up). A message whose rows are one ascending run of the rank's buffers is sent or
received in place; otherwise its rows are gathered into (or scattered from) a staging block, one vectorised copy
per step for all of the step's staged sends and one per wait point for staged receives.

**Rows.** One rank's buffers live in one *arena* of ``rows x unit`` bytes: input, output, scratch, then the
staging blocks. Every copy is then rows of the arena to rows of the arena (``index_select`` / ``index_copy_``).

**Waits.** A message is waited for (and its staged rows scattered) only before the first later action that
touches its rows (a receive's destination rows, a send's source rows written later), and at the end. With one
lane this is a per-step barrier where the data requires one; with two lanes (``overlap``: intra-server messages
on a second process group, i.e. a second communicator with its own stream under NCCL) the next step's
intra-server transfers start while the previous inter-server ones are still in flight, FLASH's pipeline. Waits
only ever name messages of earlier steps and every rank posts each lane's messages in step order, so the posts
of step ``s`` never wait for a message of step ``>= s``: no deadlock.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from a2acc.ir.program import Buf, Program

I64 = npt.NDArray[np.int64]
INTER, INTRA = 0, 1  # lanes: the main group, and the second group of the overlap option
_EMPTY = np.zeros(0, np.int64)


@dataclass(frozen=True)
class GlobalSteps:
    """The rank-independent part: each op's step and, for local copies, depth (see module docstring)."""

    step: I64  # per op
    depth: I64  # per op (local copies; 0 for transfers)
    is_local: npt.NDArray[np.bool_]
    nsteps: int  # transfer steps (local copies may also run at step ``nsteps``, after the last transfers)
    direct: npt.NDArray[np.bool_]  # per op: carries the caller's rows itself (see :func:`direct_ops`)


def global_steps(prog: Program) -> GlobalSteps:
    """Steps of every op of ``prog`` (ops in id order; every dependency names a smaller id)."""
    t = prog.table
    n = len(t)
    src = t.src_rank.tolist()
    dst = t.dst_rank.tolist()
    ptr = t.dep_ptr.tolist()
    ids = t.dep_ids.tolist()
    step = [0] * n
    depth = [0] * n
    local = [a == b for a, b in zip(src, dst)]
    for i in range(n):
        s = 0
        for d in ids[ptr[i] : ptr[i + 1]]:
            s = max(s, step[d] if local[d] else step[d] + 1)
        if local[i]:
            dep = 0
            for d in ids[ptr[i] : ptr[i + 1]]:
                if local[d] and step[d] == s:
                    dep = max(dep, depth[d] + 1)
            depth[i] = dep
        step[i] = s
    loc = np.array(local, dtype=bool)
    st = np.array(step, dtype=np.int64)
    transfers = st[~loc]
    nsteps = int(transfers.max()) + 1 if transfers.size else 0
    return GlobalSteps(st, np.array(depth, dtype=np.int64), loc, nsteps, direct_ops(prog, st, loc))


def direct_ops(prog: Program, step: I64, local: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Ops that move one whole region of the layout straight to its place: from sender ``s``'s input region for
    ``d`` to ``d``'s output region from ``s``, all of its chunks, alone in its message (the only transfer of its
    step between the pair) and the only op that touches that output region. Such an op can carry the caller's
    rows themselves, straight from the caller's input tensor into the peer's output tensor: no packing, no
    unpacking, no padding on the wire, and the rows beyond the layout in the same message. Both ends know the
    rows (the call's exchange), and this function depends on the Program only, so they agree."""
    t = prog.table
    lay = prog.layout
    s_, d_ = t.src_rank, t.dst_rank
    whole = (
        (t.src_buf == int(Buf.INPUT))
        & (t.dst_buf == int(Buf.OUTPUT))
        & (t.src_off == lay.in_off[s_, d_])
        & (t.dst_off == lay.out_off[d_, s_])
        & (t.cnt == lay.counts[s_, d_])
        & (t.cnt > 0)
    )
    if not whole.any():
        return whole
    n = prog.nranks
    # ops per (step, src, dst) among transfers: a direct op must be alone in its message
    key = (step * n + s_) * n + d_
    alone = np.ones(len(t), dtype=bool)
    tr = np.flatnonzero(~local)
    _, inv, cnt = np.unique(key[tr], return_inverse=True, return_counts=True)
    alone[tr] = cnt[inv] == 1
    # ops touching each (rank, output region of a source): a direct op must be the only one
    touches = np.zeros((n, n), dtype=np.int64)
    for rank_col, buf_col, off_col in ((d_, t.dst_buf, t.dst_off), (s_, t.src_buf, t.src_off)):
        on = np.flatnonzero(buf_col == int(Buf.OUTPUT))
        for i in on.tolist():
            r = int(rank_col[i])
            lo, hi = int(off_col[i]), int(off_col[i]) + int(t.cnt[i])
            starts, sizes = lay.out_off[r], lay.counts[:, r]
            hit = np.flatnonzero((starts < hi) & (starts + sizes > lo) & (sizes > 0))
            touches[r, hit] += 1
    only = touches[d_, s_] == 1
    return np.asarray(whole & alone & only, dtype=bool)


@dataclass(frozen=True)
class Message:
    """One send or receive of a step: ``rows`` of the arena (``lo:hi``, in place or a staging block)."""

    peer: int  # program rank
    lane: int
    send: bool
    step: int
    lo: int
    hi: int
    scatter: tuple[I64, I64] | None = None  # staged receive: (staging rows, destination rows)
    direct: bool = False  # carries the caller's rows (lo:hi is then the region it stands for; see direct_ops)

    @property
    def rows(self) -> int:
        return self.hi - self.lo


@dataclass(frozen=True)
class Copy:
    """One vectorised copy: arena rows ``src`` to ``dst`` (equal lengths; disjoint within one copy)."""

    src: I64
    dst: I64


@dataclass(frozen=True)
class Step:
    waits: tuple[int, ...]  # message indices to complete (and scatter) before this step's actions
    scatter: Copy | None  # the staged receives among ``waits``, as one copy
    copies: tuple[Copy, ...]  # local copies, by depth
    pack: Copy | None  # staged sends of this step, gathered into their staging block
    posts: tuple[int, ...]  # message indices posted at the end of this step (sends and receives)


@dataclass(frozen=True)
class StageProgram:
    """Rank ``rank``'s part of a plan: the arena layout, the messages and the steps (the last one only waits
    and copies). ``in_rows``/``out_rows`` are the input and output regions of the arena."""

    rank: int
    nranks: int
    unit: int
    arena_rows: int
    main_rows: int  # rows of input, output and scratch; staging blocks follow
    in_rows: tuple[int, int]
    out_rows: tuple[int, int]
    messages: tuple[Message, ...]
    steps: tuple[Step, ...]
    lanes: int
    packed: tuple[int, ...] = ()  # peers whose input region must be packed into the arena (read by some op)
    unpacked: tuple[int, ...] = ()  # sources whose output region must be unpacked from the arena
    self_direct: bool = (
        False  # the self region is one direct local copy: the caller's rows are copied directly
    )

    @property
    def transfer_steps(self) -> int:
        return sum(1 for s in self.steps if s.posts)

    @property
    def sends(self) -> int:
        return sum(1 for m in self.messages if m.send)

    @property
    def recvs(self) -> int:
        return sum(1 for m in self.messages if not m.send)

    @property
    def bytes_sent(self) -> int:
        """Bytes of the messages over the arena (direct messages carry the caller's rows: counted per call)."""
        return sum(m.rows for m in self.messages if m.send and not m.direct) * self.unit

    @property
    def copied_rows(self) -> int:
        """Rows moved by local copies, packs and scatters per call (pack/unpack of the caller's data excluded)."""
        n = 0
        for s in self.steps:
            for c in (s.scatter, s.pack, *s.copies):
                if c is not None:
                    n += int(c.src.shape[0])
        return n


def _runs(off: I64, cnt: I64) -> I64:
    """Concatenated ``arange(off[i], off[i] + cnt[i])`` (vectorised)."""
    total = int(cnt.sum())
    if total == 0:
        return _EMPTY
    starts = np.repeat(off - np.concatenate([[0], np.cumsum(cnt)[:-1]]), cnt)
    return np.asarray(starts + np.arange(total, dtype=np.int64), dtype=np.int64)


def _contiguous(rows: I64) -> bool:
    return (
        rows.size > 0 and int(rows[-1]) - int(rows[0]) == rows.size - 1 and bool((np.diff(rows) == 1).all())
    )


def compile_rank(prog: Program, rank: int, steps: GlobalSteps, overlap: bool = False) -> StageProgram:
    """Rank ``rank``'s :class:`StageProgram` (see module docstring); ``overlap`` puts intra-server messages on
    lane :data:`INTRA` (a second process group)."""
    t = prog.table
    lay = prog.layout
    unit = prog.unit_bytes
    base = {
        int(Buf.INPUT): 0,
        int(Buf.OUTPUT): lay.input_chunks(rank),
        int(Buf.SCRATCH): lay.input_chunks(rank) + lay.output_chunks(rank),
    }
    top = base[int(Buf.SCRATCH)] + prog.scratch[rank]
    mine = np.flatnonzero((t.src_rank == rank) | (t.dst_rank == rank))
    node = prog.machine.node if prog.machine is not None else None

    def lane(peer: int) -> int:
        if not overlap or node is None:
            return INTER
        return INTRA if node[peer] == node[rank] else INTER

    src_row = np.zeros(len(t), np.int64)
    dst_row = np.zeros(len(t), np.int64)
    for b, off in base.items():
        m = mine[t.src_buf[mine] == b]
        src_row[m] = t.src_off[m] + off
        m = mine[t.dst_buf[mine] == b]
        dst_row[m] = t.dst_off[m] + off
    copies, groups, self_direct = _group_ops(prog, rank, mine, steps)
    nsteps = max(steps.nsteps, 1 + max((s for s, _d in copies), default=-1))
    main_rows = top
    messages, packs, top = _messages(groups, src_row, dst_row, t.cnt, steps.direct, lane, top)
    local_copies = {
        key: Copy(
            _runs(src_row[np.array(v)], t.cnt[np.array(v)]), _runs(dst_row[np.array(v)], t.cnt[np.array(v)])
        )
        for key, v in copies.items()
    }
    plan_steps = _schedule(messages, local_copies, packs, nsteps, top)
    packed, unpacked = _regions_used(prog, rank, mine, steps.direct)
    return StageProgram(
        rank=rank,
        nranks=prog.nranks,
        unit=unit,
        arena_rows=top,
        main_rows=main_rows,
        in_rows=(0, lay.input_chunks(rank)),
        out_rows=(base[int(Buf.OUTPUT)], base[int(Buf.OUTPUT)] + lay.output_chunks(rank)),
        messages=tuple(messages),
        steps=tuple(plan_steps),
        lanes=2 if overlap else 1,
        packed=packed,
        unpacked=unpacked,
        self_direct=self_direct,
    )


def _group_ops(
    prog: Program, rank: int, mine: I64, steps: GlobalSteps
) -> tuple[dict[tuple[int, int], list[int]], dict[tuple[int, bool, int], list[int]], bool]:
    """This rank's ops: local copies by (step, depth), transfers by (step, send?, peer), and whether its self
    region is one direct copy (the engine copies the caller's own rows then)."""
    t = prog.table
    copies: dict[tuple[int, int], list[int]] = defaultdict(list)
    groups: dict[tuple[int, bool, int], list[int]] = defaultdict(list)
    self_direct = False
    for i in mine.tolist():
        s = int(steps.step[i])
        if steps.is_local[i] and steps.direct[i]:
            self_direct = True
        elif steps.is_local[i]:
            copies[(s, int(steps.depth[i]))].append(i)
        elif int(t.src_rank[i]) == rank:
            groups[(s, True, int(t.dst_rank[i]))].append(i)
        else:
            groups[(s, False, int(t.src_rank[i]))].append(i)
    return copies, groups, self_direct


def _messages(
    groups: dict[tuple[int, bool, int], list[int]],
    src_row: I64,
    dst_row: I64,
    cnt: I64,
    direct: npt.NDArray[np.bool_],
    lane: Any,
    top: int,
) -> tuple[list[Message], dict[int, tuple[list[I64], list[I64]]], int]:
    """One message per (step, direction, peer): in place when its rows are one run (direct when it is one
    direct op), else over a new staging block from row ``top``; returns the messages, the staged sends' packs
    per step and the new top row."""
    messages: list[Message] = []
    packs: dict[int, tuple[list[I64], list[I64]]] = defaultdict(lambda: ([], []))
    for s, send, peer in sorted(groups):
        ops = np.array(groups[(s, send, peer)], dtype=np.int64)  # id order
        rows = _runs((src_row if send else dst_row)[ops], cnt[ops])
        if _contiguous(rows):
            is_direct = bool(direct[ops[0]]) and len(ops) == 1
            messages.append(
                Message(peer, lane(peer), send, s, int(rows[0]), int(rows[-1]) + 1, None, is_direct)
            )
            continue
        lo, hi = top, top + rows.size
        top = hi
        stage = np.arange(lo, hi, dtype=np.int64)
        if send:
            packs[s][0].append(rows)
            packs[s][1].append(stage)
            messages.append(Message(peer, lane(peer), True, s, lo, hi))
        else:
            messages.append(Message(peer, lane(peer), False, s, lo, hi, (stage, rows)))
    return messages, packs, top


def _regions_used(
    prog: Program, rank: int, mine: I64, direct: npt.NDArray[np.bool_]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Peers whose input region some op other than a direct one reads (they must be packed), and sources
    whose output region some op other than a direct one writes (they must be unpacked)."""
    t = prog.table
    lay = prog.layout
    packed: set[int] = set()
    unpacked: set[int] = set()
    for i in mine[~direct[mine]].tolist():
        cnt = int(t.cnt[i])
        if int(t.src_rank[i]) == rank and int(t.src_buf[i]) == int(Buf.INPUT):
            lo = int(t.src_off[i])
            starts, sizes = lay.in_off[rank], lay.counts[rank]
            packed.update(np.flatnonzero((starts < lo + cnt) & (starts + sizes > lo) & (sizes > 0)).tolist())
        if int(t.dst_rank[i]) == rank and int(t.dst_buf[i]) == int(Buf.OUTPUT):
            lo = int(t.dst_off[i])
            starts, sizes = lay.out_off[rank], lay.counts[:, rank]
            unpacked.update(
                np.flatnonzero((starts < lo + cnt) & (starts + sizes > lo) & (sizes > 0)).tolist()
            )
    return tuple(sorted(packed)), tuple(sorted(unpacked))


def _mask(n: int, *parts: I64) -> npt.NDArray[np.bool_]:
    m = np.zeros(n, dtype=bool)
    for p in parts:
        m[p] = True
    return m


def _schedule(
    messages: list[Message],
    copies: dict[tuple[int, int], Copy],
    packs: dict[int, tuple[list[I64], list[I64]]],
    nsteps: int,
    nrows: int,
) -> list[Step]:
    """Steps with their waits: a pending message is completed before the first step whose actions conflict
    with its rows (see module docstring), and everything left at the end."""
    by_step: dict[int, list[int]] = defaultdict(list)
    for k, m in enumerate(messages):
        by_step[m.step].append(k)
    # rows each message touches while in flight: a send reads (never writes) its rows; a receive writes its
    # rows and, when staged, the destination rows its scatter writes at the wait
    touch = []
    for m in messages:
        rows = np.arange(m.lo, m.hi, dtype=np.int64)
        touch.append(rows if m.scatter is None else np.concatenate([rows, m.scatter[1]]))
    pending: list[int] = []
    out: list[Step] = []
    for s in range(nsteps + 1):
        step_copies = tuple(copies[k] for k in sorted(copies) if k[0] == s)
        pk = packs.get(s)
        pack = Copy(np.concatenate(pk[0]), np.concatenate(pk[1])) if pk else None
        posts = tuple(by_step.get(s, ()))
        reads = [c.src for c in step_copies] + ([pack.src] if pack else [])
        writes = [c.dst for c in step_copies]
        for k in posts:
            (reads if messages[k].send else writes).append(touch[k])
        r_mask = _mask(nrows, *reads)
        w_mask = _mask(nrows, *writes)
        if s == nsteps:  # the end: complete everything
            waits = list(pending)
        else:
            waits = []
            for k in pending:
                rows = touch[k]
                hit = w_mask[rows].any() if messages[k].send else (w_mask[rows].any() or r_mask[rows].any())
                if hit:
                    waits.append(k)
        done = set(waits)
        pending = [k for k in pending if k not in done] + list(posts)
        staged = [sc for k in waits if (sc := messages[k].scatter) is not None]
        scatter = None
        if staged:
            scatter = Copy(np.concatenate([a for a, _b in staged]), np.concatenate([b for _a, b in staged]))
        out.append(Step(tuple(waits), scatter, step_copies, pack, posts))
    return out
