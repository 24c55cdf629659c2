"""Planner registry: name -> planner module, imported lazily (so ``a2acc --help`` stays fast).

A planner is a module with ``plan(request: PlanRequest) -> Program`` and, when it takes options, an
``Options`` frozen dataclass (fields with defaults and ``metadata={"help": ...}``); the pipeline builds the
request, runs the planner and verifies the result. A new planner is a module (or package) in this folder
plus one line in :data:`PLANNERS`.

Planners only emit Programs (through :class:`~a2acc.ir.builder.ProgramBuilder`); they never lower or write
files. To run one, use :func:`a2acc.pipeline.compile` (or :func:`a2acc.plan`), which verifies what it returns.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from a2acc.errors import InputError
from a2acc.ir.program import Program
from a2acc.model.topology import Topology
from a2acc.options import NoOptions

DEFAULT_ALGORITHM = "direct"


@dataclass(frozen=True)
class PlanRequest:
    """Everything a planner gets: topology, byte matrix, its chunk layout and the planner's options."""

    topology: Topology
    traffic: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]
    unit_bytes: int
    options: Any = field(default_factory=NoOptions)

    @property
    def nranks(self) -> int:
        return int(self.counts.shape[0])


PlannerFn = Callable[[PlanRequest], Program]


@dataclass(frozen=True)
class PlannerInfo:
    name: str
    module: str
    summary: str


PLANNERS: dict[str, PlannerInfo] = {
    p.name: p
    for p in (
        PlannerInfo(
            "direct", "a2acc.planners.direct", "FanOut: every pair sends at once, self-chunks copied"
        ),
        PlannerInfo(
            "fast",
            "a2acc.planners.fast",
            "FAST/FLASH: balancing + Birkhoff stages + pipelined redistribution",
        ),
        PlannerInfo(
            "spreadout", "a2acc.planners.spreadout", "MPI SpreadOut: stage k, rank r sends to (r+k) mod N"
        ),
        PlannerInfo(
            "hierarchical", "a2acc.planners.hierarchical", "MSCCL relay: gather at one GPU, cross, scatter"
        ),
        PlannerInfo("mcf", "a2acc.planners.mcf", "max-concurrent multi-commodity flow LP (HiGHS), relays"),
        PlannerInfo(
            "syccl", "a2acc.planners.syccl", "SyCCL: symmetric sketches, per-group LPs, simulated pick"
        ),
    )
}


def register(name: str, module: str, summary: str) -> None:
    """Register a planner module at run time (plugins, tests); built-in planners are listed above."""
    PLANNERS[name] = PlannerInfo(name, module, summary)


def available() -> tuple[PlannerInfo, ...]:
    return tuple(PLANNERS[k] for k in sorted(PLANNERS))


def planner_module(name: str) -> ModuleType:
    info = PLANNERS.get(name)
    if info is None:
        raise InputError("", "--algorithm", name, f"known planners: {', '.join(sorted(PLANNERS))}")
    return importlib.import_module(info.module)


def get_planner(name: str) -> PlannerFn:
    fn: PlannerFn = planner_module(name).plan
    return fn


def options_type(name: str) -> type:
    opt: type = getattr(planner_module(name), "Options", NoOptions)
    return opt
