"""The JIT engine behind the patched ``all_to_all_single``: matrix -> bucket -> cached plan -> execution.

Per call (all ranks of the call's process group do the same, in the same order):

1. **Capture.** Under CUDA-graph capture or ``torch.compile`` tracing the call goes to the stock collective
   before anything else (no exchange, no allocation), with one warning per job.
2. **Group.** The group maps onto the topology (:mod:`a2acc.runtime.groups`: the world, a regular slice of
   it, or ``A2ACC_TOPOLOGY`` describing the group itself); plans, buckets and buffers are per group.
3. **Exchange** (:mod:`a2acc.runtime.collectives`): one all-gather of every rank's input and output split
   sizes, an eligibility flag, the row size and the plan state (:mod:`a2acc.runtime.plans`), on the CPU when
   the group accepts it, else on the data's device (NCCL/RCCL): the call's one host sync. A matrix the caller
   announced (:meth:`Engine.announce`) whose plan every rank settled at an earlier exchange skips it (the plan
   follows the announcement, the data each rank's own split sizes), and so do calls that repeat the bucket of
   the call one period back (``A2ACC_EXCHANGE=adaptive``, :meth:`Engine._adapt`): they run that call's plan.
4. **Bucket** (:mod:`a2acc.jit.bucket`): a cached layout serving the matrix (in canonical form under the
   topology's symmetries, ``A2ACC_BUCKETS=symmetric``), or a new one; the index evolves from the matrix
   sequence only, so every rank picks the same bucket.
5. **Plan.** A bucket's plan is loaded from the disk cache or compiled (:func:`a2acc.pipeline.compile`) by a
   background thread while the stock collective serves (``A2ACC_MISS=wait``: in the call); it runs once every
   rank has it and the ranks' Programs for it were compared equal (the exchanged plan state says so), so all
   ranks switch at the same call.
6. **Measure** (:mod:`a2acc.runtime.tuning`, ``A2ACC_TUNE=measure``): a bucket's first served calls alternate
   between its plan and its direct plan, each rank timing its part; an exchange carries the medians and every
   rank keeps the same one.
7. **Execute** (:mod:`a2acc.runtime.executors`): pack the caller's rows into the executor's arena on the data's
   device (:mod:`a2acc.runtime.packing`, the layout every manifest describes; the arena is pooled), run the
   plan, send rows beyond the layout (residual) with the stock call, unpack. With ``async_op=True`` the tail
   completes behind a real ``torch.distributed.Work``.

Anything that fails before step 6 makes all ranks take the stock call together, with once-per-job warnings on
the group's first rank; the caller's output is always produced by either the plan or the stock call.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import numpy as np

from a2acc.errors import AnnounceError
from a2acc.ir import program_from_json
from a2acc.ir.quantize import UnitPolicy
from a2acc.jit.bucket import Bucket, BucketIndex, variant
from a2acc.jit.cache import CacheEntry, PlanCache, default_cache_dir
from a2acc.model.topology import Topology, load_topology
from a2acc.options import parse_options
from a2acc.pipeline import Request
from a2acc.pipeline import compile as compile_pipeline
from a2acc.runtime.collectives import accepted_devices, all_gather_ints, metadata_device
from a2acc.runtime.counters import EngineStats
from a2acc.runtime.executors import FALLBACK, Executor, get_executor, info, options_type
from a2acc.runtime.groups import slice_topology
from a2acc.runtime.packing import byte_view, copy_segments, row_bytes_of
from a2acc.runtime.plans import FAILED, OK, Plan, PlanTable, digest56
from a2acc.runtime.plans import FALLBACK as STATUS_FALLBACK
from a2acc.runtime.settings import JitSettings, parse_topology_spec
from a2acc.runtime.tuning import ALTERNATIVE, DIRECT, PLAN, UNDECIDED, WIDTH, Trial, Tuner

log = logging.getLogger("a2acc.runtime")


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


@dataclass
class _Group:
    """What the engine keeps per process group."""

    ranks: tuple[int, ...]  # global ranks, in group order
    topology: Topology
    index: BucketIndex
    table: PlanTable
    tuner: Tuner
    side: Any = None  # the second process group of the p2p executor's overlap option
    arenas: dict[str, list[Any]] = field(default_factory=dict)  # free arenas per device
    disabled: str = ""  # why a2acc stopped serving this group (set on every rank at the same call)
    # the adaptive exchange (Engine._predicted, Engine._adapt): the recent calls' matrices with their bucket and
    # job (newest last), per period p the exchanges in a row whose bucket and frame were those of the call p
    # before, the period in use and the calls left to run without an exchange. Every rank derives them from
    # the exchanged matrices alone, so every rank skips the same calls
    history: deque[_Seen] = field(default_factory=lambda: deque(maxlen=MAX_PERIOD))
    streaks: list[int] = field(default_factory=lambda: [0] * MAX_PERIOD)
    period: int = 0
    skip: int = 0
    every: bool = False  # ranks disagree on A2ACC_EXCHANGE (seen at an exchange): an exchange on every call


@dataclass
class _Call:
    """One call's arguments as the engine sees them (rank-local, before the exchange)."""

    output: Any
    input: Any
    group: Any
    rank: int
    world: int
    in_splits: list[int]
    out_splits: list[int]
    row_bytes: int
    eligible: bool
    stock: Any  # the stock all_to_all_single


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
        self.executor: Executor = get_executor(settings.executor)
        opts: Any = parse_options(options_type(settings.executor), dict(settings.executor_opts))
        if hasattr(self.executor, "configure"):
            self.executor.configure(opts)
        self.fallback: Executor = get_executor(FALLBACK)
        self.overlap = bool(getattr(opts, "overlap", False))
        self.symmetric = settings.buckets == "symmetric" and info(settings.executor).relabels
        # A2ACC_TUNE=measure: for executors that run the Program itself (their plans need no lowered file) and a
        # planner other than the one measured against
        self.tune = (
            settings.tune == "measure"
            and info(settings.executor).backend == "none"
            and settings.algorithm != ALTERNATIVE
        )
        self._groups: dict[tuple[int, ...], _Group | str] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._compiler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="a2acc-compile")
        self._finisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="a2acc-finish")
        # the next call's matrix per group (or group size), see announce
        self._announce: dict[tuple[int, ...] | int, np.ndarray] = {}
        atexit.register(self.summary)

    # ------------------------------------------------------------------ messages
    def warn_once(
        self, what: str, msg: str, speak: bool = True, tail: str = "using the stock all_to_all_single"
    ) -> None:
        """A warning once per job: decided by every rank alike, printed by the group's first rank only."""
        if what not in self._warned:
            self._warned.add(what)
            if speak:
                log.warning("%s -- %s", msg, tail)

    def summary(self) -> None:
        """At exit, rank 0 logs what the engine did (info level)."""
        from a2acc.runtime.activate import job_rank0

        if job_rank0() and self.stats.calls:
            s = self.stats.as_dict()
            log.info(
                "summary: %d calls, %d by a2acc plans (%s; %d bucket hits), %d stock while compiling, "
                "fallbacks %s; padding %.1f%%, residual %.1f%% of payload; hook %.0f us per call (median); "
                "measured buckets kept %s",
                s["calls"],
                s["handled"],
                ", ".join(f"{k} {v}" for k, v in s["by_executor"].items()) or "none",
                s["bucket_hits"],
                s["stock_while_compiling"],
                s["fallbacks"] or "none",
                100 * s["padding_bytes"] / max(s["payload_bytes"], 1),
                100 * s["residual_bytes"] / max(s["payload_bytes"], 1),
                s["overhead_us_median"],
                ", ".join(f"{k} {v}" for k, v in sorted(s["tuned"].items())) or "none",
            )

    def capturing(self, input: Any) -> str | None:
        """Why the call must go to the stock collective untouched: CUDA-graph capture or torch.compile
        tracing (no exchange, no allocation, no host sync may happen then). Warned once per job."""
        import torch

        why = None
        compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
        if compiling is not None and compiling():
            why = "torch.compile is tracing this call"
        elif torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            why = "a CUDA graph is being captured"
        if why is not None:
            from a2acc.runtime.activate import job_rank0

            self._announce.clear()  # an announcement for a captured call must not reach a later one
            self.stats.fallback("capture")
            self.warn_once(
                "capture", f"{why}: a2acc does not exchange, allocate or sync inside it", speak=job_rank0()
            )
        return why

    # ------------------------------------------------------------------ groups
    def _group(self, group: Any, world: int, device: Any) -> _Group | str:
        import torch.distributed as dist

        ranks = tuple(range(world)) if group is None else tuple(dist.get_process_group_ranks(group))
        hit = self._groups.get(ranks)
        if hit is not None:
            return hit
        topo: Topology | str
        if world == self.topology.nranks:
            topo = self.topology  # the world, or A2ACC_TOPOLOGY describing this group
        else:
            topo = slice_topology(self.topology, ranks)
        if isinstance(topo, str):
            state: _Group | str = f"group of {world} ranks: {topo}"
        else:
            index = BucketIndex(
                topo,
                variant(self.settings.algorithm, self.planner_options),
                variant(self.settings.backend, self.backend_options),
                symmetric=self.symmetric,
            )
            layouts = getattr(self.executor, "layouts", None)
            for counts, unit in layouts(world) if layouts is not None else ():
                index.pin(counts, unit)  # layouts the executor already holds files for (a2acc compile)
            state = _Group(ranks, topo, index, PlanTable(world), Tuner(self.tune, decided=self.stats.tuned))
            if self.overlap and topo.servers > 1:
                state.side = self._side_group(group, ranks, device)
            if dist.get_rank() == ranks[0]:
                log.info(
                    "group of %d ranks (first %d): topology %s", world, ranks[0], topo.summary().describe()
                )
        self._groups[ranks] = state
        return state

    def _side_group(self, group: Any, ranks: tuple[int, ...], device: Any) -> Any:
        """The second process group of the overlap option (its members create it together, at their first
        call on ``group``), with one collective over all of them right away: NCCL wants the first operation on
        a group that later carries batched send/recv to include every rank. None (no overlap) when it cannot be
        made."""
        import torch.distributed as dist

        try:
            side = dist.new_group(
                ranks=list(ranks), backend=str(dist.get_backend(group)), use_local_synchronization=True
            )
            all_gather_ints([0], side, metadata_device(side, device), len(ranks))
            return side
        except Exception as exc:  # the plans still run, on one group
            self.warn_once("side", f"no second process group for overlap=true ({exc})", tail="one group")
            return None

    # ------------------------------------------------------------------ plans (background thread)
    def _load(self, g: _Group, bucket: Bucket, group: Any, key: str, algorithm: str) -> Plan:
        """The plan of ``bucket`` by ``algorithm`` (the configured planner, or the measured alternative under its
        own ``key``), from the cache or compiled; prepared for the executor that will run it."""
        options = self.planner_options if algorithm == self.settings.algorithm else None
        entry, where = self.cache.get_or_compile(
            key,
            lambda: compile_entry(
                g.topology,
                bucket.layout,
                bucket.unit,
                algorithm,
                self.settings.target,
                key,
                options,
                self.backend_options,
            ),
        )
        prog = program_from_json(entry.program_json, f"cache entry {key}")
        plan = Plan(key, entry, prog, where, content=digest56(entry.program_json))
        why = self.executor.unavailable(entry, group)
        ex = self.executor
        if why is not None:
            plan.status, plan.why, ex = STATUS_FALLBACK, why, self.fallback
        plan.prepared[ex.name] = ex.prepare(plan.prog, entry)
        return plan

    def _submit(self, g: _Group, bucket: Bucket, group: Any, key: str, algorithm: str) -> Future[Plan]:
        if self.settings.miss == "wait":
            fut: Future[Plan] = Future()
            try:
                fut.set_result(self._load(g, bucket, group, key, algorithm))
            except Exception as exc:
                fut.set_exception(exc)
            return fut
        return self._compiler.submit(self._load, g, bucket, group, key, algorithm)

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
        import torch.distributed as dist

        with self._lock:
            self.stats.calls += 1
            cpu0 = time.thread_time()
            world = dist.get_world_size(group)
            rank = dist.get_rank(group)
            g = self._group(group, world, input.device)
            known = self._take_announced(group, world)  # consumed by this call, whatever serves it
            if isinstance(g, str):
                self.warn_once(f"group:{world}", g, speak=rank == 0)
                self.stats.fallback("unmapped group")
                return None
            if g.disabled:
                self.stats.fallback(g.disabled)
                return None
            call = self._call(output, input, output_split_sizes, input_split_sizes, group, rank, world, stock)
            if call is None:
                self.stats.fallback("tensors on a device the group does not accept")
                return None
            t0 = time.perf_counter()
            self._check_announced(known, call)
            pre = None if known is None else self._lookup(g, known, call, group)
            # no exchange: a call one period back predicts this one (Engine._predicted), or an announced matrix
            # whose plan every rank already has (see announce). The plan is that matrix's on every rank; what
            # this rank sends and receives is its own split sizes (the same as its peers' view of them in any
            # valid call), so a stale prediction or announcement costs residual, never data or a hang
            ahead = self._predicted(g, call) if known is None else None
            if (
                ahead is None
                and known is not None
                and pre is not None
                and self._agreed_without_exchange(g, pre[1])
            ):
                ahead = (known, *pre)
            rows: np.ndarray
            status: int | None
            if ahead is not None:
                if known is None:
                    self.stats.predicted += 1
                else:  # the adaptive exchange counts it as a call seen (every rank has the announcement)
                    g.history.append(_seen(*ahead))
                base, bucket, j = ahead
                rows = base.copy()
                rows[call.rank] = call.in_splits
                rows[:, call.rank] = call.out_splits
                g.table.settle()
                status = g.table.agreed(j)
                self.stats.exchanges_skipped += 1
                t1 = t0
            else:
                got = self._exchange(g, call, known)
                if got is None:
                    _forget_calls(g)
                    return None
                rows = got
                t1 = time.perf_counter()
                if pre is None or known is None or not np.array_equal(rows, known):
                    pre = self._lookup(g, rows, call, group)
                bucket, j = pre
                self._adapt(g, rows, bucket, j)
                status = self._status(g, call, j, bucket)
            t2 = time.perf_counter()
            self.stats.overhead_s.append(t2 - t1)
            if status is None:
                return None
            self.stats.phase_s["exchange"] += t1 - t0
            self.stats.phase_s["decide"] += t2 - t1
            jj, trial, which = self._pick(g, j, status)
            mark = g.tuner.begin(call.input.device) if trial is not None else None
            finish = self._execute(g, call, g.table.plans[jj], status, bucket, rows, stock)
            self.stats.add_cpu(time.thread_time() - cpu0)
            if trial is not None:
                finish = _timed(finish, g.tuner, mark, trial, which)
            if not async_op:
                finish()
                return True
            return self._async_work(finish, call.output)

    def _call(
        self, output: Any, input: Any, oss: Any, iss: Any, group: Any, rank: int, world: int, stock: Any
    ) -> _Call | None:
        """Rank-local checks; None when the data's device is one the group does not accept (the stock call
        then raises the caller's own error)."""
        if input.device.type not in accepted_devices(group, input.device):
            return None
        eligible = bool(
            input.dim() > 0
            and input.is_contiguous()
            and output.is_contiguous()
            and input.dtype == output.dtype
            and input.device == output.device
            and output.dim() > 0
            and tuple(input.shape[1:]) == tuple(output.shape[1:])
        )
        n_in = int(input.shape[0]) if input.dim() > 0 else 0
        n_out = int(output.shape[0]) if output.dim() > 0 else 0
        ins = [int(x) for x in iss] if iss else [n_in // world] * world
        outs = [int(x) for x in oss] if oss else [n_out // world] * world
        eligible = eligible and len(ins) == len(outs) == world and sum(ins) == n_in and sum(outs) == n_out
        if not eligible:
            ins, outs = [0] * world, [0] * world
        return _Call(output, input, group, rank, world, ins, outs, row_bytes_of(input), eligible, stock)

    def announce(self, rows: Any, group: Any = None) -> None:
        """The matrix (rows per pair, ``world x world``) of the next call on ``group`` (None: the next call of
        a group of that size), the same on every rank of the group; see :func:`a2acc.runtime.announce`."""
        import torch.distributed as dist

        m = np.asarray(rows.cpu() if hasattr(rows, "cpu") else rows)
        if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] == 0:
            raise AnnounceError(f"announce: the matrix must be square (world x world), got shape {m.shape}")
        if not np.issubdtype(m.dtype, np.integer) or int(m.min()) < 0:
            raise AnnounceError("announce: the matrix must hold non-negative integers (rows per pair)")
        n = m.shape[0]
        key: tuple[int, ...] | int = n if group is None else tuple(dist.get_process_group_ranks(group))
        if isinstance(key, tuple) and len(key) != n:
            raise AnnounceError(f"announce: a {n}x{n} matrix for a group of {len(key)} ranks")
        with self._lock:
            self._announce[key] = m.astype(np.int64, copy=True)

    def _take_announced(self, group: Any, world: int) -> np.ndarray | None:
        """The matrix announced for this call (for its group, else for the next call of its size), consumed:
        every call on the group takes it, served or not, so it never outlives the call it was meant for."""
        if not self._announce:
            return None
        import torch.distributed as dist

        ranks = tuple(range(world)) if group is None else tuple(dist.get_process_group_ranks(group))
        m = self._announce.pop(ranks, None)
        return self._announce.pop(world, None) if m is None else m

    def _check_announced(self, m: np.ndarray | None, call: _Call) -> None:
        """Rank-local checks of an announced call. Tensors a2acc cannot serve in place (non-contiguous, input and
        output of different dtypes, devices or row shapes; the stock call refuses most of these too) raise
        :class:`~a2acc.errors.AnnounceError`: the rank cannot take the stock call alone while its peers may run
        the plan. An announcement whose row or column for this rank differs from the call's split sizes is
        said once; the call runs from the split sizes (see :meth:`run`)."""
        if m is None:
            return
        r = call.rank
        if not call.eligible:
            raise AnnounceError(
                f"a2acc.runtime.announce: rank {r}'s call has tensors a2acc cannot serve in place (they must be "
                "contiguous, of one dtype, device and row shape, with split sizes that add up to their first "
                "dimensions); an announced call cannot fall back to the stock call on one rank alone"
            )
        if m[r].tolist() != call.in_splits or m[:, r].tolist() != call.out_splits:
            self.warn_once(
                "announce-splits",
                f"rank {r}: the announced matrix's row/column {r} differ from the call's split sizes (a stale or "
                "wrong announcement); the plan follows the announcement, the data the split sizes",
                tail="rows beyond the plan's layout travel as residual",
            )

    def _pick(self, g: _Group, j: int, status: int) -> tuple[int, Trial | None, int]:
        """The job that serves a call of job ``j`` (agreed status ``status``): ``j``, or its direct plan once
        measured faster; while the two are measured (:mod:`a2acc.runtime.tuning`), either in turn for
        ``SAMPLES`` calls each, with the trial and which of the two it is (0: the planner's, 1: direct), then
        ``j`` until the next exchange decides. Every input is the same on every rank: the agreed plan state and
        the count of calls the bucket served."""
        t = g.tuner.trials.get(j)
        if t is None or t.winner == PLAN:
            return j, None, PLAN
        table = g.table
        if not table.runnable(t.alt):  # still compiling (or not yet compared) somewhere
            return j, None, PLAN
        if t.winner == UNDECIDED and not t.compared:  # once, the first time both can run
            t.compared = True
            a, b = table.plans.get(j), table.plans.get(t.alt)
            if table.agreed(t.alt) != status or a is None or b is None:
                g.tuner.settle(t, PLAN)  # the direct plan failed somewhere, or runs on another executor
            elif a.prog.scratch == b.prog.scratch and a.prog.ops == b.prog.ops:
                g.tuner.settle(t, PLAN)  # the same transfers (one server): nothing to measure
        if t.winner == UNDECIDED and (which := g.tuner.served(t)) is not None:
            return (t.alt if which == DIRECT else j), t, which
        return (t.alt, None, DIRECT) if t.winner == DIRECT else (j, None, PLAN)

    def _agreed_without_exchange(self, g: _Group, j: int) -> bool:
        """Whether job ``j`` runs with no exchange: every rank had settled it at the last exchange, it did not
        fail anywhere, and whichever executor runs it carries rows beyond the layout in its own messages (a
        residual exchanged by a stock collective would need every rank to agree that there is one), and no
        measurement waits for an exchange to decide it (:mod:`a2acc.runtime.tuning`)."""
        if not g.table.runnable(j) or g.tuner.awaiting:  # a measurement to decide: exchange
            return False
        status = g.table.agreed(j)
        ex = self.executor if status == OK else self.fallback
        return status != FAILED and bool(getattr(ex, "carries_residual", False))

    def _predicted(self, g: _Group, call: _Call) -> tuple[np.ndarray, Bucket, int] | None:
        """With ``A2ACC_EXCHANGE=adaptive``: the matrix, bucket and job of the call one period back, when this
        call is one of those :meth:`_adapt` left to run without an exchange and that job runs without one
        (settled on every rank at an exchange, an executor that carries residual). Decided from what every rank
        learned at the exchanges, so every rank decides alike; a call it declines is exchanged on every rank.
        A call it takes whose tensors a2acc cannot serve in place raises before any state changes."""
        if self.settings.exchange != "adaptive" or g.every or g.skip <= 0 or not g.period:
            return None
        if len(g.history) < g.period:
            return None
        got = g.history[-g.period]
        if not self._agreed_without_exchange(g, got.job):
            g.skip -= 1
            return None
        self._check_unexchanged(call)
        g.skip -= 1
        g.history.append(got)  # the period goes on through the calls it predicts
        return got.rows, got.bucket, got.job

    def _adapt(self, g: _Group, rows: np.ndarray, bucket: Bucket, j: int) -> None:
        """After an exchange: per period p (1 to :data:`MAX_PERIOD` calls), whether its matrix found the bucket and
        frame of the call p before. The period with the longest run of confirmations by the latest exchanges is
        used (the shortest of equals): after 1, 2, 3... confirmations in a row the next 1, 2, 4, then at most
        :data:`MAX_SKIP` calls run without an exchange, each with the plan of the call one period back. A
        stationary skew is period 1; an MoE layer's dispatch and combine alternate (period 2), L layers forward
        and backward repeat every 4L calls. A matrix that left its bucket or frame exchanges every call again,
        and a change while calls are skipped costs at most ``MAX_SKIP`` calls of residual."""
        seen = _seen(rows, bucket, j)
        hist = g.history
        for p in range(1, MAX_PERIOD + 1):
            same = p <= len(hist) and hist[-p].key == seen.key
            g.streaks[p - 1] = min(g.streaks[p - 1] + 1, _STREAK_CAP) if same else 0
        hist.append(seen)
        # the longest streak, the shortest period among equals (a stationary skew repeats at every period)
        run, neg = max((g.streaks[p - 1], -p) for p in range(1, MAX_PERIOD + 1))
        g.period = -neg if run else 0
        g.skip = min(1 << (run - 1), MAX_SKIP) if run else 0

    def _check_unexchanged(self, call: _Call) -> None:
        """A call run without an exchange on every rank cannot take the stock call on one rank alone: tensors
        a2acc cannot serve in place (which the stock call refuses too) raise :class:`AnnounceError` (the
        ``ValueError`` an announced call raises for the same reason), naming the setting."""
        if not call.eligible:
            raise AnnounceError(
                f"a2acc: rank {call.rank}'s call has tensors a2acc cannot serve in place (they must be "
                "contiguous, of one dtype, device and row shape, with split sizes that add up to their first "
                "dimensions) while every rank runs the plan of the call one period back without an exchange "
                "(A2ACC_EXCHANGE=adaptive); A2ACC_EXCHANGE=every exchanges on every call"
            )

    def _lookup(self, g: _Group, rows: np.ndarray, call: _Call, group: Any) -> tuple[Bucket, int]:
        """The matrix's bucket and its job number (submitting its plan the first time, and with
        ``A2ACC_TUNE=measure`` the direct plan it is measured against as the next job)."""
        bucket = g.index.lookup(rows * call.row_bytes)
        algorithm = self.settings.algorithm
        j = g.table.job(bucket.key, lambda: self._submit(g, bucket, group, bucket.key, algorithm))
        if g.tuner.on and j not in g.tuner.trials:
            key = g.index.key_for(bucket, ALTERNATIVE)
            alt = g.table.job(key, lambda: self._submit(g, bucket, group, key, ALTERNATIVE))
            g.tuner.trials[j] = Trial(alt)
        return bucket, j

    def _exchange(self, g: _Group, call: _Call, known: np.ndarray | None) -> np.ndarray | None:
        """The call's one exchange: the rows matrix (the plan table learns what every rank has settled and
        holds), when every rank can take the a2acc path, else None (the same answer on every rank)."""
        n = call.world
        dev = metadata_device(call.group, call.input.device)
        adaptive = int(self.settings.exchange == "adaptive")
        mine = [
            *call.in_splits,
            *call.out_splits,
            int(call.eligible),
            call.row_bytes,
            adaptive,
            *g.table.report(),
            *g.tuner.report(),
        ]
        gm = all_gather_ints(mine, call.group, dev, n, call.stock)
        self.stats.host_syncs += int(dev.type != "cpu")
        rows, outs = gm[:, :n], gm[:, n : 2 * n]
        eligible, row_bytes, modes, prefix, nexc, digest = (gm[:, 2 * n + k] for k in range(6))
        contents, tuned = gm[:, 2 * n + 6 : -WIDTH], gm[:, -WIDTH:]
        if int(modes.min()) != int(modes.max()) and not g.every:
            # ranks set A2ACC_EXCHANGE differently: a rank that skips an exchange its peers make hangs them, so
            # the group exchanges on every call from here, on every rank (this report is the same everywhere)
            g.every = True
            _forget_calls(g)
            self.warn_once(
                "exchange-modes",
                "ranks set A2ACC_EXCHANGE differently; exchanging on every call",
                speak=call.rank == 0,
                tail="as A2ACC_EXCHANGE=every does",
            )
        if int(eligible.min()) == 0:
            self.stats.fallback("ineligible tensors")
            return None
        if not (rows == outs.T).all() or int(row_bytes.min()) != int(row_bytes.max()):
            self.stats.fallback("split sizes disagree")
            self.warn_once(
                "splits", "output split sizes or row sizes disagree across ranks", speak=call.rank == 0
            )
            return None
        if not g.tuner.decide(tuned):
            # ranks set A2ACC_TUNE differently: seen before the digest, as their job lists differ as a result
            # (only the measuring ranks add direct plans); a2acc stops for the group on every rank at this call
            g.disabled = "ranks set A2ACC_TUNE differently"
            self.stats.fallback(g.disabled)
            self.warn_once("tune", g.disabled, speak=call.rank == 0)
            return None
        if int(digest.min()) != int(digest.max()):
            g.disabled = "ranks disagree"  # histories diverged (e.g. a restarted process): stop for good
            self.stats.fallback(g.disabled)
            self.warn_once("agree", "ranks disagree on the plan history of a group", speak=call.rank == 0)
            return None
        width = g.table.pending_width(nexc)
        if width:  # a rank reported new exceptions: one more small exchange says which jobs
            extra = all_gather_ints(g.table.my_exceptions(call.rank, width), call.group, dev, n, call.stock)
            self.stats.host_syncs += int(dev.type != "cpu")
            g.table.merge(extra, nexc)
        if not g.table.agree(contents, int(prefix.min())):
            self._plans_differ(g, call)
            return None
        if known is not None and not np.array_equal(known, rows):
            self.warn_once("announce", "ranks announced different matrices; using the exchanged split sizes")
        return np.asarray(rows, dtype=np.int64)

    def _plans_differ(self, g: _Group, call: _Call) -> None:
        """Ranks hold different Programs for one bucket (another a2acc, numpy or CPU somewhere): a2acc stops for
        the group, on every rank at this call (the comparison's inputs are the same everywhere)."""
        g.disabled = "ranks hold different plans"
        self.stats.fallback(g.disabled)
        self.warn_once(
            "content",
            "ranks hold different Programs for the same bucket (different a2acc or numpy versions, or "
            "CPUs whose floating point differs)",
            speak=call.rank == 0,
        )

    def _status(self, g: _Group, call: _Call, j: int, bucket: Bucket) -> int | None:
        """The agreed status of job ``j`` (OK or FALLBACK), or None when the stock call serves (the plan is
        still compiling somewhere, not yet compared, or failed)."""
        if g.table.runnable(j):
            status = g.table.agreed(j)
        elif self.settings.miss == "wait":
            # compiled in this call on every rank: agree on its outcome and its content
            g.table.settle(block_until=j)
            dev = metadata_device(call.group, call.input.device)
            mine = [g.table.status[j], g.table.content.get(j, -1)]
            got = all_gather_ints(mine, call.group, dev, call.world, call.stock)
            self.stats.host_syncs += int(dev.type != "cpu")
            status = int(got[:, 0].max())
            held = got[got[:, 0] != FAILED, 1]
            if status != FAILED and int(held.min()) != int(held.max()):
                self._plans_differ(g, call)
                return None
            g.table.checked[j] = status
        else:
            g.table.settle()
            self.stats.stock_while_compiling += 1
            self.stats.last = {"served": False, "why": "compiling"}
            return None
        g.table.settle()
        if status == FAILED:
            self.stats.fallback("plan failed on a rank")
            err = g.table.errors.get(j, "on another rank")
            self.warn_once(
                f"failed:{j}", f"a2acc could not plan bucket {bucket.key[:12]} ({err})", speak=call.rank == 0
            )
            return None
        return status

    # ------------------------------------------------------------------ execution
    def _execute(
        self, g: _Group, call: _Call, plan: Plan, status: int, bucket: Bucket, rows: np.ndarray, stock: Any
    ) -> Any:
        """Pack, start the plan, exchange the residual; returns the tail (finish the plan, unpack)."""
        ex, prepared = self._executor_for(plan, status, call.rank)
        lay, unit = plan.prog.layout, plan.prog.unit_bytes
        ranks = bucket.ranks
        c = call.rank if ranks is None else int(np.flatnonzero(ranks == call.rank)[0])
        peers = [g.ranks[int(r)] for r in (ranks if ranks is not None else range(call.world))]
        reg = ex.regions(prepared, c)
        dev = call.input.device
        arena = self._arena(g, dev, reg.total)
        rb = call.row_bytes
        t0 = time.perf_counter()
        io = ex.io(prepared, c) if hasattr(ex, "io") else None
        direct = _Direct.of(call, rows, io, ranks)
        copy_segments(
            arena[reg.input[0] : reg.input[1]],
            byte_view(call.input),
            lay.pack_segments(rows, rb, unit, call.rank, ranks, direct.pack),
        )
        t1 = time.perf_counter()
        waited = float(getattr(ex, "wait_s", 0.0))
        groups = (call.group, g.side or call.group)
        fit = _fitting(lay.counts, rows, rb, unit, ranks)
        extra: list[tuple[bool, Any, int]] = []
        if getattr(ex, "carries_residual", False):  # decided from this rank's own row and column only
            r = call.rank
            mine = bool((rows[r] > fit[r]).any() or (rows[:, r] > fit[:, r]).any())
            extra = _residual_messages(call, rows, fit, g.ranks, direct) if mine else []
            tail = ex.start(prepared, c, arena, peers, groups, stock, extra, direct.views)
        else:
            tail = ex.start(prepared, c, arena, peers, groups, stock)
            if bool((rows > fit).any()):  # every rank has the exchanged matrix: the same answer everywhere
                _residual(call, rows, fit, stock)
        segs = lay.unpack_segments(rows, rb, unit, call.rank, ranks, direct.unpack)
        self._count(ex, prepared, c, plan, bucket, extra, direct.sent)
        t2 = time.perf_counter()
        phases = self.stats.phase_s
        phases["pack"] += t1 - t0
        phases["start"] += t2 - t1

        def finish() -> None:
            t3, cpu3 = time.perf_counter(), time.thread_time()
            try:
                tail()
                copy_segments(byte_view(call.output), arena[reg.output[0] : reg.output[1]], segs)
            finally:
                g.arenas.setdefault(str(dev), []).append(arena)
                phases["tail"] += time.perf_counter() - t3
                phases["wait"] += float(getattr(ex, "wait_s", 0.0)) - waited
                self.stats.add_cpu(time.thread_time() - cpu3)

        return finish

    def _executor_for(self, plan: Plan, status: int, rank: int) -> tuple[Executor, Any]:
        """The executor every rank runs this plan with (the fallback when the chosen one cannot run it on some
        rank: said once, naming the fallback) and its prepared state."""
        ex = self.executor if status == OK else self.fallback
        if status != OK:
            self.warn_once(
                "executor",
                f"A2ACC_EXECUTOR={self.settings.executor} cannot run here ({plan.why or 'on another rank'})",
                speak=rank == 0,
                tail=f"running a2acc's plans with the {ex.name} executor instead",
            )
        prepared = plan.prepared.get(ex.name)
        if prepared is None:
            prepared = plan.prepared[ex.name] = ex.prepare(plan.prog, plan.entry)
        return ex, prepared

    def _count(
        self,
        ex: Executor,
        prepared: Any,
        c: int,
        plan: Plan,
        bucket: Bucket,
        extra: list[tuple[bool, Any, int]],
        direct_sent: int,
    ) -> None:
        s = self.stats
        s.handled += 1
        s.by_executor[ex.name] += 1
        s.by_algorithm[str(plan.entry.meta.get("algorithm", ""))] += 1
        s.bucket_hits += int(bucket.hit)
        where = plan.source if plan.used == 0 else "memory"  # first use: where the plan came from
        s.cache[where] = s.cache.get(where, 0) + 1
        plan.used += 1
        s.payload_bytes += bucket.payload_bytes
        s.padding_bytes += bucket.padding_bytes
        s.residual_bytes += bucket.overflow_bytes
        counters = dict(ex.counters(prepared, c)) if hasattr(ex, "counters") else {}
        if direct_sent:
            counters["sent_bytes"] = counters.get("sent_bytes", 0) + direct_sent
        if extra:  # the residual's messages: one more stage of at most one message per peer and direction
            counters["sends"] = counters.get("sends", 0) + sum(1 for e in extra if e[0])
            counters["recvs"] = counters.get("recvs", 0) + sum(1 for e in extra if not e[0])
            counters["steps"] = counters.get("steps", 0) + 1
            counters["sent_bytes"] = counters.get("sent_bytes", 0) + sum(
                int(t.numel()) for snd, t, _p in extra if snd
            )
        s.sent_bytes += int(counters.get("sent_bytes", 0))
        s.p2p_sends += int(counters.get("sends", 0))
        s.p2p_recvs += int(counters.get("recvs", 0))
        s.p2p_steps += int(counters.get("steps", 0))
        s.last = {
            "served": True,
            "executor": ex.name,
            "algorithm": plan.entry.meta.get("algorithm", ""),
            "key": plan.key,
            "source": where,
            "hit": bucket.hit,
            **counters,
        }
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "call %d: plan %s (%s, %s): %d B, padding %.1f%%, residual %.1f%%",
                s.calls,
                plan.key[:12],
                plan.source,
                ex.name,
                bucket.payload_bytes,
                100 * bucket.padding_fraction,
                100 * bucket.overflow_fraction,
            )

    def _arena(self, g: _Group, device: Any, nbytes: int) -> Any:
        """A uint8 buffer of at least ``nbytes`` on ``device`` from the group's pool (returned by the call's
        tail). Not cleared: the unpack reads only bytes the plan delivered."""
        import torch

        free = g.arenas.setdefault(str(device), [])
        for i, a in enumerate(free):
            if int(a.numel()) >= nbytes:
                return free.pop(i)
        if free:
            free.pop(0)  # too small for this plan: replaced by a larger one
        return torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)

    def _async_work(self, finish: Any, output: Any) -> Any:
        """A real ``torch.distributed.Work`` completed by a background thread when the tail has run."""
        import torch

        create = getattr(torch._C._distributed_c10d, "_create_work_from_future", None)
        if create is None:  # pragma: no cover - older torch: finish now, hand back a completed future
            finish()
            fut0: Any = torch.futures.Future()
            fut0.set_result([output])
            return fut0
        fut: Any = torch.futures.Future()

        def tail() -> None:
            try:
                finish()
                fut.set_result([output])
            except Exception as exc:  # surfaced by Work.wait()
                fut.set_exception(exc)

        self._finisher.submit(tail)
        return create(fut)


#: the most calls in a row ``A2ACC_EXCHANGE=adaptive`` runs without an exchange
MAX_SKIP = 8


#: the longest repeating sequence of calls ``A2ACC_EXCHANGE=adaptive`` looks for (16 MoE layers' dispatch and
#: combine, forward and backward)
MAX_PERIOD = 64
#: confirmations counted per period at most (past 4 the skip is at its cap anyway)
_STREAK_CAP = 16


@dataclass(frozen=True, eq=False)
class _Seen:
    """A call as the adaptive exchange remembers it: its matrix (rows per pair), bucket and job, and the key two
    calls are the same by (job and relabelling)."""

    rows: np.ndarray
    bucket: Bucket
    job: int
    key: tuple[object, ...]


def _seen(rows: np.ndarray, bucket: Bucket, j: int) -> _Seen:
    return _Seen(rows, bucket, j, (j, None if bucket.ranks is None else tuple(int(x) for x in bucket.ranks)))


def _timed(finish: Any, tuner: Tuner, mark: Any, trial: Trial, which: int) -> Any:
    """``finish`` that gives the measured trial this rank's time of the call when it is done."""

    def run() -> None:
        finish()
        tuner.end(mark, trial, which)

    return run


def _forget_calls(g: _Group) -> None:
    """The adaptive exchange starts over: at a call whose exchange sent every rank to the stock path (ineligible
    tensors, split sizes that disagree, ranks that disagree on their plans), or when ranks disagree on
    ``A2ACC_EXCHANGE``. A plan still compiling or failed does not reset it (its call is still exchanged)."""
    g.history.clear()
    g.streaks = [0] * MAX_PERIOD
    g.period = g.skip = 0


def _fitting(counts: np.ndarray, rows: np.ndarray, row_bytes: int, unit: int, ranks: Any) -> np.ndarray:
    from a2acc.ir.layout import fitting_rows

    return fitting_rows(counts, rows, row_bytes, unit, ranks)


@dataclass
class _Direct:
    """What the ``p2p`` executor's direct messages carry this call (see ``stages.direct_ops``): the caller's
    bytes per direct message (keyed ``(send?, program peer)``; None when there are no rows), the group ranks
    whose rows travel that way (their residual with them), and the peers left to pack and unpack (None: all,
    for executors without direct messages)."""

    views: dict[tuple[bool, int], Any] = field(default_factory=dict)
    sends: set[int] = field(default_factory=set)
    recvs: set[int] = field(default_factory=set)
    pack: list[int] | None = None
    unpack: list[int] | None = None
    sent: int = 0

    @staticmethod
    def of(call: _Call, rows: np.ndarray, io: Any, ranks: Any) -> _Direct:
        d = _Direct()
        if io is None:
            return d
        r, rb = call.rank, call.row_bytes
        real = ranks.tolist() if ranks is not None else range(call.world)
        src, dst = byte_view(call.input), byte_view(call.output)
        # this rank's row and column as Python ints (a few peers: list arithmetic beats numpy scalars here)
        row, col = rows[r].tolist(), rows[:, r].tolist()
        in_off, out_off = list(accumulate(row, initial=0)), list(accumulate(col, initial=0))
        for m in io.messages:
            if not m.direct:
                continue
            p = real[m.peer]
            k = row[p] if m.send else col[p]
            lo = (in_off[p] if m.send else out_off[p]) * rb
            d.views[(m.send, m.peer)] = (src if m.send else dst)[lo : lo + k * rb] if k else None
            (d.sends if m.send else d.recvs).add(p)
            d.sent += k * rb if m.send else 0
        if io.self_direct:  # this rank's own rows: one copy, input to output, residual included
            k = row[r] * rb
            if k:
                dst[out_off[r] * rb : out_off[r] * rb + k].copy_(src[in_off[r] * rb : in_off[r] * rb + k])
            d.sends.add(r)
            d.recvs.add(r)
        d.pack = [real[q] for q in io.packed]
        d.unpack = [real[q] for q in io.unpacked]
        return d


def _residual_messages(
    call: _Call, rows: np.ndarray, fit: np.ndarray, ranks: tuple[int, ...], direct: _Direct
) -> list[tuple[bool, Any, int]]:
    """Rows beyond the layout as point-to-point messages, straight from the caller's input into the peer's
    output: ``(send?, uint8 view, global peer)``; a rank's residual for one peer is one contiguous run. Pairs
    whose rows travel in a direct message carry their residual there."""
    r, n = call.rank, call.world
    rb = call.row_bytes
    src, dst = byte_view(call.input), byte_view(call.output)
    in_off = np.cumsum(rows[r]) - rows[r]
    out_off = np.cumsum(rows[:, r]) - rows[:, r]
    out: list[tuple[bool, Any, int]] = []
    for p in range(n):  # sends then receives, peers ascending: the same order on both sides of every pair
        if p != r and rows[r, p] > fit[r, p] and p not in direct.sends:
            lo = int(in_off[p] + fit[r, p]) * rb
            out.append((True, src[lo : int(in_off[p] + rows[r, p]) * rb], ranks[p]))
    for p in range(n):
        if p != r and rows[p, r] > fit[p, r] and p not in direct.recvs:
            lo = int(out_off[p] + fit[p, r]) * rb
            out.append((False, dst[lo : int(out_off[p] + rows[p, r]) * rb], ranks[p]))
    if rows[r, r] > fit[r, r] and r not in direct.sends:  # to itself: a copy
        a, b = int(in_off[r] + fit[r, r]) * rb, int(out_off[r] + fit[r, r]) * rb
        k = int(rows[r, r] - fit[r, r]) * rb
        dst[b : b + k].copy_(src[a : a + k])
    return out


def _residual(call: _Call, rows: np.ndarray, fit: np.ndarray, stock: Any) -> None:
    """Rows beyond the layout: one stock exchange with split sizes (every rank knows both matrices)."""
    import torch

    r, n = call.rank, call.world
    inp, out = call.input, call.output
    in_off = np.cumsum(rows[r]) - rows[r]
    out_off = np.cumsum(rows[:, r]) - rows[:, r]
    send_rows = (rows[r] - fit[r]).tolist()
    recv_rows = (rows[:, r] - fit[:, r]).tolist()
    parts = [inp[int(in_off[d] + fit[r, d]) : int(in_off[d] + rows[r, d])] for d in range(n)]
    send = torch.cat(parts).contiguous()
    recv = torch.empty((sum(recv_rows), *inp.shape[1:]), dtype=inp.dtype, device=inp.device)
    stock(recv, send, recv_rows, send_rows, group=call.group)
    at = 0
    for s in range(n):
        k = recv_rows[s]
        if k:
            lo = int(out_off[s] + fit[s, r])
            out[lo : lo + k].copy_(recv[at : at + k])
            at += k


def _platform_dialect() -> str:
    """rccl on a ROCm build of torch (RCCL's MSCCL reads only s/r/cpy/re/nop), else nccl."""
    try:
        import torch

        return "rccl" if getattr(torch.version, "hip", None) else "nccl"
    except ImportError:
        return "nccl"
