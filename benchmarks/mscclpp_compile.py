"""MSCCL++ JSON lowering: compile + check time, peak memory, plan size and shape, as ``a2acc compile`` runs it.

Run: ``.venv/bin/python benchmarks/mscclpp_compile.py [--servers 4,8,16,32,64] [--runs 1] [--opt KEY=VALUE ...]
[--algorithm fast] [--reference]``

Workload: dgx-h100 presets (n x 8 H100), Zipf(0.8), 256 MiB per GPU, the ``fast`` planner (``--algorithm``), the padding ladder
of ``a2acc compile`` (``--max-padding auto``), target ``mscclpp-json``. Every configuration runs in a fresh
process (its peak RSS is its own) through :func:`a2acc.pipeline.compile`, the path ``a2acc compile`` runs: plan,
verify, lower (the compiled lowering when built), check (the compiled check of the exact JSON text: load checks,
intra-thread-block rules, two launches with deadlock, race, cross-launch and postcondition checks). Columns:
wall and CPU seconds of the whole compile (CPU: ``time.process_time``, which a loaded machine does not inflate),
the pipeline's own phase times (wall), peak RSS, the JSON size and the plan's shape (thread blocks per GPU,
operations per thread block: the executor's limits are 64 operations and, all thread blocks being co-resident,
at most the SMs: the dgx-h100 preset's GPU gives 132, an H100's SMs; ``--opt max_threadblocks=108`` times an
A100's limit). ``--reference`` hides the compiled cores and times the pure-Python lowering and check.
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
import json, resource, time
if {reference!r}:
    from a2acc.backends.mscclpp import check, lower
    check._native = None
    lower._native = None
from a2acc.errors import LoweringError
from a2acc.ir.quantize import UnitPolicy
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate
from a2acc.pipeline import Request, compile

topo = load_topology("dgx-h100", {servers!r})
m = generate("zipf", topo.nranks, 256 << 20, 1, skew=0.8)
c0, w0 = time.process_time(), time.perf_counter()
out = {{"gpus": topo.nranks}}
try:
    res = compile(Request(topo, m, {algorithm!r}, target="mscclpp-json", target_options={opts!r} or None,
                          units=UnitPolicy(max_padding="auto")))
except LoweringError as exc:
    out["refused"] = str(exc)
else:
    assert res.check is not None and res.check.ok and res.lowered is not None
    st = res.lowered.model.stats
    out.update(timings=res.timings, json_bytes=sum(len(t) for t in res.lowered.files.values()),
               tbs=st.threadblocks, ops=st.ops_per_tb, lanes=st.lanes, unit=res.unit_label,
               summary=res.lowered.summary)
out["cpu"], out["wall"] = time.process_time() - c0, time.perf_counter() - w0
out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def run_one(servers: int, opts: dict[str, str], reference: bool, algorithm: str) -> dict[str, Any]:
    code = CHILD.format(servers=servers, opts=opts, reference=reference, algorithm=algorithm)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()
        return {"error": tail[-1] if tail else f"exit {proc.returncode}"}
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default="4,8,16,32,64")
    ap.add_argument("--runs", type=int, default=1, help="median over this many processes per configuration")
    ap.add_argument("--opt", action="append", default=[], help="target options, KEY=VALUE")
    ap.add_argument("--algorithm", default="fast", help="the planner (fast; direct: every pair its own peer)")
    ap.add_argument("--reference", action="store_true", help="pure-Python lowering and check")
    args = ap.parse_args()
    opts = dict(kv.split("=", 1) for kv in args.opt)
    print(
        f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs); {args.algorithm}, options "
        f"{opts or 'default'}"
    )
    print(
        f"{'topo':>5} {'GPUs':>5} {'wall s':>8} {'CPU s':>7} {'plan':>6} {'verify':>7} {'lower':>7} {'check':>7} "
        f"{'RSS MiB':>8} {'JSON MB':>8} {'tbs/GPU':>8} {'ops/tb':>7}  result"
    )
    for servers in (int(s) for s in args.servers.split(",")):
        runs = [run_one(servers, opts, args.reference, args.algorithm) for _ in range(args.runs)]
        r0 = runs[0]
        if "error" in r0:
            print(f"{servers}x8  failed: {r0['error']}")
            continue
        wall = statistics.median(r["wall"] for r in runs)
        cpu = statistics.median(r["cpu"] for r in runs)
        rss = max(r["peak_rss"] for r in runs) / 2**20
        if "refused" in r0:
            print(
                f"{servers}x8 {r0['gpus']:>5} {wall:>8.2f} {cpu:>7.2f} {'':>31} {rss:>8.0f}  refused: {r0['refused']}"
            )
            continue

        def med(phase: str, runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(r["timings"].get(phase, 0.0) for r in runs)

        print(
            f"{servers}x8 {r0['gpus']:>5} {wall:>8.2f} {cpu:>7.2f} {med('plan'):>6.2f} {med('verify'):>7.2f} "
            f"{med('lower'):>7.2f} {med('check'):>7.2f} {rss:>8.0f} {r0['json_bytes'] / 1e6:>8.1f} {r0['tbs']:>8d} "
            f"{r0['ops']:>7d}  ok ({r0['unit']}; {r0['summary']})"
        )


if __name__ == "__main__":
    main()
