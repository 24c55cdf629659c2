"""A test double for an NCCL process group: Gloo underneath, NCCL's device rule enforced on top.

Gloo forgives what NCCL does not: it takes CPU tensors and never makes the host wait. This double makes the
difference visible without a GPU:

- **A device that is not the CPU.** ``fakegpu`` is PyTorch's PrivateUse1 device made into a Python backend
  (``torch.utils.backend_registration._setup_privateuseone_for_python_backend``); its tensors are wrappers
  (:class:`FakeGpuTensor`) holding CPU memory, so every op runs, but ``tensor.device`` is ``fakegpu:0``.
- **NCCL's device rule.** ``torch.distributed.get_backend`` reports ``fakegpu:gloo`` (the group accepts
  ``fakegpu`` tensors only) or, with ``install(report="nccl")``, plain ``nccl`` (then a2acc's table of what
  NCCL accepts is told that ``fakegpu`` stands in for ``cuda``, and a2acc takes its NCCL branches: the
  exchange as an all-gather, every exchange as one ``all_to_all_single``). Every collective and
  point-to-point call a2acc can make (all-gather, all-to-all, batched and single send/recv) raises, as NCCL
  does, for a tensor on any other device; valid calls go to Gloo with the wrappers' CPU tensors.
  Point-to-point tags are dropped (NCCL matches by order). (``isend``/``irecv`` are left alone: a2acc posts
  only through ``batch_isend_irecv``, as NCCL needs.)
- **Host syncs counted.** On a GPU the host waits for the device at every blocking copy between the two and at
  every ``.item()``: each copy of a ``fakegpu`` tensor to the CPU (``.cpu()``, ``copy_`` into a CPU tensor)
  and each ``.item()`` is counted in :data:`STATS` as ``d2h``, and each *blocking* copy from the CPU to a
  ``fakegpu`` tensor (pageable ``.to(device)`` or ``copy_`` without ``non_blocking=True``) as ``h2d``.

Use: :func:`install` before ``init_process_group("gloo", ...)`` and before a2acc's patch is installed (so
the stock function a2acc keeps is the checked one).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode, return_and_correct_aliasing
from torch.utils._pytree import tree_map

NAME = "fakegpu"
DEVICE = torch.device("cpu")  # becomes fakegpu:0 once install() has registered the device
STATS: Counter[str] = Counter()
_REAL: dict[str, Any] = {}


class DeviceRuleError(RuntimeError):
    """What NCCL raises for a tensor that is not on the communicator's device."""


class FakeGpuTensor(torch.Tensor):
    """A tensor on ``fakegpu:0`` whose data is a CPU tensor (``inner``)."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> FakeGpuTensor:
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            inner.size(),
            strides=inner.stride(),
            storage_offset=inner.storage_offset(),
            dtype=inner.dtype,
            device=DEVICE,
            requires_grad=False,
        )
        r.inner = inner
        return r

    def __repr__(self) -> str:  # type: ignore[override]
        return f"FakeGpuTensor({self.inner!r})"

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(
        inner: dict[str, torch.Tensor], meta: Any, size: Any, stride: Any
    ) -> FakeGpuTensor:
        return FakeGpuTensor(inner["inner"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return _run(func, args, kwargs or {})


def _unwrap(x: Any) -> Any:
    return x.inner if isinstance(x, FakeGpuTensor) else x


def _wrap(x: Any) -> Any:
    return FakeGpuTensor(x) if isinstance(x, torch.Tensor) and not isinstance(x, FakeGpuTensor) else x


def _to_host(kwargs: dict[str, Any]) -> bool:
    dev = kwargs.get("device")
    return dev is not None and torch.device(dev).type == "cpu"


def _blocking(args: Any, kwargs: dict[str, Any]) -> bool:
    nb = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
    return not bool(nb)


def _run(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    fake_in = any(isinstance(a, FakeGpuTensor) for a in torch.utils._pytree.tree_leaves((args, kwargs)))
    a, k = tree_map(_unwrap, args), tree_map(_unwrap, kwargs)
    if fake_in and (
        (func is torch.ops.aten._to_copy.default and _to_host(k))
        or func is torch.ops.aten._local_scalar_dense.default
    ):
        STATS["d2h"] += 1
        return func(*a, **k)
    if func is torch.ops.aten.copy_.default:
        dst_fake, src_fake = isinstance(args[0], FakeGpuTensor), isinstance(args[1], FakeGpuTensor)
        if src_fake and not dst_fake:  # into host memory: the host waits for the device
            STATS["d2h"] += 1
            func(*a, **k)
            return args[0]
        if dst_fake and not src_fake and _blocking(args, kwargs):
            STATS["h2d"] += 1
    if func is torch.ops.aten._to_copy.default and not fake_in and _blocking(args, kwargs):
        dev = k.get("device")
        if dev is not None and torch.device(dev).type == NAME:
            STATS["h2d"] += 1
    dev = k.get("device")
    to_fake = dev is not None and torch.device(dev).type == NAME
    if to_fake:
        k = {**k, "device": torch.device("cpu")}
    out = func(*a, **k)
    if not (fake_in or to_fake):
        return out
    out = tree_map(_wrap, out)
    return return_and_correct_aliasing(func, args, kwargs, out)


class FakeGpuMode(TorchDispatchMode):
    """Makes factories and copies with ``device="fakegpu"`` (``torch.empty``, ``t.to("fakegpu")``) produce
    :class:`FakeGpuTensor` (their kernels do not exist for PrivateUse1). ``torch.tensor(data, device=)``
    builds below the Python modes and fails for ``fakegpu``: write ``torch.tensor(data).to(device)``."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return _run(func, args, kwargs or {})


def _check(where: str, *tensors: Any) -> None:
    for t in tensors:
        if not isinstance(t, FakeGpuTensor):
            STATS["rejected"] += 1
            raise DeviceRuleError(
                f"{where}: tensor on {getattr(t, 'device', '?')}; this group (NCCL double) accepts {NAME} tensors only"
            )


REPORT: dict[str, str] = {"backend": f"{NAME}:gloo"}


def _get_backend(group: Any = None) -> str:
    return REPORT["backend"]


def _new_group(*args: Any, **kwargs: Any) -> Any:
    if str(kwargs.get("backend", "")).startswith(NAME):
        kwargs["backend"] = "gloo"
    return _REAL["new_group"](*args, **kwargs)


def _all_gather_into_tensor(out: Any, inp: Any, group: Any = None, async_op: bool = False) -> Any:
    _check("all_gather", out, inp)
    STATS["collectives"] += 1
    STATS["all_gather"] += 1
    return _REAL["all_gather_into_tensor"](out.inner, inp.inner, group=group, async_op=async_op)


def _all_to_all_single(
    out: Any,
    inp: Any,
    output_split_sizes: Any = None,
    input_split_sizes: Any = None,
    group: Any = None,
    async_op: bool = False,
) -> Any:
    _check("all_to_all_single", out, inp)
    STATS["collectives"] += 1
    return _REAL["all_to_all_single"](
        out.inner, inp.inner, output_split_sizes, input_split_sizes, group=group, async_op=async_op
    )


def _batch_isend_irecv(ops: list[Any]) -> Any:
    real = []
    for op in ops:
        _check("batch_isend_irecv", op.tensor)
        STATS["p2p"] += 1
        real.append(dist.P2POp(op.op, op.tensor.inner, op.peer, op.group, 0))  # NCCL ignores tags
    return _REAL["batch_isend_irecv"](real)


def install(report: str = "fakegpu:gloo") -> None:
    """Register ``fakegpu``, enter the factory mode and wrap torch.distributed (idempotent). ``report``: the
    backend name the group reports (``nccl``: a2acc takes its NCCL branches, see module docstring)."""
    if _REAL:
        return
    REPORT["backend"] = report
    if report == "nccl":
        from a2acc.runtime.decide import exchange

        exchange.BACKEND_DEVICES["nccl"] = ("cuda", NAME)
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(NAME)
    global DEVICE
    DEVICE = torch.device(NAME, 0)
    FakeGpuMode().__enter__()  # for the rest of the process (the test worker)
    for name in (
        "get_backend",
        "new_group",
        "all_gather_into_tensor",
        "all_to_all_single",
        "batch_isend_irecv",
    ):
        _REAL[name] = getattr(dist, name)
    dist.get_backend = _get_backend
    dist.new_group = _new_group
    dist.all_gather_into_tensor = _all_gather_into_tensor
    if hasattr(dist, "all_gather_single"):
        _REAL["all_gather_single"] = dist.all_gather_single
        dist.all_gather_single = _all_gather_into_tensor
    dist.all_to_all_single = _all_to_all_single
    dist.batch_isend_irecv = _batch_isend_irecv
    import torch.distributed.distributed_c10d as c10d

    for name in ("all_to_all_single", "batch_isend_irecv", "get_backend", "new_group"):
        setattr(c10d, name, getattr(dist, name))


def fake(t: torch.Tensor) -> FakeGpuTensor:
    """A CPU tensor's copy on ``fakegpu``."""
    return FakeGpuTensor(t.clone())


def host(t: Any) -> torch.Tensor:
    """The CPU data behind a ``fakegpu`` tensor (not counted as a host sync: the test's own check)."""
    return t.inner.clone() if isinstance(t, FakeGpuTensor) else t
