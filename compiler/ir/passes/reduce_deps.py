"""``reduce-deps``: drop every dependency that another dependency of the same op already implies.

If op ``b`` depends on ``a`` and on ``c``, and ``a`` happens before ``c``, the edge ``a -> b`` adds no
ordering: removing it keeps the happens-before relation identical (a transitive reduction restricted to each
op's dependency list), so the verifier's verdict and every executor's result are unchanged, while the plan
file, the verifier's work and the MSCCL ``depid`` lists shrink.
"""

from __future__ import annotations

from a2acc.ir.dag import HappensBefore
from a2acc.ir.program import Program, replace_ops


def run(prog: Program) -> Program:
    hb = HappensBefore(prog.ops)
    ops = []
    changed = False
    for op in prog.ops:
        deps = op.deps
        if len(deps) > 1:
            # a dependency is redundant when it happens before another dependency of the same op
            keep = tuple(d for d in deps if not any(e != d and hb.before(d, e) for e in deps))
            if keep != deps:
                changed = True
                op = op._replace(deps=keep)
        ops.append(op)
    return replace_ops(prog, ops) if changed else prog
