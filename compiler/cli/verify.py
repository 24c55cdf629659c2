"""``a2acc verify FILE``: exit 0 only on a correct plan (plan JSON; lowered files via their backend)."""

from __future__ import annotations

import argparse
import importlib

from a2acc.errors import VerificationError
from a2acc.ir import load_program
from a2acc.verify import verify_program


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "verify",
        help="verify a plan JSON or a lowered file; exit 0 only if correct",
        description="Verify a plan (symbolic execution: postcondition, races, cycles, uninitialised reads) or "
        "a lowered executor file (.xml: MSCCL XML via the msccl-xml backend's strict reader and interpreter).",
    )
    p.add_argument("file")
    p.add_argument("--manifest", default=None, help="all-to-all-v manifest for an MSCCL XML file")
    p.add_argument("--quiet", "-q", action="store_true")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.file.lower().endswith(".xml"):
        try:
            mod = importlib.import_module("a2acc.backends.msccl_xml.cli")
        except ModuleNotFoundError as exc:  # pragma: no cover - backend always shipped once issue 4 lands
            raise VerificationError(args.file, [f"no MSCCL XML reader available ({exc})"]) from exc
        rc: int = mod.verify_file(args.file, args.manifest, quiet=args.quiet)
        return rc
    prog = load_program(args.file)
    rep = verify_program(prog)
    if not rep.ok:
        raise VerificationError(args.file, list(rep.errors))
    if not args.quiet:
        print(
            f"{args.file}: OK  ({prog.algorithm}, {rep.ops} ops, {prog.nranks} ranks, "
            f"{rep.chunks_moved} chunks moved, DAG depth {rep.depth})"
        )
    return 0
