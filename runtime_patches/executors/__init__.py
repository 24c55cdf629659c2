"""Executors: what runs a cached plan at run time (``A2ACC_EXECUTOR``), separate from what it was lowered to.

| name | runs | needs |
|---|---|---|
| ``p2p`` (default) | the plan as a few stages of coalesced per-peer send/recv + vectorised local copies (FLASH's implementation style) | any backend with point-to-point: NCCL, RCCL, Gloo |
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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from a2acc.errors import InputError
from a2acc.registry import Entry, Registry


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
        _line("p2p", "stages of coalesced per-peer send/recv and vectorised copies (NCCL, RCCL, Gloo)", "none", True),
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
    """Byte ranges of one call's arena (one uint8 tensor on the data's device): the packed input and the
    output the engine unpacks, in an arena of ``total`` bytes."""

    input: tuple[int, int]
    output: tuple[int, int]
    total: int


class Executor(Protocol):
    name: str

    def unavailable(self, entry: Any, group: Any) -> str | None:
        """Why this executor cannot run the cache entry's plan in this process (None: it can)."""
        ...

    def prepare(self, prog: Any, entry: Any) -> Any:
        """Per-plan state, made once when the plan loads (in the background thread)."""
        ...

    def regions(self, prepared: Any, rank: int) -> Regions:
        """The arena program rank ``rank`` needs."""
        ...

    def start(
        self,
        prepared: Any,
        rank: int,
        arena: Any,
        peers: list[int],
        groups: tuple[Any, Any],
        stock: Any,
        extra: Sequence[tuple[bool, Any, int]] = (),
        direct: Mapping[tuple[bool, int], Any] | None = None,
    ) -> Callable[[], None]:
        """Start program rank ``rank``'s part over ``arena`` (its input region already packed); return the
        tail that completes it (the caller runs the tail, then unpacks the output region). ``peers[c]`` is
        the global rank playing program rank ``c``; ``groups`` the (main, intra-server) process groups;
        ``extra`` point-to-point messages to post alongside and ``direct`` the caller's bytes for the
        messages that carry them, given only to executors with ``carries_residual = True``."""
        ...


def get_executor(name: str) -> Executor:
    return EXECUTORS.get(name)


def options_type(name: str) -> type:
    """The options dataclass of executor ``name`` (``A2ACC_EXECUTOR_OPTS``)."""
    return EXECUTORS.options(name)
