"""Pack the caller's rows into a plan's regions and unpack them, as a fixed sequence of tensor operations.

A plan runs over **regions**: peer ``p``'s rows go into ``cap[p]`` chunks at chunk ``off[p]`` of the input
region, and source ``s``'s rows come back from the output region (:mod:`a2acc.runtime.launch.program`). The
caller's tensor holds its rows back to back in peer order, as many per peer as its split sizes say. Packing
and unpacking are therefore gathers whose index depends on the split sizes; this module computes that index
**on the data's device, from the split sizes as a device tensor**, with operations whose shapes depend only
on the buffers' shapes (never on the split sizes' values): no host sync, no per-peer Python loop, and the same
launches every call, so a CUDA graph can capture them (:mod:`a2acc.runtime.launch.capture`).

Granularity: one index entry per *word* of ``g = gcd(row bytes, chunk bytes)`` bytes (the JIT picks chunks
that hold whole rows, so a word is a row); the tensors are viewed as ``(words, g)`` byte rows, or ``(words,
g/8)`` int64 rows when ``g`` allows (8-byte copies).

Rows beyond a peer's chunks (a skew bucket's residual) are not packed: the caller sends them separately
(:mod:`a2acc.runtime.launch.residual`), or, under capture, they follow the overflow policy. Unpacking fills
the output words of such rows from a row of zeros, and also reports per source how many rows fitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
#: a position no region covers (compares greater than any fitting word)
_NOWHERE = np.int64(1) << 62


def word_bytes(row_bytes: int, unit: int) -> int:
    """Bytes per index entry: the largest size dividing both a row and a chunk."""
    return gcd(int(row_bytes), int(unit))


def words(t: Any, g: int, wide: bool) -> Any:
    """A contiguous tensor as ``(bytes/g, g)`` uint8 rows, or with ``wide`` (``g % 8 == 0`` and the storage
    8-byte aligned) as ``(bytes/g, g/8)`` int64 rows: 8-byte copies (no copy is made either way)."""
    import torch

    flat = t.reshape(-1).view(torch.uint8)
    if wide:
        return flat.view(torch.int64).view(-1, g // 8)
    return flat.view(-1, g)


@dataclass(frozen=True)
class RegionMap:
    """Host-side description of one rank's regions in a buffer of chunks (numpy; rank order of the group):
    ``off``/``cap`` per peer in chunks, ``chunks`` of the buffer, and ``where[k]``, the chunk of the buffer
    that holds region chunk ``k`` (None: region chunk ``k`` is buffer chunk ``k``)."""

    off: I64
    cap: I64
    chunks: int
    where: I64 | None = None


class Slots:
    """A :class:`RegionMap` bound to a device, a row size and a chunk size: the constant index tensors, made
    once, and the per-call gathers (see module docstring). ``pack`` fills the region buffer's words from the
    caller's input; ``unpack`` fills the caller's output from the buffer (where region chunks live at
    ``where``), words of rows beyond the regions from ``zero_word``."""

    def __init__(self, send: RegionMap, recv: RegionMap, row_bytes: int, unit: int, device: Any) -> None:
        import torch

        from a2acc.runtime.launch.program import region_rows

        g = word_bytes(row_bytes, unit)
        self.g, self.device = g, device
        self.wpr = row_bytes // g  # words per row
        self.wpc = unit // g  # words per chunk

        def dev(a: npt.ArrayLike) -> Any:
            return torch.as_tensor(np.ascontiguousarray(a, dtype=np.int64)).to(device)

        def cap_rows(cap: I64) -> I64:  # whole rows that fit a region
            return np.asarray((cap * unit) // row_bytes, dtype=np.int64)

        peer, pos = region_rows(send.off, send.cap)
        n = send.off.size
        # per word of the packed region buffer: its peer (0 where no region covers it, with an unreachable
        # position) and its word within the peer's region
        wpeer = np.repeat(np.where(peer < n, peer, 0), self.wpc)
        wpos = (np.repeat(pos, self.wpc) * self.wpc + np.tile(np.arange(self.wpc), peer.size)).astype(
            np.int64
        )
        wpos[np.repeat(peer >= n, self.wpc)] = _NOWHERE
        self.in_words = int(peer.size) * self.wpc
        self.in_peer, self.in_pos = dev(wpeer), dev(wpos)
        self.in_cap = dev(cap_rows(send.cap))
        self.out_cap = dev(cap_rows(recv.cap))
        self.out_off = dev(recv.off * self.wpc)  # first region word of each source
        where = np.arange(recv.chunks, dtype=np.int64) if recv.where is None else recv.where
        # per region word: the buffer word holding it
        region = (np.repeat(where, self.wpc) * self.wpc + np.tile(np.arange(self.wpc), where.size)).astype(
            np.int64
        )
        self.region = dev(region if region.size else np.zeros(1, np.int64))
        self._arange: dict[int, Any] = {}

    def _words(self, n: int) -> Any:
        a = self._arange.get(n)
        if a is None:
            import torch

            if len(self._arange) > 16:
                self._arange.clear()
            a = self._arange[n] = torch.arange(n, dtype=torch.int64, device=self.device)
        return a

    def pack(self, src_words: Any, splits: Any, dst_words: Any, cap: Any = None) -> None:
        """``dst_words[:in_words]`` = the caller's words at the region positions (padding: any word).
        ``splits``: rows per peer (int64 tensor on the device); ``src_words``: the caller's input as words;
        ``cap``: fewer rows per peer to pack than the regions hold (a fixed-capacity binding's own limit)."""
        import torch

        n_src = int(src_words.shape[0])
        if self.in_words == 0 or n_src == 0:
            return
        off = (torch.cumsum(splits, 0) - splits) * self.wpr
        fit = torch.minimum(splits, self.in_cap if cap is None else cap) * self.wpr
        idx = off[self.in_peer] + self.in_pos
        idx = torch.where(self.in_pos < fit[self.in_peer], idx, 0).clamp_(max=n_src - 1)
        torch.index_select(src_words, 0, idx, out=dst_words[: self.in_words])

    def unpack(self, buf_words: Any, splits: Any, dst_words: Any, zero_word: int, cap: Any = None) -> Any:
        """The caller's output words from the buffer: source ``s``'s first ``min(splits[s], fit)`` rows from
        its region, the words of its other rows from ``zero_word`` (``cap``: fewer rows per source than the
        regions hold). Returns the fitting rows per source."""
        import torch

        fit_rows = torch.minimum(splits, self.out_cap if cap is None else cap)
        n_dst = int(dst_words.shape[0])
        if n_dst == 0:
            return fit_rows
        end = torch.cumsum(splits, 0) * self.wpr
        j = self._words(n_dst)
        s = torch.searchsorted(end, j, right=True).clamp_(max=int(splits.shape[0]) - 1)
        t = j - (end - splits * self.wpr)[s]
        ok = t < (fit_rows * self.wpr)[s]
        reg = torch.where(ok, self.out_off[s] + t, 0).clamp_(max=int(self.region.shape[0]) - 1)
        idx = torch.where(ok, self.region[reg], zero_word)
        torch.index_select(buf_words, 0, idx, out=dst_words)
        return fit_rows
