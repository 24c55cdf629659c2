"""The network of a topology: a link graph and the route every GPU-to-GPU transfer takes over it.

A networkx ``DiGraph`` whose nodes are GPUs (``g<rank>``), NVSwitches (``sw<s>``), NICs (``nic<s>.<k>``) and
network switches (``rail<k>``, ``spine``, ``tor``); every directed edge carries ``bw`` (bytes/s), ``alpha``
(seconds) and ``kind`` (``intra``, ``nic_tx``, ``nic_rx``, ``pcie``, ``net``, ``direct``). Links are indexed in
edge order; the simulator and the bounds address them by that index.

Routes are deterministic: inside a server the fabric's shortest hop path (through the NVSwitch for ``switch``),
between servers GPU -> its NIC -> rail (-> spine -> rail) or the single ToR -> the receiver's NIC -> GPU, and on
a direct-connect graph the shortest path networkx returns.
"""

from __future__ import annotations

import itertools
from functools import cached_property
from typing import TYPE_CHECKING

import networkx as nx

from a2acc.errors import TopologyError

if TYPE_CHECKING:
    from a2acc.model.topology import DirectConnect, Tiered, Topology

Route = tuple[tuple[int, ...], float]  # (link indices, total alpha in seconds)

#: the GPU<->NIC attachment (PCIe/C2C) is not modelled as a bottleneck: FAST/FLASH and TACCL profiles charge the
#: NIC rate only; a NIC shared by several GPUs is a shared bottleneck (its own edges)
UNBOUNDED_BW = 1e15


def gpu(rank: int) -> str:
    return f"g{rank}"


class Network:
    """The link graph of ``topology`` and its routes (built once per topology, routes memoised)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._routes: dict[tuple[int, int], Route] = {}

    @cached_property
    def graph(self) -> nx.DiGraph:
        from a2acc.model.topology import DirectConnect

        t = self.topology
        g: nx.DiGraph = nx.DiGraph()
        for r in range(t.nranks):
            g.add_node(gpu(r), kind="gpu", server=t.server_of(r))
        if isinstance(t.fabric, DirectConnect):
            _direct_links(g, t.fabric)
        else:
            _tiered_links(g, t, t.fabric)
        return g

    @cached_property
    def link_index(self) -> dict[tuple[str, str], int]:
        return {(u, v): i for i, (u, v) in enumerate(self.graph.edges())}

    @cached_property
    def link_names(self) -> tuple[tuple[str, str], ...]:
        return tuple(self.graph.edges())

    @cached_property
    def link_bandwidths(self) -> tuple[float, ...]:
        return tuple(float(d["bw"]) for _u, _v, d in self.graph.edges(data=True))

    @cached_property
    def link_kinds(self) -> tuple[str, ...]:
        return tuple(str(d["kind"]) for _u, _v, d in self.graph.edges(data=True))

    def route(self, src: int, dst: int) -> Route:
        """The links and total latency of a transfer from GPU ``src`` to GPU ``dst`` (a copy within one rank
        has an empty path: the simulator charges memory bandwidth for it)."""
        key = (src, dst)
        cached = self._routes.get(key)
        if cached is not None:
            return cached
        res: Route = ((), 0.0)
        if src != dst:
            nodes = self.route_nodes(src, dst)
            g, idx = self.graph, self.link_index
            links = tuple(idx[(a, b)] for a, b in itertools.pairwise(nodes))
            res = (links, sum(float(g.edges[a, b]["alpha"]) for a, b in itertools.pairwise(nodes)))
        self._routes[key] = res
        return res

    def route_nodes(self, src: int, dst: int) -> list[str]:
        from a2acc.model.topology import DirectConnect

        t = self.topology
        fabric = t.fabric
        if isinstance(fabric, DirectConnect):
            return list(nx.shortest_path(self.graph, gpu(src), gpu(dst)))
        ss, ds = t.server_of(src), t.server_of(dst)
        if ss == ds:
            if fabric.intra.kind == "switch":
                return [gpu(src), f"sw{ss}", gpu(dst)]
            return list(nx.shortest_path(self.server_subgraph(ss), gpu(src), gpu(dst)))
        if fabric.inter is None:  # pragma: no cover - parse_topology requires NICs with more than one server
            raise TopologyError(t.source, "inter", None, "required when servers > 1")
        a, b = t.nic_of(src), t.nic_of(dst)
        if fabric.inter.wiring == "single_switch":
            mid = ["tor"]
        elif a == b:
            mid = [f"rail{a}"]
        else:
            mid = [f"rail{a}", "spine", f"rail{b}"]
        return [gpu(src), f"nic{ss}.{a}", *mid, f"nic{ds}.{b}", gpu(dst)]

    def server_subgraph(self, server: int) -> nx.DiGraph:
        """The scale-up links of one server; an error when they do not connect every GPU to every other."""
        t = self.topology
        m = t.gpus_per_server
        sub = self.graph.subgraph([gpu(server * m + j) for j in range(m)])
        if not nx.is_strongly_connected(sub):
            raise TopologyError(
                t.source, "intra.links", "disconnected", "every GPU must reach every other GPU"
            )
        return sub


def _direct_links(g: nx.DiGraph, dc: DirectConnect) -> None:
    alpha = dc.latency * 1e-6
    for u, v, bw in dc.edges:
        g.add_edge(gpu(u), gpu(v), bw=bw * 1e9, alpha=alpha, kind="direct")


def _tiered_links(g: nx.DiGraph, t: Topology, fabric: Tiered) -> None:
    m = t.gpus_per_server
    intra = fabric.intra
    ia = intra.latency * 1e-6
    for s in range(t.servers):
        base = s * m
        if intra.kind == "switch":
            sw = f"sw{s}"
            g.add_node(sw, kind="nvswitch", server=s)
            bw = intra.bandwidth * 1e9
            for j in range(m):
                # alpha is charged once per GPU-to-GPU path: split over the two switch hops
                g.add_edge(gpu(base + j), sw, bw=bw, alpha=ia / 2, kind="intra")
                g.add_edge(sw, gpu(base + j), bw=bw, alpha=ia / 2, kind="intra")
        else:
            for a, b, bw in intra.links:
                g.add_edge(gpu(base + a), gpu(base + b), bw=bw * 1e9, alpha=ia, kind="intra")
    if fabric.inter is not None:
        _scale_out_links(g, t, fabric)


def _scale_out_links(g: nx.DiGraph, t: Topology, fabric: Tiered) -> None:
    inter = fabric.inter
    if inter is None:  # pragma: no cover - callers check
        return
    oa = inter.latency * 1e-6
    nbw = inter.bandwidth * 1e9
    single = inter.wiring == "single_switch"
    if single:
        g.add_node("tor", kind="netswitch")
    else:
        g.add_node("spine", kind="netswitch")
        for k in range(inter.nics_per_server):
            g.add_node(f"rail{k}", kind="netswitch")
            g.add_edge(f"rail{k}", "spine", bw=UNBOUNDED_BW, alpha=0.0, kind="net")
            g.add_edge("spine", f"rail{k}", bw=UNBOUNDED_BW, alpha=0.0, kind="net")
    for s in range(t.servers):
        for k in range(inter.nics_per_server):
            nic = f"nic{s}.{k}"
            g.add_node(nic, kind="nic", server=s)
            sw = "tor" if single else f"rail{k}"
            g.add_edge(nic, sw, bw=nbw, alpha=oa, kind="nic_tx")
            g.add_edge(sw, nic, bw=nbw, alpha=0.0, kind="nic_rx")
        for j in range(t.gpus_per_server):
            r = s * t.gpus_per_server + j
            nic = f"nic{s}.{t.nic_of(r)}"
            g.add_edge(gpu(r), nic, bw=UNBOUNDED_BW, alpha=0.0, kind="pcie")
            g.add_edge(nic, gpu(r), bw=UNBOUNDED_BW, alpha=0.0, kind="pcie")
