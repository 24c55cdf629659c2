from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from a2acc import plan
from a2acc.analysis.fastsim import simulate_setup
from a2acc.analysis.incast import ROCE_RTO_S, IncastModel
from a2acc.analysis.model import CALIBRATED_ROCE, SimModel
from a2acc.analysis.simulate import rendezvous, routes, simulate
from a2acc.errors import InputError
from a2acc.ir import Buf, ProgramBuilder
from a2acc.model.topology import load_topology
from tests.helpers import tiered

GB = 10**9
MiB = 1 << 20


def _prog(counts, ops, unit=GB):
    b = ProgramBuilder("t", "t", np.array(counts), unit)
    for src, dst, cnt, deps in ops:
        b.add(src, dst, cnt, deps)
    return b.build()


def test_fair_sharing_alpha_and_dependencies():
    topo = tiered(2, 2, nic_bw=1.0, latency=2.0)  # alpha: 2 us per NIC hop, 1 GB/s NICs
    # two flows from GPU 0 (rail 0) to GPUs 2 and 3: they share GPU 0's NIC -> 1 GB each at 0.5 GB/s
    prog = _prog(
        [[0, 0, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]],
        [((0, Buf.INPUT, 0), (2, Buf.OUTPUT, 0), 1, ()), ((0, Buf.INPUT, 1), (3, Buf.OUTPUT, 0), 1, ())],
    )
    res = simulate(prog, topo, incast=IncastModel.off())
    assert res.time_s == pytest.approx(2.0 + 2e-6, rel=1e-9)
    # a chain of two 1-GB copies on separate NICs: sequential
    prog2 = _prog(
        [[0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]],
        [((0, Buf.INPUT, 0), (2, Buf.OUTPUT, 0), 1, ()), ((1, Buf.INPUT, 0), (3, Buf.OUTPUT, 0), 1, (0,))],
    )
    res2 = simulate(prog2, topo, incast=IncastModel.off())
    assert res2.time_s == pytest.approx(2 * (1.0 + 2e-6), rel=1e-9)
    assert res2.op_start[1] == pytest.approx(res2.op_end[0])
    util = res2.utilisation()
    assert util.max() == pytest.approx(1.0 / (2 + 4e-6), rel=1e-6)
    _edges, tl = res2.utilisation_timeline(bins=4)
    assert tl.shape == (4, len(res2.link_names)) and tl.max() <= 1.0 + 1e-9


def test_busbw_and_algbw_definitions():
    topo = tiered(2, 2, nic_bw=1.0)
    m = np.full((4, 4), GB, dtype=np.int64)
    prog = plan(topo, m, "direct", unit=GB)
    res = simulate(prog, topo, incast=IncastModel.off())
    assert res.algbw_GBps == pytest.approx(16 * GB / 4 / res.time_s / 1e9)
    assert res.busbw_GBps == pytest.approx(res.algbw_GBps * 3 / 4)


def test_per_message_and_rendezvous_costs():
    """alpha per op; stage_s only where a message beyond the eager window waits for its receiver."""
    topo = tiered(2, 1, nic_bw=1.0)
    # op 1 (1 -> 0) waits for op 0 (0 -> 1): its receiver's previous op, and op 0 does not involve rank 1's
    # send side... op 1's sender is rank 1, op 0 delivered to rank 1: a local dependency -> no rendezvous
    local = _prog(
        [[0, 1], [1, 0]],
        [((0, Buf.INPUT, 0), (1, Buf.OUTPUT, 0), 1, ()), ((1, Buf.INPUT, 0), (0, Buf.OUTPUT, 0), 1, (0,))],
    )
    assert not rendezvous(local, 0.0).any()
    model = SimModel("m", "ib", 1.0, 1.0, 5e-6, 100e-6, 0.0, IncastModel.off())
    res = simulate(local, topo, model=model)
    assert res.time_s == pytest.approx(2 * (1.0 + 5e-6), rel=1e-9)
    # three ranks: op 1 (0 -> 2) waits for op 0 (1 -> 2), which does not involve rank 0: a rendezvous
    topo3 = tiered(3, 1, nic_bw=1.0)
    counts = [[0, 0, 1], [0, 0, 1], [0, 0, 0]]
    remote = _prog(
        counts,
        [((1, Buf.INPUT, 0), (2, Buf.OUTPUT, 0), 1, ()), ((0, Buf.INPUT, 0), (2, Buf.OUTPUT, 1), 1, (0,))],
    )
    assert rendezvous(remote, 0.5 * GB).tolist() == [False, True]  # 1 GB > the 0.5 GB eager window
    assert not rendezvous(remote, 2 * GB).any()  # within the eager window: no rendezvous
    res3 = simulate(remote, topo3, model=model)
    assert res3.time_s == pytest.approx(2 * (1.0 + 5e-6) + 100e-6, rel=1e-9)
    # launched from the host step by step, no receive is posted ahead: within the eager window it still pays
    queued, host = routes(remote, topo3), routes(remote, topo3, host_launched=True)
    assert queued.rendezvous(2 * GB).tolist() == [False, False]
    assert host.rendezvous(2 * GB).tolist() == [False, True]
    eager = replace(model, eager_bytes=2 * GB)
    assert simulate_setup(queued.setup(eager), tolerance=0.0).time_s == pytest.approx(
        2 * (1.0 + 5e-6), rel=1e-9
    )
    assert simulate_setup(host.setup(eager), tolerance=0.0).time_s == pytest.approx(
        2 * (1.0 + 5e-6) + 100e-6, rel=1e-9
    )


def test_goodput_fraction_scales_scale_out_links_only():
    topo = tiered(2, 1, nic_bw=1.0)
    prog = _prog([[0, 1], [0, 0]], [((0, Buf.INPUT, 0), (1, Buf.OUTPUT, 0), 1, ())])
    model = SimModel("m", "ib", 0.5, 1.0, 0.0, 0.0, 0.0, IncastModel.off())
    assert simulate(prog, topo, model=model).time_s == pytest.approx(2.0, rel=1e-9)


def test_incast_collapses_fan_out_not_staged_schedules():
    """RoCE fan-out into one port: goodput lost when in-flight bytes overflow the buffer share; FAST's stages
    have one sender per port and lose nothing."""
    topo = load_topology("mi300x-100g", 3)
    m = np.full((24, 24), 64 * MiB, dtype=np.int64)
    np.fill_diagonal(m, 0)
    lossless = CALIBRATED_ROCE.with_incast(IncastModel.off())
    direct = plan(topo, m, "direct")
    on = simulate(direct, topo, model=CALIBRATED_ROCE, record_timeline=False)
    off = simulate(direct, topo, model=lossless, record_timeline=False)
    assert (
        on.makespan_s > 1.15 * off.makespan_s
    )  # goodput lost to retransmissions (1.26x with the shipped model)
    assert on.timeout_probability > 0 and on.time_s > on.makespan_s
    fast = plan(topo, m, "fast")
    assert simulate(fast, topo, model=CALIBRATED_ROCE).time_s == pytest.approx(
        simulate(fast, topo, model=lossless).time_s, rel=1e-9
    )


def test_lossless_transports_and_ideal_topologies_have_no_incast():
    topo = load_topology("dgx-h100", 2)
    m = np.full((16, 16), 64 * MiB, dtype=np.int64)
    res = simulate(plan(topo, m, "direct"), topo, record_timeline=False)
    assert res.model.transport == "ib" and res.timeout_probability == 0.0
    ideal = tiered(2, 2, nic_bw=1.0)
    assert (
        simulate(plan(ideal, np.full((4, 4), GB, dtype=np.int64), "direct"), ideal).model.transport == "ideal"
    )


def test_timeouts_follow_the_longest_exposure():
    inc = replace(CALIBRATED_ROCE.incast, storm_s=1.0, shape=2.0, rto_s=ROCE_RTO_S)
    from a2acc.analysis.incast import timeout_penalty

    t, p = timeout_penalty(inc, 0.5, [(0.1, 1.0), (0.0, 0.5)])
    assert p == pytest.approx(1 - np.exp(-(1.0 + 0.25)))
    assert t == pytest.approx((1 - p) * 0.5 + p * (0.1 + ROCE_RTO_S))
    assert timeout_penalty(inc, 0.5, []) == (0.5, 0.0)


def test_plan_for_another_topology_is_refused():
    topo = load_topology("dgx-h100", 2)
    prog = plan(topo, np.full((16, 16), MiB, dtype=np.int64), "direct")
    with pytest.raises(InputError, match="another topology"):
        simulate(prog, load_topology("mi300x", 2))


@pytest.mark.parametrize(
    ("fill_gb", "stage_s", "start"),
    [
        (0.3, 0.0, 1.0),  # the sender stages its fill while the receiver is still busy: hidden
        (0.8, 0.0, 1.3),  # a longer fill than the receiver's wait: the rest of it shows
        (0.3, 0.1, 1.1),  # the receiver's clear-to-send comes after it is ready: the rendezvous shows
        (0.8, 0.1, 1.3),  # both: the later one counts
    ],
)
def test_fill_after_the_sender_side_rendezvous_after_the_receiver_side(fill_gb, stage_s, start):
    """Op 2 (0 -> 2) waits for op 1 (0 -> 1, its sender's side, ends at 0.5 s) and op 0 (1 -> 2, its receiver's
    side, ends at 1 s): it is ready at max(0.5 + fill, 1 + rendezvous), then streams 1 GB at 1 GB/s."""
    from a2acc.analysis.fastsim import simulate_fast

    topo = tiered(3, 1, nic_bw=1.0, latency=0.0)
    counts = [[0, 1, 2], [0, 0, 2], [0, 0, 0]]  # chunks of 0.5 GB
    b = ProgramBuilder("t", "t", np.array(counts), GB // 2)
    b.add((1, Buf.INPUT, 0), (2, Buf.OUTPUT, 2), 2)
    b.add((0, Buf.INPUT, 0), (1, Buf.OUTPUT, 0), 1)
    b.add((0, Buf.INPUT, 1), (2, Buf.OUTPUT, 0), 2, (0, 1))
    prog = b.build()
    model = SimModel("m", "ib", 1.0, 1.0, 0.0, stage_s, 0.5 * GB, IncastModel.off(), "t", fill_gb * GB)
    for res in (simulate(prog, topo, model=model), simulate_fast(prog, topo, model=model, tolerance=0.0)):
        assert res.op_end[2] == pytest.approx(start + 1.0, rel=1e-9)


@pytest.mark.parametrize(
    ("sender_gb", "onset_gb", "host", "start"),
    [
        (0.5, 0.3, False, 1.0),  # pushed into a busy port at 0.5 s; the rate recovered while it waited
        (0.5, 0.8, False, 1.3),  # recovery outlasts the wait: 0.5 + 0.8 s
        (1.0, 0.4, False, 1.4),  # lockstep: sender and port free together; the whole onset shows
        (1.5, 0.8, False, 1.5),  # the port was free when the sender came: no onset
        (0.5, 0.8, True, 1.0),  # host-launched: nothing is pushed before the step is launched
    ],
)
def test_incast_onset_when_the_sender_pushes_into_a_busy_port(sender_gb, onset_gb, host, start):
    """Op 2 (0 -> 2) follows op 1 (0 -> 1: its sender's side, ends at ``sender_gb`` s) and op 0 (1 -> 2: the
    previous message on its receive port, ends at 1 s). A sender ready while the port is still busy loses
    ``min(1 GB, onset)`` at 1 GB/s from the moment it was ready, less the wait: every engine the same."""
    from a2acc.analysis.fastsim import simulate_fast
    from a2acc.analysis.levels import SoloBatch

    topo = tiered(3, 1, nic_bw=1.0, latency=0.0)
    half = round(sender_gb * 2)
    counts = [[0, half, 2], [0, 0, 2], [0, 0, 0]]  # chunks of 0.5 GB
    b = ProgramBuilder("t", "t", np.array(counts), GB // 2)
    b.add((1, Buf.INPUT, 0), (2, Buf.OUTPUT, 2), 2)
    b.add((0, Buf.INPUT, 0), (1, Buf.OUTPUT, 0), half)
    b.add((0, Buf.INPUT, half), (2, Buf.OUTPUT, 0), 2, (0, 1))
    prog = b.build()
    model = SimModel("m", "roce", 1.0, 1.0, 0.0, 0.0, 4 * GB, IncastModel.off(), "t", 0.0, onset_gb * GB)
    r = routes(prog, topo, host_launched=host)
    ends = [
        simulate(prog, topo, model=model).op_end[2] if not host else None,
        simulate_setup(r.setup(model), tolerance=0.0, native=False).op_end[2],
        simulate_setup(r.setup(model), tolerance=0.0).op_end[2],
        SoloBatch([r]).makespans(model)[0],
    ]
    for got in ends:
        if got is not None:
            assert got == pytest.approx(start + 1.0, rel=1e-9)
    assert simulate_fast(prog, topo, model=replace(model, onset_bytes=0.0)).op_end[2] == pytest.approx(
        max(sender_gb, 1.0) + 1.0, rel=1e-9
    )
