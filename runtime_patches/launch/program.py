"""One rank's part of a plan as a launch program: a few collective exchanges over one buffer of rows.

FLASH's own implementation (Lei et al., "FAST: An Efficient Scheduler for All-to-All GPU Communication",
NSDI'26, section 5) runs a schedule as a short sequence of grouped transfers, one destination's data in one
transfer, local moves as copies. This module turns a verified Program into that shape once per plan, rank
position and relabelling; nothing here runs per call (:mod:`a2acc.runtime.launch.bound` replays it).

**Steps (the same on every rank).** Every op gets a step from its dependencies (:func:`global_steps`): a
transfer comes one step after every transfer it depends on and no earlier than the local copies it depends on;
a local copy runs before the transfers of its step, at a depth one more than the local copies of that step it
depends on. Every dependency edge therefore goes forward in the order (step, copies by depth, transfers).

**Exchanges.** The transfers of one step on one lane are one *exchange*: every rank of the group takes part in
it (a rank with nothing to move posts zero sizes), so it can be posted as one ``all_to_all_single`` whose
per-peer loop runs in C++ (NCCL and RCCL skip the zero sizes), or as point-to-point messages. Which of the two
is decided from the Program alone (:attr:`Exchange.peers`), so every rank decides alike. Lanes: with
``overlap`` the intra-server transfers are a second lane on a second process group (a second communicator with
its own stream under NCCL), so a step's intra-server transfers run while earlier inter-server ones are in
flight, FLASH's pipeline.

**Rows, renamed.** The rank's data lives in one buffer of ``unit``-byte rows (``data``): its input region (the
layout's, packed by the caller's rows), then one fresh block per exchange for what it receives, then one row of
zeros. Nothing is ever overwritten: a received chunk stays where it landed and a local copy only renames a
chunk (no bytes move), so the Program's write-after-read and write-after-write orders hold by construction and
the only waits are read-after-write: an exchange waits for the earlier exchanges whose received rows it sends,
and the end waits for everything. A send whose rows are not one ascending run is gathered into a staging block
of a second buffer (``staging``) first, one vectorised copy per exchange. At the end ``out_rows`` says which
data row holds each chunk of the output region; the caller's output is gathered from there.

**Messages match.** Both ends order a message's chunks by op id, and the blocks by peer rank in the process
group (the order ``all_to_all_single`` lays them out), so sender and receiver agree without talking.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from a2acc.errors import RuntimeHookError
from a2acc.ir.program import Buf, Program
from a2acc.segments import segment_indices, segment_positions

I64 = npt.NDArray[np.int64]
INTER, INTRA = 0, 1  # lanes: the main group, and the second group of the overlap option
_EMPTY = np.zeros(0, np.int64)


@dataclass(frozen=True)
class GlobalSteps:
    """The rank-independent part: each op's step, and for local copies their depth (see module docstring)."""

    step: I64  # per op
    depth: I64  # per op (local copies; 0 for transfers)
    is_local: npt.NDArray[np.bool_]
    nsteps: int  # transfer steps (local copies may also run at step ``nsteps``, after the last transfers)
    direct: bool  # the plan is the caller's own all-to-all: one step, every pair's whole region straight


def global_steps(prog: Program) -> GlobalSteps:
    """Steps of every op of ``prog`` (ops in id order; every dependency names a smaller id)."""
    t = prog.table
    n = len(t)
    src = t.src_rank.tolist()
    dst = t.dst_rank.tolist()
    ptr = t.dep_ptr.tolist()
    ids = t.dep_ids.tolist()
    step = [0] * n
    depth = [0] * n
    local = [a == b for a, b in zip(src, dst)]
    for i in range(n):
        s = 0
        for d in ids[ptr[i] : ptr[i + 1]]:
            s = max(s, step[d] if local[d] else step[d] + 1)
        if local[i]:
            dep = 0
            for d in ids[ptr[i] : ptr[i + 1]]:
                if local[d] and step[d] == s:
                    dep = max(dep, depth[d] + 1)
            depth[i] = dep
        step[i] = s
    loc = np.array(local, dtype=bool)
    st = np.array(step, dtype=np.int64)
    transfers = st[~loc]
    nsteps = int(transfers.max()) + 1 if transfers.size else 0
    return GlobalSteps(st, np.array(depth, dtype=np.int64), loc, nsteps, _is_direct(prog, nsteps))


def _is_direct(prog: Program, nsteps: int) -> bool:
    """Whether the plan moves every pair's whole input region straight into its place in one step, one op per
    pair and nothing else: then it is exactly the caller's all-to-all, and it runs as one collective over the
    caller's own tensors (no packing, no padding on the wire, rows beyond any layout included)."""
    if nsteps > 1:
        return False
    t = prog.table
    lay = prog.layout
    s_, d_ = t.src_rank, t.dst_rank
    whole = (
        (t.src_buf == int(Buf.INPUT))
        & (t.dst_buf == int(Buf.OUTPUT))
        & (t.src_off == lay.in_off[s_, d_])
        & (t.dst_off == lay.out_off[d_, s_])
        & (t.cnt == lay.counts[s_, d_])
    )
    if not bool(whole.all()):
        return False
    pairs = s_ * prog.nranks + d_
    return int(np.unique(pairs).size) == int(np.count_nonzero(lay.counts)) == len(t)


@dataclass(frozen=True)
class Exchange:
    """One step on one lane, as this rank takes part in it. Sizes are in rows (chunks of ``unit`` bytes) per
    peer, indexed by rank in the process group. The send block is ``data[send_at : send_at + sum(send)]`` in
    place (``send_at >= 0``) or ``staging[stage_at : ...]`` filled by gathering data rows ``gather`` first;
    the receive block is ``data[recv_at : recv_at + sum(recv)]``. ``waits``: earlier exchanges (indices) whose
    received rows this one sends, to complete before its gather and post. ``peers``: the most peers any rank
    sends to or receives from in this exchange (the same on every rank)."""

    step: int
    lane: int
    send: tuple[int, ...]
    recv: tuple[int, ...]
    send_at: int
    stage_at: int
    gather: I64
    recv_at: int
    waits: tuple[int, ...]
    peers: int

    @property
    def send_rows(self) -> int:
        return sum(self.send)

    @property
    def recv_rows(self) -> int:
        return sum(self.recv)


@dataclass(frozen=True)
class LaunchProgram:
    """Rank ``position``'s part of a plan (see module docstring). ``in_off``/``in_cap`` and ``out_off``/
    ``out_cap``: each group rank's region (first row and rows) in the input region (``data[0:in_rows]``) and in
    the output region (whose row ``k`` lives at data row ``out_rows[k]``); a region belongs to the peer the
    caller's split sizes name, the relabelling applied. ``direct``: the plan is the caller's all-to-all (then
    nothing else is used)."""

    position: int
    world: int
    unit: int
    direct: bool
    in_rows: int
    in_off: I64
    in_cap: I64
    out_off: I64
    out_cap: I64
    out_rows: I64
    data_rows: int  # input region, receive blocks, one row of zeros (the last)
    staging_rows: int
    exchanges: tuple[Exchange, ...]
    final_waits: tuple[int, ...]

    @property
    def zero_row(self) -> int:
        return self.data_rows - 1

    @property
    def sends(self) -> int:
        """Messages this rank sends per call (point-to-point ones, or non-zero sizes of a collective)."""
        return sum(sum(1 for k in x.send if k) for x in self.exchanges)

    @property
    def recvs(self) -> int:
        return sum(sum(1 for k in x.recv if k) for x in self.exchanges)


def _lane_of(prog: Program, overlap: bool, a: I64, b: I64) -> I64:
    """Lane of transfers from ranks ``a`` to ``b`` (arrays): intra-server transfers on :data:`INTRA` with
    ``overlap``."""
    if not overlap or prog.machine is None:
        return np.zeros(a.shape, np.int64)
    node = np.asarray(prog.machine.node, dtype=np.int64)
    return np.where(node[a] == node[b], INTRA, INTER).astype(np.int64)


@dataclass(frozen=True)
class ExchangeSet:
    """Every exchange of a plan, the same on every rank: (step, lane) pairs with a transfer somewhere, in
    order, and the most peers any rank has in each (what decides how it is posted)."""

    keys: tuple[tuple[int, int], ...]
    peers: tuple[int, ...]


def exchange_set(prog: Program, steps: GlobalSteps, overlap: bool) -> ExchangeSet:
    t = prog.table
    tr = np.flatnonzero(~steps.is_local & (t.cnt > 0))
    if tr.size == 0:
        return ExchangeSet((), ())
    src, dst = t.src_rank[tr], t.dst_rank[tr]
    lane = _lane_of(prog, overlap, src, dst)
    key = steps.step[tr] * 2 + lane
    n = prog.nranks
    # distinct (exchange, rank, peer) in either direction, then the most peers per (exchange, rank)
    pair = np.unique(np.concatenate([(key * n + src) * n + dst, (key * n + dst) * n + src]))
    per_rank = np.unique(pair // n, return_counts=True)
    ex, counts = per_rank[0] // n, per_rank[1]
    keys = np.unique(key)
    most = np.zeros(keys.size, np.int64)
    np.maximum.at(most, np.searchsorted(keys, ex), counts)
    return ExchangeSet(
        tuple((int(k) // 2, int(k) % 2) for k in keys.tolist()), tuple(int(x) for x in most.tolist())
    )


def compile_launch(
    prog: Program,
    position: int,
    steps: GlobalSteps,
    exchanges: ExchangeSet,
    ranks: I64 | None = None,
    overlap: bool = False,
    direct: bool = True,
) -> LaunchProgram:
    """Rank ``position``'s :class:`LaunchProgram`. ``ranks[p]`` is the group rank that plays program rank ``p``
    (a relabelling under the topology's symmetries; None: the identity), so blocks and regions are laid out in
    the group's rank order. ``direct=False``: a plan that is the caller's own all-to-all still runs over the
    buffer (a fixed-capacity launch, whose sizes cannot come from the host)."""
    n = prog.nranks
    c = position
    perm = np.arange(n, dtype=np.int64) if ranks is None else np.asarray(ranks, dtype=np.int64)
    lay = prog.layout
    unit = prog.unit_bytes
    # regions by group rank: the region of program peer p belongs to group rank perm[p]
    in_off, in_cap = np.zeros(n, np.int64), np.zeros(n, np.int64)
    out_off, out_cap = np.zeros(n, np.int64), np.zeros(n, np.int64)
    in_off[perm], in_cap[perm] = lay.in_off[c], lay.counts[c]
    out_off[perm], out_cap[perm] = lay.out_off[c], lay.counts[:, c]
    n_in, n_out = lay.input_chunks(c), lay.output_chunks(c)
    if steps.direct and direct:
        return LaunchProgram(
            c, n, unit, True, n_in, in_off, in_cap, out_off, out_cap, _EMPTY, n_in + 1, 0, (), ()
        )
    t = prog.table
    mine = np.flatnonzero(((t.src_rank == c) | (t.dst_rank == c)) & (t.cnt > 0))
    loc = {
        int(Buf.INPUT): np.arange(n_in, dtype=np.int64),
        int(Buf.OUTPUT): np.full(n_out, -1, np.int64),
        int(Buf.SCRATCH): np.full(prog.scratch[c], -1, np.int64),
    }

    def read(buf: int, off: int, cnt: int, op: int) -> I64:
        rows = loc[buf][off : off + cnt]
        if rows.size != cnt or (rows < 0).any():  # the verifier proves this never happens
            raise RuntimeHookError(f"plan op {op} reads chunks no earlier op wrote (rank {c})")
        return rows

    copies: dict[int, list[tuple[int, int]]] = defaultdict(list)  # step -> (depth, op)
    sends: dict[tuple[int, int], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    recvs: dict[tuple[int, int], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    lane = _lane_of(prog, overlap, t.src_rank[mine], t.dst_rank[mine])
    for i, ln in zip(mine.tolist(), lane.tolist()):
        s = int(steps.step[i])
        if steps.is_local[i]:
            copies[s].append((int(steps.depth[i]), i))
        elif int(t.src_rank[i]) == c:
            sends[(s, ln)][int(perm[t.dst_rank[i]])].append(i)
        else:
            recvs[(s, ln)][int(perm[t.src_rank[i]])].append(i)
    top = n_in
    stage_top = 0
    recv_of = np.full(n_in, -1, np.int64)  # per data row: the exchange that received it (-1: input)
    waited: set[int] = set()
    out: list[Exchange] = []
    key_index = {k: e for e, k in enumerate(exchanges.keys)}
    last_step = max(steps.nsteps, 1 + max(copies, default=-1))
    for s in range(last_step + 1):
        for _depth, i in sorted(copies.get(s, ())):  # renames: no bytes move
            cnt = int(t.cnt[i])
            rows = read(int(t.src_buf[i]), int(t.src_off[i]), cnt, i)
            loc[int(t.dst_buf[i])][int(t.dst_off[i]) : int(t.dst_off[i]) + cnt] = rows
        landed: list[tuple[int, I64]] = []  # (op, rows): receives take effect after the step's sends
        for ln in (INTER, INTRA):
            e = key_index.get((s, ln))
            if e is None:
                continue
            send_sz, recv_sz = [0] * n, [0] * n
            parts: list[I64] = []
            for q in sorted(sends.get((s, ln), {})):
                for i in sends[(s, ln)][q]:
                    rows = read(int(t.src_buf[i]), int(t.src_off[i]), int(t.cnt[i]), i)
                    parts.append(rows)
                    send_sz[q] += rows.size
            gather = np.concatenate(parts) if parts else _EMPTY
            rq = recv_of[gather] if gather.size else _EMPTY
            waits = tuple(sorted({int(x) for x in np.unique(rq[rq >= 0]).tolist()} - waited))
            waited.update(waits)
            if gather.size == 0 or _run(gather):
                send_at, stage_at, g = (int(gather[0]) if gather.size else 0), -1, _EMPTY
            else:
                send_at, stage_at, g = -1, stage_top, gather
                stage_top += int(gather.size)
            recv_at = top
            for q in sorted(recvs.get((s, ln), {})):
                for i in recvs[(s, ln)][q]:
                    cnt = int(t.cnt[i])
                    landed.append((i, np.arange(top, top + cnt, dtype=np.int64)))
                    recv_sz[q] += cnt
                    top += cnt
            recv_of = np.concatenate([recv_of, np.full(top - recv_of.size, len(out), np.int64)])
            out.append(
                Exchange(
                    s,
                    ln,
                    tuple(send_sz),
                    tuple(recv_sz),
                    send_at,
                    stage_at,
                    g,
                    recv_at,
                    waits,
                    exchanges.peers[e],
                )
            )
        for i, rows in landed:
            loc[int(t.dst_buf[i])][int(t.dst_off[i]) : int(t.dst_off[i]) + rows.size] = rows
    out_rows = loc[int(Buf.OUTPUT)]
    if (out_rows < 0).any():
        raise RuntimeHookError(f"plan leaves output chunks of rank {c} unwritten")
    final = tuple(e for e in range(len(out)) if e not in waited)
    return LaunchProgram(
        c,
        n,
        unit,
        False,
        n_in,
        in_off,
        in_cap,
        out_off,
        out_cap,
        out_rows,
        top + 1,
        stage_top,
        tuple(out),
        final,
    )


def _run(rows: I64) -> bool:
    """Whether ``rows`` is one ascending run of consecutive rows."""
    return bool(int(rows[-1]) - int(rows[0]) == rows.size - 1 and (np.diff(rows) == 1).all())


def region_rows(off: I64, cap: I64) -> tuple[I64, I64]:
    """Per row of a region buffer tiled by regions (``off``/``cap`` per peer): the peer it belongs to and its
    index within the peer's region; rows no region covers get peer ``len(off)``."""
    n = off.size
    total = int((off + cap).max(initial=0))
    peer = np.full(total, n, np.int64)
    pos = np.zeros(total, np.int64)
    nz = np.flatnonzero(cap > 0)
    rows = segment_indices(off[nz], cap[nz])
    peer[rows] = np.repeat(nz, cap[nz])
    pos[rows] = segment_positions(cap[nz])
    return peer, pos
