"""MSCCL++ JSON lowering: compile + verify time, plan size and thread-block shape, as ``a2acc compile`` runs it.

Run: ``.venv/bin/python benchmarks/mscclpp_compile.py [--runs 3] [--servers 4,8] [--opt KEY=VALUE ...]``

Workload: dgx-h100 presets (n x 8 H100), Zipf(0.8), 256 MiB per GPU, the ``fast`` planner, the padding ladder
of ``a2acc compile`` (``UnitPolicy(max_padding="auto")``), target ``mscclpp-json``. Every phase time is the
pipeline's own (:attr:`a2acc.pipeline.Result.timings`): ``lower`` is the lowering plus the JSON text, ``check``
the strict re-read of that text and the interpreter (load checks, two launches, races, postcondition). Medians
of ``--runs``. Columns: thread blocks per GPU (max), operations per thread block (max and mean, pipelines
flattened as the executor counts them), the JSON size, channel pairs, semaphores.
"""

from __future__ import annotations

import argparse
import statistics

from a2acc.ir.quantize import UnitPolicy
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.options import split_pairs
from a2acc.pipeline import Request, compile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--servers", default="4,8")
    ap.add_argument("--opt", action="append", default=[], help="target options, KEY=VALUE")
    args = ap.parse_args()
    opts = dict(split_pairs(args.opt)) if args.opt else None
    print(
        f"{'topo':>5} {'plan ms':>8} {'verify ms':>9} {'lower ms':>9} {'check ms':>9} {'total ms':>9} "
        f"{'JSON KiB':>9} {'tbs/GPU':>8} {'ops/tb max':>10} {'ops/tb mean':>11} {'chan pairs':>10} {'sems':>6}"
    )
    for servers in (int(s) for s in args.servers.split(",")):
        topo = load_topology("dgx-h100", servers)
        m = generate("zipf", topo.nranks, 256 << 20, 1, skew=0.8)
        req = Request(
            topo, m, "fast", target="mscclpp-json", target_options=opts, units=UnitPolicy(max_padding="auto")
        )
        times: dict[str, list[float]] = {}
        res = None
        for _ in range(args.runs):
            res = compile(req)
            for k, v in res.timings.items():
                times.setdefault(k, []).append(v * 1e3)
            times.setdefault("total", []).append(res.total_s * 1e3)
        assert res is not None and res.lowered is not None and res.check is not None and res.check.ok
        med = {k: statistics.median(v) for k, v in times.items()}
        ((_name, text),) = res.lowered.files.items()
        plan = res.lowered.model.plan
        per_tb = [sum(1 + len(o.ops) for o in t.ops) for g in plan.gpus for t in g.threadblocks]
        pairs = sum(len(g.peers("memory")) + len(g.peers("port")) for g in plan.gpus) // 2
        print(
            f"{servers}x8 {med.get('plan', 0):8.1f} {med.get('verify', 0):9.1f} {med.get('lower', 0):9.1f} "
            f"{med.get('check', 0):9.1f} {med['total']:9.1f} {len(text.encode()) / 1024:9.0f} "
            f"{max(len(g.threadblocks) for g in plan.gpus):8d} {max(per_tb):10d} "
            f"{statistics.mean(per_tb):11.1f} {pairs:10d} {sum(len(g.semaphores) for g in plan.gpus):6d}"
        )
        print(f"      {res.lowered.summary}; unit: {res.unit_label}")


if __name__ == "__main__":
    main()
