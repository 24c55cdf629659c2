"""The fast simulator: the same fluid model as :mod:`a2acc.analysis.simulate`, organised for speed.

Exact reorganisations (``tolerance=0`` reproduces the reference event by event; tested):

1. **Solo ops run at once.** A link is *exclusive* when the ops using it are totally ordered by the DAG (each
   one happens after the previous one): no two of them are ever active together. An op whose every binding
   link is exclusive runs at the slowest link of its route, so its end is known as soon as its dependencies
   have ended: it is computed right then (a DAG longest path), with no event at all. SpreadOut's shifts are
   built that way. Incast needs two senders on one port, so it never touches a solo op.
2. **Route groups are processor-sharing queues.** A link is *group-exclusive* when its ops, in id order, form
   runs of one route (the same binding links) and every op of a run comes after every op of the run before.
   An op whose binding links are all group-exclusive only ever shares them with ops of its own route, which
   split the route's slowest link equally: a processor-sharing queue kept per route (virtual time, O(log n)
   per arrival or departure, no max-min solve). FAST's stage transfers (a pair's chunks of one stage, after
   the stage before) are built that way. One sender per port: no incast either.
3. **Max-min solves are local and grouped.** The rest (fluid ops) share links max-min fairly. Only the
   connected component (through shared links) of what changed is re-solved - max-min decomposes over
   components - and flows with identical binding links are one weighted row (max-min gives them equal
   rates). A solve uses the vectorised local-bottleneck form of progressive filling (every link that is the
   tightest link of all its flows is fixed in the same round).
4. **Solves are skipped while the rates are still max-min.** After a solve each flow has a *bottleneck*: a
   saturated link on which it has the largest rate. When flows end, their links stop being saturated; every
   other flow that still has a saturated bottleneck keeps its rate. If all do, the old rates are the max-min
   rates of the new set (max-min is the unique allocation in which every flow has a bottleneck), so no solve.

Bounded batching (``tolerance``, default :data:`DEFAULT_TOLERANCE`):

5. **Fluid activations** due within ``2 g`` of the first one are started together at their mean time (at most
   ``g`` late or early), ``g = tolerance x`` the longer of the first op's duration at its current fair share
   and the duration of the op whose end made it ready. Along a critical path the shifts add up to at most
   ``tolerance`` of the path's durations.
6. **Fluid retirements**: flows projected to end within ``2 g`` of the first one (``g``: ``tolerance`` x its
   duration; x :data:`_RETIRE_WINDOW` without incast) are retired together at the rate-weighted mean of their
   projected ends. Each keeps its exact projected end; only when the others see its capacity freed moves, and
   centring on the rate-weighted mean makes late and early hand-overs cancel to first order (a lone flow is
   retired on time). With incast a retirement also steps the port capacities, which does not cancel, so the
   window stays at ``tolerance``.

The reference engine stays the definition; ``tests/analysis/test_fastsim.py`` checks the two agree within
1 % on random Programs, planned Programs, bursts of equal flows and the RoCE preset with incast (hypothesis),
and exactly with ``tolerance=0``. The event loop below also exists compiled (``compiler/native/fastsim.c``, run
when it was built): the same operations in the same order, so the same floats, which the same tests check
against this Python loop. Speed: ``benchmarks/simulator.py`` (docs/simulator.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from a2acc.analysis.incast import IncastModel, timeout_penalty
from a2acc.analysis.model import SimModel
from a2acc.analysis.simulate import (
    ONSET_TIE_S,
    Episodes,
    Routes,
    Setup,
    SimResult,
    check_topology,
    incast_capacity,
    onset_delay,
    resolve_model,
    routes,
)
from a2acc.errors import InternalError
from a2acc.ir import Program
from a2acc.model.topology import Topology
from a2acc.native import carray
from a2acc.native import fastsim as _native_fastsim
from a2acc.native import maxmin as _native_maxmin
from a2acc.segments import segment_positions

#: batching tolerance (module docstring, 5-6); 0 takes every event on time
DEFAULT_TOLERANCE = 3e-3
_DFS_BUDGET = 256
#: group flows by route before a max-min solve from this many flows on
_GROUP_MIN = 64
#: relative slack of the saturation and bottleneck tests (rates are sums of a few float divisions)
_SAT_RTOL = 1e-9
#: retirement windows are this many tolerances wide without incast (centred batches cancel to first order); a
#: hand-over moves by at most tolerance x this (0.6 %), inside the 1 % the engines agree to (4 allowed 1.2 %:
#: a hypothesis case of nine equal flows sharing one link with five longer ones missed by 1.18 %)
_RETIRE_WINDOW = 2.0
#: route-group detection gives up (no groups) past this many op pairs to check, or this many graph searches
_GROUP_PAIRS = 20_000_000
_GROUP_SEARCHES = 1_000_000
_REM0, _T0, _RATE, _PROJ, _GRACE = range(5)  # columns of the fluid flows' state


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
    order = np.argsort(links, kind="stable")  # by link, then op (ops ascend already)
    ops, links = ops[order], links[order]
    same = links[1:] == links[:-1]
    a, b = ops[:-1][same], ops[1:][same]
    plink = links[1:][same]
    if not len(a):
        return excl
    keys = _dep_keys(st)
    bad = ~_has_dep(st, keys, b, a)
    no_deps = np.diff(st.dep_ptr)[b] == 0
    excl[np.unique(plink[bad & no_deps])] = False
    # b with the very dependencies of a cannot come after a (a is not among them): concurrent, no search
    sig = _dep_signature(st)
    twins = (sig[a] == sig[b]).all(axis=1)
    excl[np.unique(plink[bad & ~no_deps & twins])] = False
    todo = np.flatnonzero(bad & ~no_deps & ~twins)
    if len(todo):
        todo = todo[~_two_hop(a[todo], b[todo], st, keys)]
    if len(todo):
        _search_pairs(st, a[todo], b[todo], plink[todo], excl, memo=False)
    excl[nl] = True
    return excl


def _dep_slots(
    st: Setup, op: npt.NDArray[np.int64]
) -> Iterator[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
    """For k = 0, 1, ...: the positions ``i`` whose op ``op[i]`` has a k-th dependency, and those dependencies
    (one slot of the dependency lists at a time: work in their total length, memory in ``len(op)``)."""
    start = st.dep_ptr[op]
    cnt = st.dep_ptr[op + 1] - start
    idx = np.flatnonzero(cnt > 0)
    k = 0
    while len(idx):
        yield idx, st.dep_ids[start[idx] + k]
        k += 1
        idx = idx[cnt[idx] > k]


def _dep_keys(st: Setup) -> npt.NDArray[np.int64]:
    """Every dependency edge as one integer, ``op * n_ops + dependency``, sorted: :func:`_has_dep` answers
    membership by binary search (a loop over dependency slots cost seconds on programs whose ops have dozens of
    dependencies: back-to-back calls in calibration)."""
    n = st.n_ops
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(st.dep_ptr))
    return np.sort(owner * np.int64(n) + st.dep_ids)


def _has_dep(
    st: Setup, keys: npt.NDArray[np.int64], op: npt.NDArray[np.int64], dep: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """Per pair: is op ``dep[i]`` a direct dependency of op ``op[i]``? (``keys``: :func:`_dep_keys`)"""
    if not len(keys):
        return np.zeros(len(op), dtype=bool)
    want = op * np.int64(st.n_ops) + dep
    at = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
    return np.asarray(keys[at] == want, dtype=bool)


def _search_pairs(
    st: Setup,
    a: npt.NDArray[np.int64],
    b: npt.NDArray[np.int64],
    plink: npt.NDArray[np.int64],
    ok_link: npt.NDArray[np.bool_],
    *,
    memo: bool,
) -> None:
    """Clear ``ok_link[plink[i]]`` where op ``b[i]`` does not depend on op ``a[i]`` (:func:`_reaches`, pairs on
    links already cleared are skipped). The compiled core runs the same searches when it was built; ``memo``
    answers ops with the same dependencies alike in the Python loop (the same answers, fewer searches)."""
    if _native_fastsim is not None:
        ok = carray(ok_link, np.uint8)
        _native_fastsim.clear_unreached(
            carray(st.dep_ptr, np.int64),
            carray(st.dep_ids, np.int64),
            carray(a, np.int64),
            carray(b, np.int64),
            carray(plink, np.int64),
            ok,
            _DFS_BUDGET,
        )
        ok_link[:] = ok.astype(bool)
        return
    dep_ptr, dep_ids = st.dep_ptr.tolist(), st.dep_ids.tolist()
    known: dict[tuple[int, tuple[int, ...]], bool] = {}
    for ai, bi, lk in zip(a.tolist(), b.tolist(), plink.tolist()):
        if not ok_link[lk]:
            continue
        mk = (ai, tuple(dep_ids[dep_ptr[bi] : dep_ptr[bi + 1]])) if memo else None
        got = known.get(mk) if mk is not None else None
        if got is None:
            got = _reaches(ai, bi, dep_ptr, dep_ids)
            if mk is not None:
                known[mk] = got
        if not got:
            ok_link[lk] = False


def _two_hop(
    a: npt.NDArray[np.int64], b: npt.NDArray[np.int64], st: Setup, keys: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """Per pair: does ``b`` depend on a dependency of ``a``'s successor, i.e. ``a -> d -> b`` for some ``d``?"""
    out = np.zeros(len(a), dtype=bool)
    for idx, d in _dep_slots(st, b):
        out[idx] |= _has_dep(st, keys, d, a[idx])
    return out


def _dep_signature(st: Setup) -> npt.NDArray[np.float64]:
    """Per op: (count, sum, min, max, sum of squares) of its dependency ids - equal for equal dependency lists."""
    n_ops = st.n_ops
    cnt = np.diff(st.dep_ptr)
    owner = np.repeat(np.arange(n_ops, dtype=np.int64), cnt)
    d = st.dep_ids.astype(np.float64)
    lo = np.full(n_ops, np.inf)
    hi = np.full(n_ops, -np.inf)
    np.minimum.at(lo, owner, d)
    np.maximum.at(hi, owner, d)
    return np.stack(
        [
            cnt.astype(np.float64),
            np.bincount(owner, weights=d, minlength=n_ops),
            lo,
            hi,
            np.bincount(owner, weights=d * d, minlength=n_ops),
        ],
        axis=1,
    )


def _reaches(a: int, b: int, dep_ptr: list[int], dep_ids: list[int]) -> bool:
    """Does ``b`` (transitively) depend on ``a``? Backward search from ``b`` over ops with id >= ``a`` (ids are a
    topological order); gives up (False: treat as concurrent, which is always safe) after a budget of ops."""
    stack = [b]
    seen = {b}
    while stack:
        x = stack.pop()
        for d in dep_ids[dep_ptr[x] : dep_ptr[x + 1]]:
            if d == a:
                return True
            if d > a and d not in seen:
                if len(seen) >= _DFS_BUDGET:
                    return False
                seen.add(d)
                stack.append(d)
    return False


def route_keys(bind: npt.NDArray[np.int64], pad: int) -> npt.NDArray[np.int64]:
    """One integer per row of ``bind``, equal exactly when the rows (binding links) are equal."""
    k = bind.shape[1]
    if k == 1:
        return bind[:, 0].astype(np.int64)
    if k == 2:
        return bind[:, 0] * np.int64(pad + 1) + bind[:, 1]
    return np.unique(bind, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


def route_groups(st: Setup, solo: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """Per op: the id of its *route group*, or -1.

    A link is *group-exclusive* when the ops using it, in id order, form runs of equal routes (same binding
    links) such that every op of a run happens after every op of the run before (DAG order). Then at any time
    only ops of one route are active on it. An op (not solo) whose binding links are all group-exclusive
    shares them only with ops of its own route: the active ones split the route's slowest link equally, a
    processor-sharing queue with no max-min solve - FAST's stage transfers (a pair's chunks of one stage,
    ordered after the stage before) are built that way. The ops of one route form one group."""
    n_ops = st.n_ops
    nl = len(st.cap)
    out = np.full(n_ops, -1, dtype=np.int64)
    cand = ~solo & (st.size > 0)
    if not cand.any():
        return out
    key = route_keys(st.bind, nl)
    ok_link = _group_exclusive(st, key)
    if ok_link is None:
        return out
    member = cand & ok_link[st.bind].all(axis=1)
    if member.any():
        out[member] = np.unique(key[member], return_inverse=True)[1].reshape(-1)
    return out


def _group_exclusive(st: Setup, key: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_] | None:
    """Per link (plus the dummy pad): is it group-exclusive (:func:`route_groups`)? ``key``: each op's route
    (:func:`route_keys`). None when checking would take more than :data:`_GROUP_PAIRS` op pairs."""
    n_ops = st.n_ops
    nl = len(st.cap)
    real = st.bind != nl
    ops = np.repeat(np.arange(n_ops, dtype=np.int64), real.sum(axis=1))
    links = st.bind[real]
    order = np.argsort(links, kind="stable")  # by link, then op (ops ascend already)
    ops, links = ops[order], links[order]
    okey = key[ops]
    # runs: maximal stretches of one link with one route
    brk = np.ones(len(ops), dtype=bool)
    brk[1:] = (links[1:] != links[:-1]) | (okey[1:] != okey[:-1])
    run_start = np.flatnonzero(brk)
    run_len = np.diff(np.append(run_start, len(ops)))
    run_link = links[run_start]
    # consecutive runs on one link: every op of the later one must come after every op of the earlier one
    nxt = np.flatnonzero(run_link[1:] == run_link[:-1])
    ok_link = np.ones(nl + 1, dtype=bool)
    if len(nxt):
        la, lb = run_len[nxt], run_len[nxt + 1]
        npairs = la * lb
        total = int(npairs.sum())
        if total > _GROUP_PAIRS:
            return None
        pair_run = np.repeat(np.arange(len(nxt)), npairs)
        within = segment_positions(npairs)
        ia = run_start[nxt][pair_run] + within // lb[pair_run]
        ib = run_start[nxt + 1][pair_run] + within % lb[pair_run]
        _clear_unordered(st, ops[ia], ops[ib], links[ia], ok_link)
    ok_link[nl] = True
    return ok_link


def _clear_unordered(
    st: Setup,
    a: npt.NDArray[np.int64],
    b: npt.NDArray[np.int64],
    plink: npt.NDArray[np.int64],
    ok_link: npt.NDArray[np.bool_],
) -> None:
    """Clear ``ok_link`` of the link ``plink[i]`` of every pair where op ``b[i]`` does not (transitively)
    depend on op ``a[i]``: a direct dependency or two hops settle most pairs at array speed; the rest are
    graph searches (memoised: ops with the same dependencies answer alike), and past
    :data:`_GROUP_SEARCHES` of them their links are cleared unsearched (always safe: not group-exclusive)."""
    keys = _dep_keys(st)
    bad = ~_has_dep(st, keys, b, a)
    ok_link[np.unique(plink[bad & (np.diff(st.dep_ptr)[b] == 0)])] = False
    todo = np.flatnonzero(bad & (np.diff(st.dep_ptr)[b] > 0))
    if len(todo):
        todo = todo[~_two_hop(a[todo], b[todo], st, keys)]
    if len(todo) > _GROUP_SEARCHES:
        ok_link[np.unique(plink[todo])] = False
    elif len(todo):
        _search_pairs(st, a[todo], b[todo], plink[todo], ok_link, memo=True)


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
    flows elsewhere only raises other links' shares), so this is exact progressive filling, in fewer rounds.
    The compiled core ``a2acc._maxmin`` runs the same arithmetic (the same floats) when it was built;
    :func:`max_min_py` is the reference."""
    if _native_maxmin is not None and bind.shape[0] and bind.shape[1]:
        w = None if weight is None else carray(weight, np.float64)
        raw = _native_maxmin.max_min(carray(bind, np.int64), bind.shape[1], carray(cap, np.float64), w)
        return np.frombuffer(raw, dtype=np.float64).copy()
    return max_min_py(bind, cap, weight)


def max_min_py(
    bind: npt.NDArray[np.int64],
    cap: npt.NDArray[np.float64],
    weight: npt.NDArray[np.float64] | None = None,
) -> npt.NDArray[np.float64]:
    """:func:`max_min` in numpy (the reference of the compiled core)."""
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
        cnt = np.bincount(flat, weights=None if w is None else np.repeat(w, k), minlength=nl).astype(
            np.float64
        )
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
    :func:`a2acc.analysis.simulate.simulate` (no utilisation timeline).

    Results are memoised per process by content (the ops, layout and unit, the topology's fingerprint, the
    model, the tolerance): a planner that simulates its candidates (fast, auto, syccl) and a comparison that
    simulates the winner again pay once. Treat the returned result as read-only."""
    check_topology(prog, topo)  # (the memo below is by content: a plan's recorded topology is not in it)
    mdl = resolve_model(topo, model, incast)
    total = payload_bytes if payload_bytes is not None else int(prog.counts.sum()) * prog.unit_bytes
    digest = _program_digest(prog)
    # the payload only labels the result (its bandwidths): one simulation serves every payload
    key = (digest, topo.fingerprint, repr(mdl), float(tolerance))
    with _MEMO_LOCK:
        res = _MEMO.get(key)
        if res is not None:
            _MEMO.move_to_end(key)
    if res is None:
        res = simulate_setup(
            _routes_of(prog, topo, digest).setup(mdl), tolerance=tolerance, payload_bytes=total
        )
        with _MEMO_LOCK:
            _remember(key, res)
    return res if res.total_bytes == total else dataclasses.replace(res, total_bytes=total)


SimMemoEntry = tuple[tuple[str, str, str, float], SimResult]


def memo_export(
    progs: Sequence[Program], topo: Topology, *, model: SimModel | None = None
) -> list[SimMemoEntry]:
    """The remembered simulations of ``progs`` on ``topo`` under ``model`` at the default tolerance, for
    another process's :func:`memo_import` (a comparison's ``auto`` row times the rows' plans computed in other
    workers). Keys are content, so an imported result is exactly what :func:`simulate_fast` would compute."""
    mdl = resolve_model(topo, model, None)
    keys = [(_program_digest(p), topo.fingerprint, repr(mdl), float(DEFAULT_TOLERANCE)) for p in progs]
    with _MEMO_LOCK:
        return [(k, _MEMO[k]) for k in keys if k in _MEMO]


def memo_import(entries: Sequence[SimMemoEntry]) -> None:
    """Remember simulations another process ran (:func:`memo_export`)."""
    with _MEMO_LOCK:
        for k, res in entries:
            _remember(k, res)


def _remember(key: tuple[str, str, str, float], res: SimResult) -> None:
    """Remember one simulation, the newest last, at most :data:`_MEMO_SIZE`; the lock is held."""
    _MEMO[key] = res
    _MEMO.move_to_end(key)
    if len(_MEMO) > _MEMO_SIZE:
        _MEMO.popitem(last=False)


def forget(prog: Program | None = None, *, routes_only: bool = False) -> None:
    """Drop every remembered simulation (benchmarks that time cold planning call it between runs), or only
    those of ``prog`` (a planner discarding a large candidate: at 1024 GPUs its routes and result are GBs);
    ``routes_only`` keeps ``prog``'s results and drops its prepared routes (a planner that simulated its
    final Program once: the caller's simulation is answered from the result, the ~2 GB of routes of a
    17 M-op Program are not needed again)."""
    with _MEMO_LOCK:
        if prog is None:
            _MEMO.clear()
            _ROUTES.clear()
            return
        digest = _program_digest(prog)
        if not routes_only:
            for key in [k for k in _MEMO if k[0] == digest]:
                del _MEMO[key]
        for rkey in [k for k in _ROUTES if k[0] == digest]:
            del _ROUTES[rkey]


def _routes_of(prog: Program, topo: Topology, digest: str) -> Routes:
    """The model-independent preparation of ``prog`` (routes, DAG, op classes), remembered for the last few
    Programs: a planner times its finalists twice (two tolerances) and a comparison re-times its rows under
    another model, and both reuse the routes and the derived op classes."""
    key = (digest, topo.fingerprint)
    with _MEMO_LOCK:
        got = _ROUTES.get(key)
        if got is not None:
            _ROUTES.move_to_end(key)
            return got
    got = routes(prog, topo)
    with _MEMO_LOCK:
        _ROUTES[key] = got
        if len(_ROUTES) > _ROUTES_SIZE:
            _ROUTES.popitem(last=False)
    return got


#: simulations remembered per process (a comparison's rows, a planner's candidates); the lock guards both
#: memos (a JIT's background compiles may simulate in several threads)
_MEMO_LOCK = threading.Lock()
_MEMO_SIZE = 64
_MEMO: OrderedDict[tuple[str, str, str, float], SimResult] = OrderedDict()
#: prepared routes remembered per process (a planner's candidates: fast simulates up to five)
_ROUTES_SIZE = 6
_ROUTES: OrderedDict[tuple[str, str], Routes] = OrderedDict()


def _program_digest(prog: Program) -> str:
    """What the simulation of ``prog`` depends on: its op columns and dependencies, layout, scratch and unit
    (not its name, algorithm or meta: two planners' identical ops simulate identically)."""
    t = prog.table
    h = hashlib.sha256()
    h.update(np.asarray([prog.nranks, prog.unit_bytes, len(t)], dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(prog.counts, dtype=np.int64).tobytes())
    h.update(np.asarray(prog.scratch, dtype=np.int64).tobytes())
    for col in t.native_args()[1:]:
        h.update(np.ascontiguousarray(col).tobytes())
    h.update("\0".join(t.links).encode())
    return h.hexdigest()


def _rates(
    rows: npt.NDArray[np.int64], cap: npt.NDArray[np.float64], lcount: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
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
    st: Setup,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    payload_bytes: int | None = None,
    native: bool | None = None,
) -> SimResult:
    """Run a prepared :class:`~a2acc.analysis.simulate.Setup` (calibration re-uses one per Program): classify
    the ops (solo, route groups, fluid; module docstring 1-3), run the events, report.

    The events run in the compiled core ``a2acc._fastsim`` when it was built (the same floats and overload
    episodes as the Python loop below, which stays the reference and runs otherwise); ``native`` True or False
    forces one (True without the core is an error)."""
    mdl = st.model
    n_ops = st.n_ops
    excl = st.derived("exclusive", lambda: exclusive_links(st))
    solo = np.asarray(excl[st.bind].all(axis=1) | (st.size <= 0), dtype=bool)
    grp = st.derived("groups", lambda: route_groups(st, solo))
    route_rate = np.append(st.cap, np.inf)[st.bind].min(axis=1)
    start, end_arr, episodes = run_events(st, solo, grp, route_rate, tolerance, native=native)
    makespan = float(np.nanmax(end_arr)) if n_ops else 0.0
    eps = tuple(episodes.finish(makespan))
    expected, p_to = timeout_penalty(mdl.incast, makespan, eps)
    total = payload_bytes if payload_bytes is not None else round(float(st.size.sum()))
    return SimResult(
        time_s=expected,
        nranks=st.nranks,
        total_bytes=int(total),
        op_start=start,
        op_end=end_arr,
        link_names=st.names,
        link_busy_bytes=st.busy_bytes(),
        link_capacity=st.cap,
        timeline=(),
        makespan_s=makespan,
        timeout_probability=p_to,
        model=mdl,
        engine="fast",
        episodes=eps,
    )


def run_events(
    st: Setup,
    solo: npt.NDArray[np.bool_],
    grp: npt.NDArray[np.int64],
    route_rate: npt.NDArray[np.float64],
    tolerance: float,
    *,
    native: bool | None = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], Episodes]:
    """Every op's start and end and the overload episodes, with the ops classed as given: ``solo`` ops run at
    ``route_rate`` alone, ``grp`` >= 0 puts an op in that processor-sharing queue (served at the
    ``route_rate`` of its members, the same for all of them), the rest are fluid flows sharing links max-min
    fairly. The compiled loop when it was built (``native`` True or False forces one: True without it is an
    error), the Python loop otherwise: the same floats."""
    if native and _native_fastsim is None:
        raise InternalError("the compiled event loop is not built")
    if _native_fastsim is not None and native is not False and st.n_ops:
        return _run_native(st, solo, grp, route_rate, tolerance)
    dag = _Dag(st, solo, grp, route_rate)
    group_event = _route_group_queues(dag, route_rate)
    fluid = _Fluid(st, tolerance)
    dag.start_roots()
    episodes = _event_loop(st, dag, group_event, fluid)
    return np.array(dag.start, dtype=np.float64), np.array(dag.end, dtype=np.float64), episodes


def _run_native(
    st: Setup,
    solo: npt.NDArray[np.bool_],
    grp: npt.NDArray[np.int64],
    route_rate: npt.NDArray[np.float64],
    tolerance: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], Episodes]:
    """The op start and end times from the compiled event loop, and the overload episodes it logged (replayed
    through :meth:`Episodes.update` as the Python loop calls it). The retirement window is the one
    :class:`_Fluid` takes: :data:`_RETIRE_WINDOW` tolerances without incast, one with."""
    if _native_fastsim is None:  # pragma: no cover - the caller checked
        raise InternalError("the compiled event loop is not built")

    inc = st.model.incast
    incast = None
    if inc.enabled:
        incast = (
            carray(st.rx, np.int64),
            carray(st.src, np.int64),
            carray(st.rx_switch, np.int64),
            int(st.nranks),
            float(inc.buffer_bytes),
            float(inc.window_bytes),
            float(inc.dt_alpha),
            float(inc.retransmit),
            float(inc.fanin_loss),
        )
    try:
        raw = _native_fastsim.run(
            carray(st.bind, np.int64),
            st.bind.shape[1],
            carray(st.cap, np.float64),
            carray(st.size, np.float64),
            carray(st.lat, np.float64),
            carray(solo, np.uint8),
            carray(grp, np.int64),
            carray(route_rate, np.float64),
            carray(st.succ_ptr, np.int64),
            carray(st.succ_ids, np.int64),
            None if st.succ_delay is None else carray(st.succ_delay, np.float64),
            carray(np.diff(st.dep_ptr), np.int64),
            float(tolerance),
            float(tolerance) * (1.0 if inc.enabled else _RETIRE_WINDOW),
            incast,
            None
            if st.onset is None or st.succ_side is None
            else (carray(st.onset, np.float64), carray(st.succ_side, np.int8), ONSET_TIE_S),
        )
    except ArithmeticError as e:  # pragma: no cover - a verified DAG makes progress
        raise InternalError(str(e)) from e
    start, end, ep_now = (np.frombuffer(b, dtype=np.float64) for b in raw[:3])
    ep_ptr, ep_link, ep_k = (np.frombuffer(b, dtype=np.int64) for b in raw[3:])
    episodes = Episodes(inc)
    if len(ep_now):
        ptr = ep_ptr.tolist()
        for i, now in enumerate(ep_now.tolist()):
            episodes.update(now, ep_link[ptr[i] : ptr[i + 1]], ep_k[ptr[i] : ptr[i + 1]])
    return start.copy(), end.copy(), episodes


def _event_loop(
    st: Setup, dag: _Dag, group_event: Callable[[float, int, int, int], None], fluid: _Fluid
) -> Episodes:
    """Run every op to its end; returns the overload episodes. Each step takes the earliest of: a route
    group's event (processor sharing, no solve), a batch of fluid activations (module docstring, 5) or the
    next batch of fluid retirements (6); after a fluid step the rates of the affected component are solved
    again, the capacities first stepped by incast when it is on."""
    n_ops = st.n_ops
    heap = dag.heap
    incast_on = st.model.incast.enabled
    cap0 = st.cap
    cap = cap0
    cap_prev = cap0
    episodes = Episodes(st.model.incast)
    while dag.done < n_ops:
        t_heap = heap[0][0] if heap else math.inf
        if (
            t_heap == math.inf and fluid.deadline == math.inf
        ):  # pragma: no cover - a verified DAG makes progress
            raise InternalError("simulation stalled (zero-capacity link?)")
        if t_heap <= fluid.deadline and heap[0][1] != 0:
            t_ev, kind, x, ver = heapq.heappop(heap)
            group_event(t_ev, kind, x, ver)
            continue
        added: list[int] = []
        if t_heap <= fluid.deadline:
            now = fluid.activation_batch(dag, t_heap, added)
            horizon = now
        else:
            now = fluid.deadline
            horizon = fluid.window
        seed_links: list[npt.NDArray[np.int64]] = []
        retired = fluid.retire(dag, horizon, now, seed_links)
        if added:
            fluid.admit(dag, added, now, seed_links)
        elif not retired:
            continue
        if not len(fluid.ids):
            episodes.update(now, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
            fluid.deadline = math.inf
            fluid.window = -math.inf
            continue
        if incast_on:
            cap, over, over_k = incast_capacity(st, fluid.ids, cap0)
            episodes.update(now, over, over_k)
            changed = np.flatnonzero(cap != cap_prev)
            if len(changed):
                seed_links.append(changed)
            cap_prev = cap
        if seed_links:
            fluid.solve(seed_links, cap, now)
        fluid.deadline, fluid.window = _next_retirement(
            fluid.val[:, _PROJ], fluid.val[:, _GRACE], fluid.val[:, _RATE]
        )
    return episodes


class _Dag:
    """Per-op timing of one fast simulation, the event heap and the count of ops done.

    Per op: solo or not, route group (-1: fluid), duration when solo, latency, bytes; dependencies still
    missing, start (ready), the latest end among its finished dependencies (plus the edge's delay,
    :attr:`Setup.succ_delay`), when it started streaming, the duration of the dependency that made it ready,
    end. Heap events are (time, kind, op or group, version): kind 0 activates a fluid op, 1 an op of a route
    group, 2 is a route group's next departure (valid while the version is the group's).
    ``finish(op, t_end, t_now)`` ends an op and returns how many ops that ended (itself and the solo ops it
    ran through), which the caller adds to ``done`` (:meth:`_finisher`)."""

    def __init__(
        self,
        st: Setup,
        solo: npt.NDArray[np.bool_],
        grp: npt.NDArray[np.int64],
        route_rate: npt.NDArray[np.float64],
    ) -> None:
        n_ops = st.n_ops
        self.solo: list[bool] = solo.tolist()
        self.grp: list[int] = grp.tolist()
        self.solo_time: list[float] = np.where(st.size > 0, st.size / route_rate, 0.0).tolist()
        self.lat: list[float] = st.lat.tolist()
        self.size: list[float] = st.size.tolist()
        self.succ_ptr: list[int] = st.succ_ptr.tolist()
        self.succ_ids: list[int] = st.succ_ids.tolist()
        self.delay: list[float] = st.succ_delay.tolist() if st.succ_delay is not None else []
        # incast onset (Setup.onset): per op its cost, the latest end on its sender's side and on its receive port
        self.onset: list[float] = st.onset.tolist() if st.onset is not None else []
        self.side: list[int] = (
            st.succ_side.tolist() if st.onset is not None and st.succ_side is not None else []
        )
        self.sender: list[float] = [0.0] * n_ops if self.onset else []
        self.port: list[float] = [-math.inf] * n_ops if self.onset else []
        self.missing: list[int] = np.diff(st.dep_ptr).tolist()
        self.start: list[float] = [math.nan] * n_ops
        self.ready: list[float] = [0.0] * n_ops
        self.act_t: list[float] = [0.0] * n_ops
        self.scale: list[float] = [0.0] * n_ops
        self.end: list[float] = [math.nan] * n_ops
        self.heap: list[tuple[float, int, int, int]] = []
        self.done = 0
        self.finish = self._finisher()

    def start_roots(self) -> None:
        """Ops without dependencies are ready at 0: solo ones run at once, the others are queued."""
        lat, grp = self.lat, self.grp
        for i in [i for i in range(len(self.missing)) if self.missing[i] == 0]:
            self.start[i] = 0.0
            if self.solo[i]:
                self.act_t[i] = lat[i]
                self.done += self.finish(i, lat[i] + self.solo_time[i], 0.0)
            else:
                heapq.heappush(self.heap, (lat[i], 0 if grp[i] < 0 else 1, i, 0))

    def _finisher(self) -> Callable[[int, float, float], int]:
        """``finish(op, t_end, t_now)``: ``op`` ended at ``t_end``; release its successors and return how many
        ops ended. A solo successor (or an empty one) runs at once - its timing depends only on its
        dependencies - and releases its own successors; a fluid one is queued to activate (not before
        ``t_now``: the fluid state is only known from ``t_now`` on). A closure over the per-op lists, built
        once: it runs for every op, and loading a dozen attributes per call would slow the whole simulation
        measurably. It holds the lists, not the :class:`_Dag` (no reference cycle: they are freed as soon as
        the simulation returns)."""
        succ_ptr, succ_ids, delay, missing, ready, scale = (
            self.succ_ptr,
            self.succ_ids,
            self.delay,
            self.missing,
            self.ready,
            self.scale,
        )
        start, act_t, end, solo, lat, grp = self.start, self.act_t, self.end, self.solo, self.lat, self.grp
        heap, solo_time = self.heap, self.solo_time
        onset, side, sender, port = self.onset, self.side, self.sender, self.port

        def finish(op: int, t_end: float, t_now: float) -> int:
            end[op] = t_end
            done = 1
            stack = [(op, t_end)]
            while stack:
                o, te = stack.pop()
                dur = te - act_t[o]
                lo = succ_ptr[o]
                for k, s in enumerate(succ_ids[lo : succ_ptr[o + 1]], lo):
                    missing[s] -= 1
                    t_e = te + delay[k] if delay else te
                    if t_e >= ready[s]:
                        ready[s] = t_e
                        scale[s] = dur
                    if onset:
                        if side[k] == 1 and te > sender[s]:
                            sender[s] = te
                        elif side[k] == 2 and te > port[s]:
                            port[s] = te
                    if missing[s] == 0:
                        t_ready = ready[s]
                        start[s] = t_ready
                        t_act = t_ready + lat[s]
                        if onset and onset[s] > 0:
                            t_act += onset_delay(onset[s], sender[s], port[s], t_ready)
                        if solo[s]:
                            act_t[s] = t_act
                            e = act_t[s] + solo_time[s]
                            end[s] = e
                            done += 1
                            stack.append((s, e))
                        else:
                            heapq.heappush(heap, (max(t_act, t_now), 0 if grp[s] < 0 else 1, s, 0))
            return done

        return finish


def _route_group_queues(
    dag: _Dag, route_rate: npt.NDArray[np.float64]
) -> Callable[[float, int, int, int], None]:
    """Route groups as processor-sharing queues (module docstring, 2); returns the handler of their heap events
    ``(time, kind, x, version)``: kind 1, op ``x`` joins its group; kind 2, group ``x``'s first member is due
    (if ``version`` is still the group's). Either schedules the group's next departure.

    Per group: rate (the route's slowest link), active members, virtual time (bytes served to each member since
    the group started) as of time ``g_t``, the members' finishing virtual times (a heap), event version. A
    closure over these lists, built once: it runs twice per grouped op (see :meth:`_Dag._finisher`)."""
    grp, act_t, size, heap, finish = dag.grp, dag.act_t, dag.size, dag.heap, dag.finish
    n_grp = max(grp, default=-1) + 1
    g_rate: list[float] = [0.0] * n_grp
    for i, g in enumerate(grp):
        if g >= 0:
            g_rate[g] = float(route_rate[i])
    g_n = [0] * n_grp
    g_v = [0.0] * n_grp
    g_t = [0.0] * n_grp
    g_fin: list[list[tuple[float, int]]] = [[] for _ in range(n_grp)]
    g_ver = [0] * n_grp

    def event(t_ev: float, kind: int, x: int, ver: int) -> None:
        g = grp[x] if kind == 1 else x
        if kind == 2 and ver != g_ver[g]:
            return
        t_ev = max(t_ev, g_t[g])
        if g_n[g]:
            g_v[g] += (t_ev - g_t[g]) * g_rate[g] / g_n[g]
        g_t[g] = t_ev
        fins = g_fin[g]
        if kind == 1:
            act_t[x] = t_ev
            heapq.heappush(fins, (g_v[g] + size[x], x))
            g_n[g] += 1
        else:  # the first member is due (by construction); others within rounding of it go too
            g_v[g] = max(g_v[g], fins[0][0])
            while fins and fins[0][0] <= g_v[g] * (1.0 + 1e-12) + 1e-9:
                op = heapq.heappop(fins)[1]
                g_n[g] -= 1
                dag.done += finish(op, t_ev, t_ev)
        if fins:
            g_ver[g] += 1
            t_next = t_ev + (fins[0][0] - g_v[g]) * g_n[g] / g_rate[g]
            heapq.heappush(heap, (t_next, 2, g, g_ver[g]))

    return event


class _Fluid:
    """The fluid flows (neither solo nor in a route group), sharing links max-min fairly.

    Per flow: op id, binding links, the columns :data:`_REM0` (remaining bytes at time :data:`_T0`, its last
    rate change), :data:`_RATE`, :data:`_PROJ` (projected finish) and :data:`_GRACE` (retirement grace), and
    which of its links are bottlenecks (saturated, the flow at the link's largest rate): a flow keeps its
    max-min rate while one of its bottlenecks stays saturated. Per link (the pad column: infinite capacity):
    saturated as of the last solve touching it, fluid flows on it. ``deadline`` is the next retirement; it
    retires the flows projected to finish by ``window``."""

    def __init__(self, st: Setup, tolerance: float) -> None:
        k = st.bind.shape[1]
        self.nl = len(st.cap)
        self.bind = st.bind
        self.size = st.size
        self.ext0 = np.append(st.cap, np.inf)
        self.tolerance = tolerance
        # with incast the capacities step when the active set changes: no first-order cancellation to lean on
        self.retire_window = tolerance * (1.0 if st.model.incast.enabled else _RETIRE_WINDOW)
        self.ids = np.zeros(0, dtype=np.int64)
        self.rows = np.zeros((0, k), dtype=np.int64)
        self.val = np.zeros((0, 5))  # columns _REM0, _T0, _RATE, _PROJ, _GRACE
        self.bn = np.zeros((0, k), dtype=bool)
        self.deadline = math.inf
        self.window = -math.inf
        self.sat = np.zeros(self.nl + 1, dtype=bool)
        self.lcount = np.zeros(self.nl + 1, dtype=np.int64)
        self.on_at = np.zeros(st.n_ops)  # when a fluid op became active

    def activation_batch(self, dag: _Dag, t_heap: float, added: list[int]) -> float:
        """Pop the batch of fluid activations due within ``2 g`` of the first into ``added``; returns when they
        start together: their mean time, clamped to ``[first, first + g]`` and not past the next retirement.
        ``g`` is ``tolerance`` x the longer of the first one's duration at its fair share now and the duration
        of the op that made it ready."""
        heap = dag.heap
        first = heap[0][2]
        links = self.bind[first]
        fair = float((self.ext0[links] / (self.lcount[links] + 1)).min())
        top = min(
            t_heap + 2.0 * self.tolerance * max(dag.size[first] / fair, dag.scale[first]), self.deadline
        )
        total = 0.0  # summed in order (not sum(): compensated from Python 3.12, and the compiled loop adds in order)
        count = 0
        while heap and heap[0][0] <= top and heap[0][1] == 0:
            t_a, _kind, op, _ver = heapq.heappop(heap)
            total += t_a
            count += 1
            added.append(op)
        return min(max(total / count, t_heap), (t_heap + top) / 2.0)

    def retire(self, dag: _Dag, horizon: float, now: float, seed_links: list[npt.NDArray[np.int64]]) -> bool:
        """End the flows projected to finish by ``horizon`` (each at its projected finish); True when any did.
        Their links are no longer saturated: a flow that had its only bottlenecks there may now go faster, so
        its links go into ``seed_links`` (every other flow keeps its rate: still max-min, exactly)."""
        if not len(self.ids):
            return False
        fin = self.val[:, _PROJ] <= horizon
        if not fin.any():
            return False
        gone = self.rows[fin].ravel()
        np.subtract.at(self.lcount, gone, 1)
        for op, t_end in zip(self.ids[fin].tolist(), self.val[fin, _PROJ].tolist()):
            dag.done += dag.finish(op, t_end, now)
        keep = ~fin
        self.ids, self.rows, self.val, self.bn = (
            self.ids[keep],
            self.rows[keep],
            self.val[keep],
            self.bn[keep],
        )
        sat = self.sat
        unsat = gone[sat[gone]]
        if len(unsat):
            sat[unsat] = False
            if len(self.ids):
                lost = ~(self.bn & sat[self.rows]).any(axis=1)
                if lost.any():
                    seed_links.append(self.rows[lost].ravel())
        return True

    def admit(self, dag: _Dag, added: list[int], now: float, seed_links: list[npt.NDArray[np.int64]]) -> None:
        """The ops ``added`` become fluid flows at ``now`` (rates to be solved: their links go into
        ``seed_links``)."""
        new = np.array(added, dtype=np.int64)
        self.on_at[new] = now
        for op in added:
            dag.act_t[op] = now
        rows_new = self.bind[new]
        np.add.at(self.lcount, rows_new.ravel(), 1)
        seed_links.append(rows_new.ravel())
        val_new = np.zeros((len(new), 5))
        val_new[:, _REM0] = self.size[new]
        val_new[:, _T0] = now
        val_new[:, _PROJ] = np.inf
        self.ids = np.concatenate([self.ids, new])
        self.rows = np.concatenate([self.rows, rows_new])
        self.val = np.concatenate([self.val, val_new])
        self.bn = np.concatenate([self.bn, np.zeros(rows_new.shape, dtype=bool)])

    def solve(
        self, seed_links: list[npt.NDArray[np.int64]], cap: npt.NDArray[np.float64], now: float
    ) -> None:
        """New max-min rates at ``now`` for the component (through shared links) of ``seed_links``: remaining
        bytes, projected finishes and graces brought up to date, then its bottlenecks."""
        nl = self.nl
        seed = np.zeros(nl + 1, dtype=bool)
        seed[np.concatenate(seed_links)] = True
        seed[nl] = False
        comp = _component(self.rows, seed, nl) if len(self.ids) > 4 else np.ones(len(self.ids), dtype=bool)
        rows = self.rows[comp]
        val = self.val[comp]
        rem = np.maximum(val[:, _REM0] - val[:, _RATE] * (now - val[:, _T0]), 0.0)
        rate = _rates(rows, cap, self.lcount)
        with np.errstate(divide="ignore"):
            proj = now + np.where(rate > 0, rem / rate, np.inf)
        val[:, _REM0] = rem
        val[:, _T0] = now
        val[:, _RATE] = rate
        val[:, _PROJ] = proj
        val[:, _GRACE] = self.retire_window * (proj - self.on_at[self.ids[comp]])
        self.val[comp] = val
        self._bottlenecks(comp, rows, rate, cap)

    def _bottlenecks(
        self,
        comp: npt.NDArray[np.bool_],
        rows: npt.NDArray[np.int64],
        rate: npt.NDArray[np.float64],
        cap: npt.NDArray[np.float64],
    ) -> None:
        """The component's saturated links, and per flow which of its links are bottlenecks (saturated, the
        flow at the link's largest rate)."""
        nl = self.nl
        flat = rows.ravel()
        per_entry = np.repeat(rate, rows.shape[1])
        load = np.bincount(flat, weights=per_entry, minlength=nl + 1)
        level = np.zeros(nl + 1)
        np.maximum.at(level, flat, per_entry)
        ext = np.append(cap, np.inf)
        on = np.bincount(flat, minlength=nl + 1) > 0
        on[nl] = False
        sat = self.sat
        sat[on] = load[on] >= ext[on] * (1.0 - _SAT_RTOL)
        self.bn[comp] = sat[rows] & (rate[:, None] >= level[rows] * (1.0 - _SAT_RTOL))
