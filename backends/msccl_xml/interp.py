"""Reference interpreter of MSCCL XML (spec §3-8, §15): static rules, execution, races, postcondition.

1. **Static rules** (spec §15, collected, not first-error): contiguous tb ids, one tb per (send peer, chan) and
   per (recv peer, chan), ``chan < nchannels``, steps numbered 0..n-1, <= 64 steps per tb (nops included),
   1 <= cnt <= 71 on real steps, step kinds allowed by the tb's peers (and by the RCCL dialect), dependency
   targets in range with ``hasdep=1``, ids <= 127, nops followed by a real step with a dependency and never
   ``hasdep=1``, offsets within the buffer capacities of the collective, <= 64 tbs on RCCL, <= 32 tbs with a
   send (recv) peer per channel.
2. **Execution** at chunk granularity: every tb is a sequential process; a step runs when its dependencies
   (its own plus folded nops, flag rule of §7) are satisfied, its input FIFO is non-empty (receive kinds) and
   its output FIFO has room under capacity K (send kinds; fused ``rcs``/``rrs``/``rrcs`` pop first, then push:
   two-phase). FIFOs are per connection (sender, receiver, channel); the k-th send pairs with the k-th
   receive and their ``cnt`` must match. No progress with work left is a **deadlock**, printed as a wait
   cycle between tbs.
3. **Races** by vector clocks: happens-before = program order, send -> matching receive, ``hasdep`` step ->
   released waiter. Any two accesses to a (rank, buffer, chunk), not both reads and not ordered, are a race.
4. **Postcondition** for ``alltoall`` (or an a2acc manifest's all-to-all-v layout), ``allgather`` and
   ``allreduce`` (multisets), with in-place aliasing per spec §3. Leftover FIFO messages are errors.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

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
    """Real input/output capacity in chunks for the collective (spec §3)."""
    c, n = algo.nchunksperloop, max(algo.ngpus, 1)
    if algo.coll == "allgather":
        return c // n, c
    if algo.coll == "reducescatter":
        return c, c // n
    return c, c


def static_checks(algo: Algo, dialect: str = "nccl") -> list[str]:
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
    cap_i, cap_o = capacities(algo)
    if algo.coll == "alltoall" and algo.nchunksperloop % max(algo.ngpus, 1):
        errs.append(f"alltoall nchunksperloop={algo.nchunksperloop} is not a multiple of ngpus={algo.ngpus}")
    for g in algo.gpus:
        where = f"gpu {g.id}"
        tb_ids = [t.id for t in g.tbs]
        if sorted(tb_ids) != list(range(len(tb_ids))):
            errs.append(
                f"{where}: thread block ids {sorted(tb_ids)[:12]} must be exactly 0..{len(tb_ids) - 1}"
            )
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
        seen_send: dict[tuple[int, int], int] = {}
        seen_recv: dict[tuple[int, int], int] = {}
        per_chan_send: dict[int, int] = {}
        per_chan_recv: dict[int, int] = {}
        by_id = {t.id: t for t in g.tbs}
        dep_targets: set[tuple[int, int]] = set()
        for t in g.tbs:
            tw = f"{where} tb {t.id}"
            if t.send == g.id or t.recv == g.id:
                errs.append(f"{tw}: send/recv peer equals its own rank")
            for peer in (t.send, t.recv):
                if peer < -1 or peer >= algo.ngpus:
                    errs.append(f"{tw}: peer {peer} out of range -1..{algo.ngpus - 1}")
            if not 0 <= t.chan < algo.nchannels:
                errs.append(
                    f"{tw}: chan={t.chan} must be in 0..nchannels-1 ({algo.nchannels}); -1 is rejected"
                )
            for role, peer, seen, per_chan in (
                ("send", t.send, seen_send, per_chan_send),
                ("recv", t.recv, seen_recv, per_chan_recv),
            ):
                if peer < 0:
                    continue
                if (peer, t.chan) in seen:
                    errs.append(
                        f"{tw}: second tb with {role} peer {peer} on channel {t.chan} (also tb {seen[(peer, t.chan)]})"
                    )
                seen[(peer, t.chan)] = t.id
                per_chan[t.chan] = per_chan.get(t.chan, 0) + 1
            if len(t.steps) > MAX_STEPS:
                errs.append(f"{tw}: {len(t.steps)} steps (nops included); the executor allows {MAX_STEPS}")
            for k, st in enumerate(t.steps):
                sw = f"{tw} step {k}"
                if st.s != k:
                    errs.append(f"{sw}: s={st.s}; steps must be numbered 0,1,2,... in document order")
                if st.type not in STEP_TYPES:
                    errs.append(f"{sw}: unknown type {st.type!r}")
                    continue
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
                    if st.hasdep:
                        errs.append(
                            f"{sw}: a nop must not have hasdep=1 (nops are not executed; the flag is never written)"
                        )
                    if st.depid < 0:
                        errs.append(
                            f"{sw}: a nop with depid=-1 drops its dependency and breaks step numbering"
                        )
                    nxt = t.steps[k + 1] if k + 1 < len(t.steps) else None
                    if nxt is None or (nxt.type != "nop" and nxt.depid < 0):
                        errs.append(f"{sw}: a nop must be followed by a real step with depid >= 0")
                else:
                    if not 1 <= st.cnt <= MAX_COUNT:
                        errs.append(f"{sw}: cnt={st.cnt} must be in 1..{MAX_COUNT}")
                    _check_range(errs, sw, st, cap_i, cap_o, g.s_chunks)
                if st.depid >= 0:
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
                        errs.append(
                            f"{sw}: dependency target tb {st.depid} > {MAX_DEP_TB} (int8 in the executor)"
                        )
        for tid, sidx in sorted(dep_targets):
            tgt_step = by_id[tid].steps[sidx]
            if tgt_step.hasdep != 1:
                errs.append(
                    f"{where} tb {tid} step {sidx}: is a dependency target but hasdep=0 (the waiter hangs)"
                )
        for ch, k in per_chan_send.items():
            if k > MAX_TBS_PER_CHANNEL:
                errs.append(f"{where}: {k} tbs with a send peer on channel {ch}; limit {MAX_TBS_PER_CHANNEL}")
        for ch, k in per_chan_recv.items():
            if k > MAX_TBS_PER_CHANNEL:
                errs.append(f"{where}: {k} tbs with a recv peer on channel {ch}; limit {MAX_TBS_PER_CHANNEL}")
    return errs


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
@dataclass
class _Msg:
    vals: list[tuple[int, ...]]
    cnt: int
    clock: np.ndarray
    where: str


def run(
    algo: Algo,
    *,
    k: int = 1,
    inplace: bool = False,
    layout: ChunkLayout | None = None,
    max_errors: int = 100,
) -> InterpResult:
    """Execute ``algo`` with FIFO capacity ``k``; check races and the postcondition."""
    res = InterpResult()
    n = algo.ngpus
    cap_i, cap_o = capacities(algo)
    c = algo.nchunksperloop
    per = c // n if n else 0
    gpus = sorted(algo.gpus, key=lambda g: g.id)
    # ---- memory: dict (rank, buf) -> list of values; aliasing for in-place
    mem: dict[tuple[int, str], list[tuple[int, ...] | None]] = {}
    alias: dict[tuple[int, str], tuple[str, int]] = {}
    for g in gpus:
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

    def loc(r: int, b: str, off: int) -> tuple[tuple[int, str], int]:
        if (r, b) in alias:
            tb_, base = alias[(r, b)]
            return (r, tb_), base + off
        return (r, b), off

    # ---- processes
    tbs: list[tuple[int, Tb]] = [(g.id, t) for g in gpus for t in sorted(g.tbs, key=lambda t: t.id)]
    pid_of = {(r, t.id): i for i, (r, t) in enumerate(tbs)}
    np_ = len(tbs)
    pc = [0] * np_
    phase = [0] * np_
    pending_val: list[list[tuple[int, ...]] | None] = [None] * np_
    clock = [np.zeros(np_, dtype=np.int64) for _ in range(np_)]
    flags: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(np_)]  # completed hasdep steps: (s, clock)
    fifos: dict[tuple[int, int, int], deque[_Msg]] = {}
    # folded dependencies: for each real step, the list of (depid, deps) from preceding nops and itself
    folded: list[list[list[tuple[int, int]]]] = []
    for _r, t in tbs:
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
        folded.append(lst)
    # access tracking per physical buffer: last writer (pid, time) and last reader (pid, time) per chunk as numpy
    # arrays; chunks read by several tbs since their last write keep the extra readers in a small dict
    wp: dict[tuple[int, str], np.ndarray] = {}
    wt: dict[tuple[int, str], np.ndarray] = {}
    rp: dict[tuple[int, str], np.ndarray] = {}
    rt: dict[tuple[int, str], np.ndarray] = {}
    extra_r: dict[tuple[int, str], dict[int, list[tuple[int, int]]]] = {}
    where_of: dict[tuple[int, int], str] = {}
    for kb, arr in mem.items():
        wp[kb] = np.full(len(arr), -1, dtype=np.int64)
        wt[kb] = np.zeros(len(arr), dtype=np.int64)
        rp[kb] = np.full(len(arr), -1, dtype=np.int64)
        rt[kb] = np.zeros(len(arr), dtype=np.int64)
        extra_r[kb] = {}
    races = 0

    def err(msg: str) -> None:
        if len(res.errors) < max_errors:
            res.errors.append(msg)

    def unordered(pids: np.ndarray, ts: np.ndarray, pid: int) -> np.ndarray:
        vc = clock[pid]
        ok = pids >= 0
        return ok & (pids != pid) & (vc[np.where(ok, pids, 0)] < ts)

    def access(pid: int, r: int, b: str, off: int, cnt: int, write: bool, where: str) -> None:
        nonlocal races
        kb, base = loc(r, b, off)
        lo, hi = base, base + cnt
        now = int(clock[pid][pid])
        where_of[(pid, now)] = where
        w_slice = wp[kb][lo:hi]
        bad = unordered(w_slice, wt[kb][lo:hi], pid) if w_slice.max() >= 0 else None
        if bad is not None and bad.any():
            j = int(np.flatnonzero(bad)[0])
            w = where_of.get((int(wp[kb][lo + j]), int(wt[kb][lo + j])), "another tb")
            err(
                f"race: {where} {'writes' if write else 'reads'} rank {r} {b}[{lo + j}] written by {w} without ordering"
            )
            races += 1
        if write:
            r_slice = rp[kb][lo:hi]
            bad = (
                unordered(r_slice, rt[kb][lo:hi], pid)
                if r_slice.max() >= 0
                else np.zeros(hi - lo, dtype=bool)
            )
            ex = extra_r[kb]
            if ex:
                for ch in range(lo, hi):
                    for q, tq in ex.pop(ch, ()):
                        if q != pid and clock[pid][q] < tq:
                            bad[ch - lo] = True
            if bad.any():
                j = int(np.flatnonzero(bad)[0])
                err(f"race: {where} overwrites rank {r} {b}[{lo + j}] while another tb may still read it")
                races += 1
            wp[kb][lo:hi] = pid
            wt[kb][lo:hi] = now
            rp[kb][lo:hi] = -1
        else:
            prev = rp[kb][lo:hi]
            keep = (prev >= 0) & (prev != pid)
            if keep.any():
                ex = extra_r[kb]
                for jj in np.flatnonzero(keep).tolist():
                    ex.setdefault(lo + jj, []).append((int(prev[jj]), int(rt[kb][lo + jj])))
            rp[kb][lo:hi] = pid
            rt[kb][lo:hi] = now

    def getv(r: int, b: str, off: int, cnt: int) -> list[tuple[int, ...] | None]:
        key_buf, base = loc(r, b, off)
        arr = mem[key_buf]
        return arr[base : base + cnt]

    def setv(r: int, b: str, off: int, vals: list[tuple[int, ...] | None]) -> None:
        key_buf, base = loc(r, b, off)
        mem[key_buf][base : base + len(vals)] = vals

    def read_src(pid: int, r: int, st: Step, where: str, verb: str) -> list[tuple[int, ...] | None]:
        """Read a step's source chunks (tracked for races), reporting uninitialised ones."""
        access(pid, r, st.srcbuf, st.srcoff, st.cnt, False, where)
        vals = getv(r, st.srcbuf, st.srcoff, st.cnt)
        for j, v in enumerate(vals):
            if v is None:
                err(f"{where}: {verb} uninitialised rank {r} {st.srcbuf}[{st.srcoff + j}]")
        return vals

    def red(
        a: list[tuple[int, ...] | None], bb: list[tuple[int, ...] | None], where: str
    ) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []
        for x, y in zip(a, bb):
            if x is None or y is None:
                err(f"{where}: reduces an uninitialised chunk")
                out.append(())
            else:
                out.append(tuple(sorted(x + y)))
        return out

    steps_run = 0
    # event-driven worklist: a blocked tb waits on one event (a flag, data in a FIFO, room in a FIFO) and is
    # re-queued only when that event happens
    work: deque[int] = deque(range(np_))
    queued = [True] * np_
    waiters: dict[tuple[object, ...], list[int]] = {}

    def wake(key: tuple[object, ...]) -> None:
        for q2 in waiters.pop(key, ()):
            if not queued[q2]:
                queued[q2] = True
                work.append(q2)

    def wait_on(key: tuple[object, ...], pid_: int) -> None:
        waiters.setdefault(key, []).append(pid_)

    while work:
        pid = work.popleft()
        queued[pid] = False
        r, t = tbs[pid]
        while pc[pid] < len(t.steps):
            st = t.steps[pc[pid]]
            if st.type == "nop":
                pc[pid] += 1
                continue
            where = f"gpu {r} tb {t.id} step {st.s}"
            # dependencies (flag rule): tb b completed some hasdep step >= deps
            ok = True
            for dtb, dstep in folded[pid][pc[pid]] if phase[pid] == 0 else ():
                q = pid_of.get((r, dtb))
                if q is None:
                    continue
                hit = next(((s_, ck) for s_, ck in reversed(flags[q]) if s_ >= dstep), None)
                if hit is None:
                    ok = False
                    wait_on(("flag", q), pid)
                    break
            if not ok:
                break
            if phase[pid] == 0:
                for dtb, dstep in folded[pid][pc[pid]]:
                    q = pid_of.get((r, dtb))
                    if q is None:
                        continue
                    hit = next(((s_, ck) for s_, ck in reversed(flags[q]) if s_ >= dstep), None)
                    if hit is not None:
                        np.maximum(clock[pid], hit[1], out=clock[pid])
            recv_kind = st.type in RECV_TYPES
            send_kind = st.type in SEND_TYPES
            in_key = (t.recv, r, t.chan)
            out_key = (r, t.send, t.chan)
            if recv_kind and phase[pid] == 0:
                q_in = fifos.get(in_key)
                if not q_in:
                    wait_on(("data", in_key), pid)
                    break
            if send_kind and (not recv_kind or phase[pid] == 1):
                q_out = fifos.setdefault(out_key, deque())
                if len(q_out) >= k:
                    wait_on(("room", out_key), pid)
                    break
            # ---- execute (or the first phase of a fused op)
            clock[pid][pid] += 1
            if recv_kind and phase[pid] == 0:
                msg = fifos[in_key].popleft()
                wake(("room", in_key))
                np.maximum(clock[pid], msg.clock, out=clock[pid])
                if msg.cnt != st.cnt:
                    err(f"{where}: receives cnt={st.cnt} but the matching send {msg.where} has cnt={msg.cnt}")
                vals = list(msg.vals[: st.cnt]) + [None] * max(0, st.cnt - msg.cnt)
                if st.type in ("rrs", "rrc", "rrcs"):
                    access(pid, r, st.srcbuf, st.srcoff, st.cnt, False, where)
                    vals = red(vals, getv(r, st.srcbuf, st.srcoff, st.cnt), where)  # type: ignore[assignment]
                if st.type in ("r", "rcs", "rrc", "rrcs"):
                    access(pid, r, st.dstbuf, st.dstoff, st.cnt, True, where)
                    setv(r, st.dstbuf, st.dstoff, vals)
                if send_kind:
                    pending_val[pid] = vals  # type: ignore[assignment]
                    phase[pid] = 1
                    steps_run += 1
                    continue  # second phase: push when there is room
            elif st.type == "s":
                vals2 = read_src(pid, r, st, where, "sends")
                fifos[out_key].append(_Msg(vals2, st.cnt, clock[pid].copy(), where))  # type: ignore[arg-type]
                wake(("data", out_key))
            elif st.type == "cpy":
                vals3 = read_src(pid, r, st, where, "copies")
                access(pid, r, st.dstbuf, st.dstoff, st.cnt, True, where)
                setv(r, st.dstbuf, st.dstoff, list(vals3))
            elif st.type == "re":
                access(pid, r, st.srcbuf, st.srcoff, st.cnt, False, where)
                access(pid, r, st.dstbuf, st.dstoff, st.cnt, False, where)
                out = red(getv(r, st.dstbuf, st.dstoff, st.cnt), getv(r, st.srcbuf, st.srcoff, st.cnt), where)
                access(pid, r, st.dstbuf, st.dstoff, st.cnt, True, where)
                setv(r, st.dstbuf, st.dstoff, out)  # type: ignore[arg-type]
            if send_kind and phase[pid] == 1:
                fifos[out_key].append(_Msg(pending_val[pid] or [], st.cnt, clock[pid].copy(), where))
                wake(("data", out_key))
                pending_val[pid] = None
                phase[pid] = 0
            # ---- complete
            if st.hasdep:
                flags[pid].append((st.s, clock[pid].copy()))
                wake(("flag", pid))
            pc[pid] += 1
            steps_run += 1
    res.steps_run = steps_run
    stuck = [(pid, r, t) for pid, (r, t) in enumerate(tbs) if pc[pid] < len(t.steps)]
    if stuck:
        err(_deadlock_report(stuck, tbs, pc, phase, folded, pid_of, fifos, k))
        return res
    for key, fifo in fifos.items():
        if fifo:
            err(
                f"connection {key[0]}->{key[1]} channel {key[2]}: {len(fifo)} message(s) sent but never received"
            )
    _postcondition(algo, mem, loc, inplace, layout, err, cap_i, cap_o)
    if races:
        res.warnings.append(f"{races} race(s) found")
    return res


def _deadlock_report(stuck, tbs, pc, phase, folded, pid_of, fifos, k) -> str:  # type: ignore[no-untyped-def]
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


def _postcondition(algo, mem, loc, inplace, layout, err, cap_i, cap_o) -> None:  # type: ignore[no-untyped-def]
    n = algo.ngpus
    c = algo.nchunksperloop
    per = c // n if n else 0

    def out_of(r: int) -> list[tuple[int, ...] | None]:
        kb, base = loc(r, "o", 0)
        return mem[kb][base : base + cap_o]

    def report(r: int, j: int, got: object, want: object) -> None:
        what = "never written" if got is None else f"holds {got}"
        err(
            f"postcondition ({algo.coll}{', in-place' if inplace else ''}): rank {r} o[{j}] {what}; expected {want}"
        )

    if algo.coll == "alltoall":
        for r in range(n):
            o = out_of(r)
            if layout is None:
                for s in range(n):
                    for p in range(per):
                        want = (s * cap_i + r * per + p,)
                        if o[s * per + p] != want:
                            report(r, s * per + p, o[s * per + p], f"input chunk {r * per + p} of rank {s}")
            else:
                for s in range(n):
                    cnt = layout.counts[s][r]
                    for j in range(cnt):
                        want = (s * cap_i + layout.in_off[s][r] + j,)
                        at = layout.out_off[r][s] + j
                        if o[at] != want:
                            report(r, at, o[at], f"input chunk {layout.in_off[s][r] + j} of rank {s}")
    elif algo.coll == "allgather":
        for r in range(n):
            o = out_of(r)
            for q in range(n):
                for j in range(per):
                    want = (q * cap_i + j,)
                    if o[q * per + j] != want:
                        report(r, q * per + j, o[q * per + j], f"input chunk {j} of rank {q}")
    elif algo.coll == "allreduce":
        for r in range(n):
            o = out_of(r)
            for j in range(cap_o):
                want = tuple(sorted(q * cap_i + j for q in range(n)))
                if o[j] != want:
                    report(r, j, o[j], f"the reduction of chunk {j} over all ranks")
    else:
        err(
            f"no postcondition check for coll={algo.coll!r}; only alltoall, allgather and allreduce are interpreted"
        )
