"""Public API of the MSCCL XML backend: lower + verify + write an ``MSCCL_ALGO_DIR``; verify any XML file."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from a2acc.backends.msccl_xml.interp import PROTO_K, InterpResult, Layout, run, static_checks
from a2acc.backends.msccl_xml.manifest import Manifest, manifest_for
from a2acc.backends.msccl_xml.model import Algo
from a2acc.backends.msccl_xml.reader import read_xml
from a2acc.backends.msccl_xml.writer import LowerOptions, alltoall_chunks, lower, to_xml
from a2acc.errors import LoweringError, VerificationError
from a2acc.fileio import atomic_write_text
from a2acc.ir import Program


def choose_proto(buffer_bytes: int) -> str:
    """LL below 512 KiB per rank (latency-bound), Simple above (spec §10; RCCL's MI300X set switches there)."""
    return "LL" if buffer_bytes < 512 * 1024 else "Simple"


@dataclass(frozen=True)
class XmlCheck:
    ok: bool
    errors: tuple[str, ...]
    notes: tuple[str, ...]
    algo: Algo | None


def check_xml_text(text: str, src: str, *, dialect: str = "nccl", layout: Layout | None = None) -> XmlCheck:
    """Strict read + static rules + execution at K=1 and the protocol's K (+ in-place when declared)."""
    rr = read_xml(text, src)
    errors = list(rr.errors)
    if rr.algo is None:
        return XmlCheck(False, tuple(errors), tuple(rr.notes), None)
    algo = rr.algo
    errors += [f"{src}: {e}" for e in static_checks(algo, dialect)]
    modes = ([False] if algo.outofplace == 1 else []) + ([True] if algo.inplace == 1 else [])
    for inplace in modes or [False]:
        # FIFO capacity K=1 is the strict lint. A run that completes at K=1 completes identically at any larger
        # K (extra buffering only enables steps; matching is FIFO order, so data flow is the same), so the
        # protocol's K is run only to tell a K=1-only deadlock from a real one.
        for k in sorted({1, PROTO_K.get(algo.proto, 2)}):
            res: InterpResult = run(algo, k=k, inplace=inplace, layout=layout)
            tag = f"{src} (K={k}{', in-place' if inplace else ''})"
            errors += [f"{tag}: {e}" for e in res.errors]
            if res.ok:
                break
    return XmlCheck(not errors, tuple(errors), tuple(rr.notes), algo)


@dataclass(frozen=True)
class Compiled:
    xml_path: Path
    manifest_path: Path
    algo: Algo
    manifest: Manifest
    text: str


def lower_verified(
    prog: Program,
    *,
    name: str,
    xml_name: str,
    dialect: str = "nccl",
    proto: str | None = None,
    instances: int = 1,
    tb_layout: str = "auto",
    size_range: tuple[int, int] | None = None,
) -> tuple[Algo, str, Manifest]:
    """Lower ``prog`` and verify the exact text (with its manifest layout); raises on any failure.

    Protocol defaults by buffer size; ``minBytes``/``maxBytes`` default to exactly C x chunk bytes."""
    buffer_bytes = alltoall_chunks(prog) * prog.unit_bytes
    lo, hi = size_range if size_range is not None else (buffer_bytes, buffer_bytes)
    opts = LowerOptions(
        name=name,
        dialect=dialect,
        proto=proto or choose_proto(buffer_bytes),
        instances=instances,
        tb_layout=tb_layout,
        min_bytes=lo,
        max_bytes=hi,
    )
    algo = lower(prog, opts)
    text = to_xml(algo)
    man = manifest_for(prog, xml_name, name, algo.nchunksperloop)
    chk = check_xml_text(text, xml_name, dialect=dialect, layout=man.layout())
    if not chk.ok:
        raise VerificationError(f"lowered XML {xml_name} (a2acc bug)", list(chk.errors))
    return algo, text, man


def compile_to_dir(
    prog: Program,
    out_dir: str | os.PathLike[str],
    *,
    dialect: str = "nccl",
    proto: str | None = None,
    instances: int = 1,
    tb_layout: str = "auto",
    size_range: tuple[int, int] | None = None,
    priority: int = 0,
) -> Compiled:
    """Lower ``prog``, verify the text we produce, then write ``out_dir/NN-name.xml`` and the manifest beside
    the directory (``out_dir.manifest.json``). Raises LoweringError / VerificationError without writing."""
    out = Path(out_dir)
    digest = hashlib.sha256(prog.to_json().encode()).hexdigest()[:10]
    name = f"a2acc_{prog.algorithm}_{prog.nranks}r_{digest}"
    xml_name = f"{priority:02d}-{name}-{dialect}.xml"
    algo, text, man = lower_verified(
        prog,
        name=name,
        xml_name=xml_name,
        dialect=dialect,
        proto=proto,
        instances=instances,
        tb_layout=tb_layout,
        size_range=size_range,
    )
    if out.exists() and not out.is_dir():
        raise LoweringError(f"{out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    for p in out.iterdir():
        if p.is_file() and not p.name.endswith(".xml"):
            raise LoweringError(f"{out} holds a non-XML file {p.name}; the executor would fail to initialise")
    xml_path = out / xml_name
    man_path = out.parent / f"{out.name}.manifest.json"
    atomic_write_text(xml_path, text)
    atomic_write_text(man_path, man.to_json())
    return Compiled(xml_path, man_path, algo, man, text)
