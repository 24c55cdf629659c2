"""The packed thread-block layout: several lane ends (channels) per thread block, for ranks with many peers.

With one thread block per lane end (``split``, ``combined``) a rank needs at least one thread block per peer;
FAST on 32 or 64 servers gives a rank 40-70 peers, most with a few transfers each, and the thread blocks no
longer fit the SMs (all must be co-resident: they spin on each other). Here lane ends are packed into thread
blocks within the executor's per-thread-block limits (``src/core/include/execution_common.hpp``): 64
operations, 16 channels and 16 remote buffers of a type. A thread block never holds two lanes of one pair, so a
memory put names its channel by its peer alone (as the upstream DSL's put does). The key order still orders
every thread block's events, so the lowering stays deadlock-free whatever the packing (see :mod:`.lower`).

Weights (operations per lane end) start as an estimate: first fit by decreasing weight. After an attempt they
are measured (each thread block's operation count shared among its lane ends in proportion to their events),
and only the thread blocks over the limit are repaired: their lightest lane ends move to thread blocks with room
(or a new one), everything else stays where it was. A lane end heavier than a thread block gives its pair one
more lane.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from a2acc.backends.mscclpp.model import MAX_CHANNELS_PER_TB, MAX_OPS_PER_TB
from a2acc.backends.mscclpp.schedule import Agent, Ev, Event, OpEvent, Prepared, Schedule, TbKey

MAX_PAIR_LANES = 16  # lanes of one pair at most
FILL = 58  # operations a thread block is first packed to (the limit less room for the nops packing adds)
MIN_FILL = 40
FILL_STEP = 2  # a rank with a thread block over the limit packs this much lower from then on
PER_TRANSFER = 2.6  # estimated operations per transfer a lane end sends or receives, before measuring


@dataclass
class Packing:
    """Lanes per pair (both directions share lane k), the weight of every lane end in operations, and the
    current assignment of lane ends to thread blocks (``groups``) with each thread block's load."""

    pair_lanes: dict[tuple[int, int], int]
    weight: dict[Agent, float]
    groups: dict[Agent, int] = field(default_factory=dict)
    load: dict[tuple[int, int], float] = field(default_factory=dict)  # (rank, group) -> operations
    fill: dict[int, float] = field(default_factory=dict)  # rank -> operations it packs a thread block to

    def lanes(self, pre: Prepared) -> dict[tuple[int, int], int]:
        """The Schedule's lanes per directed connection."""
        return {(s, d): self.pair_lanes[(min(s, d), max(s, d))] for s, d in pre.conn_ops}


def start(pre: Prepared) -> Packing:
    """Lanes as the one-thread-block-per-lane-end layouts start (about 11 transfers a lane), each lane end in
    a thread block of its own: the first attempts measure what every lane end costs alone."""
    pairs: dict[tuple[int, int], int] = {}
    for (s, d), oids in pre.conn_ops.items():
        pair = (min(s, d), max(s, d))
        pairs[pair] = max(pairs.get(pair, 1), min(len(oids), -(-len(oids) * 5 // 56)), 1)
    pk = Packing(pairs, {})
    singletons(pre, pk)
    return pk


def singletons(pre: Prepared, pk: Packing) -> None:
    """Every lane end in a thread block of its own."""
    pk.groups.clear()
    pk.load.clear()
    for r, ends in ends_of(pre, pk).items():
        for g, (end, _t) in enumerate(ends):
            pk.groups[(r, end)] = g
            pk.load[(r, g)] = pk.weight.get((r, end), 1.0)


def split_heavy(sch: Schedule, counts: dict[Agent, int], pk: Packing) -> bool:
    """After a singleton attempt: every pair with a lane end over the limit gets as many lanes as its ends'
    operations need at :data:`FILL` each. False when no pair changed."""
    _measure(sch, counts, pk)
    changed = False
    for (r, tb), c in sorted(counts.items()):
        if c <= MAX_OPS_PER_TB or tb[0] != "k":
            continue
        end = next(e for (q, e), g in pk.groups.items() if q == r and g == tb[1])
        a, b = min(r, end[1]), max(r, end[1])
        most = max(len(sch.pre.conn_ops.get((a, b), ())), len(sch.pre.conn_ops.get((b, a), ())))
        nl = pk.pair_lanes[(a, b)]
        want = min(MAX_PAIR_LANES, most, max(nl + 1, -(-c * nl // FILL)))
        if want > nl:
            pk.pair_lanes[(a, b)] = want
            changed = True
    if changed:
        singletons(sch.pre, pk)
    return changed


def dense(pk: Packing) -> dict[Agent, int]:
    """The assignment with every rank's thread blocks numbered 0.. in order (empty ones dropped)."""
    used: dict[int, set[int]] = defaultdict(set)
    for (r, _end), g in pk.groups.items():
        used[r].add(g)
    renum = {r: {g: i for i, g in enumerate(sorted(gs))} for r, gs in used.items()}
    return {(r, end): renum[r][g] for (r, end), g in pk.groups.items()}


def ends_of(pre: Prepared, pk: Packing) -> dict[int, list[tuple[TbKey, str]]]:
    """Every rank's lane ends (peer ascending, then lane) with their channel types."""
    out: dict[int, list[tuple[TbKey, str]]] = defaultdict(list)
    for (a, b), nl in sorted(pk.pair_lanes.items()):
        for k in range(nl):
            out[a].append((("p", b, k), pre.ctype(a, b)))
            out[b].append((("p", a, k), pre.ctype(a, b)))
    for ends in out.values():
        ends.sort(key=lambda e: (e[0][1], e[0][2]))
    return out


def _first_fit(pre: Prepared, pk: Packing, todo: dict[int, list[TbKey]]) -> None:
    """Place the lane ends of ``todo`` (per rank) into thread blocks with room, heaviest first: within
    :data:`FILL` operations, 16 channels of a type, one lane of a peer; else into a new thread block."""
    for r, ends in sorted(todo.items()):
        members: dict[int, list[TbKey]] = defaultdict(list)
        for (q, end), g in pk.groups.items():
            if q == r:
                members[g].append(end)
        order = sorted(ends, key=lambda e: (-pk.weight.get((r, e), 1.0), e[1], e[2]))
        for end in order:
            w = pk.weight.get((r, end), 1.0)
            t = pre.ctype(r, end[1])
            for g in sorted(members):
                mem = members[g]
                if (
                    pk.load.get((r, g), 0.0) + w <= pk.fill.get(r, FILL)
                    and sum(1 for e in mem if pre.ctype(r, e[1]) == t) < MAX_CHANNELS_PER_TB
                    and all(e[1] != end[1] for e in mem)
                ):
                    break
            else:
                g = max(members, default=-1) + 1
            members[g].append(end)
            pk.groups[(r, end)] = g
            pk.load[(r, g)] = pk.load.get((r, g), 0.0) + w


def repack(sch: Schedule, counts: dict[Agent, int], pk: Packing, ranks: set[int]) -> bool:
    """Measure the attempt, then pack the lane ends of ``ranks`` (ranks with more thread blocks than allowed)
    afresh by their measured weights. False when that changes nothing."""
    _measure(sch, counts, pk)
    before = dict(pk.groups)
    todo: dict[int, list[TbKey]] = defaultdict(list)
    for r, end in list(pk.groups):
        if r in ranks:
            del pk.groups[(r, end)]
            todo[r].append(end)
    for key in [k for k in pk.load if k[0] in ranks]:
        del pk.load[key]
    _first_fit(sch.pre, pk, todo)
    return pk.groups != before and all(_count(pk, r) < _count_of(before, r) for r in ranks)


def _count(pk: Packing, r: int) -> int:
    return _count_of(pk.groups, r)


def _count_of(groups: dict[Agent, int], r: int) -> int:
    return len({g for (q, _e), g in groups.items() if q == r})


def repair(sch: Schedule, counts: dict[Agent, int], pk: Packing) -> bool:
    """Measure the attempt; every rank with a thread block over the limit packs lower from now on, and the
    lightest lane ends of those thread blocks move out (a pair gets one more lane when one of its ends alone
    overfills its thread block). False when nothing can change."""
    _measure(sch, counts, pk)
    moved: dict[int, list[TbKey]] = defaultdict(list)
    changed = False
    for (r, tb), c in sorted(counts.items()):
        if c <= MAX_OPS_PER_TB or tb[0] != "k":
            continue
        fill = pk.fill[r] = max(MIN_FILL, pk.fill.get(r, FILL) - FILL_STEP)
        g = tb[1]
        mem = sorted(
            (e for (q, e), h in pk.groups.items() if q == r and h == g), key=lambda e: pk.weight[(r, e)]
        )
        if len(mem) == 1:
            changed |= _more_lanes(sch.pre, pk, r, mem[0])
            continue
        while len(mem) > 1 and pk.load[(r, g)] > fill:
            end = mem.pop(0)
            del pk.groups[(r, end)]
            pk.load[(r, g)] -= pk.weight[(r, end)]
            moved[r].append(end)
            changed = True
    _first_fit(sch.pre, pk, moved)
    return changed


def _measure(sch: Schedule, counts: dict[Agent, int], pk: Packing) -> None:
    events: dict[Agent, float] = defaultdict(float)  # (rank, end) -> events
    tb_events: dict[Agent, float] = defaultdict(float)  # (rank, packed tb) -> events on its ends
    for (r, tb), evs in sch.events.items():
        for e in evs:
            end = _end_of(sch, e)
            if end is not None:
                events[(r, end)] += 1
                tb_events[(r, tb)] += 1
    for (r, end), n in events.items():
        tb = sch.phys(r, end)
        pk.weight[(r, end)] = counts.get((r, tb), 0) * n / max(tb_events[(r, tb)], 1.0)
    pk.load = defaultdict(float)
    for (r, end), g in pk.groups.items():
        pk.load[(r, g)] += pk.weight.get((r, end), 0.0)


def _more_lanes(pre: Prepared, pk: Packing, r: int, end: TbKey) -> bool:
    """One more lane for the pair of a lane end that alone overfills its thread block: the pair's lane ends
    are placed afresh (their weight spread evenly)."""
    a, b = min(r, end[1]), max(r, end[1])
    most = max(len(pre.conn_ops.get((a, b), ())), len(pre.conn_ops.get((b, a), ())))
    nl = pk.pair_lanes[(a, b)]
    if nl >= min(MAX_PAIR_LANES, most):
        return False
    pk.pair_lanes[(a, b)] = nl + 1
    todo: dict[int, list[TbKey]] = {}
    for q, p in ((a, b), (b, a)):
        total = 0.0
        for k in range(nl):
            key = (q, ("p", p, k))
            w = pk.weight.pop(key, 0.0)
            total += w
            g = pk.groups.pop(key, None)
            if g is not None:
                pk.load[(q, g)] = pk.load.get((q, g), 0.0) - w
        todo[q] = [("p", p, k) for k in range(nl + 1)]
        for k in range(nl + 1):
            pk.weight[(q, ("p", p, k))] = total / (nl + 1)
    _first_fit(pre, pk, todo)
    return True


def _end_of(sch: Schedule, e: Event) -> TbKey | None:
    """The lane end an event uses (None: a semaphore event or a local copy)."""
    if isinstance(e, OpEvent):
        if e.kind is Ev.COPY:
            return None
        p = sch.puts[e.oid]
        return sch.send_end(p.lane) if e.kind is Ev.PUT else sch.recv_end(p.lane)
    if e.wire.kind != "chan":
        return None
    return e.wire.src_end if e.kind is Ev.SIG else e.wire.dst_end
