"""Order a call on the caller's CUDA stream, hand host data to the device without a sync, complete async works.

GPU rules a replay follows (NCCL's: every collective is enqueued on the communicator's stream, which first
waits for the stream current at the call; ``Work.wait()`` makes the *current* stream wait for it, the host
does not block):

- every copy a call makes is enqueued on the stream current at the call; the collectives order themselves
  against it; the call ends with an event recorded there (:class:`StreamOrder`), and the next call that uses
  the same buffers makes its own current stream wait for that event first, so a job that switches streams
  between calls never races on a2acc's buffers;
- host data the copies need (the split sizes) goes through pinned staging with a non-blocking copy
  (:class:`HostToDevice`): no host sync. Each staging slot is reused only once the copy that read it is done
  (an event per slot, polled; a wait is counted if it ever has to block);
- an ``async_op=True`` call returns a ``torch.distributed.Work`` made from a future completed on the current
  stream (:func:`completed_work`): its ``wait()`` makes the waiting stream wait for the call's last copy, as a
  stock work does, and never only the host.

On the CPU there are no streams: the same code runs its copies in order and the futures are complete.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from a2acc.runtime.launch.post import Posted


def is_cuda(device: Any) -> bool:
    return getattr(device, "type", "cpu") == "cuda"


class StreamOrder:
    """The end event of the last call that used a set of buffers (CUDA only)."""

    def __init__(self, device: Any) -> None:
        self.cuda = is_cuda(device)
        self.device = device
        self._end: Any = None

    def begin(self) -> None:
        """Make the current stream wait for the previous call on these buffers (a no-op on the CPU)."""
        if self.cuda and self._end is not None:
            import torch

            torch.cuda.current_stream(self.device).wait_event(self._end)

    def end(self) -> None:
        if self.cuda:
            import torch

            ev = self._end if self._end is not None else torch.cuda.Event()
            ev.record(torch.cuda.current_stream(self.device))
            self._end = ev


class HostToDevice:
    """Host ints to an int64 tensor on ``device``: pinned staging and a non-blocking copy on CUDA, a numpy view
    on the CPU (or another device: a non-blocking copy). ``posted.host_waits`` counts the times a staging slot
    had to be waited for on the host (a slot is reused only after the copy that read it finished)."""

    SLOTS = 8

    def __init__(self, device: Any, width: int, posted: Posted) -> None:
        import torch

        self.device = device
        self.width = width
        self.posted = posted
        self.cuda = is_cuda(device)
        self.cpu = getattr(device, "type", "cpu") == "cpu"
        pin = self.cuda
        self._host = [
            torch.empty(width, dtype=torch.int64, pin_memory=pin) for _ in range(self.SLOTS if pin else 1)
        ]
        self._np = [h.numpy() for h in self._host]
        self._events: list[Any] = [None] * len(self._host)
        self._next = 0

    def put(self, *parts: Sequence[int]) -> Any:
        """The concatenation of ``parts`` (lists of ints, ``width`` in all) as an int64 tensor on the device."""
        k = self._next
        self._next = (k + 1) % len(self._host)
        ev = self._events[k]
        if ev is not None and not ev.query():  # the copy that read this slot has not run yet
            self.posted.host_waits += 1
            ev.synchronize()
        a = self._np[k]
        at = 0
        for p in parts:
            a[at : at + len(p)] = p
            at += len(p)
        host = self._host[k]
        if self.cpu:
            return host
        out = host.to(self.device, non_blocking=True)
        if self.cuda:
            import torch

            e = self._events[k] or torch.cuda.Event()
            e.record(torch.cuda.current_stream(self.device))
            self._events[k] = e
        return out


def completed_work(output: Any) -> Any:
    """A ``torch.distributed.Work`` for a call whose copies are all enqueued: on CUDA a future completed on the
    current stream (``wait()`` makes the waiting stream wait for the call's end); on the CPU a completed one."""
    import torch

    dev = output.device
    fut: Any = torch.futures.Future(devices=[dev]) if is_cuda(dev) else torch.futures.Future()
    fut.set_result([output])
    create = getattr(torch._C._distributed_c10d, "_create_work_from_future", None)
    return create(fut) if create is not None else fut


def as_array(values: Sequence[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)
