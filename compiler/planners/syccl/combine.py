"""Sketch combination: replicate a sketch through the symmetry, then mix sketches so every dimension's load
matches its bandwidth.

SyCCL (SIGCOMM'25) slides, "Design 1-2: Generating Sketch Combinations": one sketch alone uses only part of the
bandwidth and can be unbalanced, (a) between the groups of one dimension (inter-group imbalance) and (b)
between dimensions whose loads do not match their bandwidths (inter-dimension imbalance). The fix is to split
the data and send it along several sketches: **first replicate a sketch, then combine**. The slides' example
``C4 = {<4, 0.25>, <4^1, 0.25>, <4^2, 0.25>, <4^3, 0.25>}`` is sketch 4 and its three symmetric images with a
quarter of the data each. "Design 1-3" extends this to all-to-all: the sketches found for GPU 0 are mapped to
the other N - 1 sources through the topology's symmetry and combined.

Here (our design where the slides stop):

- **Replication** (:func:`replicate`): a sketch's images under the verified automorphisms that fix its root
  (:func:`a2acc.planners.syccl.sketch.images`), equal weights; then every source of the root's orbit gets the
  images carried by a verified automorphism. This removes (a).
- **Loads** (:func:`loads`): per resource, the bytes the all-to-all puts on it, in units of one pair's data.
  Resources are a dimension's ports: each GPU's scale-up egress and ingress (the sum of its intra links) and
  each NIC's transmit and receive side (rail and net hops both cross the sender's and the receiver's NIC).
- **Combination** (:func:`combine`): weights ``w`` over the replicated sketches (summing to 1 per GPU orbit)
  minimising ``T`` subject to ``sum_k w_k load_k[r] <= cap[r] T`` for every resource r: an LP solved with
  HiGHS; a second phase keeps ``T`` and minimises the bytes moved, so extra relays only appear when they buy
  time. This removes (b).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from a2acc.flows.lp import INF, Lp, Solver
from a2acc.model.topology import Topology
from a2acc.planners.syccl.sketch import Sketch, images
from a2acc.planners.syccl.symmetry import Perm, Symmetry

MIN_SHARE = 0.05


@dataclass(frozen=True, eq=False)
class Resources:
    """Per-dimension ports: ``intra_out[r]``, ``intra_in[r]`` (rank r), ``nic_out[k]``, ``nic_in[k]`` (NIC k)."""

    names: tuple[str, ...]
    cap: npt.NDArray[np.float64]  # bytes/s
    nranks: int
    nnics: int

    def intra_out(self, r: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return r

    def intra_in(self, r: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return r + self.nranks

    def nic_out(self, k: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return 2 * self.nranks + k

    def nic_in(self, k: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return 2 * self.nranks + self.nnics + k


def resources(topo: Topology, sym: Symmetry) -> Resources:
    n = sym.nranks
    nnics = sym.n * max(sym.nics, 1)
    out = np.zeros(n)
    inn = np.zeros(n)
    for (u, v), bw, kind in zip(topo.link_names, topo.link_bandwidths, topo.link_kinds):
        if kind != "intra":
            continue
        if u.startswith("g"):
            out[int(u[1:])] += bw
        if v.startswith("g"):
            inn[int(v[1:])] += bw
    nic = topo.inter.bandwidth * 1e9 if topo.inter is not None else 0.0
    cap = np.concatenate([out, inn, np.full(2 * nnics, nic)])
    names = (
        tuple(f"intra_out{r}" for r in range(n))
        + tuple(f"intra_in{r}" for r in range(n))
        + tuple(f"nic_out{k}" for k in range(nnics))
        + tuple(f"nic_in{k}" for k in range(nnics))
    )
    return Resources(names, cap, n, nnics)


@dataclass(frozen=True)
class Replica:
    """A sketch replicated over its root's symmetric images (equal weights) for one GPU orbit: ``perms[k]``
    maps ``base`` onto ``trees[k]``."""

    orbit: tuple[int, ...]
    base: Sketch
    perms: tuple[Perm, ...]
    trees: tuple[Sketch, ...]
    capped: bool  # more images than the cap: the sketch is used alone (unbalanced between groups)


def replicate(sym: Symmetry, sk: Sketch, orbit: tuple[int, ...], cap: int) -> Replica:
    ims = images(sym, sk, cap)
    if ims is None:
        return Replica(orbit, sk, (tuple(range(sym.nranks)),), (sk,), True)
    return Replica(orbit, sk, tuple(g for g, _t in ims), tuple(t for _g, t in ims), False)


@dataclass(frozen=True)
class Load:
    vector: npt.NDArray[np.float64]  # bytes per resource
    volume: float  # bytes moved over links (all hops)
    fan_in: int  # the most distinct senders any NIC receives from (incast exposure)


def hop_arrays(
    trees: tuple[Sketch, ...],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """(senders, receivers, shares / number of trees) of every tree edge of a replica."""
    a: list[int] = []
    b: list[int] = []
    v: list[float] = []
    w = 1.0 / len(trees)
    for t in trees:
        for _lvl, p, c, shares in t.hops():
            a.append(p)
            b.append(c)
            v.append(shares * w)
    return np.array(a, dtype=np.int64), np.array(b, dtype=np.int64), np.array(v, dtype=np.float64)


def subtree_matrix(t: Sketch) -> npt.NDArray[np.float64]:
    """``M[x, d] = 1`` when d is in the subtree of x (x not the root): the hop into x carries d's data."""
    n = len(t.parent)
    mat = np.eye(n)
    mat[t.root, t.root] = 0.0
    for x in sorted((x for x in range(n) if x != t.root), key=lambda x: (-t.depth[x], x)):
        p = t.parent[x]
        if p != t.root:
            mat[p] += mat[x]
    return mat


@dataclass(frozen=True, eq=False)
class LoadIndex:
    """What :func:`loads` reads of a replica besides the matrix (the topology's part, computed once per column
    of a synthesis): the sources, every hop's ranks as gather indices, the subtree matrix, and the port every
    hop loads on each side."""

    orbit: npt.NDArray[np.int64]  # (S, 1, 1): the orbit's sources
    comp: npt.NDArray[np.int64]  # (S, K, N): comp[i, k, x] = g_i(h_k(x))
    sub: npt.NDArray[np.float64]  # (N, N): subtree_matrix of the base tree
    send: npt.NDArray[np.int64]  # per hop: the port it loads on the sending side
    recv: npt.NDArray[np.int64]  # ... and on the receiving side
    inter: npt.NDArray[np.bool_]  # per hop: crosses servers
    heard: npt.NDArray[np.int64]  # per hop: receiving NIC x N + sender
    xs: npt.NDArray[np.int64]  # the base tree's ranks other than its root
    share: float  # each image's share
    ncap: int
    nnics: int
    nranks: int


def load_index(sym: Symmetry, res: Resources, rep: Replica) -> LoadIndex:
    """The matrix-free part of :func:`loads` for ``rep``."""
    base = rep.base
    root = base.root
    n = sym.nranks
    gmap = np.array([sym.to_source(root, s) for s in rep.orbit], dtype=np.int64)  # (S, N)
    hmap = np.array(rep.perms, dtype=np.int64)  # (K, N)
    comp = gmap[:, hmap]
    par = np.array(base.parent, dtype=np.int64)
    par[root] = root  # the root's "hop" carries nothing (its subtree row is zero) and lands nowhere
    a, b = comp[:, :, par].ravel(), comp.ravel()
    nic_of = np.array([sym.nic_node(r) for r in range(n)], dtype=np.int64)
    na, nb = nic_of[a], nic_of[b]
    intra = a // sym.m == b // sym.m
    return LoadIndex(
        orbit=np.array(rep.orbit, dtype=np.int64)[:, None, None],
        comp=comp,
        sub=subtree_matrix(base),
        send=np.where(intra, res.intra_out(a), res.nic_out(na)),
        recv=np.where(intra, res.intra_in(b), res.nic_in(nb)),
        inter=~intra,
        heard=nb * n + a,
        xs=np.array([x for x in range(len(par)) if x != root], dtype=np.int64),
        share=1.0 / len(rep.perms),
        ncap=res.cap.shape[0],
        nnics=res.nnics,
        nranks=n,
    )


def loads(ix: LoadIndex, demand: npt.NDArray[np.float64]) -> Load:
    """All-to-all loads of a replica (its :func:`load_index`) for ``demand`` (bytes, N x N, diagonal ignored):
    every source of the replica's orbit sends along the images carried to it by verified automorphisms; the hop
    into x of a tree carries the source's bytes for every destination in x's subtree. Vectorised over images and
    sources: image k seen from source i is the base tree under ``g_i o perms[k]``."""
    dem = np.array(demand, dtype=np.float64)
    np.fill_diagonal(dem, 0.0)
    dm = dem[ix.orbit, ix.comp]  # dm[i, k, d] = demand[s_i, (g_i o h_k)(d)]
    carried = dm @ ix.sub.T  # (S, K, N): bytes on the hop into x of image k from source i
    v = carried.ravel() * ix.share
    # each hop loads one sending and one receiving port: one bincount per side (a port is only ever on one
    # side, so the sums are the per-port sums in hop order)
    vec = np.bincount(ix.send, v, ix.ncap).astype(np.float64, copy=False)
    vec += np.bincount(ix.recv, v, ix.ncap)
    heard = np.bincount(ix.heard, ix.inter & (v > 0), ix.nnics * ix.nranks).reshape(ix.nnics, ix.nranks) > 0
    fan = heard.sum(axis=1)  # per NIC, the distinct ranks it hears from
    volume = float((carried[:, :, ix.xs] * ix.share).ravel().sum())
    return Load(vec, volume, int(fan.max()))


def bound(load: npt.NDArray[np.float64], cap: npt.NDArray[np.float64]) -> float:
    """Seconds per byte-per-pair on the busiest resource (a lower bound on the replica's time)."""
    used = load > 0
    if not used.any():
        return 0.0
    return float((load[used] / cap[used]).max())


def combine(
    columns: list[npt.NDArray[np.float64]],
    volume: list[float],
    orbit_of: list[int],
    cap: npt.NDArray[np.float64],
    time_limit: float | None,
    allowed: npt.NDArray[np.bool_] | None = None,
) -> tuple[npt.NDArray[np.float64], float] | None:
    """Weights over the ``allowed`` columns (summing to 1 per orbit) minimising the busiest resource's time,
    then the bytes moved; None when HiGHS returns nothing (time limit). The LP is solved twice: once over
    every column, then over the columns that got at least ``MIN_SHARE`` (each column in a mix costs transfers;
    slivers balance little), so the mix stays sparse and is re-balanced on what it keeps."""
    ok = np.ones(len(columns), dtype=bool) if allowed is None else allowed
    first = _combine(columns, volume, orbit_of, cap, time_limit, ok)
    if first is None:
        return None
    w, _t = first
    keep = (w >= MIN_SHARE) & ok
    for o in sorted(set(orbit_of)):  # every orbit keeps at least its heaviest column
        members = [c for c in range(len(columns)) if orbit_of[c] == o]
        best = max(members, key=lambda c: (w[c], -c))
        keep[best] = True
    second = _combine(columns, volume, orbit_of, cap, time_limit, keep)
    if second is None:
        return first
    w2, t2 = second
    w2[w2 < 1e-6] = 0.0
    for o in sorted(set(orbit_of)):
        members = [c for c in range(len(columns)) if orbit_of[c] == o]
        w2[members] /= float(w2[members].sum())
    return w2, t2


def _combine(
    columns: list[npt.NDArray[np.float64]],
    volume: list[float],
    orbit_of: list[int],
    cap: npt.NDArray[np.float64],
    time_limit: float | None,
    allowed: npt.NDArray[np.bool_],
) -> tuple[npt.NDArray[np.float64], float] | None:
    ncol = len(columns)
    live = np.flatnonzero(np.stack(columns).sum(axis=0) > 0)
    loadm = np.stack(columns)[:, live] / cap[live]  # (C, R') seconds per unit weight
    scale = float(loadm.max()) or 1.0
    loadm = loadm / scale
    R = live.shape[0]
    orbits = sorted(set(orbit_of))
    t_col = ncol
    cc, rr = np.nonzero(loadm)
    rows = [rr, np.arange(R)]
    cols = [cc, np.full(R, t_col)]
    vals = [loadm[cc, rr], -np.ones(R)]
    for i, o in enumerate(orbits):
        members = [c for c in range(ncol) if orbit_of[c] == o]
        rows.append(np.full(len(members), R + i))
        cols.append(np.array(members, dtype=np.int64))
        vals.append(np.ones(len(members)))
    lp = Lp(
        ncols=ncol + 1,
        nrows=R + len(orbits),
        cols=np.concatenate(cols).astype(np.int64),
        rows=np.concatenate(rows).astype(np.int64),
        vals=np.concatenate(vals),
        cost=np.concatenate([np.zeros(ncol), [1.0]]),
        row_lo=np.concatenate([np.full(R, -INF), np.ones(len(orbits))]),
        row_hi=np.concatenate([np.zeros(R), np.ones(len(orbits))]),
        col_lo=np.zeros(ncol + 1),
        col_hi=np.concatenate([np.where(allowed, INF, 0.0), [INF]]),
    )
    solver = Solver(lp, time_limit)
    first = solver.run()
    if first.x is None:
        return None
    x = first.x
    if first.status == "optimal":
        vol = np.array(volume, dtype=np.float64)
        cost = np.concatenate([vol / (float(vol.max()) or 1.0), [0.0]])
        second = solver.reoptimize(cost, t_col, float(x[t_col]) * (1 + 1e-6) + 1e-12)
        if second.status == "optimal" and second.x is not None:
            x = second.x
    w = np.maximum(x[:ncol], 0.0)
    w[~allowed] = 0.0
    for o in orbits:
        members = [c for c in range(ncol) if orbit_of[c] == o]
        tot = float(w[members].sum())
        if tot <= 0:
            return None
        w[members] /= tot
    return w, float(x[t_col]) * scale
