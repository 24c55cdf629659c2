"""Plans for buckets: taken from the cache or compiled, in a background thread, never in a call (unless
``A2ACC_MISS=wait``).

:func:`compile_entry` is the one way the JIT makes a plan: one :func:`a2acc.pipeline.compile` of the bucket's
layout (planned exactly, verified, lowered when a backend is set). :class:`Loader` runs it through the plan cache
(memory, disk, compiled; see :mod:`a2acc.jit.cache`) on one worker thread, in the order the buckets were first
asked for, which :mod:`a2acc.runtime.decide.agreement` relies on, and prepares each plan for the executor that
will run it (its steps and exchanges, once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from a2acc.ir import program_from_json
from a2acc.ir.quantize import UnitPolicy
from a2acc.jit.cache import CacheEntry, PlanCache
from a2acc.model.topology import Topology
from a2acc.pipeline import Request
from a2acc.pipeline import compile as compile_pipeline
from a2acc.runtime.decide.agreement import FALLBACK as STATUS_FALLBACK
from a2acc.runtime.decide.agreement import Plan, digest56

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


class Loader:
    """Loads or compiles plans (see module docstring). ``executor``/``fallback``: the chosen executor and the one
    that runs a plan the chosen one cannot run here; ``wait``: compile in the calling thread
    (``A2ACC_MISS=wait``)."""

    def __init__(
        self, cache: PlanCache, executor: Any, fallback: Any, target: str | None, wait: bool
    ) -> None:
        self.cache = cache
        self.executor, self.fallback = executor, fallback
        self.target = target
        self.wait = wait
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="a2acc-compile")

    def submit(
        self, key: str, make: Callable[[], CacheEntry], group: Any, *, now: bool = False
    ) -> Future[Plan]:
        """The plan under ``key`` as a future: loaded or compiled on the worker thread, or in this call with
        ``now`` (a plan of milliseconds, see :data:`a2acc.runtime.engine.QUICK_WORLD`) or ``A2ACC_MISS=wait``."""
        if not (self.wait or now):
            return self._pool.submit(self.load, key, make, group)
        fut: Future[Plan] = Future()
        try:
            fut.set_result(self.load(key, make, group, store=not now))
        except Exception as exc:
            fut.set_exception(exc)
        return fut

    def load(self, key: str, make: Callable[[], CacheEntry], group: Any, *, store: bool = True) -> Plan:
        """The plan under ``key``, from the cache or made by ``make``; prepared for the executor that will run
        it. ``store=False`` (a plan made in a call): a compiled entry goes to the disk cache on the worker
        thread, after the jobs before it, not in the call."""
        t0 = time.perf_counter()
        entry, where = self.cache.get_or_compile(key, make, store=store)
        if not store and where == "compiled":
            self._pool.submit(self._store, entry)
        prog = program_from_json(entry.program_json, f"cache entry {key}")
        plan = Plan(key, entry, prog, where, content=digest56(entry.program_json))
        why = self.executor.unavailable(entry, group)
        ex = self.executor
        if why is not None:
            plan.status, plan.why, ex = STATUS_FALLBACK, why, self.fallback
        plan.prepared[ex.name] = ex.prepare(plan.prog, entry)
        plan.seconds = time.perf_counter() - t0
        return plan

    def _store(self, entry: CacheEntry) -> None:
        """Write a plan made in a call to the disk cache; a failure to write it is the cache's to report (it
        warns once), never the job's."""
        try:
            self.cache.put(entry)
        except Exception:  # the plan is in memory and serving; the disk copy only saves a later compile
            log.debug("could not store plan %s", entry.key, exc_info=True)
