"""The ``a2acc`` command line: subcommands in the style of msccl-tools/TACCL (argparse, one module each).

Exit codes: 0 success; 1 a plan or file failed verification; 2 bad input (file, field, value named).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
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
