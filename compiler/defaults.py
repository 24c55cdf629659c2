"""Defaults shared by the command line, the facade and the JIT (one place, cheap to import)."""

from __future__ import annotations

#: the planner of ``plan``, ``compile``, the facade and the JIT when none is named
DEFAULT_ALGORITHM = "fast"
