"""``a2acc cache export DIR``: the JIT's cached buckets as ready-to-load executor files, for the next job.

The MSCCL executors read ``MSCCL_ALGO_DIR`` once, when the first communicator is created, so buckets compiled
during a job can only serve the *next* one. Export writes every valid cache entry of this a2acc version that
carries lowered files: each is read back and checked by its target (strict reader + interpreter against its
manifest) before anything is written; then the files go into ``DIR`` (for msccl-xml: XML only, as the
executor requires) and each manifest into ``DIR.manifests/<file>.manifest.json`` beside it. Entries of the
``none`` backend (p2p and reference executors) have no files and are counted as skipped. Only cache entries
are read (nothing else in the cache directory is read or removed), and every file name is checked to be one
plain component before anything is written, so nothing lands outside ``DIR``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from a2acc.backends import get_target
from a2acc.backends.target import Lowered
from a2acc.errors import InputError, VerificationError
from a2acc.fileio import check_parent
from a2acc.ir.layout import export_manifest_path, manifest_file, manifest_from_json, owned_files
from a2acc.jit.cache import PlanCache, check_file_name
from a2acc.options import parse_options


@dataclass
class ExportReport:
    plans: int = 0
    written: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "key: reason"


def export_cache(cache: PlanCache, out_dir: str | Path, backend: str = "msccl-xml") -> ExportReport:
    out = Path(out_dir)
    man_dir = out.parent / f"{out.name}.manifests"
    target = get_target(backend)
    rep = ExportReport()
    todo: list[tuple[str, Lowered]] = []
    for key, _size, ver in cache.list_entries():
        if cache.dir is None or ver != cache.dir.name:
            continue
        entry = cache.get(key)
        if entry is None:
            rep.skipped.append(f"{key}: unreadable or corrupt")
            continue
        if entry.meta.get("backend") != backend or not entry.files or entry.manifest is None:
            rep.skipped.append(f"{key}: backend {entry.meta.get('backend', '?')}, no {backend} files")
            continue
        man = manifest_from_json(entry.manifest, f"cache entry {key} manifest")
        opts: object = parse_options(target.Options, None)
        if backend == "msccl-xml" and len(entry.files) != 1:
            rep.skipped.append(f"{key}: {len(entry.files)} files where an msccl-xml entry has one XML")
            continue
        if backend == "msccl-xml":  # the dialect is in the file name, NN-name-DIALECT.xml
            (fname,) = entry.files
            opts = parse_options(target.Options, {"dialect": fname.rsplit("-", 1)[-1].removesuffix(".xml")})
        for name in entry.files:  # checked before anything is written (the cache refuses such entries too)
            why = check_file_name(name)
            if why is not None or (out / name).parent != out:
                raise InputError(
                    f"cache entry {key}", "files", name, f"a plain file name inside {out} ({why})"
                )
        lowered = Lowered(backend, dict(entry.files), man, "", None, opts)
        chk = target.check(lowered)
        if not chk.ok:
            raise VerificationError(f"cache entry {key}", list(chk.errors))
        todo.append((key, lowered))
    if not todo:
        raise InputError(
            str(cache.dir),
            "entries",
            len(rep.skipped),
            f"no cached {backend} plans to export (the JIT lowers them with A2ACC_BACKEND={backend})",
        )
    _check_destinations(out, man_dir, [name for _key, lowered in todo for name in lowered.files])
    man_dir.mkdir(exist_ok=True)
    for _key, lowered in todo:
        (fname,) = list(lowered.files)[:1]
        rep.written += target.emit(lowered, out, manifest_path=man_dir / f"{fname}.manifest.json")
        rep.plans += 1
    return rep


def _check_destinations(out: Path, man_dir: Path, names: list[str]) -> None:
    """Before anything is written (a refusal half-way would leave part of an export): ``DIRECTORY``'s parent
    exists (a typo must not create a tree), it and its ``.manifests`` directory are directories or new, and
    every file and manifest this export writes is new or one a2acc wrote (named by its manifest); the
    directory holds no file a2acc did not write (the executor would load it too)."""
    check_parent("DIRECTORY", str(out))
    for d in (out, man_dir):
        if d.exists() and (d.is_symlink() or not d.is_dir()):
            raise InputError(
                "", "DIRECTORY", str(d), "a directory or a new path: this exists and is not a directory"
            )
    owned = owned_files(out)
    foreign = sorted(p.name for p in out.iterdir() if p.name not in owned) if out.is_dir() else []
    if foreign:
        raise InputError(
            "",
            "DIRECTORY",
            str(out),
            f"a new or empty directory, or one holding only a2acc's files: it holds {len(foreign)} other "
            f"file(s) ({', '.join(foreign[:3])}), which the executor would load too",
        )
    for name in names:
        man = export_manifest_path(out, name)
        if man.exists() and manifest_file(man) is None:
            raise InputError(
                "", "DIRECTORY", str(man), "a path a2acc wrote or a new one: this is not an a2acc manifest"
            )
