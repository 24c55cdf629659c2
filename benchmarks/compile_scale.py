"""How ``a2acc compile`` to verified MSCCL XML scales: plan, verify, lower, check, XML size and peak memory.

Run: ``.venv/bin/python benchmarks/compile_scale.py [--servers 4,8,16,32,64] [--nvl72] [--runs 1]
[--reference]``

Workload: dgx-h100 presets (n x 8 H100) and the nvl72 preset (72 GPUs, direct-connect), Zipf(0.8),
256 MiB per GPU, fast planner, msccl-xml (nccl dialect), padding ladder ``--max-padding auto`` (what
``a2acc compile`` runs). Every configuration runs in a fresh process (so its peak RSS is its own), through
:func:`a2acc.pipeline.compile`; the phase times are the pipeline's (``Result.timings``, summed over the padding
ladder's attempts; for a layout every ladder step refuses: the first attempt's, the total being the whole
ladder). ``--reference`` hides the compiled lowering and check (``a2acc._xmlinterp``), timing the
pure-Python reference instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

CHILD = """
import json, resource, sys, time
if {reference!r}:
    from a2acc.backends.msccl_xml import target, writer
    target._native = None
    writer._native = None
from a2acc.errors import LoweringError
from a2acc.ir.quantize import UnitPolicy
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.pipeline import Request, compile

topo = load_topology({preset!r}, {servers!r})
m = generate("zipf", topo.nranks, 256 << 20, 1, skew=0.8)
t0 = time.perf_counter()
out = {{"gpus": topo.nranks}}
try:
    res = compile(Request(topo, m, "fast", target="msccl-xml", units=UnitPolicy(max_padding="auto")))
except LoweringError as exc:
    out["refused"] = str(exc)
    out["wall"] = time.perf_counter() - t0
    # the phases of the ladder's first attempt, for the table
    first = compile(Request(topo, m, "fast", units=UnitPolicy(max_padding=0.02)))
    from a2acc.backends import get_target
    tg = get_target("msccl-xml")
    t1 = time.perf_counter()
    try:
        tg.lower(first.program, tg.Options())
    except LoweringError:
        pass
    out["timings"] = dict(first.timings, lower=time.perf_counter() - t1)
else:
    assert res.check is not None and res.check.ok and res.lowered is not None
    out["timings"] = res.timings
    out["xml_bytes"] = sum(len(t) for t in res.lowered.files.values())
    out["padding"] = res.unit_label
    out["summary"] = res.lowered.summary
out.setdefault("wall", time.perf_counter() - t0)
out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def run_one(preset: str, servers: int | None, reference: bool) -> dict[str, Any]:
    code = CHILD.format(preset=preset, servers=servers, reference=reference)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    if proc.returncode != 0:
        return {
            "error": proc.stderr.strip().splitlines()[-1]
            if proc.stderr.strip()
            else f"exit {proc.returncode}"
        }
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default="4,8,16,32,64")
    ap.add_argument("--nvl72", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--runs", type=int, default=1, help="median over this many processes per configuration")
    ap.add_argument("--reference", action="store_true", help="pure-Python lowering and check")
    args = ap.parse_args()
    configs: list[tuple[str, str, int | None]] = [
        (f"{s}x8", "dgx-h100", int(s)) for s in args.servers.split(",") if s
    ]
    if args.nvl72:
        configs.append(("nvl72", "nvl72", None))
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    print(
        f"{'config':>7} {'GPUs':>5} {'plan s':>8} {'verify s':>9} {'lower s':>8} {'check s':>8} "
        f"{'lower+check s':>14} {'total s':>8} {'XML MB':>8} {'peak RSS MiB':>13}  result"
    )
    for label, preset, servers in configs:
        runs = [run_one(preset, servers, args.reference) for _ in range(args.runs)]
        first = runs[0]
        if "error" in first:
            print(f"{label:>7} {'':>5}  failed: {first['error']}")
            continue
        wall = statistics.median(r["wall"] for r in runs)
        rss = max(r["peak_rss"] for r in runs) / 2**20

        def med(phase: str, runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(r["timings"].get(phase, 0.0) for r in runs)

        plan, verify, lower, check = med("plan"), med("verify"), med("lower"), med("check")
        if "refused" in first:  # phases of the first ladder attempt; total = the whole ladder
            print(
                f"{label:>7} {first['gpus']:>5} {plan:>8.3f} {verify:>9.3f} {lower:>8.3f} {'-':>8} {'-':>14} "
                f"{wall:>8.2f} {'-':>8} {rss:>13.0f}  refused: {first['refused']}"
            )
            continue
        print(
            f"{label:>7} {first['gpus']:>5} {plan:>8.3f} {verify:>9.3f} {lower:>8.3f} {check:>8.3f} "
            f"{lower + check:>14.3f} {wall:>8.2f} {first['xml_bytes'] / 1e6:>8.1f} {rss:>13.0f}  "
            f"ok ({first['padding']}; {first['summary']})"
        )


if __name__ == "__main__":
    main()
