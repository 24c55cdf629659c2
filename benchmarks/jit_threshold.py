"""Where the JIT's size threshold (``A2ACC_MIN_BYTES``) comes from: the smallest call a plan can pay for.

Run: ``.venv/bin/python benchmarks/jit_threshold.py [--configs dgx-h100:2 ...] [--host-us US]``.

A served call costs host time before its transfers (the decision and the replay: measured by
``benchmarks/jit_runtime_cost.py`` on a no-op process group, world by world, defaults on), and it can only win
that back where its plan beats the direct transfers the stock call makes. So for each multi-server preset and a
Zipf(0.8)-skewed MoE matrix, this plans ``fast`` and ``direct`` at per-GPU sizes from 4 KiB up (x2), simulates
both under the default model, and finds the smallest size from which ``fast`` is faster by more than the host
cost. Below the smallest such size over every configuration, no fabric here gains from a plan: that size,
rounded down to a power of two, is the default threshold. The host cost is a2acc's own CPU per served call
measured at the configuration's world size (``--host-us`` replaces the measurement).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CONFIGS = ("dgx-h100:2", "dgx-h100:4", "dgx-h100:8", "mi300x:2", "mi300x:4", "mi300x-100g:2", "mi300x-100g:4")
RUNTIME_COST = Path(__file__).with_name("jit_runtime_cost.py")


def host_us(world: int, cache: dict[int, float]) -> float:
    """a2acc's own CPU per served call at ``world`` ranks (defaults), measured on a no-op process group."""
    if world not in cache:
        ref = min((8, 64, 256), key=lambda w: (abs(w - world), w))  # the benchmark's worlds
        cmd = [sys.executable, str(RUNTIME_COST), "--worlds", str(ref), "--exchange", "adaptive"]
        cmd += ["--tune", "measure", "--calls", "100", "--warmup", "30", "--json", "/dev/stdout"]
        out = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows = json.loads(out[out.index("[") :])
        cache[world] = float(rows[0]["own_us"])
    return cache[world]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), help="PRESET:SERVERS")
    ap.add_argument("--host-us", type=float, help="the host cost per served call (default: measured)")
    ap.add_argument("--lo", type=int, default=4 << 10, help="smallest per-GPU size (bytes)")
    ap.add_argument("--hi", type=int, default=256 << 20, help="largest per-GPU size (bytes)")
    args = ap.parse_args()
    import a2acc
    from a2acc.model.units import format_bytes

    costs: dict[int, float] = {}
    found = []
    print(f"{'config':<16} {'host us':>8}  crossover (fast beats direct by more than the host cost)")
    for spec in args.configs:
        name, servers = spec.split(":")
        topo = a2acc.load_topology(name, int(servers))
        h = args.host_us if args.host_us is not None else host_us(topo.nranks, costs)
        size, cross, trail = args.lo, None, []
        while size <= args.hi:
            m = a2acc.generate_matrix("moe", topo.nranks, size, seed=1)
            t = {alg: a2acc.simulate(a2acc.plan(topo, m, alg), topo).time_s for alg in ("direct", "fast")}
            gain_us = (t["direct"] - t["fast"]) * 1e6
            trail.append(f"{format_bytes(size)}:{gain_us:+.0f}")
            if gain_us > h and cross is None:
                cross = size
                break
            size *= 2
        found.append(cross)
        where = format_bytes(cross) if cross else f"none up to {format_bytes(args.hi)}"
        print(f"{spec:<16} {h:>8.0f}  {where}   (gain us by size: {' '.join(trail[-4:])})", flush=True)
    hits = [c for c in found if c]
    if hits:
        low = 1 << (min(hits).bit_length() - 1)
        print(
            f"\nsmallest crossover {format_bytes(min(hits))}: default threshold {format_bytes(low)} per rank"
        )


if __name__ == "__main__":
    main()
