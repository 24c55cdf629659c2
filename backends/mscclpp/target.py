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
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from a2acc.backends.mscclpp.check import check_dsl, check_json, summary_text
from a2acc.backends.mscclpp.emit_dsl import HEADER, to_dsl
from a2acc.backends.mscclpp.emit_json import to_json
from a2acc.backends.mscclpp.lower import LowerOptions, LowerStats, lower, lower_text
from a2acc.backends.mscclpp.model import Plan
from a2acc.backends.mscclpp.reader import read_plan
from a2acc.backends.target import CheckReport, Lowered, default_name, size_window
from a2acc.errors import InputError, InternalError, LoweringError
from a2acc.fileio import atomic_write_text, loads_json
from a2acc.ir.layout import Manifest, export_manifest_path, manifest_file, manifest_for, manifest_from_json
from a2acc.ir.program import Program
from a2acc.ir.quantize import DTYPE_BYTES
from a2acc.model.units import parse_size
from a2acc.options import bounded, check_ranges

if TYPE_CHECKING:
    from a2acc.model.topology import Topology

# thread blocks per rank that stay co-resident when neither the topology nor the options name the GPU: the
# smallest SM/CU count of the GPUs the target runs on, the SMs of an A100 (108; V100 80 is older than MSCCL++'s
# GPUs) and the CUs of one MI250X GCD (110). All thread blocks of a plan spin on each other.
DEFAULT_MAX_TBS = {"nvidia": 108, "amd": 110}
TBS_HINT = (
    "no GPU was named (the topology's gpu, --opt compute_units), so max_threadblocks defaults to the smallest "
    "SM/CU count the target runs on (108 on nvidia: an A100; 110 on amd: one MI250X GCD); for a GPU with more (an "
    "H100 has 132 SMs, an MI300X 304 CUs) give the topology 'gpu: {compute_units: N}' or pass --opt compute_units=N"
)
#: what every refusal for too many thread blocks says (the lowering's, the compiled lowering's and the skip of a
#: layout by its peers alone)
CROWDED = "thread blocks but max_threadblocks is"
LL_LIMIT = 512 * 1024  # protocol=auto: LL below this many bytes per rank (latency-bound), on one server

CALL = (
    "mscclpp.Executor(comm).execute(rank, send_ptr, recv_ptr, B, B, mscclpp.DataType.uint32, "
    "mscclpp.ExecutionPlan(PLAN, rank), stream) with send and receive buffers of B = buffer_chunks x chunk_bytes "
    "bytes on every rank (the plan accepts exactly B: min_message_size = max_message_size = B by default)"
)
SELECTION = (
    "the plan is used for message sizes in [min_message_size, max_message_size] that are multiples of "
    "C x buffer_alignment; the packed call's size is the only one there"
)
CALL_DSL = (
    "python3 PROGRAM > plan.json (mscclpp.language importable), then the mscclpp-json call with plan.json"
)


#: thread blocks per rank a plan may ask for at most (a GPU runs a few hundred resident ones; the defaults are 108
#: and 110)
MAX_THREADBLOCKS = 1024


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
    tb_layout: Literal["auto", "split", "combined", "packed"] = field(
        default="auto",
        metadata={
            "help": "split: a sender and a receiver thread block per lane; combined: one per peer and lane; "
            "packed: several peers per thread block (many peers); auto: the first of these that fits"
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
    compute_units: int = bounded(
        0,
        0,
        MAX_THREADBLOCKS,
        "SMs (nvidia) or CUs (amd) of the GPU the plan runs on, the default of max_threadblocks (0: the "
        "topology's gpu.compute_units, else 108 on nvidia, 110 on amd)",
        "one co-resident thread block per SM/CU",
    )
    max_threadblocks: int = bounded(
        0,
        0,
        MAX_THREADBLOCKS,
        "thread blocks per rank at most (0: compute_units; all spin on each other, so all must be co-resident)",
        "0: the GPU's SMs/CUs",
    )
    size_range: str = field(
        default="",
        metadata={"help": "MIN:MAX message bytes the plan accepts (default: exactly C x chunk bytes)"},
    )
    launches: int = field(
        default=2, metadata={"help": "back-to-back launches the check interprets (>= 2)", "check_only": True}
    )

    def check(self) -> None:
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
        """The thread blocks a rank may have: max_threadblocks, else the GPU's compute units, else the vendor's
        smallest."""
        return self.max_threadblocks or self.compute_units or DEFAULT_MAX_TBS[self.target]

    def tbs_origin(self) -> str:
        """Where :meth:`tbs` comes from, for a refusal: nothing for the user's own max_threadblocks."""
        if self.max_threadblocks:
            return ""
        if self.compute_units:
            return f" (max_threadblocks: the GPU's {self.compute_units} SMs/CUs, one co-resident block each)"
        return f". {TBS_HINT}"


TargetOptions = Options


class MscclppModel:
    """What :attr:`Lowered.model` holds: the lowering's statistics and the plan (read from the JSON text on
    first use when the compiled lowering wrote the text without building it)."""

    def __init__(self, stats: LowerStats, text: str, plan: Plan | None = None) -> None:
        self.stats = stats
        self._text = text
        self._plan = plan

    @property
    def plan(self) -> Plan:
        if self._plan is None:
            rr = read_plan(self._text, "<lowered>")
            if rr.plan is None or rr.errors:  # the text was just written by a2acc: this is a bug
                raise InternalError(f"the lowered MSCCL++ plan does not read back: {rr.errors[:2]}")
            self._plan = rr.plan
        return self._plan


def _lower_some_layout(program: Program, base: LowerOptions, layout: str) -> tuple[str, MscclppModel, str]:
    """The plan's JSON text in the first layout that fits (``auto``: split, combined, packed; a layout whose
    thread blocks cannot fit, by a count of peers alone, is skipped without lowering). The compiled lowering
    when built, else the reference."""
    layouts = [layout] if layout != "auto" else ["split", "combined", "packed"]
    last: LoweringError | None = None
    for tl in layouts:
        if layout == "auto" and tl != "packed":
            least = _least_threadblocks(program, tl)
            if least > base.max_threadblocks:
                last = LoweringError(
                    f"a rank needs at least {least} {CROWDED} {base.max_threadblocks} in tb_layout={tl}"
                )
                continue
        opts = dataclasses.replace(base, tb_layout=tl)
        try:
            fast = lower_text(program, opts)
            if fast is not None:
                return fast.text, MscclppModel(fast.stats, fast.text), tl
            _reference_capacity(program)
            plan, stats = lower(program, opts)
            text = to_json(plan)
            return text, MscclppModel(stats, text, plan), tl
        except LoweringError as exc:
            last = exc
    if last is None:
        raise InternalError("no thread block layout was tried")
    raise last


MAX_REFERENCE_OPS = 200_000  # Program ops the pure-Python lowering takes on (about a minute and 2 GiB there)


def _reference_capacity(program: Program) -> None:
    """Refuse, before lowering, a Program past the pure-Python lowering's reach (the compiled one handles
    64 x 8 GPUs in seconds; it is absent or could not decide)."""
    nops = len(program.table.src_rank)
    if nops > MAX_REFERENCE_OPS:
        raise LoweringError(
            f"the Program has {nops} operations; the pure-Python MSCCL++ lowering takes at most {MAX_REFERENCE_OPS} "
            "(limit: about a minute and 2 GiB at that size), and the compiled lowering (a2acc._mscclpp_lower, "
            "built when a C compiler is present at install) is not available for it"
        )


def _least_threadblocks(program: Program, layout: str) -> int:
    """Thread blocks a rank needs at least in ``split`` (one per peer it sends to and one per peer it receives
    from) or ``combined`` (one per peer), plus one for its local copies."""
    t = program.table
    src, dst = np.asarray(t.src_rank), np.asarray(t.dst_rank)
    n = program.nranks
    remote = src != dst
    local = np.bincount(src[~remote], minlength=n) > 0
    pairs = np.unique(src[remote] * n + dst[remote])
    s, d = pairs // n, pairs % n
    if layout == "split":
        per = np.bincount(s, minlength=n) + np.bincount(d, minlength=n)
    else:
        und = np.unique(np.minimum(s, d) * n + np.maximum(s, d))
        per = np.bincount(und // n, minlength=n) + np.bincount(und % n, minlength=n)
    return int((per + local).max(initial=0))


def _opts(options: Any) -> Options:
    return options if isinstance(options, Options) else Options()


def _opts_of_manifest(manifest: Manifest | None, fallback: Options) -> Options:
    """The options a file was lowered with (its manifest records them), for the check."""
    if manifest is None:
        return fallback
    tgt = dict(manifest.options).get("target", fallback.target)
    if tgt == "amd":
        return dataclasses.replace(fallback, target="amd")
    if tgt == "nvidia":
        return dataclasses.replace(fallback, target="nvidia")
    return fallback


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

    def __init__(self, name: str, summary: str, kind: str, manifest_targets: tuple[str, ...] = ()) -> None:
        self.name = name
        self.summary = summary
        self.kind = kind  # "json" | "dsl"
        #: targets whose manifests describe this target's files: the DSL program prints the JSON plan of the
        #: same lowering, which a2acc verify checks with the DSL program's manifest
        self.manifest_targets = manifest_targets

    def max_chunks(self, options: Any) -> int | None:
        return None  # offsets are uint32 bytes: checked against the unit by the lowering

    def for_topology(self, options: Any, topology: Topology) -> TargetOptions:
        """The options with ``compute_units`` from the topology's GPU when they name none."""
        opts = _opts(options)
        if opts.compute_units or topology.gpu is None:
            return opts
        return dataclasses.replace(opts, compute_units=topology.gpu.compute_units)

    # ------------------------------------------------------------------ lower
    def lower(self, program: Program, options: Any, *, name: str | None = None) -> Lowered:
        opts = _opts(options)
        check_ranges(opts)  # (a library caller's Options never went through parse_options)
        opts.check()
        c = program.layout.buffer_chunks
        buffer_bytes = c * program.unit_bytes
        # the executor accepts any multiple of C x buffer_alignment (16 B) in [min, max]: only B carries the packing
        lo, hi = size_window(opts.bytes_range(), opts.size_range, buffer_bytes, c * 16)
        if name is None:
            name = default_name(program, "mscclpp", opts)  # the JSON and the DSL form: one plan, one name
        one_server = program.machine is not None and len(set(program.machine.node)) == 1
        proto = opts.protocol
        if proto == "auto":
            proto = "LL" if one_server and buffer_bytes < LL_LIMIT else "Simple"
        base = LowerOptions(
            name=name, target=opts.target, protocol=proto, output_writes=opts.output_writes, deps=opts.deps,
            max_threadblocks=opts.tbs(), min_bytes=lo, max_bytes=hi,
        )  # fmt: skip
        try:
            text, model, tl = _lower_some_layout(program, base, opts.tb_layout)
        except LoweringError as exc:
            if CROWDED not in str(exc):
                raise
            raise LoweringError(f"{exc}{opts.tbs_origin()}", follows_transfers=True) from exc
        fname = f"{name}.json" if self.kind == "json" else f"{name}.py"
        recorded = {"target": opts.target, "protocol": proto, "tb_layout": tl, "output_writes": opts.output_writes,
                    "deps": opts.deps}  # fmt: skip
        # the thread-block limit the file was lowered within, so that a2acc verify applies the same one
        recorded.update({k: str(v) for k in ("compute_units", "max_threadblocks") if (v := getattr(opts, k))})
        man = manifest_for(
            program.counts, program.unit_bytes, program.traffic, target=self.name, file=fname, algo_name=name,
            buffer_chunks=c, call=CALL if self.kind == "json" else CALL_DSL, options=recorded,
            dtypes=tuple(DTYPE_BYTES),  # the call passes byte sizes: every element type works alike
            selection=SELECTION,
        )  # fmt: skip
        if self.kind == "json":
            usage = (
                "mscclpp.ExecutionPlan('{output}', rank) with mscclpp.Executor (or A2ACC_EXECUTOR=mscclpp)"
            )
        else:
            text = to_dsl(model.plan)
            usage = (
                "python3 {output} > plan.json (needs mscclpp.language), then a2acc verify plan.json --manifest "
                "{output}.manifest.json"
            )
        st = model.stats
        summary = summary_text(
            program.nranks, c, proto, st.threadblocks, st.ops_per_tb, st.lanes, st.ordering_deps
        )
        return Lowered(self.name, {fname: text}, man, summary + f", tb_layout {tl}", model, opts, usage)

    # ------------------------------------------------------------------ check
    def check(self, lowered: Lowered) -> CheckReport:
        opts = _opts_of_manifest(lowered.manifest, _opts(lowered.options))
        ((fname, text),) = lowered.files.items()
        return self._check(text, fname, lowered.manifest, opts)

    def _check(self, text: str, src: str, manifest: Manifest | None, opts: TargetOptions) -> CheckReport:
        if self.kind == "dsl":
            return check_dsl(text, src, manifest, opts)
        return check_json(text, src, manifest, opts)

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
        """JSON: an execution plan (either schema, anyone's); DSL: a program a2acc wrote (its header line),
        which ``a2acc verify`` reads back as data, without running it."""
        return is_plan_json(head) if self.kind == "json" else head.startswith(HEADER)

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
    "mscclpp-json",
    "MSCCL++ JSON execution plan for mscclpp.Executor (--opt target=nvidia|amd)",
    "json",
    ("mscclpp-dsl",),
)
DSL_TARGET = _MscclppTarget(
    "mscclpp-dsl", "MSCCL++ DSL program (mscclpp.language) from the same lowering as mscclpp-json", "dsl"
)
TARGETS = {t.name: t for t in (JSON_TARGET, DSL_TARGET)}
