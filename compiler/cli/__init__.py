"""The ``a2acc`` command line: subcommands in the style of msccl-tools/TACCL (argparse, one module each).

Exit codes: 0 success; 1 a plan or file failed verification; 2 bad input (file, field, value named);
130 / 143 interrupted by SIGINT / SIGTERM (one line, ``a2acc: interrupted``; every output is either complete
or untouched, because every file is written to a temporary sibling and renamed into place).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from types import FrameType

from a2acc import __version__
from a2acc.errors import A2accError, InputError, VerificationError

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
def _interruptible() -> Iterator[list[int]]:
    """SIGINT and SIGTERM raise :class:`Interrupted` once; a second signal while the first unwinds is ignored,
    so cleanup (removing a temporary file) is never cut short. Handlers are restored on exit; off the main
    thread (where Python cannot install handlers) signals keep their defaults. Yields the signals that fired:
    an exception raised where Python discards it (a finaliser, a weakref callback) does not unwind, and the
    caller still owes the user the interrupted exit."""
    fired: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield fired
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        if fired:
            return
        fired.append(signum)
        raise Interrupted(signum)

    hook = sys.unraisablehook

    def discarded(unraisable: sys.UnraisableHookArgs) -> None:
        # the signal landed in a finaliser or a weakref callback (an import's module-lock callback, say), where
        # Python discards the exception and would print its traceback: main() still reports it, in one line
        if not isinstance(unraisable.exc_value, Interrupted):
            hook(unraisable)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    sys.unraisablehook = discarded
    try:
        yield fired
    finally:
        sys.unraisablehook = hook
        for sig, old in previous.items():
            signal.signal(sig, old)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        with _interruptible() as fired:
            parser = build_parser()
            args = parser.parse_args(argv)
            if not getattr(args, "func", None):
                parser.print_help()
                return 2
            rc = _dispatch(args)
            if fired:  # the signal's exception was discarded where it landed: still an interrupted run
                raise Interrupted(fired[0])
            return rc
    except (Interrupted, KeyboardInterrupt) as exc:
        _quietly_flush()
        print("a2acc: interrupted", file=sys.stderr, flush=True)
        return 128 + (exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)


def _quietly_flush() -> None:
    """Flush stdout before the last line (a closed pipe must not turn the message into a traceback)."""
    with suppress(OSError, ValueError):
        sys.stdout.flush()


def _dispatch(args: argparse.Namespace) -> int:
    try:
        rc: int = args.func(args)
        return rc
    except VerificationError as exc:
        print(f"a2acc: verification failed: {_summary(exc)}", file=sys.stderr)
        return 1
    except InputError as exc:
        print(f"a2acc: error: {exc}", file=sys.stderr)
        return 2
    except A2accError as exc:
        print(f"a2acc: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # pragma: no cover - e.g. piping into head
        return 0
    except OSError as exc:  # an unwritable -o path, a full disk, a missing directory
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"a2acc: error: {where}cannot read or write it ({exc.strerror or exc})", file=sys.stderr)
        return 2
    except MemoryError:  # a request past this machine's memory (or its ulimit): say so, no traceback
        print(
            "a2acc: error: out of memory: the request needs more memory than this process may use "
            "(fewer ranks, a coarser --unit or a smaller --size)",
            file=sys.stderr,
        )
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
