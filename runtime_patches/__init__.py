"""a2acc.runtime: run-time integrations (JIT all-to-all for PyTorch, executors, MSCCL glue).

Activation without code changes: ``A2ACC_JIT=1`` (read by the ``a2acc-jit.pth`` hook at interpreter start; the
patch happens when the process imports ``torch.distributed``). Explicit use:
:func:`a2acc.runtime.torch_patch.install` / :func:`uninstall`. Counters: :func:`stats`. See ``docs/runtime.md``.
"""

from __future__ import annotations


def stats() -> dict[str, object]:
    """What the JIT engine of this process has done so far (empty when it is not active):

    ``calls`` reaching the engine; ``handled`` by a2acc plans; ``stock_while_compiling`` (served by the stock
    call while a plan compiled in the background); ``fallbacks`` by reason; ``bucket_hits``; ``cache`` (plans
    taken from memory, disk, or compiled); ``payload_bytes``, ``padding_bytes``, ``residual_bytes``;
    ``overhead_us_median``/``overhead_us_mean`` (the hook's decision time per call, data movement excluded)."""
    import sys

    patch = sys.modules.get("a2acc.runtime.torch_patch")
    eng = patch.engine() if patch is not None else None
    return {} if eng is None else dict(eng.stats.as_dict())
