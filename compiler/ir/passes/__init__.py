"""Program -> Program passes: each a module with one job and a ``run(program) -> Program`` function.

A pass never changes what a Program computes (the verifier's verdict and the output of every rank stay the
same); it changes how the Program is written down. The registry maps a pass name to its module, imported
lazily; ``a2acc plan --pass NAME`` and :func:`a2acc.pipeline.compile` run them by name. A new pass is a module
here plus one line in :data:`PASSES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

from a2acc.errors import InputError
from a2acc.ir.program import Program

PassFn = Callable[[Program], Program]

PASSES: dict[str, tuple[str, str]] = {
    "toposort": ("a2acc.ir.passes.toposort", "renumber ops into a topological order (deps before users)"),
    "reduce-deps": ("a2acc.ir.passes.reduce_deps", "drop dependencies implied by other dependencies"),
}


def get_pass(name: str) -> PassFn:
    entry = PASSES.get(name)
    if entry is None:
        raise InputError("", "--pass", name, f"known passes: {', '.join(sorted(PASSES))}")
    fn: PassFn = importlib.import_module(entry[0]).run
    return fn


def run_passes(prog: Program, names: Sequence[str]) -> Program:
    for name in names:
        prog = get_pass(name)(prog)
    return prog
