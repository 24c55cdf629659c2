"""SIGINT / SIGTERM during a long command: one line, exit 130 / 143, and every output complete or untouched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from a2acc.cli import main
from a2acc.model.traffic import generate

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads signal masks from /proc"),
]

SHARED = Path(os.environ.get("A2ACC_SHARED", Path(__file__).resolve().parents[3] / "shared"))
FAST_LOGS = SHARED / "reference" / "peers" / "FAST" / "amd-result"


def _catches_sigterm(pid: int) -> bool:
    """True once the process installed its own SIGTERM handler (a2acc's main() has started)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(ln for ln in status.splitlines() if ln.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


def _interrupt(tmp_path: Path, argv: list[str], sig: int, after: float) -> tuple[int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "a2acc", *argv],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not _catches_sigterm(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, (
            "a2acc exited before it could be signalled"
        )
        time.sleep(0.02)
    time.sleep(after)  # into the work itself
    assert proc.poll() is None, "the command finished before the signal: give it more work"
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=60)
    return proc.returncode, err


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("sig")
    np.save(d / "m8.npy", generate("zipf", 64, 64 << 20, seed=1))
    np.save(d / "m2.npy", generate("zipf", 16, 16 << 20, seed=1))
    return d


def _previous(work: Path, name: str, argv: list[str]) -> bytes:
    """A complete output a2acc wrote earlier: the interrupted run must leave it as it was."""
    assert main(argv) == 0
    return (work / name).read_bytes()


CASES = {
    "plan": ["plan", "-t", "dgx-h100", "-n", "8", "-m", "m8.npy", "-a", "syccl", "-o", "p.json"],
    "compile": ["compile", "-t", "dgx-h100", "-n", "8", "-m", "m8.npy", "-a", "syccl", "-o", "algos"],
    "compare": [
        "compare",
        "-t",
        "dgx-h100",
        "-n",
        "8",
        "--traffic",
        "zipf",
        "--sizes",
        "64M:1G:x2",
        "-J",
        "c.json",
    ],
    "calibrate": [
        "calibrate",
        *map(str, sorted(FAST_LOGS.glob("3n_random_sz_*.txt"))),
        *["-t", "mi300x-100g", "-n", "3", "-o", "params.yaml"],
    ],
}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("cmd", list(CASES))
def test_signal_prints_one_line_and_keeps_outputs_whole(work, monkeypatch, cmd, sig):
    monkeypatch.chdir(work)
    before = sorted(p.name for p in work.iterdir())
    rc, err = _interrupt(work, CASES[cmd], sig, after=0.5)
    assert rc == 128 + sig, (rc, err)
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("a2acc compare: [")]
    assert lines == ["a2acc: interrupted"], err
    new = sorted(set(p.name for p in work.iterdir()) - set(before))
    assert not [x for x in new if x.startswith(".")], new  # no staging or temporary file left behind
    if new:  # on a starved machine the signal can land after the switch to the new outputs: they are whole
        _complete(work, cmd, new)


def _complete(work: Path, cmd: str, new: list[str]) -> None:
    """The outputs an interrupted ``cmd`` left are the complete ones an uninterrupted run writes."""
    import json

    from a2acc.analysis.model import load_model
    from a2acc.ir.serial import load_program

    if cmd == "plan":
        assert new == ["p.json"] and load_program(work / "p.json").ops
    elif cmd == "compile":
        assert new == ["algos", "algos.manifest.json"], new
        man = json.loads((work / "algos.manifest.json").read_text())
        assert [p.name for p in (work / "algos").iterdir()] == [man["file"]]
    elif cmd == "compare":
        assert new == ["c.json"] and json.loads((work / "c.json").read_text())["rows"]
    else:
        assert new == ["params.yaml"] and load_model(str(work / "params.yaml"))


def test_interrupted_plan_leaves_the_previous_plan_and_a_rerun_works(work, monkeypatch):
    monkeypatch.chdir(work)
    direct = ["plan", "-t", "dgx-h100", "-n", "8", "-m", "m8.npy", "-a", "direct", "-o", "q.json"]
    old = _previous(work, "q.json", direct)
    slow = [*direct[:-4], "-a", "syccl", "-o", "q.json"]
    rc, _err = _interrupt(work, slow, signal.SIGTERM, after=0.5)
    assert rc == 143 and (work / "q.json").read_bytes() == old
    assert main(direct) == 0 and (work / "q.json").read_bytes() == old  # deterministic, and still ours


def test_a_signal_discarded_where_it_landed_prints_no_traceback():
    """A signal that lands in a weakref callback (an import's module-lock callback, seen in a CI run) raises
    where Python discards the exception and hands it to ``sys.unraisablehook``, which prints an "Exception
    ignored" traceback: a2acc's hook keeps it quiet (the run still counts as interrupted). Other discarded
    exceptions still reach the hook that was there before."""
    import weakref

    from a2acc.cli import Interrupted, _interruptible

    class Thing:
        pass

    def discard(exc: BaseException) -> None:
        thing = Thing()
        ref = weakref.ref(thing, lambda _r: (_ for _ in ()).throw(exc))
        del thing
        assert ref() is None

    seen: list[object] = []
    previous = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        with _interruptible() as fired:
            discard(Interrupted(signal.SIGINT))
            fired.append(signal.SIGINT)
        assert seen == []
        with _interruptible():
            discard(ValueError("not a signal"))
        assert len(seen) == 1
    finally:
        sys.unraisablehook = previous


STARTUP = r"""
import os, signal, sys
sig, target, convert = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"

class Landing:
    # a signal that arrives while ``target`` is being imported (the command's start-up)
    def find_spec(self, name, path=None, target_=None):
        if name == target:
            sys.meta_path.remove(self)
            if convert:  # as Python's __set_name__ and PyCapsule_Import do: another exception on the way up
                try:
                    os.kill(os.getpid(), sig)
                    signal.sigtimedwait([], 0) if hasattr(signal, "sigtimedwait") else None
                    for _ in range(1000):
                        pass
                except BaseException as exc:
                    raise RuntimeError(f"Error calling __set_name__ ({exc!r})") from exc
            else:
                os.kill(os.getpid(), sig)
                for _ in range(1000):
                    pass
        return None

sys.meta_path.insert(0, Landing())
from a2acc.cli import main
sys.exit(main(sys.argv[4:]))
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize(
    ("target", "convert"),
    [("argparse", False), ("numpy", False), ("a2acc.pipeline", False), ("a2acc.planners.fast", True)],
)
def test_a_signal_during_the_start_up_imports_is_one_line(work, sig, target, convert):
    """A signal while the command's modules are imported (the parser's, then what the subcommand runs) gets
    the one line and exit code of a later signal, also when the import machinery turns the signal's exception
    into another one on its way up (``RuntimeError: Error calling __set_name__``, a failed
    ``PyCapsule_Import``); nothing is written. The handlers are in place before anything but the standard
    library's lightest modules is imported."""
    argv = ["compile", "-t", "dgx-h100", "-n", "2", "-m", str(work / "m2.npy"), "-a", "fast", "-o", "startup"]
    proc = subprocess.run(
        [sys.executable, "-c", STARTUP, str(int(sig)), target, "1" if convert else "0", *argv],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 128 + sig, (proc.returncode, proc.stderr)
    assert proc.stderr.strip().splitlines() == ["a2acc: interrupted"], proc.stderr
    assert not (work / "startup").exists() and not (work / "startup.manifest.json").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signals_at_every_moment_of_a_short_command_are_one_line(work, sig):
    """Signals sent at moments from right after a2acc's handlers are in place to the end of a short compile
    (its imports, planning, writing): each run prints the one line and exits 128 + the signal with its files
    untouched or - a signal after the switch to the new files - whole, or - a signal after the work was done -
    finishes normally with its files whole. Never a directory without its manifest or the reverse, never a
    temporary file left, never a death by signal."""
    argv = ["compile", "-t", "dgx-h100", "-n", "2", "-m", "m2.npy", "-a", "fast"]
    for k, after in enumerate((0.0, 0.01, 0.03, 0.06, 0.1, 0.2, 0.4)):
        out = f"early{k}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "a2acc", *argv, "-o", out],
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while not _catches_sigterm(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(after)
        if proc.poll() is None:
            proc.send_signal(sig)
        _out, err = proc.communicate(timeout=60)
        if proc.returncode == 0:  # the signal came after the work: the outputs are whole
            assert (work / out).is_dir() and (work / f"{out}.manifest.json").exists(), err
            continue
        assert proc.returncode == 128 + sig, (after, proc.returncode, err)
        assert err.strip().splitlines() == ["a2acc: interrupted"], (after, err)
        assert not any(p.name.startswith(".") for p in work.iterdir()), (after, sorted(work.iterdir()))
        written = ((work / out).exists(), (work / f"{out}.manifest.json").exists())
        assert written in ((False, False), (True, True)), (after, written)
        if all(written):
            for f in sorted((work / out).iterdir()):
                assert main(["verify", "-q", "--manifest", str(work / f"{out}.manifest.json"), str(f)]) == 0
