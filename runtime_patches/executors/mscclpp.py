"""MSCCL++ glue: run a2acc's JSON execution plans through ``mscclpp.Executor`` + ``mscclpp.ExecutionPlan``.

The MSCCL++ NCCL shim never routes ``ncclAllToAll`` to a plan (MSCCL++'s ``apps/nccl`` shim routes only the collectives it implements), so a2acc must drive
``mscclpp.Executor`` itself. That needs a2acc's MSCCL++ backend (JSON plans), which is not built yet: this
module is the seam. :func:`executor_for` reports exactly what is missing.
"""

from __future__ import annotations

from typing import Any

from a2acc.errors import RuntimeHookError


def mscclpp_available() -> bool:
    try:
        import mscclpp  # noqa: F401
    except ImportError:
        return False
    return True


def executor_for(comm: Any) -> Any:
    if not mscclpp_available():
        raise RuntimeHookError(
            "mscclpp is not importable: build MSCCL++ with its Python bindings (pip install . in microsoft/mscclpp, "
            "v0.8 or later) to use A2ACC_EXECUTOR=mscclpp"
        )
    raise RuntimeHookError(
        "a2acc's MSCCL++ backend (JSON execution plans) is not built yet; use A2ACC_EXECUTOR=reference or msccl"
    )


class MscclppExecutor:
    name = "mscclpp"
    buffers = "uniform"

    def unavailable(self, entry: Any, group: Any) -> str | None:
        if not mscclpp_available():
            return "mscclpp is not importable (build MSCCL++ v0.8+ with its Python bindings)"
        return "a2acc's MSCCL++ backend (JSON execution plans) is not built yet"

    def run(self, prog: Any, entry: Any, rank: int, bufs: dict[int, Any], group: Any, stock: Any) -> None:
        raise RuntimeHookError(self.unavailable(entry, group) or "mscclpp executor unavailable")


EXECUTOR = MscclppExecutor()
