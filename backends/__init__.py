"""Backend registry: name -> lowering target (``--backend msccl-xml``). Backends only read Programs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackendInfo:
    name: str
    module: str
    summary: str
    available: bool


BACKENDS: dict[str, BackendInfo] = {
    "msccl-xml": BackendInfo(
        "msccl-xml",
        "a2acc.backends.msccl_xml.api",
        "MSCCL XML for msccl-executor-nccl (dialect nccl) and RCCL's MSCCL (dialect rccl)",
        True,
    ),
    # The MSCCL++ JSON/DSL backend has no module yet: the registry keeps the seam (``a2acc compile`` and the JIT
    # report it as not built) until its issue lands.
    "mscclpp": BackendInfo(
        "mscclpp", "a2acc.backends.mscclpp", "MSCCL++ JSON execution plans (not built yet)", False
    ),
}
