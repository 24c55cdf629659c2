"""Example: plan a skewed MoE all-to-all with FAST, verify it, save it, simulate it.

Run: ``.venv/bin/python examples/plan_and_verify.py [OUT.json]``.
"""

from __future__ import annotations

import sys

from a2acc import plan
from a2acc.analysis.bounds import lower_bounds
from a2acc.analysis.simulate import simulate
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate


def main(out: str = "fast-plan.json") -> None:
    topo = load_topology("mi300x-100g")
    matrix = generate("moe", topo.nranks, 256 << 20, seed=3, skew=0.8)
    prog = plan(topo, matrix, "fast")  # raises VerificationError if the plan were wrong
    prog.save(out)
    sim = simulate(prog, topo, payload_bytes=int(matrix.sum()))
    bound = lower_bounds(matrix, topo)
    print(
        f"{out}: {len(prog.ops)} ops, {prog.meta['stages']} stages; simulated {sim.time_s * 1e3:.2f} ms, "
        f"algbw {sim.algbw_GBps:.2f} GB/s, {100 * bound.seconds / sim.time_s:.1f}% of the {bound.best.name} bound"
    )


if __name__ == "__main__":
    main(*sys.argv[1:2])
