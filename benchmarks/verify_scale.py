"""Verifier throughput: time to verify Programs of growing size (target: 100k ops in under 5 s).

Run: ``.venv/bin/python benchmarks/verify_scale.py``. Builds relay-style Programs (each pair staged through
scratch, so half the ops carry a dependency that the race checker must prove) and direct plans.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from a2acc import plan
from a2acc.ir import Buf, Program, ProgramBuilder
from a2acc.ir.verify import verify_program
from a2acc.model.topology import load_topology


def relay(n: int) -> Program:
    counts = np.full((n, n), 3, dtype=np.int64)
    b = ProgramBuilder("relay", "bench", counts, 16)
    for s in range(n):
        for d in range(n):
            off = b.alloc_scratch(s, 3)
            a = b.add((s, Buf.INPUT, int(b.in_off[s, d])), (s, Buf.SCRATCH, off), 3)
            b.add((s, Buf.SCRATCH, off), (d, Buf.OUTPUT, int(b.out_off[d, s])), 3, deps=[a])
    return b.build()


def main() -> None:
    print(f"{'program':>24} {'ops':>8} {'verify s':>9}")
    for n in (64, 128, 224):
        p = relay(n)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            rep = verify_program(p)
            times.append(time.perf_counter() - t0)
            assert rep.ok
        print(f"{'relay ' + str(n) + ' ranks':>24} {len(p.ops):>8} {statistics.median(times):>9.3f}")
    t = load_topology("dgx-h100", servers=32)
    m = np.random.default_rng(0).integers(1, 1 << 20, size=(t.nranks, t.nranks))
    p = plan(t, m, "direct", verify=False)
    t0 = time.perf_counter()
    assert verify_program(p).ok
    print(f"{'direct 256 ranks':>24} {len(p.ops):>8} {time.perf_counter() - t0:>9.3f}")


if __name__ == "__main__":
    main()
