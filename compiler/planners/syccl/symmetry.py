"""Symmetry of a server topology: dimensions, isomorphic groups, and automorphisms verified on the graph.

SyCCL (SIGCOMM'25) slides, "Insight", Observation 1: a GPU cluster decomposes into **dimensions**; within a
dimension the GPUs fall into **groups** that are structurally identical (isomorphic) and isolated from one
another (traffic between groups of a dimension has to cross another dimension). Observation 2: an all-to-all is
N isomorphic one-to-all demands. Both observations are only as good as the symmetry they rely on, so nothing
here is assumed from the topology's kind: every permutation used by the planner is **checked edge by edge on
``topo.graph``** (bandwidth, latency and link kind of every directed link must map onto an identical link).

Our model (the slides name the idea, not the algebra; this part is our design):

- **Dimensions**: ``intra`` (groups = servers, the scale-up fabric), ``rail`` (groups = GPUs that share a NIC
  index across servers, on rail-optimised wiring with several NICs per server) and ``net`` (one group: every
  GPU; the hops between different servers that no rail serves: cross-rail through the spine, or every
  scale-out hop on a single switch). Every ordered GPU pair belongs to exactly one dimension
  (:meth:`Symmetry.dim_of`), so a hop's dimension is a function of its two ends.
- **Automorphisms** act coordinatewise on ranks ``(server s, local j)``: a permutation of servers (generated
  by the adjacent transpositions, each verified) times a permutation ``lambda`` of local indices that is an
  automorphism of the *local graph* (one server's GPUs, NVSwitch and NICs with their link bandwidths; NIC
  indices move with it, and so do rails). Local automorphisms are found with networkx's VF2 matcher
  (``DiGraphMatcher`` with node labels that pin the fixed points) after a cheap transposition try, and every
  one is extended to the whole graph and verified before use. Pointwise stabilisers of a set of ranks are then
  products (servers fixed x locals fixed), so their orbits are products of server classes and local orbits.
- **Degradation**: the verified group may be smaller than the full automorphism group (orbits only get finer,
  which is safe). When GPUs are not all equivalent (an intra ``links`` fabric with a missing link, say), the
  GPU orbits are several; the planner searches one sketch per orbit representative and replicates it only
  inside its orbit (documented in ``docs/syccl.md``), and the plan's metadata says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
import numpy.typing as npt
from networkx.algorithms.isomorphism import DiGraphMatcher

from a2acc.errors import PlannerError
from a2acc.model.topology import Topology

Perm = tuple[int, ...]
"""A permutation of ranks: ``perm[r]`` is the image of rank ``r``."""

INTRA, RAIL, NET = "intra", "rail", "net"


@dataclass(frozen=True)
class Dim:
    """One dimension: its name and its groups (sorted rank tuples)."""

    name: str
    groups: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class LocalMap:
    """A verified automorphism acting on local indices (``gpu``) and NIC indices (``nic``) of every server."""

    gpu: tuple[int, ...]
    nic: tuple[int, ...]


def compose(a: Perm, b: Perm) -> Perm:
    """``a after b``: the permutation ``r -> a[b[r]]``."""
    return tuple(a[x] for x in b)


def invert(a: Perm) -> Perm:
    out = [0] * len(a)
    for i, x in enumerate(a):
        out[x] = i
    return tuple(out)


class Symmetry:
    """The verified symmetry of a server topology (see the module docstring).

    All results are deterministic (ranks and orbits sorted) and memoised; ``checked`` counts the
    automorphisms verified on ``topo.graph``.
    """

    def __init__(self, topo: Topology) -> None:
        if topo.direct is not None:
            raise PlannerError(
                "syccl handles server topologies (servers x GPUs, scale-up fabric, NICs); direct-connect "
                f"graphs such as {topo.direct.kind} have no server dimensions to exploit: use -a mcf"
            )
        self.topo = topo
        self.n = topo.servers
        self.m = topo.gpus_per_server
        self.nranks = topo.nranks
        self.nics = topo.inter.nics_per_server if topo.inter is not None else 0
        self.rail_wired = (
            topo.inter is not None and topo.inter.wiring == "rail_optimized" and self.nics > 1 and self.n > 1
        )
        self.nic_local = tuple(topo.nic_of(j) for j in range(self.m))
        self.checked = 0
        g = topo.graph
        self._edges: dict[tuple[str, str], tuple[float, str, float]] = {
            (str(u), str(v)): (float(d["bw"]), str(d["kind"]), float(d["alpha"]))
            for u, v, d in g.edges(data=True)
        }
        self._has_sw = topo.intra is not None and topo.intra.kind == "switch"
        self._local_cache: dict[tuple[tuple[int, ...], int, int], LocalMap | None] = {}
        self._orbit_cache: dict[tuple[int, ...], tuple[tuple[int, ...], ...]] = {}
        self._tables: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None
        self._lists: tuple[list[list[int]], list[list[int]]] | None = None
        self._carry_cache: dict[tuple[int, ...], Perm | None] = {}
        self._stab_cache: dict[tuple[int, ...], tuple[tuple[int, ...], ...]] = {}
        self._coord_cache: dict[tuple[int, ...], tuple[tuple[int, ...], ...]] = {}
        self._q = self._local_graph()
        self._q_inv = {v: self._invariant(v) for v in self._q.nodes}
        self.server_symmetric = all(self._verify_servers(s) for s in range(self.n - 1))
        self.dims = self._dims()
        locals_ = self.local_orbits(())
        if self.server_symmetric:
            orbits = [tuple(sorted(s * self.m + j for s in range(self.n) for j in o)) for o in locals_]
        else:
            orbits = [tuple(s * self.m + j for j in o) for s in range(self.n) for o in locals_]
        self.gpu_orbits: tuple[tuple[int, ...], ...] = tuple(sorted(orbits))
        self.transitive = len(self.gpu_orbits) == 1
        self._group_perm: dict[tuple[int, int], Perm | None] = {}

    # ------------------------------------------------------------------ dimensions
    def _dims(self) -> tuple[Dim, ...]:
        n, m = self.n, self.m
        out: list[Dim] = []
        if m > 1:
            out.append(Dim(INTRA, tuple(tuple(range(s * m, (s + 1) * m)) for s in range(n))))
        if n > 1:
            if self.rail_wired:
                rails = tuple(
                    tuple(r for r in range(self.nranks) if self.nic_local[r % m] == k)
                    for k in range(self.nics)
                )
                out.append(Dim(RAIL, rails))
            out.append(Dim(NET, (tuple(range(self.nranks)),)))
        return tuple(out)

    def hop_tables(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(``dim[a, b]``, ``group[d, r]``): :meth:`dim_of` of every hop (a != b; -1 on the diagonal, which is
        no hop) and :meth:`group_of` of every rank, as arrays (a search looks up thousands of hops at once);
        computed once."""
        if self._tables is None:
            n = self.nranks
            dims = np.array(
                [[self.dim_of(a, b) if a != b else -1 for b in range(n)] for a in range(n)], dtype=np.int64
            )
            groups = np.array(
                [[self.group_of(d, r) for r in range(n)] for d in range(len(self.dims))], dtype=np.int64
            ).reshape(len(self.dims), n)
            self._tables = (dims, groups)
        return self._tables

    def hop_lists(self) -> tuple[list[list[int]], list[list[int]]]:
        """:meth:`hop_tables` as nested lists (what a loop over single hops indexes fastest); computed once."""
        if self._lists is None:
            dims, groups = self.hop_tables()
            self._lists = (dims.tolist(), groups.tolist())
        return self._lists

    def dim_index(self, name: str) -> int:
        for i, d in enumerate(self.dims):
            if d.name == name:
                return i
        raise KeyError(name)

    def dim_of(self, a: int, b: int) -> int:
        """The dimension of the hop a -> b (a != b): intra within a server, rail between servers on the same
        NIC index (rail-optimised wiring), net otherwise."""
        m = self.m
        if a // m == b // m:
            return self.dim_index(INTRA)
        if self.rail_wired and self.nic_local[a % m] == self.nic_local[b % m]:
            return self.dim_index(RAIL)
        return self.dim_index(NET)

    def group_of(self, dim: int, rank: int) -> int:
        name = self.dims[dim].name
        if name == INTRA:
            return rank // self.m
        if name == RAIL:
            return self.nic_local[rank % self.m]
        return 0

    def nic_node(self, rank: int) -> int:
        """Index of the NIC a rank uses for scale-out (server * nics + NIC index)."""
        return (rank // self.m) * max(self.nics, 1) + self.nic_local[rank % self.m]

    # ------------------------------------------------------------------ verification on topo.graph
    def _node_map(self, servers: tuple[int, ...], lmap: LocalMap) -> dict[str, str]:
        m, n = self.m, self.n
        phi: dict[str, str] = {}
        for s in range(n):
            t = servers[s]
            for j in range(m):
                phi[f"g{s * m + j}"] = f"g{t * m + lmap.gpu[j]}"
            phi[f"sw{s}"] = f"sw{t}"
            for k in range(self.nics):
                phi[f"nic{s}.{k}"] = f"nic{t}.{lmap.nic[k]}"
        for k in range(self.nics):
            phi[f"rail{k}"] = f"rail{lmap.nic[k]}"
        phi["spine"] = "spine"
        phi["tor"] = "tor"
        return phi

    def _verify(self, servers: tuple[int, ...], lmap: LocalMap) -> bool:
        """True iff the coordinatewise map is an automorphism of ``topo.graph`` (every directed link maps onto
        a link with the same bandwidth, kind and latency; a bijection on nodes)."""
        self.checked += 1
        phi = self._node_map(servers, lmap)
        edges = self._edges
        for (u, v), attrs in edges.items():
            if edges.get((phi[u], phi[v])) != attrs:
                return False
        nodes = [str(v) for v in self.topo.graph.nodes]
        return len({phi[v] for v in nodes}) == len(nodes)

    def _identity_local(self) -> LocalMap:
        return LocalMap(tuple(range(self.m)), tuple(range(self.nics)))

    def _verify_servers(self, s: int) -> bool:
        perm = list(range(self.n))
        perm[s], perm[s + 1] = perm[s + 1], perm[s]
        return self._verify(tuple(perm), self._identity_local())

    # ------------------------------------------------------------------ the local graph and its automorphisms
    def _local_graph(self) -> nx.DiGraph:
        """One server's GPUs ("g", j), NVSwitch ("sw", 0) and NICs ("nic", k) with the links between them."""
        m = self.m
        name: dict[str, tuple[str, int]] = {f"g{j}": ("g", j) for j in range(m)}
        if self._has_sw:
            name["sw0"] = ("sw", 0)
        for k in range(self.nics):
            name[f"nic0.{k}"] = ("nic", k)
        q: nx.DiGraph = nx.DiGraph()
        for key in sorted(name.values()):
            q.add_node(key, label=key[0])
        for (u, v), (bw, kind, alpha) in sorted(self._edges.items()):
            if u in name and v in name:
                q.add_edge(name[u], name[v], key=(bw, kind, alpha))
        return q

    def _invariant(self, v: tuple[str, int]) -> tuple[object, ...]:
        q = self._q
        out = tuple(sorted(str(q.edges[v, w]["key"]) + q.nodes[w]["label"] for w in q.successors(v)))
        inn = tuple(sorted(str(q.edges[w, v]["key"]) + q.nodes[w]["label"] for w in q.predecessors(v)))
        return (q.nodes[v]["label"], out, inn)

    def _labelled(self, fixed: tuple[int, ...], target: int) -> nx.DiGraph:
        q = self._q.copy()
        for i, j in enumerate(fixed):
            q.nodes[("g", j)]["label"] = f"fixed{i}"
        q.nodes[("g", target)]["label"] = "target"
        return q

    def _local_map(self, fixed: tuple[int, ...], a: int, b: int) -> LocalMap | None:
        """A verified local automorphism fixing every local index in ``fixed`` and sending a to b, or None."""
        key = (fixed, a, b)
        if key in self._local_cache:
            return self._local_cache[key]
        res: LocalMap | None = None
        if a == b:
            res = self._identity_local()
        elif self._q_inv[("g", a)] == self._q_inv[("g", b)]:
            # cheap try first: swap the two GPUs (and their NICs when they differ)
            gpu = list(range(self.m))
            gpu[a], gpu[b] = b, a
            nic = list(range(self.nics))
            if self.nics:
                ka, kb = self.nic_local[a], self.nic_local[b]
                nic[ka], nic[kb] = kb, ka
            cand = LocalMap(tuple(gpu), tuple(nic))
            if self._verify(tuple(range(self.n)), cand):
                res = cand
            else:
                # matched on integer node names: VF2 orders its candidates through sets of nodes, and a set of
                # ("g", j) tuples iterates in an order that follows the process's string hash seed, so the
                # automorphism it finds first (and so the plan) would differ between processes
                nodes = sorted(self._q.nodes)
                num = {v: i for i, v in enumerate(nodes)}
                gm = DiGraphMatcher(
                    nx.relabel_nodes(self._labelled(fixed, a), num),
                    nx.relabel_nodes(self._labelled(fixed, b), num),
                    node_match=lambda x, y: x["label"] == y["label"],
                    edge_match=lambda x, y: x["key"] == y["key"],
                )
                if gm.is_isomorphic():
                    mp = {nodes[i]: nodes[j] for i, j in gm.mapping.items()}
                    cand = LocalMap(
                        tuple(mp[("g", j)][1] for j in range(self.m)),
                        tuple(mp[("nic", k)][1] for k in range(self.nics)),
                    )
                    if self._verify(tuple(range(self.n)), cand):
                        res = cand
        self._local_cache[key] = res
        return res

    def local_orbits(self, fixed: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """Orbits of local indices under the verified local automorphisms that fix ``fixed`` pointwise (the
        fixed indices are singleton orbits). Sorted."""
        fx = tuple(sorted(set(fixed)))
        hit = self._orbit_cache.get(fx)
        if hit is not None:
            return hit
        orbits: list[list[int]] = [[j] for j in fx]
        free: list[list[int]] = []
        for a in range(self.m):
            if a in fx:
                continue
            for orb in free:
                if self._local_map(fx, orb[0], a) is not None:
                    orb.append(a)
                    break
            else:
                free.append([a])
        res = tuple(sorted(tuple(o) for o in orbits + free))
        self._orbit_cache[fx] = res
        return res

    # ------------------------------------------------------------------ stabilisers of ranks
    def stab_orbits(self, fixed: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """Orbits of ranks under the verified automorphisms that fix every rank in ``fixed``."""
        key = tuple(sorted(set(fixed)))
        hit = self._stab_cache.get(key)
        if hit is not None:
            return hit
        m = self.m
        fs = sorted({f // m for f in key})
        others = [s for s in range(self.n) if s not in fs]
        if self.server_symmetric:
            sclasses = [(s,) for s in fs] + ([tuple(others)] if others else [])
        else:
            sclasses = [(s,) for s in range(self.n)]
        lclasses = self.local_orbits(tuple(sorted({f % m for f in key})))
        res = tuple(
            sorted(tuple(sorted(s * m + j for s in sc for j in lc)) for sc in sclasses for lc in lclasses)
        )
        self._stab_cache[key] = res
        return res

    def carry(self, fixed: tuple[int, ...], a: int, b: int) -> Perm | None:
        """A verified automorphism (rank permutation) fixing every rank of ``fixed`` and sending a to b."""
        m = self.m
        fs = tuple(sorted({f // m for f in fixed}))
        fl = tuple(sorted({f % m for f in fixed}))
        sa, sb, ja, jb = a // m, b // m, a % m, b % m
        key = (*fs, -1, *fl, -1, sa, sb, ja, jb)
        if key in self._carry_cache:
            return self._carry_cache[key]
        res: Perm | None = None
        servers = list(range(self.n))
        ok = True
        if sa != sb:
            if not self.server_symmetric or sa in fs or sb in fs:
                ok = False
            else:
                servers[sa], servers[sb] = sb, sa
        lmap = self._local_map(fl, ja, jb) if ok else None
        if lmap is not None:
            srv = tuple(servers)
            if sa == sb or self._verify(srv, lmap):
                res = tuple(srv[r // m] * m + lmap.gpu[r % m] for r in range(self.nranks))
        self._carry_cache[key] = res
        return res

    def to_source(self, rep: int, r: int) -> Perm:
        """The verified automorphism that carries the orbit representative ``rep`` to rank ``r``."""
        p = self.carry((), rep, r)
        if p is None:
            raise PlannerError(f"syccl: no verified automorphism maps GPU {rep} to GPU {r} (internal)")
        return p

    def group_perm(self, dim: int, gi: int) -> Perm | None:
        """A verified automorphism mapping group ``gi`` of ``dim`` onto the dimension's first group (None when
        the groups are not isomorphic through the verified group: the group is then its own class)."""
        key = (dim, gi)
        if key in self._group_perm:
            return self._group_perm[key]
        grp = self.dims[dim].groups[gi]
        ref = self.dims[dim].groups[0]
        res: Perm | None = None
        if gi == 0:
            res = tuple(range(self.nranks))
        else:
            p = self.carry((), grp[0], ref[0])
            if p is not None and sorted(p[x] for x in grp) == list(ref):
                res = p
        self._group_perm[key] = res
        return res

    # ------------------------------------------------------------------ the coordinate group (search only)
    def _block(self, j: int) -> int:
        return self.nic_local[j] if self.nics else 0

    def coord_orbits(self, fixed: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """Orbits of ranks under the pointwise stabiliser of ``fixed`` in the *coordinate group*: any server
        permutation times any permutation of local indices that keeps NIC blocks together. The sketch search
        enumerates trees in these classes (a tree is valid whatever the fabric); symmetry the plan relies on
        (replication, isomorphic sub-demands, Pruning 1) only ever uses the verified automorphisms above."""
        key = tuple(sorted(set(fixed)))
        hit = self._coord_cache.get(key)
        if hit is not None:
            return hit
        m = self.m
        fs = sorted({f // m for f in key})
        fl = sorted({f % m for f in key})
        others = [s for s in range(self.n) if s not in fs]
        sclasses = [(s,) for s in fs] + ([tuple(others)] if others else [])
        fixed_blocks = sorted({self._block(j) for j in fl})
        lclasses: list[tuple[int, ...]] = [(j,) for j in fl]
        for b in fixed_blocks:
            rest = tuple(j for j in range(m) if self._block(j) == b and j not in fl)
            if rest:
                lclasses.append(rest)
        free = tuple(j for j in range(m) if self._block(j) not in fixed_blocks)
        if free:
            lclasses.append(free)
        res = tuple(
            sorted(tuple(sorted(s * m + j for s in sc for j in lc)) for sc in sclasses for lc in lclasses)
        )
        self._coord_cache[key] = res
        return res

    def coord_carry(self, fixed: tuple[int, ...], a: int, b: int) -> Perm:
        """A coordinate-group permutation fixing ``fixed`` pointwise and sending a to b (same coordinate
        orbit); used to carry one holder's choice of children to the holders of its class."""
        m = self.m
        fs = {f // m for f in fixed}
        fl = {f % m for f in fixed}
        sa, sb, ja, jb = a // m, b // m, a % m, b % m
        servers = list(range(self.n))
        if sa != sb:
            if sa in fs or sb in fs:
                raise ValueError(f"ranks {a} and {b} are not in one coordinate orbit")
            servers[sa], servers[sb] = sb, sa
        loc = list(range(m))
        if ja != jb:
            if ja in fl or jb in fl:
                raise ValueError(f"ranks {a} and {b} are not in one coordinate orbit")
            ba, bb = self._block(ja), self._block(jb)
            if ba != bb:
                la = [j for j in range(m) if self._block(j) == ba]
                lb = [j for j in range(m) if self._block(j) == bb]
                for x, y in zip(la, lb):
                    loc[x], loc[y] = y, x
            cur = loc[ja]
            if cur != jb:  # align within the target block: swap the images cur and jb
                i_cur, i_jb = loc.index(cur), loc.index(jb)
                loc[i_cur], loc[i_jb] = jb, cur
        return tuple(servers[r // m] * m + loc[r % m] for r in range(self.nranks))

    def describe(self) -> str:
        dims = ", ".join(f"{d.name} x{len(d.groups)}" for d in self.dims) or "none"
        kind = "transitive" if self.transitive else f"{len(self.gpu_orbits)} GPU orbits (degraded)"
        return f"dims [{dims}], {kind}, {self.checked} automorphisms verified"
