"""Max-concurrent flow at N ~ 1000 without a monolithic LP: a first-order path flow and a certified bound.

The monolithic link LP has N x E variables (8.4 M for GenKautz n=1024, d=8); HiGHS does not solve it on a small
machine. Here the flow is restricted to **candidate paths** (one per first hop of the source, each continued
along a shortest path, :func:`candidates`: the path formulation's set, built with arrays), which loses nothing
measurable on the 64-node graphs (the path LP over them equals the link LP optimum on the 4x4x4 torus, the
hypercube 2^6 and GenKautz 64, d=4); on low-degree graphs it can (GenKautz 16, d=2, one Zipf matrix: 3.4 %).

**Primal** (:func:`path_flow`): minimise a smooth maximum of the link utilisations, ``Phi(x) = max_e u_e`` over
``log-sum-exp`` with sharpness ``beta = ln E / (eps T)``, ``eps`` lowered from 0.2 to 0.002 (continuation), by
**gradient projection** on each pair's path split (the path-equilibration method of traffic assignment,
Jayakrishnan et al. 1994): every pair moves flow from its dearer paths to its cheapest one (cost: the path's sum
of ``dPhi/dL_e``), by the Newton step of the diagonal second derivative; all pairs move together and a line
search on ``Phi`` scales the move. Every iterate is a feasible flow: its completion time ``max_e L_e / c_e`` is
an upper bound on the optimum, and the best iterate is kept.

**Bound** (:func:`dual_bound`): for any edge lengths ``l >= 0``, ``sum_sd D_sd dist_l(s, d) / sum_e c_e l_e`` is a
lower bound on the optimum (LP duality; each pair's bytes cross at least ``dist_l`` of length, and the links can
absorb at most ``sum c l`` per second). Lengths come from exponentiated-gradient ascent on the same bound over
the candidate paths (soft minimum per pair), and from the primal's saturated links (a cut: tight on tori and
hypercubes, where the optimum is a bisection); each is certified with exact all-pairs distances (vectorised
Bellman-Ford over blocks of sources, run through :mod:`.parallel`), and the best is kept. The bound and the
primal bracket the optimum: ``time / bound`` says how loose either can be.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from a2acc.flows.decompose import next_hops
from a2acc.flows.mcf import _offdiag, hop_distances
from a2acc.flows.network import FlowNetwork
from a2acc.flows.parallel import run_all
from a2acc.native import pathflow as _native_pathflow

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: primal iterations (continuation from eps 0.2 to EPS_FINAL), dual ascent iterations
ITERATIONS = 200
EPS_FINAL = 0.002
DUAL_ITERATIONS = 300
#: paths kept per pair after the first sweeps (each path of a pair becomes its own chain of ops: a flow over all
#: eight first hops made 4.2 routes and 18.5 M ops at 1024 GPUs), and the polishing sweeps over them
KEEP = 2
POLISH = 40
POLISH_EPS = 0.01
#: source blocks the flow moves one at a time (Gauss-Seidel: pairs of one block rarely compete for a link, so
#: the line search takes near-full Newton steps; all pairs at once: 1.3 % above the LP optimum on GenKautz 64
#: after 300 sweeps, 16 blocks: 0.3 %)
BLOCKS = 16
#: sources per all-pairs-distance task (a block's work array is block x nodes x in-degree floats)
BLOCK = 128


@dataclass(frozen=True)
class Candidates:
    """Paths ``p`` of pair ``pair[p]`` (pairs ``pairs`` (P', 2), each pair's paths consecutive), edges in CSR."""

    pairs: I64
    pair: I64
    ptr: I64
    edges: I64
    length: I64

    @property
    def npaths(self) -> int:
        return int(self.pair.shape[0])


@dataclass(frozen=True)
class ScaleFlow:
    time_s: float  # completion time of the best flow found (an upper bound on the optimum)
    cand: Candidates
    amount: F64  # bytes per candidate path
    iterations: int
    seconds: float
    status: str  # "converged", "iterations" or "time_limit"


def _out_table(net: FlowNetwork) -> I64:
    deg = max((len(o) for o in net.out_edges), default=0)
    out = np.full((net.nnodes, max(deg, 1)), -1, dtype=np.int64)
    for v, o in enumerate(net.out_edges):
        out[v, : len(o)] = o
    return out


def candidates(net: FlowNetwork, demand: F64, k: int, blocks: int = 1) -> Candidates:
    """Up to ``k`` paths per pair with demand: for every edge out of the source, that edge then a shortest path
    (ties rotate with destination and node, as :func:`a2acc.flows.mcf.candidate_paths`), shortest first; paths
    that come back through the source are dropped. Built for all pairs at once, one first hop at a time.
    Pairs are ordered by source block (``source % blocks``), then by source and destination."""
    dist = hop_distances(net)
    nh = next_hops(net, dist)
    rn = net.rank_node
    n = len(rn)
    s_all, t_all = np.nonzero(demand > 0)
    out = _out_table(net)
    maxh = int(dist.max()) + 1
    parts: list[tuple[I64, I64, I64, I64]] = []
    for j in range(out.shape[1]):
        e0 = out[rn[s_all], j]
        ok = e0 >= 0
        s, t, e0 = s_all[ok], t_all[ok], e0[ok]
        tn = rn[t]
        x = net.head[e0]
        reach = dist[x, tn] >= 0
        s, t, e0, x, tn = s[reach], t[reach], e0[reach], x[reach], tn[reach]
        walk = np.full((len(s), maxh), -1, dtype=np.int64)
        walk[:, 0] = e0
        back = x == rn[s]
        for h in range(1, maxh):
            live = np.flatnonzero(x != tn)
            if not len(live):
                break
            e = nh[x[live], tn[live]]
            walk[live, h] = e
            x[live] = net.head[e]
            back[live] |= x[live] == rn[s[live]]
        keep = ~back
        parts.append((s[keep], t[keep], walk[keep], 1 + dist[net.head[e0[keep]], tn[keep]]))
    s = np.concatenate([p[0] for p in parts])
    t = np.concatenate([p[1] for p in parts])
    walk = np.concatenate([p[2] for p in parts])
    length = np.concatenate([p[3] for p in parts])
    key = (s % blocks) * n * n + s * n + t  # pairs grouped by source block, then by (source, destination)
    order = np.lexsort((length, key))  # stable: equal lengths keep first-hop order
    key, walk, length = key[order], walk[order], length[order]
    first = np.concatenate([[True], key[1:] != key[:-1]])
    start = np.maximum.accumulate(np.where(first, np.arange(len(key)), 0))
    keep = (np.arange(len(key)) - start) < k
    key, walk, length = key[keep], walk[keep], length[keep]
    first = np.concatenate([[True], key[1:] != key[:-1]])
    pairs = np.stack([key[first] % (n * n) // n, key[first] % n], axis=1)
    valid = walk >= 0
    ptr = np.concatenate([[0], np.cumsum(valid.sum(axis=1))]).astype(np.int64)
    return Candidates(pairs, np.cumsum(first) - 1, ptr, walk[valid], length.astype(np.int64))


class _Incidence:
    """Path-edge incidence of the candidates with the per-pair reductions the flow loop needs. Its sums over
    the path-edge entries (~47 M at 1024 GPUs, a few hundred sums per flow) run in the compiled core
    ``a2acc._pathflow`` when it was built: the same terms added in the same order as the ``np.bincount``
    expressions here, the reference (``native=False``), so the same floats (tested)."""

    def __init__(
        self, net: FlowNetwork, cand: Candidates, demand: F64, *, native: bool | None = None
    ) -> None:
        self.E = net.nedges
        self.cap = net.cap
        self.ptr = np.ascontiguousarray(cand.ptr, dtype=np.int64)
        self.entry_edge = np.ascontiguousarray(cand.edges, dtype=np.int64)
        self.pair = cand.pair
        self.npaths = cand.npaths
        self.starts = np.flatnonzero(np.concatenate([[True], cand.pair[1:] != cand.pair[:-1]]))
        self.dem = demand[cand.pairs[:, 0], cand.pairs[:, 1]]
        if native and _native_pathflow is None:
            raise RuntimeError("the compiled path-edge sums are not built")
        self.core = None if native is False else _native_pathflow  # None: the reference
        self._entry_path: I64 | None = None

    @property
    def entry_path(self) -> I64:
        """The path of every entry (the reference's index; built on first use)."""
        if self._entry_path is None:
            self._entry_path = np.repeat(np.arange(self.npaths, dtype=np.int64), np.diff(self.ptr))
        return self._entry_path

    def edge_sums(self, w: F64, paths: slice | None = None) -> F64:
        """Per edge: the sum of ``w`` (one value per path of ``paths``, all paths by default) over the entries of
        those paths on it."""
        p0, p1 = (0, self.npaths) if paths is None else (int(paths.start), int(paths.stop))
        w = np.ascontiguousarray(w, dtype=np.float64)
        if self.core is not None:
            out = self.core.edge_sums(self.ptr, self.entry_edge, p0, p1, w, self.E)
            return np.frombuffer(out, dtype=np.float64).copy()
        e0, e1 = int(self.ptr[p0]), int(self.ptr[p1])
        ep = self.entry_path[e0:e1] - p0
        return np.asarray(np.bincount(self.entry_edge[e0:e1], weights=w[ep], minlength=self.E), np.float64)

    def path_sums(self, *per_edge: F64, paths: slice | None = None) -> list[F64]:
        """Per path of ``paths`` (all by default), for each per-edge array given: its sum over the path's
        edges."""
        p0, p1 = (0, self.npaths) if paths is None else (int(paths.start), int(paths.stop))
        vs = [np.ascontiguousarray(v, dtype=np.float64) for v in per_edge]
        if self.core is not None:
            out: list[F64] = []
            for i in range(0, len(vs), 2):
                pair = vs[i : i + 2]
                got = self.core.path_sums(
                    self.ptr, self.entry_edge, p0, p1, pair[0], pair[1] if len(pair) > 1 else None
                )
                out += [np.frombuffer(g, dtype=np.float64).copy() for g in got[: len(pair)]]
            return out
        e0, e1 = int(self.ptr[p0]), int(self.ptr[p1])
        ep, ee = self.entry_path[e0:e1] - p0, self.entry_edge[e0:e1]
        return [np.asarray(np.bincount(ep, weights=v[ee], minlength=p1 - p0), dtype=np.float64) for v in vs]

    def loads(self, x: F64) -> F64:
        return self.edge_sums(x)


def _lse(u: F64, beta: float) -> float:
    m = float(u.max())
    return m + float(np.log(np.exp(beta * (u - m)).sum())) / beta


def _line_search(load: F64, step: F64, cap: F64, beta: float) -> float:
    """Golden-section search of theta in [0, 1] minimising the smooth maximum of (load + theta step) / cap."""
    lo, hi = 0.0, 1.0
    for _ in range(25):
        a, b = lo + 0.382 * (hi - lo), lo + 0.618 * (hi - lo)
        if _lse((load + a * step) / cap, beta) < _lse((load + b * step) / cap, beta):
            hi = b
        else:
            lo = a
    return (lo + hi) / 2


def _block_step(inc: _Incidence, x: F64, load: F64, eps: float, paths: slice) -> tuple[F64, F64, float]:
    """One gradient-projection move of the pairs whose paths are ``paths`` (module
    docstring): the paths' change, the links' change and the smooth maximum's sharpness."""
    cap = inc.cap
    u = load / cap
    top = float(u.max())
    beta = float(np.log(inc.E) / (eps * top))
    w = np.exp(beta * (u - top))
    w /= w.sum()
    p0 = int(paths.start)
    xb = x[paths]
    npaths = len(xb)
    g, h = inc.path_sums(w / cap, beta * w * (1 - w) / cap**2 + 1e-300, paths=paths)
    pair = inc.pair[paths] - inc.pair[p0]
    starts = np.flatnonzero(np.concatenate([[True], pair[1:] != pair[:-1]]))
    gmin = np.minimum.reduceat(g, starts)
    at = np.flatnonzero(g <= gmin[pair])
    mi = at[np.concatenate([[True], pair[at][1:] != pair[at][:-1]])]  # first cheapest path of each pair
    is_min = np.zeros(npaths, dtype=bool)
    is_min[mi] = True
    delta = np.where(is_min, 0.0, np.minimum(xb, (g - gmin[pair]) / (h + h[mi][pair])))
    dx = -delta
    dx[mi] += np.bincount(pair, weights=delta, minlength=len(mi))
    return dx, inc.edge_sums(dx, paths), beta


def _blocks(cand: Candidates, blocks: int) -> list[slice]:
    """The paths of each source block (candidates are ordered by block)."""
    blk = cand.pairs[cand.pair, 0] % blocks
    cut = np.searchsorted(blk, np.arange(blocks + 1))
    return [slice(int(cut[b]), int(cut[b + 1])) for b in range(blocks) if cut[b + 1] > cut[b]]


def _descend(
    net: FlowNetwork,
    cand: Candidates,
    demand: F64,
    x: F64,
    sweeps: int,
    eps0: float,
    deadline: float | None,
    desc: str,
) -> tuple[F64, float, int, bool]:
    """``sweeps`` block sweeps of gradient projection from ``x`` (``eps`` from ``eps0`` down to
    :data:`EPS_FINAL`): the best flow seen, its completion time, the sweeps run, and whether the deadline
    (a ``time.perf_counter`` value) stopped it."""
    from tqdm import tqdm

    inc = _Incidence(net, cand, demand)
    x = np.array(x, dtype=np.float64)
    load = inc.loads(x)
    best_t, best_x = float((load / net.cap).max()), x.copy()
    parts = _blocks(cand, BLOCKS)
    it, stopped = 0, False
    bar = tqdm(total=sweeps, desc=desc, disable=None, leave=False)
    try:
        for it in range(1, sweeps + 1):
            eps = max(EPS_FINAL, eps0 * 0.97 ** (it - 1))
            for paths in parts:
                dx, dload, beta = _block_step(inc, x, load, eps, paths)
                theta = _line_search(load, dload, net.cap, beta)
                x[paths] += theta * dx
                load += theta * dload
            np.maximum(x, 0.0, out=x)
            load = inc.loads(x)  # afresh each sweep: no drift from the incremental updates
            t_now = float((load / net.cap).max())
            if t_now < best_t:
                best_t, best_x = t_now, x.copy()
            bar.update()
            if deadline is not None and time.perf_counter() > deadline:
                stopped = True
                break
    finally:
        bar.close()
    return best_x, best_t, it, stopped


def _prune(cand: Candidates, x: F64, keep: int) -> tuple[Candidates, F64]:
    """Each pair's ``keep`` paths of most flow (ties: the first), its demand shared over them in proportion."""
    order = np.lexsort((np.arange(cand.npaths), -x, cand.pair))
    first = np.searchsorted(cand.pair[order], np.arange(int(cand.pair[-1]) + 1 if cand.npaths else 0))
    rank = np.empty(cand.npaths, dtype=np.int64)
    rank[order] = np.arange(cand.npaths) - first[cand.pair[order]]
    sel = rank < keep
    lens = np.diff(cand.ptr)
    ptr = np.concatenate([[0], np.cumsum(lens[sel])]).astype(np.int64)
    sub = Candidates(cand.pairs, cand.pair[sel], ptr, cand.edges[np.repeat(sel, lens)], cand.length[sel])
    xs = x[sel]
    tot = np.bincount(sub.pair, weights=xs)
    want = np.bincount(cand.pair, weights=x)
    flat = tot[sub.pair] <= 0
    share = np.where(flat, 1.0 / np.bincount(sub.pair)[sub.pair], xs / np.where(flat, 1.0, tot[sub.pair]))
    return sub, share * want[sub.pair]


def path_flow(
    net: FlowNetwork,
    demand: npt.NDArray[np.float64] | npt.NDArray[np.int64],
    *,
    k: int = 8,
    iterations: int = ITERATIONS,
    keep: int = KEEP,
    time_limit: float | None = None,
) -> ScaleFlow:
    """The best flow over :func:`candidates` that ``iterations`` block sweeps reach, then pruned to ``keep``
    paths per pair and polished by :data:`POLISH` more sweeps over those (module docstring); ``time_limit``
    (seconds) stops earlier with the best flow so far."""
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    d = _offdiag(demand)
    cand = candidates(net, d, k, BLOCKS)
    short = cand.length == np.minimum.reduceat(cand.length, _Incidence(net, cand, d).starts)[cand.pair]
    x0 = (
        short
        * d[cand.pairs[cand.pair, 0], cand.pairs[cand.pair, 1]]
        / np.bincount(cand.pair, weights=short)[cand.pair]
    )
    x, t, it, stopped = _descend(net, cand, d, x0, iterations, 0.2, deadline, "mcf path flow")
    if keep and not stopped and cand.npaths > keep * len(cand.pairs):
        sub, xs = _prune(cand, x, keep)
        xs, ts, more, stopped = _descend(
            net, sub, d, xs, POLISH, POLISH_EPS, deadline, "mcf path flow, pruned"
        )
        cand, x, t, it = sub, xs, ts, it + more
    status = "time_limit" if stopped else "iterations"
    return ScaleFlow(t, cand, x, it, time.perf_counter() - t0, status)


# ---------------------------------------------------------------------- the bound
def _in_table(net: FlowNetwork) -> tuple[I64, I64]:
    """(V, K) in-edges of every node, padded with edge E (length +inf), and their tails."""
    ins: list[list[int]] = [[] for _ in range(net.nnodes)]
    for e, v in enumerate(net.head.tolist()):
        ins[v].append(e)
    width = max((len(x) for x in ins), default=0)
    ie = np.full((net.nnodes, max(width, 1)), net.nedges, dtype=np.int64)
    for v, x in enumerate(ins):
        ie[v, : len(x)] = x
    return ie, np.append(net.tail, 0)[ie]


def distances(net: FlowNetwork, length: F64, sources: I64) -> F64:
    """(len(sources), V) shortest distances under ``length`` (> 0) from the nodes ``sources``: Bellman-Ford
    rounds over all sources at once until nothing improves."""
    ie, it = _in_table(net)
    lx = np.append(length, np.inf)[ie]
    dist = np.full((len(sources), net.nnodes), np.inf)
    dist[np.arange(len(sources)), sources] = 0.0
    for _ in range(net.nnodes):
        new = np.minimum(dist, (dist[:, it] + lx[None]).min(axis=2))
        if np.array_equal(new, dist):
            break
        dist = new
    return dist


def _bound_block(net: FlowNetwork, length: F64, demand: F64, first: int, last: int) -> float:
    """``sum_{s in [first, last)} sum_d D_sd dist(s, d)`` (one task of :func:`certify`)."""
    dist = distances(net, length, net.rank_node[first:last])
    return float((demand[first:last] * dist[:, net.rank_node]).sum())


def certify(net: FlowNetwork, demand: F64, weights: F64, workers: str | int = 1) -> float:
    """The lower bound of edge weights ``weights`` (``w_e = c_e l_e``, normalised): exact distances per block of
    sources, through ``workers``; blocks summed in order, so the bound is the same wherever they ran."""
    w = np.maximum(np.asarray(weights, dtype=np.float64), 0.0)
    w = w / w.sum()
    length = np.maximum(w, 1e-9 / len(w)) / net.cap  # strictly positive: every edge costs something
    n = len(net.rank_node)
    args = [(net, length, demand, b, min(n, b + BLOCK)) for b in range(0, n, BLOCK)]
    parts = run_all(_bound_block, args, workers, desc="mcf bound distances")
    return float(sum(parts)) / float((net.cap * length).sum())


def _restricted_ascent(inc: _Incidence, iterations: int, start: F64) -> list[F64]:
    """Exponentiated-gradient ascent of the bound over the candidate paths (soft minimum per pair) from the
    weights ``start``: the weights at a few checkpoints, for :func:`certify` to choose from."""
    w = np.maximum(start / start.sum(), 1e-15)
    dem = inc.dem[inc.pair]
    keep: list[F64] = []
    for it in range(iterations):
        lp = inc.path_sums(w / inc.cap)[0]
        lmin = np.minimum.reduceat(lp, inc.starts)[inc.pair]
        pi = np.exp(-(lp - lmin) / (1e-2 * lmin))
        pi /= np.bincount(inc.pair, weights=pi)[inc.pair]
        u = inc.edge_sums(dem * pi) / inc.cap
        step = u - float((w * u).sum())
        w = w * np.exp(0.3 / np.sqrt(1 + it / 10) * step / np.abs(step).max())
        w = np.maximum(w / w.sum(), 1e-15)
        if (it + 1) % (iterations // 3) == 0:
            keep.append(w / w.sum())
    return keep


def ascent_weights(
    net: FlowNetwork,
    demand: npt.NDArray[np.float64] | npt.NDArray[np.int64],
    k: int = 8,
    iterations: int = DUAL_ITERATIONS,
) -> list[F64]:
    """The edge weights :func:`dual_bound`'s ascent over ``k`` candidate paths per pair reaches (a few
    checkpoints). It needs no flow, so the mcf planner runs it in a worker while the flow is computed; a pure
    function of its arguments (the same weights in any process)."""
    if not iterations:
        return []
    d = _offdiag(demand)
    cand = candidates(net, d, k, BLOCKS)
    inc = _Incidence(net, cand, d)
    return _restricted_ascent(inc, iterations, np.ones(net.nedges))


def dual_bound(
    net: FlowNetwork,
    demand: npt.NDArray[np.float64] | npt.NDArray[np.int64],
    flow: ScaleFlow | None = None,
    *,
    k: int = 8,
    workers: str | int = 1,
    iterations: int = DUAL_ITERATIONS,
    ascent: list[F64] | None = None,
) -> tuple[float, str]:
    """The best certified lower bound (module docstring) and which lengths gave it: uniform (hop-bytes), the
    saturated links of ``flow`` (cuts), the gradient of its smooth maximum, or the weights of the ascent over
    ``k`` candidate paths per pair (``ascent``: those weights computed already, by :func:`ascent_weights`
    with the same ``k`` and ``iterations``)."""
    d = _offdiag(demand)
    tries: list[tuple[str, F64]] = [("hop-bytes", np.asarray(net.cap, dtype=np.float64).copy())]
    if flow is not None:
        u = _Incidence(net, flow.cand, d).loads(flow.amount) / net.cap
        top = float(u.max())
        for slack in (0.001, 0.01):
            tries.append((f"cut {slack:g}", (u >= (1 - slack) * top).astype(np.float64)))
        tries.append(("flow gradient", np.exp(np.log(net.nedges) / (EPS_FINAL * top) * (u - top))))
    weights = ascent if ascent is not None else ascent_weights(net, d, k, iterations)
    tries += [("ascent", w) for w in weights]
    best, name = 0.0, ""
    for label, w in tries:
        lb = certify(net, d, w, workers)
        if lb > best:
            best, name = lb, label
    return best, name


def scale_bound(net: FlowNetwork, demand: npt.NDArray[np.float64] | npt.NDArray[np.int64]) -> float:
    """The best certified lower bound of ``demand`` (seconds): a first-order flow for the cut and gradient
    lengths, then :func:`dual_bound` with one path per first hop."""
    k = int(np.bincount(net.tail, minlength=net.nnodes).max())
    flow = path_flow(net, demand, k=k)
    return dual_bound(net, demand, flow, k=k)[0]
