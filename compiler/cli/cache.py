"""``a2acc cache ls|show|clear|export``: inspect, clear or export the JIT plan cache (``$A2ACC_CACHE_DIR``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from a2acc.errors import InputError
from a2acc.model.units import format_bytes

TYPE_CHECKING = False  # the cache module (and numpy behind it) is imported when a subcommand runs
if TYPE_CHECKING:
    from a2acc.jit.cache import PlanCache


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("cache", help="inspect or clear the JIT plan cache")
    p.add_argument("--dir", default=None, help="cache directory (default $A2ACC_CACHE_DIR or ~/.cache/a2acc)")
    csub = p.add_subparsers(dest="cache_cmd", metavar="ACTION")
    ls = csub.add_parser("ls", help="list entries (all a2acc versions)")
    ls.set_defaults(func=_ls)
    show = csub.add_parser("show", help="print an entry's metadata and files")
    show.add_argument("key")
    show.set_defaults(func=_show)
    clear = csub.add_parser("clear", help="delete every entry")
    clear.set_defaults(func=_clear)
    exp = csub.add_parser(
        "export",
        help="write the cached plans as an MSCCL_ALGO_DIR (plus DIR.manifests/) for the next job",
        description="Every cached plan lowered for --backend is checked again and written to DIR; point "
        "MSCCL_ALGO_DIR at DIR before the next job creates its first communicator (A2ACC_EXECUTOR=msccl).",
    )
    exp.add_argument("directory")
    exp.add_argument("--backend", default="msccl-xml")
    exp.set_defaults(func=_export)


def _cache(args: argparse.Namespace) -> PlanCache:
    from a2acc.jit.cache import PlanCache, default_cache_dir

    where = Path(args.dir) if args.dir else default_cache_dir()
    if where.exists() and not where.is_dir():
        raise InputError("", "--dir", str(where), "a cache directory (this is a file)")
    return PlanCache(where)


def _ls(args: argparse.Namespace) -> int:
    c = _cache(args)
    rows = c.list_entries()
    print(f"cache: {c.root}  ({len(rows)} entries; this a2acc reads {c.dir.name if c.dir else '-'})")
    for key, size, ver in rows:
        print(f"  {ver:10s} {key}  {format_bytes(size)}")
    return 0


def _show(args: argparse.Namespace) -> int:
    c = _cache(args)
    e = c.get(args.key)
    if e is None:
        raise InputError(
            str(c.dir),
            "key",
            args.key,
            "no valid entry with this key for this a2acc version (a2acc cache ls)",
        )
    print(json.dumps(e.meta, indent=1, sort_keys=True))
    print(f"program    : {len(e.program_json)} B of plan JSON")
    for name, text in sorted(e.files.items()):
        print(f"file       : {name} ({len(text)} B)")
    if e.manifest:
        print(f"manifest   : {len(e.manifest)} B")
    return 0


def _clear(args: argparse.Namespace) -> int:
    n = _cache(args).clear()
    print(f"removed {n} files")
    return 0


def _export(args: argparse.Namespace) -> int:
    from a2acc.jit.export import export_cache

    rep = export_cache(_cache(args), args.directory, args.backend)
    print(
        f"exported {rep.plans} plan(s) to {args.directory} and their manifests to {args.directory}.manifests/"
    )
    for s in rep.skipped:
        print(f"  skipped {s}")
    print(
        f"use: MSCCL_ALGO_DIR={args.directory} A2ACC_EXECUTOR=msccl (set before the first communicator is created)"
    )
    return 0
