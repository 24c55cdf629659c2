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
    counts: dict[Agent, int]  # operations of every thread block (pipelines flattened)


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
    rank's flattened ``connected_to`` per channel type (per peer, its lane ends in one canonical order)."""
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
                if sch.groups is None:
                    tbs_of[r].append(tk)
    if sch.groups is not None:
        count: dict[int, int] = defaultdict(int)
        for (r, _end), g in sch.groups.items():
            count[r] = max(count[r], g + 1)
        for r in range(n):
            tbs_of[r] = [("k", g, 0) for g in range(count[r])]
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
    counts: dict[Agent, int] = {}
    nsig = 0
    for r in range(n):
        remote: dict[tuple[int, str, str], int] = {}
        tbs = []
        for tk in tbs_of[r]:
            fixed = chan_of.get((r, tk)) if sch.groups is None else None
            wr = _TbWriter(sch, r, chan_of, remote, fixed, packed=sch.groups is not None and tk[0] == "k")
            wr.write(sorted(sch.events.get((r, tk), []), key=lambda e: (e.key, e.seq)))
            nsig += wr.nsig
            count = counts[(r, tk)] = sum(1 + len(x.ops) for x in wr.out)
            if count > MAX_OPS_PER_TB:
                over.append((r, tk, count))
            tbs.append(ThreadBlock(tb_id[(r, tk)], tuple(wr.out), *wr.tables()))
        gpus.append(_gpu(r, shape, tbs, peers, remote, sem_count[r]))
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
    max_ops = max(counts.values(), default=0)
    return Assembled(plan, over, max_ops, len(chan_of) // 2, sum(sem_count), nsig, counts)


def too_many_threadblocks(asm: Assembled, shape: Shape) -> LoweringError | None:
    """The refusal when a rank needs more thread blocks than allowed (all must be co-resident)."""
    for g in asm.plan.gpus:
        if len(g.threadblocks) > shape.max_threadblocks:
            return LoweringError(
                f"rank {g.id} needs {len(g.threadblocks)} thread blocks but max_threadblocks is "
                f"{shape.max_threadblocks} (all thread blocks must be co-resident: keep them within the SMs/CUs); "
                "tb_layout=combined halves the lane thread blocks, tb_layout=packed puts several peers in one, and "
                "a coarser layout (a larger --max-padding) or fewer stages needs fewer lanes"
            )
    return None


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
    """One thread block's events in key order -> operations, with fusion and the nops the kernel needs.

    A thread block holds one lane end (split, combined: its only channel, index 0) or several (packed: the
    channel table lists them in first use, as the upstream DSL numbers them, and consecutive signals or waits on
    distinct channels of a type fuse into one operation of at most 8 channels)."""

    def __init__(
        self,
        sch: Schedule,
        r: int,
        chan_of: dict[Agent, tuple[str, int]],
        remote: dict[tuple[int, str, str], int],
        fixed: tuple[str, int] | None,
        packed: bool,
    ) -> None:
        self.sch = sch
        self.r = r
        self.chan_of = chan_of
        self.fixed = fixed  # the one channel of a split/combined lane thread block
        self.packed = packed
        self.table: dict[str, list[int]] = {}  # packed: channel type -> global ids in first use
        self.remote = remote  # the rank's remote buffers: (rank, buffer, channel type) -> global id
        self.refs: dict[str, list[int]] = {}
        self.out: list[Op] = []
        self.pending: list[Access] = []  # accesses of data ops since the last nop
        self.data_since = False
        self.wait_since = False
        self.multi_since = False
        self.nsig = 0

    def tables(self) -> tuple[tuple[TbTable, ...], tuple[TbTable, ...]]:
        """The thread block's ``channels`` and ``remote_buffer_refs`` entries."""
        chans: tuple[TbTable, ...]
        if self.fixed is not None:
            chans = (TbTable(self.fixed[0], (self.fixed[1],)),)
        else:
            chans = tuple(TbTable(t, tuple(ids)) for t, ids in self.table.items())
        if self.fixed is None and not self.packed:
            return chans, ()
        return chans, tuple(TbTable(t, tuple(ids)) for t, ids in self.refs.items())

    def chan(self, end: TbKey) -> tuple[str, int]:
        """(channel type, thread-block-local index) of a lane end's channel (registered on first use)."""
        t, gid = self.chan_of[(self.r, end)]
        if not self.packed:
            return t, 0
        ids = self.table.setdefault(t, [])
        if gid not in ids:
            ids.append(gid)
        return t, ids.index(gid)

    def write(self, evs: list[Event]) -> None:
        i = 0
        while i < len(evs):
            e = evs[i]
            if isinstance(e, OpEvent):
                i = self.put(evs, i) if e.kind is Ev.PUT else self.copy(e, i)
            elif e.kind in (Ev.SIG, Ev.WAIT):
                i = self.channel_sync(evs, i)
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

    def publish(self, items: int = 1) -> None:
        """Before a signal, release or port put by threads 0..items-1: a nop after a data operation or a
        multi-thread operation, and after a wait when more than thread 0 publishes."""
        if self.data_since or self.multi_since or (self.wait_since and items > 1):
            self.nop()

    def last_fuses(self, names: tuple[str, ...], nxt: Put) -> bool:
        """Is the last operation a put the upstream DSL would fuse ``nxt`` into (same first-source size)?"""
        src = self.out[-1].src if self.out and self.out[-1].name in names else None
        return src is not None and len(src) > 0 and src[0].size == nxt.src.size

    def rbuf(self, rank: int, buf: str, ct: str) -> int:
        g = self.remote.setdefault((rank, buf, ct), len(self.remote))
        ids = self.refs.setdefault(ct, [])
        if g not in ids:
            ids.append(g)
        return ids.index(g)

    # ------------------------------------------------------------------ events
    def put(self, evs: list[Event], i: int) -> int:
        """A put and the puts after it that fuse with it (same source buffer and size, same channel type);
        returns the next index."""
        sch, r = self.sch, self.r
        group = [sch.puts[_oid(evs[i])]]
        ct = self.chan_of[(r, sch.send_end(group[0].lane))][0]
        j = i + 1
        while j < len(evs) and evs[j].kind is Ev.PUT and len(group) < MAX_CHANNELS_PER_OP:
            p2 = sch.puts[_oid(evs[j])]
            if p2.src.type != group[0].src.type or p2.src.size != group[0].src.size:
                break
            if self.chan_of[(r, sch.send_end(p2.lane))][0] != ct:
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
        dst, ids = [], []
        for p in group:  # the DSL registers the remote buffer, then the channel
            dst.append(BufRef(p.dst[1], p.dst[2], buffer_id=self.rbuf(p.dst_rank, p.dst[0], ct)))
            ids.append(self.chan(sch.send_end(p.lane))[1])
        self.out.append(
            Op(
                "ppkt" if sch.pre.ll else "put",
                channel_type=ct,
                channel_ids=tuple(ids) if ct == "port" else None,
                src=tuple(p.src for p in group),
                dst=tuple(dst),
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

    def channel_sync(self, evs: list[Event], i: int) -> int:
        """A signal or wait, fused (packed thread blocks) with the next ones of its kind on other channels of
        its type; returns the next index."""
        e = _sync(evs[i])
        t, idx = self.chan(e.wire.src_end if e.kind is Ev.SIG else e.wire.dst_end)
        ids = [idx]
        j = i + 1
        while self.packed and j < len(evs) and evs[j].kind is e.kind and len(ids) < MAX_CHANNELS_PER_OP:
            w = _sync(evs[j]).wire
            t2, idx2 = self.chan(w.src_end if e.kind is Ev.SIG else w.dst_end)
            if t2 != t or idx2 in ids:
                break
            ids.append(idx2)
            j += 1
        name = "signal" if e.kind is Ev.SIG else "wait"
        if e.kind is Ev.SIG:
            self.publish(len(ids))
            self.nsig += len(ids)
        elif self.multi_since:
            self.nop()
        prev = self.out[-1] if self.out else None
        if (
            prev is not None
            and prev.name == name
            and prev.channel_type == t
            and not set(ids) & set(prev.channel_ids or ())
        ):
            self.nop()  # the DSL fuses consecutive signals (waits) on distinct channels without a limit
        self.out.append(Op(name, channel_type=t, channel_ids=tuple(sorted(ids))))
        if e.kind is Ev.WAIT:
            self.wait_since = True
            if len(ids) > 1:
                self.multi_since = True
        return j

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
            self.publish(len(ids))
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


def _sync(e: Event) -> SyncEvent:
    if not isinstance(e, SyncEvent):
        raise InternalError(f"a {e.kind} event where a channel event was expected")
    return e


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
