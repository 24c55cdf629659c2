"""The JIT engine behind the patched ``all_to_all_single``: matrix -> bucket -> cached plan -> execution.

Per call (all ranks do the same, in the same order):

1. **Matrix.** All-gather every rank's input split sizes (rows, int64) -> the N x N matrix of rows; bytes =
   rows x bytes per row. (Megatron's dispatcher already knows the matrix: :mod:`a2acc.runtime.megatron` passes
   it in and skips this collective.)
2. **Bucket** (:mod:`a2acc.jit.bucket`): a cached layout serving the matrix, or a new one. The index evolves from
   the matrix sequence only, so every rank picks the same bucket.
3. **Plan** from the :class:`~a2acc.jit.cache.PlanCache` (memory, disk, else compile: plan for the layout, verify,
   lower for the backend). Compilation is deterministic, so every rank computes the same plan.
4. **Agreement.** One small all-gather of (plan hash, ok flag): if any rank failed or disagrees, **every** rank
   falls back to the stock call together (so no rank is left waiting).
5. **Execute** (:mod:`a2acc.runtime.executors`, ``A2ACC_EXECUTOR``): pack each peer's rows into its chunks
   (:class:`a2acc.ir.layout.ChunkLayout`, the same layout every backend's manifest describes), run the plan
   (reference: isend/irecv + copies; msccl: the MSCCL executor via the stock call, when it provably holds this
   plan), send the rows beyond the layout (residual) with the stock ``all_to_all_single``, unpack.

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

from a2acc.errors import InternalError, RuntimeHookError
from a2acc.ir import Buf, Program, program_from_json
from a2acc.ir.layout import fitting_rows
from a2acc.ir.quantize import UnitPolicy
from a2acc.jit.bucket import BucketIndex, variant
from a2acc.jit.cache import CacheEntry, PlanCache, default_cache_dir
from a2acc.model.topology import Topology, load_topology
from a2acc.pipeline import Request
from a2acc.pipeline import compile as compile_pipeline
from a2acc.runtime.executors import get_executor
from a2acc.runtime.settings import JitSettings, parse_topology_spec

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
    topo: Topology,
    layout: np.ndarray,
    unit: int,
    algorithm: str,
    backend: str | None,
    key: str,
    planner_options: Any = None,
    backend_options: Any = None,
) -> CacheEntry:
    """Plan the bucket's layout exactly and (with a backend) lower it: one :func:`a2acc.pipeline.compile`."""
    backend = None if backend in (None, "none") else backend
    res = compile_pipeline(
        Request(
            topo,
            layout * unit,
            algorithm,
            planner_options=planner_options,
            target=backend,
            target_options=backend_options,
            units=UnitPolicy(unit=unit),
            counts=layout,
            name=f"a2acc-{key[:16]}",
        )
    )
    files: dict[str, str] = dict(res.lowered.files) if res.lowered is not None else {}
    manifest = res.lowered.manifest.to_json() if res.lowered is not None else None
    return CacheEntry(
        key,
        res.program.to_json(),
        files,
        manifest,
        {"algorithm": algorithm, "backend": backend or "none", "unit": unit},
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
        self.planner_options = dict(settings.planner_opts)
        self.backend_options = dict(settings.backend_opts)
        if settings.target == "msccl-xml" and "dialect" not in self.backend_options:
            self.backend_options["dialect"] = _platform_dialect()
        # options are part of the bucket key: other options, other plans
        self.index = BucketIndex(
            self.topology,
            variant(settings.algorithm, self.planner_options),
            variant(settings.backend, self.backend_options),
        )
        self.executor = get_executor(settings.executor)
        self.reference = get_executor("reference")
        self._entries: dict[str, CacheEntry] = {}
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
                            self.settings.target,
                            key,
                            self.planner_options,
                            self.backend_options,
                        ),
                    )
                    self.stats.cache[where] = self.stats.cache.get(where, 0) + 1
                    self.stats.last_source = where
                    prog = program_from_json(entry.program_json, f"cache entry {key}")
                    self._programs[key] = prog
                    self._entries[key] = entry
                else:
                    self.stats.cache["memory"] += 1
                    self.stats.last_source = "memory"
            except Exception as exc:  # any failure here must become a collective fallback
                ok = 0
                self.warn_once(f"plan:{type(exc).__name__}", f"a2acc could not plan this call ({exc})")
            executor = self.reference
            if ok and self.executor is not self.reference:
                why = self.executor.unavailable(self._entries.get(key), group)
                if why is None:
                    executor = self.executor
                else:
                    self.warn_executor(why)
            self.stats.overhead_s.append(time.perf_counter() - t0)
            # 4. agreement on (plan hash, executor, ok)
            h = int(hashlib.sha256(f"{key}/{executor.name}".encode()).hexdigest()[:15], 16)
            mine2 = torch.tensor([h, ok], dtype=torch.int64)
            all2 = torch.empty(2 * world, dtype=torch.int64)
            _all_gather(all2, mine2, group)
            v = all2.view(world, 2)
            if int(v[:, 1].min()) == 0 or int(v[:, 0].min()) != int(v[:, 0].max()):
                self.warn_once("agree", "ranks disagree on the plan (or one failed)")
                self.stats.fallbacks += 1
                return False
            if prog is None or bucket is None:
                raise InternalError("ranks agreed on a plan this rank does not have")
            self._execute(executor, prog, key, rows, row_bytes, rank, world, output, input, group, stock)
            self.stats.handled += 1
            self.stats.bucket_hits += int(bucket.hit)
            self.stats.payload_bytes += bucket.payload_bytes
            self.stats.padding_bytes += bucket.padding_bytes
            self.stats.residual_bytes += bucket.overflow_bytes
            return True

    def warn_executor(self, why: str) -> None:
        if "executor" not in self._warned:
            self._warned.add("executor")
            log.warning(
                "a2acc: A2ACC_EXECUTOR=%s cannot run here (%s) -- using the reference executor",
                self.settings.executor,
                why,
            )

    def _execute(
        self,
        executor: Any,
        prog: Program,
        key: str,
        rows: np.ndarray,
        row_bytes: int,
        rank: int,
        world: int,
        output: Any,
        input: Any,
        group: Any,
        stock: Any,
    ) -> None:
        """Pack this rank's rows into the layout, run the plan, unpack; rows beyond it go as a residual."""
        import torch

        unit = prog.unit_bytes
        lay = prog.layout
        fit = fitting_rows(lay.counts, rows, row_bytes, unit)
        resid = rows - fit
        in_bytes = input.reshape(-1).view(torch.uint8)
        out_bytes = output.reshape(-1).view(torch.uint8)
        dev = input.device
        if executor.buffers == "uniform":
            c = lay.buffer_chunks * unit
            sizes = {int(Buf.INPUT): c, int(Buf.OUTPUT): c, int(Buf.SCRATCH): 0}
        else:
            sizes = {
                int(Buf.INPUT): lay.input_chunks(rank) * unit,
                int(Buf.OUTPUT): lay.output_chunks(rank) * unit,
                int(Buf.SCRATCH): prog.scratch[rank] * unit,
            }
        bufs = {b: torch.zeros(n, dtype=torch.uint8, device=dev) for b, n in sizes.items()}
        for a, b, nb in lay.pack_segments(rows, row_bytes, unit, rank):
            bufs[int(Buf.INPUT)][b : b + nb].copy_(in_bytes[a : a + nb])
        executor.run(prog, self._entries.get(key), rank, bufs, group, stock)
        for a, b, nb in lay.unpack_segments(rows, row_bytes, unit, rank):
            out_bytes[b : b + nb].copy_(bufs[int(Buf.OUTPUT)][a : a + nb])
        if resid.any():  # rows beyond the layout: one small stock exchange (every rank knows resid)
            in_row_off = np.concatenate([[0], np.cumsum(rows[rank])[:-1]])
            out_row_off = np.concatenate([[0], np.cumsum(rows[:, rank])[:-1]])
            send_rows = [int(x) for x in resid[rank]]
            recv_rows = [int(x) for x in resid[:, rank]]
            parts = [
                input[int(in_row_off[d] + fit[rank, d]) : int(in_row_off[d] + rows[rank, d])]
                for d in range(world)
            ]
            send = torch.cat(parts) if parts else input[:0]
            recv = torch.empty((sum(recv_rows), *input.shape[1:]), dtype=input.dtype, device=dev)
            stock(recv, send.contiguous(), recv_rows, send_rows, group=group)
            at = 0
            for s in range(world):
                k = recv_rows[s]
                if k:
                    lo = int(out_row_off[s] + fit[s, rank])
                    output[lo : lo + k].copy_(recv[at : at + k])
                    at += k


def _platform_dialect() -> str:
    """rccl on a ROCm build of torch (RCCL's MSCCL reads only s/r/cpy/re/nop), else nccl."""
    try:
        import torch

        return "rccl" if getattr(torch.version, "hip", None) else "nccl"
    except ImportError:
        return "nccl"
