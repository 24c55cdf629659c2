"""What the subcommands share: the heap is settled only in the process's own command line."""

from __future__ import annotations

import gc
import signal
import sys

import numpy as np

from a2acc.cli import main
from a2acc.model.traffic import generate


def _compile_argv(tmp_path, out: str) -> list[str]:
    np.save(tmp_path / "m.npy", generate("zipf", 16, 1 << 22, 1))
    return ["compile", "-t", "dgx-h100", "-n", "2", "-m", str(tmp_path / "m.npy"), "-a", "fast", "-o", out]


def test_a_caller_with_arguments_keeps_its_collector(tmp_path, capsys):
    gc.unfreeze()
    assert main(_compile_argv(tmp_path, str(tmp_path / "a"))) == 0
    assert gc.get_freeze_count() == 0


def test_the_console_script_settles_the_heap_before_planning(tmp_path, monkeypatch, capsys):
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(sys, "argv", ["a2acc", *_compile_argv(tmp_path, str(tmp_path / "b"))])
    gc.unfreeze()
    try:
        assert main() == 0
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        for sig, handler in handlers.items():  # (the console script leaves them ignored for its exit)
            signal.signal(sig, handler)
    assert (tmp_path / "b").is_dir()
