"""The one lowering: a verified Program -> an MSCCL++ execution plan (:class:`~.model.Plan`).

Both outputs come from this model: :mod:`.emit_json` writes it as the executor's JSON, :mod:`.emit_dsl` as a
program against the upstream ``mscclpp.language`` DSL that compiles to the same operations.

**Layout.** Every rank's input and output are ``C = buffer_chunks`` chunks of the Program's unit (the
uniform call of the shared manifest, :mod:`a2acc.ir.layout`), so the executor derives the unit from the message
size on every rank alike; Program scratch comes first in the scratch buffer, staging areas after it.

**Lanes and thread blocks.** A transfer s -> d runs on a *lane*: a channel pair between s and d (a memory
channel inside a server, a port channel across servers: the machine map decides), one thread block holding
each end. ``split`` gives each lane its own sender thread block on s and receiver thread block on d;
``combined`` lets lane k carry both directions between two ranks (one thread block per peer and lane on each
side: half as many thread blocks). Transfers of a connection are dealt round-robin over its lanes; local
copies go to copy thread blocks. The k-th channel to p on r pairs with the k-th to r on p, so both sides list
their lanes to each other in one canonical order (lanes a -> b first, a < b).

**Order.** Every event carries a key: the Program op's (level, id) and a phase, START before everything, END
after. Each thread block runs its events in key order, and every wait (channel wait, semaphore acquire, LL
unpack) matches a signal with a smaller key. Counting semaphores and channel counters pair the m-th wait with
the m-th signal, and waits are placed lazily (signal m's wait goes just before the first event that needs a
signal >= m), so the first unexecuted event in key order can always run: **no deadlock**, whatever the
schedule. Consecutive puts with nothing between them are fused (one operation, one signal).

**Synchronisation.** A dependency is honoured where it matters for memory: two Program ops that touch the
same bytes of a rank (one writing) are ordered as the Program orders them (``deps="data"``, the default), or
every dependency with a shared rank (``deps="all"``, the planner's stage order too). A consumer learns that a
producer finished through a *route*: the producer's own thread block (local copy; a memory put's source is
read once its threads pass a ``nop``), or the receiver's lane end after waiting for the data signal (the
port proxy performs the signal after the put: FIFO order), then semaphores between thread blocks of a rank and
at most one signal across ranks. Intra-thread-block ``nop`` (``__syncthreads``) is inserted where the kernel
needs it: before a signal, semaphore release or port put that follows a data operation, before a data
operation that follows a wait, and between data operations on overlapping ranges (the executor inserts
none). Across launches: every receiver signals *ready* at the start of a launch and the sender waits for it
before its first put into that receiver, so no peer overwrites scratch or output the previous launch (or the
caller) still reads; every port lane ends with an acknowledgement so a launch never ends while its proxy still
reads the sender's buffers; every counter and semaphore is balanced within a launch.

**Output writes.** ``scratch`` (default) stages every remote write into an output in the receiver's scratch
and copies it out after the data signal, as upstream's all-to-all examples do: remote references then name only
scratch, which the executor allocates, so any send/receive buffers work. ``direct`` puts straight into the
peer's output (no copy), which the executor supports only when every rank's buffers sit at the same offset in
their allocations (docs/dsl/concepts.md, "Executor limitations"). ``protocol=LL`` moves every transfer as LL
packets into the receiver's scratch (``put_packets`` then ``unpack_packets``, the flags replacing data signals);
it needs memory channels (one server).

Limits of the executor (``src/core/include/execution_common.hpp``): at most 64 operations per thread block
(lanes and copy thread blocks are added until every one fits), one channel per thread block here (the kernel
holds 16), at most 8 puts per fused put and 16 semaphores per operation, uint32 byte offsets, thread blocks per
rank at most ``max_threadblocks`` (all must be co-resident: they spin on each other). What cannot fit raises
:class:`~a2acc.errors.LoweringError` saying what would.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from a2acc.backends.mscclpp import pack
from a2acc.backends.mscclpp.assemble import Assembled, Shape, assemble, too_many_threadblocks
from a2acc.backends.mscclpp.model import MAX_OPS_PER_TB, MAX_U32, Plan
from a2acc.backends.mscclpp.schedule import Key, Prepared, Schedule, TbKey
from a2acc.backends.target import op_columns
from a2acc.errors import LoweringError
from a2acc.ir.dag import levels, table_levels
from a2acc.ir.program import Buf, OpTable, Program
from a2acc.native import mscclpp_lower as _native

MAX_LANES = 64
MAX_ITERATIONS = 200


@dataclass(frozen=True)
class LowerOptions:
    name: str = "a2acc"
    target: str = "nvidia"
    protocol: str = "Simple"
    tb_layout: str = "split"  # split | combined | packed
    output_writes: str = "scratch"  # scratch | direct
    deps: str = "data"  # data | all
    max_threadblocks: int = 108
    min_bytes: int = 0  # message sizes the plan accepts; both 0: exactly C x unit bytes
    max_bytes: int = 0
    num_threads: int = 1024


@dataclass(frozen=True)
class LowerStats:
    threadblocks: int  # max per rank
    ops_per_tb: int  # max
    lanes: int  # channel pairs in all
    semaphores: int
    signals: int
    iterations: int
    ordering_deps: int  # Program dependencies that order no shared bytes (left to the key order)
    unroutable_deps: int  # deps="all": dependencies without a shared rank
    notes: tuple[str, ...] = ()


# the passes of one attempt, in order (each a method of Schedule; see schedule.py)
ATTEMPT_PASSES: tuple[Callable[[Schedule], None], ...] = (
    Schedule.assign_lanes,
    Schedule.place_transfers,
    Schedule.place_handshakes,
    Schedule.route_needs,
    Schedule.place_data_signals,
    Schedule.place_waits,
)


def lower(prog: Program, opts: LowerOptions) -> tuple[Plan, LowerStats]:
    """Lower a verified Program (raises LoweringError when it cannot fit the executor).

    Passes: :func:`check_inputs`, :func:`stage` (staging offsets), :func:`find_needs` (what must be ordered),
    :func:`connections`; then attempts with growing lane counts, each running :data:`ATTEMPT_PASSES` and
    :func:`~.assemble.assemble`, until every thread block fits the executor's operation limit."""
    c, unit = prog.layout.buffer_chunks, prog.unit_bytes
    if opts.max_bytes == 0:
        opts = dataclasses.replace(opts, min_bytes=c * unit, max_bytes=c * unit)
    check_inputs(prog, opts)
    pre, scratch, ordering, notes = _prepare(prog, opts)
    shape = Shape(opts.name, opts.protocol, c, scratch, opts.max_threadblocks, opts.num_threads, opts.min_bytes,
                  opts.max_bytes)  # fmt: skip
    if opts.tb_layout == "packed":
        asm, sch, it = _packed_attempts(pre, shape)
    else:
        asm, sch, it = _attempts(pre, shape, opts.tb_layout == "combined")
    stats = LowerStats(
        threadblocks=max(len(g.threadblocks) for g in asm.plan.gpus),
        ops_per_tb=asm.max_ops,
        lanes=asm.lanes,
        semaphores=asm.semaphores,
        signals=asm.signals,
        iterations=it,
        ordering_deps=ordering,
        unroutable_deps=pre.unroutable + sch.unroutable,
        notes=notes,
    )
    return asm.plan, stats


def _prepare(prog: Program, opts: LowerOptions) -> tuple[Prepared, list[int], int, tuple[str, ...]]:
    """The passes before the attempts: staging, needs, connections. Returns what the attempts share, the
    scratch chunks of each rank, the ordering dependencies and the notes."""
    notes: tuple[str, ...] = ()
    if prog.machine is None:
        node = list(range(prog.nranks))
        notes = ("the Program has no machine map: every rank is treated as its own server (port channels)",)
    else:
        node = list(prog.machine.node)
    lvl = levels(prog.ops)
    key: list[Key] = [(1, lvl[op.id], op.id, 0) for op in prog.ops]
    ll = opts.protocol == "LL"
    staged, scratch = stage(prog, opts, node, ll)
    needs, ordering, unroutable = find_needs(prog, opts.deps == "all")
    conn_ops, local_ops = connections(prog, key)
    pre = Prepared(prog, node, key, ll, staged, needs, conn_ops, local_ops, opts.deps == "all",
                   opts.tb_layout == "packed", unroutable)  # fmt: skip
    return pre, scratch, ordering, notes


@dataclass(frozen=True)
class LoweredText:
    """What :func:`lower_text` returns: the plan's JSON text and the lowering's statistics."""

    text: str
    stats: LowerStats


_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}")
_LAYOUTS = ("split", "combined", "packed")


def lower_text(prog: Program, opts: LowerOptions) -> LoweredText | None:
    """``to_json(lower(prog, opts)[0])`` from the compiled lowering (``a2acc._mscclpp_lower``), without the
    per-operation objects: byte-identical text (tests/backends/test_mscclpp_native.py), the same refusals (the
    reference's LoweringError). None when the core is not built or cannot decide (a name the JSON would escape,
    sizes outside its range): the caller then runs :func:`lower`."""
    if _native is None or not _NAME.fullmatch(opts.name):
        return None
    c, unit = prog.layout.buffer_chunks, prog.unit_bytes
    if opts.max_bytes == 0:
        opts = dataclasses.replace(opts, min_bytes=c * unit, max_bytes=c * unit)
    check_inputs(prog, opts)
    cols = op_columns(prog)
    if cols is None or opts.max_bytes >= 1 << 63:
        return None
    table = getattr(prog, "table", None)
    lvl = table_levels(table) if isinstance(table, OpTable) else np.asarray(levels(prog.ops), dtype=np.int64)
    notes: tuple[str, ...] = ()
    if prog.machine is None:
        node = np.arange(prog.nranks, dtype=np.int64)
        notes = ("the Program has no machine map: every rank is treated as its own server (port channels)",)
    else:
        node = np.asarray(prog.machine.node, dtype=np.int64)
    got = _native.lower(
        prog.nranks, c, unit, np.ascontiguousarray(np.asarray(prog.scratch, dtype=np.int64)), node, *cols,
        np.ascontiguousarray(lvl, dtype=np.int64), opts.name, opts.protocol == "LL", _LAYOUTS.index(opts.tb_layout),
        opts.output_writes == "direct", opts.deps == "all", opts.max_threadblocks, opts.num_threads,
        opts.min_bytes, opts.max_bytes,
    )  # fmt: skip
    if got is None:
        return None
    if got[0] == "refused":
        raise LoweringError(str(got[1]))
    _ok, text, tbs, ops, lanes, sems, sigs, it, ordering, unroutable = got
    return LoweredText(text, LowerStats(tbs, ops, lanes, sems, sigs, it, ordering, unroutable, notes))


def check_inputs(prog: Program, o: LowerOptions) -> None:
    if prog.unit_bytes % 16:
        raise LoweringError(
            f"the chunk unit is {prog.unit_bytes} B; MSCCL++ needs chunks that are a multiple of its 16-byte "
            "buffer_alignment (plan with a unit that is a multiple of 16)"
        )
    if int(prog.counts.sum()) == 0:
        raise LoweringError("an empty all-to-all moves nothing: there is no plan to write")
    if o.protocol not in ("Simple", "LL") or o.tb_layout not in ("split", "combined", "packed"):
        raise LoweringError(f"protocol {o.protocol!r} / tb_layout {o.tb_layout!r} not supported")


def stage(prog: Program, o: LowerOptions, node: list[int], ll: bool) -> tuple[dict[int, int], list[int]]:
    """Which remote writes land in the receiver's scratch first, and where: after the Program's scratch.
    Returns the staging offsets (op id -> chunk) and every rank's scratch chunks."""
    staged: dict[int, int] = {}
    scr = list(prog.scratch)
    for op in prog.ops:
        if op.src_rank == op.dst_rank:
            continue
        if ll and node[op.src_rank] != node[op.dst_rank]:
            raise LoweringError(
                f"protocol=LL needs memory channels, but rank {op.src_rank} -> {op.dst_rank} crosses servers "
                "(LL over port channels is not lowered): use protocol=Simple"
            )
        if ll or (op.dst_buf == Buf.OUTPUT and o.output_writes == "scratch"):
            staged[op.id] = scr[op.dst_rank]
            scr[op.dst_rank] += op.cnt
    c = prog.layout.buffer_chunks
    # the largest chunk the plan accepts (max_message_size / C): byte offsets must fit uint32 with it
    top_chunk = max(prog.unit_bytes, o.max_bytes // c)
    mult = 2 if ll else 1
    top = max(c, *(s * mult for s in scr)) * top_chunk
    if top > MAX_U32:
        fit = MAX_U32 // max(c, *(s * mult for s in scr))
        raise LoweringError(
            f"byte offsets up to {top} exceed the executor's uint32 offsets: {max(c, *scr)} chunks of "
            f"{top_chunk} B; chunks of at most {fit} B would fit (a finer layout, or less scratch)"
        )
    return staged, scr


def find_needs(prog: Program, deps_all: bool) -> tuple[list[list[tuple[int, str]]], int, int]:
    """Per op X the (Y, aspect) it must wait for: Y < X touch the same bytes of a rank, one writing
    (aspect "write": Y's write must be done; "read": only Y's read of its source). With ``deps_all`` every
    dependency with a shared rank is added as "write". Also returns the dependencies that order no shared
    bytes and, of those, the ones without a shared rank."""
    writes: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
    reads: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
    for op in prog.ops:
        writes[(op.dst_rank, op.dst_buf)].append((op.dst_off, op.dst_off + op.cnt, op.id))
        reads[(op.src_rank, op.src_buf)].append((op.src_off, op.src_off + op.cnt, op.id))
    need: list[dict[int, str]] = [{} for _ in prog.ops]
    for kb, ws in writes.items():
        ws.sort()
        starts = [w[0] for w in ws]
        pmax: list[int] = []
        for w in ws:
            pmax.append(max(pmax[-1], w[1]) if pmax else w[1])
        for lo, hi, oid in ws:
            for other in _overlapping(ws, starts, pmax, lo, hi):
                if other != oid:
                    need[max(other, oid)][min(other, oid)] = "write"
        for lo, hi, oid in reads.get(kb, []):
            for other in _overlapping(ws, starts, pmax, lo, hi):
                if other == oid:
                    continue
                if other < oid:  # the reader comes after the writer: it needs the write
                    need[oid][other] = "write"
                elif need[other].get(oid) != "write":  # the writer comes after: it needs the read done
                    need[other][oid] = "read"
    ordering = 0
    unroutable = 0
    for op in prog.ops:
        for d in op.deps:
            if d in need[op.id]:
                continue
            ordering += 1
            if deps_all:
                y = prog.ops[d]
                if {op.src_rank, op.dst_rank} & {y.src_rank, y.dst_rank}:
                    need[op.id][d] = "write"
                else:
                    unroutable += 1
    return [sorted(nd.items()) for nd in need], ordering, unroutable


def connections(
    prog: Program, key: list[Key]
) -> tuple[dict[tuple[int, int], list[int]], dict[int, list[int]]]:
    """Remote transfers per (src, dst) connection and local copies per rank, each in key order."""
    conn_ops: dict[tuple[int, int], list[int]] = defaultdict(list)
    local_ops: dict[int, list[int]] = defaultdict(list)
    for op in sorted(prog.ops, key=lambda x: key[x.id]):
        if op.src_rank == op.dst_rank:
            local_ops[op.src_rank].append(op.id)
        else:
            conn_ops[(op.src_rank, op.dst_rank)].append(op.id)
    return conn_ops, local_ops


def _attempts(pre: Prepared, shape: Shape, combined: bool) -> tuple[Assembled, Schedule, int]:
    """Attempts with more lanes (or copy thread blocks) for every thread block over the operation limit."""
    lanes = {k: max(1, min(len(v), -(-len(v) * 5 // 56))) for k, v in pre.conn_ops.items()}
    ncopy = {r: max(1, -(-len(v) * 3 // 56)) for r, v in pre.local_ops.items()}
    for it in range(1, MAX_ITERATIONS + 1):
        sch = Schedule(pre, lanes, ncopy, combined)
        for run in ATTEMPT_PASSES:
            run(sch)
        asm = assemble(sch, shape)
        refusal = too_many_threadblocks(asm, shape)
        if refusal is not None:
            raise refusal
        if not asm.over:
            return asm, sch, it
        if not _grow(pre, asm.over, lanes, ncopy):
            break
    raise LoweringError(f"no thread block layout within {MAX_OPS_PER_TB} operations found")


def _packed_attempts(pre: Prepared, shape: Shape) -> tuple[Assembled, Schedule, int]:
    """Attempts of the packed layout (:mod:`.pack`): every lane end alone until none is over the operation
    limit (more lanes where one is), then packed by the measured weights; then thread blocks over the
    operation limit are repaired and ranks over the thread-block limit repacked, until both hold."""
    pk = pack.start(pre)
    ncopy = {r: max(1, -(-len(v) * 3 // 56)) for r, v in pre.local_ops.items()}
    refusal: LoweringError | None = None
    measuring = True
    for it in range(1, MAX_ITERATIONS + 1):
        sch = Schedule(pre, pk.lanes(pre), ncopy, True, pk.dense())
        for run in ATTEMPT_PASSES:
            run(sch)
        asm = assemble(sch, shape)
        refusal = too_many_threadblocks(asm, shape)
        if refusal is None and not asm.over:
            return asm, sch, it
        grew = False
        for r, tbk, _count in asm.over:
            if tbk[0] == "c":
                ncopy[r] = ncopy.get(r, 1) + 1
                grew = True
        if measuring:
            if pack.split_heavy(sch, asm.counts, pk):
                continue
            measuring = False
            pack.repack(sch, asm.counts, pk, set(range(pre.prog.nranks)))
            grew = True  # the first packing is new: always tried
        elif asm.over:
            grew |= pack.repair(sch, asm.counts, pk)
        else:
            crowded = {g.id for g in asm.plan.gpus if len(g.threadblocks) > shape.max_threadblocks}
            grew |= pack.repack(sch, asm.counts, pk, crowded)
        if not grew:
            break
    if refusal is not None:
        raise refusal
    raise LoweringError(f"no packed thread block layout within {MAX_OPS_PER_TB} operations found")


def _grow(
    pre: Prepared,
    over: list[tuple[int, TbKey, int]],
    lanes: dict[tuple[int, int], int],
    ncopy: dict[int, int],
) -> bool:
    grew = False
    for r, tbk, count in over:
        role, peer, _k = tbk
        if role == "c":
            ncopy[r] = ncopy.get(r, 1) + 1
            grew = True
            continue
        conns = [(r, peer), (peer, r)] if role == "p" else [(r, peer)] if role == "s" else [(peer, r)]
        for cn in conns:
            if cn in lanes and lanes[cn] < min(MAX_LANES, len(pre.conn_ops[cn])):
                lanes[cn] += 1
                grew = True
        if not grew:
            raise LoweringError(
                f"rank {r}: a thread block needs {count} operations (the executor allows {MAX_OPS_PER_TB}) "
                "even with one transfer per lane: an op has too many dependencies to route; deps=data or "
                "a coarser layout (a larger --max-padding, fewer stages) would fit"
            )
    return grew


def _overlapping(
    ws: list[tuple[int, int, int]], starts: list[int], pmax: list[int], lo: int, hi: int
) -> list[int]:
    """Ids of the writes (sorted by start, with the running maximum of their ends) that overlap [lo, hi)."""
    out = []
    i = bisect.bisect_left(starts, hi) - 1
    while i >= 0 and pmax[i] > lo:
        if ws[i][1] > lo:
            out.append(ws[i][2])
        i -= 1
    return out
