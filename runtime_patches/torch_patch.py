"""PyTorch integration: wrap ``torch.distributed.all_to_all_single`` (sync and ``async_op=True``, with and
without split sizes, any dtype). Megatron-LM's ``_AllToAll`` looks the function up at call time, so the patch
is seen there too (spec: style-and-ecosystem B.2-B.3).

On an ``async_op=True`` call served by a2acc the transfer is complete when the call returns; the returned handle
is already completed (``wait()`` returns at once). Anything unusual goes to the stock function.
"""

from __future__ import annotations

import logging
from typing import Any

from a2acc.errors import RuntimeHookError
from a2acc.runtime.settings import JitSettings

log = logging.getLogger("a2acc.runtime")
_STATE: dict[str, Any] = {}


class CompletedWork:
    """A finished ``torch.distributed`` work handle (duck-typed)."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self) -> None:
        return None

    def get_future(self) -> Any:
        import torch

        fut: Any = torch.futures.Future()
        fut.set_result(None)
        return fut


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
    log.info(
        "a2acc: all_to_all_single patched (algorithm %s, backend %s, executor %s, topology %s)",
        settings.algorithm,
        settings.backend,
        settings.executor,
        settings.topology,
    )


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
    handled = False
    try:
        handled = eng.run(output, input, output_split_sizes, input_split_sizes, group, original)
    except Exception as exc:
        # failures before the cross-rank agreement already returned False on every rank; an error during the
        # data exchange cannot be undone consistently across ranks, so it is raised, not hidden
        log.error("a2acc failed while exchanging data (%r)", exc)
        raise
    if not handled:
        return original(output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op)
    return CompletedWork() if async_op else None
