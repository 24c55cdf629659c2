"""a2acc: an all-to-all schedule compiler for GPU clusters.

The data flow is one straight line (see ``docs/architecture.md``)::

    topology + traffic matrix -> planner -> Program (IR) -> verify -> simulate/bounds -> report
                                                      \\-> lower (msccl-xml, ...) -> files / JIT cache

Public entry points live in the submodules: :mod:`a2acc.topology`, :mod:`a2acc.traffic`,
:mod:`a2acc.ir`, :mod:`a2acc.verify`, :mod:`a2acc.planners`.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
