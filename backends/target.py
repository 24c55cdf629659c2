"""The Target protocol: what every backend (lowering target) implements, and what it hands back.

A target turns a verified :class:`~a2acc.ir.program.Program` into the files a stock executor runs, and
proves its own output correct by reading the exact text back with a strict reader and running it through an
interpreter of the executor's semantics. The pipeline calls, in order::

    lowered = target.lower(program, options)     # in memory: files + manifest (nothing written)
    report  = target.check(lowered)              # strict re-read + interpreter; must be ok
    paths   = target.emit(lowered, output)       # only then: atomic writes

``a2acc verify FILE`` finds the target whose :meth:`Target.detect` accepts the file's first bytes and calls
:meth:`Target.check_text`. ``max_chunks`` tells the unit policy how many chunks per rank the executor can
address, so quantisation never produces a layout the target must refuse.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from a2acc.errors import InputError
from a2acc.ir.layout import Manifest
from a2acc.ir.program import Program
from a2acc.ir.quantize import DEFAULT_ALIGN


@dataclass(frozen=True)
class Lowered:
    """A lowered Program, in memory: ``files`` (name -> text, written in this order), its manifest, a one-line
    ``summary`` for the CLI, the target's own ``model`` (e.g. the MSCCL ``Algo``) and a ``usage`` hint."""

    target: str
    files: Mapping[str, str]
    manifest: Manifest
    summary: str
    model: Any = None
    options: Any = None
    usage: str = ""  # how to use the written output; "{output}" stands for the -o path


@dataclass(frozen=True)
class CheckReport:
    """Outcome of reading a lowered file back and interpreting it: ``ok`` iff ``errors`` is empty."""

    ok: bool
    errors: tuple[str, ...]
    notes: tuple[str, ...] = ()
    summary: str = ""
    model: Any = field(default=None, compare=False)


@runtime_checkable
class Target(Protocol):
    """A lowering target. ``Options`` is a frozen dataclass of the target's options (``--opt KEY=VALUE``)."""

    name: str
    summary: str
    Options: type
    output_kind: str  # "dir" (e.g. an MSCCL_ALGO_DIR) or "file"

    def max_chunks(self, options: Any) -> int | None:
        """Most chunks per rank the executor can address (None: no limit)."""
        ...

    def lower(self, program: Program, options: Any, *, name: str | None = None) -> Lowered:
        """Lower a verified Program; raise LoweringError when it cannot fit the executor's limits."""
        ...

    def check(self, lowered: Lowered) -> CheckReport:
        """Read the exact text of ``lowered`` back and interpret it against its manifest."""
        ...

    def emit(
        self, lowered: Lowered, output: Path, *, manifest_path: Path | None = None, force: bool = False
    ) -> list[Path]:
        """Write the files atomically, the manifest last (default place: the target's); return the paths.
        Refuse to write over or beside files a2acc cannot prove it wrote unless ``force``.

        Two modes: ``output`` is the user's ``-o`` (a file, or a directory for ``output_kind == "dir"``); or, from
        ``a2acc cache export``, ``output`` is an existing export directory and ``manifest_path`` is
        :func:`a2acc.ir.layout.export_manifest_path` of it and the file's name: then the file keeps its own name
        inside ``output``. A single-file output's manifest goes beside it as ``FILE.manifest.json``, where
        :func:`a2acc.ir.layout.find_manifest` (and so ``a2acc verify``) finds it."""
        ...

    def detect(self, head: str) -> bool:
        """Does a file starting with ``head`` (its first few KiB of text) belong to this target?"""
        ...

    def check_text(self, text: str, source: str, manifest: Manifest | None, options: Any) -> CheckReport:
        """Verify a file of this target's format (ours or anyone's) with the strict reader + interpreter."""
        ...


# ---------------------------------------------------------------------- helpers every target uses
def _version() -> str:
    """The installed a2acc's version (from its metadata: the package root imports the pipeline, which imports
    the backends, so the backends do not import it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("a2acc")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def default_name(program: Program, target: str = "", options: Any = None) -> str:
    """``a2acc_<algorithm>_<N>r_<digest>``: a lowered file's name when the caller gives none. The digest covers
    everything that shapes the lowered text: the Program, the target, its options (those marked ``check_only``
    excepted) and the a2acc version; so files that differ in content never share a name (MSCCL++ caches executor
    contexts by plan name, and an executor's directory holds one file per name)."""
    import hashlib
    import json

    h = hashlib.sha256(program.to_json().encode())
    h.update(f"\0{target}\0{_version()}\0".encode())
    if options is not None and dataclasses.is_dataclass(options):
        shaping = {
            f.name: getattr(options, f.name)
            for f in dataclasses.fields(options)
            if not f.metadata.get("check_only", False)
        }
        h.update(json.dumps(shaping, sort_keys=True, default=str).encode())
    return f"a2acc_{program.algorithm}_{program.nranks}r_{h.hexdigest()[:10]}"


def unit_align(target: Any, options: Any, nranks: int) -> int:
    """The granularity of the chunk unit a target needs: its optional ``unit_align(options, nranks)`` (e.g. so
    that the executor selects the file for the packed call, :func:`a2acc.ir.quantize.selection_align`), else 16
    (the alignment every target needs)."""
    f = getattr(target, "unit_align", None)
    return int(f(options, nranks)) if f is not None else DEFAULT_ALIGN


def reads_manifest_of(target: Any, writer: str) -> bool:
    """Does a manifest written by target ``writer`` describe files of ``target``? Its own, or those its optional
    ``manifest_targets`` names (MSCCL++'s DSL program prints the JSON plan its manifest describes)."""
    return writer == target.name or writer in getattr(target, "manifest_targets", ())


def for_topology(target: Any, options: Any, topology: Any) -> Any:
    """The target's options completed from the topology: its optional ``for_topology(options, topology)`` (e.g.
    MSCCL++'s thread-block limit from the topology's GPU when the options name none), else ``options``."""
    f = getattr(target, "for_topology", None)
    return options if f is None else f(options, topology)


def max_peers(target: Any, options: Any) -> int | None:
    """The most peers per rank a target's executor can run: its optional ``max_peers(options)`` (e.g. RCCL's
    thread blocks), else no limit. The pipeline hands it to the planners, so a cost-aware planner does not pick
    a shape the target must refuse."""
    f = getattr(target, "max_peers", None)
    return None if f is None else f(options)


def op_columns(prog: Program) -> list[Any] | None:
    """The op columns the compiled lowerings read (src rank/buf/off, dst rank/buf/off, cnt, dependency CSR) as
    int64 arrays, from the Program's op table when it has one, else from its ops; None when op ids are not
    0..n-1."""
    import numpy as np

    table = getattr(prog, "table", None)
    names = ("src_rank", "src_buf", "src_off", "dst_rank", "dst_buf", "dst_off", "cnt", "dep_ptr", "dep_ids")
    if table is not None and getattr(table, "ids", None) is None and all(hasattr(table, a) for a in names):
        return [np.ascontiguousarray(getattr(table, a), dtype=np.int64) for a in names]
    ops = prog.ops
    if any(op.id != i for i, op in enumerate(ops)):
        return None
    fields = [[getattr(op, a) for op in ops] for a in names[:7]]
    ptr = np.zeros(len(ops) + 1, dtype=np.int64)
    np.cumsum([len(op.deps) for op in ops], out=ptr[1:])
    ids = [d for op in ops for d in op.deps]
    return [np.asarray(f, dtype=np.int64) for f in fields] + [ptr, np.asarray(ids, dtype=np.int64)]


def size_window(
    size_range: tuple[int, int] | None, text: str, buffer_bytes: int, step: int = 0
) -> tuple[int, int]:
    """The message-size window a lowered file declares (default: exactly the plan's buffer). It must contain
    the buffer size, or the executor never selects (or refuses) the file; and, with ``step`` (the spacing of
    the other sizes the executor would accept for the file), no other size: the all-to-all-v packing is for
    chunks of exactly buffer / C bytes, so another size would move the wrong bytes without an error."""
    lo, hi = size_range or (buffer_bytes, buffer_bytes)
    if not lo <= buffer_bytes <= hi:
        raise InputError(
            "--opt", "size_range", text, f"must include the plan's buffer size {buffer_bytes} B per rank"
        )
    if step and (lo <= buffer_bytes - step or hi >= buffer_bytes + step):
        other = buffer_bytes - step if lo <= buffer_bytes - step else buffer_bytes + step
        raise InputError(
            "--opt",
            "size_range",
            text,
            f"the packing holds for {buffer_bytes} B per rank only, but the range also admits {other} B, which "
            f"the executor would select too and run with other chunk sizes (data at the wrong peers): use a "
            f"range within ({buffer_bytes - step}, {buffer_bytes + step}), or leave size_range unset",
        )
    return lo, hi
