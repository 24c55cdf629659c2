"""Which planner is fastest under the simulator's default (calibrated) model, and how close fast and auto get.

Run: ``.venv/bin/python benchmarks/planner_choice.py [--cases dgx-h100:4,dgx-h100:8,mi300x-100g:4]
[--traffic zipf,moe,balanced] [--sizes 1M:1G:x4] [--planners fast,direct,spreadout,hierarchical,syccl]``

For every case, traffic and size: each planner's simulated time (the fast engine, the topology's default model),
the best, fast / best, fast / direct, and each planner's plan time. This is the table behind docs/planners.md
("fast's shape under the model").
"""

from __future__ import annotations

import argparse
import time

from a2acc.analysis.fastsim import simulate_fast
from a2acc.analysis.model import default_model
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.model.units import parse_size_range
from a2acc.pipeline import Request, compile
from a2acc.studies.compare import size_label


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="dgx-h100:4,dgx-h100:8,mi300x-100g:4")
    ap.add_argument("--traffic", default="zipf,moe,balanced")
    ap.add_argument("--sizes", default="1M:1G:x4")
    ap.add_argument("--planners", default="fast,direct,spreadout,hierarchical,syccl")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    planners = args.planners.split(",")
    print(
        "| case | traffic | size/GPU | "
        + " | ".join(planners)
        + " | best | fast/best | fast/direct | fast shape |"
    )
    print("|---|---|---|" + "---|" * (len(planners) + 4))
    worst = 0.0
    for case in args.cases.split(","):
        preset, servers = case.split(":")
        topo = load_topology(preset, int(servers))
        model = default_model(topo)
        for kind in args.traffic.split(","):
            for size in parse_size_range(args.sizes):
                m = generate(kind, topo.nranks, size, args.seed)
                times: dict[str, float] = {}
                plan_s: dict[str, float] = {}
                shape = ""
                for p in planners:
                    t0 = time.perf_counter()
                    prog = compile(Request(topo, m, p, model=model)).program
                    plan_s[p] = time.perf_counter() - t0
                    times[p] = simulate_fast(prog, topo, model=model).time_s
                    if p == "fast":
                        shape = str(prog.meta.get("shape", ""))
                best = min(times, key=lambda k: times[k])
                ratio = times["fast"] / times[best]
                worst = max(worst, ratio)
                cells = " | ".join(f"{times[p] * 1e6:.0f}" for p in planners)
                print(
                    f"| {preset} {servers}x{topo.gpus_per_server} | {kind} | {size_label(size)} | {cells} | {best} | "
                    f"{ratio:.3f} | {times['fast'] / times['direct']:.3f} | {shape} |",
                    flush=True,
                )
    print(f"\nworst fast / best: {worst:.3f}")


if __name__ == "__main__":
    main()
