"""Buckets that follow a moving skew, two ways: canonical buckets (what the JIT does) vs planning every call.

Run: ``.venv/bin/python benchmarks/jit_online.py [--calls 200]``.

For the workloads of ``benchmarks/moe_workloads.py``, as ``jit_workloads.py`` runs them (balanced, Zipf 0.8,
rotating and jumping hot expert, bursts; rows of 4 KiB, about 1 MiB per peer) at 4, 8 and 32 ranks, this
measures in one process what a rank pays on the call's critical path:

- **buckets**: the bucket lookup of :class:`a2acc.jit.bucket.BucketIndex` (``symmetric`` = canonical form under
  the topology's symmetries, as the JIT runs it; ``plain`` = without), its hit rate after the first two calls, and
  how many distinct plans were compiled (each in the background, once);
- **online**: planning the call's own matrix every call: quantise at the same unit, plan + verify
  (:func:`a2acc.pipeline.compile`) and compile the launch program of one rank
  (:mod:`a2acc.runtime.launch.program`), which the call would have to wait for.

Times are CPU wall clock on this machine (median and p90); the padding of each approach is reported too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from moe_workloads import WORKLOADS, rows_of

from a2acc.ir import program_from_json
from a2acc.ir.quantize import ladder_unit, quantize
from a2acc.jit.bucket import BucketIndex
from a2acc.model.topology import load_topology
from a2acc.runtime.decide.compiling import compile_entry
from a2acc.runtime.launch.program import compile_launch, exchange_set, global_steps

TOPOLOGIES = {4: ("alps", 1), 8: ("alps", 2), 32: ("dgx-h100", 4)}


def _p(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"{statistics.median(xs) * 1e3:7.2f} / {xs[int(0.9 * (len(xs) - 1))] * 1e3:7.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--ranks", type=int, nargs="+", default=[4, 8, 32])
    ap.add_argument("--algorithm", default="fast")
    args = ap.parse_args()
    print(
        f"load average {os.getloadavg()[0]:.2f}; {args.calls} calls per workload, rows of 4 KiB, algorithm {args.algorithm}"
    )
    print(
        f"{'ranks':>5} {'workload':<9} {'hits sym/plain':>14} {'plans sym/plain':>15} {'pad% bucket/online':>18} "
        f"{'lookup ms med/p90':>19} {'online ms med/p90':>19}"
    )
    for world in args.ranks:
        name, servers = TOPOLOGIES[world]
        topo = load_topology(name, servers)
        for wl in WORKLOADS:
            sym = BucketIndex(topo, args.algorithm, "none", symmetric=True)
            plain = BucketIndex(topo, args.algorithm, "none")
            hits = {"sym": 0, "plain": 0}
            keys: dict[str, set[str]] = {"sym": set(), "plain": set()}
            look, online = [], []
            pad_b = pad_o = payload = 0
            for i in range(args.calls):
                m = rows_of(wl, i, world, 256 * world) * 4096
                t0 = time.perf_counter()
                b = sym.lookup(m)
                look.append(time.perf_counter() - t0)
                bp = plain.lookup(m)
                for k, x in (("sym", b), ("plain", bp)):
                    keys[k].add(x.key)
                    hits[k] += int(x.hit and i >= 2)
                pad_b += b.padding_bytes
                payload += int(m.sum())
                if i < 40 or i % 5 == 0:  # online planning is slow: sample the later calls
                    t0 = time.perf_counter()
                    unit = ladder_unit(m)
                    counts = quantize(m, unit)
                    entry = compile_entry(topo, counts, unit, args.algorithm, None, f"online{i}")
                    prog = program_from_json(entry.program_json)
                    steps = global_steps(prog)
                    compile_launch(prog, 0, steps, exchange_set(prog, steps, False))
                    online.append(time.perf_counter() - t0)
                    pad_o += int(counts.sum()) * unit - int(m.sum())
            n_online = len(online)
            print(
                f"{world:>5} {wl:<9} {100 * hits['sym'] / (args.calls - 2):>6.1f}/{100 * hits['plain'] / (args.calls - 2):<6.1f}% "
                f"{len(keys['sym']):>7}/{len(keys['plain']):<7} "
                f"{100 * pad_b / payload:>8.1f}/{100 * pad_o / max(1, payload * n_online // args.calls):<8.1f} "
                f"{_p(look):>19} {_p(online):>19}"
            )


if __name__ == "__main__":
    main()
