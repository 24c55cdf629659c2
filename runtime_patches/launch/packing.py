"""Pack a caller's tensor into a chunk layout and unpack the result: the torch form of :mod:`a2acc.ir.layout`.

No stock executor runs an all-to-all-v, so a2acc's plans run over a **chunk layout**: peer ``d``'s rows go into
``counts[r][d]`` chunks of ``chunk_bytes`` at chunk offset ``in_off[r][d]`` of a send buffer, and source ``s``'s
rows come back from chunk offset ``out_off[r][s]`` of a receive buffer (the layout every manifest lists, see
``docs/executors.md``). This module does those copies for tensors shaped like ``all_to_all_single``'s
arguments (rows along the first dimension, any dtype, any device) with the segments of
:meth:`a2acc.ir.layout.ChunkLayout.pack_segments`; it is the code the JIT runs on every call, and the helper for
offline users of ``a2acc compile`` output::

    from a2acc.ir.layout import load_manifest
    from a2acc.runtime.launch.packing import ManifestCall

    call = ManifestCall(load_manifest("algos.manifest.json"), rank)
    send = call.pack(tokens, input_split_sizes)          # uint8, manifest.buffer_bytes per rank
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)                   # the executor that loaded the XML runs it
    call.unpack(recv, out, output_split_sizes)

All copies of one pack (or unpack) are issued as one ``torch._foreach_copy_`` (one fused launch on GPUs; one
copy per peer on CPU). Padding is not cleared unless asked (``zero_padding=True``): the receiver never reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from a2acc.errors import InputError
from a2acc.ir.layout import ChunkLayout, Manifest, Segments


def row_bytes_of(t: Any) -> int:
    """Bytes of one row (the first dimension) of ``t``."""
    n = 1
    for d in t.shape[1:]:
        n *= int(d)
    return n * int(t.element_size())


def byte_view(t: Any) -> Any:
    """A contiguous tensor as a flat uint8 view (no copy)."""
    import torch

    return t.reshape(-1).view(torch.uint8)


def copy_segments(dst: Any, src: Any, seg: Segments) -> None:
    """``dst[b:b+n] = src[a:a+n]`` for every segment (flat uint8 tensors): one fused ``_foreach_copy_`` launch
    on a GPU, plain copies elsewhere (measured no faster on CPU)."""
    import torch

    if len(seg) == 0:
        return
    if dst.device.type == "cpu":
        for a, b, n in seg:
            dst[b : b + n].copy_(src[a : a + n])
        return
    d = [dst[b : b + n] for _a, b, n in seg]
    s = [src[a : a + n] for a, _b, n in seg]
    torch._foreach_copy_(d, s)


def _splits(split_sizes: Any, n_rows: int, world: int, what: str) -> npt.NDArray[np.int64]:
    if split_sizes is None or len(split_sizes) == 0:
        if n_rows % world:
            raise InputError("", what, n_rows, f"{n_rows} rows do not split evenly over {world} ranks")
        return np.full(world, n_rows // world, dtype=np.int64)
    s = np.asarray([int(x) for x in split_sizes], dtype=np.int64)
    if s.shape != (world,) or (s < 0).any() or int(s.sum()) != n_rows:
        raise InputError(
            "",
            what,
            list(s.tolist())[:8],
            f"{world} non-negative sizes summing to the tensor's {n_rows} rows",
        )
    return s


@dataclass(frozen=True)
class LayoutCall:
    """One rank's view of a layout: ``chunk_bytes`` per chunk, ``rank`` (the caller's), and ``ranks`` when the
    layout is a relabelling (``ranks[c]`` plays layout rank ``c``; None: the identity)."""

    layout: ChunkLayout
    chunk_bytes: int
    rank: int
    ranks: npt.NDArray[np.int64] | None = None

    def _rows(self, mine: npt.NDArray[np.int64], send: bool) -> npt.NDArray[np.int64]:
        n = self.layout.nranks
        rows = np.zeros((n, n), dtype=np.int64)
        if send:
            rows[self.rank] = mine
        else:
            rows[:, self.rank] = mine
        return rows

    def send_segments(self, send_rows: npt.NDArray[np.int64], row_bytes: int) -> Segments:
        return self.layout.pack_segments(
            self._rows(send_rows, True), row_bytes, self.chunk_bytes, self.rank, self.ranks
        )

    def recv_segments(self, recv_rows: npt.NDArray[np.int64], row_bytes: int) -> Segments:
        return self.layout.unpack_segments(
            self._rows(recv_rows, False), row_bytes, self.chunk_bytes, self.rank, self.ranks
        )

    def check_fits(self, send_rows: Any, recv_rows: Any, row_bytes: int) -> None:
        """Refuse split sizes the layout cannot carry whole (the offline path has no residual exchange)."""
        for what, rows, seg in (
            ("input_split_sizes", send_rows, self.send_segments(send_rows, row_bytes)),
            ("output_split_sizes", recv_rows, self.recv_segments(recv_rows, row_bytes)),
        ):
            if seg.total != int(np.asarray(rows).sum()) * row_bytes:
                raise InputError(
                    "",
                    what,
                    [int(x) for x in rows][:8],
                    f"rank {self.rank}: a peer's rows exceed its {self.chunk_bytes}-byte chunks in the layout "
                    "(compile for a larger matrix, or send the rest separately)",
                )


@dataclass(frozen=True)
class ManifestCall:
    """Pack and unpack for one rank of a manifest written by ``a2acc compile`` / ``a2acc cache export``."""

    manifest: Manifest
    rank: int

    @property
    def layout(self) -> LayoutCall:
        return LayoutCall(self.manifest.chunk_layout, self.manifest.chunk_bytes, self.rank)

    def _check(self, t: Any, what: str) -> None:
        if not t.is_contiguous():
            raise InputError("", what, "non-contiguous", "pack/unpack take contiguous tensors")
        if not 0 <= self.rank < self.manifest.ngpus:
            raise InputError("", "rank", self.rank, f"the manifest is for ranks 0..{self.manifest.ngpus - 1}")

    def pack(
        self, input: Any, input_split_sizes: Any = None, out: Any = None, zero_padding: bool = False
    ) -> Any:
        """The uniform send buffer (``manifest.buffer_bytes`` bytes, uint8, on ``input``'s device) holding
        ``input``'s rows at the manifest's offsets. Refuses splits that exceed the layout."""
        import torch

        self._check(input, "input")
        n = self.manifest.ngpus
        send = _splits(input_split_sizes, int(input.shape[0]), n, "input_split_sizes")
        rb = row_bytes_of(input)
        lay = self.layout
        lay.check_fits(send, np.zeros(n, dtype=np.int64), rb)
        nbytes = self.manifest.buffer_bytes
        buf = out if out is not None else torch.empty(nbytes, dtype=torch.uint8, device=input.device)
        if int(buf.numel()) != nbytes or buf.dtype != torch.uint8:
            raise InputError("", "out", int(buf.numel()), f"a uint8 tensor of exactly {nbytes} bytes")
        if zero_padding:
            buf.zero_()
        copy_segments(buf, byte_view(input), lay.send_segments(send, rb))
        return buf

    def unpack(self, recv: Any, output: Any, output_split_sizes: Any = None) -> Any:
        """Copy every source's rows from the receive buffer into ``output`` (shaped like the stock call's)."""
        self._check(output, "output")
        n = self.manifest.ngpus
        rows = _splits(output_split_sizes, int(output.shape[0]), n, "output_split_sizes")
        rb = row_bytes_of(output)
        lay = self.layout
        lay.check_fits(np.zeros(n, dtype=np.int64), rows, rb)
        if int(recv.numel()) * int(recv.element_size()) != self.manifest.buffer_bytes:
            raise InputError(
                "", "recv", int(recv.numel()), f"the receive buffer holds {self.manifest.buffer_bytes} bytes"
            )
        copy_segments(byte_view(output), byte_view(recv), lay.recv_segments(rows, rb))
        return output
