"""The measured choice between a bucket's plan and its direct plan (a2acc.runtime.decide.tuning): what a rank reports,
how the ranks decide from the exchanged numbers, and CUDA-event times read without waiting."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from a2acc.runtime.decide.tuning import (
    DIRECT,
    MARGIN,
    MAX_WAIT,
    PLAN,
    SAMPLES,
    UNDECIDED,
    WIDTH,
    Trial,
    Tuner,
)


def _ready(tuner: Tuner, j: int, plan_s: float, direct_s: float) -> Trial:
    """A trial whose calls have all run (as the engine serves them), with these times."""
    t = tuner.trials[j] = Trial(alt=j + 1)
    for _ in range(SAMPLES):
        t.add(tuner.served(t), plan_s)
        t.add(tuner.served(t), direct_s)
    return t


def test_a_rank_reports_the_lowest_ready_job_and_its_medians_in_microseconds():
    tu = Tuner(on=True)
    assert tu.report() == [1, -1, 0, 0]  # nothing measured yet
    t4 = tu.trials[4] = Trial(alt=5)
    t4.add(PLAN, 0.001)  # not enough times yet
    _ready(tu, 6, 0.004, 0.002)
    _ready(tu, 2, 0.010, 0.012)
    assert tu.report() == [1, 2, 10000, 12000]
    assert Tuner(on=False).report()[0] == 0
    assert len(tu.report()) == WIDTH


def test_the_slowest_rank_decides_and_the_direct_plan_needs_the_margin():
    tu = Tuner(on=True)
    t = _ready(tu, 0, 0.010, 0.005)
    # rank 1 measures the direct plan slower: the planner's plan is kept on every rank
    assert tu.decide(np.array([[1, 0, 10000, 5000], [1, 0, 9000, 9800]]))
    assert t.winner == PLAN and t.times == ([], [])
    t = _ready(tu, 2, 0.010, 0.005)
    assert tu.decide(np.array([[1, 2, 10000, 9400], [1, 2, 8000, 9000]]))
    assert t.winner == DIRECT  # 9400 < 0.95 * 10000
    t = _ready(tu, 4, 0.010, 0.0096)
    assert tu.decide(np.array([[1, 4, 10000, 9600]]))
    assert t.winner == PLAN  # within the margin: the model's plan
    assert dict(tu.decided) == {"plan": 2, "direct": 1}


def test_no_decision_unless_every_rank_reports_the_same_job():
    tu = Tuner(on=True)
    t = _ready(tu, 0, 0.010, 0.001)
    assert tu.decide(np.array([[1, 0, 10000, 1000], [1, -1, 0, 0]]))
    assert tu.decide(np.array([[1, 0, 10000, 1000], [1, 2, 10000, 1000]]))
    assert t.winner == UNDECIDED and len(t.times[0]) == SAMPLES
    # ranks that set A2ACC_TUNE differently: the caller stops a2acc for the group
    assert not tu.decide(np.array([[1, 0, 10000, 1000], [0, 0, 10000, 1000]]))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 10**6), st.integers(1, 10**6)), min_size=1, max_size=8),
    st.randoms(use_true_random=False),
)
def test_the_decision_is_the_rule_and_does_not_depend_on_the_ranks_order(medians, rnd):
    cols = np.array([[1, 3, a, b] for a, b in medians], dtype=np.int64)
    shuffled = cols[rnd.sample(range(len(cols)), len(cols))]
    winners = []
    for c in (cols, shuffled):
        tu = Tuner(on=True)
        t = _ready(tu, 3, 1.0, 1.0)
        tu.decide(c)
        winners.append(t.winner)
    a, b = max(m[0] for m in medians), max(m[1] for m in medians)
    assert winners[0] == winners[1] == (DIRECT if b < a * (1 - MARGIN) else PLAN)


class _Event:
    """A CUDA event as the tuner uses it: recorded on a stream, queried, timed against another (milliseconds)."""

    clock = 0.0

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = -1.0
        self.done = False
        self.stream = None
        self.broken = False

    def record(self, stream=None) -> None:
        self.at, self.stream = _Event.clock, stream

    def query(self) -> bool:
        if self.broken:
            raise RuntimeError("events on different devices")
        return self.done

    def elapsed_time(self, end: _Event) -> float:
        return (end.at - self.at) * 1e3


def _fake_cuda(monkeypatch):
    import contextlib

    import torch

    devices: list[object] = []

    @contextlib.contextmanager
    def device(d):
        devices.append(d)
        yield

    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: ("stream of", d))
    monkeypatch.setattr(torch.cuda, "device", device)
    return devices


class _Dev:
    type = "cuda"
    index = 1


def test_gpu_times_are_read_once_their_events_complete_never_waited_for(monkeypatch):
    devices = _fake_cuda(monkeypatch)
    tu = Tuner(on=True)
    t = tu.trials[0] = Trial(alt=1)
    _Event.clock = 1.0
    mark = tu.begin(_Dev())
    _Event.clock = 1.25
    tu.end(mark, t, DIRECT)  # as the engine's background thread would: on the start's device and stream
    assert devices == [mark.device] and tu.pending[0][3].stream == mark.stream == ("stream of", mark.device)
    assert t.times == ([], []) and len(tu.pending) == 1
    tu.drain()  # the end event has not completed: nothing read, nothing waited for
    assert t.times == ([], []) and len(tu.pending) == 1
    tu.pending[0][3].done = True
    tu.report()  # drains first
    assert t.times == ([], [0.25]) and tu.pending == []


def test_an_event_that_cannot_be_read_gives_the_wall_clock_never_an_error(monkeypatch):
    _fake_cuda(monkeypatch)
    tu = Tuner(on=True)
    t = tu.trials[0] = Trial(alt=1)
    mark = tu.begin(_Dev())
    tu.end(mark, t, PLAN)
    tu.pending[0][3].broken = True
    assert tu.report()[1] == -1  # no error inside the exchange
    assert len(t.times[0]) == 1 and t.times[0][0] >= 0 and tu.pending == []


def test_a_trial_no_rank_can_finish_keeps_the_planners_plan_after_max_wait_exchanges():
    tu = Tuner(on=True)
    t = tu.trials[0] = Trial(alt=1)
    for _ in range(2 * SAMPLES):
        tu.served(t)
    nothing = np.array([[1, -1, 0, 0], [1, -1, 0, 0]])  # a rank lost a time: nobody reports the trial
    for _ in range(MAX_WAIT):
        assert tu.decide(nothing)
    assert t.winner == UNDECIDED and tu.awaiting == {1}
    tu.decide(nothing)
    assert t.winner == PLAN and tu.awaiting == set() and tu.waited == 0


def test_a_trial_runs_each_plan_in_turn_then_waits_for_an_exchange_to_decide():
    tu = Tuner(on=True)
    t = tu.trials[0] = Trial(alt=1)
    turns = [tu.served(t) for _ in range(2 * SAMPLES + 2)]
    assert turns == [PLAN, DIRECT] * SAMPLES + [None, None]
    assert tu.awaiting == {1}  # every call is exchanged until the decision
    for which in (PLAN, DIRECT):
        for _ in range(SAMPLES):
            t.add(which, 0.01)
    assert tu.decide(np.array([tu.report()]))
    assert t.winner == PLAN and tu.awaiting == set()
