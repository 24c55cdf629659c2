"""Start-up cost of the JIT hook: ``python -c pass`` with and without ``A2ACC_JIT=1`` (median of 15 runs each).

Run: ``.venv/bin/python benchmarks/jit_startup.py``. Target: the difference under 20 ms (the hook only arms a
lazy import hook; nothing heavy is imported until the job imports ``torch.distributed``).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time


def _time(env: dict[str, str], runs: int = 15) -> float:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("A2ACC_")}
    off = _time(base)
    on = _time({**base, "A2ACC_JIT": "1", "A2ACC_TOPOLOGY": "dgx-h100:4"})
    print(
        f"python -c pass: {off * 1e3:.1f} ms without A2ACC_JIT, {on * 1e3:.1f} ms with; difference {1e3 * (on - off):.1f} ms"
    )


if __name__ == "__main__":
    main()
