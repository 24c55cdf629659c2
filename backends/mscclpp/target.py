"""The MSCCL++ targets: ``mscclpp-json`` (an execution plan the ``mscclpp`` Executor loads) and ``mscclpp-dsl``
(the same plan as a program against the upstream ``mscclpp.language`` DSL). One lowering feeds both.

Passes, each its own module: :mod:`.lower` (Program -> :class:`~.model.Plan`: lanes, thread blocks, routes of
dependencies, ready handshakes and acknowledgements, nops, executor limits) -> :mod:`.emit_json` or
:mod:`.emit_dsl` (text) -> :mod:`.reader` or :mod:`.read_dsl` (the exact text read back strictly) ->
:mod:`.interp` (load checks, then two back-to-back launches: deadlock, races, cross-launch hazards, the
manifest's all-to-all-v postcondition).

Output: ``-o plan.json`` (or ``program.py``) plus ``plan.json.manifest.json`` beside it, the shared manifest
(:mod:`a2acc.ir.layout`). ``-o DIR`` with an existing directory (and ``a2acc cache export``) writes
``DIR/<name>.json`` with the manifest in ``DIR.manifests/``: a flat directory of plans only, the layout
MSCCL++ v0.8's ``MSCCLPP_EXECUTION_PLAN_DIR`` loaded.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from a2acc.backends.mscclpp.emit_dsl import HEADER, to_dsl
from a2acc.backends.mscclpp.emit_json import to_json
from a2acc.backends.mscclpp.interp import check_plan
from a2acc.backends.mscclpp.lower import LowerOptions, LowerStats, lower
from a2acc.backends.mscclpp.model import Plan, flat_ops
from a2acc.backends.mscclpp.read_dsl import read_dsl
from a2acc.backends.mscclpp.reader import read_plan
from a2acc.backends.target import CheckReport, Lowered, default_name, size_window
from a2acc.errors import InputError, LoweringError
from a2acc.fileio import atomic_write_text, loads_json
from a2acc.ir.layout import Manifest, export_manifest_path, manifest_file, manifest_for, manifest_from_json
from a2acc.ir.program import Program
from a2acc.model.units import parse_size

# thread blocks per rank that stay co-resident by default: the SMs of an A100 (108; H100 has 132, V100 80) and
# the CUs of one MI250X GCD (110; MI300X has 304). All thread blocks of a plan spin on each other.
DEFAULT_MAX_TBS = {"nvidia": 108, "amd": 110}
LL_LIMIT = 512 * 1024  # protocol=auto: LL below this many bytes per rank (latency-bound), on one server

CALL = (
    "mscclpp.Executor(comm).execute(rank, send_ptr, recv_ptr, B, B, mscclpp.DataType.uint32, "
    "mscclpp.ExecutionPlan(PLAN, rank), stream) with send and receive buffers of B = buffer_chunks x chunk_bytes "
    "bytes on every rank (the plan accepts exactly B: min_message_size = max_message_size = B by default)"
)
CALL_DSL = (
    "python3 PROGRAM > plan.json (mscclpp.language importable), then the mscclpp-json call with plan.json"
)


@dataclass(frozen=True)
class Options:
    target: Literal["nvidia", "amd"] = field(
        default="nvidia",
        metadata={
            "help": "GPU vendor: memory channels inside a server, port channels across (never NVLS on amd)"
        },
    )
    protocol: Literal["auto", "Simple", "LL"] = field(
        default="auto",
        metadata={
            "help": "auto: LL below 512 KiB per rank when every transfer stays in one server, else Simple"
        },
    )
    tb_layout: Literal["auto", "split", "combined"] = field(
        default="auto",
        metadata={
            "help": "split: a sender and a receiver thread block per lane; combined: one per peer and lane"
        },
    )
    output_writes: Literal["scratch", "direct"] = field(
        default="scratch",
        metadata={
            "help": "scratch: stage remote writes in the receiver's scratch (any buffers); direct: into the "
            "peer's output (buffers at equal offsets in their allocations on every rank)"
        },
    )
    deps: Literal["data", "all"] = field(
        default="data",
        metadata={
            "help": "data: order ops that share bytes; all: every Program dependency with a shared rank"
        },
    )
    max_threadblocks: int = field(
        default=0, metadata={"help": "thread blocks per rank at most (0: 108 on nvidia, 110 on amd)"}
    )
    size_range: str = field(
        default="",
        metadata={"help": "MIN:MAX message bytes the plan accepts (default: exactly C x chunk bytes)"},
    )
    launches: int = field(default=2, metadata={"help": "back-to-back launches the check interprets (>= 2)"})

    def check(self) -> None:
        if self.max_threadblocks < 0:
            raise InputError(
                "--opt", "max_threadblocks", self.max_threadblocks, "must be >= 0 (0: by target)"
            )
        if not 2 <= self.launches <= 8:
            raise InputError(
                "--opt", "launches", self.launches, "must be in 2..8 (cross-launch hazards need two)"
            )
        self.bytes_range()

    def bytes_range(self) -> tuple[int, int] | None:
        if not self.size_range:
            return None
        parts = self.size_range.split(":")
        if len(parts) != 2:
            raise InputError("--opt", "size_range", self.size_range, "use MIN:MAX (bytes, K/M/G allowed)")
        lo, hi = parse_size(parts[0], field="size_range"), parse_size(parts[1], field="size_range")
        if lo > hi:
            raise InputError(
                "--opt", "size_range", self.size_range, "MIN must be <= MAX (the plan would never load)"
            )
        return lo, hi

    def tbs(self) -> int:
        return self.max_threadblocks or DEFAULT_MAX_TBS[self.target]


TargetOptions = Options


@dataclass(frozen=True)
class MscclppModel:
    """What :attr:`Lowered.model` holds: the plan and the lowering's statistics."""

    plan: Plan
    stats: LowerStats


def _opts(options: Any) -> Options:
    return options if isinstance(options, Options) else Options()


def _summary(plan: Plan, stats: LowerStats | None = None) -> str:
    tbs = max(len(g.threadblocks) for g in plan.gpus)
    ops = max((flat_ops(t.ops) for g in plan.gpus for t in g.threadblocks), default=0)
    chans = sum(len(g.peers("memory")) + len(g.peers("port")) for g in plan.gpus) // 2
    s = (
        f"{plan.ngpus} GPUs, C={plan.gpus[0].input_chunks}, {plan.protocol}, max {tbs} thread blocks/GPU, "
        f"max {ops} ops/thread block, {chans} channel pairs"
    )
    if stats is not None and stats.ordering_deps:
        s += f", {stats.ordering_deps} ordering-only dependencies left to the key order"
    return s


def _opts_of_manifest(manifest: Manifest | None, fallback: Options) -> Options:
    """The options a file was lowered with (its manifest records them), for the check."""
    if manifest is None:
        return fallback
    rec = dict(manifest.options)
    tgt = rec.get("target", fallback.target)
    return dataclasses.replace(fallback, target=tgt if tgt in ("nvidia", "amd") else fallback.target)  # type: ignore[arg-type]


def check_plan_obj(
    plan: Plan, src: str, manifest: Manifest | None, opts: Options, read_errors: list[str], notes: list[str]
) -> CheckReport:
    layout = manifest.chunk_layout if manifest is not None else None
    chunk = manifest.chunk_bytes if manifest is not None else None
    if manifest is not None and plan.ngpus != manifest.ngpus:
        return CheckReport(
            False, (*read_errors, f"{src}: {plan.ngpus} GPUs but the manifest has {manifest.ngpus} ranks")
        )
    res = check_plan(
        plan,
        layout=layout,
        chunk_bytes=chunk,
        target=opts.target,
        launches=opts.launches,
        execute=not read_errors,
    )
    errors = [*read_errors, *(f"{src}: {e}" for e in res.errors)]
    summ = f"{plan.collective}, " + _summary(plan) + (", all-to-all-v manifest" if layout is not None else "")
    summ += f", {res.launches} launches interpreted" if res.launches else ""
    return CheckReport(not errors, tuple(errors), tuple(notes + res.notes), summ, plan)


def _beside(source: str) -> Manifest | None:
    """``FILE.manifest.json`` beside ``FILE`` when it is a2acc's manifest naming it (single-file outputs)."""
    p = Path(source)
    cand = p.parent / f"{p.name}.manifest.json"
    try:
        if cand.is_file() and manifest_file(cand) == p.name:
            return manifest_from_json(cand.read_text(encoding="utf-8"), str(cand))
    except OSError:
        return None
    return None


def is_plan_json(head: str) -> bool:
    """Does a file starting with ``head`` look like an MSCCL++ execution plan (either schema)?"""
    s = head.lstrip()
    if not s.startswith("{"):
        return False
    try:
        doc = loads_json(head)
    except json.JSONDecodeError:  # only the head of a large file: look for the keys instead
        return all(f'"{k}"' in s for k in ("collective", "protocol", "gpus"))
    return isinstance(doc, dict) and {"name", "collective", "protocol", "gpus"} <= set(doc)


class _MscclppTarget:
    Options = Options
    output_kind = "file"

    def __init__(self, name: str, summary: str, kind: str) -> None:
        self.name = name
        self.summary = summary
        self.kind = kind  # "json" | "dsl"

    def max_chunks(self, options: Any) -> int | None:
        return None  # offsets are uint32 bytes: checked against the unit by the lowering

    # ------------------------------------------------------------------ lower
    def lower(self, program: Program, options: Any, *, name: str | None = None) -> Lowered:
        opts = _opts(options)
        opts.check()
        lay = program.layout
        c = lay.buffer_chunks
        buffer_bytes = c * program.unit_bytes
        lo, hi = size_window(opts.bytes_range(), opts.size_range, buffer_bytes)
        if name is None:
            name = default_name(program)
        one_server = program.machine is not None and len(set(program.machine.node)) == 1
        proto = opts.protocol
        if proto == "auto":
            proto = "LL" if one_server and buffer_bytes < LL_LIMIT else "Simple"
        layouts = [opts.tb_layout] if opts.tb_layout != "auto" else ["split", "combined"]
        last: LoweringError | None = None
        for tl in layouts:
            lo_opts = LowerOptions(
                name=name,
                target=opts.target,
                protocol=proto,
                tb_layout=tl,
                output_writes=opts.output_writes,
                deps=opts.deps,
                max_threadblocks=opts.tbs(),
                min_bytes=lo,
                max_bytes=hi,
            )
            try:
                plan, stats = lower(program, lo_opts)
                break
            except LoweringError as exc:
                last = exc
        else:
            assert last is not None
            raise last
        fname = f"{name}.json" if self.kind == "json" else f"{name}.py"
        recorded = {
            "target": opts.target,
            "protocol": proto,
            "tb_layout": tl,
            "output_writes": opts.output_writes,
            "deps": opts.deps,
        }
        man = manifest_for(
            program.counts,
            program.unit_bytes,
            program.traffic,
            target=self.name,
            file=fname,
            algo_name=name,
            buffer_chunks=c,
            call=CALL if self.kind == "json" else CALL_DSL,
            options=recorded,
        )
        if self.kind == "json":
            text = to_json(plan)
            usage = (
                "mscclpp.ExecutionPlan('{output}', rank) with mscclpp.Executor (or A2ACC_EXECUTOR=mscclpp)"
            )
        else:
            text = to_dsl(plan)
            usage = "python3 {output} > plan.json (needs mscclpp.language), then a2acc verify plan.json"
        summary = _summary(plan, stats) + f", tb_layout {tl}"
        return Lowered(self.name, {fname: text}, man, summary, MscclppModel(plan, stats), opts, usage)

    # ------------------------------------------------------------------ check
    def check(self, lowered: Lowered) -> CheckReport:
        opts = _opts_of_manifest(lowered.manifest, _opts(lowered.options))
        ((fname, text),) = lowered.files.items()
        return self._check(text, fname, lowered.manifest, opts)

    def _check(self, text: str, src: str, manifest: Manifest | None, opts: TargetOptions) -> CheckReport:
        if self.kind == "dsl":
            dr = read_dsl(text, src)
            if dr.plan is None:
                return CheckReport(False, tuple(dr.errors), tuple(dr.notes))
            return check_plan_obj(dr.plan, src, manifest, opts, dr.errors, dr.notes)
        rr = read_plan(text, src)
        if rr.plan is None or not rr.plan.gpus:
            return CheckReport(False, tuple(rr.errors), tuple(rr.notes))
        return check_plan_obj(rr.plan, src, manifest, opts, rr.errors, rr.notes)

    # ------------------------------------------------------------------ emit
    def emit(
        self, lowered: Lowered, output: Path, *, manifest_path: Path | None = None, force: bool = False
    ) -> list[Path]:
        """Write the file atomically, then its manifest (``FILE.manifest.json`` beside it, or
        ``manifest_path``). Into an existing directory (or an ``a2acc cache export`` directory) the file keeps
        its own name. Refuses to replace a file a2acc did not write (recognised by content) unless ``force``."""
        out = Path(output)
        ((fname, text),) = lowered.files.items()
        into_dir = out.is_dir() or (
            manifest_path is not None and manifest_path == export_manifest_path(out, fname)
        )
        if into_dir:
            target_file = out / fname
            man_path = manifest_path if manifest_path is not None else export_manifest_path(out, fname)
            if out.is_dir():
                foreign = [p.name for p in out.iterdir() if p.is_file() and not self._ours(p)]
                if foreign and not force:
                    raise InputError(
                        str(out),
                        "-o",
                        f"{len(foreign)} file(s) that are not a2acc MSCCL++ plans ({', '.join(sorted(foreign)[:3])})",
                        "a plan directory holds plans only (every file there is parsed as a plan); use a new or "
                        "empty directory, a file name, or --force",
                    )
        else:
            target_file = out
            man_path = (
                manifest_path if manifest_path is not None else out.parent / f"{out.name}.manifest.json"
            )
        if target_file.exists() and not force and not self._ours(target_file):
            raise InputError(
                str(target_file),
                "-o",
                target_file.name,
                "exists and is not a file a2acc wrote; --force to replace it",
            )
        if man_path.exists() and manifest_file(man_path) is None and not force:
            raise InputError(
                str(man_path), "manifest", man_path.name, "exists and is not an a2acc manifest; --force"
            )
        man = dataclasses.replace(lowered.manifest, file=target_file.name)
        atomic_write_text(target_file, text)
        atomic_write_text(man_path, man.to_json())
        return [target_file, man_path]

    def _ours(self, path: Path) -> bool:
        """Did a2acc write this file? DSL: our header line; JSON: a plan named a2acc* or named by a manifest."""
        try:
            with path.open(encoding="utf-8") as fh:
                head = fh.read(4096)
        except (OSError, UnicodeDecodeError):
            return False
        if head.startswith(HEADER):
            return True
        if not is_plan_json(head):
            return False
        try:
            name = loads_json(path.read_text(encoding="utf-8")).get("name", "")
        except (OSError, ValueError, AttributeError):
            return False
        return str(name).startswith("a2acc") or _beside(str(path)) is not None

    # ------------------------------------------------------------------ verify
    def detect(self, head: str) -> bool:
        """Only the JSON target claims files (``a2acc verify``); DSL source is checked through the API."""
        return self.kind == "json" and is_plan_json(head)

    def check_text(self, text: str, source: str, manifest: Manifest | None, options: Any) -> CheckReport:
        notes: list[str] = []
        if manifest is None:
            manifest = _beside(source)
            if manifest is not None:
                notes.append(f"manifest {source}.manifest.json found beside the file")
        rep = self._check(text, source, manifest, _opts_of_manifest(manifest, _opts(options)))
        if not notes:
            return rep
        return dataclasses.replace(rep, notes=(*notes, *rep.notes))


JSON_TARGET = _MscclppTarget(
    "mscclpp-json", "MSCCL++ JSON execution plan for mscclpp.Executor (--opt target=nvidia|amd)", "json"
)
DSL_TARGET = _MscclppTarget(
    "mscclpp-dsl", "MSCCL++ DSL program (mscclpp.language) from the same lowering as mscclpp-json", "dsl"
)
TARGETS = {t.name: t for t in (JSON_TARGET, DSL_TARGET)}
