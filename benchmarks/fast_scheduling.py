"""FAST scheduling time and stage counts: the planner core against FAST's C++ scheduler.

Run: ``.venv/bin/python benchmarks/fast_scheduling.py [--runs 20] [--program-max-servers 16]``

Measures, for n servers x 8 GPUs, uniform and Zipf(0.8) matrices (256 MiB per rank), median of ``--runs``:
- ``stage plan``: chunk matrix in -> balancing decisions, server matrix and Birkhoff stages out (quantisation
  included), with the compiled core and with the pure-Python reference;
- ``program``: matrix in -> full IR Program (every balancing, transfer and redistribution op), unverified;
- stage counts: ours (bottleneck matchings) vs FAST's Kuhn method vs the n^2 - 2n + 2 bound, each pair on the
  same server matrix, at three granularities: ``@chunk``, a2acc's plan unit (the busiest rank moves ~4096
  chunks, the default of ``a2acc plan``; coarse units make entries coincide, so both methods need fewer
  stages); ``@FAST``, FAST's own granularity: its generators draw integer entries in 1..10000 per GPU pair
  (MangoBoost/FAST ``simulation/test.h``, ``MAX_ELEMENT``) and decompose the server matrix of those integers
  unscaled, so the unit is the largest entry / 10000; and ``@16B``, 16-byte units (no quantisation at all);
- ``steps``: the network steps the fast plan runs at the chunk granularity (heaviest first, stages shorter
  than two link latencies folded into other steps, the last step split; :func:`a2acc.planners.fast.order_steps`).
Anchor (FAST paper, C++): 25 us @ 4x8, 221 us @ 8x8, 805 us @ 12x8, 77 ms @ 40x8.

These are inner loops. What users run (``a2acc plan`` / ``a2acc compile`` / a JIT miss: quantize, plan, verify,
lower, check) is timed by ``benchmarks/pipeline.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from a2acc.ir.quantize import choose_unit, quantize
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.planners import PlanRequest
from a2acc.planners.birkhoff import decompose, stage_bound
from a2acc.planners.fast import plan as fast_plan
from a2acc.planners.stageplan import native_available, stage_plan, stage_plan_from_bytes

ANCHOR_US = {4: 25, 8: 221, 12: 805, 40: 77_000}


def _median_us(fn, runs: int) -> float:
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--servers", default="4,8,12,16,40,64")
    ap.add_argument("--program-max-servers", type=int, default=16)
    ap.add_argument("--kuhn-max-servers", type=int, default=40, help="FAST's Kuhn method at 16 B is slow")
    args = ap.parse_args()
    print(f"native core: {'yes' if native_available() else 'NO (pure Python)'}; median of {args.runs} runs")
    print(
        f"{'servers':>7} {'matrix':>8} {'plan C (us)':>12} {'plan py (us)':>13} {'program (ms)':>13} "
        f"{'FAST (us)':>10} {'stages@chunk':>12} {'kuhn@chunk':>10} {'stages@FAST':>11} {'kuhn@FAST':>9} "
        f"{'stages@16B':>10} {'kuhn@16B':>8} "
        f"{'steps':>5} {'bound':>7} {'ops':>8}"
    )
    for n in (int(x) for x in args.servers.split(",")):
        topo = load_topology("dgx-h200-fast", servers=n)
        s = topo.summary()
        for kind in ("uniform", "zipf"):
            m = generate(kind, topo.nranks, 256 << 20, 1, skew=0.8)

            def plan_c(m=m, s=s) -> None:  # bytes in: quantised inside the compiled core
                stage_plan_from_bytes(m, 8, b_inter=s.b_inter, b_intra=s.b_intra_link, alpha=7e-7)

            def plan_py(m=m, s=s) -> None:
                unit = choose_unit(m)
                stage_plan(
                    quantize(m, unit),
                    8,
                    unit=unit,
                    b_inter=s.b_inter,
                    b_intra=s.b_intra_link,
                    alpha=7e-7,
                    native=False,
                )

            t_c = _median_us(plan_c, args.runs)
            py_runs = max(1, args.runs // 10) if n >= 16 else args.runs
            t_py = _median_us(plan_py, py_runs) if n <= 40 else float("nan")
            unit = choose_unit(m)
            sp = stage_plan(
                quantize(m, unit), 8, unit=unit, b_inter=s.b_inter, b_intra=s.b_intra_link, alpha=7e-7
            )
            kuhn = len(decompose(sp.server, "kuhn").stages) if n <= 40 else float("nan")
            fine: dict[str, tuple[int, int | float]] = {}
            for label, g in (("fast", max(1, int(m.max()) // 10000)), ("16B", 16)):
                spg = stage_plan(
                    quantize(m, g), 8, unit=g, b_inter=s.b_inter, b_intra=s.b_intra_link, alpha=7e-7
                )
                kg = len(decompose(spg.server, "kuhn").stages) if n <= args.kuhn_max_servers else float("nan")
                fine[label] = (len(spg.decomposition.stages), kg)
            t_prog = float("nan")
            ops = 0
            steps: int | float = float("nan")
            if n <= args.program_max_servers:
                u = choose_unit(m)
                req = PlanRequest(topo, m, quantize(m, u), u)
                prog_runs = max(3, args.runs // 4)
                t_prog = _median_us(lambda req=req: fast_plan(req), prog_runs) / 1e3
                prog = fast_plan(req)
                ops = len(prog.ops)
                steps = int(prog.meta["stages"])  # type: ignore[arg-type]
            print(
                f"{n:>7} {kind:>8} {t_c:>12.1f} {t_py:>13.1f} {t_prog:>13.1f} {ANCHOR_US.get(n, float('nan')):>10} "
                f"{len(sp.decomposition.stages):>12} {kuhn:>10} {fine['fast'][0]:>11} {fine['fast'][1]:>9} "
                f"{fine['16B'][0]:>10} {fine['16B'][1]:>8} {steps:>5} {stage_bound(n):>7} {ops:>8}"
            )


if __name__ == "__main__":
    main()
