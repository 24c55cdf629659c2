"""How long ``auto`` takes to plan against ``fast`` alone, each in a fresh process (no memo shared between them).

Run: ``.venv/bin/python benchmarks/auto_time.py [--cases dgx-h100:4,dgx-h100:8,mi300x-100g:4]
[--traffic zipf,moe,balanced] [--sizes 1M,64M,1G] [--budget 0]``

For every case, traffic and size: the wall and CPU seconds of ``a2acc.pipeline.compile`` (plan + verify, the
topology's default model) with ``fast`` and with ``auto`` at ``budget_s`` (0: the quick planners only, syccl and
mcf skipped by the budget), each in its own fresh Python process, and auto / fast. CPU time
(``time.process_time``) is the figure a loaded machine does not inflate.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, time
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.pipeline import Request, compile
topo = load_topology({preset!r}, {servers})
m = generate({kind!r}, topo.nranks, {size}, 1)
opts = {{"budget_s": {budget}}} if {algo!r} == "auto" else None
w0, c0 = time.perf_counter(), time.process_time()
prog = compile(Request(topo, m, {algo!r}, planner_options=opts)).program
print(json.dumps({{"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                  "pick": prog.meta.get("auto", {{}}).get("pick", "")}}))
"""


def _run(preset: str, servers: int, kind: str, size: int, algo: str, budget: float) -> dict[str, float | str]:
    code = CHILD.format(preset=preset, servers=servers, kind=kind, size=size, algo=algo, budget=budget)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    res: dict[str, float | str] = json.loads(out.strip().splitlines()[-1])
    return res


def main() -> None:
    from a2acc.model.units import parse_size
    from a2acc.studies.compare import size_label

    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="dgx-h100:4,dgx-h100:8,mi300x-100g:4")
    ap.add_argument("--traffic", default="zipf,moe,balanced")
    ap.add_argument("--sizes", default="1M,64M,1G")
    ap.add_argument("--budget", type=float, default=0.0)
    args = ap.parse_args()
    print(
        "| case | traffic | size/GPU | fast wall s | fast CPU s | auto wall s | auto CPU s | auto/fast CPU | pick |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for case in args.cases.split(","):
        preset, servers = case.split(":")
        for kind in args.traffic.split(","):
            for size in (parse_size(s) for s in args.sizes.split(",")):
                f = _run(preset, int(servers), kind, size, "fast", args.budget)
                a = _run(preset, int(servers), kind, size, "auto", args.budget)
                ratio = float(a["cpu"]) / max(float(f["cpu"]), 1e-9)
                worst = max(worst, ratio)
                print(
                    f"| {preset} {servers}x8 | {kind} | {size_label(size)} | {float(f['wall']):.3f} | "
                    f"{float(f['cpu']):.3f} | {float(a['wall']):.3f} | {float(a['cpu']):.3f} | {ratio:.2f} | "
                    f"{a['pick']} |",
                    flush=True,
                )
    print(f"\nworst auto / fast (CPU): {worst:.2f}")


if __name__ == "__main__":
    main()
