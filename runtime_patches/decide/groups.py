"""A process group as a slice of the job's topology (expert parallelism runs all-to-all on subgroups).

A group of global ranks maps onto the topology when it is *regular*: its ranks, in ascending order, take the
same local GPU indices on each of the servers they touch. The slice keeps the fabric between those GPUs (a
switch stays a switch; a mesh, ring or cube-mesh becomes the explicit list of links among them, which must stay
connected) and the NICs those GPUs use (a NIC shared by two members stays one NIC). Anything else (an
irregular group, ranks out of order, a direct-connect graph) is reported with the reason; the engine then
serves that group with the stock collective, or ``A2ACC_TOPOLOGY`` can describe the group's own topology.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import networkx as nx

from a2acc.model.topology import IntraFabric, Tiered, Topology


def slice_topology(topo: Topology, ranks: Sequence[int]) -> Topology | str:
    """The topology of the GPUs ``ranks`` (global ranks in group order), or why there is none."""
    rs = [int(r) for r in ranks]
    if rs == list(range(topo.nranks)):
        return topo
    if topo.direct is not None:
        return (
            "subgroups of a direct-connect graph are not sliced; give the group's topology in A2ACC_TOPOLOGY"
        )
    if rs != sorted(rs) or len(set(rs)) != len(rs) or not rs or rs[-1] >= topo.nranks:
        return f"group ranks {rs[:8]} are not distinct ascending ranks of the {topo.nranks}-GPU topology"
    m = topo.gpus_per_server
    by_server: dict[int, list[int]] = {}
    for r in rs:
        by_server.setdefault(r // m, []).append(r % m)
    locals_ = next(iter(by_server.values()))
    if any(v != locals_ for v in by_server.values()):
        return "the group takes different GPUs on different servers (an irregular slice)"
    k = len(locals_)
    if topo.intra is None:  # pragma: no cover - tiered topologies always have a fabric
        return "the topology has no intra-server fabric"
    intra = topo.intra
    if intra.kind != "switch" and k < m:
        pos = {g: i for i, g in enumerate(locals_)}
        links = tuple((pos[a], pos[b], bw) for a, b, bw in intra.links if a in pos and b in pos)
        g: nx.Graph = nx.Graph()
        g.add_nodes_from(range(k))
        g.add_edges_from((a, b) for a, b, _bw in links)
        if k > 1 and not nx.is_connected(g):
            return f"GPUs {locals_} of a server are not connected among themselves by the {intra.kind} fabric"
        intra = IntraFabric("links" if k > 1 else "switch", intra.bandwidth, intra.latency, links)
    inter = topo.inter
    servers = len(by_server)
    if inter is not None and servers > 1:
        nics = sorted({topo.nic_of(g) for g in locals_})
        n = len(nics)
        if (n <= k and k % n) or (n > k and n % k):
            return f"the group's {k} GPUs per server use {n} NICs, which do not divide evenly"
        inter = replace(inter, nics_per_server=n)
    return replace(
        topo,
        name=f"{topo.name}[{len(rs)} of {topo.nranks}]",
        servers=servers,
        gpus_per_server=k,
        fabric=Tiered(intra, inter if servers > 1 else None),
    )
