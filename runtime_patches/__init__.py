"""a2acc.runtime: run-time integrations (JIT all-to-all for PyTorch, executors, MSCCL glue).

Activation without code changes: ``A2ACC_JIT=1`` (read by the ``a2acc-jit.pth`` hook at interpreter start; the
patch happens when the process imports ``torch.distributed``). Explicit use:
:func:`a2acc.runtime.torch_patch.install` / :func:`uninstall`. Counters: :func:`stats`. Skipping the per-call
exchange when the caller already knows the whole matrix: :func:`announce`. A plan bound at a fixed capacity for
CUDA-graph capture: :func:`capture`. See ``docs/runtime.md``.
"""

from __future__ import annotations

from typing import Any


def stats() -> dict[str, object]:
    """What the JIT engine of this process has done so far (empty when it is not active):

    ``calls`` reaching the engine; ``handled`` by a2acc plans; ``stock_while_compiling`` (served by the stock
    call while a plan compiled in the background); ``fallbacks`` by reason; ``bucket_hits``; ``cache`` (plans
    taken from memory, disk, or compiled); ``payload_bytes``, ``padding_bytes``, ``residual_bytes``;
    ``overhead_us_median``/``overhead_us_mean`` (the hook's decision time per call, data movement excluded);
    ``host_syncs`` and ``exchanges_skipped`` (calls that needed no exchange, see :func:`announce`), of them
    ``predicted`` (run with the plan of the call one period back, ``A2ACC_EXCHANGE=adaptive``); ``by_algorithm``
    (served calls per planner whose plan ran them) and ``tuned`` (buckets whose measurement kept the planner's
    plan or the direct one, ``A2ACC_TUNE=measure``)."""
    eng = _engine()
    return {} if eng is None else dict(eng.stats.as_dict())


def announce(rows: object, group: object = None) -> bool:
    """Tell the JIT the whole matrix of the next ``all_to_all_single`` on ``group``: ``rows[s][d]`` rows
    (first-dimension slices) from group rank ``s`` to ``d``; a ``world x world`` array or tensor. False (and
    nothing done) when the JIT is not active.

    Every rank of the group must announce the same matrix for the same call (an MoE dispatcher that
    all-gathers its token counts, as Megatron-LM's does, knows it): ranks that announce different matrices may
    choose different plans, which no rank can detect without the exchange this skips. When the matrix's plan
    is one every rank had settled at an earlier exchange (and the executor carries rows beyond a plan's layout
    itself, as ``p2p`` does), the call runs **without the split-size exchange** (no extra collective, no host
    sync); otherwise the exchange happens as usual. The plan follows the announcement; what each rank sends and
    receives follows its own split sizes, so an announcement that is stale but the same everywhere costs
    residual, never data (said once). A call whose tensors a2acc cannot serve in place raises
    :class:`a2acc.errors.AnnounceError` (a ``ValueError``): it cannot take the stock call alone while its peers
    run the plan. ``rows`` is read on the host (a CUDA tensor is copied: a sync). ``group=None`` means the next
    call of a group of that size."""
    eng = _engine()
    if eng is None:
        return False
    eng.announce(rows, group)
    return True


def capture(capacity: Any, like: Any, group: Any = None, overflow: str = "flag") -> Any:
    """Bind a plan at a fixed capacity for CUDA-graph capture, and return it (a
    :class:`a2acc.runtime.launch.capture.CapacityLaunch`).

    ``capacity``: the most rows each rank sends each peer, one number for every pair or a ``world x world``
    matrix (row = sender), the same on every rank; ``like``: a tensor shaped like the inputs (rows along the
    first dimension, the dtype and device of the calls); ``overflow``: what rows beyond the capacity mean,
    ``"flag"`` (an error, raised by ``check()``) or ``"drop"`` (dropped by design, counted). Every rank of the
    group calls it at the same point, outside any graph (it plans, binds and compares the plan across ranks).

    The binding is then used two ways, both with no host sync and no shape that depends on a count:

    - ``binding(output, input, send_counts, recv_counts)`` with the counts as int64 tensors on the device
      (what a graph-captured MoE layer has): rows up to the capacity move, the rest follow ``overflow``;
    - ``torch.distributed.all_to_all_single`` called under capture on that group replays it with the call's own
      split sizes (fixed for the graph).

    Raises :class:`a2acc.errors.CaptureError` when the JIT is not active (``A2ACC_JIT=1``) or the ranks disagree."""
    from a2acc.errors import CaptureError

    eng = _engine()
    if eng is None:
        raise CaptureError(
            "a2acc.runtime.capture: the JIT is not active (set A2ACC_JIT=1 and A2ACC_TOPOLOGY)"
        )
    return eng.bind_capacity(capacity, like, group, overflow)


def _engine() -> Any:
    """The JIT engine of this process, or None (without importing torch when the patch never loaded)."""
    import sys

    patch = sys.modules.get("a2acc.runtime.torch_patch")
    return patch.engine() if patch is not None else None
