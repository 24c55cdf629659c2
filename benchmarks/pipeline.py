"""Time of the paths users run, per pipeline phase: ``a2acc plan``, ``a2acc compile``, a JIT cache miss.

Run: ``.venv/bin/python benchmarks/pipeline.py [--runs 5] [--servers 4,8] [--algorithms fast,direct]
[--paths plan,compile,jit-miss] [--budget SECONDS]``

The plan + verify figures of every planner: ``--paths plan --algorithms fast,spreadout,direct,hierarchical
--servers 4,8,16,32,64``. ``--budget`` stops repeating a configuration once its runs took that long (at least
one run), so large sizes stay affordable; the ``runs`` column says how many were taken. ``cpu ms`` is this
process's CPU time (median), less sensitive than wall time to other load on the machine.

All three go through :func:`a2acc.pipeline.compile` (the only driver), so the phase times are the pipeline's
own (``Result.timings``), not phases re-timed by hand. Workload: dgx-h100 presets (n x 8 H100), Zipf(0.8),
256 MiB per GPU, fast planner, median of ``--runs``:

- ``plan``: what ``a2acc plan`` runs (unit for ~4096 chunks per busiest rank; quantize, plan, verify);
- ``compile``: what ``a2acc compile --opt dialect=rccl`` (``--dialect``) runs (padding ladder from 2 %; + lower, check);
- ``jit-miss``: what a JIT cache miss runs (a skew bucket's layout; plan, verify, lower to rccl XML, check),
  excluding the cache write.
"""

from __future__ import annotations

import argparse
import statistics
import time

from a2acc.analysis.fastsim import forget as forget_simulations
from a2acc.errors import LoweringError
from a2acc.ir.quantize import UnitPolicy
from a2acc.jit.bucket import BucketIndex
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.pipeline import PHASES, Request, compile
from a2acc.planners import forget as forget_plans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--servers", default="4,8")
    ap.add_argument("--algorithms", default="fast")
    ap.add_argument("--paths", default="plan,compile,jit-miss")
    ap.add_argument("--budget", type=float, default=float("inf"), help="seconds per configuration")
    ap.add_argument("--dialect", default="rccl", choices=("rccl", "nccl"), help="MSCCL XML dialect")
    args = ap.parse_args()
    cols = [p for p in PHASES if p != "passes"]
    print(
        f"{'path':>9} {'algorithm':>12} {'topo':>5} "
        + " ".join(f"{p + ' ms':>11}" for p in cols)
        + f" {'total ms':>10} {'wall ms':>9} {'cpu ms':>9} {'runs':>4}"
    )
    paths = args.paths.split(",")
    for servers, algorithm in (
        (int(s), a) for s in args.servers.split(",") for a in args.algorithms.split(",")
    ):
        topo = load_topology("dgx-h100", servers)
        m = generate("zipf", topo.nranks, 256 << 20, 1, skew=0.8)
        requests = {"plan": Request(topo, m, algorithm)}
        if "compile" in paths:
            requests["compile"] = Request(
                topo,
                m,
                algorithm,
                target="msccl-xml",
                target_options={"dialect": args.dialect},
                units=UnitPolicy(max_padding="auto"),
            )
        if "jit-miss" in paths:
            bucket = BucketIndex(topo, algorithm, "msccl-xml").lookup(m)
            requests["jit-miss"] = Request(
                topo,
                bucket.layout * bucket.unit,
                algorithm,
                target="msccl-xml",
                target_options={"dialect": args.dialect},
                units=UnitPolicy(unit=bucket.unit),
                counts=bucket.layout,
            )
        for path in paths:
            req = requests[path]
            phase: dict[str, list[float]] = {p: [] for p in cols}
            refused = ""
            walls, cpus = [], []
            spent = 0.0
            while len(walls) < args.runs and (not walls or spent < args.budget):
                forget_plans()  # every run plans cold: no plan or simulation remembered from the last
                forget_simulations()
                t0, c0 = time.perf_counter(), time.process_time()
                try:
                    res = compile(req)
                except LoweringError as exc:  # an executor limit no layout of the ladder fits: say so
                    refused = f"refused after {time.perf_counter() - t0:.1f} s: {exc}"
                    break
                walls.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
                spent += walls[-1]
                for p in cols:
                    phase[p].append(res.timings.get(p, 0.0))
            if refused:
                print(f"{path:>9} {algorithm:>12} {servers}x8 {refused}", flush=True)
                continue
            med = {p: statistics.median(v) * 1e3 for p, v in phase.items()}
            print(
                f"{path:>9} {algorithm:>12} {servers}x8 "
                + " ".join(f"{med[p]:>11.2f}" for p in cols)
                + f" {sum(med.values()):>10.2f} {statistics.median(walls) * 1e3:>9.2f}"
                + f" {statistics.median(cpus) * 1e3:>9.2f} {len(walls):>4}",
                flush=True,
            )


if __name__ == "__main__":
    main()
