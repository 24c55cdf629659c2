"""The op DAG of a Program: order check, levels, happens-before. One implementation for every user.

A Program's op list is a topological order (every dependency names a smaller op id), so walking ops by id
respects every dependency; :func:`order_errors` checks exactly that and, when a dependency points forward,
also reports any cycle it closes (a cycle is a deadlock on any executor). :func:`levels` is the longest
dependency path to each op (the MSCCL lowering runs a threadblock's steps level by level);
:class:`HappensBefore` answers "is op a ordered before op b" for the verifier's race checks.
"""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx
import numpy as np
import numpy.typing as npt

from a2acc.ir.program import Op, OpTable
from a2acc.native import verify as _native


def order_errors(ops: Sequence[Op], limit: int = 200) -> list[str]:
    """Every dependency on an op that is not listed earlier, plus a cycle if the forward edges close one."""
    errors: list[str] = []
    forward = False
    for op in ops:
        for d in op.deps:
            if d > op.id:
                forward = True
                if len(errors) < limit:
                    errors.append(
                        f"op {op.id} depends on op {d}, which comes later: ops must be listed in a topological "
                        "order (every dependency names a smaller op id; the toposort pass renumbers a DAG)"
                    )
    if forward:
        cyc = find_cycle(ops)
        if cyc:
            path = " -> ".join(f"op {u}" for u in cyc) + f" -> op {cyc[0]}"
            errors.insert(0, f"dependency cycle (the plan would deadlock): {path}")
    return errors


def find_cycle(ops: Sequence[Op]) -> list[int]:
    """One dependency cycle as a list of op ids (dependency first), or [] when the graph is acyclic."""
    g: nx.DiGraph = nx.DiGraph()
    g.add_nodes_from(range(len(ops)))
    for op in ops:
        for d in op.deps:
            if 0 <= d < len(ops):
                g.add_edge(d, op.id)
    try:
        return [u for u, _v in nx.find_cycle(g)]
    except nx.NetworkXNoCycle:
        return []


def topological_order(ops: Sequence[Op]) -> list[int] | None:
    """Kahn's order, smallest ready id first (the identity for a well-ordered Program); None on a cycle."""
    op = np.array([o.id for o in ops for _d in o.deps], dtype=np.int64)
    dep = np.array([d for o in ops for d in o.deps], dtype=np.int64)
    return kahn_order(len(ops), op, dep)


def kahn_order(n: int, op: npt.NDArray[np.int64], dep: npt.NDArray[np.int64]) -> list[int] | None:
    """Kahn's order of ops ``0..n-1`` with the edges ``dep[k] -> op[k]``, the smallest ready id first; None on
    a cycle (:func:`topological_order` of op columns: a pass that adds dependencies renumbers with it)."""
    import heapq

    for ids in (op, dep):
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
            raise IndexError(f"an op id or dependency outside 0..{n - 1}")
    indeg = np.bincount(op, minlength=n).tolist()
    succ = op[np.argsort(dep, kind="stable")].tolist()
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dep, minlength=n), out=ptr[1:])
    start = ptr.tolist()
    heap = [i for i in range(n) if indeg[i] == 0]
    out: list[int] = []
    while heap:
        x = heapq.heappop(heap)
        out.append(x)
        for y in succ[start[x] : start[x + 1]]:
            indeg[y] -= 1
            if indeg[y] == 0:
                heapq.heappush(heap, y)
    return out if len(out) == n else None


def levels(ops: Sequence[Op] | OpTable) -> list[int]:
    """Longest dependency path ending at each op (0 for ops without dependencies); needs id order.

    Pass ``prog.table`` rather than ``prog.ops`` to skip building the :class:`Op` views (compiled when
    ``a2acc._verify`` was built)."""
    if isinstance(ops, OpTable):
        return table_levels(ops).tolist()
    lvl = [0] * len(ops)
    for op in ops:
        lvl[op.id] = 1 + max((lvl[d] for d in op.deps), default=-1)
    return lvl


def table_levels(t: OpTable) -> npt.NDArray[np.int64]:
    """:func:`levels` of an op table as an array."""
    if _native is not None and t.ids is None:
        try:
            return np.frombuffer(_native.levels(t.dep_ptr, t.dep_ids), dtype=np.int64).copy()
        except ValueError:  # a dependency on a later op: the order check reports it; keep the old numbers
            pass
    return np.asarray(levels(t.to_ops()), dtype=np.int64)


class HappensBefore:
    """``before(a, b)``: a path of dependencies leads from op ``a`` to op ``b`` (ops in id order).

    A backward search from ``b`` pruned by id (nothing with an id below ``a`` can lie on a path from ``a``),
    memoised per pair."""

    def __init__(self, ops: Sequence[Op]) -> None:
        self.ops = ops
        self.memo: dict[tuple[int, int], bool] = {}

    def before(self, a: int, b: int) -> bool:
        if a >= b:
            return False
        deps_b = self.ops[b].deps
        if a in deps_b:
            return True
        key = (a, b)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        seen = {b}
        stack = [d for d in deps_b if d >= a]
        found = False
        while stack:
            x = stack.pop()
            if x == a:
                found = True
                break
            if x in seen:
                continue
            seen.add(x)
            for d in self.ops[x].deps:
                if d not in seen and d >= a:
                    stack.append(d)
        self.memo[key] = found
        return found
