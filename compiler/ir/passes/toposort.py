"""``toposort``: renumber a Program's ops so every dependency names a smaller op id.

Programs built by a2acc's builder are already in that order; this pass is for Programs assembled elsewhere
(an external tool's plan JSON, a hand-edited file) whose DAG is sound but listed out of order. Ops keep their
relative order where the dependencies allow (Kahn's algorithm, smallest original id first), so a Program that
is already ordered comes back unchanged. A cycle cannot be ordered: the pass raises and names it.
"""

from __future__ import annotations

from a2acc.errors import VerificationError
from a2acc.ir.dag import find_cycle, topological_order
from a2acc.ir.program import Op, Program, replace_ops


def run(prog: Program) -> Program:
    order = topological_order(prog.ops)
    if order is None:
        cyc = find_cycle(prog.ops)
        path = " -> ".join(f"op {u}" for u in cyc) + (f" -> op {cyc[0]}" if cyc else "")
        raise VerificationError("toposort", [f"dependency cycle (the plan would deadlock): {path}"])
    if order == list(range(len(prog.ops))):
        return prog
    new_id = {old: new for new, old in enumerate(order)}
    ops = []
    for new, old in enumerate(order):
        op = prog.ops[old]
        ops.append(
            Op(
                new,
                op.src_rank,
                op.src_buf,
                op.src_off,
                op.dst_rank,
                op.dst_buf,
                op.dst_off,
                op.cnt,
                tuple(sorted(new_id[d] for d in op.deps)),
                op.stage,
                op.link,
            )
        )
    return replace_ops(prog, ops)
