"""The one driver: quantize -> plan -> passes -> verify -> target.lower -> target.check.

Every path that produces a plan or a lowered file goes through :func:`compile`: ``a2acc plan``, ``a2acc
compile``, ``a2acc compare``, the JIT's cache misses and the public facade. It owns

- the **unit policy** (:class:`~a2acc.ir.quantize.UnitPolicy`) and the **padding retry**: when a target
  refuses a layout (an executor limit), the next coarser layout of the ladder is tried, and the message of
  the last refusal is kept;
- **verification**: every Program the planner returns is verified before anything else sees it, and every
  lowered file is read back and interpreted; a failure of either is an a2acc bug and raises;
- **timings** per phase (``a2acc plan|compile --timings``), so benchmarks time exactly what users run.

Nothing is written here: :func:`emit` hands a checked result to its target, which writes atomically.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from a2acc.analysis.model import SimModel
from a2acc.backends import get_target
from a2acc.backends.target import CheckReport, Lowered, Target, for_topology, unit_align
from a2acc.backends.target import max_peers as target_max_peers
from a2acc.errors import InputError, InternalError, LoweringError, PlannerError, VerificationError
from a2acc.ir.layout import MAX_LAYOUT_CHUNKS
from a2acc.ir.passes import run_passes
from a2acc.ir.program import Program
from a2acc.ir.quantize import DEFAULT_ALIGN, UnitPolicy, quantize
from a2acc.ir.verify import VerifyReport, verify_program
from a2acc.model.topology import Topology
from a2acc.model.traffic import validate_matrix
from a2acc.options import parse_options
from a2acc.planners import DEFAULT_ALGORITHM, PlanRequest, applies, options_type
from a2acc.planners import run as run_planner

PHASES = ("quantize", "plan", "passes", "verify", "lower", "check")


@dataclass(frozen=True)
class Request:
    """What to compile. ``target=None`` stops after the verified Program (``a2acc plan``).

    ``planner_options``/``target_options`` are the options dataclasses or ``KEY=VALUE`` mappings;
    ``counts`` fixes the chunk layout (the JIT's skew buckets) and then needs ``units.unit``."""

    topology: Topology
    traffic: npt.NDArray[np.int64]
    algorithm: str = DEFAULT_ALGORITHM
    planner_options: Any = None
    target: str | None = None
    target_options: Any = None
    units: UnitPolicy = field(default_factory=UnitPolicy)
    counts: npt.NDArray[np.int64] | None = None
    passes: tuple[str, ...] = ()
    name: str | None = None
    verify: bool = True
    #: the simulator's model cost-aware planners (fast, auto, syccl) price their choices with; None: the
    #: topology's default (its transport's parameters)
    model: SimModel | None = None


@dataclass(frozen=True)
class Result:
    program: Program
    verify: VerifyReport | None
    lowered: Lowered | None
    check: CheckReport | None
    timings: dict[str, float]
    unit_label: str
    attempts: tuple[str, ...] = ()  # layouts the target refused before this one, with the reason

    @property
    def total_s(self) -> float:
        return sum(self.timings.values())

    def timing_lines(self) -> list[str]:
        width = max(len(p) for p in PHASES)
        rows = [f"  {p:<{width}}  {self.timings[p] * 1e3:10.3f} ms" for p in PHASES if p in self.timings]
        rows.append(f"  {'total':<{width}}  {self.total_s * 1e3:10.3f} ms")
        if self.attempts:
            rows.append(f"  ({len(self.attempts)} coarser layout(s) tried first: {'; '.join(self.attempts)})")
        return ["timings (this process, wall clock):", *rows]


class _Clock:
    def __init__(self) -> None:
        self.t: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.t[name] = self.t.get(name, 0.0) + time.perf_counter() - t0


def compile(request: Request) -> Result:
    """Run the pipeline; raises InputError (bad input), LoweringError (no layout fits the target) or
    VerificationError (an a2acc bug: a planner or a lowering produced something wrong)."""
    topo = request.topology
    m = validate_matrix(request.traffic, "traffic", expect_ranks=topo.nranks)
    popts = parse_options(options_type(request.algorithm), request.planner_options, where="planner option")
    why = applies(request.algorithm, topo)
    if why is not None:
        raise PlannerError(f"planner '{request.algorithm}' does not apply here: {why}")
    target: Target | None = None
    topts: Any = None
    if request.target is not None:
        target = get_target(request.target)
        topts = parse_options(target.Options, request.target_options, where="backend option")
        topts = for_topology(target, topts, topo)
    clock = _Clock()
    with clock.phase("quantize"):
        counts, candidates = _layouts(request, m, target, topts)
    ladder = _Ladder(request, m, counts, popts, target, topts, clock)
    pending = list(candidates)
    coarsest: Result | None = None  # the coarsest layout's result, when the ladder jumped to it and it fit
    while pending:
        got = ladder.attempt(*pending.pop(0))
        if isinstance(got, Result):
            return got
        if got is None:  # too many chunks, after coarser layouts the target refused: stop there
            break
        if got.follows_transfers and len(pending) > 1 and coarsest is None:
            # a limit of transfers and peers, which coarser layouts keep: only the coarsest can still help,
            # so it goes next; the layouts between are tried (for their smaller padding) only if it fits
            top = ladder.attempt(*pending.pop())
            if not isinstance(top, Result):
                skipped = ", ".join(lb for lb, _u in pending)
                raise LoweringError(
                    f"{top or got} (tried {', '.join(ladder.tried)}: the limit follows the plan's transfers and peers, "
                    f"which coarser layouts keep, and the coarsest did not fit either, so {skipped} were not "
                    "tried)"
                )
            coarsest = top
    if coarsest is not None:
        return coarsest
    if not ladder.refused:
        raise InternalError("the unit policy produced no candidate layout")
    raise LoweringError(f"{ladder.refused[-1].split(': ', 1)[1]} (tried {', '.join(ladder.tried)})")


class _Ladder:
    """The padding ladder's attempts: each layout quantised, planned, verified, lowered and checked; what was
    tried and why each refused layout was refused."""

    def __init__(
        self,
        request: Request,
        m: npt.NDArray[np.int64],
        counts: npt.NDArray[np.int64] | None,
        popts: Any,
        target: Target | None,
        topts: Any,
        clock: _Clock,
    ) -> None:
        self.request, self.m, self.counts, self.popts, self.clock = request, m, counts, popts, clock
        self.target, self.topts = target, topts
        self.peer_limit = target_max_peers(target, topts)  # the same for every layout of the ladder
        self.tried: list[str] = []
        self.refused: list[str] = []

    def attempt(self, label: str, unit: int) -> Result | LoweringError | None:
        """The result of one layout, or the target's refusal; None for a layout with more chunks than a plan
        may hold after coarser ones were refused (finer layouts only have more chunks)."""
        request, m, clock, target = self.request, self.m, self.clock, self.target
        with clock.phase("quantize"):
            c = self.counts if self.counts is not None else quantize(m, unit)
        if int(c.sum()) > MAX_LAYOUT_CHUNKS:  # the plan could not be read back: refuse before planning it
            if self.refused:
                return None
            smallest = -(-int(m.sum()) // MAX_LAYOUT_CHUNKS)
            raise InputError(
                "",
                "--unit",
                unit,
                f"a chunk size giving at most {MAX_LAYOUT_CHUNKS} chunks in all (this one gives {int(c.sum())}; "
                f"the matrix needs at least {smallest} bytes per chunk)",
            )
        self.tried.append(label)
        preq = PlanRequest(request.topology, m, c, unit, self.popts, request.model, self.peer_limit)
        prog, rep = _plan(request, preq, clock)
        if target is None:
            return Result(prog, rep, None, None, clock.t, label, tuple(self.refused))
        try:
            with clock.phase("lower"):
                lowered = target.lower(prog, self.topts, name=request.name)
        except LoweringError as exc:
            self.refused.append(f"{label}: {exc}")
            return exc
        with clock.phase("check"):
            chk = target.check(lowered)
        if not chk.ok:
            raise VerificationError(f"lowered {target.name} file (a2acc bug)", list(chk.errors))
        return Result(prog, rep, lowered, chk, clock.t, label, tuple(self.refused))


def _layouts(
    request: Request, m: npt.NDArray[np.int64], target: Target | None, topts: Any
) -> tuple[npt.NDArray[np.int64] | None, list[tuple[str, int]]]:
    """The chunk layouts to try, coarsest first: the request's fixed ``counts`` (returned, with its unit), or
    the unit policy's ladder for ``target`` (counts None: each is quantised when its turn comes)."""
    if request.counts is not None:
        if request.units.unit is None:
            raise InputError("", "unit", None, "a fixed layout (counts) needs its unit in bytes")
        counts = np.ascontiguousarray(request.counts, dtype=np.int64)
        if counts.shape != m.shape or (counts < 0).any():
            raise InputError("", "counts", counts.shape, f"must be a {m.shape} matrix of chunk counts >= 0")
        return counts, [(f"fixed layout, unit {request.units.unit} B", request.units.unit)]
    align = unit_align(target, topts, request.topology.nranks) if target is not None else DEFAULT_ALIGN
    return None, request.units.candidates(m, target.max_chunks(topts) if target is not None else None, align)


def _plan(request: Request, preq: PlanRequest, clock: _Clock) -> tuple[Program, VerifyReport | None]:
    """Plan one layout, run the requested passes and verify the result (unless ``request.verify`` is off): a
    plan that fails verification is a planner bug and raises."""
    with clock.phase("plan"):
        prog = run_planner(request.algorithm, preq)
    if request.passes:
        with clock.phase("passes"):
            prog = run_passes(prog, request.passes)
    rep = None
    if request.verify:
        with clock.phase("verify"):
            rep = verify_program(prog)
        if not rep.ok:
            raise VerificationError(
                f"planner '{request.algorithm}' produced a wrong plan (a2acc bug)", list(rep.errors)
            )
    return prog, rep


def emit(result: Result, output: str | Path, *, force: bool = False) -> list[Path]:
    """Write a checked result's files through its target (atomic writes; ``force`` writes beside foreign files)."""
    if result.lowered is None or result.check is None or not result.check.ok:
        raise InternalError("emit() needs a lowered and checked result")
    return get_target(result.lowered.target).emit(result.lowered, Path(output), force=force)
