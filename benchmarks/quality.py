"""Simulated algbw of fast, spreadout, direct, hierarchical against the lower bound.

Run: ``.venv/bin/python benchmarks/quality.py``. dgx-h200-fast 4x8 and mi300x-100g 4x8; balanced, uniform and
Zipf(0.8); 128 MiB, 512 MiB and 1 GiB per GPU; incast model on (calibrated on RoCE). Prints algbw (GB/s, FAST's
definition), time / bound, and fast / spreadout. Targets: fast within 1.10x of the bound on Zipf(0.8) at H200
ratios; fast >= 2x spreadout on Zipf(0.8).
"""

from __future__ import annotations

from a2acc.analysis.compare import run_compare
from a2acc.model.topology import load_topology

ALGOS = ["fast", "spreadout", "direct", "hierarchical"]


def main() -> None:
    print(
        f"{'topology':>14} {'traffic':>9} {'MiB':>5} "
        + " ".join(f"{a:>13}" for a in ALGOS)
        + f" {'bound':>7} {'fast/spread':>11}"
    )
    for name in ("dgx-h200-fast", "mi300x-100g"):
        topo = load_topology(name)
        for kind in ("balanced", "uniform", "zipf"):
            rows = run_compare(topo, kind, [128 << 20, 512 << 20, 1 << 30], ALGOS, seed=1, skew=0.8)
            for size in sorted({r.size for r in rows}):
                by = {r.algorithm: r for r in rows if r.size == size}
                cells = " ".join(
                    f"{by[a].algbw_GBps:6.2f} ({by[a].time_s / by[a].bound_s:4.2f}x)" for a in ALGOS
                )
                bound_bw = size / by["fast"].bound_s / 1e9
                ratio = by["spreadout"].time_s / by["fast"].time_s
                print(f"{name:>14} {kind:>9} {size >> 20:>5} {cells} {bound_bw:7.2f} {ratio:11.2f}")


if __name__ == "__main__":
    main()
