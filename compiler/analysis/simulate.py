"""Flow-level simulator: run a Program's DAG on a topology.

Model (alpha-beta with fair sharing, as FLASH §6.3 and TACCL/TE-CCL use):

- An op becomes ready when all its dependencies have finished. After the alpha of its route (sum of link
  latencies; 0 for local copies) it becomes an active flow of ``cnt * unit_bytes`` bytes.
- Active flows share link capacities **max-min fairly** (progressive filling, recomputed whenever a flow
  starts or ends). A GPU-to-GPU flow occupies every link of its route (GPU -> NVSwitch -> GPU, mesh/ring hops,
  GPU -> NIC -> network -> NIC -> GPU). A local copy occupies its GPU's memory link (``memory_bandwidth``).
- Scale-out receive links lose goodput under incast (:mod:`a2acc.analysis.incast`): capacity is multiplied by
  eta(k, b) for k concurrently active remote senders of b bytes each.

Reported: completion time; ``algbw`` in FAST's definition (total bytes / N / time, GB/s with 1e9);
``busbw = algbw * (N-1)/N`` (nccl-tests' all-to-all factor); per-link busy bytes and a utilisation timeline.
Bytes are the padded bytes the Program moves (chunks x unit) unless ``payload_bytes`` is given.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from a2acc.analysis.incast import IncastModel
from a2acc.errors import InputError, InternalError
from a2acc.ir import Program
from a2acc.model.topology import Topology


@dataclass(frozen=True)
class SimResult:
    """Outcome of :func:`simulate`."""

    time_s: float
    nranks: int
    total_bytes: int
    op_start: npt.NDArray[np.float64]
    op_end: npt.NDArray[np.float64]
    link_names: tuple[str, ...]
    link_busy_bytes: npt.NDArray[np.float64]
    link_capacity: npt.NDArray[np.float64]
    timeline: tuple[tuple[float, float, npt.NDArray[np.int64], npt.NDArray[np.float64]], ...] = field(
        repr=False
    )

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
        """(bin edges, array [bins, links]) of average utilisation per time bin."""
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


def _max_min_rates(
    flow_ids: npt.NDArray[np.int64],
    entry_flow: npt.NDArray[np.int64],
    entry_link: npt.NDArray[np.int64],
    cap: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Progressive filling over the (flow, link) incidence; returns one rate per active flow (bytes/s)."""
    nf = len(flow_ids)
    rates = np.zeros(nf)
    rem = cap.copy()
    nl = len(cap)
    live = np.ones(len(entry_flow), dtype=bool)
    while True:
        if not live.any():
            break
        cnt = np.bincount(entry_link[live], minlength=nl)
        used = cnt > 0
        share = np.full(nl, np.inf)
        share[used] = rem[used] / cnt[used]
        s = float(share.min())
        tight = share <= s * (1 + 1e-12) + 1e-30
        hit = live & tight[entry_link]
        newly_mask = np.zeros(nf, dtype=bool)
        newly_mask[entry_flow[hit]] = True
        rates[newly_mask] = s
        consumed = live & newly_mask[entry_flow]
        rem -= np.bincount(entry_link[consumed], minlength=nl) * s
        np.maximum(rem, 0.0, out=rem)
        live &= ~consumed
    return rates


def simulate(
    prog: Program,
    topo: Topology,
    *,
    incast: IncastModel | None = None,
    record_timeline: bool = True,
    payload_bytes: int | None = None,
) -> SimResult:
    """Simulate ``prog`` on ``topo`` (see module docstring). A plan built for another topology is refused."""
    if prog.topology and prog.topology != topo.fingerprint:
        raise InputError(
            "",
            "--topology",
            topo.name,
            f"the plan was built for another topology (fingerprint {prog.topology}, this one {topo.fingerprint})",
        )
    if prog.nranks != topo.nranks:
        raise InputError(
            "", "--topology", topo.name, f"the plan has {prog.nranks} ranks, the topology {topo.nranks}"
        )
    incast = incast if incast is not None else IncastModel.mi300x_rocev2()
    n_ops = len(prog.ops)
    n_links = len(topo.link_names)
    mem_base = n_links
    caps = np.array(
        list(topo.link_bandwidths) + [topo.memory_bandwidth * 1e9] * prog.nranks, dtype=np.float64
    )
    names = tuple(f"{u}->{v}" for u, v in topo.link_names) + tuple(f"mem{r}" for r in range(prog.nranks))
    rx_links = np.array([i for i, k in enumerate(topo.link_kinds) if k == "nic_rx"], dtype=np.int64)
    is_rx = np.zeros(len(caps), dtype=bool)
    is_rx[rx_links] = True
    m = topo.gpus_per_server
    paths: list[npt.NDArray[np.int64]] = []
    alphas = np.zeros(n_ops)
    sizes = np.zeros(n_ops)
    succ: list[list[int]] = [[] for _ in range(n_ops)]
    missing = np.zeros(n_ops, dtype=np.int64)
    for op in prog.ops:
        if op.src_rank == op.dst_rank:
            paths.append(np.array([mem_base + op.src_rank], dtype=np.int64))
        else:
            links, alpha = topo.route(op.src_rank, op.dst_rank)
            paths.append(np.array(links, dtype=np.int64))
            alphas[op.id] = alpha
        sizes[op.id] = op.cnt * prog.unit_bytes
        missing[op.id] = len(op.deps)
        for d in op.deps:
            succ[d].append(op.id)
    start = np.full(n_ops, np.nan)
    end = np.full(n_ops, np.nan)
    remaining = sizes.copy()
    pending: list[tuple[float, int]] = []  # (activation time, op)
    for i in range(n_ops):
        if missing[i] == 0:
            start[i] = 0.0
            heapq.heappush(pending, (alphas[i], i))
    active: list[int] = []
    busy = np.zeros(len(caps))
    timeline: list[tuple[float, float, npt.NDArray[np.int64], npt.NDArray[np.float64]]] = []
    now = 0.0
    rates = np.zeros(0)
    entry_flow = np.zeros(0, dtype=np.int64)
    entry_link = np.zeros(0, dtype=np.int64)
    dirty = True
    done = 0
    src_server = np.array([op.src_rank // m for op in prog.ops], dtype=np.int64)
    src_rank = np.array([op.src_rank for op in prog.ops], dtype=np.int64)
    while done < n_ops:
        if dirty:
            act = np.array(active, dtype=np.int64)
            if len(act):
                lens = np.array([len(paths[f]) for f in act])
                entry_flow = np.repeat(np.arange(len(act)), lens)
                entry_link = np.concatenate([paths[f] for f in act])
                cap = caps.copy()
                if incast.points:
                    _apply_incast(
                        cap, act, entry_flow, entry_link, is_rx, src_rank, src_server, sizes, incast
                    )
                rates = _max_min_rates(act, entry_flow, entry_link, cap)
            else:
                rates = np.zeros(0)
            dirty = False
        t_next_act = pending[0][0] if pending else np.inf
        ttf = np.zeros(0)
        if active:
            act_arr = np.array(active, dtype=np.int64)
            with np.errstate(divide="ignore"):
                ttf = np.where(rates > 0, remaining[act_arr] / rates, np.inf)
            t_fin = now + float(ttf.min())
        else:
            t_fin = np.inf
        t = min(t_next_act, t_fin)
        if not np.isfinite(t):  # pragma: no cover - a verified DAG always makes progress
            raise InternalError("simulation stalled (zero-capacity link?)")
        dt = t - now
        if active and dt > 0:
            act_arr = np.array(active, dtype=np.int64)
            moved = rates * dt
            remaining[act_arr] -= moved
            per_link = np.bincount(entry_link, weights=moved[entry_flow], minlength=len(caps))
            busy += per_link
            if record_timeline:
                used = np.flatnonzero(per_link)
                timeline.append((now, t, used, per_link[used] / (caps[used] * dt)))
        now = t
        # flows finishing within 1e-6 (relative) of this instant complete together: fewer rate recomputations
        finished = []
        if active and t_fin <= t_next_act:
            limit = (t_fin - (now - dt)) * (1 + 1e-6) + 1e-15
            finished = [f for f, x in zip(active, ttf.tolist()) if x <= limit]
        finished += [f for f in active if remaining[f] <= max(1e-9 * sizes[f], 1e-6) and f not in finished]
        if finished:
            fin_set = set(finished)
            active = [f for f in active if f not in fin_set]
            for f in finished:
                end[f] = now
                remaining[f] = 0.0
                done += 1
                for s in succ[f]:
                    missing[s] -= 1
                    if missing[s] == 0:
                        start[s] = now
                        heapq.heappush(pending, (now + alphas[s], s))
            dirty = True
        while pending and pending[0][0] <= now + 1e-15:
            _, f = heapq.heappop(pending)
            if sizes[f] <= 0:
                end[f] = now
                done += 1
                continue
            active.append(f)
            dirty = True
    total = payload_bytes if payload_bytes is not None else int(prog.counts.sum()) * prog.unit_bytes
    return SimResult(
        time_s=float(np.nanmax(end)) if n_ops else 0.0,
        nranks=prog.nranks,
        total_bytes=int(total),
        op_start=start,
        op_end=end,
        link_names=names,
        link_busy_bytes=busy,
        link_capacity=caps,
        timeline=tuple(timeline),
    )


def _apply_incast(
    cap: npt.NDArray[np.float64],
    act: npt.NDArray[np.int64],
    entry_flow: npt.NDArray[np.int64],
    entry_link: npt.NDArray[np.int64],
    is_rx: npt.NDArray[np.bool_],
    src_rank: npt.NDArray[np.int64],
    src_server: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.float64],
    model: IncastModel,
) -> None:
    on_rx = is_rx[entry_link]
    if not on_rx.any():
        return
    links = entry_link[on_rx]
    flows = act[entry_flow[on_rx]]
    senders = src_rank[flows]
    # unique (link, sender) pairs: k = distinct senders per link, bytes per sender
    key = links * (int(src_rank.max()) + 1) + senders
    ukey, inv = np.unique(key, return_inverse=True)
    pair_bytes = np.bincount(inv, weights=sizes[flows])
    pair_link = ukey // (int(src_rank.max()) + 1)
    ulinks, pos, k = np.unique(pair_link, return_inverse=True, return_counts=True)
    mean_bytes = np.bincount(pos, weights=pair_bytes) / k
    for link, kk, b in zip(ulinks.tolist(), k.tolist(), mean_bytes.tolist()):
        if kk > 1:
            cap[link] *= model.efficiency(kk, b)
