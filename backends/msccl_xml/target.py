"""The ``msccl-xml`` target: lower a Program to MSCCL XML, check the exact text, write an MSCCL_ALGO_DIR.

Passes, in order (each its own module): :mod:`.writer` (threadblock/channel assignment, level ordering,
dependencies and nops, count splitting, executor limits) -> XML text -> :mod:`.reader` (the strict reader of
what msccl-executor-nccl and RCCL parse) -> :mod:`.interp` (an interpreter of the executors' semantics: FIFO
pairing, deadlocks, races, the all-to-all-v postcondition of the manifest's layout).

Both the lowering and the check have a compiled fast path (``a2acc._xmlinterp``, ``compiler/native/xmlinterp.c``)
that gives the reference's exact text and its "ok" verdict for a2acc's own output, and leaves everything else
(every refusal message, every file with an error or a note) to the pure-Python reference, which stays the
definition (tests/backends/test_msccl_native.py checks they agree).

Output: ``-o DIR`` becomes an ``MSCCL_ALGO_DIR`` holding only XML files (the executors parse every file there
as XML), and ``DIR.manifest.json`` beside it describes the all-to-all-v packing (:mod:`a2acc.ir.layout`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from a2acc.backends.msccl_xml.interp import PROTO_K, InterpResult, run, static_checks
from a2acc.backends.msccl_xml.model import (
    MAX_CHANNELS_NCCL,
    MAX_CHANNELS_RCCL,
    MAX_NODES,
    MAX_OFFSET,
    MAX_TBS_RCCL,
    Algo,
)
from a2acc.backends.msccl_xml.reader import algo_attrs, covers, read_xml
from a2acc.backends.msccl_xml.writer import LowerOptions, lower, lower_text, to_xml
from a2acc.backends.publish import publish_dir
from a2acc.backends.target import CheckReport, Lowered, default_name, size_window
from a2acc.errors import InputError, InternalError, LoweringError
from a2acc.fileio import atomic_write_text
from a2acc.ir.layout import (
    ChunkLayout,
    Manifest,
    dir_manifest_path,
    find_manifest,
    manifest_file,
    manifest_for,
    owned_files,
)
from a2acc.ir.program import Program
from a2acc.ir.quantize import DTYPE_BYTES, selecting_dtypes, selection_align
from a2acc.model.units import parse_size
from a2acc.native import xmlinterp as _native
from a2acc.options import bounded

CALL = (
    "ncclAllToAll(send, recv, count, dtype) with count = buffer_bytes_per_rank / (ngpus * sizeof(dtype)) elements "
    "per peer (unit_rules.dtypes lists the count of every element type the file is selected for)"
)
SELECTION = (
    "count > 0, count % nchunksperloop == 0 (RCCL before 2024-10, msccl-scheduler), (count * ngpus) % "
    "nchunksperloop == 0 (msccl-executor-nccl, RCCL since 2024-10), minBytes <= count * sizeof(dtype) * ngpus <= "
    "maxBytes: all hold for the packed call of every listed type, and no other call size in [minBytes, maxBytes] "
    "is selected"
)
DTYPE_SETS = {"all": tuple(DTYPE_BYTES)}


def choose_proto(buffer_bytes: int) -> str:
    """LL below 512 KiB per rank (latency-bound), Simple above (RCCL's shipped MI300X all-to-all XMLs switch
    protocol at that size)."""
    return "LL" if buffer_bytes < 512 * 1024 else "Simple"


#: channels per rank RCCL's MSCCL runs at most (NCCL's runs 32; the plan's own channels are checked against the
#: dialect's limit after lowering)
MAX_INSTANCES = 128


@dataclass(frozen=True)
class Options:
    dialect: Literal["nccl", "rccl"] = field(
        default="nccl",
        metadata={"help": "msccl-executor-nccl (nccl) or RCCL's MSCCL (rccl: s/r/cpy/re/nop only)"},
    )
    proto: Literal["auto", "Simple", "LL", "LL128"] = field(
        default="auto", metadata={"help": "protocol; auto: LL below 512 KiB per rank, else Simple"}
    )
    instances: int = bounded(
        1,
        1,
        MAX_INSTANCES,
        "split every transfer over this many channels",
        "the most channels an executor runs; NCCL's is 32",
    )
    tb_layout: Literal["auto", "split", "combined"] = field(
        default="auto", metadata={"help": "one tb per (peer, direction), or one per peer for both directions"}
    )
    size_range: str = field(
        default="",
        metadata={"help": "MIN:MAX bytes the executor may select the XML for (default: exactly C x unit)"},
    )
    priority: int = field(default=0, metadata={"help": "file name prefix NN-: executors load in name order"})
    dtypes: str = field(
        default="all",
        metadata={
            "help": "element types the packed ncclAllToAll may use: all (1-8 byte types) or a comma list of "
            f"{', '.join(DTYPE_BYTES)}; the chunk is a multiple of ngpus x the largest, so every executor's "
            "selection rule picks the file for each"
        },
    )

    def check(self) -> None:
        if not 0 <= self.priority <= 99:
            raise InputError("--opt", "priority", self.priority, "must be in 0..99")
        self.dtype_list()
        self.bytes_range()

    def dtype_list(self) -> tuple[str, ...]:
        if self.dtypes in DTYPE_SETS:
            return DTYPE_SETS[self.dtypes]
        names = tuple(d.strip() for d in self.dtypes.split(",") if d.strip())
        bad = [d for d in names if d not in DTYPE_BYTES]
        if bad or not names:
            raise InputError(
                "--opt", "dtypes", self.dtypes, f"all, or a comma list of {', '.join(DTYPE_BYTES)}"
            )
        return names

    def bytes_range(self) -> tuple[int, int] | None:
        if not self.size_range:
            return None
        parts = self.size_range.split(":")
        if len(parts) != 2:
            raise InputError("--opt", "size_range", self.size_range, "use MIN:MAX (bytes, K/M/G allowed)")
        lo = parse_size(parts[0], field="size_range")
        hi = parse_size(parts[1], field="size_range")
        if lo > hi:
            raise InputError(
                "--opt",
                "size_range",
                self.size_range,
                "MIN must be <= MAX (the executor would never select the file)",
            )
        return lo, hi


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while the reference builds its per-step objects: they hold no
    cycles, so the collections their allocation would trigger find nothing and only cost time (the reader
    alone runs about a third faster on a 16x8 file)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _LazyAlgo:
    """The :class:`Algo` of a text the compiled check accepted, read (by the strict reader) on first use: the
    fast path never builds the per-step objects, and the compile path never looks at them."""

    def __init__(self, text: str, src: str) -> None:
        self._text = text
        self._src = src
        self._algo: Algo | None = None

    def algo(self) -> Algo:
        if self._algo is None:
            algo = read_xml(self._text, self._src).algo
            if algo is None:  # the text was checked, so this is a bug
                raise InternalError(f"{self._src}: checked XML has no <algo>")
            self._algo = algo
        return self._algo

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.algo(), name)


def _fast_check(
    text: str, src: str, dialect: str, layout: ChunkLayout | None, model: Any
) -> CheckReport | None:
    """The compiled check's verdict when it can decide one (only "ok": see ``compiler/native/xmlinterp.c``),
    else None: the caller runs the reference, which then also writes the messages."""
    if _native is None:
        return None
    counts = None if layout is None else np.ascontiguousarray(layout.counts, dtype=np.int64)
    got = _native.check(text, dialect, counts)
    if got is None:
        return None
    ngpus, nchannels, c, proto, coll, tbs, steps = got
    summary = (
        f"{coll}, {ngpus} GPUs, proto {proto}, {nchannels} channels, C={c}, "
        f"max {tbs} tbs/GPU, max {steps} steps/tb{', all-to-all-v manifest' if layout is not None else ''}"
    )
    return CheckReport(True, (), (), summary, model if model is not None else _LazyAlgo(text, src))


def _check_algo_text(
    text: str,
    src: str,
    dialect: str,
    layout: ChunkLayout | None,
    *,
    native: bool = True,
    model: Algo | None = None,
) -> CheckReport:
    """Strict read + static rules + execution at K=1 and the protocol's K (+ in-place when declared).

    With ``native`` the compiled core is asked first; it accepts only texts the reference accepts too, and
    anything else (every text with an error or a note) goes to the reference below. ``model``: the Algo the
    text was written from, returned as the report's model when the compiled core accepts the text."""
    if native:
        fast = _fast_check(text, src, dialect, layout, model)
        if fast is not None:
            return fast
    with _gc_paused():
        return _reference_check(text, src, dialect, layout)


def _reference_check(text: str, src: str, dialect: str, layout: ChunkLayout | None) -> CheckReport:
    """The pure-Python check (the definition): strict reader, static rules, interpreter."""
    rr = read_xml(text, src)
    errors = list(rr.errors)
    if rr.algo is None:
        return CheckReport(False, tuple(errors), tuple(rr.notes))
    algo = rr.algo
    blocked = _not_interpretable(algo, errors)
    if blocked:
        return CheckReport(False, (*errors, f"{src}: {blocked}"), tuple(rr.notes), "", algo)
    static = static_checks(algo, dialect)
    errors += [f"{src}: {e}" for e in static]
    if any("outside the buffer" in e for e in static):
        errors.append(f"{src}: not interpreted: steps address chunks outside their buffers (listed above)")
        return CheckReport(False, tuple(errors), tuple(rr.notes), "", algo)
    modes = ([False] if algo.outofplace == 1 else []) + ([True] if algo.inplace == 1 else [])
    for inplace in modes or [False]:
        # FIFO capacity K=1 is the strict lint. A run that completes at K=1 completes identically at any larger
        # K (extra buffering only enables steps; matching is FIFO order, so data flow is the same), so the
        # protocol's K is run only to tell a K=1-only deadlock from a real one.
        for k in sorted({1, PROTO_K.get(algo.proto, 2)}):
            try:
                res: InterpResult = run(algo, k=k, inplace=inplace, layout=layout)
            except (ValueError, IndexError, KeyError) as exc:  # a malformed file the static rules missed
                errors.append(
                    f"{src}: not interpreted: the file is malformed in a way the checks above miss ({exc})"
                )
                return CheckReport(False, tuple(errors), tuple(rr.notes), "", algo)
            tag = f"{src} (K={k}{', in-place' if inplace else ''})"
            errors += [f"{tag}: {e}" for e in res.errors]
            if res.ok:
                break
    tbs = max((len(g.tbs) for g in algo.gpus), default=0)
    steps = max((len(t.steps) for g in algo.gpus for t in g.tbs), default=0)
    summary = (
        f"{algo.coll}, {algo.ngpus} GPUs, proto {algo.proto}, {algo.nchannels} channels, C={algo.nchunksperloop}, "
        f"max {tbs} tbs/GPU, max {steps} steps/tb{', all-to-all-v manifest' if layout is not None else ''}"
    )
    return CheckReport(not errors, tuple(errors), tuple(rr.notes), summary, algo)


# the interpreter holds every chunk of every rank: refuse sizes no executor could hold before allocating them
MAX_INTERP_CHUNKS = 1 << 20
MAX_INTERP_GPUS = 4096
_SIZE_ATTRS = ("nchunksperloop", "ngpus", "i_chunks", "o_chunks", "s_chunks", "coll")


def _not_interpretable(algo: Algo, errors: list[str]) -> str:
    """Why the file cannot be run by the interpreter at all ("" when it can)."""
    missing = [a for a in _SIZE_ATTRS if any(f"Attribute {a} of node" in e for e in errors)]
    if missing:
        return f"not interpreted: the size attribute(s) {', '.join(missing)} are missing"
    if not 1 <= algo.ngpus <= MAX_INTERP_GPUS:
        return f"not interpreted: ngpus={algo.ngpus} outside 1..{MAX_INTERP_GPUS}"
    if any("XML nodes parsed for this rank" in e for e in errors):  # its memory grows with tbs squared
        return f"not interpreted: the executor's parser refuses a rank of more than {MAX_NODES} XML nodes"
    sizes = [algo.nchunksperloop] + [x for g in algo.gpus for x in (g.i_chunks, g.o_chunks, g.s_chunks)]
    if max(sizes) > MAX_INTERP_CHUNKS or min(sizes) < 0:
        return (
            f"not interpreted: chunk counts up to {max(sizes)} (nchunksperloop or i/o/s_chunks); "
            f"MSCCL offsets are int16 and this checker holds at most {MAX_INTERP_CHUNKS} chunks per buffer"
        )
    return ""


def check_xml_text(
    text: str, src: str, *, dialect: str = "nccl", layout: ChunkLayout | None = None, native: bool = True
) -> CheckReport:
    """Check an XML text; ``native=False`` runs only the pure-Python reference (the compiled fast path, when
    built, gives the same verdict: tests/backends/test_msccl_native.py)."""
    return _check_algo_text(text, src, dialect, layout, native=native)


def _claimed_dtypes(program: Program, opts: Options) -> tuple[str, ...]:
    """The requested element types whose packed call the executors select the file for (see
    :func:`a2acc.ir.quantize.selecting_dtypes`); refuses a unit that serves none of them."""
    wanted = opts.dtype_list()
    got = selecting_dtypes(program.unit_bytes, program.nranks, wanted)
    if not got:
        need = selection_align(program.nranks, wanted[:1])
        raise LoweringError(
            f"no element type of {', '.join(wanted)} would select the XML for the packed call: chunks of "
            f"{program.unit_bytes} B are not a multiple of ngpus x the element size (e.g. {need} B for "
            f"{wanted[0]}), so count % nchunksperloop != 0 and the executor would run its own all-to-all on the "
            "packed buffer; plan with a unit that is a multiple of that (compile chooses one), or --opt dtypes="
        )
    return got


class MscclXmlTarget:
    name = "msccl-xml"
    summary = "MSCCL XML for msccl-executor-nccl and RCCL's MSCCL"
    Options = Options
    output_kind = "dir"

    def max_chunks(self, options: Any) -> int | None:
        return MAX_OFFSET  # int16 offsets in the executors' device structs

    def max_peers(self, options: Any) -> int | None:
        """Peers a rank may exchange data with: RCCL runs at most 64 thread blocks per GPU and needs one per
        peer at least (plus one), so a plan past 63 peers has no RCCL layout; msccl-executor-nccl's limits are
        on channels and ids, which the layouts spread (None)."""
        opts: Options = options if isinstance(options, Options) else Options()
        return MAX_TBS_RCCL - 1 if opts.dialect == "rccl" else None

    def unit_align(self, options: Any, nranks: int) -> int:
        opts: Options = options if isinstance(options, Options) else Options()
        return selection_align(nranks, opts.dtype_list())

    def lower(self, program: Program, options: Any, *, name: str | None = None) -> Lowered:
        opts: Options = options if isinstance(options, Options) else Options()
        if int(program.counts.sum()) == 0:
            raise InputError(
                "",
                "traffic",
                "all zero",
                "an empty all-to-all moves nothing, so there is no XML to write (a2acc plan handles it)",
            )
        lay = program.layout
        c = lay.buffer_chunks
        buffer_bytes = c * program.unit_bytes
        dtypes = _claimed_dtypes(program, opts)
        step = c * min(DTYPE_BYTES[d] for d in dtypes)  # the next size a selection rule would accept
        lo, hi = size_window(opts.bytes_range(), opts.size_range, buffer_bytes, step)
        if name is None:
            name = default_name(program, self.name, opts)
        xml_name = f"{opts.priority:02d}-{name}-{opts.dialect}.xml"
        lopts = LowerOptions(
            name=name,
            dialect=opts.dialect,
            proto=choose_proto(buffer_bytes) if opts.proto == "auto" else opts.proto,
            instances=opts.instances,
            tb_layout=opts.tb_layout,
            min_bytes=lo,
            max_bytes=hi,
        )
        text, model, (nch, tbs, steps) = _lower_text(program, lopts, xml_name)
        limit = MAX_CHANNELS_RCCL if opts.dialect == "rccl" else MAX_CHANNELS_NCCL
        if nch > limit:  # the user's instances multiplied the plan's channels past the executor's limit
            per = max(nch // max(opts.instances, 1), 1)
            raise InputError(
                "--opt",
                "instances",
                opts.instances,
                f"at most {max(limit // per, 1)} here: the plan uses {per} channel(s) per instance and "
                f"{opts.dialect} allows {limit} channels",
            )
        man = manifest_for(
            program.counts,
            program.unit_bytes,
            program.traffic,
            target=self.name,
            file=xml_name,
            algo_name=name,
            buffer_chunks=c,
            call=CALL,
            options={"dialect": opts.dialect, "dtypes": opts.dtypes},
            dtypes=dtypes,
            selection=SELECTION,
        )
        summary = (
            f"{program.nranks} GPUs, C={c}, proto {lopts.proto}, {nch} channels, "
            f"max {tbs} tbs/GPU, max {steps} steps/tb, minBytes={lo} maxBytes={hi}"
        )
        usage = (
            "MSCCL_ALGO_DIR={output} NCCL_MSCCL_ENABLE=1 (msccl-executor-nccl), or RCCL_MSCCL_ENABLE=1 "
            "RCCL_MSCCL_FORCE_ENABLE=1 (RCCL), set before the first communicator is created; with the JIT also "
            "A2ACC_EXECUTOR=msccl"
        )
        return Lowered(self.name, {xml_name: text}, man, summary, model, opts, usage)

    def check(self, lowered: Lowered) -> CheckReport:
        opts: Options = lowered.options if isinstance(lowered.options, Options) else Options()
        ((xml_name, text),) = lowered.files.items()
        return _check_algo_text(
            text, xml_name, opts.dialect, lowered.manifest.chunk_layout, model=lowered.model
        )

    def emit(
        self, lowered: Lowered, output: Path, *, manifest_path: Path | None = None, force: bool = False
    ) -> list[Path]:
        """Write the XML into ``output`` (an MSCCL_ALGO_DIR) and the manifest beside it.

        The directory may hold only files a2acc wrote (each named by one of its manifests): a previous
        ``compile`` into the same directory is replaced as a set (new XML, then the manifest, then the old XML
        it described), an ``export`` adds files. Files a2acc did not write are never touched: without ``force``
        their presence is an error (the executor would load them too); a non-XML file is an error always (the
        executor parses every file there and would fail to initialise)."""
        out = Path(output)
        if out.is_symlink():  # the set is switched by renaming the directory, which would replace the link
            raise InputError(
                str(out), "-o", str(out), "a directory, not a symbolic link: give the directory it points to"
            )
        if out.exists() and not out.is_dir():
            raise InputError(
                str(out), "-o", str(out), "exists and is not a directory (msccl-xml writes an MSCCL_ALGO_DIR)"
            )
        if out.name in ("", ".", ".."):  # renamed aside and back as a set: it needs a name of its own
            raise InputError(
                str(out),
                "-o",
                str(out),
                "a directory named by its own path, such as ../algos (not '.' or '..')",
            )
        dir_manifest = manifest_path is None
        man_path = dir_manifest_path(out) if manifest_path is None else manifest_path
        owned = owned_files(out)
        entries = list(out.iterdir()) if out.is_dir() else []
        present = [p for p in entries if p.is_file() and not p.is_symlink()]
        foreign = [p.name for p in present if p.name not in owned]
        odd = sorted(p.name for p in entries if p not in present)  # directories, links, FIFOs: never ours
        _refuse_foreign(out, foreign, odd, man_path, force)
        clash = sorted(name for name in lowered.files if name in foreign)
        if clash:  # --force writes beside such files, never over them
            raise InputError(
                str(out / clash[0]),
                "-o",
                clash[0],
                "a file a2acc did not write has the name of one it would write (--force leaves files it did not "
                "write in place): move it, or choose another directory",
            )
        if dir_manifest and not foreign:  # the directory and its manifest replaced as one set
            described = {p.name for p in present if p.name in owned and find_manifest(p) == man_path}
            return publish_dir(
                out, lowered.files, man_path, lowered.manifest.to_json(), owned - described, owned
            )
        # beside files a2acc did not write (--force), or one more file of an export: the manifest first, so
        # that an interrupt never leaves a file of ours that no manifest names
        stale = []
        if dir_manifest and man_path.exists():  # the previous compile's XML, proven ours before the switch
            stale = [p for p in present if p.name in owned and find_manifest(p) == man_path]
        paths = _write_beside(out, lowered, man_path)
        for p in stale:
            if p.name not in lowered.files:
                p.unlink()
        return paths

    def detect(self, head: str) -> bool:
        s = head.lstrip()
        if s.startswith("<?xml"):
            s = s[s.find("?>") + 2 :].lstrip()
        while s.startswith("<!--"):
            s = s[s.find("-->") + 3 :].lstrip()
        return s.startswith("<algo")

    def check_text(self, text: str, source: str, manifest: Manifest | None, options: Any) -> CheckReport:
        opts: Options = options if isinstance(options, Options) else Options()
        if manifest is None:
            return _check_algo_text(text, source, opts.dialect, None)
        attrs = algo_attrs(text)
        other = _layout_errors(attrs, source, manifest)
        if other:
            # another layout's manifest: interpreting the file against it would report index errors, not this;
            # what the strict reader finds is said with it
            return CheckReport(False, (*read_xml(text, source).errors, *other))
        rep = _check_algo_text(text, source, opts.dialect, manifest.chunk_layout)
        wrong = _selection_errors(attrs, source, manifest)
        return replace(rep, ok=False, errors=(*rep.errors, *wrong)) if wrong else rep


TARGET = MscclXmlTarget()


def _layout_errors(attrs: dict[str, str], src: str, manifest: Manifest) -> list[str]:
    """Where the ``<algo>`` tag (as the executor reads it: :func:`algo_attrs`) describes another layout than
    the manifest's: its GPU count or chunks per rank."""
    out: list[str] = []
    if attrs.get("ngpus") != str(manifest.ngpus):
        out.append(f'{src}: ngpus="{attrs.get("ngpus")}": the manifest describes {manifest.ngpus} GPUs')
    if attrs.get("nchunksperloop") != str(manifest.buffer_chunks):
        out.append(
            f'{src}: nchunksperloop="{attrs.get("nchunksperloop")}": the manifest\'s layout has '
            f"{manifest.buffer_chunks} chunks per rank (a manifest of another file?)"
        )
    return out


def _selection_errors(attrs: dict[str, str], src: str, manifest: Manifest) -> list[str]:
    """What else keeps the executor from selecting the file for the manifest's packed call (an all-to-all of
    ``buffer_bytes`` per rank: :func:`a2acc.backends.msccl_xml.reader.covers`)."""
    out: list[str] = []
    if attrs.get("coll") != "alltoall":
        out.append(f'{src}: coll="{attrs.get("coll")}": the manifest describes an alltoall')
    if not covers(attrs, manifest.buffer_bytes):
        out.append(
            f"{src}: minBytes={attrs.get('minBytes')} maxBytes={attrs.get('maxBytes')} exclude the packed call's "
            f"{manifest.buffer_bytes} bytes per rank: the executor would never select this file for it"
        )
    return out


def algo_of(lowered: Lowered) -> Algo:
    """The lowered :class:`Algo` (read back from the text when the compiled lowering wrote it)."""
    m = lowered.model
    a: Algo = m.algo() if isinstance(m, _LazyAlgo) else m
    return a


def _lower_text(
    program: Program, lopts: LowerOptions, xml_name: str
) -> tuple[str, Any, tuple[int, int, int]]:
    """The XML text, its model and (channels, most thread blocks, most steps). The compiled lowering gives the
    reference's exact text without its per-step objects (the model is then read back from the text on first
    use); the reference runs when it is absent or undecided."""
    fast = lower_text(program, lopts)
    if fast is not None:
        return fast.text, _LazyAlgo(fast.text, xml_name), (fast.nchannels, fast.max_tbs, fast.max_steps)
    with _gc_paused():
        algo = lower(program, lopts)
    c = program.layout.buffer_chunks
    if algo.nchunksperloop != c:
        raise InternalError(f"MSCCL lowering used C={algo.nchunksperloop}, the layout needs {c}")
    tbs = max(len(g.tbs) for g in algo.gpus)
    steps = max((len(t.steps) for g in algo.gpus for t in g.tbs), default=0)
    return to_xml(algo), algo, (algo.nchannels, tbs, steps)


def _refuse_foreign(out: Path, foreign: list[str], odd: list[str], man_path: Path, force: bool) -> None:
    """Files a2acc did not write in an MSCCL_ALGO_DIR: a non-XML one always refused, XML ones without
    ``force``; an entry that is not a regular file (a directory, a symbolic link) always refused (a2acc would
    have to move it aside with the directory); a manifest path holding something else without ``force``."""
    if odd:
        raise InputError(
            str(out),
            "-o",
            odd[0],
            "the directory holds an entry that is not a regular file (a directory or a link): an MSCCL_ALGO_DIR "
            "holds XML files only; use a new or empty directory",
        )
    for name in foreign:
        if not name.endswith(".xml"):
            raise InputError(
                str(out),
                "-o",
                name,
                "the directory holds a non-XML file: the executor parses every file there",
            )
    if foreign and not force:
        raise InputError(
            str(out),
            "-o",
            f"{len(foreign)} file(s) a2acc did not write ({', '.join(sorted(foreign)[:3])})",
            "use a new or empty directory, or --force to write beside them (the executor loads them all)",
        )
    if man_path.exists() and manifest_file(man_path) is None and not force:
        raise InputError(
            str(man_path),
            "manifest",
            man_path.name,
            "exists and is not an a2acc manifest; --force to replace it",
        )


def _write_beside(out: Path, lowered: Lowered, man_path: Path) -> list[Path]:
    """The manifest, then the files, each atomically; a failed write names the -o path."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(man_path, lowered.manifest.to_json())
        paths = []
        for fname, text in lowered.files.items():
            atomic_write_text(out / fname, text)
            paths.append(out / fname)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(out)) from exc
    return [*paths, man_path]
