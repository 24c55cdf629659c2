"""The machine of the MSCCL++ interpreter: back-to-back launches of every rank, each rank on its own.

A launch of a rank starts when its previous one finished (stream order), independently of the others. Thread
blocks run their operations in order (pipelines unrolled into iterations); ``wait`` takes a ticket on the
channel's shared expected counter and blocks until that many signals arrived; semaphores count; ``barrier``
generations; LL packets carry the launch's flag (1, 2, ...) and readers spin until it matches; port-channel
``put`` and ``signal`` go through a per-rank proxy in FIFO order per channel, so a port put completes at some
later time, before the next signal on its channel. Channel counters, semaphores, scratch and flags persist
across launches. No progress with work left is a **deadlock**, reported per stuck thread block. Every access
goes through :mod:`.races`; the postcondition is checked at the end of every launch of every rank.

Written from microsoft/mscclpp ``src/core/executor/executor.cc``, ``src/core/include/execution_kernel.hpp``,
``include/mscclpp/semaphore_device.hpp`` and ``include/mscclpp/packet_device.hpp``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from a2acc.backends.mscclpp.interp.load import (
    DATA_OPS,
    NOT_MODELLED,
    InterpResult,
    Sizes,
    _flatten,
    _remote,
    _tb_tables,
)
from a2acc.backends.mscclpp.interp.races import Cells, HappensBefore, Snap
from a2acc.backends.mscclpp.model import MAX_PIPELINE_ITERATIONS, BufRef, Op, Plan, ThreadBlock
from a2acc.ir.layout import ChunkLayout

Ref = tuple[int, str, int, int]  # (rank, buffer, byte offset, byte length) of a reference in one step
MAX_INTERP_CELLS = 1 << 24  # granules per rank and buffer the interpreter allocates at most
MAX_INTERP_STEPS = 5_000_000
MAX_INTERP_AGENTS = 6000  # thread blocks + proxies + hosts: two dense int32 clock matrices of this side


class _Chan:
    """One channel end (rank, type, global id): the signals that arrived (each with the signaller's clocks:
    data, fenced-at-launch-start, control), the shared expected counter, and the prefix join of consumed ones."""

    __slots__ = ("consumed", "cum", "cumc", "cumf", "expected", "inbound", "pending")

    def __init__(self, nagents: int) -> None:
        self.inbound = 0
        self.expected = 0
        self.pending: deque[Snap] = deque()
        self.consumed = 0
        self.cum = np.zeros(nagents, np.int32)
        self.cumf = np.zeros(nagents, np.int32)
        self.cumc = np.zeros(nagents, np.int32)

    def upto(self, m: int) -> None:
        while self.consumed < m and self.pending:
            vd, vf, vc = self.pending.popleft()
            if vd is not None:
                np.maximum(self.cum, vd, out=self.cum)
            np.maximum(self.cumf, vf, out=self.cumf)
            np.maximum(self.cumc, vc, out=self.cumc)
            self.consumed += 1


class _Sem:
    """A device semaphore: its value, and the releases as a signal sequence (the k-th acquire joins releases
    1..k, the part of the happens-before every schedule guarantees)."""

    __slots__ = ("chan", "value")

    def __init__(self, value: int, nagents: int) -> None:
        self.value = value
        self.chan = _Chan(nagents)


@dataclass
class _Step:
    op: Op
    path: str
    off: int  # pipeline iteration offset (bytes)
    unit: int  # pipeline unit (bytes); 0 outside pipelines
    what: str = ""  # "rank r tb t path (name)", for messages
    cache: Any = None  # the step's resolved channels and byte ranges (the same in every launch)


class _Machine:
    def __init__(
        self,
        plan: Plan,
        sizes: Sizes,
        launches: int,
        layout: ChunkLayout | None,
        max_errors: int,
        seed: int,
    ) -> None:
        self.plan = plan
        self.sizes = sizes
        self.launches = launches
        self.layout = layout
        self.max_errors = max_errors
        self.res = InterpResult()
        self.rng = np.random.default_rng(seed)
        self.n = len(plan.gpus)
        g0 = math.gcd(*sizes.chunk) if sizes.chunk else plan.buffer_alignment
        units = [
            o.iter_context[0] for g in plan.gpus for tb in g.threadblocks for o in tb.ops if o.iter_context
        ]
        grain = math.gcd(g0, *units) if units else g0
        if any(
            o.tbg is not None for g in plan.gpus for tb in g.threadblocks for _p, o, _n in _flatten(tb.ops)
        ):
            grain = math.gcd(grain, plan.buffer_alignment)
        self.grain = grain
        self.steps = 0
        self.setup_agents()
        self.setup_memory()

    # ------------------------------------------------------------------ setup
    def err(self, msg: str) -> None:
        if len(self.res.errors) < self.max_errors:
            self.res.errors.append(msg)

    def setup_agents(self) -> None:
        plan = self.plan
        self.tbs: list[tuple[int, int]] = []
        self.steps_of: list[list[_Step]] = []
        self.tables: list[tuple[dict[str, list[int]], dict[str, list[int]]]] = []
        for r, g in enumerate(plan.gpus):
            for k, tb in enumerate(g.threadblocks):
                self.tbs.append((r, k))
                self.tables.append(_tb_tables(g, tb))
                self.steps_of.append(self.unroll(r, tb))
        self.ntb = len(self.tbs)
        self.first_pid = [0] * (self.n + 1)
        for r in range(self.n):
            self.first_pid[r + 1] = self.first_pid[r] + len(plan.gpus[r].threadblocks)
        # agents: thread blocks, then one proxy per rank (its port-channel FIFOs), then one host per rank
        self.proxy0 = self.ntb
        self.host0 = self.ntb + self.n
        na = self.ntb + 2 * self.n
        self.na = na
        self.hb = HappensBefore(na, self.grain, self.agent_name, self.err)
        self.pc = [0] * self.ntb
        self.launch_of = [0] * self.ntb
        self.done_in_launch = [0] * self.n
        self.rank_launch = [0] * self.n
        self.state: list[Any] = [None] * self.ntb  # per-op progress (tickets, acquired semaphores)
        # channel ends and pairing
        self.chans: dict[tuple[int, str, int], _Chan] = {}
        self.pair: dict[tuple[int, str, int], tuple[int, str, int] | None] = {}
        for t in ("memory", "port"):
            occ: dict[tuple[int, int], list[int]] = {}
            for r, g in enumerate(plan.gpus):
                for gid, p in enumerate(g.peers(t)):
                    occ.setdefault((r, p), []).append(gid)
                    self.chans[(r, t, gid)] = _Chan(na)
            for (r, p), gids in occ.items():
                back = occ.get((p, r), [])
                for j, gid in enumerate(gids):
                    self.pair[(r, t, gid)] = (p, t, back[j]) if j < len(back) else None
        self.sems: dict[tuple[int, int], _Sem] = {}
        for r, g in enumerate(plan.gpus):
            for s, v in enumerate(g.semaphores):
                self.sems[(r, s)] = _Sem(v, na)
        self.barriers: dict[tuple[int, int], list[Any]] = {}
        self.fifo: list[deque[tuple[Any, ...]]] = [deque() for _ in range(self.n)]
        self.proxy_done = [0] * self.n  # items the proxy of rank r completed
        self.proxy_issued = [0] * self.n
        self.snaps: list[Snap] = []
        self.waiting: dict[tuple[Any, ...], list[int]] = {}
        self.fence: list[npt.NDArray[np.int32]] = [np.zeros(na, np.int32) for _ in range(self.n)]

    def unroll(self, r: int, tb: ThreadBlock) -> list[_Step]:
        cb = self.sizes.chunk[r]
        out: list[_Step] = []
        for i, o in enumerate(tb.ops):
            if o.iter_context is None:
                out.append(_Step(o, f"ops[{i}]", 0, 0, f"rank {r} tb {tb.id} ops[{i}] ({o.name})"))
                continue
            unit, nch = o.iter_context
            it = -(-nch * cb // unit) if unit else 0
            for j in range(min(it, MAX_PIPELINE_ITERATIONS)):
                for m, inner in enumerate(o.ops):
                    path = f"ops[{i}].ops[{m}]"
                    out.append(
                        _Step(inner, path, j * unit, unit, f"rank {r} tb {tb.id} {path} ({inner.name})")
                    )
        return out

    def setup_memory(self) -> None:
        plan, sz, gr = self.plan, self.sizes, self.grain
        self.mem: dict[tuple[int, str], Cells] = {}
        self.alias: dict[tuple[int, str], tuple[str, int]] = {}
        ll = plan.protocol == "LL"
        for r, g in enumerate(plan.gpus):
            ib, ob = sz.input_bytes[r], sz.output_bytes[r]
            cells_i, cells_o = ib // gr, ob // gr
            scr_bytes = (
                g.scratch_chunks
                * sz.chunk[r]
                * (2 if ll else 1)
                * (2 if plan.use_double_scratch_buffer else 1)
            )
            if plan.inplace and plan.collective == "allgather":
                self.mem[(r, "o")] = Cells(cells_o, self.rng, False)
                self.alias[(r, "i")] = ("o", r * ib)
            elif plan.inplace and plan.collective == "reducescatter":
                self.mem[(r, "i")] = Cells(cells_i, self.rng, False)
                self.alias[(r, "o")] = ("i", r * ob)
            elif plan.inplace:
                self.mem[(r, "i")] = Cells(max(cells_i, cells_o), self.rng, False)
                self.alias[(r, "o")] = ("i", 0)
            else:
                self.mem[(r, "i")] = Cells(cells_i, self.rng, False)
                self.mem[(r, "o")] = Cells(cells_o, self.rng, False)
            self.mem[(r, "s")] = Cells(max(scr_bytes // gr, 0), self.rng, True)
        self.inputs: list[list[npt.NDArray[np.uint64]]] = []

    # ------------------------------------------------------------------ addresses
    def phys(self, r: int, buf: str, byte_off: int) -> tuple[Cells, int]:
        if (r, buf) in self.alias:
            real, base = self.alias[(r, buf)]
            return self.mem[(r, real)], (base + byte_off)
        return self.mem[(r, buf)], byte_off

    def half(self, r: int, launch: int) -> int:
        if not self.plan.use_double_scratch_buffer:
            return 0
        return (len(self.mem[(r, "s")].val) * self.grain) // 2 if (launch + 1) % 2 == 0 else 0

    def rng_of(
        self, r: int, step: _Step, op: Op, ref: BufRef, pid: int, tbg_j: int, tbg_m: int
    ) -> Ref | None:
        """(rank, buffer, byte offset, byte length) of a reference in this step (pipeline sub-range and
        thread-block-group share applied)."""
        g = self.plan.gpus[r]
        cb = self.sizes.chunk[r]
        if ref.kind == "remote":
            rank, buf = _remote(g, self.tables[pid][1], op.channel_type or "none", ref)
            if rank < 0:
                return None
        else:
            rank, buf = r, ref.type
        off, ln = ref.index * cb, ref.size * cb
        if tbg_m > 1:
            a = self.plan.buffer_alignment
            nel = ln // a
            lo = (tbg_j * (nel // tbg_m) + min(tbg_j, nel % tbg_m)) * a
            hi = ((tbg_j + 1) * (nel // tbg_m) + min(tbg_j + 1, nel % tbg_m)) * a
            off, ln = off + lo, hi - lo
        if step.unit:
            if step.off >= ln:
                self.err(
                    f"rank {r} {step.path}: {op.name} covers {ln} bytes but the pipeline iterates to offset {step.off}: "
                    "the kernel's unsigned size arithmetic wraps (nested ops need size == num_chunks)"
                )
                return None
            off, ln = off + step.off, min(ln - step.off, step.unit)
        return rank, buf, off, ln

    def access(
        self,
        agent: int,
        launch: int,
        r: int,
        buf: str,
        byte_off: int,
        nbytes: int,
        write: bool,
        what: str,
        phys: bool = False,
    ) -> tuple[Cells, int, int]:
        """Record an access (the race checks of :mod:`.races`); returns the buffer and its cell range."""
        if phys:
            b, base = self.mem[(r, "s")], byte_off
        else:
            b, base = self.phys(r, buf, byte_off)
        lo, hi = base // self.grain, (base + nbytes) // self.grain
        if lo < 0 or hi > len(b.val) or base % self.grain or nbytes % self.grain:
            self.err(
                f"{what}: rank {r} {buf} bytes [{base}, {base + nbytes}) outside the buffer or misaligned"
            )
            return b, 0, 0
        self.hb.record(b, lo, hi, agent, launch, r, buf, write, what)
        return b, lo, hi

    def agent_name(self, a: int) -> str:
        if a < self.ntb:
            r, k = self.tbs[a]
            return f"rank {r} tb {k}"
        if a < self.host0:
            return f"the port proxy of rank {a - self.proxy0}"
        return f"the caller (host) of rank {a - self.host0}"

    # ------------------------------------------------------------------ values
    def read_cells(self, b: Cells, lo: int, hi: int) -> npt.NDArray[np.uint64]:
        return b.val[lo:hi].copy()

    def write_cells(self, b: Cells, lo: int, hi: int, vals: npt.NDArray[np.uint64]) -> None:
        b.val[lo:hi] = vals
        if len(b.pflag):  # data over packet space invalidates those packets
            b.pflag[lo // 2 : (hi + 1) // 2] = 0

    # ------------------------------------------------------------------ run
    def run(self) -> InterpResult:
        self.work: deque[int] = deque()
        self.queued = [False] * (self.ntb + self.n)
        self.finished_all = [False] * self.n
        for r in range(self.n):
            self.host_write_inputs(r, 0)
            self.start_launch(r, 0)
        while self.work:
            a = self.work.popleft()
            self.queued[a] = False
            if a < self.ntb:
                self.advance(a)
            else:
                self.run_proxy(a - self.ntb)
            if self.steps > MAX_INTERP_STEPS:
                self.err(f"stopped after {MAX_INTERP_STEPS} steps")
                break
        self.final_report()
        self.res.steps = self.steps
        self.res.launches = self.launches
        return self.res

    def queue(self, a: int) -> None:
        if not self.queued[a]:
            self.queued[a] = True
            self.work.append(a)

    def wake(self, key: tuple[Any, ...]) -> None:
        for a in self.waiting.pop(key, ()):
            self.queue(a)

    def block(self, key: tuple[Any, ...], pid: int) -> None:
        self.waiting.setdefault(key, []).append(pid)

    def host_write_inputs(self, r: int, launch: int) -> None:
        h = self.host0 + r
        ib = self.sizes.input_bytes[r]
        while len(self.inputs) <= launch:
            self.inputs.append([np.zeros(0, np.uint64)] * self.n)
        vals = self.rng.integers(0, 1 << 63, size=ib // self.grain, dtype=np.uint64)
        self.inputs[launch][r] = vals
        if ib:
            b, lo, hi = self.access(
                h, launch, r, "i", 0, ib, True, f"the caller of rank {r} writing its input"
            )
            b.val[lo:hi] = vals
        self.hb.tick(h)

    def start_launch(self, r: int, launch: int) -> None:
        h = self.host0 + r
        self.rank_launch[r] = launch
        self.fence[r] = self.hb.vc[h].copy()  # a kernel boundary: everything before it is globally visible
        self.done_in_launch[r] = 0
        first, last = self.first_pid[r], self.first_pid[r + 1]
        for pid in range(first, last):
            self.pc[pid] = 0
            self.launch_of[pid] = launch
            self.state[pid] = None
            self.hb.join(pid, self.hb.vc[h], self.hb.vcc[h])
            self.hb.tick(pid)
            self.queue(pid)
        if first == last:
            self.end_launch(r)

    def end_launch(self, r: int) -> None:
        launch = self.rank_launch[r]
        h = self.host0 + r
        for pid in range(self.first_pid[r], self.first_pid[r + 1]):
            self.hb.join(h, self.hb.vc[pid], self.hb.vcc[pid])
        self.hb.tick(h)
        self.check_post(r, launch)
        if launch + 1 < self.launches:
            self.host_write_inputs(r, launch + 1)
            self.start_launch(r, launch + 1)
        else:
            self.finished_all[r] = True

    def advance(self, pid: int) -> None:
        steps = self.steps_of[pid]
        r = self.tbs[pid][0]
        while self.pc[pid] < len(steps):
            st = steps[self.pc[pid]]
            if not self.execute(pid, r, st):
                return
            self.steps += 1
            self.state[pid] = None
            self.pc[pid] += 1
            self.hb.tick(pid)
        self.done_in_launch[r] += 1
        self.pc[pid] = len(steps) + 1  # finished (distinct from "at the end, blocked")
        if self.done_in_launch[r] == self.first_pid[r + 1] - self.first_pid[r]:
            self.end_launch(r)

    def resolve_chan(self, pid: int, ct: str, local: int) -> tuple[int, str, int] | None:
        r = self.tbs[pid][0]
        ids = self.tables[pid][0].get(ct, [])
        if local >= len(ids):
            return None
        return (r, ct, ids[local])

    # ------------------------------------------------------------------ one operation
    def execute(self, pid: int, r: int, st: _Step) -> bool:
        """Run one step of thread block ``pid``; False when it blocks (it is woken when that may change)."""
        name = st.op.name
        ct = st.op.channel_type or "none"
        if name in ("nop", "flush"):
            return True
        if name in ("signal", "rlxsignal"):
            return self.do_signal(pid, r, st, ct)
        if name in ("wait", "rlxwait"):
            return self.do_wait(pid, st, ct)
        if name == "sem_release":
            return self.do_release(pid, r, st)
        if name == "sem_acquire":
            return self.do_acquire(pid, r, st)
        if name == "barrier":
            return self.do_barrier(pid, r, st)
        if name in ("put", "pws", "pwsf") and ct == "port":
            return self.do_port_put(pid, r, st)
        if name in DATA_OPS or name in NOT_MODELLED:
            return self.data_op(pid, r, st, self.launch_of[pid], st.what)
        return True

    def do_signal(self, pid: int, r: int, st: _Step, ct: str) -> bool:
        op = st.op
        if st.cache is None:
            st.cache = [k for c in op.channel_ids or () if (k := self.resolve_chan(pid, ct, c)) is not None]
        for key in st.cache:
            if ct == "port":
                self.enqueue(pid, r, ("signal", key))
            elif op.name == "signal":
                self.deliver_signal(key, self.hb.snap(pid))
            else:  # relaxed: orders control; data only as far as the launch boundary fenced it
                self.deliver_signal(key, (None, self.fence[r], self.hb.vcc[pid].copy()))
        return True

    def do_wait(self, pid: int, st: _Step, ct: str) -> bool:
        """Take a ticket on every listed channel (once), block until each has that many signals, then join
        the signals counted up to the ticket."""
        op = st.op
        if st.cache is None:
            st.cache = [self.chans[k] for c in op.channel_ids or () if (k := self.resolve_chan(pid, ct, c))]
        ends: list[_Chan] = st.cache
        tickets = self.state[pid]
        if tickets is None:
            tickets = self.state[pid] = []
            for e in ends:
                e.expected += 1
                tickets.append(e.expected)
        for e, tk in zip(ends, tickets, strict=True):
            if e.inbound < tk:
                self.block(("ch", id(e)), pid)
                self.stuck_why = ("wait", st, tk, e.inbound)
                return False
        vc, vcc = self.hb.vc[pid], self.hb.vcc[pid]
        for e, tk in zip(ends, tickets, strict=True):
            e.upto(tk)
            np.maximum(vc, e.cumf, out=vc)
            if op.name == "wait":  # an acquire: also the data its release sequence published
                np.maximum(vc, e.cum, out=vc)
            np.maximum(vcc, e.cumc, out=vcc)
        return True

    def do_release(self, pid: int, r: int, st: _Step) -> bool:
        for s in st.op.semaphore_ids or ():
            sem = self.sems.get((r, s))
            if sem is None:
                continue
            sem.value += 1
            sem.chan.inbound += 1
            sem.chan.pending.append(self.hb.snap(pid))
            self.wake(("sem", r, s))
        return True

    def do_acquire(self, pid: int, r: int, st: _Step) -> bool:
        ids = list(st.op.semaphore_ids or ())
        got = self.state[pid] if self.state[pid] is not None else set()
        for j, s in enumerate(ids):
            if j in got:
                continue
            sem = self.sems.get((r, s))
            if sem is None:
                got.add(j)
                continue
            if sem.value <= 0:
                self.state[pid] = got
                self.block(("sem", r, s), pid)
                self.stuck_why = ("sem", st, s, r)
                return False
            sem.value -= 1
            sem.chan.expected += 1
            sem.chan.upto(sem.chan.expected)
            self.hb.join(pid, sem.chan.cum, sem.chan.cumc)
            got.add(j)
        return True

    def do_barrier(self, pid: int, r: int, st: _Step) -> bool:
        op = st.op
        bkey = (r, op.barrier_id or 0)
        bar = self.barriers.setdefault(bkey, [0, set(), np.zeros(self.na, np.int32), None])
        if self.state[pid] is None:
            gen = bar[0]
            bar[1].add(pid)
            np.maximum(bar[2], self.hb.vc[pid], out=bar[2])
            self.state[pid] = gen
            if len(bar[1]) >= (op.num_threadblocks or 1):
                bar[3] = (gen, bar[2].copy())
                bar[0] += 1
                bar[1] = set()
                bar[2] = np.zeros(self.na, np.int32)
                self.wake(("bar", bkey))
        gen = self.state[pid]
        if bar[3] is None or bar[3][0] < gen:
            self.block(("bar", bkey), pid)
            return False
        self.hb.join(pid, bar[3][1], bar[3][1])
        return True

    def do_port_put(self, pid: int, r: int, st: _Step) -> bool:
        """Queue the puts (and signals, for pws/pwsf) on the rank's proxy; pwsf also waits for completion."""
        op, name = st.op, st.op.name
        if self.state[pid] is None:
            items = []
            for i, (sref, dref) in enumerate(zip(op.src or (), op.dst or (), strict=False)):
                cid = (op.channel_ids or ())[i] if i < len(op.channel_ids or ()) else 0
                ckey = self.resolve_chan(pid, "port", cid)
                a = self.rng_of(r, st, op, sref, pid, *self.tbg(op))
                b = self.rng_of(r, st, op, dref, pid, *self.tbg(op))
                if ckey is None or a is None or b is None:
                    continue
                items.append(self.enqueue(pid, r, ("put", ckey, a, b, self.launch_of[pid], st.what)))
                if name in ("pws", "pwsf"):
                    items.append(self.enqueue(pid, r, ("signal", ckey)))
            self.state[pid] = max(items, default=0)
        if name == "pwsf" and self.proxy_done[r] < self.state[pid]:
            self.block(("flush", r), pid)
            self.stuck_why = ("pwsf", st)
            return False
        if name == "pwsf":
            p = self.proxy0 + r
            self.hb.join(pid, self.hb.vc[p], self.hb.vcc[p])
        return True

    def tbg(self, op: Op) -> tuple[int, int]:
        return op.tbg if op.tbg is not None else (0, 1)

    def enqueue(self, pid: int, r: int, item: tuple[Any, ...]) -> int:
        self.fifo[r].append((*item, self.hb.snap(pid)))
        self.proxy_issued[r] += 1
        self.queue(self.ntb + r)
        return self.proxy_issued[r]

    def deliver_signal(self, key: tuple[int, str, int], snap: Snap) -> None:
        peer = self.pair.get(key)
        if peer is None:
            self.lost_signals += 1
            return
        e = self.chans[peer]
        e.inbound += 1
        e.pending.append(snap)
        self.wake(("ch", id(e)))

    lost_signals = 0
    stuck_why: tuple[Any, ...] = ()

    def why_stuck(self) -> str:
        w = self.stuck_why
        if not w:
            return ""
        if w[0] == "wait":
            return f"{w[1].what} waits for signal {w[2]} on its channel, {w[3]} arrived"
        if w[0] == "sem":
            return f"{w[1].what} acquires semaphore {w[2]} of rank {w[3]}, which is not released"
        if w[0] == "pwsf":
            return f"{w[1].what} waits for its port proxy to complete a put"
        return f"{w[1].what} spins on LL packets of launch {w[2] + 1} that never arrive"

    def run_proxy(self, r: int) -> None:
        p = self.proxy0 + r
        q = self.fifo[r]
        while q:
            item = q.popleft()
            vd, _vf, vcc = item[-1]
            self.hb.join(p, vd, vcc)
            self.hb.tick(p)
            if item[0] == "signal":
                self.deliver_signal(item[1], self.hb.snap(p))
            else:
                _k, _key, a, b, launch, what = item[:6]
                src_b, slo, shi = self.access(
                    p,
                    launch,
                    a[0],
                    a[1],
                    *self.scr_adj(a, launch, False),
                    False,
                    f"{what} via the port proxy",
                )
                vals = self.read_cells(src_b, slo, shi)
                dst_b, dlo, dhi = self.access(
                    p, launch, b[0], b[1], *self.scr_adj(b, launch, True), True, f"{what} via the port proxy"
                )
                if dhi - dlo == len(vals):
                    self.write_cells(dst_b, dlo, dhi, vals)
            self.proxy_done[r] += 1
            self.wake(("flush", r))
            self.hb.tick(p)

    def scr_adj(self, ref: Ref, launch: int, remote: bool) -> tuple[int, int]:
        """Byte offset and length after the double-scratch half offset (local scratch only, for data ops)."""
        rank, buf, off, ln = ref
        if buf == "s" and not remote:
            off += self.half(rank, launch)
        return off, ln

    def data_op(self, pid: int, r: int, st: _Step, launch: int, what: str) -> bool:
        op = st.op
        name = op.name
        if name in NOT_MODELLED:
            return True
        if st.cache is None:
            j, m = self.tbg(op)
            st.cache = (
                [self.rng_of(r, st, op, s, pid, j, m) for s in op.src or ()],
                [self.rng_of(r, st, op, d, pid, j, m) for d in op.dst or ()],
            )
        src_r, dst_r = st.cache
        src: list[Ref] = [x for x in src_r if x is not None]
        dst: list[Ref] = [x for x in dst_r if x is not None]
        if len(src) < len(src_r) or len(dst) < len(dst_r):
            return True
        if name in ("upkt", "rppkt"):
            return self.read_packets(pid, r, st, launch, src[0], dst)
        if name in ("cpkt", "ppkt"):
            for s, d in zip(src, dst, strict=False):
                if op.src:  # handlePutPackets reads every source from src_buff[0]'s buffer
                    s = (s[0], op.src[0].type, s[2], s[3])
                sb, lo, hi = self.access(
                    pid, launch, s[0], s[1], *self.scr_adj(s, launch, False), False, what
                )
                self.put_packets(pid, launch, d, self.read_cells(sb, lo, hi), launch + 1, what)
        elif name in ("copy", "put", "get"):
            for i, (s, d) in enumerate(zip(src, dst, strict=False)):
                if name == "put" and i > 0 and op.src:  # handlePut reads from src_buff[0]'s buffer
                    s = (s[0], op.src[0].type, s[2], s[3])
                sb, slo, shi = self.access(
                    pid, launch, s[0], s[1], *self.scr_adj(s, launch, s[0] != r), False, what
                )
                vals = self.read_cells(sb, slo, shi)
                db, dlo, dhi = self.access(
                    pid, launch, d[0], d[1], *self.scr_adj(d, launch, d[0] != r), True, what
                )
                if dhi - dlo == len(vals):
                    self.write_cells(db, dlo, dhi, vals)
        elif name in ("re", "res", "rre", "rres"):
            self.reduce(pid, r, launch, what, src, dst)
        elif name in ("glres", "gstore"):
            self.err(f"{what}: switch (NVLS) operations are not executed by this interpreter")
        return True

    def read_packets(self, pid: int, r: int, st: _Step, launch: int, s0: Ref, dst: list[Ref]) -> bool:
        """upkt / rppkt: spin until every packet carries this launch's flag, then unpack or forward them."""
        what, flag = st.what, launch + 1
        b = self.mem[(r, "s")]
        plo, phi = self.pkt_cells(s0, launch)
        if plo < 0 or phi > len(b.pflag):
            self.err(f"{what}: packets [{plo}, {phi}) outside rank {r}'s packet scratch")
            return True
        if (b.pflag[plo:phi] != flag).any():
            self.block(("pkt", r), pid)
            self.stuck_why = ("pkt", st, launch)
            return False
        for sid in set(b.psnap[plo:phi].tolist()):
            if sid >= 0:
                vd, _vf, vcc = self.snaps[sid]
                self.hb.join(pid, vd, vcc)
        self.access(pid, launch, r, "s", 2 * s0[2] + self.half(r, launch), 2 * s0[3], False, what, phys=True)
        vals = b.pval[plo:phi].copy()
        for d in dst:
            if st.op.name == "upkt":
                db, lo, hi = self.access(
                    pid, launch, d[0], d[1], *self.scr_adj(d, launch, d[0] != r), True, what
                )
                if hi - lo == len(vals):
                    self.write_cells(db, lo, hi, vals)
            else:
                self.put_packets(pid, launch, d, vals, flag, what)
        return True

    def reduce(self, pid: int, r: int, launch: int, what: str, src: list[Ref], dst: list[Ref]) -> None:
        """re/res/rre/rres: the sum of the sources (the executor ignores reduce_op) to every destination."""
        acc: npt.NDArray[np.uint64] | None = None
        for s in src:
            sb, lo, hi = self.access(
                pid, launch, s[0], s[1], *self.scr_adj(s, launch, s[0] != r), False, what
            )
            v = self.read_cells(sb, lo, hi)
            acc = v if acc is None else (acc + v if len(v) == len(acc) else acc)
        if acc is None:
            return
        for d in dst:
            db, lo, hi = self.access(pid, launch, d[0], d[1], *self.scr_adj(d, launch, d[0] != r), True, what)
            if hi - lo == len(acc):
                self.write_cells(db, lo, hi, acc)

    def pkt_cells(self, ref: Ref, launch: int) -> tuple[int, int]:
        """Packet slots of a scratch data range: the packet of data byte o lives at physical 2·o (+ half)."""
        rank, _buf, off, ln = ref
        phys = 2 * off + self.half(rank, launch)
        return phys // (2 * self.grain), (phys + 2 * ln) // (2 * self.grain)

    def put_packets(
        self,
        pid: int,
        launch: int,
        d: Ref,
        vals: npt.NDArray[np.uint64],
        flag: int,
        what: str,
    ) -> None:
        rank = d[0]
        b = self.mem[(rank, "s")]
        plo, phi = self.pkt_cells(d, launch)
        if plo < 0 or phi > len(b.pflag) or phi - plo != len(vals):
            self.err(f"{what}: packets [{plo}, {phi}) outside rank {rank}'s packet scratch")
            return
        self.access(
            pid, launch, rank, "s", 2 * d[2] + self.half(rank, launch), 2 * d[3], True, what, phys=True
        )
        b.pval[plo:phi] = vals
        b.pflag[plo:phi] = flag
        self.snaps.append(self.hb.snap(pid))
        b.psnap[plo:phi] = len(self.snaps) - 1
        b.val[2 * plo : 2 * phi] = np.uint64(0xDEAD)
        self.wake(("pkt", rank))

    # ------------------------------------------------------------------ results
    def check_post(self, r: int, launch: int) -> None:
        """The caller of rank ``r`` reads its output at the end of ``launch``: every expected block must hold
        that launch's input values from the right rank."""
        expect = self.expected(r, launch)
        if expect is None:
            return
        gr = self.grain
        what = f"postcondition ({'manifest layout' if self.layout is not None else self.plan.collective}, launch "
        for start, want, s in expect:
            if not len(want):
                continue
            b, lo, hi = self.access(
                self.host0 + r, launch, r, "o", start * gr, len(want) * gr, False,
                f"the caller of rank {r} reading its output",
            )  # fmt: skip
            got = b.val[lo:hi]
            if len(got) != len(want):
                self.err(
                    f"postcondition: rank {r} output [{start * gr}, +{len(want) * gr}) outside the buffer"
                )
                continue
            bad = np.flatnonzero(got != want)
            if len(bad):
                j = int(bad[0])
                src = f" (from rank {s})" if s >= 0 else ""
                prev = self.inputs[launch - 1][s] if launch > 0 and s >= 0 else None
                stale = (
                    ": it holds the previous launch's data"
                    if prev is not None and len(prev) and got[j] in prev
                    else ""
                )
                self.err(
                    f"{what}{launch + 1}): rank {r} output byte {(start + j) * gr}{src} is wrong in {len(bad)} "
                    f"granule(s){stale}"
                )

    def expected(self, r: int, launch: int) -> list[tuple[int, npt.NDArray[np.uint64], int]] | None:
        """(first output cell, expected values, source rank or -1) of rank ``r``'s output after ``launch``: the
        manifest's all-to-all-v layout, else the collective's; None when there is nothing to check."""
        coll, n, gr = self.plan.collective, self.n, self.grain
        ins = self.inputs[launch]
        ob = self.sizes.output_bytes[r]
        if self.layout is not None:
            lay = self.layout
            k = self.sizes.chunk[r] // gr
            out = []
            for s in range(n):
                c, io = int(lay.counts[s, r]), int(lay.in_off[s, r])
                if c:
                    out.append((int(lay.out_off[r, s]) * k, ins[s][io * k : (io + c) * k], s))
            return out
        if coll in ("alltoall", "allgather", "sendrecv"):
            cells = ob // gr
            if cells % n and coll != "sendrecv":
                self.err(
                    f"rank {r}: output of {ob} bytes does not split into {n} equal blocks; cannot check {coll}"
                )
                return None
            if coll == "sendrecv":
                return [(0, ins[(r - 1) % n], (r - 1) % n)]
            blk = cells // n
            if coll == "alltoall":
                return [
                    (s * blk, ins[s][r * (len(ins[s]) // n) : (r + 1) * (len(ins[s]) // n)], s)
                    for s in range(n)
                ]
            return [(s * len(ins[s]), ins[s], s) for s in range(n)]
        if coll in ("allreduce", "reducescatter"):
            total = np.zeros(len(ins[0]), np.uint64)
            for s in range(n):
                if len(ins[s]) == len(total):
                    total = total + ins[s]
            if coll == "reducescatter":
                blk = len(total) // n
                total = total[r * blk : (r + 1) * blk]
            return [(0, total, -1)]
        if launch == 0 and r == 0:
            self.res.notes.append(
                f"collective {coll!r} has no postcondition here (and no manifest): deadlock, races and load "
                "checks only"
            )
        return None

    def final_report(self) -> None:
        stuck = [pid for pid in range(self.ntb) if self.pc[pid] <= len(self.steps_of[pid])]
        if stuck or not all(self.finished_all):
            lines = []
            for pid in stuck[:8]:
                r, k = self.tbs[pid]
                steps = self.steps_of[pid]
                pc = self.pc[pid]
                st = steps[pc] if pc < len(steps) else None
                desc = f"{st.path} ({st.op.name})" if st is not None else "its end"
                lines.append(f"rank {r} tb {k} at {desc} in launch {self.launch_of[pid] + 1}")
            self.err(
                f"deadlock: {len(stuck)} thread block(s) cannot progress: "
                + "; ".join(lines)
                + (f" (last blocked: {self.why_stuck()})" if self.stuck_why else "")
            )
            return
        for key, e in self.chans.items():
            if e.inbound != e.expected:
                r, t, gid = key
                self.err(
                    f"unbalanced: rank {r} {t} channel {gid} received {e.inbound} signal(s) over {self.launches} "
                    f"launches but waited {e.expected} time(s); the counters persist, so later launches mismatch"
                )
        for (r, s), sem in self.sems.items():
            init = self.plan.gpus[r].semaphores[s]
            if sem.value != init:
                self.err(f"unbalanced: rank {r} semaphore {s} ends at {sem.value}, not its initial {init}")
        if self.lost_signals:
            self.err(f"{self.lost_signals} signal(s) went to unpaired channels and reached no thread block")


def run(
    plan: Plan,
    sizes: Sizes,
    *,
    launches: int = 2,
    layout: ChunkLayout | None = None,
    max_errors: int = 40,
    seed: int = 7,
) -> InterpResult:
    """Execute ``launches`` back-to-back launches (see the module docstring)."""
    cells = max((s // max(1, math.gcd(*sizes.chunk))) for s in (*sizes.input_bytes, *sizes.output_bytes, 1))
    if cells > MAX_INTERP_CELLS:
        return InterpResult([f"not interpreted: {cells} granules per buffer exceed {MAX_INTERP_CELLS}"])
    agents = sum(len(g.threadblocks) for g in plan.gpus) + 2 * len(plan.gpus)
    if agents > MAX_INTERP_AGENTS:
        return InterpResult(
            [
                f"not interpreted: {agents} thread blocks, proxies and hosts exceed the race checker's {MAX_INTERP_AGENTS}"
            ]
        )
    return _Machine(plan, sizes, launches, layout, max_errors, seed).run()
