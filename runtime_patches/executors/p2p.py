"""The ``p2p`` executor: a plan as a few exchanges over NCCL/RCCL (or Gloo) point-to-point and collectives.

What every NVIDIA and AMD stack runs today is point-to-point send/recv, which is also how FLASH itself is
implemented (Lei et al., NSDI'26, section 5). Each plan is compiled once per rank position into a launch
program (:mod:`a2acc.runtime.launch.program`: one exchange per step and lane, local copies as renames), bound
once per buffers (:mod:`a2acc.runtime.launch.bound`) and replayed per call: a fixed list of launches, each
exchange one ``all_to_all_single`` (its per-peer loop in C++) or one ``batch_isend_irecv`` of ops made at bind
time, never per-op Python. A plan that is the caller's own all-to-all (one step, every region whole) is posted
as one ``all_to_all_single`` of the caller's tensors.

``overlap=true`` (``A2ACC_EXECUTOR_OPTS``) puts intra-server transfers on a second process group over the same
ranks (a second communicator, with its own stream under NCCL), so a step's intra-server transfers run while the
previous step's inter-server ones are in flight.

**What has run where:** on Gloo across 2, 4 and 8 processes (tests, ``benchmarks/jit_hostcost.py``,
``benchmarks/jit_workloads.py``), against a test double that enforces NCCL's device rule over Gloo, and in one
process playing every rank (``benchmarks/gpu_check.py --device cpu``). Not on a GPU: the NCCL path (grouped
launches, stream order of ``wait``, the second communicator) is written against torch.distributed's documented
behaviour only.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from a2acc.ir.program import Program
from a2acc.runtime.launch.bound import BoundLaunch, Buffers
from a2acc.runtime.launch.post import Posted
from a2acc.runtime.launch.program import (
    ExchangeSet,
    GlobalSteps,
    LaunchProgram,
    compile_launch,
    exchange_set,
    global_steps,
)


@dataclass(frozen=True)
class Options:
    """Options of the ``p2p`` executor (``A2ACC_EXECUTOR_OPTS=KEY=VALUE,...``)."""

    overlap: bool = False  # intra-server transfers on a second process group (FLASH's two communicators)


class Prepared:
    """A plan ready for this executor: its steps and exchanges (computed once, in the background) and each rank
    position's :class:`LaunchProgram`, compiled on first use of a (position, relabelling)."""

    def __init__(self, prog: Program, overlap: bool) -> None:
        self.prog = prog
        self.overlap = overlap
        self.steps: GlobalSteps = global_steps(prog)
        self.exchanges: ExchangeSet = exchange_set(prog, self.steps, overlap)
        self._programs: dict[tuple[int, tuple[int, ...] | None, bool], LaunchProgram] = {}
        self._lock = threading.Lock()

    @property
    def direct(self) -> bool:
        return self.steps.direct

    def program(
        self, position: int, ranks: Sequence[int] | None = None, direct: bool = True
    ) -> LaunchProgram:
        key = (position, None if ranks is None else tuple(int(r) for r in ranks), direct)
        lp = self._programs.get(key)
        if lp is None:
            with self._lock:
                lp = self._programs.get(key)
                if lp is None:
                    perm = None if ranks is None else np.asarray(ranks, dtype=np.int64)
                    lp = compile_launch(
                        self.prog, position, self.steps, self.exchanges, perm, self.overlap, direct
                    )
                    self._programs[key] = lp
        return lp


class P2PExecutor:
    """Runs Programs as launch programs over ``torch.distributed`` (see module docstring)."""

    name = "p2p"
    carries_residual = True  # rows beyond a bucket's layout travel in its own messages (launch.residual)

    def __init__(self, options: Options | None = None) -> None:
        self.options = options or Options()

    def configure(self, options: Any) -> None:
        self.options = options

    def unavailable(self, entry: Any, group: Any) -> str | None:
        return None

    def prepare(self, prog: Program, entry: Any = None) -> Prepared:
        return Prepared(prog, self.options.overlap)

    def bind(
        self,
        prog: Program,
        prepared: Prepared,
        position: int,
        ranks: Sequence[int] | None,
        row_bytes: int,
        device: Any,
        groups: tuple[Any, Any],
        global_ranks: Sequence[int],
        backend: str,
        stock: Any,
        posted: Posted,
        direct: bool = True,
        buffers: Buffers | None = None,
    ) -> BoundLaunch:
        """The plan at program position ``position`` (played by the caller), its program ranks played by group
        ranks ``ranks`` (None: the identity), bound to buffers on ``device`` for rows of ``row_bytes``
        (``direct=False``: a plan that is the caller's all-to-all still runs over the buffers; ``buffers``: the
        group's shared buffers on the device, None for buffers of its own)."""
        lp = prepared.program(position, ranks, direct)
        return BoundLaunch(lp, row_bytes, device, groups, global_ranks, backend, stock, posted, buffers)


EXECUTOR = P2PExecutor()
