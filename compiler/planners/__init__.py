"""Planner registry: name -> planner module, imported lazily (so ``a2acc --help`` stays fast).

A planner is a module with ``plan(request: PlanRequest) -> Program``, optionally an ``Options`` frozen dataclass
(fields with defaults and ``metadata={"help": ...}``) and ``applies(topology) -> str | None`` (None when it can
plan for the topology, otherwise why not: compare skips it, ``auto`` does not try it, ``plan`` refuses with the
reason). The pipeline builds the request, runs the planner and verifies the result. A new planner is a module
(or package) in this folder plus one :class:`~a2acc.registry.Entry` line in :data:`PLANNERS`.

Planners only emit Programs (through :class:`~a2acc.ir.builder.ProgramBuilder`); they never lower or write
files. To run one, use :func:`a2acc.pipeline.compile` (or :func:`a2acc.plan`), which verifies what it returns.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from a2acc.defaults import DEFAULT_ALGORITHM as DEFAULT_ALGORITHM
from a2acc.options import NoOptions
from a2acc.registry import Entry, Registry

# types only: the command line's parser reads the registry below without importing numpy or a planner
TYPE_CHECKING = False
if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from a2acc.analysis.model import SimModel
    from a2acc.ir.layout import ChunkLayout
    from a2acc.ir.program import Program
    from a2acc.model.topology import Topology


@dataclass(frozen=True)
class PlanRequest:
    """Everything a planner gets: topology, byte matrix, its chunk layout and the planner's options."""

    topology: Topology
    traffic: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]
    unit_bytes: int
    options: Any = field(default_factory=NoOptions)
    #: the simulator's model a cost-aware planner prices its choices with (None: the topology's default)
    model: SimModel | None = None
    #: the most peers per rank the request's target can run (None: no limit); planners that choose between
    #: shapes keep within it when any of their shapes does (:func:`a2acc.ir.program.program_peers`)
    max_peers: int | None = None

    @property
    def nranks(self) -> int:
        return int(self.counts.shape[0])

    @cached_property
    def layout(self) -> ChunkLayout:
        """``counts``' chunk layout, computed once per request (a search builds many Programs of one)."""
        from a2acc.ir.layout import ChunkLayout as Layout

        return Layout.of(self.counts)


PlannerFn = Callable[[PlanRequest], "Program"]


PLANNERS: Registry[PlannerFn] = Registry(
    "planner",
    "--algorithm",
    [
        Entry(
            "direct", "a2acc.planners.direct", "FanOut: every pair sends at once, self-chunks copied", "plan"
        ),
        Entry(
            "fast",
            "a2acc.planners.fast",
            "FAST/FLASH: balancing + Birkhoff stages + pipelined redistribution",
            "plan",
        ),
        Entry(
            "spreadout",
            "a2acc.planners.spreadout",
            "MPI SpreadOut: stage k, rank r sends to (r+k) mod N",
            "plan",
        ),
        Entry(
            "hierarchical",
            "a2acc.planners.hierarchical",
            "MSCCL relay: gather at one GPU, cross, scatter",
            "plan",
        ),
        Entry("mcf", "a2acc.planners.mcf", "max-concurrent multi-commodity flow LP (HiGHS), relays", "plan"),
        Entry(
            "auto",
            "a2acc.planners.auto",
            "the fastest verified plan of every planner that applies, under the simulator's model",
            "plan",
        ),
        Entry(
            "syccl",
            "a2acc.planners.syccl",
            "SyCCL: symmetric sketches, per-group LPs, simulated pick",
            "plan",
        ),
    ],
)


def register(name: str, module: str, summary: str) -> None:
    """Register a planner module at run time (plugins, tests); built-in planners are listed above."""
    PLANNERS.register(name, module, summary, "plan")


def available() -> tuple[Entry, ...]:
    return PLANNERS.entries()


def get_planner(name: str) -> PlannerFn:
    return PLANNERS.get(name)


def options_type(name: str) -> type:
    return PLANNERS.options(name)


def applies(name: str, topology: Topology) -> str | None:
    """None when planner ``name`` can plan for ``topology``; otherwise the reason it cannot."""
    return PLANNERS.applies(name, topology)


# ---------------------------------------------------------------------------------------------- memo
#: plans remembered per process, by content (the planner, its options, the topology, the layout, the bytes and the
#: model): a comparison's auto row reuses the rows above it, and a JIT bucket compiled twice plans once
_MEMO_OPS = 2_000_000
_MEMO: OrderedDict[tuple[str, ...], Program] = OrderedDict()
_MEMO_LOCK = threading.Lock()


def _memo_key(name: str, req: PlanRequest) -> tuple[str, ...]:
    import hashlib

    import numpy as np

    h = hashlib.sha256()
    for arr in (req.counts, req.traffic):
        a = np.ascontiguousarray(arr, dtype=np.int64)
        h.update(repr(a.shape).encode())
        h.update(a.tobytes())
    return (
        name,
        repr(req.options),
        req.topology.fingerprint,
        str(req.unit_bytes),
        h.hexdigest(),
        repr(req.model),
        repr(req.max_peers),
    )


def run(name: str, req: PlanRequest) -> Program:
    """Planner ``name`` on ``req``, remembered by content (planners are deterministic functions of the request)."""
    key = _memo_key(name, req)
    with _MEMO_LOCK:
        hit = _MEMO.get(key)
        if hit is not None:
            _MEMO.move_to_end(key)
            return hit
    prog = get_planner(name)(req)
    with _MEMO_LOCK:
        _MEMO[key] = prog
        twin = _unlimited_key(name, req, prog)
        if twin is not None:
            _MEMO[twin] = prog
        _trim()
    return prog


def _unlimited_key(name: str, req: PlanRequest, prog: Program) -> tuple[str, ...] | None:
    """The key of the same request without its time limit (and time to beat), when neither cut the search: a
    searching planner (syccl, mcf) returns the same plan then, and says in ``meta["note"]`` when it stopped
    early or is not proven best (a plan with a note is never taken for an unlimited one). None otherwise."""
    limit = getattr(req.options, "time_limit", None)
    if not isinstance(limit, (int, float)) or limit <= 0 or "note" in prog.meta:
        return None
    free: dict[str, float] = {"time_limit": 0.0}
    if isinstance(getattr(req.options, "time_to_beat", None), (int, float)):
        free["time_to_beat"] = 0.0
    try:
        unlimited = dataclasses.replace(req, options=dataclasses.replace(req.options, **free))
    except (TypeError, ValueError):  # pragma: no cover - options that are not a dataclass
        return None
    return _memo_key(name, unlimited)


def _trim() -> None:
    """Drop the oldest plans past :data:`_MEMO_OPS` ops (the newest is always kept); the lock is held."""
    while len(_MEMO) > 1 and sum(len(p.table) for p in _MEMO.values()) > _MEMO_OPS:
        _MEMO.popitem(last=False)


def forget() -> None:
    """Drop every remembered plan (benchmarks that time cold planning call it between runs), and what each
    planner module already imported remembers for itself (a ``forget()`` of its own: syccl's symmetries,
    syntheses and chosen candidates), so that the next plan is as cold as in a new process."""
    with _MEMO_LOCK:
        _MEMO.clear()
    for name in PLANNERS.names():
        mod = sys.modules.get(PLANNERS.entry(name).module or "")
        own = getattr(mod, "forget", None)
        if callable(own):
            own()


def remembered(name: str, req: PlanRequest) -> Program | None:
    """The plan :func:`run` made for exactly this request, if it is still remembered."""
    with _MEMO_LOCK:
        return _MEMO.get(_memo_key(name, req))


MemoEntry = tuple[tuple[str, ...], "Program"]


def memo_keys() -> frozenset[tuple[str, ...]]:
    """The keys of the plans remembered now (to export, later, only what was planned after)."""
    with _MEMO_LOCK:
        return frozenset(_MEMO)


def memo_export(before: frozenset[tuple[str, ...]] = frozenset()) -> list[MemoEntry]:
    """The remembered plans whose keys are not in ``before``, oldest first: what a worker process planned, to
    hand to another process's :func:`memo_import` (a comparison's ``auto`` row reuses the plans of the rows
    computed elsewhere). Keys are content, so an imported plan is exactly what :func:`run` would make."""
    with _MEMO_LOCK:
        return [(k, p) for k, p in _MEMO.items() if k not in before]


def memo_import(entries: Sequence[MemoEntry]) -> None:
    """Remember plans another process made (:func:`memo_export`)."""
    with _MEMO_LOCK:
        for k, p in entries:
            _MEMO[k] = p
            _MEMO.move_to_end(k)
        _trim()
