"""Program -> Program passes: each a module with one job and a ``run(program) -> Program`` function.

A pass never changes what a Program computes (the verifier's verdict and the output of every rank stay the
same); it changes how the Program is written down. The registry maps a pass name to its module, imported
lazily; ``a2acc plan --pass NAME`` and :func:`a2acc.pipeline.compile` run them by name. A new pass is a module
here plus one :class:`~a2acc.registry.Entry` line in :data:`PASSES`; the shared pass test
(``tests/ir/test_every_pass.py``) then checks that it preserves what every Program computes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from a2acc.registry import Entry, Registry

# the Program type only: the command line's parser lists the passes without importing the IR (numpy)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from a2acc.ir.program import Program

PassFn = Callable[["Program"], "Program"]

PASSES: Registry[PassFn] = Registry(
    "pass",
    "--pass",
    [
        Entry(
            "toposort",
            "a2acc.ir.passes.toposort",
            "renumber ops into a topological order (deps before users)",
            "run",
        ),
        Entry(
            "reduce-deps",
            "a2acc.ir.passes.reduce_deps",
            "drop dependencies implied by other dependencies",
            "run",
        ),
    ],
)


def get_pass(name: str) -> PassFn:
    return PASSES.get(name)


def run_passes(prog: Program, names: Sequence[str]) -> Program:
    for name in names:
        prog = get_pass(name)(prog)
    return prog
