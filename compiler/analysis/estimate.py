"""The ranking estimate: a Program's completion time under the simulator's model, in O(ops log ops).

A planner that chooses between Programs by their time (fast's shape search) needs them ranked, not timed to the
last per cent, and the simulator (:mod:`a2acc.analysis.fastsim`) re-solves max-min fair shares of every flow
in the contended component at every event: at 8 x 8 GPUs one of fast's candidates takes it a quarter of a
second. The estimate keeps everything of the simulator's model but one thing. The same routes, binding links
and capacities (:func:`a2acc.analysis.simulate.routes_by_pair`), latencies, per-message cost, rendezvous and
pipeline fill of synchronised steps (:meth:`~a2acc.analysis.simulate.Routes.step_delays`) and the same DAG;
what changes is how links are shared:

- **each op is served by one link of its route**, its *bottleneck*: the binding link with the most bytes to
  carry over the whole Program relative to its capacity (the first such link of the route on a tie);
- **the ops a link serves share it equally** (processor sharing, per link and stage label: what a plan runs
  together), as the simulator's route groups do (``fastsim``, module docstring 2): one heap entry per arrival
  and departure, no max-min solve. The op's other links do not slow it.

So a link never serves more than its capacity, and an op alone on its route is timed exactly; where an op is
held back by its other link the estimate is optimistic, where a link's own ops would leave it idle it is too.
**Incast** (lossy fabrics) is charged per receive link and stage, as if every sender of that stage into the
link were active together: the goodput the incast model gives that fan-in and those bytes in flight
(:meth:`a2acc.analysis.incast.IncastModel.efficiency`, with the congested ports of the same switch and stage)
scales the link's capacity before the bottleneck is chosen. Retransmission timeouts are not estimated.

How close it comes (docs/planners.md, "How fast plans online"; ``benchmarks/fast_estimate.py``): on fast's
candidate shapes at 4x8 on dgx-h100 and mi300x (seeds 2-3, 1 MiB-1 GiB/GPU, four traffic kinds) the shape the
estimate ranks first simulates within 0.2 % of the best shape on average (4.5 % at worst), every candidate's
estimate within -5 % to +1.5 % of the simulator on dgx-h100.

The reference is this module: the preparation in numpy, the events in the simulator's own Python loop
(:func:`a2acc.analysis.fastsim.run_events`) with every op in a processor-sharing queue. The compiled core
(``compiler/native/estimate.c``, run when it was built) does both in one call, operation by operation as the
reference, so the estimate is the same float (``tests/analysis/test_estimate.py``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import numpy.typing as npt

from a2acc.analysis.fastsim import DEFAULT_TOLERANCE, run_events
from a2acc.analysis.incast import IncastModel
from a2acc.analysis.model import SimModel
from a2acc.analysis.simulate import (
    PAIR_TABLE_MAX_RANKS,
    Setup,
    check_ranks,
    check_topology,
    link_capacity,
    pair_routes,
    resolve_model,
    routes_by_pair,
)
from a2acc.errors import InternalError
from a2acc.ir import Program
from a2acc.ir.program import Priced
from a2acc.model.topology import Topology
from a2acc.native import carray
from a2acc.native import estimate as _native


def estimate(
    prog: Priced,
    topo: Topology,
    model: SimModel | None = None,
    *,
    above: float = math.inf,
    native: bool | None = None,
) -> float:
    """The estimated completion time of ``prog`` on ``topo`` under ``model`` (default: the topology's), in
    seconds (module docstring); ``inf`` when it is more than ``above`` (a search's best so far: the compiled
    core stops such a candidate as soon as a bound or its events pass ``above``). ``native``: None runs the
    compiled core when it was built, False the reference, True the core (an error without it)."""
    mdl = resolve_model(topo, model, None)
    if not len(prog.table):
        return 0.0
    if native and _native is None:
        raise InternalError("the compiled estimate is not built")
    if _native is not None and native is not False and prog.table.ids is None:
        return _estimate_native(prog, topo, mdl, above)
    if not isinstance(prog, Program):
        raise InternalError("the reference estimate prices Programs, not drafts")
    # incast is charged statically below; the events see a lossless fabric (no fluid flows to re-rate), and no
    # incast onset at step boundaries (as the compiled core: on lossy fabrics the simulator confirms the pick)
    st = routes_by_pair(prog, topo).setup(dataclasses.replace(mdl, incast=IncastModel.off(), onset_bytes=0.0))
    stage = np.asarray(prog.table.stage, dtype=np.int64)
    solo = np.asarray(st.size <= 0, dtype=bool)
    grp, rate = _queues(st, stage, mdl.incast)
    grp[solo] = -1
    _start, end, _episodes = run_events(st, solo, grp, rate, DEFAULT_TOLERANCE, native=native)
    makespan = float(np.nanmax(end))
    return makespan if makespan <= above else math.inf


def prices_drafts() -> bool:
    """Whether :func:`estimate` can price a search's drafts (op columns, not a Program): with the compiled
    core; the reference prices Programs."""
    return _native is not None


def link_bound(
    prog: Priced, topo: Topology, model: SimModel | None = None, *, native: bool | None = None
) -> float:
    """A floor under ``prog``'s simulated time (seconds): its most loaded binding link's bytes over that link's
    capacity under ``model`` (goodput applied; incast, latencies and step costs only add). The simulator shares
    every link max-min fairly and never serves more than its capacity, so no run of the Program ends sooner.

    The estimate's processor-sharing queues are per link *and stage*, so an estimate can fall below this floor
    where two stages' ops share a link at once; a search that skips a candidate whose floor is past its best so
    far skips only what would have won by that optimism (:func:`a2acc.planners.fast.search.choose`). The floor
    depends on the ops alone, not on their dependencies: every shape of one plan has the same. 0.0 past the
    tabulated rank count (:data:`a2acc.analysis.simulate.PAIR_TABLE_MAX_RANKS`): no floor known. ``native``:
    None sums the loads in the compiled core when it was built (the same float), False in numpy."""
    if not len(prog.table) or topo.nranks > PAIR_TABLE_MAX_RANKS:
        return 0.0
    _check_ranks(prog, topo)
    mdl = resolve_model(topo, model, None)
    pr = pair_routes(topo)
    t = prog.table
    if _native is not None and native is not False:  # the same float, summed in the same order
        return _native.link_floor(
            carray(t.src_rank, np.int64),
            carray(t.dst_rank, np.int64),
            carray(t.cnt, np.int64),
            float(prog.unit_bytes),
            pr.nranks,
            pr.bind,
            pr.bind.shape[1],
            link_capacity(pr.raw_cap, pr.eff_class, mdl),
        )
    cap = np.append(link_capacity(pr.raw_cap, pr.eff_class, mdl), np.inf)
    bind = pr.bind[
        np.asarray(t.src_rank, dtype=np.int64) * pr.nranks + np.asarray(t.dst_rank, dtype=np.int64)
    ]
    size = np.asarray(t.cnt, dtype=np.float64) * float(prog.unit_bytes)
    load = np.bincount(bind.ravel(), weights=np.repeat(size, bind.shape[1]), minlength=len(cap))
    return float(np.max(load / cap))


def _check_ranks(prog: Priced, topo: Topology) -> None:
    """The simulator's refusal of a plan for another rank count (a Program's, for another topology first)."""
    if prog.nranks == topo.nranks:
        return
    if isinstance(prog, Program):
        check_topology(prog, topo)
    check_ranks(prog.nranks, topo)


def _queues(
    st: Setup, stage: npt.NDArray[np.int64], incast: IncastModel
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Per op: its processor-sharing queue (bottleneck link and stage, numbered in sorted order) and the
    queue's rate (the link's capacity, scaled by the stage's incast on a receive link)."""
    n, k = st.bind.shape
    nl = len(st.cap)
    cap = np.append(st.cap, np.inf)[st.bind]  # per (op, binding link)
    if incast.enabled:
        on_rx = (st.bind == st.rx[:, None]) & (st.rx[:, None] >= 0)
        cap = np.where(on_rx, cap * _incast_efficiency(st, stage, incast)[:, None], cap)
    load = np.bincount(st.bind.ravel(), weights=np.repeat(st.size, k), minlength=nl + 1)
    rows = np.arange(n)
    pick = np.argmax(load[st.bind] / cap, axis=1)
    link = st.bind[rows, pick]
    key = link * np.int64(int(stage.max(initial=0)) + 1) + stage
    _uniq, grp = np.unique(key, return_inverse=True)
    return np.asarray(grp, dtype=np.int64).reshape(-1), cap[rows, pick]


def _incast_efficiency(
    st: Setup, stage: npt.NDArray[np.int64], incast: IncastModel
) -> npt.NDArray[np.float64]:
    """Per op, the goodput fraction of its receive link in its stage (1 for ops without one): the fan-in is
    every sender of that stage into the link, the bytes in flight each sender's bytes there, at most a window
    (:func:`a2acc.analysis.simulate.incast_capacity` over all of them at once)."""
    eff = np.ones(len(stage))
    ops = np.flatnonzero(st.rx >= 0)
    if not len(ops):
        return eff
    stages = np.int64(int(stage.max(initial=0)) + 1)
    port = st.rx[ops] * stages + stage[ops]  # (receive link, stage)
    pair, pair_of = np.unique(port * np.int64(st.nranks) + st.src[ops], return_inverse=True)
    pair_bytes = np.bincount(pair_of.reshape(-1), weights=st.size[ops])
    ports, port_of, fan_in = np.unique(pair // st.nranks, return_inverse=True, return_counts=True)
    inflight = np.bincount(port_of.reshape(-1), weights=np.minimum(pair_bytes, incast.window_bytes))
    congested = fan_in >= 2
    switch = st.rx_switch[ports // stages] * stages + ports % stages  # (switch, stage)
    n_cong = np.bincount(switch[congested], minlength=int(switch.max()) + 1)[switch]
    q = incast.buffer_bytes * incast.dt_alpha / (1.0 + incast.dt_alpha * np.maximum(n_cong, 1))
    over = congested & (inflight > q)
    port_eff = np.ones(len(ports))
    if over.any():
        # libm's power per port, as the simulator's incast_capacity (numpy's may differ in the last bit)
        waste = incast.retransmit * np.array(
            [math.pow(float(max(x - 1, 1)), incast.fanin_loss) for x in fan_in[over].tolist()]
        )
        port_eff[over] = 1.0 / (1.0 + waste * (1.0 - q[over] / inflight[over]))
    eff[ops] = port_eff[np.searchsorted(ports, port)]
    return eff


def _estimate_native(prog: Priced, topo: Topology, mdl: SimModel, above: float) -> float:
    """:func:`estimate` by the compiled core: the op columns and the topology's pair routes in one call."""
    if _native is None:  # pragma: no cover - the caller checked
        raise InternalError("the compiled estimate is not built")
    _check_ranks(prog, topo)
    pr = pair_routes(topo)
    t = prog.table
    inc = mdl.incast
    incast = (
        (inc.buffer_bytes, inc.window_bytes, inc.dt_alpha, inc.retransmit, inc.fanin_loss)
        if inc.enabled
        else None
    )
    return _native.estimate(
        carray(t.src_rank, np.int64),
        carray(t.dst_rank, np.int64),
        carray(t.cnt, np.int64),
        carray(t.stage, np.int64),
        carray(t.dep_ptr, np.int64),
        carray(t.dep_ids, np.int64),
        float(prog.unit_bytes),
        pr.nranks,
        pr.bind,
        pr.bind.shape[1],
        pr.alpha,
        pr.rx,
        link_capacity(pr.raw_cap, pr.eff_class, mdl),
        pr.rx_switch,
        float(mdl.alpha_s),
        float(mdl.stage_s),
        float(mdl.eager_bytes),
        float(mdl.fill_bytes),
        incast,
        float(above),
    )
