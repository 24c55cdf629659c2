"""The JIT engine behind the patched ``all_to_all_single``: matrix -> bucket -> cached plan -> execution.

Per call (all ranks of the call's process group do the same, in the same order):

1. **Group.** The group maps onto the topology (:mod:`a2acc.runtime.groups`: the world, a regular slice of
   it, or ``A2ACC_TOPOLOGY`` describing the group itself); plans, buckets and buffers are per group.
2. **Matrix.** All-gather every rank's input split sizes (rows, int64) -> the N x N matrix of rows; bytes =
   rows x bytes per row (Megatron's dispatcher already knows the matrix: :mod:`a2acc.runtime.megatron`).
3. **Bucket** (:mod:`a2acc.jit.bucket`): a cached layout serving the matrix, or a new one; the index evolves
   from the matrix sequence only, so every rank picks the same bucket.
4. **Plan.** In memory: ready. Otherwise a background thread loads it from the disk cache or compiles it
   (:func:`a2acc.pipeline.compile`: plan, verify, and with a backend lower and check) while this call is served
   by the stock collective: a miss never stalls (``A2ACC_MISS=wait`` compiles in the call instead).
5. **Agreement.** One small all-gather of (plan hash + executor, ready, ok): the plan runs only when every rank
   has it ready and all agree; otherwise every rank takes the stock call together, so no rank waits.
6. **Execute** (:mod:`a2acc.runtime.executors`): pack each peer's rows into its chunks (the layout every
   manifest describes) in staging buffers on the input's device, reused across calls; run the plan; send rows
   beyond the layout (residual) with the stock call; unpack. With ``async_op=True`` the last stage's transfers
   and the unpack complete behind a real ``torch.distributed.Work``.

Anything that fails before step 5 makes all ranks fall back together, once-per-job warnings on the group's
first rank; the caller's output is always produced by either the plan or the stock call.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from a2acc.errors import InternalError, RuntimeHookError
from a2acc.ir import Buf, Program, program_from_json
from a2acc.ir.layout import fitting_rows
from a2acc.ir.quantize import UnitPolicy
from a2acc.jit.bucket import Bucket, BucketIndex, variant
from a2acc.jit.cache import CacheEntry, PlanCache, default_cache_dir
from a2acc.model.topology import Topology, load_topology
from a2acc.pipeline import Request
from a2acc.pipeline import compile as compile_pipeline
from a2acc.runtime.executors import get_executor
from a2acc.runtime.groups import slice_topology
from a2acc.runtime.settings import JitSettings, parse_topology_spec

log = logging.getLogger("a2acc.runtime")


@dataclass
class EngineStats:
    """Counters of one process (``a2acc.runtime.stats()`` returns them as a dict; docs/runtime.md)."""

    calls: int = 0  # calls that reached the engine
    handled: int = 0  # served by an a2acc plan
    stock_while_compiling: int = 0  # served by the stock call because a plan was still compiling somewhere
    fallbacks: Counter[str] = field(default_factory=Counter)  # served by the stock call, by reason
    bucket_hits: int = 0
    cache: dict[str, int] = field(default_factory=lambda: {"memory": 0, "disk": 0, "compiled": 0})
    payload_bytes: int = 0
    padding_bytes: int = 0
    residual_bytes: int = 0
    # hook decision time of recent calls (gather and data movement excluded); bounded for long jobs
    overhead_s: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))
    last_source: str = ""

    def as_dict(self) -> dict[str, Any]:
        over = np.array(self.overhead_s) if self.overhead_s else np.zeros(1)
        return {
            "calls": self.calls,
            "handled": self.handled,
            "stock_while_compiling": self.stock_while_compiling,
            "fallbacks": dict(self.fallbacks),
            "bucket_hits": self.bucket_hits,
            "cache": dict(self.cache),
            "payload_bytes": self.payload_bytes,
            "padding_bytes": self.padding_bytes,
            "residual_bytes": self.residual_bytes,
            "overhead_us_median": float(np.median(over) * 1e6),
            "overhead_us_mean": float(np.mean(over) * 1e6),
        }


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


@dataclass
class _Group:
    """What the engine keeps per process group."""

    ranks: tuple[int, ...]  # global ranks, in group order
    topology: Topology
    index: BucketIndex
    programs: dict[str, Program] = field(default_factory=dict)
    entries: dict[str, CacheEntry] = field(default_factory=dict)
    pending: dict[str, Future[tuple[CacheEntry, str]]] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)  # buckets whose plan failed here: not retried
    buffers: dict[tuple[str, int], Any] = field(default_factory=dict)  # (device, Buf) -> uint8 tensor
    busy: int = 0  # async calls whose buffers are still in flight


class _Finish:
    """The tail of one call: wait for the executor's last transfers, then unpack into the caller's output."""

    def __init__(self, pending: list[Any], unpack: Any, group: _Group) -> None:
        self.pending = pending
        self.unpack = unpack
        self.group = group

    def __call__(self) -> None:
        for w in self.pending:
            w.wait()
        self.unpack()


class Engine:
    """One per process; thread-safe (a lock serialises calls)."""

    def __init__(self, settings: JitSettings) -> None:
        self.settings = settings
        name, servers = parse_topology_spec(settings.topology)
        self.topology = load_topology(name, servers)
        self.cache = PlanCache(settings.cache_dir or default_cache_dir())
        self.stats = EngineStats()
        self.planner_options = dict(settings.planner_opts)
        self.backend_options = dict(settings.backend_opts)
        if settings.target == "msccl-xml" and "dialect" not in self.backend_options:
            self.backend_options["dialect"] = _platform_dialect()
        self.executor = get_executor(settings.executor)
        self.reference = get_executor("reference")
        self._groups: dict[tuple[int, ...], _Group | str] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._compiler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="a2acc-compile")
        self._finisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="a2acc-finish")
        self.known_matrix_rows: np.ndarray | None = None  # set by the Megatron helper for the next call
        atexit.register(self.summary)

    # ------------------------------------------------------------------ messages
    def warn_once(self, what: str, msg: str, speak: bool = True) -> None:
        """A warning once per job: decided by every rank alike, printed by the group's first rank only."""
        if what not in self._warned:
            self._warned.add(what)
            if speak:
                log.warning("%s -- using the stock all_to_all_single", msg)

    def summary(self) -> None:
        """At exit, rank 0 logs what the engine did (info level)."""
        from a2acc.runtime.activate import job_rank0

        if job_rank0() and self.stats.calls:
            s = self.stats.as_dict()
            log.info(
                "summary: %d calls, %d by a2acc plans (%d bucket hits), %d stock while compiling, fallbacks %s; "
                "padding %.1f%%, residual %.1f%% of payload; hook %.0f us per call (median)",
                s["calls"],
                s["handled"],
                s["bucket_hits"],
                s["stock_while_compiling"],
                s["fallbacks"] or "none",
                100 * s["padding_bytes"] / max(s["payload_bytes"], 1),
                100 * s["residual_bytes"] / max(s["payload_bytes"], 1),
                s["overhead_us_median"],
            )

    # ------------------------------------------------------------------ groups
    def _group(self, group: Any, world: int) -> _Group | str:
        import torch.distributed as dist

        ranks = tuple(range(world)) if group is None else tuple(dist.get_process_group_ranks(group))
        hit = self._groups.get(ranks)
        if hit is not None:
            return hit
        if world == self.topology.nranks:
            topo: Topology | str = self.topology  # the world, or A2ACC_TOPOLOGY describing this group
        else:
            topo = slice_topology(self.topology, ranks)
        if isinstance(topo, str):
            state: _Group | str = f"group of {world} ranks: {topo}"
        else:
            index = BucketIndex(
                topo,
                variant(self.settings.algorithm, self.planner_options),
                variant(self.settings.backend, self.backend_options),
            )
            state = _Group(ranks, topo, index)
            if dist.get_rank() == ranks[0]:
                log.info(
                    "group of %d ranks (first %d): topology %s", world, ranks[0], topo.summary().describe()
                )
        self._groups[ranks] = state
        return state

    # ------------------------------------------------------------------ plans
    def _load_or_compile(self, g: _Group, bucket: Bucket) -> tuple[CacheEntry, str]:
        key = bucket.key
        return self.cache.get_or_compile(
            key,
            lambda: compile_entry(
                g.topology,
                bucket.layout,
                bucket.unit,
                self.settings.algorithm,
                self.settings.target,
                key,
                self.planner_options,
                self.backend_options,
            ),
        )

    def _plan_state(self, g: _Group, bucket: Bucket) -> tuple[int, int]:
        """(ready, ok) of the bucket's plan on this rank; starts a background compile on a miss."""
        key = bucket.key
        if key in g.programs:
            self.stats.cache["memory"] += 1
            self.stats.last_source = "memory"
            return 1, 1
        if key in g.failed:
            return 0, 0
        fut = g.pending.get(key)
        if fut is None:
            if self.settings.miss == "wait":
                fut = Future()
                try:
                    fut.set_result(self._load_or_compile(g, bucket))
                except Exception as exc:
                    fut.set_exception(exc)
            else:
                fut = self._compiler.submit(self._load_or_compile, g, bucket)
            g.pending[key] = fut
        if not fut.done():
            return 0, 1
        g.pending.pop(key, None)
        try:
            entry, where = fut.result()
            prog = program_from_json(entry.program_json, f"cache entry {key}")
        except Exception as exc:  # a rank-local failure: every rank will fall back through the agreement
            log.warning("a2acc could not plan bucket %s (%s)", key[:12], exc)
            g.failed.add(key)
            return 0, 0
        self.stats.cache[where] = self.stats.cache.get(where, 0) + 1
        self.stats.last_source = where
        g.programs[key] = prog
        g.entries[key] = entry
        return 1, 1

    # ------------------------------------------------------------------ the call
    def run(
        self,
        output: Any,
        input: Any,
        output_split_sizes: Any,
        input_split_sizes: Any,
        group: Any,
        stock: Any,
        async_op: bool = False,
    ) -> Any:
        """Serve one call: None means "not handled, call the stock collective" (decided on all ranks alike);
        otherwise a ``torch.distributed.Work`` (``async_op``) or True."""
        import torch
        import torch.distributed as dist

        with self._lock:
            self.stats.calls += 1
            world = dist.get_world_size(group)
            rank = dist.get_rank(group)
            g = self._group(group, world)
            if isinstance(g, str):
                self.warn_once(f"group:{world}", g, speak=rank == 0)
                self.stats.fallbacks["unmapped group"] += 1
                return None
            # rank-local eligibility is folded into the collectives below, so every rank decides alike
            eligible = bool(
                input.dim() > 0
                and input.is_contiguous()
                and output.is_contiguous()
                and input.dtype == output.dtype
                and input.device == output.device
            )
            row_elems = int(np.prod(input.shape[1:])) if input.dim() > 1 else 1
            row_bytes = row_elems * input.element_size()
            n_rows_in = int(input.shape[0]) if input.dim() > 0 else 0
            in_splits = list(input_split_sizes) if input_split_sizes else [n_rows_in // world] * world
            # 2. matrix (rows): all-gather the input splits, unless the caller gave it
            rows = self.known_matrix_rows
            self.known_matrix_rows = None
            if rows is None:
                mine = torch.tensor([*in_splits, int(eligible)], dtype=torch.int64)
                gathered = torch.empty(world * (world + 1), dtype=torch.int64)
                _all_gather(gathered, mine, group)
                gm = gathered.view(world, world + 1).numpy()
                if (
                    int(gm[:, world].min()) == 0
                ):  # some rank cannot take the a2acc path: all use the stock call
                    self.stats.fallbacks["ineligible tensors"] += 1
                    return None
                rows = gm[:, :world].copy()
            t0 = time.perf_counter()
            ready, ok, key = 0, 1, ""
            bucket = None
            try:
                if not eligible:
                    raise RuntimeHookError("non-contiguous tensors, mismatched dtypes or devices")
                if sum(in_splits) != n_rows_in or list(rows[rank]) != [int(x) for x in in_splits]:
                    raise RuntimeHookError(
                        "input split sizes do not match the input tensor or the gathered matrix"
                    )
                if output_split_sizes and [int(x) for x in output_split_sizes] != [
                    int(x) for x in rows[:, rank]
                ]:
                    raise RuntimeHookError("output split sizes disagree with what the peers send")
                bucket = g.index.lookup(rows.astype(np.int64) * row_bytes)
                key = bucket.key
                ready, ok = self._plan_state(g, bucket)
            except Exception as exc:  # any failure here must become a collective fallback
                ok = 0
                self.warn_once(f"plan:{type(exc).__name__}", f"a2acc could not plan this call ({exc})")
            executor = self.reference
            if ok and ready and self.executor is not self.reference:
                why = self.executor.unavailable(g.entries.get(key), group)
                if why is None:
                    executor = self.executor
                else:
                    self.warn_once(
                        "executor",
                        f"A2ACC_EXECUTOR={self.settings.executor} cannot run here ({why})",
                        speak=rank == 0,
                    )
            self.stats.overhead_s.append(time.perf_counter() - t0)
            # 5. agreement on (plan hash + executor, ready, ok)
            h = int(hashlib.sha256(f"{key}/{executor.name}".encode()).hexdigest()[:15], 16)
            mine2 = torch.tensor([h, ready, ok], dtype=torch.int64)
            all2 = torch.empty(3 * world, dtype=torch.int64)
            _all_gather(all2, mine2, group)
            v = all2.view(world, 3)
            if int(v[:, 2].min()) == 0:
                self.stats.fallbacks["plan failed on a rank"] += 1
                return self._log_call("fallback: plan failed on a rank", None)
            if int(v[:, 0].min()) != int(v[:, 0].max()):
                self.stats.fallbacks["ranks disagree"] += 1
                self.warn_once("agree", "ranks disagree on the plan", speak=rank == 0)
                return self._log_call("fallback: ranks disagree", None)
            if int(v[:, 1].min()) == 0:
                self.stats.stock_while_compiling += 1
                return self._log_call(f"miss: bucket {key[:12]} compiling, stock call", None)
            if bucket is None:
                raise InternalError("ranks agreed on a plan this rank has no bucket for")
            prog = g.programs[key]
            finish = self._execute(
                executor, g, prog, key, rows, row_bytes, rank, world, output, input, group, stock
            )
            self.stats.handled += 1
            self.stats.bucket_hits += int(bucket.hit)
            self.stats.payload_bytes += bucket.payload_bytes
            self.stats.padding_bytes += bucket.padding_bytes
            self.stats.residual_bytes += bucket.overflow_bytes
            self._log_call(
                f"plan {key[:12]} ({self.stats.last_source}, {executor.name}): {bucket.payload_bytes} B, "
                f"padding {100 * bucket.padding_fraction:.1f}%, residual {100 * bucket.overflow_fraction:.1f}%",
                None,
            )
            if not async_op:
                finish()
                return True
            return self._async_work(finish, g, output)

    def _log_call(self, what: str, result: Any) -> Any:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("call %d: %s", self.stats.calls, what)
        return result

    def _async_work(self, finish: _Finish, g: _Group, output: Any) -> Any:
        """A real ``torch.distributed.Work`` completed by a background thread when the tail has run."""
        import torch

        create = getattr(torch._C._distributed_c10d, "_create_work_from_future", None)
        if create is None:  # pragma: no cover - older torch: finish now, hand back a completed work
            finish()
            fut0: Any = torch.futures.Future()
            fut0.set_result([output])
            return fut0
        fut: Any = torch.futures.Future()
        g.busy += 1

        def tail() -> None:
            try:
                finish()
                fut.set_result([output])
            except Exception as exc:  # surfaced by Work.wait()
                fut.set_exception(exc)
            finally:
                g.busy -= 1

        self._finisher.submit(tail)
        return create(fut)

    def _buffer(self, g: _Group, device: Any, kind: int, nbytes: int) -> Any:
        """A staging buffer of ``nbytes`` on ``device``, reused across calls (a fresh one while an async call
        still uses the pooled one). Not cleared: unpacking reads only bytes the plan delivered, and packing
        zeroes each peer's padding itself (zeroing whole buffers cost more than the copies, measured)."""
        import torch

        if g.busy:
            return torch.empty(nbytes, dtype=torch.uint8, device=device)
        pool_key = (str(device), kind)
        buf = g.buffers.get(pool_key)
        if buf is None or buf.numel() < nbytes:
            buf = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
            g.buffers[pool_key] = buf
        return buf[:nbytes]

    def _execute(
        self,
        executor: Any,
        g: _Group,
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
    ) -> _Finish:
        """Pack this rank's rows into the layout and start the plan; rows beyond it go as a residual. Returns
        the tail (wait for the last transfers, unpack)."""
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
        bufs = {b: self._buffer(g, dev, b, n) for b, n in sizes.items()}
        staged = bufs[int(Buf.INPUT)]
        packed = {b: nb for _a, b, nb in lay.pack_segments(rows, row_bytes, unit, rank)}
        for a, b, nb in lay.pack_segments(rows, row_bytes, unit, rank):
            staged[b : b + nb].copy_(in_bytes[a : a + nb])
        for d in range(world):  # zero each peer's padding (what the manifest calls zero-padded)
            lo = int(lay.in_off[rank, d]) * unit
            hi = lo + int(lay.counts[rank, d]) * unit
            start = lo + packed.get(lo, 0)
            if start < hi:
                staged[start:hi].zero_()
        pending = executor.run(prog, g.entries.get(key), rank, bufs, group, stock) or []
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
        out_buf = bufs[int(Buf.OUTPUT)]
        segments = lay.unpack_segments(rows, row_bytes, unit, rank)

        def unpack() -> None:
            for a, b, nb in segments:
                out_bytes[b : b + nb].copy_(out_buf[a : a + nb])

        return _Finish(list(pending), unpack, g)


def _platform_dialect() -> str:
    """rccl on a ROCm build of torch (RCCL's MSCCL reads only s/r/cpy/re/nop), else nccl."""
    try:
        import torch

        return "rccl" if getattr(torch.version, "hip", None) else "nccl"
    except ImportError:
        return "nccl"
