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
from collections import defaultdict
from dataclasses import dataclass, field

from a2acc.backends.mscclpp.model import (
    MAX_CHANNELS_PER_OP,
    MAX_OPS_PER_TB,
    MAX_SEMAPHORES_PER_OP,
    MAX_U32,
    BufRef,
    ChannelGroup,
    Gpu,
    Op,
    Plan,
    RemoteBuffer,
    TbTable,
    ThreadBlock,
)
from a2acc.errors import InternalError, LoweringError
from a2acc.ir.dag import levels
from a2acc.ir.program import Buf, Program

_LETTER = {int(Buf.INPUT): "i", int(Buf.OUTPUT): "o", int(Buf.SCRATCH): "s"}

# event phases inside one Program op's key (see the module docstring: every wait after its signal)
PH_W0 = 0  # data waits on a lane, first hop of a route
PH_REL1, PH_ACQ1 = 1, 2  # semaphore hop on the knowing rank
PH_SIG2, PH_WAIT2 = 3, 4  # the hop across ranks
PH_REL2, PH_ACQ2 = 5, 6  # semaphore hop on the consuming rank
PH_READY = 7  # the sender waits for the receiver's ready signal
PH_OP = 8  # the op itself (put, copy, put_packets)
PH_SIG = 9  # data signal after a put
PH_SW, PH_SC = 10, 11  # receiver: wait for staged data, then copy it out (or unpack packets)
START = (0, 0, 0, 0)
END_WAIT, END_ACK, END_ACKWAIT = (2, 0, 0, 0), (2, 0, 0, 1), (2, 0, 0, 2)

MAX_LANES = 64
MAX_ITERATIONS = 200

Key = tuple[int, int, int, int]
TbKey = tuple[str, int, int]  # (role, peer, index): "s"/"r" split lane ends, "p" combined, "c" copy


@dataclass(frozen=True)
class LowerOptions:
    name: str = "a2acc"
    target: str = "nvidia"
    protocol: str = "Simple"
    tb_layout: str = "split"  # split | combined
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


class _Ev:
    """One event of a thread block: sorted by (key, seq)."""

    __slots__ = ("data", "key", "kind", "seq")

    def __init__(self, key: Key, seq: int, kind: str, data: object) -> None:
        self.key = key
        self.seq = seq
        self.kind = kind
        self.data = data


@dataclass
class _Wire:
    """An ordered signal sequence from one thread block to another: a channel (``chan``: the sender holds an
    end, the receiver the paired end) or a semaphore (``sem``, same rank)."""

    kind: str
    src: tuple[int, TbKey]
    dst: tuple[int, TbKey]
    signals: list[tuple[Key, list[Key]]] = field(default_factory=list)  # (signal key, keys that need it)
    sem_id: int = -1


@dataclass(frozen=True)
class _Hop:
    """One step of a route: ``fwdwait`` (the receiver waits for the data signal covering put ``idx`` of
    ``lane``), ``sem1``/``sem2`` (a semaphore from ``src`` to ``dst`` thread block of one rank, before or after
    the cross-rank step), ``sig`` (a channel signal from ``src`` to ``dst``)."""

    kind: str
    src: tuple[int, TbKey] = (0, ("", 0, 0))
    dst: tuple[int, TbKey] = (0, ("", 0, 0))
    lane: tuple[int, int, int] = (0, 0, 0)
    idx: int = 0


@dataclass
class _Put:
    oid: int
    key: Key
    lane: tuple[int, int, int]  # (src, dst, k)
    src: BufRef
    dst_rank: int
    dst: tuple[str, int, int]  # remote (type, index, size)
    staged: bool
    real_dst: tuple[str, int]  # (type, index) of the Program destination on dst_rank


def lower(prog: Program, opts: LowerOptions) -> tuple[Plan, LowerStats]:
    """Lower a verified Program (raises LoweringError when it cannot fit the executor)."""
    return _Lowering(prog, opts).run()


class _Lowering:
    def __init__(self, prog: Program, opts: LowerOptions) -> None:
        self.prog = prog
        self.n = prog.nranks
        self.c = prog.layout.buffer_chunks
        self.unit = prog.unit_bytes
        if opts.max_bytes == 0:
            opts = dataclasses.replace(opts, min_bytes=self.c * self.unit, max_bytes=self.c * self.unit)
        self.o = opts
        self.notes: list[str] = []
        self.check_inputs()
        m = prog.machine
        if m is None:
            self.node = list(range(self.n))
            self.notes.append(
                "the Program has no machine map: every rank is treated as its own server (port channels)"
            )
        else:
            self.node = list(m.node)
        self.level = levels(prog.ops)
        self.key = [(1, self.level[op.id], op.id, 0) for op in prog.ops]
        self.ll = opts.protocol == "LL"
        self.stage_plan()
        self.needs, self.ordering_deps, self.unroutable = self.find_needs()

    # ------------------------------------------------------------------ inputs
    def check_inputs(self) -> None:
        o = self.o
        if self.unit % 16:
            raise LoweringError(
                f"the chunk unit is {self.unit} B; MSCCL++ needs chunks that are a multiple of its 16-byte "
                "buffer_alignment (plan with a unit that is a multiple of 16)"
            )
        if int(self.prog.counts.sum()) == 0:
            raise LoweringError("an empty all-to-all moves nothing: there is no plan to write")
        if o.protocol not in ("Simple", "LL") or o.tb_layout not in ("split", "combined"):
            raise LoweringError(f"protocol {o.protocol!r} / tb_layout {o.tb_layout!r} not supported")
        # the largest chunk the plan accepts (max_message_size / C): byte offsets must fit uint32 with it
        self.top_chunk = max(self.unit, o.max_bytes // self.c)

    def remote(self, s: int, d: int) -> bool:
        return s != d

    def ctype(self, a: int, b: int) -> str:
        return "memory" if self.node[a] == self.node[b] else "port"

    def stage_plan(self) -> None:
        """Which remote writes land in the receiver's scratch first, and where: after the Program's scratch."""
        prog = self.prog
        self.staged: dict[int, int] = {}  # op id -> staging offset (chunks) on its destination
        scr = list(prog.scratch)
        for op in prog.ops:
            if op.src_rank == op.dst_rank:
                continue
            if self.ll and self.ctype(op.src_rank, op.dst_rank) != "memory":
                raise LoweringError(
                    f"protocol=LL needs memory channels, but rank {op.src_rank} -> {op.dst_rank} crosses servers "
                    "(LL over port channels is not lowered): use protocol=Simple"
                )
            if self.ll or (op.dst_buf == Buf.OUTPUT and self.o.output_writes == "scratch"):
                self.staged[op.id] = scr[op.dst_rank]
                scr[op.dst_rank] += op.cnt
        self.scratch_chunks = scr
        mult = 2 if self.ll else 1
        top = max(self.c, *(s * mult for s in scr)) * self.top_chunk
        if top > MAX_U32:
            fit = MAX_U32 // max(self.c, *(s * mult for s in scr))
            raise LoweringError(
                f"byte offsets up to {top} exceed the executor's uint32 offsets: {max(self.c, *scr)} chunks of "
                f"{self.top_chunk} B; chunks of at most {fit} B would fit (a finer layout, or less scratch)"
            )

    # ------------------------------------------------------------------ what must be ordered
    def find_needs(self) -> tuple[list[list[tuple[int, str]]], int, int]:
        """Per op X the (Y, aspect) it must wait for: Y < X touch the same bytes of a rank, one writing
        (aspect "write": Y's write must be done; "read": only Y's read of its source). With deps="all" every
        dependency with a shared rank is added as "write"."""
        prog = self.prog
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
                if self.o.deps == "all":
                    y = prog.ops[d]
                    if {op.src_rank, op.dst_rank} & {y.src_rank, y.dst_rank}:
                        need[op.id][d] = "write"
                    else:
                        unroutable += 1
        return [sorted(nd.items()) for nd in need], ordering, unroutable

    # ------------------------------------------------------------------ driver
    def run(self) -> tuple[Plan, LowerStats]:
        prog = self.prog
        conn_ops: dict[tuple[int, int], list[int]] = defaultdict(list)
        local_ops: dict[int, list[int]] = defaultdict(list)
        for op in sorted(prog.ops, key=lambda x: self.key[x.id]):
            if op.src_rank == op.dst_rank:
                local_ops[op.src_rank].append(op.id)
            else:
                conn_ops[(op.src_rank, op.dst_rank)].append(op.id)
        self.conn_ops = conn_ops
        self.local_ops = local_ops
        lanes = {k: max(1, min(len(v), -(-len(v) * 5 // 56))) for k, v in conn_ops.items()}
        ncopy = {r: max(1, -(-len(v) * 3 // 56)) for r, v in local_ops.items()}
        for it in range(1, MAX_ITERATIONS + 1):
            plan, over, stats = self.build(lanes, ncopy)
            if not over:
                return plan, dataclasses.replace(stats, iterations=it)
            grew = False
            for r, tbk, count in over:
                role, peer, _k = tbk
                if role == "c":
                    ncopy[r] = ncopy.get(r, 1) + 1
                    grew = True
                    continue
                conns = [(r, peer), (peer, r)] if role == "p" else [(r, peer)] if role == "s" else [(peer, r)]
                for cn in conns:
                    if cn in lanes and lanes[cn] < min(MAX_LANES, len(conn_ops[cn])):
                        lanes[cn] += 1
                        grew = True
                if not grew:
                    raise LoweringError(
                        f"rank {r}: a thread block needs {count} operations (the executor allows {MAX_OPS_PER_TB}) "
                        "even with one transfer per lane: an op has too many dependencies to route; deps=data or "
                        "a coarser layout (a larger --max-padding, fewer stages) would fit"
                    )
            if not grew:
                break
        raise LoweringError(f"no thread block layout within {MAX_OPS_PER_TB} operations found")

    # ------------------------------------------------------------------ one attempt
    def build(
        self, lanes: dict[tuple[int, int], int], ncopy: dict[int, int]
    ) -> tuple[Plan, list[tuple[int, TbKey, int]], LowerStats]:
        prog, o = self.prog, self.o
        combined = o.tb_layout == "combined"
        self.events: dict[tuple[int, TbKey], list[_Ev]] = defaultdict(list)
        self.seq = 0
        self.wires: dict[tuple[int, TbKey, int, TbKey], _Wire] = {}
        # lanes: transfer -> lane; lane -> thread blocks on both ends
        lane_of: dict[int, tuple[int, int, int]] = {}
        used: dict[tuple[int, int], int] = {}
        for (s, d), oids in self.conn_ops.items():
            nl = lanes[(s, d)] if not combined else max(lanes.get((s, d), 1), lanes.get((d, s), 1))
            nl = min(nl, len(oids)) if not combined else nl
            for i, oid in enumerate(oids):
                lane_of[oid] = (s, d, i % nl)
            used[(s, d)] = min(nl, len(oids))
        self.lane_of = lane_of
        self.copy_tb: dict[int, TbKey] = {}
        for r, oids in self.local_ops.items():
            k = ncopy.get(r, 1)
            for i, oid in enumerate(oids):
                self.copy_tb[oid] = ("c", -1, i % k)
        self.combined = combined
        # puts and their receivers
        self.puts: dict[int, _Put] = {}
        lane_puts: dict[tuple[int, int, int], list[int]] = defaultdict(list)
        for op in sorted(prog.ops, key=lambda x: self.key[x.id]):  # lane order = key order
            if op.src_rank == op.dst_rank:
                continue
            st = self.staged.get(op.id)
            dst = ("s", st, op.cnt) if st is not None else (_LETTER[op.dst_buf], op.dst_off, op.cnt)
            p = _Put(
                op.id,
                self.key[op.id],
                lane_of[op.id],
                BufRef(op.src_off, op.cnt, _LETTER[op.src_buf]),
                op.dst_rank,
                dst,
                st is not None,
                (_LETTER[op.dst_buf], op.dst_off),
            )
            self.puts[op.id] = p
            lane_puts[p.lane].append(op.id)
        self.lane_puts = lane_puts
        self.lanes_by_pair: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
        for lane in sorted(lane_puts):
            self.lanes_by_pair[(lane[0], lane[1])].append(lane)
        for oid in sorted(self.puts, key=lambda x: self.key[x]):
            p = self.puts[oid]
            s, d, _k = p.lane
            self.ev(s, self.send_tb(p.lane), (*p.key[:3], PH_OP), "put", oid)
            if self.ll:
                self.ev(d, self.recv_tb(p.lane), (*p.key[:3], PH_SC), "upkt", oid)
        for r, oids in self.local_ops.items():
            for oid in oids:
                self.ev(r, self.copy_tb[oid], (*self.key[oid][:3], PH_OP), "copy", oid)
        # data needs on each lane's forward wire: (wait key, index of the last put that must have arrived)
        self.data_needs: dict[tuple[int, int, int], list[tuple[Key, int]]] = defaultdict(list)
        self.put_index: dict[int, int] = {}
        for oids in lane_puts.values():
            for i, oid in enumerate(oids):
                self.put_index[oid] = i
        for oid, p in self.puts.items():
            if p.staged and not self.ll:
                self.data_needs[p.lane].append(((*p.key[:3], PH_SW), self.put_index[oid]))
                self.ev(p.dst_rank, self.recv_tb(p.lane), (*p.key[:3], PH_SC), "scopy", oid)
        # ready handshakes, end-of-launch waits and acknowledgements
        for lane, oids in lane_puts.items():
            s, d, _k = lane
            first = self.puts[oids[0]].key
            self.signal(self.rev_wire(lane), START, [(*first[:3], PH_READY)])
            if not self.ll:
                self.data_needs[lane].append((END_WAIT, len(oids) - 1))
                if self.ctype(s, d) == "port":
                    self.signal(self.rev_wire(lane), END_ACK, [END_ACKWAIT])
        self.route_all()
        self.place_data_signals()
        self.place_waits()
        return self.assemble(used)

    # ------------------------------------------------------------------ thread blocks of lanes
    def send_tb(self, lane: tuple[int, int, int]) -> TbKey:
        _s, d, k = lane
        return ("p", d, k) if self.combined else ("s", d, k)

    def recv_tb(self, lane: tuple[int, int, int]) -> TbKey:
        s, _d, k = lane
        return ("p", s, k) if self.combined else ("r", s, k)

    def tb_of(self, oid: int) -> tuple[int, TbKey]:
        op = self.prog.ops[oid]
        if op.src_rank == op.dst_rank:
            return op.src_rank, self.copy_tb[oid]
        return op.src_rank, self.send_tb(self.lane_of[oid])

    def fwd_wire(self, lane: tuple[int, int, int]) -> _Wire:
        s, d, _k = lane
        return self.wire("chan", (s, self.send_tb(lane)), (d, self.recv_tb(lane)))

    def rev_wire(self, lane: tuple[int, int, int]) -> _Wire:
        s, d, _k = lane
        return self.wire("chan", (d, self.recv_tb(lane)), (s, self.send_tb(lane)))

    def wire(self, kind: str, src: tuple[int, TbKey], dst: tuple[int, TbKey]) -> _Wire:
        k = (src[0], src[1], dst[0], dst[1])
        w = self.wires.get(k)
        if w is None:
            w = self.wires[k] = _Wire(kind, src, dst)
        return w

    def ev(self, r: int, tb: TbKey, key: Key, kind: str, data: object) -> None:
        self.seq += 1
        self.events[(r, tb)].append(_Ev(key, self.seq, kind, data))

    def signal(self, w: _Wire, key: Key, needs: list[Key]) -> None:
        for nk in needs:
            if not nk > key:
                raise InternalError(f"a wait at {nk} would precede its signal at {key}")
        w.signals.append((key, needs))

    # ------------------------------------------------------------------ routes
    def channel_tbs(self, q: int, e: int) -> list[tuple[TbKey, TbKey, tuple[int, int, int]]]:
        """(thread block on q, thread block on e, lane) for every lane between q and e."""
        out = []
        for lane in (*self.lanes_by_pair.get((q, e), ()), *self.lanes_by_pair.get((e, q), ())):
            if lane[0] == q:
                out.append((self.send_tb(lane), self.recv_tb(lane), lane))
            else:
                out.append((self.recv_tb(lane), self.send_tb(lane), lane))
        return out

    def route_all(self) -> None:
        """For every need (Y before X), the cheapest route from where Y is known to X's thread block."""
        for x, needs in enumerate(self.needs):
            if not needs:
                continue
            e, xt = self.tb_of(x)
            xk = self.key[x][:3]
            done: set[_Hop] = set()
            for y, aspect in needs:
                best: list[_Hop] | None = None
                for point in self.known(y, aspect):
                    route = self.route(point, e, xt)
                    if route is not None and (best is None or len(route) < len(best)):
                        best = route
                if best is None:
                    if self.o.deps == "all":
                        self.unroutable += 1
                        continue
                    raise InternalError(f"no route orders op {y} before op {x}")
                for hop in best:
                    if hop not in done:
                        done.add(hop)
                        self.hop(xk, hop)

    def known(self, y: int, aspect: str) -> list[tuple[str, int, TbKey, int]]:
        """Where Y's effect is known: ("op", rank, tb, y) after Y's own event, ("fwd", rank, tb, y) after the
        receiver's wait for Y's data signal (and its staged copy)."""
        op = self.prog.ops[y]
        if op.src_rank == op.dst_rank:
            return [("op", op.src_rank, self.copy_tb[y], y)]
        lane = self.lane_of[y]
        out = []
        d_tb = self.recv_tb(lane)
        out.append(("op" if self.ll else "fwd", op.dst_rank, d_tb, y))
        if aspect == "read" and (self.ll or self.ctype(op.src_rank, op.dst_rank) == "memory"):
            out.insert(0, ("op", op.src_rank, self.send_tb(lane), y))
        return out

    def route(self, point: tuple[str, int, TbKey, int], e: int, xt: TbKey) -> list[_Hop] | None:
        how, q, t, y = point
        hops: list[_Hop] = []
        if how == "fwd":
            hops.append(_Hop("fwdwait", lane=self.lane_of[y], idx=self.put_index[y]))
        if q == e:
            if t != xt:
                hops.append(_Hop("sem1", (q, t), (q, xt)))
            return hops
        best = None
        for u, v, _lane in self.channel_tbs(q, e):
            cost = (u != t) + (v != xt)
            if best is None or cost < best[0]:
                best = (cost, u, v)
        if best is None:
            return None
        _c, u, v = best
        if u != t:
            hops.append(_Hop("sem1", (q, t), (q, u)))
        hops.append(_Hop("sig", (q, u), (e, v)))
        if v != xt:
            hops.append(_Hop("sem2", (e, v), (e, xt)))
        return hops

    def hop(self, xk: tuple[int, int, int], hop: _Hop) -> None:
        if hop.kind == "fwdwait":
            self.data_needs[hop.lane].append(((*xk, PH_W0), hop.idx))
        elif hop.kind in ("sem1", "sem2"):
            rel, acq = (PH_REL1, PH_ACQ1) if hop.kind == "sem1" else (PH_REL2, PH_ACQ2)
            self.signal(self.wire("sem", hop.src, hop.dst), (*xk, rel), [(*xk, acq)])
        else:
            self.signal(self.wire("chan", hop.src, hop.dst), (*xk, PH_SIG2), [(*xk, PH_WAIT2)])

    # ------------------------------------------------------------------ data signals and waits
    def place_data_signals(self) -> None:
        """Per lane: the fewest data signals (each right after a put) such that every need (a wait key and
        the last put it needs) has a signal after that put and before the wait (interval stabbing, left ends)."""
        for lane, needs in self.data_needs.items():
            oids = self.lane_puts[lane]
            sig_keys = [(*self.puts[oid].key[:3], PH_SIG) for oid in oids]
            chosen: list[int] = []  # put indices with a signal, ascending
            assign: dict[int, list[Key]] = defaultdict(list)
            for wkey, j in sorted(needs, key=lambda t: -t[1]):
                jmax = bisect.bisect_left(sig_keys, wkey) - 1
                if jmax < j:
                    raise InternalError(f"lane {lane}: a wait at {wkey} needs put {j}, which comes later")
                i = bisect.bisect_left(chosen, j)
                if i < len(chosen) and chosen[i] <= jmax:
                    assign[chosen[i]].append(wkey)
                else:
                    chosen.insert(i, j)
                    assign[j].append(wkey)
            w = self.fwd_wire(lane)
            for j in chosen:
                self.signal(w, sig_keys[j], assign[j])

    def place_waits(self) -> None:
        """Signals and waits as events; the m-th wait goes just before the first need of a signal >= m."""
        for w in self.wires.values():
            w.signals.sort(key=lambda t: t[0])
            keys = [min(needs) for _k, needs in w.signals]
            for m in range(len(keys) - 2, -1, -1):
                keys[m] = min(keys[m], keys[m + 1])
            (sr, st), (dr, dt) = w.src, w.dst
            for (sk, _needs), wk in zip(w.signals, keys, strict=True):
                self.ev(sr, st, sk, "sig" if w.kind == "chan" else "rel", w)
                self.ev(dr, dt, self.wait_key(wk), "wait" if w.kind == "chan" else "acq", w)

    @staticmethod
    def wait_key(need: Key) -> Key:
        """Waits sit right before the event that needs them (same key and phase: the event sorts later)."""
        return need

    # ------------------------------------------------------------------ assembly
    def assemble(
        self, used: dict[tuple[int, int], int]
    ) -> tuple[Plan, list[tuple[int, TbKey, int]], LowerStats]:
        o = self.o
        n = self.n
        combined = self.combined
        # thread blocks per rank: lane ends in canonical order, then copy thread blocks
        tbs_of: dict[int, list[TbKey]] = defaultdict(list)
        chan_of: dict[tuple[int, TbKey], tuple[str, int]] = {}  # thread block -> (type, global channel id)
        peers: dict[tuple[int, str], list[int]] = defaultdict(list)
        for r in range(n):
            for p in range(n):
                if p == r:
                    continue
                a, b = min(r, p), max(r, p)
                ends: list[TbKey] = []
                if combined:
                    nl = max(used.get((a, b), 0), used.get((b, a), 0))
                    ends = [("p", p, k) for k in range(nl)]
                else:
                    for s, d in ((a, b), (b, a)):
                        for k in range(used.get((s, d), 0)):
                            ends.append(("s", d, k) if s == r else ("r", s, k))
                t = self.ctype(r, p)
                for tk in ends:
                    chan_of[(r, tk)] = (t, len(peers[(r, t)]))
                    peers[(r, t)].append(p)
                    tbs_of[r].append(tk)
        for r, tk in sorted(self.events):
            if tk[0] == "c":
                tbs_of[r].append(tk)
        tb_id = {(r, tk): i for r in range(n) for i, tk in enumerate(tbs_of[r])}
        # semaphores: per rank, in wire order
        sem_count = [0] * n
        for w in self.wires.values():
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
                ops, refs, nsig_tb = self.emit_tb(r, tk, chan_of, remote)
                nsig += nsig_tb
                count = sum(1 + len(x.ops) for x in ops)
                max_ops = max(max_ops, count)
                if count > MAX_OPS_PER_TB:
                    over.append((r, tk, count))
                ch = chan_of.get((r, tk))
                tbs.append(
                    ThreadBlock(
                        tb_id[(r, tk)],
                        tuple(ops),
                        (TbTable(ch[0], (ch[1],)),) if ch is not None else (),
                        tuple(TbTable(t, tuple(ids)) for t, ids in refs),
                    )
                )
            groups = tuple(ChannelGroup(t, tuple(peers[(r, t)])) for t in ("memory", "port") if peers[(r, t)])
            rbs = tuple(
                RemoteBuffer(rank, buf, (t,))
                for (rank, buf, t), _i in sorted(remote.items(), key=lambda kv: kv[1])
            )
            gpus.append(
                Gpu(
                    r,
                    self.c,
                    self.c,
                    self.scratch_chunks[r],
                    tuple(tbs),
                    groups,
                    rbs,
                    tuple([0] * sem_count[r]),
                )
            )
            if len(tbs) > o.max_threadblocks:
                raise LoweringError(
                    f"rank {r} needs {len(tbs)} thread blocks but max_threadblocks is {o.max_threadblocks} (all "
                    "thread blocks must be co-resident: keep them within the SMs/CUs); tb_layout=combined halves "
                    "the lane thread blocks, and a coarser layout (a larger --max-padding) or fewer stages needs "
                    "fewer lanes"
                )
        plan = Plan(
            name=o.name,
            collective="alltoall",
            protocol=o.protocol,
            inplace=False,
            gpus=tuple(gpus),
            reuse_resources=False,
            num_threads_per_block=o.num_threads,
            use_double_scratch_buffer=False,
            buffer_alignment=16,
            min_message_size=o.min_bytes,
            max_message_size=o.max_bytes,
        )
        stats = LowerStats(
            threadblocks=max(len(g.threadblocks) for g in gpus),
            ops_per_tb=max_ops,
            lanes=len(chan_of) // 2,
            semaphores=sum(sem_count),
            signals=nsig,
            iterations=0,
            ordering_deps=self.ordering_deps,
            unroutable_deps=self.unroutable,
            notes=tuple(self.notes),
        )
        return plan, over, stats

    def emit_tb(
        self,
        r: int,
        tk: TbKey,
        chan_of: dict[tuple[int, TbKey], tuple[str, int]],
        remote: dict[tuple[int, str, str], int],
    ) -> tuple[list[Op], list[tuple[str, list[int]]], int]:
        """The thread block's operations in key order, with fusion and the nops the kernel needs."""
        evs = sorted(self.events.get((r, tk), []), key=lambda e: (e.key, e.seq))
        ch = chan_of.get((r, tk))
        ct = ch[0] if ch is not None else "none"
        refs: dict[str, list[int]] = {}
        out: list[Op] = []
        pending: list[tuple[int, str, int, int, bool]] = []  # accesses of data ops since the last nop
        data_since = False
        wait_since = False
        multi_since = False
        nsig = 0

        def nop() -> None:
            nonlocal data_since, wait_since, multi_since
            if not out or out[-1].name != "nop":
                out.append(Op("nop"))
            pending.clear()
            data_since = wait_since = multi_since = False

        def data(accesses: list[tuple[int, str, int, int, bool]]) -> None:
            nonlocal data_since
            if wait_since or multi_since or any(_overlap(a, b) for a in accesses for b in pending):
                nop()
            pending.extend(accesses)
            data_since = True

        def publish() -> None:
            if data_since or multi_since:
                nop()

        def rbuf(rank: int, buf: str) -> int:
            g = remote.setdefault((rank, buf, ct), len(remote))
            ids = refs.setdefault(ct, [])
            if g not in ids:
                ids.append(g)
            return ids.index(g)

        i = 0
        while i < len(evs):
            e = evs[i]
            if e.kind == "put":
                group = [self.puts[int(e.data)]]  # type: ignore[call-overload]
                j = i + 1
                while j < len(evs) and evs[j].kind == "put" and len(group) < MAX_CHANNELS_PER_OP:
                    p2 = self.puts[int(evs[j].data)]  # type: ignore[call-overload]
                    if p2.src.type != group[0].src.type or p2.src.size != group[0].src.size:
                        break
                    group.append(p2)
                    j += 1
                accesses = [(r, p.src.type, p.src.index, p.src.index + p.src.size, False) for p in group]
                accesses += [(p.dst_rank, p.dst[0], p.dst[1], p.dst[1] + p.dst[2], True) for p in group]
                if ct == "port":
                    if data_since or multi_since or (wait_since and len(group) > 1):
                        nop()  # threads 1.. issue their puts without waiting for thread 0's wait
                    if out and out[-1].name == "put" and _dsl_fuses(out[-1], group[0]) and not self.ll:
                        nop()
                else:
                    data(accesses)
                    if out and out[-1].name in ("put", "ppkt") and _dsl_fuses(out[-1], group[0]):
                        nop()
                        pending.extend(accesses)
                        data_since = True
                out.append(
                    Op(
                        "ppkt" if self.ll else "put",
                        channel_type=ct,
                        channel_ids=tuple(0 for _ in group) if ct == "port" else None,
                        src=tuple(p.src for p in group),
                        dst=tuple(
                            BufRef(p.dst[1], p.dst[2], buffer_id=rbuf(p.dst_rank, p.dst[0])) for p in group
                        ),
                    )
                )
                if ct == "port" and len(group) > 1:
                    multi_since = True
                i = j
                continue
            if e.kind in ("copy", "scopy", "upkt"):
                oid = int(e.data)  # type: ignore[call-overload]
                op = self.prog.ops[oid]
                if e.kind == "copy":
                    src = BufRef(op.src_off, op.cnt, _LETTER[op.src_buf])
                    dst = BufRef(op.dst_off, op.cnt, _LETTER[op.dst_buf])
                else:
                    p = self.puts[oid]
                    src = BufRef(p.dst[1], p.dst[2], "s")
                    dst = BufRef(p.real_dst[1], p.dst[2], p.real_dst[0])
                data(
                    [
                        (r, src.type, src.index, src.index + src.size, False),
                        (r, dst.type, dst.index, dst.index + dst.size, True),
                    ]
                )
                out.append(Op("upkt" if e.kind == "upkt" else "copy", src=(src,), dst=(dst,)))
                i += 1
                continue
            if e.kind in ("sig", "wait"):
                if e.kind == "sig":
                    publish()
                    nsig += 1
                elif multi_since:
                    nop()
                out.append(Op("signal" if e.kind == "sig" else "wait", channel_type=ct, channel_ids=(0,)))
                if e.kind == "wait":
                    wait_since = True
                i += 1
                continue
            if e.kind in ("rel", "acq"):
                ids = [self.sem_of(e.data)]  # type: ignore[arg-type]
                j = i + 1
                while (
                    j < len(evs)
                    and evs[j].kind == e.kind
                    and len(ids) < MAX_SEMAPHORES_PER_OP
                    and self.sem_of(evs[j].data) not in ids  # type: ignore[arg-type]
                ):
                    ids.append(self.sem_of(evs[j].data))  # type: ignore[arg-type]
                    j += 1
                if e.kind == "rel":
                    publish()
                elif multi_since:
                    nop()
                if out and out[-1].name == ("sem_release" if e.kind == "rel" else "sem_acquire"):
                    nop()  # the DSL fuses adjacent semaphore operations without a limit
                out.append(Op("sem_release" if e.kind == "rel" else "sem_acquire", semaphore_ids=tuple(ids)))
                if e.kind == "acq":
                    wait_since = True
                    if len(ids) > 1:
                        multi_since = True
                i = j
                continue
            raise InternalError(f"unknown event {e.kind}")
        if ch is not None:
            tb_refs = [(t, ids) for t, ids in refs.items()]
        else:
            tb_refs = []
        return out, tb_refs, nsig

    def sem_of(self, w: _Wire) -> int:
        return w.sem_id


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


def _overlap(a: tuple[int, str, int, int, bool], b: tuple[int, str, int, int, bool]) -> bool:
    return a[0] == b[0] and a[1] == b[1] and a[2] < b[3] and b[2] < a[3] and (a[4] or b[4])


def _dsl_fuses(prev: Op, nxt: _Put) -> bool:
    """Would the upstream DSL fuse ``nxt`` into the put ``prev`` (same first-source size, no limit)?"""
    return bool(prev.src) and prev.src[0].size == nxt.src.size  # type: ignore[index]
