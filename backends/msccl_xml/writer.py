"""Lowering a verified Program to MSCCL XML (spec §1-2, §4-7, §9, §12, §15).

Passes, in order (each a small function below):

1. **Layout**: all-to-all with C = N * k chunks per rank (k = ceil(max(input, output chunks) / N)), so the
   selection predicate ``(count * ngpus) % C == 0`` holds for counts that are multiples of k; rank r's
   Program regions keep their offsets inside those C chunks (the rest is padding; see the manifest).
2. **Levels**: op level = longest dependency path; every tb runs its steps level by level, which keeps each
   connection's send and receive order identical on both sides and rules out deadlock at FIFO capacity 1.
3. **Splitting**: a step moves at most ``max_cnt`` (<= 71) chunks; ``instances`` > 1 splits every op over that
   many channels.
4. **Thread blocks**: ``split`` layout = one tb per (send peer, chan) and one per (recv peer, chan); ``combined``
   = one tb per (peer, chan) for both directions, sends and receives of a level alternated (send first);
   local copies go to copy-only tbs (chan 0). A connection spills to the next channel when a tb would pass 64
   steps (nops included). tb ids follow first use in Program order; copy tbs come last.
5. **Dependencies**: a Program dependency Y -> X becomes, on every rank where both have a step, a wait of X's
   first step on Y's last step there (data hazards are always on a shared rank, so all are expressible);
   waits on the step's own tb are dropped (program order), several on one tb keep the latest, k remaining
   waits become k-1 ``nop`` steps plus the step's own ``depid``; targets get ``hasdep="1"``.
6. **Limits**: tbs per GPU (64 on RCCL), channels (32), dependency-target ids (127), int16 offsets: a plan
   that does not fit raises :class:`~a2acc.errors.LoweringError` naming the limit and what would fit.
7. **Text**: exactly what the hand-written parser accepts: no declaration, one start tag per line, double
   quotes, every attribute on every element, steps 0..n-1.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from a2acc.backends.msccl_xml.model import (
    MAX_CHANNELS_NCCL,
    MAX_COUNT,
    MAX_DEP_TB,
    MAX_OFFSET,
    MAX_STEPS,
    MAX_TBS_PER_CHANNEL,
    MAX_TBS_RCCL,
    Algo,
    Gpu,
    Step,
    Tb,
)
from a2acc.errors import LoweringError
from a2acc.ir.dag import levels
from a2acc.ir.program import Buf, Program

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


@dataclass
class _Piece:
    op: int
    level: int
    kind: str  # 's', 'r', 'cpy'
    peer: int
    src: tuple[str, int]
    dst: tuple[str, int]
    cnt: int
    first: bool  # first piece of its op on this tb: carries the op's dependencies
    deps: list[tuple[int, int]] = field(default_factory=list)  # (tb key index, step index) resolved later
    index: int = -1


_BUF = {Buf.INPUT: "i", Buf.OUTPUT: "o", Buf.SCRATCH: "s"}


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


def _lower(prog: Program, opts: LowerOptions, layout: str) -> Algo:
    n = prog.nranks
    c = prog.layout.buffer_chunks
    if c - 1 > MAX_OFFSET or max(prog.scratch, default=0) - 1 > MAX_OFFSET:
        raise LoweringError(
            f"the layout needs {c} chunks per rank (scratch {max(prog.scratch)}) but MSCCL offsets are int16 "
            f"(<= {MAX_OFFSET}); plan with a coarser layout (a larger --max-padding)"
        )
    level = levels(prog.ops)  # ops are listed in a topological order (verified)
    order = sorted(range(len(prog.ops)), key=lambda o: (level[o], o))
    # tb keys: (rank, role, peer, chan, copy_idx); role 'p' (combined), 's', 'r' or 'c' (copy)
    tb_steps: dict[tuple[int, str, int, int, int], list[_Piece]] = defaultdict(list)
    tb_cost: dict[tuple[int, str, int, int, int], int] = defaultdict(int)
    first_use: dict[tuple[int, str, int, int, int], int] = {}
    last_step_of: dict[tuple[int, int], tuple[tuple[int, str, int, int, int], _Piece]] = {}
    n_use = 0

    def touch(key: tuple[int, str, int, int, int]) -> None:
        nonlocal n_use
        if key not in first_use:
            first_use[key] = n_use
            n_use += 1

    # channel groups: connection s->d uses group ((d - s) mod N - 1) // 32, so every rank has at most 32 send
    # (and 32 receive) tbs per channel, the executor's MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL
    n_groups = max(1, -(-(n - 1) // MAX_TBS_PER_CHANNEL))

    def channel(src: int, dst: int, inst: int, spill: int) -> int:
        return ((dst - src) % n - 1) // MAX_TBS_PER_CHANNEL + n_groups * (inst + opts.instances * spill)

    # tbs are created in Program (op id) order of first use, so record that order first
    for op in prog.ops:
        if op.src_rank == op.dst_rank:
            continue
        for inst in range(min(opts.instances, op.cnt)):
            ch0 = channel(op.src_rank, op.dst_rank, inst, 0)
            if layout == "combined":
                touch((op.src_rank, "p", op.dst_rank, ch0, 0))
                touch((op.dst_rank, "p", op.src_rank, ch0, 0))
            else:
                touch((op.src_rank, "s", op.dst_rank, ch0, 0))
                touch((op.dst_rank, "r", op.src_rank, ch0, 0))

    def dep_tbs(rank: int, deps: tuple[int, ...]) -> set[tuple[int, str, int, int, int]]:
        out = set()
        for d in deps:
            hit = last_step_of.get((d, rank))
            if hit is not None:
                out.add(hit[0])
        return out

    for oid in order:
        op = prog.ops[oid]
        parts = _split_counts(op.cnt, min(opts.instances, op.cnt) if op.src_rank != op.dst_rank else 1)
        off = 0
        for inst, part in enumerate(parts):
            chunks = _split_counts(part, -(-part // opts.max_cnt))
            sub_off = off
            for ci, cnt in enumerate(chunks):
                src = (_BUF[Buf(op.src_buf)], op.src_off + sub_off)
                dst = (_BUF[Buf(op.dst_buf)], op.dst_off + sub_off)
                if op.src_rank == op.dst_rank:
                    r = op.src_rank
                    j = 0
                    while True:
                        key = (r, "c", -1, 0, j)
                        nops = max(0, len(dep_tbs(r, op.deps) - {key}) - 1) if ci == 0 else 0
                        if tb_cost[key] + 1 + nops <= MAX_STEPS:
                            break
                        j += 1
                    touch(key)
                    pc = _Piece(oid, level[oid], "cpy", -1, src, dst, cnt, ci == 0)
                    tb_steps[key].append(pc)
                    tb_cost[key] += 1 + nops
                    last_step_of[(oid, r)] = (key, pc)
                else:
                    s_, d_ = op.src_rank, op.dst_rank
                    spill = 0
                    ch = channel(s_, d_, inst, spill)
                    while True:
                        if layout == "combined":
                            ks, kr = (s_, "p", d_, ch, 0), (d_, "p", s_, ch, 0)
                        else:
                            ks, kr = (s_, "s", d_, ch, 0), (d_, "r", s_, ch, 0)
                        ns = max(0, len(dep_tbs(s_, op.deps) - {ks}) - 1) if ci == 0 else 0
                        nr = max(0, len(dep_tbs(d_, op.deps) - {kr}) - 1) if ci == 0 else 0
                        if tb_cost[ks] + 1 + ns <= MAX_STEPS and tb_cost[kr] + 1 + nr <= MAX_STEPS:
                            break
                        spill += 1
                        ch = channel(s_, d_, inst, spill)
                        if ch >= opts.max_channels:
                            raise LoweringError(
                                f"connection {s_}->{d_} needs more than {opts.max_channels} channels to stay within "
                                f"{MAX_STEPS} steps per thread block; fewer stages or a coarser layout would fit "
                                f"(a larger --max-padding), or allow more channels"
                            )
                    touch(ks)
                    touch(kr)
                    ps = _Piece(oid, level[oid], "s", d_, src, dst, cnt, ci == 0)
                    pr = _Piece(oid, level[oid], "r", s_, src, dst, cnt, ci == 0)
                    tb_steps[ks].append(ps)
                    tb_steps[kr].append(pr)
                    tb_cost[ks] += 1 + ns
                    tb_cost[kr] += 1 + nr
                    last_step_of[(oid, s_)] = (ks, ps)
                    last_step_of[(oid, d_)] = (kr, pr)
                sub_off += cnt
            off += part
    # ---- order steps inside each tb
    for key, pieces in tb_steps.items():
        if key[1] == "p":
            pieces[:] = _alternate(pieces)
    # ---- tb ids per rank: first use, copy tbs last
    ids: dict[tuple[int, str, int, int, int], int] = {}
    per_rank: dict[int, list[tuple[int, str, int, int, int]]] = defaultdict(list)
    for key in sorted(tb_steps, key=lambda kk: (kk[1] == "c", first_use.get(kk, 0), kk[4])):
        per_rank[key[0]].append(key)
    for r, keys in per_rank.items():
        for i, key in enumerate(keys):
            ids[key] = i
        if opts.dialect == "rccl" and len(keys) > MAX_TBS_RCCL:
            raise LoweringError(
                f"rank {r} needs {len(keys)} thread blocks; RCCL allows {MAX_TBS_RCCL}. Fewer peers per rank or "
                f"fewer channels would fit: try --tb-layout combined, --instances 1, or a coarser layout"
            )
    # ---- step indices (nops before steps with several dependency tbs), then dependencies
    op_of_piece: dict[int, dict[int, list[tuple[tuple[int, str, int, int, int], _Piece]]]] = defaultdict(dict)
    for key, pieces in tb_steps.items():
        for p in pieces:
            op_of_piece[p.op].setdefault(key[0], []).append((key, p))
    position: dict[int, int] = {}
    for pieces in tb_steps.values():
        for i, p in enumerate(pieces):
            position[id(p)] = i
    targets_of: dict[int, dict[tuple[int, str, int, int, int], _Piece]] = {}
    for key, pieces in tb_steps.items():
        idx = 0
        rank = key[0]
        for p in pieces:
            targets: dict[tuple[int, str, int, int, int], _Piece] = {}
            if p.first:
                for d in prog.ops[p.op].deps:
                    for tkey, tp in op_of_piece.get(d, {}).get(rank, []):
                        if tkey == key:
                            continue
                        prev = targets.get(tkey)
                        if prev is None or position[id(tp)] > position[id(prev)]:
                            targets[tkey] = tp
            p.index = idx + max(0, len(targets) - 1)
            idx = p.index + 1
            targets_of[id(p)] = targets
        if idx > MAX_STEPS:
            raise LoweringError(f"rank {rank} tb {ids[key]}: {idx} steps > {MAX_STEPS}")
    hasdep: set[int] = set()
    for pieces in tb_steps.values():
        for p in pieces:
            deps = []
            for tkey, tp in targets_of[id(p)].items():
                if ids[tkey] > MAX_DEP_TB:
                    raise LoweringError(
                        f"dependency target tb id {ids[tkey]} > {MAX_DEP_TB} (int8 in the executor)"
                    )
                deps.append((ids[tkey], tp.index))
                hasdep.add(id(tp))
            p.deps = sorted(deps)
    # ---- build the Algo
    nch = 1 + max((key[3] for key in tb_steps), default=0)
    gpus = []
    for r in range(n):
        tbs = []
        for key in per_rank.get(r, []):
            role, peer, chan = key[1], key[2], key[3]
            send = peer if role in ("s", "p") else -1
            recv = peer if role in ("r", "p") else -1
            steps: list[Step] = []
            for p in tb_steps[key]:
                for dtb, dst_ in p.deps[:-1]:
                    steps.append(Step(len(steps), "nop", "i", -1, "o", -1, 0, dtb, dst_, 0))
                dtb, dst_ = p.deps[-1] if p.deps else (-1, -1)
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
                        dst_,
                        1 if id(p) in hasdep else 0,
                    )
                )
            tbs.append(Tb(ids[key], send, recv, chan if role != "c" else 0, steps))
        gpus.append(Gpu(r, c, c, prog.scratch[r], tbs))
    per_chan: dict[tuple[int, int, str], int] = defaultdict(int)
    for g in gpus:
        for t in g.tbs:
            if t.send >= 0:
                per_chan[(g.id, t.chan, "send")] += 1
            if t.recv >= 0:
                per_chan[(g.id, t.chan, "recv")] += 1
    for (r, ch, role), cnt in per_chan.items():
        if cnt > MAX_TBS_PER_CHANNEL:
            raise LoweringError(
                f"rank {r} channel {ch}: {cnt} tbs with a {role} peer; the executor allows {MAX_TBS_PER_CHANNEL}"
            )
    return Algo(opts.name, opts.proto, nch, c, n, "alltoall", 0, 1, opts.min_bytes, opts.max_bytes, gpus)


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
    """Serialise exactly as the executors' parser wants it (spec §1, §15 MUST 1-2)."""
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
