"""How ranks agree on plans without a second collective: job prefixes, exceptions, digests (no processes)."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from a2acc.runtime.plans import FAILED, FALLBACK, OK, Plan, PlanTable


def _done(status: int | None) -> Future:
    f: Future = Future()
    if status is None:
        return f  # still compiling
    if status == FAILED:
        f.set_exception(RuntimeError("boom"))
    else:
        f.set_result(Plan("k", None, None, "compiled", status=status))
    return f


def _exchange(tables: list[PlanTable]) -> tuple[int, np.ndarray]:
    """One call's exchange as the engine does it: reports gathered, new exceptions merged on every rank."""
    reports = np.array([t.report() for t in tables])
    prefix, nexc, digest = reports[:, 0], reports[:, 1], reports[:, 2]
    assert len(set(digest.tolist())) == 1
    width = tables[0].pending_width(nexc)
    assert all(t.pending_width(nexc) == width for t in tables)  # every rank decides alike
    if width:
        extra = np.array([t.my_exceptions(r, width) for r, t in enumerate(tables)])
        for t in tables:
            t.merge(extra, nexc)
    return int(prefix.min()), nexc


def test_a_job_runs_once_every_rank_settled_it_and_exceptions_reach_everyone():
    world = 3
    tables = [PlanTable(world) for _ in range(world)]
    # job 0: ok everywhere; job 1: the chosen executor cannot run it on rank 2; job 2: fails on rank 1;
    # job 3: still compiling on rank 0
    status = {0: [OK, OK, OK], 1: [OK, OK, FALLBACK], 2: [OK, FAILED, OK], 3: [None, OK, OK]}
    for j in range(4):
        for r, t in enumerate(tables):
            assert t.job(f"key{j}", lambda s=status[j][r]: _done(s)) == j  # same job numbers everywhere
            t.settle()
    prefix, _ = _exchange(tables)
    assert prefix == 3  # job 3 is not settled on rank 0: its calls take the stock collective, together
    assert [t.agreed(0) for t in tables] == [OK] * 3
    assert [t.agreed(1) for t in tables] == [FALLBACK] * 3  # every rank runs the fallback executor
    assert [t.agreed(2) for t in tables] == [FAILED] * 3  # every rank takes the stock call
    # nothing new: no second exchange
    assert tables[0].pending_width(np.array([len(t.exceptions) for t in tables])) == 0
    assert len({t.digest for t in tables}) == 1


def test_a_diverged_history_shows_in_the_digest():
    a, b = PlanTable(2), PlanTable(2)
    a.job("x", lambda: _done(OK))
    b.job("y", lambda: _done(OK))
    assert a.digest != b.digest
    c = PlanTable(2)
    c.job("x", lambda: _done(OK))
    assert c.digest == a.digest


def test_prefix_stops_at_the_first_unfinished_job():
    t = PlanTable(1)
    slow = _done(None)
    t.job("a", lambda: _done(OK))
    t.job("b", lambda: slow)
    t.job("c", lambda: _done(OK))
    t.settle()
    assert t.report()[0] == 1
    slow.set_result(Plan("b", None, None, "disk"))
    t.settle()
    assert t.report()[0] == 3
