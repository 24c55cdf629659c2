"""The JIT on real processes (Gloo, CPU): stock ``all_to_all_single`` vs a2acc, call by call, on MoE workloads.

Run: ``.venv/bin/python benchmarks/jit_workloads.py [--procs 4 8] [--dtypes float32 bfloat16] [--calls 40]``.

Each process count starts that many processes on this machine (Gloo over loopback, ``OMP_NUM_THREADS=1`` as
``torchrun`` sets it) with ``A2ACC_JIT=1`` (the path users run: the ``.pth`` hook, the patched function, the
default ``p2p`` executor, ``A2ACC_MISS=stock``). Per workload and dtype the engine starts fresh (empty plan cache),
then every call runs the stock function and the patched one on the same tensors (their order alternates), each
after a barrier, and the two outputs are compared byte for byte. The call's time is the slowest rank's.

Workloads: ``benchmarks/moe_workloads.py`` (balanced, Zipf 0.8, rotating and jumping hot expert, bursts, and one
MoE layer's dispatch and combine alternating; rows per (source, expert) pair drawn per call, every source routing
``256 x N`` tokens of ``hidden`` elements, about 1 MiB per peer with 4 KiB rows (``--row-bytes``); seeded,
identical on every rank and in ``jit_online.py``). The engine runs with its defaults, ``A2ACC_EXCHANGE=adaptive`` included: "calls without the
exchange" counts the calls a period back predicted (and, with ``--announce``, the announced ones); and
``A2ACC_TUNE=measure`` (``--tune off`` to run the planner's plans only): ``ran`` gives the served calls per planner
whose plan ran them (the bucket's first calls alternate between the planner's and the direct plan), ``kept`` what
each bucket's measurement kept (``plan`` or ``direct``).

Reported per workload: calls served by a2acc plans (all calls, and after the first two), padding and residual
(% of payload), per-call time stock and a2acc (median [min-max] over served calls), bytes each rank sends
(stock: its payload to other ranks; a2acc: everything its messages carry, relays and padding included),
messages per rank per call against (collectives posted x peers), and whether every output was byte-identical.
``--announce`` has every rank announce each call's matrix first (:func:`a2acc.runtime.announce`, what an MoE
dispatcher that all-gathers its token counts, as Megatron-LM's does, knows): a call whose plan every rank already
has then skips the split-size exchange. With ``--python-time`` also the process CPU per served call (``cpu``;
``time.process_time``: every thread of the process, Gloo's included), median over calls, then over ranks
(``benchmarks/jit_hostcost.py`` measures the host cost against the stock call on its own). This machine is
shared and small: give ``uptime`` with the figures and repeat runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import gloo_job  # starting the local Gloo processes (benchmarks/gloo_job.py)
from moe_workloads import WORKLOADS  # the workloads the workers draw (benchmarks/moe_workloads.py)

# per process count: one server (what that many local processes are) and two servers (FAST's inter-server
# balancing and relays exercised: more steps and more bytes than the stock call on a network without tiers)
TOPOLOGIES = {4: ("alps:1", "2x2"), 8: ("dgx-h100:1", "alps:2")}

WORKER = r"""
import dataclasses, json, os, sys, time
import numpy as np
import torch
import torch.distributed as dist

rank, world, port, out, calls = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
workloads, dtypes, cache_root = sys.argv[6].split(","), sys.argv[7].split(","), sys.argv[8]
announce = sys.argv[9] == "1"
row_bytes = int(sys.argv[10])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
import a2acc.runtime
from a2acc.runtime import stats, torch_patch
from a2acc.runtime.settings import JitSettings
import gloo_job  # starting the local Gloo processes (benchmarks/gloo_job.py)
from moe_workloads import WORKLOADS, rows_of  # benchmarks/ is on PYTHONPATH (_launch)

stock = torch_patch._STATE["original"]


results = []
for dtype_name in dtypes:
    dtype = getattr(torch, dtype_name)
    hidden = row_bytes // torch.empty(0, dtype=dtype).element_size()  # 4 KiB rows: 256 rows per 1 MiB
    tokens = 256 * world
    for name in workloads:
        torch_patch.uninstall()
        s, problems = JitSettings.from_env()
        assert s is not None, problems
        s = dataclasses.replace(s, cache_dir=os.path.join(cache_root, f"{name}-{dtype_name}"))
        torch_patch.install(s)
        eng = torch_patch.engine()
        rec = []
        gen = torch.Generator().manual_seed(1000 * rank + 1)
        for i in range(calls):
            rows = rows_of(name, i, world, tokens)
            send = [int(x) for x in rows[rank]]
            recv = [int(x) for x in rows[:, rank]]
            x = torch.randint(-1000, 1000, (sum(send), hidden), generator=gen).to(dtype)
            y_stock = torch.empty(sum(recv), hidden, dtype=dtype)
            y_a2acc = torch.full((sum(recv), hidden), 7, dtype=dtype)
            t = {}
            order = (("stock", stock, y_stock), ("a2acc", dist.all_to_all_single, y_a2acc))
            cpu = {}
            for label, fn, y in order if i % 2 == 0 else order[::-1]:
                if label == "a2acc" and announce:
                    a2acc.runtime.announce(rows)  # what an MoE dispatcher that gathers its counts knows
                dist.barrier()
                c0, t0 = time.process_time(), time.perf_counter()
                fn(y, x, recv, send)
                t[label] = time.perf_counter() - t0
                cpu[label] = time.process_time() - c0
            last = dict(eng.stats.last)
            same = bool(torch.equal(y_stock.view(torch.uint8), y_a2acc.view(torch.uint8)))
            stock_sent = (sum(send) - send[rank]) * hidden * x.element_size()
            rec.append({"t": t, "cpu": cpu, "last": last, "same": same, "stock_sent": stock_sent})
        st = stats()
        results.append({"workload": name, "dtype": dtype_name, "calls": rec, "stats": {k: v for k, v in st.items() if k != "last"}})
json.dump(results, open(out, "w"))
dist.barrier()
dist.destroy_process_group()
"""


def _launch(world: int, topo: str, args: argparse.Namespace, tmp: str) -> list[list[dict]]:
    env = gloo_job.environment(
        A2ACC_TOPOLOGY=gloo_job.topology(topo, tmp),
        A2ACC_EXECUTOR=args.executor,
        A2ACC_EXECUTOR_OPTS=args.executor_opts,
        A2ACC_BUCKETS=args.buckets,
        A2ACC_ALGORITHM=args.algorithm,
        A2ACC_TUNE=args.tune,
    )
    cache = os.path.join(tmp, f"cache{world}-{topo.replace(os.sep, '_')}")
    tail = [
        ",".join(args.workloads),
        ",".join(args.dtypes),
        cache,
        "1" if args.announce else "0",
        str(args.row_bytes),
    ]
    return gloo_job.run(WORKER, world, env, [str(args.calls), *tail], tmp)


def _ms(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{statistics.median(xs) * 1e3:.1f} [{min(xs) * 1e3:.1f}-{max(xs) * 1e3:.1f}]"


def _summarise(world: int, topo: str, ranks: list[list[dict]], python_time: bool) -> list[dict]:
    rows = []
    for k, first in enumerate(ranks[0]):
        per_rank = [r[k] for r in ranks]
        n = len(first["calls"])
        served = [all(r["calls"][i]["last"].get("served") for r in per_rank) for i in range(n)]
        t_stock = [max(r["calls"][i]["t"]["stock"] for r in per_rank) for i in range(n)]
        t_a2acc = [max(r["calls"][i]["t"]["a2acc"] for r in per_rank) for i in range(n)]
        same = all(c["same"] for r in per_rank for c in r["calls"])
        st = [r["stats"] for r in per_rank]
        payload = sum(s["payload_bytes"] for s in st)
        msgs_ok, worst = True, 0.0
        sent_a2acc, sent_stock = [], []
        for r in per_rank:
            for c in r["calls"]:
                last = c["last"]
                if last.get("served"):
                    bound = last.get("collectives", 0) * (world - 1)
                    worst = max(worst, max(last.get("sends", 0), last.get("recvs", 0)) / max(bound, 1))
                    msgs_ok &= last.get("sends", 0) <= bound and last.get("recvs", 0) <= bound
                    sent_a2acc.append(last.get("sent_bytes", 0))
                    sent_stock.append(c["stock_sent"])
        ts = [t for t, s in zip(t_a2acc, served) if s]
        row = {
            "procs": world,
            "topology": topo,
            "workload": first["workload"],
            "dtype": first["dtype"],
            "served": sum(served),
            "calls": n,
            "served_after_2": sum(served[2:]) / max(n - 2, 1),
            "padding": sum(s["padding_bytes"] for s in st) / max(payload, 1),
            "residual": sum(s["residual_bytes"] for s in st) / max(payload, 1),
            "stock_ms": _ms(t_stock),
            "a2acc_ms": _ms(ts),
            "ratio": (statistics.median(ts) / statistics.median(t_stock)) if ts else float("nan"),
            "sent_mib_stock": statistics.mean(sent_stock) / 2**20 if sent_stock else 0.0,
            "sent_mib_a2acc": statistics.mean(sent_a2acc) / 2**20 if sent_a2acc else 0.0,
            "msgs_within_bound": msgs_ok,
            "msgs_vs_bound": worst,
            "identical": same,
            "exchanges_skipped": sum(s.get("exchanges_skipped", 0) for s in st) / max(len(st), 1),
            # A2ACC_TUNE=measure: buckets whose measurement kept the planner's plan or the direct one, and the
            # served calls each planner's plans ran (rank 0; every rank runs the same)
            "kept": st[0].get("tuned", {}),
            "by_algorithm": st[0].get("by_algorithm", {}),
        }
        if python_time:  # process CPU per served call, median over calls then over ranks
            meds = []
            for r in per_rank:
                xs = [c["cpu"]["a2acc"] for c in r["calls"] if c["last"].get("served")]
                meds.append(statistics.median(xs) if xs else 0.0)
            row["python_ms"] = statistics.median(meds) * 1e3
        rows.append(row)
    return rows


def _print(rows: list[dict]) -> None:
    head = (
        f"{'procs':>5} {'topology':<10} {'workload':<9} {'dtype':<8} {'served':>7} {'>=call3':>7} {'pad%':>5} {'resid%':>6} "
        f"{'stock ms med [min-max]':>24} {'a2acc ms med [min-max]':>24} {'x':>5} {'MiB/rank st/a2':>14} "
        f"{'msgs<=st*p':>10} {'same':>5}"
    )
    print(head)
    for r in rows:
        print(
            f"{r['procs']:>5} {r['topology']:<10} {r['workload']:<9} {r['dtype']:<8} {r['served']:>3}/{r['calls']:<3} "
            f"{100 * r['served_after_2']:>6.0f}% {100 * r['padding']:>5.1f} {100 * r['residual']:>6.1f} "
            f"{r['stock_ms']:>24} {r['a2acc_ms']:>24} {r['ratio']:>5.2f} "
            f"{r['sent_mib_stock']:>6.2f}/{r['sent_mib_a2acc']:<6.2f} {r['msgs_within_bound']!s:>10} "
            f"{r['identical']!s:>5}"
            + (f"  cpu {r['python_ms']:.2f} ms" if "python_ms" in r else "")
            + f"  ran {_pairs(r['by_algorithm'])}"
            + (f"  kept {_pairs(r['kept'])}" if r["kept"] else "")
        )


def _pairs(d: dict) -> str:
    return ",".join(f"{k}:{v}" for k, v in sorted(d.items())) or "-"


def _print_summary(rows: list[dict]) -> None:
    """One line per (processes, topology): ranges over workloads and dtypes (what docs/runtime.md reports)."""
    print("\nsummary (ranges over workloads and dtypes; x = a2acc median / stock median per served call)")
    groups: dict[tuple[int, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["procs"], r["topology"]), []).append(r)
    for (procs, topo), rs in groups.items():

        def rng(key: str, scale: float = 1.0, fmt: str = ".1f", rs: list[dict] = rs) -> str:
            vals = [r[key] * scale for r in rs]
            return f"{min(vals):{fmt}}-{max(vals):{fmt}}"

        line = (
            f"{procs} processes, {topo}: served after call 2 {rng('served_after_2', 100, '.0f')} %, padding "
            f"{rng('padding', 100)} %, residual {rng('residual', 100)} %, x {rng('ratio', 1, '.2f')}, MiB/rank "
            f"stock {rng('sent_mib_stock', 1, '.2f')} a2acc {rng('sent_mib_a2acc', 1, '.2f')}, messages within "
            f"stages x peers: {all(r['msgs_within_bound'] for r in rs)}, byte-identical: "
            f"{all(r['identical'] for r in rs)}"
        )
        if "python_ms" in rs[0]:
            line += f", CPU per served call {rng('python_ms', 1, '.1f')} ms"
        skipped = sum(r["exchanges_skipped"] for r in rs)
        if skipped:
            line += f", calls without the exchange {skipped:.0f} of {sum(r['calls'] for r in rs)}"
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--executor", default="p2p")
    ap.add_argument("--executor-opts", default="", help="A2ACC_EXECUTOR_OPTS, e.g. overlap=true")
    ap.add_argument("--buckets", default="symmetric", choices=("symmetric", "plain"))
    ap.add_argument("--algorithm", default="fast")
    ap.add_argument(
        "--tune",
        default="measure",
        choices=("measure", "off"),
        help="A2ACC_TUNE: measure each bucket's plan against its direct plan and keep the faster (default), or off",
    )
    ap.add_argument(
        "--topology",
        action="append",
        default=[],
        metavar="PROCS=SPEC",
        help="A2ACC_TOPOLOGY for a process count (repeatable; default 4=alps:1, 4=2x2, 8=dgx-h100:1, 8=alps:2)",
    )
    ap.add_argument(
        "--row-bytes",
        type=int,
        default=4096,
        help="bytes per routed row (default 4096: about 1 MiB per peer; 256 rows per source and peer on "
        "average); smaller for many processes on one machine (64 processes: 256, 64 KiB per peer, 4 MiB per "
        "rank, above the JIT's 512 KiB threshold)",
    )
    ap.add_argument("--python-time", action="store_true", help="also the process CPU per served call")
    ap.add_argument(
        "--announce",
        action="store_true",
        help="every rank announces each call's matrix first (a2acc.runtime.announce, as an MoE dispatcher that "
        "all-gathers its counts can): a call whose plan every rank has skips the split-size exchange",
    )
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    if args.row_bytes <= 0 or args.row_bytes % 8:
        ap.error(f"--row-bytes {args.row_bytes}: a positive multiple of 8 (whole elements of every dtype)")
    chosen: dict[int, list[str]] = {}
    for t in args.topology:
        k, v = t.split("=", 1)
        chosen.setdefault(int(k), []).append(v)
    all_rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in args.procs:
            for topo in chosen.get(world) or TOPOLOGIES.get(world, (f"dgx-h100:{max(1, world // 8)}",)):
                t0 = time.perf_counter()
                rows = _summarise(world, topo, _launch(world, topo, args, tmp), args.python_time)
                all_rows += rows
                _print(rows)
                print(
                    f"({world} processes, {topo}: {time.perf_counter() - t0:.0f} s; "
                    f"load average {os.getloadavg()[0]:.2f})"
                )
    _print_summary(all_rows)
    if args.json:
        Path(args.json).write_text(json.dumps(all_rows, indent=1))


if __name__ == "__main__":
    main()
