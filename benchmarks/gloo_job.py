"""A job of local Gloo processes for the JIT benchmarks (``jit_workloads.py``, ``jit_hostcost.py``,
``jit_megatron.py``): the two-server test topology, the environment every worker starts with, and the start of
one process per rank with its results read back.

Each worker is a script (its source text) that takes ``RANK WORLD PORT OUT`` and then its own arguments,
initialises Gloo over ``tcp://127.0.0.1:PORT`` and writes its results as JSON to ``OUT``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

#: two servers of two GPUs (FAST's inter-server balancing and relays exercised on four local processes)
TWO_BY_TWO = """version: 1
name: 2x2
servers: 2
gpus_per_server: 2
intra: {fabric: switch, bandwidth: 150, latency: 0.7}
inter: {nics_per_server: 2, bandwidth: 25, latency: 2.0}
"""


def topology(spec: str, tmp: str) -> str:
    """``A2ACC_TOPOLOGY`` for ``spec``: a preset spec as given, ``2x2`` as a file written in ``tmp``."""
    if spec != "2x2":
        return spec
    path = os.path.join(tmp, "2x2.yaml")
    Path(path).write_text(TWO_BY_TWO)
    return path


def environment(**extra: str) -> dict[str, str]:
    """This process's environment without its ``A2ACC_*`` settings, with the JIT on, one OpenMP thread per
    process, warnings off, this folder importable (``moe_workloads``), then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2ACC_")}
    here = str(Path(__file__).resolve().parent)
    env.update(
        A2ACC_JIT="1",
        OMP_NUM_THREADS="1",
        PYTHONWARNINGS="ignore",
        PYTHONPATH=os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")])),
    )
    env.update(extra)
    return env


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(worker: str, world: int, env: dict[str, str], args: list[str], tmp: str) -> list[Any]:
    """Run ``worker`` on ``world`` processes (each ``RANK WORLD PORT OUT *args``) and return each rank's
    results, in rank order; a worker that fails ends the benchmark with its exit code."""
    script = os.path.join(tmp, "worker.py")
    Path(script).write_text(worker)
    port = str(_port())
    outs = [os.path.join(tmp, f"r{world}-{r}.json") for r in range(world)]
    procs = [
        subprocess.Popen([sys.executable, script, str(r), str(world), port, outs[r], *args], env=env)
        for r in range(world)
    ]
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"a worker of the {world}-process run failed (exit {p.returncode})")
    return [json.loads(Path(o).read_text()) for o in outs]
