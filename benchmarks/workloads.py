"""The compare tables of Megatron-LM's token-imbalance workloads W0-W7 (docs/workloads.md).

Run: ``.venv/bin/python benchmarks/workloads.py [--cases dgx-h100:2,dgx-h100:8] [--tokens 512,4096]
[--step 3] [--jobs N]``

For every case (preset:servers), token count and workload: what ``a2acc compare -t PRESET -n SERVERS --traffic
wN --tokens T --step S`` prints, through the same driver (:func:`a2acc.studies.compare.compare_rows`, the default
planners and auto, the topology's default model) at the workload's own size - T tokens per GPU x top-2 x 8 KiB
per token (hidden 4096 in bf16), two experts per GPU, EP over every GPU, contiguous. Printed as one markdown
table per case: each planner's simulated time, the fastest, auto's pick and its time over the fastest, the
lower bound, and the receive-side max/mean per GPU that sets it. Step 3 is W7's burst step (W6's hot block has
moved once). Every figure is simulated.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from a2acc.analysis.model import default_model
from a2acc.cli.compare import default_algorithms
from a2acc.model.topology import load_topology
from a2acc.model.traffic import stats
from a2acc.model.workloads import TITLES, WORKLOADS, EpLayout, Workload, traffic_matrix
from a2acc.studies.compare import compare_rows, size_label

BYTES_PER_TOKEN = 4096 * 2


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="dgx-h100:2,dgx-h100:8")
    ap.add_argument("--tokens", default="512,4096", help="tokens per GPU (one table block each)")
    ap.add_argument("--step", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="compare's worker processes (one per size: 1 here)")
    args = ap.parse_args()
    t0, c0, load = time.perf_counter(), _cpu(), os.getloadavg()[0]
    for case in args.cases.split(","):
        preset, servers = case.split(":")
        topo = load_topology(preset, int(servers))
        model = default_model(topo)
        algos = default_algorithms(topo)
        print(f"\n{topo.name} {topo.servers}x{topo.gpus_per_server}, model: {model.describe()}\n")
        print(
            "| workload | size/GPU | recv max/mean | "
            + " | ".join(f"{a} (us)" for a in algos)
            + " | fastest | auto's pick | auto / fastest | bound (us) |"
        )
        print("|---|---|---|" + "---|" * (len(algos) + 4))
        for tokens in (int(t) for t in args.tokens.split(",")):
            for name in WORKLOADS:
                w = Workload(name, experts=2 * topo.nranks, top_k=2, tokens=tokens, seed=args.seed)
                m = traffic_matrix(w, args.step, EpLayout(topo.nranks), BYTES_PER_TOKEN)
                size = round(float(m.sum(axis=1).mean()))
                rows = {
                    r.algorithm: r
                    for r in compare_rows(topo, m, [size], algos, model=model, seed=args.seed, jobs=args.jobs)
                }
                fastest = min((a for a in algos if a != "auto"), key=lambda a: rows[a].time_s)
                auto = rows["auto"]
                print(
                    f"| {name} {TITLES[name]} | {size_label(size)} | {stats(m).recv_max_over_mean:.2f} | "
                    + " | ".join(f"{rows[a].time_s * 1e6:.0f}" for a in algos)
                    + f" | {fastest} | {auto.pick} | {auto.time_s / rows[fastest].time_s:.3f} | "
                    f"{auto.bound_s * 1e6:.0f} |",
                    flush=True,
                )
    print(
        f"\n{time.perf_counter() - t0:.0f} s wall, {_cpu() - c0:.0f} s CPU; load average {load:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after"
    )


if __name__ == "__main__":
    main()
