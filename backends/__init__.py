"""Backend registry: name -> lowering target, imported lazily. Backends only read Programs.

Each entry names a module that defines ``TARGET``, an object implementing
:class:`a2acc.backends.target.Target`. The CLI (``compile``, ``verify``), the pipeline and the JIT reach
targets only through :func:`get_target` and :func:`detect`; nothing imports a backend by name. A new backend
is a package under ``backends/`` plus one line in :data:`TARGETS` (or :func:`register` at run time).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from a2acc.backends.target import Target
from a2acc.errors import InputError, LoweringError


@dataclass(frozen=True)
class TargetInfo:
    name: str
    module: str
    summary: str


TARGETS: dict[str, TargetInfo] = {
    t.name: t
    for t in (
        TargetInfo(
            "msccl-xml",
            "a2acc.backends.msccl_xml.target",
            "MSCCL XML for msccl-executor-nccl (--opt dialect=nccl) and RCCL's MSCCL (--opt dialect=rccl)",
        ),
        TargetInfo(
            "mscclpp-json",
            "a2acc.backends.mscclpp.target",
            "MSCCL++ JSON execution plan for mscclpp.Executor (--opt target=nvidia|amd)",
        ),
        TargetInfo(
            "mscclpp-dsl",
            "a2acc.backends.mscclpp.target",
            "MSCCL++ DSL program (mscclpp.language) from the same lowering",
        ),
    )
}
_LOADED: dict[str, Any] = {}


def register(name: str, target: Any, summary: str = "") -> None:
    """Register a target at run time: a module path (defining ``TARGET``) or a Target object."""
    if isinstance(target, str):
        TARGETS[name] = TargetInfo(name, target, summary)
        _LOADED.pop(name, None)
    else:
        TARGETS[name] = TargetInfo(name, f"<object {type(target).__name__}>", summary or target.summary)
        _LOADED[name] = target


def unregister(name: str) -> None:
    TARGETS.pop(name, None)
    _LOADED.pop(name, None)


def names() -> list[str]:
    return sorted(TARGETS)


def get_target(name: str) -> Target:
    """The target named ``name``; InputError naming the known ones otherwise."""
    if name in _LOADED:
        t: Target = _LOADED[name]
        return t
    info = TARGETS.get(name)
    if info is None:
        raise InputError("", "--backend", name, f"known backends: {', '.join(names())}")
    mod = importlib.import_module(info.module)
    # a module defines TARGET, or TARGETS (name -> target) when it serves several formats
    t = mod.TARGETS[name] if hasattr(mod, "TARGETS") else mod.TARGET
    _LOADED[name] = t
    return t


def detect(head: str) -> Target | None:
    """The target whose format a file starting with ``head`` is, or None."""
    for name in names():
        try:
            t = get_target(name)
        except (ImportError, LoweringError):  # pragma: no cover - a registered module that fails to import
            continue
        if t.detect(head):
            return t
    return None
