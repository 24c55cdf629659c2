"""The plans of one process group, and how the ranks agree on them without an extra collective per call.

Every rank sees the same matrix sequence (it is all-gathered), so every rank asks for the same buckets in the
same order: a bucket's **job number** (its position in first-request order) is the same everywhere. Jobs are
loaded or compiled by one background thread in that order, so the jobs a rank has *settled* (ready or failed)
are always a prefix ``0..p-1``. Each call's split-size exchange already carries, per rank, ``p`` and the number of
*exceptions* the rank has seen (a job that failed here, or whose plan the chosen executor cannot run here): a
job every rank has settled runs on the call that needs it with no further exchange; a plan still compiling
somewhere makes every rank take the stock call, together. Only when a rank reports new exceptions does one more
small exchange tell everyone which jobs they concern (rare: a failure, or an executor that cannot run here).
With ``A2ACC_MISS=wait`` a new bucket is compiled in the call and its status is agreed by one extra exchange.

**Same bucket, same Program?** Ranks plan each bucket on their own. Deterministic planners give byte-identical
Programs on identical stacks, but ranks whose a2acc, numpy or CPU differ (a mixed cluster, a half-upgraded
environment, a shared cache written by another version) could hold different Programs for one bucket, and
running them together would hang or mix up data. So the exchange also carries a chained digest of the Programs of
the jobs compared so far and the digests of the next few jobs; a job runs only once every rank's digest for it
was compared equal, in the exchange where every rank first reports it settled (``A2ACC_MISS=wait``: the one that
agrees its status). Different digests stop a2acc for the group, on every rank at the same call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from a2acc.ir.program import Program
from a2acc.jit.cache import CacheEntry

#: jobs beyond the compared prefix whose Program digests each exchange carries (a new bucket is compared, and
#: runs, in the exchange where every rank first reports it settled)
WINDOW = 4
_SAME = (True,) * (1 + WINDOW)
OK, FALLBACK, FAILED = 0, 1, 2  # a job's status: the chosen executor runs it, the fallback does, nobody does
STATUS_NAMES = {OK: "ok", FALLBACK: "fallback executor", FAILED: "failed"}


@dataclass
class Plan:
    """A plan loaded in this process: the cache entry, its Program, and per executor its prepared state."""

    key: str
    entry: CacheEntry
    prog: Program
    source: str  # memory, disk or compiled
    status: int = OK
    why: str = ""  # why the chosen executor cannot run it here (status FALLBACK)
    used: int = 0  # calls it served
    prepared: dict[str, Any] = field(default_factory=dict)
    # digest56 of the Program's JSON: ranks compare them before a plan runs (PlanTable)
    content: int = 0
    seconds: float = 0.0  # wall time to load or compile and prepare it (in the background thread)

    @property
    def algorithm(self) -> str:
        """The planner that made it."""
        return str(self.entry.meta.get("algorithm", ""))


def digest56(text: str) -> int:
    """``text``'s SHA-256 as a 56-bit integer: fits the exchange's int64 with room to spare."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "little")


@dataclass
class PlanTable:
    """Jobs of one group in first-request order, their local status, and the exceptions every rank reported."""

    world: int
    jobs: list[str] = field(default_factory=list)
    number: dict[str, int] = field(default_factory=dict)
    futures: list[Future[Plan]] = field(default_factory=list)
    plans: dict[int, Plan] = field(default_factory=dict)
    status: list[int] = field(default_factory=list)  # local status of settled jobs (the prefix)
    errors: dict[int, str] = field(default_factory=dict)
    exceptions: list[tuple[int, int]] = field(default_factory=list)  # local (job, status), status != OK
    known: list[int] = field(default_factory=list)  # per rank: exceptions merged so far
    worst: dict[int, int] = field(default_factory=dict)  # job -> worst status any rank reported
    digest: int = 0  # of the job sequence: equal on every rank unless their histories diverged
    content: dict[int, int] = field(default_factory=dict)  # job -> its Program's digest (plans held here)
    agreed_prefix: int = 0  # jobs every rank had settled at the last exchange (their statuses are merged)
    verified: int = 0  # jobs 0..verified-1 hold the same Program on every rank (or failed): runnable
    _chain: tuple[int, int] = (0, 0)  # (jobs covered, chained content digest), extended as the prefix grows
    # job -> status agreed, Programs compared, in the job's own exchange (A2ACC_MISS=wait)
    checked: dict[int, int] = field(default_factory=dict)
    _known: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    _reported: tuple[tuple[int, ...], list[int]] = ((), [])  # the last report and the state it was made from

    def __post_init__(self) -> None:
        self.known = [0] * self.world

    # ------------------------------------------------------------------ this rank
    def job(self, key: str, submit: Callable[[], Future[Plan]]) -> int:
        """The job number of ``key``, submitting its load/compile the first time it is asked for."""
        j = self.number.get(key)
        if j is None:
            j = self.number[key] = len(self.jobs)
            self.jobs.append(key)
            self.futures.append(submit())
            self.digest = digest56(f"{self.digest}/{key}")
        return j

    def settle(self, block_until: int = -1) -> None:
        """Advance the settled prefix over finished jobs (waiting for jobs up to ``block_until``)."""
        while len(self.status) < len(self.jobs):
            j = len(self.status)
            fut = self.futures[j]
            if j > block_until and not fut.done():
                return
            try:
                plan = fut.result()
            except Exception as exc:  # a failure here: reported to every rank through the exchange
                self.status.append(FAILED)
                self.errors[j] = f"{type(exc).__name__}: {exc}"
                self.exceptions.append((j, FAILED))
                continue
            self.status.append(plan.status)
            self.plans[j] = plan
            self.content[j] = plan.content
            if plan.status != OK:
                self.exceptions.append((j, plan.status))

    def report(self) -> list[int]:
        """What this rank adds to the call's exchange: settled prefix, exceptions, digest, the chained digest
        of the Programs of jobs ``0..agreed_prefix-1`` (every rank has settled them and knows which failed
        somewhere, so every rank chains the same jobs), and the digests of the next :data:`WINDOW` jobs (-1:
        not settled here, -2: failed here), so a job every rank settled since the last exchange is compared,
        and can run, in this one."""
        state = (len(self.status), len(self.exceptions), self.digest, self.agreed_prefix)
        if state == self._reported[0]:  # nothing it depends on changed since the last exchange
            return self._reported[1]
        nxt = []
        for j in range(self.agreed_prefix, self.agreed_prefix + WINDOW):
            if j >= len(self.status):
                nxt.append(-1)
            else:
                nxt.append(-2 if self.status[j] == FAILED else self.content.get(j, -2))
        out = [len(self.status), len(self.exceptions), self.digest, self.content_chain(), *nxt]
        self._reported = (state, out)
        return out

    def content_chain(self) -> int:
        """Chained digest of the Programs of jobs below :attr:`agreed_prefix` that failed nowhere."""
        upto, h = self._chain
        for j in range(upto, self.agreed_prefix):
            if self.worst.get(j, OK) != FAILED:
                h = digest56(f"{h}/{j}/{self.content.get(j, -1)}")
        self._chain = (max(upto, self.agreed_prefix), h)
        return h

    def agree(self, reports: npt.NDArray[np.int64], prefix: int, uniform: bool = False) -> bool:
        """After an exchange (its exceptions merged): False when the ranks' Programs differ; else the jobs
        compared equal become runnable: those the chains covered, then those of the window every rank has
        settled (``prefix``: every rank's settled jobs), up to the first that is not. ``reports`` are the ranks'
        :meth:`report` columns from the chain on (``world x (1 + WINDOW)``); ``uniform``: the caller knows every
        rank reported the same."""
        same = _SAME if uniform else (reports == reports[0]).all(axis=0)  # per column, one pass
        if not same[0]:
            return False
        old = self.agreed_prefix
        top = max(old, prefix)
        verified = old
        first = reports[0, 1:].tolist()
        for k, j in enumerate(range(old, min(top, old + WINDOW))):
            # a job that failed anywhere never runs: nothing to compare
            failed = self.worst.get(j, OK) == FAILED
            if not failed and (first[k] < 0 or not same[1 + k]):
                return False
            verified = j + 1
        self.verified = verified
        self.agreed_prefix = top
        return True

    # ------------------------------------------------------------------ every rank
    def pending_width(self, nexc: npt.NDArray[np.int64] | int) -> int:
        """How many exceptions per rank the extra exchange must carry (0: none needed); the same on all ranks.
        ``nexc``: every rank's count of exceptions, or one count that every rank reported."""
        if isinstance(nexc, int):
            return max(0, nexc - min(self.known, default=0))
        if not self._known.size:
            self._known = np.asarray(self.known, dtype=np.int64)
        return max(0, int((nexc - self._known).max(initial=0)))

    def my_exceptions(self, rank: int, width: int) -> list[int]:
        """This rank's exceptions not yet merged, as ``width`` (job, status) pairs padded with (-1, -1)."""
        out: list[int] = []
        for j, s in self.exceptions[self.known[rank] : self.known[rank] + width]:
            out += [j, s]
        return out + [-1, -1] * (width - len(out) // 2)

    def merge(self, gathered: npt.NDArray[np.int64], nexc: npt.NDArray[np.int64]) -> None:
        """Merge every rank's new exceptions (``world x 2*width``) and mark them known."""
        for row in gathered:
            for j, s in zip(row[0::2].tolist(), row[1::2].tolist()):
                if j >= 0:
                    self.worst[j] = max(self.worst.get(j, OK), s)
        self.known = [int(x) for x in nexc]
        self._known = np.asarray(self.known, dtype=np.int64)

    def runnable(self, j: int) -> bool:
        """Every rank has settled job ``j`` and holds the same Program for it (or it failed somewhere)."""
        return j < self.verified or j in self.checked

    def agreed(self, j: int) -> int:
        """The job's status on every rank (every rank has settled it and its exceptions are merged)."""
        if j >= self.verified and j in self.checked:
            return self.checked[j]
        return self.worst.get(j, OK)
