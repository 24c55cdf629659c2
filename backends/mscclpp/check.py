"""Checking an MSCCL++ plan text: the compiled core first, the pure-Python reference when it cannot decide.

The compiled core (``a2acc._mscclpp``, ``compiler/native/mscclpp.c``) parses exactly the JSON a2acc's emitter
writes and runs the reference's checks and execution; it only ever says "ok" (the reference would report no
error and no note) or "not decided here" with a reason, and then the reference (:mod:`.reader` or
:mod:`.read_dsl`, then :mod:`.interp`) runs and writes the messages. tests/backends/test_mscclpp_native.py
checks the core never accepts what the reference rejects.

Capacity limits are checked before any work, from the text alone: the reference keeps two dense clock
matrices over all thread blocks, proxies and hosts (:data:`~.interp.MAX_INTERP_AGENTS` of them at most), and the
DSL reader parses the program's source (:data:`MAX_DSL_LINES`); a plan past them is refused as a limit
(:class:`~a2acc.errors.LoweringError`, exit 2) naming the limit and the figure, never reported as a wrong plan.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from a2acc.backends.mscclpp.emit_json import to_json
from a2acc.backends.mscclpp.interp import MAX_INTERP_AGENTS, check_plan, crowded
from a2acc.backends.mscclpp.model import Plan, flat_ops
from a2acc.backends.mscclpp.read_dsl import read_dsl
from a2acc.backends.mscclpp.reader import read_plan
from a2acc.backends.target import CheckReport
from a2acc.errors import LoweringError
from a2acc.ir.layout import Manifest
from a2acc.native import mscclpp as _native

MAX_DSL_LINES = 400_000  # the DSL reader parses the source with ast: about 1 GiB and a minute at this size


def summary(plan: Plan, ordering_deps: int = 0) -> str:
    tbs = max(len(g.threadblocks) for g in plan.gpus)
    ops = max((flat_ops(t.ops) for g in plan.gpus for t in g.threadblocks), default=0)
    chans = sum(len(g.peers("memory")) + len(g.peers("port")) for g in plan.gpus) // 2
    return summary_text(plan.ngpus, plan.gpus[0].input_chunks, plan.protocol, tbs, ops, chans, ordering_deps)


def summary_text(n: int, c: int, proto: str, tbs: int, ops: int, chans: int, ordering_deps: int = 0) -> str:
    s = f"{n} GPUs, C={c}, {proto}, max {tbs} thread blocks/GPU, max {ops} ops/thread block, {chans} channel pairs"
    if ordering_deps:
        s += f", {ordering_deps} ordering-only dependencies left to the key order"
    return s


def check_plan_obj(
    plan: Plan, src: str, manifest: Manifest | None, opts: Any, read_errors: list[str], notes: list[str]
) -> CheckReport:
    """The reference check of a plan read from ``src`` (``read_errors``/``notes``: the reader's)."""
    layout = manifest.chunk_layout if manifest is not None else None
    chunk = manifest.chunk_bytes if manifest is not None else None
    if manifest is not None and plan.ngpus != manifest.ngpus:
        return CheckReport(
            False, (*read_errors, f"{src}: {plan.ngpus} GPUs but the manifest has {manifest.ngpus} ranks")
        )
    if manifest is not None and plan.collective != "alltoall":
        read_errors = [
            *read_errors,
            f'{src}: collective "{plan.collective}": the manifest describes an alltoall (the executor runs a '
            "plan only for the collective it names)",
        ]
    res = check_plan(
        plan,
        layout=layout,
        chunk_bytes=chunk,
        target=opts.target,
        launches=opts.launches,
        execute=not read_errors,
        max_threadblocks=opts.tbs(),
        threadblocks_note=opts.tbs_origin(),
    )
    errors = [*read_errors, *(f"{src}: {e}" for e in res.errors)]
    summ = f"{plan.collective}, " + summary(plan) + (", all-to-all-v manifest" if layout is not None else "")
    summ += f", {res.launches} launches interpreted" if res.launches else ""
    return CheckReport(not errors, tuple(errors), tuple(notes + res.notes), summ, plan)


def fast_check(text: str, src: str, manifest: Manifest | None, opts: Any) -> CheckReport | str:
    """The compiled core's verdict: an ok report, the refusal of a rank with more thread blocks than
    ``opts.tbs()`` (decided as soon as the text parses, before any execution), or why it leaves the text to the
    reference."""
    if _native is None:
        return "the compiled core a2acc._mscclpp is not built"
    if getattr(opts, "target", "nvidia") not in ("nvidia", "amd"):
        return "target"
    counts = None if manifest is None else np.ascontiguousarray(manifest.chunk_layout.counts, dtype=np.int64)
    chunk = 0 if manifest is None else manifest.chunk_bytes
    got = _native.check(text, counts, chunk, opts.launches, opts.tbs())
    if isinstance(got, str):
        return got
    if len(got) == 2:
        rank, tbs = got
        return CheckReport(False, (f"{src}: {crowded(rank, tbs, opts.tbs(), opts.tbs_origin())}",))
    n, c, proto, tbs, ops, chans, launches = got
    summ = "alltoall, " + summary_text(n, c, proto, tbs, ops, chans)
    summ += (", all-to-all-v manifest" if manifest is not None else "") + f", {launches} launches interpreted"
    return CheckReport(True, (), (), summ, None)


def check_json(text: str, src: str, manifest: Manifest | None, opts: Any) -> CheckReport:
    """Check a JSON plan: the compiled core, else the reference within its capacity."""
    fast = fast_check(text, src, manifest, opts)
    if isinstance(fast, CheckReport):
        return fast
    over = _over_threadblocks(text, src, opts)
    if over is not None:
        return over
    _capacity(text, fast)
    rr = read_plan(text, src)
    if rr.plan is None or not rr.plan.gpus:
        return CheckReport(False, tuple(rr.errors), tuple(rr.notes))
    return check_plan_obj(rr.plan, src, manifest, opts, rr.errors, rr.notes)


def check_dsl(text: str, src: str, manifest: Manifest | None, opts: Any) -> CheckReport:
    """Check a DSL program: read it back (as the DSL assembles it), then check that plan like JSON."""
    lines = text.count("\n")
    if lines > MAX_DSL_LINES:
        raise LoweringError(
            f"{src}: {lines} lines of DSL source; the DSL reader handles at most {MAX_DSL_LINES} (limit: it parses "
            "the source with Python's ast, about 1 GiB and a minute at that size): use the JSON form "
            "(--backend mscclpp-json), which the same lowering writes"
        )
    dr = read_dsl(text, src)
    if dr.plan is None:
        return CheckReport(False, tuple(dr.errors), tuple(dr.notes))
    if not dr.errors and not dr.notes:
        fast = fast_check(to_json(dr.plan), src, manifest, opts)
        if isinstance(fast, CheckReport):
            return dataclasses.replace(fast, model=dr.plan)
    return check_plan_obj(dr.plan, src, manifest, opts, dr.errors, dr.notes)


def _counts(text: str) -> tuple[int, int]:
    """(thread blocks, GPUs) of a JSON plan text as a2acc's emitter and ``json.dumps`` write it, counted
    without reading it (one ``"ops"`` list per thread block, one ``"input_chunks"`` per GPU)."""
    return text.count('"ops": ['), text.count('"input_chunks"')


def _over_threadblocks(text: str, src: str, opts: Any) -> CheckReport | None:
    """A plan whose thread blocks outnumber ``GPUs x opts.tbs()`` has a rank over the limit, whichever it is:
    refused before the reference reads it (a plan past its capacity would otherwise be refused as a limit)."""
    tbs, gpus = _counts(text)
    if gpus and tbs > gpus * opts.tbs():
        return CheckReport(
            False,
            (
                f"{src}: {tbs} thread blocks on {gpus} GPUs: some rank has more than max_threadblocks="
                f"{opts.tbs()}, but every thread block spins on the others, so all must be co-resident (one "
                f"per SM/CU){opts.tbs_origin()}",
            ),
        )
    return None


def _capacity(text: str, why: str) -> None:
    """Refuse, before reading it, a JSON plan past the reference's clock matrices (the compiled core, when
    built, handles far larger ones: ``why`` says why it did not decide)."""
    tbs, gpus = _counts(text)
    agents = tbs + 2 * gpus
    if agents > MAX_INTERP_AGENTS:
        raise LoweringError(
            f"the plan has {agents} thread blocks, proxies and hosts; the pure-Python check holds at most "
            f"{MAX_INTERP_AGENTS} (limit: two dense clock matrices of that side), and the compiled check did not "
            f"decide ({why})"
        )
