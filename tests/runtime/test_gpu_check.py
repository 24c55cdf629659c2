"""``benchmarks/gpu_check.py --device cpu``, the one-device check, as CI runs it: every check that needs no CUDA
passes (at least six), and the CUDA ones say they were skipped and why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


@pytest.mark.slow
def test_the_one_device_check_passes_on_the_cpu():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu"], capture_output=True, text=True, timeout=900
    )
    lines = [ln for ln in out.stdout.splitlines() if ": " in ln and not ln.startswith("device")]
    verdicts = {ln.split(": ", 1)[0]: ln.split(": ", 1)[1] for ln in lines}
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert not [k for k, v in verdicts.items() if v.startswith("FAIL")], verdicts
    assert sum(v.startswith("ok") for v in verdicts.values()) >= 6, verdicts
    assert verdicts["side_stream"].startswith("skipped (") and verdicts["graph"].startswith("skipped (")
