"""How long fast takes to plan, cold: the path a JIT miss, ``a2acc plan`` and ``compare`` run.

Run: ``.venv/bin/python benchmarks/fast_plan.py [--servers 4,8,16] [--runs 7] [--preset dgx-h100] [--kind zipf]
[--size 256M] [--rank auto]``

Per size: the CPU time of ``a2acc.plan(topo, m, "fast")`` - quantise, fast's shape search, verify - on a new
matrix each run (seeds 1..runs, Zipf(0.8), 256 MiB per GPU by default) with nothing remembered between runs
(plan and simulation memos cleared), after one warm-up plan of another matrix (imports, the topology's route
table). Process CPU seconds (``time.process_time``: every thread of the process), minimum and median; the shape
chosen and how many candidates the search ranked, and how many the bound stopped. Give the load average (printed)
with the figures. ``--rank simulate`` times the same search ranked by the simulator.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import a2acc
from a2acc.analysis.fastsim import forget as forget_simulations
from a2acc.model.traffic import generate
from a2acc.model.units import parse_size
from a2acc.planners import forget as forget_plans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default="4,8,16")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--preset", default="dgx-h100")
    ap.add_argument("--kind", default="zipf")
    ap.add_argument("--size", default="256M")
    ap.add_argument("--rank", default="auto", choices=("auto", "estimate", "confirm", "simulate"))
    args = ap.parse_args()
    size = parse_size(args.size)
    print(
        f"# load average {os.getloadavg()[0]:.2f}; {args.preset}, {args.kind}, {args.size} per GPU, rank={args.rank}"
    )
    print("| size | ops | CPU ms min | CPU ms median | shape (last run) | ranked | stopped by the bound |")
    print("|---|---|---|---|---|---|---|")
    for servers in (int(s) for s in args.servers.split(",")):
        topo = a2acc.load_topology(args.preset, servers)
        a2acc.plan(topo, generate(args.kind, topo.nranks, size, 1000, skew=0.8), "fast", rank=args.rank)
        cpu = []
        for seed in range(1, args.runs + 1):
            m = generate(args.kind, topo.nranks, size, seed, skew=0.8)
            forget_simulations()
            forget_plans()
            c0 = time.process_time()
            prog = a2acc.plan(topo, m, "fast", rank=args.rank)
            cpu.append(time.process_time() - c0)
        cands = prog.meta.get("candidates_us", {})
        assert isinstance(cands, dict)
        stopped = sum(v is None for v in cands.values())
        print(
            f"| {servers}x{topo.gpus_per_server} | {len(prog.table)} | {min(cpu) * 1e3:.1f} | "
            f"{statistics.median(cpu) * 1e3:.1f} | {prog.meta.get('shape')} | {len(cands)} | {stopped} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
