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
   the direct plan only when it is more than :data:`MARGIN` faster, else the planner's; a bucket no rank can
   report (a rank lost a time to a call that raised) keeps the planner's after :data:`MAX_WAIT` exchanges.

The decision reads the exchanged numbers only, so every rank switches at the same call; a bucket whose two
plans are the same transfers (one server: the planner's plan is direct) is decided without a trial. A bucket
costs at most a few calls of the slower plan. ``A2ACC_TUNE=off`` runs the planner's plan always.
``SAMPLES`` and ``MARGIN`` are chosen, not fitted: three samples make a median that one descheduled call does
not move; the margin keeps the model's plan when the two measure within noise of each other.
"""

from __future__ import annotations

import statistics
import threading
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
#: exchanges a trial may wait for every rank to report it before it keeps the planner's plan
MAX_WAIT = 16
_SAME = (True,) * WIDTH


@dataclass
class Trial:
    """One bucket's measurement: the direct plan's job, the calls served while undecided (the same count on
    every rank: every rank serves the same calls), this rank's times per plan, the outcome, and whether the two
    plans' transfers were compared (once)."""

    alt: int
    served: int = 0
    times: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))
    winner: int = UNDECIDED
    compared: bool = False

    def add(self, which: int, seconds: float) -> None:
        if self.winner == UNDECIDED:
            self.times[which].append(seconds)

    def ready(self) -> bool:
        return self.winner == UNDECIDED and all(len(t) >= SAMPLES for t in self.times)


@dataclass(frozen=True)
class _Mark:
    """The start of one timed call: the wall clock, and on a GPU an event recorded on the caller's stream of
    the data's device (the end event goes on the same stream, from whichever thread ends the call)."""

    wall: float
    event: Any = None
    device: Any = None
    stream: Any = None


@dataclass
class Tuner:
    """What one process group measures; decided from exchanged numbers only, so the same on every rank.

    A call's end may come from the engine's background thread (``async_op=True``) while the calling thread
    reads the times for an exchange: a lock guards the times and the pending events."""

    on: bool
    trials: dict[int, Trial] = field(default_factory=dict)
    pending: list[tuple[Trial, int, _Mark, Any]] = field(default_factory=list)  # GPU ends not yet read
    decided: Counter[str] = field(default_factory=Counter)  # buckets per plan kept ("plan", "direct")
    # trials (by their direct job) whose calls are all served, waiting for an exchange to decide them: while any
    # is, every call is exchanged (the same on every rank: it follows the count of calls served)
    awaiting: set[int] = field(default_factory=set)
    waited: int = 0  # exchanges in a row that left a trial awaiting (the same on every rank)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

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
        if self.pending:
            self.drain()
        if not self.awaiting:  # a trial is ready only once its calls have all run: none (the usual call)
            return [int(self.on), -1, 0, 0]
        with self._lock:
            for j in sorted(self.trials):
                t = self.trials[j]
                if t.ready():
                    a, b = (round(statistics.median(x) * 1e6) for x in t.times)
                    return [int(self.on), j, a, b]
        return [int(self.on), -1, 0, 0]

    def decide(self, cols: npt.NDArray[np.int64], uniform: bool = False) -> bool:
        """After an exchange (``cols``: every rank's :meth:`report`, ``world x WIDTH``): decide the job every
        rank reported. False when the ranks' modes differ (their plan histories differ too: the caller stops).
        A trial still undecided :data:`MAX_WAIT` exchanges after its calls ran (a rank lost a time: a call that
        raised) keeps the planner's plan, so the calls after it are not exchanged for ever. ``uniform``: the
        caller knows every rank reported the same."""
        first = cols[0]
        same = _SAME if uniform else (cols == first).all(axis=0)
        if not same[0]:
            return False
        j = int(first[1])
        if j >= 0 and same[1] and j in self.trials:
            plan_us, direct_us = int(cols[:, 2].max()), int(cols[:, 3].max())
            self.settle(self.trials[j], DIRECT if direct_us < plan_us * (1 - MARGIN) else PLAN)
        self.waited = self.waited + 1 if self.awaiting else 0
        if self.waited > MAX_WAIT:
            for t in [t for t in self.trials.values() if t.alt in self.awaiting]:
                self.settle(t, PLAN)
            self.waited = 0
        return True

    def settle(self, t: Trial, winner: int) -> None:
        with self._lock:
            t.winner = winner
            t.times[0].clear()
            t.times[1].clear()
        self.awaiting.discard(t.alt)
        self.decided["direct" if winner == DIRECT else "plan"] += 1

    # ------------------------------------------------------------------ timing one call
    def begin(self, device: Any) -> _Mark:
        """A start mark: the wall clock, and on a GPU an event on the current stream of ``device``."""
        wall = time.perf_counter()
        if getattr(device, "type", "cpu") != "cuda":
            return _Mark(wall)
        import torch

        stream = torch.cuda.current_stream(device)
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(stream)
        return _Mark(wall, ev, device, stream)

    def end(self, mark: _Mark, trial: Trial, which: int) -> None:
        """The call's end, from the thread that finished it: on the CPU the wall-clock time is added now; on a
        GPU an end event goes on the start's stream and device, read once complete (:meth:`drain`)."""
        if mark.event is None:
            with self._lock:
                trial.add(which, time.perf_counter() - mark.wall)
            return
        import torch

        with torch.cuda.device(mark.device):
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(mark.stream)
        with self._lock:
            self.pending.append((trial, which, mark, ev))

    def drain(self) -> None:
        """Add the times of calls whose end events have completed (no wait, no sync). An event that cannot be
        read (a driver error) gives the wall-clock time instead: a time is never lost, nor an error raised
        inside the exchange."""
        with self._lock:
            batch, self.pending = self.pending, []
        left = []
        for trial, which, mark, stop in batch:
            try:
                done = bool(stop.query())
                seconds = float(mark.event.elapsed_time(stop)) / 1e3 if done else 0.0
            except Exception:  # timing must never break the call
                done, seconds = True, time.perf_counter() - mark.wall
            if done:
                with self._lock:
                    trial.add(which, seconds)
            else:
                left.append((trial, which, mark, stop))
        with self._lock:
            self.pending[:0] = left
