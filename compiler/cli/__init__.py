"""The ``a2acc`` command line: subcommands in the style of msccl-tools/TACCL (argparse, one module each).

Exit codes: 0 success; 1 a plan or file failed verification; 2 bad input (file, field, value named);
130 / 143 interrupted by SIGINT / SIGTERM (one line, ``a2acc: interrupted``; every output is either complete
or untouched, because every file is written to a temporary sibling and renamed into place).

Start-up is cheap and covered: this module imports only the standard library's lightest modules, :func:`main`
takes SIGINT and SIGTERM over before anything else, and the parser is built from registry lines and
:mod:`a2acc.defaults` (no numpy, no planner); a subcommand imports what it runs when it runs. So a signal during
the imports gets the same one line and exit code as a later one (only the interpreter's own start and the
import of this module, some 20-40 ms together, come before :func:`main` takes them over).
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress

from a2acc import __version__

TYPE_CHECKING = False  # argparse is imported when the parser is built (inside the signal handlers)
if TYPE_CHECKING:
    import argparse
    from types import FrameType

    from a2acc.errors import VerificationError

_EPILOG = """\
examples:
  a2acc topo show dgx-h100 --servers 4
  a2acc traffic gen zipf --topology dgx-h100 --servers 4 --size 256M --seed 1 -o m.npy
  a2acc plan --topology dgx-h100 --servers 4 --traffic m.npy --algorithm direct -o plan.json
  a2acc verify plan.json
  a2acc report plan.json

sizes accept K/M/G suffixes (1024-based, like nccl-tests); bandwidths are GB/s with 1 GB = 1e9 B.
"""


def build_parser() -> argparse.ArgumentParser:
    import argparse

    from a2acc.cli import plan as plan_cmd
    from a2acc.cli import report as report_cmd
    from a2acc.cli import topo as topo_cmd
    from a2acc.cli import traffic as traffic_cmd
    from a2acc.cli import verify as verify_cmd

    parser = argparse.ArgumentParser(
        prog="a2acc",
        description="a2acc: all-to-all schedule compiler (plan, verify, simulate, lower to MSCCL XML).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"a2acc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in (topo_cmd, traffic_cmd, plan_cmd, verify_cmd, report_cmd):
        mod.register(sub)
    _register_optional(sub)
    return parser


def _register_optional(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Subcommands added by later layers (bounds, simulate, compare, compile, bucket, cache)."""
    import importlib

    for name in ("bounds", "simulate", "compare", "compile", "bucket", "cache", "calibrate"):
        try:
            mod = importlib.import_module(f"a2acc.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"a2acc.cli.{name}":
                raise
            continue
        mod.register(sub)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: unwinds like KeyboardInterrupt (every ``finally`` and temporary-file cleanup
    runs), then :func:`main` prints one line and exits 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _interruptible(*, entry: bool = False) -> Iterator[list[int]]:
    """SIGINT and SIGTERM raise :class:`Interrupted` once; a second signal while the first unwinds is ignored,
    so cleanup (removing a temporary file) is never cut short. Handlers are restored on exit; off the main
    thread (where Python cannot install handlers) signals keep their defaults. Yields the signals that fired.

    Some places drop the handler's exception instead of unwinding: a finaliser or a weakref callback (Python
    hands the exception to ``sys.unraisablehook``), and C code that clears it (CPython 3.11's ``compile()``,
    which an import of a module with no cached byte code runs, drops about two in three). The work would then
    run on to its end (a 50 s calibration, in a CI run) before the interrupted exit. So the exception is
    watched: freed while the work is still running means dropped, and it is raised again. A short thread
    calls :func:`_thread.interrupt_main` (tripped from the main thread, the handler would run at once, where
    the exception is being dropped), and the handler runs once more at the main thread's next check.

    ``entry``: this is the process's own command line (the console script, ``python -m a2acc``), which exits
    right after: the signals are then ignored from here on instead of restored, so one that arrives after the
    work, while the interpreter shuts down, cannot kill the process by signal with no message and an exit
    status that says nothing of the files it already wrote whole."""
    fired: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield fired
        return
    again: list[int] = []  # a dropped Interrupted, to raise once more
    watched: list[weakref.ref[Interrupted]] = []
    running = [True]
    tripping = _thread.allocate_lock()

    def trip(signum: int) -> None:  # in a thread of its own
        with tripping:
            if running:
                _thread.interrupt_main(signal.Signals(signum))

    def dropped(_ref: weakref.ref[Interrupted], signum: int) -> None:
        if running and not again:
            again.append(signum)
            _thread.start_new_thread(trip, (signum,))

    def handler(signum: int, _frame: FrameType | None) -> None:
        if not running:  # a trip that came as the work ended: the caller has the exception already
            return
        if again:
            signum = again.pop()
        elif fired:
            return
        else:
            fired.append(signum)
        exc = Interrupted(signum)
        watched.append(weakref.ref(exc, lambda ref: dropped(ref, signum)))
        try:
            raise exc
        finally:
            del exc  # else its traceback holds this frame, which holds it: dropped, it would never be freed

    hook = sys.unraisablehook

    def discarded(unraisable: sys.UnraisableHookArgs) -> None:
        # Python would print the traceback of the exception it drops: the handler raises it again instead
        if not isinstance(unraisable.exc_value, Interrupted):
            hook(unraisable)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    sys.unraisablehook = discarded
    try:
        yield fired
    finally:
        running.clear()  # the exception reached the caller (or none was raised): it is theirs from here
        with tripping:  # a trip under way lands now, on this handler, which lets it pass
            _let_signals_run()
        sys.unraisablehook = hook
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_IGN if entry else old)


def _let_signals_run() -> None:
    """Nothing: calling a Python function runs the signal handlers that are due."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (the process's own when None) and return its exit code."""
    fired: list[int] = []
    try:
        with _interruptible(entry=argv is None) as fired:
            parser = build_parser()
            args = parser.parse_args(argv)
            args.own_process = argv is None  # the process's own command line (cli.common.settle_heap)
            if not getattr(args, "func", None):
                parser.print_help()
                return 2
            rc = _dispatch(args, fired)
            if fired:  # the signal's exception was discarded where it landed: still an interrupted run
                raise Interrupted(fired[0])
            return rc
    except (Interrupted, KeyboardInterrupt) as exc:
        return _interrupted(exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)
    except BaseException:
        # the signal landed inside machinery that turned its exception into another one (an import that
        # reports ``RuntimeError: Error calling __set_name__`` or a failed ``PyCapsule_Import``): still one line
        if fired:
            return _interrupted(fired[0])
        raise


def _interrupted(signum: int) -> int:
    """The one line of an interrupted run, and its exit code (128 + the signal)."""
    _quietly_flush()
    print("a2acc: interrupted", file=sys.stderr, flush=True)
    return 128 + signum


def _quietly_flush() -> None:
    """Flush stdout before the last line (a closed pipe must not turn the message into a traceback)."""
    with suppress(OSError, ValueError):
        sys.stdout.flush()


def _dispatch(args: argparse.Namespace, fired: list[int]) -> int:
    from a2acc.errors import A2accError

    try:
        rc: int = args.func(args)
        return rc
    except BrokenPipeError:  # pragma: no cover - e.g. piping into head
        return 0
    except (A2accError, OSError, MemoryError) as exc:
        if fired:  # a signal's exception turned into an error on its way up: the run was interrupted
            raise Interrupted(fired[0]) from exc
        return _error(exc)


def _error(exc: BaseException) -> int:
    """One line (the first issues of a failed verification) for an error a subcommand raised; its exit code."""
    from a2acc.errors import VerificationError

    if isinstance(exc, VerificationError):
        print(f"a2acc: verification failed: {_summary(exc)}", file=sys.stderr)
        return 1
    if isinstance(exc, MemoryError):  # a request past this machine's memory (or its ulimit): no traceback
        print(
            "a2acc: error: out of memory: the request needs more memory than this process may use "
            "(fewer ranks, a coarser --unit or a smaller --size)",
            file=sys.stderr,
        )
    elif isinstance(exc, OSError):  # an unwritable -o path, a full disk, a missing directory
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"a2acc: error: {where}cannot read or write it ({exc.strerror or exc})", file=sys.stderr)
    else:  # InputError and every other A2accError: file, field, value and what is allowed
        print(f"a2acc: error: {exc}", file=sys.stderr)
    return 2


SHOWN_ISSUES = 10


def _summary(exc: VerificationError) -> str:
    """The first issues; when there are more, all of them go to a file whose name is printed."""
    issues = exc.issues
    head = str(exc).splitlines()[0]
    lines = [head, *(f"  - {i}" for i in issues[:SHOWN_ISSUES])]
    if len(issues) > SHOWN_ISSUES:
        import tempfile

        fd, path = tempfile.mkstemp(prefix="a2acc-verify-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("\n".join([head, *issues]) + "\n")
        lines.append(f"  ... and {len(issues) - SHOWN_ISSUES} more: all {len(issues)} in {path}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
