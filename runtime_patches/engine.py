"""The JIT engine behind the patched ``all_to_all_single``: a fast path that replays, a slow path that decides.

**Fast path** (most calls of a steady job). A call whose plan every rank already holds, bound for this group,
position, row size and device, runs with no decision work beyond a few comparisons: the adaptive exchange
predicts it from the call one period back (:mod:`a2acc.runtime.decide.prediction`), or the caller announced
its matrix (:func:`a2acc.runtime.announce`), and the bound launch (:mod:`a2acc.runtime.launch`) replays: the
caller's rows packed on its device, a few exchanges posted, the output gathered, the residual sent. No
collective of a2acc's own, no host sync.

**Slow path** (an exchanged call; every rank does the same, in the same order):

1. **Group.** The group maps onto the topology (:mod:`a2acc.runtime.decide.groups`: the world, a regular slice
   of it, or ``A2ACC_TOPOLOGY`` describing the group itself); plans, buckets and buffers are per group.
2. **Exchange** (:mod:`a2acc.runtime.decide.exchange`): one all-gather of every rank's split sizes, an
   eligibility flag, the row size, its exchange mode, the plan state (:mod:`a2acc.runtime.decide.agreement`)
   and its tuning report (:mod:`a2acc.runtime.decide.tuning`): on the CPU when the group accepts it, else on the
   data's device (one host sync).
3. **Bucket** (:mod:`a2acc.jit.bucket`): a cached layout serving the matrix (canonical under the topology's
   symmetries), or a new one; every rank picks the same. An exact repeat of a recent matrix reuses its lookup.
4. **Plan.** A bucket's plan is loaded or compiled in the background (:mod:`a2acc.runtime.decide.compiling`)
   while the stock collective serves; it runs once every rank holds it and the ranks' Programs compared equal.
5. **Measure** (``A2ACC_TUNE=measure``): a new bucket's direct plan is made first (in the missing call, for
   groups of at most :data:`QUICK_WORLD` ranks) and serves from the bucket's next call while the planner's
   plan compiles; then the bucket's first served calls alternate between the two; an exchange carries the
   medians and every rank keeps the same one.
6. **Run** the bound launch, as on the fast path.

Calls below ``A2ACC_MIN_BYTES`` (a per-expert count exchange) take the stock collective before any of this when
every rank can tell (calls without split sizes: every rank's tensors have the same size), else after the
exchange. Anything that fails before the run makes all ranks take the stock call together, with once-per-job
warnings; the caller's output is always produced by either the plan or the stock call.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from a2acc.errors import AnnounceError, CaptureError
from a2acc.ir.quantize import DEFAULT_ALIGN, ladder_unit
from a2acc.jit.bucket import Bucket, BucketIndex, variant
from a2acc.jit.cache import PlanCache, default_cache_dir
from a2acc.model.topology import Topology, load_topology
from a2acc.options import parse_options
from a2acc.runtime.counters import EngineStats
from a2acc.runtime.decide.agreement import FAILED, OK, Plan, PlanTable, digest56
from a2acc.runtime.decide.compiling import Loader, compile_entry
from a2acc.runtime.decide.exchange import Gatherer, accepted_devices, backend_name, metadata_device
from a2acc.runtime.decide.groups import slice_topology
from a2acc.runtime.decide.prediction import Prediction, Seen, seen
from a2acc.runtime.decide.tuning import ALTERNATIVE, DIRECT, PLAN, UNDECIDED, WIDTH, Trial, Tuner
from a2acc.runtime.executors import FALLBACK, Executor, get_executor, info, options_type
from a2acc.runtime.executors.p2p import EXECUTOR as P2P
from a2acc.runtime.launch.bound import Buffers
from a2acc.runtime.launch.call import Call
from a2acc.runtime.launch.capture import POLICIES, CapacityLaunch
from a2acc.runtime.launch.packing import row_bytes_of
from a2acc.runtime.settings import JitSettings, parse_topology_spec

log = logging.getLogger("a2acc.runtime")

#: exact matrices whose bucket lookup is remembered per group (a stationary skew repeats one)
LOOKUPS = 64
#: groups of at most this many ranks make a new bucket's direct plan in the call that misses (one step, no
#: search: 4-6 ms CPU at 64 ranks on this project's 2-core machine, 66-108 ms at 256), so that it serves from
#: the bucket's next call on every rank; larger groups make it first on the compile thread
QUICK_WORLD = 64
_ALL_SAME = np.ones(1 << 16, dtype=bool)  # "every column the same on every rank" (indexed, never written)


@dataclass(eq=False)
class Matrix:
    """An exchanged matrix, remembered: rows per pair, bytes moved, and once looked up its bucket and job."""

    rows: np.ndarray
    nbytes: int
    bucket: Bucket | None = None
    job: int = -1


@dataclass(eq=False)
class GroupState:
    """What the engine keeps per process group: decided once, at its first call."""

    group: Any
    ranks: tuple[int, ...]  # global ranks, in group order
    rank: int  # this process's rank in the group
    world: int
    backend: str
    topology: Topology
    index: BucketIndex
    table: PlanTable
    tuner: Tuner
    pred: Prediction = field(default_factory=Prediction)
    side: Any = None  # the second process group of the p2p executor's overlap option
    disabled: str = ""  # why a2acc stopped serving this group (set on every rank at the same call)
    accepts: dict[Any, bool] = field(default_factory=dict)  # data device -> the group accepts it
    gatherers: dict[Any, Gatherer] = field(default_factory=dict)
    launches: dict[tuple[Any, ...], Any] = field(default_factory=dict)  # bound launches
    captured: CapacityLaunch | None = None  # the plan bound for CUDA-graph capture (a2acc.runtime.capture)
    buffers: dict[Any, Buffers] = field(default_factory=dict)  # per device: what the group's launches share
    # the last LOOKUPS exchanged matrices (their split sizes as reported, the row size): checked once, bucket and
    # job remembered; every rank sees the same matrices, so every rank remembers alike
    matrices: OrderedDict[bytes, Matrix] = field(default_factory=OrderedDict)


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
        self.min_bytes = settings.min_bytes
        import torch

        self._torch = torch
        self._cuda = torch.cuda.is_available()  # fixed for the process: checked once, not per call
        self.adaptive = settings.exchange == "adaptive"
        self.loader = Loader(
            self.cache, self.executor, self.fallback, settings.target, settings.miss == "wait"
        )
        self._groups: dict[Any, GroupState | str] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()
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

        for (
            g
        ) in self._groups.values():  # rows a capacity binding dropped by design are said, never lost silently
            if isinstance(g, GroupState) and g.captured is not None and g.captured.overflow == "drop":
                try:
                    counts = g.captured.check()
                except Exception:  # the device may be gone at exit
                    continue
                if any(counts["dropped"]):
                    log.warning(
                        "rank %d: the capacity binding dropped %d rows (per peer %s)",
                        g.rank,
                        sum(counts["dropped"]),
                        counts["dropped"],
                    )
        if job_rank0() and self.stats.calls:
            s = self.stats.as_dict()
            log.info(
                "summary: %d calls, %d by a2acc plans (%s; %d bucket hits), %d stock while compiling, "
                "%d below A2ACC_MIN_BYTES, fallbacks %s; padding %.1f%%, residual %.1f%% of payload; measured "
                "buckets kept %s",
                s["calls"],
                s["handled"],
                ", ".join(f"{k} {v}" for k, v in s["by_executor"].items()) or "none",
                s["bucket_hits"],
                s["stock_while_compiling"],
                s["small"],
                s["fallbacks"] or "none",
                100 * s["padding_bytes"] / max(s["payload_bytes"], 1),
                100 * s["residual_bytes"] / max(s["payload_bytes"], 1),
                ", ".join(f"{k} {v}" for k, v in sorted(s["tuned"].items())) or "none",
            )

    def capturing(self) -> str | None:
        """Why the call must go to the stock collective untouched: CUDA-graph capture or torch.compile
        tracing (no exchange, no allocation, no host sync may happen then; a plan bound for capture runs through
        :func:`a2acc.runtime.capture`). Warned once per job."""
        why = None
        torch = self._torch
        compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
        if compiling is not None and compiling():
            why = "torch.compile is tracing this call"
        elif self._cuda and torch.cuda.is_current_stream_capturing():
            why = "a CUDA graph is being captured"
        if why is not None:
            from a2acc.runtime.activate import job_rank0

            self._announce.clear()  # an announcement for a captured call must not reach a later one
            self.stats.fallback("capture")
            self.warn_once(
                "capture",
                f"{why}: a2acc does not exchange, allocate or sync inside it (a2acc.runtime.capture binds a plan "
                "at a fixed capacity that a graph can replay)",
                speak=job_rank0(),
            )
        return why

    # ------------------------------------------------------------------ groups
    def _group(self, group: Any, device: Any) -> GroupState | str:
        import torch.distributed as dist

        world = dist.get_world_size(group)
        ranks = tuple(range(world)) if group is None else tuple(dist.get_process_group_ranks(group))
        topo: Topology | str
        if world == self.topology.nranks:
            topo = self.topology  # the world, or A2ACC_TOPOLOGY describing this group
        else:
            topo = slice_topology(self.topology, ranks)
        state: GroupState | str
        if isinstance(topo, str):
            state = f"group of {world} ranks: {topo}"
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
            state = GroupState(
                group,
                ranks,
                dist.get_rank(group),
                world,
                backend_name(group),
                topo,
                index,
                PlanTable(world),
                Tuner(self.tune, decided=self.stats.tuned),
            )
            if self.overlap and topo.servers > 1:
                state.side = self._side_group(state, device)
            if dist.get_rank() == ranks[0]:
                log.info(
                    "group of %d ranks (first %d): topology %s", world, ranks[0], topo.summary().describe()
                )
        self._groups[group] = state
        return state

    def _side_group(self, g: GroupState, device: Any) -> Any:
        """The second process group of the overlap option (its members create it together, at their first
        call on the group), with one collective over all of them right away: NCCL wants the first operation on
        a group that later carries batched send/recv to include every rank. None (no overlap) when it cannot be
        made."""
        import torch.distributed as dist

        try:
            side = dist.new_group(ranks=list(g.ranks), backend=g.backend, use_local_synchronization=True)
            name = backend_name(side)
            Gatherer(side, metadata_device(side, device, name), g.world, _stock(), name).gather([0])
            return side
        except Exception as exc:  # the plans still run, on one group
            self.warn_once("side", f"no second process group for overlap=true ({exc})", tail="one group")
            return None

    def _gatherer(self, g: GroupState, call: Call) -> Gatherer:
        key = call.input.device
        ga = g.gatherers.get(key)
        if ga is None:
            dev = metadata_device(g.group, call.input.device, g.backend)
            ga = g.gatherers[key] = Gatherer(g.group, dev, g.world, call.stock, g.backend)
        return ga

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
        with self._lock:
            self.stats.calls += 1
            g = self._groups.get(group)
            if g is None:
                g = self._group(group, input.device)
            known = self._take_announced(*_members(g, group)) if self._announce else None
            if not isinstance(g, GroupState):
                self.warn_once(f"group:{g}", g, speak=_rank(group) == 0)
                self.stats.fallback("unmapped group")
                return None
            if g.disabled:
                self.stats.fallback(g.disabled)
                return None
            call = self._call(g, output, input, output_split_sizes, input_split_sizes, stock, async_op)
            if call is None:
                self.stats.fallback("tensors on a device the group does not accept")
                return None
            if call.even and known is None and call.nbytes < 2 * self.min_bytes:
                # no split sizes (the same call site on every rank): every rank's tensors have this size, so
                # every rank decides alike, before any exchange
                self.stats.small += 1
                return None
            if known is not None:
                self._check_announced(known, call)
            s = self._ahead(g, call, known)
            if s is not None:
                if s.stock:  # a call one period back that the stock collective served by decision
                    self.stats.small += 1
                    return None
                status = g.table.agreed(s.job)
                self.stats.exchanges_skipped += 1
                return self._serve(g, call, s, status, None)
            return self._slow(g, call, known)

    def _ahead(self, g: GroupState, call: Call, known: np.ndarray | None) -> Seen | None:
        """A call that runs without an exchange: the adaptive exchange predicts it from one period back, or
        its matrix was announced and its plan is one every rank settled at an exchange (see :meth:`run`)."""
        if known is None:
            if not self.adaptive:
                return None
            s = g.pred.due()
            if s is None:
                return None
            if not s.stock:
                if not self._runs_unexchanged(g, s.job, call):
                    g.pred.decline()
                    return None
                self._check_unexchanged(call)
            g.pred.take(s)
            self.stats.predicted += int(not s.stock)  # served calls the prediction ran
            return s
        key = np.hstack([known, known.T]).tobytes() + call.row_bytes.to_bytes(8, "little")
        m = g.matrices.get(key) or _remember(g, key, known, call.row_bytes)
        bucket, j = self._lookup(g, m, call)
        if not self._runs_unexchanged(g, j, call):
            return None
        s = seen(known, bucket, j)
        g.pred.record(s)  # the adaptive exchange counts it as a call seen (every rank has the announcement)
        return s

    def _runs_unexchanged(self, g: GroupState, j: int, call: Call) -> bool:
        """Whether job ``j`` runs with no exchange: every rank had settled it at the last exchange, it did not
        fail anywhere, whichever executor runs it carries rows beyond the layout in its own messages (a residual
        exchanged by a stock collective would need every rank to agree that there is one), and no measurement
        waits for an exchange to decide it (:mod:`a2acc.runtime.decide.tuning`)."""
        if not g.table.runnable(j) or g.tuner.awaiting:
            return False
        status = g.table.agreed(j)
        ex = self.executor if status == OK else self.fallback
        return status != FAILED and bool(getattr(ex, "carries_residual", False))

    def _slow(self, g: GroupState, call: Call, known: np.ndarray | None) -> Any:
        """An exchanged call: exchange, bucket, plan state, measurement; then run."""
        t0 = time.perf_counter()
        m = self._exchange(g, call, known)
        if m is None:
            g.pred.forget()
            return None
        if m.nbytes < self.min_bytes * call.world:
            if self.adaptive and not g.pred.every:
                g.pred.observe(seen(m.rows, None, -1, stock=True))
            self.stats.small += 1
            return None
        bucket, j = self._lookup(g, m, call)
        s = seen(m.rows, bucket, j)
        if self.adaptive and not g.pred.every:  # the prediction is consulted only then
            g.pred.observe(s)
        status = self._status(g, call, j)
        self.stats.overhead_s.append(time.perf_counter() - t0)
        if status is None:
            return None
        return self._serve(g, call, s, status, m.rows)

    def _serve(self, g: GroupState, call: Call, s: Seen, status: int, matrix: np.ndarray | None) -> Any:
        """Run the call with the job that serves ``s``'s (its plan, or its direct plan once measured faster)."""
        jj, trial, which = self._pick(g, s.job, status)
        plan = g.table.plans[jj]
        launch = self._launch(g, call, plan, status, s.bucket)
        mark = g.tuner.begin(call.input.device) if trial is not None else None
        before = self.stats.posted.snapshot()
        done = launch.run(call, matrix)
        if matrix is None and getattr(launch, "residual", False):  # no exchange, and the plan no longer fits
            self.stats.stale += 1
        if trial is not None and mark is not None:
            g.tuner.end(mark, trial, which)
        self._count(plan, status, s.bucket, before)
        return done if call.async_op else True

    def _launch(self, g: GroupState, call: Call, plan: Plan, status: int, bucket: Bucket) -> Any:
        """The plan bound for this call's position, relabelling, row size and device (made once)."""
        ranks = bucket.ranks
        key = (
            plan.key,
            status,
            None if ranks is None else ranks.tobytes(),
            call.row_bytes,
            call.input.device,
        )
        launch = g.launches.get(key)
        if launch is None:
            ex, prepared = self._executor_for(plan, status, call.rank)
            if ranks is None:
                c = call.rank
            else:
                c = int(np.flatnonzero(ranks == call.rank)[0])
            launch = ex.bind(
                plan.prog,
                prepared,
                c,
                None if ranks is None else ranks.tolist(),
                call.row_bytes,
                call.input.device,
                (g.group, g.side or g.group),
                g.ranks,
                g.backend,
                call.stock,
                self.stats.posted,
                buffers=g.buffers.setdefault(call.input.device, Buffers(call.input.device)),
            )
            if len(g.launches) >= 64:  # buffers of plans no longer used go with them
                g.launches.pop(next(iter(g.launches)))
            g.launches[key] = launch
        return launch

    def _call(
        self, g: GroupState, output: Any, input: Any, oss: Any, iss: Any, stock: Any, async_op: bool
    ) -> Call | None:
        """Rank-local checks; None when the data's device is one the group does not accept (the stock call
        then raises the caller's own error)."""
        dev = input.device
        ok = g.accepts.get(dev)
        if ok is None:
            ok = g.accepts[dev] = dev.type in accepted_devices(g.group, dev, g.backend)
        if not ok:
            return None
        world = g.world
        shape, oshape = input.shape, output.shape
        eligible = (
            len(shape) > 0
            and len(oshape) > 0
            and shape[1:] == oshape[1:]
            and input.dtype == output.dtype
            and input.is_contiguous()
            and output.is_contiguous()
            and dev == output.device
        )
        n_in = shape[0] if len(shape) else 0
        n_out = oshape[0] if len(oshape) else 0
        ins = list(map(int, iss)) if iss else [n_in // world] * world
        outs = list(map(int, oss)) if oss else [n_out // world] * world
        eligible = eligible and len(ins) == len(outs) == world and sum(ins) == n_in and sum(outs) == n_out
        if not eligible:
            ins, outs = [0] * world, [0] * world
        rb = (
            input.stride(0) * input.element_size() if eligible else (row_bytes_of(input) if len(shape) else 0)
        )
        return Call(
            output,
            input,
            g.group,
            g.rank,
            world,
            ins,
            outs,
            rb,
            bool(eligible),
            stock,
            not iss and not oss,
            async_op,
        )

    # ------------------------------------------------------------------ capture
    def bind_capacity(self, capacity: Any, like: Any, group: Any, overflow: str) -> CapacityLaunch:
        """Plan and bind ``capacity`` (rows per pair, ``world x world`` or one number for every pair, the same
        on every rank) for rows like ``like`` on its device, for CUDA-graph capture (see
        :func:`a2acc.runtime.capture`). Every rank of the group calls it at the same point, outside any graph: it
        compiles the plan in the call and compares it across the ranks (one exchange)."""
        from math import lcm

        import torch

        if overflow not in POLICIES:
            raise CaptureError(f"capture: overflow={overflow!r}; use one of {', '.join(POLICIES)}")
        if not isinstance(like, torch.Tensor) or like.dim() == 0:
            raise CaptureError(
                "capture: like= must be a tensor whose first dimension is rows (an example input)"
            )
        with self._lock:
            g = self._groups.get(group)
            if g is None:
                g = self._group(group, like.device)
            if not isinstance(g, GroupState):
                raise CaptureError(f"capture: {g}")
            cap = _capacity(capacity, g.world)
            rb = like.stride(0) * like.element_size() if like.is_contiguous() else row_bytes_of(like)
            m = cap * rb
            unit = ladder_unit(m, align=lcm(DEFAULT_ALIGN, rb))
            counts = -(-m // unit)
            algorithm = self.settings.algorithm
            key = g.index.key(counts, unit)
            topo, target, popts, bopts = (
                g.topology,
                self.settings.target,
                self.planner_options,
                self.backend_options,
            )

            def make() -> Any:
                return compile_entry(topo, counts, unit, algorithm, target, key, popts, bopts)

            plan = self.loader.load(key, make, g.group)
            p2p = P2P  # the capture path is a2acc's own launch, whatever executor runs the other calls

            prepared = plan.prepared.get(p2p.name) or p2p.prepare(plan.prog, plan.entry)
            ga = Gatherer(
                g.group, metadata_device(g.group, like.device, g.backend), g.world, _stock(), g.backend
            )
            mine = [plan.content, digest56(cap.tobytes().hex()), rb]
            got = ga.gather(mine)
            if not (got == got[0]).all():
                raise CaptureError(
                    "capture: the ranks of the group bound different capacities, row sizes or plans (every rank "
                    "must pass the same capacity and a tensor of the same row shape and dtype)"
                )
            launch = p2p.bind(
                plan.prog,
                prepared,
                g.rank,
                None,
                rb,
                like.device,
                (g.group, g.side or g.group),
                g.ranks,
                g.backend,
                _stock(),
                self.stats.posted,
                direct=False,
            )
            g.captured = CapacityLaunch(launch, cap, g.rank, overflow)
            return g.captured

    def run_captured(self, output: Any, input: Any, oss: Any, iss: Any, group: Any) -> bool:
        """A call made under CUDA-graph capture: served by the group's capacity binding when there is one (its
        split sizes, fixed for the graph, become device counts once), else left to the stock call."""
        g = self._groups.get(group)
        if not isinstance(g, GroupState) or g.captured is None:
            return False
        w = g.world
        ins = list(iss) if iss else [int(input.shape[0]) // w] * w
        outs = list(oss) if oss else [int(output.shape[0]) // w] * w
        g.captured.with_sizes(output, input, ins, outs)
        self.stats.captured += 1
        return True

    # ------------------------------------------------------------------ announcements
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

    def _take_announced(self, ranks: tuple[int, ...] | None, world: int) -> np.ndarray | None:
        """The matrix announced for this call (for its group's ranks, else for the next call of its size),
        consumed: every call on the group takes it, served or not, so it never outlives the call it was meant
        for."""
        m = self._announce.pop(ranks, None) if ranks is not None else None
        return self._announce.pop(world, None) if m is None else m

    def _check_announced(self, m: np.ndarray, call: Call) -> None:
        """Rank-local checks of an announced call. Tensors a2acc cannot serve in place (non-contiguous, input and
        output of different dtypes, devices or row shapes; the stock call refuses most of these too) raise
        :class:`~a2acc.errors.AnnounceError`: the rank cannot take the stock call alone while its peers may run
        the plan. An announcement whose row or column for this rank differs from the call's split sizes is
        said once; the call runs from the split sizes (see :meth:`run`)."""
        r = call.rank
        if not call.eligible:
            raise AnnounceError(
                f"a2acc.runtime.announce: rank {r}'s call has tensors a2acc cannot serve in place (they must be "
                "contiguous, of one dtype, device and row shape, with split sizes that add up to their first "
                "dimensions); an announced call cannot fall back to the stock call on one rank alone"
            )
        if m.shape[0] != call.world:
            raise AnnounceError(
                f"announce: a {m.shape[0]}x{m.shape[0]} matrix for a group of {call.world} ranks"
            )
        if m[r].tolist() != call.in_splits or m[:, r].tolist() != call.out_splits:
            self.warn_once(
                "announce-splits",
                f"rank {r}: the announced matrix's row/column {r} differ from the call's split sizes (a stale or "
                "wrong announcement); the plan follows the announcement, the data the split sizes",
                tail="rows beyond the plan's layout travel as residual",
            )

    def _check_unexchanged(self, call: Call) -> None:
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

    # ------------------------------------------------------------------ decisions
    def _pick(self, g: GroupState, j: int, status: int) -> tuple[int, Trial | None, int]:
        """The job that serves a call of job ``j`` (agreed status ``status``): ``j``, or its direct plan once
        measured faster; while the two are measured (:mod:`a2acc.runtime.decide.tuning`), either in turn for
        ``SAMPLES`` calls each, with the trial and which of the two it is (0: the planner's, 1: direct), then
        ``j`` until the next exchange decides. Every input is the same on every rank: the agreed plan state and
        the count of calls the bucket served."""
        t = g.tuner.trials.get(j)
        if t is None or t.winner == PLAN:
            return j, None, PLAN
        table = g.table
        if not table.runnable(j):  # the planner's plan still compiling somewhere: its direct plan serves
            return t.alt, None, DIRECT
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

    def _lookup(self, g: GroupState, m: Matrix, call: Call) -> tuple[Bucket, int]:
        """The matrix's bucket and its job number (submitting its plan the first time, and with
        ``A2ACC_TUNE=measure`` the direct plan it is measured against as the next job). A remembered matrix (an
        exact repeat of one of the last :data:`LOOKUPS` exchanged or announced) reuses its answer."""
        if m.bucket is not None:
            self.stats.bucket_hits += 1
            return m.bucket, m.job
        rows = m.rows
        # chunks hold whole rows (a row is one index entry when packing; see a2acc.runtime.launch.slots)
        bucket = g.index.lookup(rows * call.row_bytes, align=call.row_bytes)
        self.stats.bucket_hits += int(bucket.hit)
        algorithm = self.settings.algorithm
        j = g.table.number.get(bucket.key, -1)
        trial = g.tuner.on and j not in g.tuner.trials  # a new bucket, measured against its direct plan
        if trial:
            # its direct plan first (it compiles in milliseconds, and jobs settle in order), so that it serves
            # while the planner's plan compiles (see _quick)
            key = g.index.key_for(bucket, ALTERNATIVE)
            now = g.world <= QUICK_WORLD
            alt = g.table.job(key, lambda: self._submit(g, bucket, key, ALTERNATIVE, now=now))
        j = g.table.job(bucket.key, lambda: self._submit(g, bucket, bucket.key, algorithm))
        if trial:
            g.tuner.trials[j] = Trial(alt)
        m.bucket, m.job = bucket, j
        return bucket, j

    def _submit(self, g: GroupState, bucket: Bucket, key: str, algorithm: str, *, now: bool = False) -> Any:
        options = self.planner_options if algorithm == self.settings.algorithm else None
        topo, layout, unit = g.topology, bucket.layout, bucket.unit
        target, bopts = self.settings.target, self.backend_options

        def make() -> Any:
            return compile_entry(topo, layout, unit, algorithm, target, key, options, bopts)

        return self.loader.submit(key, make, g.group, now=now)

    def _exchange(self, g: GroupState, call: Call, known: np.ndarray | None) -> Matrix | None:
        """The call's one exchange: the rows matrix (the plan table learns what every rank has settled and
        holds), when every rank can take the a2acc path, else None (the same answer on every rank)."""
        n = call.world
        mine = [
            *call.in_splits,
            *call.out_splits,
            int(call.eligible),
            call.row_bytes,
            int(self.adaptive),
            *g.table.report(),
            *g.tuner.report(),
        ]
        ga = self._gatherer(g, call)
        gm = ga.gather(mine)
        self.stats.host_syncs += int(not ga.host)
        k = 2 * n
        # per column: every rank reported the same. Usually every rank reports the same state: one comparison
        # of bytes says so (and the first rank's numbers are everyone's); otherwise one numpy pass
        tail = gm[:, k:].tobytes()
        uniform = tail == tail[: len(tail) // n] * n
        if uniform:
            first = gm[0, k : k + 5].tolist()
            same, eligible, prefix, nexc = _ALL_SAME, bool(first[0]), first[3], first[4]
        else:
            same = np.concatenate([np.ones(k, bool), (gm[:, k:] == gm[0, k:]).all(axis=0)])
            eligible, prefix, nexc = bool(gm[:, k].all()), int(gm[:, k + 3].min()), gm[:, k + 4]
        if not same[k + 2] and not g.pred.every:
            # ranks set A2ACC_EXCHANGE differently: a rank that skips an exchange its peers make hangs them, so
            # the group exchanges on every call from here, on every rank (this report is the same everywhere)
            g.pred.every = True
            g.pred.forget()
            self.warn_once(
                "exchange-modes",
                "ranks set A2ACC_EXCHANGE differently; exchanging on every call",
                speak=call.rank == 0,
                tail="as A2ACC_EXCHANGE=every does",
            )
        if not eligible:
            self.stats.fallback("ineligible tensors")
            return None
        key = gm[:, :k].tobytes() + call.row_bytes.to_bytes(8, "little")
        m = g.matrices.get(key) if same[k + 1] else None
        if m is not None:  # seen and checked before: the same sizes in and out, the same row size
            g.matrices.move_to_end(key)
        elif not same[k + 1] or not (gm[:, :n] == gm[:, n:k].T).all():
            self.stats.fallback("split sizes disagree")
            self.warn_once(
                "splits", "output split sizes or row sizes disagree across ranks", speak=call.rank == 0
            )
            return None
        contents, tuned = gm[:, k + 6 : -WIDTH], gm[:, -WIDTH:]
        if not g.tuner.decide(tuned, uniform):
            # ranks set A2ACC_TUNE differently: seen before the digest, as their job lists differ as a result
            # (only the measuring ranks add direct plans); a2acc stops for the group on every rank at this call
            g.disabled = "ranks set A2ACC_TUNE differently"
            self.stats.fallback(g.disabled)
            self.warn_once("tune", g.disabled, speak=call.rank == 0)
            return None
        if not same[k + 5]:
            g.disabled = "ranks disagree"  # histories diverged (e.g. a restarted process): stop for good
            self.stats.fallback(g.disabled)
            self.warn_once("agree", "ranks disagree on the plan history of a group", speak=call.rank == 0)
            return None
        width = g.table.pending_width(nexc)
        if width:  # a rank reported new exceptions: one more small exchange says which jobs
            counts = gm[:, k + 4]
            extra = ga.gather(g.table.my_exceptions(call.rank, width))
            self.stats.host_syncs += int(not ga.host)
            g.table.merge(extra, counts)
        if not g.table.agree(contents, prefix, uniform):
            self._plans_differ(g, call)
            return None
        if m is None:
            m = _remember(g, key, np.array(gm[:, :n], dtype=np.int64), call.row_bytes)
        if known is not None and not np.array_equal(known, m.rows):
            self.warn_once("announce", "ranks announced different matrices; using the exchanged split sizes")
        return m

    def _plans_differ(self, g: GroupState, call: Call) -> None:
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

    def _status(self, g: GroupState, call: Call, j: int) -> int | None:
        """The agreed status of job ``j`` (OK or FALLBACK), or None when the stock call serves (the plan is
        still compiling somewhere, not yet compared, or failed)."""
        if g.table.runnable(j):
            status = g.table.agreed(j)
        elif self.settings.miss == "wait":
            # compiled in this call on every rank: agree on its outcome and its content
            g.table.settle(block_until=j)
            ga = self._gatherer(g, call)
            got = ga.gather([g.table.status[j], g.table.content.get(j, -1)])
            self.stats.host_syncs += int(not ga.host)
            status = int(got[:, 0].max())
            held = got[got[:, 0] != FAILED, 1]
            if status != FAILED and int(held.min()) != int(held.max()):
                self._plans_differ(g, call)
                return None
            g.table.checked[j] = status
        else:
            g.table.settle()
            quick = self._quick(g, j)
            if quick is not None:
                return quick
            self.stats.stock_while_compiling += 1
            self.stats.last = {"served": False, "why": "compiling"}
            return None
        g.table.settle()
        if status == FAILED:
            self.stats.fallback("plan failed on a rank")
            err = g.table.errors.get(j, "on another rank")
            self.warn_once(f"failed:{j}", f"a2acc could not plan bucket {j} ({err})", speak=call.rank == 0)
            return None
        return status

    def _quick(self, g: GroupState, j: int) -> int | None:
        """The agreed status of the direct plan that serves job ``j``'s calls while ``j`` is still compiling
        somewhere (``A2ACC_TUNE=measure`` compiles it first, :meth:`_lookup`), or None: no such plan, not yet
        runnable on every rank, or failed. The same answer on every rank (the plan table's agreed state)."""
        t = g.tuner.trials.get(j)
        if t is None or not g.table.runnable(t.alt):
            return None
        status = g.table.agreed(t.alt)
        return None if status == FAILED else status

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

    def _count(self, plan: Plan, status: int, bucket: Bucket, before: tuple[int, ...]) -> None:
        """What a served call did, as plain ints (its bytes and messages were counted when they were posted:
        ``before`` is the count at its start)."""
        s = self.stats
        s.handled += 1
        ex = self.executor.name if status == OK else self.fallback.name
        s.by_executor[ex] += 1
        s.by_algorithm[plan.algorithm] += 1
        where = plan.source if plan.used == 0 else "memory"  # first use: where the plan came from
        s.cache[where] += 1
        if plan.used == 0:
            s.plan_seconds.append(plan.seconds)
        plan.used += 1
        s.payload_bytes += bucket.payload_bytes
        s.padding_bytes += bucket.padding_bytes
        s.residual_bytes += bucket.overflow_bytes
        s.served(ex, plan, where, bucket.hit, before)


def _remember(g: GroupState, key: bytes, rows: np.ndarray, row_bytes: int) -> Matrix:
    """A matrix every rank saw (exchanged or announced), kept for the next :data:`LOOKUPS` calls."""
    m = g.matrices[key] = Matrix(rows, int(rows.sum()) * row_bytes)
    if len(g.matrices) > LOOKUPS:
        g.matrices.popitem(last=False)
    return m


def _capacity(capacity: Any, world: int) -> np.ndarray:
    """A capacity as a ``world x world`` matrix of non-negative whole rows (CaptureError otherwise)."""
    try:
        cap = np.asarray(capacity.cpu() if hasattr(capacity, "cpu") else capacity)
    except Exception as exc:
        raise CaptureError(f"capture: capacity {capacity!r} is not a number or a matrix ({exc})") from None
    if cap.ndim == 0:
        cap = np.full((world, world), cap)
    if cap.shape != (world, world) or not np.issubdtype(cap.dtype, np.integer) or (cap < 0).any():
        raise CaptureError(
            f"capture: capacity of shape {cap.shape} and type {cap.dtype}; give rows per pair as one non-negative "
            f"integer or a {world}x{world} integer matrix (row = sender)"
        )
    return cap.astype(np.int64)


def _stock() -> Any:
    """The unpatched ``all_to_all_single``."""
    from a2acc.runtime import torch_patch

    original = torch_patch._STATE.get("original")
    if original is None:
        import torch.distributed as dist

        return dist.all_to_all_single
    return original


def _members(g: GroupState | str, group: Any) -> tuple[tuple[int, ...], int]:
    """The group's global ranks and size."""
    if isinstance(g, GroupState):
        return g.ranks, g.world
    import torch.distributed as dist

    world = dist.get_world_size(group)
    return (tuple(range(world)) if group is None else tuple(dist.get_process_group_ranks(group))), world


def _rank(group: Any) -> int:
    import torch.distributed as dist

    return int(dist.get_rank(group))


def _platform_dialect() -> str:
    """rccl on a ROCm build of torch (RCCL's MSCCL reads only s/r/cpy/re/nop), else nccl."""
    try:
        import torch

        return "rccl" if getattr(torch.version, "hip", None) else "nccl"
    except ImportError:
        return "nccl"
