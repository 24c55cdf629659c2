"""The JIT on Megatron-LM's token-imbalance workloads W0-W7: dispatch and combine, step by step, on Gloo.

Run: ``.venv/bin/python benchmarks/jit_megatron.py [--procs 4 8] [--steps 12] [--workloads w0 ... w7]``.

Each process count starts that many processes (Gloo over 127.0.0.1, ``OMP_NUM_THREADS=1``) with ``A2ACC_JIT=1``
and its defaults (``A2ACC_MISS=stock``, ``A2ACC_EXCHANGE=adaptive``, ``A2ACC_TUNE=measure``, the size threshold).
Per workload the engine starts fresh (an empty plan cache). Every step routes the workload's tokens
(:mod:`a2acc.model.workloads`: ``experts = 4 x ranks``, top-2, 512 tokens per rank, one EP group over every
rank, 4 KiB per routed row) and makes the dispatch ``all_to_all_single`` (split sizes from
:func:`a2acc.model.workloads.rank_routing`) and then the combine (the transpose). Each call runs through the
stock function and the patched one on the same tensors (their order alternating), each after a barrier, and the
two outputs are compared byte for byte: the stock call is the exact oracle. A call's time is the slowest rank's.

Reported per workload: calls served by a2acc plans; a2acc / stock (median of the served calls' times against the
stock call's median); calls without the exchange; and, never averaged into the rest:

- **W6's staleness**: calls served without an exchange whose rows no longer fitted their plan (the hot block moved
  since: ``stats()["stale"]``), how many, and their median time against the stock call's on the same calls;
- **W7's re-plan**: the burst steps' calls on their own (served? their time against stock), and the time the
  background thread took to plan each new bucket (``stats()["plan_seconds"]``).

The machine is small and shared: give ``uptime`` with the figures, and repeat runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

import gloo_job  # starting the local Gloo processes (benchmarks/gloo_job.py)

TOPOLOGIES = {4: "2x2", 8: "alps:2"}
WORKER = r"""
import dataclasses, json, os, sys, time
import torch
import torch.distributed as dist

rank, world, port, out, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
names, cache_root, row_bytes, tokens = sys.argv[6].split(","), sys.argv[7], int(sys.argv[8]), int(sys.argv[9])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
from a2acc.model.workloads import EpLayout, Workload, rank_routing
from a2acc.runtime import stats, torch_patch
from a2acc.runtime.settings import JitSettings

stock = torch_patch._STATE["original"]
width = row_bytes // 4
layout = EpLayout(gpus=world)
results = []
for name in names:
    torch_patch.uninstall()
    s, problems = JitSettings.from_env()
    assert s is not None, problems
    torch_patch.install(dataclasses.replace(s, cache_dir=os.path.join(cache_root, name)))
    eng = torch_patch.engine()
    w = Workload(name, experts=4 * world, top_k=2, tokens=tokens, seed=1)
    gen = torch.Generator().manual_seed(1000 * rank + 1)
    rec = []
    for step in range(steps):
        r = rank_routing(w, step, layout, rank)
        for phase, send, recv in (("dispatch", r.send, r.recv), ("combine", r.combine_send, r.combine_recv)):
            send, recv = [int(v) for v in send], [int(v) for v in recv]
            x = torch.randint(-1000, 1000, (sum(send), width), generator=gen).float()
            y_stock, y_a2acc = torch.empty(sum(recv), width), torch.full((sum(recv), width), 7.0)
            t = {}
            before = (eng.stats.handled, eng.stats.exchanges_skipped, eng.stats.stale)
            order = (("stock", stock, y_stock), ("a2acc", dist.all_to_all_single, y_a2acc))
            for label, fn, y in order if (2 * step + (phase == "combine")) % 2 == 0 else order[::-1]:
                dist.barrier()
                t0 = time.perf_counter()
                fn(y, x, recv, send)
                t[label] = time.perf_counter() - t0
            rec.append(
                {
                    "step": step,
                    "phase": phase,
                    "t": t,
                    "same": bool(torch.equal(y_stock.view(torch.uint8), y_a2acc.view(torch.uint8))),
                    "served": eng.stats.handled > before[0],
                    "skipped": eng.stats.exchanges_skipped > before[1],
                    "stale": eng.stats.stale > before[2],
                }
            )
    st = stats()
    results.append({"workload": name, "calls": rec, "plan_seconds": st["plan_seconds"], "stats": {k: v for k, v in st.items() if k != "last"}})
json.dump(results, open(out, "w"))
dist.barrier()
dist.destroy_process_group()
"""


def run(world: int, topo: str, args: argparse.Namespace, tmp: str) -> list[list[dict]]:
    env = gloo_job.environment(A2ACC_TOPOLOGY=gloo_job.topology(topo, tmp))
    cache = os.path.join(tmp, f"cache{world}")
    tail = [",".join(args.workloads), cache, str(args.row_bytes), str(args.tokens)]
    return gloo_job.run(WORKER, world, env, [str(args.steps), *tail], tmp)


def _ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(a) / statistics.median(b) if a and b else float("nan")


def summarise(world: int, topo: str, ranks: list[list[dict]]) -> list[dict]:
    rows = []
    for k, first in enumerate(ranks[0]):
        per = [r[k] for r in ranks]
        n = len(first["calls"])
        calls = [
            {
                "step": first["calls"][i]["step"],
                "phase": first["calls"][i]["phase"],
                "served": all(r["calls"][i]["served"] for r in per),
                "skipped": all(r["calls"][i]["skipped"] for r in per),
                "stale": any(r["calls"][i]["stale"] for r in per),
                "stock": max(r["calls"][i]["t"]["stock"] for r in per),
                "a2acc": max(r["calls"][i]["t"]["a2acc"] for r in per),
            }
            for i in range(n)
        ]
        same = all(c["same"] for r in per for c in r["calls"])
        served = [c for c in calls if c["served"]]
        row = {
            "procs": world,
            "topology": topo,
            "workload": first["workload"],
            "calls": n,
            "served": len(served),
            "skipped": sum(c["skipped"] for c in calls),
            "ratio": _ratio([c["a2acc"] for c in served], [c["stock"] for c in served]),
            "identical": same,
            "plan_ms": [round(x * 1e3, 1) for x in per[0]["plan_seconds"]],
        }
        if first["workload"] == "w6":
            stale = [c for c in calls if c["stale"]]
            row["stale"] = len(stale)
            row["stale_ratio"] = _ratio([c["a2acc"] for c in stale], [c["stock"] for c in stale])
        if first["workload"] == "w7":
            every = 4  # a2acc.model.workloads.Workload.burst_every: the last step of every 4 bursts
            burst = [c for c in calls if c["step"] % every == every - 1]
            row["burst_served"] = sum(c["served"] for c in burst)
            row["burst_calls"] = len(burst)
            row["burst_ratio"] = _ratio([c["a2acc"] for c in burst], [c["stock"] for c in burst])
            row["steady_ratio"] = _ratio(
                [c["a2acc"] for c in served if c not in burst], [c["stock"] for c in served if c not in burst]
            )
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--workloads", nargs="+", default=[f"w{i}" for i in range(8)])
    ap.add_argument("--row-bytes", type=int, default=4096, help="bytes per routed row (float32 elements)")
    ap.add_argument("--tokens", type=int, default=512, help="tokens per rank")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    rows = []
    print(
        f"{'procs':>5} {'topology':<9} {'workload':<8} {'served':>7} {'no exch.':>8} {'x':>5} {'same':>5}  notes"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for world in args.procs:
            topo = TOPOLOGIES.get(world, f"dgx-h100:{max(1, world // 8)}")
            for r in summarise(world, topo, run(world, topo, args, tmp)):
                rows.append(r)
                notes = f"plans {r['plan_ms']} ms"
                if "stale" in r:
                    notes += f"; stale {r['stale']} calls, x {r['stale_ratio']:.2f} on them"
                if "burst_calls" in r:
                    notes += (
                        f"; burst calls served {r['burst_served']}/{r['burst_calls']}, x {r['burst_ratio']:.2f} on "
                        f"them, x {r['steady_ratio']:.2f} on the steady ones"
                    )
                print(
                    f"{r['procs']:>5} {r['topology']:<9} {r['workload']:<8} {r['served']:>3}/{r['calls']:<3} "
                    f"{r['skipped']:>8} {r['ratio']:>5.2f} {r['identical']!s:>5}  {notes}",
                    flush=True,
                )
    if not all(r["identical"] for r in rows):
        raise SystemExit("an output differed from the stock call's")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
