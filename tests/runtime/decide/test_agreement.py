"""How ranks agree on plans without a second collective: job prefixes, exceptions, digests (no processes)."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from a2acc.runtime.decide.agreement import FAILED, FALLBACK, OK, WINDOW, Plan, PlanTable


def _done(status: int | None, content: int = 1) -> Future:
    f: Future = Future()
    if status is None:
        return f  # still compiling
    if status == FAILED:
        f.set_exception(RuntimeError("boom"))
    else:
        f.set_result(Plan("k", None, None, "compiled", status=status, content=content))
    return f


def _exchange(tables: list[PlanTable]) -> tuple[int, np.ndarray]:
    """One call's exchange as the engine does it: reports gathered, Programs compared, new exceptions merged on
    every rank. Returns the runnable prefix (jobs compared and agreed)."""
    reports = np.array([t.report() for t in tables])
    prefix, nexc, digest = reports[:, 0], reports[:, 1], reports[:, 2]
    assert len(set(digest.tolist())) == 1
    width = tables[0].pending_width(nexc)
    assert all(t.pending_width(nexc) == width for t in tables)  # every rank decides alike
    if width:
        extra = np.array([t.my_exceptions(r, width) for r, t in enumerate(tables)])
        for t in tables:
            t.merge(extra, nexc)
    agreed = [t.agree(reports[:, 3:], int(prefix.min())) for t in tables]
    assert len(set(agreed)) == 1  # every rank decides alike
    if not agreed[0]:
        return -1, nexc
    assert len({t.verified for t in tables}) == 1
    return tables[0].verified, nexc


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
    runnable, _ = _exchange(tables)
    assert runnable == 3  # compared and runnable at once; job 3 is not settled on rank 0: its calls take the
    # stock collective, together
    assert all(t.runnable(2) and not t.runnable(3) for t in tables)
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


def test_different_programs_for_one_bucket_stop_every_rank_before_they_run():
    """Rank 1 holds another Program for job 1 (another a2acc or numpy, another CPU): job 0 runs, and the
    exchange where every rank first reports job 1 settled tells every rank instead of letting it run; past the
    window, the chain catches it."""
    world = 3
    tables = [PlanTable(world) for _ in range(world)]
    plans = {0: [(OK, 7)] * 3, 1: [(OK, 8), (OK, 9), (OK, 8)]}
    for r, t in enumerate(tables):
        st, c = plans[0][r]
        t.job("key0", lambda st=st, c=c: _done(st, c))
        t.settle()
    assert _exchange(tables)[0] == 1 and all(t.runnable(0) for t in tables)
    for r, t in enumerate(tables):
        st, c = plans[1][r]
        t.job("key1", lambda st=st, c=c: _done(st, c))
        t.settle()
    assert _exchange(tables)[0] == -1  # every rank: different Programs
    assert not any(t.runnable(1) for t in tables)
    # beyond the window (many jobs settled at once): the chain of the next exchange compares them
    tables = [PlanTable(1 + 1) for _ in range(2)]
    for r, t in enumerate(tables):
        for j in range(WINDOW + 2):
            t.job(f"k{j}", lambda j=j, r=r: _done(OK, 100 + j + (r if j == WINDOW + 1 else 0)))
        t.settle()
    assert _exchange(tables)[0] == WINDOW  # the window's jobs, equal
    assert _exchange(tables)[0] == -1  # the chain over all settled jobs differs on the last one


def test_a_job_that_failed_somewhere_is_left_out_of_the_comparison():
    world = 2
    tables = [PlanTable(world) for _ in range(world)]
    for r, t in enumerate(tables):
        t.job("a", lambda r=r: _done(FAILED if r == 1 else OK, 3))
        t.job("b", lambda: _done(OK, 4))
        t.settle()
    assert _exchange(tables)[0] == 2  # rank 1 holds no Program for job 0: compared without it, agreed
    assert [t.agreed(0) for t in tables] == [FAILED, FAILED]
