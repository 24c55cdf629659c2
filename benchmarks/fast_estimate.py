"""How well the ranking estimate ranks fast's candidate shapes: each one estimated and simulated.

Run: ``.venv/bin/python benchmarks/fast_estimate.py [--cases dgx-h100:4,mi300x:4,mi300x-100g:4]
[--traffic zipf,uniform,moe,balanced] [--sizes 1M:1G:x4] [--seeds 2,3] [--ideal] [--json out.json]``

For every case, traffic, size and seed (seeds 2 and 3 by default: the quality configurations of
``benchmarks/fast_quality.py`` use seed 1, and are not among these), every candidate fast's search ranks
(FAST's sequence, 1/2/4 groups with and without split messages, the direct step; each with every balancing
choice that balances other tiles) is built, estimated (:func:`a2acc.analysis.estimate.estimate`) and simulated
(:func:`a2acc.analysis.fastsim.simulate_fast`) under the topology's default model (``--ideal``: the ideal
model). Reported per configuration: the shape the estimate ranks first, its simulated time over the best
candidate's (the regret), and the estimate over the simulation for both; then per case the mean and worst regret
and the spread of estimate / simulation over every candidate. docs/planners.md ("How fast plans online").
"""

from __future__ import annotations

import argparse
import itertools
import json
import os

import numpy as np

from a2acc.analysis.estimate import estimate
from a2acc.analysis.fastsim import forget, simulate_fast
from a2acc.analysis.model import SimModel, default_model
from a2acc.ir.quantize import DEFAULT_ALIGN, UnitPolicy, quantize
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.model.units import parse_size_range
from a2acc.planners import PlanRequest
from a2acc.planners.fast import Options, search


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="dgx-h100:4,mi300x:4,mi300x-100g:4")
    ap.add_argument("--traffic", default="zipf,uniform,moe,balanced")
    ap.add_argument("--sizes", default="1M:1G:x4")
    ap.add_argument("--seeds", default="2,3")
    ap.add_argument("--ideal", action="store_true", help="the ideal model instead of each topology's default")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    print(f"# load average {os.getloadavg()[0]:.2f}; model: {'ideal' if args.ideal else 'each default'}")
    print("| case | traffic | size MiB | seed | best (simulated) | estimate's pick | regret | est/sim pick |")
    print("|---|---|---|---|---|---|---|---|")
    rows: list[dict[str, object]] = []
    for case in args.cases.split(","):
        preset, servers = case.split(":")
        topo = load_topology(preset, int(servers))
        model = SimModel() if args.ideal else default_model(topo)
        regrets, ratios = [], []
        grid = itertools.product(
            args.traffic.split(","), parse_size_range(args.sizes), (int(x) for x in args.seeds.split(","))
        )
        for kind, size, seed in grid:
            m = generate(kind, topo.nranks, size, seed, skew=0.8)
            (_label, unit), *_rest = UnitPolicy().candidates(m, None, DEFAULT_ALIGN)
            req = PlanRequest(topo, m, quantize(m, unit), unit, Options(), model)
            est: dict[str, float] = {}
            sim: dict[str, float] = {}
            for label, make in search.candidates(req, Options()):
                prog = make()
                est[label] = estimate(prog, topo, model)
                sim[label] = simulate_fast(prog, topo, model=model).time_s
                forget(prog)
            pick = min(est, key=lambda k: (est[k], search._tie_rank(k)))
            best = min(sim, key=lambda k: sim[k])
            regret = sim[pick] / sim[best]
            regrets.append(regret)
            ratios.extend(est[k] / sim[k] for k in sim)
            print(
                f"| {case} | {kind} | {size >> 20} | {seed} | {best} | {pick} | {regret:.4f} | "
                f"{est[pick] / sim[pick]:.3f} |",
                flush=True,
            )
            rows.append({"case": case, "kind": kind, "size": size, "seed": seed, "est": est, "sim": sim})
        r = np.array(regrets)
        q = np.array(ratios)
        print(
            f"\n# {case}: {len(r)} configurations, regret mean {r.mean():.4f}, worst {r.max():.4f}, "
            f"past 1.005 {(r > 1.005).sum()}; estimate / simulation over {len(q)} candidates "
            f"{q.min():.3f}-{q.max():.3f} (median {np.median(q):.3f})\n"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh)


if __name__ == "__main__":
    main()
