"""``a2acc verify FILE``: exit 0 only on a correct plan or lowered file; the format is detected by content."""

from __future__ import annotations

import argparse
from pathlib import Path

from a2acc.backends import TARGETS
from a2acc.cli.common import add_opt_args
from a2acc.errors import PlanFormatError, VerificationError
from a2acc.options import parse_options, split_pairs

HEAD_BYTES = 4096


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "verify",
        help="verify a plan JSON or a lowered file; exit 0 only if correct",
        description="Verify a plan (symbolic execution: postcondition, races, op order, uninitialised reads) or "
        "a lowered executor file with its backend's strict reader and interpreter. The format is recognised by "
        "content, not by the file name: a2acc plan JSON, or the file of any registered backend "
        f"({', '.join(TARGETS.names())}). "
        "Exit codes: 0 correct, 1 wrong, 2 unreadable or unsupported.",
        epilog="examples:\n  a2acc verify plan.json\n  a2acc verify algos/00-x-rccl.xml --manifest algos.manifest.json "
        "--opt dialect=rccl\n  a2acc verify mscclpp.json --opt compute_units=132   (an MSCCL++ plan's thread blocks "
        "must fit the GPU's SMs/CUs;\n    default: the limit its manifest records, else 108 on nvidia, 110 on amd)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file")
    p.add_argument(
        "--manifest", default=None, help="all-to-all-v manifest of a lowered file (checks its layout)"
    )
    add_opt_args(p)
    p.add_argument("--quiet", "-q", action="store_true")
    p.set_defaults(func=_run)


def _read(path: str) -> str:
    """The file's text, refused past the largest plan file read (no executor file a2acc checks is larger)."""
    from a2acc.ir.serial import read_plan_text

    try:
        return read_plan_text(path, "a file a2acc writes or checks")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanFormatError(path, "", path, f"cannot read the file ({exc.__class__.__name__})") from exc


def _run(args: argparse.Namespace) -> int:
    from a2acc.backends import detect
    from a2acc.backends.target import reads_manifest_of
    from a2acc.ir.layout import find_manifest, load_manifest, manifest_file
    from a2acc.ir.serial import is_plan_json, program_from_json
    from a2acc.ir.verify import verify_program

    text = _read(args.file)
    head = text[:HEAD_BYTES]
    if is_plan_json(head):
        if split_pairs(args.opt):  # they configure a backend's reader; a plan has none
            raise PlanFormatError(
                "", "--opt", " ".join(args.opt), "options of a lowered file's backend: a plan JSON takes none"
            )
        prog = program_from_json(text, args.file)
        rep = verify_program(prog)
        if not rep.ok:
            raise VerificationError(args.file, list(rep.errors))
        if not args.quiet:
            print(
                f"{args.file}: OK  ({prog.algorithm}, {rep.ops} ops, {prog.nranks} ranks, "
                f"{rep.chunks_moved} chunk moves of {prog.unit_bytes} B = "
                f"{rep.chunks_moved * prog.unit_bytes / 2**20:.1f} MiB for {int(prog.counts.sum())} chunks in the "
                f"layout (a relayed chunk moves once per hop), DAG depth {rep.depth})"
            )
        return 0
    target = detect(head)
    if target is None:
        raise PlanFormatError(
            args.file,
            "",
            head[:40],
            f"an a2acc plan JSON or a file of a backend that recognises its files ({', '.join(TARGETS.names())}), "
            "recognised by content",
        )
    man_path = Path(args.manifest) if args.manifest else find_manifest(Path(args.file))
    manifest = load_manifest(man_path) if man_path is not None else None
    if manifest is not None and not reads_manifest_of(target, manifest.target):
        writers = ", ".join((target.name, *getattr(target, "manifest_targets", ())))
        raise PlanFormatError(
            str(man_path),
            "target",
            manifest.target,
            f"a manifest of {writers} files: {args.file} is a {target.name} file (give the manifest a2acc wrote "
            "with it)",
        )
    # the options the file was lowered with (recorded in its manifest), then the user's --opt on top
    raw = {**dict(manifest.options if manifest is not None else ()), **dict(split_pairs(args.opt))}
    opts: object = parse_options(target.Options, raw, where="--opt")
    chk = target.check_text(text, args.file, manifest, opts)
    if not chk.ok:
        errors = list(chk.errors)
        if manifest is None and any("postcondition" in e or "never written" in e for e in errors):
            beside = Path(f"{args.file}.manifest.json")
            named = manifest_file(beside) if beside.is_file() else None
            errors.insert(
                0,
                f"the manifest beside the file ({beside.name}) describes {named}, not {Path(args.file).name} "
                "(a copy?): give it with --manifest to check against it"
                if named is not None
                else "no manifest found beside the file: an all-to-all-v layout needs --manifest M",
            )
        raise VerificationError(args.file, errors)
    if not args.quiet:
        used = f", manifest {man_path}" if man_path is not None and not args.manifest else ""
        print(f"{args.file}: OK  ({target.name}: {chk.summary}{used})")
        for note in chk.notes:
            print(f"  note: {note}")
    return 0
