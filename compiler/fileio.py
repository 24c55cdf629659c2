"""Atomic file writing: never leave a half-written output file behind.

Everything a2acc writes (plans, matrices, XML, cache entries) goes through :func:`atomic_write_bytes`: the data
goes to a temporary file in the destination directory, is flushed and fsync'ed, then renamed over the target.
``os.replace`` is atomic on POSIX, so readers see either the old file or the complete new one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process umask (read by setting and restoring it, under a lock: there is no getter)."""
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def loads_json(text: str, *, unique_keys: bool = False, **kwargs: Any) -> Any:
    """``json.loads`` for files users hand in: nesting deeper than Python's parser can follow (a RecursionError
    inside the decoder) is a malformed document like any other (``json.JSONDecodeError``), so every reader's
    clear error path covers it. ``unique_keys``: a key repeated in one object is such an error too (the
    hand-written settings files: a repeat says two things and the last would silently win)."""
    if unique_keys:
        kwargs["object_pairs_hook"] = _unique_pairs
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to read", text, 0) from None
    except _DuplicateKey as exc:
        raise json.JSONDecodeError(f"key {exc.args[0]!r} appears twice in one object", text, 0) from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise json.JSONDecodeError(_too_long(exc), text, 0) from None


def _too_long(exc: ValueError) -> str:
    digits = sys.get_int_max_str_digits()
    return f"a number of more than {digits} digits" if "digits" in str(exc) else f"unreadable ({exc})"


class _DuplicateKey(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that refuses a key repeated in one mapping (``yaml.YAMLError`` with its line): YAML
    itself keeps the last, so ``intra:`` given twice silently replaced a switch by a ring. Nesting deeper than
    the loader can follow is a ``yaml.YAMLError`` too (each reader's clear error path covers it)."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` merges; own keys may override those
                continue
            if not isinstance(key_node, yaml.ScalarNode):  # `? [1, 2]`: no setting is named by a list or map
                raise yaml.constructor.ConstructorError(
                    None, None, "a key must be a name, not a list or mapping", key_node.start_mark
                )
            key = loader.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return loader.construct_mapping(node, deep=deep)

    _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError:
        raise
    except RecursionError:  # nesting deeper than the loader's recursion can follow: malformed like any other
        raise yaml.YAMLError("nested too deeply to read") from None
    except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise yaml.YAMLError(_too_long(exc)) from None


#: how much of a file is looked at before it is read whole
SNIFF_BYTES = 1 << 16


class TooLarge(ValueError):
    """A file longer than its reader's limit (raised before more than the limit is read)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"larger than {limit} bytes")
        self.limit = limit


def read_text(path: str | os.PathLike[str], max_bytes: int | None = None) -> str:
    """A UTF-8 text file's content; a file whose first 64 KiB hold a NUL byte is refused before the rest is read
    (``UnicodeDecodeError``, as for any undecodable file: a 3 GB file of zeros took 6 GB to refuse), and one
    longer than ``max_bytes`` once that much is read (:class:`TooLarge`; a device such as ``/dev/zero`` has no
    size to check first)."""
    with open(path, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
        at = head.find(b"\x00")
        if at >= 0:
            raise UnicodeDecodeError("utf-8", head, at, at + 1, "a NUL byte: not a text file")
        if max_bytes is not None:  # (no seek: a pipe or a process substitution reads too)
            data = head + fh.read(max(max_bytes + 1 - len(head), 0))
            if len(data) > max_bytes:
                raise TooLarge(max_bytes)
            return data.decode("utf-8")
        if fh.seekable():  # re-read the head rather than concatenate: a plan file can be gigabytes
            fh.seek(0)
            return fh.read().decode("utf-8")
        return (head + fh.read()).decode("utf-8")


def size_words(n: int) -> str:
    """``64 MiB`` for a limit in bytes (powers of two; plain bytes otherwise)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same directory, then rename).

    An OSError (a full disk, a read-only directory) names ``path``, never the temporary file, and leaves
    nothing behind."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if target.is_symlink():  # replacing it would drop the link, not write where it points
        raise _about(OSError(errno.EEXIST, "a symbolic link, not a regular file"), target)
    if target.exists() and not target.is_file():  # never replace a device, FIFO or socket
        raise _about(OSError(errno.EEXIST, "not a regular file"), target)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise _about(exc, target) from exc
    try:
        # mkstemp creates 0600; a finished file gets the mode any new file gets here (0666 less the umask)
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _about(exc, target) from exc
        raise


def _about(exc: OSError, target: Path) -> OSError:
    """The same error, naming the file the user asked for."""
    return OSError(exc.errno, exc.strerror or str(exc), str(target))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Text variant of :func:`atomic_write_bytes` (UTF-8)."""
    atomic_write_bytes(path, text.encode("utf-8"))


#: bytes of an existing file read to recognise a2acc's own output
_HEAD = 1 << 16


@dataclass(frozen=True)
class Output:
    """One file a command is about to write: the option that names it, its path, and the test that recognises
    a2acc's own earlier output in the first bytes of an existing file (what may be replaced without ``--force``).

    ``content``, when the bytes are known before writing, also lets an existing file with exactly those bytes
    be "replaced" (nothing changes): formats that cannot carry a mark of a2acc's (``.npy``, plain text
    matrices) are then rewritten by the same command, and refused otherwise."""

    flag: str
    path: str
    owned: Callable[[bytes], bool]
    content: bytes | None = None

    def same_as_existing(self) -> bool:
        if self.content is None:
            return False
        try:
            if os.path.getsize(self.path) != len(self.content):
                return False
            with open(self.path, "rb") as fh:
                return fh.read() == self.content
        except OSError:
            return False


def check_parent(flag: str, path: str) -> None:
    """Refuse an output path whose parent directory does not exist: a typo must not create a tree."""
    from a2acc.errors import InputError

    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        # the nearest part of the path that exists says why: a file where a directory should be, or nothing
        part = next((p for p in (parent, *parent.parents) if p.exists() or p.is_symlink()), None)
        why = (
            f"{part} is a file, not a directory"
            if part is not None and not part.is_dir()
            else f"{parent} does not exist"
        )
        raise InputError("", flag, path, f"a path in an existing directory ({why})")


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
        if target.is_symlink():  # a rename would replace the link itself (a dangling one: nothing to check)
            raise InputError(
                "",
                out.flag,
                p,
                "a regular file or a new path (this is a symbolic link: give the path it names)",
            )
        if target.is_dir():
            raise InputError("", out.flag, p, "a file path, not a directory")
        check_parent(out.flag, p)
        k = key(p)
        if k in ins:
            raise InputError("", out.flag, p, f"a new path: it is an input of this command ({ins[k]})")
        if k in seen:
            raise InputError("", out.flag, p, f"a path of its own: {seen[k]} writes there too")
        seen[k] = out.flag
        if target.exists() and not target.is_file():
            # a device, FIFO or socket: opening it to look would block (FIFO), and replacing it destroys
            # something that is not a file (``/dev/null`` as root), even with --force
            raise InputError(
                "", out.flag, p, "a regular file or a new path (this is a device, FIFO or socket)"
            )
        if target.exists() and not force:
            try:
                with open(target, "rb") as fh:
                    head = fh.read(_HEAD)
            except OSError as exc:
                raise InputError("", out.flag, p, f"a writable path ({exc.__class__.__name__})") from exc
            if not out.owned(head) and not out.same_as_existing():
                raise InputError(
                    "",
                    out.flag,
                    p,
                    "a path a2acc wrote before or a new one: a2acc cannot prove it wrote this file "
                    "(give --force to replace it)",
                )
