"""Plan cache: in memory (LRU), then on disk, content-addressed by bucket key and a2acc version.

An entry holds the Program (plan JSON), the lowered files (name -> text) and the manifest. On disk each entry is
one JSON file ``<dir>/v<version>/<key>.json`` wrapping the payload with its SHA-256:

    {"format": "a2acc.cache-entry", "a2acc_version": "...", "key": "...", "sha256": "...", "payload": {...}}

- Writes are atomic (temp file + ``os.replace``): several processes compiling the same key concurrently all
  write complete, identical files and the last rename wins, leaving one valid entry.
- A truncated or corrupt entry (unparsable, wrong checksum, wrong key) is reported with a warning, removed and
  recompiled. Entries of another a2acc version live in another directory and are never read.
- Default directory: ``$A2ACC_CACHE_DIR``, else ``$XDG_CACHE_HOME/a2acc``, else ``~/.cache/a2acc``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from a2acc import __version__
from a2acc.errors import InputError
from a2acc.fileio import atomic_write_text, loads_json

log = logging.getLogger("a2acc.jit.cache")
ENTRY_FORMAT = "a2acc.cache-entry"


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


def check_key(key: str) -> str:
    """A cache key names one file inside the cache: letters, digits, '_' and '-' only (no path), checked before
    any file-system access."""
    if not isinstance(key, str) or not KEY_RE.match(key):
        raise InputError(
            "", "key", key, "a cache key is 1-128 letters, digits, '_' or '-' (see a2acc cache ls)"
        )
    return key


def _is_entry_file(path: Path) -> bool:
    """A file a2acc wrote into its cache: ``v<version>/<key>.json`` whose JSON header names the entry format."""
    if not (path.is_file() and path.suffix == ".json" and KEY_RE.match(path.stem)):
        return False
    if not VERSION_DIR_RE.match(path.parent.name):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(256)
    except OSError:
        return False
    return f'"format": "{ENTRY_FORMAT}"'.encode() in head


def _digest(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class PlanCache:
    """Two-level cache; ``directory=None`` keeps it in memory only."""

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, capacity: int = 64, version: str = __version__
    ):
        self.root = Path(directory) if directory is not None else None
        self.version = version
        self.capacity = capacity
        self._mem: OrderedDict[str, CacheEntry] = OrderedDict()
        self.stats = {"memory": 0, "disk": 0, "compiled": 0, "corrupt": 0}

    @property
    def dir(self) -> Path | None:
        return None if self.root is None else self.root / f"v{self.version}"

    def _path(self, key: str) -> Path | None:
        check_key(key)
        d = self.dir
        return None if d is None else d / f"{key}.json"

    def _remember(self, entry: CacheEntry) -> None:
        self._mem[entry.key] = entry
        self._mem.move_to_end(entry.key)
        while len(self._mem) > self.capacity:
            self._mem.popitem(last=False)

    def get(self, key: str) -> CacheEntry | None:
        hit = self._mem.get(key)
        if hit is not None:
            self._mem.move_to_end(key)
            self.stats["memory"] += 1
            return hit
        entry = self._read_disk(key)
        if entry is not None:
            self.stats["disk"] += 1
            self._remember(entry)
        return entry

    def _read_disk(self, key: str) -> CacheEntry | None:
        path = self._path(key)
        if path is None or not path.exists():
            return None
        try:
            doc = loads_json(path.read_text(encoding="utf-8"))
            ok = (
                isinstance(doc, dict)
                and doc.get("format") == ENTRY_FORMAT
                and doc.get("a2acc_version") == self.version
                and doc.get("key") == key
                and isinstance(doc.get("payload"), dict)
                and _digest(doc["payload"]) == doc.get("sha256")
            )
            if not ok:
                raise ValueError("format, version, key or checksum mismatch")
            p = doc["payload"]
            return CacheEntry(
                key, p["program"], dict(p.get("files") or {}), p.get("manifest"), dict(p.get("meta") or {})
            )
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            self.stats["corrupt"] += 1
            log.warning("a2acc cache: discarding corrupt entry %s (%s); it will be recompiled", path, exc)
            with contextlib.suppress(OSError):
                path.unlink()
            return None

    def put(self, entry: CacheEntry) -> None:
        self._remember(entry)
        path = self._path(entry.key)
        if path is None:
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

    def get_or_compile(self, key: str, compile_fn: Callable[[], CacheEntry]) -> tuple[CacheEntry, str]:
        """Entry for ``key`` and where it came from: ``memory``, ``disk`` or ``compiled``."""
        hit = self._mem.get(key)
        if hit is not None:
            self._mem.move_to_end(key)
            self.stats["memory"] += 1
            return hit, "memory"
        entry = self._read_disk(key)
        if entry is not None:
            self.stats["disk"] += 1
            self._remember(entry)
            return entry, "disk"
        entry = compile_fn()
        self.stats["compiled"] += 1
        self.put(entry)
        return entry, "compiled"

    def list_entries(self) -> list[tuple[str, int, str]]:
        """(key, size in bytes, version dir) for every entry on disk, all versions."""
        out: list[tuple[str, int, str]] = []
        if self.root is None or not self.root.exists():
            return out
        for vdir in sorted(self.root.glob("v*")):
            if not (vdir.is_dir() and VERSION_DIR_RE.match(vdir.name)):
                continue
            for f in sorted(vdir.glob("*.json")):
                if KEY_RE.match(f.stem) and f.is_file():
                    out.append((f.stem, f.stat().st_size, vdir.name))
        return out

    def clear(self) -> int:
        """Remove every cache entry a2acc wrote (all versions); nothing else in the directory is touched."""
        self._mem.clear()
        n = 0
        if self.root is not None and self.root.exists():
            for vdir in self.root.glob("v*"):
                if not (vdir.is_dir() and VERSION_DIR_RE.match(vdir.name)):
                    continue
                for f in vdir.glob("*.json"):
                    if _is_entry_file(f):
                        with contextlib.suppress(OSError):
                            f.unlink()
                            n += 1
        return n
