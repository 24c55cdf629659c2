"""Exact timing of Programs whose transfers never share a link, many at once (what calibration runs most).

When every op of a Program is *solo* - each link it binds on carries ops that the DAG totally orders, so no two
are ever active together (:func:`a2acc.analysis.fastsim.exclusive_links`) - the fluid model needs no fair
sharing and no incast (a receive port never has two senders): an op ends at its ready time plus its latency plus
its bytes at its route's slowest link, and the makespan is a longest path. SpreadOut's shifts are built that way.
:class:`SoloBatch` stacks many such Programs (a calibration's rows and their random draws) into one DAG and
computes that longest path level by level with numpy, for any model: the same arithmetic as the fast engine's
solo path, without a Python loop over ops (``tests/analysis/test_levels.py`` checks it against
:func:`a2acc.analysis.fastsim.simulate_setup`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from a2acc.analysis.model import SimModel
from a2acc.analysis.simulate import ONSET_TIE_S, Routes
from a2acc.segments import segment_indices

_I64 = npt.NDArray[np.int64]
_F64 = npt.NDArray[np.float64]


def all_solo(r: Routes) -> bool:
    """Is every op of ``r`` solo (module docstring)?"""
    from a2acc.analysis.fastsim import exclusive_links

    st = r.setup(SimModel())
    excl = exclusive_links(st)
    return bool((excl[st.bind].all(axis=1) | (st.size <= 0)).all())


class SoloBatch:
    """Many all-solo :class:`~a2acc.analysis.simulate.Routes`, timed together (module docstring); they may come
    from different topologies."""

    def __init__(self, items: Sequence[Routes]) -> None:
        if not items:
            raise ValueError("an empty batch")
        # each item's links get their own slots (items may come from different topologies: a calibration over
        # several server counts); one padding slot past them all stands for "no link" (infinite capacity)
        self.raw_cap = np.concatenate([r.raw_cap for r in items])
        self.eff_class = np.concatenate([r.eff_class for r in items])
        link_base = np.concatenate([[0], np.cumsum([len(r.raw_cap) for r in items])]).astype(np.int64)
        self.items = tuple(items)
        sizes = [len(r.size) for r in items]
        base = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.op_start = base[:-1]
        n = int(base[-1])
        width = max(r.bind.shape[1] for r in items)
        pad = int(link_base[-1])
        bind = np.full((n, width), pad, dtype=np.int64)
        for r, b, lb in zip(items, base[:-1].tolist(), link_base[:-1].tolist()):
            own = len(r.raw_cap)  # an item's own padding value (its link count) maps to the shared one
            bind[b : b + len(r.size), : r.bind.shape[1]] = np.where(r.bind >= own, pad, r.bind + lb)
        self.bind = bind
        self.size = np.concatenate([r.size for r in items])
        self.route_alpha = np.concatenate([r.route_alpha for r in items])
        # dependency edges in dep order (grouped by op), shifted to batch ids, and where each one sits in its
        # Routes' successor order (what Routes.step_delays is aligned with)
        self.dep_ids = np.concatenate([r.dep_ids + b for r, b in zip(items, base[:-1].tolist())])
        ndeps = np.concatenate([np.diff(r.dep_ptr) for r in items])
        self.dep_ptr = np.concatenate([[0], np.cumsum(ndeps)]).astype(np.int64)
        # what Routes.step_delays charges, stacked: per op whether it is synchronised and its message's bytes,
        # per dependency edge whether it is on its successor's sender side
        sync = [r.synchronised() for r in items]
        self.sync = np.concatenate([s for s, _m in sync])
        self.msg = np.concatenate([m for _s, m in sync])
        # per op: its Program is host-launched (every synchronised message pays the rendezvous)
        self.host = np.concatenate([np.full(len(r.size), r.host_launched) for r in items])
        sides, kinds = [], []
        for r in items:
            pos = np.argsort(np.argsort(r.dep_ids, kind="stable"), kind="stable")
            sides.append(r.sender_side()[pos])
            kinds.append(r.succ_sides()[pos])
        self.side = np.concatenate(sides) if sides else np.zeros(0, dtype=bool)
        # incast onset (Routes.onset): which ops can pay it, and each edge's side (1 sender, 2 receive port)
        self.kind = np.concatenate(kinds) if kinds else np.zeros(0, dtype=np.int8)
        self.onset_ok = np.concatenate([(r.rx >= 0) & ~r.host_launched for r in items]) & self.sync
        self.owner = np.repeat(np.arange(n, dtype=np.int64), ndeps)
        self.level_ops, self.level_edges, self.level_first = self._levels(n, ndeps)

    def _levels(self, n: int, ndeps: _I64) -> tuple[list[_I64], list[_I64], list[_I64]]:
        """Ops grouped by depth (longest path in edges from a root), with each level's dependency edges (in op
        order) and where each of its ops' edges start within them."""
        depth = np.zeros(n, dtype=np.int64)
        owner = np.repeat(np.arange(n, dtype=np.int64), ndeps)
        # ids are a topological order within each Program: relax until no depth changes (at most the depth)
        while True:
            cand = np.zeros(n, dtype=np.int64)
            if len(owner):
                np.maximum.at(cand, owner, depth[self.dep_ids] + 1)
            if (cand <= depth).all():
                break
            depth = np.maximum(depth, cand)
        levels_ops: list[_I64] = []
        levels_edges: list[_I64] = []
        levels_first: list[_I64] = []
        for lv in range(int(depth.max()) + 1 if n else 0):
            ops = np.flatnonzero(depth == lv)
            cnt = ndeps[ops]
            starts = self.dep_ptr[ops]
            levels_ops.append(ops)
            levels_edges.append(segment_indices(starts, cnt))
            levels_first.append(np.concatenate([[0], np.cumsum(cnt)[:-1]]).astype(np.int64))
        return levels_ops, levels_edges, levels_first

    def makespans(self, model: SimModel) -> _F64:
        """Per Routes of the batch, its completion time under ``model`` (no incast: solo ops never share a port)."""
        factor = np.array([1.0, model.inter_efficiency, model.intra_efficiency])
        cap = self.raw_cap * factor[self.eff_class]
        ext = np.append(cap, np.inf)
        rate = ext[self.bind].min(axis=1)
        dur = np.where(self.size > 0, self.size / np.where(rate > 0, rate, np.inf), 0.0)
        lat = self.route_alpha + model.alpha_s
        # Routes.step_delays, vectorised over the batch
        fill = (
            np.where(self.sync, np.minimum(self.msg, model.fill_bytes) / rate, 0.0)
            if model.fill_bytes > 0
            else 0.0
        )
        hand = model.stage_s * (self.sync & (self.host | (self.msg > model.eager_bytes)))
        delay = np.where(self.side, (fill + np.zeros(len(rate)))[self.owner], hand[self.owner])
        onset = (
            np.where(self.onset_ok, np.minimum(self.msg, model.onset_bytes) / rate, 0.0)
            if model.onset_bytes > 0
            else None
        )
        end = np.zeros(len(self.size))
        for ops, edges, first in zip(self.level_ops, self.level_edges, self.level_first):
            ready = np.zeros(len(ops))
            act = lat[ops]
            if len(edges):
                ends = end[self.dep_ids[edges]]
                has = np.diff(np.append(first, len(edges))) > 0
                ready[has] = np.maximum.reduceat(ends + delay[edges], first[has])
                act = ready + lat[ops]
                if onset is not None:
                    act = act + self._onset(ops, edges, first, has, ends, ready, onset)
            end[ops] = act + dur[ops]
        out = np.zeros(len(self.op_start))
        busy = np.diff(np.append(self.op_start, len(end))) > 0  # a Program without ops takes no time
        if busy.any():
            out[busy] = np.maximum.reduceat(end, self.op_start[busy])
        return out

    def _onset(
        self,
        ops: _I64,
        edges: _I64,
        first: _I64,
        has: npt.NDArray[np.bool_],
        ends: _F64,
        ready: _F64,
        onset: _F64,
    ) -> _F64:
        """Incast onset's delay of a level's ops (:func:`a2acc.analysis.simulate.onset_delay`, vectorised): the
        latest end on each op's sender side (0 without one) and on its receive port (-inf without one)."""
        kind = self.kind[edges]
        sender = np.zeros(len(ops))
        port = np.full(len(ops), -np.inf)
        sender[has] = np.maximum(np.maximum.reduceat(np.where(kind == 1, ends, -np.inf), first[has]), 0.0)
        port[has] = np.maximum.reduceat(np.where(kind == 2, ends, -np.inf), first[has])
        cost = onset[ops]
        hit = (cost > 0) & (sender <= port + ONSET_TIE_S)
        return np.where(hit, np.maximum(0.0, sender + cost - ready), 0.0)
