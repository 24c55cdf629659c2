"""Plan cache: in memory (LRU), then on disk, content-addressed by bucket key and a2acc version.

An entry holds the Program (plan JSON), the lowered files (name -> text) and the manifest. On disk each entry is
one JSON file ``<dir>/v<version>/<key>.json`` wrapping the payload with its SHA-256:

    {"format": "a2acc.cache-entry", "a2acc_version": "...", "key": "...", "sha256": "...", "payload": {...}}

- Writes are atomic (temp file + ``os.replace``): several processes compiling the same key concurrently all
  write complete, identical files and the last rename wins, leaving one valid entry.
- A truncated or corrupt entry (unparsable, wrong checksum, wrong key) is reported with a warning and
  recompiled, and the recompiled entry replaces it at its own path (atomically: readers in other processes see
  the old file or the new one); reading never removes anything (``cache show`` and ``cache export`` read this
  way, and a user's copy of an entry under another name is such a file). A **torn** entry - what an interrupted
  write can leave at an entry's own path: nothing, part of the header (zero bytes after it ignored: unwritten
  blocks after a crash), or the header and JSON that stops before the newline every entry ends with - counts as
  a2acc's: a recompile replaces it, ``cache clear`` removes it. Entries of another a2acc version live in another
  directory and are never read.
- **Nothing that is not a cache entry is touched.** A file is an entry only when it is a regular file (not a
  symlink) named ``<key>.json`` in a version directory that is itself a real directory (not a symlink) and it
  starts with the entry header, or is torn; only such a file at a key's own path is ever overwritten (a
  recompile of that key). ``cache clear`` removes only *valid* entries (their key is their name, their version
  their directory's, their checksum holds) and torn ones. Anything else at an entry's path is left alone with a
  warning (the plan then lives in memory).
- **Entry file names are checked** before anything is written from them: one path component, a known suffix
  (:data:`FILE_SUFFIXES`); an entry with another name is refused (``cache export`` writes nothing outside its
  directory).
- Default directory: ``$A2ACC_CACHE_DIR``, else ``$XDG_CACHE_HOME/a2acc``, else ``~/.cache/a2acc``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from a2acc import __version__
from a2acc.errors import InputError, InternalError
from a2acc.fileio import atomic_write_text, loads_json

log = logging.getLogger("a2acc.jit.cache")
ENTRY_FORMAT = "a2acc.cache-entry"
#: the first bytes of every entry file :meth:`PlanCache.put` writes (``json.dumps`` of a dict whose first keys
#: are "format" and "a2acc_version")
ENTRY_HEAD = f'{{"format": "{ENTRY_FORMAT}", "a2acc_version": "'.encode()


def default_cache_dir() -> Path:
    env = os.environ.get("A2ACC_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "a2acc"


@dataclass(frozen=True)
class CacheEntry:
    key: str
    program_json: str
    files: dict[str, str] = field(default_factory=dict)
    manifest: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        return {
            "program": self.program_json,
            "files": dict(sorted(self.files.items())),
            "manifest": self.manifest,
            "meta": self.meta,
        }


KEY_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
VERSION_DIR_RE = re.compile(r"^v[0-9]+(\.[0-9A-Za-z+-]+)*$")
FILE_SUFFIXES = (".xml", ".json", ".py")  # what the targets write (MSCCL XML, MSCCL++ JSON plan and DSL)
FILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,200}$")


def check_file_name(name: object) -> str | None:
    """Why ``name`` cannot be a lowered file's name in an entry (None: it can): one path component of safe
    characters with a known suffix."""
    if not isinstance(name, str) or not FILE_NAME_RE.match(name) or ".." in name:
        return f"{name!r} is not a plain file name"
    if not name.endswith(FILE_SUFFIXES):
        return f"{name!r} does not end in {', '.join(FILE_SUFFIXES)}"
    return None


def check_key(key: str) -> str:
    """A cache key names one file inside the cache: letters, digits, '_' and '-' only (no path), checked before
    any file-system access."""
    if not isinstance(key, str) or not KEY_RE.match(key):
        raise InputError(
            "", "key", key, "a cache key is 1-128 letters, digits, '_' or '-' (see a2acc cache ls)"
        )
    return key


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _entry_named(path: Path) -> bool:
    """A regular file (no symlink) named as a2acc names entries: ``v<version>/<key>.json`` in a real version
    directory."""
    if path.is_symlink() or not (path.is_file() and path.suffix == ".json" and KEY_RE.match(path.stem)):
        return False
    return bool(VERSION_DIR_RE.match(path.parent.name)) and _real_dir(path.parent)


def _is_entry_file(path: Path) -> bool:
    """A file a2acc wrote into its cache: entry-named (:func:`_entry_named`) and its JSON header names the entry
    format."""
    if not _entry_named(path):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(len(ENTRY_HEAD))
    except OSError:
        return False
    return head == ENTRY_HEAD  # the exact first bytes put() writes, not the words anywhere in a file


#: the most bytes read of a file that may be a torn entry's zero-filled blocks
_TORN_SCAN = 64 << 20


def _torn(path: Path) -> bool:
    """An entry-named file holding what an interrupted write of an entry leaves: nothing or part of the header,
    then at most zero bytes (blocks a crash left unwritten); or the whole header, then JSON that stops short of
    the newline every entry ends with. No other file has these bytes at an entry's own path."""
    if not _entry_named(path):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(len(ENTRY_HEAD))
            if head == ENTRY_HEAD:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) == b"\n":
                    return False
                fh.seek(0)
                try:
                    loads_json(fh.read().decode("utf-8"))
                except (ValueError, UnicodeDecodeError):
                    return True  # cut short (a complete JSON without its newline is someone's edit)
                return False
            if not ENTRY_HEAD.startswith(head.rstrip(b"\0")) or path.stat().st_size > _TORN_SCAN:
                return False
            return not fh.read().strip(b"\0")
    except OSError:
        return False


def _entry_doc(path: Path) -> dict[str, Any]:
    """The entry document at ``path`` when it is one a2acc wrote there: the entry format, its key the file name,
    its version the directory's, its payload matching its checksum; else ``ValueError`` (or the read's
    ``OSError`` / ``UnicodeDecodeError``) saying why."""
    doc = loads_json(path.read_text(encoding="utf-8"))
    ok = (
        isinstance(doc, dict)
        and doc.get("format") == ENTRY_FORMAT
        and f"v{doc.get('a2acc_version')}" == path.parent.name
        and doc.get("key") == path.stem
        and isinstance(doc.get("payload"), dict)
        and _digest(doc["payload"]) == doc.get("sha256")
    )
    if not ok:
        raise ValueError("format, version, key or checksum mismatch")
    return doc


def _payload_types(entry: CacheEntry) -> list[str]:
    """What in an entry's payload has a type a2acc never writes (a hand-made entry with a valid checksum)."""
    bad = []
    if not isinstance(entry.program_json, str):
        bad.append("its program is not a JSON text")
    if any(not isinstance(text, str) for text in entry.files.values()):
        bad.append("a file's content is not text")
    if entry.manifest is not None and not isinstance(entry.manifest, str):
        bad.append("its manifest is not a JSON text")
    return bad


def _valid_entry(path: Path) -> bool:
    """An entry a2acc can prove it wrote (:func:`_is_entry_file` and :func:`_entry_doc`). Only these are ever
    removed (a user's copy of an entry under another name, or a hand-edited one, is left alone)."""
    if not _is_entry_file(path):
        return False
    try:
        _entry_doc(path)
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return True


def _digest(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class PlanCache:
    """Two-level cache; ``directory=None`` keeps it in memory only. Safe to use from two threads at once (the
    JIT's calling thread and its compile thread): the memory level is locked, disk entries are written
    atomically and read whole."""

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, capacity: int = 64, version: str = __version__
    ):
        self.root = Path(directory) if directory is not None else None
        self.version = version
        self.capacity = capacity
        self._mem: OrderedDict[str, CacheEntry] = OrderedDict()
        self._lock = threading.Lock()
        self.stats = {"memory": 0, "disk": 0, "compiled": 0, "corrupt": 0}
        self._warned: set[str] = set()

    @property
    def dir(self) -> Path | None:
        return None if self.root is None else self.root / f"v{self.version}"

    def _path(self, key: str) -> Path | None:
        check_key(key)
        d = self.dir
        return None if d is None else d / f"{key}.json"

    def _remember(self, entry: CacheEntry) -> None:
        with self._lock:
            self._mem[entry.key] = entry
            self._mem.move_to_end(entry.key)
            while len(self._mem) > self.capacity:
                self._mem.popitem(last=False)

    def _in_memory(self, key: str) -> CacheEntry | None:
        with self._lock:
            hit = self._mem.get(key)
            if hit is not None:
                self._mem.move_to_end(key)
                self.stats["memory"] += 1
            return hit

    def get(self, key: str) -> CacheEntry | None:
        hit = self._in_memory(key)
        if hit is not None:
            return hit
        entry = self._read_disk(key)
        if entry is not None:
            self.stats["disk"] += 1
            self._remember(entry)
        return entry

    def _usable(self, path: Path) -> bool:
        """The entry path may be read, replaced or removed: its version directory is a real directory inside
        the cache (not a symlink to elsewhere) and nothing but an a2acc entry (or a torn one) sits at the path."""
        d = path.parent
        if d.is_symlink() or (d.exists() and not d.is_dir()):
            self._warn(d, "is not a directory a2acc made (a symlink or a file): the cache is kept in memory")
            return False
        if (path.exists() or path.is_symlink()) and not (_is_entry_file(path) or _torn(path)):
            self._warn(
                path, "is not an a2acc cache entry: a2acc leaves it alone and keeps the plan in memory"
            )
            return False
        return True

    def _warn(self, path: Path, what: str) -> None:
        if str(path) not in self._warned:
            self._warned.add(str(path))
            log.warning("a2acc cache: %s %s", path, what)

    def _read_disk(self, key: str) -> CacheEntry | None:
        path = self._path(key)
        if path is None or not (path.exists() or path.is_symlink()) or not self._usable(path):
            return None
        try:
            p = _entry_doc(path)[
                "payload"
            ]  # the path is v<version>/<key>.json: its name and directory checked
            entry = CacheEntry(
                key, p["program"], dict(p.get("files") or {}), p.get("manifest"), dict(p.get("meta") or {})
            )
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            self.stats["corrupt"] += 1
            # never removed here (``cache show`` and ``export`` read through this): a user's copy of an entry under
            # another name fails these checks too. A recompile puts a fresh entry over it at its own key path
            what = (
                "is a torn cache entry (an interrupted write)"
                if _torn(path)
                else f"is not a valid cache entry ({exc})"
            )
            self._warn(path, f"{what}: ignored; the plan is recompiled and replaces it")
            return None
        bad = [why for name in entry.files if (why := check_file_name(name)) is not None]
        bad += _payload_types(entry)
        if bad:  # a checksum-valid entry that a2acc would never have written: refused
            self.stats["corrupt"] += 1
            self._warn(path, f"holds what a2acc never writes ({bad[0]}): refused; a recompile replaces it")
            return None
        return entry

    def put(self, entry: CacheEntry) -> None:
        path = self._path(entry.key)
        bad = [why for name in entry.files if (why := check_file_name(name)) is not None]
        if bad:
            raise InternalError(f"a cache entry names plain files only ({bad[0]})")
        self._remember(entry)
        if path is None or not self._usable(path):
            return
        payload = entry.payload()
        doc = {  # "format" first: clear() recognises a2acc's entries by this header
            "format": ENTRY_FORMAT,
            "a2acc_version": self.version,
            "key": entry.key,
            "sha256": _digest(payload),
            "payload": payload,
        }
        try:
            atomic_write_text(path, json.dumps(doc) + "\n")
        except OSError as exc:  # a read-only or full disk must not break the job: memory still serves
            log.warning("a2acc cache: cannot write %s (%s); keeping the entry in memory only", path, exc)

    def get_or_compile(
        self, key: str, compile_fn: Callable[[], CacheEntry], *, store: bool = True
    ) -> tuple[CacheEntry, str]:
        """Entry for ``key`` and where it came from: ``memory``, ``disk`` or ``compiled``. ``store=False``: a
        compiled entry is kept in memory only, and the caller writes it with :meth:`put` later (the JIT's
        calling thread leaves the disk write, an fsync, to its compile thread)."""
        hit = self._in_memory(key)
        if hit is not None:
            return hit, "memory"
        entry = self._read_disk(key)
        if entry is not None:
            self.stats["disk"] += 1
            self._remember(entry)
            return entry, "disk"
        entry = compile_fn()
        self.stats["compiled"] += 1
        if store:
            self.put(entry)
        else:
            self._remember(entry)
        return entry, "compiled"

    def _version_dirs(self) -> list[Path]:
        """Real version directories in the cache (a symlink named like one is not followed)."""
        if self.root is None or not self.root.is_dir():
            return []
        return [d for d in sorted(self.root.glob("v*")) if VERSION_DIR_RE.match(d.name) and _real_dir(d)]

    def list_entries(self) -> list[tuple[str, int, str]]:
        """(key, size in bytes, version dir) for every entry on disk, all versions (entries only: regular
        ``<key>.json`` files with the entry header)."""
        out: list[tuple[str, int, str]] = []
        for vdir in self._version_dirs():
            for f in sorted(vdir.glob("*.json")):
                if _is_entry_file(f):
                    out.append((f.stem, f.stat().st_size, vdir.name))
        return out

    def clear(self) -> int:
        """Remove every cache entry a2acc can prove it wrote (all versions: :func:`_valid_entry`) and every torn
        one (:func:`_torn`); nothing else in the directory is touched, and no symlink is followed."""
        with self._lock:
            self._mem.clear()
        n = 0
        for vdir in self._version_dirs():
            for f in vdir.glob("*.json"):
                if _valid_entry(f) or _torn(f):
                    with contextlib.suppress(OSError):
                        f.unlink()
                        n += 1
        return n
