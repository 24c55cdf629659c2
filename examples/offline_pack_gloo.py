"""Example: the offline path end to end on CPU, from ``a2acc compile`` to the unpacked result in four processes.

1. Compile an all-to-all-v for a known token matrix (``a2acc compile -b msccl-xml``: ``algos/`` holds the XML an
   MSCCL executor loads, ``algos.manifest.json`` the chunk layout) and verify it (``a2acc verify``).
2. In four Gloo processes, every rank packs its tokens per the manifest (:class:`a2acc.runtime.launch.packing.ManifestCall`,
   the same code the JIT runs), makes the executor's call, and unpacks the result into the tensor
   ``all_to_all_single`` would have filled; the result is compared byte for byte with torch's own call.

On a GPU cluster the executor's call is ``dist.all_to_all_single(recv, send)`` on an NCCL/RCCL group whose MSCCL
executor loaded ``algos/`` (``docs/executors.md``: environment and versions). No such executor runs here, so
:class:`RecordingExecutor` stands in for it: it records the call it was given (buffer sizes, dtype) and performs
what the XML does, the manifest's all-to-all-v (``counts[s][d]`` chunks from ``s``'s input offset to ``d``'s output
offset), with Gloo.

Run: ``.venv/bin/python examples/offline_pack_gloo.py [WORKDIR]`` (a temporary directory by default).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from a2acc.ir.layout import Manifest, load_manifest
from a2acc.runtime.launch.packing import ManifestCall

RANKS = 4
HIDDEN = 64  # bfloat16: 128 bytes per token
SEED = 5


def token_matrix() -> np.ndarray:
    """Tokens each rank sends to each expert rank (row = sender), skewed towards rank 2."""
    rng = np.random.default_rng(SEED)
    p = np.array([1.0, 1.0, 3.0, 1.0])
    return np.stack([rng.multinomial(400, p / p.sum()) for _ in range(RANKS)])


class RecordingExecutor:
    """Stands in for the MSCCL executor (see module docstring): records each call, runs the layout's all-to-all-v."""

    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self.calls: list[dict[str, object]] = []

    def all_to_all_single(self, recv: torch.Tensor, send: torch.Tensor) -> None:
        m, r = self.manifest, dist.get_rank()
        self.calls.append({"send_bytes": send.numel(), "recv_bytes": recv.numel(), "dtype": str(send.dtype)})
        assert send.numel() == recv.numel() == m.buffer_bytes, (
            "the executor runs on exactly buffer_bytes per rank"
        )
        counts = np.asarray(m.counts) * m.chunk_bytes
        ins, outs = counts[r].tolist(), counts[:, r].tolist()
        dist.all_to_all_single(recv[: sum(outs)], send[: sum(ins)], outs, ins)


def worker(rank: int, work: str, rows: np.ndarray) -> None:
    dist.init_process_group("gloo", init_method=f"file://{work}/store", rank=rank, world_size=RANKS)
    manifest = load_manifest(f"{work}/algos.manifest.json")
    call = ManifestCall(manifest, rank)
    executor = RecordingExecutor(manifest)
    send_rows, recv_rows = rows[rank].tolist(), rows[:, rank].tolist()
    gen = torch.Generator().manual_seed(100 + rank)
    tokens = torch.randn(sum(send_rows), HIDDEN, generator=gen).to(torch.bfloat16)

    send = call.pack(tokens, send_rows)  # uint8, manifest.buffer_bytes
    recv = torch.empty_like(send)
    executor.all_to_all_single(recv, send)
    out = torch.empty(sum(recv_rows), HIDDEN, dtype=torch.bfloat16)
    call.unpack(recv, out, recv_rows)

    want = torch.empty_like(out)
    dist.all_to_all_single(want, tokens, recv_rows, send_rows)
    same = torch.equal(out.view(torch.int16), want.view(torch.int16))
    flags = torch.tensor([int(same)])
    dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    if rank == 0:
        print(f"executor calls on rank 0: {executor.calls}")
        print(
            f"{'byte-identical' if flags.item() else 'DIFFERENT'} to torch's all_to_all_single on all {RANKS} ranks"
        )
    dist.destroy_process_group()


def main(work: str) -> None:
    rows = token_matrix()
    np.save(f"{work}/m.npy", rows * HIDDEN * 2)  # bytes per (sender, receiver)
    a2acc = [sys.executable, "-m", "a2acc"]
    compile_cmd = ["compile", "-t", "alps", "-n", "1", "-m", f"{work}/m.npy", "-a", "fast", "-b", "msccl-xml"]
    subprocess.run([*a2acc, *compile_cmd, "-o", f"{work}/algos"], check=True)
    (xml,) = Path(work, "algos").glob("*.xml")
    subprocess.run([*a2acc, "verify", str(xml)], check=True)
    mp.spawn(worker, args=(work, rows), nprocs=RANKS)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as d:
            main(d)
