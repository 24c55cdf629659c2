"""Reference interpreter of MSCCL XML as msccl-executor-nccl and RCCL's MSCCL run it: static rules, execution,
races, postcondition.

1. **Static rules** (collected, not first-error; the limits of msccl-executor-nccl's
   ``src/include/msccl/msccl_struct.h`` and what its parser ``src/misc/msccl/msccl_parser.cc`` and kernel need):
   contiguous tb ids, one tb per (send peer, chan) and per (recv peer, chan), ``chan < nchannels``, steps
   numbered 0..n-1, <= 64 steps per tb (nops included), 1 <= cnt <= 71 on real steps, step kinds allowed by the
   tb's peers (and by the RCCL dialect), dependency targets in range with ``hasdep=1``, ids <= 127, nops
   followed by a real step with a dependency and never ``hasdep=1``, offsets within the buffer capacities of
   the collective, <= 64 tbs on RCCL, <= 32 tbs with a send (recv) peer per channel.
2. **Execution** at chunk granularity, as the interpreter kernel (``src/device/msccl_kernel.cu``,
   ``mscclRunInterpreter``) runs it: every tb is a sequential process; a step runs when its dependencies (its
   own plus folded nops; a wait on tb b step t is released once b completed some ``hasdep`` step >= t) are
   satisfied, its input FIFO is non-empty (receive kinds) and its output FIFO has room under capacity K (send
   kinds; fused ``rcs``/``rrs``/``rrcs`` pop first, then push: two-phase). FIFOs are per connection (sender,
   receiver, channel); the k-th send pairs with the k-th receive and their ``cnt`` must match. No progress
   with work left is a **deadlock**, printed as a wait cycle between tbs. :func:`run` drives a
   :class:`_Machine` (state, steps by kind, worklist, final report).
3. **Races**: happens-before = program order, send -> matching receive, ``hasdep`` step -> released waiter.
   Any two accesses to a (rank, buffer, chunk), not both reads and not ordered, are a race. Memory is linear
   in the schedule, not quadratic in the tb count (:meth:`_Machine.unordered`, :meth:`_Machine.ordered`):

   - both accesses of a pair are always by tbs of the *same* rank (memory is per rank), so every tb keeps a
     clock over its own rank's tbs only, advanced by program order and merged through released flags (flags
     are per rank too). An entry is the latest event of that tb known to precede, so "clock says ordered"
     is always true: the clock only ever holds real predecessors.
   - what it can miss is a path through another rank (a send, ... , a receive back). For those the
     interpreter logs every event (a global sequence number, and its cross-tb predecessors: the matching
     send of a receive, the flags that released a wait), and searches backwards from the later access for
     the earlier one. The search is exact (it follows every happens-before edge) and pruned soundly: an
     event that ran before the earlier access (smaller sequence number) cannot come after it, and a tb's
     chain below an event already searched is covered by it.
   - messages carry the name of their sending event instead of a full vector clock, and a tb keeps only the
     completed ``hasdep`` steps that can still release a wait (the latest, when steps are numbered in order).

   Memory: per tb one rank-local clock (tbs per rank entries), per event a few integers. In a2acc's own
   lowerings every dependency is a same-rank wait, so the search never runs; the compiled check
   (``compiler/native/xmlinterp.c``) keeps only the rank-local clocks and leaves anything they cannot order
   to this reference.
4. **Postcondition** for ``alltoall`` (or an a2acc manifest's all-to-all-v layout), ``allgather`` and
   ``allreduce`` (multisets), with the in-place aliasing the executors' algorithm selection implies
   (``mscclInternalSchedulerSelectAlgo`` in ``src/misc/msccl/msccl_lifecycle.cc``). Leftover FIFO messages are
   errors.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeAlias

import networkx as nx
import numpy as np

from a2acc.backends.msccl_xml.model import (
    COLLS,
    MAX_CHANNELS_NCCL,
    MAX_CHANNELS_RCCL,
    MAX_COUNT,
    MAX_DEP_TB,
    MAX_OFFSET,
    MAX_STEPS,
    MAX_TBS_PER_CHANNEL,
    MAX_TBS_RCCL,
    PROTOS,
    RCCL_TYPES,
    RECV_TYPES,
    SEND_TYPES,
    STEP_TYPES,
    Algo,
    Gpu,
    Step,
    Tb,
)
from a2acc.ir.layout import ChunkLayout

PROTO_K = {"Simple": 2, "LL": 8, "LL128": 8}


@dataclass
class InterpResult:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    steps_run: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors


def capacities(algo: Algo) -> tuple[int, int]:
    """Real input/output capacity in chunks for the collective: C each, except one rank's share (C/N) for
    allgather's input and reducescatter's output (the executor's ``sizeMultiplier``, msccl-executor-nccl's
    ``src/misc/msccl/msccl_parser.cc`` and ``src/misc/msccl/msccl_setup.cc``)."""
    c, n = algo.nchunksperloop, max(algo.ngpus, 1)
    if algo.coll == "allgather":
        return c // n, c
    if algo.coll == "reducescatter":
        return c, c // n
    return c, c


def static_checks(algo: Algo, dialect: str = "nccl") -> list[str]:
    errs = _algo_checks(algo, dialect)
    cap_i, cap_o = capacities(algo)
    if algo.coll == "alltoall" and algo.nchunksperloop % max(algo.ngpus, 1):
        errs.append(f"alltoall nchunksperloop={algo.nchunksperloop} is not a multiple of ngpus={algo.ngpus}")
    for g in algo.gpus:
        _gpu_checks(errs, algo, g, dialect, cap_i, cap_o)
    return errs


def _algo_checks(algo: Algo, dialect: str) -> list[str]:
    errs: list[str] = []
    if algo.proto not in PROTOS:
        errs.append(f"algo proto={algo.proto!r}: must be one of {PROTOS}")
    if algo.coll not in COLLS:
        errs.append(
            f"algo coll={algo.coll!r}: not a collective the executor knows (old 'reduce_scatter'? use 'reducescatter')"
        )
    if algo.inplace not in (0, 1) or algo.outofplace not in (0, 1):
        errs.append("algo inplace/outofplace must be 0 or 1")
    if algo.inplace == 0 and algo.outofplace == 0:
        errs.append("algo inplace=0 and outofplace=0: the algorithm can never be selected")
    if algo.ngpus != len(algo.gpus):
        errs.append(f"algo ngpus={algo.ngpus} but {len(algo.gpus)} <gpu> elements")
    ids = sorted(g.id for g in algo.gpus)
    if ids != list(range(len(algo.gpus))):
        errs.append(f"gpu ids {ids[:10]}... must be 0..{len(algo.gpus) - 1}, each once")
    max_ch = MAX_CHANNELS_RCCL if dialect == "rccl" else MAX_CHANNELS_NCCL
    if algo.nchannels > max_ch:
        errs.append(f"algo nchannels={algo.nchannels} exceeds {max_ch} ({dialect})")
    return errs


def _gpu_checks(errs: list[str], algo: Algo, g: Gpu, dialect: str, cap_i: int, cap_o: int) -> None:
    where = f"gpu {g.id}"
    tb_ids = [t.id for t in g.tbs]
    if sorted(tb_ids) != list(range(len(tb_ids))):
        errs.append(f"{where}: thread block ids {sorted(tb_ids)[:12]} must be exactly 0..{len(tb_ids) - 1}")
    if dialect == "rccl" and len(g.tbs) > MAX_TBS_RCCL:
        errs.append(f"{where}: {len(g.tbs)} thread blocks; RCCL allows at most {MAX_TBS_RCCL}")
    for lim_name, cap_in in (("i_chunks", cap_i), ("o_chunks", cap_o)):
        v = g.i_chunks if lim_name == "i_chunks" else g.o_chunks
        if v not in (0, cap_in):
            errs.append(
                f"{where}: {lim_name}={v} but the {algo.coll} capacity is {cap_in} (0 only for in-place aliasing)"
            )
    if g.s_chunks > MAX_OFFSET + 1:
        errs.append(f"{where}: s_chunks={g.s_chunks} exceeds int16 offsets")
    seen: dict[str, dict[tuple[int, int], int]] = {"send": {}, "recv": {}}
    per_chan: dict[str, dict[int, int]] = {"send": {}, "recv": {}}
    by_id = {t.id: t for t in g.tbs}
    dep_targets: set[tuple[int, int]] = set()
    for t in g.tbs:
        _tb_checks(errs, algo, g, t, seen, per_chan)
        for k, st in enumerate(t.steps):
            _step_checks(
                errs, f"{where} tb {t.id} step {k}", g, t, k, st, dialect, (cap_i, cap_o), by_id, dep_targets
            )
    for tid, sidx in sorted(dep_targets):
        if by_id[tid].steps[sidx].hasdep != 1:
            errs.append(
                f"{where} tb {tid} step {sidx}: is a dependency target but hasdep=0 (the waiter hangs)"
            )
    for role in ("send", "recv"):
        for ch, k in per_chan[role].items():
            if k > MAX_TBS_PER_CHANNEL:
                errs.append(
                    f"{where}: {k} tbs with a {role} peer on channel {ch}; limit {MAX_TBS_PER_CHANNEL}"
                )


def _tb_checks(
    errs: list[str],
    algo: Algo,
    g: Gpu,
    t: Tb,
    seen: dict[str, dict[tuple[int, int], int]],
    per_chan: dict[str, dict[int, int]],
) -> None:
    tw = f"gpu {g.id} tb {t.id}"
    if t.send == g.id or t.recv == g.id:
        errs.append(f"{tw}: send/recv peer equals its own rank")
    for peer in (t.send, t.recv):
        if peer < -1 or peer >= algo.ngpus:
            errs.append(f"{tw}: peer {peer} out of range -1..{algo.ngpus - 1}")
    if not 0 <= t.chan < algo.nchannels:
        errs.append(f"{tw}: chan={t.chan} must be in 0..nchannels-1 ({algo.nchannels}); -1 is rejected")
    for role, peer in (("send", t.send), ("recv", t.recv)):
        if peer < 0:
            continue
        if (peer, t.chan) in seen[role]:
            errs.append(
                f"{tw}: second tb with {role} peer {peer} on channel {t.chan} (also tb {seen[role][(peer, t.chan)]})"
            )
        seen[role][(peer, t.chan)] = t.id
        per_chan[role][t.chan] = per_chan[role].get(t.chan, 0) + 1
    if len(t.steps) > MAX_STEPS:
        errs.append(f"{tw}: {len(t.steps)} steps (nops included); the executor allows {MAX_STEPS}")


def _step_checks(
    errs: list[str],
    sw: str,
    g: Gpu,
    t: Tb,
    k: int,
    st: Step,
    dialect: str,
    caps: tuple[int, int],
    by_id: dict[int, Tb],
    dep_targets: set[tuple[int, int]],
) -> None:
    if st.s != k:
        errs.append(f"{sw}: s={st.s}; steps must be numbered 0,1,2,... in document order")
    if st.type not in STEP_TYPES:
        errs.append(f"{sw}: unknown type {st.type!r}")
        return
    if dialect == "rccl" and st.type not in RCCL_TYPES:
        errs.append(
            f"{sw}: type {st.type!r} needs full ops; RCCL runs only s, r, cpy, re, nop (fails at launch)"
        )
    if st.type in SEND_TYPES and t.send < 0:
        errs.append(f"{sw}: {st.type} in a tb without a send peer")
    if st.type in RECV_TYPES and t.recv < 0:
        errs.append(f"{sw}: {st.type} in a tb without a recv peer")
    for b in (st.srcbuf, st.dstbuf):
        if b not in ("i", "o", "s"):
            errs.append(f"{sw}: buffer {b!r} must be i, o or s")
    if st.hasdep not in (0, 1):
        errs.append(f"{sw}: hasdep={st.hasdep} must be 0 or 1")
    if st.type == "nop":
        _nop_checks(errs, sw, t, k, st)
    else:
        if not 1 <= st.cnt <= MAX_COUNT:
            errs.append(f"{sw}: cnt={st.cnt} must be in 1..{MAX_COUNT}")
        _check_range(errs, sw, st, caps[0], caps[1], g.s_chunks)
    if st.depid >= 0:
        _dep_checks(errs, sw, g, t, st, by_id, dep_targets)


def _nop_checks(errs: list[str], sw: str, t: Tb, k: int, st: Step) -> None:
    if st.hasdep:
        errs.append(f"{sw}: a nop must not have hasdep=1 (nops are not executed; the flag is never written)")
    if st.depid < 0:
        errs.append(f"{sw}: a nop with depid=-1 drops its dependency and breaks step numbering")
    nxt = t.steps[k + 1] if k + 1 < len(t.steps) else None
    if nxt is None or (nxt.type != "nop" and nxt.depid < 0):
        errs.append(f"{sw}: a nop must be followed by a real step with depid >= 0")


def _dep_checks(
    errs: list[str], sw: str, g: Gpu, t: Tb, st: Step, by_id: dict[int, Tb], dep_targets: set[tuple[int, int]]
) -> None:
    if st.depid == t.id:
        errs.append(f"{sw}: depends on its own tb")
    tgt = by_id.get(st.depid)
    if tgt is None:
        errs.append(f"{sw}: depid={st.depid} is not a tb of gpu {g.id}")
    elif not 0 <= st.deps < len(tgt.steps):
        errs.append(f"{sw}: deps={st.deps} is not a step of tb {st.depid}")
    else:
        dep_targets.add((st.depid, st.deps))
        if tgt.steps[st.deps].type == "nop":
            errs.append(f"{sw}: depends on a nop (tb {st.depid} step {st.deps})")
    if st.depid > MAX_DEP_TB:
        errs.append(f"{sw}: dependency target tb {st.depid} > {MAX_DEP_TB} (int8 in the executor)")


def _check_range(errs: list[str], sw: str, st: Step, cap_i: int, cap_o: int, cap_s: int) -> None:
    caps = {"i": cap_i, "o": cap_o, "s": cap_s}
    reads = st.type in ("s", "cpy", "re", "rrs", "rrc", "rrcs")
    writes = st.type in ("r", "rcs", "rrc", "rrcs", "cpy", "re")
    for used, buf, off in ((reads, st.srcbuf, st.srcoff), (writes, st.dstbuf, st.dstoff)):
        if not used or buf not in caps:
            continue
        if off < 0 or off + st.cnt > caps[buf]:
            errs.append(f"{sw}: {buf}[{off}..{off + st.cnt}) outside the buffer ({caps[buf]} chunks)")


# ---------------------------------------------------------------------- execution
# a chunk's value: the sorted input chunk ids reduced into it, None while unwritten
_Cell: TypeAlias = tuple[int, ...] | None
_BufKey: TypeAlias = tuple[int, str]  # (rank, physical buffer i/o/s)
_Conn: TypeAlias = tuple[int, int, int]  # (sender rank, receiver rank, channel)
_Event: TypeAlias = tuple[object, ...]  # ("flag", pid) | ("data", conn) | ("room", conn)


@dataclass
class _Msg:
    vals: list[_Cell]
    cnt: int
    where: str
    src: int  # the sending event: pid and time on that tb (send -> receive ordering, see _Machine.ordered)
    src_t: int


def run(
    algo: Algo,
    *,
    k: int = 1,
    inplace: bool = False,
    layout: ChunkLayout | None = None,
    max_errors: int = 100,
) -> InterpResult:
    """Execute ``algo`` with FIFO capacity ``k``; check races and the postcondition."""
    m = _Machine(algo, k, inplace, max_errors)
    m.run_worklist()
    return m.report(layout)


class _Machine:
    """One execution of an Algo: memory, FIFOs, rank-local clocks, the event log and program counters of every
    tb (a process, ``pid``), the access history for race detection and the event-driven worklist."""

    def __init__(self, algo: Algo, k: int, inplace: bool, max_errors: int) -> None:
        self.algo = algo
        self.k = k
        self.inplace = inplace
        self.max_errors = max_errors
        self.res = InterpResult()
        self.cap_i, self.cap_o = capacities(algo)
        self.gpus = sorted(algo.gpus, key=lambda g: g.id)
        self.races = 0
        self.steps_run = 0
        self.setup_memory()
        self.setup_processes()
        self.setup_access_tracking()
        self.setup_worklist()

    # ------------------------------------------------------------------ state
    def setup_memory(self) -> None:
        """Per (rank, buffer) a list of chunk values: input chunk j of rank r holds ``(r * cap_i + j,)``, output
        and scratch start unwritten. In-place runs alias one buffer into the other (``alias``: name -> (real
        buffer, base offset)) the way the executors' selection does for ``sendbuff``/``recvbuff``
        (``mscclInternalSchedulerSelectAlgo`` in msccl-executor-nccl's ``src/misc/msccl/msccl_lifecycle.cc``)."""
        algo, cap_i, cap_o = self.algo, self.cap_i, self.cap_o
        n = algo.ngpus
        c = algo.nchunksperloop
        per = c // n if n else 0
        self.mem: dict[_BufKey, list[_Cell]] = {}
        self.alias: dict[_BufKey, tuple[str, int]] = {}
        mem, alias, inplace = self.mem, self.alias, self.inplace
        for g in self.gpus:
            r = g.id
            s_cap = g.s_chunks
            if inplace and algo.coll == "allgather":
                mem[(r, "o")] = [None] * cap_o
                for j in range(cap_i):
                    mem[(r, "o")][r * per + j] = (r * cap_i + j,)
                alias[(r, "i")] = ("o", r * per)
            elif inplace and algo.coll == "reducescatter":
                mem[(r, "i")] = [(r * cap_i + j,) for j in range(cap_i)]
                alias[(r, "o")] = ("i", r * (c // n))
            elif inplace:
                mem[(r, "i")] = [(r * cap_i + j,) for j in range(cap_i)]
                alias[(r, "o")] = ("i", 0)
            else:
                mem[(r, "i")] = [(r * cap_i + j,) for j in range(cap_i)]
                mem[(r, "o")] = [None] * cap_o
            mem[(r, "s")] = [None] * s_cap

    def setup_processes(self) -> None:
        """One process per tb (in rank, tb id order) with its program counter, fused-op phase, rank-local clock and
        completed ``hasdep`` steps; the FIFOs per connection; and per real step its folded dependencies (those
        of the nops before it plus its own, as the parser gathers them)."""
        self.tbs: list[tuple[int, Tb]] = [
            (g.id, t) for g in self.gpus for t in sorted(g.tbs, key=lambda t: t.id)
        ]
        self.pid_of = {(r, t.id): i for i, (r, t) in enumerate(self.tbs)}
        np_ = len(self.tbs)
        self.pc = [0] * np_
        self.phase = [0] * np_  # 1: a fused receive-and-send step has received and waits to send
        self.pending_val: list[list[_Cell] | None] = [None] * np_
        # happens-before (see _Machine.ordered): a clock over the tbs of the own rank only, the own time,
        # the latest completed hasdep step (s, clock, time) and the event log (global sequence number and
        # cross-tb predecessors of every executed event)
        self.base = [0] * np_  # pid of the rank's tb 0: clock index = pid - base
        first: dict[int, int] = {}
        for i, (r, _t) in enumerate(self.tbs):
            self.base[i] = first.setdefault(r, i)
        width: dict[int, int] = {}
        for r, _t in self.tbs:
            width[r] = width.get(r, 0) + 1
        self.clock = [np.zeros(width[r], dtype=np.int64) for r, _t in self.tbs]
        self.now = [0] * np_
        # completed hasdep steps that can still release a wait: (s, clock, time), s strictly decreasing
        self.flags: list[list[tuple[int, np.ndarray, int]]] = [[] for _ in range(np_)]
        self.seq = 0
        self.ev_seq: list[list[int]] = [[] for _ in range(np_)]
        self.ev_pred: list[list[list[tuple[int, int]] | None]] = [[] for _ in range(np_)]
        self.pending_pred: list[list[tuple[int, int]] | None] = [None] * np_
        self.fifos: dict[_Conn, deque[_Msg]] = {}
        self.folded: list[list[list[tuple[int, int]]]] = []
        for _r, t in self.tbs:
            lst: list[list[tuple[int, int]]] = []
            acc: list[tuple[int, int]] = []
            for st in t.steps:
                if st.depid >= 0:
                    acc.append((st.depid, st.deps))
                if st.type == "nop":
                    lst.append([])
                    continue
                lst.append(acc)
                acc = []
            self.folded.append(lst)

    def setup_access_tracking(self) -> None:
        """Access history per physical buffer: last writer (pid, time) and last reader (pid, time) per chunk as
        numpy arrays; chunks read by several tbs since their last write keep the extra readers in a small dict.
        ``where_of`` names the step behind a (pid, time) for race messages."""
        self.wp: dict[_BufKey, np.ndarray] = {}
        self.wt: dict[_BufKey, np.ndarray] = {}
        self.rp: dict[_BufKey, np.ndarray] = {}
        self.rt: dict[_BufKey, np.ndarray] = {}
        self.extra_r: dict[_BufKey, dict[int, list[tuple[int, int]]]] = {}
        self.where_of: dict[tuple[int, int], str] = {}
        for kb, arr in self.mem.items():
            self.wp[kb] = np.full(len(arr), -1, dtype=np.int64)
            self.wt[kb] = np.zeros(len(arr), dtype=np.int64)
            self.rp[kb] = np.full(len(arr), -1, dtype=np.int64)
            self.rt[kb] = np.zeros(len(arr), dtype=np.int64)
            self.extra_r[kb] = {}

    def err(self, msg: str) -> None:
        if len(self.res.errors) < self.max_errors:
            self.res.errors.append(msg)

    def loc(self, r: int, b: str, off: int) -> tuple[_BufKey, int]:
        """The physical buffer and offset behind ``b[off]`` of rank ``r`` (in-place aliasing applied)."""
        if (r, b) in self.alias:
            tb_, base = self.alias[(r, b)]
            return (r, tb_), base + off
        return (r, b), off

    def getv(self, r: int, b: str, off: int, cnt: int) -> list[_Cell]:
        key_buf, base = self.loc(r, b, off)
        return self.mem[key_buf][base : base + cnt]

    def setv(self, r: int, b: str, off: int, vals: list[_Cell]) -> None:
        key_buf, base = self.loc(r, b, off)
        self.mem[key_buf][base : base + len(vals)] = vals

    # ------------------------------------------------------------------ races
    def unordered(self, pids: np.ndarray, ts: np.ndarray, pid: int) -> np.ndarray:
        """Which of the accesses (pid, time) in ``pids``/``ts`` (all by tbs of ``pid``'s rank: memory is per
        rank) do not happen before ``pid``'s current event. The rank-local clock proves most orderings; the
        rest are decided exactly by :meth:`ordered`."""
        vc = self.clock[pid]
        ok = pids >= 0
        base = self.base[pid]
        bad = ok & (pids != pid) & (vc[np.where(ok, pids - base, 0)] < ts)
        if bad.any():
            memo: dict[tuple[int, int], bool] = {}
            for j in np.flatnonzero(bad).tolist():
                key = (int(pids[j]), int(ts[j]))
                hit = memo.get(key)
                if hit is None:
                    hit = memo[key] = self.ordered(key[0], key[1], pid)
                if hit:
                    bad[j] = False
        return bad

    def ordered(self, q: int, tq: int, pid: int) -> bool:
        """Whether event (``q``, ``tq``) happens before ``pid``'s current event: a backward search over the
        event log (program order, send -> receive, released flag -> waiter), pruned by the global sequence
        number (an event that ran before (``q``, ``tq``) cannot be after it) and by the highest event already
        searched on each tb (its chain below is covered). Exact, and needed only when the rank-local clock
        cannot prove the ordering (a path through another rank, or a race)."""
        ev_seq, ev_pred = self.ev_seq, self.ev_pred
        if tq <= 0 or tq > len(ev_seq[q]):
            return False
        bound = ev_seq[q][tq - 1]
        high: dict[int, int] = {}
        stack = [(pid, self.now[pid])]
        while stack:
            x, t = stack.pop()
            if x == q:
                if t >= tq:
                    return True
                continue
            lo = high.get(x, 0)
            if t <= lo:
                continue
            high[x] = t
            seqs, preds = ev_seq[x], ev_pred[x]
            for u in range(t, lo, -1):
                if seqs[u - 1] < bound:
                    break
                pr = preds[u - 1]
                if pr:
                    for y, ty in pr:
                        if y == q:
                            if ty >= tq:
                                return True
                        elif ty > high.get(y, 0) and ev_seq[y][ty - 1] > bound:
                            stack.append((y, ty))
        return False

    def access(self, pid: int, r: int, b: str, off: int, cnt: int, write: bool, where: str) -> None:
        """Record a read or write of ``b[off..off+cnt)`` on rank ``r`` by ``pid``, reporting the first chunk
        whose previous write (for any access) or previous reads (for a write) are not ordered before it."""
        kb, base = self.loc(r, b, off)
        lo, hi = base, base + cnt
        wp, wt, rp, rt = self.wp[kb], self.wt[kb], self.rp[kb], self.rt[kb]
        now = self.now[pid]
        self.where_of[(pid, now)] = where
        w_slice = wp[lo:hi]
        bad = self.unordered(w_slice, wt[lo:hi], pid) if w_slice.max() >= 0 else None
        if bad is not None and bad.any():
            j = int(np.flatnonzero(bad)[0])
            w = self.where_of.get((int(wp[lo + j]), int(wt[lo + j])), "another tb")
            self.err(
                f"race: {where} {'writes' if write else 'reads'} rank {r} {b}[{lo + j}] written by {w} without ordering"
            )
            self.races += 1
        if write:
            r_slice = rp[lo:hi]
            bad = (
                self.unordered(r_slice, rt[lo:hi], pid)
                if r_slice.max() >= 0
                else np.zeros(hi - lo, dtype=bool)
            )
            ex = self.extra_r[kb]
            if ex:
                vc, base = self.clock[pid], self.base[pid]
                for ch in range(lo, hi):
                    for q, tq in ex.pop(ch, ()):
                        if q != pid and vc[q - base] < tq and not self.ordered(q, tq, pid):
                            bad[ch - lo] = True
            if bad.any():
                j = int(np.flatnonzero(bad)[0])
                self.err(
                    f"race: {where} overwrites rank {r} {b}[{lo + j}] while another tb may still read it"
                )
                self.races += 1
            wp[lo:hi] = pid
            wt[lo:hi] = now
            rp[lo:hi] = -1
        else:
            prev = rp[lo:hi]
            keep = (prev >= 0) & (prev != pid)
            if keep.any():
                ex = self.extra_r[kb]
                for jj in np.flatnonzero(keep).tolist():
                    ex.setdefault(lo + jj, []).append((int(prev[jj]), int(rt[lo + jj])))
            rp[lo:hi] = pid
            rt[lo:hi] = now

    # ------------------------------------------------------------------ scheduling
    def setup_worklist(self) -> None:
        """Event-driven worklist: a blocked tb waits on one event (a flag, data in a FIFO, room in a FIFO) and
        is re-queued only when that event happens. Every tb starts queued, in pid order."""
        np_ = len(self.tbs)
        self.work: deque[int] = deque(range(np_))
        self.queued = [True] * np_
        self.waiters: dict[_Event, list[int]] = {}

    def wake(self, key: _Event) -> None:
        for q2 in self.waiters.pop(key, ()):
            if not self.queued[q2]:
                self.queued[q2] = True
                self.work.append(q2)

    def wait_on(self, key: _Event, pid: int) -> None:
        self.waiters.setdefault(key, []).append(pid)

    def run_worklist(self) -> None:
        """Run queued tbs until none can progress (all done, or a deadlock for :meth:`report`)."""
        work, queued = self.work, self.queued
        while work:
            pid = work.popleft()
            queued[pid] = False
            self.advance(pid)

    def advance(self, pid: int) -> None:
        """Run tb ``pid``'s steps in program order until it blocks or finishes (nops are skipped: the parser
        folds their dependencies into the next real step)."""
        r, t = self.tbs[pid]
        pc, steps = self.pc, t.steps
        while pc[pid] < len(steps):
            st = steps[pc[pid]]
            if st.type == "nop":
                pc[pid] += 1
                continue
            if not self.ready(pid, r, t, st):
                return
            if self.execute(pid, r, t, st):
                self.complete(pid, st)

    def ready(self, pid: int, r: int, t: Tb, st: Step) -> bool:
        """Whether ``st`` (or the pending phase of a fused step) can run now; if not, register the one event
        it waits on. Checked in order: dependencies (first phase only), input data (receive kinds, first
        phase), output room under capacity K (send kinds; the second phase of a fused step)."""
        first_phase = self.phase[pid] == 0
        if first_phase and not self.dependencies_met(pid, r):
            return False
        recv_kind = st.type in RECV_TYPES
        send_kind = st.type in SEND_TYPES
        if recv_kind and first_phase:
            in_key = (t.recv, r, t.chan)
            if not self.fifos.get(in_key):
                self.wait_on(("data", in_key), pid)
                return False
        if send_kind and (not recv_kind or not first_phase):
            out_key = (r, t.send, t.chan)
            if len(self.fifos.setdefault(out_key, deque())) >= self.k:
                self.wait_on(("room", out_key), pid)
                return False
        return True

    def dependencies_met(self, pid: int, r: int) -> bool:
        """The flag rule of the interpreter kernel (``COMPUTE_FLAG`` in msccl-executor-nccl's
        ``src/device/msccl_kernel.cu``): a wait on (tb b, step t) is released once b has completed some
        ``hasdep`` step >= t. When all are released, ``pid``'s clock absorbs the releasing steps' clocks, and the
        releasing events become predecessors of ``pid``'s next event.

        The releasing step is the latest completed one with ``s`` >= t; :meth:`complete` keeps only the steps
        that can still be that (one per tb when steps are numbered in order)."""
        hits: list[tuple[np.ndarray, int, int]] = []
        flags, pid_of = self.flags, self.pid_of
        for dtb, dstep in self.folded[pid][self.pc[pid]]:
            q = pid_of.get((r, dtb))
            if q is None:
                continue
            f = next((f for f in reversed(flags[q]) if f[0] >= dstep), None)
            if f is None:
                self.wait_on(("flag", q), pid)
                return False
            hits.append((f[1], q, f[2]))
        if hits:
            vc = self.clock[pid]
            for ck, _q, _t in hits:
                np.maximum(vc, ck, out=vc)
            self.pending_pred[pid] = [(q, t) for _ck, q, t in hits]
        return True

    def tick(self, pid: int) -> None:
        """Start ``pid``'s next event: advance its own clock entry and log the event (sequence number and the
        flags absorbed since its previous event)."""
        t = self.now[pid] + 1
        self.now[pid] = t
        self.clock[pid][pid - self.base[pid]] = t
        self.seq += 1
        self.ev_seq[pid].append(self.seq)
        self.ev_pred[pid].append(self.pending_pred[pid])
        self.pending_pred[pid] = None

    # ------------------------------------------------------------------ steps
    def execute(self, pid: int, r: int, t: Tb, st: Step) -> bool:
        """Run ``st`` (its first phase only, for a fused receive-and-send step: then False, and the step stays
        current until its send has room) after advancing ``pid``'s own clock entry."""
        where = f"gpu {r} tb {t.id} step {st.s}"
        self.tick(pid)
        recv_kind = st.type in RECV_TYPES
        send_kind = st.type in SEND_TYPES
        if recv_kind and self.phase[pid] == 0:
            vals = self.receive(pid, r, t, st, where)
            if send_kind:
                self.pending_val[pid] = vals
                self.phase[pid] = 1
                self.steps_run += 1
                return False
        elif st.type == "s":
            self.push(pid, (r, t.send, t.chan), self.read_src(pid, r, st, where, "sends"), st.cnt, where)
        elif st.type == "cpy":
            vals = self.read_src(pid, r, st, where, "copies")
            self.access(pid, r, st.dstbuf, st.dstoff, st.cnt, True, where)
            self.setv(r, st.dstbuf, st.dstoff, list(vals))
        elif st.type == "re":
            self.access(pid, r, st.srcbuf, st.srcoff, st.cnt, False, where)
            self.access(pid, r, st.dstbuf, st.dstoff, st.cnt, False, where)
            out = self.reduce_vals(
                self.getv(r, st.dstbuf, st.dstoff, st.cnt), self.getv(r, st.srcbuf, st.srcoff, st.cnt), where
            )
            self.access(pid, r, st.dstbuf, st.dstoff, st.cnt, True, where)
            self.setv(r, st.dstbuf, st.dstoff, out)
        if send_kind and self.phase[pid] == 1:
            self.push(pid, (r, t.send, t.chan), self.pending_val[pid] or [], st.cnt, where)
            self.pending_val[pid] = None
            self.phase[pid] = 0
        return True

    def receive(self, pid: int, r: int, t: Tb, st: Step, where: str) -> list[_Cell]:
        """Pop the matching send (its cnt must equal ``st.cnt``), take its clock, reduce with the local source
        (``rrs``/``rrc``/``rrcs``) and store (``r``/``rcs``/``rrc``/``rrcs``); returns the received values."""
        in_key = (t.recv, r, t.chan)
        msg = self.fifos[in_key].popleft()
        self.wake(("room", in_key))
        preds = self.ev_pred[pid]
        preds[-1] = [*(preds[-1] or ()), (msg.src, msg.src_t)]
        if msg.cnt != st.cnt:
            self.err(f"{where}: receives cnt={st.cnt} but the matching send {msg.where} has cnt={msg.cnt}")
        vals = list(msg.vals[: st.cnt]) + [None] * max(0, st.cnt - msg.cnt)
        if st.type in ("rrs", "rrc", "rrcs"):
            self.access(pid, r, st.srcbuf, st.srcoff, st.cnt, False, where)
            vals = self.reduce_vals(vals, self.getv(r, st.srcbuf, st.srcoff, st.cnt), where)
        if st.type in ("r", "rcs", "rrc", "rrcs"):
            self.access(pid, r, st.dstbuf, st.dstoff, st.cnt, True, where)
            self.setv(r, st.dstbuf, st.dstoff, vals)
        return vals

    def push(self, pid: int, out_key: _Conn, vals: list[_Cell], cnt: int, where: str) -> None:
        """Append a message (naming its sending event: send -> receive ordering) to a connection FIFO."""
        self.fifos[out_key].append(_Msg(vals, cnt, where, pid, self.now[pid]))
        self.wake(("data", out_key))

    def complete(self, pid: int, st: Step) -> None:
        """Finish the current step: a ``hasdep`` step raises tb ``pid``'s flag (with its clock) and wakes its
        waiters. Earlier flags with ``s`` <= this one's can no longer be the latest that releases a wait."""
        if st.hasdep:
            fl = self.flags[pid]
            while fl and fl[-1][0] <= st.s:
                fl.pop()
            fl.append((st.s, self.clock[pid].copy(), self.now[pid]))
            self.wake(("flag", pid))
        self.pc[pid] += 1
        self.steps_run += 1

    def read_src(self, pid: int, r: int, st: Step, where: str, verb: str) -> list[_Cell]:
        """Read a step's source chunks (tracked for races), reporting uninitialised ones."""
        self.access(pid, r, st.srcbuf, st.srcoff, st.cnt, False, where)
        vals = self.getv(r, st.srcbuf, st.srcoff, st.cnt)
        for j, v in enumerate(vals):
            if v is None:
                self.err(f"{where}: {verb} uninitialised rank {r} {st.srcbuf}[{st.srcoff + j}]")
        return vals

    def reduce_vals(self, a: list[_Cell], bb: list[_Cell], where: str) -> list[_Cell]:
        """Chunk-wise reduction: the multiset union of the contributing input chunk ids."""
        out: list[_Cell] = []
        for x, y in zip(a, bb):
            if x is None or y is None:
                self.err(f"{where}: reduces an uninitialised chunk")
                out.append(())
            else:
                out.append(tuple(sorted(x + y)))
        return out

    # ------------------------------------------------------------------ outcome
    def report(self, layout: ChunkLayout | None) -> InterpResult:
        """The result: a deadlock (tbs with steps left; nothing else is checked then), else messages left in
        FIFOs, the postcondition and the race count."""
        res = self.res
        res.steps_run = self.steps_run
        stuck = [(pid, r, t) for pid, (r, t) in enumerate(self.tbs) if self.pc[pid] < len(t.steps)]
        if stuck:
            self.err(_deadlock_report(stuck, self.tbs, self.pc, self.phase, self.folded, self.pid_of, self.k))
            return res
        for key, fifo in self.fifos.items():
            if fifo:
                self.err(
                    f"connection {key[0]}->{key[1]} channel {key[2]}: {len(fifo)} message(s) sent but never received"
                )
        _postcondition(self.algo, self.mem, self.loc, self.inplace, layout, self.err, self.cap_i, self.cap_o)
        if self.races:
            res.warnings.append(f"{self.races} race(s) found")
        return res


def _deadlock_report(
    stuck: list[tuple[int, int, Tb]],
    tbs: list[tuple[int, Tb]],
    pc: list[int],
    phase: list[int],
    folded: list[list[list[tuple[int, int]]]],
    pid_of: dict[tuple[int, int], int],
    k: int,
) -> str:
    """Name a wait cycle between the stuck tbs (dependency waits, and FIFO waits on the peer tb of the
    connection), or list the first stuck tbs when they wait on finished peers."""
    g: nx.DiGraph = nx.DiGraph()
    desc = {}
    for pid, r, t in stuck:
        st = t.steps[pc[pid]]
        me = f"gpu {r} tb {t.id} step {st.s} ({st.type})"
        desc[pid] = me
        for dtb, _ds in folded[pid][pc[pid]]:
            q = pid_of.get((r, dtb))
            if q is not None:
                g.add_edge(pid, q)
        if st.type in RECV_TYPES and phase[pid] == 0:
            for q, (r2, t2) in enumerate(tbs):
                if r2 == t.recv and t2.send == r and t2.chan == t.chan:
                    g.add_edge(pid, q)
        if st.type in SEND_TYPES:
            for q, (r2, t2) in enumerate(tbs):
                if r2 == t.send and t2.recv == r and t2.chan == t.chan:
                    g.add_edge(pid, q)
    try:
        cyc = nx.find_cycle(g)
        path = " -> ".join(desc.get(u, f"pid {u}") for u, _v in cyc)
        return f"deadlock at FIFO capacity K={k}: wait cycle {path} -> {desc.get(cyc[0][0])}"
    except nx.NetworkXNoCycle:
        first = "; ".join(desc[pid] for pid, _r, _t in stuck[:5])
        return f"deadlock at FIFO capacity K={k}: {len(stuck)} tbs cannot progress (waiting on a finished peer): {first}"


def _postcondition(
    algo: Algo,
    mem: dict[_BufKey, list[_Cell]],
    loc: Callable[[int, str, int], tuple[_BufKey, int]],
    inplace: bool,
    layout: ChunkLayout | None,
    err: Callable[[str], None],
    cap_i: int,
    cap_o: int,
) -> None:
    """Check the collective's result in every rank's output (through ``loc``'s aliasing), reporting each wrong
    chunk through ``err``."""
    expected = _EXPECTED.get(algo.coll)
    if expected is None:
        err(
            f"no postcondition check for coll={algo.coll!r}; only alltoall, allgather and allreduce are interpreted"
        )
        return
    for r in range(algo.ngpus):
        kb, base = loc(r, "o", 0)
        o = mem[kb][base : base + cap_o]
        for j, want, what in expected(algo, r, layout, cap_i, cap_o):
            if o[j] != want:
                got = "never written" if o[j] is None else f"holds {o[j]}"
                err(
                    f"postcondition ({algo.coll}{', in-place' if inplace else ''}): rank {r} o[{j}] {got}; expected {what}"
                )


_Expected: TypeAlias = Iterator[tuple[int, tuple[int, ...], str]]


def _alltoall(algo: Algo, r: int, layout: ChunkLayout | None, cap_i: int, cap_o: int) -> _Expected:
    """Rank ``r``'s output: (index, the input chunk it must hold, as cells name it, and how to say it)."""
    n = algo.ngpus
    if layout is None:
        per = algo.nchunksperloop // n if n else 0
        for s in range(n):
            for p in range(per):
                yield s * per + p, (s * cap_i + r * per + p,), f"input chunk {r * per + p} of rank {s}"
        return
    for s in range(n):
        for j in range(layout.counts[s][r]):
            at_in = layout.in_off[s][r] + j
            yield layout.out_off[r][s] + j, (s * cap_i + at_in,), f"input chunk {at_in} of rank {s}"


def _allgather(algo: Algo, r: int, layout: ChunkLayout | None, cap_i: int, cap_o: int) -> _Expected:
    n = algo.ngpus
    per = algo.nchunksperloop // n if n else 0
    for q in range(n):
        for j in range(per):
            yield q * per + j, (q * cap_i + j,), f"input chunk {j} of rank {q}"


def _allreduce(algo: Algo, r: int, layout: ChunkLayout | None, cap_i: int, cap_o: int) -> _Expected:
    for j in range(cap_o):
        yield (
            j,
            tuple(sorted(q * cap_i + j for q in range(algo.ngpus))),
            f"the reduction of chunk {j} over all ranks",
        )


_EXPECTED: dict[str, Callable[[Algo, int, ChunkLayout | None, int, int], _Expected]] = {
    "alltoall": _alltoall,
    "allgather": _allgather,
    "allreduce": _allreduce,
}
