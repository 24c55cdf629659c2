"""How good fast's plan is against the other planners, under the model it is chosen by.

Run: ``.venv/bin/python benchmarks/fast_quality.py [--cases dgx-h100:8,mi300x:4,mi300x-100g:4]
[--traffic zipf,uniform] [--sizes 16M,128M,1G] [--seed 1] [--json out.json]``

For every case, traffic and size (seed 1, the topology's default model): fast's plan (``a2acc.pipeline.compile``,
verified), and the plans of syccl, mcf and direct; each simulated with the fast engine at its default tolerance;
the ratio fast / the best of the three (below 1: fast is faster than all three) and fast's chosen shape. This is
the table behind docs/planners.md ("How fast plans online"): fast's planning got faster, and this is how the
ratio is checked not to get worse on any configuration. ``--json`` also writes the rows (for comparing two runs).

``--before``: also the simulated time of the best shape fast ranked before the ranking estimate (FAST's
sequence, 1/2/4 groups with and without split messages, the direct step; by the simulator, as it ranked them
then), under the same model, and fast's time over it (at most 1: the same or better than that search). Runs
fast again with ``rank=simulate`` and keeps the shapes without a ``balance=`` choice, which came with the estimate.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from a2acc.analysis.fastsim import simulate_fast
from a2acc.analysis.model import default_model
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.model.units import parse_size
from a2acc.pipeline import Request, compile
from a2acc.studies.compare import size_label

OTHERS = ("syccl", "mcf", "direct")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="dgx-h100:8,mi300x:4,mi300x-100g:4")
    ap.add_argument("--traffic", default="zipf,uniform")
    ap.add_argument("--sizes", default="16M,128M,1G")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    ap.add_argument(
        "--before", action="store_true", help="also the best of the shapes ranked before the estimate"
    )
    args = ap.parse_args()
    print(
        f"# load average {os.getloadavg()[0]:.2f}; simulated us, default model per topology, seed {args.seed}"
    )
    extra = " before-shapes best | fast / it |" if args.before else ""
    print(
        "| case | traffic | size/GPU | fast | syccl | mcf | direct | best other | fast / best | fast shape | fast plan ms |"
        + extra
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|" + "---|---|" * bool(args.before))
    rows: list[dict[str, object]] = []
    for case in args.cases.split(","):
        preset, servers = case.split(":")
        topo = load_topology(preset, int(servers))
        model = default_model(topo)
        for kind in args.traffic.split(","):
            for size in (parse_size(s) for s in args.sizes.split(",")):
                m = generate(kind, topo.nranks, size, args.seed)
                times: dict[str, float] = {}
                c0 = time.process_time()
                fast = compile(Request(topo, m, "fast", model=model)).program
                fast_cpu = time.process_time() - c0
                times["fast"] = simulate_fast(fast, topo, model=model).time_s
                for p in OTHERS:
                    prog = compile(Request(topo, m, p, model=model)).program
                    times[p] = simulate_fast(prog, topo, model=model).time_s
                best = min(OTHERS, key=lambda k: times[k])
                ratio = times["fast"] / times[best]
                shape = str(fast.meta.get("shape", ""))
                cells = " | ".join(f"{times[p] * 1e6:.0f}" for p in ("fast", *OTHERS))
                tail = ""
                if args.before:
                    ranked = compile(
                        Request(topo, m, "fast", model=model, planner_options={"rank": "simulate"})
                    ).program.meta["candidates_us"]
                    old = min(t for k, t in ranked.items() if "balance=" not in k and t is not None)
                    times["before_shapes"] = old / 1e6
                    tail = f" {old:.1f} | {times['fast'] * 1e6 / old:.4f} |"
                print(
                    f"| {preset} {servers}x{topo.gpus_per_server} | {kind} | {size_label(size)} | {cells} | {best} | "
                    f"{ratio:.4f} | {shape} | {fast_cpu * 1e3:.1f} |{tail}",
                    flush=True,
                )
                rows.append(
                    {
                        "case": case,
                        "traffic": kind,
                        "size": size,
                        "times_us": {k: v * 1e6 for k, v in times.items()},
                        "ratio": ratio,
                        "shape": shape,
                    }
                )
    worst = max(float(r["ratio"]) for r in rows)  # type: ignore[arg-type]
    print(f"\nworst fast / best other: {worst:.4f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
