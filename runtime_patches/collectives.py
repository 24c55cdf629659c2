"""Which device a process group's collectives accept, and the one small exchange a call needs.

NCCL and RCCL take only tensors on the communicator's GPU (a CPU tensor is an error); Gloo takes CPU (and CUDA)
tensors; a group made with ``backend="cpu:gloo,cuda:nccl"`` takes both, each through its own backend. Gloo
forgives what NCCL does not, so every tensor a2acc hands to a collective is placed here, by one rule:

- the metadata of a call (split sizes, plan state) goes on the **CPU when the group accepts CPU tensors** (no
  device work, no device-to-host copy), **else on the data's device** (the device the caller's own
  ``all_to_all_single`` runs on, which the group accepts by construction);
- the data (staging buffers, P2P messages, the residual exchange) always lives on the data's device.

Why not a CPU side group per group (the other choice): creating groups lazily needs every member at the same
point and, for Gloo side groups under NCCL jobs, a working host network interface (``GLOO_SOCKET_IFNAME``) that
GPU clusters often do not configure; the data's device needs nothing new. The price is one device-to-host
copy of the gathered metadata per call: the split-size exchange, which the call needs anyway (the stock
``all_to_all_single`` with split sizes does not need it, so this is the JIT's one host sync per call).

Which devices a group accepts comes from ``torch.distributed.get_backend(group)``: a ``"dev:backend,..."``
string names them; a plain backend name maps through :data:`BACKEND_DEVICES`; other names (custom backends)
use the group's ``_device_types`` when torch has it, else only the data's device.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

# device types each built-in backend accepts (torch.distributed's documented backend/device matrix)
BACKEND_DEVICES = {
    "gloo": ("cpu", "cuda"),
    "nccl": ("cuda",),
    "mpi": ("cpu", "cuda"),
    "ucc": ("cpu", "cuda"),
    "xccl": ("xpu",),
}


def accepted_devices(group: Any, data_device: Any) -> tuple[str, ...]:
    """Device types the group's collectives accept (see module docstring)."""
    import torch.distributed as dist

    name = str(dist.get_backend(group)).lower()
    if ":" in name:  # "cpu:gloo,cuda:nccl"
        return tuple(part.split(":", 1)[0].strip() for part in name.split(",") if ":" in part)
    known = BACKEND_DEVICES.get(name)
    if known is not None:
        return known
    pg = group if group is not None else dist.group.WORLD
    types = getattr(pg, "_device_types", None)
    if types:
        return tuple(str(t.type if hasattr(t, "type") else t) for t in types)
    return (str(data_device.type),)


def metadata_device(group: Any, data_device: Any) -> Any:
    """Where a call's metadata tensors go: the CPU when the group accepts it, else the data's device."""
    import torch

    if "cpu" in accepted_devices(group, data_device):
        return torch.device("cpu")
    return data_device


def all_gather_ints(
    values: list[int], group: Any, device: Any, world: int, stock_all_to_all: Any = None
) -> npt.NDArray[np.int64]:
    """All-gather ``values`` (same length on every rank) as int64 on ``device``; returns ``world x len`` on the
    host. The one device-to-host copy of a call when ``device`` is a GPU.

    On Gloo it runs as an all-to-all of the vector repeated (``stock_all_to_all``: the unpatched
    ``all_to_all_single``): Gloo's all-gather is a ring, measured 1.7-7x slower than its all-to-all for these
    few bytes at 4 and 8 processes. Elsewhere (NCCL, RCCL) it is an all-gather."""
    import torch
    import torch.distributed as dist

    mine = torch.tensor(values, dtype=torch.int64).to(device)  # what torch.tensor(..., device=) does
    out = torch.empty(world * len(values), dtype=torch.int64, device=device)
    if stock_all_to_all is not None and "gloo" in str(dist.get_backend(group)).lower():
        stock_all_to_all(out, mine.repeat(world), group=group)
    else:
        fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # 2.13+ renamed it
        fn(out, mine, group=group)
    host = out.cpu() if out.device.type != "cpu" else out
    return np.asarray(host.numpy(), dtype=np.int64).reshape(world, len(values))
