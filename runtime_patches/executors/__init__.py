"""Executors: what runs a cached plan at run time (``A2ACC_EXECUTOR``), separate from what it was lowered to.

| name | runs | needs |
|---|---|---|
| ``reference`` | the Program itself, as batched isend/irecv + local copies over ``torch.distributed`` | any backend with p2p (Gloo, NCCL, RCCL) |
| ``msccl`` | the packed buffer through the stock ``all_to_all_single``, which msccl-executor-nccl / RCCL replace by the bucket's XML | an NCCL/RCCL process group and an ``MSCCL_ALGO_DIR`` holding that XML when the job started (``a2acc cache export``) |
| ``mscclpp`` | an MSCCL++ JSON plan through ``mscclpp.Executor`` | ``mscclpp`` importable, a GPU, the bucket's plan lowered with ``A2ACC_BACKEND=mscclpp-json`` |

Each executor says, per plan, whether it can run it here (:meth:`unavailable` returns the reason it cannot);
the engine then falls back to ``reference`` with one warning, on every rank alike (the choice is part of the
ranks' agreement). A new executor is a module here plus one line in :data:`EXECUTORS`.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

EXECUTORS = {
    "reference": "a2acc.runtime.executors.reference",
    "msccl": "a2acc.runtime.executors.msccl",
    "mscclpp": "a2acc.runtime.executors.mscclpp",
}


class Executor(Protocol):
    name: str
    # per-rank buffers the executor wants: "program" (input/output/scratch of the Program) or "uniform"
    # (buffer_chunks x unit bytes in and out, the executor's uniform all-to-all)
    buffers: str

    def unavailable(self, entry: Any, group: Any) -> str | None:
        """Why this executor cannot run the cache entry's plan in this process (None: it can)."""
        ...

    def run(self, prog: Any, entry: Any, rank: int, bufs: dict[int, Any], group: Any, stock: Any) -> Any:
        """Start rank ``rank``'s part of the plan over ``bufs`` (Buf -> 1-D uint8 tensors); return the works
        still pending (the caller waits for them before unpacking), or None when everything is done."""
        ...


def get_executor(name: str) -> Executor:
    ex: Executor = importlib.import_module(EXECUTORS[name]).EXECUTOR
    return ex
