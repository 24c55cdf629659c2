"""Topology model: servers x GPUs, intra-server fabric, scale-out NICs, or a direct-connect graph.

A topology file is YAML (JSON accepted with the same keys), ``version: 1``::

    version: 1
    name: h100-4x8
    servers: 4
    gpus_per_server: 8
    memory_bandwidth: 3350        # GB/s, HBM; used for local (self) copies
    intra:
      fabric: switch              # switch | full_mesh | ring | hybrid_cube_mesh | links
      bandwidth: 450              # GB/s per direction: per GPU port (switch) or per link (others)
      latency: 0.7                # us
      # fabric: links -> links: [[gpu_a, gpu_b, GB/s], ...]  (local GPU indices, both directions)
    inter:
      nics_per_server: 8
      bandwidth: 50               # GB/s per NIC per direction ("400Gbps" also accepted)
      latency: 3.0                # us
      wiring: rail_optimized      # rail_optimized | single_switch
      transport: ib               # roce | ib | nvlink | slingshot (optional: the simulator's physical model)
      switch_buffer: 64MiB        # optional: packet buffer of one network switch (incast model)

or, for direct-connect fabrics (no servers tier; every node is one GPU)::

    version: 1
    direct: {kind: torus, dims: [4, 4], bandwidth: 25, latency: 1.0}
    # kind: hypercube (dimension: d) | genkautz (n, degree) | edges (nodes: N, edges: [[u, v, GB/s], ...])

The model compiles into a networkx ``DiGraph`` whose nodes are GPUs (``g<rank>``), NVSwitches (``sw<s>``),
NICs (``nic<s>.<k>``) and network switches (``rail<k>``, ``spine``, ``tor``); every directed edge carries
``bw`` (bytes/s) and ``alpha`` (seconds). Tiered planners use :class:`TierSummary` (n, m, B_intra, B_inter).
Units: GB = 1e9 bytes, latency in microseconds in files.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import networkx as nx
import yaml

from a2acc.errors import TopologyError
from a2acc.fileio import loads_json
from a2acc.model.units import parse_bandwidth, parse_latency, parse_size


def _bw(value: object, *, source: str, field: str) -> float:
    return parse_bandwidth(value, source=source, field=field, error=TopologyError)


def _lat(value: object, *, source: str, field: str) -> float:
    return parse_latency(value, source=source, field=field, error=TopologyError)


# size limits, checked before any graph is built (a hypercube of dimension 40 or a full mesh of 10**6 GPUs
# would otherwise run for hours): GPUs in all, GPUs per server with a link-list fabric, direct-connect degree
MAX_RANKS = 16384
MAX_FABRIC_GPUS = 512
MAX_DEGREE = 64
INTRA_FABRICS = ("switch", "full_mesh", "ring", "hybrid_cube_mesh", "links")
WIRINGS = ("rail_optimized", "single_switch")
DIRECT_KINDS = ("torus", "hypercube", "genkautz", "edges")
_TOP_KEYS = ("version", "name", "servers", "gpus_per_server", "memory_bandwidth", "intra", "inter", "direct")
_INTRA_KEYS = ("fabric", "bandwidth", "latency", "links")
_INTER_KEYS = ("nics_per_server", "bandwidth", "latency", "wiring", "transport", "switch_buffer")
#: scale-out transports the simulator models (``a2acc.analysis.model``); a file without one is simulated ideally
TRANSPORTS = ("roce", "ib", "nvlink", "slingshot")
_DIRECT_KEYS = (
    "kind",
    "dims",
    "dimension",
    "n",
    "degree",
    "nodes",
    "edges",
    "bandwidth",
    "latency",
    "removed",
)

#: DGX-1 / NDv2 (V100) hybrid cube-mesh: NVLink counts between local GPUs (each GPU has 6 links).
#: Same link counts as msccl-tools ``msccl/topologies/nvidia.py`` (DGX-1) and TE-CCL ``topologies/ndv2.py``.
DGX1_LINK_COUNTS: tuple[tuple[int, ...], ...] = (
    (0, 2, 1, 1, 2, 0, 0, 0),
    (2, 0, 1, 2, 0, 1, 0, 0),
    (1, 1, 0, 2, 0, 0, 2, 0),
    (1, 2, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 2, 1, 1),
    (0, 1, 0, 0, 2, 0, 1, 2),
    (0, 0, 2, 0, 1, 1, 0, 2),
    (0, 0, 0, 1, 1, 2, 2, 0),
)

PRESETS = (
    "dgx-h100",
    "dgx-h200-fast",
    "dgx-a100",
    "mi300x",
    "mi300x-100g",
    "ndv2",
    "dgx2",
    "alps",
    "nvl72",
)


@dataclass(frozen=True)
class IntraFabric:
    """Scale-up fabric inside one server. ``links`` are directed (a, b, GB/s) over local GPU indices."""

    kind: str
    bandwidth: float
    latency: float
    links: tuple[tuple[int, int, float], ...] = ()


@dataclass(frozen=True)
class ScaleOut:
    """Scale-out NICs of one server: ``nics_per_server`` NICs of ``bandwidth`` GB/s per direction each."""

    nics_per_server: int
    bandwidth: float
    latency: float
    wiring: str = "rail_optimized"
    transport: str = ""  # "" = not given (the simulator then models an ideal fabric)
    switch_buffer: float = 0.0  # bytes of packet buffer per network switch; 0 = not given


@dataclass(frozen=True)
class DirectConnect:
    """A direct-connect graph over GPUs (torus, hypercube, generalized Kautz, explicit edges)."""

    kind: str
    nodes: int
    edges: tuple[tuple[int, int, float], ...]
    bandwidth: float
    latency: float
    params: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class TierSummary:
    """The two-tier view used by FAST-style planners and bounds (FLASH §4.4 notation).

    ``n`` servers of ``m`` GPUs; ``b_intra`` is a GPU's total scale-up egress (GB/s), ``b_intra_link`` the
    bandwidth of one GPU-to-GPU path, ``b_inter`` a GPU's share of scale-out bandwidth (GB/s).
    """

    n: int
    m: int
    b_intra: float
    b_intra_link: float
    b_inter: float
    fabric: str

    def describe(self) -> str:
        ratio = self.b_intra / self.b_inter if self.b_inter > 0 else float("inf")
        return (
            f"n={self.n} servers, m={self.m} GPUs/server, fabric={self.fabric}, "
            f"B_intra={self.b_intra:g} GB/s per GPU (link {self.b_intra_link:g}), "
            f"B_inter={self.b_inter:g} GB/s per GPU, ratio {ratio:.1f}:1"
        )


@dataclass(frozen=True)
class Topology:
    """A validated topology. Build with :func:`load_topology` or :func:`parse_topology`."""

    name: str
    servers: int
    gpus_per_server: int
    memory_bandwidth: float
    intra: IntraFabric | None
    inter: ScaleOut | None
    direct: DirectConnect | None = None
    source: str = field(default="", compare=False)

    @property
    def nranks(self) -> int:
        return self.servers * self.gpus_per_server

    @property
    def is_tiered(self) -> bool:
        return self.direct is None

    def server_of(self, rank: int) -> int:
        return rank // self.gpus_per_server

    def local_of(self, rank: int) -> int:
        return rank % self.gpus_per_server

    def nic_of(self, rank: int) -> int:
        """Index of the NIC (within its server) that GPU ``rank`` uses for scale-out traffic."""
        if self.inter is None:
            return 0
        return self.local_of(rank) * self.inter.nics_per_server // self.gpus_per_server

    def with_servers(self, servers: int) -> Topology:
        """The same server type scaled to ``servers`` servers (``--servers N``)."""
        if self.direct is not None:
            raise TopologyError(self.source, "servers", servers, "direct-connect topologies cannot be scaled")
        if not isinstance(servers, int) or servers < 1:
            raise TopologyError(self.source, "--servers", servers, "must be an integer >= 1")
        if servers * self.gpus_per_server > MAX_RANKS:
            raise TopologyError(self.source, "--servers", servers, f"at most {MAX_RANKS} GPUs in all")
        if servers > 1 and self.inter is None:
            raise TopologyError(self.source, "inter", None, "multi-server topologies need an 'inter' section")
        return replace(self, servers=servers)

    def summary(self) -> TierSummary:
        """The (n, m, B_intra, B_inter) view; direct-connect graphs report m = 1."""
        if self.direct is not None:
            egress = [0.0] * self.direct.nodes
            for u, _v, bw in self.direct.edges:
                egress[u] += bw
            return TierSummary(self.nranks, 1, 0.0, 0.0, min(egress) if egress else 0.0, self.direct.kind)
        assert self.intra is not None  # guaranteed by parse_topology
        m = self.gpus_per_server
        if self.intra.kind == "switch":
            b_intra, b_link = self.intra.bandwidth, self.intra.bandwidth
        else:
            egress = [0.0] * m
            for a, _b, bw in self.intra.links:
                egress[a] += bw
            b_intra = min(egress) if m > 1 else 0.0
            b_link = min((bw for _a, _b, bw in self.intra.links), default=0.0)
        b_inter = 0.0
        if self.inter is not None:
            b_inter = self.inter.nics_per_server * self.inter.bandwidth / m
        return TierSummary(self.servers, m, b_intra, b_link, b_inter, self.intra.kind)

    @cached_property
    def fingerprint(self) -> str:
        """Stable hash of everything in the topology that affects plans (not its name or source file)."""
        doc = {
            "servers": self.servers,
            "gpus_per_server": self.gpus_per_server,
            "memory_bandwidth": self.memory_bandwidth,
            "intra": None
            if self.intra is None
            else [self.intra.kind, self.intra.bandwidth, self.intra.latency, list(self.intra.links)],
            "inter": None
            if self.inter is None
            else [self.inter.nics_per_server, self.inter.bandwidth, self.inter.latency, self.inter.wiring],
            "direct": None
            if self.direct is None
            else [self.direct.kind, self.direct.nodes, list(self.direct.edges), self.direct.latency],
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    # ------------------------------------------------------------------ graph
    @cached_property
    def graph(self) -> nx.DiGraph:
        """The topology as a networkx DiGraph with ``bw`` (B/s) and ``alpha`` (s) on every edge."""
        return _build_graph(self)

    @cached_property
    def _link_index(self) -> dict[tuple[str, str], int]:
        return {(u, v): i for i, (u, v) in enumerate(self.graph.edges())}

    @cached_property
    def link_names(self) -> tuple[tuple[str, str], ...]:
        return tuple(self.graph.edges())

    @cached_property
    def link_bandwidths(self) -> tuple[float, ...]:
        """Per-link bandwidth in bytes/s, indexed like :attr:`link_names`."""
        return tuple(float(d["bw"]) for _u, _v, d in self.graph.edges(data=True))

    @cached_property
    def link_kinds(self) -> tuple[str, ...]:
        return tuple(str(d["kind"]) for _u, _v, d in self.graph.edges(data=True))

    @cached_property
    def _paths(self) -> dict[tuple[int, int], tuple[tuple[int, ...], float]]:
        return {}

    def route(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        """Deterministic route of a GPU-to-GPU transfer: (link indices, total alpha in seconds).

        Intra-server traffic follows the fabric (shortest hop path in meshes, rings and cube-meshes); traffic
        between servers goes GPU -> its NIC -> network -> the receiver's NIC -> GPU. A transfer within one rank
        is a local copy and returns an empty path (the simulator charges memory bandwidth for it).
        """
        key = (src, dst)
        cached = self._paths.get(key)
        if cached is not None:
            return cached
        if src == dst:
            res: tuple[tuple[int, ...], float] = ((), 0.0)
        else:
            nodes = _route_nodes(self, src, dst)
            g = self.graph
            idx = self._link_index
            links = tuple(idx[(a, b)] for a, b in itertools.pairwise(nodes))
            alpha = sum(float(g.edges[a, b]["alpha"]) for a, b in itertools.pairwise(nodes))
            res = (links, alpha)
        self._paths[key] = res
        return res


# ---------------------------------------------------------------------- graph building
def _gpu(rank: int) -> str:
    return f"g{rank}"


def _build_graph(t: Topology) -> nx.DiGraph:
    g: nx.DiGraph = nx.DiGraph()
    for r in range(t.nranks):
        g.add_node(_gpu(r), kind="gpu", server=t.server_of(r))
    if t.direct is not None:
        alpha = t.direct.latency * 1e-6
        for u, v, bw in t.direct.edges:
            g.add_edge(_gpu(u), _gpu(v), bw=bw * 1e9, alpha=alpha, kind="direct")
        return g
    assert t.intra is not None
    m = t.gpus_per_server
    ia = t.intra.latency * 1e-6
    for s in range(t.servers):
        base = s * m
        if t.intra.kind == "switch":
            sw = f"sw{s}"
            g.add_node(sw, kind="nvswitch", server=s)
            bw = t.intra.bandwidth * 1e9
            for j in range(m):
                # alpha is charged once per GPU-to-GPU path: split over the two switch hops
                g.add_edge(_gpu(base + j), sw, bw=bw, alpha=ia / 2, kind="intra")
                g.add_edge(sw, _gpu(base + j), bw=bw, alpha=ia / 2, kind="intra")
        else:
            for a, b, bw in t.intra.links:
                g.add_edge(_gpu(base + a), _gpu(base + b), bw=bw * 1e9, alpha=ia, kind="intra")
    if t.inter is None:
        return g
    k_nics = t.inter.nics_per_server
    oa = t.inter.latency * 1e-6
    nbw = t.inter.bandwidth * 1e9
    # The GPU<->NIC attachment (PCIe/C2C) is not modelled as a bottleneck: FAST/FLASH and TACCL profiles
    # charge the NIC rate only. A NIC shared by several GPUs is a shared bottleneck (its own edges).
    big = 1e15
    if t.inter.wiring == "single_switch":
        g.add_node("tor", kind="netswitch")
    else:
        g.add_node("spine", kind="netswitch")
        for k in range(k_nics):
            g.add_node(f"rail{k}", kind="netswitch")
            g.add_edge(f"rail{k}", "spine", bw=big, alpha=0.0, kind="net")
            g.add_edge("spine", f"rail{k}", bw=big, alpha=0.0, kind="net")
    for s in range(t.servers):
        for k in range(k_nics):
            nic = f"nic{s}.{k}"
            g.add_node(nic, kind="nic", server=s)
            sw = "tor" if t.inter.wiring == "single_switch" else f"rail{k}"
            g.add_edge(nic, sw, bw=nbw, alpha=oa, kind="nic_tx")
            g.add_edge(sw, nic, bw=nbw, alpha=0.0, kind="nic_rx")
        for j in range(m):
            r = s * m + j
            nic = f"nic{s}.{t.nic_of(r)}"
            g.add_edge(_gpu(r), nic, bw=big, alpha=0.0, kind="pcie")
            g.add_edge(nic, _gpu(r), bw=big, alpha=0.0, kind="pcie")
    return g


def _route_nodes(t: Topology, src: int, dst: int) -> list[str]:
    g = t.graph
    if t.direct is not None:
        return list(nx.shortest_path(g, _gpu(src), _gpu(dst)))
    ss, ds = t.server_of(src), t.server_of(dst)
    assert t.intra is not None
    if ss == ds:
        if t.intra.kind == "switch":
            return [_gpu(src), f"sw{ss}", _gpu(dst)]
        sub = _intra_subgraph(t, ss)
        return list(nx.shortest_path(sub, _gpu(src), _gpu(dst)))
    assert t.inter is not None
    a, b = t.nic_of(src), t.nic_of(dst)
    na, nb = f"nic{ss}.{a}", f"nic{ds}.{b}"
    if t.inter.wiring == "single_switch":
        mid = ["tor"]
    elif a == b:
        mid = [f"rail{a}"]
    else:
        mid = [f"rail{a}", "spine", f"rail{b}"]
    return [_gpu(src), na, *mid, nb, _gpu(dst)]


def _intra_subgraph(t: Topology, server: int) -> nx.DiGraph:
    m = t.gpus_per_server
    nodes = [_gpu(server * m + j) for j in range(m)]
    sub = t.graph.subgraph(nodes)
    if not nx.is_strongly_connected(sub):
        raise TopologyError(t.source, "intra.links", "disconnected", "every GPU must reach every other GPU")
    return sub


# ---------------------------------------------------------------------- parsing
def _req(d: Mapping[str, Any], key: str, src: str, prefix: str, allowed: str) -> Any:
    if key not in d or d[key] is None:
        raise TopologyError(src, f"{prefix}{key}", None, f"the field is required; {allowed}")
    return d[key]


def _pos_int(v: Any, src: str, fld: str, lo: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise TopologyError(src, fld, v, f"must be an integer >= {lo}")
    return v


def _check_keys(d: Mapping[str, Any], allowed: tuple[str, ...], src: str, prefix: str) -> None:
    for k in d:
        if k not in allowed:
            raise TopologyError(
                src, f"{prefix}{k}", d[k], f"unknown field; allowed fields: {', '.join(allowed)}"
            )


def _intra_links(kind: str, m: int, bw: float, raw: Any, src: str) -> tuple[tuple[int, int, float], ...]:
    out: list[tuple[int, int, float]] = []
    if kind == "switch" or m == 1:
        return ()
    if kind == "full_mesh":
        out = [(a, b, bw) for a in range(m) for b in range(m) if a != b]
    elif kind == "ring":
        for a in range(m):
            for b in ((a + 1) % m, (a - 1) % m):
                if b != a and (a, b, bw) not in out:
                    out.append((a, b, bw))
    elif kind == "hybrid_cube_mesh":
        if m != 8:
            raise TopologyError(src, "gpus_per_server", m, "hybrid_cube_mesh is the 8-GPU DGX-1/NDv2 layout")
        out = [
            (a, b, bw * DGX1_LINK_COUNTS[a][b]) for a in range(8) for b in range(8) if DGX1_LINK_COUNTS[a][b]
        ]
    elif kind == "links":
        if not isinstance(raw, list) or not raw:
            raise TopologyError(
                src, "intra.links", raw, "fabric 'links' needs a non-empty list [[a, b, GB/s]]"
            )
        seen: dict[tuple[int, int], float] = {}
        for i, item in enumerate(raw):
            fld = f"intra.links[{i}]"
            if not isinstance(item, list) or len(item) not in (2, 3):
                raise TopologyError(src, fld, item, "each link is [gpu_a, gpu_b] or [gpu_a, gpu_b, GB/s]")
            a, b = item[0], item[1]
            for x in (a, b):
                if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < m:
                    raise TopologyError(
                        src, fld, item, f"GPU indices must be in 0..{m - 1} (gpus_per_server={m})"
                    )
            if a == b:
                raise TopologyError(src, fld, item, "a link must join two different GPUs")
            lbw = _bw(item[2], source=src, field=fld) if len(item) == 3 else bw
            for u, v in ((a, b), (b, a)):
                seen[(u, v)] = seen.get((u, v), 0.0) + lbw
        out = [(u, v, w) for (u, v), w in sorted(seen.items())]
    return tuple(out)


def _max_nodes(n: int, src: str, fld: str, value: object) -> None:
    if n > MAX_RANKS:
        raise TopologyError(src, fld, value, f"at most {MAX_RANKS} nodes")


def _direct(d: Mapping[str, Any], src: str) -> DirectConnect:
    if not isinstance(d, Mapping):
        raise TopologyError(src, "direct", d, "must be a mapping with 'kind'")
    _check_keys(d, _DIRECT_KEYS, src, "direct.")
    kind = _req(d, "kind", src, "direct.", f"one of {', '.join(DIRECT_KINDS)}")
    if kind not in DIRECT_KINDS:
        raise TopologyError(src, "direct.kind", kind, f"allowed: {', '.join(DIRECT_KINDS)}")
    bw = _bw(_req(d, "bandwidth", src, "direct.", "GB/s per link"), source=src, field="direct.bandwidth")
    lat = _lat(d.get("latency", 1.0), source=src, field="direct.latency")
    pairs: set[tuple[int, int]] = set()
    params: list[tuple[str, Any]] = []
    explicit: dict[tuple[int, int], float] = {}
    if kind == "torus":
        dims = _req(d, "dims", src, "direct.", "a list of dimension sizes, e.g. [4, 4]")
        if not isinstance(dims, list) or not dims:
            raise TopologyError(src, "direct.dims", dims, "a non-empty list of integers >= 2")
        dims_t = tuple(_pos_int(x, src, "direct.dims", 2) for x in dims)
        n = 1
        for x in dims_t:
            n *= x
            _max_nodes(n, src, "direct.dims", dims)
        params.append(("dims", dims_t))
        for node in range(n):
            coord, rest = [], node
            for x in dims_t:
                coord.append(rest % x)
                rest //= x
            for k, x in enumerate(dims_t):
                for step in (1, -1):
                    c2 = list(coord)
                    c2[k] = (c2[k] + step) % x
                    other, mul = 0, 1
                    for val, xx in zip(c2, dims_t):
                        other += val * mul
                        mul *= xx
                    if other != node:
                        pairs.add((node, other))
    elif kind == "hypercube":
        dim = _pos_int(_req(d, "dimension", src, "direct.", "an integer >= 1"), src, "direct.dimension")
        if dim > MAX_RANKS.bit_length() - 1:
            raise TopologyError(
                src, "direct.dimension", dim, f"at most {MAX_RANKS.bit_length() - 1} ({MAX_RANKS} nodes)"
            )
        n = 2**dim
        params.append(("dimension", dim))
        for node in range(n):
            for k in range(dim):
                pairs.add((node, node ^ (1 << k)))
    elif kind == "genkautz":
        n = _pos_int(_req(d, "n", src, "direct.", "number of nodes >= 2"), src, "direct.n", 2)
        _max_nodes(n, src, "direct.n", n)
        deg = _pos_int(_req(d, "degree", src, "direct.", "out-degree >= 1"), src, "direct.degree")
        if deg > MAX_DEGREE:
            raise TopologyError(src, "direct.degree", deg, f"at most {MAX_DEGREE}")
        params.extend([("n", n), ("degree", deg)])
        # Imase-Itoh generalized Kautz digraph: i -> (-i*d - q) mod n, q = 1..d (self loops dropped).
        for i in range(n):
            for q in range(1, deg + 1):
                j = (-i * deg - q) % n
                if j != i:
                    pairs.add((i, j))
    else:
        n = _pos_int(_req(d, "nodes", src, "direct.", "number of nodes >= 2"), src, "direct.nodes", 2)
        _max_nodes(n, src, "direct.nodes", n)
        edges = _req(d, "edges", src, "direct.", "a list [[u, v, GB/s], ...]")
        if not isinstance(edges, list) or not edges:
            raise TopologyError(
                src, "direct.edges", edges, "a non-empty list [[u, v], ...] or [[u, v, GB/s]]"
            )
        for i, e in enumerate(edges):
            fld = f"direct.edges[{i}]"
            if not isinstance(e, list) or len(e) not in (2, 3):
                raise TopologyError(src, fld, e, "each edge is [u, v] or [u, v, GB/s]")
            for x in e[:2]:
                if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < n:
                    raise TopologyError(src, fld, e, f"node indices must be in 0..{n - 1}")
            if e[0] == e[1]:
                raise TopologyError(src, fld, e, "an edge must join two different nodes")
            w = _bw(e[2], source=src, field=fld) if len(e) == 3 else bw
            for u, v in ((e[0], e[1]), (e[1], e[0])):
                explicit[(u, v)] = explicit.get((u, v), 0.0) + w
    edge_list = (
        tuple((u, v, w) for (u, v), w in sorted(explicit.items()))
        if explicit
        else tuple((u, v, bw) for u, v in sorted(pairs))
    )
    removed = d.get("removed")
    if removed is not None:  # a punctured graph: failed or missing links, both directions
        if not isinstance(removed, list):
            raise TopologyError(src, "direct.removed", removed, "a list of links [[u, v], ...] to remove")
        present = {(u, v) for u, v, _w in edge_list}
        gone: set[tuple[int, int]] = set()
        for i, item in enumerate(removed):
            fld = f"direct.removed[{i}]"
            if not isinstance(item, list) or len(item) != 2 or (item[0], item[1]) not in present:
                raise TopologyError(src, fld, item, "each removed link is [u, v], a link of the graph")
            gone |= {(item[0], item[1]), (item[1], item[0])}
        edge_list = tuple(x for x in edge_list if (x[0], x[1]) not in gone)
        params.append(("removed", tuple(sorted(gone))))
    dc = DirectConnect(kind, n, edge_list, bw, lat, tuple(params))
    gg: nx.DiGraph = nx.DiGraph()
    gg.add_nodes_from(range(n))
    gg.add_edges_from((u, v) for u, v, _w in edge_list)
    if not nx.is_strongly_connected(gg):
        raise TopologyError(
            src, "direct", kind, "the graph must be strongly connected (every node reaches all)"
        )
    return dc


def parse_topology(data: Any, source: str = "<topology>") -> Topology:
    """Validate a topology mapping (already parsed from YAML/JSON) and build a :class:`Topology`."""
    src = source
    if not isinstance(data, Mapping):
        raise TopologyError(src, "", type(data).__name__, "a topology file must be a YAML/JSON mapping")
    _check_keys(data, _TOP_KEYS, src, "")
    version = data.get("version")
    if version != 1:
        raise TopologyError(
            src, "version", version, "this a2acc reads topology schema version 1 ('version: 1')"
        )
    name = str(data.get("name") or Path(source).stem or "topology")
    mem = _bw(data.get("memory_bandwidth", 2000), source=src, field="memory_bandwidth")
    if "direct" in data:
        for k in ("intra", "inter"):
            if k in data:
                raise TopologyError(src, k, data[k], "a direct-connect topology has no intra/inter sections")
        dc = _direct(data["direct"], src)
        return Topology(name, dc.nodes, 1, mem, None, None, dc, src)
    servers = _pos_int(data.get("servers", 1), src, "servers")
    m = _pos_int(_req(data, "gpus_per_server", src, "", "an integer >= 1"), src, "gpus_per_server")
    if servers * m > MAX_RANKS:
        raise TopologyError(src, "servers x gpus_per_server", servers * m, f"at most {MAX_RANKS} GPUs")
    intra_raw = data.get("intra")
    if m > 1 and intra_raw is None:
        raise TopologyError(src, "intra", None, "required when gpus_per_server > 1")
    intra_raw = intra_raw or {"fabric": "switch", "bandwidth": 1.0}
    if not isinstance(intra_raw, Mapping):
        raise TopologyError(src, "intra", intra_raw, "must be a mapping with fabric/bandwidth/latency")
    _check_keys(intra_raw, _INTRA_KEYS, src, "intra.")
    kind = _req(intra_raw, "fabric", src, "intra.", f"one of {', '.join(INTRA_FABRICS)}")
    if kind not in INTRA_FABRICS:
        raise TopologyError(src, "intra.fabric", kind, f"allowed fabrics: {', '.join(INTRA_FABRICS)}")
    if kind == "links":
        ibw = _bw(intra_raw.get("bandwidth", 1.0), source=src, field="intra.bandwidth")
    else:
        ibw = _bw(
            _req(intra_raw, "bandwidth", src, "intra.", "GB/s per direction"),
            source=src,
            field="intra.bandwidth",
        )
    ilat = _lat(intra_raw.get("latency", 0.7), source=src, field="intra.latency")
    if kind in ("full_mesh", "ring", "links") and m > MAX_FABRIC_GPUS:
        raise TopologyError(
            src,
            "gpus_per_server",
            m,
            f"at most {MAX_FABRIC_GPUS} GPUs per server for fabric {kind} (switch: any)",
        )
    if kind != "links" and "links" in intra_raw:
        raise TopologyError(src, "intra.links", intra_raw["links"], "only allowed with fabric: links")
    links = _intra_links(kind, m, ibw, intra_raw.get("links"), src)
    intra = IntraFabric(kind, ibw, ilat, links)
    inter: ScaleOut | None = None
    inter_raw = data.get("inter")
    if inter_raw is not None:
        if not isinstance(inter_raw, Mapping):
            raise TopologyError(
                src, "inter", inter_raw, "must be a mapping with nics_per_server/bandwidth/..."
            )
        _check_keys(inter_raw, _INTER_KEYS, src, "inter.")
        nics = _pos_int(inter_raw.get("nics_per_server", m), src, "inter.nics_per_server")
        if nics > m and nics % m != 0:
            raise TopologyError(
                src, "inter.nics_per_server", nics, "must divide or be a multiple of gpus_per_server"
            )
        if nics <= m and m % nics != 0:
            raise TopologyError(src, "inter.nics_per_server", nics, f"must divide gpus_per_server={m}")
        nbw = _bw(
            _req(inter_raw, "bandwidth", src, "inter.", "GB/s per NIC"), source=src, field="inter.bandwidth"
        )
        nlat = _lat(inter_raw.get("latency", 3.0), source=src, field="inter.latency")
        wiring = inter_raw.get("wiring", "rail_optimized")
        if wiring not in WIRINGS:
            raise TopologyError(src, "inter.wiring", wiring, f"allowed: {', '.join(WIRINGS)}")
        transport = inter_raw.get("transport", "")
        if transport != "" and transport not in TRANSPORTS:
            raise TopologyError(src, "inter.transport", transport, f"allowed: {', '.join(TRANSPORTS)}")
        buffer = 0.0
        if inter_raw.get("switch_buffer") is not None:
            raw_buf = inter_raw["switch_buffer"]
            if isinstance(raw_buf, bool) or not isinstance(raw_buf, (int, str)):
                raise TopologyError(src, "inter.switch_buffer", raw_buf, "bytes, e.g. 64MiB or 67108864")
            buffer = float(parse_size(raw_buf, source=src, field="inter.switch_buffer"))
            if not 0 < buffer <= 2**40:
                raise TopologyError(src, "inter.switch_buffer", inter_raw["switch_buffer"], "bytes in 1..1T")
        inter = ScaleOut(
            min(nics, m) if nics > m else nics,
            nbw * (nics // m if nics > m else 1),
            nlat,
            wiring,
            transport,
            buffer,
        )
    elif servers > 1:
        raise TopologyError(src, "inter", None, "required when servers > 1 (scale-out NICs)")
    topo = Topology(name, servers, m, mem, intra, inter, None, src)
    if kind != "switch" and m > 1:
        _intra_subgraph(topo, 0)  # connectivity check with a clear error
    return topo


def _read_mapping(path: Path) -> Any:
    src = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyError(
            src, "", str(path), f"cannot read the file ({exc.__class__.__name__}: {exc})"
        ) from exc
    try:
        if path.suffix.lower() == ".json":
            return loads_json(text)
        return yaml.safe_load(text)
    except RecursionError:
        raise TopologyError(src, "", path.name, "nested too deeply to read") from None
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise TopologyError(
            src, "", path.name, f"not valid {path.suffix.lstrip('.') or 'YAML'}: {_one_line(exc)}"
        ) from exc


def _one_line(exc: Exception) -> str:
    """A parser error in one line: the problem and where (YAML's messages span several lines)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "msg", None) or str(exc)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return " ".join(f"{problem}{where}".split())


def preset_names() -> tuple[str, ...]:
    return PRESETS


def load_topology(spec: str, servers: int | None = None) -> Topology:
    """Load a preset by name (``dgx-h100``) or a YAML/JSON file; ``servers`` scales a server preset."""
    path = Path(spec)
    if spec in PRESETS:
        res = resources.files("a2acc.topologies").joinpath(f"{spec}.yaml")
        data = yaml.safe_load(res.read_text(encoding="utf-8"))
        topo = parse_topology(data, f"preset {spec}")
    elif path.exists():
        topo = parse_topology(_read_mapping(path), str(path))
    else:
        raise TopologyError(
            "", "--topology", spec, f"not a file and not a preset; presets: {', '.join(PRESETS)}"
        )
    if servers is not None:
        topo = topo.with_servers(servers)
    return topo
