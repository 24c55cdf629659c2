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
    gpu: {model: H100-SXM5, compute_units: 132}   # optional: SMs (NVIDIA) or CUs (AMD) of each GPU

or, for direct-connect fabrics (no servers tier; every node is one GPU)::

    version: 1
    direct: {kind: torus, dims: [4, 4], bandwidth: 25, latency: 1.0}
    # kind: hypercube (dimension: d) | genkautz (n, degree) | edges (nodes: N, edges: [[u, v, GB/s], ...])

``gpu`` (optional, either form) names the GPU and its compute units: the SMs of an NVIDIA GPU, the CUs of an
AMD one. Plans do not depend on it (it is not in the fingerprint); targets whose kernels keep every thread
block resident at once take it as their default limit (MSCCL++'s ``max_threadblocks``).

A :class:`Topology` holds its fabric as one typed value, :class:`Tiered` (servers: a scale-up fabric and, past
one server, scale-out NICs) or :class:`DirectConnect` (a graph of GPUs); the graphs themselves come from
:mod:`a2acc.model.graphs` and the link graph with its routes from :mod:`a2acc.model.network`
(:attr:`Topology.network`). Tiered planners use :class:`TierSummary` (n, m, B_intra, B_inter).
Units: GB = 1e9 bytes, latency in microseconds in files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import networkx as nx
import yaml

from a2acc.defaults import PRESETS as PRESETS
from a2acc.errors import TopologyError
from a2acc.fileio import TooLarge, load_yaml, loads_json, read_text, size_words
from a2acc.model import graphs
from a2acc.model.network import Network, Route
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
#: scale-out NICs per GPU at most (AWS p5: 32 EFA NICs for 8 GPUs)
MAX_NICS_PER_GPU = 8
_TOP_KEYS = (
    "version",
    "name",
    "servers",
    "gpus_per_server",
    "memory_bandwidth",
    "intra",
    "inter",
    "direct",
    "gpu",
)
_GPU_KEYS = ("model", "compute_units")
#: compute units a ``gpu`` section may give at most (the thread blocks per rank any target asks for at most)
MAX_COMPUTE_UNITS = 1024
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
class Gpu:
    """The GPU of every rank: a model name and its compute units (SMs of an NVIDIA GPU, CUs of an AMD one),
    which bound the thread blocks a kernel can keep resident at once."""

    model: str
    compute_units: int

    def describe(self) -> str:
        return f"{self.model or 'GPU'} ({self.compute_units} SMs/CUs)"


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
class Tiered:
    """Servers of GPUs: a scale-up fabric in each server and, with more than one server, scale-out NICs."""

    intra: IntraFabric
    inter: ScaleOut | None = None


Fabric = Tiered | DirectConnect


@dataclass(frozen=True)
class Topology:
    """A validated topology. Build with :func:`load_topology` or :func:`parse_topology`.

    ``fabric`` is one typed value; :attr:`intra`, :attr:`inter` and :attr:`direct` read its parts (None where
    the fabric has no such part) for code that handles one kind."""

    name: str
    servers: int
    gpus_per_server: int
    memory_bandwidth: float
    fabric: Fabric
    source: str = field(default="", compare=False)
    gpu: Gpu | None = None  # not in the fingerprint: plans do not depend on it, lowered files may

    @property
    def nranks(self) -> int:
        return self.servers * self.gpus_per_server

    @property
    def is_tiered(self) -> bool:
        return isinstance(self.fabric, Tiered)

    @property
    def intra(self) -> IntraFabric | None:
        return self.fabric.intra if isinstance(self.fabric, Tiered) else None

    @property
    def inter(self) -> ScaleOut | None:
        return self.fabric.inter if isinstance(self.fabric, Tiered) else None

    @property
    def direct(self) -> DirectConnect | None:
        return self.fabric if isinstance(self.fabric, DirectConnect) else None

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
        if not isinstance(self.fabric, Tiered):
            raise TopologyError(self.source, "servers", servers, "direct-connect topologies cannot be scaled")
        if not isinstance(servers, int) or servers < 1:
            raise TopologyError(self.source, "--servers", servers, "must be an integer >= 1")
        if servers * self.gpus_per_server > MAX_RANKS:
            raise TopologyError(self.source, "--servers", servers, f"at most {MAX_RANKS} GPUs in all")
        if servers > 1 and self.fabric.inter is None:
            raise TopologyError(self.source, "inter", None, "multi-server topologies need an 'inter' section")
        return replace(self, servers=servers)

    def summary(self) -> TierSummary:
        """The (n, m, B_intra, B_inter) view; direct-connect graphs report m = 1."""
        fabric = self.fabric
        if isinstance(fabric, DirectConnect):
            egress = [0.0] * fabric.nodes
            for u, _v, bw in fabric.edges:
                egress[u] += bw
            return TierSummary(self.nranks, 1, 0.0, 0.0, min(egress) if egress else 0.0, fabric.kind)
        m = self.gpus_per_server
        intra = fabric.intra
        if intra.kind == "switch":
            b_intra, b_link = intra.bandwidth, intra.bandwidth
        else:
            egress = [0.0] * m
            for a, _b, bw in intra.links:
                egress[a] += bw
            b_intra = min(egress) if m > 1 else 0.0
            b_link = min((bw for _a, _b, bw in intra.links), default=0.0)
        b_inter = 0.0
        if fabric.inter is not None:
            b_inter = fabric.inter.nics_per_server * fabric.inter.bandwidth / m
        return TierSummary(self.servers, m, b_intra, b_link, b_inter, intra.kind)

    @cached_property
    def fingerprint(self) -> str:
        """Stable hash of every field a plan can depend on (the transport and switch buffer included: plans
        chosen under a model depend on them); not the name, the source file or the GPU. Tagged with its
        definition, ``v2-<16 hex digits>`` (:data:`FINGERPRINT_VERSION`), so a plan recorded under an earlier
        definition is told apart from a plan for another topology (:meth:`plan_mismatch`)."""
        return f"v{FINGERPRINT_VERSION}-{self._hash_v2()}"

    def _hash_v2(self) -> str:
        doc = {
            "servers": self.servers,
            "gpus_per_server": self.gpus_per_server,
            "memory_bandwidth": self.memory_bandwidth,
            "fabric": [type(self.fabric).__name__, _plain(self.fabric)],
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    def _hash_v1(self) -> str:
        """The first definition (a2acc before the fingerprint covered the transport and the switch buffer): the
        fabric's parts listed by hand. Kept only to recognise plans recorded under it."""
        intra, inter, direct = self.intra, self.inter, self.direct
        doc = {
            "servers": self.servers,
            "gpus_per_server": self.gpus_per_server,
            "memory_bandwidth": self.memory_bandwidth,
            "intra": None
            if intra is None
            else [intra.kind, intra.bandwidth, intra.latency, list(intra.links)],
            "inter": None
            if inter is None
            else [inter.nics_per_server, inter.bandwidth, inter.latency, inter.wiring],
            "direct": None
            if direct is None
            else [direct.kind, direct.nodes, list(direct.edges), direct.latency],
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    def plan_mismatch(self, recorded: str) -> str | None:
        """Why a plan recording topology fingerprint ``recorded`` cannot be used on this topology, or None (it
        was built for it, or records none). A fingerprint without a definition tag was written by an a2acc
        before the tag; it is compared under both definitions that a2acc used."""
        if not recorded or recorded == self.fingerprint:
            return None
        try:
            version, digest = split_fingerprint(recorded)
        except ValueError:
            return (
                f"the plan records {recorded!r}, which is no topology fingerprint: plan again with this a2acc"
            )
        again = "plan again with this a2acc (a2acc plan / a2acc compile)"
        if version is None:
            if digest == self._hash_v2():  # the current definition, written before it was tagged
                return None
            if digest == self._hash_v1():
                return (
                    f"the plan was made by an earlier a2acc (its topology fingerprint {recorded} is of an earlier "
                    f"definition; this a2acc's is v{FINGERPRINT_VERSION}): {again}"
                )
            return (
                f"the plan was made by an earlier a2acc for another topology (its fingerprint {recorded} matches "
                f"this topology under no definition): {again} on this topology"
            )
        if version < FINGERPRINT_VERSION:
            return (
                f"the plan was made by an earlier a2acc (topology fingerprint definition v{version}, this a2acc's "
                f"is v{FINGERPRINT_VERSION}): {again}"
            )
        if version > FINGERPRINT_VERSION:
            return (
                f"the plan was made by a later a2acc (topology fingerprint definition v{version}; this a2acc "
                f"knows up to v{FINGERPRINT_VERSION}): plan again with this a2acc, or use the later one"
            )
        return (
            f"the plan was built for another topology (fingerprint {recorded}, this one {self.fingerprint})"
        )

    # ------------------------------------------------------------------ network
    @cached_property
    def network(self) -> Network:
        """The link graph and routes (:mod:`a2acc.model.network`)."""
        return Network(self)

    @property
    def graph(self) -> nx.DiGraph:
        """The topology as a networkx DiGraph with ``bw`` (B/s) and ``alpha`` (s) on every edge."""
        return self.network.graph

    @property
    def link_names(self) -> tuple[tuple[str, str], ...]:
        return self.network.link_names

    @property
    def link_bandwidths(self) -> tuple[float, ...]:
        """Per-link bandwidth in bytes/s, indexed like :attr:`link_names`."""
        return self.network.link_bandwidths

    @property
    def link_kinds(self) -> tuple[str, ...]:
        return self.network.link_kinds

    def route(self, src: int, dst: int) -> Route:
        """Deterministic route of a GPU-to-GPU transfer: (link indices, total alpha in seconds)
        (:meth:`a2acc.model.network.Network.route`)."""
        return self.network.route(src, dst)


#: the definition of :attr:`Topology.fingerprint`. Bump it whenever what the hash covers changes (a field added
#: to a fabric), and keep the earlier definition's hash where :meth:`Topology.plan_mismatch` can use it: a plan
#: recorded under an earlier definition then gets "made by an earlier a2acc: plan again", not "built for
#: another topology". Definition 1 listed the fabric's parts by hand; definition 2 hashes every fabric field;
#: from definition 2 on, the fingerprint carries its definition (``v2-...``)
FINGERPRINT_VERSION = 2
_FINGERPRINT_RE = re.compile(r"^(?:v([1-9][0-9]{0,5})-)?([0-9a-f]{16})$")


def split_fingerprint(text: str) -> tuple[int | None, str]:
    """``v2-0123456789abcdef`` -> (2, digest); an untagged digest (before the tag) -> (None, digest);
    ``ValueError`` for anything else."""
    m = _FINGERPRINT_RE.match(text)
    if m is None:
        raise ValueError(f"not a topology fingerprint: {text!r}")
    return (int(m.group(1)) if m.group(1) else None), m.group(2)


def _plain(value: Any) -> Any:
    """A dataclass as nested JSON-able lists (every field, in declaration order)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [_plain(getattr(value, f.name)) for f in dataclasses.fields(value)]
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


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
    if kind == "hybrid_cube_mesh" and m != 8:
        raise TopologyError(src, "gpus_per_server", m, "hybrid_cube_mesh is the 8-GPU DGX-1/NDv2 layout")
    if kind != "links" or m == 1:
        return graphs.fabric_links(kind, m, bw)
    if not isinstance(raw, list) or not raw:
        raise TopologyError(src, "intra.links", raw, "fabric 'links' needs a non-empty list [[a, b, GB/s]]")
    return _listed_links(raw, m, bw, src, "intra.links", "GPU indices", f"(gpus_per_server={m})")


def _listed_links(
    raw: list[Any], n: int, bw: float, src: str, fld0: str, what: str, hint: str = ""
) -> tuple[tuple[int, int, float], ...]:
    """An explicit link list ``[[a, b], ...]`` or ``[[a, b, GB/s], ...]``: both directions, parallel links summed."""
    seen: dict[tuple[int, int], float] = {}
    for i, item in enumerate(raw):
        fld = f"{fld0}[{i}]"
        if not isinstance(item, list) or len(item) not in (2, 3):
            raise TopologyError(src, fld, item, "each link is [a, b] or [a, b, GB/s]")
        a, b = item[0], item[1]
        for x in (a, b):
            if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < n:
                raise TopologyError(src, fld, item, f"{what} must be in 0..{n - 1} {hint}".rstrip())
        if a == b:
            raise TopologyError(src, fld, item, "a link must join two different nodes")
        lbw = _bw(item[2], source=src, field=fld) if len(item) == 3 else bw
        for u, v in ((a, b), (b, a)):
            seen[(u, v)] = seen.get((u, v), 0.0) + lbw
    return tuple((u, v, w) for (u, v), w in sorted(seen.items()))


def _max_nodes(n: int, src: str, fld: str, value: object) -> None:
    if n > MAX_RANKS:
        raise TopologyError(src, fld, value, f"at most {MAX_RANKS} nodes")


def _torus(d: Mapping[str, Any], src: str) -> tuple[int, list[graphs.Pair], list[tuple[str, Any]]]:
    dims = _req(d, "dims", src, "direct.", "a list of dimension sizes, e.g. [4, 4]")
    if not isinstance(dims, list) or not dims:
        raise TopologyError(src, "direct.dims", dims, "a non-empty list of integers >= 2")
    dims_t = tuple(_pos_int(x, src, "direct.dims", 2) for x in dims)
    n = 1
    for x in dims_t:
        n *= x
        _max_nodes(n, src, "direct.dims", dims)
    return n, graphs.torus(dims_t), [("dims", dims_t)]


def _hypercube(d: Mapping[str, Any], src: str) -> tuple[int, list[graphs.Pair], list[tuple[str, Any]]]:
    dim = _pos_int(_req(d, "dimension", src, "direct.", "an integer >= 1"), src, "direct.dimension")
    if dim > MAX_RANKS.bit_length() - 1:
        raise TopologyError(
            src, "direct.dimension", dim, f"at most {MAX_RANKS.bit_length() - 1} ({MAX_RANKS} nodes)"
        )
    return 2**dim, graphs.hypercube(dim), [("dimension", dim)]


def _genkautz(d: Mapping[str, Any], src: str) -> tuple[int, list[graphs.Pair], list[tuple[str, Any]]]:
    n = _pos_int(_req(d, "n", src, "direct.", "number of nodes >= 2"), src, "direct.n", 2)
    _max_nodes(n, src, "direct.n", n)
    deg = _pos_int(_req(d, "degree", src, "direct.", "out-degree >= 1"), src, "direct.degree")
    if deg > MAX_DEGREE:
        raise TopologyError(src, "direct.degree", deg, f"at most {MAX_DEGREE}")
    return n, graphs.genkautz(n, deg), [("n", n), ("degree", deg)]


def _direct(d: Mapping[str, Any], src: str) -> DirectConnect:
    if not isinstance(d, Mapping):
        raise TopologyError(src, "direct", d, "must be a mapping with 'kind'")
    _check_keys(d, _DIRECT_KEYS, src, "direct.")
    kind = _req(d, "kind", src, "direct.", f"one of {', '.join(DIRECT_KINDS)}")
    if kind not in DIRECT_KINDS:
        raise TopologyError(src, "direct.kind", kind, f"allowed: {', '.join(DIRECT_KINDS)}")
    bw = _bw(_req(d, "bandwidth", src, "direct.", "GB/s per link"), source=src, field="direct.bandwidth")
    lat = _lat(d.get("latency", 1.0), source=src, field="direct.latency")
    params: list[tuple[str, Any]] = []
    if kind == "edges":
        n = _pos_int(_req(d, "nodes", src, "direct.", "number of nodes >= 2"), src, "direct.nodes", 2)
        _max_nodes(n, src, "direct.nodes", n)
        edges = _req(d, "edges", src, "direct.", "a list [[u, v, GB/s], ...]")
        if not isinstance(edges, list) or not edges:
            raise TopologyError(
                src, "direct.edges", edges, "a non-empty list [[u, v], ...] or [[u, v, GB/s]]"
            )
        edge_list = _listed_links(edges, n, bw, src, "direct.edges", "node indices")
    else:
        n, pairs, params = {"torus": _torus, "hypercube": _hypercube, "genkautz": _genkautz}[kind](d, src)
        edge_list = tuple((u, v, bw) for u, v in pairs)
    removed = d.get("removed")
    if removed is not None:  # a punctured graph: failed or missing links, both directions
        edge_list, gone = _puncture(edge_list, removed, src)
        params.append(("removed", gone))
    gg: nx.DiGraph = nx.DiGraph()
    gg.add_nodes_from(range(n))
    gg.add_edges_from((u, v) for u, v, _w in edge_list)
    if not nx.is_strongly_connected(gg):
        raise TopologyError(
            src, "direct", kind, "the graph must be strongly connected (every node reaches all)"
        )
    return DirectConnect(kind, n, edge_list, bw, lat, tuple(params))


def _puncture(
    edge_list: tuple[tuple[int, int, float], ...], removed: Any, src: str
) -> tuple[tuple[tuple[int, int, float], ...], tuple[graphs.Pair, ...]]:
    if not isinstance(removed, list):
        raise TopologyError(src, "direct.removed", removed, "a list of links [[u, v], ...] to remove")
    present = {(u, v) for u, v, _w in edge_list}
    gone: set[graphs.Pair] = set()
    for i, item in enumerate(removed):
        fld = f"direct.removed[{i}]"
        if not isinstance(item, list) or len(item) != 2 or (item[0], item[1]) not in present:
            raise TopologyError(src, fld, item, "each removed link is [u, v], a link of the graph")
        gone |= {(item[0], item[1]), (item[1], item[0])}
    return tuple(x for x in edge_list if (x[0], x[1]) not in gone), tuple(sorted(gone))


def parse_topology(data: Any, source: str = "<topology>") -> Topology:
    """Validate a topology mapping (already parsed from YAML/JSON) and build a :class:`Topology`."""
    src = source
    if not isinstance(data, Mapping):
        raise TopologyError(src, "", type(data).__name__, "a topology file must be a YAML/JSON mapping")
    _check_keys(data, _TOP_KEYS, src, "")
    version = data.get("version")
    if isinstance(version, bool) or version != 1:  # (True == 1 in Python)
        raise TopologyError(
            src, "version", version, "this a2acc reads topology schema version 1 ('version: 1')"
        )
    raw_name = data.get("name")
    if raw_name is not None and not (
        isinstance(raw_name, (str, int)) and not isinstance(raw_name, bool) and len(str(raw_name)) <= 200
    ):
        raise TopologyError(source, "name", raw_name, "a name: a string of at most 200 characters")
    name = str(raw_name or Path(source).stem or "topology")
    mem = _bw(data.get("memory_bandwidth", 2000), source=src, field="memory_bandwidth")
    if "direct" in data:
        for k in ("intra", "inter", "servers", "gpus_per_server"):
            if k in data:  # (servers was silently ignored: the graph's node count is the GPU count)
                raise TopologyError(
                    src,
                    k,
                    data[k],
                    "a direct-connect topology has no servers, gpus_per_server, intra or inter",
                )
        dc = _direct(data["direct"], src)
        return Topology(name, dc.nodes, 1, mem, dc, src, _gpu(data.get("gpu"), src))
    servers = _pos_int(data.get("servers", 1), src, "servers")
    m = _pos_int(_req(data, "gpus_per_server", src, "", "an integer >= 1"), src, "gpus_per_server")
    if servers * m > MAX_RANKS:
        raise TopologyError(src, "servers x gpus_per_server", servers * m, f"at most {MAX_RANKS} GPUs")
    intra = _intra(data.get("intra"), m, src)
    inter_raw = data.get("inter")
    if inter_raw is None and servers > 1:
        raise TopologyError(src, "inter", None, "required when servers > 1 (scale-out NICs)")
    inter = None if inter_raw is None else _scale_out(inter_raw, m, src)
    topo = Topology(name, servers, m, mem, Tiered(intra, inter), src, _gpu(data.get("gpu"), src))
    if intra.kind != "switch" and m > 1:
        topo.network.server_subgraph(0)  # connectivity check with a clear error
    return topo


def _gpu(raw: Any, src: str) -> Gpu | None:
    """The optional ``gpu`` section: ``{model: NAME, compute_units: N}``."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise TopologyError(src, "gpu", raw, "a mapping {model: NAME, compute_units: N}")
    _check_keys(raw, _GPU_KEYS, src, "gpu.")
    model = raw.get("model", "")
    if not isinstance(model, str) or len(model) > 64 or not model.isprintable():
        raise TopologyError(src, "gpu.model", model, "a name of at most 64 printable characters")
    units = _req(raw, "compute_units", src, "gpu.", "the GPU's SMs (NVIDIA) or CUs (AMD)")
    if isinstance(units, bool) or not isinstance(units, int) or not 1 <= units <= MAX_COMPUTE_UNITS:
        raise TopologyError(
            src,
            "gpu.compute_units",
            units,
            f"an integer in 1..{MAX_COMPUTE_UNITS}: the GPU's SMs (NVIDIA) or CUs (AMD)",
        )
    return Gpu(model, units)


def _intra(raw: Any, m: int, src: str) -> IntraFabric:
    if m > 1 and raw is None:
        raise TopologyError(src, "intra", None, "required when gpus_per_server > 1")
    raw = raw or {"fabric": "switch", "bandwidth": 1.0}
    if not isinstance(raw, Mapping):
        raise TopologyError(src, "intra", raw, "must be a mapping with fabric/bandwidth/latency")
    _check_keys(raw, _INTRA_KEYS, src, "intra.")
    kind = _req(raw, "fabric", src, "intra.", f"one of {', '.join(INTRA_FABRICS)}")
    if kind not in INTRA_FABRICS:
        raise TopologyError(src, "intra.fabric", kind, f"allowed fabrics: {', '.join(INTRA_FABRICS)}")
    if kind == "links":
        ibw = _bw(raw.get("bandwidth", 1.0), source=src, field="intra.bandwidth")
    else:
        ibw = _bw(
            _req(raw, "bandwidth", src, "intra.", "GB/s per direction"), source=src, field="intra.bandwidth"
        )
    ilat = _lat(raw.get("latency", 0.7), source=src, field="intra.latency")
    if kind in ("full_mesh", "ring", "links") and m > MAX_FABRIC_GPUS:
        raise TopologyError(
            src,
            "gpus_per_server",
            m,
            f"at most {MAX_FABRIC_GPUS} GPUs per server for fabric {kind} (switch: any)",
        )
    if kind != "links" and "links" in raw:
        raise TopologyError(src, "intra.links", raw["links"], "only allowed with fabric: links")
    links = raw.get("links")
    if kind == "links" and "bandwidth" not in raw and isinstance(links, list):
        short = next((i for i, item in enumerate(links) if isinstance(item, list) and len(item) == 2), None)
        if short is not None:  # it would silently get the 1 GB/s placeholder
            raise TopologyError(
                src,
                f"intra.links[{short}]",
                links[short],
                "[a, b, GB/s], or give intra.bandwidth for the links that name no bandwidth",
            )
    return IntraFabric(kind, ibw, ilat, _intra_links(kind, m, ibw, links, src))


def _scale_out(raw: Any, m: int, src: str) -> ScaleOut:
    if not isinstance(raw, Mapping):
        raise TopologyError(src, "inter", raw, "must be a mapping with nics_per_server/bandwidth/...")
    _check_keys(raw, _INTER_KEYS, src, "inter.")
    nics = _pos_int(raw.get("nics_per_server", m), src, "inter.nics_per_server")
    if nics > MAX_NICS_PER_GPU * m:
        raise TopologyError(
            src, "inter.nics_per_server", nics, f"at most {MAX_NICS_PER_GPU} per GPU ({MAX_NICS_PER_GPU * m})"
        )
    if nics > m and nics % m != 0:
        raise TopologyError(
            src, "inter.nics_per_server", nics, "must divide or be a multiple of gpus_per_server"
        )
    if nics <= m and m % nics != 0:
        raise TopologyError(src, "inter.nics_per_server", nics, f"must divide gpus_per_server={m}")
    nbw = _bw(_req(raw, "bandwidth", src, "inter.", "GB/s per NIC"), source=src, field="inter.bandwidth")
    nlat = _lat(raw.get("latency", 3.0), source=src, field="inter.latency")
    wiring = raw.get("wiring", "rail_optimized")
    if wiring not in WIRINGS:
        raise TopologyError(src, "inter.wiring", wiring, f"allowed: {', '.join(WIRINGS)}")
    transport = raw.get("transport", "")
    if transport != "" and transport not in TRANSPORTS:
        raise TopologyError(src, "inter.transport", transport, f"allowed: {', '.join(TRANSPORTS)}")
    buffer = 0.0
    if raw.get("switch_buffer") is not None:
        raw_buf = raw["switch_buffer"]
        if isinstance(raw_buf, bool) or not isinstance(raw_buf, (int, str)):
            raise TopologyError(src, "inter.switch_buffer", raw_buf, "bytes, e.g. 64MiB or 67108864")
        buffer = float(parse_size(raw_buf, source=src, field="inter.switch_buffer"))
        if not 0 < buffer <= 2**40:
            raise TopologyError(src, "inter.switch_buffer", raw["switch_buffer"], "bytes in 1..1T")
    # more NICs than GPUs: each GPU drives nics/m of them, modelled as one NIC of nics/m times the bandwidth
    per_gpu = nics // m if nics > m else 1
    return ScaleOut(min(nics, m), nbw * per_gpu, nlat, wiring, transport, buffer)


#: the largest topology file read (a 16384-GPU direct-connect graph listed edge by edge is a few MiB)
MAX_TOPOLOGY_FILE_BYTES = 16 << 20


def _read_mapping(path: Path) -> Any:
    src = str(path)
    try:
        text = read_text(path, MAX_TOPOLOGY_FILE_BYTES)
    except TooLarge:
        raise TopologyError(
            src, "", path.name, f"larger than {size_words(MAX_TOPOLOGY_FILE_BYTES)}: not a topology file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyError(
            src, "", str(path), f"cannot read the file ({exc.__class__.__name__}: {exc})"
        ) from exc
    try:
        if path.suffix.lower() == ".json":
            return loads_json(text, unique_keys=True)
        return load_yaml(text)
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
