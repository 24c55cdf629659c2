"""Every compiled core is built (the build machine and CI have a C compiler).

setuptools builds them as optional extensions, so a core that fails to compile only warns and a2acc falls back
to the Python references (same results, slower). This test is what makes such a failure loud."""

from __future__ import annotations

from a2acc.native import NAMES, built


def test_every_compiled_core_was_built():
    missing = [name for name, ok in built().items() if not ok]
    assert not missing, f"compiled cores not built: {missing} (see the pip log for the compiler error)"
    assert set(built()) == set(NAMES)
