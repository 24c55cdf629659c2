"""The syccl planner: synthesis time and simulated algbw against the lower bound, and against ``fast``.

Run: ``.venv/bin/python benchmarks/syccl.py [--cases a100x2,a100x4,h100x8] [--kinds balanced,zipf]
[--size 256M] [--workers 1] [--plan-only] [--json out.json]``

Cases: ``dgx-a100`` 2x8 (16 GPUs) and 4x8 (32), ``dgx-h100`` 8x8 (64). Traffic: nccl-tests' balanced matrix and
FAST's Zipf(0.8) workload (seed 1), ``--size`` bytes per GPU. Each (case, traffic) runs in a fresh process, so
the synthesis time is cold (no cached sketches or LPs) and covers everything ``a2acc plan -a syccl`` does:
symmetry, sketch search, combination LPs, sub-demand LPs, emission of the candidates and their simulation.

Reported per row:

- ``synth_s``: the pipeline's plan phase for syccl (wall clock, this machine; others share the CPU);
- ``algbw``: bytes / N / simulated time (GB/s), for syccl, ``fast`` and the lower bound (``bound``:
  :func:`a2acc.lower_bounds`, line rate);
- ``sim/bound``: simulated time over the bound under the topology's own simulator model (which charges NIC
  goodput below line rate and per-message and per-stage costs: docs/simulator.md) and under the ideal model
  (line rate, no per-message costs), for syccl and fast.

Simulation here is :func:`a2acc.analysis.simulate.simulate` (the event-driven reference).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CASES = {"a100x2": ("dgx-a100", 2), "a100x4": ("dgx-a100", 4), "h100x8": ("dgx-h100", 8)}


def _case(case: str, kind: str, size: int, workers: str, plan_only: bool = False) -> dict[str, object]:
    import a2acc
    from a2acc.analysis.model import SimModel
    from a2acc.analysis.simulate import simulate
    from a2acc.model.topology import load_topology
    from a2acc.model.traffic import generate
    from a2acc.pipeline import Request, compile

    preset, servers = CASES[case]
    topo = load_topology(preset, servers)
    m = generate(kind, topo.nranks, size, 1)
    bound = a2acc.lower_bounds(m, topo).seconds
    per_gpu = int(m.sum()) / topo.nranks
    row: dict[str, object] = {"case": f"{preset} {servers}x{topo.gpus_per_server}", "traffic": kind}
    for alg, opts in (("syccl", {"workers": workers}), ("fast", None)):
        res = compile(Request(topo, m, alg, planner_options=opts))
        prog = res.program
        if plan_only:  # the plan phase's time only: no simulation, no fast
            return {**row, "syccl_plan_s": res.timings["plan"], "syccl_ops": len(prog.table)}
        sim = simulate(prog, topo, record_timeline=False).time_s
        ideal = simulate(prog, topo, model=SimModel(), record_timeline=False).time_s
        row[f"{alg}_plan_s"] = res.timings["plan"]
        row[f"{alg}_algbw"] = per_gpu / sim / 1e9
        row[f"{alg}_sim_bound"] = sim / bound
        row[f"{alg}_ideal_bound"] = ideal / bound
        if alg == "syccl":
            row["syccl_ops"] = len(prog.ops)
            row["syccl_sketch"] = str(prog.meta.get("sketch", ""))[:80]
    row["bound_algbw"] = per_gpu / bound / 1e9
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="a100x2,a100x4,h100x8")
    ap.add_argument("--kinds", default="balanced,zipf")
    ap.add_argument("--size", default="256M", help="bytes per GPU (suffixes K, M, G)")
    ap.add_argument("--workers", default="1", help="syccl's workers option")
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument(
        "--plan-only",
        action="store_true",
        help="time syccl's plan phase only (no reference simulations, no fast: minutes less at 64 GPUs)",
    )
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    from a2acc.model.units import parse_size

    size = parse_size(args.size, field="--size")
    if args.one:
        case, kind = args.one.split(":")
        print(json.dumps(_case(case, kind, size, args.workers, args.plan_only)))
        return
    rows = []
    head = (
        f"{'case':16s} {'traffic':8s} {'synth_s':>7s} {'ops':>6s} | {'algbw GB/s: syccl':>17s} {'fast':>6s} "
        f"{'bound':>6s} | {'sim/bound: syccl':>16s} {'fast':>6s} | {'ideal/bound: syccl':>18s} {'fast':>6s}"
    )
    print(head if not args.plan_only else head.split(" |")[0], flush=True)
    for case in args.cases.split(","):
        for kind in args.kinds.split(","):
            t0 = time.perf_counter()
            run = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--one",
                    f"{case}:{kind}",
                    "--size",
                    args.size,
                    "--workers",
                    args.workers,
                    *(["--plan-only"] if args.plan_only else []),
                ],
                capture_output=True,
                text=True,
            )
            if run.returncode != 0:
                print(f"{case} {kind}: failed\n{run.stderr[-2000:]}", flush=True)
                continue
            r = json.loads(run.stdout.strip().splitlines()[-1])
            r["wall_s"] = time.perf_counter() - t0
            rows.append(r)
            line = f"{r['case']:16s} {r['traffic']:8s} {r['syccl_plan_s']:7.2f} {r['syccl_ops']:6d}"
            if args.plan_only:
                print(line, flush=True)
                continue
            print(
                f"{line} | "
                f"{r['syccl_algbw']:17.2f} {r['fast_algbw']:6.2f} {r['bound_algbw']:6.2f} | "
                f"{r['syccl_sim_bound']:16.3f} {r['fast_sim_bound']:6.3f} | "
                f"{r['syccl_ideal_bound']:18.3f} {r['fast_ideal_bound']:6.3f}",
                flush=True,
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
