"""Simulator speed: the fast engine per planner at 8 x 8 and 64 x 8 GPUs, against the event-driven reference.

Run: ``.venv/bin/python benchmarks/simulator.py [--servers 8,64] [--traffic zipf,balanced] [--runs 3]
[--reference]``

Workload: the dgx-h100 preset (n servers x 8 H100, NDR InfiniBand: its default model), 256 MiB per GPU, each
planner's verified Program planned once (not timed); the time is what ``a2acc simulate`` / ``compare`` spend
simulating it (:func:`a2acc.analysis.fastsim.simulate_fast`, routes included, nothing remembered from a previous
simulation), median of ``--runs``.
``--reference`` also times the event-driven reference (:func:`a2acc.analysis.simulate.simulate`) where it
finishes in reasonable time (8 x 8) and prints the relative difference of the two completion times.
Targets: every planner <= 200 ms at 8 x 8, <= 5 s at 64 x 8.
"""

from __future__ import annotations

import argparse
import statistics
import time

from a2acc import plan
from a2acc.analysis.fastsim import forget, simulate_fast
from a2acc.analysis.simulate import simulate
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate

PLANNERS = ("fast", "spreadout", "direct", "hierarchical")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default="8,64")
    ap.add_argument("--traffic", default="zipf,balanced")
    ap.add_argument("--planners", default=",".join(PLANNERS))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--reference", action="store_true", help="also time the reference engine (8 x 8 only)")
    args = ap.parse_args()
    print(
        f"{'GPUs':>9} {'traffic':>8} {'planner':>12} {'ops':>8} {'fast engine':>12} "
        + (f"{'reference':>11} {'difference':>10}" if args.reference else ""),
        flush=True,
    )
    for servers in (int(x) for x in args.servers.split(",")):
        topo = load_topology("dgx-h100", servers)
        for kind in args.traffic.split(","):
            m = generate(kind, topo.nranks, 256 << 20, 1, skew=0.8)
            for alg in args.planners.split(","):
                prog = plan(topo, m, alg)
                times = []
                for _ in range(args.runs):
                    forget()  # simulations are remembered per process (planning fast simulated this one)
                    t0 = time.perf_counter()
                    res = simulate_fast(prog, topo)
                    times.append(time.perf_counter() - t0)
                line = (
                    f"{f'{servers}x8':>9} {kind:>8} {alg:>12} {len(prog.ops):>8} "
                    f"{statistics.median(times) * 1e3:9.1f} ms"
                )
                if args.reference and servers <= 8:
                    t0 = time.perf_counter()
                    ref = simulate(prog, topo, record_timeline=False)
                    line += f" {time.perf_counter() - t0:9.2f} s {res.time_s / ref.time_s - 1:+10.2e}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
