"""A linear program in column-wise sparse form, solved with HiGHS (``highspy``).

Formulations build the constraint matrix as numpy arrays of (column, row, value) triples, never a Python loop
per coefficient; :func:`solve` sorts them into compressed columns and hands them to HiGHS. A solve can be
repeated with a new objective and extra bounds (:func:`resolve`, the second phase of a lexicographic solve).

A large solve can be stopped: HiGHS runs in a thread of its own while the calling thread waits in short slices,
so a signal handler (a2acc's SIGINT/SIGTERM handlers raise in the main thread) runs within :data:`POLL_S`
seconds even while a large LP is in the interior-point method; the solve is then interrupted through HiGHS's
callback and the exception goes on (:func:`_run`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

INF = float("inf")
#: how often a thread waiting for HiGHS wakes, so that a signal handler can run (s)
POLL_S = 0.2
#: how long a cancelled solve is waited for before the exception goes on anyway (s): the solve stops at its next
#: interior-point iteration; a simplex phase (crossover, a clean-up) is not interrupted and ends when the process
#: does
CANCEL_WAIT_S = 5.0
#: LPs from this many columns run in a thread of their own (below it a solve takes about a second at most: a 30
#: k-column link LP took 3 s here; a thread per solve added ~3 % to the many small LPs of syccl's synthesis)
WATCHED_COLS = 10_000


@dataclass(frozen=True)
class LpResult:
    status: str  # "optimal", "time_limit" (x is the best point HiGHS had, or None), "infeasible", "error"
    x: npt.NDArray[np.float64] | None
    objective: float
    seconds: float


@dataclass
class Lp:
    """min cost @ x  s.t.  row_lo <= A x <= row_hi,  col_lo <= x <= col_hi (A from triples)."""

    ncols: int
    nrows: int
    cols: npt.NDArray[np.int64]
    rows: npt.NDArray[np.int64]
    vals: npt.NDArray[np.float64]
    cost: npt.NDArray[np.float64]
    row_lo: npt.NDArray[np.float64]
    row_hi: npt.NDArray[np.float64]
    col_lo: npt.NDArray[np.float64]
    col_hi: npt.NDArray[np.float64]

    def csc(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.float64]]:
        order = np.lexsort((self.rows, self.cols))
        cols = self.cols[order]
        start = np.searchsorted(cols, np.arange(self.ncols + 1)).astype(np.int32)
        return start, self.rows[order].astype(np.int32), self.vals[order].astype(np.float64)


_FD1_LOCK = threading.Lock()


@contextlib.contextmanager
def _stdout_fd_silenced() -> Iterator[None]:
    """Point file descriptor 1 at /dev/null for the duration (C-level writes included), then restore it.

    highspy >= 1.12 prints its banner ("Running HiGHS ... Copyright") from the C++ constructor, before any
    option can switch output off; a2acc's stdout carries tables and plans, so the banner must not reach it.
    The window is one constructor call; a lock keeps concurrent constructions from restoring each other's fd.
    """
    with _FD1_LOCK:
        try:
            sys.stdout.flush()
            saved = os.dup(1)
        except (OSError, ValueError, AttributeError):  # no fd 1 (e.g. a closed or replaced stdout)
            yield
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            yield
        finally:
            _flush_c_stdio()
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)


def _flush_c_stdio() -> None:
    """Flush the C library's stdout buffer (text the solver printed but libc has not written yet)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(None).fflush(None)


def _highs(time_limit: float | None):  # type: ignore[no-untyped-def]
    import highspy

    with _stdout_fd_silenced():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", 0)
    # interior point + crossover: a vertex solution like simplex, ~20x faster on these flow LPs (a 4x4x4 torus:
    # 1.6 s against 32 s for dual simplex, measured)
    h.setOptionValue("solver", "ipm")
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    return h


def _run(h, ncols: int) -> None:  # type: ignore[no-untyped-def]
    """Solve. An LP of :data:`WATCHED_COLS` columns or more runs ``Highs.run`` in a thread of its own (highspy
    releases the interpreter lock while HiGHS works) while this thread waits in slices of :data:`POLL_S`:
    ``Highs.run`` called here would keep a signal handler from running until HiGHS returned (minutes on a large
    LP). An exception raised meanwhile (a signal handler's, a KeyboardInterrupt) subscribes a callback that
    interrupts the solve at its next interior-point iteration, waits up to :data:`CANCEL_WAIT_S` for it and goes
    on. A smaller LP runs here.

    Not highspy's own ``startSolve``/``wait``: their locks are shared by every ``Highs`` object of the process,
    so two threads (Dask runs a worker's tasks as threads) could not solve at once ("Solver is already
    running"), and a cancelled solve that outlived its wait would block the next. The callback is subscribed
    only to cancel: subscribed for the whole solve it ran ~2,000 times per iteration, each needing the
    interpreter lock, and a busy Python thread beside it made a 3 s solve take 170 s."""
    if ncols < WATCHED_COLS:
        h.run()
        return
    done = threading.Event()
    failed: list[BaseException] = []

    def solve() -> None:
        try:
            h.run()
        except BaseException as exc:  # re-raised in the caller's thread below
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=solve, name="a2acc-highs", daemon=True).start()
    try:
        while not done.wait(POLL_S):
            pass
    except BaseException:

        def at_iteration(event) -> None:  # type: ignore[no-untyped-def]
            event.interrupt()

        h.cbIpmInterrupt += at_iteration
        done.wait(CANCEL_WAIT_S)
        raise
    if failed:
        raise failed[0]


def _inf(a: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    import highspy

    out = np.array(a, dtype=np.float64)
    out[np.isposinf(out)] = highspy.kHighsInf
    out[np.isneginf(out)] = -highspy.kHighsInf
    return out


def _result(h, seconds: float) -> LpResult:  # type: ignore[no-untyped-def]
    import highspy

    st = h.getModelStatus()
    sol = h.getSolution()
    x = np.array(sol.col_value, dtype=np.float64) if sol.value_valid else None
    if st == highspy.HighsModelStatus.kOptimal:
        return LpResult("optimal", x, float(h.getInfo().objective_function_value), seconds)
    if st in (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kIterationLimit):
        return LpResult("time_limit", x, float("nan"), seconds)
    if st == highspy.HighsModelStatus.kInfeasible:
        return LpResult("infeasible", None, float("nan"), seconds)
    return LpResult("error", None, float("nan"), seconds)


class Solver:
    """One HiGHS instance holding an LP, so a second phase can reuse the first's basis."""

    def __init__(self, lp: Lp, time_limit: float | None = None) -> None:
        import highspy

        self.lp = lp
        self.h = _highs(time_limit)
        m = highspy.HighsLp()
        m.num_col_ = lp.ncols
        m.num_row_ = lp.nrows
        m.col_cost_ = lp.cost
        m.col_lower_ = _inf(lp.col_lo)
        m.col_upper_ = _inf(lp.col_hi)
        m.row_lower_ = _inf(lp.row_lo)
        m.row_upper_ = _inf(lp.row_hi)
        start, index, value = lp.csc()
        m.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        m.a_matrix_.start_ = start
        m.a_matrix_.index_ = index
        m.a_matrix_.value_ = value
        self.h.passModel(m)

    def run(self) -> LpResult:
        import time

        t0 = time.perf_counter()
        _run(self.h, self.lp.ncols)
        return _result(self.h, time.perf_counter() - t0)

    def reoptimize(
        self, cost: npt.NDArray[np.float64], col: int, hi: float, *, simplex_iterations: int | None = None
    ) -> LpResult:
        """Second phase: a new objective with column ``col`` bounded above by ``hi``. ``simplex_iterations``
        bounds HiGHS's simplex iterations (not the interior point's crossover): a solve that reaches it reports
        ``time_limit``, deterministically (an iteration count, not a clock)."""
        import time

        if simplex_iterations is not None:
            self.h.setOptionValue("simplex_iteration_limit", int(simplex_iterations))
        n = self.lp.ncols
        self.h.changeColsCost(n, np.arange(n, dtype=np.int32), np.asarray(cost, dtype=np.float64))
        self.h.changeColBounds(col, 0.0, float(hi))
        t0 = time.perf_counter()
        _run(self.h, self.lp.ncols)
        return _result(self.h, time.perf_counter() - t0)
