"""Flow-level simulator of a Program on a topology: the event-driven reference.

The model (the same in :mod:`a2acc.analysis.fastsim`, which is what ``a2acc simulate`` and ``compare`` run;
docs/simulator.md; parameters in :mod:`a2acc.analysis.model`):

- An op is *ready* when every op it depends on has finished. After its latency - the link latencies of its
  route, plus ``alpha_s`` per message, plus ``stage_s`` when it starts a later stage than every op it waits
  for - it becomes an active flow of ``cnt * unit_bytes`` bytes (a zero-byte op finishes right then).
- Active flows share link capacities **max-min fairly** (progressive filling, recomputed whenever a flow
  starts or ends). A GPU-to-GPU flow occupies every link of its route (GPU -> NVSwitch -> GPU, mesh/ring hops,
  GPU -> NIC -> network -> NIC -> GPU); a local copy occupies its GPU's memory link (``memory_bandwidth``).
  Capacities are the topology's times the model's goodput fraction (scale-out links: ``inter_efficiency``,
  scale-up links: ``intra_efficiency``).
- Scale-out receive links lose goodput under incast (:mod:`a2acc.analysis.incast`), evaluated on the active
  set; overload episodes add the expected retransmission-timeout delay to the completion time.

Reported: completion time (expected, timeouts included) and the fluid makespan; ``algbw`` in FAST's definition
(total bytes / N / time, GB/s with 1e9); ``busbw = algbw * (N-1)/N`` (nccl-tests' all-to-all factor);
per-link busy bytes and a utilisation timeline. Bytes are the padded bytes the Program moves (chunks x unit)
unless ``payload_bytes`` is given.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from a2acc.analysis.incast import Episode, IncastModel, timeout_penalty
from a2acc.analysis.model import SimModel, default_model
from a2acc.errors import InputError, InternalError
from a2acc.hashing import mix64
from a2acc.ir import Program
from a2acc.model.topology import Topology
from a2acc.segments import segment_positions

T = TypeVar("T")
#: links at least this fast never bind (the topology's PCIe/C2C attachment and non-blocking core: 1e15 B/s)
UNBOUNDED = 1e14
Timeline = tuple[tuple[float, float, npt.NDArray[np.int64], npt.NDArray[np.float64]], ...]


@dataclass(frozen=True)
class SimResult:
    """Outcome of a simulation. ``time_s`` is the expected completion time (timeouts included)."""

    time_s: float
    nranks: int
    total_bytes: int
    op_start: npt.NDArray[np.float64]
    op_end: npt.NDArray[np.float64]
    link_names: tuple[str, ...]
    link_busy_bytes: npt.NDArray[np.float64]
    link_capacity: npt.NDArray[np.float64]
    timeline: Timeline = field(default=(), repr=False)
    makespan_s: float = 0.0
    timeout_probability: float = 0.0
    model: SimModel = field(default_factory=SimModel)
    engine: str = "reference"
    #: the incast overload episodes the timeout expectation was computed from
    episodes: tuple[Episode, ...] = field(default=(), repr=False)

    @property
    def algbw_GBps(self) -> float:
        return self.total_bytes / self.nranks / self.time_s / 1e9 if self.time_s > 0 else float("inf")

    @property
    def busbw_GBps(self) -> float:
        return self.algbw_GBps * (self.nranks - 1) / self.nranks

    def utilisation(self) -> npt.NDArray[np.float64]:
        """Average utilisation of each link over the whole run (busy bytes / (capacity x time))."""
        if self.time_s <= 0:
            return np.zeros_like(self.link_busy_bytes)
        return self.link_busy_bytes / (self.link_capacity * self.time_s)

    def utilisation_timeline(self, bins: int = 50) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(bin edges, array [bins, links]) of average utilisation per time bin (reference engine only)."""
        edges = np.linspace(0.0, self.time_s, bins + 1)
        out = np.zeros((bins, len(self.link_names)))
        width = self.time_s / bins if bins else 0.0
        for t0, t1, links, util in self.timeline:
            if t1 <= t0 or width <= 0:
                continue
            b0 = min(int(t0 / width), bins - 1)
            b1 = min(int(t1 / width), bins - 1)
            for b in range(b0, b1 + 1):
                lo, hi = max(t0, edges[b]), min(t1, edges[b + 1])
                if hi > lo:
                    out[b, links] += util * (hi - lo) / width
        return edges, out


# ---------------------------------------------------------------------------------------------- preparation
@dataclass(frozen=True)
class Setup:
    """Everything both engines need, computed once: capacities, routes, latencies, the DAG."""

    nranks: int
    cap: npt.NDArray[np.float64]  # per link (topology links, then one memory link per rank), bytes/s
    names: tuple[str, ...]
    size: npt.NDArray[np.float64]  # per op, bytes
    lat: npt.NDArray[np.float64]  # per op, seconds from ready to active
    path_ptr: npt.NDArray[np.int64]  # CSR of every link of each op's route
    path_links: npt.NDArray[np.int64]
    bind: npt.NDArray[
        np.int64
    ]  # [n_ops, K] binding links per op, padded with len(cap) (a dummy, never binds)
    rx: npt.NDArray[np.int64]  # the scale-out receive link of each op's route, or -1
    src: npt.NDArray[np.int64]  # sending rank per op
    rx_switch: npt.NDArray[np.int64]  # per link: the switch a receive link hangs off (-1 for other links)
    dep_ptr: npt.NDArray[np.int64]
    dep_ids: npt.NDArray[np.int64]
    succ_ptr: npt.NDArray[np.int64]
    succ_ids: npt.NDArray[np.int64]
    model: SimModel
    #: per successor edge (aligned with ``succ_ids``): how long after its dependency ends the successor may start
    #: (None: 0 everywhere). A synchronised op waits ``fill`` after its sender's side and the rendezvous after its
    #: receiver's side (:meth:`Routes.setup`); both engines take an op's ready time as the latest of these.
    succ_delay: npt.NDArray[np.float64] | None = None
    #: incast onset at step boundaries (:meth:`Routes.onset`): per op the time a message loses when its sender
    #: pushed into a receive port that was still busy (0: never; None: no op can), and per successor edge
    #: whether its dependency is on the successor's sender side (1), ended on the same scale-out receive port
    #: (2) or neither (0)
    onset: npt.NDArray[np.float64] | None = None
    succ_side: npt.NDArray[np.int8] | None = None
    #: what an engine derives from the routes and the DAG alone (model-independent), shared by every Setup of
    #: one :class:`Routes`: calibration simulates one Program under many models
    cache: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def n_ops(self) -> int:
        return len(self.size)

    def derived(self, key: str, make: Callable[[], T]) -> T:
        """``make()``, remembered in :attr:`cache` under ``key`` when there is one (it depends only on the routes
        and the DAG: the exclusive links, the route groups)."""
        if self.cache is None:
            return make()
        got = self.cache.get(key)
        if got is None:
            got = self.cache[key] = make()
        return cast(T, got)

    def busy_bytes(self) -> npt.NDArray[np.float64]:
        """Bytes each link carries over the whole run (every op's bytes cross every link of its route)."""
        per_entry = np.repeat(self.size, np.diff(self.path_ptr))
        return np.bincount(self.path_links, weights=per_entry, minlength=len(self.cap)).astype(np.float64)


def check_topology(prog: Program, topo: Topology) -> None:
    """Refuse a plan built for another topology (or recorded under another fingerprint definition), or of
    another rank count."""
    why = topo.plan_mismatch(prog.topology)
    if why is not None:
        raise InputError("", "--topology", topo.name, why)
    check_ranks(prog.nranks, topo)


def check_ranks(nranks: int, topo: Topology) -> None:
    """Refuse a plan of another rank count than the topology's."""
    if nranks != topo.nranks:
        raise InputError(
            "", "--topology", topo.name, f"the plan has {nranks} ranks, the topology {topo.nranks}"
        )


def resolve_model(topo: Topology, model: SimModel | None, incast: IncastModel | None) -> SimModel:
    """The model to simulate with: ``model`` or the topology's default; ``incast`` replaces its incast part."""
    m = model if model is not None else default_model(topo)
    return m.with_incast(incast) if incast is not None else m


@dataclass(frozen=True)
class Routes:
    """The model-independent part of :class:`Setup` (routes, DAG), built once per Program and topology:
    calibration re-derives a Setup for every candidate parameter set from it. ``host_launched``: the Program
    runs as an executor that launches each step from the host after waiting for the previous one
    (:func:`routes`)."""

    prog: Program
    nranks: int
    raw_cap: npt.NDArray[np.float64]
    eff_class: npt.NDArray[
        np.int8
    ]  # per link: 0 unaffected, 1 scale-out (inter_efficiency), 2 scale-up (intra)
    names: tuple[str, ...]
    size: npt.NDArray[np.float64]
    src: npt.NDArray[np.int64]
    route_alpha: npt.NDArray[np.float64]
    path_ptr: npt.NDArray[np.int64]
    path_links: npt.NDArray[np.int64]
    bind: npt.NDArray[np.int64]
    rx: npt.NDArray[np.int64]
    rx_switch: npt.NDArray[np.int64]
    dep_ptr: npt.NDArray[np.int64]
    dep_ids: npt.NDArray[np.int64]
    succ_ptr: npt.NDArray[np.int64]
    succ_ids: npt.NDArray[np.int64]
    host_launched: bool = False
    _sync: list[tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64]]] = field(
        default_factory=list, compare=False, repr=False
    )
    _sides: list[npt.NDArray[np.bool_]] = field(default_factory=list, compare=False, repr=False)
    _derived: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def synchronised(self) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64]]:
        if not self._sync:
            self._sync.append(synchronised(self.prog))
        return self._sync[0]

    def rendezvous(self, eager_bytes: float) -> npt.NDArray[np.bool_]:
        """Per op: does it pay the rendezvous? A synchronised message larger than the eager window; every
        synchronised message of a host-launched Program (no receive is posted before its step is launched)."""
        sync, msg = self.synchronised()
        return sync if self.host_launched else sync & (msg > eager_bytes)

    def sender_side(self) -> npt.NDArray[np.bool_]:
        """Per successor edge (aligned with ``succ_ids``): does the dependency involve the successor's sender (it
        sent or received it)? The other edges are the successor's receiver side (:func:`synchronised`)."""
        if not self._sides:
            n = len(self.size)
            owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(self.succ_ptr))
            self._sides.append(dep_sender_side(self.src, self.prog.table.dst_rank, self.succ_ids, owner))
        return self._sides[0]

    def fill_time(self, cap: npt.NDArray[np.float64], fill_bytes: float) -> npt.NDArray[np.float64]:
        """Per op, the pipeline fill a synchronised message pays: ``min(message, fill_bytes)`` at its route's
        slowest link (0 for ops that do not start in step with their receiver)."""
        sync, msg = self.synchronised()
        out = np.zeros(len(sync))
        ids = np.flatnonzero(sync)
        if len(ids):
            ext = np.append(cap, np.inf)
            rate = ext[self.bind[ids]].min(axis=1)
            out[ids] = np.minimum(msg[ids], fill_bytes) / rate
        return out

    def step_delays(self, cap: npt.NDArray[np.float64], model: SimModel) -> npt.NDArray[np.float64] | None:
        """Per successor edge, the delay :attr:`Setup.succ_delay` (None when there is none): a synchronised op
        (it starts in step with its receiver) may start ``fill`` after its sender's side is done - the sender
        stages the message's first ``min(message, fill_bytes)`` bytes through its pipeline while it waits - and
        ``stage_s`` after its receiver's side is done when the message is larger than the eager window (the
        receiver's clear-to-send of a rendezvous). The later of the two counts: whichever side arrives first
        hides its part (docs/simulator.md)."""
        if not len(self.succ_ids) or (model.fill_bytes <= 0 and model.stage_s <= 0):
            return None
        sync, _msg = self.synchronised()
        if not sync.any():
            return None
        fill = self.fill_time(cap, model.fill_bytes) if model.fill_bytes > 0 else np.zeros(len(sync))
        hand = model.stage_s * self.rendezvous(model.eager_bytes)
        succ = self.succ_ids
        return np.where(self.sender_side(), fill[succ], hand[succ])

    def onset(self, cap: npt.NDArray[np.float64], model: SimModel) -> npt.NDArray[np.float64] | None:
        """Per op, what incast onset at a step boundary costs it (None when no op can pay it): a synchronised
        message into a scale-out receive port, of a Program whose receives are posted ahead (not host-launched),
        loses ``min(message, onset_bytes)`` at its route's slowest link. Whether it pays, and how much of it its
        wait hides, is decided when it is ready (:func:`onset_delay`)."""
        if model.onset_bytes <= 0 or self.host_launched:
            return None
        sync, msg = self.synchronised()
        ids = np.flatnonzero(sync & (self.rx >= 0))
        if not len(ids):
            return None
        out = np.zeros(len(sync))
        rate = np.append(cap, np.inf)[self.bind[ids]].min(axis=1)
        out[ids] = np.minimum(msg[ids], model.onset_bytes) / rate
        return out

    def succ_sides(self) -> npt.NDArray[np.int8]:
        """Per successor edge (aligned with ``succ_ids``): 1 when the dependency is on the successor's sender
        side, 2 when it ended on the successor's scale-out receive port (the port's previous message), else
        0."""
        got = self._derived.get("succ_sides")
        if got is None:
            owner = np.repeat(np.arange(len(self.size), dtype=np.int64), np.diff(self.succ_ptr))
            port = (self.rx[owner] >= 0) & (self.rx[owner] == self.rx[self.succ_ids])
            got = np.where(self.sender_side(), 1, np.where(port, 2, 0)).astype(np.int8)
            self._derived["succ_sides"] = got
        return np.asarray(got, dtype=np.int8)

    def setup(self, model: SimModel) -> Setup:
        """Capacities and latencies under ``model``."""
        cap = link_capacity(self.raw_cap, self.eff_class, model)
        lat = self.route_alpha + model.alpha_s
        onset = self.onset(cap, model)
        return Setup(
            nranks=self.nranks,
            cap=cap,
            names=self.names,
            size=self.size,
            lat=np.asarray(lat, dtype=np.float64),
            path_ptr=self.path_ptr,
            path_links=self.path_links,
            bind=self.bind,
            rx=self.rx,
            src=self.src,
            rx_switch=self.rx_switch,
            dep_ptr=self.dep_ptr,
            dep_ids=self.dep_ids,
            succ_ptr=self.succ_ptr,
            succ_ids=self.succ_ids,
            model=model,
            succ_delay=self.step_delays(cap, model),
            onset=onset,
            succ_side=None if onset is None else self.succ_sides(),
            cache=self._derived,
        )


def link_capacity(
    raw_cap: npt.NDArray[np.float64], eff_class: npt.NDArray[np.int8], model: SimModel
) -> npt.NDArray[np.float64]:
    """Every link's capacity under ``model``: its raw capacity times the goodput of its class."""
    factor = np.array([1.0, model.inter_efficiency, model.intra_efficiency])
    return np.asarray(raw_cap * factor[eff_class], dtype=np.float64)


def prepare(prog: Program, topo: Topology, model: SimModel) -> Setup:
    """Routes, capacities and latencies of every op of ``prog`` on ``topo`` under ``model``."""
    return routes(prog, topo).setup(model)


def _links(topo: Topology) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int8]]:
    """Every link's raw capacity (topology links, then one memory link per rank) and its goodput class (0
    unaffected, 1 scale-out: ``inter_efficiency``, 2 scale-up: ``intra_efficiency``)."""
    n = topo.nranks
    cls = {"nic_tx": 1, "nic_rx": 1, "direct": 1, "intra": 2}
    raw_cap = np.array(list(topo.link_bandwidths) + [topo.memory_bandwidth * 1e9] * n, dtype=np.float64)
    eff_class = np.array([cls.get(k, 0) for k in topo.link_kinds] + [0] * n, dtype=np.int8)
    return raw_cap, eff_class


@dataclass(frozen=True)
class PairRoutes:
    """What every op between one pair of ranks shares on a topology, for all pairs (``src * nranks + dst``):
    its binding links (``[pairs, K]``, padded with the link count), route latency and scale-out receive link
    (or -1); and per link its raw capacity, goodput class and receive switch. A Program's routes are then one
    gather per op (:func:`routes_by_pair`), without the full paths."""

    nranks: int
    raw_cap: npt.NDArray[np.float64]
    eff_class: npt.NDArray[np.int8]
    bind: npt.NDArray[np.int64]
    alpha: npt.NDArray[np.float64]
    rx: npt.NDArray[np.int64]
    rx_switch: npt.NDArray[np.int64]


#: topologies whose pair routes are kept (by fingerprint), and the largest rank count tabulated (all pairs)
_PAIRS_KEPT = 8
PAIR_TABLE_MAX_RANKS = 512
_PAIRS: dict[str, PairRoutes] = {}


def pair_routes(topo: Topology) -> PairRoutes:
    """Every rank pair's routes on ``topo`` (:class:`PairRoutes`), remembered for the last few topologies (a
    search estimates several candidates on one topology). Up to :data:`PAIR_TABLE_MAX_RANKS` ranks."""
    n = topo.nranks
    if n > PAIR_TABLE_MAX_RANKS:
        raise InternalError(f"pair routes are tabulated up to {PAIR_TABLE_MAX_RANKS} ranks, not {n}")
    got = _PAIRS.get(topo.fingerprint)
    if got is not None:
        return got
    raw_cap, eff_class = _links(topo)
    src = np.repeat(np.arange(n, dtype=np.int64), n)
    dst = np.tile(np.arange(n, dtype=np.int64), n)
    path_ptr, path_links, alpha = _routes(topo, src, dst)
    entry = np.repeat(np.arange(n * n, dtype=np.int64), np.diff(path_ptr))
    bind = _binding_links(raw_cap, path_ptr, path_links, entry, n * n)
    rx, rx_switch = _receive_links(topo, path_links, entry, n * n, len(raw_cap))
    got = PairRoutes(n, raw_cap, eff_class, bind, np.asarray(alpha, dtype=np.float64), rx, rx_switch)
    if len(_PAIRS) >= _PAIRS_KEPT:
        _PAIRS.pop(next(iter(_PAIRS)))
    _PAIRS[topo.fingerprint] = got
    return got


def routes_by_pair(prog: Program, topo: Topology) -> Routes:
    """:func:`routes` from the topology's :class:`PairRoutes`: the same binding links, latencies, receive
    links and DAG (so the same :class:`Setup` under any model), without each op's full path - no link names,
    no busy bytes (what an estimate of many candidates needs, for a gather per op)."""
    check_topology(prog, topo)
    pr = pair_routes(topo)
    t = prog.table
    pair = np.asarray(t.src_rank, dtype=np.int64) * np.int64(prog.nranks) + np.asarray(
        t.dst_rank, dtype=np.int64
    )
    dep_ptr, dep_ids, succ_ptr, succ_ids = _dag_csr(prog)
    none = np.zeros(0, dtype=np.int64)
    return Routes(
        prog=prog,
        nranks=prog.nranks,
        raw_cap=pr.raw_cap,
        eff_class=pr.eff_class,
        names=(),
        size=t.cnt.astype(np.float64) * float(prog.unit_bytes),
        src=np.asarray(t.src_rank, dtype=np.int64),
        route_alpha=pr.alpha[pair],
        path_ptr=np.zeros(len(t) + 1, dtype=np.int64),
        path_links=none,
        bind=pr.bind[pair],
        rx=pr.rx[pair],
        rx_switch=pr.rx_switch,
        dep_ptr=dep_ptr,
        dep_ids=dep_ids,
        succ_ptr=succ_ptr,
        succ_ids=succ_ids,
    )


def routes(prog: Program, topo: Topology, *, host_launched: bool = False) -> Routes:
    """The model-independent preparation of ``prog`` on ``topo`` (refuses a plan built for another topology).

    ``host_launched``: ``prog`` runs as an executor that launches each step from the host once the previous one
    has finished (FAST's implementation: ``hipStreamSynchronize``, then the next step's grouped send/recv, FAST
    repository ``amd/test_alltoall.cpp``, ``fastAllToAll2``). Such a step's receives are posted only when it is
    launched, so none of its messages can use the eager window: every synchronised message pays the rendezvous
    (:meth:`Routes.rendezvous`). a2acc's executors, nccl-tests and grouped calls queued on a stream post their
    receives ahead (the default)."""
    check_topology(prog, topo)
    n = prog.nranks
    n_ops = len(prog.table)
    raw_cap, eff_class = _links(topo)
    names = tuple(f"{u}->{v}" for u, v in topo.link_names) + tuple(f"mem{r}" for r in range(n))
    t = prog.table
    src = np.asarray(t.src_rank, dtype=np.int64)
    dst = np.asarray(t.dst_rank, dtype=np.int64)
    size = t.cnt.astype(np.float64) * float(prog.unit_bytes)
    path_ptr, path_links, route_alpha = _routes(topo, src, dst)
    entry_op = np.repeat(np.arange(n_ops, dtype=np.int64), np.diff(path_ptr))
    bind = _binding_links(raw_cap, path_ptr, path_links, entry_op, n_ops)
    rx, rx_switch = _receive_links(topo, path_links, entry_op, n_ops, len(raw_cap))
    dep_ptr, dep_ids, succ_ptr, succ_ids = _dag_csr(prog)
    return Routes(
        prog=prog,
        nranks=n,
        raw_cap=raw_cap,
        eff_class=eff_class,
        names=names,
        size=size,
        src=src,
        route_alpha=np.asarray(route_alpha, dtype=np.float64),
        path_ptr=path_ptr,
        path_links=path_links,
        bind=bind,
        rx=rx,
        rx_switch=rx_switch,
        dep_ptr=dep_ptr,
        dep_ids=dep_ids,
        succ_ptr=succ_ptr,
        succ_ids=succ_ids,
        host_launched=host_launched,
    )


def _binding_links(
    cap: npt.NDArray[np.float64],
    path_ptr: npt.NDArray[np.int64],
    path_links: npt.NDArray[np.int64],
    entry_op: npt.NDArray[np.int64],
    n_ops: int,
) -> npt.NDArray[np.int64]:
    """Per op, the links of its route that can bind (capacity below :data:`UNBOUNDED`), as ``[n_ops, K]``
    padded with ``len(cap)``; ``entry_op`` is the op of every entry of ``path_links``."""
    keep = (cap < UNBOUNDED)[path_links]
    # an op whose route has no binding link (an unbounded memory link in a test topology) keeps its slowest link
    unbound = np.flatnonzero(np.bincount(entry_op[keep], minlength=n_ops) == 0)
    for i in unbound.tolist():
        seg = path_links[path_ptr[i] : path_ptr[i + 1]]
        keep[path_ptr[i] + int(np.argmin(cap[seg]))] = True
    b_op, b_link = entry_op[keep], path_links[keep]
    b_cnt = np.bincount(b_op, minlength=n_ops)
    width = int(b_cnt.max()) if n_ops else 1
    bind = np.full((n_ops, max(width, 1)), len(cap), dtype=np.int64)
    if len(b_op):
        first = np.concatenate([[0], np.cumsum(b_cnt)[:-1]])
        col = np.arange(len(b_op)) - first[b_op]
        bind[b_op, col] = b_link
    return bind


def _receive_links(
    topo: Topology,
    path_links: npt.NDArray[np.int64],
    entry_op: npt.NDArray[np.int64],
    n_ops: int,
    n_cap: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Per op, the scale-out receive link (``nic_rx``) of its route or -1; per link (topology links, then one
    memory link per rank), the switch a receive link hangs off (its source node, numbered in link order) or
    -1: what incast is evaluated on. ``n_cap``: the number of links, memory links included."""
    kinds = topo.link_kinds
    rx_kind = np.array([k == "nic_rx" for k in kinds] + [False] * (n_cap - len(kinds)), dtype=bool)
    rx = np.full(n_ops, -1, dtype=np.int64)
    on_rx = rx_kind[path_links]
    rx[entry_op[on_rx]] = path_links[on_rx]
    rx_switch = np.full(n_cap, -1, dtype=np.int64)
    sw_ids: dict[str, int] = {}
    for i, ((u, _v), k) in enumerate(zip(topo.link_names, kinds)):
        if k == "nic_rx":
            rx_switch[i] = sw_ids.setdefault(u, len(sw_ids))
    return rx, rx_switch


def _dag_csr(
    prog: Program,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The dependency DAG as CSR in both directions: (dep_ptr, dep_ids, succ_ptr, succ_ids), from the op table's
    columns (op ids are row numbers in every built or read Program; a hand-made op list with other ids goes
    through the :class:`Op` view)."""
    t = prog.table
    n_ops = len(t)
    if t.ids is None:
        dep_ptr = np.asarray(t.dep_ptr, dtype=np.int64)
        dep_ids = np.asarray(t.dep_ids, dtype=np.int64)
        dep_cnt = np.diff(dep_ptr)
    else:
        ops = prog.ops
        dep_cnt = np.fromiter((len(op.deps) for op in ops), dtype=np.int64, count=n_ops)
        dep_ptr = np.concatenate([[0], np.cumsum(dep_cnt)]).astype(np.int64)
        dep_ids = np.fromiter((d for op in ops for d in op.deps), dtype=np.int64, count=int(dep_cnt.sum()))
    order = np.argsort(dep_ids, kind="stable")
    dep_op_all = np.repeat(np.arange(n_ops, dtype=np.int64), dep_cnt)
    succ_ids = dep_op_all[order]
    succ_cnt = np.bincount(dep_ids, minlength=n_ops)
    succ_ptr = np.concatenate([[0], np.cumsum(succ_cnt)]).astype(np.int64)
    return dep_ptr, dep_ids, succ_ptr, succ_ids


def rendezvous(prog: Program, eager_bytes: float) -> npt.NDArray[np.bool_]:
    """Per op: does it pay the rendezvous (``stage_s``) before it streams?

    A transfer that waits for an op not involving its sender (the receiver's previous stage, in SpreadOut and
    FAST) must synchronise with its receiver. A message within the eager window (``eager_bytes``, the
    collective library's per-connection FIFO) is pushed without waiting for the receiver's go-ahead; a larger
    one pays a rendezvous round trip (the eager/rendezvous protocols of MPI and NCCL). Concurrent ops between
    the same pair with the same dependencies are one message on one connection: their bytes add up."""
    sync, msg = synchronised(prog)
    return sync & (msg > eager_bytes)


def synchronised(prog: Program) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64]]:
    """Per op: does it start in step with its receiver (it waits for an op not involving its sender), and the
    bytes of the message it belongs to (concurrent ops between one pair with the same dependencies are one
    message on one connection). What :func:`rendezvous` and the pipeline fill of ``fill_bytes`` charge.
    Array passes over the op table (no object per op: Programs reach millions of ops)."""
    t = prog.table
    n = len(t)
    src, dst = t.src_rank, t.dst_rank
    ndeps = np.diff(t.dep_ptr)
    owner = np.repeat(np.arange(n, dtype=np.int64), ndeps)
    d = t.dep_ids
    side = dep_sender_side(src, dst, owner, d)
    sync = (ndeps > 0) & (src != dst) & (np.bincount(owner[~side], minlength=n) > 0)
    msg = np.zeros(n, dtype=np.float64)
    ids = np.flatnonzero(sync)
    if len(ids):
        # one message: the same pair and the same dependency set (an order-free 64-bit hash of the set)
        mixed = mix64(d.astype(np.uint64))
        has = ndeps > 0
        sig = np.zeros(n, dtype=np.uint64)
        sig[has] = np.add.reduceat(mixed, t.dep_ptr[:-1][has])
        key = np.stack([src[ids], dst[ids], ndeps[ids], sig[ids].view(np.int64)], axis=1)
        _u, inv = np.unique(key, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        total = np.bincount(inv, weights=t.cnt[ids].astype(np.float64))
        msg[ids] = total[inv] * float(prog.unit_bytes)
    return sync, msg


def dep_sender_side(
    src: npt.NDArray[np.int64],
    dst: npt.NDArray[np.int64],
    op: npt.NDArray[np.int64],
    dep: npt.NDArray[np.int64],
) -> npt.NDArray[np.bool_]:
    """Per dependency edge (``op`` waits for ``dep``): does ``dep`` involve ``op``'s sender (it sent or received
    it)? The other edges are ``op``'s receiver side."""
    sender = src[op]
    return np.asarray((src[dep] == sender) | (dst[dep] == sender), dtype=bool)


#: routes of a group of ops: the ops, then either one row of links per op (every route the same length) or the
#: distinct routes as CSR (pointer, links) with each op's route index; then each op's latency
_RouteGroup = tuple[
    npt.NDArray[np.int64],
    npt.NDArray[np.int64] | tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]],
    npt.NDArray[np.float64],
]


def _routes(
    topo: Topology, src: npt.NDArray[np.int64], dst: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """CSR of link indices of every (src, dst) route, and its latency (s): the same routes as
    :meth:`Topology.route`, built per rank with arrays for the common cases (switch fabrics, scale-out)."""
    n_links = len(topo.link_names)
    groups: list[_RouteGroup] = []
    local = src == dst
    if local.any():
        ids = np.flatnonzero(local)
        groups.append((ids, (n_links + src[ids])[:, None], np.zeros(len(ids))))
    rest = np.flatnonzero(~local)
    if topo.direct is None and topo.intra is not None and len(rest):
        rest = _tiered_routes(topo, src, dst, rest, groups)
    # everything else (mesh/ring/cube-mesh hops, direct-connect graphs): the topology's router, per distinct pair
    if len(rest):
        groups.append(_routed(topo, src, dst, rest))
    return _route_csr(groups, len(src))


def _tiered_routes(
    topo: Topology,
    src: npt.NDArray[np.int64],
    dst: npt.NDArray[np.int64],
    rest: npt.NDArray[np.int64],
    groups: list[_RouteGroup],
) -> npt.NDArray[np.int64]:
    """Appends to ``groups`` the routes of ops ``rest`` that go through a server's NVSwitch or the scale-out
    network, built with arrays; returns the ops left for the topology's router."""
    assert topo.intra is not None
    index = {uv: i for i, uv in enumerate(topo.link_names)}
    m = topo.gpus_per_server
    same = (src[rest] // m) == (dst[rest] // m)
    if topo.intra.kind == "switch":
        ids = rest[same]
        if len(ids):
            up = np.array([index[(f"g{r}", f"sw{r // m}")] for r in range(topo.nranks)], dtype=np.int64)
            down = np.array([index[(f"sw{r // m}", f"g{r}")] for r in range(topo.nranks)], dtype=np.int64)
            groups.append(
                (
                    ids,
                    np.stack([up[src[ids]], down[dst[ids]]], axis=1),
                    np.full(len(ids), topo.intra.latency * 1e-6),
                )
            )
        rest = rest[~same]
    if topo.inter is not None and len(rest):
        cross = (src[rest] // m) != (dst[rest] // m)
        ids = rest[cross]
        if len(ids):
            groups.extend(_inter_routes(topo, index, ids, src[ids], dst[ids]))
            rest = rest[~cross]
    return rest


def _routed(
    topo: Topology, src: npt.NDArray[np.int64], dst: npt.NDArray[np.int64], rest: npt.NDArray[np.int64]
) -> _RouteGroup:
    """The routes of ops ``rest`` from the topology's router (:meth:`Topology.route`), once per distinct pair
    (a direct-connect Program of 17 M hops has a few thousand; the ops take theirs by index)."""
    key = src[rest] * np.int64(topo.nranks) + dst[rest]
    uniq, which = np.unique(key, return_inverse=True)
    got = [topo.route(int(k) // topo.nranks, int(k) % topo.nranks) for k in uniq.tolist()]
    lens = np.array([len(r[0]) for r in got], dtype=np.int64)
    ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    links = np.array([x for r in got for x in r[0]], dtype=np.int64)
    alphas = np.array([r[1] for r in got], dtype=np.float64)
    which = np.asarray(which, dtype=np.int64).reshape(-1)
    return rest, (ptr, links, which), alphas[which]


def _route_csr(
    groups: list[_RouteGroup], n_ops: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The groups' routes assembled in op order: (CSR pointer, link indices, latency per op)."""
    lens = np.zeros(n_ops, dtype=np.int64)
    alpha = np.zeros(n_ops)
    for ids, rows, al in groups:
        alpha[ids] = al
        if isinstance(rows, np.ndarray):
            lens[ids] = rows.shape[1]
        else:
            lens[ids] = np.diff(rows[0])[rows[2]]
    ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    links = np.zeros(int(ptr[-1]), dtype=np.int64)
    for ids, rows, _al in groups:
        if isinstance(rows, np.ndarray):
            w = rows.shape[1]
            pos = ptr[ids][:, None] + np.arange(w)[None, :]
            links[pos.ravel()] = rows.ravel()
        else:
            uptr, ulinks, which = rows
            cnt = lens[ids]
            within = segment_positions(cnt)
            links[np.repeat(ptr[ids], cnt) + within] = ulinks[np.repeat(uptr[which], cnt) + within]
    return ptr, links, alpha


def _inter_routes(
    topo: Topology,
    index: dict[tuple[str, str], int],
    ids: npt.NDArray[np.int64],
    s: npt.NDArray[np.int64],
    d: npt.NDArray[np.int64],
) -> list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]]:
    """GPU -> NIC -> (ToR | rail [-> spine -> rail]) -> NIC -> GPU, as in :func:`a2acc.model.topology._route_nodes`."""
    assert topo.inter is not None
    m = topo.gpus_per_server
    n = topo.nranks
    nic = np.array([topo.nic_of(r) for r in range(n)], dtype=np.int64)
    server = np.arange(n) // m
    single = topo.inter.wiring == "single_switch"
    sw_of = ["tor" if single else f"rail{nic[r]}" for r in range(n)]
    nic_name = [f"nic{server[r]}.{nic[r]}" for r in range(n)]
    g_nic = np.array([index[(f"g{r}", nic_name[r])] for r in range(n)], dtype=np.int64)
    nic_g = np.array([index[(nic_name[r], f"g{r}")] for r in range(n)], dtype=np.int64)
    tx = np.array([index[(nic_name[r], sw_of[r])] for r in range(n)], dtype=np.int64)
    rxl = np.array([index[(sw_of[r], nic_name[r])] for r in range(n)], dtype=np.int64)
    alpha = np.full(len(ids), topo.inter.latency * 1e-6)
    if single:
        return [(ids, np.stack([g_nic[s], tx[s], rxl[d], nic_g[d]], axis=1), alpha)]
    same_rail = nic[s] == nic[d]
    out = []
    if same_rail.any():
        a, b = s[same_rail], d[same_rail]
        out.append((ids[same_rail], np.stack([g_nic[a], tx[a], rxl[b], nic_g[b]], axis=1), alpha[same_rail]))
    if (~same_rail).any():
        k = topo.inter.nics_per_server
        to_spine = np.array([index[(f"rail{j}", "spine")] for j in range(k)], dtype=np.int64)
        from_spine = np.array([index[("spine", f"rail{j}")] for j in range(k)], dtype=np.int64)
        a, b = s[~same_rail], d[~same_rail]
        rows = np.stack([g_nic[a], tx[a], to_spine[nic[a]], from_spine[nic[b]], rxl[b], nic_g[b]], axis=1)
        out.append((ids[~same_rail], rows, alpha[~same_rail]))
    return out


# ---------------------------------------------------------------------------------------------- shared physics
def incast_capacity(
    setup: Setup, active: npt.NDArray[np.int64], cap: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Capacities with the incast loss of the active set applied, the overloaded receive links and their
    fan-in degrees.

    Per receive link: ``k`` distinct senders, in-flight bytes ``sum over senders of min(bytes, window)``, the
    number of congested (``k >= 2``) receive links on the same switch (:mod:`a2acc.analysis.incast`)."""
    inc = setup.model.incast
    none = np.zeros(0, dtype=np.int64)
    if not inc.enabled or not len(active):
        return cap, none, none
    rx = setup.rx[active]
    on = rx >= 0
    if int(on.sum()) < 2:
        return cap, none, none
    links = rx[on]
    senders = setup.src[active[on]]
    key = links * setup.nranks + senders
    ukey, inv = np.unique(key, return_inverse=True)
    pair_bytes = np.bincount(inv, weights=setup.size[active[on]])
    pair_link = ukey // setup.nranks
    ulinks, pos, k = np.unique(pair_link, return_inverse=True, return_counts=True)
    inflight = np.bincount(pos, weights=np.minimum(pair_bytes, inc.window_bytes))
    congested = k >= 2
    if not congested.any():
        return cap, none, none
    sw = setup.rx_switch[ulinks]
    n_cong = np.bincount(sw[congested], minlength=int(sw.max()) + 1)
    q = inc.buffer_bytes * inc.dt_alpha / (1.0 + inc.dt_alpha * np.maximum(n_cong[sw], 1))
    over = congested & (inflight > q)
    if not over.any():
        return cap, none, none
    out = cap.copy()
    # the libm power per port (math.pow), not numpy's vectorised one, whose last bit may differ by CPU: the
    # compiled event loop computes the same floats
    waste = inc.retransmit * np.array(
        [math.pow(float(max(x - 1, 1)), inc.fanin_loss) for x in k[over].tolist()], dtype=np.float64
    )
    eta = 1.0 / (1.0 + waste * (1.0 - q[over] / inflight[over]))
    out[ulinks[over]] *= eta
    return out, ulinks[over].astype(np.int64), k[over].astype(np.int64)


class Episodes:
    """Overload episodes per receive link (:class:`~a2acc.analysis.incast.Episode`): every maximal overloaded
    interval's start, its exposure (accruing at ``incast.exposure_rate(k)`` per second while the link has ``k``
    senders) and its time at each ``k`` (so a fit can re-weigh the exposure without simulating again)."""

    def __init__(self, model: IncastModel) -> None:
        self.model = model
        # link -> [start, exposure, rate, since, k, {k: seconds}]
        self.open: dict[int, list[Any]] = {}
        self.closed: list[Episode] = []

    def update(self, now: float, links: npt.NDArray[np.int64], k: npt.NDArray[np.int64]) -> None:
        for ep in self.open.values():
            dt = now - ep[3]
            ep[1] += ep[2] * dt
            spans = ep[5]
            spans[ep[4]] = spans.get(ep[4], 0.0) + dt
            ep[3] = now
        cur = dict(zip(links.tolist(), k.tolist()))
        for link in [lk for lk in self.open if lk not in cur]:
            start, exposure, _r, _t, _k, spans = self.open.pop(link)
            self.closed.append(Episode(start, exposure, tuple(sorted(spans.items()))))
        for link, kk in cur.items():
            ep = self.open.setdefault(link, [now, 0.0, 0.0, now, kk, {}])
            ep[2] = self.model.exposure_rate(kk)
            ep[4] = kk

    def finish(self, now: float) -> list[Episode]:
        none = np.zeros(0, dtype=np.int64)
        self.update(now, none, none)
        return self.closed


# ---------------------------------------------------------------------------------------------- reference engine
def _max_min_rates(
    n_flows: int,
    entry_flow: npt.NDArray[np.int64],
    entry_link: npt.NDArray[np.int64],
    cap: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Progressive filling over the (flow, link) incidence; returns one rate per active flow (bytes/s)."""
    rates = np.zeros(n_flows)
    rem = cap.copy()
    nl = len(cap)
    live = np.ones(len(entry_flow), dtype=bool)
    while live.any():
        cnt = np.bincount(entry_link[live], minlength=nl)
        used = cnt > 0
        share = np.full(nl, np.inf)
        share[used] = rem[used] / cnt[used]
        s = float(share.min())
        if not np.isfinite(s):
            break
        tight = share <= s * (1 + 1e-12) + 1e-30
        hit = live & tight[entry_link]
        newly = np.zeros(n_flows, dtype=bool)
        newly[entry_flow[hit]] = True
        rates[newly] = s
        consumed = live & newly[entry_flow]
        rem -= np.bincount(entry_link[consumed], minlength=nl) * s
        np.maximum(rem, 0.0, out=rem)
        live &= ~consumed
    return rates


#: incast onset: a sender ready this close to its receive port's last message end counts as pushing into a busy
#: port (step boundaries in lockstep coincide; the timing jitter of real ones decides which side is first)
ONSET_TIE_S = 1e-6


def onset_delay(onset: float, sender: float, port: float, ready: float) -> float:
    """What incast onset delays an op ready at ``ready`` whose onset cost is ``onset`` (:meth:`Routes.onset`):
    its sender's side ended at ``sender`` (0 without one), its receive port's previous message at ``port``
    (-inf without one). When the sender was ready before the port was free (within :data:`ONSET_TIE_S`), it
    pushed into a busy port: a RoCE switch marks the queue, the sender's rate is cut (ECN, DCQCN: Zhu et al.,
    SIGCOMM 2015) and recovers with time from ``sender`` on - what is left of ``onset`` when the op is
    ready delays it. Every engine calls this (the same floats)."""
    if sender <= port + ONSET_TIE_S:
        return max(0.0, sender + onset - ready)
    return 0.0


def _release(
    st: Setup,
    f: int,
    now: float,
    missing: npt.NDArray[np.int64],
    ready_at: npt.NDArray[np.float64],
    start: npt.NDArray[np.float64],
    pending: list[tuple[float, int]],
    sides: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None,
) -> None:
    """``f`` ended at ``now``: each successor is ready at the latest of its dependencies' ends plus their edge
    delays (:attr:`Setup.succ_delay`) and starts streaming its latency (and incast onset's delay,
    :func:`onset_delay`) later. ``sides``: per op, the latest end on its sender's side and on its receive
    port (with :attr:`Setup.onset`)."""
    delay = st.succ_delay
    for e in range(int(st.succ_ptr[f]), int(st.succ_ptr[f + 1])):
        s = int(st.succ_ids[e])
        t = now + (float(delay[e]) if delay is not None else 0.0)
        if t > ready_at[s]:
            ready_at[s] = t
        if sides is not None and st.succ_side is not None:
            side = int(st.succ_side[e])
            if side and now > sides[side - 1][s]:
                sides[side - 1][s] = now
        missing[s] -= 1
        if missing[s] == 0:
            start[s] = ready_at[s]
            act = float(ready_at[s]) + float(st.lat[s])
            if st.onset is not None and st.onset[s] > 0 and sides is not None:
                act += onset_delay(
                    float(st.onset[s]), float(sides[0][s]), float(sides[1][s]), float(ready_at[s])
                )
            heapq.heappush(pending, (act, s))


def simulate(
    prog: Program,
    topo: Topology,
    *,
    model: SimModel | None = None,
    incast: IncastModel | None = None,
    record_timeline: bool = True,
    payload_bytes: int | None = None,
) -> SimResult:
    """Simulate ``prog`` on ``topo`` event by event (the reference; module docstring).

    ``model`` defaults to the topology's (:func:`a2acc.analysis.model.default_model`); ``incast`` replaces the
    model's incast part (``IncastModel.off()`` switches it off). A plan built for another topology is refused."""
    mdl = resolve_model(topo, model, incast)
    st = prepare(prog, topo, mdl)
    run = _Reference(st, record_timeline)
    run.run()
    n_ops = st.n_ops
    makespan = float(np.nanmax(run.end)) if n_ops else 0.0
    eps = tuple(run.episodes.finish(makespan))
    expected, p_to = timeout_penalty(mdl.incast, makespan, eps)
    total = payload_bytes if payload_bytes is not None else int(prog.counts.sum()) * prog.unit_bytes
    return SimResult(
        time_s=expected,
        nranks=prog.nranks,
        total_bytes=int(total),
        op_start=run.start,
        op_end=run.end,
        link_names=st.names,
        link_busy_bytes=st.busy_bytes(),
        link_capacity=st.cap,
        timeline=tuple(run.timeline),
        makespan_s=makespan,
        timeout_probability=p_to,
        model=mdl,
        engine="reference",
        episodes=eps,
    )


class _Reference:
    """The reference engine's state: per op the dependencies still missing, start, end and remaining bytes; the
    ops waiting out their latency (a heap by activation time), the active flows, the clock, the overload
    episodes and the utilisation timeline. :meth:`run` advances from event to event (the next activation or the
    next flow to finish), re-solving max-min rates whenever the active set changed."""

    def __init__(self, st: Setup, record_timeline: bool) -> None:
        n_ops = st.n_ops
        self.st = st
        self.record_timeline = record_timeline
        self.missing = np.diff(st.dep_ptr).copy()
        self.start = np.full(n_ops, np.nan)
        self.end = np.full(n_ops, np.nan)
        self.ready_at = np.zeros(n_ops)
        # incast onset: per op the latest end on its sender's side (0: none) and on its receive port (-inf: none)
        self.sides = (np.zeros(n_ops), np.full(n_ops, -np.inf)) if st.onset is not None else None
        self.remaining = st.size.copy()
        self.pending: list[tuple[float, int]] = []
        self.active: list[int] = []
        self.timeline: list[tuple[float, float, npt.NDArray[np.int64], npt.NDArray[np.float64]]] = []
        self.episodes = Episodes(st.model.incast)
        self.now = 0.0
        self.done = 0
        for i in np.flatnonzero(self.missing == 0).tolist():
            self.start[i] = 0.0
            heapq.heappush(self.pending, (float(st.lat[i]), i))

    def run(self) -> None:
        st = self.st
        rates = np.zeros(0)
        dirty = True
        ttf = np.zeros(0)
        while self.done < st.n_ops:
            act_arr = np.array(self.active, dtype=np.int64)
            if dirty:
                rates = self._rates(act_arr)
                dirty = False
            t_next_act = self.pending[0][0] if self.pending else np.inf
            if len(act_arr):
                with np.errstate(divide="ignore"):
                    ttf = np.where(rates > 0, self.remaining[act_arr] / rates, np.inf)
                t_fin = self.now + float(ttf.min())
            else:
                t_fin = np.inf
            t = min(t_next_act, t_fin)
            if not np.isfinite(t):  # pragma: no cover - a verified DAG always makes progress
                raise InternalError("simulation stalled (zero-capacity link?)")
            dt = t - self.now
            if len(act_arr) and dt > 0:
                self._stream(act_arr, rates, t, dt)
            self.now = t
            if len(act_arr) and t_fin <= t_next_act:
                limit = (t_fin - (self.now - dt)) * (1 + 1e-9) + 1e-15
                finished = [f for f, x in zip(self.active, ttf.tolist()) if x <= limit]
            else:
                finished = []
            if self._retire(finished):
                dirty = True
            if self._activate():
                dirty = True

    def _rates(self, act_arr: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Max-min rates of the active flows under the incast-reduced capacities (the overload episodes
        updated)."""
        st = self.st
        if not len(act_arr):
            self.episodes.update(self.now, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
            return np.zeros(0)
        cap, over, over_k = incast_capacity(st, act_arr, st.cap)
        self.episodes.update(self.now, over, over_k)
        rows = st.bind[act_arr]
        real = rows != len(st.cap)
        entry_flow = np.repeat(np.arange(len(act_arr)), real.sum(axis=1))
        entry_link = rows[real]
        return _max_min_rates(len(act_arr), entry_flow, entry_link, cap)

    def _stream(
        self, act_arr: npt.NDArray[np.int64], rates: npt.NDArray[np.float64], t: float, dt: float
    ) -> None:
        """The active flows stream from now to ``t`` (``dt`` later): ``rates * dt`` bytes each, recorded in the
        timeline as per-link utilisation."""
        moved = rates * dt
        self.remaining[act_arr] -= moved
        if self.record_timeline:
            cap0 = self.st.cap
            dummy = len(cap0)
            rows = self.st.bind[act_arr]
            real = rows != dummy
            per_link = np.bincount(rows[real], weights=np.repeat(moved, real.sum(axis=1)), minlength=dummy)
            used = np.flatnonzero(per_link)
            self.timeline.append((self.now, t, used, per_link[used] / (cap0[used] * dt)))

    def _retire(self, finished: list[int]) -> bool:
        """End the flows in ``finished`` and every active flow with (almost) nothing left; True when any did."""
        size = self.st.size
        remaining = self.remaining
        fin_set = set(finished)
        finished += [f for f in self.active if remaining[f] <= max(1e-9 * size[f], 1e-6) and f not in fin_set]
        if not finished:
            return False
        fin_set = set(finished)
        self.active = [f for f in self.active if f not in fin_set]
        for f in finished:
            remaining[f] = 0.0
            self._end(f)
        return True

    def _activate(self) -> bool:
        """Ops whose latency is over become active flows (an empty op ends at once); True when any did."""
        pending = self.pending
        now = self.now
        added = False
        while pending and pending[0][0] <= now * (1 + 1e-15) + 1e-18:
            _, f = heapq.heappop(pending)
            if self.st.size[f] <= 0:
                self._end(f)
                continue
            self.active.append(f)
            added = True
        return added

    def _end(self, f: int) -> None:
        """Op ``f`` ends now: its successors are released (:func:`_release`)."""
        self.end[f] = self.now
        self.done += 1
        _release(self.st, f, self.now, self.missing, self.ready_at, self.start, self.pending, self.sides)
