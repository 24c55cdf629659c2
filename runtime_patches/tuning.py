"""The measured choice between a bucket's plan and its direct plan (``A2ACC_TUNE=measure``, the default).

The planner picks a plan by a model of the fabric: the topology the job declared and the calibrated costs. That
model can be wrong for the fabric the job runs on. Two servers declared for ranks that share one host send
every message over loopback, where a relay only adds bytes; a NIC may be slower than declared; an executor may
pay per message what the model does not know. So for every bucket the JIT also holds the **direct** plan (one
step: every pair's rows straight to their destination, the bytes the stock call moves; the ``direct`` planner)
and times both on the job's own calls:

1. the first calls a bucket serves once both plans can run alternate between them (the planner's plan first);
2. each rank times its own part of each call: pack, transfers, unpack (the wall clock on the CPU; CUDA events on
   a GPU, read at the next exchange once complete, never waited for);
3. once a rank holds :data:`SAMPLES` times of each plan, its split-size exchange carries its median of each
   (the calls after the trial are exchanged, ``A2ACC_EXCHANGE=adaptive`` or an announcement notwithstanding,
   until the decision);
4. when every rank reports the same bucket, every rank keeps the plan whose slowest rank's median is lower:
   the direct plan only when it is more than :data:`MARGIN` faster, else the planner's.

The decision reads the exchanged numbers only, so every rank switches at the same call; a bucket whose two
plans are the same transfers (one server: the planner's plan is direct) is decided without a trial. A bucket
costs at most a few calls of the slower plan. ``A2ACC_TUNE=off`` runs the planner's plan always.
``SAMPLES`` and ``MARGIN`` are chosen, not fitted: three samples make a median that one descheduled call does
not move; the margin keeps the model's plan when the two measure within noise of each other.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

#: the planner whose plan every bucket's plan is measured against
ALTERNATIVE = "direct"
#: calls of each plan a rank times before it reports its medians
SAMPLES = 3
#: the direct plan is kept only when its slowest rank's median is this much below the planner plan's
MARGIN = 0.05
#: what a rank's exchange carries for the measurement: its mode, a job, and two medians (microseconds)
WIDTH = 4
#: a trial's outcome
UNDECIDED, PLAN, DIRECT = -1, 0, 1
_KEEP = 16  # the most times kept per plan (the latest)


@dataclass
class Trial:
    """One bucket's measurement: the direct plan's job, the calls served while undecided (the same count on
    every rank: every rank serves the same calls), this rank's times per plan, and the outcome."""

    alt: int
    served: int = 0
    times: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))
    winner: int = UNDECIDED

    def add(self, which: int, seconds: float) -> None:
        if self.winner == UNDECIDED:
            got = self.times[which]
            got.append(seconds)
            del got[:-_KEEP]

    def ready(self) -> bool:
        return self.winner == UNDECIDED and all(len(t) >= SAMPLES for t in self.times)


@dataclass
class Tuner:
    """What one process group measures; decided from exchanged numbers only, so the same on every rank."""

    on: bool
    trials: dict[int, Trial] = field(default_factory=dict)
    pending: list[tuple[Trial, int, Any, Any]] = field(default_factory=list)  # CUDA events not yet complete
    decided: Counter[str] = field(default_factory=Counter)  # buckets per plan kept ("plan", "direct")
    # trials (by their direct job) whose calls are all served, waiting for an exchange to decide them: while any
    # is, every call is exchanged (the same on every rank: it follows the count of calls served)
    awaiting: set[int] = field(default_factory=set)

    def served(self, t: Trial) -> int | None:
        """Which plan the next call of an undecided trial runs (PLAN or DIRECT, in turn, :data:`SAMPLES` calls
        each), or None once they have all run (the planner's plan serves until an exchange decides)."""
        if t.served >= 2 * SAMPLES:
            return None
        which = t.served % 2
        t.served += 1
        if t.served == 2 * SAMPLES:
            self.awaiting.add(t.alt)
        return which

    def report(self) -> list[int]:
        """This rank's :data:`WIDTH` integers for the exchange: its mode, then the lowest undecided job it holds
        enough times for and the two medians in microseconds (job -1 when there is none)."""
        self.drain()
        for j in sorted(self.trials):
            t = self.trials[j]
            if t.ready():
                a, b = (round(statistics.median(x) * 1e6) for x in t.times)
                return [int(self.on), j, a, b]
        return [int(self.on), -1, 0, 0]

    def decide(self, cols: npt.NDArray[np.int64]) -> bool:
        """After an exchange (``cols``: every rank's :meth:`report`, ``world x WIDTH``): decide the job every
        rank reported. False when the ranks' modes differ (their plan histories differ too: the caller stops)."""
        if int(cols[:, 0].min()) != int(cols[:, 0].max()):
            return False
        jobs = cols[:, 1]
        j = int(jobs.min())
        if j < 0 or j != int(jobs.max()) or j not in self.trials:
            return True
        plan_us, direct_us = int(cols[:, 2].max()), int(cols[:, 3].max())
        self.settle(self.trials[j], DIRECT if direct_us < plan_us * (1 - MARGIN) else PLAN)
        return True

    def settle(self, t: Trial, winner: int) -> None:
        t.winner = winner
        t.times[0].clear()
        t.times[1].clear()
        self.awaiting.discard(t.alt)
        self.decided["direct" if winner == DIRECT else "plan"] += 1

    # ------------------------------------------------------------------ timing one call
    def begin(self, device: Any) -> Any:
        """A start mark on ``device``: a CUDA event recorded on the current stream, else the wall clock."""
        if getattr(device, "type", "cpu") == "cuda":
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def end(self, mark: Any, trial: Trial, which: int) -> None:
        """The call's end: a wall-clock time is added now; CUDA events are read once complete (:meth:`drain`)."""
        if isinstance(mark, float):
            trial.add(which, time.perf_counter() - mark)
            return
        import torch

        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        self.pending.append((trial, which, mark, ev))

    def drain(self) -> None:
        """Add the times of calls whose end events have completed (no wait, no sync)."""
        left = []
        for trial, which, start, stop in self.pending:
            if stop.query():
                trial.add(which, float(start.elapsed_time(stop)) / 1e3)
            else:
                left.append((trial, which, start, stop))
        self.pending = left
