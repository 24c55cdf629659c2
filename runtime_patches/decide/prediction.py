"""Which calls run without the split-size exchange: the adaptive exchange (``A2ACC_EXCHANGE=adaptive``).

After each exchange every rank compares the call's bucket and relabelling with those of the calls 1 to
:data:`MAX_PERIOD` before it. The period ``p`` with the longest run of confirmations by the latest exchanges is
used (the shortest of equals: a stationary skew repeats at every period): after 1, 2, 3... confirmations in a
row the next 1, 2, 4, then at most :data:`MAX_SKIP` calls run without an exchange, each with the matrix, bucket
and plan of the call ``p`` back. A stationary skew is ``p = 1``; an MoE layer's dispatch and combine alternate
(``p = 2``); L layers forward and backward repeat every ``4L`` calls. A matrix that left its bucket or frame
exchanges every call again, and a change while calls are skipped costs at most ``MAX_SKIP`` calls of residual.
Every rank derives all of it from the exchanged matrices alone, so every rank skips the same calls.

The comparison is vectorised: each call's key (job and relabelling) becomes a small integer kept in a ring of
the last :data:`MAX_PERIOD` calls, and one numpy pass updates every period's streak (a Python loop over 64
periods per call measured about 30 us).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

#: the most calls in a row ``A2ACC_EXCHANGE=adaptive`` runs without an exchange
MAX_SKIP = 8
#: the longest repeating sequence of calls looked for (16 MoE layers' dispatch and combine, forward and backward)
MAX_PERIOD = 64
#: confirmations counted per period at most (past 4 the skip is at its cap anyway)
STREAK_CAP = 16
_PERIODS = np.arange(1, MAX_PERIOD + 1, dtype=np.int64)


@dataclass(eq=False)
class Seen:
    """A call as the adaptive exchange remembers it: its matrix (rows per pair), bucket and job, the key two
    calls are the same by (job and relabelling), and, once run, what ran it (``launch``, by the engine: the
    bound launch for this call's row size; ``stock``: a call the stock collective served by decision)."""

    rows: npt.NDArray[np.int64]
    bucket: Any
    job: int
    key: tuple[object, ...]
    stock: bool = False
    launches: dict[Any, Any] = field(default_factory=dict)


def seen(rows: npt.NDArray[np.int64], bucket: Any, job: int, stock: bool = False) -> Seen:
    ranks = None if bucket is None or bucket.ranks is None else bucket.ranks.tobytes()
    return Seen(rows, bucket, job, (job, ranks, stock), stock)


@dataclass
class Prediction:
    """The adaptive exchange's state for one process group (the same on every rank)."""

    history: deque[Seen] = field(default_factory=lambda: deque(maxlen=MAX_PERIOD))
    streaks: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(MAX_PERIOD, np.int64))
    period: int = 0
    skip: int = 0
    every: bool = False  # ranks disagree on A2ACC_EXCHANGE (seen at an exchange): an exchange on every call
    _ids: dict[tuple[object, ...], int] = field(default_factory=dict)
    _next: int = 0
    _ring: npt.NDArray[np.int64] = field(default_factory=lambda: np.full(MAX_PERIOD, -1, np.int64))
    _pos: int = 0  # calls seen (the ring's write position modulo MAX_PERIOD)

    def forget(self) -> None:
        """Start over: at a call whose exchange sent every rank to the stock path, or when ranks disagree on
        ``A2ACC_EXCHANGE``. A plan still compiling or failed does not reset it (its call is still exchanged)."""
        self.history.clear()
        self.streaks[:] = 0
        self._ring[:] = -1
        self._ids.clear()
        self._pos = self._next = 0
        self.period = self.skip = 0

    def due(self) -> Seen | None:
        """The call one period back, when this call is one to run without an exchange (the caller still checks
        that its plan runs without one and calls :meth:`take` or :meth:`decline`)."""
        if self.every or self.skip <= 0 or not self.period or len(self.history) < self.period:
            return None
        return self.history[-self.period]

    def take(self, s: Seen) -> None:
        """This call runs ``s``'s plan without an exchange: the period goes on through it."""
        self.skip -= 1
        self._push(s)

    def record(self, s: Seen) -> None:
        """A call run without an exchange for another reason (an announced matrix): seen, nothing decided."""
        self._push(s)

    def decline(self) -> None:
        self.skip -= 1

    def observe(self, s: Seen) -> None:
        """After an exchange: per period, whether this call repeats the call that far back; then the period in
        use and the calls to run without an exchange (see module docstring)."""
        kid = self._id(s.key)
        back = self._ring[(self._pos - _PERIODS) % MAX_PERIOD]
        same = (self._pos >= _PERIODS) & (back == kid)
        np.minimum(self.streaks + 1, STREAK_CAP, out=self.streaks, where=same)
        self.streaks[~same] = 0
        self._push(s, kid)
        run = int(self.streaks.max())
        self.period = int(np.argmax(self.streaks == run)) + 1 if run else 0
        self.skip = min(1 << (run - 1), MAX_SKIP) if run else 0

    def _id(self, key: tuple[object, ...]) -> int:
        kid = self._ids.get(key)
        if kid is None:
            if len(self._ids) > 4 * MAX_PERIOD:  # forget keys no call in the ring has
                live = {h.key for h in self.history}
                self._ids = {k: v for k, v in self._ids.items() if k in live}
            kid = self._ids[key] = self._next
            self._next += 1
        return kid

    def _push(self, s: Seen, kid: int | None = None) -> None:
        if kid is None:
            kid = self._id(s.key)
        self._ring[self._pos % MAX_PERIOD] = kid
        self._pos += 1
        self.history.append(s)
