"""Writing a lowered output directory and its manifest as one set.

An executor's algorithm directory (``MSCCL_ALGO_DIR``) must hold executor files only, so the manifest lives
beside it (``OUT.manifest.json``); the two cannot be renamed in one step. :func:`publish_dir` makes every
moment of the switch a state that a rerun of the same ``compile`` accepts:

1. every new file is written and fsync'ed into a staging directory beside ``OUT`` (a full disk or an
   interrupt stops here: ``OUT`` and its manifest are untouched, the staging directory is removed);
2. the previous ``OUT`` (holding only files a2acc wrote, checked by the caller) is renamed aside;
3. the new manifest replaces the old one (``os.replace``: atomic);
4. the staging directory becomes ``OUT`` (``os.rename``: atomic), and the old directory is removed, file by
   file, only the files a2acc wrote.

An interrupt between 2 and 3 puts the previous ``OUT`` back; after 3 the switch is completed. What a crash
(SIGKILL, power loss) can leave is ``OUT`` missing with either manifest beside it, which a rerun replaces, and a
hidden ``.OUT.a2acc-*`` directory; never ``OUT`` with files its manifest does not name. A write that fails
(``ENOSPC``, ``EROFS``) is reported with the ``-o`` path, not the staging name.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from a2acc.fileio import atomic_write_text


def _mode(default: int) -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return default & ~mask


def _write(path: Path, text: str) -> None:
    with open(path, "wb") as fh:
        fh.write(text.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(path, _mode(0o666))


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _as_output_error(exc: OSError, out: Path) -> OSError:
    """The same error, naming the output path the user gave instead of a staging file."""
    return OSError(exc.errno, exc.strerror or str(exc), str(out))


def publish_dir(
    out: Path, files: Mapping[str, str], man_path: Path, man_text: str, keep: set[str], ours: set[str]
) -> list[Path]:
    """Replace directory ``out`` by ``files`` and its manifest by ``man_text``, as one set (module docstring).

    ``keep``: files now in ``out`` that stay (a2acc's, described by other manifests: they are hard-linked into
    the new directory); ``ours``: the files now in ``out`` that a2acc wrote and may delete. The caller has
    checked that ``out`` holds nothing else."""
    parent = out.parent if str(out.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.a2acc-new-", dir=parent))
    except OSError as exc:
        raise _as_output_error(exc, out) from exc
    old: Path | None = None
    committed = False
    try:
        os.chmod(stage, _mode(0o777))
        for name, text in files.items():
            _write(stage / name, text)
        for name in sorted(keep - set(files)):
            os.link(out / name, stage / name)
        _fsync_dir(stage)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.a2acc-old-", dir=parent))
            os.rmdir(old)
            os.rename(out, old)
        atomic_write_text(man_path, man_text)
        committed = True
        os.rename(stage, out)
    except OSError as exc:
        _undo(out, stage, old, committed)
        raise _as_output_error(exc, out) from exc
    except BaseException:  # an interrupt: the previous set back, or the new one completed
        _undo(out, stage, old, committed)
        raise
    if old is not None:
        _remove_ours(old, ours)
    _fsync_dir(parent)
    return [out / name for name in files] + [man_path]


def _undo(out: Path, stage: Path, old: Path | None, committed: bool) -> None:
    """Leave a consistent set after a failure: before the manifest switch, the previous directory back and the
    staging removed; after it, the new directory in place (the previous files stay hidden beside it)."""
    with contextlib.suppress(OSError):
        if committed:
            if stage.exists() and not out.exists():
                os.rename(stage, out)
            return
        if old is not None and old.exists() and not out.exists():
            os.rename(old, out)
        if stage.exists():
            for p in stage.iterdir():
                p.unlink()
            stage.rmdir()


def _remove_ours(old: Path, ours: set[str]) -> None:
    """Delete the previous directory's files that a2acc wrote, then the directory if that emptied it."""
    for name in ours:
        with contextlib.suppress(FileNotFoundError):
            (old / name).unlink()
    with contextlib.suppress(OSError):
        old.rmdir()
