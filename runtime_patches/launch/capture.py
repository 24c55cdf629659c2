"""A plan bound at a fixed capacity, for CUDA-graph capture: the split sizes live on the device.

A graph replays the launches it captured, with the shapes and host values they had then, so a call inside one
cannot exchange split sizes, read them on the host or allocate by them. MoE layers that are graph-captured
(fixed-capacity dispatch, as Megatron-LM, NeMo and FlashInfer run them) keep their token counts on the device
instead. :class:`CapacityLaunch` serves exactly that: the user fixes, once and outside the graph, the most rows
each rank sends each peer (the *capacity*, the same on every rank); a2acc plans that matrix and binds the plan
to its buffers (:class:`a2acc.runtime.launch.bound.BoundLaunch`, with a one-collective plan run over its buffer
too: it cannot take its sizes from the host). A call then takes the counts as device tensors and runs a fixed
list of launches: no host sync, no shape that depends on a count, so a graph can capture it and replay it.

**Rows beyond the capacity** (and counts that point past the input tensor) are not moved: their output rows are
zeros, as a dropped token is in MoE. They are never lost silently. Every call adds them up on the device, per
peer (``dropped``: rows this rank could not send; ``missed``: rows it expected and did not receive), and the
policy the user chose says what that means:

- ``flag`` (the default): overflow is an error. A device flag is raised; :meth:`CapacityLaunch.check`, called
  outside the graph (it reads the device: a sync), raises :class:`a2acc.errors.CapacityOverflow` naming the
  peers and rows;
- ``drop``: overflow is the capacity doing its job. :meth:`CapacityLaunch.check` returns the counts, and the
  engine logs them at exit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from a2acc.errors import CapacityOverflow
from a2acc.runtime.launch.bound import BoundLaunch

FLAG, DROP = "flag", "drop"
POLICIES = (FLAG, DROP)


class CapacityLaunch:
    """A bound plan replayed with device counts (see module docstring). ``launch``: the plan bound for this rank
    (not the one-collective form); ``capacity``: rows per pair (``world x world``, row = sender, group ranks)
    that the plan's regions hold; ``rank``: this rank in the group; ``overflow``: ``flag`` or ``drop``."""

    def __init__(self, launch: BoundLaunch, capacity: Any, rank: int, overflow: str) -> None:
        import torch

        if overflow not in POLICIES:
            raise ValueError(f"overflow={overflow!r}: use one of {', '.join(POLICIES)}")
        self.launch = launch
        self.overflow = overflow
        dev = launch.device
        w = launch.lp.world
        self.world = w
        # exactly the capacity asked for (the plan's chunks may hold a few rows more)
        cap = np.asarray(capacity, dtype=np.int64)
        if (cap[rank] > launch.cap_in).any() or (cap[:, rank] > launch.cap_out).any():
            raise ValueError("the plan's regions hold fewer rows than the capacity")  # a planning bug
        self.capacity_in = torch.as_tensor(cap[rank].copy()).to(dev)  # rows this rank can send each peer
        self.capacity_out = torch.as_tensor(cap[:, rank].copy()).to(
            dev
        )  # rows it can receive from each source
        self.dropped = torch.zeros(w, dtype=torch.int64, device=dev)
        self.missed = torch.zeros(w, dtype=torch.int64, device=dev)
        self.flag = torch.zeros((), dtype=torch.bool, device=dev)
        self._static: dict[tuple[int, ...], Any] = {}

    def __call__(self, output: Any, input: Any, send_counts: Any, recv_counts: Any) -> Any:
        """Move ``input``'s rows (``send_counts[q]`` rows for group rank ``q``, back to back in rank order) into
        ``output`` (``recv_counts[s]`` rows from each source, back to back), as ``all_to_all_single`` would, up to
        the capacity; returns the rows received per source (an int64 device tensor). ``send_counts`` and
        ``recv_counts`` are int64 tensors on the data's device; both tensors keep their shapes from call to
        call (a graph's buffers). Rows beyond the capacity follow the overflow policy."""
        import torch

        lc = self.launch
        lc.order.begin()
        n_in = int(input.shape[0]) if input.dim() else 0
        # counts that point past the input are rows that do not exist: they overflow too
        avail = (n_in - (torch.cumsum(send_counts, 0) - send_counts)).clamp_(min=0)
        cap_in = torch.minimum(avail, self.capacity_in)
        self.dropped.add_(send_counts - torch.minimum(send_counts, cap_in))
        got = lc.replay(input, output, send_counts, recv_counts, cap_in, self.capacity_out)
        self.missed.add_(recv_counts - got)
        if self.overflow == FLAG:
            self.flag.logical_or_((self.dropped.sum() + self.missed.sum()) > 0)
        lc.order.end()
        return got

    def with_sizes(self, output: Any, input: Any, send_sizes: Any, recv_sizes: Any) -> Any:
        """The same with host split sizes fixed for the graph (a captured ``all_to_all_single``'s own): their
        device copies are made once per distinct sizes and kept, so a replay reads what the capture saw."""
        key = (*send_sizes, -1, *recv_sizes)
        counts = self._static.get(key)
        if counts is None:
            counts = self._static[key] = self._device_counts(
                [int(x) for x in send_sizes], [int(x) for x in recv_sizes]
            )
        w = self.world
        return self(output, input, counts[:w], counts[w:])

    def _device_counts(self, send: list[int], recv: list[int]) -> Any:
        import torch

        host = torch.tensor(send + recv, dtype=torch.int64)
        dev = self.launch.device
        if getattr(dev, "type", "cpu") == "cpu":
            return host
        if getattr(dev, "type", "") == "cuda":  # pinned and kept alive: a captured copy reads it at replay
            host = host.pin_memory()
            self._static[(-2, len(self._static))] = host
        return host.to(dev, non_blocking=True)

    def check(self) -> dict[str, list[int]]:
        """Rows that overflowed since the last :meth:`reset` (a host sync: call it outside the graph):
        ``dropped[q]``, rows this rank could not send to ``q``; ``missed[s]``, rows it expected from ``s`` and did
        not get. With ``overflow="flag"`` any of them raises :class:`a2acc.errors.CapacityOverflow`."""
        import torch

        w = self.world
        host = torch.cat([self.dropped, self.missed, self.flag.view(1).long()]).cpu().tolist()  # one copy
        dropped, missed, flagged = host[:w], host[w : 2 * w], bool(host[-1])
        if self.overflow == FLAG and flagged:
            raise CapacityOverflow(
                "rows beyond the bound capacity were not moved (their output rows are zeros): "
                + ", ".join(f"{k} to rank {q}" for q, k in enumerate(dropped) if k)
                + ("; " if any(dropped) and any(missed) else "")
                + ", ".join(f"{k} expected from rank {s}" for s, k in enumerate(missed) if k)
                + " -- bind a larger capacity, or overflow='drop' to drop them by design"
            )
        return {"dropped": dropped, "missed": missed}

    def reset(self) -> None:
        self.dropped.zero_()
        self.missed.zero_()
        self.flag.zero_()
