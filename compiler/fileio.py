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
