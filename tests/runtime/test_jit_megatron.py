"""``benchmarks/jit_megatron.py`` on a few steps, as its docstring runs it: the JIT on Megatron-LM's W0, W6 and
W7 over four Gloo processes, every output byte-identical to the stock call's (the benchmark exits non-zero
otherwise), calls served by plans, and W6's staleness and W7's burst reported on their own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "jit_megatron.py"


@pytest.mark.slow
def test_the_workload_benchmark_serves_byte_identical_calls(tmp_path):
    out = tmp_path / "rows.json"
    argv = ["--procs", "4", "--steps", "4", "--workloads", "w0", "w6", "w7", "--tokens", "128"]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *argv, "--json", str(out)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    rows = {r["workload"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {"w0", "w6", "w7"}
    for r in rows.values():
        assert r["identical"] and r["calls"] == 8  # dispatch and combine per step
        assert r["served"] >= 1 and r["plan_ms"]  # a bucket planned in the background, then served
    assert "stale" in rows["w6"] and rows["w6"]["stale"] >= 0
    assert rows["w7"]["burst_calls"] == 2  # step 3 is a burst step: its dispatch and combine
    assert "w7" in proc.stdout and "burst calls served" in proc.stdout
