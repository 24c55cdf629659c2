"""The ``p2p`` executor: a plan as a short program of stages over NCCL/RCCL (or Gloo) point-to-point.

What every NVIDIA and AMD stack runs today is point-to-point send/recv, which is also how FLASH itself is
implemented (Lei et al., NSDI'26, section 5). Each plan is compiled once per rank and canonical position
(:mod:`a2acc.runtime.executors.stages`: stages of coalesced per-peer messages over an arena of rows, local moves as
vectorised copies); per call this executor only

- runs each step's copies (``index_select`` into a staging block, ``index_copy_`` out of one: one call per
  copy phase, never one per op),
- posts the step's messages as one ``batch_isend_irecv`` per lane (one grouped NCCL launch; at most one send and
  one receive per peer and step),
- waits where the data requires it (``Work.wait``: on GPUs this orders the current stream, the host does not
  block; on Gloo it blocks).

Buffers are pre-sliced once per (plan, position, arena) and the index tensors are made once per device; the
arena itself comes from the engine's pool. ``overlap=true`` (``A2ACC_EXECUTOR_OPTS``) puts intra-server
messages on a second process group over the same ranks (a second communicator, with its own stream under
NCCL), so a step's intra-server transfers run while the previous step's inter-server ones are in flight.

**What has run where:** on Gloo across 4 and 8 processes (tests and ``benchmarks/jit_p2p.py``), and against a
test double that enforces NCCL's device rule over Gloo. Not on a GPU: the NCCL path (grouped launches, stream
order of ``wait``, the second communicator) is written against torch.distributed's documented behaviour only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from a2acc.ir.program import Program
from a2acc.runtime.executors import Regions
from a2acc.runtime.executors.stages import INTER, GlobalSteps, StageProgram, compile_rank, global_steps


@dataclass(frozen=True)
class Options:
    """Options of the ``p2p`` executor (``A2ACC_EXECUTOR_OPTS=KEY=VALUE,...``)."""

    overlap: bool = False  # intra-server messages on a second process group (FLASH's two communicators)


class Prepared:
    """A plan ready for this executor: the global steps (computed once, in the background) and each rank's
    :class:`StageProgram`, compiled on first use of a position (a relabelled plan may play any rank)."""

    def __init__(self, prog: Program, overlap: bool) -> None:
        self.prog = prog
        self.overlap = overlap
        self.steps: GlobalSteps = global_steps(prog)
        self._ranks: dict[int, StageProgram] = {}
        self._lock = threading.Lock()

    def rank(self, c: int) -> StageProgram:
        sp = self._ranks.get(c)
        if sp is None:
            with self._lock:
                sp = self._ranks.get(c)
                if sp is None:
                    sp = self._ranks[c] = compile_rank(self.prog, c, self.steps, self.overlap)
        return sp


class _Bound:
    """A StageProgram bound to one arena and device: index tensors and the message views, made once."""

    def __init__(self, sp: StageProgram, arena: Any) -> None:
        import torch

        self.arena = arena
        # rows as int64 words when the unit allows (index copies move 8 bytes per element: ~6x faster on CPU)
        word = torch.int64 if sp.unit % 8 == 0 else torch.uint8
        width = sp.unit // 8 if sp.unit % 8 == 0 else sp.unit
        rows = arena[: sp.arena_rows * sp.unit].view(word).view(sp.arena_rows, width)
        self.rows = rows
        # input, output and scratch rows; the staging blocks after them never overlap this view, so
        # index_select(out=) may gather from it straight into a staging block
        self.main = rows[: sp.main_rows]
        dev = arena.device

        def idx(a: Any) -> Any:
            return torch.from_numpy(a).to(dev)

        self.steps = []
        for st in sp.steps:
            scatter = None if st.scatter is None else (idx(st.scatter.src), idx(st.scatter.dst))
            copies = [(idx(c.src), idx(c.dst)) for c in st.copies]
            pack = None
            if st.pack is not None:
                lo, hi = int(st.pack.dst[0]), int(st.pack.dst[-1]) + 1
                pack = (idx(st.pack.src), rows[lo:hi])
            self.steps.append((st.waits, scatter, copies, pack, st.posts))
        self.views = [rows[m.lo : m.hi].view(-1).view(torch.uint8) for m in sp.messages]


class P2PExecutor:
    """Runs Programs as stage programs over ``torch.distributed`` point-to-point (see module docstring)."""

    name = "p2p"
    carries_residual = True  # takes the rows beyond a bucket's layout as extra messages (see start)

    def __init__(self, options: Options | None = None) -> None:
        self.options = options or Options()
        self.wait_s = 0.0  # seconds blocked in Work.wait (what is not Python time per call)
        self._bound: dict[tuple[int, int, int], _Bound] = {}

    def configure(self, options: Any) -> None:
        self.options = options
        self._bound.clear()

    def unavailable(self, entry: Any, group: Any) -> str | None:
        return None

    def prepare(self, prog: Program, entry: Any = None) -> Prepared:
        return Prepared(prog, self.options.overlap)

    def regions(self, prepared: Prepared, rank: int) -> Regions:
        sp = prepared.rank(rank)
        u = sp.unit
        return Regions(
            (sp.in_rows[0] * u, sp.in_rows[1] * u),
            (sp.out_rows[0] * u, sp.out_rows[1] * u),
            sp.arena_rows * u,
        )

    def counters(self, prepared: Prepared, rank: int) -> dict[str, int]:
        """Per call on program rank ``rank``: messages posted, transfer steps, bytes sent over the arena (relays
        and padding included; the engine adds what direct messages carried)."""
        sp = prepared.rank(rank)
        return {"sends": sp.sends, "recvs": sp.recvs, "steps": sp.transfer_steps, "sent_bytes": sp.bytes_sent}

    def io(self, prepared: Prepared, rank: int) -> StageProgram:
        """Which regions the engine must pack and unpack, and which messages carry the caller's rows."""
        return prepared.rank(rank)

    def bind(self, sp: StageProgram, arena: Any) -> _Bound:
        key = (id(sp), int(arena.data_ptr()), int(arena.numel()))
        b = self._bound.get(key)
        if b is None or b.arena is not arena:
            if len(self._bound) > 256:
                self._bound.clear()
            b = self._bound[key] = _Bound(sp, arena)
        return b

    def start(
        self,
        prepared: Prepared,
        rank: int,
        arena: Any,
        peers: list[int],
        groups: tuple[Any, Any],
        stock: Any,
        extra: Sequence[tuple[bool, Any, int]] = (),
        direct: Mapping[tuple[bool, int], Any] | None = None,
    ) -> Callable[[], None]:
        """Run every step but the last; return the tail (the last waits and copies). ``peers[c]`` is the global
        rank playing program rank ``c``; ``groups`` the process groups of the two lanes (the same group twice
        without overlap). ``extra`` are messages outside the plan, ``(send?, tensor, global peer)``: the rows
        beyond a skew bucket's layout, sent straight from the caller's input into the peer's output with the
        first step's batch (one more message per peer instead of a stock collective). ``direct`` holds, for
        every direct message (``(send?, program peer)``), the caller's bytes it carries (None: no rows this
        call, the message is skipped on both ends)."""
        sp = prepared.rank(rank)
        b = self.bind(sp, arena)
        run = _Run(self, b, sp, peers, groups, direct or {})
        pending_extra = list(extra)
        for waits, scatter, copies, pack, posts in b.steps[:-1]:
            run.settle(waits, scatter)
            run.copies(copies, pack)
            run.post(posts, pending_extra)
            pending_extra = []
        if pending_extra:
            run.post((), pending_extra)
        waits, scatter, copies, _pack, _posts = b.steps[-1]

        def tail() -> None:
            run.settle((*waits, EXTRA), scatter)  # the last step waits for everything still in flight
            run.copies(copies, None)

        return tail


EXTRA = -1  # key of the extra messages' works
EXTRA_TAG = 1 << 20  # their tag (Gloo matches by tag; NCCL by order, which both sides keep)


class _Run:
    """One call of a bound stage program: posts, waits and copies."""

    def __init__(
        self,
        ex: P2PExecutor,
        b: _Bound,
        sp: StageProgram,
        peers: list[int],
        groups: tuple[Any, Any],
        direct: Mapping[tuple[bool, int], Any],
    ) -> None:
        self.ex, self.b, self.sp, self.peers, self.groups, self.direct = ex, b, sp, peers, groups, direct
        self.works: dict[int, list[Any]] = {}

    def settle(self, waits: tuple[int, ...], scatter: Any) -> None:
        t0 = time.perf_counter()
        for k in waits:
            for w in self.works.pop(k, ()):
                w.wait()
        self.ex.wait_s += time.perf_counter() - t0
        if scatter is not None:
            self.b.main.index_copy_(0, scatter[1], self.b.rows.index_select(0, scatter[0]))

    def copies(self, copies: Any, pack: Any) -> None:
        import torch

        main = self.b.main
        for src, dst in copies:
            main.index_copy_(0, dst, main.index_select(0, src))
        if pack is not None:  # index_select(out=) gathers the rows straight into the staging block
            torch.index_select(main, 0, pack[0], out=pack[1])

    def post(self, posts: tuple[int, ...], extra: Sequence[tuple[bool, Any, int]]) -> None:
        import torch.distributed as dist

        msgs, views, peers, groups = self.sp.messages, self.b.views, self.peers, self.groups
        lanes: dict[int, list[tuple[int, Any]]] = {}
        for k in posts:
            m = msgs[k]
            view = self.direct.get((m.send, m.peer)) if m.direct else views[k]
            if view is None:  # a direct message with no rows this call (both ends know it)
                continue
            op = dist.isend if m.send else dist.irecv
            lanes.setdefault(m.lane, []).append(
                (k, dist.P2POp(op, view, peers[m.peer], groups[m.lane], m.step))
            )
        for send, tensor, peer in extra:
            op = dist.isend if send else dist.irecv
            lanes.setdefault(INTER, []).append(
                (EXTRA, dist.P2POp(op, tensor, peer, groups[INTER], EXTRA_TAG))
            )
        for lane in sorted(lanes):
            batch = lanes[lane]
            for (k, _op), w in zip(batch, dist.batch_isend_irecv([op for _k, op in batch])):
                self.works.setdefault(k, []).append(w)


EXECUTOR = P2PExecutor()
