"""Compile time of ``fast`` to verified MSCCL XML, with XML size and executor-limit figures.

Run: ``.venv/bin/python benchmarks/msccl_compile.py``. Zipf(0.8), 256 MiB per GPU, dgx-h100 4x8 and 8x8,
rccl dialect. Times (median of 5): plan (unit chosen for <= 2% padding), lower + serialise, verification of the
written text (strict read + static rules + interpreter at K=1 and the protocol K), total.
Targets: 4x8 under 100 ms in total; padding under 5% of bytes.
"""

from __future__ import annotations

import statistics
import time

from a2acc import plan
from a2acc.backends.msccl_xml.api import check_xml_text
from a2acc.backends.msccl_xml.manifest import manifest_for
from a2acc.backends.msccl_xml.writer import LowerOptions, lower, to_xml
from a2acc.ir.quantize import unit_for_padding
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate


def main(runs: int = 5) -> None:
    print(
        f"{'topo':>6} {'plan ms':>8} {'lower ms':>9} {'verify ms':>10} {'total ms':>9} {'XML KiB':>8} "
        f"{'tbs/GPU':>8} {'steps/tb':>9} {'C':>6} {'padding %':>10}"
    )
    for servers in (4, 8):
        topo = load_topology("dgx-h100", servers)
        m = generate("zipf", topo.nranks, 256 << 20, 1, skew=0.8)
        t_plan, t_lower, t_ver = [], [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            prog = plan(topo, m, "fast", unit=unit_for_padding(m, 0.02), verify=False)
            t1 = time.perf_counter()
            algo = lower(prog, LowerOptions(dialect="rccl"))
            text = to_xml(algo)
            t2 = time.perf_counter()
            man = manifest_for(prog, "x.xml", "x", algo.nchunksperloop)
            chk = check_xml_text(text, "x.xml", dialect="rccl", layout=man.layout())
            t3 = time.perf_counter()
            assert chk.ok, chk.errors[:3]
            t_plan.append(t1 - t0)
            t_lower.append(t2 - t1)
            t_ver.append(t3 - t2)
        med = [statistics.median(x) * 1e3 for x in (t_plan, t_lower, t_ver)]
        pad = 100 * man.padding_bytes() / m.sum()
        print(
            f"{servers}x8 {med[0]:>8.1f} {med[1]:>9.1f} {med[2]:>10.1f} {sum(med):>9.1f} {len(text) / 1024:>8.0f} "
            f"{max(len(g.tbs) for g in algo.gpus):>8} {max(len(t.steps) for g in algo.gpus for t in g.tbs):>9} "
            f"{algo.nchunksperloop:>6} {pad:>10.2f}"
        )


if __name__ == "__main__":
    main()
