"""CPU time of the command line: its start-up, and what a command costs beyond it.

Run: ``.venv/bin/python benchmarks/cli_time.py [--runs 7] [--servers 4] [--algorithms fast,auto]``

- ``a2acc --version`` (and ``a2acc --help``) in a fresh process: the interpreter's start and the parser, built
  from the registries' lines and a2acc.defaults without numpy or a planner; with byte-code (an installed
  package's case: a cache of the run's own, ``PYTHONPYCACHEPREFIX``) and without (every a2acc module compiled
  at each start, as with ``PYTHONDONTWRITEBYTECODE=1`` and an editable install);
- ``a2acc compile -t dgx-h100 -n N -m M -a ALG -o DIR`` (RCCL XML, the padding ladder, the written file checked)
  beyond start-up: in one process whose imports are done (a first compile of another matrix), the CPU of the
  command, run as the console script runs it (``main()`` reading ``sys.argv``), on a new matrix (nothing of it remembered: every plan and simulation is new); and in a fresh process
  from the interpreter's start, for comparison.

Figures are process CPU seconds (user + system; ``os.times`` for the children), minimum and median of
``--runs``; give the load average (printed) with them.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from a2acc.model.traffic import generate


def _child_cpu(argv: list[str], cwd: str, env: dict[str, str] | None = None) -> float:
    t0 = os.times()
    subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    t1 = os.times()
    return (t1.children_user - t0.children_user) + (t1.children_system - t0.children_system)


def _console(cli: Callable[[], int], argv: list[str]) -> int:
    """The command line as the console script runs it (``main()`` reading ``sys.argv``: the process's own
    command line, so what a2acc does only there, such as settling the heap, is timed too); the signal handlers
    it leaves ignored for the interpreter's exit are put back."""
    saved = (sys.argv, {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)})
    sys.argv = ["a2acc", *argv]
    try:
        return cli()
    finally:
        gc.unfreeze()  # (the command froze this process's heap; the next run starts from a live one again)
        sys.argv = saved[0]
        for sig, handler in saved[1].items():
            signal.signal(sig, handler)


def _fmt(xs: list[float]) -> str:
    return f"min {min(xs):.3f} s, median {statistics.median(xs):.3f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--servers", type=int, default=4)
    ap.add_argument("--algorithms", default="fast,auto")
    args = ap.parse_args()
    from a2acc.cli import main as cli

    exe = str(Path(sys.executable).with_name("a2acc"))
    n = 8 * args.servers
    print(
        f"# load average {os.getloadavg()[0]:.2f}; {args.runs} runs; dgx-h100 {args.servers}x8, Zipf(0.8) 256 MiB/GPU"
    )
    with tempfile.TemporaryDirectory() as d:
        # with byte-code (what an installed package has: its modules compiled once, kept in a cache of this
        # run's own) and without it (every a2acc module compiled from source at each start: how this machine's
        # environment runs, PYTHONDONTWRITEBYTECODE=1, with an editable install)
        cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = str(Path(d) / "pycache")
        uncached = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        for flag in ("--version", "--help"):
            _child_cpu([exe, flag], d, cached)  # the byte-code written
            for label, env in (("byte-code", cached), ("no byte-code", uncached)):
                xs = [_child_cpu([exe, flag], d, env) for _ in range(args.runs)]
                print(f"a2acc {flag:9s} (fresh process, {label:12s}): {_fmt(xs)}")
        for r in range(args.runs + 1):
            np.save(Path(d) / f"m{r}.npy", generate("zipf", n, 256 << 20, r + 1, skew=0.8))
        for alg in args.algorithms.split(","):
            base = ["compile", "-t", "dgx-h100", "-n", str(args.servers), "-a", alg, "--opt", "dialect=rccl"]
            warm = [*base, "-m", str(Path(d) / f"m{args.runs}.npy"), "-o", str(Path(d) / f"{alg}-warm")]
            with open(os.devnull, "w") as null:
                sys.stdout, old = null, sys.stdout
                try:
                    _console(cli, warm)  # imports done
                    inproc = []
                    for r in range(args.runs):
                        out = str(Path(d) / f"{alg}-{r}")
                        c0 = time.process_time()
                        rc = _console(cli, [*base, "-m", str(Path(d) / f"m{r}.npy"), "-o", out])
                        inproc.append(time.process_time() - c0)
                        assert rc == 0
                finally:
                    sys.stdout = old
            fresh = [
                _child_cpu([exe, *base, "-m", f"m{r}.npy", "-o", f"{alg}-fresh-{r}"], d)
                for r in range(args.runs)
            ]
            print(f"a2acc compile -a {alg:5s} beyond start-up : {_fmt(inproc)}")
            print(f"a2acc compile -a {alg:5s} fresh process    : {_fmt(fresh)}")


if __name__ == "__main__":
    main()
