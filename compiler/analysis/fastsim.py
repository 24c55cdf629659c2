"""The fast simulator: the same fluid model as :mod:`a2acc.analysis.simulate`, organised for speed.

Two observations make it fast without changing the model:

1. **Ops that never share a link need no fair-share solve.** A link is *exclusive* when the ops that use it are
   totally ordered by the DAG (each one happens after the previous one): then no two of them are ever active at
   once. Staged schedules are built that way - FAST's stage transfers wait for the sender's previous send and
   the receiver's previous receive, SpreadOut's shifts are pairwise synchronised, mcf's per-link chains are
   chained on purpose - so their scale-out transfers are *solo*: an op whose every binding link is exclusive
   runs at the slowest link of its route and is a single heap event, like a DAG longest-path computation. Incast
   needs two senders on one port, so it never touches a solo op.
2. **The remaining (fluid) ops are solved in batches.** Max-min rates are recomputed only when the fluid set
   changes, with the vectorised local-bottleneck form of progressive filling (every link that is the tightest
   link of all its flows is fixed in the same round - exact, and few rounds). A fluid flow may be retired up to
   ``tolerance`` x its own duration after its exact finish, so flows finishing close together share one solve;
   the error this adds to a completion time is at most ``tolerance`` of the durations along its critical path.

The reference engine stays the definition; ``tests/analysis/test_fastsim.py`` checks that the two agree within
1 % on random Programs (hypothesis). Speed: ``benchmarks/simulator.py`` (docs/simulator.md).
"""

from __future__ import annotations

import heapq
import math

import numpy as np
import numpy.typing as npt

from a2acc.analysis.incast import IncastModel, timeout_penalty
from a2acc.analysis.model import SimModel
from a2acc.analysis.simulate import Episodes, Setup, SimResult, incast_capacity, prepare, resolve_model
from a2acc.errors import InternalError
from a2acc.ir import Program
from a2acc.model.topology import Topology

DEFAULT_TOLERANCE = 1e-2
_DFS_BUDGET = 256
#: group flows by route before a max-min solve from this many flows on
_GROUP_MIN = 64
#: relative slack of the saturation and bottleneck tests (rates are sums of a few float divisions)
_SAT_RTOL = 1e-9


def exclusive_links(st: Setup) -> npt.NDArray[np.bool_]:
    """Per link (plus the dummy pad): True when the ops using it are totally ordered by the DAG."""
    n_ops = st.n_ops
    nl = len(st.cap)
    excl = np.ones(nl + 1, dtype=bool)
    real = st.bind != nl
    ops = np.repeat(np.arange(n_ops, dtype=np.int64), real.sum(axis=1))
    links = st.bind[real]
    if len(ops) < 2:
        return excl
    order = np.lexsort((ops, links))
    ops, links = ops[order], links[order]
    same = links[1:] == links[:-1]
    a, b = ops[:-1][same], ops[1:][same]
    plink = links[1:][same]
    if not len(a):
        return excl
    # direct dependency: is a among b's deps?
    n = np.int64(max(n_ops, 1))
    dep_op = np.repeat(np.arange(n_ops, dtype=np.int64), np.diff(st.dep_ptr))
    edges = np.sort(st.dep_ids * n + dep_op)
    keys = a * n + b
    if len(edges):
        pos = np.searchsorted(edges, keys)
        direct = (pos < len(edges)) & (edges[np.minimum(pos, len(edges) - 1)] == keys)
    else:
        direct = np.zeros(len(keys), dtype=bool)
    bad = ~direct
    no_deps = np.diff(st.dep_ptr)[b] == 0
    excl[np.unique(plink[bad & no_deps])] = False
    todo = np.flatnonzero(bad & ~no_deps)
    if len(todo):
        dep_ptr, dep_ids = st.dep_ptr, st.dep_ids
        for i in todo.tolist():
            lk = int(plink[i])
            if excl[lk] and not _reaches(int(a[i]), int(b[i]), dep_ptr, dep_ids):
                excl[lk] = False
    excl[nl] = True
    return excl


def _reaches(a: int, b: int, dep_ptr: npt.NDArray[np.int64], dep_ids: npt.NDArray[np.int64]) -> bool:
    """Does ``b`` (transitively) depend on ``a``? Backward search from ``b`` over ops with id >= ``a`` (ids are a
    topological order); gives up (False: treat as concurrent, which is always safe) after a budget of ops."""
    stack = [b]
    seen = {b}
    while stack:
        x = stack.pop()
        for d in dep_ids[dep_ptr[x] : dep_ptr[x + 1]].tolist():
            if d == a:
                return True
            if d > a and d not in seen:
                if len(seen) >= _DFS_BUDGET:
                    return False
                seen.add(d)
                stack.append(d)
    return False


def _component(rows: npt.NDArray[np.int64], seed: npt.NDArray[np.bool_], pad: int) -> npt.NDArray[np.bool_]:
    """Flows connected (through shared links) to the links marked in ``seed``: the only ones whose max-min
    rates can change. Max-min fair sharing decomposes over connected components, so the rest keep theirs."""
    mark = seed.copy()
    while True:
        hit = mark[rows].any(axis=1)
        links = rows[hit].ravel()
        links = links[links != pad]
        if mark[links].all():
            return hit
        mark[links] = True


def max_min(
    bind: npt.NDArray[np.int64],
    cap: npt.NDArray[np.float64],
    weight: npt.NDArray[np.float64] | None = None,
) -> npt.NDArray[np.float64]:
    """Max-min fair rates of flows with binding links ``bind`` ([flows, K], padded with ``len(cap)``); a row
    with ``weight`` w stands for w identical flows (each gets the returned rate).

    Local-bottleneck progressive filling: in each round every link whose fair share is the smallest share on
    every flow crossing it fixes all its flows at that share. Such a link cannot be undercut later (fixing
    flows elsewhere only raises other links' shares), so this is exact progressive filling, in fewer rounds."""
    nf, k = bind.shape
    if nf == 0:
        return np.zeros(0)
    ext = np.append(cap, np.inf)
    if len(cap) > 8 * bind.size:  # few flows on a large topology: compact the link space to the links used
        used, inv = np.unique(bind, return_inverse=True)
        rows = inv.reshape(nf, k)
        rem = ext[used].astype(np.float64)
        nl = len(used)
        pad = nl - 1 if used[-1] == len(cap) else -1
    else:
        rows = bind
        rem = ext.copy()
        nl = len(ext)
        pad = nl - 1
    rate = np.zeros(nf)
    idx = np.arange(nf)
    w = None if weight is None else np.asarray(weight, dtype=np.float64)
    while len(idx):
        flat = rows.ravel()
        cnt = np.bincount(flat, weights=None if w is None else np.repeat(w, k), minlength=nl).astype(np.float64)
        if pad >= 0:
            cnt[pad] = 0.0
        share = rem / np.maximum(cnt, 1.0)
        share[cnt == 0] = np.inf
        es = share[rows]
        fmin = np.minimum(es[:, 0], es[:, 1]) if k == 2 else es.min(axis=1)
        if not np.isfinite(fmin).all():  # pragma: no cover - every flow has a finite binding link
            raise InternalError("max-min: a flow without a binding link")
        at_min = es <= fmin[:, None] * (1 + 1e-12)
        not_min = np.bincount(flat[~at_min.ravel()], minlength=nl)
        bott = (not_min == 0) & (cnt > 0)
        fix = bott[rows].any(axis=1)
        r = fmin[fix]
        rate[idx[fix]] = r
        used_r = r if w is None else r * w[fix]
        rem -= np.bincount(rows[fix].ravel(), weights=np.repeat(used_r, k), minlength=nl)
        np.maximum(rem, 0.0, out=rem)
        keep = ~fix
        idx = idx[keep]
        rows = rows[keep]
        if w is not None:
            w = w[keep]
    return rate


def simulate_fast(
    prog: Program,
    topo: Topology,
    *,
    model: SimModel | None = None,
    incast: IncastModel | None = None,
    payload_bytes: int | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> SimResult:
    """Simulate ``prog`` on ``topo`` (module docstring); same arguments and result as
    :func:`a2acc.analysis.simulate.simulate` (no utilisation timeline)."""
    mdl = resolve_model(topo, model, incast)
    st = prepare(prog, topo, mdl)
    total = payload_bytes if payload_bytes is not None else int(prog.counts.sum()) * prog.unit_bytes
    return simulate_setup(st, tolerance=tolerance, payload_bytes=total)


def _rates(rows: npt.NDArray[np.int64], cap: npt.NDArray[np.float64], lcount: npt.NDArray[np.int64]):
    """Max-min rates of the flows ``rows`` (a closed component): the route's rate when every flow is alone on
    its links, else :func:`max_min` over the distinct routes, each weighted by how many flows take it
    (flows with the same binding links get the same max-min rate, so grouping them is exact)."""
    pad = len(cap)
    nf, k = rows.shape
    if (lcount[rows[rows != pad]] == 1).all():
        return np.append(cap, np.inf)[rows].min(axis=1)
    if nf >= _GROUP_MIN:
        if k == 1:
            key = rows[:, 0]
        elif k == 2:
            key = rows[:, 0] * np.int64(pad + 1) + rows[:, 1]
        else:
            key = None
        if key is not None:
            uniq, first, inv, cnt = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
        else:
            uniq, first, inv, cnt = np.unique(
                rows, axis=0, return_index=True, return_inverse=True, return_counts=True
            )
        if len(uniq) <= 0.8 * nf:
            return max_min(rows[first], cap, cnt.astype(np.float64))[inv.reshape(-1)]
    return max_min(rows, cap)


def _next_retirement(
    proj: npt.NDArray[np.float64], grace: npt.NDArray[np.float64], rate: npt.NDArray[np.float64]
) -> tuple[float, float]:
    """(when, up to which projected finish) to retire the next batch of fluid flows.

    The batch is every flow projected to finish within ``2 g`` of the first one (``g``: that flow's grace,
    ``tolerance`` x its duration); it is retired at the rate-weighted mean of their projected finishes, clamped
    to ``[first, first + g]``. Each flow keeps its exact projected end; what moves is when the others see its
    capacity freed. Flows retired late hold capacity others could use, flows retired early hand it over
    before they are done: centring the batch on the rate-weighted mean makes the two cancel to first order,
    and a lone flow is retired exactly on time."""
    i = int(np.argmin(proj))
    first = float(proj[i])
    if not math.isfinite(first):
        return math.inf, -math.inf
    g = float(grace[i])
    top = first + 2.0 * g
    win = proj <= top
    w = rate[win]
    tot = float(w.sum())
    t = float((w * proj[win]).sum()) / tot if tot > 0 else first
    return min(max(t, first), first + g), top


def simulate_setup(
    st: Setup, *, tolerance: float = DEFAULT_TOLERANCE, payload_bytes: int | None = None
) -> SimResult:
    """Run a prepared :class:`~a2acc.analysis.simulate.Setup` (calibration re-uses one per Program)."""
    mdl = st.model
    n_ops = st.n_ops
    nl = len(st.cap)
    cap0 = st.cap
    bind = st.bind
    excl = exclusive_links(st)
    solo: list[bool] = np.asarray(excl[bind].all(axis=1) | (st.size <= 0), dtype=bool).tolist()
    ext0 = np.append(cap0, np.inf)
    solo_time: list[float] = np.where(st.size > 0, st.size / ext0[bind].min(axis=1), 0.0).tolist()
    lat_l: list[float] = st.lat.tolist()
    size = st.size
    succ_ptr: list[int] = st.succ_ptr.tolist()
    succ_ids: list[int] = st.succ_ids.tolist()
    missing: list[int] = np.diff(st.dep_ptr).tolist()
    start: list[float] = [math.nan] * n_ops
    ready: list[float] = [0.0] * n_ops  # the latest end among an op's finished dependencies
    end: list[float] = [math.nan] * n_ops
    on_at = np.zeros(n_ops)  # when a fluid op became active
    heap: list[tuple[float, int]] = []  # fluid activations (time, op)
    done = 0

    def run_chain(op: int, t_end: float, t_now: float) -> None:
        """``op`` ended at ``t_end``: release its successors. A solo op (or an empty one) runs at once - its
        timing depends only on its dependencies - and releases its own successors; a fluid one is queued to
        activate (not before ``t_now``: the fluid state is only known from ``t_now`` on)."""
        nonlocal done
        stack = [(op, t_end)]
        while stack:
            o, te = stack.pop()
            for s in succ_ids[succ_ptr[o] : succ_ptr[o + 1]]:
                missing[s] -= 1
                if te > ready[s]:
                    ready[s] = te
                if missing[s] == 0:
                    t_ready = ready[s]
                    start[s] = t_ready
                    if solo[s]:
                        e = t_ready + lat_l[s] + solo_time[s]
                        end[s] = e
                        done += 1
                        stack.append((s, e))
                    else:
                        heapq.heappush(heap, (max(t_ready + lat_l[s], t_now), s))

    for i in [i for i in range(n_ops) if missing[i] == 0]:
        start[i] = 0.0
        if solo[i]:
            end[i] = lat_l[i] + solo_time[i]
            done += 1
            run_chain(i, end[i], 0.0)
        else:
            heapq.heappush(heap, (lat_l[i], i))
    # fluid flows: ids, binding links, remaining bytes `rem0` at time `t0` (their last rate change), rate,
    # projected finish, retirement grace, and which of their links are bottlenecks (saturated, the flow at the
    # link's largest rate): a flow keeps its max-min rate while one of its bottlenecks stays saturated
    f_ids = np.zeros(0, dtype=np.int64)
    f_rows = np.zeros((0, bind.shape[1]), dtype=np.int64)
    f_rem0 = np.zeros(0)
    f_t0 = np.zeros(0)
    f_rate = np.zeros(0)
    f_proj = np.zeros(0)
    f_grace = np.zeros(0)
    f_bn = np.zeros((0, bind.shape[1]), dtype=bool)
    f_deadline = math.inf  # the next retirement event
    f_window = -math.inf  # it retires the flows projected to finish by then
    sat = np.zeros(nl + 1, dtype=bool)  # saturated links (as of the last solve touching them)
    lcount = np.zeros(nl + 1, dtype=np.int64)  # fluid flows per link (the pad column is never read)
    incast_on = mdl.incast.enabled
    cap = cap0
    cap_prev = cap0
    episodes = Episodes(mdl.incast)
    now = 0.0

    while done < n_ops:
        t_heap = heap[0][0] if heap else math.inf
        if t_heap == math.inf and f_deadline == math.inf:  # pragma: no cover - a verified DAG makes progress
            raise InternalError("simulation stalled (zero-capacity link?)")
        added: list[int] = []
        if t_heap <= f_deadline:
            # activations: the batch of those due within 2 g of the first (g: tolerance x its duration alone),
            # started together at their mean time (clamped to [first, first + g], not past the next retirement)
            top = min(t_heap + 2.0 * tolerance * solo_time[heap[0][1]], f_deadline)
            times: list[float] = []
            while heap and heap[0][0] <= top:
                t_a, op = heapq.heappop(heap)
                times.append(t_a)
                added.append(op)
            now = min(max(sum(times) / len(times), t_heap), (t_heap + top) / 2.0)
            horizon = now
        else:
            now = f_deadline
            horizon = f_window
        seed_links: list[npt.NDArray[np.int64]] = []
        retired = False
        if len(f_ids):
            fin = f_proj <= horizon
            if fin.any():
                retired = True
                gone = f_rows[fin].ravel()
                np.subtract.at(lcount, gone, 1)
                for op, t_end in zip(f_ids[fin].tolist(), f_proj[fin].tolist()):
                    end[op] = t_end
                    done += 1
                    run_chain(op, t_end, now)
                keep = ~fin
                f_ids, f_rows, f_rem0, f_t0 = f_ids[keep], f_rows[keep], f_rem0[keep], f_t0[keep]
                f_rate, f_proj, f_grace, f_bn = f_rate[keep], f_proj[keep], f_grace[keep], f_bn[keep]
                # the retired flows' links are no longer saturated: a flow that had its only bottlenecks
                # there may now go faster (every other flow keeps its rate: still max-min, exactly)
                unsat = gone[sat[gone]]
                if len(unsat):
                    sat[unsat] = False
                    if len(f_ids):
                        lost = ~(f_bn & sat[f_rows]).any(axis=1)
                        if lost.any():
                            seed_links.append(f_rows[lost].ravel())
        if added:
            new = np.array(added, dtype=np.int64)
            on_at[new] = now
            rows_new = bind[new]
            np.add.at(lcount, rows_new.ravel(), 1)
            seed_links.append(rows_new.ravel())
            k = len(new)
            f_ids = np.concatenate([f_ids, new])
            f_rows = np.concatenate([f_rows, rows_new])
            f_rem0 = np.concatenate([f_rem0, size[new]])
            f_t0 = np.concatenate([f_t0, np.full(k, now)])
            f_rate = np.concatenate([f_rate, np.zeros(k)])
            f_proj = np.concatenate([f_proj, np.full(k, np.inf)])
            f_grace = np.concatenate([f_grace, np.zeros(k)])
            f_bn = np.concatenate([f_bn, np.zeros(rows_new.shape, dtype=bool)])
        if not added and not retired:
            continue
        if not len(f_ids):
            episodes.update(now, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
            f_deadline = math.inf
            f_window = -math.inf
            continue
        if incast_on:
            cap, over, over_k = incast_capacity(st, f_ids, cap0)
            episodes.update(now, over, over_k)
            changed = np.flatnonzero(cap != cap_prev)
            if len(changed):
                seed_links.append(changed)
            cap_prev = cap
        if seed_links:
            seed = np.zeros(nl + 1, dtype=bool)
            seed[np.concatenate(seed_links)] = True
            seed[nl] = False
            comp = _component(f_rows, seed, nl) if len(f_ids) > 4 else np.ones(len(f_ids), dtype=bool)
            rows = f_rows[comp]
            rem = np.maximum(f_rem0[comp] - f_rate[comp] * (now - f_t0[comp]), 0.0)
            rate = _rates(rows, cap, lcount)
            f_rem0[comp] = rem
            f_t0[comp] = now
            f_rate[comp] = rate
            with np.errstate(divide="ignore"):
                proj = now + np.where(rate > 0, rem / rate, np.inf)
            f_proj[comp] = proj
            f_grace[comp] = tolerance * (proj - on_at[f_ids[comp]])
            # the component's bottlenecks: saturated links, and the flows at each one's largest rate
            flat = rows.ravel()
            per_entry = np.repeat(rate, rows.shape[1])
            load = np.bincount(flat, weights=per_entry, minlength=nl + 1)
            level = np.zeros(nl + 1)
            np.maximum.at(level, flat, per_entry)
            ext = np.append(cap, np.inf)
            on = np.bincount(flat, minlength=nl + 1) > 0
            on[nl] = False
            sat[on] = load[on] >= ext[on] * (1.0 - _SAT_RTOL)
            f_bn[comp] = sat[rows] & (rate[:, None] >= level[rows] * (1.0 - _SAT_RTOL))
        f_deadline, f_window = _next_retirement(f_proj, f_grace, f_rate)
    end_arr = np.array(end, dtype=np.float64)
    makespan = float(np.nanmax(end_arr)) if n_ops else 0.0
    expected, p_to = timeout_penalty(mdl.incast, makespan, episodes.finish(makespan))
    total = payload_bytes if payload_bytes is not None else round(float(st.size.sum()))
    return SimResult(
        time_s=expected,
        nranks=st.nranks,
        total_bytes=int(total),
        op_start=np.array(start, dtype=np.float64),
        op_end=end_arr,
        link_names=st.names,
        link_busy_bytes=st.busy_bytes(),
        link_capacity=cap0,
        timeline=(),
        makespan_s=makespan,
        timeout_probability=p_to,
        model=mdl,
        engine="fast",
    )
