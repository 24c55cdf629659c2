"""A signal stops an LP solve at HiGHS's next iteration, not when HiGHS returns (minutes on a large LP)."""

from __future__ import annotations

import signal
import threading
import time

import networkx as nx
import numpy as np
import pytest

from a2acc.flows.lp import CANCEL_WAIT_S
from a2acc.flows.mcf import link_mcf
from a2acc.flows.network import FlowNetwork
from a2acc.model.topology import parse_topology

#: when the alarm comes: the LP is built in ~0.1 s and its first phase alone takes ~25 s here
ALARM_S = 2.0


class _Stop(Exception):
    pass


def _raise(_signum, _frame):
    raise _Stop


def _random_regular(n: int, seed: int) -> FlowNetwork:
    """A random 3-regular direct-connect graph of ``n`` GPUs (100 GB/s links): exact link LPs on such graphs
    are slow for their size."""
    g = nx.random_regular_graph(3, n, seed=seed)
    edges = [list(e) for e in sorted(g.edges())]
    topo = parse_topology(
        {
            "version": 1,
            "name": f"rr{n}",
            "direct": {"kind": "edges", "nodes": n, "bandwidth": 100, "latency": 2.0, "edges": edges},
        },
        f"rr{n}",
    )
    return FlowNetwork.of(topo)


def test_a_signal_stops_a_long_link_lp():
    # the exact link LP of a 200-node random 3-regular graph under Pareto traffic (120 k variables): ~50 s in
    # HiGHS here, ~25 s of it the first phase. With HiGHS in the main thread the alarm's handler waited for the
    # solve to return
    net = _random_regular(200, 7)
    rng = np.random.default_rng(3)
    demand = (rng.pareto(1.5, (200, 200)) * 2**20).astype(np.int64)
    np.fill_diagonal(demand, 0)
    threads = threading.active_count()
    old = signal.signal(signal.SIGALRM, _raise)
    try:
        signal.setitimer(signal.ITIMER_REAL, ALARM_S)
        t0 = time.monotonic()
        with pytest.raises(_Stop):
            link_mcf(net, demand)
        waited = time.monotonic() - t0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert waited < ALARM_S + CANCEL_WAIT_S + 1.0  # the handler ran while HiGHS was solving, not after it
    deadline = time.monotonic() + CANCEL_WAIT_S
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() == threads  # the cancelled solve's thread stopped


def test_two_threads_solve_large_lps_at_once():
    """Large solves run in threads of their own, with nothing shared between Highs objects: two threads of one
    process (a Dask worker's tasks) solve at once and get what each gets alone."""

    from a2acc.flows import mcf as mcf_module
    from a2acc.flows.lp import WATCHED_COLS
    from a2acc.model.traffic import generate

    net = _random_regular(64, 1)
    assert 64 * net.nedges >= WATCHED_COLS  # each LP takes the threaded path
    demands = [generate("zipf", 64, 1 << 30, seed) for seed in (1, 2)]
    mcf_module._SOLVED.clear()
    alone = [link_mcf(net, d) for d in demands]
    mcf_module._SOLVED.clear()
    got: dict[int, object] = {}

    def work(i: int) -> None:
        try:
            got[i] = link_mcf(net, demands[i])
        except BaseException as exc:  # the test's failure, reported below
            got[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mcf_module._SOLVED.clear()
    for i in (0, 1):
        lf, ref = got[i], alone[i]
        assert not isinstance(lf, BaseException), lf
        assert lf is not None and ref is not None
        assert lf.status == ref.status == "optimal" and lf.time_s == ref.time_s
        assert np.array_equal(lf.flow, ref.flow)
