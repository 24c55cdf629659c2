"""a2acc: an all-to-all schedule compiler for GPU clusters.

The data flow is one straight line (``docs/architecture.md``)::

    topology + traffic matrix -> planner -> Program (IR) -> verify -> simulate / bounds -> report, compare
                                                 \\-> target.lower -> target.check -> files / JIT cache

This facade is the public API; :func:`compile` and :func:`plan` run the one driver,
:func:`a2acc.pipeline.compile`. Example (runs as a doctest in ``make test``)::

    >>> import a2acc
    >>> topo = a2acc.load_topology("dgx-h100", servers=2)
    >>> m = a2acc.generate_matrix("zipf", topo.nranks, 64 << 20, seed=1)
    >>> prog = a2acc.plan(topo, m, "fast")            # verified, or it raises
    >>> a2acc.verify(prog).ok
    True
    >>> res = a2acc.compile(topo, m, "fast", backend="msccl-xml", backend_options={"dialect": "rccl"})
    >>> sorted(res.lowered.files)[0].endswith("-rccl.xml") and res.check.ok
    True
    >>> round(a2acc.simulate(prog, topo).time_s / a2acc.lower_bounds(m, topo).seconds, 1) >= 1.0
    True

Heavy modules are imported on first use, so ``import a2acc`` stays cheap (the JIT's start-up hook imports it).
"""

from __future__ import annotations

from a2acc.defaults import DEFAULT_ALGORITHM

__version__ = "0.2.0"

# not typing.TYPE_CHECKING: ``import a2acc`` runs in the JIT's start-up hook, and typing costs ~10 ms
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    import numpy as np
    import numpy.typing as npt

    from a2acc.analysis.bounds import BoundsReport
    from a2acc.analysis.model import SimModel
    from a2acc.analysis.simulate import SimResult
    from a2acc.ir.program import Program
    from a2acc.ir.verify import VerifyReport
    from a2acc.model.topology import Topology
    from a2acc.pipeline import Result

__all__ = [
    "__version__",
    "compile",
    "generate_matrix",
    "load_matrix",
    "load_topology",
    "lower_bounds",
    "plan",
    "simulate",
    "verify",
]


def load_topology(spec: str, servers: int | None = None) -> Topology:
    """A preset name (``a2acc topo list``) or a YAML/JSON topology file; ``servers`` scales a preset."""
    from a2acc.model.topology import load_topology as _load

    return _load(spec, servers)


def load_matrix(path: str, expect_ranks: int | None = None) -> npt.NDArray[np.int64]:
    """A traffic matrix file (.npy, .csv, .json, nccl-tests text): bytes, row = sender."""
    from a2acc.model.traffic import load_matrix as _load

    return _load(path, expect_ranks)


def generate_matrix(kind: str, nranks: int, size: int, seed: int = 0, **kw: Any) -> npt.NDArray[np.int64]:
    """A seeded matrix: ``balanced``, ``uniform``, ``zipf``, ``lognormal`` or ``moe`` (``size`` bytes per GPU)."""
    from a2acc.model.traffic import generate

    return generate(kind, nranks, size, seed, **kw)


def compile(
    topology: Topology,
    traffic: npt.NDArray[np.int64],
    algorithm: str = DEFAULT_ALGORITHM,
    *,
    backend: str | None = None,
    planner_options: Any = None,
    backend_options: Any = None,
    unit: int | None = None,
    max_padding: float | str | None = None,
    passes: tuple[str, ...] = (),
    model: SimModel | None = None,
) -> Result:
    """Plan, verify and (with ``backend``) lower and check; nothing is written (see :func:`a2acc.pipeline.emit`).

    With a backend and no ``unit``, the padding ladder (``max_padding="auto"``) picks the layout."""
    from a2acc.ir.quantize import UnitPolicy
    from a2acc.pipeline import Request
    from a2acc.pipeline import compile as _compile

    if backend is not None and unit is None and max_padding is None:
        max_padding = "auto"
    return _compile(
        Request(
            topology,
            traffic,
            algorithm,
            planner_options=planner_options,
            target=backend,
            target_options=backend_options,
            units=UnitPolicy(unit=unit, max_padding=max_padding),
            passes=passes,
            model=model,
        )
    )


def plan(
    topology: Topology,
    traffic: npt.NDArray[np.int64],
    algorithm: str = DEFAULT_ALGORITHM,
    *,
    unit: int | None = None,
    target_chunks: int | None = None,
    verify: bool = True,
    model: SimModel | None = None,
    **options: Any,
) -> Program:
    """A verified Program (``verify=False`` skips the check: tests that inject defects, benchmarks); ``model``
    is the simulator's model cost-aware planners price their choices with (default: the topology's)."""
    from a2acc.ir.quantize import DEFAULT_TARGET_CHUNKS, UnitPolicy
    from a2acc.pipeline import Request
    from a2acc.pipeline import compile as _compile

    units = UnitPolicy(unit=unit, target_chunks=target_chunks or DEFAULT_TARGET_CHUNKS)
    req = Request(
        topology, traffic, algorithm, planner_options=options or None, units=units, verify=verify, model=model
    )
    return _compile(req).program


def verify(program: Program) -> VerifyReport:
    """Symbolic execution of a Program: postcondition, races, order, uninitialised reads."""
    from a2acc.ir.verify import verify_program

    return verify_program(program)


def simulate(program: Program, topology: Topology, **kw: Any) -> SimResult:
    """Flow-level completion time of a Program on a topology (``a2acc simulate``)."""
    from a2acc.analysis.simulate import simulate as _sim

    return _sim(program, topology, **kw)


def lower_bounds(traffic: npt.NDArray[np.int64], topology: Topology, *, mcf: bool = False) -> BoundsReport:
    """Every lower-bound term for ``traffic`` on ``topology``; ``.seconds`` is the binding one."""
    from a2acc.analysis.bounds import lower_bounds as _lb

    return _lb(traffic, topology, mcf=mcf)
