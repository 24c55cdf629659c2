"""A 32 x 8 compile (plan + verify) fits a memory cap: ops are columns and the verifier's state is linear."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# address space for the whole child (interpreter, numpy, networkx, the plan and the verifier); a Program held as
# one Python object per op with per-op dependency tuples, or a verifier keeping a clock per op and rank, needs
# several times the plan's share of this
CAP_BYTES = 320 << 20

CHILD = textwrap.dedent(
    """
    import resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
    from a2acc.ir.verify import native_available
    from a2acc.model.topology import load_topology
    from a2acc.model.traffic import generate
    from a2acc.pipeline import Request, compile
    topo = load_topology("dgx-h100", 32)
    m = generate("zipf", topo.nranks, 256 << 20, 1, skew=0.8)
    t0 = time.perf_counter()
    res = compile(Request(topo, m, "fast"))
    wall = time.perf_counter() - t0
    if res.verify is None or not res.verify.ok:
        sys.exit("verification failed")
    print(len(res.program.table), native_available(), round(wall, 2))
    """
)


@pytest.mark.slow
def test_32x8_compile_under_a_memory_cap():
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(cap=CAP_BYTES)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    nops, _native, _wall = proc.stdout.split()
    assert int(nops) > 100_000
