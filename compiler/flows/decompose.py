"""Master LP + child LPs: the max-concurrent flow of a large graph (N ~ 1000) on a small machine.

The monolithic link-based LP has one commodity per source (N x E flow variables: 8.4 M for GenKautz n=1024,
d=8). The decomposition (our design: the HPDC'24 MCF paper names a master LP with parallel child LPs but its
exact split is not public):

1. **Master**: sources are split into G groups of consecutive ranks; group g's commodity is the sum of its
   sources' commodities (net supply ``sum_{s in g} supply_s(v)`` at every node). Merging commodities only
   relaxes the problem (a group's flow may deliver s's bytes to s''s destination), so the master's optimum
   ``T_m`` is a **lower bound** on the true optimum, with G x E variables.
   Groups interleave ranks (group g holds ranks g, g + G, ...), so each group's sources are spread over the
   graph and no group needs the edges around one region.
2. **Children** (independent, run through :mod:`.parallel`): group g's sources solve their own MCF (link- or
   path-based) on capacities ``c_g`` with ``sum_g c_g[e] <= cap[e]``, giving ``T_g``. Together the children
   use at most ``c_g[e] T_g`` bytes on e, so the union is feasible in ``T = max_g T_g``: an **upper bound**.
3. **Capacity shares**, refined over ``rounds``: round 1 splits every edge in proportion to the bytes each
   group would put on it under shortest-path routing (equal-cost paths rotated; an equal split ignores that a
   source's own links carry all of its first hops: 10x the bound on GenKautz n=1024, measured); each later
   round gives group g the share ``cap[e] ((1 - eps) u_g[e] / sum_h u_h[e] + eps / G)``, where ``u_g[e]`` are
   the bytes group g put on e in the previous round (so groups that needed an edge more get more of it, and
   all tend to finish together; the floor keeps every child connected). The best round is kept.

``T / T_m`` bounds the gap to the optimum; the benchmark also compares ``T`` with the monolithic LP where that
fits. (The master's group flows themselves make poor shares: merging commodities lets a group's flow cancel
its members' mutual traffic, so its edge use says little about what the members need; measured.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from a2acc.flows.mcf import LinkFlow, PathFlow, _offdiag, aggregated_mcf, link_mcf, path_mcf, supplies
from a2acc.flows.network import FlowNetwork
from a2acc.flows.parallel import run_all

EPS_SHARE = 0.05


@dataclass(frozen=True)
class Decomposed:
    time_s: float  # max over children: a feasible completion time
    bound_s: float  # the master's optimum: a lower bound
    groups: tuple[npt.NDArray[np.int64], ...]
    children: tuple[LinkFlow | PathFlow, ...]
    master_seconds: float
    status: str


def group_sources(sources: npt.NDArray[np.int64], groups: int) -> tuple[npt.NDArray[np.int64], ...]:
    """Interleaved groups: group g holds sources g, g + G, g + 2G, ... (in rank order)."""
    src = np.asarray(sources, dtype=np.int64)
    g = max(1, min(int(groups), len(src)))
    return tuple(src[i::g] for i in range(g))


def master(
    net: FlowNetwork,
    demand: npt.NDArray[np.float64],
    groups: tuple[npt.NDArray[np.int64], ...],
    time_limit: float | None,
) -> tuple[float, float]:
    """(T_m, seconds) of the relaxed master LP: a lower bound on the optimal completion time."""
    sup = np.stack([supplies(net, demand, g).sum(axis=0) for g in groups])
    first, flow, t = aggregated_mcf(net, sup, time_limit=time_limit, acyclic=False)
    return (t if flow is not None else float("nan")), first.seconds


def _child(
    net: FlowNetwork,
    demand: npt.NDArray[np.float64],
    sources: npt.NDArray[np.int64],
    cap: npt.NDArray[np.float64],
    formulation: str,
    k: int,
    time_limit: float | None,
) -> LinkFlow | PathFlow | None:
    if formulation == "path":
        return path_mcf(net, demand, k=k, sources=sources, cap=cap, time_limit=time_limit)
    return link_mcf(net, demand, sources=sources, cap=cap, time_limit=time_limit)


def next_hops(net: FlowNetwork, dist: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``nh[x, d]``: an edge out of node x on a shortest path to rank d's node (rotating among equal choices
    with x and d, so shortest-path routing spreads over equal-cost paths); -1 at d itself or if unreachable."""
    V = net.nnodes
    targets = net.rank_node
    nh = np.full((V, len(targets)), -1, dtype=np.int64)
    for x in range(V):
        outs = np.array(net.out_edges[x], dtype=np.int64)
        if outs.size == 0:
            continue
        ok = dist[net.head[outs]][:, targets] == dist[x, targets][None, :] - 1  # (deg, N)
        count = ok.sum(axis=0)
        pick = (np.arange(len(targets)) + x) % np.maximum(count, 1)
        rank_in = np.cumsum(ok, axis=0) - 1
        choose = ok & (rank_in == pick[None, :])
        has = count > 0
        nh[x, has] = outs[np.argmax(choose[:, has], axis=0)]
    return nh


def shortest_path_loads(
    net: FlowNetwork, demand: npt.NDArray[np.float64], groups: tuple[npt.NDArray[np.int64], ...]
) -> npt.NDArray[np.float64]:
    """(G, E) bytes each group puts on every edge when every pair follows one shortest path (vectorised over
    destinations): the warm start of the capacity shares."""
    from a2acc.flows.mcf import hop_distances

    nh = next_hops(net, hop_distances(net))
    n = len(net.rank_node)
    loads = np.zeros((len(groups), net.nedges))
    dests = np.arange(n)
    for gi, g in enumerate(groups):
        for s in g.tolist():
            amount = demand[s].astype(np.float64)
            cur = np.full(n, int(net.rank_node[s]))
            live = (amount > 0) & (dests != s)
            for _hop in range(net.nnodes):
                if not live.any():
                    break
                e = nh[cur[live], dests[live]]
                np.add.at(loads[gi], e, amount[live])
                cur[live] = net.head[e]
                live &= cur != net.rank_node  # destination i is reached at rank i's node
    return loads


def edge_use(net: FlowNetwork, child: LinkFlow | PathFlow) -> npt.NDArray[np.float64]:
    """Bytes a child's flow puts on every edge."""
    if isinstance(child, LinkFlow):
        return np.asarray(child.flow.sum(axis=0), dtype=np.float64)
    use = np.zeros(net.nedges)
    for p, a in zip(child.paths, child.amount):
        use[list(p)] += a
    return use


def decomposed_mcf(
    net: FlowNetwork,
    demand: npt.NDArray[np.float64] | npt.NDArray[np.int64],
    *,
    groups: int,
    formulation: str = "link",
    k: int = 4,
    rounds: int = 2,
    workers: str | int = 1,
    time_limit: float | None = None,
    master_groups: int | None = None,
) -> Decomposed | None:
    """Children in ``groups`` groups; the master (the lower bound) merges sources into ``master_groups``
    groups (default ``min(groups, 8)``: the master's size grows with its group count, its bound's tightness
    too)."""
    d = _offdiag(demand)
    srcs = np.flatnonzero(d.sum(axis=1) > 0)
    grp = group_sources(srcs, groups)
    t_m, secs = master(net, d, group_sources(srcs, master_groups or min(groups, 8)), time_limit)
    G = len(grp)
    warm = shortest_path_loads(net, d, grp)
    total = warm.sum(axis=0)
    share0 = np.divide(warm, total, out=np.full_like(warm, 1.0 / G), where=total > 0)
    caps = [net.cap * ((1 - EPS_SHARE) * share0[g] + EPS_SHARE / G) for g in range(G)]
    best: tuple[LinkFlow | PathFlow, ...] | None = None
    for r in range(max(1, rounds)):
        args = [(net, d, grp[g], caps[g], formulation, k, time_limit) for g in range(G)]
        kids = run_all(_child, args, workers, desc=f"mcf child LPs, round {r + 1}")
        if any(c is None for c in kids):
            break
        children = tuple(c for c in kids if c is not None)
        if best is None or max(c.time_s for c in children) < max(c.time_s for c in best):
            best = children
        use = np.stack([edge_use(net, c) for c in children])  # bytes each group needs on every edge
        total = use.sum(axis=0)
        share = np.divide(use, total, out=np.full_like(use, 1.0 / G), where=total > 0)
        caps = [net.cap * ((1 - EPS_SHARE) * share[g] + EPS_SHARE / G) for g in range(G)]
    if best is None:
        return None
    t = max(c.time_s for c in best)
    status = "optimal" if all(c.status == "optimal" for c in best) else "time_limit"
    return Decomposed(t, t_m, grp, best, secs, status)
