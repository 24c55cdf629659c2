"""The JIT engine behind the patched ``all_to_all_single``: matrix -> bucket -> cached plan -> execution.

Per call (all ranks do the same, in the same order):

1. **Matrix.** All-gather every rank's input split sizes (rows, int64) -> the N x N matrix of rows; bytes =
   rows x bytes per row. (Megatron's dispatcher already knows the matrix: :mod:`a2acc.runtime.megatron` passes
   it in and skips this collective.)
2. **Bucket** (:mod:`a2acc.bucket`): a cached layout serving the matrix, or a new one. The index evolves from
   the matrix sequence only, so every rank picks the same bucket.
3. **Plan** from the :class:`~a2acc.cache.PlanCache` (memory, disk, else compile: plan for the layout, verify,
   lower for the backend). Compilation is deterministic, so every rank computes the same plan.
4. **Agreement.** One small all-gather of (plan hash, ok flag): if any rank failed or disagrees, **every** rank
   falls back to the stock call together (so no rank is left waiting).
5. **Execute**: pack each peer's rows into its chunks, run the plan (reference executor: isend/irecv + copies),
   send the rows beyond the layout (residual) with the stock ``all_to_all_single``, unpack.

Anything that fails before step 4 makes all ranks fall back with a warning; the caller's output is always
produced by either the plan or the stock call.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from a2acc.bucket import BucketIndex
from a2acc.cache import CacheEntry, PlanCache, default_cache_dir
from a2acc.errors import RuntimeHookError
from a2acc.ir import Buf, Program, program_from_json
from a2acc.planners import schedule
from a2acc.runtime.settings import JitSettings, parse_topology_spec
from a2acc.topology import Topology, load_topology

log = logging.getLogger("a2acc.runtime")


@dataclass
class EngineStats:
    calls: int = 0
    handled: int = 0
    fallbacks: int = 0
    bucket_hits: int = 0
    cache: dict[str, int] = field(default_factory=lambda: {"memory": 0, "disk": 0, "compiled": 0})
    payload_bytes: int = 0
    padding_bytes: int = 0
    residual_bytes: int = 0
    # hook decision time of the most recent calls (gather and data movement excluded); bounded for long jobs
    overhead_s: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))
    last_source: str = ""


def compile_entry(
    topo: Topology, layout: np.ndarray, unit: int, algorithm: str, backend: str, key: str
) -> CacheEntry:
    """Plan the bucket's layout (verified) and lower it for ``backend``."""
    prog = schedule(topo, layout * unit, algorithm, unit=unit)  # counts == layout exactly; raises if wrong
    files: dict[str, str] = {}
    manifest = None
    if backend == "msccl-xml":
        from a2acc.backends.msccl_xml.api import lower_verified

        name = f"00-a2acc-{key[:16]}.xml"
        _algo, text, man = lower_verified(prog, name=f"a2acc_{key[:12]}", xml_name=name, dialect="rccl")
        files[name] = text
        manifest = man.to_json()
    elif backend == "mscclpp":
        raise RuntimeHookError("the MSCCL++ backend (JSON execution plans) is not built yet in this a2acc")
    return CacheEntry(
        key, prog.to_json(), files, manifest, {"algorithm": algorithm, "backend": backend, "unit": unit}
    )


def _all_gather(out: Any, inp: Any, group: Any) -> None:
    """``all_gather_single`` where torch has it (2.13+ deprecates the old name), else ``all_gather_into_tensor``."""
    import torch.distributed as dist

    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    fn(out, inp, group=group)


class Engine:
    """One per process; thread-safe (a lock serialises calls)."""

    def __init__(self, settings: JitSettings) -> None:
        self.settings = settings
        name, servers = parse_topology_spec(settings.topology)
        self.topology = load_topology(name, servers)
        self.index = BucketIndex(self.topology, settings.algorithm, settings.backend)
        self.cache = PlanCache(settings.cache_dir or default_cache_dir())
        self.stats = EngineStats()
        self._programs: dict[str, Program] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self.known_matrix_rows: np.ndarray | None = None  # set by the Megatron helper for the next call

    def warn_once(self, what: str, msg: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning("%s -- using the stock all_to_all_single", msg)

    # ------------------------------------------------------------------ the call
    def run(
        self, output: Any, input: Any, output_split_sizes: Any, input_split_sizes: Any, group: Any, stock: Any
    ) -> bool:
        """Serve one call; False means "not handled, call the stock collective" (decided on all ranks alike)."""
        import torch
        import torch.distributed as dist

        with self._lock:
            self.stats.calls += 1
            world = dist.get_world_size(group)
            rank = dist.get_rank(group)
            if world != self.topology.nranks:
                self.warn_once(
                    "world", f"world size {world} != {self.topology.nranks} GPUs of A2ACC_TOPOLOGY"
                )
                self.stats.fallbacks += 1
                return False
            # rank-local eligibility is folded into the collectives below, so every rank decides alike
            eligible = bool(
                input.dim() > 0
                and input.is_contiguous()
                and output.is_contiguous()
                and input.dtype == output.dtype
            )
            row_elems = int(np.prod(input.shape[1:])) if input.dim() > 1 else 1
            row_bytes = row_elems * input.element_size()
            n_rows_in = int(input.shape[0]) if input.dim() > 0 else 0
            in_splits = list(input_split_sizes) if input_split_sizes else [n_rows_in // world] * world
            # 1. matrix (rows): all-gather the input splits, unless the caller gave it
            rows = self.known_matrix_rows
            self.known_matrix_rows = None
            if rows is None:
                mine = torch.tensor([*in_splits, int(eligible)], dtype=torch.int64)
                gathered = torch.empty(world * (world + 1), dtype=torch.int64)
                _all_gather(gathered, mine, group)
                g = gathered.view(world, world + 1).numpy()
                if (
                    int(g[:, world].min()) == 0
                ):  # some rank cannot take the a2acc path: all use the stock call
                    self.stats.fallbacks += 1
                    return False
                rows = g[:, :world].copy()
            t0 = time.perf_counter()
            ok = 1
            key = ""
            prog: Program | None = None
            bucket = None
            try:
                if not eligible:
                    raise RuntimeHookError("non-contiguous tensors or mismatched dtypes")
                if sum(in_splits) != n_rows_in or list(rows[rank]) != [int(x) for x in in_splits]:
                    raise RuntimeHookError(
                        "input split sizes do not match the input tensor or the gathered matrix"
                    )
                if output_split_sizes and [int(x) for x in output_split_sizes] != [
                    int(x) for x in rows[:, rank]
                ]:
                    raise RuntimeHookError("output split sizes disagree with what the peers send")
                matrix = rows.astype(np.int64) * row_bytes
                bucket = self.index.lookup(matrix)
                key = bucket.key
                prog = self._programs.get(key)
                if prog is None:
                    b = bucket
                    entry, where = self.cache.get_or_compile(
                        key,
                        lambda: compile_entry(
                            self.topology,
                            b.layout,
                            b.unit,
                            self.settings.algorithm,
                            self.settings.backend,
                            key,
                        ),
                    )
                    self.stats.cache[where] = self.stats.cache.get(where, 0) + 1
                    self.stats.last_source = where
                    prog = program_from_json(entry.program_json, f"cache entry {key}")
                    self._programs[key] = prog
                else:
                    self.stats.cache["memory"] += 1
                    self.stats.last_source = "memory"
            except Exception as exc:  # any failure here must become a collective fallback
                ok = 0
                self.warn_once(f"plan:{type(exc).__name__}", f"a2acc could not plan this call ({exc})")
            self.stats.overhead_s.append(time.perf_counter() - t0)
            # 4. agreement on (plan hash, ok)
            h = int(hashlib.sha256(key.encode()).hexdigest()[:15], 16)
            mine2 = torch.tensor([h, ok], dtype=torch.int64)
            all2 = torch.empty(2 * world, dtype=torch.int64)
            _all_gather(all2, mine2, group)
            v = all2.view(world, 2)
            if int(v[:, 1].min()) == 0 or int(v[:, 0].min()) != int(v[:, 0].max()):
                self.warn_once("agree", "ranks disagree on the plan (or one failed)")
                self.stats.fallbacks += 1
                return False
            assert prog is not None and bucket is not None
            self._execute(
                prog, bucket.layout, bucket.unit, rows, row_bytes, rank, world, output, input, group, stock
            )
            self.stats.handled += 1
            self.stats.bucket_hits += int(bucket.hit)
            self.stats.payload_bytes += bucket.payload_bytes
            self.stats.padding_bytes += bucket.padding_bytes
            self.stats.residual_bytes += bucket.overflow_bytes
            return True

    def _execute(
        self,
        prog: Program,
        layout: np.ndarray,
        unit: int,
        rows: np.ndarray,
        row_bytes: int,
        rank: int,
        world: int,
        output: Any,
        input: Any,
        group: Any,
        stock: Any,
    ) -> None:
        import torch
        import torch.distributed as dist

        from a2acc.runtime.reference_executor import execute

        fit = np.minimum(rows, (layout * unit) // max(row_bytes, 1)) if row_bytes else rows
        resid = rows - fit
        in_bytes = input.reshape(-1).view(torch.uint8)
        out_bytes = output.reshape(-1).view(torch.uint8)
        in_row_off = np.concatenate([[0], np.cumsum(rows[rank])[:-1]])
        out_row_off = np.concatenate([[0], np.cumsum(rows[:, rank])[:-1]])
        bufs = {
            int(Buf.INPUT): torch.zeros(prog.input_chunks(rank) * unit, dtype=torch.uint8),
            int(Buf.OUTPUT): torch.zeros(prog.output_chunks(rank) * unit, dtype=torch.uint8),
            int(Buf.SCRATCH): torch.zeros(prog.scratch[rank] * unit, dtype=torch.uint8),
        }
        for d in range(world):
            nb = int(fit[rank, d]) * row_bytes
            if nb:
                a = int(in_row_off[d]) * row_bytes
                c = prog.input_offset(rank, d) * unit
                bufs[int(Buf.INPUT)][c : c + nb].copy_(in_bytes[a : a + nb])
        global_ranks = [dist.get_global_rank(group, r) for r in range(world)] if group is not None else None
        execute(prog, rank, bufs, group=group, ranks=global_ranks)
        for s in range(world):
            nb = int(fit[s, rank]) * row_bytes
            if nb:
                a = int(out_row_off[s]) * row_bytes
                c = prog.output_offset(rank, s) * unit
                out_bytes[a : a + nb].copy_(bufs[int(Buf.OUTPUT)][c : c + nb])
        if resid.any():  # rows beyond the layout: one small stock exchange (every rank knows resid)
            send_rows = [int(x) for x in resid[rank]]
            recv_rows = [int(x) for x in resid[:, rank]]
            parts = [
                input[int(in_row_off[d] + fit[rank, d]) : int(in_row_off[d] + rows[rank, d])]
                for d in range(world)
            ]
            send = torch.cat(parts) if parts else input[:0]
            recv = torch.empty((sum(recv_rows), *input.shape[1:]), dtype=input.dtype)
            stock(recv, send.contiguous(), recv_rows, send_rows, group=group)
            at = 0
            for s in range(world):
                k = recv_rows[s]
                if k:
                    lo = int(out_row_off[s] + fit[s, rank])
                    output[lo : lo + k].copy_(recv[at : at + k])
                    at += k
