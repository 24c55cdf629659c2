"""Executors: what runs a cached plan at run time (``A2ACC_EXECUTOR``), separate from what it was lowered to.

| name | runs | needs |
|---|---|---|
| ``p2p`` (default) | the plan as a few exchanges of grouped per-peer transfers, bound once and replayed per call (FLASH's implementation style) | any backend with point-to-point: NCCL, RCCL, Gloo |
| ``reference`` | every op as its own send/recv or copy, level by level: the correctness oracle | as ``p2p`` |
| ``msccl`` | the packed buffer through the stock ``all_to_all_single``, which msccl-executor-nccl / RCCL (ROCm <= 7.12) replace by the bucket's XML | an NCCL/RCCL group on ROCm PyTorch and the XML in ``MSCCL_ALGO_DIR`` at start |
| ``mscclpp`` | an MSCCL++ JSON plan through ``mscclpp.Executor`` | mscclpp >= 0.9 importable, a GPU |

Each executor says, per plan, whether it can run it here (:meth:`Executor.unavailable` returns the reason it
cannot); the engine then runs :data:`FALLBACK` with one warning, on every rank alike (the choice is part of the
ranks' agreement). A new executor is a module here plus one line in :data:`EXECUTORS` (a
:class:`a2acc.registry.Registry`, as planners, targets and passes): the one list of executor names (settings,
docs and the CLI read it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from a2acc.errors import InputError
from a2acc.ir.program import Program
from a2acc.registry import Entry, Registry
from a2acc.runtime.launch.arena import ArenaLaunch, fit_table
from a2acc.runtime.launch.call import Call
from a2acc.runtime.launch.post import Posted


@dataclass(frozen=True)
class ExecutorEntry(Entry):
    """An executor's registry line: besides its module, what its plans are lowered to when ``A2ACC_BACKEND`` is
    not set (``backend``; "none": the Program itself) and whether it can run a plan with its ranks relabelled
    (``relabels``: canonical buckets; uniform collectives cannot). Settings read these without importing the
    executor (which may import torch or mscclpp)."""

    backend: str
    relabels: bool


def _line(name: str, summary: str, backend: str, relabels: bool) -> ExecutorEntry:
    return ExecutorEntry(name, f"a2acc.runtime.executors.{name}", summary, "EXECUTOR", backend, relabels)


EXECUTORS: Registry[Executor] = Registry(
    "executor",
    "A2ACC_EXECUTOR",
    [
        _line("p2p", "a few exchanges of grouped send/recv per plan, bound once and replayed (NCCL, RCCL, Gloo)", "none", True),
        _line("reference", "every op as its own send/recv or copy, level by level (the correctness oracle)", "none", True),
        _line("msccl", "the bucket's XML in msccl-executor-nccl or RCCL <= ROCm 7.12 (MSCCL_ALGO_DIR at start)", "msccl-xml", False),
        _line("mscclpp", "the bucket's MSCCL++ JSON plan through mscclpp.Executor (mscclpp >= 0.9)", "mscclpp-json", False),
    ],
)  # fmt: skip


def info(name: str) -> ExecutorEntry:
    """The registry line of executor ``name`` (an InputError naming the known ones otherwise)."""
    e = EXECUTORS.entry(name)
    if not isinstance(e, ExecutorEntry):  # pragma: no cover - every line above is an ExecutorEntry
        raise InputError("", EXECUTORS.flag, name, "an executor registered without its backend")
    return e


DEFAULT_EXECUTOR = "p2p"
FALLBACK = "p2p"  # runs a plan when the chosen executor cannot


@dataclass(frozen=True)
class Regions:
    """Byte ranges of one call's arena (one uint8 tensor on the data's device), for executors that run on one
    buffer per rank: the packed input and the output the engine unpacks, in an arena of ``total`` bytes."""

    input: tuple[int, int]
    output: tuple[int, int]
    total: int


class Launch(Protocol):
    """A plan bound to one rank position, row size and device: replayed per call."""

    def run(self, call: Call, matrix: Any = None) -> Any:
        """Run the call (``matrix``: the call's rows per pair when every rank knows it, else None); returns its
        ``Work`` when ``call.async_op``."""
        ...


class Executor(Protocol):
    name: str

    def unavailable(self, entry: Any, group: Any) -> str | None:
        """Why this executor cannot run the cache entry's plan in this process (None: it can)."""
        ...

    def prepare(self, prog: Any, entry: Any) -> Any:
        """Per-plan state, made once when the plan loads (in the background thread)."""
        ...

    def bind(
        self,
        prog: Any,
        prepared: Any,
        position: int,
        ranks: Sequence[int] | None,
        row_bytes: int,
        device: Any,
        groups: tuple[Any, Any],
        global_ranks: Sequence[int],
        backend: str,
        stock: Any,
        posted: Posted,
        buffers: Any = None,
    ) -> Launch:
        """The plan at program position ``position``, its program ranks played by group ranks ``ranks`` (None:
        the identity), bound for rows of ``row_bytes`` on ``device``. ``groups``: the (main, intra-server)
        process groups; ``global_ranks``: the global rank of each group rank; ``stock``: the unpatched
        ``all_to_all_single``; ``posted``: where what is posted is counted; ``buffers``: the group's shared
        buffers on the device (:class:`a2acc.runtime.launch.bound.Buffers`), for executors that use them."""
        ...


Start = Callable[..., Callable[[], None]]


def bind_arena(
    start: Start,
    regions: Regions,
    prog: Program,
    position: int,
    ranks: Sequence[int] | None,
    row_bytes: int,
    device: Any,
    posted: Posted,
) -> ArenaLaunch:
    """An executor that runs on one buffer per rank (``start(arena, posted) -> tail``; ``regions`` of that
    buffer) as a launch: the layout's regions placed by group rank."""
    lay, unit, n = prog.layout, prog.unit_bytes, prog.nranks
    perm = np.arange(n, dtype=np.int64) if ranks is None else np.asarray(ranks, dtype=np.int64)
    in_off, in_cap = np.zeros(n, np.int64), np.zeros(n, np.int64)
    out_off, out_cap = np.zeros(n, np.int64), np.zeros(n, np.int64)
    in_off[perm], in_cap[perm] = lay.in_off[position], lay.counts[position]
    out_off[perm], out_cap[perm] = lay.out_off[position], lay.counts[:, position]
    out_chunks = (regions.output[1] - regions.output[0]) // unit
    return ArenaLaunch(
        start,
        unit,
        ((regions.input[1] - regions.input[0]) // unit, in_off, in_cap),
        (regions.output[0], out_chunks, out_off, out_cap),
        regions.total,
        fit_table(lay.counts, unit, row_bytes, None if ranks is None else perm.tolist()),
        row_bytes,
        device,
        posted,
    )


def get_executor(name: str) -> Executor:
    return EXECUTORS.get(name)


def options_type(name: str) -> type:
    """The options dataclass of executor ``name`` (``A2ACC_EXECUTOR_OPTS``)."""
    return EXECUTORS.options(name)
