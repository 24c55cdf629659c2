"""The schedule of a lowering attempt: typed events per thread block, the wires that order them, and the
passes that place them (:mod:`.lower` runs them in order; :mod:`.assemble` turns the result into a Plan).

Terms (see :mod:`.lower` for the design):

- an **event** is one thing a thread block does, with a :data:`Key` that orders it: a data event (a put, a
  local copy, the copy out of staged scratch, LL packets unpacked) or a synchronisation event (a channel signal
  or wait, a semaphore release or acquire);
- a **wire** is an ordered signal sequence from one thread block to another: a channel (the sender holds one
  end, the receiver the paired end) or a semaphore (two thread blocks of one rank); the m-th wait of a wire
  consumes its m-th signal;
- a **route** (a list of :class:`Hop`) carries the knowledge "op Y is done" from where it is known to the
  thread block of an op X that must come after Y.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from enum import Enum

from a2acc.backends.mscclpp.model import BufRef
from a2acc.errors import InternalError
from a2acc.ir.program import Buf, Program

LETTER = {int(Buf.INPUT): "i", int(Buf.OUTPUT): "o", int(Buf.SCRATCH): "s"}

# event phases inside one Program op's key (every wait sorts after its signal)
PH_W0 = 0  # data waits on a lane, first hop of a route
PH_REL1, PH_ACQ1 = 1, 2  # semaphore hop on the knowing rank
PH_SIG2, PH_WAIT2 = 3, 4  # the hop across ranks
PH_REL2, PH_ACQ2 = 5, 6  # semaphore hop on the consuming rank
PH_READY = 7  # the sender waits for the receiver's ready signal
PH_OP = 8  # the op itself (put, copy, put_packets)
PH_SIG = 9  # data signal after a put
PH_SW, PH_SC = 10, 11  # receiver: wait for staged data, then copy it out (or unpack packets)

Key = tuple[int, int, int, int]
START: Key = (0, 0, 0, 0)
END_WAIT: Key = (2, 0, 0, 0)
END_ACK: Key = (2, 0, 0, 1)
END_ACKWAIT: Key = (2, 0, 0, 2)

TbKey = tuple[str, int, int]  # (role, peer, index): "s"/"r" split lane ends, "p" combined, "c" copy
Lane = tuple[int, int, int]  # (src rank, dst rank, index)
Agent = tuple[int, TbKey]  # (rank, thread block)


class Ev(Enum):
    """What an event does."""

    PUT = "put"  # a transfer's put (or put_packets under LL) on the sender's lane end
    COPY = "copy"  # a local copy on a copy thread block
    SCOPY = "scopy"  # the receiver copies staged scratch to the transfer's real destination
    UPKT = "upkt"  # the receiver unpacks LL packets to the real destination
    SIG = "sig"  # channel signal
    WAIT = "wait"  # channel wait
    REL = "rel"  # semaphore release
    ACQ = "acq"  # semaphore acquire


DATA_EVENTS = (Ev.PUT, Ev.COPY, Ev.SCOPY, Ev.UPKT)


@dataclass
class Wire:
    """An ordered signal sequence from one thread block to another: a channel (``chan``) or a semaphore
    (``sem``, one rank)."""

    kind: str
    src: Agent  # the thread blocks that signal and wait
    dst: Agent
    src_end: TbKey = ("", 0, 0)  # chan: the lane ends (channels) on each side
    dst_end: TbKey = ("", 0, 0)
    signals: list[tuple[Key, list[Key]]] = field(default_factory=list)  # (signal key, keys that need it)
    sem_id: int = -1


@dataclass(slots=True)
class OpEvent:
    """A data event of Program op ``oid``."""

    key: Key
    seq: int
    kind: Ev
    oid: int


@dataclass(slots=True)
class SyncEvent:
    """A signal, wait, release or acquire on ``wire``."""

    key: Key
    seq: int
    kind: Ev
    wire: Wire


Event = OpEvent | SyncEvent


@dataclass(frozen=True)
class Hop:
    """One step of a route: ``fwdwait`` (the receiver waits for the data signal covering put ``idx`` of
    ``lane``), ``sem1``/``sem2`` (a semaphore from ``src`` to ``dst`` thread block of one rank, before or after
    the cross-rank step), ``sig`` (a channel signal from ``src`` to ``dst``)."""

    kind: str
    src: Agent = (0, ("", 0, 0))
    dst: Agent = (0, ("", 0, 0))
    lane: Lane = (0, 0, 0)
    idx: int = 0
    src_end: TbKey = ("", 0, 0)  # sig: the lane ends (the channel) it signals on
    dst_end: TbKey = ("", 0, 0)


@dataclass
class Put:
    """A remote transfer as its sender puts it: source, destination (staging or real) and the lane."""

    oid: int
    key: Key
    lane: Lane
    src: BufRef
    dst_rank: int
    dst: tuple[str, int, int]  # remote (type, index, size)
    staged: bool
    real_dst: tuple[str, int]  # (type, index) of the Program destination on dst_rank


@dataclass(frozen=True)
class Prepared:
    """What every attempt shares (the passes before lane assignment): keys, staging, needs, connections."""

    prog: Program
    node: list[int]  # server of each rank
    key: list[Key]  # per Program op: (1, level, id, 0)
    ll: bool
    staged: dict[int, int]  # op id -> staging offset (chunks) on its destination
    needs: list[list[tuple[int, str]]]  # per op X: (Y, "write"|"read") it must come after
    conn_ops: dict[tuple[int, int], list[int]]  # (src, dst) -> remote op ids in key order
    local_ops: dict[int, list[int]]  # rank -> local copy op ids in key order
    deps_all: bool
    phase_major: bool = False  # packed: within a level, every phase of all its ops before the next phase
    unroutable: int = 0  # ordering dependencies find_needs could not route

    def ek(self, oid: int, phase: int) -> Key:
        """The key of op ``oid``'s event in ``phase``: (1, level, id, phase), or (1, level, phase, id) when
        phase-major (the level's waits, then its puts, its signals, its copies: consecutive, so they fuse)."""
        _one, lvl, i, _z = self.key[oid]
        return (1, lvl, phase, i) if self.phase_major else (1, lvl, i, phase)

    def ctype(self, a: int, b: int) -> str:
        return "memory" if self.node[a] == self.node[b] else "port"


class Schedule:
    """One attempt: lanes and copy thread blocks fixed, then events placed by the passes below, in order."""

    def __init__(
        self,
        pre: Prepared,
        lanes: dict[tuple[int, int], int],
        ncopy: dict[int, int],
        combined: bool,
        groups: dict[Agent, int] | None = None,
    ) -> None:
        self.pre = pre
        self.combined = combined
        # packed layout: (rank, lane end) -> the packed thread block holding it; None: one per lane end
        self.groups = groups
        self.events: dict[Agent, list[Event]] = defaultdict(list)
        self.seq = 0
        self.wires: dict[tuple[int, TbKey, int, TbKey], Wire] = {}
        self.unroutable = 0
        self.lane_of: dict[int, Lane] = {}
        self.used: dict[tuple[int, int], int] = {}
        self.copy_tb: dict[int, TbKey] = {}
        self.puts: dict[int, Put] = {}
        self.lane_puts: dict[Lane, list[int]] = defaultdict(list)
        self.lanes_by_pair: dict[tuple[int, int], list[Lane]] = defaultdict(list)
        self.data_needs: dict[Lane, list[tuple[Key, int]]] = defaultdict(list)
        self.put_index: dict[int, int] = {}
        self.lanes = lanes
        self.ncopy = ncopy

    # ------------------------------------------------------------------ pass: lanes
    def assign_lanes(self) -> None:
        """Deal every connection's transfers round-robin over its lanes, local copies over copy thread blocks."""
        for (s, d), oids in self.pre.conn_ops.items():
            if self.combined:
                nl = max(self.lanes.get((s, d), 1), self.lanes.get((d, s), 1))
            else:
                nl = min(self.lanes[(s, d)], len(oids))
            for i, oid in enumerate(oids):
                self.lane_of[oid] = (s, d, i % nl)
            self.used[(s, d)] = min(nl, len(oids))
        for r, oids in self.pre.local_ops.items():
            k = self.ncopy.get(r, 1)
            for i, oid in enumerate(oids):
                self.copy_tb[oid] = ("c", -1, i % k)

    # ------------------------------------------------------------------ pass: transfers
    def place_transfers(self) -> None:
        """Puts on the senders' lane ends (lane order = key order), copies on copy thread blocks, the staged
        copies (or LL unpacks) on the receivers' ends, and what each staged copy waits for."""
        pre = self.pre
        prog, key = pre.prog, pre.key
        for op in sorted(prog.ops, key=lambda x: key[x.id]):
            if op.src_rank == op.dst_rank:
                continue
            st = pre.staged.get(op.id)
            dst = ("s", st, op.cnt) if st is not None else (LETTER[op.dst_buf], op.dst_off, op.cnt)
            p = Put(
                op.id,
                key[op.id],
                self.lane_of[op.id],
                BufRef(op.src_off, op.cnt, LETTER[op.src_buf]),
                op.dst_rank,
                dst,
                st is not None,
                (LETTER[op.dst_buf], op.dst_off),
            )
            self.puts[op.id] = p
            self.lane_puts[p.lane].append(op.id)
        for lane in sorted(self.lane_puts):
            self.lanes_by_pair[(lane[0], lane[1])].append(lane)
        for oid in sorted(self.puts, key=lambda x: key[x]):
            p = self.puts[oid]
            s, d, _k = p.lane
            self.op_event(s, self.send_tb(p.lane), pre.ek(oid, PH_OP), Ev.PUT, oid)
            if pre.ll:
                self.op_event(d, self.recv_tb(p.lane), pre.ek(oid, PH_SC), Ev.UPKT, oid)
        for r, oids in pre.local_ops.items():
            for oid in oids:
                self.op_event(r, self.copy_tb[oid], pre.ek(oid, PH_OP), Ev.COPY, oid)
        for oids in self.lane_puts.values():
            for i, oid in enumerate(oids):
                self.put_index[oid] = i
        for oid, p in self.puts.items():
            if p.staged and not pre.ll:
                self.data_needs[p.lane].append((pre.ek(oid, PH_SW), self.put_index[oid]))
                self.op_event(p.dst_rank, self.recv_tb(p.lane), pre.ek(oid, PH_SC), Ev.SCOPY, oid)

    # ------------------------------------------------------------------ pass: handshakes
    def place_handshakes(self) -> None:
        """Per lane: the receiver's ready signal at the start of a launch (the sender waits before its first
        put), the end-of-launch data wait, and the port acknowledgement that ends a launch."""
        for lane, oids in self.lane_puts.items():
            s, d, _k = lane
            self.signal(self.rev_wire(lane), START, [self.pre.ek(oids[0], PH_READY)])
            if not self.pre.ll:
                self.data_needs[lane].append((END_WAIT, len(oids) - 1))
                if self.pre.ctype(s, d) == "port":
                    self.signal(self.rev_wire(lane), END_ACK, [END_ACKWAIT])

    # ------------------------------------------------------------------ thread blocks of lanes
    def send_end(self, lane: Lane) -> TbKey:
        """The lane's end (its channel) on the sender: ``("s", d, k)`` (split) or ``("p", d, k)``, where lane
        k of a pair carries both directions."""
        _s, d, k = lane
        return ("p", d, k) if self.combined else ("s", d, k)

    def recv_end(self, lane: Lane) -> TbKey:
        s, _d, k = lane
        return ("p", s, k) if self.combined else ("r", s, k)

    def phys(self, r: int, end: TbKey) -> TbKey:
        """The thread block that holds a lane end: the end itself, or its packed thread block ``("k", g, 0)``."""
        return end if self.groups is None else ("k", self.groups[(r, end)], 0)

    def send_tb(self, lane: Lane) -> TbKey:
        return self.phys(lane[0], self.send_end(lane))

    def recv_tb(self, lane: Lane) -> TbKey:
        return self.phys(lane[1], self.recv_end(lane))

    def tb_of(self, oid: int) -> Agent:
        op = self.pre.prog.ops[oid]
        if op.src_rank == op.dst_rank:
            return op.src_rank, self.copy_tb[oid]
        return op.src_rank, self.send_tb(self.lane_of[oid])

    def fwd_wire(self, lane: Lane) -> Wire:
        s, d, _k = lane
        return self.wire(
            "chan", (s, self.send_tb(lane)), (d, self.recv_tb(lane)), self.send_end(lane), self.recv_end(lane)
        )

    def rev_wire(self, lane: Lane) -> Wire:
        s, d, _k = lane
        return self.wire(
            "chan", (d, self.recv_tb(lane)), (s, self.send_tb(lane)), self.recv_end(lane), self.send_end(lane)
        )

    def wire(
        self, kind: str, src: Agent, dst: Agent, src_end: TbKey | None = None, dst_end: TbKey | None = None
    ) -> Wire:
        """The wire between two thread blocks: a semaphore, or the channel of two lane ends (one direction)."""
        se = src[1] if src_end is None else src_end
        de = dst[1] if dst_end is None else dst_end
        k = (src[0], se, dst[0], de)
        w = self.wires.get(k)
        if w is None:
            w = self.wires[k] = Wire(kind, src, dst, se, de)
        return w

    def op_event(self, r: int, tb: TbKey, key: Key, kind: Ev, oid: int) -> None:
        self.seq += 1
        self.events[(r, tb)].append(OpEvent(key, self.seq, kind, oid))

    def sync_event(self, agent: Agent, key: Key, kind: Ev, w: Wire) -> None:
        self.seq += 1
        self.events[agent].append(SyncEvent(key, self.seq, kind, w))

    def signal(self, w: Wire, key: Key, needs: list[Key]) -> None:
        for nk in needs:
            if not nk > key:
                raise InternalError(f"a wait at {nk} would precede its signal at {key}")
        w.signals.append((key, needs))

    # ------------------------------------------------------------------ pass: routes
    def route_needs(self) -> None:
        """For every need (Y before X), the cheapest route from where Y is known to X's thread block."""
        pre = self.pre
        for x, needs in enumerate(pre.needs):
            if not needs:
                continue
            e, xt = self.tb_of(x)
            done: set[Hop] = set()
            for y, aspect in needs:
                best: list[Hop] | None = None
                for point in self.known(y, aspect):
                    route = self.route(point, e, xt)
                    if route is not None and (best is None or len(route) < len(best)):
                        best = route
                if best is None:
                    if pre.deps_all:
                        self.unroutable += 1
                        continue
                    raise InternalError(f"no route orders op {y} before op {x}")
                for hop in best:
                    if hop not in done:
                        done.add(hop)
                        self.hop(x, hop)

    def known(self, y: int, aspect: str) -> list[tuple[str, int, TbKey, int]]:
        """Where Y's effect is known: ("op", rank, tb, y) after Y's own event, ("fwd", rank, tb, y) after the
        receiver's wait for Y's data signal (and its staged copy)."""
        pre = self.pre
        op = pre.prog.ops[y]
        if op.src_rank == op.dst_rank:
            return [("op", op.src_rank, self.copy_tb[y], y)]
        lane = self.lane_of[y]
        out = [("op" if pre.ll else "fwd", op.dst_rank, self.recv_tb(lane), y)]
        if aspect == "read" and (pre.ll or pre.ctype(op.src_rank, op.dst_rank) == "memory"):
            out.insert(0, ("op", op.src_rank, self.send_tb(lane), y))
        return out

    def channel_tbs(self, q: int, e: int) -> list[tuple[TbKey, TbKey, TbKey, TbKey]]:
        """(thread block on q, thread block on e, lane end on q, lane end on e) for every lane between q and e."""
        out = []
        for lane in (*self.lanes_by_pair.get((q, e), ()), *self.lanes_by_pair.get((e, q), ())):
            if lane[0] == q:
                out.append((self.send_tb(lane), self.recv_tb(lane), self.send_end(lane), self.recv_end(lane)))
            else:
                out.append((self.recv_tb(lane), self.send_tb(lane), self.recv_end(lane), self.send_end(lane)))
        return out

    def route(self, point: tuple[str, int, TbKey, int], e: int, xt: TbKey) -> list[Hop] | None:
        how, q, t, y = point
        hops: list[Hop] = []
        if how == "fwd":
            hops.append(Hop("fwdwait", lane=self.lane_of[y], idx=self.put_index[y]))
        if q == e:
            if t != xt:
                hops.append(Hop("sem1", (q, t), (q, xt)))
            return hops
        best = None
        for u, v, eu, ev in self.channel_tbs(q, e):
            cost = (u != t) + (v != xt)
            if best is None or cost < best[0]:
                best = (cost, u, v, eu, ev)
        if best is None:
            return None
        _c, u, v, eu, ev = best
        if u != t:
            hops.append(Hop("sem1", (q, t), (q, u)))
        hops.append(Hop("sig", (q, u), (e, v), src_end=eu, dst_end=ev))
        if v != xt:
            hops.append(Hop("sem2", (e, v), (e, xt)))
        return hops

    def hop(self, x: int, hop: Hop) -> None:
        if hop.kind == "fwdwait":
            self.data_needs[hop.lane].append((self.pre.ek(x, PH_W0), hop.idx))
        elif hop.kind in ("sem1", "sem2"):
            rel, acq = (PH_REL1, PH_ACQ1) if hop.kind == "sem1" else (PH_REL2, PH_ACQ2)
            self.signal(self.wire("sem", hop.src, hop.dst), self.pre.ek(x, rel), [self.pre.ek(x, acq)])
        else:
            w = self.wire("chan", hop.src, hop.dst, hop.src_end, hop.dst_end)
            self.signal(w, self.pre.ek(x, PH_SIG2), [self.pre.ek(x, PH_WAIT2)])

    # ------------------------------------------------------------------ pass: data signals
    def place_data_signals(self) -> None:
        """Per lane: the fewest data signals (each right after a put) such that every need (a wait key and
        the last put it needs) has a signal after that put and before the wait (interval stabbing, left ends)."""
        for lane, needs in self.data_needs.items():
            oids = self.lane_puts[lane]
            sig_keys: list[Key] = [self.pre.ek(oid, PH_SIG) for oid in oids]
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

    # ------------------------------------------------------------------ pass: waits
    def place_waits(self) -> None:
        """Signals and waits as events; the m-th wait goes just before the first need of a signal >= m (same
        key and phase as the event that needs it: that event sorts later). Packed: redundant signals are
        merged first (:meth:`coalesce_signals`)."""
        if self.pre.phase_major:
            self.coalesce_signals()
        for w in self.wires.values():
            w.signals.sort(key=lambda t: t[0])
            chan = w.kind == "chan"
            for (sk, _needs), wk in zip(w.signals, _wait_keys(w), strict=True):
                self.sync_event(w.src, sk, Ev.SIG if chan else Ev.REL, w)
                self.sync_event(w.dst, wk, Ev.WAIT if chan else Ev.ACQ, w)

    def coalesce_signals(self) -> None:
        """A signal tells its waiter what its thread block has done up to it. When the thread block does
        nothing between two signals of a wire that adds to that (no data operation, no wait: only other signals
        or releases), the second says nothing new: its needs move to the first and it is dropped."""
        know: dict[Agent, list[Key]] = defaultdict(list)  # keys of data events and (future) waits per tb
        for agent, evs in self.events.items():
            know[agent].extend(e.key for e in evs)
        for w in self.wires.values():
            w.signals.sort(key=lambda t: t[0])
            know[w.dst].extend(_wait_keys(w))
        for keys in know.values():
            keys.sort()
        for w in self.wires.values():
            kept: list[tuple[Key, list[Key]]] = []
            keys = know[w.src]
            for sk, needs in w.signals:
                if kept and bisect.bisect_right(keys, kept[-1][0]) == bisect.bisect_left(keys, sk):
                    kept[-1] = (kept[-1][0], kept[-1][1] + needs)
                else:
                    kept.append((sk, list(needs)))
            w.signals = kept


def _wait_keys(w: Wire) -> list[Key]:
    """Where the waits of a wire go (signals sorted): the m-th just before the first need of a signal >= m."""
    keys = [min(needs) for _k, needs in w.signals]
    for m in range(len(keys) - 2, -1, -1):
        keys[m] = min(keys[m], keys[m + 1])
    return keys
