"""Which device a process group's collectives accept, and the one small exchange an exchanged call makes.

NCCL and RCCL take only tensors on the communicator's GPU (a CPU tensor is an error); Gloo takes CPU (and CUDA)
tensors; a group made with ``backend="cpu:gloo,cuda:nccl"`` takes both, each through its own backend. Gloo
forgives what NCCL does not, so every tensor a2acc hands to a collective is placed here, by one rule:

- the metadata of a call (split sizes, plan state) goes on the **CPU when the group accepts CPU tensors** (no
  device work, no device-to-host copy), **else on the data's device** (the device the caller's own
  ``all_to_all_single`` runs on, which the group accepts by construction);
- the data (buffers, messages, the residual) always lives on the data's device.

On a GPU group the exchange costs **exactly one host sync**: the ints go up through pinned staging with a
non-blocking copy, the all-gather runs on the device, and the result comes back into pinned memory with a
non-blocking copy whose completion event the host waits for (:class:`Gatherer`; ``syncs`` counts it).

Why not a CPU side group per group (the other choice): creating groups lazily needs every member at the same
point and, for Gloo side groups under NCCL jobs, a working host network interface (``GLOO_SOCKET_IFNAME``) that
GPU clusters often do not configure; the data's device needs nothing new.

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


def backend_name(group: Any) -> str:
    import torch.distributed as dist

    return str(dist.get_backend(group)).lower()


def accepted_devices(group: Any, data_device: Any, name: str | None = None) -> tuple[str, ...]:
    """Device types the group's collectives accept (see module docstring); ``name``: its backend, when known."""
    name = backend_name(group) if name is None else name
    if ":" in name:  # "cpu:gloo,cuda:nccl"
        return tuple(part.split(":", 1)[0].strip() for part in name.split(",") if ":" in part)
    known = BACKEND_DEVICES.get(name)
    if known is not None:
        return known
    import torch.distributed as dist

    pg = group if group is not None else dist.group.WORLD
    types = getattr(pg, "_device_types", None)
    if types:
        return tuple(str(t.type if hasattr(t, "type") else t) for t in types)
    return (str(data_device.type),)


def metadata_device(group: Any, data_device: Any, name: str | None = None) -> Any:
    """Where a call's metadata tensors go: the CPU when the group accepts it, else the data's device."""
    import torch

    if "cpu" in accepted_devices(group, data_device, name):
        return torch.device("cpu")
    return data_device


class Gatherer:
    """All-gathers of int64 vectors over one group on one device, with the buffers kept between calls.

    On Gloo it runs as an all-to-all of the vector repeated (``stock``: the unpatched ``all_to_all_single``):
    Gloo's all-gather is a ring, measured 1.7-7x slower than its all-to-all for these few bytes at 4 and 8
    processes. Elsewhere (NCCL, RCCL) it is an all-gather; on a device that is not the CPU the host data goes up
    and comes back through pinned memory (on CUDA) with non-blocking copies, and the one wait for the result is
    counted in ``syncs``."""

    def __init__(self, group: Any, device: Any, world: int, stock: Any, backend: str) -> None:
        self.group, self.device, self.world, self.stock = group, device, world, stock
        self.gloo = "gloo" in backend
        self.host = getattr(device, "type", "cpu") == "cpu"
        self.cuda = getattr(device, "type", "cpu") == "cuda"
        self.syncs = 0
        self._bufs: dict[int, tuple[Any, ...]] = {}
        if self.gloo:
            from a2acc.runtime.launch.post import collective

            self._a2a = collective(stock, group)
        else:
            self._all_gather = _all_gather(group)

    def _buffers(self, width: int) -> tuple[Any, ...]:
        b = self._bufs.get(width)
        if b is None:
            import torch

            n = self.world * width
            pin = self.cuda
            host_in = torch.empty(n if self.gloo else width, dtype=torch.int64, pin_memory=pin)
            host_out = torch.empty(n, dtype=torch.int64, pin_memory=pin)
            dev_in = host_in if self.host else torch.empty_like(host_in, device=self.device)
            dev_out = host_out if self.host else torch.empty_like(host_out, device=self.device)
            event = None
            if self.cuda:
                event = torch.cuda.Event()
            a_in = host_in.numpy()
            b = (host_in, host_out, dev_in, dev_out, event, a_in.reshape(-1, width), host_out.numpy())
            self._bufs[width] = b
        return b

    def gather(self, values: list[int]) -> npt.NDArray[np.int64]:
        """Every rank's ``values`` (the same length everywhere), ``world x len`` on the host."""
        width = len(values)
        b = self._bufs.get(width) or self._buffers(width)
        host_in, host_out, dev_in, dev_out, event, a_in, a_out = b
        a_in[:] = values  # every row of the repeated vector on Gloo, the one row elsewhere
        if not self.host:
            dev_in.copy_(host_in, non_blocking=True)
        if self.gloo:
            self._a2a(dev_out, dev_in, [], []).wait()
        else:
            self._all_gather(dev_out, dev_in)
        if not self.host:
            self.syncs += 1  # the call's one host sync: the result must be on the host to decide
            if event is not None:  # CUDA: a non-blocking copy into pinned memory, then wait for it
                import torch

                host_out.copy_(dev_out, non_blocking=True)
                event.record(torch.cuda.current_stream(self.device))
                event.synchronize()
            else:  # another device: a blocking copy is the sync
                host_out.copy_(dev_out)
        return a_out.reshape(self.world, width).copy()


def _all_gather(group: Any) -> Any:
    """``gather(out, inp)``: a synchronous all-gather into one tensor on ``group`` (for a GPU, the device side
    is what waits). torch's own function is skipped for the process group's method with options made once, as
    :func:`a2acc.runtime.launch.post.collective` does; anything installed over it (a test double) is called."""
    import torch.distributed as dist

    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # 2.13+ renamed it
    if getattr(fn, "__module__", "") != "torch.distributed.distributed_c10d":
        return lambda out, inp: fn(out, inp, group=group)
    from torch.distributed.distributed_c10d import AllgatherOptions, _get_default_group

    pg = group if group is not None else _get_default_group()
    opts = AllgatherOptions()
    method = pg._allgather_base

    def gather(out: Any, inp: Any) -> None:
        work = method(out, inp, opts)
        if work is not None:
            work.wait()

    return gather
