"""The packed thread-block layout: several lane ends (channels) per thread block, for ranks with many peers.

With one thread block per lane end (``split``, ``combined``) a rank needs at least one thread block per peer;
FAST on 32 or 64 servers gives a rank 40-70 peers, most with a few transfers each, and the thread blocks no
longer fit the SMs (all must be co-resident: they spin on each other). Here lane ends are packed into thread
blocks within the executor's per-thread-block limits (``src/core/include/execution_common.hpp``): 64
operations, 16 channels and 16 remote buffers of a type. A thread block never holds two lanes of one pair, so a
memory put names its channel by its peer alone (as the upstream DSL's put does). The key order still orders
every thread block's events, so the lowering stays deadlock-free whatever the packing (see :mod:`.lower`).

The passes (:func:`~.lower.lower` runs them between attempts):

1. :func:`start`: lanes as the other layouts start (about 11 transfers a lane), every lane end in a thread block
   of its own, so the first attempt measures what each lane end costs alone;
2. :func:`split_heavy`: a pair whose lane end alone passes the operation limit gets the lanes its operations
   need, and the ends are measured alone again;
3. :func:`repack`: the ends of the given ranks packed first-fit by decreasing measured weight (operations) into
   thread blocks filled to :data:`FILL` operations;
4. :func:`repair`: a rank with a thread block over the limit packs lower from then on, and the lightest ends of
   that thread block move to thread blocks with room (or a new one); everything else stays.

Every iteration is over sorted keys and every weight is summed in sorted order, so the packing is a function of
the attempt's counts alone (the compiled lowering reproduces it exactly).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from a2acc.backends.mscclpp.model import MAX_CHANNELS_PER_TB, MAX_OPS_PER_TB
from a2acc.backends.mscclpp.schedule import Agent, Ev, Event, OpEvent, Prepared, Schedule, TbKey

MAX_PAIR_LANES = 16  # lanes of one pair at most
FILL = 58  # operations a thread block is first packed to (the limit less room for what packing adds)
MIN_FILL = 40
FILL_STEP = 2  # a rank with a thread block over the limit packs this much lower from then on


@dataclass
class Packing:
    """Lanes per pair (both directions share lane k), the weight of every lane end in operations, and the
    assignment of every rank's lane ends to its thread blocks with each thread block's load."""

    pair_lanes: dict[tuple[int, int], int]
    weight: dict[Agent, float] = field(default_factory=dict)
    groups: dict[int, dict[TbKey, int]] = field(default_factory=dict)  # rank -> lane end -> thread block
    load: dict[tuple[int, int], float] = field(default_factory=dict)  # (rank, thread block) -> operations
    fill: dict[int, float] = field(default_factory=dict)  # rank -> operations it packs a thread block to

    def lanes(self, pre: Prepared) -> dict[tuple[int, int], int]:
        """The Schedule's lanes per directed connection."""
        return {(s, d): self.pair_lanes[(min(s, d), max(s, d))] for s, d in pre.conn_ops}

    def dense(self) -> dict[Agent, int]:
        """The assignment with every rank's thread blocks numbered 0.. in order (empty ones dropped)."""
        out: dict[Agent, int] = {}
        for r in sorted(self.groups):
            renum = {g: i for i, g in enumerate(sorted(set(self.groups[r].values())))}
            for end in sorted(self.groups[r]):
                out[(r, end)] = renum[self.groups[r][end]]
        return out


def start(pre: Prepared) -> Packing:
    pairs: dict[tuple[int, int], int] = {}
    for (s, d), oids in sorted(pre.conn_ops.items()):
        pair = (min(s, d), max(s, d))
        pairs[pair] = max(pairs.get(pair, 1), min(len(oids), -(-len(oids) * 5 // 56)), 1)
    pk = Packing(pairs)
    singletons(pre, pk)
    return pk


def singletons(pre: Prepared, pk: Packing) -> None:
    """Every lane end in a thread block of its own."""
    pk.groups = {}
    pk.load = {}
    for r, ends in ends_of(pre, pk).items():
        pk.groups[r] = {}
        for g, end in enumerate(ends):
            pk.groups[r][end] = g
            pk.load[(r, g)] = pk.weight.get((r, end), 1.0)


def ends_of(pre: Prepared, pk: Packing) -> dict[int, list[TbKey]]:
    """Every rank's lane ends, sorted (peer, then lane)."""
    out: dict[int, list[TbKey]] = defaultdict(list)
    for (a, b), nl in sorted(pk.pair_lanes.items()):
        for k in range(nl):
            out[a].append(("p", b, k))
            out[b].append(("p", a, k))
    return {r: sorted(ends) for r, ends in sorted(out.items())}


def _most(pre: Prepared, a: int, b: int) -> int:
    return max(len(pre.conn_ops.get((a, b), ())), len(pre.conn_ops.get((b, a), ())))


def split_heavy(sch: Schedule, counts: dict[Agent, int], pk: Packing) -> bool:
    """After a singleton attempt: every pair with a lane end over the limit gets as many lanes as its ends'
    operations need at :data:`FILL` each. False when no pair changed."""
    _measure(sch, counts, pk)
    changed = False
    for (r, tb), c in sorted(counts.items()):
        if c <= MAX_OPS_PER_TB or tb[0] != "k":
            continue
        end = min(e for e, g in pk.groups[r].items() if g == tb[1])
        a, b = min(r, end[1]), max(r, end[1])
        nl = pk.pair_lanes[(a, b)]
        want = min(MAX_PAIR_LANES, _most(sch.pre, a, b), max(nl + 1, -(-c * nl // FILL)))
        if want > nl:
            pk.pair_lanes[(a, b)] = want
            changed = True
    if changed:
        singletons(sch.pre, pk)
    return changed


def repack(sch: Schedule, counts: dict[Agent, int], pk: Packing, ranks: set[int]) -> bool:
    """Measure the attempt, then pack the lane ends of ``ranks`` (ranks with more thread blocks than allowed)
    afresh by their measured weights. False when that leaves a rank with as many thread blocks as before."""
    _measure(sch, counts, pk)
    before = {r: len(set(pk.groups[r].values())) for r in ranks}
    todo = {r: sorted(pk.groups[r]) for r in sorted(ranks)}
    for r in ranks:
        pk.groups[r] = {}
        for key in [k for k in pk.load if k[0] == r]:
            del pk.load[key]
    _first_fit(sch.pre, pk, todo)
    return all(len(set(pk.groups[r].values())) < before[r] for r in ranks)


def _first_fit(pre: Prepared, pk: Packing, todo: dict[int, list[TbKey]]) -> None:
    """Place the lane ends of ``todo`` (per rank) into thread blocks with room, heaviest first: within the
    rank's fill, 16 channels of a type, one lane of a peer; else into a new thread block."""
    for r in sorted(todo):
        members: dict[int, list[TbKey]] = defaultdict(list)
        for end in sorted(pk.groups[r]):
            members[pk.groups[r][end]].append(end)
        order = sorted(todo[r], key=lambda e: (-pk.weight.get((r, e), 1.0), e[1], e[2]))
        fill = pk.fill.get(r, FILL)
        for end in order:
            w = pk.weight.get((r, end), 1.0)
            t = pre.ctype(r, end[1])
            chosen = -1
            for g in sorted(members):
                mem = members[g]
                if (
                    pk.load.get((r, g), 0.0) + w <= fill
                    and sum(1 for e in mem if pre.ctype(r, e[1]) == t) < MAX_CHANNELS_PER_TB
                    and all(e[1] != end[1] for e in mem)
                ):
                    chosen = g
                    break
            if chosen < 0:
                chosen = max(members, default=-1) + 1
            members[chosen].append(end)
            pk.groups[r][end] = chosen
            pk.load[(r, chosen)] = pk.load.get((r, chosen), 0.0) + w


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
            (e for e, h in pk.groups[r].items() if h == g), key=lambda e: (pk.weight[(r, e)], e[1], e[2])
        )
        if len(mem) == 1:
            changed |= _more_lanes(sch.pre, pk, r, mem[0])
            continue
        while len(mem) > 1 and pk.load[(r, g)] > fill:
            end = mem.pop(0)
            del pk.groups[r][end]
            pk.load[(r, g)] -= pk.weight[(r, end)]
            moved[r].append(end)
            changed = True
    _first_fit(sch.pre, pk, dict(moved))
    return changed


def _measure(sch: Schedule, counts: dict[Agent, int], pk: Packing) -> None:
    """Each packed thread block's operations shared among its lane ends by their events; loads re-summed."""
    events: dict[Agent, int] = defaultdict(int)  # (rank, end) -> events
    tb_events: dict[Agent, int] = defaultdict(int)  # (rank, packed tb) -> events on its ends
    for (r, tb), evs in sch.events.items():
        for e in evs:
            end = _end_of(sch, e)
            if end is not None:
                events[(r, end)] += 1
                tb_events[(r, tb)] += 1
    for (r, end), n in sorted(events.items()):
        tb = sch.phys(r, end)
        pk.weight[(r, end)] = counts.get((r, tb), 0) * n / max(tb_events[(r, tb)], 1)
    pk.load = {}
    for r in sorted(pk.groups):
        for end in sorted(pk.groups[r]):
            key = (r, pk.groups[r][end])
            pk.load[key] = pk.load.get(key, 0.0) + pk.weight.get((r, end), 0.0)


def _more_lanes(pre: Prepared, pk: Packing, r: int, end: TbKey) -> bool:
    """One more lane for the pair of a lane end that alone overfills its thread block: the pair's lane ends
    are placed afresh (their weight spread evenly)."""
    a, b = min(r, end[1]), max(r, end[1])
    nl = pk.pair_lanes[(a, b)]
    if nl >= min(MAX_PAIR_LANES, _most(pre, a, b)):
        return False
    pk.pair_lanes[(a, b)] = nl + 1
    todo: dict[int, list[TbKey]] = {}
    for q, p in ((a, b), (b, a)):
        total = 0.0
        for k in range(nl):
            key = (q, ("p", p, k))
            w = pk.weight.pop(key, 0.0)
            total += w
            g = pk.groups[q].pop(key[1], None)
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
