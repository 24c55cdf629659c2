"""Lowering a verified Program to MSCCL XML for msccl-executor-nccl and RCCL's MSCCL.

:func:`_lower` runs these passes in order; each is a function or a method of :class:`_Lowering` (the state
they share):

1. **Layout** (:func:`_check_offsets`): all-to-all with C = N * k chunks per rank (k = ceil(max(input,
   output chunks) / N)), so the selection predicate ``(count * ngpus) % C == 0`` holds for counts that are
   multiples of k; rank r's Program regions keep their offsets inside those C chunks (the rest is padding; see
   the manifest). C and the scratch size must fit the executors' int16 offsets.
2. **Levels** (:func:`_order_by_level`): op level = longest dependency path; every tb runs its steps level by
   level, which keeps each connection's send and receive order identical on both sides and rules out deadlock
   at FIFO capacity 1.
3. **Placement** (:meth:`_Lowering.reserve_tbs`, :meth:`_Lowering.place`): a step moves at most ``max_cnt``
   (<= 71) chunks; ``instances`` > 1 splits every op over that many channels. ``split`` layout = one tb per
   (send peer, chan) and one per (recv peer, chan); ``combined`` = one tb per (peer, chan) for both
   directions; local copies go to copy-only tbs (chan 0). A connection spills to the next channel when a tb
   would pass 64 steps (nops included).
4. **Thread blocks** (:meth:`_Lowering.interleave_combined`, :meth:`_Lowering.number_tbs`): combined tbs
   alternate the sends and receives of a level (send first); tb ids follow first use in Program order, copy
   tbs last.
5. **Dependencies** (:meth:`_Lowering.resolve_dependencies`): a Program dependency Y -> X becomes, on every
   rank where both have a step, a wait of X's first step on Y's last step there (data hazards are always on a
   shared rank, so all are expressible); waits on the step's own tb are dropped (program order), several on
   one tb keep the latest, k remaining waits become k-1 ``nop`` steps plus the step's own ``depid``; targets
   get ``hasdep="1"``.
6. **Limits** (:meth:`_Lowering.check_limits`): tbs per GPU (64 on RCCL), steps per tb (64), dependency-target
   ids (127), tbs per channel and role (32); channels (32) are enforced while placing, int16 offsets in pass 1.
   A plan that does not fit raises :class:`~a2acc.errors.LoweringError` naming the limit and what would fit.
7. **Algo** (:meth:`_Lowering.build_algo`): the :class:`~a2acc.backends.msccl_xml.model.Algo` model, nops
   written out before the steps they guard.
8. **Text** (:func:`to_xml`): exactly what the hand-written parser accepts: no declaration, one start tag per
   line, double quotes, every attribute on every element, steps 0..n-1.

:func:`lower_text` runs the same passes compiled (``compiler/native/xmlinterp.c``, when built) and writes the
text directly, without the per-step objects: byte-identical output and the same refusals (codes and values
formatted by :func:`_refusal`); this module stays the reference it is tested against.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

from a2acc.backends.msccl_xml.model import (
    MAX_CHANNELS_NCCL,
    MAX_COUNT,
    MAX_DEP_TB,
    MAX_NODES,
    MAX_OFFSET,
    MAX_STEPS,
    MAX_TBS_PER_CHANNEL,
    MAX_TBS_RCCL,
    Algo,
    Gpu,
    Step,
    Tb,
)
from a2acc.backends.target import op_columns
from a2acc.errors import LoweringError
from a2acc.ir.dag import levels
from a2acc.ir.program import Buf, Program, max_peers
from a2acc.native import xmlinterp as _native

TB_LAYOUTS = ("auto", "split", "combined")


@dataclass(frozen=True)
class LowerOptions:
    """Knobs of the lowering (see module docstring)."""

    name: str = "a2acc"
    dialect: str = "nccl"  # nccl | rccl
    proto: str = "Simple"
    instances: int = 1
    max_cnt: int = MAX_COUNT
    tb_layout: str = "auto"
    max_channels: int = MAX_CHANNELS_NCCL
    min_bytes: int = 0
    max_bytes: int = 0


_Key: TypeAlias = tuple[int, str, int, int, int]
"""A thread block before numbering: (rank, role, peer, chan, copy index); role ``p`` (combined, both
directions), ``s`` (send), ``r`` (receive) or ``c`` (local copies; peer -1, chan 0)."""


class _Piece:
    """One step of one op on one tb: a send, a receive or a local copy of at most ``max_cnt`` chunks."""

    __slots__ = (
        "cnt",
        "deps",
        "dst",
        "first",
        "index",
        "is_target",
        "kind",
        "level",
        "op",
        "peer",
        "pos",
        "src",
        "targets",
    )

    def __init__(
        self,
        op: int,
        level: int,
        kind: str,  # 's', 'r', 'cpy'
        peer: int,
        src: tuple[str, int],
        dst: tuple[str, int],
        cnt: int,
        first: bool,  # first step of its op on its tb: carries the op's deps (waits on the other tbs)
    ) -> None:
        self.op = op
        self.level = level
        self.kind = kind
        self.peer = peer
        self.src = src
        self.dst = dst
        self.cnt = cnt
        self.first = first
        self.pos = -1  # position in its tb's piece list (after interleaving)
        self.index = -1  # step index in its tb (nops included)
        # tb -> latest piece waited on there, and the resulting (tb id, step index) pairs, sorted; pieces
        # without dependencies share the empty defaults (replaced, never mutated)
        self.targets: dict[_Key, _Piece] = _NO_TARGETS
        self.deps: list[tuple[int, int]] = _NO_DEPS
        self.is_target = False  # some step waits on this one: hasdep="1"


_NO_TARGETS: dict[_Key, _Piece] = {}
_NO_DEPS: list[tuple[int, int]] = []

_BUF = {Buf.INPUT: "i", Buf.OUTPUT: "o", Buf.SCRATCH: "s"}
_LETTER = tuple(_BUF[Buf(k)] for k in range(3))  # by buffer code, without an enum call per op


def lower(prog: Program, opts: LowerOptions) -> Algo:
    """Lower a (verified) Program to an :class:`Algo` (raises LoweringError if it cannot fit)."""
    if opts.dialect not in ("nccl", "rccl"):
        raise LoweringError(f"dialect {opts.dialect!r}: use nccl or rccl")
    if opts.tb_layout not in TB_LAYOUTS:
        raise LoweringError(f"tb layout {opts.tb_layout!r}: use one of {TB_LAYOUTS}")
    if not 1 <= opts.max_cnt <= MAX_COUNT:
        raise LoweringError(f"max cnt {opts.max_cnt}: must be in 1..{MAX_COUNT} (MSCCL_MAX_COUNT = 72)")
    if opts.instances < 1:
        raise LoweringError("instances must be >= 1")
    layouts = [opts.tb_layout] if opts.tb_layout != "auto" else ["split", "combined"]
    last: LoweringError | None = None
    for lay in layouts:
        try:
            return _lower(prog, opts, lay)
        except LoweringError as exc:
            last = exc
    assert last is not None
    raise last


@dataclass(frozen=True)
class LoweredText:
    """What :func:`lower_text` returns: the XML text and the figures a summary needs."""

    text: str
    nchannels: int
    max_tbs: int
    max_steps: int


def lower_text(prog: Program, opts: LowerOptions) -> LoweredText | None:
    """``to_xml(lower(prog, opts))`` from the compiled lowering, without building the :class:`Algo` (the text
    is byte-identical: tests/backends/test_msccl_native.py); raises the LoweringError :func:`lower` raises
    for a plan past an executor limit. None when the core is not built or cannot decide (options :func:`lower`
    rejects, int16 offsets, op ids not 0..n-1): the caller then runs :func:`lower`. The passes and their order
    are those of :func:`lower`."""
    if _native is None:
        return None
    if opts.dialect not in ("nccl", "rccl") or opts.tb_layout not in TB_LAYOUTS:
        return None
    if not 1 <= opts.max_cnt <= MAX_COUNT or opts.instances < 1:
        return None
    cols = op_columns(prog)
    if cols is None:
        return None
    got = _native.lower(
        prog.nranks,
        prog.layout.buffer_chunks,
        np.ascontiguousarray(np.asarray(prog.scratch, dtype=np.int64).reshape(-1)),
        *cols,
        TB_LAYOUTS.index(opts.tb_layout),
        opts.dialect == "rccl",
        opts.instances,
        opts.max_cnt,
        opts.max_channels,
        opts.name,
        opts.proto,
        opts.min_bytes,
        opts.max_bytes,
    )
    if got is None:
        return None
    if got[0] == 0:  # refused: the code and values of the first limit exceeded (the last layout tried)
        _z, code, a, b, c, d, combined = got
        reach = Reach.of(prog, max_peers(cols[0], cols[3], prog.nranks))
        raise _refusal(opts, "combined" if combined else "split", code, a, b, c, d, reach)
    text, nch, tbs, steps = got
    return LoweredText(text, nch, tbs, steps)


def _lower(prog: Program, opts: LowerOptions, layout: str) -> Algo:
    """Run the passes of the module docstring for one tb layout (``split`` or ``combined``)."""
    _check_offsets(prog)
    level, order = _order_by_level(prog)
    low = _Lowering(prog, opts, layout, level)
    low.reserve_tbs()
    low.place(order)
    low.interleave_combined()
    low.number_tbs()
    low.resolve_dependencies()
    low.check_limits()
    algo = low.build_algo()
    _check_nodes(algo)
    return algo


def _check_nodes(algo: Algo) -> None:
    """The executors' parser holds a fixed pool of XML nodes per rank: ``<algo>``, every ``<gpu>``, and the
    rank's own ``<tb>`` and ``<step>`` nodes (msccl-executor-nccl's ``src/misc/msccl/msccl_parser.cc``)."""
    for g in algo.gpus:
        nodes = 1 + len(algo.gpus) + len(g.tbs) + sum(len(t.steps) for t in g.tbs)
        if nodes > MAX_NODES:
            raise _refusal(LowerOptions(), "", 6, g.id, nodes)


MSCCLPP_HINT = "MSCCL++ (--backend mscclpp-json: its plans hold more thread blocks and dependencies)"


@dataclass(frozen=True)
class Reach:
    """What a refusal says can serve the plan instead: the most peers a rank of it exchanges data with, the
    planner that made it, and the peers a rank has under a planner that routes through its server's GPUs
    (:data:`TIERED`: a rank then exchanges with its server's other GPUs and one GPU per other server; 0 when
    the ranks are not servers of several GPUs each)."""

    peers: int = 0
    algorithm: str = ""
    tiered: int = 0

    @staticmethod
    def of(prog: Program, peers: int) -> Reach:
        m = prog.machine
        tiered = 0
        if m is not None:
            per_node = Counter(m.node)
            if len(per_node) > 1 and min(per_node.values()) > 1:
                tiered = len(per_node) - 1 + max(per_node.values()) - 1
        return Reach(peers, prog.algorithm, tiered)

    def planners(self, fits: int) -> str:
        """``fast --opt shape=staged, hierarchical`` when they give a rank fewer peers than the plan and at most
        ``fits``; else "". fast is named with its staged shape: its cost-aware search may pick one direct
        step (a peer per GPU), so a plan by fast can have more peers than the staged one would."""
        names = [a for a in TIERED if a != self.algorithm or a == "fast"]
        names = [f"{a} --opt shape=staged" if a == "fast" else a for a in names]
        if not names or not 0 < self.tiered < self.peers or self.tiered > fits:
            return ""
        return f"a planner that gives each rank {self.tiered} peers ({', '.join(names)})"


TIERED = ("fast", "hierarchical")


def _refusal(
    opts: LowerOptions,
    layout: str,
    code: int,
    a: int,
    b: int = 0,
    c: int = 0,
    d: int = 0,
    reach: Reach = Reach(),
) -> LoweringError:
    """The error for an executor limit a placement exceeds, by code (shared by :func:`lower` and the compiled
    lowering, which reports the same code and values): 1 channels of connection ``a``->``b``; 2 RCCL's tbs
    (rank ``a`` needs ``b``); 3 steps (rank ``a`` tb ``b`` has ``c``); 4 dependency-target tb id ``a``; 5 tbs
    per channel (rank ``a`` channel ``b``: ``c`` tbs, receive role when ``d``); 6 XML nodes (rank ``a`` needs
    ``b``). ``reach``: for saying what can serve the plan instead."""
    if code == 1:
        return LoweringError(
            f"connection {a}->{b} needs more than {opts.max_channels} channels to stay within "
            f"{MAX_STEPS} steps per thread block; fewer stages or a coarser layout would fit "
            f"(a larger --max-padding), or {MSCCLPP_HINT}"
        )
    if code == 2:
        return _tbs_refusal(opts, layout, a, b, reach)
    if code == 3:
        return LoweringError(f"rank {a} tb {b}: {c} steps > {MAX_STEPS}")
    if code == 4:
        alts = [reach.planners(MAX_DEP_TB // 2), MSCCLPP_HINT]
        return LoweringError(
            f"dependency target tb id {a} > {MAX_DEP_TB} (int8 in the executor): a rank of this plan needs more "
            f"thread blocks (up to {reach.peers} peers, one or two each, plus the channels its steps fill) than a "
            f"dependency can name; {_either(alts)} can serve it"
        )
    if code == 5:
        role = "recv" if d else "send"
        return LoweringError(
            f"rank {a} channel {b}: {c} tbs with a {role} peer; the executor allows {MAX_TBS_PER_CHANNEL}"
        )
    return LoweringError(
        f"rank {a} needs {b} XML nodes (thread blocks and steps); the executor's parser holds at "
        f"most {MAX_NODES} (limit): a coarser layout (a larger --max-padding) would fit, or {MSCCLPP_HINT}"
    )


def _tbs_refusal(opts: LowerOptions, layout: str, a: int, b: int, reach: Reach) -> LoweringError:
    """Rank ``a`` needs ``b`` thread blocks, past RCCL's: what no layout can fix names what can serve it."""
    peers = reach.peers
    if peers + 1 > MAX_TBS_RCCL or (peers == MAX_TBS_RCCL and layout == "combined"):
        alts = [
            reach.planners(MAX_TBS_RCCL - 1),
            "msccl-executor-nccl (--opt dialect=nccl)",
            MSCCLPP_HINT,
        ]
        return LoweringError(
            f"rank {a} needs {b} thread blocks; RCCL allows {MAX_TBS_RCCL}. A rank exchanges data with up to "
            f"{peers} peers and RCCL needs a thread block per peer at least, so no XML layout of this plan fits "
            f"RCCL; {_either(alts)} can serve it"
        )
    tips = [
        t
        for t, given in (
            ("--opt tb_layout=combined", layout == "combined"),
            ("--opt instances=1", opts.instances == 1),
        )
        if not given
    ]
    return LoweringError(
        f"rank {a} needs {b} thread blocks; RCCL allows {MAX_TBS_RCCL}. Fewer peers per "
        f"rank or fewer channels would fit: try {', '.join([*tips, 'a coarser layout'])}"
    )


def _either(alts: list[str]) -> str:
    alts = [a for a in alts if a]
    return alts[0] if len(alts) == 1 else f"{', '.join(alts[:-1])} or {alts[-1]}"


def _check_offsets(prog: Program) -> None:
    """Reject a layout whose chunk offsets do not fit the executors' int16 ``srcOffset``/``dstOffset``
    (msccl-executor-nccl's ``src/include/msccl/msccl_struct.h``); checked first, before any placement work."""
    c = prog.layout.buffer_chunks
    if c - 1 > MAX_OFFSET or max(prog.scratch, default=0) - 1 > MAX_OFFSET:
        raise LoweringError(
            f"the layout needs {c} chunks per rank (scratch {max(prog.scratch)}) but MSCCL offsets are int16 "
            f"(<= {MAX_OFFSET}); plan with a coarser layout (a larger --max-padding)"
        )


def _order_by_level(prog: Program) -> tuple[list[int], list[int]]:
    """Each op's level (longest dependency path ending at it) and the op ids sorted by (level, id).

    Placing ops in this order makes every tb run its steps level by level, so both ends of a connection see
    its sends and receives in the same order and no wait cycle can form even at FIFO capacity 1. The ops are
    already in a topological order (the Program is verified), which :func:`~a2acc.ir.dag.levels` needs."""
    level = levels(prog.ops)
    order = sorted(range(len(prog.ops)), key=lambda o: (level[o], o))
    return level, order


class _Lowering:
    """State shared by the lowering passes of one Program with one tb layout."""

    def __init__(self, prog: Program, opts: LowerOptions, layout: str, level: list[int]) -> None:
        self.prog = prog
        self.opts = opts
        self.layout = layout
        self.level = level
        # channel groups, so that every rank has at most 32 send (and 32 receive) tbs per channel, the
        # executor's MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL: split, connection s->d uses group
        # ((d - s) mod N - 1) // 32; combined, both directions of a pair share a tb, so a pair uses one group for
        # both: (k - 1) // 16 with k the shorter way round, min((d - s) mod N, (s - d) mod N) (16 peers each way)
        n = prog.nranks
        if layout == "combined":
            self.n_groups = max(1, -(-(n // 2) // (MAX_TBS_PER_CHANNEL // 2)))
        else:
            self.n_groups = max(1, -(-(n - 1) // MAX_TBS_PER_CHANNEL))
        self.tb_steps: dict[_Key, list[_Piece]] = defaultdict(list)  # tbs in order of first placed piece
        self.tb_cost: dict[_Key, int] = defaultdict(int)  # steps so far, nops included
        self.first_use: dict[_Key, int] = {}
        self.last_tb_of: dict[tuple[int, int], _Key] = {}  # (op, rank) -> tb of the op's last piece there
        # tbs the op being placed has a piece on: its first piece on a tb carries the op's dependencies there
        # (an op whose pieces spill onto another tb needs its waits on that tb too); ops are placed one at a
        # time, so the set is per op
        self.placed: set[_Key] = set()
        self.per_rank: dict[int, list[_Key]] = defaultdict(list)  # tbs of a rank in id order
        self.ids: dict[_Key, int] = {}
        self.n_steps: dict[_Key, int] = {}  # steps per tb, nops included

    def reach(self) -> Reach:
        ops = self.prog.ops
        src = np.fromiter((op.src_rank for op in ops), np.int64, len(ops))
        dst = np.fromiter((op.dst_rank for op in ops), np.int64, len(ops))
        return Reach.of(self.prog, max_peers(src, dst, self.prog.nranks))

    # ------------------------------------------------------------------ pass 3: placement
    def channel(self, src: int, dst: int, inst: int, spill: int) -> int:
        """Channel of connection ``src -> dst`` for instance ``inst`` after ``spill`` spills: the channel
        group of the peer distance, then one block of groups per instance, then per spill."""
        n = self.prog.nranks
        dist = (dst - src) % n
        if self.layout == "combined":
            group = (min(dist, n - dist) - 1) // (MAX_TBS_PER_CHANNEL // 2)
        else:
            group = (dist - 1) // MAX_TBS_PER_CHANNEL
        return group + self.n_groups * (inst + self.opts.instances * spill)

    def conn_tbs(self, src: int, dst: int, chan: int) -> tuple[_Key, _Key]:
        """The sending tb (on ``src``) and the receiving tb (on ``dst``) of a connection on ``chan``."""
        if self.layout == "combined":
            return (src, "p", dst, chan, 0), (dst, "p", src, chan, 0)
        return (src, "s", dst, chan, 0), (dst, "r", src, chan, 0)

    def touch(self, key: _Key) -> None:
        """Record the first use of a tb; tb ids are handed out in this order (:meth:`number_tbs`)."""
        if key not in self.first_use:
            self.first_use[key] = len(self.first_use)

    def reserve_tbs(self) -> None:
        """Touch every connection's first-channel tbs in Program (op id) order, before placement.

        Placement runs in level order, but tb ids should follow the Program's own order of first use so
        that the numbering reads like the Program; spilled and copy tbs get theirs when first placed."""
        for op in self.prog.ops:
            if op.src_rank == op.dst_rank:
                continue
            for inst in range(min(self.opts.instances, op.cnt)):
                ks, kr = self.conn_tbs(
                    op.src_rank, op.dst_rank, self.channel(op.src_rank, op.dst_rank, inst, 0)
                )
                self.touch(ks)
                self.touch(kr)

    def place(self, order: list[int]) -> None:
        """Cut every op (in level order) into pieces and append them to their tbs.

        A transfer is split evenly over ``min(instances, cnt)`` channels, each part into steps of at most
        ``max_cnt`` chunks; the first step of the op on every tb it lands on carries the op's dependencies (a part
        that spills onto another channel's tb waits there too). A local copy is one
        part on a copy-only tb."""
        ops, max_cnt, instances = self.prog.ops, self.opts.max_cnt, self.opts.instances
        for oid in order:
            op = ops[oid]
            local = op.src_rank == op.dst_rank
            nparts = 1 if local else min(instances, op.cnt)
            parts = [op.cnt] if nparts == 1 else _split_counts(op.cnt, nparts)
            sb, db = _LETTER[op.src_buf], _LETTER[op.dst_buf]
            self.placed = set()
            deps_s = self.dep_tbs(op.src_rank, op.deps)
            deps_d = deps_s if local else self.dep_tbs(op.dst_rank, op.deps)
            off = 0
            for inst, part in enumerate(parts):
                for cnt in [part] if part <= max_cnt else _split_counts(part, -(-part // max_cnt)):
                    src = (sb, op.src_off + off)
                    dst = (db, op.dst_off + off)
                    if local:
                        self.place_copy(oid, op.src_rank, deps_s, src, dst, cnt)
                    else:
                        self.place_transfer(
                            oid, op.src_rank, op.dst_rank, deps_s, deps_d, inst, src, dst, cnt
                        )
                    off += cnt

    def dep_tbs(self, rank: int, deps: tuple[int, ...]) -> set[_Key]:
        """The tbs on ``rank`` that hold the last piece of one of the dependencies ``deps`` (placed earlier)."""
        out = set()
        last = self.last_tb_of
        for d in deps:
            key = last.get((d, rank))
            if key is not None:
                out.add(key)
        return out

    def add_piece(self, key: _Key, piece: _Piece, nops: int) -> None:
        """Append ``piece`` to tb ``key``, counting the ``nops`` it will need for extra dependencies."""
        if key not in self.first_use:
            self.first_use[key] = len(self.first_use)
        self.tb_steps[key].append(piece)
        self.tb_cost[key] += 1 + nops
        self.placed.add(key)

    def place_copy(
        self, oid: int, r: int, deps: set[_Key], src: tuple[str, int], dst: tuple[str, int], cnt: int
    ) -> None:
        """A local copy goes to the first copy-only tb of its rank that still has room for it and its nops."""
        j = 0
        while True:
            key = (r, "c", -1, 0, j)
            here = key not in self.placed
            nops = _nops(deps, key) if here else 0
            if self.tb_cost[key] + 1 + nops <= MAX_STEPS:
                break
            j += 1
        self.add_piece(key, _Piece(oid, self.level[oid], "cpy", -1, src, dst, cnt, here), nops)
        self.last_tb_of[(oid, r)] = key

    def place_transfer(
        self,
        oid: int,
        s_: int,
        d_: int,
        deps_s: set[_Key],
        deps_d: set[_Key],
        inst: int,
        src: tuple[str, int],
        dst: tuple[str, int],
        cnt: int,
    ) -> None:
        """A send/receive pair goes to the connection's tbs on the first channel (of its group and instance)
        where neither side would pass 64 steps; spilling past ``max_channels`` raises."""
        spill = 0
        ch = self.channel(s_, d_, inst, spill)
        placed, cost = self.placed, self.tb_cost
        while True:
            ks, kr = self.conn_tbs(s_, d_, ch)
            first_s, first_r = ks not in placed, kr not in placed
            ns = _nops(deps_s, ks) if first_s else 0
            nr = _nops(deps_d, kr) if first_r else 0
            if cost[ks] + 1 + ns <= MAX_STEPS and cost[kr] + 1 + nr <= MAX_STEPS:
                break
            spill += 1
            ch = self.channel(s_, d_, inst, spill)
            if ch >= self.opts.max_channels:
                raise _refusal(self.opts, self.layout, 1, s_, d_, reach=self.reach())
        lvl = self.level[oid]
        self.add_piece(ks, _Piece(oid, lvl, "s", d_, src, dst, cnt, first_s), ns)
        self.add_piece(kr, _Piece(oid, lvl, "r", s_, src, dst, cnt, first_r), nr)
        self.last_tb_of[(oid, s_)] = ks
        self.last_tb_of[(oid, d_)] = kr

    # ------------------------------------------------------------------ pass 4: thread blocks
    def interleave_combined(self) -> None:
        """Combined tbs: per level, alternate sends and receives (send first), so that two peers exchanging
        data in the same level both make progress at FIFO capacity 1."""
        for key, pieces in self.tb_steps.items():
            if key[1] == "p":
                pieces[:] = _alternate(pieces)

    def number_tbs(self) -> None:
        """Tb ids per rank: 0..T-1 in order of first use, copy tbs last (the executors want contiguous ids;
        ids of dependency targets must stay small, see :meth:`check_limits`)."""
        for key in sorted(self.tb_steps, key=lambda kk: (kk[1] == "c", self.first_use.get(kk, 0), kk[4])):
            self.per_rank[key[0]].append(key)
        for keys in self.per_rank.values():
            for i, key in enumerate(keys):
                self.ids[key] = i

    # ------------------------------------------------------------------ pass 5: dependencies
    def resolve_dependencies(self) -> None:
        """Turn op dependencies into per-step waits, step indices (nops included) and ``hasdep`` targets.

        A step holds one ``depid``/``deps`` pair; the executor's parser folds the waits of preceding ``nop``
        steps into the next real step (msccl-executor-nccl's ``src/misc/msccl/msccl_parser.cc``), so a piece
        with k target tbs is preceded by k-1 nops and its index is shifted by them."""
        # (op, rank) -> tb -> the op's latest piece on that tb (tbs in the order the loop below meets them;
        # pieces are met in position order, so the last one written is the latest)
        last_on: dict[tuple[int, int], dict[_Key, _Piece]] = {}
        for key, pieces in self.tb_steps.items():
            r = key[0]
            for i, p in enumerate(pieces):
                p.pos = i
                on = last_on.get((p.op, r))
                if on is None:
                    last_on[(p.op, r)] = {key: p}
                else:
                    on[key] = p
        ops = self.prog.ops
        for key, pieces in self.tb_steps.items():
            idx = 0
            for p in pieces:
                if p.first and ops[p.op].deps:
                    p.targets = self.latest_targets(key, ops[p.op].deps, last_on)
                p.index = idx + max(0, len(p.targets) - 1)
                idx = p.index + 1
            self.n_steps[key] = idx
        ids = self.ids
        for pieces in self.tb_steps.values():
            for p in pieces:
                if p.targets:
                    p.deps = sorted((ids[tkey], tp.index) for tkey, tp in p.targets.items())
                    for tp in p.targets.values():
                        tp.is_target = True

    def latest_targets(
        self, key: _Key, deps: tuple[int, ...], last_on: dict[tuple[int, int], dict[_Key, _Piece]]
    ) -> dict[_Key, _Piece]:
        """Per other tb of ``key``'s rank, the latest piece there of one of the dependencies ``deps`` (waits on
        the piece's own tb are implied by program order)."""
        targets: dict[_Key, _Piece] = _NO_TARGETS
        r = key[0]
        for d in deps:
            on = last_on.get((d, r))
            if not on:
                continue
            for tkey, tp in on.items():
                if tkey == key:
                    continue
                if targets is _NO_TARGETS:
                    targets = {}
                prev = targets.get(tkey)
                if prev is None or tp.pos > prev.pos:
                    targets[tkey] = tp
        return targets

    # ------------------------------------------------------------------ pass 6: limits
    def check_limits(self) -> None:
        """Raise :class:`LoweringError` at the first executor limit the placement exceeds, checked in this
        order: tbs per GPU on RCCL, steps per tb (nops included), dependency-target tb ids (``dependentBid`` is
        int8), tbs with a send (recv) peer per channel (limits from msccl-executor-nccl's and RCCL's
        ``src/include/msccl/msccl_struct.h``); the parser's node pool is checked on the built model."""
        if self.opts.dialect == "rccl":
            for r, keys in self.per_rank.items():
                if len(keys) > MAX_TBS_RCCL:
                    raise _refusal(self.opts, self.layout, 2, r, len(keys), reach=self.reach())
        for key, count in self.n_steps.items():
            if count > MAX_STEPS:
                raise _refusal(self.opts, self.layout, 3, key[0], self.ids[key], count, reach=self.reach())
        for pieces in self.tb_steps.values():
            for p in pieces:
                for tkey in p.targets:
                    if self.ids[tkey] > MAX_DEP_TB:
                        raise _refusal(self.opts, self.layout, 4, self.ids[tkey], reach=self.reach())
        per_chan: dict[tuple[int, int, str], int] = defaultdict(int)
        for r in range(self.prog.nranks):
            for _r, role, _peer, chan, _j in self.per_rank.get(r, []):
                if role in ("s", "p"):
                    per_chan[(r, chan, "send")] += 1
                if role in ("r", "p"):
                    per_chan[(r, chan, "recv")] += 1
        for (r, ch, role), cnt in per_chan.items():
            if cnt > MAX_TBS_PER_CHANNEL:
                raise _refusal(self.opts, self.layout, 5, r, ch, cnt, role == "recv", reach=self.reach())

    # ------------------------------------------------------------------ pass 7: the Algo model
    def build_algo(self) -> Algo:
        """The :class:`Algo`: one ``<gpu>`` per rank with C-chunk input and output, its tbs in id order."""
        n = self.prog.nranks
        c = self.prog.layout.buffer_chunks
        nch = 1 + max((key[3] for key in self.tb_steps), default=0)
        gpus = [
            Gpu(r, c, c, self.prog.scratch[r], [self.build_tb(key) for key in self.per_rank.get(r, [])])
            for r in range(n)
        ]
        o = self.opts
        return Algo(o.name, o.proto, nch, c, n, "alltoall", 0, 1, o.min_bytes, o.max_bytes, gpus)

    def build_tb(self, key: _Key) -> Tb:
        """One ``<tb>``: each piece's extra dependencies as nops (``i -1`` -> ``o -1``, cnt 0) before it."""
        role, peer, chan = key[1], key[2], key[3]
        send = peer if role in ("s", "p") else -1
        recv = peer if role in ("r", "p") else -1
        steps: list[Step] = []
        for p in self.tb_steps[key]:
            for dtb, dstep in p.deps[:-1]:
                steps.append(Step(len(steps), "nop", "i", -1, "o", -1, 0, dtb, dstep, 0))
            dtb, dstep = p.deps[-1] if p.deps else (-1, -1)
            steps.append(
                Step(
                    len(steps),
                    p.kind,
                    p.src[0],
                    p.src[1],
                    p.dst[0],
                    p.dst[1],
                    p.cnt,
                    dtb,
                    dstep,
                    1 if p.is_target else 0,
                )
            )
        return Tb(self.ids[key], send, recv, chan if role != "c" else 0, steps)


def _nops(dep_tbs: set[_Key], key: _Key) -> int:
    """Nops a piece on tb ``key`` needs: one per dependency tb beyond the first, its own tb excluded."""
    return max(0, len(dep_tbs) - (key in dep_tbs) - 1)


def _split_counts(total: int, parts: int) -> list[int]:
    parts = max(1, min(parts, total))
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _alternate(pieces: list[_Piece]) -> list[_Piece]:
    """Combined tbs: per level, alternate sends and receives (send first), each in placement order."""
    out: list[_Piece] = []
    by_level: dict[int, tuple[list[_Piece], list[_Piece]]] = {}
    for p in pieces:
        sends, recvs = by_level.setdefault(p.level, ([], []))
        (sends if p.kind == "s" else recvs).append(p)
    for lvl in sorted(by_level):
        sends, recvs = by_level[lvl]
        for i in range(max(len(sends), len(recvs))):
            if i < len(sends):
                out.append(sends[i])
            if i < len(recvs):
                out.append(recvs[i])
    return out


def to_xml(algo: Algo) -> str:
    """Serialise exactly as the executors' hand-written reader wants it (msccl-executor-nccl's
    ``src/misc/msccl/msccl_parser.cc``, copied by RCCL): no declaration, one start tag per line, double quotes,
    every attribute on every element."""
    lines = [
        f'<algo name="{algo.name}" proto="{algo.proto}" nchannels="{algo.nchannels}" '
        f'nchunksperloop="{algo.nchunksperloop}" ngpus="{algo.ngpus}" coll="{algo.coll}" inplace="{algo.inplace}" '
        f'outofplace="{algo.outofplace}" minBytes="{algo.min_bytes}" maxBytes="{algo.max_bytes}">'
    ]
    for g in algo.gpus:
        lines.append(
            f'  <gpu id="{g.id}" i_chunks="{g.i_chunks}" o_chunks="{g.o_chunks}" s_chunks="{g.s_chunks}">'
        )
        for t in g.tbs:
            lines.append(f'    <tb id="{t.id}" send="{t.send}" recv="{t.recv}" chan="{t.chan}">')
            for s in t.steps:
                lines.append(
                    f'      <step s="{s.s}" type="{s.type}" srcbuf="{s.srcbuf}" srcoff="{s.srcoff}" '
                    f'dstbuf="{s.dstbuf}" dstoff="{s.dstoff}" cnt="{s.cnt}" depid="{s.depid}" deps="{s.deps}" '
                    f'hasdep="{s.hasdep}"/>'
                )
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"
