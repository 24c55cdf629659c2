"""Backend registry: name -> lowering target, imported lazily. Backends only read Programs.

Each :class:`~a2acc.registry.Entry` names a module and the attribute of it (``TARGET``, or one of several
targets a module serves) that implements :class:`a2acc.backends.target.Target`. The CLI (``compile``,
``verify``), the pipeline and the JIT reach targets only through :func:`get_target` and :func:`detect`; nothing
imports a backend by name. A new backend is a package under ``backends/`` plus one line in :data:`TARGETS` (or
:func:`register` at run time); the shared target tests (``tests/backends/test_every_target.py``) then run it.
"""

from __future__ import annotations

from typing import Any

from a2acc.errors import LoweringError
from a2acc.registry import Entry, Registry

# the Target type only: the command line's parser lists the backends without importing one (or numpy)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from a2acc.backends.target import Target

TARGETS: Registry[Target] = Registry(
    "backend",
    "--backend",
    [
        Entry(
            "msccl-xml",
            "a2acc.backends.msccl_xml.target",
            "MSCCL XML for msccl-executor-nccl (--opt dialect=nccl) and RCCL's MSCCL (--opt dialect=rccl)",
            "TARGET",
        ),
        Entry(
            "mscclpp-json",
            "a2acc.backends.mscclpp.target",
            "MSCCL++ JSON execution plan for mscclpp.Executor (--opt target=nvidia|amd)",
            "JSON_TARGET",
        ),
        Entry(
            "mscclpp-dsl",
            "a2acc.backends.mscclpp.target",
            "MSCCL++ DSL program (mscclpp.language) from the same lowering",
            "DSL_TARGET",
        ),
    ],
)


def register(name: str, target: Any, summary: str = "") -> None:
    """Register a target at run time: a module path (defining ``TARGET``) or a Target object."""
    TARGETS.register(name, target, summary, "TARGET" if isinstance(target, str) else "")


def unregister(name: str) -> None:
    TARGETS.unregister(name)


def names() -> list[str]:
    return TARGETS.names()


def get_target(name: str) -> Target:
    """The target named ``name``; InputError naming the known ones otherwise."""
    return TARGETS.get(name)


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
