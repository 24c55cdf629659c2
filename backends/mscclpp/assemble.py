"""Assembly: a :class:`~.schedule.Schedule`'s events -> the :class:`~.model.Plan` the executor loads.

Thread blocks of a rank are numbered lane ends first (peers in rank order, each pair's lanes in one canonical
order, so the k-th channel to p on r pairs with the k-th to r on p), then copy thread blocks. Each thread
block's events run in key order and become operations, with the ``nop`` (``__syncthreads``) the kernel needs
and nothing else (``execution_kernel.hpp`` inserts none): before a signal, semaphore release or port put that
follows a data operation; before a data operation that follows a wait; between data operations on overlapping
ranges. Consecutive puts of one source size fuse into one operation (at most 8, the executor's channels per
operation), and consecutive semaphore operations likewise (at most 16); a ``nop`` separates what the upstream
DSL would otherwise fuse beyond those limits.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from a2acc.backends.mscclpp.model import (
    MAX_CHANNELS_PER_OP,
    MAX_OPS_PER_TB,
    MAX_SEMAPHORES_PER_OP,
    BufRef,
    ChannelGroup,
    Gpu,
    Op,
    Plan,
    RemoteBuffer,
    TbTable,
    ThreadBlock,
)
from a2acc.backends.mscclpp.schedule import LETTER, Agent, Ev, Event, OpEvent, Put, Schedule, SyncEvent, TbKey
from a2acc.errors import InternalError, LoweringError

Access = tuple[int, str, int, int, bool]  # (rank, buffer, first chunk, end chunk, write)


@dataclass(frozen=True)
class Assembled:
    plan: Plan
    over: list[tuple[int, TbKey, int]]  # thread blocks over the executor's operation limit: (rank, tb, ops)
    max_ops: int
    lanes: int
    semaphores: int
    signals: int


@dataclass(frozen=True)
class Shape:
    """What the assembly needs beyond the schedule: the plan's fixed fields."""

    name: str
    protocol: str
    chunks: int  # C: input and output chunks of every rank
    scratch: list[int]
    max_threadblocks: int
    num_threads: int
    min_bytes: int
    max_bytes: int


def thread_blocks(
    sch: Schedule,
) -> tuple[dict[int, list[TbKey]], dict[Agent, tuple[str, int]], dict[tuple[int, str], list[int]]]:
    """Per rank its thread blocks in id order, each lane end's (channel type, global channel id), and each
    rank's flattened ``connected_to`` per channel type."""
    n = sch.pre.prog.nranks
    tbs_of: dict[int, list[TbKey]] = defaultdict(list)
    chan_of: dict[Agent, tuple[str, int]] = {}
    peers: dict[tuple[int, str], list[int]] = defaultdict(list)
    used = sch.used
    for r in range(n):
        for p in range(n):
            if p == r:
                continue
            a, b = min(r, p), max(r, p)
            ends: list[TbKey] = []
            if sch.combined:
                nl = max(used.get((a, b), 0), used.get((b, a), 0))
                ends = [("p", p, k) for k in range(nl)]
            else:
                for s, d in ((a, b), (b, a)):
                    for k in range(used.get((s, d), 0)):
                        ends.append(("s", d, k) if s == r else ("r", s, k))
            t = sch.pre.ctype(r, p)
            for tk in ends:
                chan_of[(r, tk)] = (t, len(peers[(r, t)]))
                peers[(r, t)].append(p)
                tbs_of[r].append(tk)
    for r, tk in sorted(sch.events):
        if tk[0] == "c":
            tbs_of[r].append(tk)
    return tbs_of, chan_of, peers


def assemble(sch: Schedule, shape: Shape) -> Assembled:
    """Number thread blocks, channels and semaphores, write every thread block's operations, build the Plan;
    raise LoweringError when a rank needs more thread blocks than allowed."""
    n = sch.pre.prog.nranks
    tbs_of, chan_of, peers = thread_blocks(sch)
    tb_id = {(r, tk): i for r in range(n) for i, tk in enumerate(tbs_of[r])}
    sem_count = [0] * n
    for w in sch.wires.values():
        if w.kind == "sem":
            w.sem_id = sem_count[w.src[0]]
            sem_count[w.src[0]] += 1
    gpus = []
    over: list[tuple[int, TbKey, int]] = []
    max_ops = 0
    nsig = 0
    for r in range(n):
        remote: dict[tuple[int, str, str], int] = {}
        tbs = []
        for tk in tbs_of[r]:
            ch = chan_of.get((r, tk))
            wr = _TbWriter(sch, r, ch[0] if ch is not None else "none", remote)
            wr.write(sorted(sch.events.get((r, tk), []), key=lambda e: (e.key, e.seq)))
            nsig += wr.nsig
            count = sum(1 + len(x.ops) for x in wr.out)
            max_ops = max(max_ops, count)
            if count > MAX_OPS_PER_TB:
                over.append((r, tk, count))
            refs = [(t, ids) for t, ids in wr.refs.items()] if ch is not None else []
            tbs.append(
                ThreadBlock(
                    tb_id[(r, tk)],
                    tuple(wr.out),
                    (TbTable(ch[0], (ch[1],)),) if ch is not None else (),
                    tuple(TbTable(t, tuple(ids)) for t, ids in refs),
                )
            )
        gpus.append(_gpu(r, shape, tbs, peers, remote, sem_count[r]))
        if len(tbs) > shape.max_threadblocks:
            raise LoweringError(
                f"rank {r} needs {len(tbs)} thread blocks but max_threadblocks is {shape.max_threadblocks} (all "
                "thread blocks must be co-resident: keep them within the SMs/CUs); tb_layout=combined halves "
                "the lane thread blocks, and a coarser layout (a larger --max-padding) or fewer stages needs "
                "fewer lanes"
            )
    plan = Plan(
        name=shape.name,
        collective="alltoall",
        protocol=shape.protocol,
        inplace=False,
        gpus=tuple(gpus),
        reuse_resources=False,
        num_threads_per_block=shape.num_threads,
        use_double_scratch_buffer=False,
        buffer_alignment=16,
        min_message_size=shape.min_bytes,
        max_message_size=shape.max_bytes,
    )
    return Assembled(plan, over, max_ops, len(chan_of) // 2, sum(sem_count), nsig)


def _gpu(
    r: int,
    shape: Shape,
    tbs: list[ThreadBlock],
    peers: dict[tuple[int, str], list[int]],
    remote: dict[tuple[int, str, str], int],
    nsem: int,
) -> Gpu:
    groups = tuple(ChannelGroup(t, tuple(peers[(r, t)])) for t in ("memory", "port") if peers[(r, t)])
    rbs = tuple(
        RemoteBuffer(rank, buf, (t,)) for (rank, buf, t), _i in sorted(remote.items(), key=lambda kv: kv[1])
    )
    return Gpu(r, shape.chunks, shape.chunks, shape.scratch[r], tuple(tbs), groups, rbs, tuple([0] * nsem))


class _TbWriter:
    """One thread block's events in key order -> operations, with fusion and the nops the kernel needs."""

    def __init__(self, sch: Schedule, r: int, ct: str, remote: dict[tuple[int, str, str], int]) -> None:
        self.sch = sch
        self.r = r
        self.ct = ct  # the thread block's channel type ("none": a copy thread block)
        self.remote = remote  # the rank's remote buffers: (rank, buffer, channel type) -> global id
        self.refs: dict[str, list[int]] = {}
        self.out: list[Op] = []
        self.pending: list[Access] = []  # accesses of data ops since the last nop
        self.data_since = False
        self.wait_since = False
        self.multi_since = False
        self.nsig = 0

    def write(self, evs: list[Event]) -> None:
        i = 0
        while i < len(evs):
            e = evs[i]
            if isinstance(e, OpEvent):
                i = self.put(evs, i) if e.kind is Ev.PUT else self.copy(e, i)
            elif e.kind in (Ev.SIG, Ev.WAIT):
                self.channel_sync(e)
                i += 1
            elif e.kind in (Ev.REL, Ev.ACQ):
                i = self.semaphores(evs, i)
            else:
                raise InternalError(f"unknown event {e.kind}")

    # ------------------------------------------------------------------ kernel synchronisation
    def nop(self) -> None:
        if not self.out or self.out[-1].name != "nop":
            self.out.append(Op("nop"))
        self.pending.clear()
        self.data_since = self.wait_since = self.multi_since = False

    def data(self, accesses: list[Access]) -> None:
        """Before a data operation: a nop after a wait, a multi-put, or an overlapping earlier access."""
        if self.wait_since or self.multi_since or any(_overlap(a, b) for a in accesses for b in self.pending):
            self.nop()
        self.pending.extend(accesses)
        self.data_since = True

    def publish(self) -> None:
        if self.data_since or self.multi_since:
            self.nop()

    def last_fuses(self, names: tuple[str, ...], nxt: Put) -> bool:
        """Is the last operation a put the upstream DSL would fuse ``nxt`` into (same first-source size)?"""
        src = self.out[-1].src if self.out and self.out[-1].name in names else None
        return src is not None and len(src) > 0 and src[0].size == nxt.src.size

    def rbuf(self, rank: int, buf: str) -> int:
        g = self.remote.setdefault((rank, buf, self.ct), len(self.remote))
        ids = self.refs.setdefault(self.ct, [])
        if g not in ids:
            ids.append(g)
        return ids.index(g)

    # ------------------------------------------------------------------ events
    def put(self, evs: list[Event], i: int) -> int:
        """A put and the puts after it that fuse with it (same source buffer and size); returns the next index."""
        sch, r, ct = self.sch, self.r, self.ct
        group = [sch.puts[_oid(evs[i])]]
        j = i + 1
        while j < len(evs) and evs[j].kind is Ev.PUT and len(group) < MAX_CHANNELS_PER_OP:
            p2 = sch.puts[_oid(evs[j])]
            if p2.src.type != group[0].src.type or p2.src.size != group[0].src.size:
                break
            group.append(p2)
            j += 1
        accesses = [(r, p.src.type, p.src.index, p.src.index + p.src.size, False) for p in group]
        accesses += [(p.dst_rank, p.dst[0], p.dst[1], p.dst[1] + p.dst[2], True) for p in group]
        if ct == "port":
            if self.data_since or self.multi_since or (self.wait_since and len(group) > 1):
                self.nop()  # threads 1.. issue their puts without waiting for thread 0's wait
            if self.last_fuses(("put",), group[0]) and not sch.pre.ll:
                self.nop()
        else:
            self.data(accesses)
            if self.last_fuses(("put", "ppkt"), group[0]):
                self.nop()
                self.pending.extend(accesses)
                self.data_since = True
        self.out.append(
            Op(
                "ppkt" if sch.pre.ll else "put",
                channel_type=ct,
                channel_ids=tuple(0 for _ in group) if ct == "port" else None,
                src=tuple(p.src for p in group),
                dst=tuple(
                    BufRef(p.dst[1], p.dst[2], buffer_id=self.rbuf(p.dst_rank, p.dst[0])) for p in group
                ),
            )
        )
        if ct == "port" and len(group) > 1:
            self.multi_since = True
        return j

    def copy(self, e: OpEvent, i: int) -> int:
        """A local copy, the copy out of staged scratch, or an LL unpack."""
        r = self.r
        op = self.sch.pre.prog.ops[e.oid]
        if e.kind is Ev.COPY:
            src = BufRef(op.src_off, op.cnt, LETTER[op.src_buf])
            dst = BufRef(op.dst_off, op.cnt, LETTER[op.dst_buf])
        else:
            p: Put = self.sch.puts[e.oid]
            src = BufRef(p.dst[1], p.dst[2], "s")
            dst = BufRef(p.real_dst[1], p.dst[2], p.real_dst[0])
        self.data(
            [
                (r, src.type, src.index, src.index + src.size, False),
                (r, dst.type, dst.index, dst.index + dst.size, True),
            ]
        )
        self.out.append(Op("upkt" if e.kind is Ev.UPKT else "copy", src=(src,), dst=(dst,)))
        return i + 1

    def channel_sync(self, e: SyncEvent) -> None:
        if e.kind is Ev.SIG:
            self.publish()
            self.nsig += 1
        elif self.multi_since:
            self.nop()
        name = "signal" if e.kind is Ev.SIG else "wait"
        self.out.append(Op(name, channel_type=self.ct, channel_ids=(0,)))
        if e.kind is Ev.WAIT:
            self.wait_since = True

    def semaphores(self, evs: list[Event], i: int) -> int:
        """A release or acquire and the ones of the same kind after it (distinct semaphores, at most 16)."""
        e = evs[i]
        ids = [_wire_sem(e)]
        j = i + 1
        while (
            j < len(evs)
            and evs[j].kind is e.kind
            and len(ids) < MAX_SEMAPHORES_PER_OP
            and _wire_sem(evs[j]) not in ids
        ):
            ids.append(_wire_sem(evs[j]))
            j += 1
        if e.kind is Ev.REL:
            self.publish()
            if self.wait_since and len(ids) > 1:
                self.nop()  # threads 1.. would release before thread 0's wait is satisfied
        elif self.multi_since:
            self.nop()
        name = "sem_release" if e.kind is Ev.REL else "sem_acquire"
        if self.out and self.out[-1].name == name:
            self.nop()  # the DSL fuses adjacent semaphore operations without a limit
        self.out.append(Op(name, semaphore_ids=tuple(ids)))
        if e.kind is Ev.ACQ:
            self.wait_since = True
            if len(ids) > 1:
                self.multi_since = True
        return j


def _oid(e: Event) -> int:
    if not isinstance(e, OpEvent):
        raise InternalError(f"a {e.kind} event where a data event was expected")
    return e.oid


def _wire_sem(e: Event) -> int:
    if not isinstance(e, SyncEvent):
        raise InternalError(f"a {e.kind} event where a semaphore event was expected")
    return e.wire.sem_id


def _overlap(a: Access, b: Access) -> bool:
    return a[0] == b[0] and a[1] == b[1] and a[2] < b[3] and b[2] < a[3] and (a[4] or b[4])
