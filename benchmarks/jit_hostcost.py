"""Host CPU per served call: the JIT's ``all_to_all_single`` against the stock call, on real Gloo processes.

Run: ``.venv/bin/python benchmarks/jit_hostcost.py [--procs 4 8] [--exchange adaptive every] [--topology ...]``.

What it measures is what a GPU job pays in front of every MoE all-to-all: the host work of the call. The rows
are tiny (32 bytes: 8 float32), so moving bytes costs next to nothing and what is left is each path's own work.
Each process count starts that many processes on this machine (Gloo over 127.0.0.1, ``OMP_NUM_THREADS=1`` as
``torchrun`` sets it) with ``A2ACC_JIT=1`` and the settings under test (``A2ACC_MISS=stock``,
``A2ACC_TUNE=measure``: the defaults; ``A2ACC_MIN_BYTES=0``, as these calls are below the default size threshold
and would go to the stock call untouched). Every rank sends a steady skewed matrix (Zipf 0.8 over destinations,
rotated per source, the same every call), then runs ``--warmup`` calls of each path and ``--calls`` timed calls,
alternating stock and a2acc, each after a barrier.

The figure is **process CPU time** (``time.process_time``: user + system of every thread of the process, so
Gloo's own threads count on both sides) per call, the median over calls on each rank, then the median over
ranks. Every timed a2acc call must be served by an a2acc plan (``stats()["last"]["served"]``) and byte-identical
to the stock call on the same input; the run fails otherwise. Also printed: the calling thread's CPU
(``time.thread_time``) and the wall time per call, medians the same way.

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

TOPOLOGIES = {4: ("alps:1", "2x2"), 8: ("dgx-h100:1", "alps:2")}
WORKER = r"""
import json, sys, time
import numpy as np
import torch
import torch.distributed as dist

rank, world, port, out, warmup, calls, rows_per_rank = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
    sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]))
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
from a2acc.runtime import stats, torch_patch

stock = torch_patch._STATE["original"]
patched = dist.all_to_all_single
assert patched is not stock, "a2acc's patch is not installed"
# a steady skewed matrix: Zipf(0.8) over destinations, rotated per source, every row `rows_per_rank` rows
w = 1.0 / np.arange(1, world + 1) ** 0.8
share = np.floor(w / w.sum() * rows_per_rank).astype(np.int64)
share[0] += rows_per_rank - int(share.sum())
m = np.stack([np.roll(share, s) for s in range(world)])
send, recv = [int(x) for x in m[rank]], [int(x) for x in m[:, rank]]
x = torch.arange(sum(send) * 8, dtype=torch.float32).reshape(-1, 8) + 1e6 * rank
y_stock = torch.empty(sum(recv), 8)
y_a2acc = torch.empty(sum(recv), 8)
rec = {"stock": [], "a2acc": [], "thread": {"stock": [], "a2acc": []}, "wall": {"stock": [], "a2acc": []}}
bad = []
for i in range(warmup + calls):
    for label, fn, y in (("stock", stock, y_stock), ("a2acc", patched, y_a2acc))[:: 1 if i % 2 == 0 else -1]:
        y.fill_(-1)
        dist.barrier()
        c0, t0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
        fn(y, x, recv, send)
        c1, t1, w1 = time.process_time(), time.thread_time(), time.perf_counter()
        if i >= warmup:
            rec[label].append(c1 - c0)
            rec["thread"][label].append(t1 - t0)
            rec["wall"][label].append(w1 - w0)
            if label == "a2acc" and not stats()["last"].get("served"):
                bad.append(f"call {i} not served: {stats()['last']}")
    if i >= warmup and not torch.equal(y_stock, y_a2acc):
        bad.append(f"call {i}: output differs from the stock call")
st = stats()
json.dump({"rec": rec, "bad": bad, "stats": {k: v for k, v in st.items() if k != "last"}}, open(out, "w"))
dist.barrier()
dist.destroy_process_group()
"""


def _launch(world: int, topo: str, exchange: str, args: argparse.Namespace, tmp: str) -> list[dict]:
    path = gloo_job.topology(topo, tmp)
    env = gloo_job.environment(
        A2ACC_TOPOLOGY=path,
        A2ACC_EXCHANGE=exchange,
        A2ACC_MIN_BYTES="0",  # a served call is what is measured: its few KiB are below the default threshold
        A2ACC_CACHE_DIR=os.path.join(tmp, f"cache-{world}-{exchange}-{Path(path).name}"),
        **dict(kv.split("=", 1) for kv in args.env),
    )
    return gloo_job.run(WORKER, world, env, [str(args.warmup), str(args.calls), str(args.rows)], tmp)


def _med(ranks: list[dict], path: tuple[str, ...]) -> float:
    """Median over ranks of each rank's median over calls, in microseconds."""
    per_rank = []
    for r in ranks:
        v = r["rec"]
        for k in path:
            v = v[k]
        per_rank.append(statistics.median(v))
    return statistics.median(per_rank) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--exchange", nargs="+", default=["adaptive", "every"], choices=("adaptive", "every"))
    ap.add_argument(
        "--topology",
        action="append",
        default=[],
        metavar="PROCS=SPEC",
        help="A2ACC_TOPOLOGY for a process count (repeatable; default 4=alps:1, 4=2x2, 8=dgx-h100:1, 8=alps:2)",
    )
    ap.add_argument("--warmup", type=int, default=24)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--rows", type=int, default=64, help="rows each rank sends per call (32 bytes each)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="more A2ACC_* settings")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    chosen: dict[int, list[str]] = {}
    for t in args.topology:
        k, v = t.split("=", 1)
        chosen.setdefault(int(k), []).append(v)
    rows = []
    print(
        f"{'procs':>5} {'topology':<11} {'exchange':<9} {'stock us':>9} {'a2acc us':>9} {'x':>5} "
        f"{'thread st/a2':>13} {'wall st/a2 us':>14} {'served':>7} {'predicted':>9}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for world in args.procs:
            for topo in chosen.get(world) or TOPOLOGIES.get(world, (f"dgx-h100:{max(1, world // 8)}",)):
                for exchange in args.exchange:
                    ranks = _launch(world, topo, exchange, args, tmp)
                    bad = [b for r in ranks for b in r["bad"]]
                    if bad:
                        raise SystemExit(f"{world} processes, {topo}, {exchange}: {bad[:4]}")
                    st, a2 = _med(ranks, ("stock",)), _med(ranks, ("a2acc",))
                    row = {
                        "procs": world,
                        "topology": topo,
                        "exchange": exchange,
                        "stock_us": st,
                        "a2acc_us": a2,
                        "ratio": a2 / st,
                        "thread_us": [_med(ranks, ("thread", "stock")), _med(ranks, ("thread", "a2acc"))],
                        "wall_us": [_med(ranks, ("wall", "stock")), _med(ranks, ("wall", "a2acc"))],
                        "handled": ranks[0]["stats"]["handled"],
                        "calls": ranks[0]["stats"]["calls"],
                        "predicted": ranks[0]["stats"].get("predicted", 0),
                    }
                    rows.append(row)
                    print(
                        f"{world:>5} {topo:<11} {exchange:<9} {st:>9.0f} {a2:>9.0f} {row['ratio']:>5.2f} "
                        f"{row['thread_us'][0]:>6.0f}/{row['thread_us'][1]:<6.0f} "
                        f"{row['wall_us'][0]:>6.0f}/{row['wall_us'][1]:<7.0f} "
                        f"{row['handled']:>3}/{row['calls']:<3} {row['predicted']:>9}",
                        flush=True,
                    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
