"""PyTorch integration: wrap ``torch.distributed.all_to_all_single`` (sync and ``async_op=True``, with and
without split sizes, any dtype, the world or a subgroup). Megatron-LM's ``_AllToAll`` looks the function up at
call time (``megatron/core/tensor_parallel/mappings.py``), so the patch is seen there too.

With ``async_op=True`` a call served by a2acc returns a real ``torch.distributed.Work``: the collective's own
work when the plan is one collective of the caller's tensors, else one made from a future completed on the
caller's current stream (``torch._C._distributed_c10d._create_work_from_future``), so ``wait()`` makes the
waiting stream wait for the call's last copy, as a stock work does (:mod:`a2acc.runtime.launch.streams`).
Anything unusual goes to the stock function.
"""

from __future__ import annotations

import logging
from typing import Any

from a2acc.errors import AnnounceError, RuntimeHookError
from a2acc.runtime.settings import JitSettings

log = logging.getLogger("a2acc.runtime")
_STATE: dict[str, Any] = {}


def engine() -> Any:
    return _STATE.get("engine")


def is_installed() -> bool:
    return "original" in _STATE


def install(settings: JitSettings | None = None) -> None:
    """Replace ``torch.distributed.all_to_all_single`` (idempotent); the original is kept for fallback."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    from a2acc.runtime.engine import Engine

    if is_installed():
        return
    if settings is None:
        s, problems = JitSettings.from_env()
        if s is None:
            raise RuntimeHookError("; ".join(problems))
        settings = s
    eng = Engine(settings)  # may fail (e.g. the topology): then nothing is installed
    original = dist.all_to_all_single
    _STATE["engine"] = eng
    _STATE["original"] = original
    dist.all_to_all_single = all_to_all_single
    c10d.all_to_all_single = all_to_all_single
    from a2acc.runtime.activate import rank0_later

    st = settings

    def active() -> None:
        log.info(
            "hook active: all_to_all_single goes through a2acc (algorithm %s, executor %s%s, backend %s, "
            "topology %s: %d GPUs, buckets %s, misses served by %s, plans %s)",
            st.algorithm,
            st.executor,
            "".join(f" {k}={v}" for k, v in st.executor_opts),
            st.backend,
            st.topology,
            eng.topology.nranks,
            st.buckets,
            "the stock call" if st.miss == "stock" else "waiting for the plan",
            "measured against the direct plan" if eng.tune else "as planned",
        )

    rank0_later(active)


def uninstall() -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    original = _STATE.pop("original", None)
    _STATE.pop("engine", None)
    if original is not None:
        dist.all_to_all_single = original
        c10d.all_to_all_single = original


def all_to_all_single(
    output: Any,
    input: Any,
    output_split_sizes: Any = None,
    input_split_sizes: Any = None,
    group: Any = None,
    async_op: bool = False,
) -> Any:
    """Drop-in replacement with the signature of ``torch.distributed.all_to_all_single``."""
    original = _STATE.get("original")
    eng = _STATE.get("engine")
    if original is None or eng is None:
        import torch.distributed as dist

        return dist.all_to_all_single(
            output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op
        )
    if eng.capturing():  # CUDA-graph capture or torch.compile tracing
        # a plan bound at a fixed capacity for the group (a2acc.runtime.capture) replays; else the stock call
        if eng.run_captured(output, input, output_split_sizes, input_split_sizes, group):
            from a2acc.runtime.launch.streams import completed_work

            return completed_work(output) if async_op else None
        return original(output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op)
    try:
        handled = eng.run(output, input, output_split_sizes, input_split_sizes, group, original, async_op)
    except AnnounceError:  # an announced call this rank cannot serve: its own message says what to fix
        raise
    except Exception as exc:
        # failures before the cross-rank agreement already returned None on every rank; an error during the
        # data exchange cannot be undone consistently across ranks, so it is raised, not hidden
        log.error("a2acc failed while exchanging data (%r)", exc)
        raise
    if handled is None:
        return original(output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op)
    return handled if async_op else None
