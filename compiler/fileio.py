"""Atomic file writing: never leave a half-written output file behind.

Everything a2acc writes (plans, matrices, XML, cache entries) goes through :func:`atomic_write_bytes`: the data
goes to a temporary file in the destination directory, is flushed and fsync'ed, then renamed over the target.
``os.replace`` is atomic on POSIX, so readers see either the old file or the complete new one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process umask (read by setting and restoring it, under a lock: there is no getter)."""
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same directory, then rename)."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        # mkstemp creates 0600; a finished file gets the mode any new file gets here (0666 less the umask)
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Text variant of :func:`atomic_write_bytes` (UTF-8)."""
    atomic_write_bytes(path, text.encode("utf-8"))


#: bytes of an existing file read to recognise a2acc's own output
_HEAD = 1 << 16


@dataclass(frozen=True)
class Output:
    """One file a command is about to write: the option that names it, its path, and the test that recognises
    a2acc's own earlier output in the first bytes of an existing file (what may be replaced without ``--force``)."""

    flag: str
    path: str
    owned: Callable[[bytes], bool]


def check_outputs(outputs: Sequence[Output], inputs: Sequence[str] = (), *, force: bool = False) -> None:
    """Refuse, before any work, an output that would destroy something: a path that is an input of the same
    command, two outputs on one path, an existing file a2acc cannot prove it wrote (unless ``force``), a
    directory, ``-``, or a parent directory that does not exist (a typo must not create a tree)."""
    from a2acc.errors import InputError

    def key(p: str) -> str:
        return os.path.realpath(p)

    ins = {key(p): p for p in inputs if p and p != "-"}
    seen: dict[str, str] = {}
    for out in outputs:
        p = out.path
        if p == "-":
            raise InputError(
                "", out.flag, p, "a file path (writing to stdout is not supported: the table is there)"
            )
        target = Path(p)
        if target.is_dir():
            raise InputError("", out.flag, p, "a file path, not a directory")
        parent = target.parent if str(target.parent) else Path(".")
        if not parent.is_dir():
            raise InputError("", out.flag, p, f"a path in an existing directory ({parent} does not exist)")
        k = key(p)
        if k in ins:
            raise InputError("", out.flag, p, f"a new path: it is an input of this command ({ins[k]})")
        if k in seen:
            raise InputError("", out.flag, p, f"a path of its own: {seen[k]} writes there too")
        seen[k] = out.flag
        if target.exists() and not force:
            try:
                with open(target, "rb") as fh:
                    head = fh.read(_HEAD)
            except OSError as exc:
                raise InputError("", out.flag, p, f"a writable path ({exc.__class__.__name__})") from exc
            if not out.owned(head):
                raise InputError(
                    "",
                    out.flag,
                    p,
                    "a path a2acc wrote before or a new one: this file was not written by a2acc "
                    "(give --force to replace it)",
                )
