"""Planner registry: name -> planner, imported lazily (so ``a2acc --help`` stays fast).

Every planner is a function ``plan(request: PlanRequest) -> Program``; :func:`schedule` runs it and passes the
result through the shared verifier, so a planner bug surfaces as a :class:`~a2acc.errors.VerificationError`,
never as a silently wrong plan.

Example::

    from a2acc.planners import schedule
    prog = schedule(topology, matrix, algorithm="direct")
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from a2acc.errors import InputError
from a2acc.ir import Program
from a2acc.passes.quantize import DEFAULT_TARGET_CHUNKS, choose_unit, quantize
from a2acc.topology import Topology
from a2acc.traffic import validate_matrix
from a2acc.verify import check_program

DEFAULT_ALGORITHM = "direct"


@dataclass(frozen=True)
class PlanRequest:
    """Everything a planner gets: topology, byte matrix, its chunk layout and free-form options."""

    topology: Topology
    traffic: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]
    unit_bytes: int
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def nranks(self) -> int:
        return int(self.counts.shape[0])


PlannerFn = Callable[[PlanRequest], Program]


@dataclass(frozen=True)
class PlannerInfo:
    name: str
    module: str
    summary: str


_REGISTRY: dict[str, PlannerInfo] = {
    info.name: info
    for info in (
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
    )
}


def register(name: str, module: str, summary: str) -> None:
    """Register a planner module (it must define ``plan(request) -> Program``)."""
    _REGISTRY[name] = PlannerInfo(name, module, summary)


def available() -> tuple[PlannerInfo, ...]:
    return tuple(_REGISTRY[k] for k in sorted(_REGISTRY))


def get_planner(name: str) -> PlannerFn:
    info = _REGISTRY.get(name)
    if info is None:
        raise InputError("", "--algorithm", name, f"known planners: {', '.join(sorted(_REGISTRY))}")
    mod = importlib.import_module(info.module)
    fn: PlannerFn = mod.plan
    return fn


def make_request(
    topology: Topology,
    traffic: npt.NDArray[np.int64],
    *,
    unit: int | None = None,
    target_chunks: int = DEFAULT_TARGET_CHUNKS,
    options: Mapping[str, Any] | None = None,
) -> PlanRequest:
    m = validate_matrix(traffic, "traffic", expect_ranks=topology.nranks)
    u = unit if unit is not None else choose_unit(m, target_chunks)
    return PlanRequest(topology, m, quantize(m, u), u, dict(options or {}))


def schedule(
    topology: Topology,
    traffic: npt.NDArray[np.int64],
    algorithm: str = DEFAULT_ALGORITHM,
    *,
    unit: int | None = None,
    target_chunks: int = DEFAULT_TARGET_CHUNKS,
    verify: bool = True,
    **options: Any,
) -> Program:
    """Plan ``traffic`` on ``topology`` with ``algorithm`` and verify the result (raises on a wrong plan)."""
    req = make_request(topology, traffic, unit=unit, target_chunks=target_chunks, options=options)
    prog = get_planner(algorithm)(req)
    if verify:
        check_program(prog, f"planner '{algorithm}' produced a wrong plan (this is a bug)")
    return prog
