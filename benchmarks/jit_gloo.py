"""Stock vs JIT per call on CPU/Gloo: the same MoE-style script at 2 and 4 processes.

Run: ``.venv/bin/python benchmarks/jit_gloo.py [--calls 40]``. Each process sends bf16 rows of hidden size 1024
with skewed, drifting split sizes (~600 rows per rank); the first calls warm the plan cache (misses are served
by the stock call while plans compile in the background). Reports the median time per call of the stock
``all_to_all_single`` and of the patched one (a2acc plans through the reference executor on Gloo), and the
engine's counters. This measures CPU and loopback TCP only: GPU speed is unmeasured here.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

WORKER = r"""
import json, sys, time, torch, torch.distributed as dist
rank, world, port, calls, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
from a2acc.runtime import stats, torch_patch
stock = torch_patch._STATE["original"]
g = torch.Generator().manual_seed(3)
base = torch.randint(400, 800, (world, world), generator=g)
times = {"stock": [], "jit": []}
for i in range(calls):
    rows = base + torch.randint(0, 40, (world, world), generator=g)
    send = [int(x) for x in rows[rank]]; recv = [int(x) for x in rows[:, rank]]
    x = torch.randn(sum(send), 1024).to(torch.bfloat16); y = torch.empty(sum(recv), 1024, dtype=torch.bfloat16)
    for name, fn in (("stock", stock), ("jit", dist.all_to_all_single)):
        dist.barrier(); t0 = time.perf_counter(); fn(y, x, recv, send); times[name].append(time.perf_counter() - t0)
    time.sleep(0.02)
json.dump({"times": times, "stats": stats()}, open(out, "w"))
dist.destroy_process_group()
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "w.py")
        with open(script, "w") as fh:
            fh.write(WORKER)
        for world in (2, 4):
            env = {k: v for k, v in os.environ.items() if not k.startswith("A2ACC_")}
            env.update(
                A2ACC_JIT="1", A2ACC_TOPOLOGY="alps:1" if world == 4 else "dgx-h100:1", A2ACC_CACHE_DIR=tmp
            )
            if world == 2:
                topo = os.path.join(tmp, "two.yaml")
                with open(topo, "w") as fh:
                    fh.write(
                        "version: 1\nservers: 2\ngpus_per_server: 1\nintra: {fabric: switch, bandwidth: 100}\n"
                        "inter: {nics_per_server: 1, bandwidth: 25}\n"
                    )
                env["A2ACC_TOPOLOGY"] = topo
            port = _port()
            outs = [os.path.join(tmp, f"r{r}.json") for r in range(world)]
            t0 = time.perf_counter()
            procs = [
                subprocess.Popen(
                    [sys.executable, script, str(r), str(world), str(port), str(args.calls), outs[r]], env=env
                )
                for r in range(world)
            ]
            for p in procs:
                p.wait()
            with open(outs[0]) as fh:
                res = json.load(fh)
            warm = args.calls // 4
            st = statistics.median(res["times"]["stock"][warm:]) * 1e3
            jt = statistics.median(res["times"]["jit"][warm:]) * 1e3
            s = res["stats"]
            print(
                f"{world} processes: stock {st:.1f} ms/call, a2acc {jt:.1f} ms/call ({jt / st:.2f}x); "
                f"{s['handled']}/{s['calls']} calls by plans, {s['stock_while_compiling']} stock while compiling, "
                f"hook {s['overhead_us_median']:.0f} us median ({time.perf_counter() - t0:.0f} s)"
            )


if __name__ == "__main__":
    main()
