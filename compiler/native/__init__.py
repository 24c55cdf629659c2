"""The compiled cores, loaded in one place.

Every ``compiler/native/NAME.c`` is built at install time as the optional extension ``a2acc._NAME`` (``setup.py``
discovers them); each has a pure-Python reference that gives identical results, so a machine without a C
compiler runs a2acc unchanged, only slower. Modules take a core from here (``from a2acc.native import verify``)
and test it against ``None``; the ``.pyi`` stubs beside the package (``a2acc/_NAME.pyi``) give mypy their
signatures.

- ``stageplan``: FAST's stage plan (balancing, Birkhoff stages) and fast's op emission;
- ``verify``: the verifier's symbolic execution and race checks, op-column helpers (levels, plan JSON rows,
  Op tuples);
- ``xmlinterp``: MSCCL XML lowering and the strict check of a2acc's own XML;
- ``mscclpp``: the check of a2acc's own MSCCL++ execution plans (load checks, execution, races);
- ``mscclpp_lower``: the MSCCL++ lowering, writing the reference's exact JSON text;
- ``maxmin``: the simulator's max-min fair sharing (progressive filling);
- ``fastsim``: the fast simulator's event loop (incast included) and its dependency searches, with the same
  max-min core;
- ``estimate``: the ranking estimate of one Program (:mod:`a2acc.analysis.estimate`), preparation and events;
- ``listsched``: the mcf planner's list scheduler (:func:`a2acc.flows.schedule.list_schedule`);
- ``pathflow``: the path-edge sums of the mcf planner's first-order flow and its bound at scale
  (:mod:`a2acc.flows.scale`).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

NAMES = (
    "maxmin",
    "fastsim",
    "estimate",
    "listsched",
    "pathflow",
    "stageplan",
    "verify",
    "xmlinterp",
    "mscclpp",
    "mscclpp_lower",
)


def load(name: str) -> ModuleType | None:
    """The compiled core ``a2acc._<name>``, or None when it was not built."""
    try:
        return importlib.import_module(f"a2acc._{name}")
    except ImportError:
        return None


def carray(a: npt.ArrayLike, dtype: type) -> npt.NDArray[Any]:
    """``a`` as the cores take their buffers: C-contiguous, of ``dtype`` (no copy when it already is)."""
    return np.ascontiguousarray(a, dtype=dtype)


def built() -> dict[str, bool]:
    """Which cores this install has (``a2acc --version`` and the docs' figures say which path ran)."""
    return {name: load(name) is not None for name in NAMES}


if TYPE_CHECKING:
    from a2acc import _estimate as estimate
    from a2acc import _fastsim as fastsim
    from a2acc import _listsched as listsched
    from a2acc import _maxmin as maxmin
    from a2acc import _mscclpp as mscclpp
    from a2acc import _mscclpp_lower as mscclpp_lower
    from a2acc import _pathflow as pathflow
    from a2acc import _stageplan as stageplan
    from a2acc import _verify as verify
    from a2acc import _xmlinterp as xmlinterp
else:
    maxmin = load("maxmin")
    fastsim = load("fastsim")
    estimate = load("estimate")
    listsched = load("listsched")
    stageplan = load("stageplan")
    verify = load("verify")
    xmlinterp = load("xmlinterp")
    mscclpp = load("mscclpp")
    mscclpp_lower = load("mscclpp_lower")
    pathflow = load("pathflow")
