"""Shared by the bad-input tests (one module per command): run the CLI in-process and check the one clear line.

Every bad input gets one line naming file, field, value and what is allowed, exit code 2, no traceback, no file
left behind or deleted, and it fails fast (size limits are checked before anything is allocated)."""

from __future__ import annotations

import time

import numpy as np

from a2acc.cli import main
from a2acc.model.traffic import generate


def run(capsys, argv):
    t0 = time.perf_counter()
    rc = main(argv)
    dt = time.perf_counter() - t0
    err = capsys.readouterr().err
    return rc, err, dt


def one_clear_line(err: str) -> None:
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1, err
    assert lines[0].startswith("a2acc: error: ") and "Traceback" not in err
    assert "invalid" in lines[0] or "cannot" in lines[0] or "not" in lines[0], lines[0]


def zipf16(path) -> str:
    """A small Zipf matrix for dgx-h100 x2 (16 GPUs) at ``path``; returns the path as a string."""
    np.save(path, generate("zipf", 16, 1 << 20, 1))
    return str(path)
